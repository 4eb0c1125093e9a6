r"""A heterogeneous graph on the grid: the stacked vertex set's typed graph in blocks, and
each rank's rows of every vertex type.

A :class:`~gblas_gnn.HeteroGraph` is one typed graph on the stacked vertex set of its types
(:mod:`gblas_gnn.hetero`), so on a grid it is that graph's :class:`DistGraph`: every
relation's block on the same parts, the adjacency never moving. A rank holds the rows
:math:`R_x` of the stacked set; of type ``t`` those are the vertices
:meth:`DistHeteroGraph.type_ids` (ids of the type), in the order of the rank's rows. A layer
takes and returns per-type arrays of those rows; :meth:`DistHeteroGraph.scatter` and
:meth:`DistHeteroGraph.gather` go between them and the whole per-type arrays.
"""

from __future__ import annotations

import numpy as np

from ..hetero import HeteroGraph, TypedVertexSet
from .graph import DistGraph
from .grid import Grid

__all__ = ["DistHeteroGraph"]


class DistHeteroGraph(TypedVertexSet):
    """This rank's share of a :class:`~gblas_gnn.HeteroGraph` on a :class:`Grid`.

    Attributes:
        node_types, edge_types, num_nodes_dict, offsets, n, vertex_type: the whole graph's,
            as :class:`~gblas_gnn.HeteroGraph`'s.
        graph: the typed graph of the stacked vertex set on the grid (a :class:`DistGraph`
            with one relation per edge type).
    """

    def __init__(self, hg: HeteroGraph, graph: DistGraph):
        self.node_types, self.edge_types = hg.node_types, hg.edge_types
        self.num_nodes_dict, self.offsets = dict(hg.num_nodes_dict), dict(hg.offsets)
        self.n, self.vertex_type = hg.n, hg.vertex_type
        self.graph = graph
        local = hg.vertex_type[graph.vertex_ids]
        self._rows = {t: np.flatnonzero(local == i) for i, t in enumerate(self.node_types)}

    @classmethod
    def from_hetero(cls, hg: HeteroGraph, grid: Grid, relabel: bool = False,
                    seed: int = 0) -> DistHeteroGraph:
        """This rank's share of ``hg`` (every rank passes the same graph;
        :meth:`DistGraph.from_graph` checks that and spreads the vertices with ``relabel``)."""
        if not isinstance(hg, HeteroGraph):
            raise TypeError(f"from_hetero takes a gblas_gnn.HeteroGraph, got "
                            f"{type(hg).__name__}")
        return cls(hg, DistGraph.from_graph(hg.graph, grid, relabel=relabel, seed=seed))

    def type_rows(self, node_type: str) -> np.ndarray:
        """The positions of this rank's vertices of ``node_type`` among its rows."""
        self._check_type(node_type)
        return self._rows[node_type]

    def type_ids(self, node_type: str) -> np.ndarray:
        """The ids (within ``node_type``) of this rank's vertices of that type, in the order
        of its rows."""
        return self.graph.vertex_ids[self.type_rows(node_type)] - self.offsets[node_type]

    def scatter(self, x_dict: dict) -> dict:
        """This rank's rows of every whole per-type array ``x_dict[t]`` (``(n_t, …)``)."""
        out = {}
        for t, x in x_dict.items():
            x = np.asarray(x)
            if x.shape[:1] != (self.num_nodes_dict.get(t, -1),):
                self._check_type(t)
                raise ValueError(f"scatter needs the whole {t!r} array with "
                                 f"{self.num_nodes_dict[t]} rows, got shape {x.shape}")
            out[t] = np.ascontiguousarray(x[self.type_ids(t)])
        return out

    def gather(self, x_dict: dict) -> dict:
        """The whole per-type arrays on every rank from every rank's rows of them (the types
        of ``x_dict``, each of one width)."""
        types = list(x_dict)
        for t in types:
            self._check_type(t)
        width = {t: np.asarray(x_dict[t]).shape[1:] for t in types}
        out = {}
        for t in types:                        # one gather per type (widths may differ)
            local = np.zeros((self.n_local, *width[t]), np.asarray(x_dict[t]).dtype)
            local[self.type_rows(t)] = x_dict[t]
            out[t] = self.graph.gather(local)[self.offsets[t]:self.offsets[t] +
                                              self.num_nodes_dict[t]]
        return out

    def __repr__(self) -> str:
        held = ", ".join(f"{t}={self.held(t)}" for t in self.node_types)
        return f"DistHeteroGraph(n={self.n}, this rank's vertices: {held}; {self.graph!r})"
