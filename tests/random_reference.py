"""An independent reference of the counter-based dropout masks, in plain Python integers.

The documented rule (``gblas_gnn.executors._random``): a call draws one 64-bit key
``κ = rng.integers(0, 2**64, dtype=uint64)`` from the module's generator; entry ``(a, b, c)``
gets ``u = 2^-53 ⌊m(m(m(κ + γa) + γb) + γc) / 2^11⌋`` with ``m`` the SplitMix64 finaliser and
``γ`` the 64-bit golden ratio, arithmetic modulo 2^64, and is kept when ``u ≥ p``.
Attention dropout uses ``(head, target, source)``, feature dropout ``(0, vertex, column)``.
"""

from __future__ import annotations

import numpy as np

MASK64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def _mix(z: int) -> int:
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & MASK64
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def uniform(key: int, a: int, b: int, c: int) -> float:
    key, a, b, c = int(key), int(a), int(b), int(c)       # Python integers: no wrap-around
    z = _mix((key + a * GAMMA) & MASK64)
    z = _mix((z + b * GAMMA) & MASK64)
    z = _mix((z + c * GAMMA) & MASK64)
    return (z >> 11) * 2.0 ** -53


def next_key(rng: np.random.Generator) -> int:
    """The key one call draws from the module's generator."""
    return int(rng.integers(0, 2**64, dtype=np.uint64))


def feature_keep(key: int, p: float, rows: int, cols: int) -> np.ndarray:
    """The feature-dropout mask of an (rows, cols) input whose row r is vertex r."""
    return np.array([[uniform(key, 0, i, c) >= p for c in range(cols)] for i in range(rows)])
