"""Seeded parameter initialisation."""

from __future__ import annotations

import numpy as np


def glorot(shape: tuple[int, ...], rng: np.random.Generator, dtype=np.float32) -> np.ndarray:
    r"""Glorot/Xavier uniform :math:`U(-a, a)` with :math:`a = \sqrt{6 / (f_{in} + f_{out})}`.

    For a 2-D ``(fan_in, fan_out)`` weight; for PyG-style attention vectors ``(heads, out)``
    the same bound as PyG's ``glorot`` on a ``(1, heads, out)`` tensor is used
    (fan_in = heads, fan_out = out). A vector has no fans: give it as ``(1, n)``.
    """
    shape = tuple(shape)
    if len(shape) < 2:
        raise ValueError(f"glorot needs a shape of at least two sizes (fan_in, "
                         f"fan_out), got {shape}; a vector of n weights is (1, n)")
    fan_in, fan_out = shape[-2], shape[-1]
    a = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-a, a, size=shape).astype(dtype)


def zeros(shape: tuple[int, ...], dtype=np.float32) -> np.ndarray:
    """All-zero parameter (biases)."""
    return np.zeros(shape, dtype=dtype)
