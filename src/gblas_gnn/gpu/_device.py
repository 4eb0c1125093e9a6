"""Where the ``cuda`` executor runs: a real GPU, Numba's CUDA simulator, or neither.

=============================  =============================  ==============================
mode                           dense arrays (``xp``)          kernels
=============================  =============================  ==============================
a GPU (``cuda.is_available``)  CuPy device arrays (cuBLAS)    numba-cuda, compiled for it
``NUMBA_ENABLE_CUDASIM=1``     numpy (host memory)            the same kernels, interpreted
neither                        —                              :class:`CUDAUnavailableError`
=============================  =============================  ==============================

The launch shape is decided here, once: a *lane group* is the set of threads that works on one
row (or column) of a sparse matrix, its lanes striding over the row's edges or over the
feature dimension. On a GPU a group is a warp (32 lanes) and a block holds
:data:`GROUPS_PER_BLOCK` warps. The simulator runs every CUDA thread as a Python thread and
every barrier as a rendezvous of those threads, thousands of times slower than hardware, so
there a group has :data:`LANES` = 4 lanes (``GBLAS_GNN_CUDASIM_LANES`` sets 1, 2, 4, 8, 16 or
32) and a block is one group: the kernels are written for any power-of-two group width and
the suite runs them at 4 and at 32 lanes.

Every copy between host and device made by the executor goes through :class:`Transfers`, so a
test can count them.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, field

import numpy as np
from numba import config

__all__ = ["SIMULATOR", "LANES", "GROUPS_PER_BLOCK", "ELEMENT_BLOCK", "SPLIT_EDGES",
           "CUDAUnavailableError", "Transfers", "array_module", "check_available",
           "group_grid", "element_grid", "inline_device"]

#: whether numba runs CUDA kernels in its simulator (fixed when numba is imported)
SIMULATOR: bool = bool(config.ENABLE_CUDASIM)
if SIMULATOR:                   # its blocks' threads run without a spinning manager
    from ._sim_blocks import install

    install()


def _sim_lanes() -> int:
    text = os.environ.get("GBLAS_GNN_CUDASIM_LANES", "4")
    try:
        lanes = int(text)
    except ValueError:
        lanes = 0
    if lanes not in (1, 2, 4, 8, 16, 32):
        raise ValueError("GBLAS_GNN_CUDASIM_LANES must be 1, 2, 4, 8, 16 or 32, got "
                         f"{text!r}")
    return lanes


#: lanes of a group (a warp on hardware)
LANES: int = _sim_lanes() if SIMULATOR else 32
#: groups per thread block: 4 warps (128 threads) on hardware, one group in the simulator,
#: whose barriers must be met by every thread of a block (groups of one block may loop a
#: different number of times)
GROUPS_PER_BLOCK: int = 1 if SIMULATOR else 4
#: Edges of the longest row (or column) one group folds alone in a semiring SpMM: a longer
#: one is cut into chunks of this many edges, folded by separate groups and combined in
#: order (:func:`~._sparse_kernels.make_spmm`). On a power-law graph one group walking a hub
#: alone sets the launch's time: on the H200, with a warp per row, the SpMM of the Kronecker
#: scale-20 graph (largest row 39 456 edges, mean 16) took 9.0 ms a launch, where
#: ``torch.sparse.mm`` took 1.4 ms. In the simulator, two groups' width, so that its small
#: graphs take the split path too.
SPLIT_EDGES: int = 2 * LANES if SIMULATOR else 32 * LANES
#: threads per block of the element-wise kernels
ELEMENT_BLOCK: int = 8 if SIMULATOR else 256
# Blocks of a launch at most. On hardware a grid-stride loop covers any size with enough
# blocks to fill every SM many times over (132 SMs on an H100 × 16 resident blocks); the
# simulator runs blocks one after the other, so fewer, longer blocks cost less there.
_MAX_BLOCKS = 4 if SIMULATOR else 132 * 16


def inline_device(fn):
    """``fn`` as a device function, inlined into its callers on hardware (the simulator calls
    it as Python)."""
    from numba import cuda

    return cuda.jit(device=True)(fn) if SIMULATOR else \
        cuda.jit(device=True, forceinline=True)(fn)


def group_grid(items: int) -> tuple[int, int]:
    """``(blocks, threads per block)`` of a lane-group kernel over ``items`` rows/columns."""
    blocks = min(max(-(-items // GROUPS_PER_BLOCK), 1), _MAX_BLOCKS)
    return blocks, GROUPS_PER_BLOCK * LANES


def element_grid(items: int) -> tuple[int, int]:
    """``(blocks, threads per block)`` of an element-wise kernel over ``items`` entries."""
    blocks = min(max(-(-items // ELEMENT_BLOCK), 1), _MAX_BLOCKS)
    return blocks, ELEMENT_BLOCK


def _serialise_simulator_shared_arrays() -> None:
    """Make the simulator's ``cuda.shared.array`` safe for the threads of a block.

    numba-cuda 0.30's simulator gives each source line that allocates a shared array one
    array per launch, created on first use without a lock: two threads of a block that reach
    the line together can each create one and then write to different arrays (seen here as
    wrong group reductions, once in a few hundred launches). Creation is serialised here;
    dynamic shared memory (``shape == 0``) keeps the simulator's own path.
    """
    from numba.core import types
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support

    cls = kernelapi.FakeCUDAShared
    original = cls.array
    if getattr(original, "serialised", False):
        return
    lock = threading.Lock()

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:
            return original(self, shape, dtype, alignment)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        with lock:
            found = self._allocations.get(key)
            if found is None:
                if isinstance(dtype, types.Type):
                    dtype = numpy_support.as_dtype(dtype)
                found = self._allocations[key] = np.empty(shape, dtype)
        return found

    array.serialised = True
    cls.array = array


if SIMULATOR:
    _serialise_simulator_shared_arrays()


class CUDAUnavailableError(RuntimeError):
    """The ``cuda`` executor was asked for where it cannot run."""


_HOW = ("the 'cuda' executor needs either an NVIDIA GPU with its driver and CuPy "
        "(pip install '.[gpu]': numba-cuda with the CUDA 12 toolkit and cupy-cuda12x), or "
        "Numba's CUDA simulator for small tests without a GPU (set NUMBA_ENABLE_CUDASIM=1 "
        "in the environment before Python starts)")


def check_available() -> None:
    """Raise :class:`CUDAUnavailableError` (saying how to get either) unless a GPU with CuPy
    or the simulator is there."""
    if SIMULATOR:
        return
    from numba import cuda

    if not cuda.is_available():
        raise CUDAUnavailableError(f"no CUDA GPU is available here: {_HOW}")
    try:
        import cupy
    except ImportError as exc:
        raise CUDAUnavailableError(f"CuPy is not installed: {_HOW}") from exc
    try:
        cupy.zeros(1)
    except Exception as exc:        # noqa: BLE001 - CUDARuntimeError and driver errors alike
        raise CUDAUnavailableError(f"CuPy cannot use the GPU ({exc}): {_HOW}") from exc


def array_module():
    """CuPy on a GPU (after :func:`check_available`); in the simulator numpy with device
    arrays told apart from host ones (:mod:`._simulated`)."""
    if SIMULATOR:
        from ._simulated import xp

        return xp
    import cupy

    return cupy


@dataclass
class Transfers:
    """Copies between host and device made by the executor since the last :meth:`reset`:
    ``to_device`` / ``to_host`` count the calls and ``*_bytes`` their sizes; ``by_reason``
    splits them by what asked for them (``"asarray"``, ``"to_numpy"``, ``"graph"``, ...)."""

    to_device: int = 0
    to_host: int = 0
    to_device_bytes: int = 0
    to_host_bytes: int = 0
    by_reason: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if SIMULATOR:                   # the simulator's implicit copies are counted too
            from ._simulated import watch

            watch(self)

    def add(self, direction: str, nbytes: int, reason: str) -> None:
        if direction == "to_device":
            self.to_device += 1
            self.to_device_bytes += int(nbytes)
        else:
            self.to_host += 1
            self.to_host_bytes += int(nbytes)
        self.by_reason[reason] = self.by_reason.get(reason, 0) + 1

    def reset(self) -> None:
        self.to_device = self.to_host = self.to_device_bytes = self.to_host_bytes = 0
        self.by_reason = {}

    @property
    def total(self) -> int:
        return self.to_device + self.to_host
