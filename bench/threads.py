"""One thread count for every runtime in the process: torch, GraphBLAS, numba and BLAS."""

from __future__ import annotations

import warnings

__all__ = ["set_threads"]

_BLAS_LIMITER = None  # the threadpoolctl limiter kept alive for the life of the process


def set_threads(n: int, torch: bool = True, blas: int | None = None) -> dict[str, int]:
    """Set ``n`` threads for torch, SuiteSparse:GraphBLAS, numba and the BLAS libraries.

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

    Returns
    -------
    dict
        The thread count each runtime reports afterwards (``numba`` is capped at
        ``NUMBA_NUM_THREADS``, fixed when numba starts; a warning says so).
    """
    global _BLAS_LIMITER
    blas = n if blas is None else blas
    for name, v in (("threads", n), ("blas threads", blas)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    import graphblas as gb
    import numba
    from threadpoolctl import threadpool_limits

    gb.ss.config["nthreads"] = n
    cap = numba.config.NUMBA_NUM_THREADS
    if n > cap:
        warnings.warn(f"numba can use at most {cap} threads in this process; using {cap}",
                      RuntimeWarning, stacklevel=2)
    numba.set_num_threads(min(n, cap))
    _BLAS_LIMITER = threadpool_limits(limits=blas)
    got = {"graphblas": int(gb.ss.config["nthreads"]), "numba": numba.get_num_threads(),
           "blas": blas}
    if torch:
        import torch as _torch

        _torch.set_num_threads(n)
        got["torch"] = _torch.get_num_threads()
    return got
