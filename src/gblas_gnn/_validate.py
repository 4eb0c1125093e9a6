"""Input checks shared by every public entry point (DESIGN.md rule 5: fail early and clearly)."""

from __future__ import annotations

import numba as nb
import numpy as np

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_PARALLEL_MIN = 1 << 16     # elements: below, numpy's check is as fast as a parallel pass
_CHUNK = 1 << 14


@nb.njit(parallel=True, cache=True)
def _all_finite_flat(flat) -> bool:
    # ``v - v`` is NaN for ±inf and NaN, 0 otherwise (compiled without fastmath, so it is not
    # folded); one branch-free pass that vectorises, split over the threads.
    n = flat.shape[0]
    bad = 0
    for b in nb.prange((n + _CHUNK - 1) // _CHUNK):
        ok = True
        for p in range(b * _CHUNK, min(n, (b + 1) * _CHUNK)):
            v = flat[p]
            ok &= (v - v) == 0
        if not ok:
            bad += 1
    return bad == 0


def all_finite(x: np.ndarray) -> bool:
    """Whether every element of the float array ``x`` is finite (no NaN, no ±inf).

    Large C-contiguous arrays are checked by one parallel pass without temporaries
    (``np.isfinite(x).all()`` writes a boolean array and reads it again: 2.3 against 1.2 ms
    for a 10⁵ × 32 float32 input that is not in cache).
    """
    if x.size >= _PARALLEL_MIN and x.flags.c_contiguous:
        return bool(_all_finite_flat(x.reshape(-1)))
    return bool(np.isfinite(x).all())


def float_dtype(dtype) -> np.dtype:
    """Return ``dtype`` as a numpy float dtype, refusing anything but float32 / float64."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"dtype must be float32 or float64, got {dtype!r}") from exc
    if dt not in FLOAT_DTYPES:
        raise TypeError(f"dtype must be float32 or float64, got {dt}")
    return dt


def dense_matrix(x, name: str, *, rows: int | None = None, cols: int | None = None,
                 dtype=None) -> np.ndarray:
    """Check that ``x`` is a finite 2-D float ndarray (optionally of a given shape / dtype).

    Returns a C-contiguous array; it is only converted when its dtype is already the
    requested one (never silently cast between float32 and float64).
    """
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(x).__name__}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {x.shape}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float32 or float64, got {x.dtype}")
    if dtype is not None and x.dtype != np.dtype(dtype):
        raise TypeError(f"{name} has dtype {x.dtype} but {np.dtype(dtype)} is required")
    if rows is not None and x.shape[0] != rows:
        raise ValueError(f"{name} must have {rows} rows, got shape {x.shape}")
    if cols is not None and x.shape[1] != cols:
        raise ValueError(f"{name} must have {cols} columns, got shape {x.shape}")
    if not all_finite(x):
        raise ValueError(f"{name} contains NaN or Inf")
    return np.ascontiguousarray(x)


def dense_vector(x, name: str, *, size: int | None = None, dtype=None) -> np.ndarray:
    """Check that ``x`` is a finite 1-D float ndarray (optionally of a given size / dtype)."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(x).__name__}")
    if x.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {x.shape}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float32 or float64, got {x.dtype}")
    if dtype is not None and x.dtype != np.dtype(dtype):
        raise TypeError(f"{name} has dtype {x.dtype} but {np.dtype(dtype)} is required")
    if size is not None and x.shape[0] != size:
        raise ValueError(f"{name} must have length {size}, got {x.shape[0]}")
    if not all_finite(x):
        raise ValueError(f"{name} contains NaN or Inf")
    return np.ascontiguousarray(x)


def positive_ints(**values: int) -> None:
    """Raise ``ValueError`` unless every keyword value is a positive integer (bools refused)."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
