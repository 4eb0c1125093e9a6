"""The max/min kernels of the cpu executor (:mod:`gblas_gnn.executors.cpu._minmax_kernels`)
against per-vertex loops and dense numpy, on random graphs with empty rows and many ties
(small integer values, so that every product is exact and equal messages are common), in
float32 and float64:

* the row kernel: ``Z = max / min_p w_p ⊗ X[idx[p]]`` and the winner (the first stored
  entry of a tie, the lowest source id; −1 for an empty row), ``⊗ ∈ {×, +}``, iso-valued or
  not, with and without winners, for any chunking of the rows; the NaN rule (a NaN is kept
  only when it comes first in its row);
* the backward kernels: the winners' edge and feature gradients, with heads;
* the public ``gg.ops.aggregate(S, H, "max" | "min")``, the executor's backward, and a
  composed formulation's forward, evaluation and derived backward (the generated kernels),
  all against one dense reference.
"""

from __future__ import annotations

from unittest import mock

import graphblas as gb
import numpy as np
import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

import gblas_gnn as gg
from gblas_gnn import compose, ops
from gblas_gnn.executors import CPUExecutor
from gblas_gnn.executors.cpu import _minmax_kernels as mk
from gblas_gnn.executors.cpu import programs
from gblas_gnn.executors.patterns import CSRPattern, balanced_bounds, csr_view, unsigned_view
from gblas_gnn.ops import rep

pytestmark = pytest.mark.cpu_only
SETTINGS = settings(max_examples=40, deadline=None)
DTYPES = [np.float32, np.float64]


def random_matrix(rng, n, m, edges, dtype, iso=False):
    """An n×m ``graphblas.Matrix`` with values in −2…2 (0 included: ties) and its last row
    empty; ``iso``: one value for every entry, stored once."""
    rows = rng.integers(0, n - 1, edges) if n > 1 else np.zeros(0, int)
    cols = rng.integers(0, m, rows.size)
    if iso:
        return gb.Matrix.from_coo(rows, cols, dtype.type(rng.integers(-2, 3)), nrows=n,
                                  ncols=m)
    return gb.Matrix.from_coo(rows, cols, rng.integers(-2, 3, rows.size).astype(dtype),
                              nrows=n, ncols=m, dup_op=gb.binary.first)


def dense(S):
    """``(values, pattern)`` of ``S`` as dense arrays."""
    r, c, v = S.to_coo()
    vals = np.zeros(S.shape, S.dtype.np_type)
    pat = np.zeros(S.shape, bool)
    vals[r, c] = v
    pat[r, c] = True
    return vals, pat


def reference(vals, pat, X, is_max, is_times=True):
    """Per-vertex loop: ``Z[i] = max / min_j S[i,j] ⊗ X[j]`` over the stored ``j`` (0 for an
    empty row) and the winning source of each feature (numpy's argmax / argmin: the first of
    a tie, i.e. the lowest source; −1 for an empty row)."""
    n, k = vals.shape[0], X.shape[1]
    Z = np.zeros((n, k), X.dtype)
    win = np.full((n, k), -1)
    for i in range(n):
        js = np.flatnonzero(pat[i])
        if js.size == 0:
            continue
        w = vals[i, js, None].astype(X.dtype)
        msgs = w * X[js] if is_times else w + X[js]
        pick = np.argmax(msgs, 0) if is_max else np.argmin(msgs, 0)
        Z[i] = msgs[pick, np.arange(k)]
        win[i] = js[pick]
    return Z, win


def run(S, X, is_max, is_times=True, with_arg=True, bounds=None, ahead=None):
    """``(Z, arg, pattern)`` of the row kernel (``bounds``: other row chunks; ``ahead``: a
    prefetch distance, else :func:`mk.run_extreme` picks it)."""
    pattern = CSRPattern(S)
    if bounds is not None:
        pattern._chunks = bounds
    with csr_view(S) as (_, _, values, iso):
        if ahead is None:
            Z, arg = mk.run_extreme(pattern, values, iso, X, is_max=is_max,
                                    is_times=is_times, with_arg=with_arg)
            return Z, arg, pattern
        Z = np.empty((pattern.nrows, X.shape[1]), X.dtype)
        arg = np.empty(Z.shape, np.int32)
        mk.extreme_rows(pattern.chunks, unsigned_view(pattern.indptr),
                        unsigned_view(pattern.indices),
                        values.astype(X.dtype), iso, X, X.dtype.type(1 if is_max else -1),
                        is_times, ahead, Z, arg)
    return Z, arg, pattern


graphs = st.builds(lambda s, n, m, edges, dtype, iso: (np.random.default_rng(s), n, m, edges,
                                                       np.dtype(dtype), iso),
                   s=st.integers(0, 2**31 - 1), n=st.integers(0, 14), m=st.integers(1, 14),
                   edges=st.integers(0, 60), dtype=st.sampled_from(DTYPES),
                   iso=st.booleans())


# ---------------------------------------------------------------------- the row kernel
@seed(20)
@SETTINGS
@given(spec=graphs, k=st.integers(0, 19), is_max=st.booleans(), is_times=st.booleans())
def test_row_kernel_equals_the_per_vertex_loop(spec, k, is_max, is_times):
    rng, n, m, edges, dtype, iso = spec
    S = random_matrix(rng, n, m, edges, dtype, iso=iso)
    X = rng.integers(-3, 4, (m, k)).astype(dtype)
    vals, pat = dense(S)
    Z_ref, win_ref = reference(vals, pat, X, is_max, is_times)
    Z, arg, pattern = run(S, X, is_max, is_times)
    assert Z.dtype == dtype and arg.dtype == np.int32
    np.testing.assert_array_equal(Z, Z_ref)
    # the winners' sources (arg = −1 picks the −1 appended)
    np.testing.assert_array_equal(np.append(pattern.indices, -1)[arg], win_ref)
    if n:
        assert (arg[n - 1] == -1).all() and (Z[n - 1] == 0).all()          # the empty row
    # winners lie in their own row, and without winners the values are the same
    rows = np.repeat(np.arange(n), k).reshape(n, k)
    ok = arg >= 0
    assert ((pattern.indptr[rows] <= arg) & (arg < pattern.indptr[rows + 1]))[ok].all()
    compiled = set(mk.extreme_rows.signatures)
    np.testing.assert_array_equal(run(S, X, is_max, is_times, with_arg=False)[0], Z)
    assert set(mk.extreme_rows.signatures) == compiled      # one compilation serves both


@seed(21)
@SETTINGS
@given(spec=graphs, k=st.integers(1, 9), is_max=st.booleans(), chunk=st.integers(1, 40),
       ahead=st.integers(1, 9))
def test_row_kernel_does_not_depend_on_the_chunking(spec, k, is_max, chunk, ahead):
    """Nor on the prefetch distance (graphs this small get none from run_extreme)."""
    rng, n, m, edges, dtype, iso = spec
    S = random_matrix(rng, n, m, edges, dtype, iso=iso)
    X = rng.standard_normal((m, k)).astype(dtype)
    Z, arg, pattern = run(S, X, is_max)
    for Z2, arg2, _ in (run(S, X, is_max, bounds=balanced_bounds(pattern.indptr, chunk)),
                        run(S, X, is_max, ahead=ahead)):
        np.testing.assert_array_equal(Z2, Z)
        np.testing.assert_array_equal(arg2, arg)
    # random floats: the same values as numpy's, ties to the lowest source
    vals, pat = dense(S)
    Z_ref, _ = reference(vals, pat, X, is_max)
    np.testing.assert_array_equal(Z, Z_ref)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_max", [True, False])
def test_row_kernel_nan_rule(dtype, is_max):
    """A NaN message is kept when it comes first in its row (nothing compares above it)
    and skipped after the first entry (it compares above nothing), as before."""
    S = gb.Matrix.from_coo([0, 0, 0, 1, 1, 1], [0, 1, 2, 0, 1, 2], np.ones(6, dtype),
                           nrows=2, ncols=3)
    X = np.array([[np.nan], [1.0], [2.0]], dtype)
    Xr = np.array([[1.0], [np.nan], [2.0]], dtype)
    for H, first_nan in ((X, True), (Xr, False)):
        Z, arg, _ = run(S, H, is_max)
        if first_nan:
            assert np.isnan(Z).all() and (arg == [[0], [3]]).all()
        else:
            want = 2.0 if is_max else 1.0
            assert (Z == want).all() and (arg == ([[2], [5]] if is_max else [[0], [3]])).all()


# ---------------------------------------------------------------------- backward kernels
@seed(22)
@SETTINGS
@given(spec=graphs, heads=st.integers(1, 3), width=st.integers(1, 7), is_max=st.booleans(),
       plus=st.booleans())
def test_winner_gradients_equal_the_per_vertex_loop(spec, heads, width, is_max, plus):
    rng, n, m, edges, dtype, iso = spec
    S = random_matrix(rng, n, m, edges, dtype, iso=iso)
    k = heads * width
    X = rng.integers(-3, 4, (m, k)).astype(dtype)
    G = rng.integers(-3, 4, (n, k)).astype(dtype)
    Z, arg, pattern = run(S, X, is_max)
    nnz = pattern.nnz
    W = rng.integers(-2, 3, (nnz, heads)).astype(dtype)
    # the loops: every (row, feature) sends its cotangent to its winner
    dS = np.zeros(nnz, dtype)
    dX = np.zeros((m, k), dtype)
    for i in range(n):
        for c in range(k):
            p = arg[i, c]
            if p >= 0:
                dS[p] += G[i, c] * X[pattern.indices[p], c]
                dX[pattern.indices[p], c] += G[i, c] * (1 if plus else W[p, c // width])
    got = np.full(nnz, np.nan, dtype)
    mk.winner_edges(unsigned_view(pattern.indptr), unsigned_view(pattern.indices), arg, X, G,
                    got)
    np.testing.assert_array_equal(got, dS)
    out = np.zeros((m, k), dtype)
    mk.winner_features(unsigned_view(pattern.indices), None if plus else W, width, arg, G,
                       out)
    np.testing.assert_array_equal(out, dX)


# ---------------------------------------------------------------------- the public paths
def dense_gradients(vals, pat, X, win, G):
    """``dS`` (dense) and ``dX`` of ``Z = max / min_j S[i,j] X[j]`` from its winners."""
    dS = np.zeros(vals.shape, X.dtype)
    dX = np.zeros(X.shape, X.dtype)
    for i, c in zip(*np.nonzero(win >= 0), strict=True):
        j = win[i, c]
        dS[i, j] += G[i, c] * X[j, c]
        dX[j, c] += G[i, c] * vals[i, j]
    return dS, dX


@seed(23)
@settings(max_examples=25, deadline=None)
@given(spec=graphs, k=st.integers(1, 6), aggr=st.sampled_from(["max", "min"]))
def test_public_aggregate_and_its_backward(spec, k, aggr):
    """``gg.ops.aggregate``, the executor's context and backward, against dense numpy."""
    rng, n, m, edges, dtype, iso = spec
    n = m                                        # a graph: square
    S = random_matrix(rng, n, m, edges, dtype, iso=iso)
    H = rng.integers(-3, 4, (m, k)).astype(dtype)
    G = rng.integers(-3, 4, (n, k)).astype(dtype)
    vals, pat = dense(S)
    Z_ref, win = reference(vals, pat, H, aggr == "max")
    ex = CPUExecutor()
    np.testing.assert_array_equal(gg.ops.aggregate(S, H, aggr, executor=ex), Z_ref)
    Z, ctx = ex.aggregate(S, H, aggr, keep_context=True)
    np.testing.assert_array_equal(Z, Z_ref)
    dS_ref, dH_ref = dense_gradients(vals, pat, H, win, G)
    dS, dH = ex.aggregate_backward(ctx, G)
    np.testing.assert_array_equal(dense(dS)[0], dS_ref)
    np.testing.assert_array_equal(dH, dH_ref)
    assert ex.aggregate_backward(ctx, G, need_dS=False)[0] is None


@seed(24)
@settings(max_examples=20, deadline=None)
@given(spec=graphs, k=st.integers(1, 5), aggr=st.sampled_from(["max", "min"]),
       weighted=st.booleans())
def test_composed_aggregate_forward_and_derived_backward(spec, k, aggr, weighted):
    """A composition aggregating with max/min: its generated forward (with winners for a
    backward, without for an evaluation) and derived backward (the messages' gradient
    scattered from the winners) against dense numpy. ``weighted``: the edge weights are
    ``u_i + v_j`` of traced vectors (the root has a cotangent), else A's constant values
    (it has none)."""
    rng, n, m, edges, dtype, iso = spec
    n = m
    A = random_matrix(rng, n, m, edges, dtype, iso=iso)
    H = rng.integers(-3, 4, (n, k)).astype(dtype)
    u = rng.integers(-2, 3, n).astype(dtype)
    v = rng.integers(-2, 3, n).astype(dtype)
    G = rng.integers(-3, 4, (n, k)).astype(dtype)
    ex = CPUExecutor()

    def fn(X, u, v):
        S = ops.structure(A) * (rep(u) + rep(v).T) if weighted else A
        return ops.aggregate(S, X, aggr)

    kernels, modules = programs.kernels, []

    def kept(p):
        modules.append(kernels(p))
        return modules[-1]

    # the generated kernels run it (not the reference lowering): spied on
    with mock.patch.object(programs, "forward", wraps=programs.forward) as spy, \
            mock.patch.object(programs, "kernels", kept):
        out, pull = compose.vjp(fn, H, u, v, executor=ex, vertex=(0, 1, 2))
        dX, du, dv = pull(G)
        forward = modules[0].forward
        compiled = set(forward.signatures)
        evaluated = compose.evaluate(fn, H, u, v, executor=ex, vertex=(0, 1, 2))
    vals, pat = dense(A)
    if weighted:
        vals = np.where(pat, u[:, None] + v[None, :], 0).astype(dtype)
    Z_ref, win = reference(vals, pat, H, aggr == "max")
    dS_ref, dX_ref = dense_gradients(vals, pat, H, win, G)
    np.testing.assert_array_equal(out, Z_ref)
    np.testing.assert_array_equal(dX, dX_ref)
    if weighted:
        np.testing.assert_array_equal(du, dS_ref.sum(1))
        np.testing.assert_array_equal(dv, dS_ref.sum(0))
    # no backward follows: the kernels run without winners, compiled for training already
    np.testing.assert_array_equal(evaluated, Z_ref)
    assert [c.args[2] for c in spy.call_args_list] == [True, False]
    assert modules[-1].forward is forward and set(forward.signatures) == compiled
