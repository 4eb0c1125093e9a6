"""What a result was measured on: machine, load, library versions, git commit."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

__all__ = ["cpu_model", "environment", "load_average"]

_PACKAGES = ("gblas_gnn", "numpy", "scipy", "python-graphblas", "suitesparse-graphblas",
             "numba", "threadpoolctl", "torch", "torch_geometric", "psutil", "matplotlib")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``) with its family and its widest vector
    instructions, e.g. ``AMD EPYC (family 26, AVX-512)``: VMs name two generations alike
    (an AVX2 and an AVX-512 EPYC were both ``AMD EPYC``), and the ratios to the peers
    differ between them; else what ``platform`` knows."""
    try:
        fields = dict(line.split(":", 1) for line in
                      Path("/proc/cpuinfo").read_text().split("\n\n")[0].splitlines()
                      if ":" in line)
    except OSError:
        fields = {}
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    if "model name" not in fields:
        return platform.processor() or "unknown"
    flags = set(fields.get("flags", "").split())
    vectors = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else None
    details = [f"family {fields['cpu family']}" if "cpu family" in fields else None, vectors]
    details = [d for d in details if d]
    return fields["model name"] + (f" ({', '.join(details)})" if details else "")


def _git() -> dict:
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"commit": commit or None, "dirty": bool(dirty.strip())} if commit else {}


def load_average() -> list[float] | None:
    """1-, 5- and 15-minute load averages (other jobs on the machine skew timings)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def environment() -> dict:
    """Machine, Python, versions of the libraries involved and the git state."""
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    try:
        import graphblas as gb

        versions["SuiteSparse:GraphBLAS"] = ".".join(map(str, gb.ss.about["library_version"]))
    except Exception:  # pragma: no cover - report what can be had
        pass
    try:
        import psutil

        mem = psutil.virtual_memory().total
    except ImportError:  # pragma: no cover
        mem = None
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": platform.node(),
            "machine": platform.machine(), "cpu": cpu_model(), "cpu_count": os.cpu_count(),
            "memory_bytes": mem, "python": sys.version.split()[0],
            "platform": platform.platform(), "load_average_start": load_average(),
            "versions": versions, "git": _git()}
