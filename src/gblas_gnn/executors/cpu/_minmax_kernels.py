r"""Numba kernels over CSR buffers for max/min: the tropical semirings' products and the
max/min aggregation of weighted messages with its backward.

SuiteSparse from PyPI has its JIT off; ``max_plus``, ``max_times`` and ``min_times`` run
"generic" kernels, and ``min_plus`` runs a factory ``saxpy5`` kernel that is still several
times slower than the ``plus_times`` one into a dense result (see
:mod:`gblas_gnn.executors.cpu.semiring_lowering`). :func:`extreme_rows` computes the same
thing over the very same buffers in one pass over the rows,

.. math::

    Z_{i,c} = \bigoplus_{p \in \mathrm{row}(i)} S_p \otimes X_{\mathrm{idx}[p], c},
    \qquad
    A_{i,c} = \min \{\, p \in \mathrm{row}(i) : S_p \otimes X_{\mathrm{idx}[p], c} = Z_{i,c} \,\},
    \qquad Z_{i,:} = 0,\ A_{i,:} = -1 \text{ for an empty row } i,

with ``⊕ ∈ {min, max}``, ``⊗ ∈ {+, ×}`` and, when a backward needs it, the winner ``A``
(CSR position; ties to the first stored entry, the lowest source id, since a row's columns
ascend). The backward of the aggregation routes the cotangent ``G`` to the winners:

.. math::

    \bar S_p = \sum_c [A_{i,c} = p]\, G_{i,c} X_{\mathrm{idx}[p], c}, \qquad
    \bar X_{j,c} = \sum_i [\mathrm{idx}[A_{i,c}] = j]\, G_{i,c} S_{A_{i,c}}
    \quad (\otimes = \times;\ \text{without the factor } S \text{ for } \otimes = +).

Exactness: ``min`` is computed as ``−max(−v)`` (negation is exact in IEEE arithmetic, so
this is bit for bit the ``min`` with the same ties), the comparison is strict and the first
entry of a row starts it; no ``fastmath``. So a NaN message is kept only when it comes first
in its row, as before, and the result is bitwise that of the GraphBLAS general form.
"""

from __future__ import annotations

import numba
import numba as nb
import numpy as np

from ..alignment import aligned_empty
from ..patterns import CSRPattern, index_dtype, unsigned_view
from ._kernel_primitives import prefetch_row
from ._spmm_kernels import prefetch_distance

__all__ = ["extreme_rows", "run_extreme", "run_spmm_minmax",
           "winner_edges", "winner_features"]


@nb.njit(parallel=True, cache=True)
def extreme_rows(bounds, indptr, indices, values, iso, X, sign, is_times, ahead, out,
                 arg):  # pragma: no cover (numba)
    """``out[i, c] = sign · max_p sign · (w_p ⊗ X[indices[p], c])`` over row ``i`` (0 for an
    empty row), with ``arg[i, c]`` the first ``p`` reaching it (−1 for an empty row).

    Parameters
    ----------
    bounds : int64 array
        Chunks of rows (:func:`..patterns.balanced_bounds`); call under
        ``numba.parallel_chunksize(1)``.
    indptr, indices : CSR structure, unsigned (:func:`..patterns.unsigned_view`: no
        wraparound test of a negative index on every access).
    values : float array of ``X``'s dtype; ``w_p = values[0]`` when ``iso`` else
        ``values[p]``.
    X : (ncols, k) C-contiguous float array.
    sign : scalar of ``X``'s dtype
        ``1`` for max, ``−1`` for min.
    is_times : bool
        ``⊗ = ×`` if true, else ``⊗ = +``.
    ahead : int
        Entries ahead whose row of ``X`` is prefetched (0: none). Once ``X`` is past L2 the
        gathered rows miss the cache, and 32 entries ahead roughly halves the time of the
        max without winners (it was slower with prefetching while each prefetch divided by
        the item size: :func:`._kernel_primitives.prefetch_row`; ``docs/performance.md``,
        the aggregation path, has the measurement).
    out : (nrows, k) float array, written completely.
    arg : (nrows, k) int array, or one without rows (then no winner is recorded; the
        kernel's types stay those of a run with winners: one compilation serves both).
    """
    last = np.uint64(max(indices.shape[0] - 1, 0))
    step = np.uint64(ahead)
    one = np.uint64(1)
    for t in nb.prange(bounds.shape[0] - 1):
        for i in range(np.uint64(bounds[t]), np.uint64(bounds[t + 1])):
            oi = out[i]
            lo = indptr[i]
            hi = indptr[i + one]
            rec = arg.shape[0] != 0
            if rec:
                ai = arg[i]
                for c in range(ai.shape[0]):
                    ai[c] = np.int64(lo) if hi > lo else -1
            if hi == lo:
                for c in range(oi.shape[0]):
                    oi[c] = 0
                continue
            w = values[0] if iso else values[lo]
            xj = X[indices[lo]]
            for c in range(oi.shape[0]):
                oi[c] = sign * (w * xj[c] if is_times else w + xj[c])
            for p in range(lo + one, hi):
                if ahead > 0:
                    prefetch_row(X[indices[min(p + step, last)]])
                w = values[0] if iso else values[p]
                xj = X[indices[p]]
                if rec:                 # the feature loop twice: each vectorises
                    for c in range(oi.shape[0]):
                        v = sign * (w * xj[c] if is_times else w + xj[c])
                        take = v > oi[c]
                        oi[c] = v if take else oi[c]
                        ai[c] = np.int64(p) if take else ai[c]
                else:
                    for c in range(oi.shape[0]):
                        v = sign * (w * xj[c] if is_times else w + xj[c])
                        oi[c] = v if v > oi[c] else oi[c]
            if sign < 0:
                for c in range(oi.shape[0]):
                    oi[c] = -oi[c]


def run_extreme(pattern: CSRPattern, values: np.ndarray, iso: bool, X: np.ndarray, *,
                is_max: bool, is_times: bool = True, with_arg: bool = False
                ) -> tuple[np.ndarray, np.ndarray | None]:
    r"""``(Z, A)`` of :func:`extreme_rows` over a cached pattern: :math:`Z_{i,c} =
    \max_p / \min_p\ w_p \otimes X_{\mathrm{idx}[p], c}` and, with ``with_arg``, the winners
    ``A`` (int32 CSR positions when they fit, −1 for an empty row), else ``A = None``.

    Parameters
    ----------
    pattern : the CSR index buffers of ``S`` (:class:`~..patterns.CSRPattern`).
    values : ``S``'s values in CSR order (one value when ``iso``); cast to ``X``'s dtype.
    iso : whether one value stands for every entry.
    X : (pattern.ncols, k) C-contiguous float32 or float64 array.
    is_max, is_times : ``⊕ = max`` (else min), ``⊗ = ×`` (else +).
    with_arg : record the winners.
    """
    dt = X.dtype
    out = aligned_empty((pattern.nrows, X.shape[1]), dt)
    arg = np.empty(out.shape if with_arg else (0, X.shape[1]), index_dtype(pattern.nnz))
    ahead = prefetch_distance(X.shape[1] * dt.itemsize)
    with numba.parallel_chunksize(1):       # dynamic: one chunk of rows at a time
        extreme_rows(pattern.chunks, unsigned_view(pattern.indptr),
                     unsigned_view(pattern.indices),
                     values.astype(dt, copy=False), bool(iso), X,
                     dt.type(1 if is_max else -1), bool(is_times), ahead, out, arg)
    return out, arg if with_arg else None


def run_spmm_minmax(pattern: CSRPattern, values: np.ndarray, iso: bool, X: np.ndarray, *,
                    is_max: bool, is_times: bool) -> np.ndarray:
    """``Z = S ⊕.⊗ X`` over ``(min|max, +|×)`` (:func:`run_extreme` without winners): the
    semirings' fast lowering."""
    return run_extreme(pattern, values, iso, X, is_max=is_max, is_times=is_times)[0]


@nb.njit(parallel=True, cache=True)
def winner_edges(indptr, indices, arg, X, G, out):  # pragma: no cover (numba)
    r"""``out[p] = Σ_c [arg[i, c] = p] G[i, c] X[indices[p], c]`` for the entries ``p`` of
    every row ``i`` (:math:`\bar S` of ``⊗ = ×``; a row owns its entries: race free).
    ``indptr`` and ``indices`` unsigned (:func:`..patterns.unsigned_view`); a winner is
    read as unsigned once it is known not to be −1."""
    one = np.uint64(1)
    for t in nb.prange(indptr.shape[0] - 1):
        i = np.uint64(t)
        for p in range(indptr[i], indptr[i + one]):
            out[p] = 0
        ai = arg[i]
        for c in range(ai.shape[0]):
            if ai[c] >= 0:
                p = np.uint64(ai[c])
                out[p] += G[i, c] * X[indices[p], c]


@nb.njit(cache=True)
def winner_features(indices, weights, width, arg, G, out):  # pragma: no cover (numba)
    r"""``out[indices[p], h·width + c] += G[i, h·width + c] · weights[p, h]`` (or without the
    factor when ``weights`` is None: ``⊗ = +``) for every winner
    ``p = arg[i, h·width + c] ≥ 0``: :math:`\bar X` of the max/min aggregation; ``out`` is
    zeroed by the caller.

    Parameters
    ----------
    indices : the CSR column indices of the pattern, unsigned
        (:func:`..patterns.unsigned_view`).
    weights : (nnz, heads) array of ``G``'s dtype, or None
        The weight of every entry per head.
    width : int ≥ 1
        Features per head (``G.shape[1] = heads · width``).
    arg, G : (nrows, heads · width) winners and cotangents.
    out : (ncols, heads · width) array.

    Serial, in row order: a scatter of n·heads·width updates. Split by feature columns
    across threads (no two threads writing one element) it measured slower, with one and
    with two threads. Every index unsigned (rows, heads, features and the winners once known
    not to be −1): numba then tests none for wrap-around, which made the scatter markedly
    faster (``docs/performance.md``, the aggregation path, has the measurements).
    """
    one = np.uint64(1)
    w = np.uint64(width)
    for i in range(np.uint64(arg.shape[0])):
        ai = arg[i]
        gi = G[i]
        for h in range(np.uint64(ai.shape[0]) // w):
            for c in range(h * w, (h + one) * w):
                if ai[c] >= 0:
                    p = np.uint64(ai[c])
                    if weights is None:
                        out[indices[p], c] += gi[c]
                    else:
                        out[indices[p], c] += gi[c] * weights[p, h]
