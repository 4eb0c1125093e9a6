"""The cpu executor's tall products by fixed blocks of rows, ``X W`` and ``Xᵀ Y``: equal to
numpy's product, the same bits on any number of threads, errors raised in the caller."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from threadpoolctl import threadpool_limits

from gblas_gnn.executors import CPUExecutor
from gblas_gnn.executors.cpu import _row_gemm
from gblas_gnn.executors.cpu._chunked_gemm import (
    ROWS,
    chunked_inner,
    chunked_matmul,
    matmul_vjp_blocks,
    shared_items,
)
from gblas_gnn.executors.cpu._dense_kernels import column_sums

pytestmark = pytest.mark.cpu_only


def _same_bits_on_any_thread_count(product):
    """``product(threads)`` under one BLAS thread gives the same bits on 1, 2, 3 and 8
    threads; returns it."""
    with threadpool_limits(limits=1, user_api="blas"):
        one = product(1)
        for threads in (2, 3, 8):
            np.testing.assert_array_equal(product(threads), one)
    return one


SIZES = st.sampled_from([0, 1, ROWS - 1, ROWS, ROWS + 1, 3 * ROWS + 17])


@settings(max_examples=50, deadline=None)
@given(kind=st.sampled_from(["X W", "Xᵀ Y"]), n=SIZES, a=st.integers(1, 9),
       b=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_blocks_on_any_thread_count_give_the_same_bits(kind, n, a, b, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, a)).astype(np.float32)
    if kind == "X W":
        W = rng.standard_normal((a, b)).astype(np.float32)
        one = _same_bits_on_any_thread_count(
            lambda threads: chunked_matmul(X, W, np.empty((n, b), np.float32), threads))
        want, tol = X.astype(np.float64) @ W, 1e-5
    else:
        Y = rng.standard_normal((n, b)).astype(np.float32)
        one = _same_bits_on_any_thread_count(lambda threads: chunked_inner(X, Y, threads))
        want, tol = X.astype(np.float64).T @ Y, 1e-3          # sums over up to 24 593 rows
    assert one.shape == want.shape and one.dtype == np.float32
    np.testing.assert_allclose(one, want, rtol=tol, atol=tol)


def test_an_error_in_a_helpers_rows_is_raised_in_the_caller():
    X = np.ones((3 * ROWS, 2))
    with pytest.raises(ValueError):
        chunked_matmul(X, np.ones((2, 2)), np.empty((3 * ROWS, 3)), 3)
    with pytest.raises(ValueError):              # Xᵀ Y with rows that do not match
        chunked_inner(X, np.ones((3 * ROWS - 1, 2)), 3)


def _on_one_thread_and_two(run):
    """``run()`` with numba at one thread, then at two (the thread count restored)."""
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = run()
        numba.set_num_threads(2)
        return one, run()
    finally:
        numba.set_num_threads(before)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="numba runs one thread here")
def test_the_executors_tall_products_are_the_same_on_one_thread_and_two(monkeypatch):
    from gblas_gnn.executors.cpu import _chunked_gemm

    calls = []
    real = _chunked_gemm.chunked_matmul
    monkeypatch.setattr(_chunked_gemm, "chunked_matmul",
                        lambda *a: calls.append(a[3]) or real(*a))
    rng = np.random.default_rng(3)
    X = rng.standard_normal((2 * ROWS + 5, 32)).astype(np.float32)
    W = rng.standard_normal((32, 16)).astype(np.float32)
    ex = CPUExecutor()
    one, two = _on_one_thread_and_two(lambda: ex.gemm(X, W))
    assert calls == [1, 2]
    np.testing.assert_array_equal(one, two)
    np.testing.assert_allclose(two, X @ W, rtol=1e-5, atol=1e-5)
    small = ex.gemm(X[:8], W)                           # below the size: one BLAS call
    assert calls == [1, 2] and np.allclose(small, X[:8] @ W, atol=1e-5)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="numba runs one thread here")
def test_the_executors_inner_products_are_the_same_on_one_thread_and_two():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((2 * ROWS + 5, 32)).astype(np.float32)
    Y = rng.standard_normal((2 * ROWS + 5, 16)).astype(np.float32)
    ex = CPUExecutor()
    one, two = _on_one_thread_and_two(lambda: ex.inner(X, Y))
    np.testing.assert_array_equal(one, two)
    np.testing.assert_allclose(two, X.astype(np.float64).T @ Y, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(ex.inner(X[:8], Y[:8]), X[:8].T @ Y[:8], atol=1e-5)  # one call


@pytest.mark.parametrize("n", [10, 3 * ROWS + 17])        # one product; blocks on threads
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [24, 32])               # BLAS's; the register kernel's
def test_linear_is_the_product_then_the_bias_then_the_rectifier(n, relu, dtype, width):
    # bitwise what a layer wrote before: gemm, then + b, then max(·, 0), in whole-array passes
    rng = np.random.default_rng(n)
    X = rng.standard_normal((n, 16)).astype(dtype)
    W = rng.standard_normal((16, width)).astype(dtype)
    b = rng.standard_normal(width).astype(dtype)
    ex = CPUExecutor()
    want = ex.gemm(X, W)
    want += b
    if relu:
        np.maximum(want, 0, out=want)
    got = ex.linear(X, W, b, relu=relu)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == dtype and (not relu or (got >= 0).all())
    np.testing.assert_array_equal(ex.linear(X, W), ex.gemm(X, W))
    # the executors' default (gemm, then numpy's passes) gives the same bits
    np.testing.assert_array_equal(super(CPUExecutor, ex).linear(X, W, b, relu=relu), want)


@pytest.mark.parametrize("n", [10, 3 * ROWS + 17])        # one product; blocks on threads
def test_linear_writes_a_block_of_rows_it_is_given(n):
    """``linear(..., out=)`` writes the same bits as without into a block of rows of a larger
    array (the rows around it untouched) and returns it, on the cpu executor's path and the
    executors' default; an ``out`` of another shape, dtype or layout is refused."""
    rng = np.random.default_rng(n)
    X = rng.standard_normal((n, 16)).astype(np.float32)
    W = rng.standard_normal((16, 24)).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    ex = CPUExecutor()
    want = ex.linear(X, W, b, relu=True)
    for linear in (ex.linear, super(CPUExecutor, ex).linear):
        big = np.full((n + 7, 24), 5.0, np.float32)
        got = linear(X, W, b, relu=True, out=big[3:3 + n])
        assert np.shares_memory(got, big)
        np.testing.assert_array_equal(big[3:3 + n], want)
        assert (big[:3] == 5).all() and (big[3 + n:] == 5).all()
    for bad in (np.empty((n, 23), np.float32), np.empty((n, 24), np.float64),
                np.empty((24, n), np.float32).T):
        with pytest.raises(ValueError, match="C-contiguous"):
            ex.linear(X, W, b, out=bad)


@pytest.mark.parametrize("n", [10, 3 * ROWS + 17])        # one product; blocks on threads
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [24, 32])               # BLAS's; the register kernel's
def test_gemm_add_sums_the_product_into_the_array_it_is_given(n, dtype, width):
    """``Y += X W`` in place (BLAS's beta = 1 on each block of rows), the same bits on any
    thread count, equal to the product and the sum in float64; an array BLAS cannot write
    in place (a strided view) takes the default's product and sum."""
    rng = np.random.default_rng(n)
    X = rng.standard_normal((n, 16)).astype(dtype)
    W = rng.standard_normal((16, width)).astype(dtype)
    Y0 = rng.standard_normal((n, width)).astype(dtype)
    ex = CPUExecutor()
    want = Y0.astype(np.float64) + X.astype(np.float64) @ W
    tol = 1e-4 if dtype == np.float32 else 1e-12
    before = numba.get_num_threads()
    try:
        outs = []
        for threads in (1, numba.config.NUMBA_NUM_THREADS):
            numba.set_num_threads(threads)
            Y = Y0.copy()
            assert ex.gemm_add(Y, X, W) is Y
            outs.append(Y)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[0], want, rtol=tol, atol=tol)
    wide = np.zeros((n, 2 * width), dtype)
    wide[:, ::2] = Y0
    view = wide[:, ::2]
    assert ex.gemm_add(view, X, W) is view
    np.testing.assert_allclose(wide[:, ::2], want, rtol=tol, atol=tol)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="numba runs one thread here")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_executors_products_through_the_kernels_are_the_same_on_one_thread_and_two(
        dtype, monkeypatch):
    """The tall product with a bias, the sum into an array, the inner product by blocks and
    the matmul's backward (``G Wᵀ`` and ``Xᵀ G`` at once), at widths the kernels take: the
    same bits on one thread and two, equal to float64's."""
    rng = np.random.default_rng(7)
    n, k, o = 2 * ROWS + 5, 32, 32
    X = rng.standard_normal((n, k)).astype(dtype)
    W = rng.standard_normal((k, o)).astype(dtype)
    b = rng.standard_normal(o).astype(dtype)
    G = rng.standard_normal((n, o)).astype(dtype)
    ex = CPUExecutor()
    tol = 2e-4 if dtype == np.float32 else 1e-11
    X64 = X.astype(np.float64)
    # taken as where OpenBLAS runs its AVX2 kernels (elsewhere every product is BLAS's)
    monkeypatch.setattr(_row_gemm, "openblas_kernels", lambda: frozenset({"haswell"}))
    taken = []
    for name in ("rows_product", "rows_inner"):           # the kernels do run
        real = getattr(_row_gemm, name)
        monkeypatch.setattr(_row_gemm, name,
                            lambda *a, real=real, name=name: taken.append(name) or real(*a))

    def products():
        Y = G.copy()
        ex.gemm_add(Y, X, W)
        dX, dW = ex.matmul_vjp(G, W, X)
        return ex.linear(X, W, b), Y, chunked_inner(X, G, numba.get_num_threads()), dX, dW

    one, two = _on_one_thread_and_two(products)
    assert {"rows_product", "rows_inner"} <= set(taken)
    for a, c in zip(one, two, strict=True):
        np.testing.assert_array_equal(a, c)
    linear, summed, inner, dX, dW = one
    np.testing.assert_allclose(linear, X64 @ W + b, rtol=tol, atol=tol)
    np.testing.assert_allclose(summed, G + X64 @ W, rtol=tol, atol=tol)
    np.testing.assert_allclose(inner, X64.T @ G, rtol=tol, atol=tol * 100)
    np.testing.assert_allclose(dX, G.astype(np.float64) @ W.T, rtol=tol, atol=tol)
    np.testing.assert_allclose(dW, X64.T @ G, rtol=tol, atol=tol * 100)


@pytest.mark.parametrize("threads", [1, 2, 3, 7])
def test_shared_items_run_each_item_once_however_unequal(threads):
    import time

    done: list[int] = []
    costs = [0.004 if k % 5 == 0 else 0.0 for k in range(23)]

    def item(k):
        def run():
            time.sleep(costs[k])
            done.append(k)
        return run

    shared_items(threads, [item(k) for k in range(23)])
    assert sorted(done) == list(range(23))
    shared_items(threads, [])                               # nothing to run: no thread
    with pytest.raises(ValueError, match="item 4"):
        shared_items(threads, [item(0), lambda: (_ for _ in ()).throw(ValueError("item 4"))])


@settings(max_examples=30, deadline=None)
@given(n=SIZES, a=st.sampled_from([3, 32]), b=st.sampled_from([5, 32]),
       mode=st.sampled_from(["fresh", "out", "into"]), threads=st.sampled_from([1, 2, 3]),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**16))
def test_the_backward_by_shared_blocks_is_the_whole_products(n, a, b, mode, threads, dtype,
                                                              seed):
    """``G Wᵀ`` row for row the register kernel's over every row (or BLAS's by blocks),
    ``Xᵀ G`` the same bits as one ``rows_inner`` over every row (its chunks are the blocks)
    and as the blocks on one thread, whatever the thread count and the mode, and the sums
    of ``G`` taken with them the same bits as ``column_sums`` of the whole array."""
    rng = np.random.default_rng(seed)
    X, W = rng.standard_normal((n, a)).astype(dtype), rng.standard_normal((a, b)).astype(dtype)
    G = rng.standard_normal((n, b)).astype(dtype)
    start = rng.standard_normal((n, a)).astype(dtype)
    with threadpool_limits(limits=1, user_api="blas"):
        kw = {"out": np.empty((n, a), dtype)} if mode == "out" else \
            {"into": start.copy()} if mode == "into" else {}
        dx, dw, db = matmul_vjp_blocks(G, W, X, threads, sums=True, **kw)
        one_dx, one_dw = matmul_vjp_blocks(G, W, X, 1, **({"into": start.copy()}
                                                           if mode == "into" else {}))
    assert dx is kw.get("out", kw.get("into", dx))
    np.testing.assert_array_equal(dx, one_dx)
    np.testing.assert_array_equal(dw, one_dw)
    np.testing.assert_array_equal(db, column_sums(G))    # the bias's: the same bits
    tol = 2e-4 if dtype == np.float32 else 1e-10
    want = G.astype(np.float64) @ W.T + (start if mode == "into" else 0)
    np.testing.assert_allclose(dx, want, rtol=tol, atol=tol * max(1, a))
    np.testing.assert_allclose(dw, X.astype(np.float64).T @ G, rtol=tol,
                               atol=tol * max(1, n) ** 0.5 * 10)
    if _row_gemm.inner_fits(X, G, dw):
        whole = np.empty_like(dw)
        _row_gemm.rows_inner(X, G, whole, np.uint64(0), np.uint64(n))
        np.testing.assert_array_equal(dw, whole)


@pytest.mark.parametrize("case", ["small", "skinny into", "blocks", "blocks into",
                                  "not contiguous"])
def test_the_matmul_backward_gives_the_bias_cotangent_on_request(case):
    """``matmul_vjp(..., sums=True)`` adds ``vertex_sum(G)`` (the same bits) as a third
    result on each of the cpu executor's paths, and the first two are those without it."""
    rng = np.random.default_rng(7)
    n = 8 if case == "small" else 3 * ROWS + 17
    a, b = (32, 4) if case == "skinny into" else (32, 32)
    X = rng.standard_normal((n, a)).astype(np.float32)
    W = rng.standard_normal((a, b)).astype(np.float32)
    G = rng.standard_normal((n, 2 * b) if case == "not contiguous" else (n, b))
    G = G.astype(np.float32)[:, :b]
    start = rng.standard_normal((n, a)).astype(np.float32)
    ex = CPUExecutor()

    def kw():
        return {"into": start.copy()} if "into" in case else {}

    dx, dw, db = ex.matmul_vjp(G, W, X, sums=True, **kw())
    plain_dx, plain_dw = ex.matmul_vjp(G, W, X, **kw())
    np.testing.assert_array_equal(dx, plain_dx)
    np.testing.assert_array_equal(dw, plain_dw)
    np.testing.assert_array_equal(db, ex.vertex_sum(G))
    np.testing.assert_allclose(db, G.astype(np.float64).sum(0), rtol=1e-4, atol=1e-3)
