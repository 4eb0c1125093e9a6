r"""Helpers shared by the attention layers (:class:`~gblas_gnn.nn.GATConv`,
:class:`~gblas_gnn.nn.AGNNConv`, :class:`~gblas_gnn.nn.VAConv`).

- :func:`check_aggr` / :func:`is_named`: ``aggr`` validation (named aggregation or semiring);
- :func:`check_order`: the ``order`` attribute (``"auto"``, ``"aggregate_first"``,
  ``"project_first"``);
- :func:`project_aggregate`: the projection-aggregation step :math:`Z = \Psi \oplus (H W)`
  (:math:`\Psi \oplus H` without ``W``) in the cheaper order, composed (its backward is
  derived);
- :func:`affine`: the projections ``H W + b`` of the composed layers.

Derivations: ``docs/derivation_agnn_va.md`` and ``docs/derivation_gat.md``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..compose.segments import segment_linear
from ..edge_attr import check_fill_value
from ..executors.base import AGGREGATIONS, check_aggregation, is_named

__all__ = ["AGGREGATIONS", "ORDERS", "check_aggr", "is_named", "check_order",
           "aggregates_first", "project_aggregate", "OrderMixin", "affine", "project",
           "edge_dim_of", "features_of", "check_edge_options"]

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

    def aggregates_first(self) -> bool:
        r"""Whether the next forward computes :math:`(\Psi \oplus H) W`."""
        W = self.params.get("W")
        return aggregates_first(self.aggr, self._order, self.in_dim,
                                None if W is None else self.out_dim)

    @property
    def order(self) -> str:
        """Evaluation order of the linear aggregations (see the class docstring)."""
        return self._order

    @order.setter
    def order(self, value: str) -> None:
        self._order = check_order(value)


def aggregates_first(aggr, order: str, in_dim: int, out_dim: int | None) -> bool:
    r"""Whether :math:`Z = \Psi \oplus (H W)` runs as :math:`(\Psi \oplus H) W`: only for the
    linear aggregations ``sum``/``mean`` with a ``W``; ``"auto"`` when ``in_dim <
    out_dim`` (the aggregation then runs at the smaller width)."""
    linear = isinstance(aggr, str) and aggr in ("sum", "mean") and out_dim is not None
    return linear and (order == "aggregate_first" or (order == "auto" and in_dim < out_dim))


def project_aggregate(P, H, W, aggr, order: str = "auto"):
    r""":math:`Z = \Psi \oplus (H W)` (:math:`\Psi \oplus H` when ``W`` is None) in the
    order :func:`aggregates_first` picks, composed (traced ``H`` and ``W``, a lazy ``Ψ``):
    for ``sum`` and ``mean``, :math:`(\Psi \oplus H) W = \Psi \oplus (H W)`;
    ``max``/``min`` and semirings always project first.
    """
    from .. import ops

    if W is None:
        return ops.aggregate(P, H, aggr)
    if aggregates_first(aggr, order, W.shape[0], W.shape[1]):
        return ops.aggregate(P, H, aggr) @ W
    return ops.aggregate(P, H @ W, aggr)


def edge_dim_of(edge_dim) -> int | None:
    """``edge_dim`` validated: None (no edge features) or a positive integer."""
    if edge_dim is None:
        return None
    if isinstance(edge_dim, bool) or not isinstance(edge_dim, (int, np.integer)) \
            or edge_dim < 1:
        raise ValueError(f"edge_dim must be a positive integer or None, got {edge_dim!r}")
    return int(edge_dim)


def check_edge_options(layer: str, edge_dim, fill_value) -> tuple[int | None, Any]:
    """``(edge_dim, fill_value)`` of an attention layer, validated before any work."""
    edge_dim = edge_dim_of(edge_dim)
    if edge_dim is not None:
        check_fill_value(fill_value, edge_dim)
    elif not (isinstance(fill_value, str) and fill_value == "mean"):
        raise ValueError(f"{layer}: fill_value is the self loops' edge features, which "
                         "need edge_dim")
    return edge_dim, fill_value


def features_of(layer: str, g, edge_dim: int):
    """The edge features of the graph ``g`` (a graph with or without self loops) for a
    layer of ``edge_dim`` features: a clear error when it has none or another width."""
    feats = getattr(g, "edge_attr", None)
    if feats is None:
        raise ValueError(f"{layer}(edge_dim={edge_dim}) needs a graph with edge features: "
                         "Graph.from_edge_index(edge_index, n, edge_attr=E)")
    if feats.f != edge_dim:
        raise ValueError(f"{layer}(edge_dim={edge_dim}) got edge features of width "
                         f"{feats.f}")
    return feats


def project(H, W, bias=None):
    """``H W + b`` of a vertex-indexed ``H`` (``H W`` without a bias). With a bias, one op
    over every row (:func:`~gblas_gnn.ops.segment_linear`): the bias is added to each block
    of the product's rows as it is written, where ``H @ W + b`` made a second pass and an
    (n, k) array of its own."""
    if bias is None:
        return H @ W
    return segment_linear(H, [(slice(0, H.shape[0]), W, bias)], W.shape[1])


def affine(params: dict, H, suffix: str):
    """``H W_s + b_s`` of the parameters ``W_<suffix>`` and (when declared) ``b_<suffix>``
    (:func:`project`): the projections of the composed attention layers."""
    return project(H, params[f"W_{suffix}"], params.get(f"b_{suffix}"))
