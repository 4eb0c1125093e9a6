"""The simulator's block runner (``gblas_gnn.gpu._sim_blocks``): the schedule it keeps.

In Numba's CUDA simulator the executor runs every block with :func:`run_block` (the
simulator's own schedule, handing the GIL to the simulated threads between its passes). Held
here to what the kernels rely on: a barrier opens only when every live thread waits at it
(threads that have returned do not hold it shut), blocks see their own indices, and an
exception in one thread stops the block and reaches the caller.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from gblas_gnn.gpu._device import SIMULATOR

pytestmark = pytest.mark.skipif(not SIMULATOR, reason="the simulator's block runner")


def test_the_simulator_runs_blocks_with_ours():
    from numba.cuda.simulator.kernel import BlockManager

    from gblas_gnn.gpu._sim_blocks import run_block

    assert BlockManager.run is run_block


@cuda.jit
def rotate_then_sum(x, out):
    shared = cuda.shared.array(8, np.float64)
    t = cuda.threadIdx.x
    b = cuda.blockIdx.x
    shared[t] = x[b, t]
    cuda.syncthreads()                         # every value written before any is read
    mine = shared[(t + 1) % 8]
    cuda.syncthreads()
    shared[t] = mine
    cuda.syncthreads()
    if t == 0:
        acc = 0.0
        for k in range(8):
            acc += shared[k] * (k + 1)
        out[b] = acc


@cuda.jit
def early_return(out):
    t = cuda.threadIdx.x
    if t >= 2:                                 # returned threads do not hold a barrier shut
        return
    cuda.syncthreads()
    out[t] = t + 1


@cuda.jit
def fails_in_thread_3(out):
    t = cuda.threadIdx.x
    cuda.syncthreads()
    if t == 3:
        raise ValueError("thread three")
    out[t] = 1.0


def test_barriers_open_when_every_live_thread_waits():
    x = np.arange(24, dtype=np.float64).reshape(3, 8)
    out = np.zeros(3)
    rotate_then_sum[3, 8](x, out)
    want = [(np.roll(row, -1) * np.arange(1, 9)).sum() for row in x]
    np.testing.assert_array_equal(out, want)
    small = np.zeros(2)
    early_return[1, 4](small)
    np.testing.assert_array_equal(small, [1, 2])


def test_an_exception_in_one_thread_reaches_the_caller():
    with pytest.raises(ValueError, match="thread three"):
        fails_in_thread_3[1, 4](np.zeros(4))
