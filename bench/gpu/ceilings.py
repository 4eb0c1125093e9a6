"""The two ceilings every GPU number is read against: the device's copy bandwidth and the
rate of one dense matrix product, both through CuPy and timed with CUDA events.

* copy: ``dst[...] = src`` of ``nbytes`` float32 values, device to device; the bandwidth
  counts the bytes read and the bytes written (``2·nbytes / t``), as a kernel's achieved
  bandwidth does (:mod:`.profile`);
* matmul: ``A @ B`` of ``n × n`` float32 matrices, ``2·n³ / t`` floating-point operations
  a second (TF32 off: CuPy's default, the precision our kernels compute in).

Each is the median of ``reps`` timed calls after two untimed ones. In Numba's CUDA simulator
there is no device: both are reported as not measured.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ceilings", "copy_bandwidth", "matmul_rate"]


def _median_seconds(fn, reps: int) -> float:
    import cupy

    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    return float(np.median(times))


def copy_bandwidth(nbytes: int = 2 << 30, reps: int = 10) -> dict:
    """Device-to-device copy of ``nbytes``: bytes read + written per second."""
    import cupy

    a = {"src": cupy.ones(nbytes // 4, dtype=cupy.float32)}
    a["dst"] = cupy.empty_like(a["src"])
    seconds = _median_seconds(lambda: cupy.copyto(a["dst"], a["src"]), reps)
    a.clear()                                     # free both before the pool is emptied
    cupy.get_default_memory_pool().free_all_blocks()
    return {"bytes": int(nbytes), "seconds": seconds,
            "bytes_per_second": 2 * nbytes / seconds}


def matmul_rate(n: int = 8192, reps: int = 10) -> dict:
    """``n × n`` float32 matrix product: floating-point operations per second."""
    import cupy

    rng = cupy.random.default_rng(0)
    m = {"a": rng.standard_normal((n, n), dtype=cupy.float32),
         "b": rng.standard_normal((n, n), dtype=cupy.float32)}
    seconds = _median_seconds(lambda: m["a"] @ m["b"], reps)
    m.clear()
    cupy.get_default_memory_pool().free_all_blocks()
    return {"n": n, "dtype": "float32", "seconds": seconds, "flops": 2 * n**3 / seconds}


def ceilings(small: bool = False) -> dict:
    """Both ceilings (``small``: 64 MiB and n = 1024, for a quick look); ``{"measured":
    False, ...}`` in the simulator."""
    from gblas_gnn.gpu import SIMULATOR

    if SIMULATOR:
        return {"measured": False, "why": "Numba's CUDA simulator has no device"}
    return {"measured": True,
            "copy": copy_bandwidth(64 << 20 if small else 2 << 30),
            "matmul": matmul_rate(1024 if small else 8192)}
