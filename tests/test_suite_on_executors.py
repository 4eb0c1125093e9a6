"""The suite on every executor: which run where, and the CUDA simulator's own sessions.

The default session runs the executor-neutral suites (``executor_suites.EVERY_EXECUTOR``) on
``cpu`` and on ``primitives`` itself: ``conftest.py`` parametrizes their executor. The first
test here holds it to that.

The ``cuda`` executor runs in Numba's CUDA simulator (no GPU here) in sessions of its own,
launched from here (``python -m pytest --executor cuda`` in a subprocess), for three reasons:

* numba-cuda is either the simulator or the real target for a whole process: the simulator
  is chosen by ``NUMBA_ENABLE_CUDASIM`` when ``numba`` is imported, and the ordinary session
  imports it before any test (the cpu kernels are numba's). The ordinary session needs the
  real target: ``tests/test_gpu_compile.py`` compiles every kernel to PTX for sm_80 and sm_90
  and assembles it with ``ptxas``, which the simulator cannot do (the file skips
  itself under it); on a machine with a GPU the simulator would also hide the GPU.
* The launch shape is fixed at import too (``gblas_gnn.gpu._device``: ``LANES`` lanes per
  group, 4 in the simulator, and the block sizes), and the generated kernels read it: the
  run at the full warp width (``GBLAS_GNN_CUDASIM_LANES=32``) cannot share a process with
  the run at 4 lanes, so it is a third session.
* Time: the simulator runs every CUDA thread as a Python thread under the GIL, so a session
  uses one core. Its own session splits the tests over both cores of this machine
  (pytest-xdist, ``-n 2``) while the ordinary session waits; inside the ordinary session,
  which CI runs without xdist, the same tests would take about twice the wall time.

The simulator runs the suite written for it (``tests/gpu``: every layer, training,
checkpoints and the command line against the cpu executor) and the executor-neutral
operation and composition tests, with lane groups of 4 threads, then the kernel tests whose
rows, channels and messages are wider than a lane group at the full warp width of 32 lanes.
On a machine with a GPU ``tests/gpu`` also runs on it in the ordinary session.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from executor_suites import ON_A_DEVICE

ROOT = Path(__file__).resolve().parent.parent
GPU_SUITE = ["tests/gpu", *(f"tests/{name}" for name in ON_A_DEVICE)]


def run_suite(executor: str, timeout: int, suite=GPU_SUITE, workers: int = 1,
              **env) -> subprocess.CompletedProcess:
    """The suite on ``executor`` in a pytest session of its own; ``workers`` > 1 splits it
    over that many processes (pytest-xdist)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
           *(["-n", str(workers)] if workers > 1 else []), "--executor", executor, *suite]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **env})


def check(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout


def _collected(*args: str) -> list[str]:
    """The test ids a session with ``args`` collects."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--collect-only", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


def _executor_id(test_id: str) -> str | None:
    found = re.search(r"\[(cpu|primitives|cuda)(?:-|\])", test_id)
    return found.group(1) if found else None


@pytest.mark.cpu_only            # once, from the ordinary session
def test_the_default_session_runs_the_neutral_suites_on_cpu_and_primitives():
    files = ["tests/test_nn_gcn.py", "tests/test_train_losses.py", "tests/test_graph.py"]
    ids = _collected(*files)
    for name in ("test_nn_gcn.py", "test_train_losses.py"):
        mine = [t for t in ids if name in t]
        by = {e: {re.sub(r"\[(cpu|primitives)-?", "[", t) for t in mine if _executor_id(t) == e}
              for e in ("cpu", "primitives")}
        # every test on both, but the cpu executor's own (cpu_only: on cpu alone)
        assert by["primitives"] and by["primitives"] <= by["cpu"], name
        assert {_executor_id(t) for t in mine} == {"cpu", "primitives"}, name
    assert any("test_backward_builds_the_transpose_once" in t and _executor_id(t) == "cpu"
               for t in ids)
    assert not any("test_backward_builds_the_transpose_once" in t and
                   _executor_id(t) == "primitives" for t in ids)
    # the rest runs once, on the first executor
    graph = [t for t in ids if "test_graph.py" in t]
    assert graph and not any(_executor_id(t) for t in graph)
    # --executor NAME: the whole session on NAME, nothing parametrized by it
    one = _collected("--executor", "primitives", *files)
    assert len(one) == len(ids) - len([t for t in ids if _executor_id(t) == "primitives"])
    assert not any(_executor_id(t) for t in one)
    # --executors: the list of the session
    assert {_executor_id(t) for t in _collected("--executors", "primitives,cpu", files[0])} \
        == {"cpu", "primitives"}


@pytest.mark.cpu_only            # launched from the cpu session only (no recursion)
@pytest.mark.slow
@pytest.mark.timeout(1560)
def test_gpu_suite_in_the_cuda_simulator():
    pytest.importorskip("numba.cuda")
    check(run_suite("cuda", timeout=1500, workers=2, NUMBA_ENABLE_CUDASIM="1"))


@pytest.mark.cpu_only
@pytest.mark.slow
@pytest.mark.timeout(960)
def test_gpu_kernels_at_the_full_warp_width_in_the_cuda_simulator():
    pytest.importorskip("numba.cuda")
    # the tests whose rows, channels and messages are wider than a lane group: what the
    # warp's width changes (the rest of the file ran at the default width above)
    check(run_suite("cuda", timeout=900, suite=["tests/gpu/test_gpu_kernels.py", "-k", "wide"],
                    workers=2, NUMBA_ENABLE_CUDASIM="1", GBLAS_GNN_CUDASIM_LANES="32"))
