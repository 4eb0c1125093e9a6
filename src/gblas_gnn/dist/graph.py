r"""A graph distributed over a :class:`~gblas_gnn.dist.Grid`: each rank keeps one block.

The vertices are split into q parts ``R_0 … R_{q-1}`` (the same split for rows and columns);
rank (x, y) keeps the block ``A[R_x, C_y]`` with ``C_y = R_y`` and nothing else of the
adjacency, which never moves. A dense tensor over the vertices is held as the grid's layout
says (:mod:`gblas_gnn.dist.layout`): rank (x, y) holds the rows ``R_x`` (``replicated``
along the grid row) or the y-th slice of them (``sharded``) — :attr:`DistGraph.vertex_ids`
are their global ids, :meth:`DistGraph.scatter` cuts them out of a global array,
:meth:`DistGraph.gather` puts the global array back together on every rank.

Parts are contiguous ranges of vertex ids by default. With ``relabel=True`` a seeded random
permutation decides which part a vertex goes to (a skewed Kronecker graph otherwise puts
most edges in a few blocks; :meth:`DistGraph.imbalance` measures it); inside a part the
vertices keep their id order, so a block's CSR order is the single-process order restricted
to the block (ties of max/min aggregation and the random masks then match one process).
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, replace

import graphblas as gb
import numpy as np
import scipy.sparse as sp

from .._validate import float_dtype, widening
from ..data.partition import partition, relabel_order
from ..edge_attr import EdgeFeatures, check_fill_value, fill_key, with_loops
from ..executors.edges import EdgeTensorBase, StructuralMask, edge_dtype
from ..executors.patterns import AdjacencyPattern, CSRPattern, graphblas_of
from ..graph import as_graph, self_looped_matrix
from ..relations import NO_RELATIONS, check_relation
from . import generate
from .grid import Grid
from .layout import dense_layout, shard

__all__ = ["Block", "DistDataset", "DistGraph", "partition", "relabel_order"]


@dataclass(frozen=True, eq=False)
class Block:
    """This rank's block of a sparse matrix: ``M`` (a ``graphblas.Matrix`` with local row and
    column indices, or the :class:`~gblas_gnn.executors.patterns.AdjacencyPattern` of the
    block of ``A + I`` in :attr:`DistGraph.edge_tensor`), the global vertex ids of its rows
    and columns, and ``n``, the vertices of the whole graph (the whole matrix is ``n × n``)."""

    M: gb.Matrix | AdjacencyPattern
    row_ids: np.ndarray
    col_ids: np.ndarray
    n: int

    def __getattr__(self, name: str):
        # nrows, ncols, nvals, dtype, ...: those of the local matrix
        if name == "M":                     # not set yet (while being copied)
            raise AttributeError(name)
        return getattr(self.M, name)

    def with_matrix(self, M: gb.Matrix) -> Block:
        return Block(M, self.row_ids, self.col_ids, self.n)

    @property
    def S(self):
        """The block's pattern without its values: ``A.S * expr``, as for a
        ``graphblas.Matrix`` (:func:`gblas_gnn.ops.structure`)."""
        return StructuralMask(self)


EdgeTensorBase.register(Block)            # the edge-tensor protocol (executors.edges)


class DistGraph:
    """This rank's share of a graph on a :class:`Grid` (see the module docstring).

    Build it with :meth:`from_graph` (every rank passes the same :class:`~gblas_gnn.Graph`),
    or from the blocks directly (:meth:`from_blocks`, used by the generators and loaders).

    Attributes:
        grid: the process grid.
        n: vertices of the whole graph. n_local: rows of this rank's share (``|R_x|``).
        nnz: stored entries of the whole graph.
        A: this rank's :class:`Block` of the adjacency (for :meth:`with_self_loops`'s graph
            its matrix is built at the first access).
        vertex_ids: the global ids of the rows of dense tensors this rank holds (``R_x``,
            or its shard on a sharded grid), in increasing order.
    """

    def __init__(self, grid: Grid, n: int, parts: list[np.ndarray] | list[int], block: Block,
                 nnz: int | None = None):
        self.grid, self.n = grid, int(n)
        # the sizes only: the ids of every part are n integers on every rank (8 MiB a rank
        # at 2^20 vertices, 0.9 GB at 10^8), which only :attr:`parts` and :meth:`gather` read
        self.part_sizes = [int(p) if np.ndim(p) == 0 else int(np.size(p)) for p in parts]
        self._block = block
        self.vertex_ids = block.row_ids[dense_layout(grid).local_rows(block.row_ids.size)]
        self.n_local = int(self.vertex_ids.shape[0])
        self.nnz = int(nnz) if nnz is not None else int(
            grid.allreduce(np.array([block.nvals], np.int64), "sum", "world", "graph.nnz")[0])
        self._cache: dict = {}
        self._attr: EdgeFeatures | None = None
        #: for a graph with edge features made by :meth:`from_graph`: the positions of this
        #: block's entries in the whole graph's CSR order (None otherwise)
        self.edge_positions: np.ndarray | None = None
        self._relations: list[DistGraph] | None = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_graph(cls, g, grid: Grid, relabel: bool = False, seed: int = 0) -> DistGraph:
        """This rank's block of ``g`` (a :class:`~gblas_gnn.Graph`, scipy.sparse or
        graphblas matrix that every rank passes identically).

        A typed graph's relations come along, each relation's block on the same grid and
        parts (:meth:`relation`).

        Raises ``ValueError`` on every rank when the ranks passed different graphs (vertex
        count, edge count, dtype or edges differ).
        """
        g = as_graph(g)
        coo = g.to_scipy().tocoo()
        digest = (g.n, g.nnz, str(g.dtype),
                  int(np.bitwise_xor.reduce((coo.row.astype(np.int64) * 1_000_003
                                             + coo.col) if coo.nnz else np.zeros(1, int))))
        seen = grid.allgather(digest, "graph.check")
        if any(d != seen[0] for d in seen):
            raise ValueError("the ranks passed different graphs to DistGraph.from_graph "
                             f"(n, nnz, dtype, edge digest per rank: {seen}); every rank "
                             "must pass the same graph")
        parts = partition(g.n, grid.q, relabel, seed)
        rows, cols = parts[grid.x], parts[grid.y]
        csr = g.to_scipy()
        local = csr[rows][:, cols].tocsr()
        local.sort_indices()
        M = gb.io.from_scipy_sparse(local.astype(g.dtype))
        out = cls(grid, g.n, parts, Block(M, rows, cols, g.n), nnz=g.nnz)
        if g.edge_attr is not None:
            # the block's entries in the whole graph's CSR order, which the block keeps
            # (its rows and columns are sorted ids): the features of those positions
            csr.data = np.arange(1, csr.nnz + 1, dtype=np.float64)   # no explicit zero
            at = csr[rows][:, cols].tocsr()
            at.sort_indices()
            out.edge_positions = at.data.astype(np.int64) - 1
            out._attr = EdgeFeatures(out.edge_tensor, np.ascontiguousarray(
                g.edge_attr.values[out.edge_positions]), None, origin=g.edge_attr)
        if getattr(g, "num_relations", None) is not None:
            out._relations = [cls.from_graph(g.relation(r), grid, relabel, seed)
                              for r in range(g.num_relations)]
        return out

    @classmethod
    def from_blocks(cls, grid: Grid, n: int, parts: list[np.ndarray], block: sp.spmatrix,
                    dtype=np.float32, edge_attr: np.ndarray | None = None) -> DistGraph:
        """The graph whose block on this rank is ``block`` (``|R_x| × |C_y|``, local ids);
        ``edge_attr``: its entries' features in its CSR order (they stay with the
        block)."""
        dt = float_dtype(dtype)
        local = sp.csr_matrix(block, dtype=dt)
        local.sort_indices()
        rows, cols = parts[grid.x], parts[grid.y]
        if local.shape != (rows.size, cols.size):
            raise ValueError(f"block shape {local.shape} does not match the parts "
                             f"({rows.size}, {cols.size})")
        out = cls(grid, n, parts, Block(gb.io.from_scipy_sparse(local), rows, cols, int(n)))
        if edge_attr is not None:
            out._attr = EdgeFeatures(out.edge_tensor, np.ascontiguousarray(edge_attr, dt),
                                     None)
        return out

    def laid_out(self, dense: str) -> DistGraph:
        """This graph with dense tensors laid out as ``dense`` over the same grid
        (:meth:`Grid.laid_out`): the same blocks, edge features and relations; its rows are
        those the layout keeps (:attr:`vertex_ids`). No communication."""
        grid = self.grid.laid_out(dense)
        if grid is self.grid:
            return self
        twin = copy.copy(self)
        twin.grid = grid
        twin.vertex_ids = self._block.row_ids[dense_layout(grid).local_rows(
            self._block.row_ids.size)]
        twin.n_local = int(twin.vertex_ids.shape[0])
        twin._cache = {}                        # (graphs derived on this grid: built again)
        if self._relations is not None:
            twin._relations = [r.laid_out(dense) for r in self._relations]
        return twin

    @classmethod
    def kronecker(cls, grid: Grid, scale: int, edge_factor: int = 16, **kw) -> DistGraph:
        """This rank's block of the Graph500 Kronecker graph of
        :func:`gblas_gnn.data.kronecker` with the same arguments, generated in place: no rank
        holds the whole edge list (:mod:`gblas_gnn.dist.generate`); ``relabel=True`` spreads
        the vertices over the blocks."""
        return cls.from_blocks(grid, *generate.kronecker(grid, scale, edge_factor, **kw))

    @classmethod
    def erdos_renyi(cls, grid: Grid, n: int, density: float, **kw) -> DistGraph:
        """This rank's block of :func:`gblas_gnn.data.erdos_renyi` with the same arguments,
        generated in place."""
        return cls.from_blocks(grid, *generate.erdos_renyi(grid, n, density, **kw))

    # ------------------------------------------------------------------ properties
    @property
    def A(self) -> Block:
        """This rank's block of the adjacency, its ``M`` a ``graphblas.Matrix``. For
        :meth:`with_self_loops`'s graph it is another :class:`Block` than
        :attr:`edge_tensor` on every rank (the same local matrix off the diagonal), so
        that what an executor keeps per block is missed, and made collectively, by all
        ranks at once."""
        block = self._block
        if self._cache.get("self_looped") is self:
            return self._cached("A", lambda: block.with_matrix(graphblas_of(block.M)))
        return block

    @property
    def edge_tensor(self) -> Block:
        """This rank's block as the executors take it (:attr:`gblas_gnn.Graph.edge_tensor`):
        for :meth:`with_self_loops`'s graph, the pattern of the block of ``A + I`` on a
        diagonal rank, without its matrix."""
        return self._block

    @property
    def dtype(self) -> np.dtype:
        return edge_dtype(self._block.M)

    @property
    def edge_attr(self) -> EdgeFeatures | None:
        """The features of this rank's block's edges (its CSR order; None without), as
        :attr:`gblas_gnn.Graph.edge_attr`: they live with the block and never move."""
        return self._attr

    @property
    def num_relations(self) -> int | None:
        """``R`` of a typed graph (None without relations)."""
        return None if self._relations is None else len(self._relations)

    def relation(self, r: int) -> DistGraph:
        """This rank's share of relation ``r``'s adjacency (see
        :meth:`gblas_gnn.Graph.relation`): a graph on the same grid and parts."""
        if self._relations is None:
            raise ValueError(NO_RELATIONS)
        return self._relations[check_relation(r, len(self._relations))]

    def __repr__(self) -> str:
        b = self._block
        return (f"DistGraph(n={self.n}, nnz={self.nnz}, grid={self.grid.q}x{self.grid.q}, "
                f"block={b.nrows}x{b.ncols} with {b.nvals} entries)")

    def _cached(self, key, build):
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    # ------------------------------------------------------------------ derived graphs
    def astype(self, dtype) -> DistGraph:
        """The same graph with values in ``dtype`` (float64 → float32 refused, as
        :meth:`gblas_gnn.Graph.astype`)."""
        dt = widening(self.dtype, dtype)
        if dt is None:
            return self

        def build():
            g = DistGraph(self.grid, self.n, self.part_sizes,
                          self.A.with_matrix(self.A.M.dup(dtype=dt)), nnz=self.nnz)
            if self._attr is not None:
                g._attr = EdgeFeatures(g.edge_tensor, self._attr.values.astype(dt), None)
            if self._relations is not None:
                g._relations = [rg.astype(dt) for rg in self._relations]
            return g
        return self._cached(("astype", dt), build)

    def with_self_loops(self, fill_value="mean") -> DistGraph:
        """A plus a self loop (value 1) at every vertex that lacks one (cached); only the
        diagonal blocks (x = y) change. There, as in :meth:`gblas_gnn.Graph.with_self_loops`,
        the graph holds the int32 pattern of the block of ``A + I`` and builds its matrix
        when ``A`` is read. With edge features the loops get ``fill_value``'s (collective:
        a vertex's in-edges span its grid row, whose ranks complete the fill)."""
        if "base" in self._cache:
            return self._cache["base"].with_self_loops(fill_value)
        fill = check_fill_value(fill_value, self._attr.f) if self._attr is not None else None
        block = self._cached("loop_block", lambda: self.A.with_matrix(
            AdjacencyPattern(CSRPattern.with_diagonal(self.A.M), self.dtype,
                             functools.partial(self_looped_matrix, self.A.M))
            if self.grid.x == self.grid.y else self.A.M))

        def build():
            g = DistGraph(self.grid, self.n, self.part_sizes, block)
            g._cache["self_looped"] = g
            g._cache["base"] = self
            if self._attr is not None:
                g._attr = with_loops(self._attr, block, lambda: (
                    self._edges(self.edge_tensor), self._edges(block)), fill,
                    self._row_combine, self.A.row_ids)
            return g
        return self._cached(("self_looped", fill_key(fill)), build)

    @staticmethod
    def _edges(block: Block) -> tuple[np.ndarray, np.ndarray]:
        """``(local rows, global source ids)`` of a block's entries, CSR order."""
        from ..executors.patterns import csr_of

        pattern = csr_of(block.M)
        return pattern.rows(), block.col_ids[pattern.indices]

    def _row_combine(self, array: np.ndarray, op: str) -> np.ndarray:
        """A per-row partial completed over the grid row (the edges of a row span it)."""
        return self.grid.allreduce(np.ascontiguousarray(array), op, "row", "edge_attr.loops")

    def gcn_norm(self, add_self_loops: bool = True) -> Block:
        """This rank's block of ``Â = D^-1/2 (A + I) D^-1/2`` with ``D`` the weighted
        in-degrees (row sums over the whole row: an allreduce along the grid row), as
        :meth:`gblas_gnn.Graph.gcn_norm`. Cached."""
        def build():
            from ..executors import get_executor

            cpu = get_executor("cpu")
            block = self.with_self_loops().A if add_self_loops else self.A
            deg = self.grid.allreduce(cpu.row_reduce(block.M, "sum").astype(np.float64),
                                      "sum", "row", "gcn_norm.degree")
            with np.errstate(divide="ignore"):
                dinv = np.where(deg > 0, 1.0 / np.sqrt(np.where(deg > 0, deg, 1)), 0)
            dinv = dinv.astype(self.dtype)
            dinv_cols = self.grid.exchange(dinv, "gcn_norm.degree_columns",
                                           rows=block.ncols)
            return block.with_matrix(cpu.scale_edges(block.M, dinv, dinv_cols))
        return self._cached(("gcn_norm", add_self_loops), build)

    # ------------------------------------------------------------------ dense tensors
    def scatter(self, X) -> np.ndarray:
        """This rank's rows (``R_x``) of a global ``(n, …)`` array that every rank holds."""
        X = np.asarray(X)
        if X.shape[:1] != (self.n,):
            raise ValueError(f"scatter needs a global array with {self.n} rows, got shape "
                             f"{X.shape}")
        return np.ascontiguousarray(X[self.vertex_ids])

    @property
    def parts(self) -> list[np.ndarray]:
        """The global ids of the q parts ``R_0 … R_{q-1}`` (a collective: the grid column's
        row blocks, gathered; every rank reads it at the same point)."""
        ids = self.grid.allgather_rows(np.ascontiguousarray(self._block.row_ids, np.int64),
                                       self.part_sizes, "graph.parts", "col")
        return np.split(ids, np.cumsum(self.part_sizes)[:-1])

    def gather(self, X_local) -> np.ndarray:
        """The global ``(n, …)`` array on every rank from every rank's rows."""
        X_local = np.ascontiguousarray(X_local)
        if X_local.shape[:1] != (self.n_local,):
            raise ValueError(f"gather needs this rank's {self.n_local} rows, got shape "
                             f"{X_local.shape}")
        parts = self.parts
        if self.grid.dense == "replicated":     # the grid column holds R_0 … R_{q-1}
            pieces, which = parts, "col"
        else:                                   # every rank holds a slice: rank order
            pieces = [part[shard(part.size, y, self.grid.q)]
                      for part in parts for y in range(self.grid.q)]
            which = "world"
        stacked = self.grid.allgather_rows(X_local, [p.size for p in pieces], "gather", which)
        out = np.empty((self.n, *X_local.shape[1:]), X_local.dtype)
        out[np.concatenate(pieces)] = stacked
        return out

    def scatter_dataset(self, dataset) -> DistDataset:
        """A node-classification data set (``graph, x, y``, masks) with this graph and this
        rank's rows of every per-vertex array, for :func:`gblas_gnn.train.fit`."""
        def part(name):
            value = getattr(dataset, name, None)
            return None if value is None else self.scatter(value)

        return DistDataset(getattr(dataset, "name", "dataset"), self, part("x"), part("y"),
                           part("train_mask"), part("val_mask"), part("test_mask"),
                           int(getattr(dataset, "num_classes", 0) or 0))

    def block_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """``(dst, src)``: the global ids of this rank's stored entries (edges ``src → dst``),
        in the block's CSR order."""
        rows, cols, _ = self.A.M.to_coo()
        return self.A.row_ids[rows], self.A.col_ids[cols]

    # ------------------------------------------------------------------ diagnostics
    def imbalance(self) -> float:
        """``max / mean`` of the block sizes (stored entries) over the ranks (1 = balanced)."""
        sizes = np.array(self.grid.allgather(int(self._block.nvals), "graph.imbalance"),
                         float)
        return float(sizes.max() / sizes.mean()) if sizes.sum() else 1.0


@dataclass(eq=False)
class DistDataset:
    """A node-classification data set on a grid: the :class:`DistGraph` and this rank's
    rows of the features, labels and masks (what :func:`gblas_gnn.train.fit` reads).

    ``read``: for a data set read from files by parts, what this rank read
    (:func:`gblas_gnn.dist.data.load_dataset`: ``edge_bytes`` of the ``total_edge_bytes`` of
    the file's entries, ``row_bytes`` of vertex rows, and ``how``); ``None`` otherwise.
    """

    name: str
    graph: DistGraph
    x: np.ndarray
    y: np.ndarray
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray | None
    num_classes: int
    read: dict | None = None

    def laid_out(self, dense: str) -> DistDataset:
        """This data set with its graph and vertex arrays laid out as ``dense``
        (:meth:`DistGraph.laid_out`): a slice of this rank's rows towards ``sharded``, a
        gather over the grid row towards ``replicated``."""
        graph = self.graph.laid_out(dense)
        if graph is self.graph:
            return self
        r = self.graph.A.nrows
        names = ("x", "y", "train_mask", "val_mask", "test_mask")
        arrays = {k: getattr(self, k) for k in names if getattr(self, k) is not None}
        if dense == "sharded":
            rows = dense_layout(graph.grid).local_rows(r)
            moved = {k: np.ascontiguousarray(v[rows]) for k, v in arrays.items()}
        else:
            layout = dense_layout(self.graph.grid)      # (one gather per dtype)
            moved = {k: layout.rows([v], r, "dataset.laid_out")[0] for k, v in arrays.items()}
        return replace(self, graph=graph, **moved)


@as_graph.register
def _(obj: DistGraph, dtype=None) -> DistGraph:
    return obj
