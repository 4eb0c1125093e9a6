"""The register-blocked narrow products of the cpu executor (``_row_gemm``): ``X W (+ b)
(+ Y)`` and ``Xᵀ G`` equal to float64 products, each row's result independent of how the
rows are split among calls, and the shapes and machines they decline left to BLAS (the
executor's products through them on one thread and two: ``test_cpu_chunked_gemm.py``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gblas_gnn.executors import CPUExecutor
from gblas_gnn.executors.cpu import _row_gemm
from gblas_gnn.executors.cpu._chunked_gemm import ROWS
from gblas_gnn.executors.cpu._row_gemm import (
    INNER_MAX_DEPTH,
    MAX_COLUMNS,
    fits,
    inner_fits,
    product_into,
    rows_inner,
    rows_product,
)

pytestmark = pytest.mark.cpu_only


@pytest.fixture
def avx2_blas(monkeypatch):
    """The kernels taken as where OpenBLAS runs its AVX2 kernels (this test's box may run
    others, where they leave every product to BLAS)."""
    monkeypatch.setattr(_row_gemm, "openblas_kernels", lambda: frozenset({"haswell"}))


DTYPES = st.sampled_from([np.float32, np.float64])


def _block(dtype) -> int:
    """Columns of one block of four vectors."""
    return 4 * 32 // np.dtype(dtype).itemsize


def _tol(dtype, terms: int) -> float:
    return (2e-6 if dtype == np.float32 else 1e-14) * max(terms, 1) * 4


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 23), k=st.integers(1, 70), blocks=st.integers(1, 4), dtype=DTYPES,
       bias=st.booleans(), accumulate=st.booleans(), cut=st.integers(0, 23),
       seed=st.integers(0, 2**16))
def test_the_product_equals_float64s_and_any_split_of_the_rows_gives_the_same_bits(
        n, k, blocks, dtype, bias, accumulate, cut, seed):
    width = blocks * _block(dtype)
    if width > MAX_COLUMNS:
        width = MAX_COLUMNS
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, k)).astype(dtype)
    W = rng.standard_normal((k, width)).astype(dtype)
    b = rng.standard_normal(width).astype(dtype) if bias else np.zeros(0, dtype)
    Y0 = rng.standard_normal((n, width)).astype(dtype)
    whole = Y0.copy()
    rows_product(X, W, b, accumulate, whole, np.uint64(0), np.uint64(n))
    want = X.astype(np.float64) @ W + (b if bias else 0) + (Y0 if accumulate else 0)
    np.testing.assert_allclose(whole, want, rtol=_tol(dtype, k), atol=_tol(dtype, k) * 4)
    cut = min(cut, n)
    parts = Y0.copy()                      # two calls, the second starting at an odd row too
    rows_product(X, W, b, accumulate, parts, np.uint64(cut), np.uint64(n))
    rows_product(X, W, b, accumulate, parts, np.uint64(0), np.uint64(cut))
    np.testing.assert_array_equal(parts, whole)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 70), k=st.integers(1, INNER_MAX_DEPTH), dtype=DTYPES,
       wide=st.booleans(), seed=st.integers(0, 2**16))
def test_the_inner_product_equals_float64s(n, k, dtype, wide, seed):
    width = _block(dtype) * (2 if wide and dtype == np.float32 else 1)
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, k)).astype(dtype)
    G = rng.standard_normal((n, width)).astype(dtype)
    out = np.full((k, width), np.nan, dtype)               # every entry written, from zero
    rows_inner(X, G, out, np.uint64(0), np.uint64(n))
    np.testing.assert_allclose(out, X.astype(np.float64).T @ G, rtol=_tol(dtype, n),
                               atol=_tol(dtype, n) * 4)
    again = np.empty_like(out)
    rows_inner(X, G, again, np.uint64(0), np.uint64(n))
    np.testing.assert_array_equal(again, out)


def test_a_long_inner_product_sums_by_chunks_and_stays_accurate():
    """10⁶ rows of ``1 · 0.1`` in float32: one chain of fused multiply-adds drifts by about
    1 % (each term rounded against a sum near 10⁵); chunks of 8 192 rows, their sums added
    after, stay within 2·10⁻⁴ (6·10⁻⁵ measured), on every entry and the odd last column."""
    n = 1_000_000
    X = np.ones((n, 3), np.float32)
    G = np.full((n, 32), 0.1, np.float32)
    out = np.empty((3, 32), np.float32)
    rows_inner(X, G, out, np.uint64(0), np.uint64(n))
    np.testing.assert_allclose(out, n * np.float64(np.float32(0.1)), rtol=2e-4)


def test_the_shapes_they_decline_are_left_to_blas(avx2_blas):
    f32 = np.ones((5, 8), np.float32)
    W = np.ones((8, 32), np.float32)
    out = np.zeros((5, 32), np.float32)
    assert fits(f32, W, out)
    assert not fits(f32, np.ones((8, 24), np.float32), np.empty((5, 24), np.float32))
    assert not fits(f32, np.ones((8, 128), np.float32), np.empty((5, 128), np.float32))
    assert not fits(f32.astype(np.float64), W, out)                     # mixed dtypes
    assert not fits(np.ones((5, 16), np.float32)[:, ::2], W, out)       # strided X
    assert not fits(f32.astype(np.int64), W.astype(np.int64), out.astype(np.int64))
    assert fits(f32.astype(np.float64), np.ones((8, 16)), np.empty((5, 16)))
    # a bias of another dtype would round differently: nothing written, False
    target = np.full((5, 32), 3.0, np.float32)
    assert not product_into(target, f32, W, np.ones(32, np.float64))
    assert (target == 3).all()
    assert product_into(target, f32, np.asfortranarray(W), np.ones(32, np.float32))
    np.testing.assert_array_equal(target, 9.0)                          # W made contiguous
    G = np.ones((5, 32), np.float32)
    assert inner_fits(f32, G, np.empty((8, 32), np.float32))
    assert not inner_fits(np.ones((5, INNER_MAX_DEPTH + 1), np.float32), G,
                          np.empty((INNER_MAX_DEPTH + 1, 32), np.float32))
    assert inner_fits(f32.astype(np.float64), np.ones((5, 32)), np.empty((8, 32)))
    assert not inner_fits(f32.astype(np.float64), np.ones((5, 64)), np.empty((8, 64)))  # 512 B rows


@pytest.mark.parametrize("kernels", [frozenset({"skylakex"}), frozenset({"haswell", "cooperlake"}),
                                     frozenset()])
def test_where_openblas_runs_other_kernels_every_product_is_blas(monkeypatch, kernels):
    """AVX-512 kernel sets (not measured against), a mix, or no OpenBLAS: nothing fits, and
    the executor's products are BLAS's, still equal to float64's."""
    monkeypatch.setattr(_row_gemm, "openblas_kernels", lambda: kernels)
    X, W = np.ones((3 * ROWS, 32), np.float32), np.ones((32, 32), np.float32)
    assert not _row_gemm.enabled() and not fits(X, W, np.empty((3 * ROWS, 32), np.float32))
    assert not inner_fits(X, X, np.empty((32, 32), np.float32))
    assert not product_into(np.empty((3 * ROWS, 32), np.float32), X, W)
    np.testing.assert_array_equal(CPUExecutor().linear(X, W, np.ones(32, np.float32)), 33.0)


def test_the_kernels_are_taken_where_openblas_runs_its_avx2_kernels(monkeypatch):
    kernels = _row_gemm.openblas_kernels()                      # this process's OpenBLAS
    assert kernels and all(isinstance(k, str) and k == k.lower() for k in kernels)
    assert _row_gemm.enabled() == (kernels <= _row_gemm.AVX2_KERNELS)
    monkeypatch.setattr(_row_gemm, "openblas_kernels", lambda: frozenset({"haswell", "zen"}))
    assert _row_gemm.enabled()
