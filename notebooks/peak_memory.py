"""The memory a training step adds at its peak, measured in a fresh process.

The notebooks' memory sections (04, 05, 06) share this module; ``tests/test_notebooks.py``
holds it and each notebook's step to plausible figures on small graphs.

A process's resident high-water mark (``VmHWM`` in ``/proc/self/status``, and
``getrusage().ru_maxrss``, which also carries the parent's mark across ``fork`` and
``exec``) covers everything the process ever held. Read after a step, it measures whatever
was largest before, building the graph included, and can show a step as free. Resetting the
mark just before the step (``/proc/self/clear_refs``) is not enough on its own either: the C
allocator keeps memory that earlier work freed, resident, and a step that reuses it raises
neither the resident memory nor the mark (a GATv2 step with edge features read 6 MiB that
way, 28 MiB once that memory was handed back). So, before each measured step:

1. the garbage collector runs and ``malloc_trim(0)`` hands the allocator's free memory back
   to the system (glibc; elsewhere this step is skipped);
2. the high-water mark is reset to the resident memory of the moment (``clear_refs`` ← 5);

and after the step the mark, less the resident memory of step 2, is what the step added at
its peak: every allocation counts, numpy's, numba's, GraphBLAS's and torch's alike.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import json
import os
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path

__all__ = ["step_growth", "traced_peak", "report", "in_fresh_process", "TRACE"]

#: set in a child's environment, :func:`report` also traces one more step (numpy's arrays)
TRACE = "PEAK_MEMORY_TRACE"
HERE = Path(__file__).resolve().parent


def _status_bytes(key: str) -> int:
    """A ``/proc/self/status`` field (given there in kB), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def _release_free_memory() -> None:
    """Collect garbage and hand the C allocator's free memory back to the system."""
    gc.collect()
    name = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    if trim is not None:                 # glibc; musl and macOS have none
        trim(0)


def step_growth(run: Callable[[], object]) -> int:
    """Bytes that one call of ``run`` adds to the resident memory at its peak.

    Parameters
    ----------
    run : callable
        The step, called once without arguments.

    Returns
    -------
    int
        ``VmHWM`` after the call less ``VmRSS`` just before it, the allocator's free memory
        released and the high-water mark reset first (the module docstring says why).
    """
    _release_free_memory()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")                     # the high-water mark back to the resident memory
    base = _status_bytes("VmRSS")
    run()
    return _status_bytes("VmHWM") - base


def traced_peak(run: Callable[[], object]) -> int:
    """Peak bytes of the Python-visible allocations (numpy's arrays) of one call of ``run``.

    A lower bound of :func:`step_growth`: ``tracemalloc`` sees what numpy allocates, not
    what numba's runtime, GraphBLAS or torch allocate themselves.

    Parameters
    ----------
    run : callable
        The step, called once without arguments.

    Returns
    -------
    int
        ``tracemalloc``'s peak over the call.
    """
    gc.collect()
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def report(run: Callable[[], object], edges: int) -> None:
    """The child's side: measure ``run`` and print the readings as one JSON line.

    Parameters
    ----------
    run : callable
        The training step (forward and backward), called once per reading.
    edges : int
        The graph's edges, printed with the readings for a figure per edge.

    Notes
    -----
    Prints ``{"first": ..., "later": ..., "edges": ...}``: :func:`step_growth` of the
    process's first step (loading the cached kernels and any cache the step builds, once,
    included) and of the next one (the step as a training loop repeats it); with
    :data:`TRACE` set in the environment also ``"traced"``, :func:`traced_peak` of a third.
    """
    readings = {"first": step_growth(run), "later": step_growth(run), "edges": int(edges)}
    if os.environ.get(TRACE):
        readings["traced"] = traced_peak(run)
    print(json.dumps(readings))


def in_fresh_process(script: str, *args: object, trace: bool = False,
                     timeout: float = 600) -> dict:
    """Run ``script`` (which ends in :func:`report`) in a fresh interpreter; its readings.

    Parameters
    ----------
    script : str
        Python source run with ``python -c``; this module is importable from it.
    *args : object
        The script's ``sys.argv[1:]`` (as strings).
    trace : bool, optional
        Also trace a step's numpy allocations (:data:`TRACE`).
    timeout : float, optional
        Seconds before the process is killed.

    Returns
    -------
    dict
        The readings :func:`report` printed, in bytes.

    Raises
    ------
    RuntimeError
        The process failed; the message ends with its standard error.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH")) if p)
    if trace:
        env[TRACE] = "1"
    else:
        env.pop(TRACE, None)
    done = subprocess.run([sys.executable, "-c", script, *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"the step's process failed ({done.returncode}):\n"
                           f"{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
