r"""Helpers shared by the attention layers (:class:`~gblas_gnn.nn.GATConv`,
:class:`~gblas_gnn.nn.AGNNConv`, :class:`~gblas_gnn.nn.VAConv`).

- :func:`check_aggr` / :func:`is_named`: ``aggr`` validation (named aggregation or semiring);
- :func:`check_order`: the ``order`` attribute (``"auto"``, ``"aggregate_first"``,
  ``"project_first"``);
- :func:`project_aggregate` and :func:`project_aggregate_backward`: the projection-
  aggregation step :math:`Z = \Psi \oplus (H W)` (:math:`\Psi \oplus H` without ``W``) in the
  cheaper order, with its backward;
- :func:`check_backward_aggr`: the error of a training-mode backward through a semiring;
- :func:`check_weight`: a parameter keeps its shape, dtype and finiteness.

Derivations: ``docs/derivation_agnn_va.md`` and ``docs/derivation_gat.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..executors.base import AGGREGATIONS, check_aggregation, is_named

__all__ = ["AGGREGATIONS", "ORDERS", "check_aggr", "is_named", "check_order",
           "EdgeAggregation", "DotAttention", "ForwardOnly", "ProjectAggregateCache",
           "project_aggregate", "project_aggregate_backward", "check_backward_aggr",
           "check_weight", "OrderMixin", "affine"]

ORDERS = ("auto", "aggregate_first", "project_first")


def check_aggr(aggr: Any) -> Any:
    """Validate ``aggr``: ``"sum" | "max" | "min" | "mean"`` or a semiring (name or object).

    Raises ``ValueError`` for anything else (before any work).
    """
    return check_aggregation(aggr)


def check_order(order: str) -> str:
    """Validate an ``order`` value (one of :data:`ORDERS`); ``ValueError`` otherwise."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    return order


class OrderMixin:
    r"""The ``order`` attribute of a layer computing :math:`Z = \Psi \oplus (H W)`.

    ``"auto"`` (default), ``"aggregate_first"`` or ``"project_first"``: for the linear
    aggregations ``sum``/``mean``, :math:`(\Psi H) W = \Psi (H W)`; ``"auto"`` aggregates at
    the smaller of ``in_dim``, ``out_dim`` (see :func:`project_aggregate`).
    """

    _order = "auto"

    @property
    def order(self) -> str:
        """Evaluation order of the linear aggregations (see the class docstring)."""
        return self._order

    @order.setter
    def order(self, value: str) -> None:
        self._order = check_order(value)


class EdgeAggregation:
    r"""``Z = Ψ ⊕ X`` for a fixed edge tensor ``Ψ``; backward gives ``(dΨ, dX)``."""

    def __init__(self, ex, Psi, aggr: Any):
        self.ex, self.Psi, self.aggr = ex, Psi, aggr

    def forward(self, X, keep: bool):
        if keep:
            return self.ex.aggregate(self.Psi, X, self.aggr, keep_context=True)
        return self.ex.aggregate(self.Psi, X, self.aggr), None

    def backward(self, ctx, dZ, need_dPsi: bool = True):
        return self.ex.aggregate_backward(ctx, dZ, need_dPsi)


class DotAttention:
    r"""``Z = sm(β · A ⊙ (P Qᵀ)) ⊕ X`` as one executor operation (fused on the cpu);
    backward gives ``((dP, dQ, dβ), dX)``.

    ``factored = (H, c)`` says that ``H = diag(c) Q``: aggregating ``X = H`` then runs as
    messages ``c_j Q_j``, so scores and messages read the same rows of ``Q``.
    """

    def __init__(self, ex, A, P, Q, beta: float, aggr: Any, factored=None):
        self.ex, self.A, self.P, self.Q, self.beta, self.aggr = ex, A, P, Q, beta, aggr
        self.factored = factored

    def forward(self, X, keep: bool):
        scale = None
        if self.factored is not None and X is self.factored[0]:
            X, scale = self.Q, self.factored[1]
        result = self.ex.dot_attention(self.A, self.P, self.Q, self.beta, X, self.aggr,
                                       keep_context=keep, scale=scale)
        return result if keep else (result, None)

    def backward(self, ctx, dZ, need_dPsi: bool = True):
        dP, dQ, dbeta, dX = self.ex.dot_attention_backward(ctx, dZ)
        return (dP, dQ, dbeta), dX


@dataclass
class ForwardOnly:
    """The training-mode cache of a forward through a semiring: it has no backward, and the
    cache says so (:func:`check_backward_aggr`)."""

    semiring: Any


@dataclass
class ProjectAggregateCache:
    """What :func:`project_aggregate_backward` needs: the aggregation step and its context,
    the order, ``W``, and ``Y = Ψ ⊕ H`` (aggregate first) or ``H`` (project first)."""

    agg: Any
    ctx: Any
    agg_first: bool
    W: Any
    Y: Any = None
    H: Any = None


def project_aggregate(ex, agg, H, W, order: str = "auto", keep: bool = False):
    r"""``Z = Ψ ⊕ (H W)`` (``Ψ ⊕ H`` when ``W`` is None) and, with ``keep``, the cache
    (:class:`ProjectAggregateCache`, or :class:`ForwardOnly` for a semiring).

    ``agg`` is the aggregation step (:class:`EdgeAggregation` or :class:`DotAttention`).
    For the linear aggregations (``sum``, ``mean``) ``(Ψ ⊕ H) W = Ψ ⊕ (H W)``, so the
    aggregation runs at the smaller feature width (``order="auto"``: aggregate first iff
    ``in_dim < out_dim``); ``max``/``min`` and semirings always project first.
    """
    aggr = agg.aggr
    agg_first = (W is not None and isinstance(aggr, str) and aggr in ("sum", "mean")
                 and (order == "aggregate_first"
                      or (order == "auto" and W.shape[0] < W.shape[1])))
    named = is_named(aggr)
    keep_ctx = keep and named
    if agg_first:
        Y, ctx = agg.forward(H, keep_ctx)
        Z = ex.gemm(Y, W)
    else:
        X = H if W is None else ex.gemm(H, W)
        Z, ctx = agg.forward(X, keep_ctx)
    if not keep:
        return Z, None
    if not named:
        return Z, ForwardOnly(aggr)
    return Z, ProjectAggregateCache(agg, ctx, agg_first, W, Y=Y if agg_first else None,
                                    H=H if not agg_first and W is not None else None)


def check_backward_aggr(cache) -> None:
    """Raise the ``ValueError`` of a training-mode backward through a semiring."""
    if isinstance(cache, ForwardOnly):
        semiring = cache.semiring
        name = semiring if isinstance(semiring, str) else getattr(semiring, "name", semiring)
        raise ValueError(f"the semiring aggregation {name!r} is forward-only: "
                         f"backward is defined for the aggregations {AGGREGATIONS} only; use "
                         "a semiring in evaluation mode (module.eval()) or pick a named "
                         "aggregation")


def project_aggregate_backward(ex, cache: ProjectAggregateCache, dZ, need_dPsi: bool = True):
    r"""Backward of :func:`project_aggregate`: ``(dΨ, dH, dW)``.

    ``dΨ`` is what the aggregation's backward gives for its attention input (an edge tensor
    for :class:`EdgeAggregation`, None unless ``need_dPsi``); ``dW`` is None without ``W``.
    Aggregate-first (``Y = Ψ ⊕ H``, ``Z = Y W``): ``dW = Yᵀ dZ`` and the aggregation
    backward runs on ``dY = dZ Wᵀ``. Project-first (``X = H W``, ``Z = Ψ ⊕ X``): the
    aggregation backward gives ``dX``, then ``dW = Hᵀ dX``, ``dH = dX Wᵀ``.
    """
    check_backward_aggr(cache)
    W, ctx, agg = cache.W, cache.ctx, cache.agg
    dW = None
    if cache.agg_first:
        dW = ex.inner(cache.Y, dZ)
        dPsi, dH = agg.backward(ctx, ex.gemm(dZ, W.T), need_dPsi)
    else:
        dPsi, dX = agg.backward(ctx, dZ, need_dPsi)
        if W is None:
            dH = dX
        else:
            dW = ex.inner(cache.H, dX)
            dH = ex.gemm(dX, W.T)
    return dPsi, dH, dW


def affine(params: dict, H, suffix: str):
    """``H W_s + b_s`` of the parameters ``W_<suffix>`` and (when declared) ``b_<suffix>``:
    the projections of the composed attention layers."""
    Y = H @ params[f"W_{suffix}"]
    bias = params.get(f"b_{suffix}")
    return Y if bias is None else Y + bias


def check_weight(W, shape: tuple[int, int], dtype, name: str = "W", xp=np) -> None:
    """A parameter must keep its shape, dtype and finiteness (optimisers write in place)."""
    if not isinstance(W, xp.ndarray) or W.shape != shape or W.dtype != dtype:
        got = (W.shape, W.dtype) if isinstance(W, xp.ndarray) else type(W).__name__
        raise ValueError(f"parameter {name!r} must be an array of shape {shape} and dtype "
                         f"{np.dtype(dtype)}, got {got}")
    if not bool(xp.isfinite(W).all()):
        raise ValueError(f"parameter {name!r} contains NaN or Inf")
