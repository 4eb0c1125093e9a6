"""The :class:`Graph`: a validated sparse adjacency matrix with cached derived forms.

Conventions
-----------
``A`` is n×n; row ``i`` is the *target* vertex and column ``j`` the *source*:
``A[i, j]`` is stored ⇔ ``i`` aggregates from ``j`` (edge ``j → i``).

* **Duplicate edges are merged** into one stored entry. Unweighted duplicates keep the
  value 1; weighted duplicates have their values summed (as ``scipy.sparse`` does when it
  canonicalises a COO matrix).
* **Self loops are kept as given.** :meth:`Graph.with_self_loops` adds the missing ones with
  value 1 (never duplicating an existing loop, whose value is kept), as PyTorch Geometric's
  ``add_remaining_self_loops`` does. The graph it returns holds only the executors' int32
  pattern of ``A + I`` (:attr:`Graph.edge_tensor`) until its ``A`` is asked for.
* Edge values must be finite; vertex ids must be integers in ``[0, n)``.
* **Relations** (``edge_type``, one relation id per given edge) are kept per relation
  (:meth:`Graph.relation`, :mod:`gblas_gnn.relations`); ``A`` is their union.
* **Edge features** (``edge_attr``, one row per given edge) are kept per stored edge
  (:attr:`Graph.edge_attr`, :mod:`gblas_gnn.edge_attr`); a pair given twice with features
  is an error (which features would the merged edge have?). :meth:`Graph.with_self_loops`
  fills the loops' features by PyG's ``fill_value`` rules.
"""

from __future__ import annotations

import functools
from pathlib import Path

import graphblas as gb
import numpy as np
import scipy.io
import scipy.sparse as sp
from graphblas import binary

from ._io import atomic_write, read_npz
from ._validate import float_dtype, widening
from .edge_attr import (
    IN_CSR_ORDER,
    EdgeFeatures,
    check_edge_attr,
    check_fill_value,
    fill_key,
    with_loops,
)
from .executors.patterns import AdjacencyPattern, CSRPattern, csr_of, index_dtype
from .relation_segments import SegmentedStack
from .relations import NO_RELATIONS, Relations, check_edge_type

__all__ = ["Graph", "as_graph"]


def _check_ids(ids, name: str, n: int) -> np.ndarray:
    ids = np.asarray(ids)
    if ids.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {ids.shape}")
    if ids.size and not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(f"{name} must hold integer vertex ids, got dtype {ids.dtype}")
    ids = ids.astype(np.int64, copy=False)
    if ids.size:
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0:
            raise ValueError(f"{name} holds a negative vertex id ({lo})")
        if hi >= n:
            raise ValueError(f"{name} holds vertex id {hi}, out of range for n={n}")
    return ids


def _check_values(values, m: int) -> np.ndarray:
    values = np.asarray(values)
    if values.shape != (m,):
        raise ValueError(f"edge values must have shape ({m},), got {values.shape}")
    if values.size and not (np.issubdtype(values.dtype, np.floating)
                            or np.issubdtype(values.dtype, np.integer)
                            or values.dtype == np.bool_):
        raise TypeError(f"edge values must be real numbers, got dtype {values.dtype}")
    if values.size and not np.isfinite(values).all():
        raise ValueError("edge values contain NaN or Inf")
    return values


class Graph:
    """A directed graph held as its sparse adjacency ``A`` (a ``graphblas.Matrix``).

    Build it with :meth:`from_edges`, :meth:`from_edge_index` (PyTorch Geometric),
    :meth:`from_scipy`, :meth:`from_graphblas`, :meth:`from_npz` or :meth:`from_mtx`; every
    constructor validates its input.

    Attributes
    ----------
    A : graphblas.Matrix
        n×n adjacency, ``A[i, j]`` stored ⇔ edge ``j → i``; dtype FP32 unless asked otherwise.
        (The graph :meth:`with_self_loops` returns, and the generators' graphs of
        :mod:`gblas_gnn.data`, hold only an int32 CSR pattern and build it at the first
        access.)
    n, nnz : int
        Number of vertices and of stored edges.
    """

    def __init__(self, A: gb.Matrix):
        if not isinstance(A, gb.Matrix):
            raise TypeError(f"Graph needs a graphblas.Matrix, got {type(A).__name__}")
        if A.nrows != A.ncols:
            raise ValueError(f"adjacency must be square, got {A.nrows}×{A.ncols}")
        self._edges: gb.Matrix | AdjacencyPattern = A
        self._cache: dict = {}
        self._attr: EdgeFeatures | None = None
        self._rel: Relations | None = None

    @classmethod
    def _of_pattern(cls, pattern: AdjacencyPattern) -> Graph:
        """The graph whose adjacency is ``pattern`` (its matrix built when ``A`` is read)."""
        g = cls.__new__(cls)
        g._edges, g._cache, g._attr, g._rel = pattern, {}, None, None
        return g

    @classmethod
    def _of_csr_edges(cls, src: np.ndarray, dst: np.ndarray, n: int, dtype) -> Graph:
        """The graph of unit-valued edges ``src → dst`` (``A[dst, src] = 1``) given in CSR
        order (by target, then source), each pair once: it holds their int32 CSR pattern,
        half the bytes of GraphBLAS's int64 indices, and builds ``A`` at its first access (a
        layer that adds self loops never asks for it)."""
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
        pattern = CSRPattern.of_buffers(n, n, indptr, src.astype(index_dtype(n)))
        dt = np.dtype(dtype)

        def build():
            return gb.Matrix.from_csr(indptr, pattern.indices, dt.type(1), nrows=n, ncols=n)

        return cls._of_pattern(AdjacencyPattern(pattern, dt, build))

    @property
    def A(self) -> gb.Matrix:
        """The adjacency as a ``graphblas.Matrix`` (see the class docstring)."""
        E = self._edges
        return E.matrix if isinstance(E, AdjacencyPattern) else E

    @property
    def edge_tensor(self) -> gb.Matrix | AdjacencyPattern:
        """The adjacency as the executors take it (an edge tensor): ``A`` itself, or, for the
        graph :meth:`with_self_loops` returns, an
        :class:`~gblas_gnn.executors.patterns.AdjacencyPattern` holding only the int32 CSR
        pattern the kernels read, whose matrix is ``A`` (built when asked for).
        ``ops.structure(g)`` masks with it; the executors keep one pattern for both."""
        return self._edges

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_edges(cls, src, dst, n: int, values=None, dtype=np.float32,
                   edge_attr=None, edge_type=None, num_relations: int | None = None) -> Graph:
        """Graph with edges ``src[e] → dst[e]`` (stored at ``A[dst[e], src[e]]``).

        Parameters
        ----------
        src, dst : array_like of int
            Source and target vertex ids, each in ``[0, n)``.
        n : int
            Number of vertices.
        values : array_like, optional
            Edge weights (finite). Duplicates are summed; without weights every edge is 1.
        dtype : float32 or float64
        edge_attr : array_like, shape (m, f) or (m,), optional
            Features of every given edge (finite; cast to ``dtype``): :attr:`edge_attr`. A
            pair given twice is then a ``ValueError`` naming the duplicate.
        edge_type : array_like of int, shape (m,), optional
            The relation of every given edge, ids in ``[0, R)`` (:meth:`relation`); ``A`` is
            the union of the relations. A pair may carry several relations, each once.
            Neither ``values`` nor ``edge_attr`` may come with it.
        num_relations : int, optional
            ``R`` (default: one more than the largest id in ``edge_type``).
        """
        dt = float_dtype(dtype)
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"n must be a non-negative integer, got {n!r}")
        n = int(n)
        src = _check_ids(src, "src", n)
        dst = _check_ids(dst, "dst", n)
        if src.shape != dst.shape:
            raise ValueError(f"src and dst differ in length ({src.size} vs {dst.size})")
        types = None
        if edge_type is not None:
            if values is not None or edge_attr is not None:
                raise ValueError("edge_type with edge values or edge_attr: a typed graph's "
                                 "relations are patterns (as R-GCN reads them); give the "
                                 "edges and their relation ids only")
            types, R = check_edge_type(edge_type, src.size, num_relations)
        elif num_relations is not None:
            raise ValueError("num_relations without edge_type")
        if edge_attr is not None:
            attr = check_edge_attr(edge_attr, src.size, dt)
            csr = _csr_permutation(src, dst)
        if values is None and edge_attr is not None:
            # the pattern alone, as a generator's graph (each pair is given once)
            g = cls._of_csr_edges(*((src, dst) if csr is None else (src[csr], dst[csr])), n,
                                  dt)
        elif values is None:
            # a scalar value gives an iso matrix; GraphBLAS ignores duplicate indices
            g = cls(gb.Matrix.from_coo(dst, src, dt.type(1), nrows=n, ncols=n, dtype=dt))
        else:
            vals = _check_values(values, src.size).astype(dt, copy=False)
            g = cls(gb.Matrix.from_coo(dst, src, vals, nrows=n, ncols=n, dtype=dt,
                                       dup_op=binary.plus))
        if edge_attr is not None:
            g._attr = _given_features(g, attr, csr)
        if types is not None:
            g._rel = Relations(src, dst, types, R, n, dt)
        return g

    @classmethod
    def from_edge_index(cls, edge_index, n: int, edge_weight=None, dtype=np.float32,
                        edge_attr=None, edge_type=None,
                        num_relations: int | None = None) -> Graph:
        """Graph from PyTorch Geometric's ``edge_index`` (2, m): row 0 holds the sources, row 1
        the targets (``flow="source_to_target"``), so edge ``e`` is stored at
        ``A[edge_index[1, e], edge_index[0, e]]``.

        Parameters
        ----------
        edge_index : array_like or torch.Tensor of int, shape (2, m)
            A tensor is read through ``.detach().cpu().numpy()`` (torch itself is not
            imported).
        n : int
            Number of vertices (PyG's ``num_nodes``).
        edge_weight : array_like or torch.Tensor, shape (m,), optional
            PyG's ``edge_weight``. Duplicate edges are merged, weights summed (PyG keeps
            duplicates as separate messages).
        dtype : float32 or float64
        edge_attr : array_like or torch.Tensor, shape (m, f) or (m,), optional
            PyG's ``edge_attr``: the features of every edge (:attr:`edge_attr`).
        edge_type : array_like or torch.Tensor of int, shape (m,), optional
            PyG's ``edge_type``: the relation of every edge (:meth:`relation`).
        num_relations : int, optional
            ``R`` (default: one more than the largest id in ``edge_type``).
        """
        ei, w = (x.detach().cpu().numpy() if hasattr(x, "detach") else x
                 for x in (edge_index, edge_weight))
        ei = np.asarray(ei)
        if ei.ndim != 2 or ei.shape[0] != 2:
            raise ValueError(f"edge_index must have shape (2, m), got {ei.shape}")
        return cls.from_edges(ei[0], ei[1], n, values=w, dtype=dtype, edge_attr=edge_attr,
                              edge_type=edge_type, num_relations=num_relations)

    @classmethod
    def from_scipy(cls, mat, dtype=np.float32) -> Graph:
        """Graph from a square ``scipy.sparse`` matrix (duplicates summed, values checked)."""
        if not sp.issparse(mat):
            raise TypeError(f"expected a scipy.sparse matrix, got {type(mat).__name__}")
        if mat.shape[0] != mat.shape[1]:
            raise ValueError(f"adjacency must be square, got {mat.shape[0]}×{mat.shape[1]}")
        coo = sp.coo_matrix(mat)
        return cls.from_edges(coo.col, coo.row, coo.shape[0], values=coo.data, dtype=dtype)

    @classmethod
    def from_graphblas(cls, M: gb.Matrix, dtype=None) -> Graph:
        """Graph from a square ``graphblas.Matrix`` (copied; cast to ``dtype`` when given)."""
        if not isinstance(M, gb.Matrix):
            raise TypeError(f"expected a graphblas.Matrix, got {type(M).__name__}")
        dt = float_dtype(dtype if dtype is not None else
                         (M.dtype.np_type if M.dtype.np_type in (np.float32, np.float64)
                          else np.float32))
        if M.nrows != M.ncols:
            raise ValueError(f"adjacency must be square, got {M.nrows}×{M.ncols}")
        rows, cols, vals = M.to_coo()
        return cls.from_edges(cols, rows, M.nrows, values=vals, dtype=dt)

    @classmethod
    def from_npz(cls, path, dtype=np.float32) -> Graph:
        """Read a COO ``.npz`` with arrays ``row``, ``col``, ``shape``, optional ``data``,
        optional ``edge_attr`` (one row of features per entry) and optional ``edge_type``
        with ``num_relations`` (one relation id per entry: :meth:`relation`).

        ``row`` holds targets and ``col`` sources (the layout of ``A``). No pickles are loaded.
        """
        path = Path(path)
        arrays = read_npz(path, "graph file")
        missing = {"row", "col", "shape"} - arrays.keys()
        if missing:
            raise ValueError(f"{path} lacks the array(s) {sorted(missing)}; "
                             "expected row, col, shape and optional data")
        shape = arrays["shape"]
        if shape.shape != (2,) or not np.issubdtype(shape.dtype, np.integer):
            raise ValueError(f"{path}: 'shape' must be two integers, got {shape!r}")
        if shape[0] != shape[1]:
            raise ValueError(f"{path}: adjacency must be square, got {shape[0]}×{shape[1]}")
        R = arrays.get("num_relations")
        if R is not None and (R.shape != () or not np.issubdtype(R.dtype, np.integer)):
            raise ValueError(f"{path}: 'num_relations' must be one integer, got {R!r}")
        return cls.from_edges(arrays["col"], arrays["row"], int(shape[0]),
                              values=arrays.get("data"), dtype=dtype,
                              edge_attr=arrays.get("edge_attr"),
                              edge_type=arrays.get("edge_type"),
                              num_relations=None if R is None else int(R))

    @classmethod
    def from_mtx(cls, path, dtype=np.float32) -> Graph:
        """Read a Matrix Market file (``pattern`` matrices get edge values 1)."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no such graph file: {path}")
        try:
            mat = scipy.io.mmread(str(path))
        except Exception as exc:  # scipy raises a zoo of types for malformed files
            raise ValueError(f"{path} is not a readable Matrix Market file: {exc}") from exc
        if not sp.issparse(mat):
            mat = sp.coo_matrix(mat)
        return cls.from_scipy(mat, dtype=dtype)

    # ------------------------------------------------------------------ writers
    def save_npz(self, path) -> None:
        """Write ``A`` as a COO ``.npz`` (``row``, ``col``, ``data``, ``shape``, the edge
        features ``edge_attr`` when the graph has them, and ``order = "csr"``: the entries
        are row-major with sorted columns, which lets a distributed reader take only its
        rows), uncompressed, atomically. A typed graph writes its given edges relation by
        relation instead (``row``, ``col``, ``edge_type``, ``num_relations``, ``shape``)."""
        if self._rel is not None:
            rel = self._rel
            atomic_write(path, lambda f: np.savez(
                f, row=rel.dst, col=rel.src, shape=np.array([self.n, self.n]),
                edge_type=np.repeat(np.arange(rel.num_relations), np.diff(rel.offsets)),
                num_relations=np.array(rel.num_relations)))
            return
        rows, cols, vals = self.A.to_coo()      # CSR order: row-major, columns sorted
        extra = {} if self._attr is None else {"edge_attr": self._attr.values}
        atomic_write(path, lambda f: np.savez(f, row=rows, col=cols, data=vals,
                                               shape=np.array([self.n, self.n]),
                                               order=np.array("csr"), **extra))

    def save_mtx(self, path) -> None:
        """Write ``A`` as a Matrix Market coordinate file, atomically."""
        atomic_write(path, lambda f: scipy.io.mmwrite(f, self.to_scipy()))

    def to_scipy(self) -> sp.csr_matrix:
        """``A`` as a ``scipy.sparse.csr_matrix``."""
        return gb.io.to_scipy_sparse(self.A, format="csr")

    # ------------------------------------------------------------------ properties
    @property
    def n(self) -> int:
        return int(self._edges.nrows)

    @property
    def nnz(self) -> int:
        return int(self._edges.nvals)

    @property
    def dtype(self) -> np.dtype:
        dtype = self._edges.dtype
        return np.dtype(getattr(dtype, "np_type", dtype))

    @property
    def edge_attr(self) -> EdgeFeatures | None:
        """The edge features (None without): an :class:`~gblas_gnn.edge_attr.EdgeFeatures`,
        ``f`` numbers per stored edge on this graph's pattern, entry ``[i, j, :]`` the
        features of the edge ``j → i``; inside a composed forward a virtual edge tensor
        (``g.edge_attr @ W`` contracts its channels per edge)."""
        return self._attr

    @property
    def num_relations(self) -> int | None:
        """``R`` of a graph built with ``edge_type`` (None without relations)."""
        return None if self._rel is None else self._rel.num_relations

    @property
    def edge_type(self) -> np.ndarray | None:
        """The relation id of every given edge, in the given order (None without)."""
        return None if self._rel is None else self._rel.edge_type

    def stacked_relations(self, side: str = "targets", mean: bool = False,
                          loops: bool = False) -> gb.Matrix:
        r"""The relations' adjacencies stacked by rows, an :math:`nR \times n` matrix built once
        (:meth:`gblas_gnn.relations.Relations.stacked`): row :math:`iR + r` of the
        ``"targets"`` side is row ``i`` of :math:`A_r`, so one product aggregates every
        relation into an ``(n, R, k)`` array; the ``"sources"`` side stacks the
        :math:`A_r^\top` for the backward. With ``mean`` the entry of the edge ``j → i`` of
        relation ``r`` is :math:`1/|N_r(i)|`, else 1. With ``loops`` the identity follows as
        relation ``R`` (an :math:`n(R + 1) \times n` matrix).

        Raises
        ------
        ValueError
            The graph has no relations, or ``side`` is neither ``"targets"`` nor
            ``"sources"``.
        """
        return self._relations().stacked(side, mean, loops)

    def segmented_relations(self, side: str = "targets", mean: bool = False,
                            loops: bool = False) -> SegmentedStack:
        """The relations stacked group by group of vertices, each vertex with the blocks of
        the relations it has edges of on ``side`` (:mod:`gblas_gnn.relation_segments`),
        built once: a :class:`~gblas_gnn.relation_segments.SegmentedStack`. Where that
        saves less than a quarter of :meth:`stacked_relations`' block rows (a graph whose
        every vertex has most relations) it is :meth:`stacked_relations` as one segment.
        Values, ``loops`` and errors as :meth:`stacked_relations`."""
        return self._relations().segmented(side, mean, loops)

    def _relations(self) -> Relations:
        """This graph's relations; ``ValueError`` for a graph built without them."""
        if self._rel is None:
            raise ValueError(NO_RELATIONS)
        return self._rel

    def relation(self, r: int) -> Graph:
        """Relation ``r``'s adjacency ``A_r`` (``A_r[i, j]`` stored ⇔ an edge ``j → i`` of
        relation ``r``; value 1) as a graph of the same vertices, built once
        (:mod:`gblas_gnn.relations`). ``ops.structure(g.relation(r))`` is its pattern in a
        composition.

        Raises
        ------
        ValueError
            The graph has no relations (built without ``edge_type``), or ``r`` is not in
            ``[0, R)``.
        """
        return self._relations().graph(r, lambda src, dst, n, dtype: Graph.from_edges(
            src, dst, n, dtype=dtype))

    def __repr__(self) -> str:
        feats = "" if self._attr is None else f", edge_attr={self._attr.f}"
        rels = "" if self._rel is None else f", num_relations={self._rel.num_relations}"
        return f"Graph(n={self.n}, nnz={self.nnz}, dtype={self.dtype}{feats}{rels})"

    def _cached(self, key, build):
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    @property
    def AT(self) -> gb.Matrix:
        """The transpose ``Aᵀ`` (cached)."""
        return self._cached("AT", lambda: self.A.T.new())

    def _pattern_counts(self, axis: str) -> np.ndarray:
        ex = _cpu()
        ones = ex.pattern(self.A, 1.0, np.float64)
        counts = ex.row_reduce(ones) if axis == "row" else ex.col_reduce(ones)
        return counts.astype(np.int64)

    @property
    def in_degree(self) -> np.ndarray:
        """Number of in-edges per vertex (stored entries per row of ``A``), int64."""
        return self._cached("in_degree", lambda: self._pattern_counts("row"))

    @property
    def out_degree(self) -> np.ndarray:
        """Number of out-edges per vertex (stored entries per column of ``A``), int64."""
        return self._cached("out_degree", lambda: self._pattern_counts("col"))

    @property
    def n_local(self) -> int:
        """Rows of a dense tensor over this graph in this process: all ``n`` of them (a
        :class:`gblas_gnn.dist.DistGraph` holds a share)."""
        return self.n

    @property
    def has_self_loops(self) -> bool:
        if "base" in self._cache:                         # with_self_loops(): every vertex
            return self.n > 0
        if isinstance(self._edges, AdjacencyPattern):       # its matrix not asked for
            return self._edges.pattern.has_diagonal_entry()
        return self.A.diag().nvals > 0

    # ------------------------------------------------------------------ derived graphs
    def astype(self, dtype) -> Graph:
        """The same graph with values in ``dtype`` (cached; float64 → float32 is refused
        because it would change edge values silently)."""
        dt = widening(self.dtype, dtype)
        if dt is None:
            return self

        def build():
            g = Graph(self.A.dup(dtype=dt))
            if self._rel is not None:
                g._rel = self._rel.astype(dt)
            if self._attr is not None:
                g._attr = EdgeFeatures(g._edges, self._attr.values.astype(dt),
                                       self._attr.order, origin=self._attr)
            return g
        return self._cached(("astype", dt), build)

    def with_self_loops(self, fill_value="mean") -> Graph:
        """``A`` plus a self loop (value 1) at every vertex that lacks one (cached).

        The graph returned holds the int32 CSR pattern of ``A + I``, built straight from A's
        (:meth:`~gblas_gnn.executors.patterns.CSRPattern.with_diagonal`): what the layers
        and every executor run on (:attr:`edge_tensor`). Its ``A``, a ``graphblas.Matrix``
        with A's values and 1 on the added loops, is built at the first access.

        The graph returned has no relations (a loop has none); a typed graph's layer reads
        its relations from the graph itself (R-GCN's root term is its self loop).

        With edge features the loops' features follow ``fill_value``, as PyG's attention
        layers add them: every loop, given or added, gets ``"mean"`` (default), ``"add"``,
        ``"max"`` or ``"min"`` of the features of its vertex's other in-edges (0 without
        any), or a number, or a vector of ``f`` numbers (:mod:`gblas_gnn.edge_attr`).
        """
        if "base" in self._cache:                     # a graph with loops: from its base
            return self._cache["base"].with_self_loops(fill_value)
        fill = check_fill_value(fill_value, self._attr.f) if self._attr is not None else None
        own = self._edges
        pattern = self._cached("loop_pattern", lambda: AdjacencyPattern(
            CSRPattern.with_diagonal(own.pattern if isinstance(own, AdjacencyPattern)
                                     else own), self.dtype,
            lambda: self_looped_matrix(self.A)))

        def build():
            g = Graph._of_pattern(pattern)
            g._cache["base"] = self
            if self._attr is not None:
                base, looped = csr_of(self.edge_tensor), pattern.pattern
                g._attr = with_loops(self._attr, pattern, lambda: (
                    (base.rows(), base.indices.astype(np.int64)),
                    (looped.rows(), looped.indices.astype(np.int64))), fill,
                    shift=(looped.indptr.astype(np.int64)
                           - base.indptr.astype(np.int64)).astype(np.uint64))
            return g
        return self._cached(("self_looped", fill_key(fill)), build)

    def symmetrize(self) -> Graph:
        """``A ∪ Aᵀ``; where both ``A[i,j]`` and ``A[j,i]`` exist the larger value is kept.
        A graph with edge features is refused: a merged pair would have two sets."""
        if self._attr is not None:
            raise ValueError("symmetrize() of a graph with edge features: the pair (i, j) "
                             "and its reverse would be one edge with two sets of features; "
                             "add the reverse edges with their features to the edge list "
                             "instead")
        return self._cached("symmetric",
                            lambda: Graph(self.A.ewise_add(self.A.T, binary.max).new()))

    def gcn_norm(self, add_self_loops: bool = True) -> gb.Matrix:
        """GCN normalisation ``Â = D^-1/2 (A + I) D^-1/2`` with ``D = diag(rowsum(A + I))``.

        Row sums are in-degrees (weighted), as in PyTorch Geometric's ``gcn_norm``; a vertex
        of degree 0 gets 0. With ``add_self_loops=False`` the ``I`` is omitted. Cached.
        """
        def build():
            ex = _cpu()
            M = self.with_self_loops().A if add_self_loops else self.A
            deg = ex.row_reduce(M, "sum")
            with np.errstate(divide="ignore"):
                dinv = np.where(deg > 0, 1.0 / np.sqrt(np.where(deg > 0, deg, 1)), 0)
            dinv = dinv.astype(self.dtype)
            return ex.scale_edges(M, dinv, dinv)     # Â[i,j] = dinv[i] M[i,j] dinv[j]
        return self._cached(("gcn_norm", add_self_loops), build)


def self_looped_matrix(A: gb.Matrix) -> gb.Matrix:
    """``A`` with a self loop of value 1 where it has none (existing loops keep their
    value: ``first`` takes A's entry where both exist)."""
    eye = gb.Vector.from_scalar(np.dtype(A.dtype.np_type).type(1), A.nrows, dtype=A.dtype).diag()
    return A.ewise_add(eye, binary.first).new()


def in_csr_order(src: np.ndarray, dst: np.ndarray) -> bool:
    """Whether the edges ``src[k] → dst[k]`` are sorted by target, then by source, each pair
    once."""
    step = np.diff(dst)
    return bool((step >= 0).all() and (np.diff(src)[step == 0] > 0).all())


def _csr_permutation(src: np.ndarray, dst: np.ndarray) -> np.ndarray | None:
    """The given edges ``src[k] → dst[k]`` (int64) in the CSR order of their pattern
    (targets, then sources ascending): the permutation, or None when they are given in it; a
    pair given twice is refused (the edges carry features)."""
    if in_csr_order(src, dst):
        return None
    csr = np.lexsort((src, dst))
    same = (dst[csr[1:]] == dst[csr[:-1]]) & (src[csr[1:]] == src[csr[:-1]])
    if same.any():
        k = int(csr[1:][np.argmax(same)])
        raise ValueError(f"duplicate edge {int(src[k])} -> {int(dst[k])} with edge_attr: "
                         "each pair may be given once when the edges carry features")
    return csr


def _given_features(g: Graph, attr: np.ndarray, csr: np.ndarray | None) -> EdgeFeatures:
    """The features ``attr`` of the given edges in the CSR order of ``g``'s pattern (``csr``:
    :func:`_csr_permutation`'s), with the map back to the given order: none for edges given
    in CSR order (a graph's own file holds them so)."""
    if csr is None:
        return EdgeFeatures(g.edge_tensor, attr, IN_CSR_ORDER)
    # int32 where it fits: the map is kept beside the features (4 bytes an edge, not 8)
    order = np.empty(csr.size, np.int32 if csr.size < 2**31 else np.int64)
    order[csr] = np.arange(csr.size, dtype=order.dtype)
    return EdgeFeatures(g.edge_tensor, attr[csr], order)


def _cpu():
    """The cpu executor, which answers the graph's questions (degrees, normalisation)."""
    from .executors import get_executor

    return get_executor("cpu")


@functools.singledispatch
def as_graph(obj, dtype=None) -> Graph:
    """Accept a :class:`Graph`, a ``scipy.sparse`` matrix or a ``graphblas.Matrix``."""
    if sp.issparse(obj):
        return Graph.from_scipy(obj, dtype=dtype or np.float32)
    raise TypeError("expected a gblas_gnn.Graph, scipy.sparse matrix or graphblas.Matrix, "
                    f"got {type(obj).__name__}")


@as_graph.register
def _(obj: Graph, dtype=None) -> Graph:
    return obj


@as_graph.register
def _(obj: gb.Matrix, dtype=None) -> Graph:
    return Graph.from_graphblas(obj, dtype=dtype)
