"""Keep a benchmark from taking the machine down: RSS limits for subprocesses and for us.

:func:`run_guarded` starts a command, samples the RSS of its whole process tree every few
milliseconds (``psutil``) and kills it above a limit, reporting *out of memory at X GiB*
instead of letting the kernel's OOM killer pick a victim among other users' jobs.
:class:`RSSWatchdog` does the same for the current process (it can only end it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass

from .rss import GIB, rss_bytes

__all__ = ["GuardedResult", "run_guarded", "RSSWatchdog", "EXIT_OOM", "OOM_MARKERS"]

#: exit status of a worker that caught an allocation failure itself
EXIT_OOM = 3
#: what an allocation failure prints (numpy, torch, C++, GraphBLAS)
OOM_MARKERS = ("MemoryError", "can't allocate memory", "std::bad_alloc", "GrB_OUT_OF_MEMORY",
               "OutOfMemory", "out of memory")


@dataclass
class GuardedResult:
    """Outcome of :func:`run_guarded`.

    ``status`` is ``"ok"``, ``"out_of_memory"`` (killed at the limit, or an allocation failed,
    or SIGKILL from outside — the kernel's OOM killer), ``"timeout"`` or ``"error"``.
    """

    status: str
    returncode: int | None
    stdout: str
    stderr: str
    observed_peak_bytes: int
    limit_bytes: int
    seconds: float
    message: str

    def to_dict(self, output_tail: int = 2000) -> dict:
        """JSON-ready dict (stdout/stderr cut to their last ``output_tail`` characters)."""
        d = asdict(self)
        d["stdout"] = d["stdout"][-output_tail:]
        d["stderr"] = d["stderr"][-output_tail:]
        return d


def _tree_rss(proc) -> int:
    import psutil

    total = 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def _kill_tree(proc) -> None:
    import psutil

    try:
        kids = proc.children(recursive=True)
    except psutil.Error:
        kids = []
    for p in [*kids, proc]:
        try:
            p.kill()
        except psutil.Error:
            pass


def run_guarded(cmd: list[str], limit_bytes: int, timeout: float | None = None,
                poll: float = 0.01, env: dict | None = None,
                cwd: str | None = None) -> GuardedResult:
    """Run ``cmd`` and kill it (and its children) when their RSS exceeds ``limit_bytes``.

    Parameters
    ----------
    cmd : list of str
        The command (typically ``[sys.executable, "-m", ...]``).
    limit_bytes : int
        RSS limit of the whole process tree.
    timeout : float, optional
        Wall-clock limit in seconds.
    poll : float
        Sampling period in seconds. Pages are touched as they are written, so RSS climbs at
        a few GB/s at most and the overshoot between samples stays small.
    env, cwd
        Passed to :class:`subprocess.Popen`.

    Returns
    -------
    GuardedResult
    """
    import psutil

    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=cwd)
        ps = psutil.Process(proc.pid)
        peak, status, message = 0, None, ""
        while proc.poll() is None:
            rss = _tree_rss(ps)
            peak = max(peak, rss)
            if rss > limit_bytes:
                _kill_tree(ps)
                status = "out_of_memory"
                message = (f"out of memory: killed at {rss / GIB:.2f} GiB RSS "
                           f"(limit {limit_bytes / GIB:.2f} GiB)")
                break
            if timeout is not None and time.perf_counter() - t0 > timeout:
                _kill_tree(ps)
                status, message = "timeout", f"timed out after {timeout:.0f} s"
                break
            time.sleep(poll)
        rc = proc.wait()
        seconds = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    if status is None:
        if rc == 0:
            status = "ok"
        elif rc == EXIT_OOM or any(m in stderr for m in OOM_MARKERS):
            status = "out_of_memory"
            message = (f"out of memory: an allocation failed (peak RSS seen "
                       f"{peak / GIB:.2f} GiB)")
        elif rc == -9:
            status = "out_of_memory"
            message = (f"killed by SIGKILL from outside (the kernel's OOM killer?) at "
                       f"{peak / GIB:.2f} GiB RSS seen")
        else:
            status = "error"
            tail = stderr.strip().splitlines()[-1:] or [f"exit status {rc}"]
            message = f"failed with exit status {rc}: {tail[0]}"
    return GuardedResult(status, rc, stdout, stderr, peak, int(limit_bytes), seconds, message)


class RSSWatchdog:
    """Context manager ending *this* process (exit status :data:`EXIT_OOM`) when its RSS
    passes ``limit_bytes``, after printing why — better than the kernel's OOM killer
    choosing someone else's job.

    Parameters
    ----------
    limit_bytes : int
        RSS limit of the current process.
    poll : float
        Sampling period in seconds.
    """

    def __init__(self, limit_bytes: int, poll: float = 0.02):
        self.limit = int(limit_bytes)
        self.poll = poll
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="rss-watchdog")

    def _watch(self) -> None:
        while not self._stop.wait(self.poll):
            rss = rss_bytes()
            self.peak = max(self.peak, rss)
            if rss > self.limit:
                sys.stderr.write(f"\nbench: out of memory: this process reached "
                                 f"{rss / GIB:.2f} GiB RSS (limit {self.limit / GIB:.2f} "
                                 "GiB); stopping it.\n")
                sys.stderr.flush()
                os._exit(EXIT_OOM)

    def __enter__(self) -> RSSWatchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
