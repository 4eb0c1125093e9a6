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
``"targets"`` side.

This runs where the stacked matrices are the executor's operands: one process whose edge
tensors are ``graphblas`` matrices (:func:`stacked_runs`). Elsewhere (a grid, a GPU)
:func:`gblas_gnn.ops.relational_linear` composes the same sum relation by relation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .tape import in_scope, vertex_sum
from .traced import Traced, lift, record, value_of

__all__ = ["STACKED_AGGREGATIONS", "stacked_runs", "stacked_relational_linear"]

#: the aggregations of the stacked form (a maximum does not commute with the stacking's
#: backward: its cotangent goes to one winner per relation and channel)
STACKED_AGGREGATIONS = ("sum", "mean")


def stacked_runs(ex: Any, g: Any, aggr: str) -> bool:
    """Whether :func:`stacked_relational_linear` runs for graph ``g`` on executor ``ex``:
    one process, host arrays, a :class:`~gblas_gnn.Graph` with relations, a sum or mean."""
    return (getattr(ex, "processes", 1) == 1 and ex.xp is np
            and getattr(g, "num_relations", None) is not None
            and callable(getattr(g, "stacked_relations", None))
            and aggr in STACKED_AGGREGATIONS)


def stacked_relational_linear(ex: Any, g: Any, H, W, aggr: str, root=None, bias=None):
    r""":math:`Z = \sum_r (\bigoplus_{N_r} H) W_r\, [+ H W_{root}] [+ b]` by the stacked
    relations (the module's formulas); ``H`` (n, k), ``W`` (R, k, o), ``root`` (k, o) and
    ``bias`` (o,) traced or arrays. The root term is one more block of the same two products:
    the identity stacked after the relations (:meth:`gblas_gnn.Graph.stacked_relations` with
    ``loops``) puts ``H`` itself beside the aggregations in ``Y`` and ``W_root`` under the
    ``W_r``, so no ``(n, o)`` term, sum or cotangent of its own exists; the bias is added as
    each block of rows of the product is written. In a composed forward the result is recorded
    with its backward; outside one it is the array."""
    Hv, Wv = value_of(H), value_of(W)
    n, k = Hv.shape
    R, o = g.num_relations, Wv.shape[2]
    blocks = R if root is None else R + 1
    loops = root is not None
    mean = aggr == "mean"
    Y = ex.aggregate(g.stacked_relations("targets", loops=loops), Hv, aggr).reshape(
        n, blocks * k)
    Wcat = Wv.reshape(R * k, o)
    if loops:
        Wcat = np.concatenate([Wcat, value_of(root)])
    Z = ex.linear(Y, Wcat, None if bias is None else value_of(bias))
    if not in_scope():
        return Z

    def vjp(G):
        dWcat = ex.inner(Y, G)
        if o <= k:
            U = ex.spmm(g.stacked_relations("sources", mean, loops), G).reshape(n, blocks * o)
            WT = Wcat.reshape(blocks, k, o).transpose(0, 2, 1).reshape(blocks * o, k)
            dH = ex.gemm(U, np.ascontiguousarray(WT))
        else:
            dY = ex.gemm(G, np.ascontiguousarray(Wcat.T)).reshape(n * blocks, k)
            dH = ex.spmm_t(g.stacked_relations("targets", mean, loops), dY)
        grads = [dH, dWcat[:R * k].reshape(R, k, o)]
        if loops:
            grads.append(dWcat[R * k:])
        if bias is not None:
            grads.append(vertex_sum(ex, G))
        return tuple(grads)

    parents = [H, W] + ([] if root is None else [root]) + ([] if bias is None else [bias])
    parents = [x if isinstance(x, Traced) else lift(x, vertex=i == 0)
               for i, x in enumerate(parents)]
    return record(Z, parents, vjp, True)
