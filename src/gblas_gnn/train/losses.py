"""Masked softmax cross-entropy and accuracy for full-batch node classification."""

from __future__ import annotations

import numpy as np

__all__ = ["cross_entropy", "accuracy"]


def _check(logits, y, mask) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not isinstance(logits, np.ndarray) or logits.ndim != 2:
        raise ValueError("logits must be a 2-D numpy array (n, num_classes), got "
                         f"{getattr(logits, 'shape', type(logits).__name__)}")
    if logits.dtype.kind != "f":
        raise TypeError(f"logits must be float32 or float64, got {logits.dtype}")
    n, c = logits.shape
    if c < 1:
        raise ValueError("logits need at least one class column")
    y = np.asarray(y)
    if y.shape != (n,):
        raise ValueError(f"labels y must have shape ({n},), got {y.shape}")
    if y.size and not np.issubdtype(y.dtype, np.integer):
        raise TypeError(f"labels y must be integers, got dtype {y.dtype}")
    mask = np.asarray(mask)
    if mask.shape != (n,) or mask.dtype != np.bool_:
        raise ValueError(f"mask must be a boolean array of shape ({n},), got "
                         f"{mask.dtype} {mask.shape}")
    if not mask.any():
        raise ValueError("mask selects no node")
    ym = y[mask]
    if ym.min() < 0 or ym.max() >= c:
        raise ValueError(f"labels of the masked nodes must lie in [0, {c}), got "
                         f"[{ym.min()}, {ym.max()}]")
    return logits, ym.astype(np.int64, copy=False), mask


def cross_entropy(logits: np.ndarray, y: np.ndarray, mask: np.ndarray
                  ) -> tuple[float, np.ndarray]:
    r"""Mean softmax cross-entropy over the nodes selected by ``mask``, and its gradient.

    With :math:`M` the masked nodes and :math:`p_i = \mathrm{softmax}(z_i)`:

    .. math::
        L = -\frac{1}{|M|} \sum_{i \in M} \log p_{i, y_i}
          = \frac{1}{|M|} \sum_{i \in M} \Big(\mathrm{lse}(z_i) - z_{i, y_i}\Big),
        \qquad
        \frac{\partial L}{\partial z_i} = \frac{[i \in M]}{|M|} (p_i - e_{y_i})

    where :math:`\mathrm{lse}(z) = m + \log \sum_c e^{z_c - m}`, :math:`m = \max_c z_c`
    (numerically stable for any finite logits).

    Args:
        logits: (n, C) float32/float64 scores.
        y: (n,) integer labels (only the masked ones are read; they must lie in [0, C)).
        mask: (n,) bool, at least one ``True``.

    Returns:
        ``(loss, dlogits)``: the loss as a Python float (accumulated in float64) and
        ``dL/dlogits`` with the dtype and shape of ``logits`` (zero on unmasked rows).

    Raises:
        FloatingPointError: the masked logits contain NaN or Inf.
    """
    logits, ym, mask = _check(logits, y, mask)
    z = logits[mask]
    if not np.isfinite(z).all():
        raise FloatingPointError("logits contain NaN or Inf (has the model diverged?)")
    m = z.max(axis=1, keepdims=True)
    shifted = z - m
    e = np.exp(shifted)
    s = e.sum(axis=1, keepdims=True)
    rows = np.arange(z.shape[0])
    # loss per node: log Σ exp(z - m) - (z_y - m), accumulated in float64
    per_node = np.log(s[:, 0].astype(np.float64)) - shifted[rows, ym].astype(np.float64)
    count = z.shape[0]
    loss = float(per_node.sum() / count)
    p = e / s
    p[rows, ym] -= 1
    p *= logits.dtype.type(1.0 / count)
    dlogits = np.zeros_like(logits)
    dlogits[mask] = p
    return loss, dlogits


def accuracy(logits: np.ndarray, y: np.ndarray, mask: np.ndarray) -> float:
    """Fraction of the masked nodes whose arg-max logit is the label (ties → lowest class)."""
    logits, ym, mask = _check(logits, y, mask)
    pred = logits[mask].argmax(axis=1)
    return float(np.mean(pred == ym))
