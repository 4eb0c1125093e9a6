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
        if self.training:
            # σ'(x) in neg's memory: 1 where x > 0, σ(x) + α elsewhere (dout · 1 is dout's
            # own bits), one (n, k) array kept where pos and neg were (issue 21)
            neg += alpha
            neg[pos] = 1
            self._cache = {"slope": neg}
        else:
            self._cache = None
        return out

    def backward(self, dout: np.ndarray) -> np.ndarray:
        slope = self._need_cache()["slope"]
        return self._dout(dout, slope) * slope

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
