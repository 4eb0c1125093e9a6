"""Graph attention layer (GAT, Veličković et al. 2018) in the global tensor formulation.

Forward and backward are written once against the executor interface (rule 3 of docs/design.md);
the backward is derived step by step in ``docs/derivation_gat.md``.
"""

from __future__ import annotations

import numpy as np

from .._validate import check_bools, finite_real, positive_ints
from ..executors._random import draw_key
from ._attention import (
    AGGREGATIONS,  # noqa: F401  (re-exported: gat.AGGREGATIONS)
    ForwardOnly,
    check_aggr,
    check_backward_aggr,
    check_order,
    is_named,
)
from ._interop import PyGInterop
from .init import glorot, zeros
from .module import Module

__all__ = ["GATConv"]

_LINEAR = ("sum", "mean")

class GATConv(PyGInterop, Module):
    r"""Graph attention convolution, exactly PyTorch Geometric's ``GATConv`` (no edge features).

    For every head :math:`h` (columns :math:`W_h = W[:, h\,F':(h+1)\,F']`):

    .. math::
        H'_h &= H W_h, \qquad s_h = H'_h\, a^{src}_h, \qquad d_h = H'_h\, a^{dst}_h \\
        C_h &= A \odot (\mathrm{rep}(d_h) + \mathrm{rep}(s_h)^\top)
              \quad (C_h[i,j] = d_h[i] + s_h[j] \text{ on the stored edges } j \to i) \\
        \Psi_h &= \mathrm{sm}(\mathrm{LeakyReLU}(C_h)) \quad \text{(softmax over each target's
              in-edges)} \\
        Z_h &= \mathrm{dropout}(\Psi_h) \oplus H'_h \\
        Z &= \big\Vert_{h} Z_h + b \ \ (\text{concat}) \quad\text{or}\quad
             \tfrac{1}{\text{heads}} \textstyle\sum_h Z_h + b .

    ``A`` is the adjacency (row = target), after adding the missing self loops when
    ``add_self_loops``; only its *pattern* is used (edge values are ignored, as PyG does
    without ``edge_attr``). :math:`\oplus` aggregates the weighted messages
    :math:`\Psi_h[i,j]\,H'_h[j]` of each target by ``aggr`` (an empty row gives 0).

    Attention dropout (training mode only) zeroes each attention coefficient with
    probability ``dropout`` and scales the kept ones by :math:`1/(1-p)`. The mask is
    counter-based (:mod:`gblas_gnn.executors._random`): the coefficient of head ``h`` on the
    edge ``j → i`` is kept when a hash :math:`u(\kappa; h, i, j)` of a per-call key and of
    the global ids is ``>= dropout``, so every executor and every MPI grid draws the same
    mask. The key is drawn from :attr:`dropout_rng` (a ``numpy.random.Generator`` seeded from
    ``seed``, independent of the initialisation; assign a new generator to re-seed), one
    draw per training-mode forward. Backward reuses the mask of the forward.

    For ``aggr`` in ``"sum"``/``"mean"`` with one head and ``in_dim < out_dim`` the layer
    aggregates before projecting, :math:`Z = (\Psi H) W`, and computes the scores as
    :math:`s = H (W a^{src})` without forming :math:`H'`; the result is the same.

    Args:
        in_dim: input feature size.
        out_dim: output feature size of each head.
        heads: number of attention heads.
        concat: concatenate the heads (else average them).
        negative_slope: LeakyReLU slope for negative scores (≥ 0).
        dropout: attention dropout probability in ``[0, 1)`` (training mode only).
        bias: add a learnable bias.
        add_self_loops: add the missing self loops (PyG ``add_remaining_self_loops``).
        aggr: ``"sum"``, ``"max"``, ``"min"``, ``"mean"`` or a semiring (object or name from
            :mod:`gblas_gnn.semirings`; forward only — backward raises ``ValueError``).
        seed: seed of the Glorot initialisation and of the dropout generator.
        dtype: ``np.float32`` or ``np.float64``.
        executor: executor instance or name (default ``"cpu"``).

    Shapes:
        - input: graph with n vertices, H (n, in_dim)
        - output: (n, heads·out_dim) if ``concat`` else (n, out_dim)
        - params: ``W`` (in_dim, heads·out_dim), ``att_src`` (heads, out_dim),
          ``att_dst`` (heads, out_dim), ``bias`` (heads·out_dim,) or (out_dim,)
    """

    def __init__(self, in_dim: int, out_dim: int, heads: int = 1, concat: bool = True,
                 negative_slope: float = 0.2, dropout: float = 0.0, bias: bool = True,
                 add_self_loops: bool = True, aggr="sum", seed: int = 0,
                 dtype=np.float32, executor=None):
        super().__init__(dtype, executor)
        positive_ints(in_dim=in_dim, out_dim=out_dim, heads=heads)
        check_bools(concat=concat, bias=bias, add_self_loops=add_self_loops)
        slope = finite_real(negative_slope, "negative_slope", low=0.0)
        p = finite_real(dropout, "dropout", 0.0, 1.0, open_high=True)
        self._named = is_named(check_aggr(aggr))
        self.in_dim, self.out_dim, self.heads = int(in_dim), int(out_dim), int(heads)
        self.concat, self.add_self_loops = bool(concat), bool(add_self_loops)
        self.negative_slope, self.dropout, self.aggr = slope, p, aggr
        rng = np.random.default_rng(seed)
        init = {"W": glorot((self.in_dim, self.heads * self.out_dim), rng, self.dtype),
                "att_src": glorot((self.heads, self.out_dim), rng, self.dtype),
                "att_dst": glorot((self.heads, self.out_dim), rng, self.dtype)}
        if bias:
            width = self.heads * self.out_dim if self.concat else self.out_dim
            init["bias"] = zeros((width,), self.dtype)
        self.params.update({k: self._param(v) for k, v in init.items()})
        self.dropout_rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
        # "auto" | "project_first" | "aggregate_first" (the last for 1 head, sum/mean only)
        self._order = "auto"
        self.zero_grad()

    # ------------------------------------------------------------------ helpers
    @property
    def out_width(self) -> int:
        """Number of output columns."""
        return self.heads * self.out_dim if self.concat else self.out_dim

    def _aggregate_first(self) -> bool:
        """Whether to compute ``(Ψ H) W`` instead of ``Ψ (H W)`` (rule 1, Φ∘⊕ order)."""
        linear_one_head = self._named and self.aggr in _LINEAR and self.heads == 1
        check_order(self._order)
        if self._order == "aggregate_first":
            if not linear_one_head:
                raise ValueError("aggregate-then-project needs one head and aggr 'sum'/'mean'")
            return True
        if self._order == "project_first":
            return False
        return linear_one_head and self.in_dim < self.out_dim

    def _att_matrix(self):
        """``B`` (heads·out, 2·heads) with ``H'_h a_src[h]`` = column h of ``H' B`` and
        ``H'_h a_dst[h]`` = column heads+h: block-diagonal placement of the attention
        vectors, so all scores come from one product."""
        heads, out = self.heads, self.out_dim
        B = self.xp.zeros((heads * out, 2 * heads), self.dtype)
        for h in range(heads):
            B[h * out:(h + 1) * out, h] = self.params["att_src"][h]
            B[h * out:(h + 1) * out, heads + h] = self.params["att_dst"][h]
        return B

    def _scores(self, H, Hp):
        """``(s, d)``, each (n, heads): ``s[:, h] = H'_h a_src[h]``, ``d[:, h] = H'_h
        a_dst[h]``, i.e. ``[s d] = H' B`` or, without ``H'`` (or when it is wider than
        ``H``), ``H (W B)``."""
        ex, B = self.executor, self._att_matrix()
        if Hp is None or self.in_dim < self.out_dim:
            SD = ex.gemm(H, ex.gemm(self.params["W"], B))
        else:
            SD = ex.gemm(Hp, B)
        return SD[:, :self.heads], SD[:, self.heads:]

    # ------------------------------------------------------------------ forward
    def forward(self, g, H: np.ndarray) -> np.ndarray:
        g, H = self._prepare(g, H, self.in_dim)
        agg_first = self._aggregate_first()         # validates the order before any work
        if self.add_self_loops:
            g = g.with_self_loops()
        ex = self.executor
        W = self.params["W"]
        keep = self.training and self._named        # a semiring has no backward
        mask = None
        if self.training and self.dropout > 0:      # (heads, nnz) scales, CSR order of A
            mask = ex.dropout_edges(g.A, draw_key(self.dropout_rng), self.dropout, self.heads,
                                    self.dtype)

        # X = H (aggregate first, then Z = Y W) or X = H' = H W, (n, heads·out)
        X = H if agg_first else ex.gemm(H, W)
        s, d = self._scores(H, None if agg_first else X)
        # Ψ_h = sm(A ⊙ LeakyReLU(rep(d_h) + rep(s_h)ᵀ)),  Y_h = (Ψ_h ⊙ M_h) ⊕ X_h
        bias = self.params.get("bias")
        # the executor adds the bias when its output is Z itself (it may fuse it)
        bias_by_executor = bias is not None and not agg_first and \
            (self.concat or self.heads == 1)
        result = ex.additive_attention(g.A, d, s, X, self.negative_slope, mask, self.aggr,
                                       keep_context=keep,
                                       bias=bias if bias_by_executor else None)
        Y, ctx = result if keep else (result, None)
        Z = ex.gemm(Y, W) if agg_first else Y
        if not self.concat and self.heads > 1:
            Z = Z.reshape(Z.shape[0], self.heads, self.out_dim).mean(axis=1, dtype=self.dtype)
        if bias is not None and not bias_by_executor:
            Z += bias        # Z is a fresh array (executor results are ours)

        if not self.training:
            self._cache = None
        elif not self._named:
            self._cache = ForwardOnly(self.aggr)      # backward says it is forward-only
        else:
            self._cache = {"H": H, "X": X, "Y": Y if agg_first else None, "rows": Z.shape[0],
                           "agg_first": agg_first, "ctx": ctx}
        return Z

    # ------------------------------------------------------------------ backward
    def backward(self, dout: np.ndarray) -> np.ndarray:
        cache = self._need_cache()
        check_backward_aggr(cache)
        H, X, agg_first = cache["H"], cache["X"], cache["agg_first"]
        dout = self._check_dout(dout, (cache["rows"], self.out_width))
        ex, xp = self.executor, self.xp
        heads, out = self.heads, self.out_dim
        W = self.params["W"]

        if "bias" in self.params:
            self.grads["bias"] = ex.vertex_sum(dout)
        # mean over heads: every head receives dout / heads
        dZ = dout if self.concat or heads == 1 else \
            xp.tile(dout / self.dtype.type(heads), (1, heads))
        B = self._att_matrix()
        if agg_first:
            # Z = Y W:  dW = Yᵀ dZ (+ the score terms below), dY = dZ Wᵀ
            dW = ex.inner(cache["Y"], dZ)
            dd, ds, dX = ex.additive_attention_backward(cache["ctx"], ex.gemm(dZ, W.T))
            # [s d] = H (W B) with one head:  with G = [ds dd] (n, 2),
            # d(W B) = Hᵀ G, so da = Wᵀ Hᵀ G, dW += Hᵀ G Bᵀ, dH = dX + G (W B)ᵀ
            G = xp.concatenate([ds, dd], axis=1)
            HG = ex.inner(H, G)                                   # Hᵀ G, (in, 2)
            da = ex.gemm(W.T, HG)                                 # (out, 2)
            da_src, da_dst = da[:, :1].T, da[:, 1:].T
            dW += ex.gemm(HG, B.T)
            dH = dX
            dH += ex.gemm(G, ex.gemm(W, B).T)
        else:
            dd, ds, dX = ex.additive_attention_backward(cache["ctx"], dZ)
            # [s d] = H' B:  with G = [ds dd] (n, 2·heads), dB = H'ᵀ G (its diagonal blocks
            # are da_src, da_dst) and dH' = dX + G Bᵀ
            G = xp.concatenate([ds, dd], axis=1)
            dB = ex.inner(X, G).reshape(heads, out, 2, heads)     # H'ᵀ G by head blocks
            diag = xp.arange(heads)
            da_src, da_dst = dB[diag, :, 0, diag], dB[diag, :, 1, diag]
            dHp = dX
            dHp += ex.gemm(G, B.T)
            dW = ex.inner(H, dHp)                                 # Hᵀ dH'
            dH = ex.gemm(dHp, W.T)                                # dH' Wᵀ
        self.grads["W"] = dW
        self.grads["att_src"] = da_src.astype(self.dtype, copy=False)
        self.grads["att_dst"] = da_dst.astype(self.dtype, copy=False)
        return dH

    def __repr__(self) -> str:
        return (f"GATConv({self.in_dim}, {self.out_dim}, heads={self.heads}, "
                f"concat={self.concat}, aggr={self.aggr!r})")
