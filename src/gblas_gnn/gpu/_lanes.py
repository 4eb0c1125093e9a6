"""Lane groups: the device functions every group kernel is written with.

A group of :data:`~._device.LANES` consecutive threads owns one item (a row or a column of
a sparse matrix, with a head or a tile of feature columns); its lanes stride over the item's
edges or over the feature dimension and combine their partial results with
:func:`group_sum`, :func:`group_max` or :func:`group_min`, which return the same value on
every lane. :func:`group_sync` orders the group's shared-memory writes before its reads.

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

__all__ = ["lane", "group", "groups", "tile_count", "split_tile", "group_sum", "group_max",
           "group_min", "group_sync", "add", "mul", "minimum", "maximum", "FULL_MASK"]

FULL_MASK = 0xFFFFFFFF


@inline_device
def add(a, b):
    return a + b


@inline_device
def mul(a, b):
    return a * b


@inline_device
def minimum(a, b):
    return min(a, b)


@inline_device
def maximum(a, b):
    return max(a, b)


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


@inline_device
def tile_count(k):
    """Tiles of :data:`LANES` columns that cover ``k`` feature columns."""
    return (k + LANES - 1) // LANES


@inline_device
def split_tile(item, tiles):
    """``(row, column)``: item ``row · tiles + t`` is tile ``t`` of the row, and this lane's
    column of that tile is ``t · LANES + lane``."""
    row, t = divmod(item, tiles)
    return row, t * LANES + lane()


if SIMULATOR:
    import numpy as np

    def _reduction(combine, what: str):
        def reduce(value):
            # every lane's value through shared memory, between two barriers (the simulator
            # allocates one array per source line: the scratch of every reduction)
            scratch = cuda.shared.array((GROUPS_PER_BLOCK, LANES), np.float64)
            row = cuda.threadIdx.x // LANES
            scratch[row, cuda.threadIdx.x % LANES] = value
            cuda.syncthreads()
            values = [type(value)(v) for v in scratch[row]]
            cuda.syncthreads()
            total = values[0]
            for v in values[1:]:
                total = combine(total, v)
            return total

        reduce.__doc__ = f"{what} of ``value`` over the group's lanes, on every lane."
        return cuda.jit(device=True)(reduce)

    @cuda.jit(device=True)
    def group_sync():
        """Order the group's shared and global writes before its reads."""
        cuda.syncthreads()

else:
    def _reduction(combine, what: str):
        def reduce(value):
            offset = LANES // 2
            while offset > 0:
                value = combine(value, cuda.shfl_xor_sync(FULL_MASK, value, offset))
                offset //= 2
            return value

        reduce.__doc__ = f"{what} of ``value`` over the warp (butterfly), on every lane."
        return inline_device(reduce)

    @inline_device
    def group_sync():
        """``__syncwarp()``: order the warp's shared and global writes before its reads."""
        cuda.syncwarp(FULL_MASK)


group_sum = _reduction(add, "Σ")
group_max = _reduction(maximum, "max")
group_min = _reduction(minimum, "min")
