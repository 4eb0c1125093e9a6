"""Memory readings of the current process (Linux ``/proc``; portable fallbacks)."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import resource
import sys

__all__ = ["rss_bytes", "peak_rss_bytes", "hwm_bytes", "reset_hwm", "release_free_memory",
           "GIB", "MIB"]

GIB = 1 << 30
MIB = 1 << 20


def rss_bytes() -> int:
    """Current resident set size of this process."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # pragma: no cover - not Linux
        import psutil

        return int(psutil.Process().memory_info().rss)


def peak_rss_bytes() -> int:
    """Peak RSS of this process image: ``VmHWM`` where ``/proc`` has it.

    Not ``getrusage().ru_maxrss`` on Linux: the kernel carries the *parent's* high-water mark
    across ``fork``/``exec`` into it, so a worker started by a 470 MB parent reports at least
    470 MB. ``ru_maxrss`` is the fallback elsewhere. After :func:`reset_hwm` this is the peak
    since the reset.
    """
    hwm = hwm_bytes()
    if hwm is not None:
        return hwm
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # pragma: no cover
    return int(peak if sys.platform == "darwin" else peak * 1024)  # pragma: no cover


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover - not Linux
        return None
    return None


def hwm_bytes() -> int | None:
    """The kernel's resident high-water mark ``VmHWM`` (resettable with :func:`reset_hwm`)."""
    return _status_kib("VmHWM")


def release_free_memory() -> bool:
    """Collect garbage and hand the C allocator's free memory back to the system.

    glibc keeps memory that was freed (below its trim threshold, or above a chunk still in
    use) resident; work that reuses it raises neither the RSS nor ``VmHWM``. So a reading
    taken before a step counts that memory as the baseline's and the step's reuse of it as
    free: at scale 12 the GAT step measured after a warm-up step of the same size added 0.1
    bytes per entry. ``malloc_trim(0)`` returns it (glibc only).

    Returns
    -------
    bool
        Whether ``malloc_trim`` was there to call.
    """
    gc.collect()
    name = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    if trim is None:  # pragma: no cover - not glibc
        return False
    trim(0)
    return True


def reset_hwm() -> bool:
    """Reset ``VmHWM`` to the current RSS (``/proc/self/clear_refs`` ← 5); False if refused.

    The allocator's free memory is handed back first (:func:`release_free_memory`), so the
    RSS read *after* this call is what the process holds, and ``VmHWM`` less it after a
    step is the step's peak growth even where the step reuses memory freed before it.
    """
    release_free_memory()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
