r"""Every relation's aggregation through its own linear map, as two products over the stacked
relations: R-GCN's sum on one process.

.. math::
    Z = \sum_{r < R} \Big(\textstyle\bigoplus_{j \in N_r(i)} H_j\Big) W_r
      = Y W, \qquad Y_{i,\,(r, c)} = \textstyle\bigoplus_{j \in N_r(i)} H_{jc},
      \quad W = [W_0; \dots; W_{R-1}]

with :math:`\bigoplus` the sum or the mean over a relation's in-edges. ``Y`` is one
aggregation over the stacked relations (:meth:`gblas_gnn.Graph.stacked_relations`, the
``"targets"`` side: row :math:`iR + r` is row ``i`` of :math:`A_r`), written as an
``(n, R·k)`` array, and ``Y W`` one product with an ``R·k``-wide inner dimension, in place of
R aggregations, R products and R − 1 sums of ``(n, o)`` arrays. The backward, for the
cotangent :math:`\bar Z` and :math:`w_{ir} = 1/|N_r(i)|` for the mean, else 1:

.. math::
    \bar W = Y^\top \bar Z, \qquad
    \bar H = \sum_r A_r^\top D_r \bar Z W_r^\top
      = U\, [W_0^\top; \dots; W_{R-1}^\top], \quad
      U_{j,\,(r, c)} = \sum_{i:\, j \in N_r(i)} w_{ir} \bar Z_{ic}

``U`` is one product of the ``"sources"`` side with :math:`\bar Z` itself, gathering rows of
width ``o``. When ``o > k`` the narrower way round is taken instead: :math:`\bar Y = \bar Z
W^\top` (n, R·k), then :math:`\bar H = S_w^\top \bar Y` with :math:`S_w` the weighted
``"targets"`` side. When ``k > o`` the projections come first, :math:`P_{(j, r)} = H_j W_r`
on the ``"sources"`` side (one product per group of vertices, below), and
:math:`Z = S_w^\top P` is one aggregation at width ``o``; its backward is the same ``U``,
with :math:`\bar W_r = \sum_j H_j^\top U_{(j, r)}`.

Both sides' stacks are :meth:`gblas_gnn.Graph.segmented_relations`: on a typed graph each
group ``S`` of vertices with the same relations gets its own blocks, so ``Y`` is the groups'
``Y_S`` (``(|S|, B_S·k)`` each) one after the other, ``Z_S = Y_S W_S`` with ``W_S`` the
group's blocks of ``W``, :math:`\bar W_S = Y_S^\top \bar Z_S` summed into each block, and
the backward's products likewise group by group.

This runs where the stacked matrices are the executor's operands: one process whose edge
tensors are ``graphblas`` matrices (:func:`stacked_runs`). Elsewhere (a grid, a GPU)
:func:`gblas_gnn.ops.relational_linear` composes the same sum relation by relation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..executors.alignment import aligned_empty
from .tape import in_scope, vertex_sum
from .traced import Traced, lift, record, value_of

__all__ = ["STACKED_AGGREGATIONS", "stacked_runs", "stacked_relational_linear"]

#: the aggregations of the stacked form (a maximum does not commute with the stacking's
#: backward: its cotangent goes to one winner per relation and channel)
STACKED_AGGREGATIONS = ("sum", "mean")


#: the most block rows the stacked form may hold per vertex: an array of that many rows per
#: vertex, ``k`` or ``o`` wide, lives while it runs (R-GCN on a knowledge graph of hundreds of
#: relations, no vertex types to group by, takes the loop over relations instead)
MAX_BLOCKS_PER_VERTEX = 16


def stacked_runs(ex: Any, g: Any, aggr: str, k: int, o: int, loops: bool) -> bool:
    """Whether :func:`stacked_relational_linear` runs for graph ``g`` on executor ``ex``:
    one process, host arrays, a :class:`~gblas_gnn.Graph` with relations, a sum or mean, and
    a stack of at most :data:`MAX_BLOCKS_PER_VERTEX` block rows per vertex (the
    ``"targets"`` one for ``k ≤ o``, else the ``"sources"`` one)."""
    if not (getattr(ex, "processes", 1) == 1 and ex.xp is np
            and getattr(g, "num_relations", None) is not None
            and callable(getattr(g, "segmented_relations", None))
            and aggr in STACKED_AGGREGATIONS):
        return False
    stack = (g.segmented_relations("targets", loops=loops) if k <= o
             else g.segmented_relations("sources", aggr == "mean", loops))
    return stack.matrix.nrows <= MAX_BLOCKS_PER_VERTEX * max(g.n, 1)


def _slice(S, s, width: int):
    """Segment ``s``'s rows of the aggregation ``S`` over its stack, ``(|S|, B_S·width)``."""
    return S[s.offset:s.stop].reshape(s.size, len(s.blocks) * width)


def _whole(stack, n: int) -> bool:
    """Whether ``stack`` is one segment of every vertex (the plain stacking)."""
    return len(stack.segments) == 1 and stack.segments[0].rows == slice(0, n)


def _by_vertex(ex: Any, stack, n: int, width: int, dtype, X_of, W_of, fill=0):
    """The ``(n, width)`` array whose rows of each segment ``s`` are
    ``fill + X_of(s) @ W_of(s)`` (``fill`` alone for a segment without blocks); a plain
    stack's one product. (Summing each product into its rows instead, BLAS's ``beta = 1``
    over rows first set to ``fill``, was not faster: 1.08–1.10 of this for R-GCN on the
    typed graph in one interleaved run.)"""
    bias = None if np.isscalar(fill) else fill
    if _whole(stack, n):
        s = stack.segments[0]
        return ex.linear(X_of(s), W_of(s), bias)
    out = np.empty((n, width), dtype)
    for s in stack.segments:
        if not len(s.blocks):
            out[s.rows] = fill
            continue
        if isinstance(s.rows, slice):               # a block of rows: the product writes it
            _product_into(ex, X_of(s), W_of(s), out[s.rows], bias)
        else:
            out[s.rows] = ex.linear(X_of(s), W_of(s), bias)
    return out


def _product_into(ex: Any, X, W, out, bias=None):
    """``out[...] = X W (+ b)`` for a C-contiguous block ``out`` of a larger array: written
    by the product itself where ``out`` has the product's dtype, else copied in."""
    if np.result_type(X, W) == out.dtype:
        return ex.linear(X, W, bias, out=out)
    out[...] = ex.linear(X, W, bias)
    return out


def _side_by_side(Wb, blocks, k: int) -> np.ndarray:
    """The blocks' ``W_r`` side by side, ``[W_r]_{r ∈ blocks}`` (k, B·o)."""
    return np.ascontiguousarray(Wb[blocks].transpose(1, 0, 2).reshape(k, -1))


def stacked_relational_linear(ex: Any, g: Any, H, W, aggr: str, root=None, bias=None):
    r""":math:`Z = \sum_r (\bigoplus_{N_r} H) W_r\, [+ H W_{root}] [+ b]` by the stacked
    relations (the module's formulas); ``H`` (n, k), ``W`` (R, k, o), ``root`` (k, o) and
    ``bias`` (o,) traced or arrays. The root term is one more block of the same products:
    the identity stacked after the relations (:meth:`gblas_gnn.Graph.stacked_relations` with
    ``loops``) puts ``H`` itself beside the aggregations in ``Y`` and ``W_root`` under the
    ``W_r``, so no ``(n, o)`` term, sum or cotangent of its own exists; the bias is added as
    each block of rows of the product is written.

    With ``k ≤ o`` it aggregates first (``Y`` at width ``k``); with ``k > o`` it projects
    first, :math:`P_{(j, r)} = H_j W_r` for the blocks of the ``"sources"`` stack, and
    :math:`Z = S_w^\top P` (the stack's transpose, weighted for the mean), so the one
    aggregation runs at width ``o``; its backward is the same ``U`` as the other's.

    The stacks are :meth:`gblas_gnn.Graph.segmented_relations`: on a graph whose vertices
    have a few of the relations each (vertex types), each group of vertices is its own
    product over the blocks it has, :math:`Z_S = Y_S\, [W_r]_{r \in \sigma_S}`, and likewise
    each product of the backward; otherwise one group of all. In a composed forward the result
    is recorded with its backward; outside one it is the array."""
    Hv, Wv = value_of(H), value_of(W)
    n, k = Hv.shape
    R, o = g.num_relations, Wv.shape[2]
    loops = root is not None
    mean = aggr == "mean"
    Wb = Wv if not loops else np.concatenate([Wv, value_of(root)[None]])   # (blocks, k, o)
    b = None if bias is None else value_of(bias)
    dtype = np.result_type(Hv, Wb)
    aggregated = k <= o
    if aggregated:                                   # aggregate at width k, then one product
        stack = g.segmented_relations("targets", loops=loops)
        Y = ex.aggregate(stack.matrix, Hv, aggr)
        Z = _by_vertex(ex, stack, n, o, dtype, lambda s: _slice(Y, s, k),
                       lambda s: Wb[s.blocks].reshape(-1, o), 0 if b is None else b)
    else:                                            # project, then aggregate at width o
        stack = g.segmented_relations("sources", mean, loops)
        # aligned: the aggregation gathers its rows (a copy otherwise); each segment's
        # product writes its rows, and the rows that align the segments are zero
        P = aligned_empty((stack.matrix.nrows, o), dtype)
        done = 0
        for s in stack.segments:
            P[done:s.offset] = 0
            if len(s.blocks):
                _product_into(ex, Hv[s.rows], _side_by_side(Wb, s.blocks, k),
                              P[s.offset:s.stop].reshape(s.size, -1))
            done = s.stop
        P[done:] = 0
        Z = ex.spmm_t(stack.matrix, P)
        if b is not None:
            Z += b
        del P
    if not in_scope():
        return Z

    def vjp(G):
        dWb = np.zeros_like(Wb)
        if aggregated:                               # Yᵀ G, group by group
            for s in stack.segments:
                if len(s.blocks):
                    dWb[s.blocks] += ex.inner(_slice(Y, s, k), G[s.rows]).reshape(-1, k, o)
        grads = [_input_cotangent(ex, g, G, Hv, Wb, dWb, mean, loops, aggregated), dWb[:R]]
        if loops:
            grads.append(dWb[R])
        if bias is not None:
            grads.append(vertex_sum(ex, G))
        return tuple(grads)

    parents = [H, W] + ([] if root is None else [root]) + ([] if bias is None else [bias])
    parents = [x if isinstance(x, Traced) else lift(x, vertex=i == 0)
               for i, x in enumerate(parents)]
    return record(Z, parents, vjp, True)


def _input_cotangent(ex: Any, g: Any, G, Hv, Wb, dWb, mean: bool, loops: bool,
                     aggregated: bool):
    r""":math:`\bar H` for the cotangent ``G`` (the module's formulas), the narrower way
    round: gathering ``G`` (width ``o``) over the ``"sources"`` stack when ``o ≤ k`` or the
    forward projected first (then also :math:`\bar W_S = H_S^\top U_S` into ``dWb``), else
    the products :math:`\bar Y_S = G_S W_S^\top` spread back over the ``"targets"`` one."""
    n, k = Hv.shape
    o = G.shape[1]
    dtype = np.result_type(G, Wb)
    if o <= k:
        sources = g.segmented_relations("sources", mean, loops)
        U = ex.spmm(sources.matrix, G)
        if not aggregated:                            # the projection's weights: Hᵀ U
            for s in sources.segments:
                if len(s.blocks):
                    dWb[s.blocks] += ex.inner(Hv[s.rows], _slice(U, s, o)).reshape(
                        k, -1, o).transpose(1, 0, 2)
        WT = Wb.transpose(0, 2, 1)                                       # (blocks, o, k)
        return _by_vertex(ex, sources, n, k, dtype, lambda s: _slice(U, s, o),
                          lambda s: np.ascontiguousarray(WT[s.blocks].reshape(-1, k)))
    targets = g.segmented_relations("targets", mean, loops)
    if _whole(targets, n):
        dY = ex.gemm(G, np.ascontiguousarray(Wb.reshape(-1, o).T))
    else:
        dY = np.zeros((targets.matrix.nrows, k), dtype)
        for s in targets.segments:
            if len(s.blocks):
                _product_into(ex, G[s.rows], np.ascontiguousarray(Wb[s.blocks].reshape(-1, o).T),
                              dY[s.offset:s.stop].reshape(s.size, -1))
    return ex.spmm_t(targets.matrix, dY.reshape(-1, k))
