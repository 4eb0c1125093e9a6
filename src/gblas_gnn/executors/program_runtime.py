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

from ..ir.sinks import edge_messages
from ..semirings import negative_weight_error

if TYPE_CHECKING:
    from ..ir.plan import Plan
    from .base import DenseArray

__all__ = ["Platform", "ProgramBuffers", "ProgramContext", "SinkRuntime", "SINK_RUNTIMES",
           "operand_arrays", "sink_outputs",
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


class SinkRuntime:
    """How a runtime handles one sink kind (:mod:`gblas_gnn.ir.sinks`): the row pass's output
    arrays, the program's output from them, and the layout of the output's cotangent. One
    object per sink kind in :data:`SINK_RUNTIMES`; the cpu, cuda and grid runtimes all use
    them."""

    def outputs(self, platform: Platform, p: Plan, n: int, nnz: int, features, winners: bool,
                weights) -> dict:
        """``W``: the root's values per head (the default: values, column sums, transposed
        products are finished outside the kernels)."""
        return {"W": platform.empty((p.heads, nnz), np.dtype(p.structure.dtype))}

    def finish(self, ex, platform: Platform, p: Plan, b, outs: dict, A, ctx, counts):
        """The program's output (``ctx``: its context, or None)."""
        raise ValueError(f"the sink {p.sink!r} has no runtime")

    def cotangent(self, xp, p: Plan, ctx: ProgramContext, dZ):
        """The output's cotangent as the backward passes read it: ``(n, heads)``."""
        return xp.ascontiguousarray(dZ.reshape(dZ.shape[0], -1))


class _Values(SinkRuntime):
    def finish(self, ex, platform, p, b, outs, A, ctx, counts):
        return [ex.edge_from_values(A, platform.own(outs["W"][h])) for h in range(p.heads)], \
            None


class _Rows(SinkRuntime):
    def outputs(self, platform, p, n, nnz, features, winners, weights):
        return {"OUT": platform.empty((n, p.heads), np.dtype(p.structure.dtype))}

    def finish(self, ex, platform, p, b, outs, A, ctx, counts):
        out = outs["OUT"]
        result = platform.own(out[:, 0]) if p.structure.heads is None else out
        if ctx is not None:
            ctx.Z = out
        return result, ctx


class _ColumnSide(SinkRuntime):
    """``cols`` (a column sum) and ``spmm_t`` (``Sᵀ X``): the kernels write the root's values,
    the executor's own column reduction or transposed product finishes."""

    def __init__(self, transposed_product: bool):
        self.transposed_product = transposed_product

    def finish(self, ex, platform, p, b, outs, A, ctx, counts):
        xp = platform.xp
        X = b.operands[x_slot(p)] if self.transposed_product else None
        parts = []
        for h in range(p.heads):
            E = ex.edge_from_values(A, platform.own(outs["W"][h]))
            parts.append(ex.col_reduce(E, "sum") if X is None else
                         ex.spmm_t(E, xp.ascontiguousarray(X[:, h])))
        return (parts[0] if p.structure.heads is None else xp.stack(parts, axis=1)), ctx

    def cotangent(self, xp, p, ctx, dZ):
        if self.transposed_product:
            return _by_heads(xp, ctx, dZ)
        return super().cotangent(xp, p, ctx, dZ)


class _Messages(SinkRuntime):
    def outputs(self, platform, p, n, nnz, features, winners, weights):
        s, dt = p.structure, np.dtype(p.structure.dtype)
        shape = (n, *s.ops[s.root].trail)
        out = {"OUT": platform.aligned(shape, dt)}
        if s.sink[1] != "sum":
            out["ARG"] = platform.empty(shape, platform.index_dtype(nnz))
        return out

    def finish(self, ex, platform, p, b, outs, A, ctx, counts):
        return outs["OUT"], ctx

    def cotangent(self, xp, p, ctx, dZ):
        return xp.ascontiguousarray(dZ)


class _Aggregate(SinkRuntime):
    def outputs(self, platform, p, n, nnz, features, winners, weights):
        dt, H = np.dtype(p.structure.dtype), p.heads
        out = {"Z": platform.aligned((n, H, features), dt)}
        slot = edge_messages(p.sink)
        if slot is not None:            # the appended edge features' sums
            out["ZE"] = platform.aligned((n, H, *p.structure.roles[slot][1]), dt)
        if weights is not None:
            out["W"] = weights
        if p.extreme:
            out["ARG"] = platform.empty((n if winners else 0, H, features),
                                        platform.index_dtype(nnz))
        if p.weighted_mean:
            out["DEN"] = platform.empty((n, H), dt)
            out["NEG"] = platform.xp.zeros(1, np.int64)
        return out

    def finish(self, ex, platform, p, b, outs, A, ctx, counts):
        xp, Z = platform.xp, outs["Z"]
        if p.weighted_mean:
            if platform.read(outs["NEG"], "avg weights")[0]:
                raise negative_weight_error(p.aggr)
            den = outs["DEN"]
            pos = den > 0
            xp.divide(Z, xp.where(pos, den, 1)[:, :, None], out=Z)
            Z[~pos] = 0
        if "ZE" in outs:                # [Z | ZE]; the context keeps both for the backward
            if ctx is not None:
                ctx.extra["ZE"] = outs["ZE"]
            out, ctx = aggregate_output(ctx, Z, p.heads)
            out = xp.concatenate([out, outs["ZE"]], axis=2)
            return (out[:, 0] if p.structure.heads is None else out), ctx
        if not p.counted_mean:
            return aggregate_output(ctx, Z, p.structure.heads)
        counts = ex.row_counts(A, Z.dtype) if counts is None else \
            xp.maximum(counts, 1).astype(Z.dtype)
        return aggregate_output(ctx, Z, p.structure.heads, counts[:, None, None])

    def cotangent(self, xp, p, ctx, dZ):
        return _by_heads(xp, ctx, dZ)


def _by_heads(xp, ctx: ProgramContext, dZ):
    """``dZ`` as ``(n, heads, f)``, ``mean``'s divided by the counts."""
    dZ = heads_view(xp, dZ)
    if ctx.counts is not None:
        dZ = dZ / ctx.counts
    return xp.ascontiguousarray(dZ)


#: the runtime of each sink kind, by the sink's name (:data:`gblas_gnn.ir.sinks.SINKS`)
SINK_RUNTIMES: dict[str, SinkRuntime] = {
    "values": _Values(), "rows": _Rows(), "cols": _ColumnSide(False),
    "spmm_t": _ColumnSide(True), "messages": _Messages(), "aggregate": _Aggregate()}


def sink_outputs(platform: Platform, p: Plan, n: int, nnz: int, features: int | None,
                 winners: bool = True, weights=None) -> dict:
    """The row pass's output arrays by kernel argument name: ``W`` (the root's values per
    head), ``OUT`` (a reduction; ``ARG`` its winners for max/min), or ``Z`` (the aggregate of
    ``features`` per head) with ``weights`` (a runtime's per-edge weight buffer, if its
    kernels write one), ``ARG`` (max/min: the winner of every (row, head, feature); without
    rows unless ``winners``, its type that of a training forward's, so that one compiled
    kernel serves both) and ``DEN`` / ``NEG`` (the weighted mean's weight sums and its
    negative-weight flag)."""
    return SINK_RUNTIMES[p.sink[0]].outputs(platform, p, n, nnz, features, winners, weights)


def finish_forward(ex, platform: Platform, p: Plan, b: ProgramBuffers, outs: dict, A,
                   keep: bool, counts=None):
    """The program's output from the row pass's arrays, and its context with ``keep``.

    ``counts``: the rows' stored entries for ``mean`` (a grid's are over the whole row;
    default ``ex.row_counts(A)``). Values become edge tensors, a reduction over the columns
    or a transposed product runs on the executor's own operations, the weighted mean divides
    by the weight sums (refusing a negative weight) and the mean by the counts."""
    ctx = ProgramContext(p, b, extra=outs) if keep else None
    return SINK_RUNTIMES[p.sink[0]].finish(ex, platform, p, b, outs, A, ctx, counts)


def cotangent_layout(xp, p: Plan, ctx: ProgramContext, dZ):
    """The output's cotangent ``dZ`` (in the program's dtype, where the kernels read) laid
    out for the backward passes: ``(n, heads)`` for a reduction, as it is for messages,
    ``(n, heads, f)`` for an aggregation or a transposed product (``mean``'s divided by the
    counts)."""
    return SINK_RUNTIMES[p.sink[0]].cotangent(xp, p, ctx, dZ)
