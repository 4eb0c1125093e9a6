"""The ``gblas-gnn`` command: full-batch training and all-node inference.

    gblas-gnn train [--model gat] [--dataset csbm] [--epochs ...] [--checkpoint PATH] ...
    gblas-gnn infer --checkpoint PATH [--dataset SPEC] [--output preds.npy]

Every argument is checked before any work; errors print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

# Per-model defaults of the published setups (GAT / GCN / AGNN papers and PyG's examples).
DEFAULTS = {
    "gat": {"lr": 0.005, "weight_decay": 5e-4, "hidden": 8, "heads": 8, "dropout": 0.6},
    "agnn": {"lr": 0.01, "weight_decay": 5e-4, "hidden": 16, "dropout": 0.5},
    "va": {"lr": 0.01, "weight_decay": 5e-4, "hidden": 16, "dropout": 0.5},
    "gcn": {"lr": 0.01, "weight_decay": 5e-4, "hidden": 16, "dropout": 0.5},
    "sgc": {"lr": 0.2, "weight_decay": 5e-5, "dropout": 0.0},
    "gin": {"lr": 0.01, "weight_decay": 5e-4, "hidden": 64, "dropout": 0.5},
}
_TAKES = {"gat": {"hidden", "heads", "dropout", "aggr"}, "agnn": {"hidden", "dropout", "aggr"},
          "va": {"hidden", "dropout", "aggr"}, "gcn": {"hidden", "dropout"},
          "sgc": {"dropout"}, "gin": {"hidden", "dropout"}}


class UsageError(ValueError):
    """A bad command-line value (reported without a traceback)."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gblas-gnn", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train a model full-batch and report test accuracy")
    t.add_argument("--model", default="gat", choices=sorted(DEFAULTS))
    t.add_argument("--dataset", default="csbm",
                   help="csbm (default), planetoid:DIR/cora, npz:PATH, "
                        "kronecker:scale=S,edge_factor=E")
    t.add_argument("--epochs", type=int, default=200)
    t.add_argument("--patience", type=int, default=100,
                   help="stop after this many epochs without improvement (0: off)")
    t.add_argument("--monitor", default="val_acc", choices=["val_acc", "val_loss"],
                   help="validation metric for early stopping and the weights kept")
    t.add_argument("--lr", type=float)
    t.add_argument("--weight-decay", type=float)
    t.add_argument("--hidden", type=int)
    t.add_argument("--heads", type=int)
    t.add_argument("--dropout", type=float)
    t.add_argument("--aggr", default="sum", help="sum | max | min | mean (attention models)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    t.add_argument("--threads", type=int, default=None, help="GraphBLAS / numba threads")
    t.add_argument("--checkpoint", type=Path)
    t.add_argument("--resume", action="store_true")
    t.add_argument("--metrics-json", type=Path)
    t.add_argument("--no-progress", action="store_true")
    i = sub.add_parser("infer", help="predict every node with a trained checkpoint")
    i.add_argument("--checkpoint", type=Path, required=True)
    i.add_argument("--dataset", help="default: the dataset the checkpoint was trained on")
    i.add_argument("--output", type=Path, help="write predicted classes (.npy)")
    i.add_argument("--threads", type=int, default=None)
    return p


def _config(args) -> dict:
    """The model configuration of a ``train`` run, validated before any work."""
    if args.epochs <= 0:
        raise UsageError(f"--epochs must be positive, got {args.epochs}")
    if args.patience < 0:
        raise UsageError(f"--patience must be ≥ 0, got {args.patience}")
    cfg = dict(DEFAULTS[args.model])
    for key in ("lr", "weight_decay", "hidden", "heads", "dropout"):
        value = getattr(args, key)
        if value is None:
            continue
        if key not in cfg and key not in _TAKES[args.model]:
            raise UsageError(f"--{key.replace('_', '-')} does not apply to --model {args.model}")
        cfg[key] = value
    if cfg["lr"] <= 0 or not np.isfinite(cfg["lr"]):
        raise UsageError(f"--lr must be positive, got {cfg['lr']}")
    if cfg["weight_decay"] < 0:
        raise UsageError(f"--weight-decay must be ≥ 0, got {cfg['weight_decay']}")
    for key in ("hidden", "heads"):
        if key in cfg and cfg[key] <= 0:
            raise UsageError(f"--{key} must be positive, got {cfg[key]}")
    if not 0 <= cfg.get("dropout", 0) < 1:
        raise UsageError(f"--dropout must lie in [0, 1), got {cfg['dropout']}")
    if args.aggr != "sum":
        if "aggr" not in _TAKES[args.model]:
            raise UsageError(f"--aggr applies to attention models only, not {args.model}")
        if args.aggr not in ("sum", "max", "min", "mean"):
            raise UsageError(f"--aggr must be sum, max, min or mean, got {args.aggr!r}")
        cfg["aggr"] = args.aggr
    if args.resume and args.checkpoint is None:
        raise UsageError("--resume needs --checkpoint PATH")
    if args.resume and not args.checkpoint.is_file():
        raise UsageError(f"--resume: no checkpoint at {args.checkpoint}")
    return {"model": args.model, "dataset": args.dataset, "seed": args.seed,
            "dtype": args.dtype, **cfg}


def _build(cfg: dict, dataset):
    from .nn import models

    kw = {k: cfg[k] for k in ("hidden", "heads", "dropout", "aggr") if k in cfg}
    return models.build(cfg["model"], dataset.x.shape[1], dataset.num_classes,
                        seed=cfg["seed"], dtype=np.dtype(cfg["dtype"]), **kw)


def _load_dataset(spec: str, cfg: dict):
    from .datasets import parse_dataset

    return parse_dataset(spec, seed=cfg["seed"], dtype=np.dtype(cfg["dtype"]))


def _train(args) -> dict:
    from .train import Adam, evaluate, fit

    cfg = _config(args)
    dataset = _load_dataset(args.dataset, cfg)
    if dataset.x.dtype != np.dtype(cfg["dtype"]):
        dataset.x = dataset.x.astype(cfg["dtype"])
    model = _build(cfg, dataset)
    opt = Adam(model, lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    hist = fit(model, dataset, opt, args.epochs, patience=args.patience or None,
               checkpoint=args.checkpoint, resume=args.resume,
               progress=not args.no_progress, metadata=cfg, monitor=args.monitor,
               restore_best=True)
    result = {**evaluate(model, dataset), "epochs_run": len(hist),
              "best_epoch": hist.best_epoch,
              "median_epoch_ms": float(np.median(hist.epoch_time) * 1e3) if len(hist) else None,
              "config": cfg, "dataset_name": dataset.name}
    print(f"{dataset.name}: {cfg['model']} test accuracy {result['test_acc'] * 100:.2f}% "
          f"(val {result['val_acc'] * 100:.2f}%, best epoch {hist.best_epoch}, "
          f"{result['median_epoch_ms']:.1f} ms/epoch)")
    if args.metrics_json is not None:
        args.metrics_json.write_text(json.dumps({**result, "history": hist.to_dict()},
                                                indent=2))
    return result


def _infer(args) -> dict:
    from .train import evaluate, load_checkpoint, predict, read_checkpoint

    if not args.checkpoint.is_file():
        raise UsageError(f"no checkpoint at {args.checkpoint}")
    cfg = read_checkpoint(args.checkpoint).trainer.get("metadata")
    if not cfg:
        raise UsageError(f"{args.checkpoint} holds no model configuration "
                         "(it was not written by `gblas-gnn train`)")
    dataset = _load_dataset(args.dataset or cfg["dataset"], cfg)
    model = _build(cfg, dataset)
    load_checkpoint(args.checkpoint, model, restore_rng=False)
    logits = predict(model, dataset.graph, dataset.x.astype(cfg["dtype"], copy=False))
    pred = logits.argmax(axis=1)
    if args.output is not None:
        np.save(args.output, pred)
    metrics = evaluate(model, dataset)
    print(f"{dataset.name}: predicted {pred.size} nodes; test accuracy "
          f"{metrics['test_acc'] * 100:.2f}%")
    return metrics


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``gblas-gnn`` console script."""
    args = _parser().parse_args(argv)
    from threadpoolctl import threadpool_limits

    if args.threads is not None:
        if args.threads <= 0:
            print("gblas-gnn: error: --threads must be positive", file=sys.stderr)
            return 2
        import graphblas as gb
        import numba

        gb.ss.config["nthreads"] = args.threads
        numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    try:
        # OpenBLAS spin-waits would steal cores from the GraphBLAS/numba kernels
        # (PERFORMANCE-NOTES); the dense products here are small enough for one thread.
        with threadpool_limits(1, user_api="blas"):
            (_train if args.command == "train" else _infer)(args)
    except (UsageError, ValueError, TypeError, FileNotFoundError) as exc:
        print(f"gblas-gnn: error: {exc}", file=sys.stderr)
        return 2
    except FloatingPointError as exc:
        print(f"gblas-gnn: training stopped: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
