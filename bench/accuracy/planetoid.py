"""Test accuracy on Planetoid (standard split) over several seeds, through the real command.

    python bench/accuracy/planetoid.py --root DIR [--datasets cora citeseer]
                             [--models gat agnn va gcn sgc gin sage] [--seeds 5] [--threads 1]
                             [--aggr sum mean max min]

Runs ``gblas-gnn train --model M --dataset planetoid:ROOT/D --seed S --threads T`` for each
case, one after the other, with the command's per-model defaults
(``gblas_gnn.cli.command.DEFAULTS``: the published setups, row-normalised features, model
selection on the validation set only),
updates ``bench/results/current/accuracy_<dataset>.json`` after every model and prints a markdown
table. With ``--aggr`` each model that takes one (the attention models, sage) runs with each
aggregation, recorded under ``<model>-<aggr>`` (the converged comparison of
``notebooks/02_aggregations.ipynb``). The standard deviation is the population one
(``statistics.pstdev``) over the seeds.
Epoch times are wall-clock times of one training epoch as the trainer records them (training
forward, backward, Adam step and the evaluation forward); they depend on the machine's load.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import subprocess
import tempfile
from pathlib import Path

from gblas_gnn.cli import main as cli
from gblas_gnn.cli.command import DEFAULTS

RESULTS = Path(__file__).resolve().parents[1] / "results" / "current"
PUBLISHED = {("gcn", "cora"): "81.5", ("gcn", "citeseer"): "70.3",
             ("gat", "cora"): "83.0 ± 0.7", ("gat", "citeseer"): "72.5 ± 0.7",
             ("agnn", "cora"): "83.1 ± 0.1", ("agnn", "citeseer"): "71.7 ± 0.1",
             ("sgc", "cora"): "81.0", ("sgc", "citeseer"): "71.9"}
MODELS = ["gat", "agnn", "va", "gcn", "sgc", "gin", "sage"]
#: the models that take ``--aggr``
AGGREGATING = ("gat", "agnn", "va", "sage")


def command(model: str, dataset_path: str, seed, threads: int, aggr: str | None = None
            ) -> list[str]:
    return ["train", "--model", model, "--dataset", f"planetoid:{dataset_path}",
            "--seed", str(seed), "--threads", str(threads),
            *(["--aggr", aggr] if aggr else [])]


def run(model: str, root: Path, dataset: str, seed: int, threads: int,
        aggr: str | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "m.json"
        code = cli(command(model, str(root / dataset), seed, threads, aggr)
                   + ["--no-progress", "--metrics-json", str(out)])
        if code != 0:
            raise SystemExit(f"{model} on {dataset} seed {seed} failed with status {code}")
        m = json.loads(out.read_text())
    times = m["history"]["epoch_time"]
    return {"seed": seed, "test_acc": m["test_acc"], "val_acc": m["val_acc"],
            "val_loss": m["val_loss"], "best_epoch": m["best_epoch"],
            "epochs_run": m["epochs_run"], "median_epoch_ms": m["median_epoch_ms"],
            "mean_epoch_ms": 1e3 * statistics.mean(times)}


def _git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True, cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def summarise(model: str, dataset: str, runs: list[dict], threads: int,
              aggr: str | None = None) -> dict:
    accs = [r["test_acc"] * 100 for r in runs]
    return {"mean": statistics.mean(accs), "std": statistics.pstdev(accs),
            "published": PUBLISHED.get((model, dataset)) if aggr is None else None,
            "mean_epoch_ms": statistics.mean(r["mean_epoch_ms"] for r in runs),
            "defaults": DEFAULTS[model], "runs": runs,
            "command": "gblas-gnn " + " ".join(command(model, f"DIR/{dataset}", "S", threads,
                                                       aggr))
                       + f"  # S = 0..{len(runs) - 1}",
            "measured": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"),
            "commit": _git_commit(), "machine": platform.node()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, required=True)
    p.add_argument("--datasets", nargs="+", default=["cora", "citeseer"])
    p.add_argument("--models", nargs="+", default=MODELS, choices=MODELS)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--aggr", nargs="+", choices=("sum", "mean", "max", "min"),
                   help="run each model that takes one with each of these aggregations")
    args = p.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    print(f"| model | dataset | test accuracy (mean ± std, {args.seeds} seeds) | published "
          "| ms/epoch (mean) |")
    print("|---|---|---|---|---|")
    for dataset in args.datasets:
        path = RESULTS / f"accuracy_{dataset}.json"
        table = json.loads(path.read_text()) if path.exists() else {}
        cases = [(m, a) for m in args.models
                 for a in ((args.aggr or [None]) if m in AGGREGATING else [None])]
        for model, aggr in cases:
            runs = [run(model, args.root, dataset, s, args.threads, aggr)
                    for s in range(args.seeds)]
            key = model if aggr is None else f"{model}-{aggr}"
            row = table[key] = summarise(model, dataset, runs, args.threads, aggr)
            print(f"| {key} | {dataset} | {row['mean']:.1f} ± {row['std']:.1f} "
                  f"| {row['published'] or '—'} | {row['mean_epoch_ms']:.0f} |", flush=True)
            path.write_text(json.dumps(table, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
