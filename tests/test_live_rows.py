"""Live rows: a row-indexed aggregation is 0 on the rows beyond the first and last that hold
an entry, and an elementwise function with f(0) = 0 computes its live rows alone.

* a CSR pattern finds the slice of rows from its first to its last with an entry;
* the ``cpu`` executor marks an aggregation's output with it (the reference executor does
  not: it computes every row), a reshape keeps it, a function with f(0) = 0 keeps it and one
  without drops it;
* the numbers and every gradient are those of the reference executor, which computes every
  row, for functions that keep zero and functions that do not (hypothesis over graphs whose
  live rows fall anywhere), and central finite differences in float64 agree.
"""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_module_grads
from hypothesis import given, settings
from hypothesis import strategies as st

import gblas_gnn as gg
from gblas_gnn import ops
from gblas_gnn.executors import CPUExecutor, PrimitivesExecutor
from gblas_gnn.executors.patterns import CSRPattern
from gblas_gnn.ir.functions import keeps_zero
from gblas_gnn.nn.init import glorot
from gblas_gnn.ops import factor


class ScoredChain(gg.nn.Module):
    """``Y = f(sm(A ⊙ X Xᵀ) ⊕ X) + X`` with ``X = H W``: the aggregation's empty rows are
    0, ``f`` of them is ``f(0)``, and the skip ``+ X`` makes every row of ``Y`` live."""

    def __init__(self, fn: str, alpha=None, in_dim: int = 4, out_dim: int = 3,
                 dtype=np.float64, executor=None):
        super().__init__(dtype, executor)
        self.fn, self.alpha = fn, alpha
        self.add_param("W", glorot((in_dim, out_dim), np.random.default_rng(3), self.dtype))
        self.seen: dict[str, slice | None] = {}

    def forward(self, g, H):
        X = H @ self.params["W"]
        P = ops.softmax(ops.structure(g.A) * (factor(X) @ factor(X).T))
        M = ops.aggregate(P, X)
        flat = M.reshape(X.shape[0], X.shape[1])
        Y = ops.unary(self.fn, flat, self.alpha)
        self.seen = {"aggregate": M.live, "reshape": flat.live, "unary": Y.live}
        return Y + X


def _graph(n: int, lo: int, hi: int, seed: int = 0) -> gg.Graph:
    """Edges into the rows ``lo .. hi - 1`` only (every one of them has at least one)."""
    rng = np.random.default_rng(seed)
    dst = np.repeat(np.arange(lo, hi), 2)
    src = rng.integers(0, n, dst.size)
    pairs = np.unique(np.stack([dst, src]), axis=1)
    return gg.Graph.from_edges(pairs[1], pairs[0], n, dtype=np.float64)


def _run(ex, fn: str, alpha, g, H, dout):
    layer = ScoredChain(fn, alpha, executor=ex)
    layer.train()
    Z = layer(g, H)
    dH = layer.backward(dout)
    return Z, dH, dict(layer.grads), layer.seen


# ---------------------------------------------------------------------- the slice
@pytest.mark.parametrize("counts, want", [
    ([0, 0, 2, 0, 1, 0], slice(2, 5)),
    ([1, 0, 0, 3], slice(0, 4)),
    ([0, 0, 0], slice(0, 0)),
    ([0, 4], slice(1, 2)),
])
def test_a_pattern_finds_its_rows_from_the_first_to_the_last_entry(counts, want):
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    indices = np.zeros(int(indptr[-1]), np.int32)
    assert CSRPattern.of_buffers(len(counts), 1, indptr, indices).entry_rows == want


@pytest.mark.parametrize("fn, alpha, keeps", [
    ("gelu", None, True), ("relu", None, True), ("leaky_relu", 0.2, True),
    ("tanh", None, True), ("elu", 1.0, True), ("neg", None, True), ("pow", 2.0, True),
    ("sigmoid", None, False), ("exp", None, False), ("softplus", None, False),
    ("pow", -1.0, False),
])
def test_the_functions_that_keep_zero(fn, alpha, keeps):
    assert keeps_zero(fn, np.float32, alpha) is keeps
    assert keeps_zero(fn, np.float64, alpha) is keeps


def test_the_cpu_executor_marks_an_aggregation_and_what_keeps_its_zeros():
    g, H = _graph(12, 3, 9), np.random.default_rng(1).standard_normal((12, 4))
    dout = np.ones((12, 3))
    seen = _run(CPUExecutor(), "gelu", None, g, H, dout)[3]
    assert seen == {"aggregate": slice(3, 9), "reshape": slice(3, 9), "unary": slice(3, 9)}
    assert _run(CPUExecutor(), "sigmoid", None, g, H, dout)[3]["unary"] is None
    # every row live: nothing to mark
    full = _graph(12, 0, 12)
    assert _run(CPUExecutor(), "gelu", None, full, H, dout)[3]["aggregate"] is None
    # the reference executor computes every row
    assert _run(PrimitivesExecutor(), "gelu", None, g, H, dout)[3]["aggregate"] is None


# ---------------------------------------------------------------------- the numbers
def _assert_same_as_reference(fn, alpha, g, H, dout):
    got = _run(CPUExecutor(), fn, alpha, g, H, dout)
    want = _run(PrimitivesExecutor(), fn, alpha, g, H, dout)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-10, atol=1e-12)
    for name, grad in want[2].items():
        np.testing.assert_allclose(got[2][name], grad, rtol=1e-10, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("fn, alpha", [("gelu", None), ("relu", None), ("leaky_relu", 0.2),
                                       ("tanh", None), ("sigmoid", None), ("exp", None)])
def test_the_numbers_and_gradients_are_the_reference_executors(fn, alpha):
    rng = np.random.default_rng(5)
    g, H = _graph(15, 4, 11), rng.standard_normal((15, 4))
    _assert_same_as_reference(fn, alpha, g, H, rng.standard_normal((15, 3)))


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 14), data=st.data())
def test_live_rows_anywhere_give_the_reference_executors_numbers(n, data):
    lo = data.draw(st.integers(0, n - 1))
    hi = data.draw(st.integers(lo + 1, n))
    seed = data.draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    g = _graph(n, lo, hi, seed)
    _assert_same_as_reference("gelu", None, g, rng.standard_normal((n, 4)),
                              rng.standard_normal((n, 3)))


def test_the_gradients_are_central_differences():
    g = _graph(10, 2, 7)
    H = np.random.default_rng(2).standard_normal((10, 4))
    check_module_grads(ScoredChain("gelu", executor=CPUExecutor()), g, H)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 3000), width=st.sampled_from([1, 32]), threads=st.integers(1, 4),
       data=st.data())
def test_zeroing_rows_on_threads_zeroes_the_gaps_and_nothing_else(n, width, threads, data):
    """``zero_rows`` (several threads from its byte threshold on, lowered here so that small
    arrays take that path too) zeroes exactly the rows of the slices it is given."""
    from gblas_gnn.executors.cpu import _dense_kernels

    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=6)))
    gaps = [slice(a, b) for a, b in zip(cuts[::2], cuts[1::2], strict=False)]
    out = np.full((n, width), 7.0, np.float32)
    want = out.copy()
    for gap in gaps:
        want[gap] = 0
    before = _dense_kernels.THREADED_ZEROS
    _dense_kernels.THREADED_ZEROS = data.draw(st.sampled_from([0, before]))
    try:
        _dense_kernels.zero_rows(out, gaps, threads)
    finally:
        _dense_kernels.THREADED_ZEROS = before
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("gaps", [[slice(0, 100_000), slice(250_000, None)],
                                  [slice(5, 9), np.array([0, 2, 40])], [slice(10, 3, -2)], []])
def test_the_cpu_executors_zeroed_rows_are_the_defaults(gaps):
    """The cpu executor's ``zeroed_outside`` (slices on threads) zeroes the rows the
    default zeroes, whatever the gaps are (reversed slices and index arrays included)."""
    n = 300_000 if gaps and gaps[0].stop == 100_000 else 50
    got = CPUExecutor().zeroed_outside((n, 8), np.float32, gaps)
    ref = PrimitivesExecutor().zeroed_outside((n, 8), np.float32, gaps)
    zero = np.zeros(n, bool)
    for gap in gaps:
        zero[gap] = True
    np.testing.assert_array_equal(got[zero], 0)
    np.testing.assert_array_equal(ref[zero], 0)
    assert got.shape == (n, 8) and got.dtype == np.float32
