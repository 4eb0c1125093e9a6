r"""A heterogeneous graph on the grid: the stacked vertex set's typed graph in blocks, and
each rank's rows of every vertex type.

A :class:`~gblas_gnn.HeteroGraph` is one typed graph on its stacked vertex set (the types,
then a source block per relation: :mod:`gblas_gnn.hetero`), so on a grid it is that graph's
:class:`DistGraph`: every relation's block on the same parts, the adjacency never moving. A
rank holds the rows :math:`R_x` of the stacked set; of a type (or a source block) those are
the vertices :meth:`DistHeteroGraph.type_ids`, in the order of the rank's rows. A layer takes
per-type arrays of those rows and the source blocks' copies (:meth:`DistHeteroGraph.scatter`
gives both from the whole arrays) and returns its output per type;
:meth:`DistHeteroGraph.gather` makes whole arrays again, adding a block's rows of an input
gradient to its source type's.
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
        node_types, edge_types, num_nodes_dict, blocks, offsets, counts, n, region_of: the
            whole graph's, as :class:`~gblas_gnn.HeteroGraph`'s.
        graph: the typed graph of the stacked vertex set on the grid (a :class:`DistGraph`
            with one relation per edge type).
    """

    def __init__(self, hg: HeteroGraph, graph: DistGraph):
        for name in ("node_types", "edge_types", "blocks", "n", "region_of"):
            setattr(self, name, getattr(hg, name))
        self.num_nodes_dict, self.offsets = dict(hg.num_nodes_dict), dict(hg.offsets)
        self.counts = dict(hg.counts)
        self.graph = graph
        local = hg.region_of[graph.vertex_ids]
        self._rows = {r: np.flatnonzero(local == i) for i, r in enumerate(self.regions)}

    @classmethod
    def from_hetero(cls, hg: HeteroGraph, grid: Grid, relabel: bool = False,
                    seed: int = 0) -> DistHeteroGraph:
        """This rank's share of ``hg`` (every rank passes the same graph;
        :meth:`DistGraph.from_graph` checks that and spreads the vertices with ``relabel``)."""
        if not isinstance(hg, HeteroGraph):
            raise TypeError(f"from_hetero takes a gblas_gnn.HeteroGraph, got "
                            f"{type(hg).__name__}")
        return cls(hg, DistGraph.from_graph(hg.graph, grid, relabel=relabel, seed=seed))

    def type_rows(self, region) -> np.ndarray:
        """The positions of this rank's vertices of ``region`` among its rows."""
        self._check_region(region)
        return self._rows[region]

    def type_ids(self, region) -> np.ndarray:
        """The ids (within the vertex type; a source block's are its source type's) of this
        rank's vertices of ``region``, in the order of its rows."""
        return self.graph.vertex_ids[self.type_rows(region)] - self.offsets[region]

    def scatter(self, x_dict: dict, copies: bool = True) -> dict:
        """This rank's rows of every whole per-type array ``x_dict[t]`` (``(n_t, …)``), and
        with ``copies`` (a layer's input) of the source blocks copied from them, keyed by
        their relations; ``copies=False`` for an output's cotangent."""
        out = {}
        for t, x in x_dict.items():
            self._check_region(t)
            x = np.asarray(x)
            if not isinstance(t, str) or x.shape[:1] != (self.num_nodes_dict[t],):
                raise ValueError(f"scatter needs the whole {t!r} array with "
                                 f"{self.num_nodes_dict.get(t)} rows, got shape {x.shape}")
            for region in (t, *(k for k in self.blocks if copies and k[0] == t)):
                out[region] = np.ascontiguousarray(x[self.type_ids(region)])
        return out

    def gather(self, x_dict: dict) -> dict:
        """The whole per-type arrays on every rank from every rank's rows of them; the rows
        of a source block (an input gradient) are added to its source type's."""
        for region in x_dict:
            self._check_region(region)
        out = {}
        for region, x in x_dict.items():       # one gather per region (widths may differ)
            x = np.asarray(x)
            local = np.zeros((self.n_local, *x.shape[1:]), x.dtype)
            local[self.type_rows(region)] = x
            lo = self.offsets[region]
            whole = self.graph.gather(local)[lo:lo + self.counts[region]]
            t = region if isinstance(region, str) else region[0]
            out[t] = whole if t not in out else out[t] + whole
        return out

    def input_gradient(self, dX, widths: dict[str, int]) -> dict:
        """This rank's rows of every type and source block (:meth:`gather` sums them)."""
        return self.split(dX, self.regions, widths)

    def __repr__(self) -> str:
        held = ", ".join(f"{t}={self.held(t)}" for t in self.node_types)
        return f"DistHeteroGraph(n={self.n}, this rank's vertices: {held}; {self.graph!r})"
