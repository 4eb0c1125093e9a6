r"""Vanilla attention (VA): :math:`\Psi = A \odot (H H^\top)`, :math:`Z = \Psi \oplus (H W)`.

The module also holds the projection-aggregation step :math:`Z = \Psi \oplus (H W)` with its
backward (:func:`project_aggregate`, :func:`project_aggregate_backward`), shared by every
layer whose attention matrix ``Ψ`` is computed first and then aggregates projected features
(VA, AGNN). Derivations: ``docs/derivation_agnn_va.md``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validate import positive_ints
from .init import glorot
from .module import Module

__all__ = ["VAConv", "AGGREGATIONS", "check_aggr", "project_aggregate",
           "project_aggregate_backward"]

AGGREGATIONS = ("sum", "max", "min", "mean")
ORDERS = ("auto", "aggregate_first", "project_first")


# ---------------------------------------------------------------------- shared helpers
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
    sr = _semirings()
    if sr is None:
        raise ValueError(f"aggr must be one of {AGGREGATIONS} or a semiring, got {aggr!r}")
    try:
        sr.get(aggr)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"aggr must be one of {AGGREGATIONS} or a semiring, "
                         f"got {aggr!r}") from exc
    return aggr


def is_named(aggr: Any) -> bool:
    """True for the aggregations with a backward (``sum``/``max``/``min``/``mean``)."""
    return isinstance(aggr, str) and aggr in AGGREGATIONS


def check_order(order: str) -> str:
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    return order


def project_aggregate(ex, Psi, H: np.ndarray, W: np.ndarray | None, aggr: Any,
                      order: str = "auto", keep: bool = False
                      ) -> tuple[np.ndarray, dict | None]:
    r"""``Z = Ψ ⊕ (H W)`` (``Ψ ⊕ H`` when ``W`` is None) and, with ``keep``, the cache.

    For the linear aggregations (``sum``, ``mean``) ``(Ψ ⊕ H) W = Ψ ⊕ (H W)``, so the
    aggregation runs at the smaller feature width (``order="auto"``: aggregate first iff
    ``in_dim < out_dim``); ``max``/``min`` and semirings always project first.
    """
    agg_first = (W is not None and isinstance(aggr, str) and aggr in ("sum", "mean")
                 and (order == "aggregate_first"
                      or (order == "auto" and W.shape[0] < W.shape[1])))
    named = is_named(aggr)
    if agg_first:
        if keep:
            Y, ctx = ex.aggregate(Psi, H, aggr, keep_context=True)
        else:
            Y, ctx = ex.aggregate(Psi, H, aggr), None
        Z = ex.gemm(Y, W)
    else:
        X = H if W is None else ex.gemm(H, W)
        if keep and named:
            Z, ctx = ex.aggregate(Psi, X, aggr, keep_context=True)
        else:
            Z, ctx = ex.aggregate(Psi, X, aggr), None
    if not keep:
        return Z, None
    if not named:
        # a semiring has no backward: remember only that, so backward can say so
        return Z, {"semiring": aggr}
    cache = {"ctx": ctx, "agg_first": agg_first, "W": W}
    if agg_first:
        cache["Y"] = Y
    elif W is not None:
        cache["H"] = H
    return Z, cache


def check_backward_aggr(cache: dict) -> None:
    """Raise the ``ValueError`` of a training-mode backward through a semiring."""
    if "semiring" in cache:
        raise ValueError(f"backward is defined for the aggregations {AGGREGATIONS} only, "
                         f"not for the semiring {cache['semiring']!r}; use a semiring in "
                         "evaluation mode (module.eval()) or pick a named aggregation")


def project_aggregate_backward(ex, cache: dict, dZ: np.ndarray, need_dPsi: bool = True):
    r"""Backward of :func:`project_aggregate`: ``(dΨ, dH, dW)``.

    ``dΨ`` is an edge tensor on Ψ's pattern (None unless ``need_dPsi``); ``dW`` is None
    without ``W``. Aggregate-first (``Y = Ψ ⊕ H``, ``Z = Y W``): ``dW = Yᵀ dZ`` and the
    aggregation backward runs on ``dY = dZ Wᵀ``. Project-first (``X = H W``, ``Z = Ψ ⊕ X``):
    the aggregation backward gives ``dX``, then ``dW = Hᵀ dX``, ``dH = dX Wᵀ``.
    """
    check_backward_aggr(cache)
    W, ctx = cache["W"], cache["ctx"]
    dW = None
    if cache["agg_first"]:
        dW = ex.gemm(cache["Y"], dZ, trans_a=True)
        dPsi, dH = ex.aggregate_backward(ctx, ex.gemm(dZ, W, trans_b=True), need_dPsi)
    else:
        dPsi, dX = ex.aggregate_backward(ctx, dZ, need_dPsi)
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


# ---------------------------------------------------------------------- the layer
class VAConv(Module):
    r"""Vanilla attention layer (Besta et al., SC'23, global formulation).

    .. math::
        \Psi = A \odot (H H^\top) \quad(\text{or } \mathrm{sm}(A \odot (H H^\top))
        \text{ with } \texttt{softmax=True}), \qquad Z = \Psi \oplus (H W)

    i.e. :math:`Z_i = \bigoplus_{j \in N(i)} \Psi_{ij} (H W)_j` with
    :math:`\Psi_{ij} = \langle H_i, H_j\rangle`. ``Ψ`` uses A's *pattern* only (edge values
    are ignored); the softmax is grouped by target vertex (rows of ``A``). No activation.

    Args:
        in_dim: input feature size ``k``.
        out_dim: output feature size.
        softmax: normalise the scores with the row softmax :math:`\mathrm{sm}`.
        add_self_loops: add the missing self loops first (PyG ``add_remaining_self_loops``).
        aggr: ``"sum"`` (default), ``"max"``, ``"min"``, ``"mean"`` over the weighted
            messages :math:`\Psi_{ij} (HW)_j` (an empty row gives 0), or a semiring (name or
            object from :mod:`gblas_gnn.semirings`; forward only: a training-mode backward
            through a semiring raises ``ValueError``).
        seed: seed of the Glorot initialisation of ``W``.
        dtype: ``np.float32`` (default) or ``np.float64``.
        executor: ``None``/``"cpu"`` or an :class:`~gblas_gnn.executors.Executor`.

    Attributes:
        order: ``"auto"`` (default), ``"aggregate_first"`` or ``"project_first"``: for the
            linear aggregations ``sum``/``mean``, :math:`(\Psi H) W` and :math:`\Psi (H W)`
            are equal; ``"auto"`` aggregates at the smaller of ``in_dim``, ``out_dim``.

    Shapes:
        - **input:** graph with n vertices (``Graph``, ``scipy.sparse`` or
          ``graphblas.Matrix``), features ``H`` (n, in_dim)
        - **output:** (n, out_dim)
        - **params:** ``W`` (in_dim, out_dim)
    """

    def __init__(self, in_dim: int, out_dim: int, softmax: bool = False,
                 add_self_loops: bool = True, aggr: Any = "sum", seed: int = 0,
                 dtype=np.float32, executor=None):
        super().__init__(dtype, executor)
        positive_ints(in_dim=in_dim, out_dim=out_dim)
        self.in_dim, self.out_dim = int(in_dim), int(out_dim)
        self.softmax = bool(softmax)
        self.add_self_loops = bool(add_self_loops)
        self.aggr = check_aggr(aggr)
        self._order = "auto"
        rng = np.random.default_rng(seed)
        self.params["W"] = glorot((self.in_dim, self.out_dim), rng, self.dtype)
        self.zero_grad()

    @property
    def order(self) -> str:
        """Evaluation order of the linear aggregations (see the class docstring)."""
        return self._order

    @order.setter
    def order(self, value: str) -> None:
        self._order = check_order(value)

    def __repr__(self) -> str:
        return (f"VAConv({self.in_dim}, {self.out_dim}, softmax={self.softmax}, "
                f"aggr={self.aggr!r})")

    def forward(self, g, H: np.ndarray) -> np.ndarray:
        g, H = self._prepare(g, H, self.in_dim)
        W = self.params["W"]
        check_weight(W, (self.in_dim, self.out_dim), self.dtype)
        if self.add_self_loops:
            g = g.with_self_loops()
        ex = self.executor
        Psi = ex.sddmm(g.A, H, H)                        # A ⊙ (H Hᵀ), masked SDDMM
        if self.softmax:
            Psi = ex.softmax(Psi)
        Z, pa = project_aggregate(ex, Psi, H, W, self.aggr, self._order, keep=self.training)
        if self.training:
            self._cache = {"H": H, "Psi": Psi, "pa": pa, "shape": Z.shape}
        else:
            self._cache = None
        return Z

    def backward(self, dout: np.ndarray) -> np.ndarray:
        c = self._need_cache()
        check_backward_aggr(c["pa"])
        dout = self._check_dout(dout, c["shape"])
        ex, H = self.executor, c["H"]
        dPsi, dH, dW = project_aggregate_backward(ex, c["pa"], dout)
        dS = ex.softmax_backward(c["Psi"], dPsi) if self.softmax else dPsi
        # Ψ = A ⊙ (H Hᵀ):  dH += (dS + dSᵀ) H  as an SpMM and an SpMM with the transpose
        dH = dH + ex.spmm(dS, H) + ex.spmm_t(dS, H)
        self.grads = {"W": dW}
        return dH
