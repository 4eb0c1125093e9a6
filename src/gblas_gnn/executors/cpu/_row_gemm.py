r"""A tall, narrow product ``X W`` whose output rows are summed in vector registers: the
layers' projections of ``n`` rows to 32 or 64 channels, faster there than OpenBLAS's
general kernel.

.. math::
    Y_i = \Big(\textstyle\sum_{k < K} X_{ik} W_{k,:}\Big) \ [+\, b] \ [+\, Y_i^{\text{old}}]

Two rows at a time, each block of four vectors of columns (32 float32 or 16 float64) of both
rows is held in eight registers over the whole inner dimension: per ``k`` four loads of
``W``'s row (from L1: ``W`` is at most 64 columns wide), two broadcasts of ``X`` and eight
fused multiply-adds. Then the bias and the old row are added, each with one rounding, in
that order: the same operations as the product followed by numpy's ``+ b`` or BLAS's
``beta = 1``, so a layer's result does not depend on which of its calls took this kernel.
Each row's sum runs over ``k`` in order in its own lanes, so the result is the same bits for
any split of the rows among threads.

Why: OpenBLAS's sgemm packs its operands for any shape and keeps a 32-wide block of outputs
in registers only across its own small panels; for the layers' shapes this kernel measured
0.81–0.95 of its time on float32 (one thread, AMD EPYC, ``n`` up to 10⁵, ``K`` 8–512, ``N``
32 and 64) and 0.56–0.86 on float64 up to ``K`` = 64 (1.21 at 256), and lost from 128
columns on (1.00–1.49): hence :data:`MAX_COLUMNS` (``docs/performance.md``, dense
products). Both kernels work in 32-byte vectors, the width of OpenBLAS's AVX2 kernels (its
``Haswell`` and ``Zen`` sets, which the AMD EPYC runs); where OpenBLAS runs wider kernels
(AVX-512) they were not measured, and :func:`enabled` leaves every product to BLAS.
"""

from __future__ import annotations

import functools

import numba as nb
import numpy as np

from ._lanes import lane_count, lanes_fma, lanes_load, lanes_splat, lanes_store

__all__ = ["AVX2_KERNELS", "INNER_MAX_DEPTH", "INNER_MAX_ROW_BYTES", "MAX_COLUMNS", "enabled",
           "fits", "inner_fits", "inner_into", "openblas_kernels", "product_into", "rows_inner",
           "rows_product"]

#: OpenBLAS's kernel sets whose products use 32-byte vectors, as these kernels do
AVX2_KERNELS = frozenset({"haswell", "zen"})
#: the widest output (columns of ``W``) this kernel takes; from 128 on OpenBLAS was faster
MAX_COLUMNS = 64
#: vectors of one block of columns (the registers of a row's block: two rows, eight sums)
_BLOCK_VECTORS = 4
#: rows of ``X`` and ``G`` an inner product runs each tile of its output over before the next
#: tile (16 of 16–256 measured fastest at 32 × 32 float32: 3.07 against 3.28–3.90 ms at 10⁵ rows)
_INNER_ROWS = 16
#: rows an inner product sums in one chain before it adds that chunk's sum to the result (the
#: executor's blocks of rows, ``_chunked_gemm.ROWS``, are one chunk each)
_INNER_CHUNK = 8192
#: the widest ``X`` (rows of ``Xᵀ G``) and the widest row of ``G`` in bytes the inner product
#: takes: beyond them OpenBLAS was as fast or faster (one thread, AMD EPYC, 10⁵ rows: float32
#: 0.66–0.84 of its time up to 32 × 64, 0.96–1.06 from 48 columns of ``X`` on; float64
#: 0.56–0.80 up to 32 × 32, 1.17 at 32 × 64)
INNER_MAX_DEPTH = 32
INNER_MAX_ROW_BYTES = 256
#: a product, then one sum: LLVM may contract nothing else
_CONTRACT = {"contract"}


@functools.cache
def openblas_kernels() -> frozenset[str]:
    """The kernel sets (``threadpoolctl``'s lower-cased ``architecture``) of the OpenBLAS
    libraries this process has loaded; empty where it has none (another BLAS)."""
    from threadpoolctl import threadpool_info

    return frozenset(str(lib.get("architecture", "")).lower() for lib in threadpool_info()
                     if lib.get("internal_api") == "openblas")


def enabled() -> bool:
    """Whether the kernels here take the products they fit: where every OpenBLAS loaded runs
    an AVX2 kernel set (:data:`AVX2_KERNELS`), which they were measured against."""
    kernels = openblas_kernels()
    return bool(kernels) and kernels <= AVX2_KERNELS


def _column_block(*arrays) -> int:
    """Columns of one block of four vectors of the arrays' float type, where the kernels are
    :func:`enabled` and the arrays are 2-D, C-contiguous and all float32 or all float64;
    else 0."""
    if not enabled() or not all(isinstance(a, np.ndarray) and a.ndim == 2
                                and a.flags.c_contiguous for a in arrays):
        return 0
    dtype = arrays[0].dtype
    if dtype not in (np.float32, np.float64) or any(a.dtype != dtype for a in arrays):
        return 0
    return _BLOCK_VECTORS * (32 // dtype.itemsize)


def fits(X, W, out) -> bool:
    """Whether :func:`rows_product` computes ``out = X W``: the kernels :func:`enabled`,
    float32 or float64 arrays of one dtype, all C-contiguous, 2-D of matching shapes, and
    ``W`` a whole number of column blocks (32 float32 or 16 float64 columns) of at most
    :data:`MAX_COLUMNS`."""
    block = _column_block(X, W, out)
    n, k = X.shape if block else (0, 0)
    return (block > 0 and W.shape[0] == k and k > 0 and out.shape == (n, W.shape[1])
            and 0 < W.shape[1] <= MAX_COLUMNS and W.shape[1] % block == 0)


def product_into(out, X, W, bias=None, accumulate: bool = False) -> bool:
    """``out[...] = X W (+ b) (+ out, with accumulate)`` by :func:`rows_product` over every
    row when the arrays fit it (``W`` may be a transposed view: it is made contiguous once,
    at most 64 columns of it); False, with nothing written, when they do not (the caller's
    BLAS call then computes it)."""
    if not (enabled() and isinstance(out, np.ndarray) and isinstance(W, np.ndarray)
            and W.ndim == 2 and W.shape[1] <= MAX_COLUMNS):
        return False
    W = np.ascontiguousarray(W)
    if bias is not None:
        # numpy's ``+ b`` of another dtype would round differently: BLAS's path takes it
        if not (isinstance(bias, np.ndarray) and bias.dtype == out.dtype
                and bias.shape == (W.shape[1],)):
            return False
        bias = np.ascontiguousarray(bias)
    if not fits(X, W, out):
        return False
    empty = bias if bias is not None else np.zeros(0, out.dtype)
    rows_product(X, W, empty, bool(accumulate), out, np.uint64(0), np.uint64(X.shape[0]))
    return True


@nb.njit(nogil=True, cache=True, fastmath=_CONTRACT)
def rows_product(X, W, bias, accumulate, out, r0, r1):
    """``out[i] = X[i] W (+ bias, when it is not empty) (+ out[i], with accumulate)`` for
    the rows ``r0 ≤ i < r1`` (unsigned), the arrays as :func:`fits` says; the GIL released,
    so that threads of the caller's run their rows at once."""
    k_in, width, lanes, Xf, Wf, of, one = _views(X, W, out)
    zero = lanes_splat(X, 0.0)
    with_bias = bias.shape[0] > 0
    i = r0
    while i < r1:
        second = i + np.uint64(1) < r1
        j = i + np.uint64(1) if second else i          # a last odd row: computed twice
        c = np.uint64(0)
        while c < width:
            a0, a1, a2, a3 = zero, zero, zero, zero
            b0, b1, b2, b3 = zero, zero, zero, zero
            xa, xb = i * k_in, j * k_in
            w = c
            for k in range(k_in):
                w0, w1, w2, w3 = _tile(Wf, w, lanes)
                a0, a1, a2, a3, b0, b1, b2, b3 = _two_rows(
                    lanes_splat(X, Xf[xa + k]), lanes_splat(X, Xf[xb + k]), w0, w1, w2, w3,
                    a0, a1, a2, a3, b0, b1, b2, b3)
                w += width
            if with_bias:
                e0, e1, e2, e3 = _tile(bias, c, lanes)
                a0, a1, a2, a3, b0, b1, b2, b3 = _two_rows(
                    one, one, e0, e1, e2, e3, a0, a1, a2, a3, b0, b1, b2, b3)
            _finish(of, i * width + c, lanes, accumulate, one, a0, a1, a2, a3)
            if second:
                _finish(of, j * width + c, lanes, accumulate, one, b0, b1, b2, b3)
            c += np.uint64(_BLOCK_VECTORS) * lanes
        i += np.uint64(2)


@nb.njit(inline="always")
def _views(X, B, out):
    """What both kernels start from: ``X``'s width, ``B``'s width (the output's), the lanes
    of a vector, the three arrays flat, and a vector of ones."""
    return (np.uint64(X.shape[1]), np.uint64(B.shape[1]), np.uint64(lane_count(X)),
            X.reshape(X.size), B.reshape(B.size), out.reshape(out.size), lanes_splat(X, 1.0))


@nb.njit(inline="always", fastmath=_CONTRACT)
def _two_rows(s, t, v0, v1, v2, v3, a0, a1, a2, a3, b0, b1, b2, b3):
    """One step of two rows' sums: ``a += s·v`` and ``b += t·v`` over four vectors ``v``,
    one fused multiply-add each."""
    return (lanes_fma(s, v0, a0), lanes_fma(s, v1, a1), lanes_fma(s, v2, a2),
            lanes_fma(s, v3, a3), lanes_fma(t, v0, b0), lanes_fma(t, v1, b1),
            lanes_fma(t, v2, b2), lanes_fma(t, v3, b3))


@nb.njit(inline="always", fastmath=_CONTRACT)
def _finish(of, o, lanes, accumulate, one, a0, a1, a2, a3):
    """Store a row's block of four vectors at ``of[o:]``, added to what it holds with
    ``accumulate`` (one rounding each: ``1 · old + a``)."""
    two, three = np.uint64(2) * lanes, np.uint64(3) * lanes
    if accumulate:
        a0 = lanes_fma(one, lanes_load(of, o), a0)
        a1 = lanes_fma(one, lanes_load(of, o + lanes), a1)
        a2 = lanes_fma(one, lanes_load(of, o + two), a2)
        a3 = lanes_fma(one, lanes_load(of, o + three), a3)
    lanes_store(of, o, a0)
    lanes_store(of, o + lanes, a1)
    lanes_store(of, o + two, a2)
    lanes_store(of, o + three, a3)


def inner_fits(X, G, out) -> bool:
    """Whether :func:`rows_inner` computes ``out = Xᵀ G``: the kernels :func:`enabled`,
    float32 or float64 arrays of one dtype, all C-contiguous and 2-D, ``X`` and ``G`` of the
    same rows, ``out`` of shape ``(X's columns, G's columns)``, ``X`` at most
    :data:`INNER_MAX_DEPTH` columns wide and ``G`` a whole number of column blocks of at most
    :data:`INNER_MAX_ROW_BYTES` a row."""
    block = _column_block(X, G, out)
    return (block > 0 and G.shape[0] == X.shape[0] and 0 < X.shape[1] <= INNER_MAX_DEPTH
            and out.shape == (X.shape[1], G.shape[1])
            and 0 < G.shape[1] * X.itemsize <= INNER_MAX_ROW_BYTES
            and G.shape[1] % block == 0)


def inner_into(out, X, G) -> bool:
    """``out[...] = Xᵀ G`` by :func:`rows_inner` over every row when the arrays fit it
    (:func:`inner_fits`); False, with nothing written, when they do not."""
    if not inner_fits(X, G, out):
        return False
    rows_inner(X, G, out, np.uint64(0), np.uint64(X.shape[0]))
    return True


@nb.njit(nogil=True, cache=True, fastmath=_CONTRACT)
def rows_inner(X, G, out, r0, r1):
    r"""``out = Σ_{r0 ≤ i < r1} X[i]ᵀ G[i]`` (unsigned bounds; the arrays as
    :func:`inner_fits` says), the GIL released.

    The rows are summed in chunks of :data:`_INNER_CHUNK` from ``r0``, each entry of a
    chunk's sum over its rows in order, one fused multiply-add a row, from zero; the chunks'
    sums are then added into ``out`` in order (a float32 sum of 10⁶ terms in one chain would
    drift: tested). Tiles of two rows of a chunk's sum by four vectors of columns are held in
    registers while they run over a block of :data:`_INNER_ROWS` rows of ``X`` and ``G``
    (per row: four loads of ``G``'s row, two broadcasts of ``X``'s, eight fused
    multiply-adds), then stored, and loaded again to go on over the next block."""
    k_in, width, lanes, Xf, Gf, of, one = _views(X, G, out)
    part = np.empty(of.shape[0], X.dtype)                     # one chunk's sum
    for q in range(of.shape[0]):
        of[q] = 0.0
    start = r0
    while start < r1:
        stop = min(start + np.uint64(_INNER_CHUNK), r1)
        for q in range(part.shape[0]):
            part[q] = 0.0
        _chunk_inner(Xf, Gf, part, k_in, width, lanes, one, start, stop)
        for q in range(of.shape[0]):
            of[q] += part[q]
        start = stop


@nb.njit(inline="always", fastmath=_CONTRACT)
def _chunk_inner(Xf, Gf, pf, k_in, width, lanes, one, r0, r1):
    """:func:`rows_inner`'s sum of the rows ``[r0, r1)`` added into the flat ``pf``."""
    s = r0
    while s < r1:
        e = min(s + np.uint64(_INNER_ROWS), r1)
        k = np.uint64(0)
        while k < k_in:
            second = k + np.uint64(1) < k_in
            h = k + np.uint64(1) if second else k      # a last odd column: computed twice
            c = np.uint64(0)
            while c < width:
                a0, a1, a2, a3 = _tile(pf, k * width + c, lanes)     # the sums so far
                b0, b1, b2, b3 = _tile(pf, h * width + c, lanes)
                for i in range(s, e):
                    g0, g1, g2, g3 = _tile(Gf, i * width + c, lanes)
                    a0, a1, a2, a3, b0, b1, b2, b3 = _two_rows(
                        lanes_splat(Xf, Xf[i * k_in + k]), lanes_splat(Xf, Xf[i * k_in + h]),
                        g0, g1, g2, g3, a0, a1, a2, a3, b0, b1, b2, b3)
                _finish(pf, k * width + c, lanes, False, one, a0, a1, a2, a3)
                if second:
                    _finish(pf, h * width + c, lanes, False, one, b0, b1, b2, b3)
                c += np.uint64(_BLOCK_VECTORS) * lanes
            k += np.uint64(2)
        s = e


@nb.njit(inline="always")
def _tile(of, o, lanes):
    """The four vectors at ``of[o:]``."""
    return (lanes_load(of, o), lanes_load(of, o + lanes),
            lanes_load(of, o + np.uint64(2) * lanes), lanes_load(of, o + np.uint64(3) * lanes))
