"""Input checks shared by every public entry point (rule 5 of docs/design.md: fail early,
clearly)."""

from __future__ import annotations

import numpy as np

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def float_dtype(dtype) -> np.dtype:
    """Return ``dtype`` as a numpy float dtype, refusing anything but float32 / float64."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"dtype must be float32 or float64, got {dtype!r}") from exc
    if dt not in FLOAT_DTYPES:
        raise TypeError(f"dtype must be float32 or float64, got {dt}")
    return dt


def _array_type_name(xp) -> str:
    return "numpy.ndarray" if xp is np else f"{xp.__name__}.ndarray"


def widening(current, dtype) -> np.dtype | None:
    """The float dtype values of dtype ``current`` are to be cast to, or None when they have
    it already; float64 → float32 is refused (it would change edge values silently)."""
    dt = float_dtype(dtype)
    if dt == current:
        return None
    if dt == np.float32:
        raise TypeError("refusing to cast a float64 graph to float32 implicitly; "
                        "build it with dtype=np.float32")
    return dt


def _all_finite(xp):
    return lambda x: bool(xp.isfinite(x).all())


def dense_matrix(x, name: str, *, rows: int | None = None, cols: int | None = None,
                 dtype=None, xp=np, finite=None):
    """Check that ``x`` is a finite 2-D float array of the array module ``xp`` (optionally of
    a given shape / dtype). ``finite(x)`` says whether it is finite: an executor's
    :meth:`~gblas_gnn.executors.Executor.all_finite` (which counts a device's read), or by
    default ``xp``'s reduction.

    Returns a C-contiguous array; it is only converted when its dtype is already the
    requested one (never silently cast between float32 and float64).
    """
    if not isinstance(x, xp.ndarray):
        raise TypeError(f"{name} must be a {_array_type_name(xp)}, got {type(x).__name__}")
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
    if not (finite or _all_finite(xp))(x):
        raise ValueError(f"{name} contains NaN or Inf")
    return xp.ascontiguousarray(x)


def dense_vector(x, name: str, *, size: int | None = None, dtype=None, xp=np, finite=None):
    """Check that ``x`` is a finite 1-D float array of the array module ``xp`` (optionally of
    a given size / dtype; ``finite`` as for :func:`dense_matrix`)."""
    if not isinstance(x, xp.ndarray):
        raise TypeError(f"{name} must be a {_array_type_name(xp)}, got {type(x).__name__}")
    if x.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {x.shape}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float32 or float64, got {x.dtype}")
    if dtype is not None and x.dtype != np.dtype(dtype):
        raise TypeError(f"{name} has dtype {x.dtype} but {np.dtype(dtype)} is required")
    if size is not None and x.shape[0] != size:
        raise ValueError(f"{name} must have length {size}, got {x.shape[0]}")
    if not (finite or _all_finite(xp))(x):
        raise ValueError(f"{name} contains NaN or Inf")
    return xp.ascontiguousarray(x)


def array_module_of(x):
    """The array module of ``x``: CuPy for a CuPy array, numpy for anything else."""
    if type(x).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np


def positive_ints(**values: int) -> None:
    """Raise ``ValueError`` unless every keyword value is a positive integer (bools refused)."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_bools(**values) -> None:
    """Raise ``TypeError`` unless every keyword value is a bool."""
    for name, value in values.items():
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{name} must be a bool, got {value!r}")


def finite_real(value, name: str, low: float | None = None, high: float | None = None,
                open_high: bool = False) -> float:
    """``value`` as a float, refusing anything but a finite real number in ``[low, high]``
    (``[low, high)`` with ``open_high``)."""
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not np.isfinite(float(value)):
        raise ValueError(f"{name} must be a finite real number, got {value!r}")
    v = float(value)
    if (low is not None and v < low) or (high is not None and (v >= high if open_high
                                                                   else v > high)):
        bounds = f"≥ {low:g}" if high is None else \
            f"in [{low:g}, {high:g}{')' if open_high else ']'}"
        raise ValueError(f"{name} must be {bounds}, got {value}")
    return v


def in_device_memory(x: object) -> bool:
    """Whether ``x`` is an array in a GPU's memory: one with the CUDA array interface (CuPy,
    numba-cuda), or the CUDA simulator's stand-in for one (``in_device_memory`` set)."""
    return hasattr(x, "__cuda_array_interface__") or bool(getattr(x, "in_device_memory", False))
