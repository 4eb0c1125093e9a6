"""The cpu executor's ``plus_times`` kernel (:mod:`gblas_gnn.executors.cpu._spmm`) and its
buffers: held to scipy on random matrices (rectangular, empty rows and columns, iso-valued,
integer- and bool-valued, every GraphBLAS storage format), bitwise the same for any thread
count and chunking, and the matrix handed back as it came."""

from __future__ import annotations

import graphblas as gb
import numba
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from gblas_gnn.executors import CPUExecutor
from gblas_gnn.executors.cpu import _dense_kernels, _spmm
from gblas_gnn.executors.cpu._spmm import CSCOperand
from gblas_gnn.executors.cpu._spmm_kernels import spmm_rows, transpose_csr
from gblas_gnn.executors.patterns import (
    ColumnTiles,
    CSRPattern,
    balanced_bounds,
    unsigned_view,
)

pytestmark = pytest.mark.cpu_only
SETTINGS = settings(max_examples=40, deadline=None)


def random_csr(rng, m, n, density, dtype=np.float64, empty_row=True, empty_col=True):
    """A scipy CSR matrix; its last row and last column are empty when asked."""
    M = sp.random(m, n, density=density, format="csr", random_state=rng, dtype=np.float64)
    M.data = rng.standard_normal(M.nnz)
    M = M.tolil()
    if empty_row and m > 0:
        M[m - 1, :] = 0
    if empty_col and n > 0:
        M[:, n - 1] = 0
    M = M.tocsr()
    M.eliminate_zeros()
    M.sort_indices()
    return M.astype(dtype)


def to_gb(M, storage="by_row"):
    coo = M.tocoo()
    S = gb.Matrix.from_coo(coo.row, coo.col, coo.data, nrows=M.shape[0], ncols=M.shape[1])
    S.ss.config["format"] = storage
    return S


matrices = st.builds(
    lambda seed, m, n, density, dtype, storage: (
        np.random.default_rng(seed), m, n, density, np.dtype(dtype), storage),
    seed=st.integers(0, 2**31 - 1), m=st.integers(0, 40), n=st.integers(0, 40),
    density=st.sampled_from([0.0, 0.05, 0.3, 1.0]),
    dtype=st.sampled_from([np.float32, np.float64]),
    storage=st.sampled_from(["by_row", "by_col"]))


#: feature widths through every form of the row kernel: the scalar tail alone, one vector
#: of 4 float64 or 8 float32 with a tail, blocks of four vectors (16 float64, 32 float32)
#: with single vectors and a tail after them
WIDTHS = st.sampled_from([0, 1, 3, 4, 5, 8, 11, 16, 21, 32, 37, 64, 70])


def tol(dtype):
    return {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12,
                                                                     "atol": 1e-12}


def operands(spec, k):
    """``(rng, M, S, H, dtype)``: a drawn scipy matrix, its GraphBLAS copy in the drawn
    storage and features ``H`` (ncols, k) of the drawn dtype."""
    rng, m, n, density, dtype, storage = spec
    M = random_csr(rng, m, n, density)
    return rng, M, to_gb(M, storage), rng.standard_normal((n, k)).astype(dtype), dtype


@SETTINGS
@given(spec=matrices, k=WIDTHS)
def test_products_match_scipy(spec, k):
    rng, M, S, H, dtype = operands(spec, k)
    ex = CPUExecutor()
    G = rng.standard_normal((M.shape[0], k)).astype(dtype)
    np.testing.assert_allclose(ex.spmm(S, H), M @ H.astype(np.float64), **tol(dtype))
    np.testing.assert_allclose(ex.spmm_t(S, G), M.T @ G.astype(np.float64), **tol(dtype))
    assert ex.spmm(S, H).dtype == dtype and ex.spmm_t(S, G).dtype == dtype


@SETTINGS
@given(spec=matrices, k=WIDTHS, weight=st.floats(-2, 2), transpose=st.booleans())
def test_self_term_and_bias_of_a_square_matrix(spec, k, weight, transpose):
    rng, m, _, density, dtype, storage = spec
    M = random_csr(rng, m, m, density)
    S = to_gb(M, storage)
    H = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal(k).astype(dtype)
    got = CPUExecutor().spmm_affine(S, H, self_weight=np.asarray([weight], dtype), bias=b,
                                    transpose=transpose)
    want = (M.T if transpose else M) @ H.astype(np.float64) + weight * H + b
    np.testing.assert_allclose(got, want, **tol(dtype))


@SETTINGS
@given(spec=matrices, k=WIDTHS)
def test_the_mean_divides_each_row_as_it_is_written(spec, k):
    # bitwise the sum divided by the row counts (an empty row counts 1), the old two passes
    _, M, S, H, dtype = operands(spec, k)
    ex = CPUExecutor()
    counts = np.maximum(np.diff(M.indptr), 1).astype(dtype)
    np.testing.assert_array_equal(ex.aggregate(S, H, "mean"), ex.spmm(S, H) / counts[:, None])
    Z, ctx = ex.aggregate(S, H, "mean", keep_context=True)
    np.testing.assert_array_equal(ctx.counts, counts)
    assert Z.dtype == dtype


@SETTINGS
@given(spec=matrices, k=WIDTHS, iso=st.booleans(), divide=st.booleans())
def test_gathered_rows_scaled_and_added_into_a_sum(spec, k, iso, divide):
    """``into + D⁻¹ S diag(s) X``: each gathered row scaled by its ``s_j`` (the mean's
    backward), the result added into ``into`` in the pass (the tape's sum), which comes
    back as the very array."""
    rng, m, n, density, dtype, _ = spec
    M = random_csr(rng, m, n, density, dtype)
    ptr, idx = M.indptr.astype(np.int64), M.indices.astype(np.int32)
    values = np.full(1, 0.5, dtype) if iso else M.data
    X = rng.standard_normal((n, k)).astype(dtype)
    s = rng.uniform(0.1, 2.0, n).astype(dtype)
    d = rng.uniform(1, 4, m).astype(dtype) if divide else None
    start = rng.standard_normal((m, k)).astype(dtype)
    into = start.copy()
    got = _spmm.spmm_run(ptr, idx, balanced_bounds(ptr, 5), values, iso, X, m, None, None,
                         d, scale=s, into=into)
    assert got is into
    W = M.astype(np.float64)
    if iso:
        W.data[:] = 0.5
    want = W @ (s[:, None].astype(np.float64) * X)
    if divide:
        want /= d[:, None]
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, start + want, rtol=tol, atol=tol)


def test_read_only_and_writable_operands_share_one_compilation():
    """The mean's cached divisors are read-only, a scale or a user's features may be either:
    the kernel gets every operand it only reads as a read-only view, so one compilation
    serves them all (numba types a read-only array apart)."""
    ptr, idx = np.array([0, 1, 2, 3, 4]), np.array([1, 2, 3, 0], np.int32)
    X = np.arange(12, dtype=np.float32).reshape(4, 3)
    frozen = np.full(4, 2, np.float32)
    frozen.setflags(write=False)

    def run(X, divisors=None, scale=None):
        return _spmm.spmm_run(ptr, idx, balanced_bounds(ptr), np.ones(1, np.float32), True,
                              X, 4, None, None, divisors, scale=scale)

    want = X[idx] / 2
    np.testing.assert_array_equal(run(X, frozen), want)
    compiled = set(spmm_rows.signatures)
    np.testing.assert_array_equal(run(X, np.full(4, 2, np.float32)), want)
    np.testing.assert_array_equal(run(X, scale=np.full(4, 0.5, np.float32)), want)
    X.setflags(write=False)
    np.testing.assert_array_equal(run(X, frozen), want)
    assert set(spmm_rows.signatures) == compiled
    assert frozen.flags.writeable is False and X.flags.writeable is False


def test_a_sum_that_shares_the_gathered_operand_is_refused():
    X = np.ones((4, 3), np.float32)
    ptr, idx = np.array([0, 1, 2, 3, 4]), np.array([1, 2, 3, 0], np.int32)
    with pytest.raises(ValueError, match="share memory"):
        _spmm.spmm_run(ptr, idx, balanced_bounds(ptr), np.ones(1, np.float32), True, X, 4,
                       None, None, into=X)
    with pytest.raises(ValueError, match="into must be"):
        _spmm.spmm_run(ptr, idx, balanced_bounds(ptr), np.ones(1, np.float32), True, X, 4,
                       None, None, into=np.zeros((4, 3), np.float64))
    with pytest.raises(ValueError, match="scale must have 4"):
        _spmm.spmm_run(ptr, idx, balanced_bounds(ptr), np.ones(1, np.float32), True, X, 4,
                       None, None, scale=np.ones(3, np.float32))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32])
def test_index_buffers_are_read_unsigned_without_a_copy(dtype):
    a = np.array([0, 3, 2**31 - 1], dtype)
    u = unsigned_view(a)
    assert u.dtype.kind == "u" and u.dtype.itemsize == a.itemsize and np.shares_memory(u, a)
    np.testing.assert_array_equal(u, a)
    with pytest.raises(TypeError, match="integers"):
        unsigned_view(np.zeros(2))


def test_divisors_of_the_wrong_length_are_refused():
    S = to_gb(random_csr(np.random.default_rng(3), 6, 4, 0.5))
    with pytest.raises(ValueError, match="divisors must have 6 entries"):
        _spmm.product(S, CSRPattern(S), np.ones((4, 2), np.float32), divisors=np.ones(5))


@pytest.mark.parametrize("values", ["iso", "int", "bool"])
def test_iso_integer_and_bool_matrices(values):
    rng = np.random.default_rng(3)
    M = random_csr(rng, 30, 20, 0.2)
    coo = M.tocoo()
    if values == "iso":
        S = gb.Matrix.from_coo(coo.row, coo.col, 2.5, nrows=30, ncols=20)
        assert S.ss.is_iso
        D = (M != 0).astype(np.float64) * 2.5
    elif values == "int":
        data = rng.integers(-3, 4, coo.nnz)
        S = gb.Matrix.from_coo(coo.row, coo.col, data, nrows=30, ncols=20)
        D = sp.csr_matrix((data.astype(np.float64), (coo.row, coo.col)), shape=(30, 20))
    else:
        S = gb.Matrix.from_coo(coo.row, coo.col, True, nrows=30, ncols=20, dtype=bool)
        D = (M != 0).astype(np.float64)
    H = rng.standard_normal((20, 3)).astype(np.float32)
    G = rng.standard_normal((30, 3)).astype(np.float32)
    ex = CPUExecutor()
    np.testing.assert_allclose(ex.spmm(S, H), D @ H, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ex.spmm_t(S, G), D.T @ G, rtol=1e-5, atol=1e-5)


def test_the_matrix_comes_back_unchanged_after_a_product():
    rng = np.random.default_rng(4)
    M = random_csr(rng, 2000, 2000, 0.01)       # large enough to be stored as CSR
    S = to_gb(M)
    assert S.ss.format == "csr"
    before = S.dup()
    ex = CPUExecutor()
    ex.spmm(S, rng.standard_normal((2000, 4)).astype(np.float32))
    ex.spmm_t(S, rng.standard_normal((2000, 4)).astype(np.float32))
    assert S.ss.format == "csr" and S.isequal(before)


def test_results_do_not_depend_on_threads_or_chunks():
    """Each output row is one thread's and adds its terms in storage order: bitwise equal for
    1 and 2 threads and for any chunking of the rows."""
    rng = np.random.default_rng(5)
    M = random_csr(rng, 3000, 3000, 0.005, dtype=np.float32)
    S = to_gb(M)
    H = rng.standard_normal((3000, 16)).astype(np.float32)
    ex = CPUExecutor()
    before = numba.get_num_threads()
    try:
        outs = []
        for threads in (1, numba.config.NUMBA_NUM_THREADS):
            numba.set_num_threads(threads)
            outs.append((ex.spmm(S, H), ex.spmm_t(S, H)))
    finally:
        numba.set_num_threads(before)
    for a, b in zip(*outs, strict=True):
        np.testing.assert_array_equal(a, b)
    pattern = CSRPattern(S)
    # the operands it reads as read-only views, as the executor hands them over (one
    # signature: a writable one would compile the kernel again, 5–8 s on a cold cache)
    values, H, z0, divisors, scale = (_spmm._read_only(a) for a in (
        M.data.astype(np.float32), H, np.zeros(16, np.float32), np.empty(0, np.float32),
        np.empty(0, np.float32)))
    for chunk in (1, 7, 10**9):
        out = np.empty((3000, 16), np.float32)
        spmm_rows(balanced_bounds(pattern.indptr, chunk), unsigned_view(pattern.indptr),
                  unsigned_view(pattern.indices), values, False, H, np.float32(0), False, z0,
                  32, divisors, scale, False, out)
        np.testing.assert_array_equal(out, outs[0][0])


@SETTINGS
@given(spec=matrices)
def test_transpose_is_the_csc_form(spec):
    rng, m, n, density, dtype, _ = spec
    M = random_csr(rng, m, n, density, dtype)
    C = M.tocsc()
    C.sort_indices()
    colptr = np.zeros(n + 1, np.int64)
    rows = np.empty(M.nnz, np.int32)
    values_t = np.empty(M.nnz, dtype)
    transpose_csr(M.indptr.astype(np.int64), M.indices.astype(np.int32), M.data, False,
                  colptr, rows, values_t)
    np.testing.assert_array_equal(colptr, C.indptr)
    np.testing.assert_array_equal(rows, C.indices)
    np.testing.assert_array_equal(values_t, C.data)


@SETTINGS
@given(spec=matrices)
def test_the_pattern_column_view_is_a_stable_sort_by_column(spec):
    """``CSRPattern.csc`` (a counting sort, issue 21) equals the stable argsort of the column
    indices it replaced, in the int32 it stores, with empty rows and columns."""
    rng, m, n, density, dtype, _ = spec
    pattern = CSRPattern(to_gb(random_csr(rng, m, n, density, dtype)))
    colptr, perm, rows = pattern.csc()
    want = np.argsort(pattern.indices, kind="stable")
    assert perm.dtype == rows.dtype == np.int32 and colptr.dtype == np.int64
    np.testing.assert_array_equal(perm, want)
    np.testing.assert_array_equal(rows, pattern.rows()[want])
    np.testing.assert_array_equal(colptr, np.concatenate(
        ([0], np.cumsum(np.bincount(pattern.indices, minlength=n)))))
    assert pattern.csc()[1] is perm


@SETTINGS
@given(counts=st.lists(st.integers(0, 50), max_size=60), chunk=st.integers(1, 80))
def test_balanced_bounds_split_rows_into_chunks(counts, chunk):
    indptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    b = balanced_bounds(indptr, chunk)
    assert b[0] == 0 and b[-1] == len(counts) and b.dtype == np.int64
    assert np.all(np.diff(b) > 0) or len(counts) == 0
    per_chunk = indptr[b[1:]] - indptr[b[:-1]]
    # about chunk entries (more only when there are fewer rows than chunks), plus one row's
    spacing = max(chunk, -(-int(indptr[-1]) // max(len(counts), 1)))
    assert np.all(per_chunk <= spacing + max(counts, default=0))


def test_the_transpose_is_built_once_per_matrix_and_goes_with_it():
    rng = np.random.default_rng(6)
    S = to_gb(random_csr(rng, 50, 40, 0.1))
    ex = CPUExecutor()
    G = rng.standard_normal((50, 2)).astype(np.float32)
    ex.spmm(S, rng.standard_normal((40, 2)).astype(np.float32))
    assert len(ex._csc._entries) == 0
    first = ex.spmm_t(S, G)
    operand = ex._csc.get(S)
    assert isinstance(operand, CSCOperand) and operand.rows.dtype == np.int32
    np.testing.assert_array_equal(ex.spmm_t(S, G), first)
    assert ex._csc.get(S) is operand and len(ex._csc._entries) == 1
    del S, operand
    import gc

    gc.collect()
    assert len(ex._csc._entries) == 0


def test_bad_operands_raise_before_the_kernel_runs():
    rng = np.random.default_rng(7)
    S = to_gb(random_csr(rng, 6, 4, 0.5))
    ex = CPUExecutor()
    with pytest.raises(ValueError, match="4 rows"):
        ex.spmm(S, np.ones((5, 2), np.float32))
    with pytest.raises(ValueError, match="6 rows"):
        ex.spmm_t(S, np.ones((4, 2), np.float32))
    with pytest.raises(ValueError, match="2-D"):
        ex.spmm(S, np.ones(4, np.float32))
    with pytest.raises(ValueError, match="square"):
        ex.spmm_affine(S, np.ones((4, 2), np.float32), self_weight=1.0)
    with pytest.raises(ValueError, match="bias"):
        ex.spmm_affine(S, np.ones((4, 2), np.float32), bias=np.ones(3, np.float32))
    with pytest.raises(TypeError, match="float32 or float64"):
        ex.spmm(S, np.ones((4, 2), np.int64))


@SETTINGS
@given(n=st.integers(0, 20_000), k=st.integers(0, 5),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**31 - 1))
def test_column_sums(n, k, dtype, seed):
    X = np.random.default_rng(seed).standard_normal((n, k)).astype(dtype)
    got = _dense_kernels.column_sums(X)
    assert got.dtype == dtype and got.shape == (k,)
    # rounding grows with the magnitudes summed; a lost or repeated row (|x| ~ 1) does not
    # fit in the bound
    bound = (2e-6 if dtype == np.float32 else 1e-14) * (np.abs(X).sum(axis=0) + 1)
    assert np.all(np.abs(got - X.astype(np.float64).sum(axis=0)) <= bound)


@SETTINGS
@given(n=st.integers(0, 9_000), k=st.integers(1, 40), h=st.integers(1, 4),
       seed=st.integers(0, 2**31 - 1))
def test_the_skinny_matmul_backward_in_one_pass(n, k, h, seed):
    """``into += G Wᵀ`` and ``Xᵀ G`` of a narrow ``G`` in one pass by blocks of rows: the
    dense products' values (float64), and the same bits on one thread and on two."""
    import numba

    rng = np.random.default_rng(seed)
    G, X, into = (rng.standard_normal(s) for s in ((n, h), (n, k), (n, k)))
    W = rng.standard_normal((k, h))
    assert _dense_kernels.skinny(G, W, X, into)
    runs = []
    before = numba.get_num_threads()
    try:
        for threads in {1, min(2, numba.config.NUMBA_NUM_THREADS)}:
            numba.set_num_threads(threads)
            acc = into.copy()
            runs.append((acc, _dense_kernels.skinny_matmul_vjp(G, W, X, acc)))
    finally:
        numba.set_num_threads(before)
    acc, gw = runs[0]
    np.testing.assert_allclose(acc, into + G @ W.T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gw, X.T @ G, rtol=1e-10, atol=1e-9)
    assert gw.shape == (k, h) and gw.flags.c_contiguous
    for other in runs[1:]:
        np.testing.assert_array_equal(other[0], acc)
        np.testing.assert_array_equal(other[1], gw)


def test_the_cpu_executor_takes_a_score_products_backward_in_one_pass(monkeypatch):
    """At a size that runs the matmul backward on both cores, a ``G`` of at most
    ``SKINNY_WIDTH`` columns added into ``into`` takes the one-pass kernel; a wider one or
    a fresh cotangent takes the two BLAS products; each equals numpy's products."""
    ex = CPUExecutor()
    taken = []
    one_pass = _dense_kernels.skinny_matmul_vjp
    monkeypatch.setattr(_dense_kernels, "skinny_matmul_vjp",
                        lambda *a: taken.append(a[0].shape[1]) or one_pass(*a))
    rng = np.random.default_rng(4)
    n, k = 20_000, 32
    X = rng.standard_normal((n, k)).astype(np.float32)
    for h in (2, _dense_kernels.SKINNY_WIDTH + 1):
        G = rng.standard_normal((n, h)).astype(np.float32)
        W = rng.standard_normal((k, h)).astype(np.float32)
        into = rng.standard_normal((n, k)).astype(np.float32)
        want = into.astype(np.float64) + G.astype(np.float64) @ W.T.astype(np.float64)
        ga, gw = ex.matmul_vjp(G, W, X, into=into)
        assert ga is into
        np.testing.assert_allclose(ga, want, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(gw, X.T.astype(np.float64) @ G, rtol=1e-4, atol=2e-2)
    assert taken == [2]                     # the narrow one took the one pass, the wide not


def test_a_large_operand_off_a_cache_line_is_gathered_from_an_aligned_copy():
    from gblas_gnn.executors.cpu import _spmm

    rng = np.random.default_rng(8)
    n, k = 40_000, 32                                # 5 MiB of float32 rows of 128 bytes
    M = random_csr(rng, n, n, 4 / n, dtype=np.float32)
    raw = np.empty(n * k + 16, np.float32)
    start = (-(raw.ctypes.data % 64) // 4) % 16 + 4  # 16 bytes past a line boundary
    H = raw[start:start + n * k].reshape(n, k)
    H[...] = rng.standard_normal((n, k))
    assert H.ctypes.data % 64 == 16
    X = _spmm.check_features(H, n, "test")
    assert X.ctypes.data % 64 == 0 and X is not H
    np.testing.assert_array_equal(X, H)
    small = H[:1000]
    assert _spmm.check_features(small, 1000, "test") is small
    np.testing.assert_allclose(CPUExecutor().spmm(to_gb(M), H), M @ H.astype(np.float64),
                               rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------- column tiles
def tiled_and_plain(ptr, idx, chunks, values, iso, X, nrows, tiles, width, **terms):
    """The product of :func:`_spmm.spmm_run` over ``tiles(width)`` and without tiles (a
    sum ``into`` is copied for each)."""
    args = (ptr, idx, chunks, values, iso, X, nrows, terms.get("self_weight"),
            terms.get("bias"), terms.get("divisors"))

    def more():
        into = terms.get("into")
        return {"scale": terms.get("scale"), "into": None if into is None else into.copy()}

    return (_spmm.spmm_run(*args, tiles, width, **more()),
            _spmm.spmm_run(*args, **more()))


@SETTINGS
@given(spec=matrices, width=st.integers(1, 45))
def test_column_tiles_split_every_row_at_the_tile_bounds(spec, width):
    rng, m, n, density, dtype, _ = spec
    M = random_csr(rng, m, n, density, dtype)
    tiles = ColumnTiles(M.indptr.astype(np.int64), M.indices.astype(np.int32), n, width)
    count = max(1, -(-n // width))
    assert tiles.count == count and tiles.offsets.shape == (count + 1, m)
    for i in range(m):
        row = M.indices[M.indptr[i]:M.indptr[i + 1]]
        want = np.searchsorted(row, np.minimum(np.arange(count + 1) * width, n))
        want[-1] = row.shape[0]
        np.testing.assert_array_equal(tiles.offsets[:, i], want)
    b = tiles.chunks
    assert b[0] == 0 and b[-1] == m


@SETTINGS
@given(spec=matrices, k=WIDTHS, width=st.integers(1, 45), iso=st.booleans(),
       terms=st.sampled_from(["none", "self", "bias", "divisors", "scale", "into"]))
def test_tiled_products_are_bitwise_the_plain_ones(spec, k, width, iso, terms):
    """Tiles of any width, down to one column (most of them empty, as are the drawn empty
    rows and columns), over the CSR of ``S`` and the CSC of ``Sᵀ``, weighted or iso, with
    each term of the layers: the very bits of the untiled kernel (every row's terms are
    added in storage order; the untiled kernel sums in vector registers, the tiled one in
    the output rows, one fused multiply-add per term in both)."""
    rng, m, n, density, dtype, _ = spec
    if terms == "self":
        n = m
    M = random_csr(rng, m, n, density, dtype)
    values = np.full(1, 0.75, dtype) if iso else M.data
    C = M.tocsc()
    C.sort_indices()
    for transposed in (False, True):
        src = C if transposed else M
        rows, cols = (n, m) if transposed else (m, n)
        ptr = src.indptr.astype(np.int64)
        idx = src.indices.astype(np.int32)
        extra = {"self": {"self_weight": 1.5},
                 "bias": {"bias": rng.standard_normal(k).astype(dtype)},
                 "divisors": {"divisors": rng.uniform(1, 4, rows).astype(dtype)},
                 "scale": {"scale": rng.uniform(0.1, 2, cols).astype(dtype)},
                 "into": {"into": rng.standard_normal((rows, k)).astype(dtype)},
                 "none": {}}[terms]
        X = rng.standard_normal((cols, k)).astype(dtype)
        got, want = tiled_and_plain(
            ptr, idx, balanced_bounds(ptr, 7), values if iso else src.data, iso, X, rows,
            lambda w, ptr=ptr, idx=idx, cols=cols: ColumnTiles(ptr, idx, cols, w), width,
            **extra)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("k", [16, 37])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tiled_products_are_bitwise_the_plain_ones_on_two_threads(dtype, k):
    """A seeded graph large enough for many chunks per tile on every thread, each tile
    width from one column to a single tile."""
    rng = np.random.default_rng(9)
    M = random_csr(rng, 3000, 2500, 0.004, dtype=dtype)
    S = to_gb(M)
    pattern = CSRPattern(S)
    X = rng.standard_normal((2500, k)).astype(dtype)
    ptr, idx = pattern.indptr, pattern.indices
    for width in (1, 3, 64, 999, 2500):
        for iso, values in ((False, M.data), (True, np.ones(1, dtype))):
            got, want = tiled_and_plain(ptr, idx, pattern.chunks, values, iso, X, 3000,
                                        lambda w: ColumnTiles(ptr, idx, 2500, w), width)
            np.testing.assert_array_equal(got, want)


def test_tiles_are_built_and_kept_only_where_they_pay():
    """Uniformly random columns miss a cache of one tile's rows on most gathers: tiles pay
    and are kept. Gathers that fall on a few hot columns hit it anyway, and one tile is no
    tiling: no tiles, and that answer is kept too."""
    rng = np.random.default_rng(10)
    n, degree = 4000, 16
    uniform = sp.csr_matrix((np.ones(n * degree), rng.integers(0, n, n * degree),
                             np.arange(0, n * degree + 1, degree)), shape=(n, n))
    uniform.sum_duplicates()
    pattern = CSRPattern(to_gb(uniform))
    tiles = pattern.column_tiles(500)
    assert isinstance(tiles, ColumnTiles) and tiles.count == 8
    assert pattern.column_tiles(500) is tiles
    assert isinstance(pattern.column_tiles(500, transposed=True), ColumnTiles)
    assert pattern.column_tiles(n) is None and (False, n) in pattern._tiles
    hot = sp.csr_matrix((np.ones(n * 4), np.tile(np.arange(4), n), np.arange(0, 4 * n + 1, 4)),
                        shape=(n, n))
    hot.data[::97] = 0
    hot.indices[::97] = rng.integers(4, n, hot.indices[::97].shape[0])
    hot.sort_indices()
    assert CSRPattern(to_gb(hot)).column_tiles(500) is None


def test_tile_width_gives_equal_tiles_only_past_the_cache_share():
    share = int(_spmm.TILE_CACHE_SHARE * 1000)
    assert _spmm.tile_width(10, 8, llc_bytes=1000) is None          # 80 bytes fit
    assert _spmm.tile_width(share // 8, 8, llc_bytes=1000) is None  # exactly the share
    for n in (63, 500, 1000, 1001):                                 # 62 rows fit a tile
        width = _spmm.tile_width(n, 8, llc_bytes=1000)
        tiles = -(-n // width)
        assert tiles == -(-n // (share // 8)) and width * 8 <= share
        assert width * (tiles - 1) < n                              # no tile is empty


def test_the_last_level_cache_is_read_from_linux_or_falls_back(tmp_path, monkeypatch):
    for text, want in (("32768K\n", 32 << 20), ("8M", 8 << 20), ("512", 512),
                       ("", _spmm._DEFAULT_LLC_BYTES), ("lots", _spmm._DEFAULT_LLC_BYTES)):
        (tmp_path / "size").write_text(text)
        monkeypatch.setattr(_spmm, "_LLC_PATH", tmp_path / "size")
        _spmm.last_level_cache_bytes.cache_clear()
        assert _spmm.last_level_cache_bytes() == want, text
    monkeypatch.setattr(_spmm, "_LLC_PATH", tmp_path / "missing")
    _spmm.last_level_cache_bytes.cache_clear()
    assert _spmm.last_level_cache_bytes() == _spmm._DEFAULT_LLC_BYTES
    monkeypatch.undo()
    _spmm.last_level_cache_bytes.cache_clear()


@settings(max_examples=20, deadline=None)
@given(spec=matrices, k=st.integers(1, 5), llc=st.sampled_from([64, 256, 4096]))
def test_the_executor_tiles_a_product_whose_operand_outgrows_the_cache(spec, k, llc):
    """With a last-level cache of ``llc`` bytes the rule tiles every operand past half of
    it: ``spmm``, ``spmm_t``, and the pattern-only sum and mean with their backward give the
    bits of the untiled products, and the tiles are built only then."""
    from gblas_gnn import compose, ops

    rng, m, n, density, dtype, storage = spec
    M = random_csr(rng, m, n, density, dtype)
    S = to_gb(M, storage)
    H = rng.standard_normal((n, k)).astype(dtype)
    G = rng.standard_normal((m, k)).astype(dtype)

    def run():
        ex = CPUExecutor()
        outs = [ex.spmm(S, H), ex.spmm_t(S, G)]
        for reduce in ("sum", "mean"):
            out, pullback = compose.vjp(lambda X, r=reduce: ops.aggregate(ops.structure(S), X, r),
                                        H, executor=ex, vertex=(0,))
            outs += [out, *pullback(G)]
        return ex, outs

    _, plain = run()
    original = _spmm.last_level_cache_bytes
    try:
        _spmm.last_level_cache_bytes = lambda: llc
        ex, tiled = run()
    finally:
        _spmm.last_level_cache_bytes = original
    for a, b in zip(plain, tiled, strict=True):
        np.testing.assert_array_equal(a, b)
    if all(_spmm.tile_width(rows, k * dtype.itemsize, llc) is None for rows in M.shape):
        assert not ex._patterns.get(S)._tiles and not ex._csc.get(S)._tiles
