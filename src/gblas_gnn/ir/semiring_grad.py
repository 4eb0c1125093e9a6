r"""Aggregations of a program's edge weights and their gradients, on any executor.

For :math:`Z = S \oplus X` with weights :math:`s_{ij}` and messages :math:`X_j`:

* the named aggregations ``sum``, ``mean``, ``max``, ``min`` run the executor's
  ``aggregate`` and ``aggregate_backward`` (``plus_times`` is ``sum``);
* ``avg`` (:math:`Z_i = \sum_j s_{ij} X_j / w_i`, :math:`w_i = \sum_j s_{ij}`, weights
  :math:`\ge 0`): with :math:`G = \bar Z \oslash \mathrm{rep}(w)` (0 where :math:`w_i = 0`),
  :math:`\bar X = S^\top G` and :math:`\bar s_{ij} = \langle G_i, X_j \rangle -
  \langle G_i, Z_i \rangle`;
* a semiring whose :math:`\oplus` is plus, max or min and whose :math:`\otimes` has
  registered partial derivatives :math:`\partial_s, \partial_x`
  (``semirings.register(..., mul_grad=(d_s, d_x))``; the shipped ``min_plus``,
  ``max_plus``, ``max_times`` and ``min_times`` have them): channel by channel,
  :math:`\bar s_{ij} = \sum_c w_{ijc} \bar Z_{ic} \partial_s(s_{ij}, X_{jc})` and
  :math:`\bar X_{jc} = \sum_i w_{ijc} \bar Z_{ic} \partial_x(s_{ij}, X_{jc})`, where
  :math:`w_{ijc} = 1` for plus and, for max/min, marks the winner of :math:`(i, c)`: the
  extreme message, ties to the first stored entry (the lowest source id), the rule of the
  named ``max`` and ``min`` on every executor;
* any other semiring runs forward; its backward raises ``ValueError`` naming it.

``spmm_t`` (:math:`Z = S^\top X`) has the gradient of ``sum``: :math:`\bar X = S \bar Z`,
:math:`\bar s_{ij} = \langle X_i, \bar Z_j \rangle`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import semirings
from ..semirings.aggregations import is_named

__all__ = ["semiring_forward", "semiring_backward", "winners", "differentiable"]


@dataclass
class _SemiringContext:
    sr: Any
    S: Any
    X: Any
    Z: Any = None


@dataclass
class _NoBackward:
    name: str


def _named(aggr) -> str | None:
    """The named aggregation ``aggr`` stands for, if any: itself, or ``sum`` for a semiring
    whose ⊕ is + and ⊗ is × (``plus_times``)."""
    if is_named(aggr):
        return aggr
    algebra = semirings.get(aggr).algebra
    return "sum" if algebra.linear and algebra.divide is None else None


def differentiable(aggr) -> bool:
    """Whether aggregating over ``aggr`` has a backward: a named aggregation, the weighted
    mean, or a ⊕ of plus, max or min with a ⊗ that gives its partial derivatives."""
    if _named(aggr) is not None:
        return True
    sr = semirings.get(aggr)
    return sr.algebra.weighted_mean or (sr.algebra.add is not None and sr.mul_grad is not None)


def semiring_forward(ex, transposed: bool, aggr, S, X, keep: bool):
    """``(Z, ctx)`` of ``Z = S ⊕ X`` or, ``transposed``, ``Z = Sᵀ ⊕ X``; ``ctx`` is None
    unless ``keep``."""
    named = _named(aggr)
    if transposed:
        sr = semirings.plus_times if named == "sum" else semirings.get(aggr)
        ok = sr.algebra.linear and sr.algebra.divide is None
        Z = ex.spmm_t(S, X, sr)
        return Z, (_SemiringContext(sr, S, X) if ok else _NoBackward(sr.name)) if keep else None
    if named is not None:
        if not keep:
            return ex.aggregate(S, X, named), None
        return ex.aggregate(S, X, named, keep_context=True)
    sr = semirings.get(aggr)
    Z = ex.spmm(S, X, sr)                   # (which refuses avg's negative weights)
    if not keep:
        return Z, None
    if not differentiable(sr):
        return Z, _NoBackward(sr.name)
    return Z, _SemiringContext(sr, S, X, Z)


def semiring_backward(ex, transposed: bool, aggr, ctx, dZ):
    """``(dS, dX)`` of :func:`semiring_forward` for the cotangent ``dZ``."""
    if isinstance(ctx, _NoBackward):
        raise ValueError(f"the semiring {ctx.name!r} has no backward: gradients flow through "
                         "the named aggregations ('sum', 'mean', 'max', 'min'), 'avg', and "
                         "semirings whose ⊕ is plus, max or min and whose ⊗ registers its "
                         "partial derivatives (semirings.register(..., mul_grad=...))")
    if transposed:
        return _spmm_t_backward(ex, ctx, dZ)
    if not isinstance(ctx, _SemiringContext):
        return ex.aggregate_backward(ctx, dZ)
    if ctx.sr.algebra.weighted_mean:
        return _avg_backward(ex, ctx, dZ)
    return _generic_backward(ex, ctx, dZ)


def _spmm_t_backward(ex, ctx: _SemiringContext, dZ):
    # Z_j = Σ_i S_ij X_i:  dX = S dZ,  dS_ij = <X_i, dZ_j>
    return ex.sddmm(ctx.S, ctx.X, dZ), ex.spmm(ctx.S, dZ)


def _avg_backward(ex, ctx: _SemiringContext, dZ):
    xp = ex.xp
    w = ex.row_reduce(ctx.S, "sum")
    pos = w > 0
    G = xp.where(pos[:, None], dZ / xp.where(pos, w, w.dtype.type(1))[:, None],
                 dZ.dtype.type(0))
    dX = ex.spmm_t(ctx.S, G)
    t = ex.row_dot(G, ctx.Z)
    dS = ex.row_scale(ex.sddmm(ctx.S, G, ctx.X), t, "minus")
    return dS, dX


def _generic_backward(ex, ctx: _SemiringContext, dZ):
    xp = ex.xp
    sr, S = ctx.sr, ctx.S
    d_s, d_x = sr.mul_grad
    add = sr.algebra.add
    s = xp.asarray(ex.edge_values(S), dtype=dZ.dtype)
    Xc = ex.columns(S, ctx.X)
    dS = xp.zeros_like(s)
    dX = xp.zeros(ctx.X.shape, dZ.dtype)
    for c in range(dZ.shape[1]):
        h = ex.gather_columns(S, xp.ascontiguousarray(Xc[:, c]))
        gz = ex.gather_rows(S, xp.ascontiguousarray(dZ[:, c]))
        if add != "plus":
            win = winners(ex, S, xp.asarray(sr.mul(s, h), dtype=s.dtype), add == "max")
            gz = xp.where(win, gz, gz.dtype.type(0))
        dS += gz * _as_edges(xp, d_s(s, h), s)
        dX[:, c] = ex.col_reduce(ex.edge_from_values(S, gz * _as_edges(xp, d_x(s, h), s)),
                                 "sum")
    return ex.edge_from_values(S, dS), dX


def _as_edges(xp, v, like):
    """A derivative's value (an array or a number) as an array over the edges."""
    return xp.broadcast_to(xp.asarray(v, dtype=like.dtype), like.shape)


def winners(ex, A, values, is_max: bool, rows: bool = True):
    """The winning edge of every row (``rows``) or column of ``A`` for edge ``values``: the
    extreme value, ties to the first stored entry (the lowest source id in a row, the lowest
    target id in a column). A boolean array over the edges."""
    xp = ex.xp
    op = "max" if is_max else "min"
    E = ex.edge_from_values(A, values)
    reduce = ex.row_reduce if rows else ex.col_reduce
    gather = ex.gather_rows if rows else ex.gather_cols
    best = reduce(E, op)
    hit = values == gather(A, best)
    ids = xp.asarray(ex.edge_ids(A)[1 if rows else 0], dtype=np.float64)
    candidate = xp.where(hit, ids, np.inf)
    first = reduce(ex.edge_from_values(A, candidate), "min")
    return hit & (ids == gather(A, first))
