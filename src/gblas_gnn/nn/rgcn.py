r"""Relational graph convolution (Schlichtkrull et al., 2018), composed: the forward only, the
backward derived."""

from __future__ import annotations

import numpy as np

from .. import ops
from .._validate import check_bools, positive_ints
from ._interop import PyGInterop
from .init import glorot, zeros
from .module import Module

__all__ = ["RGCNConv", "RGCN_AGGREGATIONS"]

#: the per-relation aggregations of :class:`RGCNConv` (PyG's names: ``"add"`` is ``"sum"``)
RGCN_AGGREGATIONS = ("mean", "sum", "max")


class RGCNConv(PyGInterop, Module):
    r"""Relational graph convolution, exactly PyTorch Geometric's ``RGCNConv`` (its loop
    path: the mean is over each relation's in-edges).

    .. math::
        Z = \sum_{r < R} \Big(\textstyle\bigoplus_{j \in N_r(i)} H_j\Big) W_r
            \;+\; H W_{root} + b

    :math:`N_r(i)` are the in-neighbours of ``i`` along relation ``r``: the pattern of the
    relation's adjacency :math:`A_r` (:meth:`gblas_gnn.Graph.relation`), so each term is one
    aggregation over one block of the typed graph, ``ops.aggregate(ops.structure(g.relation(r)),
    H, aggr)``. :math:`\bigoplus` is the mean (PyG's default: over the relation's in-edges
    only; a vertex without any aggregates to 0), the sum or the feature-wise maximum. With
    input features and without blocks the whole of it, root term and bias included, is
    :func:`gblas_gnn.ops.relational_linear`: on one process two products over the stacked
    relations (every relation aggregated into an (n, R·in) array with ``H`` itself beside
    them, then one product with the stacked :math:`W_r` and :math:`W_{root}`; on a graph with
    vertex types, one such pair per group of vertices with the blocks of the relations that
    reach them: :meth:`gblas_gnn.Graph.segmented_relations`), elsewhere these terms relation
    by relation. The aggregation comes first, as in PyG; for mean and sum, which
    commute with the projection, the terms aggregate at the smaller of ``in_dim`` and
    ``out_dim``.

    The relation weights :math:`W_r` (``in_dim × out_dim``) are free, or

    * ``num_bases = B``: :math:`W_r = \sum_b C_{rb} V_b` (``comp`` (R, B), ``weight``
      (B, in, out));
    * ``num_blocks = B``: block-diagonal, :math:`W_r = \mathrm{diag}(W_{r,0}, \dots,
      W_{r,B-1})` (``weight`` (R, B, in/B, out/B)): each block of ``in_dim / B`` input
      channels maps to its own ``out_dim / B`` output channels.

    **Featureless vertices** (PyG's ``x=None``): call the layer with ``H=None`` and
    ``in_dim`` = the number of vertices. Vertex ``j``'s message along ``r`` is then the row
    :math:`W_r[j]` and its root term :math:`W_{root}[i]` (a one-hot input, without the
    n × n matrix); the backward returns None.

    Args:
        in_dim: input feature size (the number of vertices for featureless input).
        out_dim: output feature size.
        num_relations: ``R``; a graph's relation ids must lie in ``[0, R)``.
        num_bases: basis decomposition (exclusive with ``num_blocks``).
        num_blocks: block-diagonal decomposition; ``in_dim`` and ``out_dim`` divisible by it.
        aggr: ``"mean"`` (default), ``"sum"`` or ``"max"``.
        root_weight: add the root term :math:`H W_{root}`.
        bias: add :math:`b`.
        seed, dtype, executor: as every layer.

    Shapes:
        - input: a graph with relations (``Graph.from_edge_index(..., edge_type=t)``), H
          (n, in_dim) or None; output (n, out_dim)
        - params (PyG's names): ``weight``, ``comp`` with ``num_bases``, ``root`` (in_dim,
          out_dim) with ``root_weight``, ``bias`` (out_dim,) with ``bias``
    """

    featureless = True

    def __init__(self, in_dim: int, out_dim: int, num_relations: int,
                 num_bases: int | None = None, num_blocks: int | None = None,
                 aggr: str = "mean", root_weight: bool = True, bias: bool = True,
                 seed: int = 0, dtype=np.float32, executor=None):
        super().__init__(dtype, executor)
        positive_ints(in_dim=in_dim, out_dim=out_dim, num_relations=num_relations)
        check_bools(root_weight=root_weight, bias=bias)
        if not isinstance(aggr, str) or aggr not in RGCN_AGGREGATIONS:
            raise ValueError(f"RGCNConv aggr must be one of {RGCN_AGGREGATIONS}, got {aggr!r}")
        if num_bases is not None and num_blocks is not None:
            raise ValueError("RGCNConv takes num_bases or num_blocks, not both")
        if num_bases is not None:
            positive_ints(num_bases=num_bases)
        if num_blocks is not None:
            positive_ints(num_blocks=num_blocks)
            if in_dim % num_blocks or out_dim % num_blocks:
                raise ValueError(f"num_blocks={num_blocks} must divide in_dim={in_dim} and "
                                 f"out_dim={out_dim}")
        self.in_dim, self.out_dim, self.aggr = int(in_dim), int(out_dim), aggr
        self.num_relations = int(num_relations)
        self.num_bases = None if num_bases is None else int(num_bases)
        self.num_blocks = None if num_blocks is None else int(num_blocks)
        self.root_weight = root_weight
        rng = np.random.default_rng(seed)
        R, i, o = self.num_relations, self.in_dim, self.out_dim
        if self.num_blocks is not None:
            B = self.num_blocks
            self.add_param("weight", glorot((R, B, i // B, o // B), rng, self.dtype))
        elif self.num_bases is not None:
            self.add_param("weight", glorot((self.num_bases, i, o), rng, self.dtype))
            self.add_param("comp", glorot((R, self.num_bases), rng, self.dtype))
        else:
            self.add_param("weight", glorot((R, i, o), rng, self.dtype))
        if root_weight:
            self.add_param("root", glorot((i, o), rng, self.dtype))
        if bias:
            self.add_param("bias", zeros((o,), self.dtype))

    # ------------------------------------------------------------------ forward
    def _relation_weights(self):
        """``W`` (R, in, out) of the basis decomposition, or the parameter itself."""
        p = self.params
        if self.num_bases is None:
            return p["weight"]
        B, i, o = self.num_bases, self.in_dim, self.out_dim
        return (p["comp"] @ p["weight"].reshape(B, i * o)).reshape(self.num_relations, i, o)

    def _message(self, g, r: int, H, W):
        r"""Relation ``r``'s term :math:`(\bigoplus_{N_r} H) W_r`."""
        S = ops.structure(g.relation(r))
        if H is None:                          # featureless: the messages are W_r's rows
            return ops.aggregate(S, ops.vertex_rows(g, W[r]), self.aggr)
        B = self.num_blocks
        Y = ops.aggregate(S, H, self.aggr)
        Y = Y.reshape(Y.shape[0], B, self.in_dim // B)
        return ops.concat([Y[:, b, :] @ W[r, b] for b in range(B)], axis=1)

    def forward(self, g, H):
        R = getattr(g, "num_relations", None)
        if R is None:
            raise ValueError("RGCNConv needs a graph with relations: build it with edge_type "
                             "(Graph.from_edge_index(edge_index, n, edge_type=t))")
        if R > self.num_relations:
            raise ValueError(f"the graph has {R} relations but the layer num_relations="
                             f"{self.num_relations}")
        if H is None and self.num_blocks is not None:
            raise ValueError("RGCNConv with num_blocks needs input features (as PyG: the "
                             "block-diagonal decomposition has no featureless form)")
        p = self.params
        W = self._relation_weights()
        if H is not None and self.num_blocks is None:
            # the root term and the bias inside the relations' products
            return ops.relational_linear(g, H, W[:R], self.aggr, root=p.get("root"),
                                         bias=p.get("bias"))
        # a relation without edges adds 0 (nnz is the whole graph's: every rank skips alike)
        terms = [self._message(g, r, H, W) for r in range(R) if g.relation(r).nnz > 0]
        if self.root_weight:
            terms.append(ops.vertex_rows(g, p["root"]) if H is None else H @ p["root"])
        if not terms:                          # no edges and no root: 0, computed
            terms.append(self._message(g, 0, H, W))
        Z = terms[0]
        for term in terms[1:]:
            Z = Z + term
        if "bias" in p:
            Z = Z + p["bias"]
        return Z

    def __repr__(self) -> str:
        extra = (f", num_bases={self.num_bases}" if self.num_bases else "") + \
            (f", num_blocks={self.num_blocks}" if self.num_blocks else "")
        return (f"RGCNConv({self.in_dim}, {self.out_dim}, num_relations={self.num_relations}"
                f"{extra}, aggr={self.aggr!r})")
