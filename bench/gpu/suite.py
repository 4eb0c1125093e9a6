"""The GPU correctness suite, run by the study in pytest subprocesses on the device.

Two sessions (:data:`SUITES`), each ``python -m pytest --executor cuda`` on one set of test
files: ``gpu`` is the cuda executor's own suite (``tests/gpu``: every layer, training step,
checkpoint and the command line against the cpu executor, its ``gpu``-marked tests on graphs
of tens of thousands of vertices included), ``executor`` the executor-neutral operation,
composition and conformance suites with ``cuda`` as the default executor: the files the
simulator's sessions run too (``tests/executor_suites.ON_A_DEVICE``). Every session has a wall-clock
budget: the lent machine's minutes are few, so a session that runs over is stopped and the
tests it finished are still counted (read off its ``-v`` lines, which xdist prints as each
test ends).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["SUITES", "DRY_SUITES", "EXECUTOR_SUITES", "run_suite", "count_outcomes"]

ROOT = Path(__file__).resolve().parents[2]


def _on_a_device() -> tuple[str, ...]:
    """The tests' own list of the executor-neutral files the cuda executor runs
    (``tests/executor_suites.py``: the simulator's sessions run the same)."""
    spec = importlib.util.spec_from_file_location("executor_suites",
                                                  ROOT / "tests" / "executor_suites.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(module.ON_A_DEVICE)


#: the executor-neutral operation, composition and conformance files the cuda executor runs
EXECUTOR_SUITES = _on_a_device()
#: session name → test files (relative to the repository root), real device
SUITES = {
    "gpu": ["tests/gpu"],
    "executor": [f"tests/{name}" for name in EXECUTOR_SUITES],
}
#: the dry run's sessions (Numba's simulator: one small file, to prove the plumbing)
DRY_SUITES = {"gpu": ["tests/gpu/test_gpu_bench.py", "-k", "agrees and gat"]}

_OUTCOME = re.compile(r"\b(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
_TEST_ID = re.compile(r"(\S+::\S+)")


def count_outcomes(lines: list[str]) -> dict:
    """Outcomes of the ``-v`` lines of a pytest session (with or without xdist): counts per
    outcome, and the ids of the tests that failed or errored."""
    counts = {k: 0 for k in ("passed", "failed", "error", "skipped", "xfail", "xpass")}
    failed = []
    for line in lines:
        outcome, test = _OUTCOME.search(line), _TEST_ID.search(line)
        if outcome is None or test is None:
            continue
        counts[outcome.group(1).lower()] += 1
        if outcome.group(1) in ("FAILED", "ERROR"):
            failed.append(test.group(1))
    return {**counts, "failed_ids": failed}


def run_suite(name: str, files: list[str], budget: float, workers: int,
              log: Path | None = None) -> dict:
    """One pytest session of ``files`` with ``--executor cuda`` (``workers`` xdist processes,
    0 for none), stopped after ``budget`` seconds; its outcomes (:func:`count_outcomes`),
    whether it completed, its exit status and seconds. The output goes to ``log`` too."""
    cmd = [sys.executable, "-m", "pytest", *files, "--executor", "cuda", "-v",
           "-p", "no:cacheprovider", "-o", "console_output_style=classic",
           *(["-n", str(workers)] if workers else [])]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=dict(os.environ), start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=budget)
        complete = True
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
        complete = False
    if log is not None:
        log.write_text(out)
    lines = out.splitlines()
    result = {"name": name, "command": " ".join(cmd[1:]), "complete": complete,
              "returncode": proc.returncode if complete else None,
              "seconds": time.perf_counter() - t, **count_outcomes(lines),
              "tail": lines[-15:]}
    print(f"[gpu] suite {name}: {result['passed']} passed, {result['failed']} failed, "
          f"{result['error']} errors, {result['skipped']} skipped in "
          f"{result['seconds']:.0f} s" + ("" if complete else " (stopped at its budget)"),
          flush=True)
    return result
