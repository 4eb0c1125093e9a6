"""How Numba's CUDA simulator runs one thread block: the same schedule, the GIL handed over.

The simulator runs the threads of a block as Python threads and its block manager waits for
them in a polling loop: it releases a ``syncthreads`` barrier once every live thread waits at
it, and re-raises the first exception of a thread after aborting the others. That loop never
gives up the GIL between its passes, so for each of the interpreter's switch intervals the
simulated threads stand still while it spins: about half of the CPU time of a simulated
training step on a 2-core box.

:func:`run_block` is the same schedule with ``time.sleep(0)`` after every pass that finds
threads still running (it hands the GIL to them at once). :func:`install` puts it in place
of the simulator's; the executor does so when it runs in the simulator (:mod:`._device`).
"""

from __future__ import annotations

import time

import numpy as np

__all__ = ["run_block", "install"]


def _raise_first_error(threads) -> None:
    for t in threads:
        if t.exception:
            raise t.exception[0].with_traceback(t.exception[1])


def run_block(manager, grid_point, *args) -> None:
    """Run every thread of one block of ``manager`` (the simulator's block manager) at
    ``grid_point`` to the end: barriers are released when every live thread waits at one,
    and a thread's exception aborts the block and is raised here."""
    from numba.cuda.simulator.kernel import BlockThread

    def target():
        manager._f(*args)

    threads = []
    for point in np.ndindex(*manager._block_dim):
        t = BlockThread(target, manager, grid_point, point, manager._debug)
        t.start()
        threads.append(t)
    live = list(threads)
    while live:
        failed = next((t for t in live if t.exception), None)
        if failed is not None:
            for t in threads:                  # wake and stop the others, then report
                t.abort, t.syncthreads_blocked = True, False
                t.syncthreads_event.set()
            _raise_first_error([failed])
        if all(t.syncthreads_blocked for t in live):
            for t in live:                     # every live thread waits: the barrier opens
                t.syncthreads_blocked = False
                t.syncthreads_event.set()
        live = [t for t in live if t.is_alive()]
        if live:
            time.sleep(0)                      # let the simulated threads run
    _raise_first_error(threads)


def install() -> None:
    """Run the simulator's blocks with :func:`run_block` (idempotent)."""
    from numba.cuda.simulator.kernel import BlockManager

    BlockManager.run = run_block
