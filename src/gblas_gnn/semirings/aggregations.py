"""The named aggregations: ``aggr`` as a layer or an edge program takes it.

``"sum"``, ``"mean"``, ``"max"`` and ``"min"`` have a backward on every executor
(:data:`AGGREGATIONS`); any other ``aggr`` is a registered semiring, by name or as an object
(forward only unless its ⊗ has derivatives).
"""

from __future__ import annotations

from typing import Any

from .registry import get, names

__all__ = ["AGGREGATIONS", "is_named", "check_aggregation"]

#: the aggregations with a backward; any other ``aggr`` is a semiring (forward only)
AGGREGATIONS = ("sum", "max", "min", "mean")


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
