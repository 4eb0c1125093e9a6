"""Graph attention layer (GAT, Veličković et al. 2018) in the global tensor formulation,
composed: the forward is written with :mod:`gblas_gnn.ops`; the backward is derived
(:mod:`gblas_gnn.compose`) and both run as generated kernels. The global backward is derived
step by step in ``docs/derivation_gat.md``.
"""

from __future__ import annotations

import numpy as np

from .. import ops
from .._validate import check_bools, finite_real, positive_ints
from ..compose.traced import Traced
from ..executors._random import draw_key
from ..ops import leaky_relu, rep
from ..semirings.aggregations import algebra_of
from ._attention import (
    AGGREGATIONS,  # noqa: F401  (re-exported: gat.AGGREGATIONS)
    check_aggr,
    check_edge_options,
    check_order,
    features_of,
    is_named,
    project,
)
from ._interop import PyGInterop
from .init import glorot, zeros
from .module import Module

__all__ = ["GATConv"]



class GATConv(PyGInterop, Module):
    r"""Graph attention convolution, exactly PyTorch Geometric's ``GATConv``.

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

    With ``edge_dim`` the features :math:`e_{ji}` of the graph's edges
    (:attr:`gblas_gnn.Graph.edge_attr`) enter the scores, as PyG's: :math:`C_h[i,j] \mathrel{+}=
    (W_e e_{ji})_h \cdot a^{edge}_h = e_{ji} \cdot M_{:,h}` with
    :math:`M_{:,h} = W_{e,h}\, a^{edge}_h` (an ``(edge_dim, heads)`` product of the
    parameters: one number per edge and head, computed in the scores' own pass); the self
    loops' features follow ``fill_value`` (:meth:`gblas_gnn.Graph.with_self_loops`).

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
            :mod:`gblas_gnn.semirings`); the backward of a semiring without registered
            derivatives raises ``ValueError`` (:mod:`gblas_gnn.ir.semiring_grad`).
        edge_dim: features per edge the scores read (None: none).
        fill_value: the self loops' edge features: ``"mean"``, ``"add"``, ``"max"``,
            ``"min"``, a number or a vector (with ``edge_dim`` only).
        seed: seed of the Glorot initialisation and of the dropout generator.
        dtype: ``np.float32`` or ``np.float64``.
        executor: executor instance or name (default ``"cpu"``).

    Shapes:
        - input: graph with n vertices (and ``edge_dim`` features per edge), H (n, in_dim)
        - output: (n, heads·out_dim) if ``concat`` else (n, out_dim)
        - params: ``W`` (in_dim, heads·out_dim), ``att_src`` (heads, out_dim),
          ``att_dst`` (heads, out_dim), ``bias`` (heads·out_dim,) or (out_dim,); with
          ``edge_dim``: ``W_e`` (edge_dim, heads·out_dim), ``att_edge`` (heads, out_dim)
    """

    def __init__(self, in_dim: int, out_dim: int, heads: int = 1, concat: bool = True,
                 negative_slope: float = 0.2, dropout: float = 0.0, bias: bool = True,
                 add_self_loops: bool = True, aggr="sum", edge_dim: int | None = None,
                 fill_value="mean", seed: int = 0, dtype=np.float32, executor=None):
        super().__init__(dtype, executor)
        positive_ints(in_dim=in_dim, out_dim=out_dim, heads=heads)
        self.edge_dim, self.fill_value = check_edge_options("GATConv", edge_dim, fill_value)
        check_bools(concat=concat, bias=bias, add_self_loops=add_self_loops)
        slope = finite_real(negative_slope, "negative_slope", low=0.0)
        p = finite_real(dropout, "dropout", 0.0, 1.0, open_high=True)
        self._named = is_named(check_aggr(aggr))
        self.in_dim, self.out_dim, self.heads = int(in_dim), int(out_dim), int(heads)
        self.concat, self.add_self_loops = bool(concat), bool(add_self_loops)
        self.negative_slope, self.dropout, self.aggr = slope, p, aggr
        rng = np.random.default_rng(seed)
        self.add_param("W", glorot((self.in_dim, self.heads * self.out_dim), rng, self.dtype))
        self.add_param("att_src", glorot((self.heads, self.out_dim), rng, self.dtype))
        self.add_param("att_dst", glorot((self.heads, self.out_dim), rng, self.dtype))
        if bias:
            self.add_param("bias", zeros((self.out_width,), self.dtype))
        if self.edge_dim is not None:
            self.add_param("W_e", glorot((self.edge_dim, self.heads * self.out_dim), rng,
                                         self.dtype))
            self.add_param("att_edge", glorot((self.heads, self.out_dim), rng, self.dtype))
        self.dropout_rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
        # "auto" | "project_first" | "aggregate_first" (the last for 1 head, sum/mean only)
        self._order = "auto"

    # ------------------------------------------------------------------ helpers
    @property
    def out_width(self) -> int:
        """Number of output columns."""
        return self.heads * self.out_dim if self.concat else self.out_dim

    def _aggregate_first(self) -> bool:
        """Whether to compute ``(Ψ H) W`` instead of ``Ψ (H W)`` (rule 1, Φ∘⊕ order)."""
        linear_one_head = self._named and algebra_of(self.aggr).linear and self.heads == 1
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
        ``H'_h a_dst[h]`` = column heads+h: the attention vectors placed block-diagonally
        (a traced product of the parameters with a constant, so all scores come from one
        GEMM and their gradients from its backward)."""
        h, out, p = self.heads, self.out_dim, self.params
        blocks = [(self._head_identity() * a[:, :, None]).reshape(h * out, h)
                  for a in (p["att_src"], p["att_dst"])]
        return ops.concat(blocks, axis=1)

    def _head_identity(self) -> Traced:
        """The ``(heads, 1, heads)`` identity, a constant of the layer's executor: moved there
        once, not at every forward (a device executor counts every copy)."""
        ex, dtype = self.executor, np.dtype(self.dtype)
        found = getattr(self, "_identity", None)
        if found is None or found[0] is not ex or found[1].dtype != dtype:
            self._identity = (ex, ex.asarray(np.eye(self.heads, dtype=dtype)[:, None, :]))
        return Traced(self._identity[1], None, False)

    def forward(self, g, H):
        agg_first = self._aggregate_first()         # validates the order before any work
        # the graph, not its matrix: structure() reads the executors' pattern of A + I,
        # and no graphblas.Matrix of it is built (issue 21)
        A = g.with_self_loops(self.fill_value) if self.add_self_loops else g
        p, n, h, f = self.params, H.shape[0], self.heads, self.out_dim
        B = self._att_matrix()
        # [s d] = H' B, or H (W B) without H' (aggregating first) or when it is wider than H
        X = H if agg_first else H @ p["W"]
        SD = H @ (p["W"] @ B) if agg_first or self.in_dim < self.out_dim else X @ B
        s, d = SD[:, :h], SD[:, h:]
        C = rep(d) + rep(s).T
        if self.edge_dim is not None:       # + e_ji · M[:, h]: a number per edge and head
            M = (p["W_e"].reshape(self.edge_dim, h, f) * p["att_edge"]).sum(axis=-1)
            C = C + features_of("GATConv", A, self.edge_dim) @ M
        # Ψ_h = sm(A ⊙ LeakyReLU(C_h)) on A's pattern, one per head
        P = ops.softmax(ops.structure(A) * leaky_relu(C, self.negative_slope))
        if self.training and self.dropout > 0:
            P = ops.edge_dropout(P, self.dropout, draw_key(self.dropout_rng))
        if agg_first:                               # (Ψ H) W + b with one head
            Z = ops.aggregate(P, H.reshape(n, 1, self.in_dim), self.aggr)
            return project(Z.reshape(n, self.in_dim), p["W"], p.get("bias"))
        Z = ops.aggregate(P, X.reshape(n, h, f), self.aggr)
        Z = Z.reshape(n, h * f) if self.concat else Z.mean(axis=1)
        return Z + p["bias"] if "bias" in p else Z

    def __repr__(self) -> str:
        edges = "" if self.edge_dim is None else f", edge_dim={self.edge_dim}"
        return (f"GATConv({self.in_dim}, {self.out_dim}, heads={self.heads}, "
                f"concat={self.concat}, aggr={self.aggr!r}{edges})")
