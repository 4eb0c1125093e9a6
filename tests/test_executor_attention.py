"""The attention of the executor under test (the cpu executor's fused kernels by default)
equals the same operations written with the executor primitives (the base-class defaults of
the ``primitives`` executor), forward and backward, for every shape the layers use: one or
several heads, dropout scales, sum / mean, empty rows and columns."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gblas_gnn as gg
from gblas_gnn.executors import PrimitivesExecutor, get_executor
from gblas_gnn.executors.cpu._pattern import CSRPattern, MatrixCache

REFERENCE = PrimitivesExecutor()


def under_test():
    """The executor under test (``--executor``; the cpu executor by default)."""
    return get_executor()


def _graph(seed: int, n: int, m: int, dtype=np.float64) -> gg.Graph:
    rng = np.random.default_rng(seed)
    # vertices ≥ n - 2 get no edges at all: empty rows and empty columns
    src, dst = rng.integers(0, n - 2, m), rng.integers(0, n - 2, m)
    return gg.Graph.from_edges(src, dst, n, dtype=dtype)


def _close(a, b, dtype):
    tol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


cases = st.fixed_dictionaries({
    "seed": st.integers(0, 2**31 - 1),
    "n": st.integers(3, 30),
    "m": st.integers(0, 120),
    "heads": st.integers(1, 3),
    "width": st.integers(1, 9),
    "masked": st.booleans(),
    "biased": st.booleans(),
    "aggr": st.sampled_from(["sum", "mean"]),
    "slope": st.sampled_from([0.0, 0.2, 1.5]),
    "dtype": st.sampled_from([np.float32, np.float64]),
})


@settings(max_examples=60, deadline=None)
@given(cases)
def test_additive_attention_fused_equals_primitives(c):
    g = _graph(c["seed"], c["n"], c["m"], c["dtype"])
    rng = np.random.default_rng(c["seed"] + 1)
    heads, dt = c["heads"], c["dtype"]
    X = rng.standard_normal((g.n, heads * c["width"])).astype(dt)
    d, s = (rng.standard_normal((g.n, heads)).astype(dt) for _ in range(2))
    mask = None
    if c["masked"]:
        mask = np.where(rng.random((heads, g.nnz)) >= 0.4, 1 / 0.6, 0).astype(dt)
    bias = rng.standard_normal(X.shape[1]).astype(dt) if c["biased"] else None
    tested = under_test()
    outs = [ex.additive_attention(g.A, d, s, X, c["slope"], mask, c["aggr"], True, bias)
            for ex in (tested, REFERENCE)]
    _close(outs[0][0], outs[1][0], dt)
    dZ = rng.standard_normal(outs[0][0].shape).astype(dt)
    grads = [ex.additive_attention_backward(ctx, dZ)
             for ex, (_, ctx) in zip((tested, REFERENCE), outs, strict=True)]
    for a, b in zip(*grads, strict=True):
        _close(a, b, dt)
    # inference: the same Z without a context (the sum kernel starts rows from the bias)
    _close(tested.additive_attention(g.A, d, s, X, c["slope"], mask, c["aggr"], bias=bias),
           outs[1][0], dt)
    if bias is not None:
        unbiased = REFERENCE.additive_attention(g.A, d, s, X, c["slope"], mask, c["aggr"])
        _close(outs[1][0] - bias, unbiased, dt)


@settings(max_examples=60, deadline=None)
@given(cases)
def test_dot_attention_fused_equals_primitives(c):
    g = _graph(c["seed"], c["n"], c["m"], c["dtype"])
    rng = np.random.default_rng(c["seed"] + 2)
    dt = c["dtype"]
    P, Q = (rng.standard_normal((g.n, c["width"])).astype(dt) for _ in range(2))
    X = rng.standard_normal((g.n, c["heads"] + 2)).astype(dt)
    beta = c["slope"] - 0.7
    scale = None
    if c["masked"]:                      # messages diag(scale) Q, as AGNN aggregates H
        X, scale = Q, rng.random(g.n).astype(dt) + 0.5
    tested = under_test()
    outs = [ex.dot_attention(g.A, P, Q, beta, X, c["aggr"], True, scale)
            for ex in (tested, REFERENCE)]
    _close(outs[0][0], outs[1][0], dt)
    dZ = rng.standard_normal(outs[0][0].shape).astype(dt)
    grads = [ex.dot_attention_backward(ctx, dZ)
             for ex, (_, ctx) in zip((tested, REFERENCE), outs, strict=True)]
    for a, b in zip(*grads, strict=True):
        _close(a, b, dt)


def test_softmax_rows_are_stable_for_huge_scores():
    """exp(e − max) never overflows: scores of 1e4 still give a finite convex combination."""
    g = _graph(0, 12, 40, np.float32).with_self_loops()
    X = np.arange(g.n, dtype=np.float32)[:, None]
    d = np.full((g.n, 1), 1e4, np.float32)
    Z = under_test().additive_attention(g.A, d, np.zeros_like(d), X, 0.2)
    assert np.isfinite(Z).all()
    assert (Z >= 0).all() and (Z <= g.n - 1).all()


def test_fused_rejects_features_of_the_wrong_length():
    g = _graph(0, 10, 30)
    d = np.zeros((g.n, 1))
    with pytest.raises(ValueError, match="rows"):
        under_test().additive_attention(g.A, d, d, np.zeros((g.n + 1, 2)), 0.2)


@pytest.mark.cpu_only
def test_pattern_csc_view_is_the_transpose():
    g = _graph(3, 25, 90)
    pattern = CSRPattern(g.A)
    colptr, perm, rows = pattern.csc()
    coo = g.to_scipy().tocoo()
    order = np.lexsort((coo.col, coo.row))                 # CSR order
    r, c = coo.row[order], coo.col[order]
    for j in range(g.n):
        slots = slice(colptr[j], colptr[j + 1])
        assert (c[perm[slots]] == j).all()
        assert (r[perm[slots]] == rows[slots]).all()
        assert (np.diff(rows[slots]) > 0).all()           # rows ascending within a column


@pytest.mark.cpu_only
def test_pattern_cache_follows_the_matrix():
    cache = MatrixCache(CSRPattern)
    g = _graph(4, 20, 60)
    first = cache.get(g.A)
    assert cache.get(g.A) is first                         # reused while the matrix lives
    other = _graph(5, 20, 60)
    assert cache.get(other.A) is not first
    del other
    import gc
    gc.collect()
    assert len(cache._entries) == 1                        # dropped with its matrix


@pytest.mark.parametrize("aggr", ["sum", "mean"])
def test_backward_ignores_in_place_changes_to_the_output(aggr):
    """The fused backward reads the forward's Z (softmax term ⟨dZ_i, Z_i⟩) from its context:
    a caller adding a bias in place to the returned Z must not change the gradients."""
    g = _graph(6, 20, 70, np.float32).with_self_loops()
    rng = np.random.default_rng(6)
    X = rng.standard_normal((g.n, 4)).astype(np.float32)
    d, s = (rng.standard_normal((g.n, 1)).astype(np.float32) for _ in range(2))
    dZ = rng.standard_normal((g.n, 4)).astype(np.float32)
    tested = under_test()
    Z, ctx = tested.additive_attention(g.A, d, s, X, 0.2, aggr=aggr, keep_context=True)
    expected = tested.additive_attention_backward(ctx, dZ)
    Z += 100.0
    for a, b in zip(tested.additive_attention_backward(ctx, dZ), expected, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("which", ["under test", "primitives"])
@pytest.mark.parametrize("bias", [np.zeros(3), np.zeros((1, 4)), np.zeros(5)])
def test_additive_attention_rejects_a_bias_of_the_wrong_shape(which, bias):
    ex = under_test() if which == "under test" else REFERENCE
    g = _graph(0, 6, 12)
    d = np.zeros((g.n, 1))
    with pytest.raises(ValueError, match=r"bias must have shape \(4,\)"):
        ex.additive_attention(g.A, d, d, np.zeros((g.n, 4)), 0.2, bias=bias)
