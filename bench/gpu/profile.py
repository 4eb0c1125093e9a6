"""Each kernel's time and achieved bandwidth inside one of our layers' calls.

:class:`KernelProfile` wraps the cuda executor's one launch point
(:meth:`gblas_gnn.gpu.executor.CUDAExecutor.launch`) while it is active: every launch is
bracketed by two CUDA events and billed to the kernel's name with the bytes of its array
arguments. The bytes are the kernel's *compulsory* traffic (each operand read or written
once: a gathered feature row counted once however many edges gather it), so
``bytes / time`` is a lower bound of the bandwidth it reached, read against the measured copy
bandwidth (:mod:`.ceilings`). Events cost a few microseconds each; the times are per kernel,
not of the layer (:mod:`bench.layers.run` times the layer without them).

In Numba's CUDA simulator the events are host clocks: the numbers prove the plumbing, never a
speed (the result says ``simulated``).
"""

from __future__ import annotations

import time
from collections import defaultdict

__all__ = ["KernelProfile"]


def _name(kernel) -> str:
    """The kernel's name; a shipped semiring's SpMM by its semiring (``spmm_plus_times``),
    since they share one generated function's name: its kernels (the fold of the rows and
    of the long rows' chunks, and the chunks' combination) under that one name, as one
    product's time."""
    from gblas_gnn.gpu._semiring_kernels import SHIPPED

    for algebra, (shipped, _) in SHIPPED.items():
        if any(kernel is k for k in shipped):
            return f"spmm_{algebra.label}"
    fn = getattr(kernel, "py_func", None) or kernel
    return getattr(fn, "__name__", str(kernel))


def _array_bytes(args) -> int:
    return int(sum(getattr(a, "nbytes", 0) for a in args if hasattr(a, "shape")))


class _HostEvent:
    """A host clock standing in for a CUDA event in the simulator."""

    def record(self) -> None:
        self.t = time.perf_counter()


class KernelProfile:
    """``with KernelProfile(cuda_executor) as prof: layer(g, H)``; then
    :meth:`summary`. Nested or concurrent profiles of one executor are refused."""

    def __init__(self, executor):
        from gblas_gnn.gpu import SIMULATOR

        self.executor, self.simulated = executor, SIMULATOR
        self._records: list[tuple[str, object, object, int]] = []

    def _event(self):
        if self.simulated:
            return _HostEvent()
        import cupy

        return cupy.cuda.Event()

    def __enter__(self) -> KernelProfile:
        ex = self.executor
        if "launch" in vars(ex):
            raise RuntimeError("this executor is already being profiled")
        launch = ex.launch

        def profiled(kernel, grid, *args, shared=0):
            start, end = self._event(), self._event()
            start.record()
            launch(kernel, grid, *args, shared=shared)
            end.record()
            self._records.append((_name(kernel), start, end, _array_bytes(args)))

        ex.launch = profiled
        return self

    def __exit__(self, *exc) -> None:
        del self.executor.launch

    def _seconds(self, start, end) -> float:
        if self.simulated:
            return end.t - start.t
        import cupy

        end.synchronize()
        return cupy.cuda.get_elapsed_time(start, end) / 1e3

    def summary(self) -> dict[str, dict]:
        """kernel name → launches, total seconds, bytes and bytes per second, slowest
        first."""
        acc: dict[str, dict] = defaultdict(lambda: {"launches": 0, "seconds": 0.0,
                                                    "bytes": 0})
        for name, start, end, nbytes in self._records:
            a = acc[name]
            a["launches"] += 1
            a["seconds"] += self._seconds(start, end)
            a["bytes"] += nbytes
        for a in acc.values():
            a["bytes_per_second"] = a["bytes"] / a["seconds"] if a["seconds"] > 0 else None
        return dict(sorted(acc.items(), key=lambda kv: -kv[1]["seconds"]))
