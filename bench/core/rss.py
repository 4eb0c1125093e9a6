"""Memory readings of the current process (Linux ``/proc``; portable fallbacks)."""

from __future__ import annotations

import os
import resource
import sys

__all__ = ["rss_bytes", "peak_rss_bytes", "hwm_bytes", "reset_hwm", "GIB", "MIB"]

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


def reset_hwm() -> bool:
    """Reset ``VmHWM`` to the current RSS (``/proc/self/clear_refs`` ← 5); False if refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
