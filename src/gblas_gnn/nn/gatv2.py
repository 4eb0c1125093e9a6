r"""GATv2 (Brody et al., 2022), composed: the forward only, the backward derived."""

from __future__ import annotations

import numpy as np

from .. import ops
from .._validate import check_bools, finite_real, positive_ints
from ..executors._random import draw_key
from ..ops import leaky_relu, rep
from ._attention import affine, check_aggr, check_edge_options, features_of
from ._interop import PyGInterop
from .init import glorot, zeros
from .module import Module

__all__ = ["GATv2Conv"]


class GATv2Conv(PyGInterop, Module):
    r"""GATv2 attention, exactly PyTorch Geometric's ``GATv2Conv``.

    For every head :math:`h` with source and target projections
    :math:`X^l = H W_l + b_l`, :math:`X^r = H W_r + b_r` (columns of head :math:`h`):

    .. math::
        e_{ij} &= a_h^\top \,\mathrm{LeakyReLU}(X^r_{i,h} + X^l_{j,h})
        \quad\text{on the stored edges } j \to i \\
        Z_{i,h} &= \textstyle\bigoplus_{j} \mathrm{sm}(e)_{ij}\, X^l_{j,h}, \qquad
        Z = \Vert_h Z_h + b \ (\text{concat}) \text{ or } \tfrac{1}{\text{heads}}
        \textstyle\sum_h Z_h + b .

    The scores read the rank-4 virtual tensor ``rep(X^r) + rep(X^l)ᵀ`` on A's pattern only
    (never |E|×f); its backward is derived (:mod:`gblas_gnn.compose`). Only A's pattern is
    used (as PyG without ``edge_attr``); the softmax runs over each target's in-edges.

    With ``edge_dim`` the edges' features join inside the LeakyReLU, as PyG's:
    :math:`e_{ij} = a_h^\top \mathrm{LeakyReLU}(X^r_{i,h} + X^l_{j,h} + (W_e e_{ji})_h)`,
    :math:`W_e e_{ji}` computed per edge in the scores' own passes, forward and backward
    (its gradient reduced over the edges there: no |E|×k array); the self loops' features
    follow ``fill_value``.

    Args:
        in_dim: input feature size.
        out_dim: output size of each head.
        heads: attention heads.
        concat: concatenate the heads (else average them).
        negative_slope: LeakyReLU slope (≥ 0).
        dropout: attention dropout in ``[0, 1)`` (training mode; counter-based masks, the
            same on every executor; keys from :attr:`dropout_rng`).
        add_self_loops: add the missing self loops.
        bias: biases on the two projections and the output (as PyG's ``bias``).
        share_weights: ``W_r = W_l`` (one projection).
        aggr: ``"sum"``, ``"mean"``, ``"max"``, ``"min"`` or a semiring.
        edge_dim: features per edge (None: none).
        fill_value: the self loops' edge features (with ``edge_dim``; see
            :meth:`gblas_gnn.Graph.with_self_loops`).
        seed, dtype, executor: as every layer.

    Shapes:
        - input: H (n, in_dim); output (n, heads·out_dim) or (n, out_dim)
        - params: ``W_l`` (in_dim, heads·out_dim), ``b_l`` (heads·out_dim,), ``W_r``,
          ``b_r`` likewise (not with ``share_weights``), ``att`` (heads, out_dim), ``bias``
          (heads·out_dim,) or (out_dim,); no biases without ``bias``; ``W_e`` (edge_dim,
          heads·out_dim) with ``edge_dim``
    """

    def __init__(self, in_dim: int, out_dim: int, heads: int = 1, concat: bool = True,
                 negative_slope: float = 0.2, dropout: float = 0.0,
                 add_self_loops: bool = True, bias: bool = True, share_weights: bool = False,
                 aggr="sum", edge_dim: int | None = None, fill_value="mean", seed: int = 0,
                 dtype=np.float32, executor=None):
        super().__init__(dtype, executor)
        positive_ints(in_dim=in_dim, out_dim=out_dim, heads=heads)
        self.edge_dim, self.fill_value = check_edge_options("GATv2Conv", edge_dim,
                                                            fill_value)
        check_bools(concat=concat, add_self_loops=add_self_loops, bias=bias,
                    share_weights=share_weights)
        self.in_dim, self.out_dim, self.heads = int(in_dim), int(out_dim), int(heads)
        self.concat, self.add_self_loops = concat, add_self_loops
        self.share_weights = share_weights
        self.negative_slope = finite_real(negative_slope, "negative_slope", low=0.0)
        self.dropout = finite_real(dropout, "dropout", 0.0, 1.0, open_high=True)
        self.aggr = check_aggr(aggr)
        rng = np.random.default_rng(seed)
        width = self.heads * self.out_dim
        for side in ("l",) if share_weights else ("l", "r"):
            self.add_param(f"W_{side}", glorot((self.in_dim, width), rng, self.dtype))
            if bias:
                self.add_param(f"b_{side}", zeros((width,), self.dtype))
        self.add_param("att", glorot((self.heads, self.out_dim), rng, self.dtype))
        if self.edge_dim is not None:
            self.add_param("W_e", glorot((self.edge_dim, width), rng, self.dtype))
        if bias:
            self.add_param("bias", zeros((width if concat else self.out_dim,), self.dtype))
        self.dropout_rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])

    def forward(self, g, H):
        p, n, h, f = self.params, H.shape[0], self.heads, self.out_dim
        # the graph, not its matrix: structure() reads the executors' pattern of A + I,
        # and no graphblas.Matrix of it is built (issue 21)
        A = g.with_self_loops(self.fill_value) if self.add_self_loops else g
        Xl = affine(self.params, H, "l").reshape(n, h, f)
        Xr = Xl if self.share_weights else affine(self.params, H, "r").reshape(n, h, f)
        C = rep(Xr) + rep(Xl).T
        if self.edge_dim is not None:       # + W_e e_ji inside the LeakyReLU, per edge
            C = C + features_of("GATv2Conv", A, self.edge_dim) @ \
                p["W_e"].reshape(self.edge_dim, h, f)
        E = ops.structure(A) * (leaky_relu(C, self.negative_slope) * p["att"]).sum(-1)
        P = ops.softmax(E)
        if self.training and self.dropout > 0:
            P = ops.edge_dropout(P, self.dropout, draw_key(self.dropout_rng))
        Z = ops.aggregate(P, Xl, self.aggr)
        Z = Z.reshape(n, h * f) if self.concat else Z.mean(axis=1)
        return Z + p["bias"] if "bias" in p else Z

    def __repr__(self) -> str:
        edges = "" if self.edge_dim is None else f", edge_dim={self.edge_dim}"
        return (f"GATv2Conv({self.in_dim}, {self.out_dim}, heads={self.heads}, "
                f"concat={self.concat}, aggr={self.aggr!r}{edges})")
