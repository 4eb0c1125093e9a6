"""Lane groups: the device functions every group kernel is written with.

A group of :data:`~._device.LANES` consecutive threads owns one item (a row or a column of
a sparse matrix, with a head); its lanes stride over the item's edges or over the feature
dimension and combine their partial results with :func:`group_sum`, :func:`group_max` or
:func:`group_min`, which return the same value on every lane. :func:`group_sync` orders the
group's shared-memory writes before its reads.

The two forms are chosen here, once:

* on hardware a group is a warp: a butterfly of ``shfl_xor_sync`` (every lane ends with the
  same bits, since IEEE addition is commutative) and ``syncwarp``;
* the simulator has no warp intrinsics: the lanes write their values to shared memory, meet at
  a barrier, and each reads them back in lane order (a block is one group there, so a block
  barrier is a group barrier).

Results are deterministic in both forms: no atomics, a fixed combination order.
"""

from __future__ import annotations

from numba import cuda

from ._device import GROUPS_PER_BLOCK, LANES, SIMULATOR, inline_device

__all__ = ["lane", "group", "groups", "group_sum", "group_max", "group_min", "group_sync",
           "FULL_MASK"]

FULL_MASK = 0xFFFFFFFF


@inline_device
def lane():
    """This thread's lane in its group."""
    return cuda.threadIdx.x % LANES


@inline_device
def group():
    """This thread's group in the grid (the first item it works on)."""
    return (cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x) // LANES


@inline_device
def groups():
    """Groups in the grid (the stride of a grid-stride loop over items)."""
    return (cuda.gridDim.x * cuda.blockDim.x) // LANES


if SIMULATOR:
    import numpy as np

    def _gather(value):
        """Every lane's ``value`` in lane order (shared memory and two barriers)."""
        scratch = cuda.shared.array((GROUPS_PER_BLOCK, LANES), np.float64)
        row = cuda.threadIdx.x // LANES
        scratch[row, cuda.threadIdx.x % LANES] = value
        cuda.syncthreads()
        values = [type(value)(v) for v in scratch[row]]
        cuda.syncthreads()
        return values

    @cuda.jit(device=True)
    def group_sum(value):
        """Σ of ``value`` over the group's lanes, on every lane."""
        values = _gather(value)
        total = values[0]
        for v in values[1:]:
            total += v
        return total

    @cuda.jit(device=True)
    def group_max(value):
        """max of ``value`` over the group's lanes, on every lane."""
        return max(_gather(value))

    @cuda.jit(device=True)
    def group_min(value):
        """min of ``value`` over the group's lanes, on every lane."""
        return min(_gather(value))

    @cuda.jit(device=True)
    def group_sync():
        """Order the group's shared and global writes before its reads."""
        cuda.syncthreads()

else:
    @inline_device
    def group_sum(value):
        """Σ of ``value`` over the warp (butterfly), on every lane."""
        offset = LANES // 2
        while offset > 0:
            value += cuda.shfl_xor_sync(FULL_MASK, value, offset)
            offset //= 2
        return value

    @inline_device
    def group_max(value):
        """max of ``value`` over the warp (butterfly), on every lane."""
        offset = LANES // 2
        while offset > 0:
            value = max(value, cuda.shfl_xor_sync(FULL_MASK, value, offset))
            offset //= 2
        return value

    @inline_device
    def group_min(value):
        """min of ``value`` over the warp (butterfly), on every lane."""
        offset = LANES // 2
        while offset > 0:
            value = min(value, cuda.shfl_xor_sync(FULL_MASK, value, offset))
            offset //= 2
        return value

    @inline_device
    def group_sync():
        """``__syncwarp()``: order the warp's shared and global writes before its reads."""
        cuda.syncwarp(FULL_MASK)
