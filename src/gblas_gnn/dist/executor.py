r"""The ``dist`` executor: the executor interface on a √p×√p MPI grid (the paper's scheme).

Rank (x, y) holds the block ``A[R_x, C_y]`` (a :class:`~gblas_gnn.dist.graph.Block`) and of
every dense tensor the rows ``R_x`` (``dense="replicated"``) or their y-th of q slices
(``dense="sharded"``): :mod:`gblas_gnn.dist.layout` gives each operation the rows it reads
and keeps its result as the layout says; edge tensors are local ``graphblas.Matrix`` blocks
with the pattern of its adjacency block. Every operation runs the ``cpu`` executor's kernels
on the block and completes them with collectives on the row or column communicator (the
words below are the replicated layout's; the sharded one adds the gathers by target and the
slice exchanges of :mod:`gblas_gnn.dist.layout`, and completes sums by reduce-scatter):

=======================  ===========================================================
operation                communication (words per rank)
=======================  ===========================================================
``gemm``, ``row_dot``    none: rows are local, parameters replicated
``combine_rows``         none: rows are local
``inner``, ``vertex_sum``  each rank reduces 1/q of its rows, allreduce over all ranks
``row_reduce``           allreduce over the row communicator, n/q
``col_reduce``           allreduce over the column communicator, then the partner
                         exchange back to the row layout, n/q each
``sddmm``, ``gather_cols``, ``col_scale``, ``outer_add``
                         the partner exchange of the column-side operand, n/q·k
``spmm``                 exchange of ``H[C_y]``, allreduce of the partial rows (⊕)
``spmm_t``               allreduce of the partial columns, exchange back to ``R_x``
edge programs            one exchange of everything read by source; per softmax a row
(every attention layer)  max and a row sum (heads·n/q each); the aggregate as a row
                         allreduce (n/q·k); backward: column partials allreduced over the
                         column and moved back in one buffer, row partials over the row,
                         parameters over all ranks (``t_i = ⟨dZ_i, Z_i⟩`` needs none) —
                         :mod:`.programs`
=======================  ===========================================================

The local work runs the cpu executor's numba kernels; an edge program's generated row pass
runs in phases where a collective must sit in between (scores and the local row max, exp and
the local row sum, normalisation, the aggregate; on a 1×1 grid the single fused pass), and
its backward passes on the block give partial sums the collectives complete.
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
from ..executors.base import Executor
from ..executors.contexts import AggregateContext, ArgExtremeContext
from ..executors.patterns import MatrixCache
from ..executors.program_runtime import ProgramContext
from . import programs as _programs
from .graph import Block
from .grid import Grid, rebuild_error
from .layout import dense_layout

__all__ = ["DistExecutor"]

#: the MPI reduction of a ⊕ MPI knows (any other: a reduction with the semiring's own ⊕)
_MPI_OP = {"plus": "sum", "min": "min", "max": "max"}


def _local(S):
    """The local ``graphblas.Matrix`` of a block."""
    return S.M if isinstance(S, Block) else S


def _like(S, M):
    """``M`` as an edge tensor of the same block as ``S`` (it keeps the global ids of the
    block's rows and columns, which ties of max/min and the random masks need)."""
    return S.with_matrix(M) if isinstance(S, Block) else M


@dataclass
class _ColumnsContext(AggregateContext):
    """sum/mean aggregation on a block: ``S``, the messages ``H`` as this rank keeps them,
    their column copy ``H[C_y]`` when the layout is replicated (the backward's SDDMM reads it
    again without a second exchange; a sharded layout gathers it again instead of keeping
    it) and this rank's row counts of ``mean`` (None for ``sum``)."""

    H_cols: np.ndarray | None = None
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
        dense: how dense vertex tensors lie on the grid, ``"replicated"`` or ``"sharded"``
            (:mod:`gblas_gnn.dist.layout`; default: the grid's, replicated unless it was
            made otherwise). Graphs and data sets built on :attr:`grid` are laid out the
            same way.
    """

    name = "dist"
    xp = np

    def __init__(self, grid: Grid | None = None, dense: str | None = None):
        grid = Grid() if grid is None else grid
        self.grid = grid if dense is None else grid.laid_out(dense)
        self.layout = dense_layout(self.grid)
        self.local = get_executor("cpu")
        self._counts = MatrixCache(self._global_row_counts)
        self._timers: dict[str, float] = defaultdict(float)
        self._depth = 0

    def __repr__(self) -> str:
        return f"DistExecutor({self.grid!r})"

    @property
    def dense(self) -> str:
        """The layout of dense vertex tensors (``"replicated"`` or ``"sharded"``)."""
        return self.grid.dense

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

    def all_agree(self, flag: bool) -> bool:
        vote = np.array([1 if flag else 0], np.int32)
        return bool(self.grid.allreduce(vote, "land", "world", "all_agree")[0])

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
    def _rows(self, X, S, label: str):
        """``X[R_x]`` (the block's rows) of a tensor as this rank keeps it."""
        M = _local(S)
        self.layout.check(X, M.nrows, "by target")
        return self.layout.rows([X], M.nrows, f"{label}.rows")[0]

    def _columns(self, X, S, label: str):
        """``X[C_y]`` (the block's columns) of a tensor as this rank keeps it."""
        M = _local(S)
        self.layout.check(X, M.nrows, "by source")
        return self.layout.columns([X], M.nrows, M.ncols, label)[0]

    def _to_rows(self, X_cols, S, label: str):
        """A result by columns ``C_y`` (complete on the grid column) as this rank keeps its
        rows."""
        return self.layout.columns_to_rows(X_cols, _local(S).nrows, label)

    def _global_row_counts(self, S) -> np.ndarray:
        counts = self.local.csr_pattern(_local(S)).row_counts.astype(np.int64)
        return self.grid.allreduce(counts, "sum", "row", "row_counts")

    # ------------------------------------------------------------------ dense
    def gemm(self, X, W):
        with self._op("gemm"):
            return self.local.gemm(X, W)

    def row_dot(self, X, Y):
        # per vertex: this rank's rows R_x are whole (no communication)
        return self.local.row_dot(X, Y)

    def combine_rows(self, a, X, b=None, Y=None, overwrite=False):
        return self.local.combine_rows(a, X, b, Y, overwrite)

    def _share(self, rows: int) -> slice:
        """This rank's share of its rows for a reduction over vertices, so that a world
        allreduce adds every vertex exactly once: replicated, the q ranks of a grid row hold
        the same rows ``R_x`` and rank (x, y) sums the y-th of q slices; sharded, all of
        its rows."""
        return self.layout.share(rows)

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

    def vertex_scatter(self, ids, G, n):
        with self._op("vertex_scatter"):
            G = np.asarray(G)
            share = self._share(G.shape[0])
            full = np.zeros((n, *G.shape[1:]), G.dtype)
            full[np.asarray(ids)[share]] = G[share]
            return self.grid.allreduce(full, "sum", "world", "vertex_scatter")

    # ------------------------------------------------------------------ edge primitives
    def edge_values(self, E):
        return self.local.edge_values(_local(E))

    def edge_from_values(self, A, values):
        return _like(A, self.local.edge_from_values(_local(A), values))

    def gather_rows(self, E, u):
        with self._op("gather_rows"):
            return self.local.gather_rows(_local(E), self._rows(u, E, "gather_rows"))

    def gather_cols(self, E, v):
        with self._op("gather_cols"):
            return self.local.gather_cols(_local(E), self._columns(v, E, "gather_cols"))

    def to_graphblas(self, E):
        """This rank's block of the edge tensor ``E`` as a host matrix of the whole graph's
        shape (``n × n``): the block's entries at their global vertex ids (those of
        :meth:`edge_ids`), nothing else. No communication: every entry of the whole matrix is
        in exactly one rank's block, so the ranks' matrices add up to it. A plain
        ``graphblas.Matrix`` (no ids known) is returned as it is."""
        import graphblas as gb

        if isinstance(E, gb.Matrix):
            return E
        if not isinstance(E, Block):
            raise TypeError("to_graphblas needs an edge tensor of the grid (a Block), got "
                            f"{type(E).__name__}")
        rows, cols = self.edge_ids(E)
        return gb.Matrix.from_coo(rows, cols, self.edge_values(E), dtype=E.M.dtype,
                                  nrows=E.n, ncols=E.n)

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
        algebra = semirings.aggregations.algebra_of(op)
        if algebra.extreme:                    # a block without entries must not vote
            counts = self.local.csr_pattern(M).row_counts if axis == "row" else \
                np.bincount(self.local.csr_pattern(M).indices, minlength=M.ncols)
            local[counts == 0] = -np.inf if algebra.maximises else np.inf
        out = self.grid.allreduce(local, op, axis if axis == "row" else "col", label)
        if algebra.extreme:
            out[np.isinf(out)] = 0             # entries are finite: ±inf means empty
        return out

    def row_reduce(self, E, op="sum"):
        with self._op("row_reduce"):
            return self.layout.own(self._reduce(E, op, "row", f"row_reduce.{op}"))

    def col_reduce(self, E, op="sum"):
        with self._op("col_reduce"):
            return self._to_rows(self._reduce(E, op, "col", f"col_reduce.{op}"), E,
                                 "col_reduce.to_rows")

    # ------------------------------------------------------------------ products
    def sddmm(self, A, X, Y):
        with self._op("sddmm"):
            return _like(A, self.local.sddmm(_local(A), self._rows(X, A, "sddmm"),
                                             self._columns(Y, A, "sddmm.columns")))

    def spmm(self, S, H, semiring="plus_times"):
        self._check_weights(S, semiring)
        with self._op("spmm"):
            M = _local(S)
            return self._semiring_product(M, self._columns(H, S, "spmm.columns"), semiring,
                                          transpose=False)

    def spmm_t(self, S, H, semiring="plus_times"):
        self._check_weights(S, semiring)
        with self._op("spmm_t"):
            M = _local(S)
            return self._semiring_product(M, self._rows(H, S, "spmm_t"), semiring,
                                          transpose=True)

    def _semiring_product(self, M, H, semiring, transpose: bool):
        """``M ⊕ H`` (``Mᵀ ⊕ H``) on the block (``H`` by its columns, by its rows), completed
        over the row (column) communicator with the semiring's ⊕, as this rank keeps the
        result; rows without an entry anywhere give 0."""
        sr = semirings.get(semiring)
        which = "col" if transpose else "row"
        label = f"spmm{'_t' if transpose else ''}.{sr.name}"
        product = self.local.spmm_t if transpose else self.local.spmm
        if sr.algebra.add == "plus" and not sr.algebra.weighted_mean:
            Z = product(M, H, sr)
            if transpose:
                return self.layout.column_sum([Z], M.nrows, label, "spmm_t.to_rows")[0]
            return self.layout.row_sum(Z, label)
        Z = self._completed_product(M, H, sr, product, which, label, transpose)
        return self.layout.columns_to_rows(Z, M.nrows, "spmm_t.to_rows") if transpose else \
            self.layout.own(Z)

    def _completed_product(self, M, H, sr, product, which: str, label: str, transpose: bool):
        """The semiring product on the block, complete over the grid row (column)."""
        if sr.algebra.weighted_mean:
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
        pattern = self.local.csr_pattern(M)
        local_counts = np.bincount(pattern.indices, minlength=M.ncols) if transpose else \
            pattern.row_counts
        if sr.add_identity != 0:               # an empty block row must be ⊕'s identity
            Z[local_counts == 0] = sr.add_identity
        if sr.algebra.add in _MPI_OP:
            Z = self.grid.allreduce(Z, _MPI_OP[sr.algebra.add], which, label)
        else:
            Z = self.grid.allreduce_custom(Z, sr.add, which, label)
        if sr.add_identity != 0:
            empty = self.grid.allreduce(local_counts.astype(np.int64), "sum", which,
                                        f"{label}.counts") == 0
            Z[empty] = 0
        return Z

    # ------------------------------------------------------------------ aggregation
    def row_counts(self, S, dtype):
        # kept per Block, not per local matrix: a miss runs a collective, so every rank of a
        # grid row must miss together, and Blocks are made by all ranks at once, while a
        # local matrix may be shared by two graphs on some ranks and not on others (off the
        # diagonal a graph and its self-looped form have the same one)
        return self.layout.own(np.maximum(self._counts.get(S), 1).astype(dtype))

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
            kept = H_cols if self.dense == "replicated" else None
            return Z, _ColumnsContext(S, H, kept, counts)

    def aggregate_backward(self, ctx, dZ, need_dS=True):
        if not isinstance(ctx, _ColumnsContext):
            return super().aggregate_backward(ctx, dZ, need_dS)
        with self._op("aggregate_backward"):
            M = _local(ctx.S)
            G = self._rows(dZ if ctx.counts is None else dZ / ctx.counts[:, None], ctx.S,
                           "aggregate_backward")
            dS = None
            if need_dS:
                H_cols = ctx.H_cols if ctx.H_cols is not None else \
                    self._columns(ctx.H, ctx.S, "aggregate_backward.columns")
                dS = _like(ctx.S, self.local.sddmm(M, G, H_cols))
            return dS, self._semiring_product(M, G, "plus_times", transpose=True)

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
                return self.layout.own(Z)
            mine = owned & (winners == pairs["i"])
            return self.layout.own(Z), _ExtremeContext(
                replace(ctx, arg=np.where(mine, ctx.arg, -1)), M.nrows, S)

    def extreme_aggregate_backward(self, ctx: _ExtremeContext, dZ, need_dS=True):
        with self._op("extreme_aggregate_backward"):
            dZ = self._rows(dZ, ctx.block, "extreme_aggregate_backward")
            dS, dH_cols = self.local.extreme_aggregate_backward(ctx.local, dZ, need_dS)
            dS = None if dS is None else _like(ctx.block, dS)
            return dS, self.layout.column_sum([dH_cols], ctx.rows,
                                              "extreme_aggregate_backward.partials",
                                              "extreme_aggregate_backward.to_rows")[0]

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
        with self._op("row_scale"):
            return _like(E, self.local.row_scale(_local(E), self._rows(v, E, "row_scale"), op))

    def col_scale(self, E, v, op="times"):
        with self._op("col_scale"):
            return _like(E, self.local.col_scale(
                _local(E), self._columns(v, E, "col_scale.columns"), op))

    def scale_edges(self, E, u, v):
        with self._op("scale_edges"):
            return _like(E, self.local.scale_edges(
                _local(E), self._rows(u, E, "scale_edges"),
                self._columns(v, E, "scale_edges.columns")))

    def outer_add(self, A, u, v):
        with self._op("outer_add"):
            return _like(A, self.local.outer_add(
                _local(A), self._rows(u, A, "outer_add"),
                self._columns(v, A, "outer_add.columns")))

    def _check_sources(self, A, X) -> None:
        # dense tensors come as this rank keeps them: the executor fetches the column side
        self.layout.check(X, _local(A).nrows, "by source")

    # ------------------------------------------------------------------ edge programs
    def program_forward(self, program, keep):
        # the cpu executor's generated kernels on the block, in phases between the
        # scheme's collectives (dist/programs.py); the reference lowering otherwise
        if not _programs.runs(program.structure):
            return super().program_forward(program, keep)
        with self._op("program_forward"):
            return _programs.forward(self, program, keep)

    def program_backward(self, ctx, dout, into=None):
        if not isinstance(ctx, (ProgramContext, _programs.ShardedContext)):
            return super().program_backward(ctx, dout)
        with self._op("program_backward"):
            return _programs.backward(self, ctx, dout)

    def source_rows(self, A) -> int:
        # dense tensors are laid out by the rows R_x (or their shard); the columns C_y come
        # by exchange
        return self.layout.kept(_local(A).nrows)

    def target_rows(self, A) -> int:
        return self.layout.kept(_local(A).nrows)

    def columns(self, A, X):
        with self._op("columns"):
            return self._columns(X, A, "columns")

    def gather_columns(self, A, v):
        return self.local.gather_cols(_local(A), v)

    def _nrows(self, S) -> int:
        return _local(S).nrows

    def _ncols(self, S) -> int:
        return _local(S).ncols

