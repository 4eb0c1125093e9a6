r"""numba kernels of the dense row operations of the ``cpu`` executor: the reduction over
vertices, per-row dot products and per-row linear combinations.

:func:`column_sums` is :math:`\sum_i X_i` (the bias gradient :math:`\partial Z^\top
\mathbf{1}` of every layer) as one pass over the rows, a partial sum per fixed chunk of rows
added into a float64 total (more accurate than one running float32 sum, and independent of
any thread count). It runs on one thread: the pass is bound by memory, and a parallel region
costs more than it saves when another job holds a core (and far more under the default
spinning OpenMP wait policy). It is also faster than numpy's ``X.sum(axis=0)``
(``docs/performance.md`` has the measurement).

:func:`row_dots` (:math:`r_i = \langle X_i, Y_i \rangle`) and :func:`combine_rows`
(:math:`O_i = a_i X_i + b_i Y_i`) are one pass each, on one thread for the same reason, where
numpy takes a pass per operation and an (n, k) temporary for each (a row normalisation's
backward was four passes and two temporaries).
"""

from __future__ import annotations

import numba as nb
import numpy as np

__all__ = ["ROWS_PER_CHUNK", "column_sums", "row_dots", "combine_rows", "dense_rows"]

_FAST = {"reassoc", "contract"}
#: rows per chunk of a reduction over vertices (fixed: it decides the summation order)
ROWS_PER_CHUNK = 4096


@nb.njit(cache=True, fastmath=_FAST)
def _column_sums(X, rows_per_chunk, partial, total):
    n = X.shape[0]
    for c in range(total.shape[0]):
        total[c] = 0
    for start in range(0, n, rows_per_chunk):
        for c in range(partial.shape[0]):
            partial[c] = 0
        for i in range(start, min(n, start + rows_per_chunk)):
            xi = X[i]
            for c in range(partial.shape[0]):
                partial[c] += xi[c]
        for c in range(total.shape[0]):
            total[c] += partial[c]


def column_sums(X: np.ndarray) -> np.ndarray:
    r""":math:`s_c = \sum_i X_{ic}` of a C-contiguous 2-D float array, shape ``(k,)`` and
    ``X``'s dtype: a partial sum per chunk of :data:`ROWS_PER_CHUNK` rows in ``X``'s dtype,
    the partial sums added in float64."""
    total = np.empty(X.shape[1], np.float64)
    _column_sums(X, ROWS_PER_CHUNK, np.empty(X.shape[1], X.dtype), total)
    return total.astype(X.dtype)


@nb.njit(cache=True, fastmath=_FAST)
def _row_dots(X, Y, out):
    for i in range(X.shape[0]):
        xi = X[i]
        yi = Y[i]
        acc = out.dtype.type(0)
        for c in range(xi.shape[0]):
            acc += xi[c] * yi[c]
        out[i] = acc


def row_dots(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    r""":math:`r_i = \langle X_i, Y_i \rangle` of two C-contiguous (n, k) float arrays of one
    dtype, shape (n,), summed in that dtype."""
    out = np.empty(X.shape[0], X.dtype)
    _row_dots(X, Y, out)
    return out


@nb.njit(cache=True, fastmath=_FAST)
def _combine_rows(a, X, b, Y, two, out):
    for i in range(X.shape[0]):
        xi = X[i]
        oi = out[i]
        ai = a[i]
        if two:
            yi = Y[i]
            bi = b[i]
            for c in range(xi.shape[0]):
                oi[c] = ai * xi[c] + bi * yi[c]
        else:
            for c in range(xi.shape[0]):
                oi[c] = ai * xi[c]


def combine_rows(a: np.ndarray, X: np.ndarray, b: np.ndarray | None = None,
                 Y: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
    r""":math:`O_i = a_i X_i + b_i Y_i` (or :math:`a_i X_i` without ``b``, ``Y``) of
    C-contiguous (n, k) float arrays of one dtype and per-row coefficients (n,) of that
    dtype: one pass, into ``out`` (a fresh array by default; ``X`` itself may be given:
    each number is read before it is written)."""
    if out is None:
        out = np.empty_like(X)
    two = Y is not None
    _combine_rows(a, X, b if two else a, Y if two else X, two, out)
    return out



def dense_rows(*arrays) -> bool:
    """Whether ``arrays`` are C-contiguous 2-D float arrays of one shape and dtype (what
    :func:`row_dots` and :func:`combine_rows` take)."""
    first = arrays[0]
    return all(isinstance(x, np.ndarray) and x.ndim == 2 and x.flags.c_contiguous
               and x.dtype in (np.float32, np.float64) and x.shape == first.shape
               and x.dtype == first.dtype for x in arrays)
