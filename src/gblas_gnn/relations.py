r"""Relations on one vertex set: a typed graph's edges, one adjacency per relation (R-GCN).

A :class:`~gblas_gnn.Graph` built with ``edge_type`` (one relation id in ``[0, R)`` per given
edge, PyG's ``edge_type``) keeps its relations as a :class:`Relations`. The graph's ``A`` is
the union of its relations' edges (a pair that carries several relations is one entry there);
relation ``r``'s own adjacency :math:`A_r` (``A_r[i, j]`` stored ⇔ an edge ``j → i`` of
relation ``r``) is :meth:`Graph.relation(r) <gblas_gnn.Graph.relation>`, a graph of its own
with the same vertices, built when first asked for. In a composition its pattern is an
operand like any adjacency's: ``ops.structure(g.relation(r))``. That is the global form of a
relational layer: R-GCN is :math:`\sum_r \mathrm{AGG}_{A_r}(X)\, W_r`, one aggregation per
relation's block.

The same pair may carry several relations; the same pair given twice *with the same
relation* is refused (PyG would count it twice, a merged entry once: an aggregation could not
be both).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import graphblas as gb
import numpy as np

from .relation_segments import Segment, SegmentedStack, segment_vertices, segmented_stack

__all__ = ["Relations", "check_edge_type", "check_relation", "NO_RELATIONS"]

#: the error of asking a graph without relations for one
NO_RELATIONS = ("this graph has no relations: build it with edge_type (one relation id per "
                "edge), e.g. Graph.from_edge_index(edge_index, n, edge_type=t)")


def check_edge_type(edge_type, m: int, num_relations: int | None = None) -> tuple[np.ndarray, int]:
    """``edge_type`` as ``m`` relation ids (int64) and the number of relations ``R``
    (``num_relations``, or one more than the largest id); a clear error otherwise.

    Raises
    ------
    TypeError
        Ids that are not integers.
    ValueError
        A shape other than ``(m,)``, a negative id, an id ≥ ``num_relations``, or a
        ``num_relations`` that is not a positive integer.
    """
    if hasattr(edge_type, "detach"):                         # a torch tensor
        edge_type = edge_type.detach().cpu().numpy()
    t = np.asarray(edge_type)
    if t.ndim != 1 or t.shape[0] != m:
        raise ValueError(f"edge_type must have shape ({m},): one relation id per given edge, "
                         f"got {t.shape}")
    if t.size and not np.issubdtype(t.dtype, np.integer):
        raise TypeError(f"edge_type must hold integer relation ids, got dtype {t.dtype}")
    t = t.astype(np.int64, copy=False)
    if t.size and t.min() < 0:
        raise ValueError(f"edge_type holds the negative relation id {int(t.min())}")
    if num_relations is not None:
        if isinstance(num_relations, bool) or not isinstance(num_relations, (int, np.integer)) \
                or num_relations < 1:
            raise ValueError(f"num_relations must be a positive integer, got {num_relations!r}")
        R = int(num_relations)
        if t.size and t.max() >= R:
            raise ValueError(f"edge_type holds the relation id {int(t.max())} but "
                             f"num_relations={R} (ids are in [0, {R}))")
    else:
        R = int(t.max()) + 1 if t.size else 1
    return t, R


def check_relation(r, num_relations: int) -> int:
    """``r`` as a relation id in ``[0, num_relations)``; ``ValueError`` otherwise."""
    if isinstance(r, bool) or not isinstance(r, (int, np.integer)) \
            or not 0 <= r < num_relations:
        raise ValueError(f"relation must be an integer in [0, {num_relations}), got {r!r}")
    return int(r)


class Relations:
    """The relations of a typed graph: the given edges with their relation ids, and one graph
    per relation (built on first use and kept).

    Parameters
    ----------
    src, dst : ndarray of int
        The given edges ``src[e] → dst[e]`` (validated ids).
    edge_type : ndarray of int64
        Their relation ids (:func:`check_edge_type`).
    num_relations : int
        ``R``.
    n : int
        Vertices.
    dtype : float32 or float64
        The relations' graphs' dtype.
    """

    def __init__(self, src: np.ndarray, dst: np.ndarray, edge_type: np.ndarray,
                 num_relations: int, n: int, dtype):
        order = np.lexsort((src, dst, edge_type))      # by relation, then target, then source
        s, d, t = src[order], dst[order], edge_type[order]
        if order.size > 1:
            same = (t[1:] == t[:-1]) & (d[1:] == d[:-1]) & (s[1:] == s[:-1])
            if same.any():
                k = int(np.argmax(same))
                raise ValueError(f"duplicate edge {int(s[k])} -> {int(d[k])} of relation "
                                 f"{int(t[k])}: a pair may carry several relations, but each "
                                 "relation once")
        small = np.int32 if max(n, 1) < 2**31 else np.int64
        self.src, self.dst = s.astype(small), d.astype(small)
        #: where each relation's edges start in ``src``/``dst`` (``R + 1`` offsets)
        self.offsets = np.searchsorted(t, np.arange(num_relations + 1))
        self._given = edge_type
        self.num_relations, self.n, self.dtype = int(num_relations), int(n), np.dtype(dtype)
        self._graphs: dict[int, Any] = {}
        self._stacks: dict[tuple, Any] = {}
        #: :func:`~gblas_gnn.relation_segments.segment_vertices` per ``(side, loops)`` (None:
        #: no grouping pays)
        self._groupings: dict[tuple[str, bool], Any] = {}

    @property
    def edge_type(self) -> np.ndarray:
        """The relation id of every edge, in the order the edges were given (int64)."""
        return self._given

    def edges(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        """The edges ``(src, dst)`` of relation ``r`` (sorted by target, then source)."""
        lo, hi = self.offsets[r], self.offsets[r + 1]
        return self.src[lo:hi], self.dst[lo:hi]

    def graph(self, r: int, build: Callable[[np.ndarray, np.ndarray, int, np.dtype], Any]):
        """Relation ``r``'s adjacency, ``build(src, dst, n, dtype)`` on its edges the first
        time (:meth:`gblas_gnn.Graph.relation` builds a graph), the same object after."""
        r = check_relation(r, self.num_relations)
        found = self._graphs.get(r)
        if found is None:
            src, dst = self.edges(r)
            found = self._graphs[r] = build(src, dst, self.n, self.dtype)
        return found

    def stacked(self, side: str, mean: bool = False, loops: bool = False) -> gb.Matrix:
        r"""The relations' adjacencies stacked by rows, an :math:`nR \times n` matrix (built
        once per ``(side, mean, loops)`` and kept).

        ``side="targets"``: row :math:`iR + r` is row ``i`` of :math:`A_r`, so
        :math:`(S H)_{iR + r} = \sum_{j \in N_r(i)} H_j`, every relation's aggregation at
        once, laid out as an ``(n, R, k)`` array. ``side="sources"``: row :math:`jR + r` is
        row ``j`` of :math:`A_r^\top`, the transposed products of the backward,
        :math:`(S G)_{jR + r} = \sum_{i:\, j \in N_r(i)} w_{ir} G_i`. The values
        :math:`w_{ir}` are 1, or with ``mean`` :math:`1 / |N_r(i)|` (the mean's row scaling
        moved onto the edges). With ``loops`` an identity is stacked after the relations as
        relation ``R`` (an :math:`n(R + 1) \times n` matrix, value 1): R-GCN's root term
        :math:`H W_{root}` as one more block of the same product."""
        key = (side, bool(mean), bool(loops))
        found = self._stacks.get(key)
        if found is not None:
            return found
        vertex, other, t, values = self._side(side, mean)
        R, n = self.num_relations, self.n
        stride = R + 1 if loops else R
        rows, cols = vertex * stride + t, other
        if loops:
            ids = np.arange(n, dtype=np.int64)
            rows = np.concatenate([rows, ids * stride + R])
            cols = np.concatenate([cols, ids])
            values = np.concatenate([values, np.ones(n, self.dtype)])
        found = self._stacks[key] = gb.Matrix.from_coo(rows, cols, values, nrows=n * stride,
                                                       ncols=n, dtype=self.dtype)
        return found

    def segmented(self, side: str, mean: bool = False, loops: bool = False) -> SegmentedStack:
        r"""The relations stacked group by group of vertices (:mod:`gblas_gnn.relation_segments`:
        each vertex with the blocks of the relations it has edges of on ``side``), the same
        entries and values as :meth:`stacked`. Where that grouping saves less than
        :data:`~gblas_gnn.relation_segments.SAVING` of the block rows it is :meth:`stacked`
        itself as one segment of every vertex and block. Built once per
        ``(side, mean, loops)``; the grouping depends on ``(side, loops)`` alone."""
        key = ("segmented", side, bool(mean), bool(loops))
        found = self._stacks.get(key)
        if found is not None:
            return found
        vertex, other, t, values = self._side(side, mean)
        if (side, bool(loops)) not in self._groupings:
            self._groupings[side, bool(loops)] = segment_vertices(vertex, t, self.n,
                                                                  self.num_relations, loops)
        grouping = self._groupings[side, bool(loops)]
        if grouping is None:
            whole = np.arange(self.num_relations + int(loops), dtype=np.int64)
            found = SegmentedStack(self.stacked(side, mean, loops),
                                   (Segment(slice(0, self.n), whole, 0, self.n),))
        else:
            found = segmented_stack(*grouping, vertex, other, t, values, self.n,
                                    self.num_relations, loops, self.dtype)
        self._stacks[key] = found
        return found

    def _side(self, side: str, mean: bool):
        """``(vertex, other, relation, value)`` of every edge, ``vertex`` on ``side`` (the
        target for ``"targets"``, the source for ``"sources"``); the value 1, or with ``mean``
        :math:`1/|N_r(i)|` for the edge ``j → i``."""
        if side not in ("targets", "sources"):
            raise ValueError(f"side must be 'targets' or 'sources', got {side!r}")
        R, n = self.num_relations, self.n
        t = np.repeat(np.arange(R, dtype=np.int64), np.diff(self.offsets))
        dst, src = self.dst.astype(np.int64), self.src.astype(np.int64)
        values = np.ones(t.size, self.dtype)
        if mean:
            counts = np.bincount(dst * R + t, minlength=n * R)
            values = (1.0 / counts[dst * R + t]).astype(self.dtype)
        return (dst, src, t, values) if side == "targets" else (src, dst, t, values)

    def astype(self, dtype) -> Relations:
        """The same relations whose graphs are ``dtype``."""
        out = Relations.__new__(Relations)
        out.src, out.dst, out.offsets, out._given = self.src, self.dst, self.offsets, self._given
        out.num_relations, out.n, out.dtype = self.num_relations, self.n, np.dtype(dtype)
        out._graphs, out._stacks, out._groupings = {}, {}, {}
        return out
