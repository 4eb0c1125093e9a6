r"""A typed graph's vertices grouped by the relations they take part in, and the relations
stacked group by group: R-GCN's products over the blocks a vertex has, not all ``R`` of them.

The stacked relations (:meth:`gblas_gnn.relations.Relations.stacked`) give every vertex ``R``
blocks (``R + 1`` with the identity), so one aggregation writes an ``(n, R·k)`` array ``Y``
and one product ``Y W`` reads all of it. On a graph with vertex types most of those blocks
are zero: a relation reaches the vertices of its destination type alone (its source type on
the ``"sources"`` side), so in a citation graph's homogeneous form a paper has its four
relations' blocks, an author and a field one each. Grouping the vertices by the set of
relations they have edges of on one side, the signature

.. math::
    \sigma(v) = \{\, r : v \text{ has an edge of relation } r \text{ on that side} \,\},

a group ``S`` with signature :math:`\sigma_S` needs :math:`|\sigma_S|` blocks (plus the
identity's), and the products shrink from :math:`n R` block rows to
:math:`\sum_S |S|\,|\sigma_S|`. A row of a block of a relation a vertex has no edge of
aggregates to 0, so a vertex may join a group whose signature contains its own:

* every signature held by at least :math:`n / 64` vertices is a group of its own;
* each rarer one joins the group with the fewest blocks among those whose signature
  contains it (the largest such group on a tie), or else one last group whose signature is
  the union of what joins it.

So there are at most 65 groups. The grouping is used only where it saves at least a quarter
of the block rows (:data:`SAVING`), on graphs of at most 64 relations (a signature is one
64-bit word); otherwise :func:`segment_vertices` gives None and the plain stacking serves.

The matrix of a side stacks, group after group, the group's vertices in ascending order, each
with its blocks in ascending relation order (the identity last): segment ``S`` occupies rows
``offset … offset + |S|·B_S`` (:class:`Segment`), its ``Y_S`` is a contiguous slice of the
aggregation reshaped to ``(|S|, B_S·k)``. Each segment starts on a multiple of 16 rows, so the
slices of any float array keep the aggregation's 64-byte alignment.
"""

from __future__ import annotations

from dataclasses import dataclass

import graphblas as gb
import numpy as np

__all__ = ["Segment", "SegmentedStack", "segment_vertices", "segmented_stack", "SAVING",
           "MAX_RELATIONS"]

#: the share of the plain stacking's block rows the grouping must save to be used
SAVING = 0.25
#: the most relations a grouping handles (a signature is one 64-bit word)
MAX_RELATIONS = 64
#: a signature held by at least n / GROUP_SHARE vertices is a group of its own
GROUP_SHARE = 64
#: a segment's first row is a multiple of this (alignment of its slice of the aggregation)
ROW_ALIGN = 16


@dataclass(frozen=True)
class Segment:
    """One group of vertices in a segmented stack.

    Attributes
    ----------
    rows : slice or numpy.ndarray
        The group's vertices, ascending: a slice when they are contiguous, else their ids.
    blocks : numpy.ndarray
        The relations stacked for each of them, ascending (int64); ``R`` (the identity) last
        when the stack has loops.
    offset : int
        The segment's first row in the stacked matrix.
    size : int
        Its number of vertices.
    """

    rows: slice | np.ndarray
    blocks: np.ndarray
    offset: int
    size: int

    @property
    def stop(self) -> int:
        """One past the segment's last row in the stacked matrix."""
        return self.offset + self.size * len(self.blocks)


@dataclass(frozen=True)
class SegmentedStack:
    """A side's relations stacked group by group (the module's layout)."""

    matrix: gb.Matrix
    segments: tuple[Segment, ...]


def _codes(vertex: np.ndarray, rel: np.ndarray, n: int, R: int) -> np.ndarray:
    """Every vertex's signature as a 64-bit word (bit ``r``: an edge of relation ``r``)."""
    pairs = np.unique(vertex.astype(np.int64) * R + rel.astype(np.int64))
    v, r = pairs // R, pairs % R
    codes = np.zeros(n, np.uint64)
    if pairs.size:
        starts = np.flatnonzero(np.r_[True, v[1:] != v[:-1]])
        codes[v[starts]] = np.bitwise_or.reduceat(np.left_shift(np.uint64(1),
                                                                r.astype(np.uint64)), starts)
    return codes


def _merged(sigs: np.ndarray, counts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(group of each signature, each group's signature)`` by the module's rule."""
    pop = np.array([int(s).bit_count() for s in sigs], np.int64)
    big = counts >= max(n // GROUP_SHARE, 1)
    big_ids = np.flatnonzero(big)
    group = np.full(sigs.size, -1, np.int64)
    group[big_ids] = np.arange(big_ids.size)
    small = np.flatnonzero(~big)
    if small.size:
        contains = (sigs[small, None] & sigs[None, big_ids]) == sigs[small, None]
        # fewest blocks first, then the largest group: one key, smallest wins
        key = np.where(contains, pop[big_ids] * (n + 1) - counts[big_ids], np.iinfo(np.int64).max)
        best = np.argmin(key, axis=1) if big_ids.size else np.zeros(small.size, np.int64)
        found = contains[np.arange(small.size), best] if big_ids.size else \
            np.zeros(small.size, bool)
        group[small[found]] = best[found]
        rest = small[~found]
        group[rest] = big_ids.size
    else:
        rest = small
    group_sigs = list(sigs[big_ids])
    if rest.size:
        group_sigs.append(np.bitwise_or.reduce(sigs[rest]))
    return group, np.array(group_sigs, np.uint64)


def segment_vertices(vertex: np.ndarray, rel: np.ndarray, n: int, R: int, loops: bool):
    """The grouping of one side (the module's rule): ``(group of each vertex, the groups'
    relation lists)``, or None where it would not save :data:`SAVING` of the block rows (or
    ``R`` exceeds :data:`MAX_RELATIONS`).

    Parameters
    ----------
    vertex : numpy.ndarray
        Each edge's vertex on this side (its target for ``"targets"``, its source for
        ``"sources"``).
    rel : numpy.ndarray
        Each edge's relation id in ``[0, R)``.
    n, R : int
        Vertices and relations.
    loops : bool
        Whether every vertex also has the identity's block.
    """
    if R > MAX_RELATIONS or n == 0:
        return None
    codes = _codes(vertex, rel, n, R)
    sigs, inverse, counts = np.unique(codes, return_inverse=True, return_counts=True)
    group_of_sig, group_sigs = _merged(sigs, counts, n)
    assign = group_of_sig[inverse.reshape(-1)]
    relations = [np.array([r for r in range(R) if int(s) >> r & 1], np.int64)
                 for s in group_sigs]
    sizes = np.bincount(assign, minlength=len(relations))
    extra = int(loops)
    if sum(int(c) * (len(rs) + extra) for c, rs in zip(sizes, relations, strict=True)) > \
            (1 - SAVING) * n * (R + extra):
        return None
    return assign, relations


def _rows(members: np.ndarray) -> slice | np.ndarray:
    if members.size and members[-1] - members[0] + 1 == members.size:
        return slice(int(members[0]), int(members[-1]) + 1)
    return members


def segmented_stack(assign: np.ndarray, relations: list[np.ndarray], vertex: np.ndarray,
                    other: np.ndarray, rel: np.ndarray, values: np.ndarray, n: int, R: int,
                    loops: bool, dtype) -> SegmentedStack:
    """The side's matrix in the module's layout and its segments.

    Parameters
    ----------
    assign, relations : numpy.ndarray, list
        :func:`segment_vertices`'s grouping of this side.
    vertex, other : numpy.ndarray
        Each edge's vertex on this side (a row block of the matrix) and on the other (the
        column).
    rel, values : numpy.ndarray
        Each edge's relation and stored value.
    n, R : int
        Vertices and relations.
    loops : bool
        Stack the identity (value 1) after every vertex's relations.
    dtype
        The matrix's dtype.
    """
    G = len(relations)
    order = np.argsort(assign, kind="stable")             # each group's vertices, ascending
    sizes = np.bincount(assign, minlength=G)
    first = np.r_[0, np.cumsum(sizes)]
    local = np.empty(n, np.int64)
    local[order] = np.arange(n) - np.repeat(first[:-1], sizes)
    width = np.array([len(rs) + int(loops) for rs in relations], np.int64)
    position = np.full((G, R + 1), -1, np.int64)            # a relation's block in a group
    segments, offset, offsets = [], 0, np.zeros(G, np.int64)
    for s in sorted(range(G), key=lambda s: order[first[s]] if sizes[s] else n):
        if sizes[s] == 0:
            continue
        blocks = np.r_[relations[s], [R] * int(loops)].astype(np.int64)
        position[s, blocks] = np.arange(blocks.size)
        offsets[s] = offset
        segments.append(Segment(_rows(order[first[s]:first[s + 1]]), blocks, offset,
                                int(sizes[s])))
        offset += -(-int(sizes[s]) * blocks.size // ROW_ALIGN) * ROW_ALIGN
    g = assign[vertex]
    rows = offsets[g] + local[vertex] * width[g] + position[g, rel]
    cols = other.astype(np.int64)
    if loops:
        ids = np.arange(n, dtype=np.int64)
        rows = np.concatenate([rows, offsets[assign] + local * width[assign]
                               + position[assign, R]])
        cols = np.concatenate([cols, ids])
        values = np.concatenate([values, np.ones(n, values.dtype)])
    matrix = gb.Matrix.from_coo(rows, cols, values, nrows=max(offset, 1), ncols=n, dtype=dtype)
    return SegmentedStack(matrix, tuple(segments))
