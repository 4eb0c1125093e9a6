"""Conformance of the executor under test (each of ``--executors``, cpu and primitives by
default; or ``--executor NAME``) to the interface.

Every operation of :class:`gblas_gnn.executors.Executor` is held to dense numpy on small
random graphs (isolated vertices, self loops, one long row, the empty graph; float32 and
float64), and the operations the ``primitives`` executor builds from the primitives are also
held to it. A new executor passes this file before anything else.

Edge tensors are made and read through the executor only (``edge_from_values`` /
``edge_values``, CSR order of the adjacency), so the file is written for any edge type.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from random_reference import uniform

import gblas_gnn as gg
from gblas_gnn import semirings
from gblas_gnn.executors import PrimitivesExecutor, get_executor, to_numpy

REFERENCE = PrimitivesExecutor()
SHIPPED = ["plus_times", "min_plus", "max_plus", "max_times", "min_times", "avg"]


def under_test():
    return get_executor()


# ---------------------------------------------------------------------- cases
class Case:
    """A random graph with its CSR coordinates, features and edge values (host arrays)."""

    def __init__(self, seed: int, n: int, m: int, dtype, long_row: bool):
        rng = np.random.default_rng(seed)
        self.dtype = np.dtype(dtype)
        src = rng.integers(0, max(n - 2, 1), m)       # vertices n-2, n-1: isolated
        dst = rng.integers(0, max(n - 2, 1), m)
        if long_row and n > 2:                        # vertex 0 hears from everyone
            src = np.r_[src, np.arange(n - 2)]
            dst = np.r_[dst, np.zeros(n - 2, np.int64)]
        self.g = gg.Graph.from_edges(src, dst, n, dtype=dtype)
        csr = self.g.to_scipy()
        csr.sort_indices()
        self.n, self.nnz = n, csr.nnz
        self.rows = np.repeat(np.arange(n), np.diff(csr.indptr))
        self.cols = csr.indices.astype(np.int64)
        self.rng = rng

    def dense(self, k: int, scale: float = 1.0) -> np.ndarray:
        return (self.rng.standard_normal((self.n, k)) * scale).astype(self.dtype)

    def values(self, positive: bool = False) -> np.ndarray:
        v = self.rng.uniform(0.5, 2.0, self.nnz) if positive else \
            self.rng.standard_normal(self.nnz)
        return v.astype(self.dtype)

    def full(self, values) -> np.ndarray:
        """An edge-value array as a dense n×n matrix (0 off the pattern)."""
        M = np.zeros((self.n, self.n), np.float64)
        M[self.rows, self.cols] = to_numpy(values)
        return M

    def present(self) -> np.ndarray:
        P = np.zeros((self.n, self.n), bool)
        P[self.rows, self.cols] = True
        return P


cases = st.builds(
    Case,
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 14),
    m=st.integers(0, 50),
    dtype=st.sampled_from([np.float32, np.float64]),
    long_row=st.booleans(),
)
SETTINGS = settings(max_examples=25, deadline=None)


def close(got, want, dtype, scale=1.0):
    tol = 2e-5 if np.dtype(dtype) == np.float32 else 1e-11
    np.testing.assert_allclose(to_numpy(got), want, rtol=tol, atol=tol * max(scale, 1.0))


def edge(ex, case, values):
    return ex.edge_from_values(case.g.A, ex.asarray(values))


def read(ex, E):
    return to_numpy(ex.edge_values(E))


# ---------------------------------------------------------------------- dense
@SETTINGS
@given(case=cases, k=st.integers(1, 5), k2=st.integers(1, 4))
def test_dense_products_and_vertex_reductions(case, k, k2):
    ex = under_test()
    X, Y = case.dense(k), case.dense(k2)
    W = case.rng.standard_normal((k, k2)).astype(case.dtype)
    close(ex.gemm(ex.asarray(X), ex.asarray(W)), X @ W, case.dtype, k)
    close(ex.inner(ex.asarray(X), ex.asarray(Y)), X.T @ Y, case.dtype, case.n)
    close(ex.vertex_sum(ex.asarray(X)), X.sum(axis=0), case.dtype, case.n)
    close(ex.row_dot(ex.asarray(X), ex.asarray(X)), (X * X).sum(axis=1), case.dtype, k)
    Y2 = case.dense(k)
    close(ex.row_dot(ex.asarray(X), ex.asarray(Y2)), (X * Y2).sum(axis=1), case.dtype, k)


@SETTINGS
@given(case=cases, k=st.integers(1, 5), k2=st.integers(1, 4))
def test_matmul_backward_alone_and_summed_into_a_cotangent(case, k, k2):
    """``matmul_vjp`` gives ``(G Wᵀ, Xᵀ G)``; with ``into`` the first is added into it and
    it comes back as the first (the sum the tape holds for ``X``, no array of its own)."""
    ex = under_test()
    X, G, P = case.dense(k), case.dense(k2), case.dense(k)
    W = case.rng.standard_normal((k, k2)).astype(case.dtype)
    ga, gw = ex.matmul_vjp(ex.asarray(G), ex.asarray(W), ex.asarray(X))
    close(ga, G @ W.T, case.dtype, k2)
    close(gw, X.T @ G, case.dtype, case.n)
    into = ex.asarray(P.copy())
    ga, gw = ex.matmul_vjp(ex.asarray(G), ex.asarray(W), ex.asarray(X), into=into)
    assert ga is into
    close(into, P + G @ W.T, case.dtype, k2 + 1)
    close(gw, X.T @ G, case.dtype, case.n)
    # with ``out`` (its values unread) the first is written there and comes back as it
    out = ex.asarray(P.copy())
    ga, gw = ex.matmul_vjp(ex.asarray(G), ex.asarray(W), ex.asarray(X), out=out)
    assert ga is out
    close(out, G @ W.T, case.dtype, k2)
    close(gw, X.T @ G, case.dtype, case.n)


@SETTINGS
@given(case=cases, k=st.integers(1, 4), bad=st.sampled_from([None, np.nan, np.inf, -np.inf]),
       which=st.integers(0, 1))
def test_all_finite(case, k, bad, which):
    """One NaN or infinity anywhere in any of the arrays makes them not all finite."""
    ex = under_test()
    arrays = [case.dense(k), case.dense(k)]
    if bad is not None and case.n:
        arrays[which][case.rng.integers(case.n), case.rng.integers(k)] = bad
    assert ex.all_finite(*(ex.asarray(a) for a in arrays)) is (bad is None or not case.n)
    assert ex.all_finite() is True


@SETTINGS
@given(case=cases, k=st.integers(1, 4), opposite=st.booleans())
def test_all_finite_when_the_sum_overflows(case, k, opposite):
    """Finite values whose sum overflows are all finite; an infinity and its opposite, whose
    sum is NaN, are not (an executor may test the sum first)."""
    ex = under_test()
    if not case.n:
        return
    X = case.dense(k)
    big = np.finfo(case.dtype).max
    X[:] = big
    if opposite:
        X[0, 0], X[-1, -1] = np.inf, -np.inf
    assert ex.all_finite(ex.asarray(X)) is (not opposite)


@SETTINGS
@given(case=cases, k=st.integers(1, 5), two=st.booleans())
def test_combine_rows(case, k, two):
    """``O_i = a_i X_i + b_i Y_i`` (or ``a_i X_i``), a fresh array: the inputs stay."""
    ex = under_test()
    X, Y = case.dense(k), case.dense(k)
    a, b = case.dense(1)[:, 0], case.dense(1)[:, 0]
    want = a[:, None] * X + (b[:, None] * Y if two else 0)
    args = (ex.asarray(a), ex.asarray(X)) + ((ex.asarray(b), ex.asarray(Y)) if two else ())
    got = ex.combine_rows(*args)
    close(got, want.astype(case.dtype), case.dtype, 2)
    assert to_numpy(got).dtype == case.dtype
    np.testing.assert_array_equal(to_numpy(args[1]), X)


@SETTINGS
@given(case=cases, k=st.integers(1, 5), two=st.booleans())
def test_combine_rows_into_x(case, k, two):
    """With ``overwrite`` the same combination, written into ``X`` itself (no fresh array);
    ``Y`` and the coefficients stay."""
    ex = under_test()
    X, Y = case.dense(k), case.dense(k)
    a, b = case.dense(1)[:, 0], case.dense(1)[:, 0]
    want = a[:, None] * X + (b[:, None] * Y if two else 0)
    Xd = ex.asarray(X.copy())
    args = (ex.asarray(a), Xd) + ((ex.asarray(b), ex.asarray(Y)) if two else ())
    got = ex.combine_rows(*args, overwrite=True)
    close(got, want.astype(case.dtype), case.dtype, 2)
    close(Xd, want.astype(case.dtype), case.dtype, 2)
    if two:
        np.testing.assert_array_equal(to_numpy(args[3]), Y)


# ---------------------------------------------------------------------- edge primitives
@SETTINGS
@given(case=cases)
def test_edge_values_gathers_and_ids(case):
    ex = under_test()
    v = case.values()
    E = edge(ex, case, v)
    np.testing.assert_array_equal(read(ex, E), v)
    u, w = case.dense(1)[:, 0], case.dense(1)[:, 0]
    np.testing.assert_array_equal(to_numpy(ex.gather_rows(E, ex.asarray(u))), u[case.rows])
    np.testing.assert_array_equal(to_numpy(ex.gather_cols(E, ex.asarray(w))), w[case.cols])
    rows, cols = ex.edge_ids(case.g.A)
    np.testing.assert_array_equal(to_numpy(rows), case.rows)
    np.testing.assert_array_equal(to_numpy(cols), case.cols)
    with pytest.raises(ValueError, match="edge values"):
        ex.edge_from_values(case.g.A, ex.asarray(np.ones(case.nnz + 1, case.dtype)))


@SETTINGS
@given(case=cases, op=st.sampled_from(["sum", "max", "min"]))
def test_row_and_column_reductions(case, op):
    ex = under_test()
    v = case.values()
    E = edge(ex, case, v)
    fn = {"sum": np.add, "max": np.maximum, "min": np.minimum}[op]
    for axis, got in ((0, ex.row_reduce(E, op)), (1, ex.col_reduce(E, op))):
        key = case.rows if axis == 0 else case.cols
        want = np.zeros(case.n)
        for r in range(case.n):
            sel = v[key == r].astype(np.float64)
            if sel.size:
                want[r] = fn.reduce(sel)
        close(got, want, case.dtype, 4)


@SETTINGS
@given(case=cases, k=st.integers(1, 4))
def test_sddmm(case, k):
    ex = under_test()
    X, Y = case.dense(k), case.dense(k)
    E = ex.sddmm(case.g.A, ex.asarray(X), ex.asarray(Y))
    close(read(ex, E), (X.astype(np.float64) @ Y.T)[case.rows, case.cols], case.dtype, k)


# ---------------------------------------------------------------------- semirings
def semiring_reference(sr, values, rows, cols, H, m):
    Z = np.zeros((m, H.shape[1]), H.dtype)
    for r in range(m):
        acc = None
        for e in np.flatnonzero(rows == r):
            term = sr.mul(values[e].astype(H.dtype), H[cols[e]])
            acc = term if acc is None else sr.add(acc, term)
        if acc is not None:
            Z[r] = sr.readout(acc)
    return Z


@pytest.mark.parametrize("name", SHIPPED)
@SETTINGS
@given(case=cases, k=st.integers(1, 3))
def test_spmm_over_every_semiring(name, case, k):
    ex = under_test()
    sr = semirings.get(name)
    v = case.values(positive=sr.nonnegative_weights)
    E = edge(ex, case, v)
    H = case.dense(k)
    for transpose in (False, True):
        rows, cols = (case.cols, case.rows) if transpose else (case.rows, case.cols)
        want = semiring_reference(sr, v, rows, cols, H, case.n)
        got = (ex.spmm_t if transpose else ex.spmm)(E, ex.asarray(H), name)
        close(got, want, case.dtype, 8)


@SETTINGS
@given(case=cases, k=st.integers(1, 4), weight=st.sampled_from([None, 0.0, 1.5]),
       with_bias=st.booleans())
def test_spmm_affine(case, k, weight, with_bias):
    """``op(S) H + w H + 1 bᵀ``: the plus_times product with the self term and bias that the
    convolution layers fuse into it, both orientations."""
    ex = under_test()
    v = case.values()
    E, S = edge(ex, case, v), case.full(v)
    H = case.dense(k)
    b = case.dense(k)[0] if with_bias else None
    w = None if weight is None else np.asarray([weight], case.dtype)
    for transpose in (False, True):
        want = (S.T if transpose else S) @ H.astype(np.float64)
        if w is not None:
            want = want + weight * H
        if b is not None:
            want = want + b
        got = ex.spmm_affine(E, ex.asarray(H), None if w is None else ex.asarray(w),
                             None if b is None else ex.asarray(b), transpose=transpose)
        close(got, want, case.dtype, 8)


# ---------------------------------------------------------------------- softmax
@SETTINGS
@given(case=cases, scale=st.sampled_from([1.0, 1e3]))
def test_softmax_and_backward(case, scale):
    ex = under_test()
    v = case.values() * case.dtype.type(scale)
    P, present = case.full(v), case.present()
    want = np.zeros_like(P)
    for i in range(case.n):
        if present[i].any():
            e = np.exp(P[i, present[i]] - P[i, present[i]].max())
            want[i, present[i]] = e / e.sum()
    Psi = ex.softmax(edge(ex, case, v))
    close(read(ex, Psi), want[case.rows, case.cols], case.dtype)
    dv = case.values()
    dPsi = case.full(dv)
    t = (want * dPsi).sum(axis=1, keepdims=True)
    dS = ex.softmax_backward(Psi, edge(ex, case, dv))
    close(read(ex, dS), (want * (dPsi - t))[case.rows, case.cols], case.dtype, 4)


# ---------------------------------------------------------------------- aggregation
def extreme_reference(S, present, H, is_max):
    """Z, and the winner of every (row, feature): ties to the lowest source id."""
    n, k = S.shape[0], H.shape[1]
    Z, arg = np.zeros((n, k)), -np.ones((n, k), np.int64)
    for i in range(n):
        js = np.flatnonzero(present[i])
        if js.size == 0:
            continue
        msgs = S[i, js][:, None] * H[js]
        idx = (np.argmax if is_max else np.argmin)(msgs, axis=0)   # first extreme
        Z[i] = msgs[idx, np.arange(k)]
        arg[i] = js[idx]
    return Z, arg


@pytest.mark.parametrize("aggr", ["sum", "mean", "max", "min"])
@SETTINGS
@given(case=cases, k=st.integers(1, 3))
def test_aggregate_and_backward(aggr, case, k):
    ex = under_test()
    v = case.values()
    S, present = case.full(v), case.present()
    H, dZ = case.dense(k), case.dense(k)
    Hd, dZd = H.astype(np.float64), dZ.astype(np.float64)
    Z, ctx = ex.aggregate(edge(ex, case, v), ex.asarray(H), aggr, keep_context=True)
    counts = np.maximum(present.sum(axis=1), 1)[:, None]
    if aggr in ("sum", "mean"):
        div = counts if aggr == "mean" else 1
        want_Z = S @ Hd / div
        G = dZd / div
        want_dS = (G @ Hd.T)[case.rows, case.cols]
        want_dH = S.T @ G
    else:
        want_Z, arg = extreme_reference(S, present, Hd, aggr == "max")
        want_dS = np.zeros(case.nnz)
        want_dH = np.zeros_like(Hd)
        pos = {(i, j): e for e, (i, j) in enumerate(zip(case.rows, case.cols, strict=True))}
        for i, c in zip(*np.nonzero(arg >= 0), strict=True):
            j = arg[i, c]
            want_dS[pos[(i, j)]] += dZd[i, c] * Hd[j, c]
            want_dH[j, c] += dZd[i, c] * S[i, j]
    close(Z, want_Z, case.dtype, 4)
    dS, dH = ex.aggregate_backward(ctx, ex.asarray(dZ))
    close(read(ex, dS), want_dS, case.dtype, 8)
    close(dH, want_dH, case.dtype, 8)


def test_aggregate_backward_of_a_semiring_is_refused():
    ex = under_test()
    case = Case(0, 6, 12, np.float32, False)
    E = edge(ex, case, case.values())
    with pytest.raises(ValueError, match="semiring"):
        ex.aggregate(E, ex.asarray(case.dense(2)), "max_plus", keep_context=True)


# ---------------------------------------------------------------------- random masks
@SETTINGS
@given(case=cases, heads=st.integers(1, 3), p=st.sampled_from([0.0, 0.3, 0.9]),
       key=st.integers(0, 2**64 - 1))
def test_dropout_masks_follow_the_documented_hash(case, heads, p, key):
    ex = under_test()
    scales = to_numpy(ex.dropout_edges(case.g.A, key, p, heads, case.dtype))
    want = np.array([[1 / (1 - p) if uniform(key, h, i, j) >= p else 0.0
                      for i, j in zip(case.rows, case.cols, strict=True)]
                     for h in range(heads)]).reshape(heads, case.nnz)
    assert scales.dtype == case.dtype
    close(scales, want, case.dtype)
    ids = case.rng.permutation(50)[:case.n]
    keep = to_numpy(ex.keep_mask(key, p, (case.n, 3), ids))
    np.testing.assert_array_equal(
        keep, np.array([[uniform(key, 0, int(i), c) >= p for c in range(3)] for i in ids],
                       bool).reshape(case.n, 3))
    np.testing.assert_array_equal(to_numpy(ex.keep_mask(key, p, (case.n, 3))),
                                  to_numpy(ex.keep_mask(key, p, (case.n, 3),
                                                        np.arange(case.n))))


# ---------------------------------------------------------------------- edge algebra
@SETTINGS
@given(case=cases, alpha=st.sampled_from([0.0, 0.2, 1.5]))
def test_edge_algebra(case, alpha):
    ex = under_test()
    a, b = case.values(), case.values(positive=True)
    E, F = edge(ex, case, a), edge(ex, case, b)
    u, w = case.dense(1)[:, 0], case.rng.uniform(0.5, 2, case.n).astype(case.dtype)
    A64, B64 = a.astype(np.float64), b.astype(np.float64)
    r, c = case.rows, case.cols
    checks = [
        (ex.pattern(case.g.A, 2.5, case.dtype), np.full(case.nnz, 2.5)),
        (ex.apply(E, "exp"), np.exp(A64)),
        (ex.apply(E, "relu"), np.maximum(A64, 0)),
        (ex.apply(E, "neg"), -A64),
        (ex.apply(E, "leaky_relu", alpha), np.where(A64 > 0, A64, alpha * A64)),
        (ex.apply(E, "scale", 3.0), 3 * A64),
        (ex.apply(E, "add", 1.5), A64 + 1.5),
        (ex.apply(F, "rdiv", 2.0), 2 / B64),
        (ex.leaky_relu_backward(E, F, alpha), np.where(A64 > 0, B64, alpha * B64)),
        (ex.ewise(E, F, "plus"), A64 + B64),
        (ex.ewise(E, F, "minus"), A64 - B64),
        (ex.ewise(E, F, "times"), A64 * B64),
        (ex.ewise(E, F, "div"), A64 / B64),
        (ex.row_scale(E, ex.asarray(w), "times"), A64 * w[r]),
        (ex.row_scale(E, ex.asarray(w), "div"), A64 / w[r]),
        (ex.row_scale(E, ex.asarray(u), "plus"), A64 + u[r]),
        (ex.row_scale(E, ex.asarray(u), "minus"), A64 - u[r]),
        (ex.col_scale(E, ex.asarray(w), "times"), A64 * w[c]),
        (ex.col_scale(E, ex.asarray(w), "div"), A64 / w[c]),
        (ex.col_scale(E, ex.asarray(u), "plus"), A64 + u[c]),
        (ex.col_scale(E, ex.asarray(u), "minus"), A64 - u[c]),
        (ex.scale_edges(E, ex.asarray(u), ex.asarray(w)), A64 * u[r] * w[c]),
        (ex.outer_add(case.g.A, ex.asarray(u), ex.asarray(w)), u[r] + w[c]),
    ]
    for i, (got, want) in enumerate(checks):
        vals = read(ex, got)
        assert vals.dtype == case.dtype, i
        close(vals, want, case.dtype, 8)
    with pytest.raises(ValueError):
        ex.apply(E, "cube")
    with pytest.raises(ValueError):
        ex.ewise(E, F, "pow")
