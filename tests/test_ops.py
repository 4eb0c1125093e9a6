"""Every public building block against a dense numpy reference on small random graphs."""

import graphblas as gb
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import gblas_gnn as gg
from gblas_gnn.executors import get_executor, to_numpy

DTYPES = [np.float32, np.float64]


def assert_allclose(got, want, **kw):
    """numpy's, on host copies (results of the executor under test may be device arrays)."""
    np.testing.assert_allclose(to_numpy(got), to_numpy(want), **kw)


def assert_array_equal(got, want):
    np.testing.assert_array_equal(to_numpy(got), to_numpy(want))


def tol(dtype):
    return dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-11)


def random_graph(n=9, m=30, seed=0, dtype=np.float32, weighted=True, empty_rows=(3, 7)):
    """Directed graph with self loops, duplicate input edges and the given empty rows."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    keep = ~np.isin(dst, empty_rows)
    src, dst = np.r_[src[keep], 0, 0, 1], np.r_[dst[keep], 0, 0, 1]   # loops + duplicate
    vals = rng.uniform(-2, 2, src.size) if weighted else None
    return gg.Graph.from_edges(src, dst, n, values=vals, dtype=dtype)


def to_dense(M):
    """(values, pattern) of a sparse matrix (or an edge tensor of the executor under test) as
    dense arrays."""
    S = gb.io.to_scipy_sparse(gg.ops.to_graphblas(M), format="coo")
    vals = np.zeros(S.shape, dtype=S.dtype)
    pat = np.zeros(S.shape, dtype=bool)
    vals[S.row, S.col] = S.data
    pat[S.row, S.col] = True
    return vals, pat


def feats(n, k, dtype, seed=1, scale=1.0):
    return (np.random.default_rng(seed).standard_normal((n, k)) * scale).astype(dtype)


def ref_softmax(vals, pat):
    out = np.zeros_like(vals, dtype=np.float64)
    for i in range(vals.shape[0]):
        row = vals[i, pat[i]].astype(np.float64)
        if row.size:
            e = np.exp(row - row.max())
            out[i, pat[i]] = e / e.sum()
    return out


def ref_aggregate(vals, pat, H, aggr):
    n, k = vals.shape[0], H.shape[1]
    Z = np.zeros((n, k))
    for i in range(n):
        js = np.flatnonzero(pat[i])
        if js.size == 0:
            continue
        msgs = vals[i, js, None].astype(np.float64) * H[js].astype(np.float64)
        Z[i] = {"sum": msgs.sum(0), "max": msgs.max(0), "min": msgs.min(0),
                "mean": msgs.mean(0)}[aggr]
    return Z


# ---------------------------------------------------------------------- edge tensors
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [1, 5])
def test_sddmm(dtype, k):
    g = random_graph(dtype=dtype)
    X, Y = feats(g.n, k, dtype, 1), feats(g.n, k, dtype, 2)
    E = gg.ops.sddmm(g.A, X, Y)
    assert gg.ops.to_graphblas(E).dtype.np_type == dtype
    vals, pat = to_dense(E)
    A, Apat = to_dense(g.A)
    assert_array_equal(pat, Apat)
    assert_allclose(vals, A * (X @ Y.T), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_sddmm_accepts_scipy_and_pattern_graph(dtype):
    g = random_graph(dtype=dtype, weighted=False)
    X = feats(g.n, 3, dtype)
    a = to_dense(gg.ops.sddmm(g.A, X, X))[0]
    b = to_dense(gg.ops.sddmm(g.to_scipy(), X, X))[0]
    assert_array_equal(a, b)
    assert_allclose(a, to_dense(g.A)[1] * (X @ X.T), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_outer_add(dtype):
    g = random_graph(dtype=dtype)
    u, v = feats(g.n, 1, dtype, 3)[:, 0], feats(g.n, 1, dtype, 4)[:, 0]
    vals, pat = to_dense(gg.ops.outer_add(g.A, u, v))
    assert_array_equal(pat, to_dense(g.A)[1])
    assert_allclose(vals, pat * (u[:, None] + v[None, :]), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scale", [1.0, 1e4])
def test_softmax(dtype, scale):
    g = random_graph(dtype=dtype)
    X = feats(g.n, 4, dtype, scale=np.sqrt(scale))
    S = gg.ops.sddmm(g.A, X, X)
    P = gg.ops.softmax(S)
    vals, pat = to_dense(P)
    svals, spat = to_dense(S)
    assert_array_equal(pat, spat)      # empty rows stay empty
    assert np.isfinite(vals).all()
    assert_allclose(vals, ref_softmax(svals, spat), **tol(dtype))
    rows = gg.ops.row_sum(P)
    nonempty = spat.any(axis=1)
    assert_allclose(rows[nonempty], 1, **tol(dtype))
    assert (rows[~nonempty] == 0).all()


def test_softmax_huge_logits_exact():
    A = gg.Graph.from_edges([0, 1, 2], [0, 0, 0], 3, dtype=np.float64).A
    S = A.dup()
    S[0, 0], S[0, 1], S[0, 2] = 1e4, 1e4 - np.log(2), 1e4 - np.log(4)
    vals, _ = to_dense(gg.ops.softmax(S))
    assert_allclose(vals[0], np.array([4, 2, 1]) / 7, rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_backward(dtype):
    g = random_graph(dtype=dtype)
    S = gg.ops.sddmm(g.A, feats(g.n, 3, dtype, 5), feats(g.n, 3, dtype, 6))
    P = gg.ops.softmax(S)
    dP = gg.ops.sddmm(g.A, feats(g.n, 2, dtype, 7), feats(g.n, 2, dtype, 8))
    pv, pat = to_dense(P)
    dv, _ = to_dense(dP)
    ref = pat * pv * (dv - (pv * dv).sum(axis=1, keepdims=True))
    assert_allclose(to_dense(gg.ops.softmax_backward(P, dP))[0], ref, **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_reductions_and_scaling(dtype):
    g = random_graph(dtype=dtype)
    vals, pat = to_dense(g.A)
    masked = np.where(pat, vals, np.nan)
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        rmax = np.nan_to_num(np.nanmax(masked, axis=1))
        rmin = np.nan_to_num(np.nanmin(masked, axis=1))
    assert_allclose(gg.ops.row_sum(g.A), vals.sum(1), **tol(dtype))
    assert_allclose(gg.ops.col_sum(g.A), vals.sum(0), **tol(dtype))
    assert_allclose(gg.ops.row_max(g.A), rmax, **tol(dtype))
    assert_allclose(gg.ops.row_min(g.A), rmin, **tol(dtype))
    v = np.random.default_rng(9).uniform(0.5, 2, g.n).astype(dtype)
    ops = {"times": np.multiply, "div": np.divide, "plus": np.add, "minus": np.subtract}
    for name, f in ops.items():
        assert_allclose(to_dense(gg.ops.row_scale(g.A, v, name))[0],
                                   pat * f(vals, v[:, None]), **tol(dtype))
        assert_allclose(to_dense(gg.ops.col_scale(g.A, v, name))[0],
                                   pat * f(vals, v[None, :]), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_edgewise_functions(dtype):
    g = random_graph(dtype=dtype)
    vals, pat = to_dense(g.A)
    assert_allclose(to_dense(gg.ops.exp(g.A))[0], pat * np.exp(vals), **tol(dtype))
    assert_allclose(to_dense(gg.ops.relu(g.A))[0], np.maximum(vals, 0))
    for slope in (0.0, 0.2, 1.5):
        assert_allclose(to_dense(gg.ops.leaky_relu(g.A, slope))[0],
                                   np.where(vals > 0, vals, slope * vals), **tol(dtype))
    ex = get_executor()
    assert_allclose(to_dense(ex.apply(g.A, "scale", 3.0))[0], 3 * vals, **tol(dtype))
    assert_allclose(to_dense(ex.apply(g.A, "neg"))[0], -vals)
    dE = gg.ops.exp(g.A)
    assert_allclose(to_dense(ex.leaky_relu_backward(g.A, dE, 0.3))[0],
                               pat * np.exp(vals) * np.where(vals > 0, 1, 0.3), **tol(dtype))
    assert_allclose(to_dense(ex.ewise(ex.apply(g.A, "scale", 2.0), dE, "minus"))[0],
                               pat * (2 * vals - np.exp(vals)), **tol(dtype))
    for op, fn in (("plus", np.add), ("times", np.multiply), ("div", np.divide)):
        assert_allclose(to_dense(ex.ewise(g.A, dE, op))[0],
                                   pat * fn(vals, np.exp(vals)), **tol(dtype))
    assert_allclose(to_dense(ex.apply(g.A, "add", 1.5))[0], pat * (vals + 1.5),
                               **tol(dtype))
    assert_allclose(to_dense(ex.apply(dE, "rdiv", 2.0))[0], pat * 2 / np.exp(vals),
                               **tol(dtype))
    values = ex.edge_values(dE)
    assert_array_equal(to_dense(ex.edge_from_values(g.A, values))[0],
                                  to_dense(dE)[0])
    with pytest.raises(ValueError, match="edge values"):
        ex.edge_from_values(g.A, values[:-1])


# ---------------------------------------------------------------------- products
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("aggr", ["sum", "max", "min", "mean"])
def test_aggregate(dtype, k, aggr):
    g = random_graph(dtype=dtype)
    H = feats(g.n, k, dtype)
    Z = gg.ops.aggregate(g.A, H, aggr)
    assert Z.dtype == dtype and Z.shape == (g.n, k)
    vals, pat = to_dense(g.A)
    assert_allclose(Z, ref_aggregate(vals, pat, H, aggr), **tol(dtype))


def test_aggregate_pattern_max_is_neighbour_max():
    g = random_graph(weighted=False)
    H = feats(g.n, 3, np.float32)
    _, pat = to_dense(g.A)
    Z = gg.ops.aggregate(g.A, H, "max")
    for i in range(g.n):
        expect = H[pat[i]].max(0) if pat[i].any() else np.zeros(3)
        assert_array_equal(Z[i], expect)


@pytest.mark.parametrize("dtype", DTYPES)
def test_spmm_transpose_and_gemm(dtype):
    g = random_graph(dtype=dtype)
    vals, _ = to_dense(g.A)
    H = feats(g.n, 3, dtype)
    assert_allclose(gg.ops.spmm(g.A, H), vals @ H, **tol(dtype))
    assert_allclose(gg.ops.spmm_t(g.A, H), vals.T @ H, **tol(dtype))
    W = feats(3, 2, dtype, 11)
    assert_allclose(gg.ops.gemm(H, W), H @ W, **tol(dtype))


def test_spmm_matches_scipy_on_rectangular_free_graph():
    csr = sp.random(50, 50, 0.1, format="csr", random_state=3, dtype=np.float64)
    H = feats(50, 6, np.float64)
    assert_allclose(gg.ops.spmm(csr, H), csr @ H, rtol=1e-12)


NEGATIVE_AVG = "the semiring 'avg' needs nonnegative edge weights"


def _refusing_avg(S, H, ex):
    """Every public way to aggregate with ``avg`` (on the executor under test)."""
    from gblas_gnn import semirings
    from gblas_gnn.ops import factor

    avg = semirings.get("avg")
    yield "ops.aggregate", lambda: gg.ops.aggregate(S, H, "avg")
    yield "ops.aggregate(object)", lambda: gg.ops.aggregate(S, H, avg)
    yield "ops.spmm", lambda: gg.ops.spmm(S, H, "avg")
    yield "ops.spmm_t", lambda: gg.ops.spmm_t(S, H, "avg")
    yield "semiring.spmm", lambda: avg.spmm(S, H, executor=ex)
    yield "semiring.spmm_t", lambda: avg.spmm_t(S, H, executor=ex)
    yield "composed", lambda: gg.ops.aggregate(S * (factor(H) @ factor(H).T), H, "avg")


@pytest.mark.parametrize("dtype", DTYPES)
def test_avg_refuses_negative_weights_the_same_way_everywhere(dtype, executor):
    """``avg`` is a semiring only for nonnegative weights: every way to it raises one error
    before it returns anything (the semiring object, ``gg.ops`` with the name or the object,
    the transpose product and a composed expression)."""
    g = random_graph(dtype=dtype)
    ok = gg.Graph.from_edges(*g.to_scipy().nonzero()[::-1], g.n, dtype=dtype)   # all 1
    H = executor.asarray(feats(g.n, 3, dtype))
    for what, call in _refusing_avg(g.A, H, executor):
        with pytest.raises(ValueError, match=NEGATIVE_AVG):
            call()
            pytest.fail(what)
    for what, call in _refusing_avg(ok.A, H, executor):
        if what != "composed":                      # (its scores are negative by design)
            assert gg.to_numpy(call()).shape == (g.n, 3), what


def test_avg_layer_refuses_negative_attention_and_keeps_nothing():
    """A layer aggregating with ``avg`` over signed attention (VA without softmax) raises the
    same error and records nothing a backward could use."""
    g = random_graph(dtype=np.float64)
    layer = gg.nn.VAConv(4, 3, aggr="avg", dtype=np.float64)
    H = get_executor().asarray(feats(g.n, 4, np.float64))      # signed: signed dots
    with pytest.raises(ValueError, match=NEGATIVE_AVG):
        layer(g, H)
    with pytest.raises(RuntimeError, match="forward in training mode first"):
        layer.backward(get_executor().asarray(np.ones((g.n, 3))))


@settings(deadline=None, max_examples=40)
@given(n=st.integers(1, 12), m=st.integers(0, 40), k=st.integers(1, 4),
       seed=st.integers(0, 2**16), aggr=st.sampled_from(["sum", "max", "min", "mean"]))
def test_aggregate_property(n, m, k, seed, aggr):
    rng = np.random.default_rng(seed)
    g = gg.Graph.from_edges(rng.integers(0, n, m), rng.integers(0, n, m), n,
                            values=rng.integers(-3, 4, m).astype(np.float64),
                            dtype=np.float64)
    H = rng.integers(-4, 5, (n, k)).astype(np.float64)   # exact arithmetic
    vals, pat = to_dense(g.A)
    assert_allclose(gg.ops.aggregate(g.A, H, aggr),
                               ref_aggregate(vals, pat, H, aggr), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------- aggregate backward
@pytest.mark.parametrize("aggr", ["sum", "max", "min", "mean"])
def test_aggregate_backward_finite_differences(aggr):
    g = random_graph(dtype=np.float64, n=7, m=20)
    ex = get_executor()
    H = ex.asarray(feats(g.n, 3, np.float64))
    R = ex.asarray(feats(g.n, 3, np.float64, 42))
    edge_vals = ex.edge_values(g.A)

    def loss(vals, H):
        S = ex.edge_from_values(g.A, vals)
        return float(np.sum(R * ex.aggregate(S, H, aggr)))

    _, ctx = ex.aggregate(g.A, H, aggr, keep_context=True)
    dS, dH = ex.aggregate_backward(ctx, R)
    eps = 1e-6
    num_dS = np.zeros_like(edge_vals)
    for p in range(edge_vals.size):
        e = np.zeros_like(edge_vals)
        e[p] = eps
        num_dS[p] = (loss(edge_vals + e, H) - loss(edge_vals - e, H)) / (2 * eps)
    num_dH = np.zeros_like(H)
    for idx in np.ndindex(H.shape):
        e = np.zeros_like(H)
        e[idx] = eps
        num_dH[idx] = (loss(edge_vals, H + e) - loss(edge_vals, H - e)) / (2 * eps)
    assert_allclose(ex.edge_values(dS), num_dS, rtol=1e-6, atol=1e-8)
    assert_allclose(dH, num_dH, rtol=1e-6, atol=1e-8)


def test_max_tie_goes_to_first_stored_entry():
    g = gg.Graph.from_edges([1, 2], [0, 0], 3, dtype=np.float64)
    ex = get_executor()
    H = ex.asarray(np.array([[0.0], [5.0], [5.0]]))
    Z, ctx = ex.aggregate(g.A, H, "max", keep_context=True)
    dS, dH = ex.aggregate_backward(ctx, ex.asarray(np.ones((3, 1))))
    assert to_numpy(Z)[0, 0] == 5.0
    assert_array_equal(ex.edge_values(dS), [5.0, 0.0])
    assert_array_equal(dH[:, 0], [0.0, 1.0, 0.0])


def test_semiring_aggregation_has_no_backward():
    g = random_graph()
    with pytest.raises(ValueError, match="named aggregations"):
        get_executor().aggregate(g.A, feats(g.n, 2, np.float32), "min_plus", keep_context=True)


# ---------------------------------------------------------------------- errors
def test_errors():
    g = random_graph()
    H = feats(g.n, 3, np.float32)
    with pytest.raises(ValueError, match="rows"):
        gg.ops.aggregate(g.A, H[:-1])
    with pytest.raises(TypeError, match="float64 but the sparse operand is float32"):
        gg.ops.aggregate(g.A, H.astype(np.float64))
    with pytest.raises(ValueError, match="NaN or Inf"):
        gg.ops.aggregate(g.A, np.full_like(H, np.nan))
    with pytest.raises(ValueError, match="unknown aggregation"):
        gg.ops.aggregate(g.A, H, "median")
    with pytest.raises(TypeError, match=r"(numpy|cupy)\.ndarray"):
        gg.ops.aggregate(g.A, H.tolist())
    with pytest.raises(TypeError, match="graphblas.Matrix or scipy.sparse"):
        gg.ops.softmax(np.eye(3))
    with pytest.raises(TypeError, match="FP32 or FP64"):
        gg.ops.softmax(gb.Matrix(int, 2, 2))
    with pytest.raises(ValueError, match="same number of columns"):
        gg.ops.sddmm(g.A, H, H[:, :2])
    with pytest.raises(ValueError, match="length"):
        gg.ops.outer_add(g.A, H[:-1, 0].copy(), H[:, 0].copy())
    with pytest.raises(ValueError, match="op must be"):
        gg.ops.row_scale(g.A, H[:, 0].copy(), "pow")
    with pytest.raises(ValueError, match="negative_slope"):
        gg.ops.leaky_relu(g.A, -1.0)
    with pytest.raises(ValueError, match="rows"):
        gg.ops.gemm(H, feats(2, 2, np.float32))
    with pytest.raises(ValueError, match="unknown executor"):
        gg.ops.softmax(g.A, executor="tpu")


def test_spmm_with_all_zero_weights_returns_a_full_zero_matrix():
    """Regression: SuiteSparse keeps ``Z << 0`` iso-valued when nothing is added to it."""
    g = gg.Graph.from_edges(np.array([0]), np.array([1]), 25)
    S = gg.ops.outer_add(g.A, np.zeros(25, np.float32), np.zeros(25, np.float32))
    Z = gg.ops.aggregate(S, np.ones((25, 1), np.float32), "sum")
    assert Z.shape == (25, 1) and not Z.any()
