"""How the cpu kernels are compiled: the remainders of LLVM's vector loops vectorised where a
loop over one head's channels is shorter than a vector loop's step
(:func:`gblas_gnn.codegen.kernel_cache.vectorised_remainders`), and only there; a dropout's
helper compiled once per module, not once per written-out head."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import numba
import numpy as np
import pytest

import gblas_gnn as gg
from gblas_gnn import ops
from gblas_gnn.codegen.kernel_cache import (
    REMAINDER_LANES,
    LockedKernel,
    locked_kernel,
    vectorised_remainders,
)
from gblas_gnn.compose.expr import Masked, Softmax
from gblas_gnn.compose.lower import build
from gblas_gnn.executors.cpu._program_kernels import (
    cache_dir,
    kernels,
    remainder_lanes,
    signature_key,
    source,
)
from gblas_gnn.ir.plan import plan
from gblas_gnn.ops import rep

_SIGNATURE = (numba.float32[:, ::1], numba.float32[:, ::1], numba.float32[:, ::1])


def _heads_loop(a, b, out):  # pragma: no cover (numba)
    """A loop over each row's channels, of a length known at run time (a head's ``f``)."""
    for i in range(a.shape[0]):
        ai, bi, oi = a[i], b[i], out[i]
        for c in range(ai.shape[0]):
            oi[c] += max(ai[c] + bi[c], np.float32(0.2) * (ai[c] + bi[c]))


def _vector_ops(fn) -> int:
    """The operations on vectors of :data:`REMAINDER_LANES` float32 in ``fn``'s LLVM IR."""
    return fn.inspect_llvm(_SIGNATURE).count(f"<{REMAINDER_LANES} x float>")


def _compiled(context=None):
    fn = numba.njit(fastmath={"reassoc", "contract"})(_heads_loop)
    if context is None:
        fn.compile(_SIGNATURE)
    else:
        with context:
            fn.compile(_SIGNATURE)
    return fn


def test_a_loops_remainder_gets_a_vector_loop_inside_the_context_only():
    before = _vector_ops(_compiled())
    inside = _vector_ops(_compiled(vectorised_remainders()))
    after = _vector_ops(_compiled())
    assert inside > before             # the remainder's own vector loop
    assert after == before             # LLVM's default again: nothing else compiled so


@pytest.mark.parametrize("width", [3, 8, 13, 40])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vectorised_remainders_compute_the_same_numbers(width, dtype):
    rng = np.random.default_rng(width)
    a, b = (rng.standard_normal((5, width)).astype(dtype) for _ in range(2))
    out = np.zeros((5, width), dtype)
    with vectorised_remainders():
        numba.njit(fastmath={"reassoc", "contract"})(_heads_loop)(a, b, out)
    slope = dtype(np.float32(0.2))      # the kernel's literal, in the dtype of the sum
    np.testing.assert_array_equal(out, np.maximum(a + b, slope * (a + b)))


def test_a_locked_kernel_compiles_with_the_remainders_it_is_given():
    lock = Path(tempfile.mkdtemp())
    plain = LockedKernel(numba.njit(fastmath={"reassoc", "contract"})(_heads_loop),
                         lock / "plain.lock")
    vectorised = LockedKernel(numba.njit(fastmath={"reassoc", "contract"})(_heads_loop),
                              lock / "vectorised.lock", REMAINDER_LANES)
    args = [np.ones((2, 8), np.float32) for _ in range(3)]
    for kernel in (plain, vectorised):
        kernel.address(((np.dtype(np.float32).str, 2, True, False),) * 3, *args)
    assert _vector_ops(vectorised.fn) > _vector_ops(plain.fn)


def _gatv2_plan(heads: int, width: int):
    g = gg.Graph.from_edges([0, 1, 2], [1, 2, 0], 3)
    R, C = (np.ones((3, heads, width), np.float32) for _ in range(2))
    a = np.ones((heads, width), np.float32)
    scores = (ops.leaky_relu(rep(R) + rep(C).T, 0.2) * a).sum(-1)
    X = np.ones((3, heads, width), np.float32)
    return plan(build(Softmax(Masked(g.A, scores, True)), ("aggregate", "sum"), X).structure)


@pytest.mark.parametrize("heads, width, lanes", [
    (4, 8, REMAINDER_LANES),            # GATv2 4 × 8: a head's loop of 8 ran scalar
    (2, 16, REMAINDER_LANES),
    (4, 40, REMAINDER_LANES),           # 32 in the vector body, 8 left
    (1, 32, 0),                         # one head: its loop is the vector body
    (4, 32, 0),                         # no remainder
    (4, 2, 0),                          # a remainder below one vector (the tests' widths)
])
def test_only_modules_with_a_heads_remainder_of_a_vector_compile_so(heads, width, lanes):
    p = _gatv2_plan(heads, width)
    assert remainder_lanes(p) == lanes
    assert f"\nREMAINDER_LANES = {lanes}\n" in source(p)
    kernel = locked_kernel(cache_dir(), kernels(p), "forward")
    assert kernel.remainder_lanes == lanes


def test_the_remainders_are_part_of_a_modules_key(monkeypatch):
    from gblas_gnn.executors.cpu import _program_kernels

    p = _gatv2_plan(4, 8)
    key = signature_key(p)
    monkeypatch.setattr(_program_kernels, "remainder_lanes", lambda p: 0)
    assert signature_key(p) != key


def _dropout_program(heads: int):
    """An attention with an edge dropout over ``heads`` written-out heads."""
    g = gg.Graph.from_edges([0, 1, 2], [1, 2, 0], 3)
    R, C = (np.ones((3, heads), np.float32) for _ in range(2))
    S = Softmax(Masked(g.A, ops.leaky_relu(rep(R) + rep(C).T, 0.2), True))
    X = np.ones((3, heads, 8), np.float32)
    return build(ops.edge_dropout(S, 0.3, key=5), ("aggregate", "sum"), X)


def test_a_dropouts_written_out_heads_are_typed_constants(monkeypatch, tmp_path):
    """An attention dropout at every written-out head calls the module's ``_keep`` with the
    head as ``np.uint64(h)``: a bare literal types each call as ``Literal[int]``, and numba
    compiled ``_keep`` once per head (a cold start's cost, ~0.1 s a head and module). Compiled
    afresh (an empty kernel cache, the loaded modules set aside), ``_keep`` has one
    signature, without a literal."""
    from gblas_gnn.executors.cpu import CPUExecutor, _program_kernels

    heads = 4
    prog = _dropout_program(heads)
    calls = re.findall(r"_keep\(K\d+\[0\], ([^,]+),", source(plan(prog.structure)))
    assert calls and not [h for h in calls if h.strip().isdigit()], calls
    assert {f"np.uint64({h})" for h in range(heads)} <= set(calls), calls

    monkeypatch.setenv("GBLAS_GNN_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(_program_kernels, "_LOADED", {})
    kernels.cache_clear()
    try:
        CPUExecutor().program_forward(_dropout_program(heads), keep=False)
        signatures = kernels(plan(prog.structure))._keep.signatures
    finally:
        kernels.cache_clear()           # no module of the temporary folder stays memoised
    assert len(signatures) == 1, signatures
    assert not any(isinstance(t, numba.types.Literal) for t in signatures[0]), signatures
