"""Where a benchmark runs: the host, or one GPU for both implementations.

With ``--executor cuda`` our layers run on the cuda executor and PyG's on the same GPU
(torch's CUDA build): the inputs move there once, before any timing; every timed call ends
with a synchronisation of the device, since kernels return before they finish; memory is the
device's peak allocation (CuPy's memory pool for ours, torch's caching allocator for PyG)
instead of the process's resident set. Under Numba's CUDA simulator (no GPU) our side runs
in the simulator, on the host, and PyG on the CPU: a smoke test of the harness, never a
measurement (the result says ``device: simulator``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["BenchDevice", "DeviceUnavailable", "device_for"]


class DeviceUnavailable(RuntimeError):
    """The run asks for a GPU that our executor or torch cannot reach."""


@dataclass(frozen=True)
class BenchDevice:
    """``kind``: ``"host"`` (the cpu executors), ``"gpu"`` or ``"simulator"``;
    ``torch_device``: where PyG's tensors live."""

    kind: str
    torch_device: str = "cpu"

    @property
    def on_gpu(self) -> bool:
        return self.kind == "gpu"

    def synchronize(self) -> None:
        """Wait for every kernel launched on the GPU (both CuPy/numba's and torch's)."""
        if self.on_gpu:
            import cupy
            import torch

            cupy.cuda.get_current_stream().synchronize()
            torch.cuda.synchronize()

    def timed(self, fn: Callable[[], object]) -> Callable[[], object]:
        """``fn`` followed by a synchronisation, so that a timer sees its kernels finish."""
        if not self.on_gpu:
            return fn

        def run():
            out = fn()
            self.synchronize()
            return out

        return run

    def tensor(self, array: np.ndarray, requires_grad: bool = False):
        """A torch tensor of ``array`` on PyG's device (a copy there; shared on the CPU)."""
        import torch

        t = torch.from_numpy(np.ascontiguousarray(array))
        if self.torch_device != "cpu":
            t = t.to(self.torch_device)
        return t.requires_grad_(requires_grad)

    def peak_tracker(self, impl: str) -> _PeakTracker | None:
        """On a GPU, a tracker of the device memory ``impl`` ("ours": CuPy's pool, "pyg":
        torch's allocator) allocates; None on the host (the resident set is measured)."""
        return _PeakTracker(impl) if self.on_gpu else None


class _PeakTracker:
    """Peak bytes allocated on the GPU by one implementation since :meth:`reset`."""

    def __init__(self, impl: str):
        self.impl = impl
        if impl == "ours":
            import cupy

            pool = cupy.get_default_memory_pool()
            self._pool, self._peak = pool, 0

            def malloc(size: int):
                memory = pool.malloc(size)
                self._peak = max(self._peak, pool.used_bytes())
                return memory

            cupy.cuda.set_allocator(malloc)

    def reset(self) -> None:
        if self.impl == "ours":
            self._peak = self._pool.used_bytes()
        else:
            import torch

            torch.cuda.reset_peak_memory_stats()

    def peak_bytes(self) -> int:
        if self.impl == "ours":
            return int(self._peak)
        import torch

        return int(torch.cuda.max_memory_allocated())


def device_for(executor: str) -> BenchDevice:
    """The device a run with our layers on ``executor`` uses; :class:`DeviceUnavailable`
    saying what is missing when ``cuda`` is asked for and our executor or torch cannot reach
    a GPU."""
    if executor != "cuda":
        return BenchDevice("host")
    from gblas_gnn.executors import get_executor
    from gblas_gnn.gpu import SIMULATOR, CUDAUnavailableError

    try:
        get_executor("cuda")
    except CUDAUnavailableError as exc:
        raise DeviceUnavailable(str(exc)) from exc
    if SIMULATOR:
        return BenchDevice("simulator")
    import torch

    if not torch.cuda.is_available():
        raise DeviceUnavailable("--executor cuda compares with PyG on the same GPU: install "
                                "torch's CUDA build (not the CPU wheel) beside '.[gpu]'")
    return BenchDevice("gpu", "cuda")
