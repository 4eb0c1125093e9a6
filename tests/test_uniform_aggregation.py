"""Aggregations in which every edge weighs the same run on the SpMM kernel
(:mod:`gblas_gnn.executors.cpu.uniform_aggregation`): which programs take that path, and
their output and messages' gradient against dense numpy on random patterns (rectangular,
empty rows and columns, no rows or no columns at all, both float dtypes)."""

from __future__ import annotations

import graphblas as gb
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gblas_gnn import compose, ops
from gblas_gnn.executors import get_executor
from gblas_gnn.executors.cpu import uniform_aggregation
from gblas_gnn.ir.program import Op, Structure

pytestmark = pytest.mark.cpu_only


def _pattern(seed: int, m: int, n: int, density: float) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    P = sp.random(m, n, density=density, format="csr", random_state=rng)
    P.data[:] = 1.0
    if m > 1:                                  # the last row has no entry (its mean is 0)
        P = sp.vstack([P[:-1], sp.csr_matrix((1, n))]).tocsr()
    return P


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), m=st.integers(0, 30), n=st.integers(0, 30),
       density=st.sampled_from([0.0, 0.1, 0.5, 1.0]), aggr=st.sampled_from(["sum", "mean"]),
       dtype=st.sampled_from([np.float32, np.float64]))
@example(seed=0, m=0, n=3, density=0.0, aggr="mean", dtype=np.float32)   # no vertex to write
@example(seed=0, m=3, n=0, density=0.0, aggr="sum", dtype=np.float64)    # none to gather
def test_a_structural_aggregation_equals_dense_numpy_forward_and_backward(seed, m, n, density,
                                                                          aggr, dtype):
    P = _pattern(seed, m, n, density)
    coo = P.tocoo()
    A = gb.Matrix.from_coo(coo.row, coo.col, np.ones(coo.nnz), nrows=m, ncols=n, dtype=dtype)
    rng = np.random.default_rng(seed + 1)
    X, R = rng.standard_normal((n, 3)).astype(dtype), rng.standard_normal((m, 3)).astype(dtype)
    D = P.toarray()
    if aggr == "mean":
        D = D / np.maximum(D.sum(axis=1, keepdims=True), 1)
    ex = get_executor("cpu")

    def f(X):
        return ops.aggregate(ops.structure(A), X, aggr)

    calls = []
    real = uniform_aggregation.forward
    uniform_aggregation.forward = lambda *a: calls.append(a) or real(*a)
    try:
        out, pullback = compose.vjp(f, X, executor=ex, vertex=(0,))
    finally:
        uniform_aggregation.forward = real
    assert len(calls) == 1                        # the SpMM kernel's path, not a program's
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12,
                                                                     "atol": 1e-12}
    np.testing.assert_allclose(out, D @ X, **tol)
    assert out.dtype == dtype
    (dX,) = pullback(R)
    np.testing.assert_allclose(dX, D.T @ R, **tol)


def test_only_constant_roots_of_sum_and_mean_take_the_path():
    x = (("x", (4,)),)

    def s(ops_, sink, roles=x):
        return Structure(tuple(ops_), len(ops_) - 1, sink, roles, "float32")

    const = Op("const", (2.5,), (), ())
    assert uniform_aggregation.weight(s([const], ("aggregate", "mean"))) == 2.5
    assert uniform_aggregation.weight(s([const], ("aggregate", "max"))) is None
    assert uniform_aggregation.weight(s([Op("avals", (), (), ())], ("aggregate", "sum"))) \
        is None                                     # the pattern's own values: weighted
    assert uniform_aggregation.weight(s([Op("const", (1.0,), (), (2,))],
                                        ("aggregate", "sum"))) is None       # heads


@pytest.mark.parametrize("aggr", ["sum", "mean"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_messages_cotangent_is_added_into_the_sum_the_backward_holds(aggr, dtype,
                                                                        monkeypatch):
    """``X`` read by the aggregation and by a product (SAGE's root term): the product's
    cotangent comes first, and the aggregation's transposed pass adds ``Aᵀ D⁻¹ dZ`` into
    that very array (each row of ``dZ`` scaled by ``1 / d_i`` as it is gathered): no array
    of its own and no sum after it, and the gradient of dense numpy."""
    n = 40
    P = _pattern(3, n, n, 0.2)
    coo = P.tocoo()
    A = gb.Matrix.from_coo(coo.row, coo.col, np.ones(coo.nnz), nrows=n, ncols=n, dtype=dtype)
    rng = np.random.default_rng(4)
    X, R = rng.standard_normal((n, 5)).astype(dtype), rng.standard_normal((n, 5)).astype(dtype)
    W = rng.standard_normal((5, 5)).astype(dtype)
    D = P.toarray()
    if aggr == "mean":
        D = D / np.maximum(P.toarray().sum(axis=1, keepdims=True), 1)
    offers = []
    real = uniform_aggregation.backward

    def spy(ex, ctx, dout, into=None):
        got = real(ex, ctx, dout, into)
        offers.append(into is not None and into[0] is not None and got[0] is into[0])
        return got

    monkeypatch.setattr(uniform_aggregation, "backward", spy)
    out, pullback = compose.vjp(lambda X: ops.aggregate(ops.structure(A), X, aggr) + X @ W,
                                X, executor=get_executor("cpu"), vertex=(0,))
    (dX,) = pullback(R)
    assert offers == [True]
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, D @ X + X @ W, rtol=tol, atol=tol)
    np.testing.assert_allclose(dX, D.T @ R + R @ W.T, rtol=tol, atol=tol)
