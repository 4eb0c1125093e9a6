r"""A tall product ``X W`` as one BLAS call per fixed block of rows, the blocks shared among
threads that each run one BLAS thread.

.. math::  (X W)[r_b : r_{b+1}] = X[r_b : r_{b+1}]\, W, \qquad r_b = \min(b\,R, n)

with ``R`` = :data:`ROWS` rows a block. The blocks do not depend on the thread count, so the
result is the same bits on one thread or many (OpenBLAS's result for a row depends on the
call's row count, so splitting the rows by thread would not be). Thread ``t`` of ``T`` runs
blocks ``[⌊tB/T⌋, ⌊(t+1)B/T⌋)`` of the ``B`` blocks.

Why: the executor's products run one OpenBLAS thread, because a second one spin-waits against
the GraphBLAS and numba OpenMP threads of the sparse steps (``GraphBLASExecutor.gemm``). Two
Python threads that each call BLAS on their own rows use both cores without that spin, and
the gain grows with the width (``docs/performance.md``, tall products on both cores, has the
measured record).

:func:`matmul` is the cpu executors' dense product: OpenBLAS held at the executor's thread
count, and the blocks of rows from :data:`PAIR_WORK` of work on.

A block whose shapes the register-blocked kernels of :mod:`._row_gemm` take (outputs of 32
or 64 columns, on a machine whose OpenBLAS runs AVX2 kernels) is their call instead of
BLAS's, in :func:`chunked_matmul`, :func:`chunked_inner`, :func:`matmul_add` and
:func:`gemm_into` alike: each row's result there does not depend on the rows around it, so
the same bits on any thread count still hold.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numba
import numpy as np

from ..alignment import aligned_empty
from . import _dense_kernels, _row_gemm
from ._helper_threads import run_all

__all__ = ["PAIR_WORK", "ROWS", "blas_limit", "chunked_inner", "chunked_matmul", "epilogue",
           "gemm_into", "inner", "matmul", "matmul_add", "matmul_vjp_blocks", "on_threads",
           "shared_items"]

#: rows of one BLAS call (a block of 8 192 rows × 32 float32 is 1 MiB of ``X``)
ROWS = 8192
#: chunks of a column sum (:data:`._dense_kernels.ROWS_PER_CHUNK` rows) in a block of rows
_CHUNKS_PER_BLOCK = ROWS // _dense_kernels.ROWS_PER_CHUNK
assert _CHUNKS_PER_BLOCK * _dense_kernels.ROWS_PER_CHUNK == ROWS
#: the work (rows × the two widths) from which a product runs as blocks of rows and a
#: matmul's backward runs its two products at once: below it handing work to a helper thread
#: would cost what the split saves
PAIR_WORK = 1 << 18


@functools.cache
def _blas_controller():
    from threadpoolctl import ThreadpoolController
    return ThreadpoolController()


def blas_limit(threads: int) -> Any:
    """A context manager in which OpenBLAS runs ``threads`` threads (``threadpoolctl``)."""
    return _blas_controller().limit(limits=threads, user_api="blas")


def epilogue(Z: np.ndarray, bias: np.ndarray | None, relu: bool) -> None:
    """``Z += b`` (a row bias), then ``Z = max(Z, 0)`` with ``relu``, in place."""
    if bias is not None:
        np.add(Z, bias, out=Z)
    if relu:
        np.maximum(Z, 0, out=Z)


def chunked_matmul(X: np.ndarray, W: np.ndarray, out: np.ndarray, threads: int,
                   bias: np.ndarray | None = None, relu: bool = False) -> np.ndarray:
    """``out[:] = X @ W (+ b) (then max(·, 0))`` by blocks of :data:`ROWS` rows on
    ``threads`` threads (the caller holds BLAS at one thread: ``threadpoolctl``), each block's
    bias and rectifier (:func:`epilogue`) applied right after its product, while its rows are
    in cache. Returns ``out``."""
    n = X.shape[0]

    def product(b: int) -> None:
        rows = slice(b * ROWS, min((b + 1) * ROWS, n))
        if _row_gemm.product_into(out[rows], X[rows], W, bias):
            epilogue(out[rows], None, relu)
            return
        np.matmul(X[rows], W, out=out[rows])
        epilogue(out[rows], bias, relu)

    on_threads(threads, -(-n // ROWS), product)
    return out


def on_threads(threads: int, blocks: int, run_block) -> None:
    """``run_block(b)`` for every block ``b < blocks``, thread ``t`` of ``threads`` (the
    caller's thread is 0, the others the process's helpers, :mod:`._helper_threads`) running
    blocks ``[⌊tB/T⌋, ⌊(t+1)B/T⌋)``; the first exception is raised in the caller's."""
    threads = max(1, min(threads, blocks))

    def share(t: int):
        def run() -> None:
            for b in range(t * blocks // threads, (t + 1) * blocks // threads):
                run_block(b)
        return run

    run_all([share(t) for t in range(threads)])


def shared_items(threads: int, items: Sequence[Callable[[], None]]) -> None:
    """Every one of ``items`` run once, on ``threads`` threads (the caller's and the
    process's helpers) that each take the next item not yet taken until none is left: work
    of unequal parts shared evenly where a fixed split is not (the caller's thread alone for
    one thread); the first exception raised in the caller's."""
    threads = max(1, min(threads, len(items)))
    order = itertools.count()
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                k = next(order)
            if k >= len(items):
                return
            items[k]()

    run_all([worker] * threads)


def _block_inner(part: np.ndarray, X: np.ndarray, Y: np.ndarray) -> None:
    """``part[...] = Xᵀ Y`` of one block of rows (register-blocked where it fits)."""
    if not _row_gemm.inner_into(part, X, Y):
        np.matmul(X.T, Y, out=part)


def matmul_vjp_blocks(G: np.ndarray, W: np.ndarray, X: np.ndarray, threads: int,
                      into: np.ndarray | None = None, out: np.ndarray | None = None,
                      sums: bool = False) -> tuple[np.ndarray, ...]:
    r"""The backward of :math:`Y = X W` for the cotangent ``G``: :math:`\bar X = G W^\top`
    (written into ``out``, added into ``into``, or a fresh array) and :math:`\bar W = X^\top
    G`, both by blocks of :data:`ROWS` rows, the :math:`2B` block products shared among
    ``threads`` threads as each comes free (:func:`shared_items`), a block's two products
    one after the other (they read the same rows of ``G``); the blocks' :math:`X_b^\top G_b`
    summed in block order after (the same bits as :func:`chunked_inner`, as one
    :func:`._row_gemm.rows_inner` call over every row and on any thread count).

    With ``sums`` also :math:`\bar b = \sum_i G_i` (the cotangent of a bias added to
    :math:`Y`), a third result: each block's chunk partials taken after its weight product,
    while its rows of ``G`` are in the cache, and added as
    :func:`._dense_kernels.column_sums` adds them (the same bits: a block is a whole number
    of its chunks).

    Why: the two whole products on two threads (one each) ended together only where both ran
    at one speed; HGT's 21 pairs a step spent 27 and 34 ms on the two threads, 47 ms in all
    (AMD EPYC)."""
    n = G.shape[0]
    blocks = -(-n // ROWS)
    parts = np.empty((blocks, X.shape[1], G.shape[1]), np.result_type(X, G))
    chunks = _CHUNKS_PER_BLOCK
    partials = np.empty((_dense_kernels.chunk_count(n) if sums else 0, G.shape[1]), G.dtype)
    if into is not None:
        dx = into
    else:
        dx = out if out is not None else aligned_empty((n, W.shape[0]), np.result_type(G, W))
    WT = np.ascontiguousarray(W.T)            # once, not once a block

    def cotangent(rows: slice) -> Callable[[], None]:
        def run() -> None:
            if into is not None:
                gemm_into(into[rows], G[rows], WT.T)     # its Wᵀ: WT, contiguous
            elif not _row_gemm.product_into(dx[rows], G[rows], WT):
                np.matmul(G[rows], WT, out=dx[rows])
        return run

    def weight(b: int, rows: slice) -> Callable[[], None]:
        def run() -> None:
            _block_inner(parts[b], X[rows], G[rows])
            if sums:
                _dense_kernels.chunk_sums(G[rows], partials[b * chunks:(b + 1) * chunks])
        return run

    items: list[Callable[[], None]] = []
    for b in range(blocks):
        rows = slice(b * ROWS, min((b + 1) * ROWS, n))
        items += [cotangent(rows), weight(b, rows)]
    shared_items(threads, items)
    gw = aligned_empty(parts.shape[1:], parts.dtype)
    np.sum(parts, axis=0, out=gw)
    if sums:
        return dx, gw, _dense_kernels.total_of(partials)
    return dx, gw


def chunked_inner(X: np.ndarray, Y: np.ndarray, threads: int) -> np.ndarray:
    r""":math:`X^\top Y = \sum_b X_b^\top Y_b` over the blocks of :data:`ROWS` rows, each
    block's product one BLAS call on ``threads`` threads (the caller holds BLAS at one
    thread), the partial products then summed in block order: the same bits for any thread
    count."""
    n = X.shape[0]
    blocks = -(-n // ROWS)
    parts = np.empty((blocks, X.shape[1], Y.shape[1]), np.result_type(X, Y))

    def product(b: int) -> None:
        rows = slice(b * ROWS, min((b + 1) * ROWS, n))
        _block_inner(parts[b], X[rows], Y[rows])

    on_threads(threads, blocks, product)
    out = aligned_empty(parts.shape[1:], parts.dtype)
    np.sum(parts, axis=0, out=out)
    return out


def inner(X: np.ndarray, Y: np.ndarray, blas_threads: int) -> np.ndarray:
    r""":math:`X^\top Y` of two tall 2-D arrays (a weight's gradient), OpenBLAS held at
    ``blas_threads``: on one BLAS thread, from :data:`PAIR_WORK` of work on, as blocks of
    rows on numba's thread count (:func:`chunked_inner`); any other as one BLAS call."""
    with blas_limit(blas_threads):
        if (blas_threads == 1 and X.ndim == 2 and Y.ndim == 2
                and X.shape[0] * (X.shape[1] + Y.shape[1]) >= PAIR_WORK):
            return chunked_inner(X, Y, numba.get_num_threads())
        out = aligned_empty((X.shape[1], Y.shape[1]), np.result_type(X, Y))
        np.matmul(X.T, Y, out=out)
        return out


def gemm_into(into: np.ndarray, G: np.ndarray, W: np.ndarray) -> np.ndarray:
    r"""``into += G Wᵀ`` by the GEMM itself (:math:`C \leftarrow G W^\top + 1 \cdot C`):
    the product is summed as it is formed, with no array of its own and no second pass
    (several times faster than ``np.matmul`` and the sum: ``docs/performance.md``), by
    :func:`._row_gemm.product_into` where it fits, else by BLAS: the row-major ``into`` is
    the column-major ``intoᵀ = W Gᵀ``, which BLAS overwrites in place. Returns ``into``."""
    if _row_gemm.product_into(into, G, W.T, accumulate=True):
        return into
    if into.dtype in (np.float32, np.float64) and into.flags.c_contiguous:
        from scipy.linalg.blas import get_blas_funcs

        gemm = get_blas_funcs("gemm", dtype=into.dtype)
        out = gemm(1.0, W.astype(into.dtype, copy=False), G.T.astype(into.dtype, copy=False),
                   beta=1.0, c=into.T, overwrite_c=True)
        if out.ctypes.data == into.ctypes.data:
            return into
        into[...] = out.T                       # BLAS wrote a copy (not expected)
        return into
    into += G @ W.T
    return into


def matmul_add(Y: np.ndarray, X: np.ndarray, W: np.ndarray, blas_threads: int) -> np.ndarray:
    """``Y += X W`` in place (:func:`gemm_into` of ``Wᵀ``: each product summed into ``Y``
    by BLAS as it is formed), OpenBLAS held at ``blas_threads``; on one BLAS thread, from
    :data:`PAIR_WORK` of work on, as blocks of :data:`ROWS` rows on numba's thread count
    (:func:`on_threads`), else one call. Returns ``Y``."""
    WT = W.T
    with blas_limit(blas_threads):
        n = X.shape[0]
        if blas_threads == 1 and n * (X.shape[1] + W.shape[1]) >= PAIR_WORK:
            def product(b: int) -> None:
                rows = slice(b * ROWS, min((b + 1) * ROWS, n))
                gemm_into(Y[rows], X[rows], WT)

            on_threads(numba.get_num_threads(), -(-n // ROWS), product)
            return Y
        return gemm_into(Y, X, WT)


def matmul(X: np.ndarray, W: np.ndarray, blas_threads: int, bias: np.ndarray | None = None,
           relu: bool = False, out: np.ndarray | None = None) -> np.ndarray:
    """``X @ W`` (``+ b``, then ``max(·, 0)`` with ``relu``: :func:`epilogue`) into ``out``
    (a C-contiguous array of the product's shape and dtype) or else a fresh 64-byte aligned
    array, OpenBLAS held at ``blas_threads``. On one BLAS thread a 2-D product of at least
    :data:`PAIR_WORK` runs as blocks of rows on numba's thread count
    (:func:`chunked_matmul`); any other is one BLAS call."""
    shape, dtype = (X.shape[0], W.shape[1]), np.result_type(X, W)
    if out is None:
        out = aligned_empty(shape, dtype)
    elif out.shape != shape or out.dtype != dtype or not out.flags.c_contiguous:
        raise ValueError(f"matmul: out must be a C-contiguous {dtype} array of shape {shape}, "
                         f"got {out.dtype} {out.shape}")
    if bias is not None:
        bias = np.asarray(bias)
    with blas_limit(blas_threads):
        if (blas_threads == 1 and X.ndim == 2 and W.ndim == 2
                and X.shape[0] * (X.shape[1] + W.shape[1]) >= PAIR_WORK):
            return chunked_matmul(X, W, out, numba.get_num_threads(), bias, relu)
        np.matmul(X, W, out=out)
        epilogue(out, bias, relu)
        return out
