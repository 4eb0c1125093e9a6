"""The distributed tests on real grids: ``mpiexec`` jobs launched from pytest, each with a
timeout (Open MPI's wheel; as root and oversubscribed on a small machine).

* the grid test suite (``tests/dist``) on 2×2 and 3×3 grids;
* a process count that is not a square, inputs that differ between ranks and a rank that
  fails: the job ends with a clear message and a non-zero status within seconds, never hangs.
"""

from __future__ import annotations

import time

import pytest
from mpi_helpers import ROOT, run_mpi

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
