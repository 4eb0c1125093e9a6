r"""numba kernels of the dense row operations of the ``cpu`` executor: the reduction over
vertices, per-row dot products and per-row linear combinations.

:func:`column_sums` is :math:`\sum_i X_i` (the bias gradient :math:`\partial Z^\top
\mathbf{1}` of every layer) as one pass over the rows, a partial sum per fixed chunk of rows
added into a float64 total (more accurate than one running float32 sum, and independent of
any thread count). It runs on one thread: the pass is bound by memory, and a parallel region
costs more than it saves when another job holds a core (and far more under the default
spinning OpenMP wait policy). It is also faster than numpy's ``X.sum(axis=0)``
(``docs/performance.md`` has the measurement). Its chunks' partials (:func:`chunk_sums`) are
also taken by a matmul's backward from the blocks of rows of the cotangent it reads anyway
(:func:`._chunked_gemm.matmul_vjp_blocks`), and :func:`total_of` adds them the same way: the
same bits as :func:`column_sums` of the whole array.

:func:`row_dots` (:math:`r_i = \langle X_i, Y_i \rangle`) and :func:`combine_rows`
(:math:`O_i = a_i X_i + b_i Y_i`) are one pass each, on one thread for the same reason, where
numpy takes a pass per operation and an (n, k) temporary for each (a row normalisation's
backward was four passes and two temporaries).
"""

from __future__ import annotations

import sys

import numba as nb
import numpy as np

from ._helper_threads import run_all
from ._shares import run_rows, static_kernel

__all__ = ["ROWS_PER_CHUNK", "SKINNY_WIDTH", "THREADED_ZEROS", "chunk_count", "chunk_sums",
           "column_sums", "row_dots", "combine_rows", "dense_rows", "skinny",
           "skinny_matmul_vjp", "total_of", "zero_rows"]

_FAST = {"reassoc", "contract"}
#: rows per chunk of a reduction over vertices (fixed: it decides the summation order)
ROWS_PER_CHUNK = 4096
#: the bytes from which :func:`zero_rows` fills on several threads (below, handing rows to a
#: helper costs about what it saves)
THREADED_ZEROS = 1 << 22
#: the widest cotangent ``G`` whose matmul backward :func:`skinny_matmul_vjp` takes (at 8
#: the two BLAS calls were faster: 3.40 against 3.67 ms at n = 10⁵, k = 32)
SKINNY_WIDTH = 4
#: rows per block of :func:`skinny_matmul_vjp` (fixed: it decides the summation order)
SKINNY_ROWS = 2048


@nb.njit(nogil=True, cache=True, fastmath=_FAST)
def chunk_sums(X, partials):                   # pragma: no cover (numba)
    """``partials[q] = Σ_i X_i`` over chunk ``q`` of :data:`ROWS_PER_CHUNK` rows of ``X``
    (the rows in order, in ``X``'s dtype; ``partials`` has a row per chunk), the GIL
    released: a block of rows whose first row starts a chunk gives its chunks' partials,
    and any split of the rows at chunk boundaries the same numbers."""
    n = X.shape[0]
    for q in range(partials.shape[0]):
        part = partials[q]
        for c in range(part.shape[0]):
            part[c] = 0
        for i in range(q * ROWS_PER_CHUNK, min(n, (q + 1) * ROWS_PER_CHUNK)):
            xi = X[i]
            for c in range(part.shape[0]):
                part[c] += xi[c]


@nb.njit(cache=True)
def _total(partials, total):                   # pragma: no cover (numba)
    for c in range(total.shape[0]):
        total[c] = 0
    for q in range(partials.shape[0]):
        for c in range(total.shape[0]):
            total[c] += partials[q, c]


def chunk_count(rows: int) -> int:
    """The chunks of :data:`ROWS_PER_CHUNK` rows that ``rows`` rows make."""
    return -(-rows // ROWS_PER_CHUNK)


def total_of(partials: np.ndarray) -> np.ndarray:
    """The chunks' partial sums (:func:`chunk_sums`, in chunk order) added in float64, one
    after the other, in the partials' dtype: the column sums."""
    total = np.empty(partials.shape[1], np.float64)
    _total(partials, total)
    return total.astype(partials.dtype)


def column_sums(X: np.ndarray) -> np.ndarray:
    r""":math:`s_c = \sum_i X_{ic}` of a C-contiguous 2-D float array, shape ``(k,)`` and
    ``X``'s dtype: a partial sum per chunk of :data:`ROWS_PER_CHUNK` rows in ``X``'s dtype,
    the partial sums added in float64 (:func:`total_of`)."""
    partials = np.empty((chunk_count(X.shape[0]), X.shape[1]), X.dtype)
    chunk_sums(X, partials)
    return total_of(partials)


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



def zero_rows(out: np.ndarray, gaps: list[slice], threads: int) -> None:
    """``out[gap] = 0`` for each slice of rows in ``gaps``: the rows split into ``threads``
    runs of about equal length, filled at once (numpy's fill runs without the GIL), from
    :data:`THREADED_ZEROS` bytes on; one thread below. Filling 2.5·10⁵ rows of 32 float32
    (HGT's stacked arrays outside their live rows): 0.89 ms on one thread, 0.42 on two (AMD
    EPYC family 26)."""
    runs = [range(*gap.indices(out.shape[0])) for gap in gaps]
    rows = sum(len(r) for r in runs)
    row_bytes = out.nbytes // max(out.shape[0], 1)
    if threads < 2 or rows * row_bytes < THREADED_ZEROS:
        for r in runs:
            out[r.start:r.stop].fill(0)
        return
    parts: list[list[slice]] = [[] for _ in range(threads)]
    per = -(-rows // threads)
    part, room = 0, per
    for r in runs:
        start = r.start
        while start < r.stop:
            take = min(room, r.stop - start)
            parts[part].append(slice(start, start + take))
            start, room = start + take, room - take
            if room == 0:
                part, room = part + 1, per
    run_all([lambda pieces=pieces: [out[s].fill(0) for s in pieces] for pieces in parts])


def dense_rows(*arrays) -> bool:
    """Whether ``arrays`` are C-contiguous 2-D float arrays of one shape and dtype (what
    :func:`row_dots` and :func:`combine_rows` take)."""
    first = arrays[0]
    return all(isinstance(x, np.ndarray) and x.ndim == 2 and x.flags.c_contiguous
               and x.dtype in (np.float32, np.float64) and x.shape == first.shape
               and x.dtype == first.dtype for x in arrays)


@nb.njit(cache=True, fastmath=_FAST, _nrt=False)
def skinny_blocks(G, WT, X, into, partials, rows, b0, b1):  # pragma: no cover (numba)
    """For the blocks ``b`` in ``[b0, b1)`` of ``rows`` rows: ``into[i] += Σ_h G[i, h] WT[h]``
    and ``partials[b, h] = Σ_i G[i, h] X[i]`` over the block's rows (serial; run on threads
    by :func:`._shares.run_rows`, its rows counted signed)."""
    n = G.shape[0]
    for b in range(np.int64(b0), np.int64(b1)):
        acc = partials[b]
        for h in range(G.shape[1]):
            for c in range(X.shape[1]):
                acc[h, c] = 0
        for i in range(b * rows, min(n, (b + 1) * rows)):
            xi = X[i]
            oi = into[i]
            for h in range(G.shape[1]):
                g = G[i, h]
                w = WT[h]
                a = acc[h]
                for c in range(X.shape[1]):
                    oi[c] += g * w[c]
                    a[c] += g * xi[c]


def skinny(G: np.ndarray, W: np.ndarray, X: np.ndarray, into: np.ndarray) -> bool:
    """Whether :func:`skinny_matmul_vjp` takes the backward of ``Y = X W`` for the cotangent
    ``G``: 2-D C-contiguous float arrays of one dtype, ``G`` at most :data:`SKINNY_WIDTH`
    wide (the product of a layer's attention scores ``X B``)."""
    return (G.ndim == X.ndim == W.ndim == into.ndim == 2 and G.shape[1] <= SKINNY_WIDTH
            and G.dtype == W.dtype == X.dtype == into.dtype
            and G.dtype in (np.float32, np.float64)
            and all(a.flags.c_contiguous for a in (G, X, into)))


def skinny_matmul_vjp(G: np.ndarray, W: np.ndarray, X: np.ndarray,
                      into: np.ndarray) -> np.ndarray:
    r"""``into += G Wᵀ`` and :math:`X^\top G` in one pass over the rows, for a narrow ``G``
    (:func:`skinny`): each row of ``into`` read and written once, each row of ``X`` read
    once, on numba's threads by blocks of :data:`SKINNY_ROWS` rows; :math:`X^\top G` as one
    partial per block summed in block order (in float64), so the same bits for any thread
    count. Returns :math:`X^\top G` (k, h). Two BLAS calls with an inner width of ``h``
    move the same bytes more slowly: at n = 10⁵, k = 32, AMD EPYC, h = 2 1.10 against 2.57
    ms, h = 4 1.34 against 2.70 ms."""
    blocks = -(-G.shape[0] // SKINNY_ROWS)
    partials = np.empty((blocks, G.shape[1], X.shape[1]), G.dtype)
    run_rows(static_kernel(sys.modules[__name__], "skinny_blocks"), blocks, True, G,
             np.ascontiguousarray(W.T), X, into, partials, SKINNY_ROWS)
    return np.ascontiguousarray(partials.sum(axis=0, dtype=np.float64).T.astype(G.dtype))

