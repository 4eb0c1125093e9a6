r"""Edge programs on the cpu executor: the generated kernels of :mod:`._program_kernels` over
the cached CSR/CSC buffers of the pattern.

This module is the cpu executor's program runtime as a public API: the executor's
``program_forward`` / ``program_backward`` run :func:`forward` and :func:`backward`, and the
``dist`` executor runs the same steps on its block (:mod:`gblas_gnn.dist.programs`) with its
collectives in between:

* :func:`prepare` gathers a program's arrays in the kernels' argument order
  (:class:`Buffers`: rows by target, rows by source through ``columns``, parameters, edge
  values, dropout keys and global ids, the messages as ``(n, heads, f)`` views);
* :func:`sink_outputs` and :func:`stats` allocate the row pass's outputs and its softmax
  maxima and sums, :func:`kernels` / :func:`kernel` give the generated kernel to run (on
  one thread, or its driver on shares of its rows on several, by the work:
  :data:`SERIAL_WORK_BELOW`), and :func:`finish_forward` makes the output and the
  :class:`~gblas_gnn.executors.program_runtime.ProgramContext`;
* backward: :func:`root_cotangent_inputs`, then strategy ``"column"``
  (:func:`column_gradients`) or ``"row"`` (:func:`row_backward_buffers`, the row pass, then
  :func:`row_backward_columns`), and :func:`finish_grads`.

A program the kernels do not cover (:func:`fused` is False) runs the reference lowering.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from ...ir.plan import BY_ROW, Plan, fusable, leaf_kinds, plan
from ...ir.program import Structure
from ...ir.sinks import edge_messages
from .. import program_runtime as runtime
from ..alignment import aligned_empty
from ..looped_values import LoopedValues
from ..patterns import CSRPattern, index_dtype, unsigned_view
from ..program_runtime import ProgramContext, finish_grads, heads_view, x_slot
from ._kernel_primitives import head_row_dots
from ._minmax_kernels import winner_features
from ._program_kernels import (
    SERIAL_WORK_BELOW,
    columns_only,
    kernel,
    kernels,
    partial_rows,
    serial,
    sized_like,
)

__all__ = ["ProgramContext", "Buffers", "RowBackward", "fused", "forward", "backward",
           "prepare", "finish_forward", "column_gradients", "row_gradients", "sink_outputs",
           "root_cotangent_inputs", "row_backward_buffers", "row_backward_columns",
           "finish_grads", "stats", "kernels", "kernel", "serial", "SERIAL_WORK_BELOW",
           "sized_like", "columns_only"]

_EMPTY_I = np.zeros(0, np.int64)
_EMPTY_U = np.zeros(0, np.uint64)
_NO_NUMBERS = np.zeros(0, np.float64)


def fused(structure) -> bool:
    """Whether the generated kernels run this program."""
    return fusable(structure)


@dataclass
class Buffers:
    """A program's arrays in the order of the kernels' arguments."""

    pattern: CSRPattern             # of A
    csr: tuple                      # indptr, indices
    csc: tuple                      # colptr, perm, rows (empty until a backward needs it)
    ids: tuple                      # global row and column ids (dropout), or empty
    avals: np.ndarray
    operands: list
    softmax: list                   # S<k>, (nnz, heads_k): edge-major, a column pass reads
                                    # every head of an edge from one cache line
    heads: int
    x_shape: tuple | None = None    # the messages' original shape
    features: frozenset = frozenset()   # the slots of edge features
    numbers: np.ndarray = field(default_factory=lambda: _NO_NUMBERS)   # NUM: run-time numbers

    @property
    def width(self) -> int:
        """The numbers each edge moves: the messages' row, else its heads."""
        return max(int(np.prod(self.x_shape[1:])) if self.x_shape else self.heads, 1)

    @property
    def work(self) -> int:
        """Edges times :attr:`width`: it picks one thread or several
        (:func:`._program_kernels.serial`)."""
        return self.pattern.nnz * self.width

    def args(self, csc: bool = False) -> list:
        """The kernels' arguments before their outputs: the index buffers as unsigned views
        (:func:`~gblas_gnn.executors.patterns.unsigned_view`: no wrap-around test of a
        negative index on any access), then the rest."""
        index = (*self.csr, *(self.csc if csc else (_EMPTY_U,) * 3))
        operands = []
        for slot, v in enumerate(self.operands):
            if slot in self.features:
                operands.extend(feature_args(v))
            else:
                operands.append(v)
        return [*map(unsigned_view, index), *self.ids, self.avals, self.numbers, *operands,
                *self.softmax]


def feature_args(v) -> tuple:
    """An edge-feature operand as the kernels take it, ``EA<s>, EL<s>, ED<s>``: the features
    of a graph with loops as its base's, the loops' and the shift
    (:class:`~gblas_gnn.edge_attr.LoopedValues`), others as themselves beside no loops."""
    if isinstance(v, LoopedValues):
        return v.base, v.loops, v.shift
    return v, np.empty((0, v.shape[1]), v.dtype), _EMPTY_U


#: how the cpu runtime allocates and reads its (host) arrays
HOST = runtime.Platform(np, np.empty, aligned_empty, index_dtype, lambda a, reason: a,
                        lambda a: a.copy())


class HostOperands:
    """The operands as the cpu kernels read them: C-contiguous host arrays of the program's
    dtype, a source-side one through ``columns`` (a grid's rows of its block's columns)."""

    def __init__(self, ex, p: Plan, columns):
        self.ex, self.p, self.columns = ex, p, columns
        self.dt = np.dtype(p.structure.dtype)

    def row(self, slot, v):
        return np.ascontiguousarray(v, dtype=self.dt)

    param = row

    def eattr(self, slot, v):                   # (nnz, f) in the CSR order, or apart
        if isinstance(v, LoopedValues):
            return v.astype(self.dt)
        return np.ascontiguousarray(v, dtype=self.dt)

    def col(self, slot, v):
        return np.ascontiguousarray(self.columns(slot, v), dtype=self.dt)

    def edges(self, slot, v):
        return np.ascontiguousarray(self.ex.edge_values(v), dtype=self.dt)

    def key(self, slot, v):                     # the key and the dropout's heads
        return np.array([v, runtime.dropout_heads(self.p, slot)], np.uint64)

    def x(self, slot, v):                       # the messages, by source for an aggregate
        side = self.columns(slot, v) if self.p.sink_rule.gathers_messages else v
        return heads_view(np, np.asarray(side, dtype=self.dt))


def interleaved(ex, prog):
    """``prog`` with the features of a graph with loops as one ``(nnz, f)`` array in its CSR
    order (:meth:`~gblas_gnn.executors.looped_values.LoopedValues.interleaved`: made once and
    kept with them), for the reference lowering; ``prog`` itself when it reads none."""
    if not any(isinstance(o.value, LoopedValues) for o in prog.operands):
        return prog
    pattern = ex.csr_pattern(prog.pattern)

    def edges():
        return pattern.rows(), pattern.indices.astype(np.int64)
    return replace(prog, operands=[
        replace(o, value=o.value.interleaved(edges))
        if isinstance(o.value, LoopedValues) else o for o in prog.operands])


def prepare(ex, prog, p: Plan, A, columns, ids=None) -> Buffers:
    """The kernels' arrays for ``prog`` on the local pattern ``A``; ``columns(slot, value)``
    gives a source-side operand's rows for A's columns (identity on one process)."""
    s = p.structure
    dt = np.dtype(s.dtype)
    pattern = ex.csr_pattern(A)
    operands, x_shape = runtime.operand_arrays(prog, HostOperands(ex, p, columns))
    if ids is None:                 # global ids (a grid passes its block's), for dropout
        ids = (np.arange(pattern.nrows, dtype=np.int64),
               np.arange(pattern.ncols, dtype=np.int64)) \
            if any(o.kind == "dropout" for o in s.ops) else (_EMPTY_I, _EMPTY_I)
    avals = ex.pattern_values(A, dt) if any(o.kind == "avals" for o in s.ops) else \
        np.zeros(0, dt)
    softmax = [np.empty((pattern.nnz, p.heads_of(k)), dt) for k in p.softmaxes]
    return Buffers(pattern, (pattern.indptr, pattern.indices), (), ids, avals, operands,
                   softmax, p.heads, x_shape, frozenset(p.features), run_time_numbers(s))


def run_time_numbers(s: Structure) -> np.ndarray:
    """The kernels' ``NUM``: the structure's numbers read at run time
    (:attr:`~gblas_gnn.ir.program.Structure.numbers`), float64."""
    if not s.numbers:
        return _NO_NUMBERS
    return np.array([v for v, _ in s.numbers], dtype=np.float64)


def sink_outputs(p: Plan, b: Buffers, winners: bool = True) -> dict:
    """The sink's output arrays of the row pass (by kernel argument name).

    Parameters
    ----------
    p : Plan
        The program's plan.
    b : Buffers
        Its arrays (:func:`prepare`).
    winners : bool
        max / min: whether ``ARG`` records the winner of every (row, head, feature), as
        int32 CSR positions when they fit, which a backward or a grid's completion of the
        rows needs; ``ARG`` has no rows otherwise (the kernel records nothing, and its
        argument types are a training forward's: one compilation serves both).
    """
    f = b.operands[x_slot(p)].shape[2] if p.sink_rule.gathers_messages else None
    return runtime.sink_outputs(HOST, p, b.pattern.nrows, b.pattern.nnz, f, winners)


def stats(p: Plan, b: Buffers) -> list:
    dt = np.dtype(p.structure.dtype)
    return [np.empty((p.heads_of(k), b.pattern.nrows), dt)
            for k in p.softmaxes for _ in ("max", "sum")]


def forward(ex, prog, keep: bool):
    """``(out, ctx)`` of a fused program on one process (see the module docstring)."""
    p = plan(prog.structure)
    mod = kernels(p)
    b = prepare(ex, prog, p, prog.pattern, lambda slot, v: v)
    outs = sink_outputs(p, b, winners=keep)
    kernel(mod, "forward", b.work)(*b.args(), *outs.values(), *stats(p, b), -1)
    return finish_forward(ex, p, b, outs, prog.pattern, keep)


def finish_forward(ex, p: Plan, b: Buffers, outs: dict, A, keep: bool, counts=None):
    """The program's output from the row pass's arrays (and its context with ``keep``);
    ``counts``: the rows' entries for ``mean`` (a grid's are over the whole row)."""
    return runtime.finish_forward(ex, HOST, p, b, outs, A, keep, counts)


def root_cotangent_inputs(p: Plan, ctx: ProgramContext, dout):
    """``dZ`` in the kernels' layout for the backward (``mean`` divided by the counts)."""
    return runtime.cotangent_layout(np, p, ctx, np.asarray(dout, dtype=p.structure.dtype))


def backward(ex, ctx: ProgramContext, dout) -> list:
    """The operands' cotangents of a fused program on one process."""
    p, b = ctx.plan, ctx.buffers
    b.csc = b.pattern.csc()
    dZ = root_cotangent_inputs(p, ctx, dout)
    if p.strategy == "column":
        grads = column_gradients(p, ctx, dZ, row_t=None, share=True)
    else:
        grads = row_gradients(p, ctx, dZ)
    return finish_grads(p, b, grads)


def _zeros_like_operands(p: Plan, b: Buffers, roles: set[str], dX=None,
                         by_column: bool = False) -> dict:
    """Zeroed cotangent arrays by slot, in the kernels' argument order (the rows read by
    target, by source, the parameters' partials per row or block of rows
    (:func:`._program_kernels.partial_rows`; of columns ``by_column``), the edge
    features'); with the messages' cotangent ``dX``, an operand that is the messages' own
    array gets a view of ``dX`` instead (:func:`_same_rows`)."""
    out = {}
    X = b.operands[x_slot(p)] if dX is not None else None
    block = partial_rows(p)
    items = b.pattern.ncols if by_column else b.pattern.nrows
    for role, slots in (("row", p.rows), ("col", p.cols), ("param", p.params),
                        ("eattr", p.eattrs)):
        for slot in slots if role in roles else ():
            v = b.operands[slot]
            if X is not None and role in ("row", "col") and _same_rows(v, X):
                out[slot] = dX.reshape(v.shape)
                continue
            # np.zeros, not zeros_like: fresh zero pages instead of a pass that fills
            out[slot] = np.zeros((-(-items // block), *v.shape)
                                 if role == "param" else v.shape, v.dtype)
    return out


def _same_rows(a, b) -> bool:
    """Whether ``a`` and ``b`` are one C-contiguous block of memory (a formulation's rows
    passed in two roles: AGNN's normalised features are the scores' rows by target, by
    source and the messages)."""
    return (a.ctypes.data == b.ctypes.data and a.nbytes == b.nbytes and a.dtype == b.dtype
            and a.shape[0] == b.shape[0] and a.flags.c_contiguous and b.flags.c_contiguous)


def softmax_term(dZ, Z, small: bool) -> np.ndarray:
    r""":math:`t_{ih} = \langle \bar Z_{ih}, Z_{ih} \rangle`, ``(rows, heads)`` of two
    ``(rows, heads, f)`` arrays: numpy's for a ``small`` program (no thread wake-up), else
    the parallel kernel."""
    t = np.empty(dZ.shape[:2], np.result_type(dZ, Z))   # by row: one line per edge's row
    if small:
        np.einsum("ihc,ihc->ih", dZ, Z, out=t)
    else:
        head_row_dots(dZ, Z, t)
    return t


def column_gradients(p: Plan, ctx: ProgramContext, dZ, row_t=None,
                     share: bool = False, chunks: MessageChunks | None = None) -> dict:
    """Strategy ``"column"``: the softmax term ``t`` (given, or the dense row product of
    ``dZ`` and the kept ``Z``), the column pass and the light row pass. Returns the
    cotangents by slot (column-side ones in the column layout, parameters per row).

    With ``share`` (one process: rows by target and by source are the same vertices) an
    operand that is the messages' own array has its cotangent summed into the messages' by
    the kernels (the column pass zeroes ``dX_j`` before it adds to any row ``j``, the row
    pass adds to ``dX_i`` after) and gets None: the same total reaches the traced input,
    :math:`\\bar H = \\bar X + \\bar C + \\bar R` for ``H`` in all three roles (AGNN's
    normalised rows), with one array for the tape instead of three to add up and two fewer
    zeroed (n, k) arrays.

    With ``chunks`` (:class:`MessageChunks`) the column pass runs a range of columns at a
    time on the messages of that range alone, which ``chunks`` supplies and whose
    cotangents it takes and completes (a grid's gathered rows: never all of them at once);
    the messages' cotangent is then what ``chunks`` returns."""
    b, mod = ctx.buffers, kernels(p)
    dt = np.dtype(p.structure.dtype)
    H, nnz = p.heads, b.pattern.nnz
    small = serial(b.work)              # numpy, not a parallel kernel's thread wake-up
    if ctx.spent:
        raise RuntimeError("a program's backward runs once per forward: its softmax cache "
                           "holds the edge cotangents now")
    ctx.spent = True
    appended = ()
    if edge_messages(p.sink) is not None:       # [dZ | dZE] of the appended features
        f = b.operands[x_slot(p)].shape[2]
        appended = (np.ascontiguousarray(dZ[..., f:]),)
        dZ = np.ascontiguousarray(dZ[..., :f])
    if row_t is None:
        row_t = softmax_term(dZ, ctx.Z, small)
        if appended:
            row_t += softmax_term(appended[0], ctx.extra["ZE"], small)
    # Z was kept for t alone: the context lets it go before the passes allocate (the
    # layer's backward runs on, holding the context, until its last product; issue 21)
    ctx.Z, ctx.extra = None, {}
    S = b.softmax[p.softmaxes.index(p.softmax)]
    # The column pass reads Ψ at each edge's CSR slot p and writes the edge's cotangent
    # EB[p] there, into S's own memory: the softmax (the root's heads, plan.py) is read
    # nowhere else, and once per forward. No CSC copy of S and no fresh EB: 8 bytes an
    # edge and head less at the backward's peak (issue 21), and the line read is the line
    # written (the copy was a gather pass, then a random write per edge).
    EB = S
    GF = np.empty((nnz, H), dt) if p.factor is not None else np.empty((1, 1), dt)
    column_pass = kernel(mod, "column_pass", b.work)
    if chunks is None:
        dX = aligned_empty(b.operands[x_slot(p)].shape, dt)
        col = _zeros_like_operands(p, b, {"col"}, dX if share else None)
        column_pass(*b.args(csc=True), dZ, *appended, row_t, dX, EB, GF, *col.values())
    else:
        col = _zeros_like_operands(p, b, {"col"})
        for j0, j1, X in chunks:
            dX = aligned_empty(X.shape, dt)
            column_pass(*_column_range(p, b, j0, j1, X).args(csc=True), dZ, *appended, row_t,
                        dX, EB, GF, *(g[j0:j1] for g in col.values()))
            chunks.complete(j0, j1, dX)
            del X, dX                   # (before the next range's arrays are made)
        dX = chunks.result()
    row = _zeros_like_operands(p, b, BY_ROW, dX if share else None)
    if row:
        kernel(mod, "column_rows", b.work)(*b.args(), EB, GF, *row.values())
    b.softmax = []                      # the cotangents in S are consumed: let it go
    grads = {**col, **row}
    if share:
        grads = {slot: None if _same_rows(g, dX) else g for slot, g in grads.items()}
    return {**grads, x_slot(p): dX}


class MessageChunks(Protocol):
    """The messages of a column pass a range of columns at a time (:func:`column_gradients`):
    iterating gives ``(j0, j1, X)``, the messages of columns ``[j0, j1)`` in the kernels'
    ``(columns, heads, f)`` layout; :meth:`complete` takes their cotangent, :meth:`result`
    gives the messages' whole cotangent once every range is done."""

    def __iter__(self) -> Iterator[tuple[int, int, np.ndarray]]: ...

    def complete(self, j0: int, j1: int, dX: np.ndarray) -> None: ...

    def result(self) -> np.ndarray: ...


def _column_range(p: Plan, b: Buffers, j0: int, j1: int, X) -> Buffers:
    """``b`` restricted to the columns ``[j0, j1)`` for the column pass: the column view's
    pointers of those columns (the kernel's column index counts from ``j0``), the operands
    read by source and the columns' global ids from ``j0``, the messages ``X`` of those
    columns. Views, nothing copied."""
    colptr, perm, rows = b.csc
    operands = list(b.operands)
    for slot in p.cols:
        operands[slot] = operands[slot][j0:j1]
    operands[x_slot(p)] = X
    ids = (b.ids[0], b.ids[1][j0:j1]) if len(b.ids) else b.ids
    return replace(b, csc=(colptr[j0:j1 + 1], perm, rows), ids=ids, operands=operands)


def row_gradients(p: Plan, ctx: ProgramContext, dZ) -> dict:
    """Strategy ``"row"``: the row pass through every stage, then the column pass (that one
    alone with :func:`columns_only`)."""
    b, mod = ctx.buffers, kernels(p)
    rb = row_backward_buffers(p, ctx, dZ)
    if not columns_only(p):
        kernel(mod, "row_pass", b.work)(*b.args(), *rb.args(), -1)
    return row_backward_columns(p, ctx, rb)


@dataclass
class RowBackward:
    """The arrays of the row strategy's backward passes (in the kernels' order)."""

    dZ: Any
    GB: Any
    Z: Any
    stage: list
    extra: list
    T: list
    dXr: Any
    grads: dict

    def args(self) -> list:
        return [self.dZ, self.GB, self.Z, *self.stage, *self.extra, *self.T, self.dXr,
                *self.grads.values()]


def row_backward_buffers(p: Plan, ctx: ProgramContext, dZ) -> RowBackward:
    """Fresh arrays for the row strategy's row pass (a grid runs it in phases)."""
    b = ctx.buffers
    dt = np.dtype(p.structure.dtype)
    H, nnz, n = p.heads, b.pattern.nnz, b.pattern.nrows
    stage = []
    for k in p.softmaxes:
        stage += [np.empty((nnz, p.heads_of(k)), dt), np.empty((nnz, p.heads_of(k)), dt)]
    rule = p.sink_rule
    extra = list(ctx.extra.values())[1:] if rule.keeps_outputs else []
    if _scatters_messages(p):
        extra.append(np.empty((nnz, H), dt))        # WP: the root at every edge
    # the root's cotangent at every edge: not written when the root reads nothing
    # differentiable (a constant edge tensor)
    GB = np.empty((nnz, H) if leaf_kinds(p, p.structure.root) and rule.edge_cotangent
                  else (1, 1), dt)
    Z = ctx.Z if p.weighted_mean else np.empty((1, 1, 1), dt)
    spmm_t = rule.transposed
    if spmm_t:
        dZ = heads_view(np, dZ)
    dXr = np.zeros(b.operands[x_slot(p)].shape, dt) if spmm_t else np.empty((1, 1, 1), dt)
    T = [np.empty((p.heads_of(k), n), dt) for k in p.softmaxes]
    return RowBackward(dZ, GB, Z, stage, extra, T, dXr,
                       _zeros_like_operands(p, b, BY_ROW, by_column=columns_only(p)))


def row_backward_columns(p: Plan, ctx: ProgramContext, rb: RowBackward) -> dict:
    """The row strategy's column pass after its row pass: cotangents by slot."""
    b, mod = ctx.buffers, kernels(p)
    dt = np.dtype(p.structure.dtype)
    dZ, GB, Z, stage, extra, dXr, row = rb.dZ, rb.GB, rb.Z, rb.stage, rb.extra, rb.dXr, \
        rb.grads
    rule = p.sink_rule
    spmm_t = rule.transposed
    col = _zeros_like_operands(p, b, {"col"})
    grads = {**row}
    if rule.gathers_messages:
        X = b.operands[x_slot(p)]
        dX = aligned_empty(X.shape, dt)
    else:
        dX = np.empty((1, 1, 1), dt)
    # with columns_only the column pass adds the parameters' and features' cotangents too
    by_column = list(row.values()) if columns_only(p) else []
    kernel(mod, "row_columns", b.work)(*b.args(csc=True), dZ, GB, Z, *stage, *extra, dX,
                                       *col.values(), *by_column)
    if _scatters_messages(p):
        _winners_gradient(p, b, dZ, extra, dX)
    grads.update(col)
    if rule.gathers_messages:
        grads[x_slot(p)] = dX
    elif spmm_t:
        grads[x_slot(p)] = dXr
    return grads


def _scatters_messages(p: Plan) -> bool:
    """Whether the messages' gradient is :func:`_winners_gradient` after the row strategy's
    passes (max / min aggregations; the generator's ``_scatter_messages``)."""
    return p.extreme


def _winners_gradient(p: Plan, b: Buffers, dZ, extra: list, dX) -> None:
    r"""max / min: :math:`\bar X_{j,h,c} \mathrel{+}= \bar Z_{i,h,c} W_{p,h}` for the winner
    ``p = ARG[i, h, c]`` of every (row, head, feature) and ``j`` its column, ``W`` the root
    at every edge (``WP``, stored by the row pass; no factor for ``max_plus`` /
    ``min_plus``). One serial pass over the rows
    (:func:`._minmax_kernels.winner_features`): n·heads·f updates where the column pass
    would compare every edge's row of winners (nnz·heads·f). ``dX`` holds zeros on entry
    (the column pass wrote them)."""
    ARG, WP = extra
    n, H, f = ARG.shape
    weights = None if p.algebra.tropical else WP
    winner_features(unsigned_view(b.pattern.indices), weights, max(f, 1), ARG.reshape(n, H * f),
                    dZ.reshape(n, H * f), dX.reshape(dX.shape[0], H * f))
