r"""GINE (Hu et al., 2020): the graph isomorphism layer with edge features, composed."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import ops
from ..ops import rep
from ._attention import edge_dim_of, features_of, project
from ._interop import PyGInterop
from .gin import _check_eps, _check_mlp_dims
from .linear import Linear
from .module import Module

__all__ = ["GINEConv"]


class GINEConv(PyGInterop, Module):
    r"""Graph isomorphism layer with edge features, exactly PyTorch Geometric's ``GINEConv``
    with an ``MLP`` as its network.

    .. math::
        Z_i = \mathrm{MLP}\Big((1 + \varepsilon) H_i + \textstyle\sum_{j \to i}
              \mathrm{ReLU}\big(H_j + e_{ji} W_e + b_e\big)\Big)

    over the stored edges ``j → i`` (no self loops are added), :math:`e_{ji}` the features of
    the edge (:attr:`gblas_gnn.Graph.edge_attr`); without ``edge_dim`` they must have
    ``mlp_dims[0]`` features and are added as they are. The messages are computed at the
    edges in the aggregation's own pass (:func:`gblas_gnn.ops.aggregate` of an expression):
    the forward reads the features once per edge, and the backward reduces
    :math:`\partial W_e` over the edges there, with no |E|×k array either way. The MLP is
    :class:`~gblas_gnn.nn.GINConv`'s: ReLU between the linear layers, none after the last.

    Args:
        mlp_dims: feature sizes ``[in_dim, hidden..., out_dim]`` of the MLP (≥ 2 entries).
        eps: the initial :math:`\varepsilon`.
        train_eps: learn :math:`\varepsilon` (parameter ``eps``); otherwise it is fixed.
        edge_dim: features per edge, projected to ``in_dim`` by ``W_e``, ``b_e`` (None: the
            features are added as they are).
        seed, dtype, executor: as every layer.

    Shapes:
        - input: graph with n vertices and edge features, H (n, in_dim)
        - output: Z (n, out_dim)
        - params: ``lin{l}_W``, ``lin{l}_bias`` of the MLP, ``eps`` (1,) when
          ``train_eps``, ``W_e`` (edge_dim, in_dim) and ``b_e`` (in_dim,) with ``edge_dim``
    """

    def __init__(self, mlp_dims: Sequence[int], eps: float = 0.0, train_eps: bool = False,
                 edge_dim: int | None = None, seed: int = 0, dtype=np.float32,
                 executor=None):
        super().__init__(dtype, executor)
        dims = _check_mlp_dims(mlp_dims)
        eps = _check_eps(eps)
        self.mlp_dims, self.in_dim, self.out_dim = dims, dims[0], dims[-1]
        self.edge_dim = edge_dim_of(edge_dim)
        self.train_eps, self._eps = bool(train_eps), eps
        seeds = np.random.SeedSequence(seed).generate_state(len(dims))
        for i in range(len(dims) - 1):
            lin = Linear(dims[i], dims[i + 1], bias=True, seed=int(seeds[i]), dtype=self.dtype,
                         executor=self.executor)
            for k, v in lin.params.items():
                self.add_param(f"lin{i}_{k}", v)
        if self.train_eps:
            self.add_param("eps", np.array([eps], dtype=self.dtype))
        if self.edge_dim is not None:
            lin = Linear(self.edge_dim, self.in_dim, bias=True, seed=int(seeds[-1]),
                         dtype=self.dtype, executor=self.executor)
            self.add_param("W_e", lin.params["W"])
            self.add_param("b_e", lin.params["bias"])

    @property
    def eps(self) -> float:
        """The current :math:`\\varepsilon` (a host float)."""
        return float(self.executor.to_numpy(self.params["eps"])[0]) if self.train_eps \
            else self._eps

    def forward(self, g, H):
        p = self.params
        width = self.edge_dim if self.edge_dim is not None else self.in_dim
        E = features_of("GINEConv", g, width)
        if self.edge_dim is not None:
            E = E @ p["W_e"] + p["b_e"]
        # Σ_j ReLU(H_j + e_ji W_e + b_e): messages computed at the edges
        X = ops.aggregate(ops.structure(g), ops.relu(rep(H).T + E), "sum")
        X = X + (H * (p["eps"] + 1.0) if self.train_eps else H * (1.0 + self._eps))
        last = len(self.mlp_dims) - 2
        for i in range(last + 1):
            X = project(X, p[f"lin{i}_W"], p[f"lin{i}_bias"])
            if i < last:
                X = ops.relu(X)
        return X

    def __repr__(self) -> str:
        return (f"GINEConv(mlp_dims={self.mlp_dims}, eps={self.eps}, "
                f"train_eps={self.train_eps}, edge_dim={self.edge_dim})")
