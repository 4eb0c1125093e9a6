"""Dense affine layer ``Z = H W + b`` (the projection Φ)."""

from __future__ import annotations

import numpy as np

from .._validate import positive_ints
from .init import glorot, zeros
from .module import Module


class Linear(Module):
    r"""Affine projection applied to every vertex.

    .. math:: Z = H W + \mathbf{1} b^\top

    The graph argument is ignored (accepted so that containers call every module alike).

    Args:
        in_dim, out_dim: feature sizes.
        bias: add a learnable bias.
        seed: seed of the Glorot initialisation of ``W``.

    Shapes:
        H (n, in_dim) → Z (n, out_dim); params ``W`` (in_dim, out_dim), ``bias`` (out_dim,).
    """

    def __init__(self, in_dim: int, out_dim: int, bias: bool = True, seed: int = 0,
                 dtype=np.float32, executor=None):
        super().__init__(dtype, executor)
        positive_ints(in_dim=in_dim, out_dim=out_dim)
        self.in_dim, self.out_dim = in_dim, out_dim
        rng = np.random.default_rng(seed)
        self.params["W"] = self._param(glorot((in_dim, out_dim), rng, self.dtype))
        if bias:
            self.params["bias"] = self._param(zeros((out_dim,), self.dtype))
        self.zero_grad()

    def forward(self, g, H: np.ndarray) -> np.ndarray:
        H = self._dense(H, "H", cols=self.in_dim, dtype=self.dtype)
        # the bias added to each block of rows as the product writes it (Executor.linear)
        Z = self.executor.linear(H, self.params["W"], self.params.get("bias"))
        self._cache = {"H": H} if self.training else None
        return Z

    def backward(self, dout: np.ndarray) -> np.ndarray:
        H = self._need_cache()["H"]
        dout, dbias = self._check_dout_biased(dout, (H.shape[0], self.out_dim))
        ex = self.executor
        dH, self.grads["W"] = ex.matmul_vjp(dout, self.params["W"], H)  # dZ Wᵀ, Hᵀ dZ
        if dbias is not None:
            self.grads["bias"] = dbias                          # dZᵀ 1
        return dH

