r"""Vanilla attention (VA): :math:`\Psi = A \odot (H H^\top)`, :math:`Z = \Psi \oplus (H W)`,
composed (forward only: the backward is derived and runs as generated kernels).

The projection-aggregation step :math:`Z = \Psi \oplus (H W)` (:func:`project_aggregate`)
and the ``aggr``/``order`` checks live in :mod:`gblas_gnn.nn._attention` (shared with AGNN
and GAT); they are re-exported here. Derivations: ``docs/derivation_agnn_va.md``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import ops
from .._validate import positive_ints
from ..ops import factor
from ._attention import AGGREGATIONS, OrderMixin, check_aggr, project_aggregate
from ._attention import ORDERS as ORDERS  # re-exported: the names va.py used to define
from ._attention import check_order as check_order
from ._attention import is_named as is_named
from .init import glorot
from .module import Module

__all__ = ["VAConv", "AGGREGATIONS", "check_aggr", "project_aggregate"]

# ---------------------------------------------------------------------- the layer
class VAConv(OrderMixin, Module):
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
        self.add_param("W", glorot((self.in_dim, self.out_dim), rng, self.dtype))

    def __repr__(self) -> str:
        return (f"VAConv({self.in_dim}, {self.out_dim}, softmax={self.softmax}, "
                f"aggr={self.aggr!r})")

    def forward(self, g, H):
        # the graph, not its matrix: structure() reads the executors' pattern of A + I,
        # and no graphblas.Matrix of it is built (issue 21)
        A = g.with_self_loops() if self.add_self_loops else g
        Psi = ops.structure(A) * (factor(H) @ factor(H).T)      # A ⊙ (H Hᵀ), one SDDMM
        if self.softmax:
            Psi = ops.softmax(Psi)
        return project_aggregate(Psi, H, self.params["W"], self.aggr, self._order)
