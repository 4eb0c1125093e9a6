"""Test accuracy on Planetoid (standard split) over several seeds, through the real command.

    python bench/accuracy.py --root ../shared/data/planetoid [--datasets cora citeseer]
                             [--models gat gcn agnn] [--seeds 5] [--threads 1]

Runs ``gblas-gnn train --model M --dataset planetoid:ROOT/D --seed S`` for each case and
writes ``bench/results/accuracy_<dataset>.json`` and a markdown table to stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from gblas_gnn.cli import main as cli

RESULTS = Path(__file__).resolve().parent / "results"
PUBLISHED = {("gcn", "cora"): "81.5", ("gcn", "citeseer"): "70.3",
             ("gat", "cora"): "83.0 ± 0.7", ("gat", "citeseer"): "72.5 ± 0.7",
             ("agnn", "cora"): "83.1 ± 0.1", ("agnn", "citeseer"): "71.7 ± 0.1"}


def run(model: str, root: Path, dataset: str, seed: int, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "m.json"
        code = cli(["train", "--model", model, "--dataset", f"planetoid:{root / dataset}",
                    "--seed", str(seed), "--threads", str(threads), "--no-progress",
                    "--metrics-json", str(out)])
        if code != 0:
            raise SystemExit(f"{model} on {dataset} seed {seed} failed with status {code}")
        m = json.loads(out.read_text())
    return {"seed": seed, "test_acc": m["test_acc"], "val_acc": m["val_acc"],
            "epochs_run": m["epochs_run"], "median_epoch_ms": m["median_epoch_ms"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, required=True)
    p.add_argument("--datasets", nargs="+", default=["cora", "citeseer"])
    p.add_argument("--models", nargs="+", default=["gat", "gcn", "agnn"])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    print(f"| model | dataset | test accuracy (mean ± std, {args.seeds} seeds) | published "
          "| ms/epoch |")
    print("|---|---|---|---|---|")
    for dataset in args.datasets:
        path = RESULTS / f"accuracy_{dataset}.json"
        table = json.loads(path.read_text()) if path.exists() else {}
        for model in args.models:
            runs = [run(model, args.root, dataset, s, args.threads) for s in range(args.seeds)]
            accs = [r["test_acc"] * 100 for r in runs]
            row = {"mean": statistics.mean(accs), "std": statistics.pstdev(accs),
                   "runs": runs,
                   "command": f"gblas-gnn train --model {model} "
                              f"--dataset planetoid:DIR/{dataset} --seed S"}
            table[model] = row
            ms = statistics.median(r["median_epoch_ms"] for r in runs)
            print(f"| {model} | {dataset} | {row['mean']:.1f} ± {row['std']:.1f} "
                  f"| {PUBLISHED.get((model, dataset), '–')} | {ms:.0f} |", flush=True)
            path.write_text(json.dumps(table, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
