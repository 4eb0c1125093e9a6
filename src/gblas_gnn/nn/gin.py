"""Graph isomorphism network layer (Xu et al.): ``Z = MLP((1 + ε) H + A H)``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._validate import positive_ints
from ._interop import PyGInterop
from .linear import Linear
from .module import Module


def _check_mlp_dims(mlp_dims) -> list[int]:
    if isinstance(mlp_dims, (str, bytes)) or not isinstance(mlp_dims, (Sequence, np.ndarray)):
        raise TypeError("mlp_dims must be a sequence of feature sizes [in, hidden..., out], "
                        f"got {type(mlp_dims).__name__}")
    dims = list(mlp_dims)
    if len(dims) < 2:
        raise ValueError(f"mlp_dims needs at least 2 entries [in, ..., out], got {dims!r}")
    positive_ints(**{f"mlp_dims[{i}]": d for i, d in enumerate(dims)})
    return [int(d) for d in dims]


def _check_eps(eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.integer, np.floating)):
        raise TypeError(f"eps must be a real number, got {type(eps).__name__}")
    if not np.isfinite(eps):
        raise ValueError(f"eps must be finite, got {eps!r}")
    return float(eps)


class GINConv(PyGInterop, Module):
    r"""Graph isomorphism layer, PyTorch Geometric's ``GINConv`` with an ``MLP`` as its network.

    .. math::
        Z = \mathrm{MLP}\big((1 + \varepsilon) H + A H\big), \qquad
        \mathrm{MLP}(X) = \mathrm{lin}_{L-1}(\mathrm{ReLU}(\cdots
            \mathrm{ReLU}(\mathrm{lin}_0(X)) \cdots)), \quad \mathrm{lin}_l(X) = X W_l + b_l

    ``A H`` sums the in-neighbours' features weighted by the stored edge values (no self
    loops are added: the ``(1 + ε) H`` term plays that role). ReLU sits between the linear
    layers, none after the last (PyG ``MLP(..., plain_last=True)`` without norm / dropout).

    The first linear map commutes with the aggregation,
    :math:`((1+\varepsilon) H + A H) W_0 = (1+\varepsilon) H W_0 + A (H W_0)`, so when
    ``mlp_dims[1] < mlp_dims[0]`` the layer projects first and the SpMM runs on the narrower
    side, forward and backward. With :math:`G_0 = \partial(\mathrm{lin}_0\text{ output})`
    and :math:`\partial X_0 = G_0 W_0^\top`:

    .. math::
        \partial W_0 = X_0^\top G_0 = H^\top \big((1+\varepsilon) G_0 + A^\top G_0\big),\quad
        \partial H = (1+\varepsilon)\,\partial X_0 + A^\top \partial X_0, \quad
        \partial\varepsilon = \textstyle\sum \partial X_0 \odot H = \sum G_0 \odot (H W_0).

    Args:
        mlp_dims: feature sizes ``[in_dim, hidden..., out_dim]`` of the MLP (≥ 2 entries).
        eps: the initial (or fixed) :math:`\varepsilon`.
        train_eps: learn :math:`\varepsilon` (parameter ``eps``); otherwise it is fixed.
        seed: seed of the Glorot initialisation of the weights (biases start at zero).
        dtype: ``np.float32`` (default) or ``np.float64``.
        executor: executor name or instance (default ``cpu``).

    Shapes:
        - **input:** graph with n vertices, H (n, in_dim)
        - **output:** Z (n, out_dim)
        - **params:** ``lin{l}.W`` (mlp_dims[l], mlp_dims[l+1]), ``lin{l}.bias``
          (mlp_dims[l+1],) for every layer l, and ``eps`` (1,) when ``train_eps``
    """

    def __init__(self, mlp_dims: Sequence[int], eps: float = 0.0, train_eps: bool = False,
                 seed: int = 0, dtype=np.float32, executor=None):
        super().__init__(dtype, executor)
        dims = _check_mlp_dims(mlp_dims)
        eps = _check_eps(eps)
        self.mlp_dims = dims
        self.in_dim, self.out_dim = dims[0], dims[-1]
        self.train_eps = bool(train_eps)
        self._eps = eps
        # the MLP's weights are those of Linear layers (seeded each); the layer runs the
        # products itself, so that its own intermediates are not validated again
        seeds = np.random.SeedSequence(seed).generate_state(len(dims) - 1)
        for i in range(len(dims) - 1):
            lin = Linear(dims[i], dims[i + 1], bias=True, seed=int(seeds[i]), dtype=self.dtype,
                         executor=self.executor)
            for k, v in lin.params.items():
                self.params[f"lin{i}.{k}"] = v
        if self.train_eps:
            self.params["eps"] = self._param(np.array([eps], dtype=self.dtype))
        else:       # 1 + ε on the executor once (not one copy to the device per forward)
            self._one_eps = self._param(np.array([eps], dtype=self.dtype) + self.dtype.type(1))
        # Φ∘⊕ order for the first linear layer: project first when it narrows the SpMM
        self._project_first = dims[1] < dims[0]
        self.zero_grad()

    def __repr__(self) -> str:
        return f"GINConv(mlp_dims={self.mlp_dims}, eps={self.eps}, train_eps={self.train_eps})"

    @property
    def eps(self) -> float:
        """The current :math:`\\varepsilon` (a host float: reading it copies one scalar)."""
        return float(self.params["eps"][0]) if self.train_eps else self._eps

    def forward(self, g, H: np.ndarray) -> np.ndarray:
        graph, H = self._prepare(g, H, self.in_dim)
        ex, xp, A = self.executor, self.xp, graph.A
        # 1 + ε as an array of the executor (a learnt ε stays where it lives)
        one_eps = self.params["eps"] + self.dtype.type(1) if self.train_eps else self._one_eps
        W0, b0 = self.params["lin0.W"], self.params["lin0.bias"]
        saved: dict = {"A": A, "one_eps": one_eps, "rows": H.shape[0]}
        if self._project_first or self.train_eps:
            saved["H"] = H
        # the self term (and the bias) in the SpMM's own pass on executors that fuse them
        linears = len(self.mlp_dims) - 1                        # lin0 … lin{linears-1}
        if self._project_first:
            Y = ex.gemm(H, W0)                                  # H W0
            # (1+ε) H W0 + A (H W0) + b0
            X = ex.spmm_affine(A, Y, self_weight=one_eps, bias=b0)
            if linears > 1:
                X = xp.maximum(X, 0, out=X)                     # ReLU, in place (X is ours)
            saved["Y"] = Y
        else:
            X0 = ex.spmm_affine(A, H, self_weight=one_eps)      # (1+ε) H + A H
            # X0 W0 + b0, rectified but after the last linear, in the product's own pass
            X = ex.linear(X0, W0, b0, relu=linears > 1)
            saved["X0"] = X0
        acts = []
        for i in range(1, linears):
            acts.append(X)                                      # the input of lin i
            X = ex.linear(X, self.params[f"lin{i}.W"], self.params[f"lin{i}.bias"],
                          relu=i < linears - 1)
        saved["acts"] = acts
        self._cache = saved if self.training else None
        return X

    def backward(self, dout: np.ndarray) -> np.ndarray:
        cache = self._need_cache()
        A, one_eps = cache["A"], cache["one_eps"]
        # d: the cotangent of lin i's output, d_sum its sum over vertices (lin i's bias's)
        d, d_sum = self._check_dout_summed(dout, (cache["rows"], self.out_dim))
        ex, W0 = self.executor, self.params["lin0.W"]
        for i in range(len(self.mlp_dims) - 2, 0, -1):
            X = cache["acts"][i - 1]                            # the input of lin i
            self.grads[f"lin{i}.bias"] = d_sum
            d, self.grads[f"lin{i}.W"] = ex.matmul_vjp(d, self.params[f"lin{i}.W"], X)
            d *= X > 0                                          # ReLU' (d is ours)
            # lin{i-1}'s bias: Σ_i d_i, here, or lin0's taken by its product from d (below)
            d_sum = ex.vertex_sum(d) if i > 1 or self._project_first else None
        if self._project_first:
            self.grads["lin0.bias"] = d_sum
            G = ex.spmm_affine(A, d, self_weight=one_eps, transpose=True)  # ∂(H W0)
            dH, self.grads["lin0.W"] = ex.matmul_vjp(G, W0, cache["H"])
            if self.train_eps:                                  # Σ G0 ⊙ (H W0)
                deps = ex.vertex_sum(ex.row_dot(d, cache["Y"]))
        else:
            if d_sum is None:
                dX0, self.grads["lin0.W"], self.grads["lin0.bias"] = ex.matmul_vjp(
                    d, W0, cache["X0"], sums=True)
            else:
                self.grads["lin0.bias"] = d_sum
                dX0, self.grads["lin0.W"] = ex.matmul_vjp(d, W0, cache["X0"])
            dH = ex.spmm_affine(A, dX0, self_weight=one_eps, transpose=True)
            if self.train_eps:                                  # Σ ∂X0 ⊙ H
                deps = ex.vertex_sum(ex.row_dot(dX0, cache["H"]))
        if self.train_eps:
            self.grads["eps"] = deps.reshape(1).astype(self.dtype)
        return dH
