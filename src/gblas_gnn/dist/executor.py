r"""The ``dist`` executor: the executor interface on a √p×√p MPI grid (the paper's scheme).

Rank (x, y) holds the block ``A[R_x, C_y]`` (a :class:`~gblas_gnn.dist.graph.Block`) and the
rows ``R_x`` of every dense tensor; edge tensors are local ``graphblas.Matrix`` blocks with
the pattern of its adjacency block. Every operation runs the ``cpu`` executor's kernels on the
block and completes them with collectives on the row or column communicator:

=======================  ===========================================================
operation                communication (words per rank)
=======================  ===========================================================
``gemm``, ``row_dot``    none: rows are local, parameters replicated
``inner``, ``vertex_sum``  each rank reduces 1/q of its rows, allreduce over all ranks
``row_reduce``           allreduce over the row communicator, n/q
``col_reduce``           allreduce over the column communicator, then the partner
                         exchange back to the row layout, n/q each
``sddmm``, ``gather_cols``, ``col_scale``, ``outer_add``
                         the partner exchange of the column-side operand, n/q·k
``spmm``                 exchange of ``H[C_y]``, allreduce of the partial rows (⊕)
``spmm_t``               allreduce of the partial columns, exchange back to ``R_x``
``additive_attention``   exchange of ``H'[C_y]`` and ``s[C_y]``; row max, row sum and the
                         aggregate as row allreduces (n/q, n/q, n/q·k per head);
                         backward: ``dd`` row allreduce, ``[dX ds]`` column allreduce and
                         exchange (``t_i = ⟨dZ_i, Z_i⟩`` needs none)
``dot_attention``        the same skeleton; ``dβ`` one world allreduce of a scalar
=======================  ===========================================================

The local work runs the cpu executor's numba kernels, split only where a collective must sit
in between: scores and the local row max in one pass, exp and the local row sum in one pass,
normalisation and aggregation in one pass (on a 1×1 grid the single fused pass). The backward
is the cpu executor's column pass on the block, whose partial sums the collectives complete.
Validation errors in one rank are raised in every rank (:meth:`DistExecutor.validation`).
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np

from .. import semirings
from ..executors import get_executor
from ..executors.base import AggregateContext, Executor, check_bias
from ..executors.cpu import (
    ArgExtremeContext,
    FusedAdditiveContext,
    FusedDotContext,
    _by_head,
)
from ..executors.cpu import _attention_kernels as kern
from ..executors.cpu._kernel_primitives import aligned_empty
from ..executors.cpu._pattern import MatrixCache
from .graph import Block
from .grid import Grid, rebuild_error

__all__ = ["DistExecutor"]

#: the MPI reduction of each shipped semiring's ⊕
_MPI_OP = {"plus_times": "sum", "min_plus": "min", "max_plus": "max", "max_times": "max",
           "min_times": "min"}


def _local(S):
    """The local ``graphblas.Matrix`` of a block."""
    return S.M if isinstance(S, Block) else S


def _like(S, M):
    """``M`` as an edge tensor of the same block as ``S`` (it keeps the global ids of the
    block's rows and columns, which ties of max/min and the random masks need)."""
    return S.with_matrix(M) if isinstance(S, Block) else M


@dataclass
class _ColumnsContext(AggregateContext):
    """sum/mean aggregation on a block: ``S``, the messages' column copy ``H[C_y]`` (the
    backward's SDDMM reads it again without a second exchange) and the row counts of
    ``mean`` (None for ``sum``)."""

    counts: np.ndarray | None = None


@dataclass
class _ExtremeContext:
    """max/min aggregation on a block: the local context restricted to the winners this
    rank owns (every (row, feature) has exactly one owner in its grid row)."""

    local: ArgExtremeContext
    rows: int
    block: Block


class DistExecutor(Executor):
    """The executor interface on a :class:`~gblas_gnn.dist.Grid` (see the module docstring).

    Args:
        grid: the process grid (default: ``Grid()`` over ``COMM_WORLD``).
    """

    name = "dist"
    xp = np

    def __init__(self, grid: Grid | None = None):
        self.grid = Grid() if grid is None else grid
        self.local = get_executor("cpu")
        self._counts = MatrixCache(self._global_row_counts)
        self._timers: dict[str, float] = defaultdict(float)
        self._depth = 0

    def __repr__(self) -> str:
        return f"DistExecutor({self.grid!r})"

    # ------------------------------------------------------------------ timers
    @contextmanager
    def _op(self, name: str):
        """Time an operation; the outermost one records its compute under ``name``: this
        process's CPU time minus the CPU time of its collectives (CPU time, so that ranks
        sharing cores are not charged for waiting on each other)."""
        self._depth += 1
        t0, c0 = time.process_time(), self.grid.comm_cpu_seconds()
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                cpu = time.process_time() - t0
                self._timers[name] += cpu - (self.grid.comm_cpu_seconds() - c0)

    def timers(self) -> dict[str, float]:
        """Compute CPU seconds per outermost operation (collectives excluded) since the last
        :meth:`reset_timers`."""
        return dict(self._timers)

    def reset_timers(self) -> None:
        self._timers = defaultdict(float)

    # ------------------------------------------------------------------ processes
    @property
    def processes(self) -> int:
        return self.grid.size

    @property
    def is_root(self) -> bool:
        return self.grid.rank == 0

    def agree(self, value):
        return self.grid.bcast(value, "agree")

    def validation(self):
        return self.grid.agreed()

    def on_root(self, fn):
        result, report = None, None
        if self.is_root:
            try:
                result = fn()
            except Exception as exc:         # noqa: BLE001 - shared with every rank
                report = (type(exc).__name__, str(exc))
                error = exc
        report = self.grid.bcast(report, "on_root")
        if report is not None:
            if self.is_root:
                raise error
            raise rebuild_error(report[0], f"rank 0: {report[1]}")
        return result

    # ------------------------------------------------------------------ layout helpers
    def _columns(self, X, S, label: str):
        """The column-side copy ``X[C_y]`` of a row-layout tensor (from the partner)."""
        return self.grid.exchange(X, label, rows=_local(S).ncols)

    def _to_rows(self, X_cols, S, label: str):
        """A column-indexed result (rows ``C_y``) back in the row layout (rows ``R_x``)."""
        return self.grid.exchange(X_cols, label, rows=_local(S).nrows)

    def _global_row_counts(self, M) -> np.ndarray:
        counts = self.local._patterns.get(M).row_counts.astype(np.int64)
        return self.grid.allreduce(counts, "sum", "row", "row_counts")

    # ------------------------------------------------------------------ dense
    def gemm(self, X, W):
        with self._op("gemm"):
            return self.local.gemm(X, W)

    def _share(self, rows: int) -> slice:
        """This rank's share of its row block for a reduction over vertices: the q ranks of
        a grid row hold the same rows ``R_x``, so rank (x, y) sums the y-th of q slices and
        a world allreduce adds every vertex exactly once (no rank repeats another's sum)."""
        q, y = self.grid.q, self.grid.y
        return slice(rows * y // q, rows * (y + 1) // q)

    def inner(self, X, Y):
        with self._op("inner"):
            share = self._share(X.shape[0])
            return self.grid.allreduce(self.local.inner(X[share], Y[share]), "sum", "world",
                                       "inner")

    def vertex_sum(self, X):
        with self._op("vertex_sum"):
            X = np.asarray(X)
            total = np.atleast_1d(X[self._share(X.shape[0])].sum(axis=0))
            return self.grid.allreduce(total, "sum", "world", "vertex_sum").reshape(
                X.shape[1:])

    # ------------------------------------------------------------------ edge primitives
    def edge_values(self, E):
        return self.local.edge_values(_local(E))

    def edge_from_values(self, A, values):
        return _like(A, self.local.edge_from_values(_local(A), values))

    def gather_rows(self, E, u):
        return self.local.gather_rows(_local(E), u)

    def gather_cols(self, E, v):
        with self._op("gather_cols"):
            return self.local.gather_cols(_local(E), self._columns(v, E, "gather_cols"))

    def edge_ids(self, A):
        if not isinstance(A, Block):
            raise TypeError("edge_ids needs the graph's block (DistGraph.A), not an edge "
                            "tensor")
        rows, cols = self.local.edge_ids(A.M)
        return A.row_ids[rows], A.col_ids[cols]

    # ------------------------------------------------------------------ reductions
    def _reduce(self, E, op, axis: str, label: str):
        M = _local(E)
        local = self.local.row_reduce(M, op) if axis == "row" else self.local.col_reduce(M, op)
        if op != "sum":                        # a block without entries must not vote
            counts = self.local._patterns.get(M).row_counts if axis == "row" else \
                np.bincount(self.local._patterns.get(M).indices, minlength=M.ncols)
            local[counts == 0] = -np.inf if op == "max" else np.inf
        out = self.grid.allreduce(local, op, axis if axis == "row" else "col", label)
        if op != "sum":
            out[np.isinf(out)] = 0             # entries are finite: ±inf means empty
        return out

    def row_reduce(self, E, op="sum"):
        with self._op("row_reduce"):
            return self._reduce(E, op, "row", f"row_reduce.{op}")

    def col_reduce(self, E, op="sum"):
        with self._op("col_reduce"):
            return self._to_rows(self._reduce(E, op, "col", f"col_reduce.{op}"), E,
                                 "col_reduce.to_rows")

    # ------------------------------------------------------------------ products
    def sddmm(self, A, X, Y):
        with self._op("sddmm"):
            return _like(A, self.local.sddmm(_local(A), X,
                                             self._columns(Y, A, "sddmm.columns")))

    def spmm(self, S, H, semiring="plus_times"):
        with self._op("spmm"):
            M = _local(S)
            return self._semiring_product(M, self._columns(H, S, "spmm.columns"), semiring,
                                          transpose=False)

    def spmm_t(self, S, H, semiring="plus_times"):
        with self._op("spmm_t"):
            M = _local(S)
            partial = self._semiring_product(M, H, semiring, transpose=True)
            return self._to_rows(partial, S, "spmm_t.to_rows")

    def _semiring_product(self, M, H, semiring, transpose: bool):
        """``M ⊕ H`` (``Mᵀ ⊕ H``) on the block, completed over the row (column)
        communicator with the semiring's ⊕; rows without an entry anywhere give 0."""
        sr = semirings.get(semiring)
        which = "col" if transpose else "row"
        label = f"spmm{'_t' if transpose else ''}.{sr.name}"
        product = self.local.spmm_t if transpose else self.local.spmm
        if sr.name == "avg":
            # (S H) / (S 1): numerator and weights summed over the blocks, then divided
            plus = semirings.get("plus_times")
            num = self.grid.allreduce(product(M, H, plus), "sum", which, label)
            ones = np.ones((H.shape[0], 1), H.dtype)
            den = self.grid.allreduce(product(M, ones, plus), "sum", which, label)[:, 0]
            pos = den > 0
            np.divide(num, den[:, None], out=num, where=pos[:, None])
            num[~pos] = 0
            return num
        Z = product(M, H, sr)
        pattern = self.local._patterns.get(M)
        local_counts = np.bincount(pattern.indices, minlength=M.ncols) if transpose else \
            pattern.row_counts
        if sr.add_identity != 0:               # an empty block row must be ⊕'s identity
            Z[local_counts == 0] = sr.add_identity
        if sr.name in _MPI_OP:
            Z = self.grid.allreduce(Z, _MPI_OP[sr.name], which, label)
        else:
            Z = self.grid.allreduce_custom(Z, sr.add, which, label)
        if sr.add_identity != 0:
            empty = self.grid.allreduce(local_counts.astype(np.int64), "sum", which,
                                        f"{label}.counts") == 0
            Z[empty] = 0
        return Z

    # ------------------------------------------------------------------ aggregation
    def row_counts(self, S, dtype):
        return np.maximum(self._counts.get(_local(S)), 1).astype(dtype)

    def aggregate(self, S, H, aggr, keep_context=False):
        if not (keep_context and isinstance(aggr, str) and aggr in ("sum", "mean")):
            return super().aggregate(S, H, aggr, keep_context)
        with self._op("aggregate"):
            H_cols = self._columns(H, S, "aggregate.columns")
            Z = self._semiring_product(_local(S), H_cols, "plus_times", transpose=False)
            counts = None
            if aggr == "mean":
                counts = self.row_counts(S, H.dtype)
                Z /= counts[:, None]
            return Z, _ColumnsContext(S, H_cols, counts)

    def aggregate_backward(self, ctx, dZ, need_dS=True):
        if not isinstance(ctx, _ColumnsContext):
            return super().aggregate_backward(ctx, dZ, need_dS)
        with self._op("aggregate_backward"):
            G = dZ if ctx.counts is None else dZ / ctx.counts[:, None]
            dS = _like(ctx.S, self.local.sddmm(_local(ctx.S), G, ctx.H)) if need_dS else None
            return dS, self.spmm_t(ctx.S, G)

    def extreme_aggregate(self, S, H, is_max, keep_context):
        with self._op("extreme_aggregate"):
            M = _local(S)
            H_cols = self._columns(H, S, "extreme_aggregate.columns")
            if not isinstance(S, Block):
                raise TypeError("max/min aggregation on a grid needs an edge tensor of the "
                                "graph's block (its column ids break ties)")
            Z, ctx = self.local.extreme_aggregate(M, H_cols, is_max, True)
            col_ids = S.col_ids
            pairs = np.empty(Z.shape, np.dtype([("v", Z.dtype), ("i", np.int32)], align=True))
            owned = ctx.arg >= 0
            pairs["v"] = np.where(owned, Z, -np.inf if is_max else np.inf)
            # (a block without entries owns nothing: there is no column to look up)
            ids = col_ids[ctx.indices[np.maximum(ctx.arg, 0)]] if ctx.indices.size else 0
            winners = np.where(owned, ids, np.iinfo(np.int32).max)
            pairs["i"] = winners
            # the extreme over the grid row and its owner: ties to the lowest global id, as
            # on one process (a block's columns are in global id order)
            self.grid.allreduce(pairs, "maxloc" if is_max else "minloc", "row",
                                "extreme_aggregate.winners")
            Z = np.where(np.isinf(pairs["v"]), 0, pairs["v"]).astype(Z.dtype)
            if not keep_context:
                return Z
            mine = owned & (winners == pairs["i"])
            return Z, _ExtremeContext(replace(ctx, arg=np.where(mine, ctx.arg, -1)), M.nrows,
                                      S)

    def extreme_aggregate_backward(self, ctx: _ExtremeContext, dZ, need_dS=True):
        with self._op("extreme_aggregate_backward"):
            dS, dH_cols = self.local.extreme_aggregate_backward(ctx.local, dZ, need_dS)
            dS = None if dS is None else _like(ctx.block, dS)
            dH_cols = self.grid.allreduce(dH_cols, "sum", "col",
                                          "extreme_aggregate_backward.partials")
            return dS, self.grid.exchange(dH_cols, "extreme_aggregate_backward.to_rows",
                                          rows=ctx.rows)

    # ------------------------------------------------------------------ fused attention
    _FUSED = ("sum", "mean")

    def additive_attention(self, A, d, s, X, slope, mask=None, aggr="sum",
                           keep_context=False, bias=None):
        if not (isinstance(aggr, str) and aggr in self._FUSED):
            return super().additive_attention(A, d, s, X, slope, mask, aggr, keep_context,
                                              bias)
        with self._op("additive_attention"):
            M = _local(A)
            check_bias(bias, X.shape[1])
            dt = X.dtype
            heads, n_cols = d.shape[1], M.ncols
            # the kernels read one head's scores as a contiguous row: (heads, n)
            d_h, s_h = (np.ascontiguousarray(v.T, dtype=dt) for v in (d, s))
            # the messages and the source scores of the columns C_y, in one exchange (on the
            # diagonal, H' and s themselves)
            X_cols, s_cols = self.grid.exchange_parts(
                [np.ascontiguousarray(X), s_h], [(n_cols, X.shape[1]), (heads, n_cols)],
                "additive_attention.columns")
            if self.grid.q == 1:               # one block per row: the single fused pass
                return self.local.additive_attention(M, d_h.T, s_cols.T, X_cols, slope, mask,
                                                     aggr, keep_context, bias)
            pattern = self.local._patterns.get(M)
            psi = np.empty((heads, pattern.nnz), dt)
            stat = np.empty((heads, pattern.nrows), dt)
            kern.additive_scores(pattern.indptr, pattern.indices, d_h, s_cols, dt.type(slope),
                                 psi, stat)
            use_mask = mask is not None
            mask = np.ascontiguousarray(mask, dtype=dt) if use_mask else np.empty((1, 1), dt)
            Z = self._softmax_aggregate(pattern, psi, stat, X_cols, mask, use_mask,
                                        np.empty(1, dt), False, heads, "additive_attention")
            counts = None if aggr == "sum" else self.row_counts(M, dt)[:, None]
            ctx = FusedAdditiveContext(aggr, pattern, counts, X_cols, psi, d=d_h, s=s_cols,
                                       mask=mask, use_mask=use_mask, slope=dt.type(slope))
            return self.local._fused_output(Z, ctx, keep_context, bias)

    def _softmax_aggregate(self, pattern, psi, stat, X_cols, mask, use_mask, c, use_c,
                           heads, label):
        """From scores and their local row max (``stat``): the global row max, exp, the
        global row sum, normalisation and the aggregate, completed over the grid row."""
        self.grid.allreduce(stat, "max", "row", f"{label}.row_max")
        total = np.empty_like(stat)
        kern.exp_rows(pattern.indptr, psi, stat, total)
        self.grid.allreduce(total, "sum", "row", f"{label}.row_sum")
        Z = aligned_empty((pattern.nrows, X_cols.shape[1]), X_cols.dtype)
        kern.normalize_aggregate(pattern.indptr, pattern.indices, psi, total,
                                 _by_head(X_cols, heads), mask, use_mask, c, use_c,
                                 _by_head(Z, heads))
        return self.grid.allreduce(Z, "sum", "row", f"{label}.aggregate")

    def _column_gradients(self, ctx, widths, backward, label: str):
        """Run a fused backward whose column-side gradients (rows ``C_y``, one array per
        entry of ``widths``: ``(rows, w)`` or ``("heads", h)`` for an (h, rows) array) it
        writes into views of one buffer; complete them over the column communicator and
        move them to the rows ``R_x`` as that one buffer (no concatenation, no slicing
        copies). Returns ``backward``'s own result and the gradients in the row layout."""
        rows, cols = ctx.pattern.nrows, ctx.pattern.ncols
        dt = ctx.X.dtype

        def views(buf, n):
            out, start = [], 0
            for kind, w in widths:
                shape = (w, n) if kind == "heads" else (n, w)
                out.append(buf[start:start + n * w].reshape(shape))
                start += n * w
            return out

        size = sum(w for _, w in widths)
        partial = aligned_empty(cols * size, dt)
        own = backward(*views(partial, cols))
        self.grid.allreduce(partial, "sum", "col", f"{label}.column_partials")
        return own, views(self.grid.exchange(partial, f"{label}.to_rows", rows=rows * size),
                          rows)

    def additive_attention_backward(self, ctx, dZ):
        if not isinstance(ctx, FusedAdditiveContext):
            return super().additive_attention_backward(ctx, dZ)
        with self._op("additive_attention_backward"):
            heads = ctx.psi.shape[0]
            dd, (dX, ds) = self._column_gradients(
                ctx, [("rows", ctx.X.shape[1]), ("heads", heads)],
                lambda dX, ds: self.local.additive_backward_into(ctx, dZ, ds, dX),
                "additive_attention_backward")
            dd = self.grid.allreduce(dd, "sum", "row", "additive_attention_backward.row_sums")
            return dd.T, ds.T, dX

    def dot_attention(self, A, P, Q, beta, X, aggr="sum", keep_context=False, scale=None):
        if not (isinstance(aggr, str) and aggr in self._FUSED):
            return super().dot_attention(A, P, Q, beta, X, aggr, keep_context, scale)
        with self._op("dot_attention"):
            M = _local(A)
            dt = X.dtype
            n_cols = M.ncols
            factored = scale is not None and X is Q
            Q = np.ascontiguousarray(Q, dtype=dt)
            parts, shapes = [Q], [(n_cols, Q.shape[1])]
            if not factored:
                X = np.ascontiguousarray(X)
                parts.append(X)
                shapes.append((n_cols, X.shape[1]))
            if scale is not None:
                parts.append(np.ascontiguousarray(scale, dt))
                shapes.append((n_cols,))
            # the columns C_y of every operand in one exchange (on the diagonal, themselves:
            # P and Q stay one array when the layer passes the same one, as AGNN does)
            cols = self.grid.exchange_parts(parts, shapes, "dot_attention.columns")
            Q_cols = cols[0]
            X_cols = Q_cols if factored else cols[1]
            c_cols = cols[-1] if scale is not None else None
            if self.grid.q == 1:
                return self.local.dot_attention(M, P, Q_cols, beta, X_cols, aggr,
                                                keep_context, c_cols)
            pattern = self.local._patterns.get(M)
            P = np.ascontiguousarray(P, dtype=dt)
            psi = np.empty((1, pattern.nnz), dt)
            stat = np.empty((1, pattern.nrows), dt)
            kern.dot_scores(pattern.indptr, pattern.indices, P, Q_cols, dt.type(beta), psi,
                            stat)
            use_c = c_cols is not None
            c = c_cols if use_c else np.empty(1, dt)
            Z = self._softmax_aggregate(pattern, psi, stat, X_cols, np.empty((1, 1), dt),
                                        False, c, use_c, 1, "dot_attention")
            counts = None if aggr == "sum" else self.row_counts(M, dt)[:, None]
            return self.local._fused_output(Z, FusedDotContext(
                aggr, pattern, counts, X_cols, psi, P=P, Q=Q_cols, beta=dt.type(beta), c=c,
                use_c=use_c), keep_context)

    def dot_attention_backward(self, ctx, dZ):
        if not isinstance(ctx, FusedDotContext):
            return super().dot_attention_backward(ctx, dZ)
        with self._op("dot_attention_backward"):
            (dP, dbeta), (dX, dQ) = self._column_gradients(
                ctx, [("rows", ctx.X.shape[1]), ("rows", ctx.Q.shape[1])],
                lambda dX, dQ: self.local.dot_backward_into(ctx, dZ, dQ, dX),
                "dot_attention_backward")
            dP = self.grid.allreduce(dP, "sum", "row", "dot_attention_backward.row_partials")
            dbeta = self.grid.allreduce(np.atleast_1d(dbeta), "sum", "world",
                                        "dot_attention_backward.beta").reshape(())
            return dP, dQ, dbeta, dX

    # ------------------------------------------------------------------ random masks
    def dropout_edges(self, A, key, p, heads, dtype):
        if not isinstance(A, Block):
            raise TypeError("dropout_edges needs the graph's block (DistGraph.A)")
        return self.local.dropout_edges(A.M, key, p, heads, dtype, A.row_ids, A.col_ids)

    def keep_mask(self, key, p, shape, row_ids=None):
        if row_ids is None:
            raise ValueError("on a grid, feature dropout needs the global ids of its rows: "
                             "call the module with the DistGraph")
        return self.local.keep_mask(key, p, shape, row_ids)

    # ------------------------------------------------------------------ edge algebra
    def pattern(self, A, value, dtype):
        return _like(A, self.local.pattern(_local(A), value, dtype))

    def apply(self, E, fn, alpha=None):
        return _like(E, self.local.apply(_local(E), fn, alpha))

    def leaky_relu_backward(self, C, dE, alpha):
        return _like(C, self.local.leaky_relu_backward(_local(C), _local(dE), alpha))

    def ewise(self, E, F, op):
        return _like(E, self.local.ewise(_local(E), _local(F), op))

    def row_scale(self, E, v, op="times"):
        return _like(E, self.local.row_scale(_local(E), v, op))

    def col_scale(self, E, v, op="times"):
        with self._op("col_scale"):
            return _like(E, self.local.col_scale(
                _local(E), self._columns(v, E, "col_scale.columns"), op))

    def scale_edges(self, E, u, v):
        with self._op("scale_edges"):
            return _like(E, self.local.scale_edges(
                _local(E), u, self._columns(v, E, "scale_edges.columns")))

    def outer_add(self, A, u, v):
        with self._op("outer_add"):
            return _like(A, self.local.outer_add(
                _local(A), u, self._columns(v, A, "outer_add.columns")))

    def _check_sources(self, A, X) -> None:
        # dense tensors come in the row layout: the executor fetches the column side
        if X.shape[0] != _local(A).nrows:
            raise ValueError(f"X has {X.shape[0]} rows, this rank's row block "
                             f"{_local(A).nrows}")

    def source_rows(self, A) -> int:
        # dense tensors are laid out by the rows R_x; the columns C_y come by exchange
        return _local(A).nrows

    def columns(self, A, X):
        with self._op("columns"):
            return self._columns(X, A, "columns")

    def gather_columns(self, A, v):
        return self.local.gather_cols(_local(A), v)

    def _nrows(self, S) -> int:
        return _local(S).nrows

    def _ncols(self, S) -> int:
        return _local(S).ncols

