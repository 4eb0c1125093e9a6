"""Plumbing shared by the fresh-subprocess workers (:mod:`bench.layers.memory`,
:mod:`bench.layers.epoch`).

A worker prints one line ``BENCH_RESULT {json}`` on stdout; an allocation failure it catches
ends it with :data:`~bench.core.guard.EXIT_OOM` after one line on stderr.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from .guard import EXIT_OOM, OOM_MARKERS, GuardedResult, run_guarded

__all__ = ["RESULT_PREFIX", "ROOT", "emit", "parse_result", "worker_main", "launch",
           "omp_policy_note", "with_root_on_path"]

RESULT_PREFIX = "BENCH_RESULT "

#: the directory that holds the ``bench`` package (the repository root)
ROOT = Path(__file__).resolve().parents[2]


#: ``OMP_WAIT_POLICY`` when this process started (its OpenMP runtimes read it at load time)
_STARTUP_POLICY = os.environ.get("OMP_WAIT_POLICY")


def omp_policy_note(env: dict[str, str] | None = None) -> dict[str, str]:
    """``OMP_WAIT_POLICY`` of this process's OpenMP runtimes and of its workers (``env``)."""
    unset = "unset (runtime default)"
    workers = (env if env is not None else os.environ).get("OMP_WAIT_POLICY")
    return {"this_process": _STARTUP_POLICY or unset, "workers": workers or unset}


def with_root_on_path(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default this process's environment) with :data:`ROOT` first on
    ``PYTHONPATH``, so that a child ``python -m bench...`` finds this harness whatever its
    working directory (the rest of ``PYTHONPATH``, e.g. the library's sources, is kept)."""
    env = dict(os.environ if env is None else env)
    parts = [str(ROOT), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env


def emit(result: dict) -> None:
    """Print ``result`` as the worker's answer."""
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()


def parse_result(stdout: str) -> dict | None:
    """The last ``BENCH_RESULT`` of a worker's stdout, or None."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    return None


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, MemoryError) or any(m in str(exc) for m in OOM_MARKERS)


def worker_main(fn: Callable[[], dict]) -> int:
    """Run ``fn``, emit its dict; an allocation failure exits with ``EXIT_OOM``."""
    try:
        result = fn()
    except Exception as exc:  # classify, then re-raise what is not an allocation failure
        if not _is_oom(exc):
            raise
        sys.stderr.write(f"out of memory: {type(exc).__name__}: {exc}\n")
        return EXIT_OOM
    emit(result)
    return 0


def launch(module: str, args: list[str], limit_bytes: int, timeout: float | None = None,
           env: dict[str, str] | None = None,
           python: str | None = None) -> tuple[GuardedResult, dict | None]:
    """Run ``python -m <module> <args>`` under :func:`~.guard.run_guarded` (environment
    ``env``, default ours, with the repository root on ``PYTHONPATH``: ``module`` is
    ``bench.layers.memory``, ``bench.layers.epoch`` or ``bench.peers.dgl_worker``; ``python``
    the interpreter, default this one, a peer's for :mod:`bench.peers.dgl_worker`, whose
    ``env`` the caller prepares).

    Returns the guard's result and the worker's parsed answer (None unless it finished).
    """
    res = run_guarded([python or sys.executable, "-m", module, *args], limit_bytes,
                      timeout=timeout, env=with_root_on_path(env))
    answer = parse_result(res.stdout) if res.status == "ok" else None
    if res.status == "ok" and answer is None:
        res.status, res.message = "error", "worker printed no result"
    return res, answer
