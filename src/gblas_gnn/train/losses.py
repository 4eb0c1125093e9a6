"""Masked softmax cross-entropy and accuracy for full-batch node classification.

Both are written with the executor's array module and its reduction over vertices
(:meth:`~gblas_gnn.executors.Executor.vertex_sum`), so that logits, labels and masks stay
where the executor keeps them and a distributed executor sums over every process's rows. The
few numbers they read back on the host (the count of masked nodes, the label check, the
finiteness check and the sums they return) go through the executor's
:meth:`~gblas_gnn.executors.Executor.to_numpy`, one scalar each: on a device each is a
counted copy (reasons ``"labels"`` and ``"loss"``), never an implicit sync.
"""

from __future__ import annotations

import numpy as np

from ..executors import get_executor

__all__ = ["cross_entropy", "accuracy"]


def _check(logits, y, mask, ex) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Validated ``(logits, masked labels, mask, global count of masked nodes)``."""
    y, mask = ex.asarray(y), ex.asarray(mask)       # host labels: one counted copy each
    with ex.validation():
        _check_local(logits, y, mask, ex)
    count = _read(ex, ex.vertex_sum(mask.astype(np.int64)), int)
    if count == 0:
        raise ValueError("mask selects no node")
    ym = y[mask]
    return logits, ym.astype(np.int64, copy=False), mask, count


def _read(ex, x, kind=float, reason: str = "loss"):
    """The device scalar ``x`` as a Python ``kind`` (one counted read)."""
    return kind(ex.to_numpy(x, reason))


def _check_local(logits, y, mask, ex) -> None:
    xp = ex.xp
    if hasattr(logits, "ndim") and not isinstance(logits, xp.ndarray):
        raise TypeError(f"logits must be an array of the {ex.name!r} executor "
                        f"({xp.__name__}.ndarray), got a {type(logits).__module__}."
                        f"{type(logits).__name__}: move it with the executor's asarray")
    if not isinstance(logits, xp.ndarray) or logits.ndim != 2:
        raise ValueError("logits must be a 2-D array (n, num_classes), got "
                         f"{getattr(logits, 'shape', type(logits).__name__)}")
    if logits.dtype.kind != "f":
        raise TypeError(f"logits must be float32 or float64, got {logits.dtype}")
    n, c = logits.shape
    if c < 1:
        raise ValueError("logits need at least one class column")
    if tuple(y.shape) != (n,):
        raise ValueError(f"labels y must have shape ({n},), got {tuple(y.shape)}")
    if y.size and not np.issubdtype(y.dtype, np.integer):
        raise TypeError(f"labels y must be integers, got dtype {y.dtype}")
    if tuple(mask.shape) != (n,) or mask.dtype != np.bool_:
        raise ValueError(f"mask must be a boolean array of shape ({n},), got "
                         f"{mask.dtype} {tuple(mask.shape)}")
    ym = y[mask]
    if ym.size and _read(ex, ((ym < 0) | (ym >= c)).any(), bool, "labels"):
        low, high = (_read(ex, v, int, "labels") for v in (ym.min(), ym.max()))
        raise ValueError(f"labels of the masked nodes must lie in [0, {c}), got "
                         f"[{low}, {high}]")


def cross_entropy(logits: np.ndarray, y: np.ndarray, mask: np.ndarray, executor=None
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
        logits: (n, C) float32/float64 scores (an array of the executor).
        y: (n,) integer labels (only the masked ones are read; they must lie in [0, C)).
        mask: (n,) bool, at least one ``True`` (over all processes of a distributed run).
        executor: whose array module and reduction over vertices to use (default cpu).

    Returns:
        ``(loss, dlogits)``: the loss as a Python float (accumulated in float64) and
        ``dL/dlogits`` with the dtype and shape of ``logits`` (zero on unmasked rows).

    Raises:
        FloatingPointError: the masked logits contain NaN or Inf.
    """
    ex = get_executor(executor)
    xp = ex.xp
    logits, ym, mask, count = _check(logits, y, mask, ex)
    # z: the masked rows, a copy (boolean indexing) that becomes the shifted logits, their
    # exponentials and the gradient in place: one (n, C) array where there were five at once
    # (issue 21: the loss ran at the memory peak of a large graph's step)
    z = logits[mask]
    if _read(ex, ex.vertex_sum(xp.isfinite(z).all(axis=1).astype(np.int64)), int) != count:
        raise FloatingPointError("logits contain NaN or Inf (has the model diverged?)")
    m = z.max(axis=1, keepdims=True)
    z -= m
    rows = xp.arange(z.shape[0])
    zy = z[rows, ym].astype(np.float64)
    xp.exp(z, out=z)
    s = z.sum(axis=1, keepdims=True)
    # loss per node: log Σ exp(z - m) - (z_y - m), accumulated in float64
    per_node = xp.log(s[:, 0].astype(np.float64)) - zy
    loss = _read(ex, ex.vertex_sum(per_node)) / count
    z /= s
    z[rows, ym] -= 1
    z *= logits.dtype.type(1.0 / count)
    if z.shape[0] == logits.shape[0]:       # every row masked: the gradient is z itself
        return loss, z
    dlogits = xp.zeros_like(logits)
    dlogits[mask] = z
    return loss, dlogits


def accuracy(logits: np.ndarray, y: np.ndarray, mask: np.ndarray, executor=None) -> float:
    """Fraction of the masked nodes whose arg-max logit is the label (ties → lowest class)."""
    ex = get_executor(executor)
    logits, ym, mask, count = _check(logits, y, mask, ex)
    correct = logits[mask].argmax(axis=1) == ym
    return _read(ex, ex.vertex_sum(correct.astype(np.int64))) / count
