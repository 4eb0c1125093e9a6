r"""A generated kernel run over contiguous shares of its items, one per thread.

Every generated kernel (:mod:`._program_kernels`) is one serial function over the items
``[r0, r1)`` of a pattern: rows, blocks of rows, or columns (``forward(…, r0, r1)``).
:class:`ThreadedKernel` calls it on one thread, or with one share per thread through the one
driver of every kernel (:func:`._share_driver.run_shares`: a numba ``prange`` over the
shares that calls the kernel's machine code by its address, its arguments as machine words).
A share's rows (or columns) are each written by that share alone, so the result is the same
bits for any thread count and split.

The shares are of equal cost, an item costing its edges plus one:

.. math::  c(t) = \mathrm{ptr}[\min(t\,b, n)] + \min(t\,b, n), \qquad
           s_k = \min\{t : c(t) \ge \lfloor k\,c(N)/T \rfloor\}

for ``N`` items of ``b`` rows (or columns) each, ``n`` rows, ``T`` threads and the CSR
``indptr`` (CSC ``colptr``) as ``ptr``: a power-law graph's few dense rows do not leave one
thread with most of the edges, as an equal split of the rows would.

Why a driver around a serial kernel rather than a ``prange`` kernel and a serial copy of it:
numba lowers a ``prange`` loop's body into a parallel function, which compiled a GAT forward
far more slowly than the serial copy, and a program that ran on small and large graphs
compiled both. Now the kernel compiles once for every size, and the driver, which holds none
of the kernel's code and takes its arguments as words, once (``docs/performance.md`` has the
compile times). The driver runs on numba's own threads (OpenMP here), which answer far
sooner than Python threads: a Python thread's call took too long for a Cora-sized graph's
short kernels.
"""

from __future__ import annotations

import bisect

import numba
import numpy as np

from ...codegen.kernel_cache import LockedKernel, cache_dir, locked_kernel, type_key
from ..patterns import unsigned_view
from . import _share_driver

__all__ = ["ThreadedKernel", "shares", "run_rows", "static_kernel"]


def shares(ptr: np.ndarray, items: int, rows_per_item: int, parts: int) -> np.ndarray:
    """Boundaries ``0 = s_0 ≤ s_1 ≤ … ≤ s_parts = items`` (int64) of ``parts`` contiguous
    shares of about equal cost (the module's formula): share ``k`` is ``[s_k, s_{k+1})``."""
    rows = ptr.shape[0] - 1

    def cost(t: int) -> int:
        r = min(t * rows_per_item, rows)
        return int(ptr[r]) + r

    total = cost(items)
    inner = [bisect.bisect_left(range(items + 1), total * k // parts, key=cost)
             for k in range(1, parts)]
    return np.array([0, *inner, items], np.int64)


class ThreadedKernel:
    """A generated kernel over items ``[r0, r1)`` (its last two arguments), called with the
    other arguments: through ``driver`` (default the process's
    :class:`._share_driver.ShareDriver`) with one share per thread of numba's
    :func:`numba.get_num_threads` where ``threaded`` (and the driver can pass the
    arguments), else over all items on the calling thread. The kernel is a
    :class:`~gblas_gnn.codegen.kernel_cache.LockedKernel` (compiled once between the
    processes that share the cache). A share that raised is run again with every item on the
    calling thread, which raises the kernel's own error."""

    __slots__ = ("kernel", "driver", "columns", "rows_per_item", "threaded")

    def __init__(self, kernel: LockedKernel, columns: bool, rows_per_item: int,
                 threaded: bool, driver: _share_driver.ShareDriver | None = None):
        self.kernel, self.columns = kernel, columns
        self.rows_per_item, self.threaded = rows_per_item, threaded
        self.driver = driver if driver is not None else _share_driver.share_driver()

    def __call__(self, *args) -> None:
        ptr = args[2] if self.columns else args[0]     # colptr or indptr
        items = -(-(ptr.shape[0] - 1) // self.rows_per_item)
        threads = min(numba.get_num_threads(), items) if self.threaded else 1
        if threads < 2:
            self.kernel(*args, np.uint64(0), np.uint64(items))   # unsigned, as every index
            return
        _on_shares(self.kernel, self.driver, shares(ptr, items, self.rows_per_item, threads),
                   args)


_STATIC: dict[tuple[str, str], LockedKernel] = {}


def static_kernel(module, name: str) -> LockedKernel:
    """The serial kernel ``name`` of the package's ``module`` (a ``cache=True`` numba function
    over ``[r0, r1)``) under the kernel cache's lock, for :func:`run_rows` or a
    :class:`ThreadedKernel` (memoised: finding the cache folder takes longer than a small
    call)."""
    key = (module.__name__, name)
    found = _STATIC.get(key)
    if found is None:
        found = _STATIC[key] = locked_kernel(cache_dir("cpu"), module, name)
    return found


def run_rows(kernel: LockedKernel, rows: int, threaded: bool, *args) -> None:
    """``kernel(*args, r0, r1)`` (a serial kernel over the rows ``[r0, r1)``, unsigned) over
    the rows ``[0, rows)``, which cost the same each: in equal shares, one per thread of
    numba's, through the process's driver where ``threaded``, else on the calling thread."""
    threads = min(numba.get_num_threads(), rows) if threaded else 1
    if threads < 2:
        kernel(*args, np.uint64(0), np.uint64(rows))
        return
    _on_shares(kernel, _share_driver.share_driver(),
               np.arange(threads + 1, dtype=np.int64) * rows // threads, args)


def _on_shares(kernel: LockedKernel, driver, bounds: np.ndarray, args: tuple) -> None:
    """``kernel`` over the shares ``bounds`` (int64 boundaries) through ``driver``; on the
    calling thread where the driver cannot pass the arguments; a share that raised is run
    again with every item on the calling thread, which raises the kernel's own error."""
    first, last = np.uint64(bounds[0]), np.uint64(bounds[-1])
    failed = np.zeros(len(bounds) - 1, np.int64)
    key = type_key(args)
    if not driver.call_keyed(key, kernel.address(key, *args, first, last),
                             unsigned_view(bounds), failed, args):
        kernel(*args, first, last)              # arguments the driver cannot pass
        return
    if failed.any():
        kernel(*args, first, last)
        raise RuntimeError("a generated kernel failed on a thread and not on one thread")
