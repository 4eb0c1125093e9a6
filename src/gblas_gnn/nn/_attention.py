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

from typing import Any

import numpy as np

__all__ = ["AGGREGATIONS", "ORDERS", "check_aggr", "is_named", "check_order",
           "EdgeAggregation", "DotAttention", "project_aggregate",
           "project_aggregate_backward", "check_backward_aggr", "check_weight", "OrderMixin"]

AGGREGATIONS = ("sum", "max", "min", "mean")
ORDERS = ("auto", "aggregate_first", "project_first")


def _semirings():
    try:
        from .. import semirings
    except ImportError:  # the semiring package is optional for the named aggregations
        return None
    return semirings


def check_aggr(aggr: Any) -> Any:
    """Validate ``aggr``: ``"sum" | "max" | "min" | "mean"`` or a semiring (name or object).

    Raises ``ValueError`` for anything else (before any work).
    """
    if isinstance(aggr, str):
        if aggr in AGGREGATIONS:
            return aggr
        sr = _semirings()
        names = sorted(sr.names()) if sr is not None else []
        if aggr not in names:
            raise ValueError(f"unknown aggregation {aggr!r}; use one of {AGGREGATIONS} "
                             f"or a semiring from {names}")
        return aggr
    message = (f"unknown aggregation {aggr!r}: aggr must be one of {AGGREGATIONS} or a "
               "semiring from gblas_gnn.semirings")
    sr = _semirings()
    if sr is None:
        raise ValueError(message)
    try:
        sr.get(aggr)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(message) from exc
    return aggr


def is_named(aggr: Any) -> bool:
    """True for the aggregations with a backward (``sum``/``max``/``min``/``mean``)."""
    return isinstance(aggr, str) and aggr in AGGREGATIONS


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

    def forward(self, X: np.ndarray, keep: bool):
        if keep:
            return self.ex.aggregate(self.Psi, X, self.aggr, keep_context=True)
        return self.ex.aggregate(self.Psi, X, self.aggr), None

    def backward(self, ctx, dZ: np.ndarray, need_dPsi: bool = True):
        return self.ex.aggregate_backward(ctx, dZ, need_dPsi)


class DotAttention:
    r"""``Z = sm(β · A ⊙ (P Qᵀ)) ⊕ X`` as one executor operation (fused on the cpu);
    backward gives ``((dP, dQ, dβ), dX)``.

    ``factored = (H, c)`` says that ``H = diag(c) Q``: aggregating ``X = H`` then runs as
    messages ``c_j Q_j``, so scores and messages read the same rows of ``Q``.
    """

    def __init__(self, ex, A, P: np.ndarray, Q: np.ndarray, beta: float, aggr: Any,
                 factored: tuple[np.ndarray, np.ndarray] | None = None):
        self.ex, self.A, self.P, self.Q, self.beta, self.aggr = ex, A, P, Q, beta, aggr
        self.factored = factored

    def forward(self, X: np.ndarray, keep: bool):
        scale = None
        if self.factored is not None and X is self.factored[0]:
            X, scale = self.Q, self.factored[1]
        result = self.ex.dot_attention(self.A, self.P, self.Q, self.beta, X, self.aggr,
                                       keep_context=keep, scale=scale)
        return result if keep else (result, None)

    def backward(self, ctx, dZ: np.ndarray, need_dPsi: bool = True):
        dP, dQ, dbeta, dX = self.ex.dot_attention_backward(ctx, dZ)
        return (dP, dQ, dbeta), dX


def project_aggregate(ex, agg, H: np.ndarray, W: np.ndarray | None, order: str = "auto",
                      keep: bool = False) -> tuple[np.ndarray, dict | None]:
    r"""``Z = Ψ ⊕ (H W)`` (``Ψ ⊕ H`` when ``W`` is None) and, with ``keep``, the cache.

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
        # a semiring has no backward: remember only that, so backward can say so
        return Z, {"semiring": aggr}
    cache = {"agg": agg, "ctx": ctx, "agg_first": agg_first, "W": W}
    if agg_first:
        cache["Y"] = Y
    elif W is not None:
        cache["H"] = H
    return Z, cache


def check_backward_aggr(cache: dict) -> None:
    """Raise the ``ValueError`` of a training-mode backward through a semiring."""
    if "semiring" in cache:
        semiring = cache["semiring"]
        name = semiring if isinstance(semiring, str) else getattr(semiring, "name", semiring)
        raise ValueError(f"the semiring aggregation {name!r} is forward-only: "
                         f"backward is defined for the aggregations {AGGREGATIONS} only; use "
                         "a semiring in evaluation mode (module.eval()) or pick a named "
                         "aggregation")


def project_aggregate_backward(ex, cache: dict, dZ: np.ndarray, need_dPsi: bool = True):
    r"""Backward of :func:`project_aggregate`: ``(dΨ, dH, dW)``.

    ``dΨ`` is what the aggregation's backward gives for its attention input (an edge tensor
    for :class:`EdgeAggregation`, None unless ``need_dPsi``); ``dW`` is None without ``W``.
    Aggregate-first (``Y = Ψ ⊕ H``, ``Z = Y W``): ``dW = Yᵀ dZ`` and the aggregation
    backward runs on ``dY = dZ Wᵀ``. Project-first (``X = H W``, ``Z = Ψ ⊕ X``): the
    aggregation backward gives ``dX``, then ``dW = Hᵀ dX``, ``dH = dX Wᵀ``.
    """
    check_backward_aggr(cache)
    W, ctx, agg = cache["W"], cache["ctx"], cache["agg"]
    dW = None
    if cache["agg_first"]:
        dW = ex.gemm(cache["Y"], dZ, trans_a=True)
        dPsi, dH = agg.backward(ctx, ex.gemm(dZ, W, trans_b=True), need_dPsi)
    else:
        dPsi, dX = agg.backward(ctx, dZ, need_dPsi)
        if W is None:
            dH = dX
        else:
            dW = ex.gemm(cache["H"], dX, trans_a=True)
            dH = ex.gemm(dX, W, trans_b=True)
    return dPsi, dH, dW


def check_weight(W: np.ndarray, shape: tuple[int, int], dtype, name: str = "W") -> None:
    """A parameter must keep its shape, dtype and finiteness (optimisers write in place)."""
    if not isinstance(W, np.ndarray) or W.shape != shape or W.dtype != dtype:
        got = (W.shape, W.dtype) if isinstance(W, np.ndarray) else type(W).__name__
        raise ValueError(f"parameter {name!r} must be an ndarray of shape {shape} and dtype "
                         f"{np.dtype(dtype)}, got {got}")
    if not np.isfinite(W).all():
        raise ValueError(f"parameter {name!r} contains NaN or Inf")
