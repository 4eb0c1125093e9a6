"""Memory readings of the current process (Linux ``/proc``; portable fallbacks)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import os
import resource
import sys

__all__ = ["rss_bytes", "peak_rss_bytes", "hwm_bytes", "reset_hwm", "release_free_memory",
           "keep_freed_memory", "freed_memory_kept", "GIB", "MIB"]

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


#: glibc's ``mallopt`` parameters (``malloc.h``) and their defaults
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_DEFAULTS = {_M_TRIM_THRESHOLD: 128 * 1024, _M_MMAP_MAX: 65536}


def _mallopt():
    name = ctypes.util.find_library("c")
    return getattr(ctypes.CDLL(name), "mallopt", None) if name else None


def keep_freed_memory() -> bool:
    """Make glibc keep freed memory in this process: no block goes to ``mmap`` (so none is
    unmapped when freed) and the heap is never trimmed.

    Why the timing processes of the harness do this, every side alike: this machine is a
    microVM whose kernel reports free memory to the host (``page_reporting``, 8 MiB chunks,
    about 2 s after it is freed), and the host takes it back. Memory a process freed and
    allocates again after such a pause faults in 6–10 times more slowly: two fresh
    77 MB arrays take 17 ms to fill straight after the previous pair was freed, 100–180 ms
    after a 1 s pause. In an interleaved run each side pauses while the others run, so
    its times would grow with the others' run time and with how much memory it frees, not
    with its own work; a training loop, whose steps run back to back, reuses the memory
    before it is reported. Keeping it resident measures each side as the loop runs it.

    Returns
    -------
    bool
        Whether ``mallopt`` was there to call (glibc only).
    """
    mallopt = _mallopt()
    if mallopt is None:  # pragma: no cover - not glibc
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


@contextlib.contextmanager
def freed_memory_kept(keep: bool = True):
    """:func:`keep_freed_memory` for the ``with`` block (when ``keep``); then glibc's
    defaults again, and the kept memory handed back (:func:`release_free_memory`).
    Yields whether the memory is kept."""
    kept = keep and keep_freed_memory()
    try:
        yield kept
    finally:
        if kept:
            mallopt = _mallopt()
            for param, value in _DEFAULTS.items():
                mallopt(param, value)
            release_free_memory()


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
