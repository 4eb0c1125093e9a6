r"""The graph Transformer convolution (Shi et al., 2021), composed: the backward derived."""

from __future__ import annotations

import numpy as np

from .. import ops
from .._validate import check_bools, finite_real, positive_ints
from ..executors._random import draw_key
from ..ops import factor, rep
from ._attention import affine, check_aggr, edge_dim_of, features_of
from ._interop import PyGInterop
from .init import glorot, zeros
from .module import Module

__all__ = ["TransformerConv"]


class TransformerConv(PyGInterop, Module):
    r"""Graph Transformer attention, exactly PyTorch Geometric's ``TransformerConv``
    (``beta=False``).

    With :math:`Q = H W_q + b_q`, :math:`K = H W_k + b_k`, :math:`V = H W_v + b_v` (columns
    of head :math:`h`):

    .. math::
        \alpha_h = \mathrm{sm}\Big(A \odot \frac{Q_h K_h^\top}{\sqrt{d}}\Big), \qquad
        Z_h = \alpha_h \oplus V_h, \qquad
        Z = \Vert_h Z_h \ (\text{or the mean}) + H W_{skip} + b_{skip} .

    The scores are one SDDMM per head on A's pattern (the edges as given: no self loops are
    added, as in PyG); the backward is derived (:mod:`gblas_gnn.compose`).

    With ``edge_dim`` the edges' features :math:`e'_{ji} = W_e e_{ji}` (per head) join the
    keys and the values, as PyG's:
    :math:`\alpha_h = \mathrm{sm}(Q_{i,h} \cdot (K_{j,h} + e'_{ji,h}) / \sqrt{d})` and
    :math:`Z_{i,h} = \bigoplus_j \alpha_{ij,h} (V_{j,h} + e'_{ji,h})`. With ``sum`` and
    ``mean`` the edge term moves out of the edges (:math:`(W_{e,h}^\top Q_{i,h}) \cdot
    e_{ji}` in the scores, :math:`W_{e,h} \bigoplus_j \alpha_{ij,h} e_{ji}` in the output), so
    the edges read their raw features; with ``max`` and ``min`` the messages
    :math:`V_j + e'_{ji}` are computed at the edges (:func:`gblas_gnn.ops.aggregate` of an
    expression). Neither form materialises an |E|×k array.

    Args:
        in_dim: input feature size.
        out_dim: size ``d`` of each head.
        heads: attention heads.
        concat: concatenate the heads (else average them).
        dropout: attention dropout in ``[0, 1)`` (training mode, counter-based masks).
        root_weight: add the skip projection :math:`H W_{skip} + b_{skip}`.
        bias: biases on the four projections.
        aggr: ``"sum"``, ``"mean"``, ``"max"``, ``"min"`` or a semiring (with
            ``edge_dim``: the first four).
        edge_dim: features per edge (None: none).
        seed, dtype, executor: as every layer.

    Shapes:
        - input: H (n, in_dim); output (n, heads·out_dim) or (n, out_dim)
        - params: ``W_q``, ``W_k``, ``W_v`` (in_dim, heads·out_dim) and ``b_q``, ``b_k``,
          ``b_v``; ``W_skip`` (in_dim, output width) and ``b_skip`` with ``root_weight``;
          ``W_e`` (edge_dim, heads·out_dim) with ``edge_dim``
    """

    def __init__(self, in_dim: int, out_dim: int, heads: int = 1, concat: bool = True,
                 dropout: float = 0.0, root_weight: bool = True, bias: bool = True,
                 aggr="sum", edge_dim: int | None = None, seed: int = 0, dtype=np.float32,
                 executor=None):
        super().__init__(dtype, executor)
        positive_ints(in_dim=in_dim, out_dim=out_dim, heads=heads)
        self.edge_dim = edge_dim_of(edge_dim)
        check_bools(concat=concat, root_weight=root_weight, bias=bias)
        self.in_dim, self.out_dim, self.heads = int(in_dim), int(out_dim), int(heads)
        self.concat, self.root_weight, self.bias = concat, root_weight, bias
        self.dropout = finite_real(dropout, "dropout", 0.0, 1.0, open_high=True)
        self.aggr = check_aggr(aggr)
        if self.edge_dim is not None and not (isinstance(aggr, str) and
                                              aggr in ("sum", "mean", "max", "min")):
            raise ValueError("TransformerConv with edge_dim aggregates messages computed at "
                             f"the edges: aggr 'sum', 'mean', 'max' or 'min', got {aggr!r}")
        rng = np.random.default_rng(seed)
        width = self.heads * self.out_dim
        out = width if concat else self.out_dim
        for name in ("q", "k", "v"):
            self.add_param(f"W_{name}", glorot((self.in_dim, width), rng, self.dtype))
            if bias:
                self.add_param(f"b_{name}", zeros((width,), self.dtype))
        if root_weight:
            self.add_param("W_skip", glorot((self.in_dim, out), rng, self.dtype))
            if bias:
                self.add_param("b_skip", zeros((out,), self.dtype))
        if self.edge_dim is not None:
            self.add_param("W_e", glorot((self.edge_dim, width), rng, self.dtype))
        self.dropout_rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])

    def forward(self, g, H):
        n, h, d = H.shape[0], self.heads, self.out_dim
        Q, K, V = (affine(self.params, H, name).reshape(n, h, d) for name in ("q", "k", "v"))
        QK = factor(Q) @ factor(K).T
        if self.edge_dim is None:
            Z = ops.aggregate(self._attention(g, QK, d), V, self.aggr)
        elif self.aggr in ("sum", "mean"):
            Z = self._edges_moved(g, Q, V, QK)
        else:                               # e' = W_e e_ji per head, at the edge
            E = features_of("TransformerConv", g, self.edge_dim) @ \
                self.params["W_e"].reshape(self.edge_dim, h, d)
            alpha = self._attention(g, QK + (rep(Q) * E).sum(-1), d)
            # the messages V_j + e'_ji, computed at the edge (one pass)
            Z = ops.aggregate(alpha, rep(V).T + E, self.aggr)
        Z = Z.reshape(n, h * d) if self.concat else Z.mean(axis=1)
        return Z + affine(self.params, H, "skip") if self.root_weight else Z

    def _attention(self, g, scores, d: int):
        """The softmax of the scaled scores on A's pattern, with the attention dropout."""
        alpha = ops.softmax(ops.structure(g) * (scores * (1.0 / np.sqrt(d))))
        if self.training and self.dropout > 0:
            alpha = ops.edge_dropout(alpha, self.dropout, draw_key(self.dropout_rng))
        return alpha

    def _edges_moved(self, g, Q, V, QK):
        r"""A linear aggregation with edge features, the edge term moved out of the edges:

        .. math::
            Q_{i,h} \cdot W_{e,h} e_{ji} = (W_{e,h}^\top Q_{i,h}) \cdot e_{ji}, \qquad
            \textstyle\sum_j \alpha_{ij,h} W_{e,h} e_{ji} = W_{e,h} \sum_j \alpha_{ij,h} e_{ji}

        (the mean likewise), so the edges read their ``f_e`` features as they are, and no
        pass computes or differentiates ``W_e e_ji`` (``h·d·f_e`` products an edge, and its
        weight gradient edge by edge). With ``sum`` the two aggregations are one pass that
        computes the attention once (:func:`gblas_gnn.ops.aggregate_with_edges`); with
        ``mean`` each is a pass of its own (``docs/performance.md``, edge features)."""
        n, h, d = V.shape
        f = self.edge_dim
        E = features_of("TransformerConv", g, f)
        # every head's W_e,hᵀ (d × f_e) on one block diagonal (h·d × h·f_e): one product
        # each way for all heads
        # (the mask made where the executor keeps its arrays: no host copy per call)
        xp = self.xp
        heads = (xp.arange(h * d)[:, None] // d == xp.arange(h * f)[None, :] // f)
        B = ops.concat([self.params["W_e"].T] * h, axis=-1) * heads.astype(self.dtype)
        Qe = (Q.reshape(n, h * d) @ B).reshape(n, h, f)
        alpha = self._attention(g, QK + (rep(Qe) * E).sum(-1), d)
        if self.aggr == "sum":
            # [Σ_j α_ij,h V_j | Σ_j α_ij,h e_ji] in one pass, each head's mapped by [I; W_e,h]
            Zc = ops.aggregate_with_edges(alpha, V, E).reshape(n, h * (d + f))
            return (Zc @ self._appended_map(B.T, h, d, f)).reshape(n, h, d)
        Ze = ops.aggregate(alpha, E, self.aggr).reshape(n, h * f)     # Σ_j α_ij,h e_ji
        return ops.aggregate(alpha, V, self.aggr) + (Ze @ B.T).reshape(n, h, d)

    def _appended_map(self, BT, h: int, d: int, f: int):
        r"""The ``(h (d + f)) × (h d)`` block diagonal of the heads'
        :math:`\begin{bmatrix} I_d \\ W_{e,h} \end{bmatrix}` (``BT``: the heads' ``W_{e,h}``
        on a block diagonal, ``(h f) × (h d)``), taking each head's ``[z_h | z^e_h]`` to
        :math:`z_h + W_{e,h}^\top z^e_h`."""
        xp = self.xp
        eye = xp.eye(d, dtype=self.dtype)
        rows = []
        for k in range(h):
            rows.append(xp.concatenate([xp.zeros((d, k * d), self.dtype), eye,
                                        xp.zeros((d, (h - 1 - k) * d), self.dtype)], axis=1))
            rows.append(BT[k * f:(k + 1) * f])
        return ops.concat(rows, axis=0)

    def __repr__(self) -> str:
        edges = "" if self.edge_dim is None else f", edge_dim={self.edge_dim}"
        return (f"TransformerConv({self.in_dim}, {self.out_dim}, heads={self.heads}, "
                f"concat={self.concat}, aggr={self.aggr!r}{edges})")
