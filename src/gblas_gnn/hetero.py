r"""Vertex types and typed relations (HGT): a heterogeneous graph as blocks of one adjacency.

A :class:`HeteroGraph` holds vertex types (``"author"``, ``"paper"``), each with its own
number of vertices, and relations named by PyG's triples ``(source type, relation, target
type)``, each with its own edges. In the global formulation it is one typed graph on one
stacked vertex set: every vertex type's vertices as a consecutive range, then a *source
block* per relation with edges, a copy of its source type's vertices. Relation ``r``'s edge
``j → i`` is stored at row ``i`` of the target type's range and column ``j`` of the
relation's block: the adjacency block :math:`A_r`, relation ``r`` of
:attr:`HeteroGraph.graph` (a :class:`~gblas_gnn.Graph` with ``edge_type``). So every relation
is an operand of a composition (``ops.structure(hg.relation(("author", "writes",
"paper")))``), every (edge, relation) is its own entry, and a softmax over all in-edges of a
vertex across relations is one row softmax of the whole graph.

Per-type arrays travel stacked: :meth:`TypedVertexSet.stack` puts a dict of ``(n_t, f_t)``
arrays into one array of the stacked rows (the blocks get their source type's rows; zeros
beyond a type's own width), :meth:`TypedVertexSet.split` takes it apart again, and
:meth:`~TypedVertexSet.input_gradient` adds a gradient's block rows back to their types.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np

from ._io import atomic_write, read_npz
from ._validate import float_dtype
from .graph import Graph

__all__ = ["HeteroGraph", "TypedVertexSet", "EdgeType"]

EdgeType = tuple[str, str, str]


def _cat(arrays: list) -> np.ndarray:
    """The arrays end to end (an empty int64 array for none)."""
    return np.concatenate(arrays) if arrays else np.zeros(0, np.int64)


def _check_node_types(num_nodes_dict) -> dict[str, int]:
    if not isinstance(num_nodes_dict, dict) or not num_nodes_dict:
        raise TypeError("num_nodes_dict must be a non-empty dict {node type: number of "
                        f"vertices}}, got {type(num_nodes_dict).__name__}")
    out = {}
    for t, n in num_nodes_dict.items():
        if not isinstance(t, str) or not t:
            raise TypeError(f"a vertex type is a non-empty string, got {t!r}")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"the number of {t!r} vertices must be a non-negative integer, "
                             f"got {n!r}")
        out[t] = int(n)
    return out


def _check_edge_type(key, num_nodes: dict[str, int]) -> EdgeType:
    if not (isinstance(key, tuple) and len(key) == 3 and all(isinstance(x, str) and x
                                                            for x in key)):
        raise TypeError("an edge type is a triple of non-empty strings (source type, "
                        f"relation, target type), got {key!r}")
    for side, t in (("source", key[0]), ("target", key[2])):
        if t not in num_nodes:
            raise ValueError(f"edge type {key}: its {side} type {t!r} is not in "
                             f"num_nodes_dict (types: {sorted(num_nodes)})")
    return key


def _check_edges(key: EdgeType, edge_index, num_nodes: dict[str, int]) -> np.ndarray:
    """``edge_index`` of ``key`` as a (2, m) int64 array of ids in range, without duplicates."""
    ei = edge_index.detach().cpu().numpy() if hasattr(edge_index, "detach") else edge_index
    ei = np.asarray(ei)
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise ValueError(f"edge_index of {key} must have shape (2, m), got {ei.shape}")
    if ei.size and not np.issubdtype(ei.dtype, np.integer):
        raise TypeError(f"edge_index of {key} must hold integer vertex ids, got {ei.dtype}")
    ei = ei.astype(np.int64, copy=False)
    for row, t in ((0, key[0]), (1, key[2])):
        ids, n = ei[row], num_nodes[t]
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
            raise ValueError(f"edge type {key}: vertex id {bad} is out of range for type "
                             f"{t!r} with {n} vertices")
    if ei.shape[1] > 1:
        order = np.lexsort((ei[0], ei[1]))
        s, d = ei[0, order], ei[1, order]
        same = (s[1:] == s[:-1]) & (d[1:] == d[:-1])
        if same.any():
            k = int(np.argmax(same))
            raise ValueError(f"duplicate edge {int(s[k])} -> {int(d[k])} in edge type {key}: "
                             "a relation holds a pair once")
    return ei


class TypedVertexSet(ABC):
    """What a layer reads of a graph with vertex types, on one process or on a grid.

    The stacked vertex set is a sequence of *regions*: first every vertex type (its
    vertices), then one *source block* per relation with edges (a copy of its source type's
    vertices, in order). Relation ``r``'s edge ``j → i`` is stored at row ``i`` of the target
    type's region and column ``j`` of the relation's source block, in the typed graph
    :attr:`graph` (relation ``r`` = :attr:`edge_types` [r]). Every (edge, relation) is then
    its own entry, so one row of :attr:`graph` holds a vertex's in-edges of every relation:
    a softmax over them is one row softmax, and a per-relation map of the sources (HGT's
    :math:`K_j W_r`) is a map of the relation's block's rows.

    :class:`HeteroGraph` holds all of it; :class:`gblas_gnn.dist.DistHeteroGraph` a rank's
    share. Per-region arrays travel stacked (:meth:`stack`); a region is a vertex type's name
    or a relation's triple."""

    node_types: tuple[str, ...]
    edge_types: tuple[EdgeType, ...]
    num_nodes_dict: dict[str, int]
    #: the relations with edges, each with a source block, in the order of the edge types
    blocks: tuple[EdgeType, ...]
    #: where each region starts in the stacked set, and its size
    offsets: dict
    counts: dict
    n: int
    graph: object
    #: the region index of every stacked vertex (types first, then blocks), shape (n,)
    region_of: np.ndarray

    @property
    def regions(self) -> tuple:
        """The node types, then the relations with a source block."""
        return (*self.node_types, *self.blocks)

    def metadata(self) -> tuple[list[str], list[EdgeType]]:
        """``(node types, edge types)``, as PyG's ``HeteroData.metadata()``."""
        return list(self.node_types), list(self.edge_types)

    @property
    def dtype(self) -> np.dtype:
        return self.graph.dtype

    @property
    def n_local(self) -> int:
        """The stacked vertices this process holds."""
        return self.graph.n_local

    def relation_index(self, edge_type: EdgeType) -> int:
        """The index of ``edge_type`` among :attr:`edge_types` (ValueError if absent)."""
        try:
            return self.edge_types.index(edge_type)
        except ValueError:
            raise ValueError(f"this graph has no edge type {edge_type!r}; it has "
                             f"{list(self.edge_types)}") from None

    def relation(self, edge_type: EdgeType):
        """The block of ``edge_type`` as a graph on the stacked vertex set (rows of the target
        type's region, columns of the relation's source block): an operand of a
        composition."""
        return self.graph.relation(self.relation_index(edge_type))

    def _check_region(self, region) -> None:
        if region not in self.offsets:
            what = "vertex type" if isinstance(region, str) else "relation with edges"
            raise ValueError(f"this graph has no {what} {region!r}; it has "
                             f"{list(self.node_types)} and {list(self.blocks)}")

    @abstractmethod
    def type_rows(self, region):
        """This process's rows of ``region`` (a vertex type, or a relation's source block)
        among its stacked rows: a slice or an index array."""

    def astype(self, dtype):
        """The same vertex set whose typed graph is ``dtype`` (itself when it already is;
        float64 → float32 refused, as :meth:`gblas_gnn.Graph.astype`)."""
        graph = self.graph.astype(float_dtype(dtype))
        if graph is self.graph:
            return self
        out = type(self).__new__(type(self))
        out.__dict__.update(self.__dict__)
        out.graph = graph
        return out

    def held(self, region) -> int:
        """How many vertices of ``region`` this process holds."""
        rows = self.type_rows(region)
        return rows.stop - rows.start if isinstance(rows, slice) else int(rows.size)

    def stack(self, x_dict: dict, widths: dict[str, int], dtype, xp=np, name: str = "x",
              types=None, copies: bool = True):
        """The per-type arrays ``x_dict[t]`` (``(held(t), widths[t])``, every vertex type, or
        those of ``types``, whose other rows stay zero) as one ``(n_local, max width)``
        array, zeros beyond a type's width. With ``copies`` a relation's source block reads
        ``x_dict[relation]`` when given (a grid's scattered copy), else its source type's
        array; without, it stays zero. A clear error for a missing or unknown key, a wrong
        shape or dtype."""
        if not isinstance(x_dict, dict):
            raise TypeError(f"{name} must be a dict {{vertex type: array}}, got "
                            f"{type(x_dict).__name__}")
        unknown = [k for k in x_dict if k not in self.offsets or
                   (types is not None and isinstance(k, str) and k not in types)]
        if unknown:
            raise ValueError(f"{name} has the vertex type(s) {unknown} that the graph does not "
                             f"(types: {list(self.node_types)})")
        width = max([widths[t] for t in self.node_types] + [1])
        every_type = types is None
        types = self.node_types if types is None else types
        regions = (*types, *(self.blocks if copies else ()))
        # written whole (every row a region's, every region as wide as the array): no zeros
        whole = (every_type and (copies or not self.blocks)
                 and all(widths[t] == width for t in self.node_types)
                 and sum(self.held(r) for r in regions) == self.n_local)
        out = (xp.empty if whole else xp.zeros)((self.n_local, width), dtype)
        for region in regions:
            source = region if isinstance(region, str) else region[0]
            if source not in x_dict:
                raise ValueError(f"{name} lacks the vertex type {source!r}")
            x = x_dict.get(region, x_dict[source])
            shape = (self.held(region), widths[source])
            if not isinstance(x, (np.ndarray, xp.ndarray)) or tuple(x.shape) != shape:
                raise ValueError(f"{name}[{region!r}] must be an array of shape {shape}, got "
                                 f"{getattr(x, 'shape', type(x).__name__)}")
            if x.dtype != dtype:
                raise TypeError(f"{name}[{region!r}] has dtype {x.dtype}, expected "
                                f"{np.dtype(dtype)}")
            out[self.type_rows(region), :widths[source]] = xp.asarray(x)
        return out

    def split(self, X, regions, widths: dict[str, int] | None = None) -> dict:
        """The rows of each region in ``regions`` of the stacked ``X`` (the first
        ``widths[t]`` columns of a type's or its blocks' when given), as a dict."""
        def cols(region):
            return slice(None) if widths is None else \
                slice(0, widths[region if isinstance(region, str) else region[0]])
        return {r: X[self.type_rows(r), cols(r)] for r in regions}

    @abstractmethod
    def input_gradient(self, dX, widths: dict[str, int]) -> dict:
        """The gradient of the per-type inputs from the stacked one, ``dX`` (the cotangent
        of :meth:`stack`'s result)."""


class HeteroGraph(TypedVertexSet):
    """A graph with vertex types and typed relations, PyG's ``HeteroData`` layout.

    Build it with :meth:`from_edge_index_dict` (or :meth:`from_pyg`, :meth:`from_npz`).

    Attributes
    ----------
    node_types : tuple of str
        The vertex types, in the order given (also the order of the stacked vertex set).
    edge_types : tuple of (str, str, str)
        The relations, in the order given; relation ``r`` of :attr:`graph` is
        ``edge_types[r]``.
    num_nodes_dict : dict
        Vertices per type.
    blocks, offsets, counts, region_of, n : see :class:`TypedVertexSet`
    graph : Graph
        The typed graph of the stacked vertex set: relation ``r`` is :attr:`edge_types`
        [r]'s block (:meth:`relation`).
    """

    def __init__(self, num_nodes: dict[str, int], edges: dict[EdgeType, np.ndarray], dtype):
        self.num_nodes_dict = dict(num_nodes)
        self.node_types = tuple(num_nodes)
        self.edge_types = tuple(edges)
        self._edges = edges
        self.blocks = tuple(k for k in self.edge_types if edges[k].shape[1] > 0)
        self.counts = {**self.num_nodes_dict, **{k: num_nodes[k[0]] for k in self.blocks}}
        sizes = [self.counts[r] for r in self.regions]
        starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.offsets = {r: int(o) for r, o in zip(self.regions, starts[:-1], strict=True)}
        self.n = int(starts[-1])
        self.region_of = np.repeat(np.arange(len(sizes)), sizes)
        src = [edges[k][0] + self.offsets[k] for k in self.blocks]
        dst = [edges[k][1] + self.offsets[k[2]] for k in self.blocks]
        types = [np.full(edges[k].shape[1], self.edge_types.index(k), np.int64)
                 for k in self.blocks]
        self.graph = Graph.from_edges(_cat(src), _cat(dst), self.n, dtype=dtype,
                                      edge_type=_cat(types),
                                      num_relations=max(len(self.edge_types), 1))

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_edge_index_dict(cls, edge_index_dict: dict, num_nodes_dict: dict,
                             dtype=np.float32) -> HeteroGraph:
        """The graph of PyG's ``edge_index_dict`` and ``num_nodes_dict``.

        Parameters
        ----------
        edge_index_dict : dict
            ``{(source type, relation, target type): edge_index}``, each edge index a (2, m)
            integer array or tensor (row 0 the sources, ids of the source type; row 1 the
            targets). A relation holds a pair once; two relations may share it.
        num_nodes_dict : dict
            ``{vertex type: number of vertices}``; a type may have no edges.
        dtype : float32 or float64

        Raises
        ------
        TypeError
            A dict of the wrong form, a type name that is not a string, non-integer ids.
        ValueError
            A type of an edge type not in ``num_nodes_dict``, an id out of its type's range,
            a duplicate edge within a relation, a bad shape or count.
        """
        dt = float_dtype(dtype)
        num_nodes = _check_node_types(num_nodes_dict)
        if not isinstance(edge_index_dict, dict):
            raise TypeError("edge_index_dict must be a dict {(source, relation, target): "
                            f"edge_index}}, got {type(edge_index_dict).__name__}")
        edges = {}
        for key, ei in edge_index_dict.items():
            key = _check_edge_type(key, num_nodes)
            edges[key] = _check_edges(key, ei, num_nodes)
        return cls(num_nodes, edges, dt)

    @classmethod
    def from_pyg(cls, data, dtype=np.float32) -> HeteroGraph:
        """The graph of a PyG ``HeteroData`` (its ``num_nodes`` per type and every edge
        type's ``edge_index``; torch is not imported)."""
        if not (hasattr(data, "node_types") and hasattr(data, "edge_index_dict")):
            raise TypeError(f"expected a torch_geometric HeteroData, got {type(data).__name__}")
        num_nodes = {t: data[t].num_nodes for t in data.node_types}
        return cls.from_edge_index_dict(dict(data.edge_index_dict), num_nodes, dtype)

    @classmethod
    def from_npz(cls, path, dtype=np.float32) -> HeteroGraph:
        """Read what :meth:`save_npz` wrote (no pickles are loaded)."""
        path = Path(path)
        arrays = read_npz(path, "heterogeneous graph file")
        need = {"node_types", "num_nodes", "edge_types", "src", "dst", "edge_type"}
        missing = need - arrays.keys()
        if missing:
            raise ValueError(f"{path} is not a heterogeneous graph file: it lacks "
                             f"{sorted(missing)}")
        node_types, counts, keys = arrays["node_types"], arrays["num_nodes"], arrays["edge_types"]
        if node_types.ndim != 1 or counts.shape != node_types.shape or \
                keys.ndim != 2 or keys.shape[1:] != (3,) or \
                not np.issubdtype(counts.dtype, np.integer):
            raise ValueError(f"{path}: node_types (T,), num_nodes (T,) integers and "
                             "edge_types (R, 3) are expected")
        t = arrays["edge_type"]
        if t.size and (not np.issubdtype(t.dtype, np.integer) or t.min() < 0
                       or t.max() >= keys.shape[0]):
            raise ValueError(f"{path}: edge_type must hold relation ids in [0, {len(keys)})")
        src, dst = arrays["src"], arrays["dst"]
        num_nodes = {str(k): int(c) for k, c in zip(node_types, counts, strict=True)}
        edge_index = {tuple(str(x) for x in key): np.stack([src[t == r], dst[t == r]])
                      for r, key in enumerate(keys)}
        return cls.from_edge_index_dict(edge_index, num_nodes, dtype)

    def save_npz(self, path) -> None:
        """Write the graph as an uncompressed ``.npz`` (``node_types``, ``num_nodes``,
        ``edge_types`` (R, 3), and every edge as ``src``, ``dst`` (ids of its types) and
        ``edge_type``), atomically."""
        ids = [self._edges[k] for k in self.edge_types]
        atomic_write(path, lambda f: np.savez(
            f, node_types=np.array(self.node_types, dtype=str),
            num_nodes=np.array([self.num_nodes_dict[t] for t in self.node_types], np.int64),
            edge_types=np.array(self.edge_types, dtype=str).reshape(-1, 3),
            src=_cat([e[0] for e in ids]), dst=_cat([e[1] for e in ids]),
            edge_type=_cat([np.full(e.shape[1], r, np.int64) for r, e in enumerate(ids)])))

    # ------------------------------------------------------------------ reading
    @property
    def edge_index_dict(self) -> dict[EdgeType, np.ndarray]:
        """Every relation's edges as given, (2, m) int64 (copies)."""
        return {k: v.copy() for k, v in self._edges.items()}

    @property
    def n_local(self) -> int:
        """The stacked vertices this process holds (all of them)."""
        return self.n

    def to_homogeneous(self) -> tuple[Graph, np.ndarray]:
        """``(graph, node_type)``: one vertex set of ``Σ_t n_t`` vertices in the order of the
        types (type ``t``'s vertex ``v`` is ``offsets[t] + v``) and a typed graph whose
        relation ``r`` is :attr:`edge_types` [r] (no source blocks), as PyG's
        ``HeteroData.to_homogeneous()``: the form :class:`~gblas_gnn.nn.RGCNConv` reads.
        ``node_type`` holds every vertex's type index. Built once per dtype."""
        cache = self.__dict__.setdefault("_homogeneous", {})
        if self.dtype not in cache:
            cache[self.dtype] = self._build_homogeneous()
        graph, node_type = cache[self.dtype]
        return graph, node_type.copy()

    def _build_homogeneous(self) -> tuple[Graph, np.ndarray]:
        src = [self._edges[k][0] + self.offsets[k[0]] for k in self.edge_types]
        dst = [self._edges[k][1] + self.offsets[k[2]] for k in self.edge_types]
        types = [np.full(self._edges[k].shape[1], r, np.int64)
                 for r, k in enumerate(self.edge_types)]
        n = sum(self.num_nodes_dict.values())
        graph = Graph.from_edges(_cat(src), _cat(dst), n, dtype=self.dtype,
                                 edge_type=_cat(types),
                                 num_relations=max(len(self.edge_types), 1))
        return graph, self.region_of[:n]

    def type_rows(self, region) -> slice:
        """The rows of ``region`` (a vertex type or a relation's source block) in the stacked
        vertex set."""
        self._check_region(region)
        lo = self.offsets[region]
        return slice(lo, lo + self.counts[region])

    def input_gradient(self, dX, widths: dict[str, int]) -> dict:
        """``{t: dX_t}``: a type's rows plus the rows of every source block copied from it."""
        out = self.split(dX, self.node_types, widths)
        copied = set()
        for key in self.blocks:
            t = key[0]
            if t not in copied:                   # a sum of its own, then added into
                out[t], copied = out[t].copy(), copied | {t}
            out[t] += dX[self.type_rows(key), :widths[t]]
        return out

    def __repr__(self) -> str:
        counts = ", ".join(f"{t}={n}" for t, n in self.num_nodes_dict.items())
        rels = ", ".join(f"{k}={self._edges[k].shape[1]}" for k in self.edge_types)
        return f"HeteroGraph(vertices: {counts}; edges: {rels})"
