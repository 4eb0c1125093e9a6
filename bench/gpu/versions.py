"""What a GPU result was measured on: the card, its driver and CUDA, and the versions of
every library on the path (torch, CuPy, numba-cuda, GraphBLAS, ...)."""

from __future__ import annotations

import subprocess
from importlib import metadata

from ..core.environment import environment

__all__ = ["gpu_environment", "card_name"]

_GPU_PACKAGES = ("numba-cuda", "cupy-cuda12x", "cupy-cuda13x", "torch", "torch_geometric",
                 "python-graphblas", "suitesparse-graphblas", "numba", "llvmlite", "numpy")


def _nvidia_smi() -> str | None:
    """The driver version nvidia-smi reports (None where it is missing)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout else None


def _card() -> dict:
    """The device numba-cuda runs on: its name, memory, multiprocessors and CUDA versions;
    ``{"name": "simulator"}`` in Numba's CUDA simulator."""
    from gblas_gnn.gpu import SIMULATOR

    if SIMULATOR:
        return {"name": "simulator"}
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"]
    return {"name": name.decode() if isinstance(name, bytes) else str(name),
            "memory_bytes": int(props["totalGlobalMem"]),
            "multiprocessors": int(props["multiProcessorCount"]),
            "l2_bytes": int(props["l2CacheSize"]),
            "compute_capability": f"{props['major']}.{props['minor']}",
            "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(),
            "cuda_driver_api": cupy.cuda.runtime.driverGetVersion(),
            "driver": _nvidia_smi()}


def card_name(env: dict) -> str:
    """A file-name form of the card's name (``NVIDIA H100 80GB HBM3`` → ``h100``)."""
    name = env["card"]["name"].lower()
    for known in ("h200", "h100", "a100", "l40s", "l4", "a10g", "v100", "t4"):
        if known in name:
            return known
    return "".join(c if c.isalnum() else "-" for c in name).strip("-") or "gpu"


def gpu_environment() -> dict:
    """:func:`~bench.core.environment.environment` plus the card and the GPU libraries
    (a missing one as None), torch's CUDA build and where graphblas was imported from
    (the carried wheels or the machine's own)."""
    env = environment()
    for name in _GPU_PACKAGES:
        try:
            env["versions"][name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            env["versions"].setdefault(name, None)
    try:
        import torch

        env["versions"]["torch.version.cuda"] = torch.version.cuda
    except ImportError:
        pass
    import graphblas

    env["graphblas_path"] = graphblas.__file__
    env["card"] = _card()
    return env
