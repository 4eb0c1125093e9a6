r"""A tall product ``X W`` as one BLAS call per fixed block of rows, the blocks shared among
threads that each run one BLAS thread.

.. math::  (X W)[r_b : r_{b+1}] = X[r_b : r_{b+1}]\, W, \qquad r_b = \min(b\,R, n)

with ``R`` = :data:`ROWS` rows a block. The blocks do not depend on the thread count, so the
result is the same bits on one thread or many (OpenBLAS's result for a row depends on the
call's row count, so splitting the rows by thread would not be). Thread ``t`` of ``T`` runs
blocks ``[⌊tB/T⌋, ⌊(t+1)B/T⌋)`` of the ``B`` blocks.

Why: the executor's products run one OpenBLAS thread, because a second one spin-waits against
the GraphBLAS and numba OpenMP threads of the sparse steps (``CPUExecutor.gemm``). Two
Python threads that each call BLAS on their own rows use both cores without that spin, and
the gain grows with the width (``docs/performance.md``, tall products on both cores, has the
measured record).
"""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["ROWS", "chunked_matmul", "epilogue"]

#: rows of one BLAS call (a block of 8 192 rows × 32 float32 is 1 MiB of ``X``)
ROWS = 8192


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
    blocks = -(-n // ROWS)
    threads = max(1, min(threads, blocks))
    failed: list[BaseException] = []

    def run(t: int) -> None:
        try:
            for b in range(t * blocks // threads, (t + 1) * blocks // threads):
                rows = slice(b * ROWS, min((b + 1) * ROWS, n))
                np.matmul(X[rows], W, out=out[rows])
                epilogue(out[rows], bias, relu)
        except BaseException as exc:            # re-raised by the caller's thread
            failed.append(exc)

    helpers = [threading.Thread(target=run, args=(t,), name="gblas_gnn-gemm")
               for t in range(1, threads)]
    for h in helpers:
        h.start()
    try:
        run(0)
    finally:
        for h in helpers:
            h.join()
    if failed:
        raise failed[0]
    return out
