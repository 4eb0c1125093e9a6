r"""Attention-based GNN (AGNN): cosine-similarity attention with a temperature ``β``."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validate import positive_ints
from ._attention import (
    DotAttention,
    OrderMixin,
    check_aggr,
    check_backward_aggr,
    check_weight,
    project_aggregate,
    project_aggregate_backward,
)
from ._interop import PyGInterop
from .init import glorot
from .module import Module

__all__ = ["AGNNConv"]

#: the ``eps`` of PyTorch's ``F.normalize``: rows are divided by ``max(‖H_i‖, eps)``
NORM_EPS = 1e-12


def _check_beta(beta) -> float:
    if isinstance(beta, np.ndarray) and beta.size == 1:
        beta = beta.reshape(-1)[0]
    if isinstance(beta, (bool, np.bool_)) or not isinstance(beta, (int, float, np.integer,
                                                                   np.floating)):
        raise TypeError(f"beta must be a real number, got {beta!r}")
    if not np.isfinite(beta):
        raise ValueError(f"beta must be finite, got {beta!r}")
    return float(beta)


class AGNNConv(PyGInterop, OrderMixin, Module):
    r"""AGNN layer (Thekumparampil et al. 2018; PyG ``AGNNConv``), global formulation.

    .. math::
        n_i = \max(\lVert H_i \rVert_2, \epsilon), \qquad \hat H = H \oslash \mathrm{rep}(n),
        \qquad P = A \odot (\hat H \hat H^\top) = A \odot (H H^\top \oslash n n^\top)

    .. math::
        \Psi = \mathrm{sm}(\beta \, P), \qquad Z = \Psi \oplus (H W)
        \quad (Z = \Psi \oplus H \text{ without } W)

    so :math:`Z_i = \bigoplus_{j \in N(i)} \mathrm{softmax}_j(\beta \cos(H_i, H_j))\,(HW)_j`.
    :math:`\epsilon = 10^{-12}` as in ``torch.nn.functional.normalize``: a zero row has
    cosine 0 to everything (never NaN). ``P`` uses A's *pattern* only (edge values are
    ignored); the softmax is grouped by target vertex (rows of ``A``). No activation.

    With ``out_dim=None`` and ``learn_beta`` this is exactly PyG's ``AGNNConv()``
    (``requires_grad=True``); ``learn_beta=False`` is ``AGNNConv(requires_grad=False)``: ``β``
    is then a fixed buffer (attribute :attr:`beta`), not a parameter.

    Args:
        in_dim: input feature size ``k``.
        out_dim: output size; ``None`` (default, PyG) means no projection ``W`` and an
            output of size ``in_dim``.
        beta: initial (or, with ``learn_beta=False``, fixed) temperature; finite.
        learn_beta: make ``β`` a learnable parameter ``params['beta']`` of shape (1,).
        add_self_loops: add the missing self loops first (PyG default).
        aggr: ``"sum"`` (default, PyG's ``"add"``), ``"max"``, ``"min"``, ``"mean"`` over the
            weighted messages :math:`\Psi_{ij} (HW)_j` (an empty row gives 0), or a semiring
            (name or object from :mod:`gblas_gnn.semirings`; forward only: a training-mode
            backward through a semiring raises ``ValueError``).
        seed: seed of the Glorot initialisation of ``W``.
        dtype: ``np.float32`` (default) or ``np.float64``.
        executor: ``None``/``"cpu"`` or an :class:`~gblas_gnn.executors.Executor`.

    Attributes:
        beta: the temperature, an ndarray of shape (1,) (``params['beta']`` when learnt).
        order: ``"auto"`` (default), ``"aggregate_first"`` or ``"project_first"``: for
            ``sum``/``mean`` with ``W``, :math:`(\Psi H) W = \Psi (H W)`; ``"auto"``
            aggregates at the smaller of ``in_dim``, ``out_dim``.

    Shapes:
        - **input:** graph with n vertices (``Graph``, ``scipy.sparse`` or
          ``graphblas.Matrix``), features ``H`` (n, in_dim)
        - **output:** (n, out_dim), or (n, in_dim) when ``out_dim`` is None
        - **params:** ``beta`` (1,) when ``learn_beta``; ``W`` (in_dim, out_dim) when
          ``out_dim`` is given
    """

    def __init__(self, in_dim: int, out_dim: int | None = None, beta: float = 1.0,
                 learn_beta: bool = True, add_self_loops: bool = True, aggr: Any = "sum",
                 seed: int = 0, dtype=np.float32, executor=None):
        super().__init__(dtype, executor)
        positive_ints(in_dim=in_dim)
        if out_dim is not None:
            positive_ints(out_dim=out_dim)
        beta = _check_beta(beta)
        self.in_dim = int(in_dim)
        self.out_dim = self.in_dim if out_dim is None else int(out_dim)
        self.has_weight = out_dim is not None
        self.learn_beta = bool(learn_beta)
        self.add_self_loops = bool(add_self_loops)
        self.aggr = check_aggr(aggr)
        self._order = "auto"
        beta_arr = self._param(np.array([beta], dtype=self.dtype))
        if self.learn_beta:
            self.params["beta"] = beta_arr
            self._beta_buffer = None
        else:
            self._beta_buffer = beta_arr
        if self.has_weight:
            rng = np.random.default_rng(seed)
            self.params["W"] = self._param(glorot((self.in_dim, self.out_dim), rng, self.dtype))
        self.zero_grad()

    # ------------------------------------------------------------------ attributes
    @property
    def beta(self) -> np.ndarray:
        """The temperature ``β`` (shape (1,)): the parameter, or the fixed buffer."""
        return self.params["beta"] if self.learn_beta else self._beta_buffer

    @beta.setter
    def beta(self, value) -> None:
        self.beta[0] = _check_beta(value)

    def __repr__(self) -> str:
        out = self.out_dim if self.has_weight else None
        return (f"AGNNConv({self.in_dim}, {out}, learn_beta={self.learn_beta}, "
                f"aggr={self.aggr!r})")

    # ------------------------------------------------------------------ forward / backward
    def _checked_params(self) -> tuple[float, np.ndarray | None]:
        beta = self.beta
        check_weight(beta, (1,), self.dtype, "beta", xp=self.xp)
        W = None
        if self.has_weight:
            W = self.params["W"]
            check_weight(W, (self.in_dim, self.out_dim), self.dtype, xp=self.xp)
        return float(beta[0]), W

    def forward(self, g, H: np.ndarray) -> np.ndarray:
        g, H = self._prepare(g, H, self.in_dim)
        beta, W = self._checked_params()
        if self.add_self_loops:
            g = g.with_self_loops()
        ex, xp = self.executor, self.xp
        # row normalisation (F.normalize): Ĥ = H ⊘ rep(max(‖H_i‖, eps)), dense n×k
        norms = xp.sqrt(ex.row_dot(H, H))
        nc = xp.maximum(norms, NORM_EPS).astype(self.dtype, copy=False)
        Hn = H / nc[:, None]
        # Ψ = sm(β · A ⊙ (Ĥ Ĥᵀ)) and Z = Ψ ⊕ (H W), one fused executor operation
        # (H = diag(nc) Ĥ: aggregating H reads the same rows of Ĥ as the scores)
        attention = DotAttention(ex, g.A, Hn, Hn, beta, self.aggr, factored=(H, nc))
        Z, pa = project_aggregate(ex, attention, H, W, self._order, keep=self.training)
        if self.training:
            self._cache = {"Hn": Hn, "nc": nc, "clamped": norms <= NORM_EPS, "pa": pa,
                           "shape": Z.shape}
        else:
            self._cache = None
        return Z

    def backward(self, dout: np.ndarray) -> np.ndarray:
        c = self._need_cache()
        check_backward_aggr(c["pa"])
        dout = self._check_dout(dout, c["shape"])
        ex, Hn, nc = self.executor, c["Hn"], c["nc"]
        # Z = Ψ ⊕ (H W) with Ψ = sm(β P), P = A ⊙ (Ĥ Ĥᵀ): the executor returns the
        # gradients of the scores' factors, dĤ = β dS Ĥ (rows) and β dSᵀ Ĥ (columns), with
        # dS = Ψ ⊙ (dΨ − rep(sum(Ψ ⊙ dΨ))), and dβ = Σ dS ⊙ P
        (dP, dQ, dbeta), dH, dW = project_aggregate_backward(ex, c["pa"], dout)
        grads = {}
        if self.learn_beta:
            grads["beta"] = dbeta.reshape(1).astype(self.dtype)
        if dW is not None:
            grads["W"] = dW
        dHn = dP
        dHn += dQ
        # Ĥ_i = H_i / n_i:  dH_i = (dĤ_i − Ĥ_i ⟨Ĥ_i, dĤ_i⟩) / n_i ; a clamped row
        # (‖H_i‖ ≤ eps, Ĥ_i = H_i / eps) is linear: dH_i = dĤ_i / eps.
        # In place: the executor's gradients are fresh arrays, and n×k temporaries cost more
        # than the arithmetic here.
        proj = ex.row_dot(Hn, dHn)
        proj[c["clamped"]] = 0
        dHn -= Hn * proj[:, None]
        dHn /= nc[:, None]
        dH += dHn
        self.grads = grads
        return dH
