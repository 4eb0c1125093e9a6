"""Learning curves of GAT and AGNN with each aggregation on Cora, for notebook 02.

    PYTHONPATH=src python notebooks/aggregation_curves.py --root DIR [--epochs 1000]
                                                         [--seed 0] [--threads 1] [--every 5]

Runs ``gblas-gnn train --model M --aggr A --dataset planetoid:DIR/cora --seed S --epochs E
--patience 0`` for M in ``gat``, ``agnn`` and A in ``sum``, ``mean``, ``max``, ``min``, one
after the other: each model's published setup (learning rate, weight decay, dropout, widths:
``gblas_gnn.cli.command.DEFAULTS``) with one seed and the same fixed budget of E epochs for
every run, without early stopping, so that each curve shows how long its aggregation takes to
learn and where it levels off. The weights of the best epoch by the model's own monitor are
kept, as the published schedules do. Each run is made once more with ``--weight-decay 0``
(recorded as ``<model>-<aggr>-wd0``): the published weight decay (5e-4 on every layer) was
tuned for ``sum``, and it is what holds ``mean`` back.

Writes ``aggregation_curves.json`` next to this file (a few tens of kB, committed): the
command, and per ``<model>-<aggr>`` the validation and test accuracy every ``--every``
epochs (from epoch 1), the best epoch, the validation and test accuracy of its weights, the
epochs run and the median epoch time. ``notebooks/02_aggregations.ipynb`` plots it; the
notebook does not train these runs (about 25 minutes on one core).
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import tempfile
from pathlib import Path

from gblas_gnn.cli import main as cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # the repository's bench
from bench.core.environment import cpu_model  # noqa: E402

OUT = Path(__file__).resolve().with_suffix(".json")
MODELS = ("gat", "agnn")
AGGREGATIONS = ("sum", "mean", "max", "min")


def command(model: str, aggr: str, root: str, seed: int, epochs: int, threads: int) -> list:
    """The arguments of ``gblas-gnn`` for one run."""
    return ["train", "--model", model, "--aggr", aggr, "--dataset", f"planetoid:{root}/cora",
            "--seed", str(seed), "--threads", str(threads), "--epochs", str(epochs),
            "--patience", "0"]


def run(model: str, aggr: str, root: str, seed: int, epochs: int, threads: int,
        every: int, extra: list[str] = ()) -> dict:
    """One run through the command line; its curves and results.

    Parameters
    ----------
    model, aggr : str
        ``--model`` and ``--aggr``.
    root : str
        The folder of the Planetoid files.
    seed, epochs, threads : int
        ``--seed``, ``--epochs`` and ``--threads``.
    every : int
        Keep the accuracies of every ``every``-th epoch (1, 1 + every, ...).
    extra : list of str, optional
        More arguments (``["--weight-decay", "0"]``).

    Returns
    -------
    dict
        ``val_acc`` and ``test_acc`` (lists, in %), ``best_epoch``, ``best_val_acc``,
        ``best_test_acc`` (%), ``epochs_run``, ``median_epoch_ms``.
    """
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "m.json"
        code = cli(command(model, aggr, root, seed, epochs, threads) + list(extra)
                   + ["--no-progress", "--metrics-json", str(out)])
        if code != 0:
            raise SystemExit(f"{model} --aggr {aggr} {extra} failed with status {code}")
        m = json.loads(out.read_text())
    h = m["history"]
    return {"val_acc": [round(100 * v, 1) for v in h["val_acc"][::every]],
            "test_acc": [round(100 * v, 1) for v in h["test_acc"][::every]],
            "best_epoch": m["best_epoch"], "best_val_acc": round(100 * m["val_acc"], 1),
            "best_test_acc": round(100 * m["test_acc"], 1), "epochs_run": m["epochs_run"],
            "median_epoch_ms": round(statistics.median(h["epoch_time"]) * 1000, 1)}


def main(argv: list[str] | None = None) -> int:
    """Run every (model, aggregation, weight decay) and write :data:`OUT`."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", required=True, help="the folder of the Planetoid files")
    p.add_argument("--epochs", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--every", type=int, default=5)
    a = p.parse_args(argv)
    runs = {}
    for extra, suffix in (([], ""), (["--weight-decay", "0"], "-wd0")):
        for model in MODELS:
            for aggr in AGGREGATIONS:
                runs[f"{model}-{aggr}{suffix}"] = r = run(model, aggr, a.root, a.seed,
                                                          a.epochs, a.threads, a.every, extra)
                print(f"{model:5} {aggr:5} {' '.join(extra):17} best epoch "
                      f"{r['best_epoch']:5d}  val {r['best_val_acc']:5.1f} %  test "
                      f"{r['best_test_acc']:5.1f} %", flush=True)
    OUT.write_text(json.dumps({
        "command": "gblas-gnn " + " ".join(command("M", "A", "DIR", a.seed, a.epochs,
                                                   a.threads)),
        "epochs": a.epochs, "every": a.every, "seed": a.seed,
        "date": datetime.date.today().isoformat(), "cpu": cpu_model(),
        "runs": runs}, separators=(",", ":")) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
