"""The distributed tests on real grids: ``mpiexec`` jobs launched from pytest, each with a
timeout (Open MPI's wheel; as root and oversubscribed on a small machine).

* the grid test suite (``tests/dist``) on 2×2 and 3×3 grids;
* a process count that is not a square, inputs that differ between ranks and a rank that
  fails: the job ends with a clear message and a non-zero status, the failing rank aborting
  the others (Open MPI's ``MPI_ABORT`` report), never hangs (a hang is the launch's timeout,
  which fails the test);
* the command line on a grid (train, infer) against one process.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
from mpi_helpers import ROOT, mpi_env, mpiexec, run_mpi

pytestmark = pytest.mark.cpu_only        # launched from the ordinary session only

SCRIPTS = ROOT / "tests" / "mpi_scripts"


@pytest.mark.slow
@pytest.mark.timeout(660)
@pytest.mark.parametrize("nprocs", [4, 9])
def test_grid_suite(nprocs):
    # in the ranks, a test that hangs dumps its stack and exits (ending the job), see
    # pyproject.toml
    done = run_mpi(nprocs, ["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                            "-o", "timeout_method=thread", "--executor", "dist",
                            "tests/dist"], timeout=600,
                   GBLAS_GNN_TEST_COLLECTIVE="1")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and " failed" not in done.stdout


def _fails_fast(nprocs, script, *args, expect, timeout=60):
    """The job's result; it must fail with ``expect`` in its output (a hang fails the test at
    ``timeout``)."""
    done = run_mpi(nprocs, [str(SCRIPTS / script), *args], timeout=timeout)
    assert done.returncode != 0, done.stdout + done.stderr
    assert expect in done.stdout + done.stderr, done.stdout[-2000:] + done.stderr[-2000:]
    return done


def _aborted_by(rank: int, done: subprocess.CompletedProcess) -> None:
    """The job ended because ``rank`` called ``MPI_Abort`` (which kills the others), and no
    other rank got to the end of its program: none was left to finish or to wait."""
    out = done.stdout + done.stderr
    assert f"MPI_ABORT was invoked on rank {rank}" in out, out[-3000:]
    assert "reached the end" not in out, out[-3000:]


def test_a_process_count_that_is_not_square_is_refused_on_every_rank():
    done = _fails_fast(3, "grid_of.py", expect="square number of processes")
    assert (done.stdout + done.stderr).count("square number of processes") >= 3


def test_ranks_passing_different_graphs_are_told_so():
    _fails_fast(4, "different_inputs.py", "graph", expect="different graphs")


def test_ranks_passing_features_of_different_widths_are_told_so():
    _fails_fast(4, "different_inputs.py", "features", expect="columns")


@pytest.mark.parametrize("dense", ["replicated", "sharded"])
def test_a_failing_rank_aborts_the_job(dense):
    _aborted_by(2, _fails_fast(4, "one_rank_fails.py", dense, expect="rank 2 gives up"))


def test_ranks_compiling_the_same_kernel_at_once_compile_it_once(tmp_path):
    """Two ranks on an empty kernel cache run the same composed program from the same
    moment: each generated kernel is compiled by one of them and loaded from the cache by
    the other (the kernel's lock), both compute the same result, and the cache holds no
    half-written file."""
    done = run_mpi(2, [str(SCRIPTS / "compile_once.py")], timeout=300,
                   GBLAS_GNN_KERNEL_CACHE=str(tmp_path / "kernels"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    counts = json.loads(re.search(r"compiled by ranks: (\{.*\})", done.stdout).group(1))
    assert counts and set(counts.values()) == {1}, counts
    assert "same results: True" in done.stdout
    assert not list((tmp_path / "kernels").rglob("*.tmp"))


SMALL = "csbm:n=300,classes=3,train_per_class=10,val=60,test=100,features=16"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_command_line_trains_and_infers_on_a_grid(tmp_path):
    """``mpiexec -n 4 python -m mpi4py -m gblas_gnn train --executor dist``: the test
    accuracy of one process, printed once, with dense tensors sharded (``--dense auto``
    chooses them on 4 ranks); the checkpoint is written once and infer on the grid with
    the other layout and on one process agree with it (a checkpoint holds no vertex array:
    it is the same on every layout)."""
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
    assert "(dense tensors sharded)" in grid.stdout
    infer = run_mpi(4, ["-m", "gblas_gnn", "infer", "--executor", "dist", "--checkpoint",
                        str(tmp_path / "ck.npz"), "--output", str(tmp_path / "p.npy"),
                        "--dense", "replicated"],
                    timeout=300)
    assert infer.returncode == 0 and line.split()[-1] in infer.stdout, infer.stderr
    single = subprocess.run([sys.executable, "-m", "gblas_gnn", "infer", "--checkpoint",
                             str(tmp_path / "ck.npz")], capture_output=True, text=True,
                            timeout=300, cwd=ROOT)
    assert line.split()[-1] in single.stdout, single.stderr
    assert np.load(tmp_path / "p.npy").shape == (300,)


def test_the_console_script_aborts_the_job_when_a_rank_fails():
    cmd = [mpiexec(), "-n", "4", sys.executable, str(SCRIPTS / "cli_rank_fails.py")]
    done = subprocess.run(cmd, env=mpi_env(), capture_output=True, text=True, timeout=90,
                          cwd=ROOT)
    assert done.returncode != 0
    assert "rank 2 gives up inside the command" in done.stdout + done.stderr
    _aborted_by(2, done)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_model_file_on_an_ogb_folder_trains_and_infers_on_a_grid(tmp_path):
    """``mpiexec -n 4 ... train --model FILE.py:NAME --dataset ogb:DIR``: one process's test
    accuracy, printed once, with the run's facts (grid, graph, memory, bytes per rank per
    epoch beside the scheme's formula, what each rank read); infer on the grid with the same
    file predicts with the selected weights."""
    import shutil

    from ogb_helpers import toy, write_ogb

    folder = write_ogb(tmp_path, "ogbn-arxiv", toy(n=120, m=600, f=8))
    shutil.copy(ROOT / "tests" / "model_files" / "my_models.py", tmp_path)
    args = ["train", "--model", "my_models.py:TropicalGATv2", "--dataset", f"ogb:{folder}",
            "--epochs", "4", "--no-progress"]
    one = subprocess.run([sys.executable, "-m", "gblas_gnn", *args], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path, env=mpi_env())
    assert one.returncode == 0, one.stderr
    line = re.search(r"test accuracy (\d+\.\d\d)%", one.stdout).group(0)
    grid = run_mpi(4, ["-m", "gblas_gnn", *args, "--executor", "dist", "--checkpoint",
                       "ck.npz"], cwd=tmp_path, timeout=300)
    assert grid.returncode == 0, grid.stdout + grid.stderr
    assert grid.stdout.count("test accuracy") == 1 and line in grid.stdout
    assert "ran on executor dist, a 2x2 grid of 4 processes (dense tensors sharded); graph " \
        "of 120 vertices" in grid.stdout
    sent = re.search(r"bytes sent per epoch by each rank \(the last epoch; rank: bytes\): "
                     r"0: .*, 1: .*, 2: .*, 3: [\d.]+ \w+\n", grid.stdout)
    assert sent, grid.stdout
    assert re.search(r"the scheme's formula, the sum over the graph layers of \(n k/sqrt\(p\) "
                     r"\+ k\^2\) words .*\(n = 120, sqrt\(p\) = 2, k = 8, 40\)", grid.stdout)
    assert "data: each rank read at most" in grid.stdout
    infer = run_mpi(4, ["-m", "gblas_gnn", "infer", "--executor", "dist", "--checkpoint",
                        "ck.npz", "--model", "my_models.py:TropicalGATv2"], cwd=tmp_path,
                    timeout=300)
    assert infer.returncode == 0, infer.stdout + infer.stderr
    assert line.split()[-1] in infer.stdout and infer.stdout.count("predicted") == 1


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_converted_ogb_folder_is_read_block_by_block_on_a_grid(tmp_path):
    """``gblas-gnn convert ogb:DIR OUT.npz``, then a 2×2 grid job on ``npz:OUT.npz``: each
    rank reads the tiles of its block only, under half of the whole edge list, and trains
    to one process's accuracy."""
    from ogb_helpers import toy, write_ogb

    from gblas_gnn.cli import main

    folder = write_ogb(tmp_path, "ogbn-products", toy(n=400, m=6000, f=8))
    out = tmp_path / "products.npz"
    assert main(["convert", f"ogb:{folder}", str(out), "--no-progress"]) == 0
    args = ["train", "--model", "gcn", "--dataset", f"npz:{out}", "--epochs", "3",
            "--no-progress"]
    one = subprocess.run([sys.executable, "-m", "gblas_gnn", *args], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path, env=mpi_env())
    assert one.returncode == 0, one.stderr
    line = re.search(r"test accuracy (\d+\.\d\d)%", one.stdout).group(0)
    grid = run_mpi(4, ["-m", "gblas_gnn", *args, "--executor", "dist", "--metrics-json",
                       str(tmp_path / "m.json")], cwd=tmp_path, timeout=300)
    assert grid.returncode == 0, grid.stdout + grid.stderr
    assert line in grid.stdout
    read = json.loads((tmp_path / "m.json").read_text())["run"]["read"]
    assert read["how"] == "the tiles of its block"
    assert read["edge_bytes"] < read["total_edge_bytes"] / 2, read
    assert "data: each rank read at most" in grid.stdout
