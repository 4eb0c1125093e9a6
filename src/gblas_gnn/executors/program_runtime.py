"""The executor-neutral program runtime: the steps of running a fused edge program that do
not depend on where its arrays live.

Each executor hands it a :class:`Platform` (its array module, how it allocates, how it
copies an operand to where the kernels read it, how it reads a flag back) and runs the
kernels its generator made for the plan; the runtime gathers the operands in the kernels'
order (:func:`operand_arrays`), allocates the row pass's outputs (:func:`sink_outputs`),
makes the program's output and the context a forward keeps for its backward
(:func:`finish_forward`, :class:`ProgramContext`), lays out the output's cotangent for the
backward passes (:func:`cotangent_layout`) and gives the cotangents back in the operands'
shapes (:func:`finish_grads`).

The ``cpu`` executor (:mod:`gblas_gnn.executors.cpu.programs`), the ``dist`` executor on its
block between collectives and the ``cuda`` executor (device arrays) all run these steps, so
a context built by one runtime is recognised by its executor's ``program_backward`` (a
context of another kind means the reference lowering).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..semirings import negative_weight_error

if TYPE_CHECKING:
    from ..ir.plan import Plan
    from .base import DenseArray

__all__ = ["Platform", "ProgramBuffers", "ProgramContext", "operand_arrays", "sink_outputs",
           "finish_forward", "cotangent_layout", "finish_grads", "aggregate_output",
           "x_slot", "heads_view", "dropout_heads"]


@dataclass(frozen=True)
class Platform:
    """Where a runtime's arrays live and how it makes them.

    Attributes
    ----------
    xp : module
        The array module (numpy, CuPy).
    empty : callable
        ``empty(shape, dtype)``: a fresh array.
    aligned : callable
        ``aligned(shape, dtype)``: a fresh array the kernels stream row by row (cache-line
        aligned rows on the cpu).
    index_dtype : callable
        ``index_dtype(nnz)``: the dtype of the winners' CSR positions.
    read : callable
        ``read(array, reason)``: a host view or copy of a small array (a device counts the
        transfer under ``reason``).
    own : callable
        ``own(array)``: an array of the output's own that no buffer of the runtime aliases
        where that matters to the executor (a copy on the cpu, whose edge tensors take
        their values).
    """

    xp: Any
    empty: Callable[[tuple, Any], Any]
    aligned: Callable[[tuple, Any], Any]
    index_dtype: Callable[[int], Any]
    read: Callable[[Any, str], Any]
    own: Callable[[Any], Any]


class OperandArrays(Protocol):
    """How a runtime brings an operand to its kernels, one method per operand role."""

    def row(self, slot: int, value) -> Any: ...

    def col(self, slot: int, value) -> Any: ...

    def param(self, slot: int, value) -> Any: ...

    def edges(self, slot: int, value) -> Any: ...

    def eattr(self, slot: int, value) -> Any: ...

    def key(self, slot: int, value) -> Any: ...

    def x(self, slot: int, value) -> Any: ...


class ProgramBuffers(Protocol):
    """What :func:`finish_grads` reads of a runtime's buffers (each runtime has its own
    class: host arrays on the cpu, device arrays on a GPU)."""

    #: the kernels' operand arrays, by slot of the program's operands
    operands: list[Any]
    #: the messages' original shape (None when the program has no messages)
    x_shape: tuple[int, ...] | None


@dataclass
class ProgramContext:
    """What the backward of a fused program needs: its plan, the runtime's buffers (the
    pattern and operands as the kernels read them), the raw aggregate or reduction ``Z``,
    the sink's other outputs (``extra``: winners of max/min, ``avg``'s weights) and, for
    ``mean``, the row counts."""

    plan: Plan
    buffers: ProgramBuffers
    Z: DenseArray | None = None           # the raw aggregate (n, heads, f) or reduction
    extra: dict[str, DenseArray] = field(default_factory=dict)
    counts: DenseArray | None = None      # mean: the row counts (n, 1, 1)
    spent: bool = False                   # a backward has run (it may reuse the caches)


def finish_grads(p: Plan, b: ProgramBuffers, grads: dict[int, DenseArray]
                 ) -> list[DenseArray | None]:
    """Cotangents by slot in the operands' own shapes (parameters summed over rows)."""
    out: list = [None] * len(p.structure.roles)
    for slot, (role, _) in enumerate(p.structure.roles):
        g = grads.get(slot)
        if g is None:
            continue
        if role == "param":
            g = g.sum(axis=0)
            out[slot] = g.reshape(()) if b.operands[slot].shape == (1,) and \
                p.structure.roles[slot][1] == () else g
        elif role == "x":
            out[slot] = g.reshape(b.x_shape)
        else:
            out[slot] = g
    return out


def aggregate_output(ctx: ProgramContext | None, Z, heads: int | None, counts=None):
    """An aggregation program's output and context from its sum ``Z`` (n, heads, f):
    :math:`Z_i / c_i` with the row counts ``counts`` (n, 1, 1) for ``mean``, else ``Z``;
    without a heads axis the (n, f) view. The context keeps ``Z`` (and the counts): the
    output may be ``Z`` itself, which the caller copies before a user can write into it."""
    out = Z if counts is None else Z / counts
    if ctx is not None:
        ctx.Z = Z
        if counts is not None:
            ctx.counts = counts
    return (out[:, 0] if heads is None else out), ctx


def x_slot(p: Plan) -> int:
    """The slot of the messages (the ``x`` operand) of the plan's program."""
    return next(k for k, (role, _) in enumerate(p.structure.roles) if role == "x")


def heads_view(xp, X, dtype=None):
    """``(n, f)`` or ``(n, heads, f)`` as the kernels' C-contiguous ``(n, heads, f)``."""
    X = xp.ascontiguousarray(X, dtype=dtype)
    return X.reshape(X.shape[0], 1, X.shape[1]) if X.ndim == 2 else X


def dropout_heads(p: Plan, slot: int) -> int:
    """The heads of the dropout whose key is operand ``slot`` (one without a heads axis)."""
    return next(o.args[2] for o in p.structure.ops
                if o.kind == "dropout" and o.args[0] == slot) or 1


def operand_arrays(prog, arrays: OperandArrays) -> tuple[list, tuple | None]:
    """The program's operands as its kernels read them, in slot order (``arrays``: the
    runtime's method for each role; a parameter of no axes becomes one of one entry), and the
    messages' original shape (None without messages)."""
    operands: list = []
    x_shape = None
    for slot, op in enumerate(prog.operands):
        if op.role == "x":
            x_shape = tuple(op.value.shape)
        v = getattr(arrays, op.role)(slot, op.value)
        if op.role == "param" and v.ndim == 0:
            v = v.reshape(1)
        operands.append(v)
    return operands, x_shape


def sink_outputs(platform: Platform, p: Plan, n: int, nnz: int, features: int | None,
                 winners: bool = True, weights=None) -> dict:
    """The row pass's output arrays by kernel argument name: ``W`` (the root's values per
    head), ``OUT`` (a reduction; ``ARG`` its winners for max/min), or ``Z`` (the aggregate of
    ``features`` per head) with ``weights`` (a runtime's per-edge weight buffer, if its
    kernels write one), ``ARG`` (max/min: the winner of every (row, head, feature), None
    unless ``winners``) and ``DEN`` / ``NEG`` (the weighted mean's weight sums and its
    negative-weight flag)."""
    s, dt = p.structure, np.dtype(p.structure.dtype)
    H = p.heads
    kind = s.sink[0]
    if kind in ("values", "cols", "spmm_t"):
        return {"W": platform.empty((H, nnz), dt)}
    if kind == "rows":
        return {"OUT": platform.empty((n, H), dt)}
    if kind == "messages":
        shape = (n, *s.ops[s.root].trail)
        out = {"OUT": platform.aligned(shape, dt)}
        if s.sink[1] != "sum":
            out["ARG"] = platform.empty(shape, platform.index_dtype(nnz))
        return out
    out = {"Z": platform.aligned((n, H, features), dt)}
    if weights is not None:
        out["W"] = weights
    if p.extreme:
        out["ARG"] = platform.empty((n, H, features), platform.index_dtype(nnz)) \
            if winners else None
    if p.weighted_mean:
        out["DEN"] = platform.empty((n, H), dt)
        out["NEG"] = platform.xp.zeros(1, np.int64)
    return out


def finish_forward(ex, platform: Platform, p: Plan, b: ProgramBuffers, outs: dict, A,
                   keep: bool, counts=None):
    """The program's output from the row pass's arrays, and its context with ``keep``.

    ``counts``: the rows' stored entries for ``mean`` (a grid's are over the whole row;
    default ``ex.row_counts(A)``). Values become edge tensors, a reduction over the columns
    or a transposed product runs on the executor's own operations, the weighted mean divides
    by the weight sums (refusing a negative weight) and the mean by the counts."""
    xp, s = platform.xp, p.structure
    kind, heads = s.sink[0], s.heads
    ctx = ProgramContext(p, b, extra=outs) if keep else None
    if kind == "values":
        return [ex.edge_from_values(A, platform.own(outs["W"][h])) for h in range(p.heads)], \
            None
    if kind == "rows":
        out = outs["OUT"]
        result = platform.own(out[:, 0]) if heads is None else out
        if ctx is not None:
            ctx.Z = out
        return result, ctx
    if kind == "messages":
        return outs["OUT"], ctx
    if kind in ("cols", "spmm_t"):
        X = b.operands[x_slot(p)] if kind == "spmm_t" else None
        parts = []
        for h in range(p.heads):
            E = ex.edge_from_values(A, platform.own(outs["W"][h]))
            parts.append(ex.col_reduce(E, "sum") if X is None else
                         ex.spmm_t(E, xp.ascontiguousarray(X[:, h])))
        return (parts[0] if heads is None else xp.stack(parts, axis=1)), ctx
    Z = outs["Z"]
    if p.weighted_mean:
        if platform.read(outs["NEG"], "avg weights")[0]:
            raise negative_weight_error(p.aggr)
        den = outs["DEN"]
        pos = den > 0
        xp.divide(Z, xp.where(pos, den, 1)[:, :, None], out=Z)
        Z[~pos] = 0
    if not p.counted_mean:
        return aggregate_output(ctx, Z, heads)
    counts = ex.row_counts(A, Z.dtype) if counts is None else \
        xp.maximum(counts, 1).astype(Z.dtype)
    return aggregate_output(ctx, Z, heads, counts[:, None, None])


def cotangent_layout(xp, p: Plan, ctx: ProgramContext, dZ):
    """The output's cotangent ``dZ`` (in the program's dtype, where the kernels read) laid
    out for the backward passes: ``(n, heads)`` for a reduction, as it is for messages,
    ``(n, heads, f)`` for an aggregation (``mean``'s divided by the counts)."""
    kind = p.structure.sink[0]
    if kind in ("rows", "cols"):
        return xp.ascontiguousarray(dZ.reshape(dZ.shape[0], -1))
    if kind == "messages":
        return xp.ascontiguousarray(dZ)
    dZ = heads_view(xp, dZ)
    if ctx.counts is not None:
        dZ = dZ / ctx.counts
    return xp.ascontiguousarray(dZ)
