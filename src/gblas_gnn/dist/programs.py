r"""Edge programs on a grid: the cpu executor's generated kernels on this rank's block, with
the scheme's collectives where a row or a column spans the q blocks of the grid.

Forward (rank (x, y), block ``A[R_x, C_y]``):

==================================  =========================================================
step                                communication
==================================  =========================================================
the operands read by source and     one partner exchange of all of them (their rows ``C_y``)
the messages
each softmax: scores, local max     allreduce max over the row communicator (heads·n/q)
exp, local sum                      allreduce sum over the row communicator (heads·n/q)
the aggregate of the block          allreduce over the row communicator (n/q·k; max/min as
                                    (value, lowest global id) pairs; ``avg`` with its weights)
==================================  =========================================================

On a 1×1 grid the single fused row pass runs. Backward, strategy ``"column"``:
:math:`t_i = \langle \bar Z_i, Z_i \rangle` needs no communication; the column pass's
partials (the messages' gradient and what is read by source) are completed over the column
communicator and moved back to the rows ``R_x`` as one buffer; the row pass's partials (what
is read by target) over the row communicator; the parameters' over all ranks. Strategy
``"row"``: the softmax terms of each stage (heads·n/q) over the row communicator between its
phases. So a composed layer moves O(nk/√p + k²) words per rank, as the paper's scheme, and
never the adjacency. Programs the kernels do not cover here (a reduction by max/min, a user
semiring) run the reference lowering.

This is the replicated layout. On a sharded one (:mod:`.layout`) the operands read by target
are gathered over the row first, those read by source come as the partner's slice gathered
over the column, the sums complete as reduce-scatters; the context keeps only the operands'
slices (:class:`ShardedContext`) and the backward gathers again what the forward read, forms
``t`` on its own rows and gathers it with ``dZ``, and reads the messages a range of the
block's columns at a time (:class:`~gblas_gnn.dist.layout.ColumnChunks`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..executors import program_runtime as runtime
from ..executors.cpu import programs as cpu
from ..executors.program_runtime import ProgramContext
from ..ir.plan import Plan, appends_edge_features, fusable, plan
from ..ir.program import Operand
from .layout import ColumnChunks, shard

__all__ = ["GRID_SINKS", "GridSink", "runs", "forward", "backward"]


class GridSink:
    """How the grid completes one sink kind's row pass (:data:`GRID_SINKS`): which of its
    forms run the generated kernels here, the output the rows complete in, whether they
    complete whole (the winners of max / min, on every rank of the grid row) or as a sum
    (kept as the layout keeps rows), and under which label."""

    #: the row pass's output the grid completes (None: the output is edge values)
    output: str | None = "OUT"
    label = "program.rows"

    def runs(self, sink: tuple) -> bool:
        return True

    def whole(self, p: Plan) -> bool:
        """Whether the rows complete whole (max / min winners), not as a sum."""
        return False

    def maximises(self, p: Plan) -> bool:
        return False

    def complete(self, dex, p: Plan, args: list, outs: dict) -> None:
        """Complete the rows over the grid row, after the last phase (``outs`` updated)."""
        if self.output is None:
            return
        if self.whole(p):
            _extreme(dex.grid, self.maximises(p), args, outs[self.output], outs["ARG"])
        else:
            outs[self.output] = dex.layout.row_sum(outs[self.output], self.label)


class _EdgeValues(GridSink):
    output = None


class _RowSums(GridSink):
    def runs(self, sink):
        return sink[1] == "sum"


class _Messages(GridSink):
    def whole(self, p):
        return p.sink[1] != "sum"

    def maximises(self, p):
        return p.sink[1] == "max"


class _Aggregate(GridSink):
    output, label = "Z", "program.aggregate"

    def whole(self, p):
        return p.extreme

    def maximises(self, p):
        return p.algebra.maximises

    def complete(self, dex, p, args, outs):
        super().complete(dex, p, args, outs)
        if p.weighted_mean:                 # (the backward reads the whole rows')
            grid = dex.grid
            outs["DEN_ROWS"] = grid.allreduce(outs["DEN"], "sum", "row", "program.weights")
            outs["DEN"] = dex.layout.own(outs["DEN_ROWS"])
            # a negative weight anywhere stops every rank (not only its grid row)
            grid.allreduce(outs["NEG"], "max", "world", "program.weights")


#: the sink kinds the grid runs with the generated kernels, by name (the others, and the
#: forms a rule's ``runs`` refuses, run the reference lowering)
GRID_SINKS: dict[str, GridSink] = {"values": _EdgeValues(), "rows": _RowSums(),
                                   "messages": _Messages(), "aggregate": _Aggregate()}


def runs(structure) -> bool:
    """Whether the grid runs ``structure`` with the generated kernels."""
    rule = GRID_SINKS.get(structure.sink[0])
    return fusable(structure) and rule is not None and rule.runs(structure.sink) and \
        not appends_edge_features(structure)


def _column_slots(p: Plan) -> list[int]:
    roles = p.structure.roles
    return [k for k, (role, _) in enumerate(roles)
            if role == "col" or (role == "x" and p.sink_rule.gathers_messages)]


def _row_slots(p: Plan) -> list[int]:
    """The vertex operands read by target (their rows ``R_x``)."""
    roles = p.structure.roles
    return [k for k, (role, _) in enumerate(roles)
            if role == "row" or (role == "x" and not p.sink_rule.gathers_messages)]


@dataclass
class ShardedContext:
    """A program's context on a sharded layout: the kernels' context with the gathered
    operands dropped (``None`` in its buffers) and the operands as this rank keeps them,
    gathered again by the backward. So a program keeps n·w/p words per operand between
    its forward and its backward, not the n·w/q of the rows and columns it read."""

    inner: ProgramContext
    kept: dict                    # slot -> the operand as this rank keeps it


def _gathered(layout, p: Plan, values: dict, r: int, c: int, label: str = "program") -> dict:
    """The vertex operands ``values`` (slot -> this rank's rows) as the block reads them:
    rows ``R_x`` by target, ``C_y`` by source (replicated: one exchange for every operand
    read by source; sharded: one gather per operand, :mod:`.layout`)."""
    out = {}
    for slots, read in ((_row_slots(p), lambda parts: layout.rows(parts, r, f"{label}.rows")),
                        (_column_slots(p),
                         lambda parts: layout.columns(parts, r, c, f"{label}.columns"))):
        slots = [k for k in slots if k in values]
        if slots:
            parts = [np.ascontiguousarray(values[k]) for k in slots]
            for part in parts:
                layout.check(part, r, "by the program")
            out.update(zip(slots, read(parts), strict=True))
    return out


def forward(dex, prog, keep: bool):
    """``(out, ctx)`` of a fused program on this rank's block."""
    from .graph import Block

    grid, local = dex.grid, dex.local
    p = plan(prog.structure)
    A = prog.pattern
    M = A.M if isinstance(A, Block) else A
    vertex = _row_slots(p) + _column_slots(p)
    gathered = _gathered(dex.layout, p, {k: prog.operands[k].value for k in vertex},
                         M.nrows, M.ncols)
    bound = replace(prog, operands=[
        Operand(op.role, gathered.get(k, op.value), op.traced)
        for k, op in enumerate(prog.operands)])
    # global ids: the dropout's hash and the max / min winners' ties read them (None: a
    # program reading neither holds no copy)
    ids = (np.asarray(A.row_ids, np.int64), np.asarray(A.col_ids, np.int64)) \
        if isinstance(A, Block) and (_completed_whole(p) or any(
            o.kind == "dropout" for o in p.structure.ops)) else None
    b = cpu.prepare(local, bound, p, M, lambda slot, v: v, ids)
    if b.x_shape is not None:                 # the messages as this rank keeps them
        b.x_shape = tuple(prog.operands[runtime.x_slot(p)].value.shape)
    mod = cpu.kernels(p)
    # max / min: the winners complete the rows over the grid row, backward or not
    outs = cpu.sink_outputs(p, b, winners=keep or grid.q > 1)
    fwd = cpu.kernel(mod, "forward", b.work)
    args = [*b.args(), *outs.values(), *cpu.stats(p, b)]
    if grid.q == 1:
        fwd(*args, -1)
    else:
        _phases(dex, p, fwd, args, outs)
    dtype = b.avals.dtype if b.avals.size else np.dtype(p.structure.dtype)
    den = outs.pop("DEN_ROWS", None)
    out, ctx = cpu.finish_forward(local, p, b, outs, M, keep,
                                  counts=dex.row_counts(A, dtype) if p.counted_mean else None)
    if den is not None:
        outs["DEN"] = den
    if GRID_SINKS[p.sink[0]].output is None:          # edge values: the block's
        return [A.with_matrix(E) if isinstance(A, Block) else E for E in out], ctx
    if dex.dense == "replicated":
        return out, ctx
    if _completed_whole(p):                   # max / min: complete rows, keep ours
        out = dex.layout.own(out)
    if ctx is None:
        return out, None
    kept = {k: prog.operands[k].value for k in gathered}
    for k in gathered:
        b.operands[k] = None
    return out, ShardedContext(ctx, kept)


def _completed_whole(p: Plan) -> bool:
    """Whether the grid completes the program's rows whole on every rank of a grid row (the
    winners of max / min), not as this rank's share of a sum."""
    return GRID_SINKS[p.sink[0]].whole(p)


def _phases(dex, p: Plan, fwd, args: list, outs: dict) -> None:
    """The row pass one phase at a time, with the row communicator's collectives between
    them (the stage maxima and sums are the kernel's ``RM<k>``, ``RS<k>`` arguments); the
    sums of the rows as the layout keeps them (``outs`` updated)."""
    grid = dex.grid
    stats = args[len(args) - 2 * len(p.softmaxes):]
    for m in range(len(p.softmaxes)):
        RM, RS = stats[2 * m], stats[2 * m + 1]
        fwd(*args, 3 * m)
        grid.allreduce(RM, "max", "row", "program.row_max")
        fwd(*args, 3 * m + 1)
        grid.allreduce(RS, "sum", "row", "program.row_sum")
        fwd(*args, 3 * m + 2)
    fwd(*args, 3 * len(p.softmaxes))
    GRID_SINKS[p.sink[0]].complete(dex, p, args, outs)


def _extreme(grid, is_max: bool, args: list, Z, ARG) -> None:
    """max/min over the grid row as (value, lowest global source id) pairs; every rank keeps
    the winners it owns (ties to the lowest global id, as on one process)."""
    indices, cid = args[1], args[6]          # the kernels' ``indices`` and ``cid``
    owned = ARG >= 0
    pairs = np.empty(Z.shape, np.dtype([("v", Z.dtype), ("i", np.int64)], align=True))
    pairs["v"] = np.where(owned, Z, -np.inf if is_max else np.inf)
    ids = cid[indices[np.maximum(ARG, 0)]] if indices.size else 0
    winners = np.where(owned, ids, np.iinfo(np.int64).max)
    pairs["i"] = winners
    grid.allreduce(pairs, "maxloc" if is_max else "minloc", "row", "program.winners")
    Z[...] = np.where(np.isinf(pairs["v"]), 0, pairs["v"])
    ARG[~(owned & (winners == pairs["i"]))] = -1


def backward(dex, ctx, dout) -> list:
    """The operands' cotangents of a fused program on the grid, as this rank keeps its
    rows."""
    sharded = isinstance(ctx, ShardedContext)
    inner = ctx.inner if sharded else ctx
    p, b = inner.plan, inner.buffers
    b.csc = b.pattern.csc()
    dZ = cpu.root_cotangent_inputs(p, inner, dout)
    row_t = chunks = None
    if sharded:
        dZ, row_t, chunks = _gather_again(dex, ctx, p, dZ)
    try:
        if p.strategy == "column":
            grads = cpu.column_gradients(p, inner, dZ, row_t, chunks=chunks)
        else:
            grads = _row_gradients(dex.grid, p, inner, dZ)
        return _complete(dex, p, b, grads, () if chunks is None else (runtime.x_slot(p),))
    finally:
        if sharded:                        # the gathered rows are dropped again
            for k in ctx.kept:
                b.operands[k] = None


def _gather_again(dex, ctx: ShardedContext, p: Plan, dZ):
    r"""Gather again what the forward read (into the kernels' buffers) and the cotangent
    ``dZ`` (this rank's rows, in the kernels' layout) by the rows ``R_x``. The column
    strategy's softmax term :math:`t_i = \langle \bar Z_i, Z_i \rangle` is formed on
    this rank's rows and gathered with ``dZ`` (heads words a row, not the k of ``Z``), and
    its messages are gathered a range of columns at a time by the column pass
    (:class:`~gblas_gnn.dist.layout.ColumnChunks`; here only the partner's slice comes); the
    row strategy's ``Z`` and messages are gathered whole. Returns ``dZ``, ``t`` (or None)
    and the column pass's chunks (or None)."""
    inner = ctx.inner
    b = inner.buffers
    pattern = b.pattern
    r, c = pattern.nrows, pattern.ncols
    by_t = inner.Z is not None and not _completed_whole(p) and p.strategy == "column"
    kept, chunks = dict(ctx.kept), None
    if p.strategy == "column":
        xs = runtime.x_slot(p)
        X = runtime.heads_view(np, kept.pop(xs), p.structure.dtype)
        g = dex.grid
        theirs = shard(c, g.x, g.q)              # the partner's slice of R_y = C_y
        mine = g.exchange_parts([X], [(theirs.stop - theirs.start, *X.shape[1:])],
                                "program.backward.messages")[0]
        chunks = ColumnChunks(g, mine, r, c, "program.backward.messages",
                              owned=mine is not X)
        b.operands[xs] = np.empty((0, *X.shape[1:]), X.dtype)     # (read by no row pass)
    gathered = _gathered(dex.layout, p, kept, r, c, "program.backward")
    host = cpu.HostOperands(dex.local, p, lambda slot, v: v)
    for k, v in gathered.items():
        b.operands[k] = getattr(host, p.structure.roles[k][0])(k, v)
    extra = [np.ascontiguousarray(dZ)]
    if by_t:
        extra.append(cpu.softmax_term(dZ, inner.Z, cpu.serial(b.work)))
    elif inner.Z is not None and not _completed_whole(p):
        extra.append(np.ascontiguousarray(inner.Z))
    rows = dex.layout.rows(extra, r, "program.backward.cotangent")
    if len(rows) > 1 and not by_t:
        inner.Z = rows[1]
    return rows[0], rows[1] if by_t else None, chunks


def _row_gradients(grid, p: Plan, ctx, dZ) -> dict:
    b, mod = ctx.buffers, cpu.kernels(p)
    rb = cpu.row_backward_buffers(p, ctx, dZ)
    if cpu.columns_only(p):                    # the column pass computes it all
        return cpu.row_backward_columns(p, ctx, rb)
    row_pass = cpu.kernel(mod, "row_pass", b.work)
    if grid.q == 1:
        row_pass(*b.args(), *rb.args(), -1)
    else:
        row_pass(*b.args(), *rb.args(), 0)
        for r, T in enumerate(reversed(rb.T)):
            row_pass(*b.args(), *rb.args(), 1 + 2 * r)
            grid.allreduce(T, "sum", "row", "program.softmax_terms")
            row_pass(*b.args(), *rb.args(), 2 + 2 * r)
    return cpu.row_backward_columns(p, ctx, rb)


def _complete(dex, p: Plan, b, grads: dict, done=()) -> list:
    """Partials of this block into the operands' cotangents: what is read by source (and
    the messages) over the column communicator and back to the rows in one buffer, what
    is read by target over the row communicator, parameters over every rank."""
    grid, layout = dex.grid, dex.layout
    by_column = [k for k in _column_slots(p) if k in grads and k not in done]
    if by_column:
        done = layout.column_sum([grads[k] for k in by_column], b.pattern.nrows,
                                 "program.column_partials", "program.to_rows")
        grads.update(zip(by_column, done, strict=True))
    for k in _row_slots(p):
        if k in grads:
            grads[k] = layout.row_sum(grads[k], "program.row_partials")
    for k, (role, _) in enumerate(p.structure.roles):
        if k in grads and role == "param":
            total = np.ascontiguousarray(grads[k].sum(axis=0))
            grads[k] = grid.allreduce(total, "sum", "world", "program.parameters")[None]
    return cpu.finish_grads(p, b, grads)
