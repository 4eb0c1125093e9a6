"""Numba kernels over CSR buffers: the fast lowerings of the tropical semirings.

SuiteSparse from PyPI has its JIT off; ``max_plus``, ``max_times`` and
``min_times`` run "generic" kernels, and ``min_plus`` runs a factory
``saxpy5`` kernel that is still 6-10x slower than the ``plus_times`` one for
SpMM into a dense result (measured; see :mod:`gblas_gnn.semirings`).  These
kernels compute exactly the same thing over the very same CSR buffers of ``S``:

.. math::

    Z_{i,c} = \\bigoplus_{p \\in \\mathrm{row}(i)} S_p \\otimes H_{\\mathrm{col}(p), c},
    \\qquad Z_{i,:} = 0 \\text{ for an empty row } i,

with ``⊕ ∈ {min, max}`` and ``⊗ ∈ {+, ×}``.  The accumulation runs along the
stored entries of a row in storage order; the ``k`` feature columns are ``k``
independent accumulators (the inner loop vectorises).  No ``fastmath``: each
``s ⊗ h`` is the correctly rounded IEEE result, and min/max are exact, so the
result is bitwise identical to the GraphBLAS general form.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=True)
def spmm_minmax(indptr, indices, data, H, out, is_max, is_times):  # pragma: no cover (numba)
    """``out[i, :] = ⊕_p data[p] ⊗ H[indices[p], :]`` over row ``i``; empty rows give 0.

    Parameters
    ----------
    indptr, indices : int64 arrays
        CSR structure of ``S`` (``S.nrows + 1`` and ``nnz`` entries).
    data : float array, same dtype as ``H``
        CSR values of ``S``.
    H : (S.ncols, k) C-contiguous float array
    out : (S.nrows, k) float array, written completely
    is_max : bool
        ``⊕ = max`` if true, else ``⊕ = min``.
    is_times : bool
        ``⊗ = ×`` if true, else ``⊗ = +``.
    """
    n = indptr.size - 1
    k = H.shape[1]
    for i in prange(n):
        p0 = indptr[i]
        p1 = indptr[i + 1]
        if p0 == p1:
            for c in range(k):
                out[i, c] = 0
            continue
        s = data[p0]
        j = indices[p0]
        if is_times:
            for c in range(k):
                out[i, c] = s * H[j, c]
        else:
            for c in range(k):
                out[i, c] = s + H[j, c]
        for p in range(p0 + 1, p1):
            s = data[p]
            j = indices[p]
            if is_times:
                if is_max:
                    for c in range(k):
                        v = s * H[j, c]
                        o = out[i, c]
                        out[i, c] = v if v > o else o
                else:
                    for c in range(k):
                        v = s * H[j, c]
                        o = out[i, c]
                        out[i, c] = v if v < o else o
            else:
                if is_max:
                    for c in range(k):
                        v = s + H[j, c]
                        o = out[i, c]
                        out[i, c] = v if v > o else o
                else:
                    for c in range(k):
                        v = s + H[j, c]
                        o = out[i, c]
                        out[i, c] = v if v < o else o


def run_spmm_minmax(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    H: np.ndarray,
    *,
    is_max: bool,
    is_times: bool,
) -> np.ndarray:
    """Allocate the output and run :func:`spmm_minmax` (argument normalisation only)."""
    out = np.empty((indptr.size - 1, H.shape[1]), dtype=H.dtype)
    spmm_minmax(indptr, indices, data, H, out, bool(is_max), bool(is_times))
    return out
