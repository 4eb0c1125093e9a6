"""A seeded random heterogeneous graph: vertex types of given sizes, relations with given
edge counts drawn uniformly (each pair once per relation), and optionally every relation's
reverse, for tests and benchmarks of typed layers at any size."""

from __future__ import annotations

import numpy as np

from ..hetero import EdgeType, HeteroGraph

__all__ = ["typed_random"]


def typed_random(num_nodes: dict[str, int], edges: dict[EdgeType, int], seed: int = 0,
                 reverse: bool = False, dtype=np.float32) -> HeteroGraph:
    """A :class:`~gblas_gnn.HeteroGraph` with ``num_nodes[t]`` vertices of each type and, for
    each relation ``(s, r, d)`` of ``edges``, about ``edges[key]`` distinct pairs drawn
    uniformly from ``s × d`` (duplicate draws merged; at most ``n_s · n_d``). With
    ``reverse`` every relation is joined by ``(d, "rev_" + r, s)`` holding its edges turned
    around (PyG's ``ToUndirected``). Deterministic in ``seed``.

    Raises
    ------
    ValueError
        A negative edge count (and whatever :meth:`HeteroGraph.from_edge_index_dict`
        refuses: unknown types, bad counts).
    """
    if not isinstance(edges, dict):
        raise TypeError(f"edges must be a dict {{edge type: count}}, got {type(edges).__name__}")
    rng = np.random.default_rng(seed)
    out = {}
    for key, m in edges.items():
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 0:
            raise ValueError(f"the edge count of {key} must be a non-negative integer, got {m!r}")
        if not (isinstance(key, tuple) and len(key) == 3):
            raise TypeError(f"an edge type is a triple (source, relation, target), got {key!r}")
        ns, nd = num_nodes.get(key[0], 0), num_nodes.get(key[2], 0)
        m = min(int(m), ns * nd)
        pairs = np.unique(rng.integers(0, max(ns, 1), m) * nd + rng.integers(0, max(nd, 1), m))
        out[key] = np.stack([pairs // max(nd, 1), pairs % max(nd, 1)]).astype(np.int64)
    if reverse:
        for (s, r, d), ei in list(out.items()):
            out[(d, f"rev_{r}", s)] = ei[::-1].copy()
    return HeteroGraph.from_edge_index_dict(out, num_nodes, dtype=dtype)
