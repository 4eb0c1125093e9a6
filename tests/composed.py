"""The built-in attention layers written as compositions: forward only, backward derived.

Each takes the built-in layer's arguments and draws the same initial weights (and dropout
keys) from the same seed, so that the tests can hold it to the built-in layer on every
executor (``tests/layer_cases.py``).
"""

from __future__ import annotations

import numpy as np

import gblas_gnn as gg
from gblas_gnn import ops
from gblas_gnn.executors._random import draw_key
from gblas_gnn.nn.init import glorot, zeros
from gblas_gnn.ops import factor, leaky_relu, rep

NORM_EPS = 1e-12          # F.normalize's eps, as the built-in AGNNConv


class ComposedGAT(gg.nn.Module):
    """GATConv: ``Ψ_h = sm(A ⊙ LeakyReLU(rep(d_h) + rep(s_h)ᵀ))``, ``Z_h = Ψ_h ⊕ X_h``."""

    def __init__(self, in_dim, out_dim, heads=1, concat=True, negative_slope=0.2,
                 dropout=0.0, bias=True, add_self_loops=True, aggr="sum", seed=0,
                 dtype=np.float32, executor=None):
        super().__init__(dtype, executor)
        self.h, self.f, self.concat = heads, out_dim, concat
        self.slope, self.dropout, self.loops, self.aggr = negative_slope, dropout, \
            add_self_loops, aggr
        rng = np.random.default_rng(seed)
        self.add_param("W", glorot((in_dim, heads * out_dim), rng, self.dtype))
        self.add_param("att_src", glorot((heads, out_dim), rng, self.dtype))
        self.add_param("att_dst", glorot((heads, out_dim), rng, self.dtype))
        if bias:
            self.add_param("bias", zeros((heads * out_dim if concat else out_dim,), self.dtype))
        self.dropout_rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])

    def forward(self, g, H):
        p, n = self.params, H.shape[0]
        A = g.with_self_loops().A if self.loops else g.A
        X = (H @ p["W"]).reshape(n, self.h, self.f)
        s, d = (X * p["att_src"]).sum(-1), (X * p["att_dst"]).sum(-1)
        P = ops.softmax(ops.structure(A) * leaky_relu(rep(d) + rep(s).T, self.slope))
        if self.training and self.dropout > 0:
            P = ops.edge_dropout(P, self.dropout, draw_key(self.dropout_rng))
        Z = ops.aggregate(P, X, self.aggr)
        Z = Z.reshape(n, self.h * self.f) if self.concat else Z.mean(axis=1)
        return Z + p["bias"] if "bias" in p else Z


class ComposedAGNN(gg.nn.Module):
    """AGNNConv: ``Ψ = sm(β A ⊙ (Ĥ Ĥᵀ))``, ``Ĥ`` the rows of H normalised, ``Z = Ψ ⊕ (H W)``."""

    def __init__(self, in_dim, out_dim=None, beta=1.0, learn_beta=True, add_self_loops=True,
                 aggr="sum", seed=0, dtype=np.float32, executor=None):
        super().__init__(dtype, executor)
        self.loops, self.aggr, self.beta = add_self_loops, aggr, beta
        if learn_beta:
            self.add_param("beta", np.array([beta], self.dtype))
        if out_dim is not None:
            rng = np.random.default_rng(seed)
            self.add_param("W", glorot((in_dim, out_dim), rng, self.dtype))

    def forward(self, g, H):
        p = self.params
        A = g.with_self_loops().A if self.loops else g.A
        norms = ops.sqrt(ops.maximum((H * H).sum(1), NORM_EPS * NORM_EPS))
        Hn = H / norms[:, None]
        beta = p["beta"][0] if "beta" in p else self.beta
        P = ops.softmax(ops.structure(A) * (beta * (factor(Hn) @ factor(Hn).T)))
        return ops.aggregate(P, H @ p["W"] if "W" in p else H, self.aggr)


class ComposedVA(gg.nn.Module):
    """VAConv: ``Ψ = A ⊙ (H Hᵀ)`` (optionally its softmax), ``Z = Ψ ⊕ (H W)``."""

    def __init__(self, in_dim, out_dim, softmax=False, add_self_loops=True, aggr="sum",
                 seed=0, dtype=np.float32, executor=None):
        super().__init__(dtype, executor)
        self.softmax, self.loops, self.aggr = softmax, add_self_loops, aggr
        self.add_param("W", glorot((in_dim, out_dim), np.random.default_rng(seed), self.dtype))

    def forward(self, g, H):
        A = g.with_self_loops().A if self.loops else g.A
        Psi = ops.structure(A) * (factor(H) @ factor(H).T)
        if self.softmax:
            Psi = ops.softmax(Psi)
        return ops.aggregate(Psi, H @ self.params["W"], self.aggr)


#: composed class -> the built-in layer it equals
TWINS = {ComposedGAT: "GATConv", ComposedAGNN: "AGNNConv", ComposedVA: "VAConv"}
