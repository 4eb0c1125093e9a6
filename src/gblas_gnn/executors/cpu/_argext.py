"""Numba kernels for max/min aggregation of weighted messages, with arg-extremes for backward.

``max_times`` / ``min_times`` have no SuiteSparse factory kernel (rule 2 of docs/design.md), so the
forward runs here over the CSR buffers of ``S``; it also records, per (row, feature), the CSR
position of the winning edge so the backward can route gradients without any |E|×k tensor.
Ties go to the first stored entry of the row (lowest source id, CSR order is sorted).
"""

from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(parallel=True, cache=True)
def argext_forward(indptr, indices, values, H, is_max):
    """``Z[i,c] = ext_j S[i,j] H[j,c]``; ``arg[i,c]`` = CSR position of the winner (−1: empty)."""
    n = indptr.shape[0] - 1
    k = H.shape[1]
    Z = np.zeros((n, k), dtype=H.dtype)
    arg = np.full((n, k), -1, dtype=np.int64)
    for i in nb.prange(n):
        start, end = indptr[i], indptr[i + 1]
        if start == end:
            continue
        for c in range(k):
            best = values[start] * H[indices[start], c]
            best_p = start
            for p in range(start + 1, end):
                m = values[p] * H[indices[p], c]
                if (m > best) if is_max else (m < best):
                    best = m
                    best_p = p
            Z[i, c] = best
            arg[i, c] = best_p
    return Z, arg


@nb.njit(parallel=True, cache=True)
def argext_backward_edges(indptr, indices, arg, H, dZ, out_values):
    """``dS[p] = Σ_c [arg[i,c] = p] dZ[i,c] H[j_p,c]`` (rows own their edges: race free)."""
    n = indptr.shape[0] - 1
    k = H.shape[1]
    for i in nb.prange(n):
        for p in range(indptr[i], indptr[i + 1]):
            out_values[p] = 0
        for c in range(k):
            p = arg[i, c]
            if p >= 0:
                out_values[p] += dZ[i, c] * H[indices[p], c]


@nb.njit(cache=True)
def argext_backward_features(indices, values, arg, dZ, n_src):
    """``dH[j,c] = Σ_i [j_{arg[i,c]} = j] dZ[i,c] S[i,j]`` (scatter; serial, O(n·k))."""
    n, k = dZ.shape
    dH = np.zeros((n_src, k), dtype=dZ.dtype)
    for i in range(n):
        for c in range(k):
            p = arg[i, c]
            if p >= 0:
                dH[indices[p], c] += dZ[i, c] * values[p]
    return dH
