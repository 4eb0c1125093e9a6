"""The ``gblas-gnn`` command as a user runs it: ``python -m gblas_gnn`` in a subprocess.

The subprocess imports the same ``gblas_gnn`` sources as the test process (its ``src``
folder goes first on ``PYTHONPATH``), so a worktree is tested against itself.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import gblas_gnn
from gblas_gnn.cli.command import _build, _load_dataset
from gblas_gnn.train import evaluate, load_checkpoint, read_checkpoint

SRC = str(Path(gblas_gnn.__file__).resolve().parents[1])
SMALL = "csbm:n=300,classes=3,train_per_class=10,val=60,test=100,features=16"


def cli_env() -> dict:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": SRC + (os.pathsep + path if path else "")}


def run_cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m gblas_gnn ARGS`` in ``cwd``; output captured as text."""
    return subprocess.run([sys.executable, "-m", "gblas_gnn", *args], cwd=cwd, env=cli_env(),
                          capture_output=True, text=True, timeout=timeout)


def test_infer_predicts_with_the_weights_train_reported_on(tmp_path):
    # 60 GCN epochs on the small CSBM: the best validation epoch (46) is not the last one, and
    # the last epoch's weights score differently on the test set
    train = run_cli("train", "--model", "gcn", "--dataset", SMALL, "--epochs", "60",
                    "--checkpoint", "ck.npz", "--no-progress", cwd=tmp_path)
    assert train.returncode == 0, train.stderr
    reported = re.search(r"test accuracy (\d+\.\d\d)%", train.stdout).group(1)

    cfg = read_checkpoint(tmp_path / "ck.npz").trainer["metadata"]
    dataset = _load_dataset(cfg["dataset"], cfg)
    model = _build(cfg, dataset)
    ck = load_checkpoint(tmp_path / "ck.npz", model, restore_rng=False, weights="last")
    best = ck.trainer["history"]["best_epoch"]
    assert best < ck.epoch
    assert f"{evaluate(model, dataset)['test_acc'] * 100:.2f}" != reported  # the test has teeth

    infer = run_cli("infer", "--checkpoint", "ck.npz", cwd=tmp_path)
    assert infer.returncode == 0, infer.stderr
    assert f"weights of epoch {best} (selected)" in infer.stdout
    assert re.search(r"test accuracy (\d+\.\d\d)%", infer.stdout).group(1) == reported


def test_ctrl_c_prints_one_line_exits_130_and_keeps_a_resumable_checkpoint(tmp_path):
    args = ["train", "--model", "gcn", "--dataset", SMALL, "--epochs", "100000",
            "--patience", "0", "--checkpoint", "ck.npz", "--no-progress"]
    proc = subprocess.Popen([sys.executable, "-m", "gblas_gnn", *args], cwd=tmp_path,
                            env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            if (tmp_path / "ck.npz").exists() and read_checkpoint(tmp_path / "ck.npz").epoch >= 3:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the run ended before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    assert out == "" and "Traceback" not in err and err.count("\n") == 1, err
    m = re.fullmatch(r"gblas-gnn: interrupted at epoch (\d+); the checkpoint ck\.npz holds "
                     r"epoch (\d+); resume with: (gblas-gnn train .* --resume)\n", err)
    assert m, err
    running, saved = int(m.group(1)), int(m.group(2))
    assert saved == read_checkpoint(tmp_path / "ck.npz").epoch and running in (saved, saved + 1)
    command = shlex.split(m.group(3))
    assert command[1:-1] == args
    # the printed command resumes the run (here with a smaller budget, to finish quickly)
    command[command.index("--epochs") + 1] = str(saved + 3)
    resumed = run_cli(*command[1:], "--metrics-json", "m.json", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    history = json.loads((tmp_path / "m.json").read_text())["history"]
    assert history["epoch"] == list(range(1, saved + 4))
    assert f"{saved + 3} epochs" in resumed.stdout and f"{saved} of them before --resume" \
        in resumed.stdout


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path):
    # the reader closes the pipe at once (as `| head -1` does after its line), long before
    # the command writes anything
    cmd = (f"{shlex.quote(sys.executable)} -m gblas_gnn train --model sgc --epochs 3 "
           f"--dataset {SMALL} --no-progress | head -c 0")
    done = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.returncode == 141


def test_an_executor_that_cannot_run_here_is_a_usage_error(tmp_path):
    import pytest

    cuda = pytest.importorskip("numba.cuda")
    if cuda.is_available():                  # a GPU, or the simulator, runs it
        pytest.skip("the cuda executor can run here")
    done = run_cli("train", "--executor", "cuda", "--epochs", "1", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--executor cuda: no CUDA GPU" in done.stderr
    assert "NUMBA_ENABLE_CUDASIM=1" in done.stderr


def test_the_peak_memory_train_reports_is_its_own_not_its_parents(tmp_path):
    """``train`` started by a process holding 1 GiB: the summary's peak memory is the run's
    (a few hundred MiB: the imports, the graph, the model), not the parent's high-water mark
    that ``getrusage().ru_maxrss`` carries across ``fork`` and ``exec``."""
    import numpy as np

    ballast = np.ones(1 << 27)                           # 1 GiB, touched, held by the parent
    done = run_cli("train", "--model", "gcn", "--dataset", SMALL, "--epochs", "3",
                   "--no-progress", "--metrics-json", "m.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    peak = json.loads((tmp_path / "m.json").read_text())["run"]["peak_rss_bytes"]
    assert 32 << 20 < peak < 768 << 20, peak
    assert re.search(rf"peak memory {peak / 2**20:.1f} MiB", done.stdout), done.stdout
    assert ballast[-1] == 1
