"""The layer, operation and training tests on the other single-process executors, from the
default (cpu) run: ``python -m pytest --executor NAME`` in a subprocess.

``primitives`` is the cpu executor without any fused kernel: every layer then runs on the
base-class defaults written with the tier-1 primitives, which proves that an executor
implementing only the layer contract runs every layer and trains.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SUITE = ["tests/test_executor_conformance.py", "tests/test_executor_attention.py",
         "tests/test_ops.py", "tests/test_virtual.py", *sorted(
             str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_nn_*.py")),
         *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_train_*.py"))]


def run_suite(executor: str, timeout: int) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
           "--executor", executor, *SUITE]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.cpu_only            # launched from the cpu session only (no recursion)
def test_layer_and_training_suite_on_the_primitives_executor():
    done = run_suite("primitives", timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout
