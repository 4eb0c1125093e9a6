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
"""

from __future__ import annotations

import numpy as np

from ..executors.alignment import aligned_empty
from ..executors.cpu import programs as cpu
from ..ir.plan import Plan, fusable, plan

__all__ = ["runs", "forward", "backward"]


def runs(structure) -> bool:
    """Whether the grid runs ``structure`` with the generated kernels."""
    if not fusable(structure):
        return False
    sink = structure.sink
    return sink[0] in ("aggregate", "messages", "values") or \
        (sink[0] == "rows" and sink[1] == "sum")


def _column_slots(p: Plan) -> list[int]:
    roles = p.structure.roles
    return [k for k, (role, _) in enumerate(roles)
            if role == "col" or (role == "x" and p.sink_rule.gathers_messages)]


def forward(dex, prog, keep: bool):
    """``(out, ctx)`` of a fused program on this rank's block."""
    from .graph import Block

    grid, local = dex.grid, dex.local
    p = plan(prog.structure)
    A = prog.pattern
    M = A.M if isinstance(A, Block) else A
    slots = _column_slots(p)
    ncols = M.ncols
    parts = [np.ascontiguousarray(prog.operands[k].value) for k in slots]
    copies = grid.exchange_parts(parts, [(ncols, *v.shape[1:]) for v in parts],
                                 "program.columns") if slots else []
    cols = dict(zip(slots, copies, strict=True))
    ids = (A.row_ids.astype(np.int64), A.col_ids.astype(np.int64)) \
        if isinstance(A, Block) else None
    b = cpu.prepare(local, prog, p, M, lambda slot, v: cols[slot], ids)
    mod = cpu.kernels(p)
    # max / min: the winners complete the rows over the grid row, backward or not
    outs = cpu.sink_outputs(p, b, winners=keep or grid.q > 1)
    fwd = cpu.kernel(mod, "forward", b.work)
    args = [*b.args(), *outs.values(), *cpu.stats(p, b)]
    if grid.q == 1:
        fwd(*args, -1)
    else:
        _phases(grid, p, fwd, args, outs)
    out, ctx = cpu.finish_forward(local, p, b, outs, M, keep,
                                  counts=dex.row_counts(A, b.avals.dtype
                                                        if b.avals.size else
                                                        np.dtype(p.structure.dtype)))
    if p.sink[0] == "values":
        out = [A.with_matrix(E) if isinstance(A, Block) else E for E in out]
    return out, ctx


def _phases(grid, p: Plan, fwd, args: list, outs: dict) -> None:
    """The row pass one phase at a time, with the row communicator's collectives between
    them (the stage maxima and sums are the kernel's ``RM<k>``, ``RS<k>`` arguments)."""
    stats = args[len(args) - 2 * len(p.softmaxes):]
    for m in range(len(p.softmaxes)):
        RM, RS = stats[2 * m], stats[2 * m + 1]
        fwd(*args, 3 * m)
        grid.allreduce(RM, "max", "row", "program.row_max")
        fwd(*args, 3 * m + 1)
        grid.allreduce(RS, "sum", "row", "program.row_sum")
        fwd(*args, 3 * m + 2)
    fwd(*args, 3 * len(p.softmaxes))
    kind = p.sink[0]
    if kind == "rows" or (kind == "messages" and p.sink[1] == "sum"):
        grid.allreduce(outs["OUT"], "sum", "row", "program.rows")
    elif kind == "messages":
        _extreme(grid, p.sink[1] == "max", args, outs["OUT"], outs["ARG"])
    elif kind == "aggregate":
        if p.extreme:
            _extreme(grid, p.algebra.maximises, args, outs["Z"], outs["ARG"])
        else:
            grid.allreduce(outs["Z"], "sum", "row", "program.aggregate")
            if p.weighted_mean:
                grid.allreduce(outs["DEN"], "sum", "row", "program.weights")
                # a negative weight anywhere stops every rank (not only its grid row)
                grid.allreduce(outs["NEG"], "max", "world", "program.weights")


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
    """The operands' cotangents of a fused program on the grid (row layout)."""
    grid = dex.grid
    p, b = ctx.plan, ctx.buffers
    b.csc = b.pattern.csc()
    dZ = cpu.root_cotangent_inputs(p, ctx, dout)
    if p.strategy == "column":
        grads = cpu.column_gradients(p, ctx, dZ)
    else:
        grads = _row_gradients(grid, p, ctx, dZ)
    return _complete(dex, p, b, grads)


def _row_gradients(grid, p: Plan, ctx, dZ) -> dict:
    b, mod = ctx.buffers, cpu.kernels(p)
    rb = cpu.row_backward_buffers(p, ctx, dZ)
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


def _complete(dex, p: Plan, b, grads: dict) -> list:
    """Partials of this block into the operands' cotangents: what is read by source (and
    the messages) over the column communicator and back to the rows in one buffer, what
    is read by target over the row communicator, parameters over every rank."""
    grid = dex.grid
    roles = p.structure.roles
    by_column = [k for k in _column_slots(p) if k in grads]
    if by_column:
        n_cols = b.pattern.ncols
        n_rows = b.pattern.nrows
        sizes = [int(np.prod(grads[k].shape[1:])) for k in by_column]
        dt = np.dtype(p.structure.dtype)
        buf = aligned_empty(n_cols * sum(sizes), dt)
        start = 0
        for k, w in zip(by_column, sizes, strict=True):
            buf[start:start + n_cols * w] = grads[k].reshape(-1)
            start += n_cols * w
        grid.allreduce(buf, "sum", "col", "program.column_partials")
        rows = grid.exchange(buf, "program.to_rows", rows=n_rows * sum(sizes))
        start = 0
        for k, w in zip(by_column, sizes, strict=True):
            grads[k] = rows[start:start + n_rows * w].reshape(n_rows, *grads[k].shape[1:])
            start += n_rows * w
    for k, (role, _) in enumerate(roles):
        if k not in grads:
            continue
        if role == "row":
            grid.allreduce(grads[k], "sum", "row", "program.row_partials")
        elif role == "param":
            total = np.ascontiguousarray(grads[k].sum(axis=0))
            grads[k] = grid.allreduce(total, "sum", "world", "program.parameters")[None]
    return cpu.finish_grads(p, b, grads)
