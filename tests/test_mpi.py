"""The distributed tests on real grids: ``mpiexec`` jobs launched from pytest, each with a
timeout (Open MPI's wheel; as root and oversubscribed on a small machine).

* the grid test suite (``tests/dist``) on 2×2 and 3×3 grids;
* a process count that is not a square, inputs that differ between ranks and a rank that
  fails: the job ends with a clear message and a non-zero status within seconds, never hangs;
* the command line on a grid (train, infer) against one process.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

import numpy as np
import pytest
from mpi_helpers import ROOT, mpi_env, mpiexec, run_mpi

pytestmark = pytest.mark.cpu_only        # launched from the ordinary session only

SCRIPTS = ROOT / "tests" / "mpi_scripts"


@pytest.mark.parametrize("nprocs", [4, 9])
def test_grid_suite(nprocs):
    done = run_mpi(nprocs, ["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                            "--executor", "dist", "tests/dist"], timeout=600,
                   GBLAS_GNN_TEST_COLLECTIVE="1")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and " failed" not in done.stdout


def _fails_fast(nprocs, script, *args, expect, timeout=60):
    t0 = time.perf_counter()
    done = run_mpi(nprocs, [str(SCRIPTS / script), *args], timeout=timeout)
    elapsed = time.perf_counter() - t0
    assert done.returncode != 0, done.stdout + done.stderr
    assert expect in done.stdout + done.stderr, done.stdout[-2000:] + done.stderr[-2000:]
    return elapsed, done


def test_a_process_count_that_is_not_square_is_refused_on_every_rank():
    _, done = _fails_fast(3, "grid_of.py", expect="square number of processes")
    assert (done.stdout + done.stderr).count("square number of processes") >= 3


def test_ranks_passing_different_graphs_are_told_so():
    _fails_fast(4, "different_inputs.py", "graph", expect="different graphs")


def test_ranks_passing_features_of_different_widths_are_told_so():
    _fails_fast(4, "different_inputs.py", "features", expect="columns")


def test_a_failing_rank_ends_the_job_within_seconds():
    elapsed, _ = _fails_fast(4, "one_rank_fails.py", expect="rank 2 gives up")
    assert elapsed < 45


SMALL = "csbm:n=300,classes=3,train_per_class=10,val=60,test=100,features=16"


def test_the_command_line_trains_and_infers_on_a_grid(tmp_path):
    """``mpiexec -n 4 python -m mpi4py -m gblas_gnn train --executor dist``: the test
    accuracy of one process, printed once; the checkpoint is written once and infer on the
    grid and on one process agree with it."""
    args = ["train", "--model", "gcn", "--dataset", SMALL, "--epochs", "20", "--no-progress",
            "--checkpoint", str(tmp_path / "ck.npz")]
    one = subprocess.run([sys.executable, "-m", "gblas_gnn", *args[:-2]],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert one.returncode == 0, one.stderr
    grid = run_mpi(4, ["-m", "gblas_gnn", *args, "--executor", "dist", "--relabel"],
                   timeout=300)
    assert grid.returncode == 0, grid.stdout + grid.stderr
    line = re.search(r"test accuracy (\d+\.\d\d)%", one.stdout).group(0)
    assert grid.stdout.count("test accuracy") == 1 and line in grid.stdout
    infer = run_mpi(4, ["-m", "gblas_gnn", "infer", "--executor", "dist", "--checkpoint",
                        str(tmp_path / "ck.npz"), "--output", str(tmp_path / "p.npy")],
                    timeout=300)
    assert infer.returncode == 0 and line.split()[-1] in infer.stdout, infer.stderr
    single = subprocess.run([sys.executable, "-m", "gblas_gnn", "infer", "--checkpoint",
                             str(tmp_path / "ck.npz")], capture_output=True, text=True,
                            timeout=300, cwd=ROOT)
    assert line.split()[-1] in single.stdout, single.stderr
    assert np.load(tmp_path / "p.npy").shape == (300,)


def test_the_console_script_aborts_the_job_when_a_rank_fails():
    cmd = [mpiexec(), "-n", "4", sys.executable, str(SCRIPTS / "cli_rank_fails.py")]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=mpi_env(), capture_output=True, text=True, timeout=90,
                          cwd=ROOT)
    assert done.returncode != 0
    assert "rank 2 gives up inside the command" in done.stdout + done.stderr
    assert time.perf_counter() - t0 < 60
