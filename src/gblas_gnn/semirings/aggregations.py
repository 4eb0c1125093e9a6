"""The named aggregations: ``aggr`` as a layer or an edge program takes it.

``"sum"``, ``"mean"``, ``"max"`` and ``"min"`` have a backward on every executor
(:data:`AGGREGATIONS`); any other ``aggr`` is a registered semiring, by name or as an object
(forward only unless its ⊗ has derivatives).
"""

from __future__ import annotations

from typing import Any

from .algebra import Algebra
from .registry import get, names

__all__ = ["AGGREGATIONS", "is_named", "check_aggregation", "algebra_of"]

#: the aggregations with a backward; any other ``aggr`` is a semiring (forward only)
AGGREGATIONS = ("sum", "max", "min", "mean")

#: what each named aggregation of ``S ⊙ X`` is: ``Σ_j S_ij X_j``, its row mean, or the
#: max / min of the products
_NAMED = {"sum": Algebra("plus", "times"), "mean": Algebra("plus", "times", "count"),
          "max": Algebra("max", "times"), "min": Algebra("min", "times")}


def is_named(aggr: Any) -> bool:
    """True for the aggregations with a backward (:data:`AGGREGATIONS`)."""
    return isinstance(aggr, str) and aggr in AGGREGATIONS


def check_aggregation(aggr: Any) -> Any:
    """``aggr`` if it is a named aggregation or a registered semiring (name or object);
    ``ValueError`` otherwise (before any work)."""
    if is_named(aggr):
        return aggr
    try:
        get(aggr)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"unknown aggregation {aggr!r}: use one of {AGGREGATIONS} or a "
                         f"semiring from gblas_gnn.semirings {names()}") from exc
    return aggr


def algebra_of(aggr: Any) -> Algebra:
    """The :class:`~.algebra.Algebra` of a named aggregation or a semiring (name or
    object)."""
    if is_named(aggr):
        return _NAMED[aggr]
    return get(aggr).algebra
