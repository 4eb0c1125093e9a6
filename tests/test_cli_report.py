"""What ``gblas-gnn train`` prints at the end of a run and after Ctrl-C."""

from __future__ import annotations

import json
import re

import pytest

from gblas_gnn.cli import main
from gblas_gnn.cli.report import interrupted

SMALL = "csbm:n=300,classes=3,train_per_class=10,val=60,test=100,features=16"


def train(capsys, *argv):
    assert main(["train", "--model", "gcn", "--dataset", SMALL, "--no-progress", *argv]) == 0
    return capsys.readouterr().out.splitlines()


def test_summary_after_early_stopping(tmp_path, capsys):
    ck, mj = tmp_path / "ck.npz", tmp_path / "m.json"
    lines = train(capsys, "--epochs", "500", "--patience", "3", "--monitor", "val_loss",
                  "--checkpoint", str(ck), "--metrics-json", str(mj))
    m = json.loads(mj.read_text())
    best, last = m["best_epoch"], m["history"]["epoch"][-1]
    assert m["history"]["stopped_early"] and last < 500
    run = m["run"]
    assert (run["executor"], run["grid"], run["vertices"]) == ("cpu", None, 300)
    assert re.fullmatch(rf"ran on executor cpu, one process; graph of 300 vertices and "
                        rf"{run['edges']:,} edges; peak memory \d+\.\d [MG]iB", lines.pop(4))
    assert lines == [
        f"CSBM: gcn test accuracy {m['test_acc'] * 100:.2f}% (validation "
        f"{m['val_acc'] * 100:.2f}%, training {m['train_acc'] * 100:.2f}%) with the weights "
        f"of epoch {best}",
        f"stopped early after epoch {last}: the validation loss had not improved for 3 epochs "
        "(--patience 3)",
        f"epoch {best} selected by --monitor val_loss: the epoch of lowest validation loss",
        f"{last} epochs, {m['median_epoch_ms']:.1f} ms per epoch (median)",
        f"checkpoint: {ck} (infer uses the weights of epoch {best}; the finished run's state "
        f"at epoch {last})",
        f"metrics: {mj} (configuration, results, every epoch's metrics)",
    ]


def test_summary_at_the_epoch_limit_with_nothing_saved(capsys):
    lines = train(capsys, "--epochs", "3", "--patience", "0")
    assert lines[1] == "stopped at the epoch limit, epoch 3 (--epochs 3; early stopping off)"
    assert lines[2].endswith("the first epoch of highest validation accuracy")
    assert lines[-1] == ("the model was not saved: --checkpoint PATH keeps it for infer and "
                         "--resume; --metrics-json PATH keeps every epoch's metrics")


def test_summary_of_a_resumed_run(tmp_path, capsys):
    ck = tmp_path / "ck.npz"
    train(capsys, "--epochs", "3", "--patience", "50", "--checkpoint", str(ck))
    lines = train(capsys, "--epochs", "5", "--patience", "50", "--checkpoint", str(ck),
                  "--resume")
    assert lines[1] == ("stopped at the epoch limit, epoch 5 (--epochs 5; --patience 50 did "
                        "not run out)")
    assert lines[3].startswith("5 epochs, ") and lines[3].endswith(", 3 of them before --resume")
    assert lines[4].startswith("ran on executor cpu, one process; graph of 300 vertices")
    assert "--resume with a larger --epochs continues after epoch 5" in lines[5]


@pytest.mark.parametrize("spec", ["kronecker:scale=7,edge_factor=4",
                                  "erdos_renyi:n=200,degree=4"])
def test_synthetic_labels_are_called_meaningless(spec, capsys):
    assert main(["train", "--model", "sgc", "--dataset", spec, "--epochs", "2",
                 "--no-progress"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith(f"note: {spec.partition(':')[0]} labels are argmax(x R) of random")
    assert "says nothing about learning on graphs" in last


def test_interrupted_line(tmp_path):
    argv = ["train", "--checkpoint", str(tmp_path / "ck.npz")]
    assert interrupted(None, None, ["train"]) == (
        "interrupted before training started; nothing was saved (--checkpoint PATH makes a "
        "run resumable)")
    assert interrupted(1, tmp_path / "ck.npz", argv) == (
        "interrupted at epoch 1; no checkpoint was written yet")
    (tmp_path / "ck.npz").write_bytes(b"junk")
    assert interrupted(4, tmp_path / "ck.npz", argv).startswith(
        "interrupted at epoch 4; the checkpoint cannot be read (")
    assert main(["train", "--model", "sgc", "--dataset", SMALL, "--epochs", "2",
                 "--no-progress", "--checkpoint", str(tmp_path / "ck.npz")]) == 0
    line = interrupted(3, tmp_path / "ck.npz", [*argv, "--resume", "--lr", "0.1"])
    assert line == (f"interrupted at epoch 3; the checkpoint {tmp_path / 'ck.npz'} holds epoch "
                    f"2; resume with: gblas-gnn train --checkpoint {tmp_path / 'ck.npz'} "
                    "--resume --lr 0.1")
    # Ctrl-C while epoch 3's checkpoint was being written (after its metrics): the file
    # still holds epoch 2, and epoch 3 is the one under way, not 4
    assert interrupted(4, tmp_path / "ck.npz", argv).startswith(
        f"interrupted at epoch 3; the checkpoint {tmp_path / 'ck.npz'} holds epoch 2;")


def _grid_facts(**extra):
    return {"executor": "dist", "grid": [2, 2], "processes": 4, "dense": "sharded",
            "vertices": 1000, "edges": 5000, "peak_rss_bytes": 3 * 2**30, "peak_rank": 2,
            "bytes_sent_per_epoch": [1024, 2048, 2048, 1024], "layer_widths": [64, 8],
            "scheme_bound_bytes": 1024.0, **extra}


def test_the_run_lines_of_a_grid():
    from gblas_gnn.cli.report import run_lines

    lines = run_lines(_grid_facts(read={"edge_bytes": 3000, "total_edge_bytes": 12000,
                                        "row_bytes": 512, "how": "the tiles of its block"}))
    assert lines == [
        "ran on executor dist, a 2x2 grid of 4 processes (dense tensors sharded); graph of "
        "1,000 vertices and 5,000 edges; peak memory 3.0 GiB (rank 2, the largest)",
        "bytes sent per epoch by each rank (the last epoch; rank: bytes): 0: 1.0 KiB, 1: 2.0 "
        "KiB, 2: 2.0 KiB, 3: 1.0 KiB",
        "  the scheme's formula, the sum over the graph layers of (n k/sqrt(p) + k^2) words "
        "for one forward and backward (n = 1,000, sqrt(p) = 2, k = 64, 8): 1.0 KiB; the "
        "largest rank sent 2.00 times that per epoch (training forward and backward, and the "
        "evaluation forward)",
        "data: each rank read at most 2.9 KiB of the 11.7 KiB of edges (the tiles of its "
        "block) and 512 B of vertex rows"]
    # a model whose layers the command does not know (a composed module), and many ranks
    many = run_lines(_grid_facts(grid=[5, 5], processes=25, layer_widths=None,
                                 scheme_bound_bytes=None,
                                 bytes_sent_per_epoch=list(range(1024, 1049))))
    assert many[1].endswith("min 1.0 KiB, median 1.0 KiB, max 1.0 KiB")
    assert many[2] == ("  the scheme's formula: (n k/sqrt(p) + k^2) words per graph layer of "
                       "width k, forward and backward (n = 1,000, sqrt(p) = 5; this model's "
                       "layer widths are not known to the command)")
