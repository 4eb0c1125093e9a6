"""One thread count for every runtime in the process: torch, GraphBLAS, numba and BLAS."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["set_threads", "threads_kept"]

_BLAS_LIMITER = None  # the threadpoolctl limiter kept alive for the life of the process


def set_threads(n: int, torch: bool = True, blas: int | None = None,
                executor: str = "cpu") -> dict[str, int]:
    """Set ``n`` threads for torch, SuiteSparse:GraphBLAS, numba and the BLAS libraries.

    GraphBLAS and numba are set by the executor
    (:meth:`gblas_gnn.executors.CPUExecutor.set_threads`, process-wide; an executor that is
    not a cpu one leaves it to the ``cpu`` executor, since the graphs and the baselines run on
    GraphBLAS anyway). The executor's own ``gemm`` keeps its BLAS threads (default 1); the
    process-wide BLAS limit set here covers every other numpy product.

    Parameters
    ----------
    n : int
        Thread count (≥ 1) applied to every runtime.
    torch : bool
        Also call ``torch.set_num_threads`` (imports torch; pass ``False`` in a process that
        must not load it).
    blas : int, optional
        Threads of the BLAS libraries (numpy's OpenBLAS; ``threadpoolctl``), default ``n``.
        Torch's own BLAS follows ``torch.set_num_threads``.
    executor : str
        The executor under test (a name of :func:`gblas_gnn.executors.names`).

    Returns
    -------
    dict
        The thread count each runtime reports afterwards: ``graphblas``, ``numba`` (capped at
        ``NUMBA_NUM_THREADS``, fixed when numba starts; a warning says so), ``blas`` (the
        process-wide limit), ``gemm_blas`` (the BLAS threads of the executor's ``gemm``, when
        it is a cpu executor) and ``torch``.
    """
    global _BLAS_LIMITER
    if blas is not None and (isinstance(blas, bool) or not isinstance(blas, int) or blas < 1):
        raise ValueError(f"blas threads must be a positive integer, got {blas!r}")
    from threadpoolctl import threadpool_limits

    from gblas_gnn.executors import get_executor
    from gblas_gnn.executors.cpu.core import GraphBLASExecutor

    ex = get_executor(executor)
    own = isinstance(ex, GraphBLASExecutor)      # cpu and primitives
    reported = (ex if own else get_executor("cpu")).set_threads(n)     # checks n
    blas = n if blas is None else blas
    if reported["numba"] < n:
        warnings.warn(f"numba can use at most {reported['numba']} threads in this process; "
                      f"using {reported['numba']}", RuntimeWarning, stacklevel=2)
    _BLAS_LIMITER = threadpool_limits(limits=blas)
    got = {"graphblas": reported["graphblas"], "numba": reported["numba"], "blas": blas}
    if own:
        got["gemm_blas"] = reported["blas"]
    if torch:
        import torch as _torch

        _torch.set_num_threads(n)
        got["torch"] = _torch.get_num_threads()
    return got


@contextmanager
def threads_kept() -> Iterator[None]:
    """Restore the cpu executor's GraphBLAS and numba threads, torch's (when it is loaded)
    and the process-wide BLAS limit when the block ends: a study run in-process (a test's, a
    notebook's) leaves the caller's thread counts as it found them."""
    global _BLAS_LIMITER
    import sys

    import graphblas as gb
    import numba

    torch = sys.modules.get("torch")
    numba_threads, gb_threads, limiter = (numba.get_num_threads(),
                                          int(gb.ss.config["nthreads"]), _BLAS_LIMITER)
    torch_threads = torch.get_num_threads() if torch is not None else None
    try:
        yield
    finally:
        if _BLAS_LIMITER is not limiter and _BLAS_LIMITER is not None:
            _BLAS_LIMITER.restore_original_limits()
        _BLAS_LIMITER = limiter
        numba.set_num_threads(numba_threads)
        gb.ss.config["nthreads"] = gb_threads
        if torch_threads is not None:
            torch.set_num_threads(torch_threads)
