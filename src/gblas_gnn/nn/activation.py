"""Element-wise non-linearities σ as modules: :class:`ReLU`, :class:`ELU`, :class:`Identity`.

They hold no parameters and ignore the graph argument (accepted so that a
:class:`~gblas_gnn.nn.Sequential` calls every module alike). By default they accept either
float dtype and keep it; pass ``dtype=`` to insist on one (a mismatch is a ``TypeError``, never a
silent cast). They compute with the array module of their executor (a
:class:`~gblas_gnn.nn.Sequential` gives them its own).
"""

from __future__ import annotations

import numpy as np

from .module import Module

__all__ = ["ReLU", "ELU", "Identity"]


class _Elementwise(Module):
    """Shared plumbing: input validation, the training cache and the ``dout`` check."""

    def __init__(self, dtype=None, executor=None):
        super().__init__(np.float32 if dtype is None else dtype, executor)
        self._strict_dtype = dtype is not None

    def _input(self, H: np.ndarray) -> np.ndarray:
        return self._dense(H, "H", dtype=self.dtype if self._strict_dtype else None)

    def _dout(self, dout: np.ndarray, like: np.ndarray) -> np.ndarray:
        return self._dense(dout, "dout", rows=like.shape[0], cols=like.shape[1],
                           dtype=like.dtype)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ReLU(_Elementwise):
    r"""Rectified linear unit.

    .. math:: \sigma(x) = \max(x, 0), \qquad \sigma'(x) = [x > 0]

    Args:
        dtype: if given, the input must have this dtype; by default float32 and float64 both pass.

    Shapes:
        H (n, k) → (n, k).
    """

    def forward(self, g, H: np.ndarray) -> np.ndarray:
        H = self._input(H)
        out = self.xp.maximum(H, 0)
        self._cache = {"mask": H > 0, "dtype": H.dtype} if self.training else None
        return out

    def backward(self, dout: np.ndarray) -> np.ndarray:
        cache = self._need_cache()
        mask = cache["mask"]
        dout = self._dense(dout, "dout", rows=mask.shape[0], cols=mask.shape[1],
                           dtype=cache["dtype"])
        return self.xp.where(mask, dout, dout.dtype.type(0))


class ELU(_Elementwise):
    r"""Exponential linear unit (PyTorch's ``ELU``, used between GAT layers).

    .. math::
        \sigma(x) = \begin{cases} x & x > 0 \\ \alpha(e^{x} - 1) & x \le 0 \end{cases},
        \qquad
        \sigma'(x) = \begin{cases} 1 & x > 0 \\ \sigma(x) + \alpha & x \le 0 \end{cases}

    For :math:`\alpha \ge 0`, :math:`\sigma(x) > 0` exactly when :math:`x > 0`, so the
    training cache is the output itself and the backward reads the slope from it (the next
    layer keeps that array anyway, for its :math:`H W`); a caller whose code may write into
    the output gets a copy (:meth:`kept_outputs`), so that no write changes a gradient. For
    :math:`\alpha < 0` the slope array is kept instead.

    Args:
        alpha: the limit of :math:`\sigma(x)` is :math:`-\alpha` for :math:`x \to -\infty`
            (any finite real; PyTorch's default 1).
        dtype: if given, the input must have this dtype.

    Shapes:
        H (n, k) → (n, k).
    """

    def __init__(self, alpha: float = 1.0, dtype=None, executor=None):
        super().__init__(dtype, executor)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating,
                                                              np.integer)):
            raise TypeError(f"alpha must be a real number, got {alpha!r}")
        if not np.isfinite(alpha):
            raise ValueError(f"alpha must be finite, got {alpha!r}")
        self.alpha = float(alpha)

    def forward(self, g, H: np.ndarray) -> np.ndarray:
        H = self._input(H)
        xp = self.xp
        pos = H > 0
        alpha = H.dtype.type(self.alpha)
        # expm1 on min(H, 0) only: no overflow warnings from the positive entries.
        neg = alpha * xp.expm1(xp.minimum(H, 0))
        out = xp.where(pos, H, neg)
        if not self.training:
            self._cache = None
        elif self.alpha >= 0:
            # the output is the cache: σ'(x) is read from it at the backward, and the array
            # is the one the next layer keeps for its H W (7.6 B/entry of a 3-layer GAT
            # step at Kronecker 20 less than a slope array; issue 21)
            self._cache = {"out": out}
        else:
            # σ(x) > 0 also where x ≤ 0: σ'(x) in neg's memory, 1 where x > 0
            neg += alpha
            neg[pos] = 1
            self._cache = {"slope": neg}
        return out

    def kept_outputs(self) -> tuple:
        cache = self._cache
        return (cache["out"],) if cache is not None and "out" in cache else ()

    def backward(self, dout: np.ndarray) -> np.ndarray:
        cache = self._need_cache()
        if "slope" in cache:
            slope = cache["slope"]
            return self._dout(dout, slope) * slope
        out = cache["out"]
        dout = self._dout(dout, out)
        # σ'(x) = σ(x) + α where σ(x) ≤ 0, 1 where σ(x) > 0, times dout (the same bits as the
        # slope array gave: dout · 1 is dout, and the product commutes)
        grad = out + out.dtype.type(self.alpha)
        grad[out > 0] = 1
        grad *= dout
        return grad

    def __repr__(self) -> str:
        return f"ELU(alpha={self.alpha})"


class Identity(_Elementwise):
    r"""The identity :math:`\sigma(x) = x` (a placeholder where no non-linearity is wanted).

    Shapes:
        H (n, k) → (n, k).
    """

    def forward(self, g, H: np.ndarray) -> np.ndarray:
        H = self._input(H)
        self._cache = {"shape": H.shape, "dtype": H.dtype} if self.training else None
        return H

    def backward(self, dout: np.ndarray) -> np.ndarray:
        cache = self._need_cache()
        shape, dtype = cache["shape"], cache["dtype"]
        return self._dense(dout, "dout", rows=shape[0], cols=shape[1], dtype=dtype)
