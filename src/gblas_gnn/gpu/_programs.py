r"""Edge programs on the cuda executor: the generated kernels of :mod:`._program_kernels`
over the device pattern (CSR, and its cached CSC view for the column passes).

:func:`forward` prepares the operands on the device (rows by target and by source,
parameters, edge values, dropout keys, the messages as ``(n, heads, f)``), launches the row
pass and finishes the sink with device arrays (``mean``'s and ``avg``'s divisions, a column
reduction, a transposed product); :func:`backward` launches the plan's passes. Nothing moves
between host and device but the device copy of a host operand and the one flag ``avg`` reads
back (negative weights), both counted in the executor's ``transfers``. The context and the
finishing of gradients are every executor's (:mod:`gblas_gnn.executors.program_context`);
the steps follow the cpu executor's runtime (:mod:`gblas_gnn.executors.cpu.programs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..executors.program_context import ProgramContext, aggregate_output, finish_grads
from ..ir.plan import BY_ROW, Plan, plan
from ..semirings import negative_weight_error
from . import _sparse_kernels as sparse
from ._device import group_grid
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


def _heads_view(xp, X, dtype):
    """``(n, f)`` or ``(n, heads, f)`` as the kernels' C-contiguous ``(n, heads, f)``."""
    X = xp.ascontiguousarray(X, dtype=dtype)
    return X.reshape(X.shape[0], 1, X.shape[1]) if X.ndim == 2 else X


def _key(ex, s, slot: int, key):
    """A dropout's key and heads as the kernels' ``uint64[2]``, filled on the device (a fill
    takes its value as a kernel argument: no copy from the host)."""
    heads = next(o.args[2] for o in s.ops if o.kind == "dropout" and o.args[0] == slot) or 1
    K = ex.xp.empty(2, np.uint64)
    K[:1].fill(np.uint64(key))
    K[1:].fill(np.uint64(heads))
    return K


def _prepare(ex, prog, p: Plan) -> _Buffers:
    s, xp = p.structure, ex.xp
    dt = np.dtype(s.dtype)
    pattern = ex.device_pattern(prog.pattern)
    operands, x_shape = [], None
    for slot, op in enumerate(prog.operands):
        if op.role in ("row", "col", "param"):
            v = ex.device_array(op.value, dt)
            operands.append(v.reshape(1) if v.ndim == 0 else v)
        elif op.role == "edges":
            operands.append(xp.ascontiguousarray(ex.device_values(op.value, dt)))
        elif op.role == "eattr":                        # (nnz, f), CSR order
            operands.append(xp.ascontiguousarray(ex.device_array(op.value, dt)))
        elif op.role == "key":
            operands.append(_key(ex, s, slot, op.value))
        else:                                           # the messages
            x_shape = tuple(op.value.shape)
            operands.append(_heads_view(xp, ex.on_device(op.value), dt))
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


def _x_slot(p: Plan) -> int:
    return next(k for k, (role, _) in enumerate(p.structure.roles) if role == "x")


def _sink_outputs(ex, p: Plan, b: _Buffers) -> dict:
    """The row pass's output arrays (by kernel argument name)."""
    xp, dt = ex.xp, np.dtype(p.structure.dtype)
    n, nnz, H = b.pattern.nrows, b.pattern.nnz, p.heads
    kind = p.structure.sink[0]
    if kind == "rows":
        return {"OUT": xp.empty((n, H), dt)}
    if kind == "messages":
        shape = (n, *p.structure.ops[p.structure.root].trail)
        out = {"OUT": xp.empty(shape, dt)}
        if p.sink[1] != "sum":
            out["ARG"] = xp.empty(shape, np.int64)
        return out
    if kind != "aggregate":
        return {"W": xp.empty((H, nnz), dt)}
    X = b.operands[_x_slot(p)]
    root = p.structure.ops[p.structure.root]
    out = {"Z": xp.empty((n, H, X.shape[2]), dt),
           "W": xp.empty((1, 1), dt) if root.kind == "softmax" else xp.empty((H, nnz), dt)}
    if p.extreme:
        out["ARG"] = xp.empty((n, H, X.shape[2]), np.int64)
    if p.weighted_mean:
        out["DEN"] = xp.empty((n, H), dt)
        out["NEG"] = xp.zeros(1, np.int64)
    return out


def forward(ex, prog, keep: bool):
    """``(out, ctx)`` of a fused program (see the module docstring)."""
    p = plan(prog.structure)
    b = _prepare(ex, prog, p)
    outs = _sink_outputs(ex, p, b)
    dt, n = np.dtype(p.structure.dtype), b.pattern.nrows
    stats = [ex.xp.empty((p.heads_of(k), n), dt) for k in p.softmaxes for _ in (0, 1)]
    _launch(ex, kernels(p).forward, n, *b.args(), *outs.values(), *stats, -1)
    return _finish_forward(ex, p, b, outs, prog.pattern, keep)


def _finish_forward(ex, p: Plan, b: _Buffers, outs: dict, A, keep: bool):
    xp = ex.xp
    kind, heads = p.structure.sink[0], p.structure.heads
    ctx = ProgramContext(p, b, extra=outs) if keep else None
    if kind == "values":
        return [ex.edge_from_values(A, outs["W"][h]) for h in range(p.heads)], None
    if kind == "rows":
        out = outs["OUT"]
        if ctx is not None:
            ctx.Z = out
        return (xp.ascontiguousarray(out[:, 0]) if heads is None else out), ctx
    if kind == "messages":
        return outs["OUT"], ctx
    if kind in ("cols", "spmm_t"):
        X = b.operands[_x_slot(p)] if kind == "spmm_t" else None
        parts = [ex.col_reduce(ex.edge_from_values(A, W), "sum") if X is None else
                 ex.spmm_t(ex.edge_from_values(A, W), X[:, h])
                 for h, W in enumerate(outs["W"])]
        return (parts[0] if heads is None else xp.stack(parts, axis=1)), ctx
    Z = outs["Z"]
    if p.weighted_mean:
        if ex.to_numpy(outs["NEG"], "avg weights")[0]:
            raise negative_weight_error(p.aggr)
        den = outs["DEN"][:, :, None]
        Z = xp.where(den > 0, Z / xp.where(den > 0, den, 1), 0).astype(Z.dtype)
    counts = ex.row_counts(A, Z.dtype)[:, None, None] if p.counted_mean else None
    return aggregate_output(ctx, Z, heads, counts)


def backward(ex, ctx: ProgramContext, dout) -> list:
    """The operands' cotangents of a fused program."""
    p, b = ctx.plan, ctx.buffers
    b.with_csc()
    dt = np.dtype(p.structure.dtype)
    kind = p.structure.sink[0]
    dZ = ex.device_array(dout, dt)
    if kind in ("rows", "cols"):
        dZ = dZ.reshape(dZ.shape[0], -1)
    elif kind == "messages":
        dZ = ex.xp.ascontiguousarray(dZ)
    else:
        dZ = _heads_view(ex.xp, dZ, dt)
        if ctx.counts is not None:
            dZ = dZ / ctx.counts
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
    X = b.operands[_x_slot(p)]
    dX = xp.empty(X.shape, dt)
    EB = xp.empty((H, nnz), dt)
    GF = xp.empty((H, nnz), dt) if p.factor is not None else xp.empty((1, 1), dt)
    col = _zeros(ex, p, b, {"col"})
    _launch(ex, mod.column_pass, b.pattern.ncols, *b.args(), dZ, T, dX, EB, GF,
            *col.values())
    row = _zeros(ex, p, b, BY_ROW)
    if row:
        _launch(ex, mod.column_rows, n, *b.args(), EB, GF, *row.values())
    return {**col, **row, _x_slot(p): dX}


def _row(ex, p: Plan, ctx: ProgramContext, dZ) -> dict:
    """Strategy ``"row"``: the row pass through every stage, then the column pass."""
    b, mod, xp = ctx.buffers, kernels(p), ex.xp
    dt = np.dtype(p.structure.dtype)
    H, n, nnz = p.heads, b.pattern.nrows, b.pattern.nnz
    kind = p.structure.sink[0]
    stage = [xp.empty((p.heads_of(k), nnz), dt) for k in p.softmaxes for _ in (0, 1)]
    extra = list(ctx.extra.values())[1:] if kind in ("aggregate", "messages") else []
    Z = ctx.Z if p.weighted_mean else xp.empty((1, 1, 1), dt)
    spmm_t = kind == "spmm_t"
    dXr = xp.zeros(b.operands[_x_slot(p)].shape, dt) if spmm_t else xp.empty((1, 1, 1), dt)
    T = [xp.empty((p.heads_of(k), n), dt) for k in p.softmaxes]
    GB = xp.empty((H, nnz), dt)
    row = _zeros(ex, p, b, BY_ROW)
    _launch(ex, mod.row_pass, n, *b.args(), dZ, GB, Z, *stage, *extra, *T, dXr,
            *row.values(), -1)
    col = _zeros(ex, p, b, {"col"})
    dX = xp.empty(b.operands[_x_slot(p)].shape, dt) if kind == "aggregate" else \
        xp.empty((1, 1, 1), dt)
    _launch(ex, mod.row_columns, b.pattern.ncols, *b.args(), dZ, GB, Z, *stage, *extra, dX,
            *col.values())
    grads = {**row, **col}
    if kind == "aggregate":
        grads[_x_slot(p)] = dX
    elif spmm_t:
        grads[_x_slot(p)] = dXr
    return grads
