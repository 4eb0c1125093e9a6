r"""GraphSAGE (Hamilton et al., 2017), composed: the forward only, the backward derived."""

from __future__ import annotations

import numpy as np

from .. import ops
from .._validate import check_bools, positive_ints
from ._attention import project
from ._interop import PyGInterop
from .init import glorot, zeros
from .module import Module

__all__ = ["SAGEConv", "SAGE_AGGREGATIONS"]

#: the neighbourhood aggregations of :class:`SAGEConv` (PyG's names: ``"add"`` is ``"sum"``)
SAGE_AGGREGATIONS = ("mean", "max", "sum")


class SAGEConv(PyGInterop, Module):
    r"""GraphSAGE convolution, exactly PyTorch Geometric's ``SAGEConv``.

    .. math::
        X &= \mathrm{ReLU}(H W_p + b_p) \ \ (\text{with } \texttt{project}) \text{ else } H \\
        Z &= \big(\textstyle\bigoplus_{j \in N(i)} X_j\big) W_l + b_l
             \;+\; H W_r \ \ (\text{with } \texttt{root\_weight}) \\
        Z_i &\leftarrow Z_i / \max(\lVert Z_i \rVert_2, 10^{-12})
             \ \ (\text{with } \texttt{normalize})

    :math:`\bigoplus` is the mean, the feature-wise maximum or the sum over the in-neighbours
    ``j → i`` of the stored edges (A's *pattern*: edge values are ignored, and no self loops
    are added, as in PyG); a vertex without in-edges aggregates to 0. The aggregation runs on
    the pattern as one composed program (``ops.aggregate(ops.structure(g), X, aggr)``), so its
    backward is derived and the same layer runs on every executor. For ``mean`` and ``sum``
    the projection and the aggregation commute, and the layer aggregates at the smaller of
    ``in_dim`` and ``out_dim``: :math:`(\bigoplus X) W_l = \bigoplus (X W_l)`.

    As PyG: the bias :math:`b_l` belongs to the neighbours' projection (``lin_l``), the root
    projection (``lin_r``) has none, and ``project`` maps the neighbours' features only (the
    root term reads ``H``).

    Args:
        in_dim: input feature size.
        out_dim: output feature size.
        aggr: ``"mean"`` (default), ``"max"`` or ``"sum"``.
        normalize: scale every output row to unit length.
        root_weight: add the root term :math:`H W_r`.
        project: project the neighbours' features first, :math:`\mathrm{ReLU}(H W_p + b_p)`.
        bias: the bias :math:`b_l`.
        seed, dtype, executor: as every layer.

    Shapes:
        - input: graph with n vertices, H (n, in_dim); output (n, out_dim)
        - params: ``W_l`` (in_dim, out_dim), ``b_l`` (out_dim,) with ``bias``, ``W_r``
          (in_dim, out_dim) with ``root_weight``, ``W_p`` (in_dim, in_dim) and ``b_p``
          (in_dim,) with ``project``
    """

    def __init__(self, in_dim: int, out_dim: int, aggr: str = "mean", normalize: bool = False,
                 root_weight: bool = True, project: bool = False, bias: bool = True,
                 seed: int = 0, dtype=np.float32, executor=None):
        super().__init__(dtype, executor)
        positive_ints(in_dim=in_dim, out_dim=out_dim)
        check_bools(normalize=normalize, root_weight=root_weight, project=project, bias=bias)
        if not isinstance(aggr, str) or aggr not in SAGE_AGGREGATIONS:
            raise ValueError(f"SAGEConv aggr must be one of {SAGE_AGGREGATIONS}, got {aggr!r}")
        self.in_dim, self.out_dim, self.aggr = int(in_dim), int(out_dim), aggr
        self.normalize, self.root_weight, self.project = normalize, root_weight, project
        rng = np.random.default_rng(seed)
        if project:
            self.add_param("W_p", glorot((self.in_dim, self.in_dim), rng, self.dtype))
            self.add_param("b_p", zeros((self.in_dim,), self.dtype))
        self.add_param("W_l", glorot((self.in_dim, self.out_dim), rng, self.dtype))
        if bias:
            self.add_param("b_l", zeros((self.out_dim,), self.dtype))
        if root_weight:
            self.add_param("W_r", glorot((self.in_dim, self.out_dim), rng, self.dtype))

    def aggregates_first(self) -> bool:
        """Whether the forward aggregates the ``in_dim`` features and projects after
        (always for ``max``; for ``mean`` and ``sum`` when ``in_dim ≤ out_dim``)."""
        return self.aggr == "max" or self.in_dim <= self.out_dim

    def forward(self, g, H):
        p = self.params
        X = ops.relu(project(H, p["W_p"], p["b_p"])) if self.project else H
        S = ops.structure(g)                    # the pattern: edge values are not read
        if self.aggregates_first() and self.root_weight:
            # [AGG(X) | H] [W_l; W_r] + b_l as one op over every row: the products summed and
            # biased as they are written, no (n, out) term or sum of their own
            rows = slice(0, H.shape[0])
            Z = ops.segment_linear([ops.aggregate(S, X, self.aggr), H],
                                   [(rows, [p["W_l"], p["W_r"]], p.get("b_l"))], self.out_dim)
            return ops.normalize(Z) if self.normalize else Z
        if self.aggregates_first():            # the bias added as the product writes its rows
            Z = project(ops.aggregate(S, X, self.aggr), p["W_l"], p.get("b_l"))
        else:
            Z = ops.aggregate(S, X @ p["W_l"], self.aggr)
            if "b_l" in p:
                Z = Z + p["b_l"]
        if self.root_weight:
            Z = Z + H @ p["W_r"]
        return ops.normalize(Z) if self.normalize else Z

    def __repr__(self) -> str:
        return f"SAGEConv({self.in_dim}, {self.out_dim}, aggr={self.aggr!r})"
