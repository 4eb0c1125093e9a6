"""The layer, operation and training tests on the other single-process executors, from the
default (cpu) run: ``python -m pytest --executor NAME`` in a subprocess.

``primitives`` is the cpu executor without any fused kernel: every layer then runs on the
base-class defaults written with the core primitives, which proves that an executor
implementing only the core (and the one-process tier) runs every layer and trains.

``cuda`` runs in Numba's CUDA simulator (no GPU here): the suite written for it
(``tests/gpu``: every layer, training, checkpoints and the command line against the cpu
executor) and the executor-neutral operation tests, with lane groups of 4 threads (the
simulator runs every thread as a Python thread), then the kernel tests at the full warp
width of 32 lanes. On a machine with a GPU ``tests/gpu`` also runs on it in the ordinary
session.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SUITE = ["tests/test_executor_conformance.py", "tests/test_compose_kernels.py",
         "tests/test_ops.py", "tests/test_virtual.py", "tests/test_compose.py",
         "tests/test_compose_rules.py", *sorted(
             str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_nn_*.py")),
         *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_train_*.py"))]
GPU_SUITE = ["tests/gpu", "tests/test_executor_conformance.py", "tests/test_ops.py",
             "tests/test_virtual.py", "tests/test_compose.py", "tests/test_compose_rules.py",
             "tests/test_compose_kernels.py"]


def run_suite(executor: str, timeout: int, suite=SUITE, workers: int = 1,
              **env) -> subprocess.CompletedProcess:
    """The suite on ``executor`` in a pytest session of its own; ``workers`` > 1 splits it
    over that many processes (pytest-xdist): worth it for the CUDA simulator, which runs
    on one core under the GIL, not for the cpu-side executors, whose kernels use both."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
           *(["-n", str(workers)] if workers > 1 else []), "--executor", executor, *suite]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **env})


def check(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout


@pytest.mark.cpu_only            # launched from the cpu session only (no recursion)
@pytest.mark.slow
@pytest.mark.timeout(1260)
def test_layer_and_training_suite_on_the_primitives_executor():
    check(run_suite("primitives", timeout=1200))


@pytest.mark.cpu_only
@pytest.mark.slow
@pytest.mark.timeout(1560)
def test_gpu_suite_in_the_cuda_simulator():
    pytest.importorskip("numba.cuda")
    check(run_suite("cuda", timeout=1500, suite=GPU_SUITE, workers=2,
                    NUMBA_ENABLE_CUDASIM="1"))


@pytest.mark.cpu_only
@pytest.mark.slow
@pytest.mark.timeout(960)
def test_gpu_kernels_at_the_full_warp_width_in_the_cuda_simulator():
    pytest.importorskip("numba.cuda")
    # the tests whose rows, channels and messages are wider than a lane group: what the
    # warp's width changes (the rest of the file ran at the default width above)
    check(run_suite("cuda", timeout=900, suite=["tests/gpu/test_gpu_kernels.py", "-k", "wide"],
                    workers=2, NUMBA_ENABLE_CUDASIM="1", GBLAS_GNN_CUDASIM_LANES="32"))
