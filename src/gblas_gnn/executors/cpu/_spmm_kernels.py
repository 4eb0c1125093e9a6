r"""numba kernels of the ``plus_times`` SpMM over CSR (or CSC) buffers, and the transposition
that builds those CSC buffers.

One kernel serves both products and the layers' fused forms:

.. math::
    Z_i = z_0 + \alpha X_i + \sum_{p \in \mathrm{row}\ i} w_p X_{\mathrm{idx}[p]}

over a CSR pattern (``Z = S X``, ``idx`` = column indices) or a CSC one (``Z = Sᵀ X``, the
CSR of ``Sᵀ``: ``idx`` = row indices), with ``z_0`` a bias row (or zeros) and the self term
:math:`\alpha X_i` of GIN's :math:`(1+\varepsilon) H + A H` (square ``S`` only). Each output
row is one thread's, its terms added in storage order, so the result is bitwise the same for
any thread count and schedule (no atomics). Rows are handed out in chunks of about equal
stored entries (:func:`..patterns.balanced_bounds`), scheduled dynamically: on a skewed graph
a static split by rows leaves one thread with the hubs, and on a shared machine a thread
that loses its core no longer holds the other one back.

Why it is built so (``docs/performance.md`` records each measurement): it is faster than
GraphBLAS's in-place ``saxpy5``, which needs a copy of ``X`` in and a fill of ``Z``. The
indices are int32: less index traffic, and a k-loop LLVM vectorises without widening (with
int64 indices the kernel gained little over ``saxpy5``). A per-edge column scale instead of
stored values gained nothing (the normalised values stay), and dynamic chunks cost about
what a static split does. The kernel prefetches the row it will gather 32 entries later: a small
gain while ``X`` stays in L3, a large one when the feature matrix misses the caches (8
entries ahead gained nothing, 64 or 128 no more than 32). The prefetch's step of one cache
line is a constant of the compiled kernel (:func:`._kernel_primitives.prefetch_row`): read
from the array at run time it cost a division per gathered row, which slowed the
unweighted product markedly. Unsigned pointers and indices (no wraparound test of a
negative index on every access) made it faster again, on one thread and on two.
:func:`spmm_tiled_rows` is the same pass over source-column tiles, for a feature matrix
larger than the last-level cache whose gathers miss it (DistGNN's cache blocking).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from ._kernel_primitives import prefetch_row
from ._lanes import lane_count, lanes_div, lanes_fma, lanes_load, lanes_splat, lanes_store

__all__ = ["prefetch_distance", "spmm_rows", "spmm_tiled_rows", "transpose_csr"]

# reassociation and fused multiply-adds let LLVM vectorise the k-loop; the order in which a
# row's terms are added is fixed by the compiled code, so results stay reproducible
_FAST = {"reassoc", "contract"}
# bytes of gathered rows a product asks for ahead of the one it adds (see prefetch_distance)
_PREFETCH_BYTES = 4096


def prefetch_distance(row_bytes: int) -> int:
    """Entries ahead whose row :func:`spmm_rows` prefetches: about 4 KiB of gathered rows in
    flight, between 8 and 64 entries (32 for rows of 32 float32)."""
    return int(min(64, max(8, _PREFETCH_BYTES // max(int(row_bytes), 1))))

@nb.njit(inline="always", fastmath=_FAST)
def _start_row(oi, z0, X, i, alpha, use_self):
    """``oi = z0 (+ alpha·X[i])``: the first value of output row ``i``."""
    for c in range(oi.shape[0]):
        oi[c] = z0[c]
    if use_self:
        xi = X[i]
        for c in range(oi.shape[0]):
            oi[c] += alpha * xi[c]


@nb.njit(inline="always", fastmath=_FAST)
def _add_row(oi, w, xj):
    """``oi += w·xj``: one gathered term."""
    for c in range(oi.shape[0]):
        oi[c] += w * xj[c]


@nb.njit(inline="always", fastmath=_FAST)
def _divide_row(oi, d):
    """``oi /= d``: the mean's division, as the row is finished."""
    for c in range(oi.shape[0]):
        oi[c] /= d


@nb.njit(inline="always")
def _weight(values, iso, p, scale, j):
    """The weight of entry ``p`` (column ``j``): ``values[0]`` when ``iso`` else
    ``values[p]``, times ``scale[j]`` when ``scale`` is not empty."""
    w = values[0] if iso else values[p]
    if scale.shape[0] > 0:
        w = w * scale[j]
    return w


@nb.njit(parallel=True, cache=True, fastmath=_FAST)
def spmm_rows(bounds, indptr, indices, values, iso, X, alpha, use_self, z0, ahead, divisors,
              scale, accumulate, out):
    """``out[i] = s_i + (z0 + alpha·X[i] (if use_self) + Σ_{p ∈ row i} w_p X[indices[p]]) / d_i``,
    with ``w_p = values[0]`` when ``iso`` (one value for every entry) else ``values[p]``,
    times ``scale[indices[p]]`` when ``scale`` is not empty (a scale per gathered row: the
    mean's backward divides each cotangent row by its count as it gathers it), ``d_i =
    divisors[i]`` (no division when ``divisors`` is empty: the mean aggregation's division by
    the row counts is this pass's, not one more over ``out``) and ``s_i`` the row ``out[i]``
    holds on entry with ``accumulate`` (a cotangent added into the sum the backward holds),
    else 0; the row gathered ``ahead`` entries later is prefetched (:func:`prefetch_distance`).

    A row's sum is held in vector registers (:mod:`._lanes`): blocks of four vectors of
    columns (32 float32 columns), then blocks of one, each block's terms summed over the
    row's entries and stored once; the last ``k mod L`` columns are summed in the output row.
    Every column's operations are the same in each form (a fused multiply-add per term, in
    storage order), so the result does not depend on the width either.

    ``bounds``: chunks of rows (:func:`..patterns.balanced_bounds`); ``indptr`` and
    ``indices`` unsigned (:func:`..patterns.unsigned_view`: every index then goes without
    numba's wraparound of a negative one); ``X`` (ncols, k) and ``out`` (nrows, k)
    C-contiguous of one dtype, ``values``, ``z0`` (k,) and ``divisors`` of that dtype too.
    Call it under ``numba.parallel_chunksize(1)`` so that the chunks are handed out one at a
    time (a setting inside the kernel would keep numba from caching it).
    """
    last = np.uint64(max(indices.shape[0] - 1, 0))
    step = np.uint64(ahead)
    one = np.uint64(1)
    divide = divisors.shape[0] > 0
    k = np.uint64(X.shape[1])
    lanes = np.uint64(lane_count(X))
    block = np.uint64(4) * lanes
    blocks_end = k // block * block             # columns in blocks of four vectors
    vectors_end = k // lanes * lanes            # ... then of one vector
    Xf = X.reshape(X.size)
    of = out.reshape(out.size)
    one_v = lanes_splat(X, X.dtype.type(1))
    for t in nb.prange(bounds.shape[0] - 1):
        tail = np.empty(k - vectors_end, X.dtype)     # the columns past the last vector
        for i in range(np.uint64(bounds[t]), np.uint64(bounds[t + 1])):
            lo = indptr[i]
            hi = indptr[i + one]
            base = i * k
            c = np.uint64(0)
            while c < blocks_end:
                c1, c2, c3 = c + lanes, c + np.uint64(2) * lanes, c + np.uint64(3) * lanes
                a0 = lanes_load(z0, c)
                a1 = lanes_load(z0, c1)
                a2 = lanes_load(z0, c2)
                a3 = lanes_load(z0, c3)
                if use_self:
                    s = lanes_splat(X, alpha)
                    a0 = lanes_fma(s, lanes_load(Xf, base + c), a0)
                    a1 = lanes_fma(s, lanes_load(Xf, base + c1), a1)
                    a2 = lanes_fma(s, lanes_load(Xf, base + c2), a2)
                    a3 = lanes_fma(s, lanes_load(Xf, base + c3), a3)
                for p in range(lo, hi):
                    if c == 0:
                        prefetch_row(X[indices[min(p + step, last)]])
                    w = lanes_splat(X, _weight(values, iso, p, scale, indices[p]))
                    o = indices[p] * k
                    a0 = lanes_fma(w, lanes_load(Xf, o + c), a0)
                    a1 = lanes_fma(w, lanes_load(Xf, o + c1), a1)
                    a2 = lanes_fma(w, lanes_load(Xf, o + c2), a2)
                    a3 = lanes_fma(w, lanes_load(Xf, o + c3), a3)
                if divide:
                    d = lanes_splat(X, divisors[i])
                    a0 = lanes_div(a0, d)
                    a1 = lanes_div(a1, d)
                    a2 = lanes_div(a2, d)
                    a3 = lanes_div(a3, d)
                if accumulate:
                    a0 = lanes_fma(one_v, lanes_load(of, base + c), a0)
                    a1 = lanes_fma(one_v, lanes_load(of, base + c1), a1)
                    a2 = lanes_fma(one_v, lanes_load(of, base + c2), a2)
                    a3 = lanes_fma(one_v, lanes_load(of, base + c3), a3)
                lanes_store(of, base + c, a0)
                lanes_store(of, base + c1, a1)
                lanes_store(of, base + c2, a2)
                lanes_store(of, base + c3, a3)
                c += block
            while c < vectors_end:
                a0 = lanes_load(z0, c)
                if use_self:
                    a0 = lanes_fma(lanes_splat(X, alpha), lanes_load(Xf, base + c), a0)
                for p in range(lo, hi):
                    if c == 0:
                        prefetch_row(X[indices[min(p + step, last)]])
                    a0 = lanes_fma(lanes_splat(X, _weight(values, iso, p, scale, indices[p])),
                                   lanes_load(Xf, indices[p] * k + c), a0)
                if divide:
                    a0 = lanes_div(a0, lanes_splat(X, divisors[i]))
                if accumulate:
                    a0 = lanes_fma(one_v, lanes_load(of, base + c), a0)
                lanes_store(of, base + c, a0)
                c += lanes
            if c < k:
                oi = out[i, c:]
                _start_row(tail, z0[c:], X[:, c:], i, alpha, use_self)
                for p in range(lo, hi):
                    if c == 0:
                        prefetch_row(X[indices[min(p + step, last)]])
                    _add_row(tail, _weight(values, iso, p, scale, indices[p]),
                             X[indices[p], c:])
                if divide:
                    _divide_row(tail, divisors[i])
                for q in range(tail.shape[0]):
                    oi[q] = oi[q] + tail[q] if accumulate else tail[q]


@nb.njit(parallel=True, cache=True, fastmath=_FAST)
def spmm_tiled_rows(bounds, indptr, offsets, indices, values, iso, X, alpha, use_self, z0,
                    rows_ahead, divisors, scale, out):
    r""":func:`spmm_rows` over the column tiles of the pattern
    (:class:`..patterns.ColumnTiles`: tile ``b``'s entries of row ``i`` are the positions
    ``indptr[i] + offsets[b, i]`` up to ``indptr[i] + offsets[b + 1, i]``): tiles in order on
    the outside, the chunks of rows ``bounds`` in parallel inside, each tile's terms added
    straight into the output rows,

    .. math:: Z_i \leftarrow z_0 + \alpha X_i, \quad
        Z_i \leftarrow Z_i + \sum_{p \in \mathrm{tile}\ b,\ \mathrm{row}\ i} w_p
        X_{\mathrm{idx}[p]} \ (b = 0, \dots, T - 1), \quad Z_i \leftarrow Z_i / d_i,

    so that while one tile runs only its rows of ``X`` are gathered, and they stay in the
    last-level cache (the tile width: :func:`._spmm.tile_width`). The tiles are contiguous
    column ranges visited in order and a row's columns ascend, so every row's terms are
    added in storage order, with the very operations of :func:`spmm_rows` (its weights'
    ``scale`` too; its ``accumulate`` is the caller's sum after the pass): the result is
    bitwise the same. The entries of the same tile ``rows_ahead`` rows later are prefetched
    (a row's next entries in storage order lie in other tiles)."""
    tiles = np.uint64(offsets.shape[0] - 1)
    nrows = np.uint64(offsets.shape[1])
    one = np.uint64(1)
    ahead = np.uint64(rows_ahead)
    divide = divisors.shape[0] > 0
    for b in range(tiles):
        for t in nb.prange(bounds.shape[0] - 1):
            for i in range(np.uint64(bounds[t]), np.uint64(bounds[t + 1])):
                oi = out[i]
                if b == 0:
                    _start_row(oi, z0, X, i, alpha, use_self)
                r = min(i + ahead, nrows - one)
                for p in range(indptr[r] + offsets[b, r], indptr[r] + offsets[b + one, r]):
                    prefetch_row(X[indices[p]])
                for p in range(indptr[i] + offsets[b, i], indptr[i] + offsets[b + one, i]):
                    _add_row(oi, _weight(values, iso, p, scale, indices[p]), X[indices[p]])
                if divide and b + one == tiles:
                    _divide_row(oi, divisors[i])


@nb.njit(cache=True)
def transpose_csr(indptr, indices, values, iso, colptr, rows, values_t):
    """The CSC form of a CSR pattern by a counting sort (two passes over the entries, no
    index array wider than the inputs; stable: the rows of a column come out ascending).
    Fills ``colptr`` (ncols + 1, zeros on entry), ``rows`` (nnz) and, unless ``iso``,
    ``values_t`` (nnz)."""
    nrows = indptr.shape[0] - 1
    ncols = colptr.shape[0] - 1
    for p in range(indices.shape[0]):
        colptr[indices[p] + 1] += 1
    for j in range(ncols):
        colptr[j + 1] += colptr[j]
    nxt = colptr[:-1].copy()
    for i in range(nrows):
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            q = nxt[j]
            nxt[j] = q + 1
            rows[q] = i
            if not iso:
                values_t[q] = values[p]
