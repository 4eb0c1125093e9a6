"""The ``cuda`` executor: the executor interface as numba-cuda kernels on one NVIDIA GPU.

``executor="cuda"`` (or :class:`CUDAExecutor`) runs every layer, model and trainer on the
device: the graph's structure is moved there once, features, parameters, gradients and
optimiser state stay there, dense products run on cuBLAS through CuPy and every sparse and
fused operation is a numba-cuda kernel (:mod:`.executor` lists them). Without a GPU, Numba's
CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` in the environment) runs the same kernels on tiny
graphs, with numpy as the array module (its device arrays told apart from host arrays, see
:mod:`._simulated`); neither gives a clear
:class:`~._device.CUDAUnavailableError`.

:mod:`.compile` compiles every kernel for a chosen GPU architecture without a GPU and reports
its registers, shared memory, spills and occupancy.
"""

from __future__ import annotations

import numpy as _np

if not hasattr(_np, "row_stack"):
    # numba-cuda 0.30 registers an overload for np.row_stack whenever numpy >= 2.0, and
    # numpy 2.5 removed the name: the alias keeps its registries loadable on that numpy.
    _np.row_stack = _np.vstack

from ._device import LANES, SIMULATOR, CUDAUnavailableError, Transfers
from ._pattern import EdgeTensor
from .executor import CUDAExecutor

__all__ = ["CUDAExecutor", "CUDAUnavailableError", "EdgeTensor", "LANES", "SIMULATOR",
           "Transfers", "default_executor"]


def default_executor() -> CUDAExecutor:
    """The executor registered as ``"cuda"``."""
    return CUDAExecutor()
