r"""Attention-based GNN (AGNN): cosine-similarity attention with a temperature ``β``,
composed (forward only: the backward is derived and runs as generated kernels)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import ops
from .._validate import positive_ints
from ..ops import factor, rep
from ._attention import OrderMixin, check_aggr, project_aggregate
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
        if self.learn_beta:
            self.add_param("beta", np.array([beta], dtype=self.dtype))
            self._beta_buffer = None
        else:
            self._beta_buffer = self._param(np.array([beta], dtype=self.dtype))
        if self.has_weight:
            rng = np.random.default_rng(seed)
            self.add_param("W", glorot((self.in_dim, self.out_dim), rng, self.dtype))

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

    # ------------------------------------------------------------------ forward
    def forward(self, g, H):
        # the graph, not its matrix: structure() reads the executors' pattern of A + I,
        # and no graphblas.Matrix of it is built (issue 21)
        A = g.with_self_loops() if self.add_self_loops else g
        W = self.params.get("W")
        # H = diag(n) Ĥ: without W the messages n_j Ĥ_j read the same rows as the scores
        messages_from_scores = W is None and self.aggr in ("sum", "mean", "max", "min")
        # row normalisation (F.normalize): Ĥ = H ⊘ rep(n), n = max(‖H_i‖, eps); the norms
        # come with it where the messages use them
        if messages_from_scores:
            Hn, norms = ops.normalize(H, NORM_EPS, return_norms=True)
        else:
            Hn = ops.normalize(H, NORM_EPS)
        beta = self.beta[0]
        # Ψ = sm(β · A ⊙ (Ĥ Ĥᵀ)): one dot product per edge on A's pattern
        P = ops.softmax(ops.structure(A) * (beta * (factor(Hn) @ factor(Hn).T)))
        if messages_from_scores:
            return ops.aggregate(P * rep(norms).T, Hn, self.aggr)
        return project_aggregate(P, H, W, self.aggr, self._order)
