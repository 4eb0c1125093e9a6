"""The executor interface: the only vocabulary layers use (DESIGN.md rule 3).

Layers express forward and backward with these operations and never look at which
executor runs them. Two kinds of operand appear:

* **edge tensors** — one scalar per stored edge of a fixed pattern (the adjacency ``A``),
  held as a ``graphblas.Matrix`` by the ``cpu`` executor. All edge tensors derived from one
  pattern share that pattern, so elementwise ops between them never change the structure;
* **dense tensors** — ``numpy.ndarray`` of shape (n,) or (n, k).

No operation materialises an n×n dense matrix or an |E|×k tensor (rule 1).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

Reduce = Literal["sum", "max", "min"]
ScaleOp = Literal["times", "div", "plus", "minus"]
Unary = Literal["exp", "relu", "leaky_relu", "scale", "neg"]


@dataclass
class AggregateContext:
    """What :meth:`Executor.aggregate_backward` needs from a forward aggregation."""

    aggr: Any
    S: Any
    H: np.ndarray
    extra: Any = None


@dataclass
class AttentionContext:
    """What :meth:`Executor.additive_attention_backward` / :meth:`dot_attention_backward`
    need from the forward (an executor-private ``data`` dict)."""

    kind: str
    aggr: Any
    data: dict


def check_bias(bias, width: int) -> None:
    """Refuse a row bias that is not a 1-D array of ``width`` entries (``None`` is no bias)."""
    if bias is not None and np.shape(bias) != (width,):
        raise ValueError(f"bias must have shape ({width},), got {np.shape(bias)}")


class Executor(ABC):
    """Abstract executor. ``E``, ``F``, ``S``, ``Psi`` are edge tensors; others are dense."""

    name: str = "abstract"

    # ------------------------------------------------------------------ edge tensors from dense
    @abstractmethod
    def sddmm(self, A, X: np.ndarray, Y: np.ndarray):
        """Sampled dense-dense product on A's *pattern*: ``E[i,j] = Σ_c X[i,c] Y[j,c]``."""

    @abstractmethod
    def outer_add(self, A, u: np.ndarray, v: np.ndarray):
        """Masked outer sum on A's pattern: ``E[i,j] = u[i] + v[j]`` (never n×n)."""

    @abstractmethod
    def pattern(self, A, value: float, dtype):
        """Edge tensor with A's pattern and every value equal to ``value``."""

    # ------------------------------------------------------------------ edge-wise
    @abstractmethod
    def apply(self, E, fn: Unary, alpha: float | None = None):
        """Edge-wise ``exp``, ``relu``, ``leaky_relu`` (slope ``alpha``), ``scale`` (×alpha)
        or ``neg``."""

    @abstractmethod
    def leaky_relu_backward(self, C, dE, alpha: float):
        """``dC = dE ⊙ (1 if C > 0 else alpha)`` edge-wise."""

    @abstractmethod
    def ewise_mult(self, E, F):
        """``E ⊙ F`` (same pattern)."""

    @abstractmethod
    def ewise_add(self, E, F, alpha: float = 1.0, beta: float = 1.0):
        """``alpha E + beta F`` (same pattern)."""

    @abstractmethod
    def edge_values(self, E) -> np.ndarray:
        """A copy of E's values in CSR (row-major, sorted column) order."""

    @abstractmethod
    def edge_from_values(self, A, values: np.ndarray):
        """Edge tensor with A's pattern holding ``values`` (CSR order, as :meth:`edge_values`)."""

    # ------------------------------------------------------------------ reductions & scaling
    @abstractmethod
    def row_reduce(self, E, op: Reduce = "sum") -> np.ndarray:
        """``r[i] = ⊕_j E[i,j]`` over stored entries; an empty row gives 0."""

    @abstractmethod
    def col_reduce(self, E, op: Reduce = "sum") -> np.ndarray:
        """``r[j] = ⊕_i E[i,j]`` over stored entries; an empty column gives 0."""

    @abstractmethod
    def row_scale(self, E, v: np.ndarray, op: ScaleOp = "times"):
        """``E[i,j] op v[i]`` on E's pattern (``rep(v)`` under a mask)."""

    @abstractmethod
    def col_scale(self, E, v: np.ndarray, op: ScaleOp = "times"):
        """``E[i,j] op v[j]`` on E's pattern (``rep(v)ᵀ`` under a mask)."""

    def softmax(self, E):
        """Stable row softmax over stored entries: ``exp(E − rep(max)) ⊘ rs(exp(E − rep(max)))``.

        An empty row stays empty.
        """
        shifted = self.row_scale(E, self.row_reduce(E, "max"), "minus")
        ex = self.apply(shifted, "exp")
        return self.row_scale(ex, self.row_reduce(ex, "sum"), "div")

    def softmax_backward(self, Psi, dPsi):
        """``dS = Ψ ⊙ (dΨ − rep(sum(Ψ ⊙ dΨ)))``, the backward of :meth:`softmax`."""
        t = self.row_reduce(self.ewise_mult(Psi, dPsi), "sum")
        return self.ewise_mult(Psi, self.row_scale(dPsi, t, "minus"))

    # ------------------------------------------------------------------ products
    @abstractmethod
    def spmm(self, S, H: np.ndarray, semiring="plus_times") -> np.ndarray:
        """``Z[i] = ⊕_j S[i,j] ⊗ H[j]`` over a semiring; an empty row gives 0."""

    @abstractmethod
    def transpose(self, S):
        """``Sᵀ`` as an edge tensor of its own (for a matrix multiplied by its transpose
        many times: one explicit transpose, then plain :meth:`spmm` calls)."""

    @abstractmethod
    def spmm_t(self, S, H: np.ndarray, semiring="plus_times") -> np.ndarray:
        """``Z[j] = ⊕_i S[i,j] ⊗ H[i]`` (the product with ``Sᵀ``)."""

    def gemm(self, X: np.ndarray, W: np.ndarray, trans_a: bool = False,
             trans_b: bool = False) -> np.ndarray:
        """Dense ``op(X) @ op(W)``."""
        return (X.T if trans_a else X) @ (W.T if trans_b else W)

    # ------------------------------------------------------------------ aggregation (S ⊕ H)
    @abstractmethod
    def aggregate(self, S, H: np.ndarray, aggr, keep_context: bool = False):
        """Weighted-message aggregation ``Z = S ⊕ H``.

        ``aggr`` is ``"sum" | "max" | "min" | "mean"`` over messages ``S[i,j]·H[j]`` (empty
        row → 0) or a semiring. Returns ``Z`` or, with ``keep_context``, ``(Z, ctx)`` for
        :meth:`aggregate_backward`.
        """

    @abstractmethod
    def aggregate_backward(self, ctx: AggregateContext, dZ: np.ndarray,
                           need_dS: bool = True):
        """Gradients ``(dS, dH)`` of a named aggregation; ``dS`` is an edge tensor (or None).

        max/min route the gradient to the arg-extreme neighbour of each (row, feature); ties
        go to the first stored entry (lowest source id).
        """

    # ------------------------------------------------------------------ fused attention
    # One semantic operation each, with its gradient rule beside it. The defaults below are
    # written with the primitives above (so every executor has them); an executor may
    # override them with a fused implementation that gives the same result.
    def additive_attention(self, A, d: np.ndarray, s: np.ndarray, X: np.ndarray,
                           slope: float, mask: np.ndarray | None = None, aggr="sum",
                           keep_context: bool = False, bias: np.ndarray | None = None):
        r"""GAT attention and aggregation for every head ``h`` (columns ``h·w:(h+1)·w`` of X):

        .. math::
            \Psi_h = \mathrm{sm}(A \odot \mathrm{LeakyReLU}_\alpha(\mathrm{rep}(d_h)
            + \mathrm{rep}(s_h)^\top)), \qquad Z_h = (\Psi_h \odot M_h) \oplus X_h
            \;(+\, b_h) .

        ``d``, ``s``: (heads, n); ``mask``: None or (heads, nnz) edge scales in CSR order
        (dropout: 0 or ``1/(1-p)``); ``bias``: None or (heads·w,), added to every row of the
        result (the backward is unchanged: its gradient is the column sum of ``dZ``).
        Returns ``Z`` (n, heads·w) or ``(Z, ctx)``.
        """
        check_bias(bias, X.shape[1])
        heads = d.shape[0]
        width = X.shape[1] // heads
        Z = np.empty((A.nrows, X.shape[1]), X.dtype)
        per_head = []
        for h in range(heads):
            cols = slice(h * width, (h + 1) * width)
            C = self.outer_add(A, d[h], s[h])
            Psi = self.softmax(self.apply(C, "leaky_relu", slope))
            M = None if mask is None else self.edge_from_values(A, mask[h])
            S = Psi if M is None else self.ewise_mult(Psi, M)
            Xh = np.ascontiguousarray(X[:, cols])
            if keep_context:
                Z[:, cols], actx = self.aggregate(S, Xh, aggr, keep_context=True)
                per_head.append((C, Psi, M, actx))
            else:
                Z[:, cols] = self.aggregate(S, Xh, aggr)
        if bias is not None:
            Z += bias
        if not keep_context:
            return Z
        return Z, AttentionContext("additive", aggr, {"heads": per_head, "slope": slope,
                                                      "width": width, "n_src": X.shape[0]})

    def additive_attention_backward(self, ctx: AttentionContext, dZ: np.ndarray):
        r"""Gradients ``(dd, ds, dX)`` of :meth:`additive_attention`.

        With :math:`dC_h = \mathrm{LeakyReLU}'(C_h) \odot \Psi_h \odot (d\Psi_h -
        \mathrm{rep}(\mathrm{sum}(\Psi_h \odot d\Psi_h)))`: ``dd[h] = rs(dC_h)``,
        ``ds[h] = cs(dC_h)`` (row / column sums), ``dX_h`` from the aggregation backward.
        """
        data = ctx.data
        width, slope = data["width"], data["slope"]
        heads = len(data["heads"])
        n_src = data["n_src"]
        dd = np.empty((heads, dZ.shape[0]), dZ.dtype)
        ds = np.empty((heads, n_src), dZ.dtype)
        dX = np.empty((n_src, heads * width), dZ.dtype)
        for h, (C, Psi, M, actx) in enumerate(data["heads"]):
            cols = slice(h * width, (h + 1) * width)
            dS, dX[:, cols] = self.aggregate_backward(actx, np.ascontiguousarray(dZ[:, cols]))
            if M is not None:
                dS = self.ewise_mult(dS, M)
            dC = self.leaky_relu_backward(C, self.softmax_backward(Psi, dS), slope)
            dd[h] = self.row_reduce(dC, "sum")
            ds[h] = self.col_reduce(dC, "sum")
        return dd, ds, dX

    def dot_attention(self, A, P: np.ndarray, Q: np.ndarray, beta: float, X: np.ndarray,
                      aggr="sum", keep_context: bool = False, scale: np.ndarray | None = None):
        r"""Dot-product attention and aggregation (AGNN, softmax VA):

        .. math::
            E = A \odot (P Q^\top), \qquad \Psi = \mathrm{sm}(\beta E), \qquad
            Z = \Psi \oplus M, \quad M = \mathrm{diag}(c)\, X

        (``M = X`` without ``scale`` ``c``). With ``X = Q`` and a scale, scores and messages
        read the same rows (AGNN aggregates ``H = diag(‖H‖) Ĥ`` with ``P = Q = Ĥ``).
        Returns ``Z`` or ``(Z, ctx)``.
        """
        if scale is not None:
            X = X * np.asarray(scale, X.dtype)[:, None]
        E = self.sddmm(A, P, Q)
        Psi = self.softmax(self.apply(E, "scale", beta))
        if not keep_context:
            return self.aggregate(Psi, X, aggr)
        Z, actx = self.aggregate(Psi, X, aggr, keep_context=True)
        return Z, AttentionContext("dot", aggr, {"E": E, "Psi": Psi, "actx": actx, "P": P,
                                                 "Q": Q, "beta": beta})

    def dot_attention_backward(self, ctx: AttentionContext, dZ: np.ndarray):
        r"""Gradients ``(dP, dQ, dβ, dM)`` of :meth:`dot_attention` (``dM``: with respect to
        the messages ``M = diag(c) X``, which is ``dX`` without a scale).

        With :math:`dS = \Psi \odot (d\Psi - \mathrm{rep}(\mathrm{sum}(\Psi \odot
        d\Psi)))`: :math:`d\beta = \sum dS \odot E`, :math:`dP = \beta\, dS\, Q`,
        :math:`dQ = \beta\, dS^\top P`.
        """
        c = ctx.data
        dPsi, dX = self.aggregate_backward(c["actx"], dZ)
        dS = self.softmax_backward(c["Psi"], dPsi)
        dbeta = float(self.row_reduce(self.ewise_mult(dS, c["E"]), "sum").sum())
        dE = self.apply(dS, "scale", c["beta"])
        return self.spmm(dE, c["Q"]), self.spmm_t(dE, c["P"]), dbeta, dX
