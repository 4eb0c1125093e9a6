r"""Edge programs on the cuda executor: the generated kernels of :mod:`._program_kernels`
over the device pattern (CSR, and its cached CSC view for the column passes).

:func:`forward` prepares the operands on the device (rows by target and by source,
parameters, edge values, dropout keys, the messages as ``(n, heads, f)``), launches the row
pass and finishes the sink with device arrays (``mean``'s and ``avg``'s divisions, a column
reduction, a transposed product); :func:`backward` launches the plan's passes. Nothing moves
between host and device but the device copy of a host operand and the one flag ``avg`` reads
back (negative weights), both counted in the executor's ``transfers``. The context and the
finishing of gradients are every executor's (:mod:`gblas_gnn.executors.program_runtime`);
the steps follow the cpu executor's runtime (:mod:`gblas_gnn.executors.cpu.programs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..executors import program_runtime as runtime
from ..executors.program_runtime import ProgramContext, finish_grads, heads_view, x_slot
from ..ir.plan import BY_ROW, Plan, plan
from ..semirings.algebra import PLUS_TIMES
from . import _semiring_kernels as srk
from . import _sparse_kernels as sparse
from ._device import LANES, SPLIT_EDGES, group_grid
from ._pattern import SplitRows
from ._program_kernels import kernels

__all__ = ["forward", "backward", "ProgramContext"]


@dataclass
class _Buffers:
    """A program's device arrays in the order of the kernels' arguments."""

    pattern: Any                    # the DevicePattern
    head: list                      # indptr, indices, colptr, perm, crow, rid, cid, AV
    operands: list
    softmax: list                   # S<k>, (heads_k, nnz)
    x_shape: tuple | None = None    # the messages' original shape

    def args(self) -> list:
        return [*self.head, *self.operands, *self.softmax]

    def with_csc(self) -> None:
        """Put the pattern's CSC view (built at first use) in the column passes' slots."""
        self.head[2:5] = self.pattern.csc()


def _launch(ex, kernel, items: int, *args) -> None:
    """``kernel`` with a lane group per item (nothing to do without items)."""
    if items:
        ex.launch(kernel, group_grid(items), *args)


def _platform(ex) -> runtime.Platform:
    """How the runtime allocates on the device and reads back (counted transfers)."""
    xp = ex.xp
    return runtime.Platform(xp, xp.empty, xp.empty, lambda nnz: np.int64, ex.to_numpy,
                            xp.ascontiguousarray)


class _DeviceOperands:
    """The operands as the device kernels read them: device arrays of the program's dtype
    (a host operand is copied once, counted)."""

    def __init__(self, ex, p: Plan):
        self.ex, self.p = ex, p
        self.dt = np.dtype(p.structure.dtype)

    def row(self, slot, v):
        return self.ex.device_array(v, self.dt)

    col = param = row

    def edges(self, slot, v):
        return self.ex.xp.ascontiguousarray(self.ex.device_values(v, self.dt))

    def eattr(self, slot, v):                   # (nnz, f), CSR order
        return self.ex.xp.ascontiguousarray(self.ex.device_array(v, self.dt))

    def key(self, slot, key):
        """The key and the dropout's heads as the kernels' ``uint64[2]``, filled on the
        device (a fill takes its value as a kernel argument: no copy from the host)."""
        K = self.ex.xp.empty(2, np.uint64)
        K[:1].fill(np.uint64(key))
        K[1:].fill(np.uint64(runtime.dropout_heads(self.p, slot)))
        return K

    def x(self, slot, v):
        return heads_view(self.ex.xp, self.ex.on_device(v), self.dt)


def _prepare(ex, prog, p: Plan) -> _Buffers:
    s, xp = p.structure, ex.xp
    dt = np.dtype(s.dtype)
    pattern = ex.device_pattern(prog.pattern)
    operands, x_shape = runtime.operand_arrays(prog, _DeviceOperands(ex, p))
    # unread slots hold arrays of the types the kernels are compiled for: the CSR index
    # arrays stand for the CSC view until a backward needs it, and for the global ids
    # until a dropout does
    ids = (xp.arange(pattern.nrows, dtype=np.int64), xp.arange(pattern.ncols, dtype=np.int64)) \
        if any(o.kind == "dropout" for o in s.ops) else (pattern.indptr,) * 2
    avals = ex.device_values(prog.pattern, dt) if any(o.kind == "avals" for o in s.ops) else \
        xp.zeros(1, dt)
    head = [pattern.indptr, pattern.indices, pattern.indptr, pattern.indices,
            pattern.indices, *ids, xp.ascontiguousarray(avals)]
    softmax = [xp.empty((p.heads_of(k), pattern.nnz), dt) for k in p.softmaxes]
    return _Buffers(pattern, head, operands, softmax, x_shape)


def _sink_outputs(ex, p: Plan, b: _Buffers) -> dict:
    """The row pass's output arrays (by kernel argument name); an aggregate's kernels keep
    the root's values per edge in ``W`` unless the root is a softmax (its own buffer)."""
    xp, dt = ex.xp, np.dtype(p.structure.dtype)
    weights, features = None, None
    if p.sink_rule.gathers_messages:
        features = b.operands[x_slot(p)].shape[2]
        root = p.structure.ops[p.structure.root]
        weights = xp.empty((1, 1), dt) if root.kind == "softmax" else \
            xp.empty((p.heads, b.pattern.nnz), dt)
    return runtime.sink_outputs(_platform(ex), p, b.pattern.nrows, b.pattern.nnz, features,
                                weights=weights)


def forward(ex, prog, keep: bool):
    """``(out, ctx)`` of a fused program (see the module docstring)."""
    p = plan(prog.structure)
    b = _prepare(ex, prog, p)
    outs = _sink_outputs(ex, p, b)
    dt, n = np.dtype(p.structure.dtype), b.pattern.nrows
    stats = [ex.xp.empty((p.heads_of(k), n), dt) for k in p.softmaxes for _ in (0, 1)]
    _launch(ex, kernels(p).forward, n, *b.args(), *outs.values(), *stats, -1)
    return runtime.finish_forward(ex, _platform(ex), p, b, outs, prog.pattern, keep)


def backward(ex, ctx: ProgramContext, dout) -> list:
    """The operands' cotangents of a fused program."""
    p, b = ctx.plan, ctx.buffers
    b.with_csc()
    dt = np.dtype(p.structure.dtype)
    dZ = runtime.cotangent_layout(ex.xp, p, ctx, ex.device_array(dout, dt))
    grads = _column(ex, p, ctx, dZ) if p.strategy == "column" else _row(ex, p, ctx, dZ)
    return finish_grads(p, b, grads)


def _zeros(ex, p: Plan, b: _Buffers, roles: set[str]) -> dict:
    """Zeroed cotangents by slot, in the order of the kernels' gradient arguments (the
    plan's slots read by target, by source, the parameters' partials of every row, the
    edge features')."""
    out = {}
    for role, slots in (("row", p.rows), ("col", p.cols), ("param", p.params),
                        ("eattr", p.eattrs)):
        for slot in slots if role in roles else ():
            v = b.operands[slot]
            out[slot] = ex.xp.zeros((b.pattern.nrows, *v.shape) if role == "param" else
                                    v.shape, v.dtype)
    return out


def _column(ex, p: Plan, ctx: ProgramContext, dZ) -> dict:
    """Strategy ``"column"``: ``t_i = ⟨dZ_i, Z_i⟩`` per head, the column pass and the light
    row pass."""
    b, mod, xp = ctx.buffers, kernels(p), ex.xp
    dt = np.dtype(p.structure.dtype)
    H, n, nnz = p.heads, b.pattern.nrows, b.pattern.nnz
    T = xp.empty((H, n), dt)
    _launch(ex, sparse.head_dots, n * H, dZ.reshape(n, -1), ctx.Z.reshape(n, -1), H, T)
    X = b.operands[x_slot(p)]
    dX = xp.empty(X.shape, dt)
    EB = xp.empty((H, nnz), dt)
    GF = xp.empty((H, nnz), dt) if p.factor is not None else xp.empty((1, 1), dt)
    col = _zeros(ex, p, b, {"col"})
    args = [*b.args(), dZ, T, dX, EB, GF, *col.values()]
    _launch(ex, mod.column_pass, b.pattern.ncols, *args, SPLIT_EDGES)
    _walk_chunks(ex, mod.column_chunks, b.pattern.csc_split(), args, [dX, *col.values()])
    row = _zeros(ex, p, b, BY_ROW)
    if row:
        args = [*b.args(), EB, GF, *row.values()]
        _launch(ex, mod.column_rows, n, *args, SPLIT_EDGES)
        by_row = [v for slot, v in row.items() if slot not in p.eattrs]   # (dEA: per edge)
        _walk_chunks(ex, mod.row_chunks, b.pattern.split, args, by_row)
    return {**col, **row, x_slot(p): dX}


def _walk_chunks(ex, kernel, split: SplitRows | None, args: list, outputs: list) -> None:
    """The long items a pass skipped (none when ``split`` is None): ``kernel`` (its
    ``*_chunks`` twin) walks each chunk with the pass's ``args``, every array of ``outputs``
    replaced by zeroed partials, a row per chunk; each long item's partials are then added
    in order into its row of the output (the plus-times SpMM's combining kernel:
    deterministic, no atomics)."""
    if split is None:
        return
    partial = {id(w): ex.xp.zeros((split.chunks, *w.shape[1:]), w.dtype) for w in outputs}
    _launch(ex, kernel, split.chunks, split.lo, split.hi, split.row_of,
            *(partial.get(id(a), a) for a in args))
    combine = srk.SHIPPED[PLUS_TIMES][0].combine
    heavy = int(split.rows.shape[0])
    for whole in outputs:
        width = int(np.prod(whole.shape[1:]))
        _launch(ex, combine, heavy * -(-width // LANES), split.rows, split.first,
                partial[id(whole)].reshape(split.chunks, width),
                whole.reshape(whole.shape[0], width))


def _row(ex, p: Plan, ctx: ProgramContext, dZ) -> dict:
    """Strategy ``"row"``: the row pass through every stage, then the column pass."""
    b, mod, xp = ctx.buffers, kernels(p), ex.xp
    dt = np.dtype(p.structure.dtype)
    H, n, nnz = p.heads, b.pattern.nrows, b.pattern.nnz
    rule = p.sink_rule
    stage = [xp.empty((p.heads_of(k), nnz), dt) for k in p.softmaxes for _ in (0, 1)]
    extra = list(ctx.extra.values())[1:] if rule.keeps_outputs else []
    Z = ctx.Z if p.weighted_mean else xp.empty((1, 1, 1), dt)
    spmm_t = rule.transposed
    dXr = xp.zeros(b.operands[x_slot(p)].shape, dt) if spmm_t else xp.empty((1, 1, 1), dt)
    T = [xp.empty((p.heads_of(k), n), dt) for k in p.softmaxes]
    GB = xp.empty((H, nnz), dt)
    row = _zeros(ex, p, b, BY_ROW)
    _launch(ex, mod.row_pass, n, *b.args(), dZ, GB, Z, *stage, *extra, *T, dXr,
            *row.values(), -1)
    col = _zeros(ex, p, b, {"col"})
    dX = xp.empty(b.operands[x_slot(p)].shape, dt) if rule.gathers_messages else \
        xp.empty((1, 1, 1), dt)
    args = [*b.args(), dZ, GB, Z, *stage, *extra, dX, *col.values()]
    _launch(ex, mod.row_columns, b.pattern.ncols, *args, SPLIT_EDGES)
    _walk_chunks(ex, mod.row_column_chunks, b.pattern.csc_split(), args,
                 [*([dX] if rule.gathers_messages else []), *col.values()])
    grads = {**row, **col}
    if rule.gathers_messages:
        grads[x_slot(p)] = dX
    elif spmm_t:
        grads[x_slot(p)] = dXr
    return grads
