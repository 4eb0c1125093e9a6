"""The ``gblas-gnn`` command as a user runs it: ``python -m gblas_gnn`` in a subprocess.

The subprocess imports the same ``gblas_gnn`` sources as the test process (its ``src``
folder goes first on ``PYTHONPATH``), so a worktree is tested against itself.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import gblas_gnn
from gblas_gnn.cli import _build, _load_dataset
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
    # 40 GCN epochs on the small CSBM: the best validation epoch (34) is not the last one, and
    # the last epoch's weights score differently on the test set
    train = run_cli("train", "--model", "gcn", "--dataset", SMALL, "--epochs", "40",
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
