"""The ``gblas-gnn`` command: full-batch training and all-node inference.

    gblas-gnn train [--model gat|FILE.py:NAME] [--dataset csbm] [--epochs ...] [--checkpoint PATH]
    gblas-gnn infer --checkpoint PATH [--model FILE.py:NAME] [--dataset SPEC] [--output preds.npy]
    gblas-gnn convert INPUT OUTPUT.npz
    mpiexec -n 4 python -m mpi4py -m gblas_gnn train --executor dist ...

(also ``python -m gblas_gnn``). Every argument and every output path is checked before any
work; errors print one line and exit with status 2, a diverged run with status 1, Ctrl-C
with status 130 (the line says how to resume). What the command prints is written in
:mod:`gblas_gnn.cli.report`. With ``--executor dist`` every rank runs the command, rank 0
alone prints and writes files, and a rank that fails unexpectedly aborts the whole job.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from .facts import CommMeter, run_facts

# Per-model defaults of the published setups (GAT / GCN / AGNN papers and PyG's examples);
# every one can be overridden on the command line. The training schedule is part of the
# setup: ``epochs`` is the budget, ``patience`` (0: off) stops a run whose ``monitor`` has not
# improved for that many epochs, and the weights of the best epoch by ``monitor`` are kept
# (model selection on the validation set only). ``weight_decay_layers`` is which parameters
# get the weight decay: ``all``, or ``first`` (the first layer only, as in Kipf & Welling's
# GCN). The choices, and the accuracy they reach, are recorded in docs/performance.md.
_PYG = {"weight_decay": 5e-4, "weight_decay_layers": "all", "epochs": 200, "patience": 0,
        "monitor": "val_acc"}  # PyG's examples: 200 epochs, test accuracy at the best val_acc
DEFAULTS = {
    # GAT paper: patience 100 on validation loss and accuracy (its reference code's rule);
    # the paper's epoch cap (100 000) never binds, ours is 10 000
    "gat": {**_PYG, "lr": 0.005, "hidden": 8, "heads": 8, "dropout": 0.6,
            "epochs": 10000, "patience": 100, "monitor": "val_loss_acc"},
    "agnn": {**_PYG, "lr": 0.01, "hidden": 16, "dropout": 0.5},
    "va": {**_PYG, "lr": 0.01, "hidden": 16, "dropout": 0.5},
    "gcn": {**_PYG, "lr": 0.01, "hidden": 16, "dropout": 0.5, "weight_decay_layers": "first"},
    "sgc": {**_PYG, "lr": 0.2, "weight_decay": 5e-5, "dropout": 0.0, "epochs": 100},
    "gin": {**_PYG, "lr": 0.01, "hidden": 64, "dropout": 0.5},
    # DGL's full-graph GraphSAGE example (train_full.py): Adam 0.01, weight decay 5e-4, 200
    # epochs, the mean aggregator
    "sage": {**_PYG, "lr": 0.01, "hidden": 16, "dropout": 0.5, "aggr": "mean"},
}
#: the schedule of a model from a file (--model FILE.py:NAME): PyG's examples' (lr 0.01)
USER_DEFAULTS = {**_PYG, "lr": 0.01}
_MONITORS = ("val_acc", "val_loss", "val_loss_acc")
_TAKES = {"gat": {"hidden", "heads", "dropout", "aggr"}, "agnn": {"hidden", "dropout", "aggr"},
          "va": {"hidden", "dropout", "aggr"}, "gcn": {"hidden", "dropout"},
          "sgc": {"dropout"}, "gin": {"hidden", "dropout"},
          "sage": {"hidden", "dropout", "aggr"}}
_OVERRIDABLE = ("lr", "weight_decay", "weight_decay_layers", "hidden", "heads", "dropout",
                "epochs", "patience", "monitor")


class UsageError(ValueError):
    """A bad command-line value (reported without a traceback)."""


class Interrupted(Exception):
    """Ctrl-C stopped the command; the message is the one line to print (exit status 130)."""


def _parser() -> argparse.ArgumentParser:
    from .report import CONVERT_EPILOG, INFER_EPILOG, train_epilog

    raw = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(
        prog="gblas-gnn", description="Attentional graph neural networks (GAT, AGNN, VA) and "
        "GCN, SGC, GIN as global GraphBLAS tensor algebra: full-batch training and all-node "
        "inference. 'gblas-gnn train' alone trains GAT on the embedded CSBM task.")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train a model full-batch and report test accuracy",
                       description="Train a model full-batch and report the test accuracy of "
                       "the weights\nselected on the validation set.",
                       epilog=train_epilog(DEFAULTS, _TAKES), formatter_class=raw)
    t.add_argument("--model", default="gat", type=_model_arg,
                   help="the architecture: " + ", ".join(sorted(DEFAULTS)) + " with its "
                        "published setup as defaults (table below; default: gat), or "
                        "FILE.py:NAME, your own model: FILE.py runs as Python code (see "
                        "'your own model' below)")
    t.add_argument("--dataset", default="csbm",
                   help="csbm (default), planetoid:DIR/cora, npz:PATH, ogb:DIR/ogbn_arxiv, "
                        "kronecker:scale=S,edge_factor=E, erdos_renyi:n=N,degree=D "
                        "(described below)")
    t.add_argument("--epochs", type=int, help="training epochs (default: per model)")
    t.add_argument("--patience", type=int,
                   help="stop after this many epochs without improvement of --monitor "
                        "(0: off; default: per model)")
    t.add_argument("--monitor", choices=_MONITORS,
                   help="validation metric for early stopping and the weights kept "
                        "(default: per model)")
    t.add_argument("--lr", type=float, help="Adam's learning rate (default: per model)")
    t.add_argument("--weight-decay", type=float,
                   help="L2 penalty added to the gradient, as PyTorch's Adam does "
                        "(default: per model)")
    t.add_argument("--weight-decay-layers", choices=("all", "first"),
                   help="weight decay on all parameters or on the first layer only "
                        "(default: per model; first for gcn)")
    t.add_argument("--normalize-features", action=argparse.BooleanOptionalAction,
                   help="divide each feature row by its sum (PyG's NormalizeFeatures); "
                        "default: on for planetoid data sets, which is the only kind it "
                        "applies to")
    t.add_argument("--hidden", type=int,
                   help="hidden features; for gat per head, so its first layer outputs "
                        "hidden x heads (default: per model)")
    t.add_argument("--heads", type=int, help="attention heads of gat's first layer "
                                             f"(default {DEFAULTS['gat']['heads']})")
    t.add_argument("--dropout", type=float,
                   help="dropout probability of the layers' inputs (gat: and of the "
                        "attention coefficients; default: per model)")
    t.add_argument("--aggr", help="sum (default) | max | min | mean: how attention models "
                                  "(gat, agnn, va) combine the weighted messages; sage's "
                                  "neighbourhood aggregation: mean (default) | max | sum")
    t.add_argument("--seed", type=int, default=0,
                   help="seed of the weights, the dropout masks and generated data sets "
                        "(default 0)")
    t.add_argument("--dtype", default="float32", choices=["float32", "float64"],
                   help="floating-point type of the whole computation (default float32)")
    t.add_argument("--threads", type=int, default=None, help="GraphBLAS / numba threads")
    _executor_flags(t)
    t.add_argument("--checkpoint", type=Path,
                   help="write a checkpoint (.npz, atomically, every epoch): the selected "
                        "weights for infer and the state --resume needs")
    t.add_argument("--resume", action="store_true",
                   help="continue the run saved in --checkpoint (same arguments); it ends "
                        "with the same bits as an uninterrupted run")
    t.add_argument("--metrics-json", type=Path,
                   help="write the configuration, the results and every epoch's metrics "
                        "as JSON")
    t.add_argument("--no-progress", action="store_true",
                   help="no progress bars (training, and loading or generating a graph of "
                        "10^7 edges or more), nor the kernel warm-up before training")
    t.add_argument("--show-config", action="store_true",
                   help="print the resolved configuration (defaults and flags) as JSON and "
                        "exit without training")
    i = sub.add_parser("infer", help="predict every node with a trained checkpoint",
                       description="Predict the class of every node with the weights a "
                       "'gblas-gnn train\n--checkpoint' run selected.", epilog=INFER_EPILOG,
                       formatter_class=raw)
    i.add_argument("--checkpoint", type=Path, required=True,
                   help="a checkpoint written by gblas-gnn train --checkpoint")
    i.add_argument("--model", metavar="FILE.py:NAME",
                   help="the model file a checkpoint of your own model was trained with; "
                        "it runs as Python code, so infer never runs it unless named here, "
                        "and refuses it when it changed since training")
    i.add_argument("--dataset", help="default: the dataset the checkpoint was trained on")
    i.add_argument("--output", type=Path,
                   help="write the predicted class of every node (.npy, int64) to this path")
    i.add_argument("--threads", type=int, default=None, help="GraphBLAS / numba threads")
    i.add_argument("--no-progress", action="store_true",
                   help="no progress bars while loading a graph of 10^7 edges or more")
    _executor_flags(i)
    c = sub.add_parser("convert", help="rewrite a graph, a data-set file or an OGB folder in "
                                       "the blockwise layout MPI ranks read in parts",
                       description="Rewrite a graph (.npz, .mtx), a data-set .npz or an OGB "
                       "folder (ogb:DIR/ogbn_arxiv) as one\nuncompressed .npz whose entries "
                       "are grouped in tiles, so that each rank of\n'--executor dist' reads "
                       "the tiles of its block and the rows of its vertices only.\nTrain on "
                       "it with --dataset npz:OUTPUT.npz (on a grid or on one process).",
                       epilog=CONVERT_EPILOG, formatter_class=raw)
    c.add_argument("input", help="a graph .npz (row, col, shape[, data]), a data-set .npz "
                                 "(also x, y, masks), a .mtx, or ogb:DIR/ogbn_NAME")
    c.add_argument("output", type=Path, help="the .npz to write")
    c.add_argument("--relabel", action="store_true",
                   help="lay the blocks out for jobs run with --relabel (they then read "
                        "only their blocks; a file converted without it serves jobs without)")
    c.add_argument("--tiles", type=int,
                   help="tiles per side T (default: the largest of 1, 2, 6, 12, 60, 120, "
                        "360, 840, 2520 with T^2 <= entries/4); a grid whose side divides T "
                        "reads exactly its block")
    c.add_argument("--no-progress", action="store_true",
                   help="no progress bars (shown for graphs of 10^7 edges or more)")
    return p


def _model_arg(value: str) -> str:
    """``--model``: a built-in name or ``FILE.py:NAME`` (checked for form only here)."""
    from ..usermodel import is_model_file

    if value in DEFAULTS or is_model_file(value):
        return value
    raise argparse.ArgumentTypeError(
        f"invalid choice: {value!r} (choose from {', '.join(sorted(DEFAULTS))}, or "
        "FILE.py:NAME for your own model)")


def _executor_flags(parser) -> None:
    from ..executors import names

    parser.add_argument("--executor", default="cpu", choices=names(),
                        help="where to compute: cpu (default), cuda (one GPU), dist (an MPI "
                             "grid: run under mpiexec with a square number of processes), "
                             "primitives (cpu's core, the interface's defaults: a reference)")
    parser.add_argument("--relabel", action="store_true",
                        help="with --executor dist: spread the vertices over the grid's "
                             "blocks by a seeded random permutation (load balance)")
    parser.add_argument("--dense", choices=("auto", "sharded", "replicated"), default="auto",
                        help="with --executor dist: keep every dense vertex array sharded "
                             "(n·k/p per rank, gathered per use) or replicated along the "
                             "grid rows (n·k/√p per rank, fewer words moved); auto "
                             "(default): the one with the lower planned peak per rank "
                             "(docs/planning.md)")


def _config(args, mf=None) -> dict:
    """The configuration of a ``train`` run (model, data and schedule), validated before any
    work. ``mf``: the :class:`~gblas_gnn.usermodel.ModelFile` of ``--model FILE.py:NAME``
    (read here when not given; the file is read, never run)."""
    from ..usermodel import is_model_file, model_file

    user = is_model_file(args.model)
    cfg = dict(USER_DEFAULTS if user else DEFAULTS[args.model])
    takes = set() if user else _TAKES[args.model]
    for key in _OVERRIDABLE:
        value = getattr(args, key)
        if value is None:
            continue
        if key not in cfg and key not in takes:
            raise UsageError(f"--{key.replace('_', '-')} does not apply to --model {args.model}"
                             + (": the file decides its model's architecture" if user else ""))
        cfg[key] = value
    if cfg["epochs"] <= 0:
        raise UsageError(f"--epochs must be positive, got {cfg['epochs']}")
    if cfg["patience"] < 0:
        raise UsageError(f"--patience must be ≥ 0, got {cfg['patience']}")
    if cfg["lr"] <= 0 or not np.isfinite(cfg["lr"]):
        raise UsageError(f"--lr must be positive, got {cfg['lr']}")
    if cfg["weight_decay"] < 0:
        raise UsageError(f"--weight-decay must be ≥ 0, got {cfg['weight_decay']}")
    for key in ("hidden", "heads"):
        if key in cfg and cfg[key] <= 0:
            raise UsageError(f"--{key} must be positive, got {cfg[key]}")
    if not 0 <= cfg.get("dropout", 0) < 1:
        raise UsageError(f"--dropout must lie in [0, 1), got {cfg['dropout']}")
    if "aggr" in takes:
        cfg["aggr"] = cfg.get("aggr", "sum") if args.aggr is None else args.aggr
        from ..nn.sage import SAGE_AGGREGATIONS

        allowed = SAGE_AGGREGATIONS if args.model == "sage" else ("sum", "max", "min", "mean")
        if cfg["aggr"] not in allowed:
            raise UsageError(f"--aggr must be {', '.join(allowed[:-1])} or {allowed[-1]} for "
                             f"{args.model}, got {args.aggr!r}")
    elif args.aggr is not None:
        raise UsageError(f"--aggr applies to attention models and sage only, not "
                         f"{args.model}")
    if args.resume and args.checkpoint is None:
        raise UsageError("--resume needs --checkpoint PATH")
    if args.resume and not args.checkpoint.is_file():
        raise UsageError(f"--resume: no checkpoint at {args.checkpoint}")
    from ..data.specs import default_normalize_features

    normalize = args.normalize_features
    if normalize is None:
        normalize = default_normalize_features(args.dataset)
    elif normalize and not default_normalize_features(args.dataset):
        raise UsageError("--normalize-features applies to planetoid data sets only")
    if user:
        cfg["model_file"] = (mf or model_file(args.model)).record()
    return {"model": args.model, "dataset": args.dataset, "seed": args.seed,
            "dtype": args.dtype, "normalize_features": bool(normalize), **cfg}


def _check_outputs(**outputs: Path | None) -> None:
    """Check every file a command will write before any work (a missing folder must not
    surface after a long run): its folder exists and is writable, the path is not a folder
    or a read-only file, and no two outputs share a path. Keys are the flags' names."""
    seen: dict[Path, str] = {}
    for key, path in outputs.items():
        if path is None:
            continue
        flag = "--" + key.replace("_", "-")
        folder = path.resolve().parent
        if path.is_dir():
            raise UsageError(f"{flag} {path} is a folder; give the path of a file")
        if not folder.is_dir():
            raise UsageError(f"{flag} {path}: the folder {folder} does not exist")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise UsageError(f"{flag} {path}: the folder {folder} is not writable")
        if path.exists() and not os.access(path, os.W_OK):
            raise UsageError(f"{flag} {path}: the file exists and is not writable")
        other = seen.setdefault(path.resolve(), flag)
        if other != flag:
            raise UsageError(f"{other} and {flag} name the same file ({path})")


def _write(path: Path, write) -> None:
    """Write an output file atomically (an interrupted write leaves no half file)."""
    from .._io import atomic_write

    atomic_write(path, write)


def _build(cfg: dict, dataset, executor=None, mf=None):
    """The model of ``cfg`` for ``dataset``: a built-in one, or the one ``mf`` (the
    :class:`~gblas_gnn.usermodel.ModelFile` the user named) defines; a model from a file is
    never built from the configuration alone."""
    from .. import usermodel
    from ..executors import get_executor
    from ..nn import models

    shape = (dataset.x.shape[1], dataset.num_classes)
    common = {"seed": cfg["seed"], "dtype": np.dtype(cfg["dtype"]), "executor": executor}
    if "model_file" in cfg:
        if mf is None:
            raise UsageError(f"the model {cfg['model']} is your own code; name its file with "
                             "--model to run it")
        with get_executor(executor).validation():     # an error on any rank, on every rank
            return usermodel.build(mf, *shape, **common)
    kw = {k: cfg[k] for k in ("hidden", "heads", "dropout", "aggr") if k in cfg}
    return models.build(cfg["model"], *shape, **common, **kw)


def _load_dataset(spec: str, cfg: dict, executor=None, relabel: bool = False,
                  progress: bool | None = None):
    """The data set of ``spec``; on a grid (``executor.grid``) this rank's block and rows.
    ``progress``: bars while generating or loading a graph of 10⁷ edges or more."""
    from ..data.specs import parse_dataset

    # a configuration written before the option existed trained on unnormalised features
    kw = {"seed": cfg["seed"], "dtype": np.dtype(cfg["dtype"]),
          "normalize_features": cfg.get("normalize_features", False), "progress": progress}
    grid = getattr(executor, "grid", None)
    if grid is not None:
        from ..dist.data import load_dataset

        dataset = load_dataset(spec, grid, relabel=relabel, **kw)
    else:
        dataset = parse_dataset(spec, **kw)
    if dataset.x.dtype != np.dtype(cfg["dtype"]):
        dataset.x = dataset.x.astype(cfg["dtype"])
    return dataset


def _data_shape(dataset) -> dict:
    """What a trained model's input and output sizes are tied to (kept in the checkpoint)."""
    return {"name": dataset.name, "num_features": int(dataset.x.shape[1]),
            "num_classes": int(dataset.num_classes)}


def _infer_dataset(spec: str | None, cfg: dict, executor=None, relabel: bool = False,
                   progress: bool | None = None):
    """The data set ``infer`` predicts on: the training one, or ``spec`` with the training
    run's seed and dtype. Feature normalisation follows the training run on a planetoid
    spec and is off on any other kind (it exists for planetoid only); the features and
    classes must be those the model was trained on."""
    from ..data.specs import default_normalize_features

    spec = spec or cfg["dataset"]
    normalize = cfg.get("normalize_features", False) and default_normalize_features(spec)
    dataset = _load_dataset(spec, {**cfg, "normalize_features": normalize}, executor, relabel,
                            progress)
    trained, here = cfg.get("data"), _data_shape(dataset)
    if trained and (trained["num_features"], trained["num_classes"]) != \
            (here["num_features"], here["num_classes"]):
        raise UsageError(
            f"the checkpoint's {cfg['model']} model was trained on {trained['name']} "
            f"({trained['num_features']} features, {trained['num_classes']} classes); "
            f"{here['name']} has {here['num_features']} features and {here['num_classes']} "
            "classes: infer needs a data set with the same features and classes")
    return dataset


def _weight_decay(cfg: dict, model):
    """The optimiser's ``weight_decay``: a float, or ``{first-layer prefix: λ}`` when only the
    first parameterised layer is decayed (names are ``"<layer index>.<param>"``)."""
    if cfg.get("weight_decay_layers", "all") == "all":
        return cfg["weight_decay"]
    first = next(name for name, _ in model.named_parameters())
    return {first.split(".")[0] + ".": cfg["weight_decay"]}


def _train(args) -> dict:
    from ..train import Adam, evaluate, fit, resume_epoch
    from . import report

    mf = _model_file(args.model)
    cfg = _config(args, mf)
    if args.show_config:
        print(json.dumps(cfg, indent=2))
        return cfg
    _check_outputs(checkpoint=args.checkpoint, metrics_json=args.metrics_json)
    if args.resume and mf is not None:
        _checked_model_file(args.checkpoint, mf)
    running: list[int] = []     # the epoch under way: the last completed one + 1
    ex = _executor(args)
    try:
        dataset = _load_dataset(args.dataset, cfg, ex, args.relabel, not args.no_progress)
        ex, dataset = _laid_out(args, cfg, ex, dataset)
        model = _build(cfg, dataset, ex, mf)
        opt = Adam(model, lr=cfg["lr"], weight_decay=_weight_decay(cfg, model))
        running.append((resume_epoch(args.checkpoint) if args.resume else 0) + 1)
        meter = CommMeter(ex)

        def after_epoch(epoch: int, _) -> None:
            running.append(epoch + 1)
            meter.epoch_done()

        hist = fit(model, dataset, opt, cfg["epochs"], patience=cfg["patience"] or None,
                   checkpoint=args.checkpoint, resume=args.resume,
                   progress=not args.no_progress, monitor=cfg["monitor"],
                   metadata={**cfg, "data": _data_shape(dataset)},
                   metrics_callback=after_epoch, restore_best=True)
    except KeyboardInterrupt:
        raise Interrupted(report.interrupted(running[-1] if running else None,
                                                 args.checkpoint, args.argv)) from None
    except FloatingPointError:
        raise
    except Exception as exc:
        _blame_model_file(exc, mf)
        raise
    facts = run_facts(ex, args.executor, dataset, model, meter, np.dtype(cfg["dtype"]))
    result = {**evaluate(model, dataset), "epochs_run": len(hist),
              "best_epoch": hist.best_epoch,
              "median_epoch_ms": float(np.median(hist.epoch_time) * 1e3) if len(hist) else None,
              "config": cfg, "dataset_name": dataset.name, "run": facts}
    if args.metrics_json is not None:
        text = json.dumps({**result, "history": hist.to_dict()}, indent=2)
        ex.on_root(lambda: _write(args.metrics_json, lambda f: f.write(text.encode())))
    for line in report.summary(result, hist, cfg, dataset_name=dataset.name,
                                   epochs_here=len(running) - 1,
                                   checkpoint=args.checkpoint, metrics_json=args.metrics_json,
                                   facts=facts):
        print(line)
    return result


def _model_file(spec: str | None):
    """The :class:`~gblas_gnn.usermodel.ModelFile` ``--model`` names, read once (``None``
    for a built-in model)."""
    from ..usermodel import is_model_file, model_file

    return model_file(spec) if spec is not None and is_model_file(spec) else None


def _checked_model_file(checkpoint: Path, mf) -> None:
    """Refuse a model file other than the one ``checkpoint`` was trained with."""
    from ..train import read_checkpoint
    from ..usermodel import check_unchanged

    cfg = read_checkpoint(checkpoint).trainer.get("metadata") or {}
    if "model_file" not in cfg:
        raise UsageError(f"--model {mf.spec}: {checkpoint} holds the built-in "
                         f"{cfg.get('model', 'unknown')} model, not one from a file")
    check_unchanged(mf, cfg["model_file"])


def _blame_model_file(exc: Exception, mf) -> None:
    """An error raised in the user's model file, reported as such (with its line)."""
    from ..usermodel import blame

    if mf is not None:
        blamed = blame(exc, mf)
        if blamed is not None:
            raise blamed from exc


def _infer(args) -> dict:
    from ..executors import to_numpy
    from ..train import evaluate, load_checkpoint, predict, read_checkpoint

    if not args.checkpoint.is_file():
        raise UsageError(f"no checkpoint at {args.checkpoint}")
    _check_outputs(output=args.output)
    if args.output is not None and args.output.resolve() == args.checkpoint.resolve():
        raise UsageError(f"--output {args.output} would overwrite the checkpoint")
    cfg = read_checkpoint(args.checkpoint).trainer.get("metadata")
    if not cfg:
        raise UsageError(f"{args.checkpoint} holds no model configuration "
                         "(it was not written by `gblas-gnn train`)")
    mf = _model_file(args.model)
    if args.model is not None and mf is None:
        raise UsageError(f"--model takes FILE.py:NAME, got {args.model!r}")
    recorded = cfg.get("model_file")
    if recorded is not None and mf is None:
        raise UsageError(
            f"{args.checkpoint} holds a model defined by your code, {recorded['name']} in "
            f"{recorded['path']}; infer runs that code only when you name the file: --model "
            f"{recorded['path']}:{recorded['name']}")
    if mf is not None:
        _checked_model_file(args.checkpoint, mf)
    ex = _executor(args)
    dataset = _infer_dataset(args.dataset, cfg, ex, args.relabel, not args.no_progress)
    ex, dataset = _laid_out(args, cfg, ex, dataset)
    model = _build(cfg, dataset, ex, mf)
    # the weights `train` selected and reported on, not the last epoch's (kept for --resume)
    ck = load_checkpoint(args.checkpoint, model, restore_rng=False, weights="selected")
    try:
        logits = predict(model, dataset.graph, dataset.x)
    except Exception as exc:
        _blame_model_file(exc, mf)
        raise
    pred = to_numpy(logits.argmax(axis=1))
    if getattr(ex, "grid", None) is not None:            # every rank's rows, in vertex order
        pred = dataset.graph.gather(pred)
    if args.output is not None:                         # exactly this path (no .npy added)
        ex.on_root(lambda: _write(args.output, lambda f: np.save(f, pred)))
    metrics = evaluate(model, dataset)
    best = ck.trainer.get("history", {}).get("best_epoch") if ck.best_params else None
    weights = f"epoch {best} (selected)" if best is not None else f"epoch {ck.epoch}"
    print(f"{dataset.name}: predicted {pred.size} nodes with the weights of {weights}; "
          f"test accuracy {metrics['test_acc'] * 100:.2f}%")
    return metrics


def _executor(args):
    """The executor ``--executor`` names (a grid over every process for ``dist``); one that
    cannot run here (no GPU nor simulator for ``cuda``, no MPI for ``dist``) is a usage
    error that says what to install."""
    from ..executors import get_executor

    if getattr(args, "dense", "auto") != "auto" and args.executor != "dist":
        raise UsageError(f"--dense {args.dense} lays out dense tensors on a grid: it needs "
                         "--executor dist")
    try:
        return get_executor(args.executor)
    except (ImportError, RuntimeError) as exc:
        raise UsageError(f"--executor {args.executor}: {exc}") from exc


#: the built-in models planned as attention layers (the others as convolutions)
_ATTENTION = ("gat", "agnn", "va")


def _laid_out(args, cfg: dict, ex, dataset):
    """The executor and data set with dense tensors laid out as ``--dense`` says (a grid
    only; the data set is loaded replicated and sliced, no communication). ``auto`` takes
    the layout with the lower planned peak per rank
    (:func:`gblas_gnn.dist.planning.choose_layout`) for this graph, grid and model: the
    model's kind, its input, hidden (times heads) and output widths."""
    grid = getattr(ex, "grid", None)
    if grid is None:
        return ex, dataset
    from ..dist import DistExecutor
    from ..dist.planning import choose_layout

    dense = args.dense
    if dense == "auto":
        heads = int(cfg.get("heads") or 1)
        hidden = int(cfg.get("hidden") or dataset.x.shape[1]) * heads
        dense = choose_layout("gat" if cfg.get("model") in _ATTENTION else "gcn",
                              dataset.graph.n, dataset.graph.nnz, grid.size,
                              [int(dataset.x.shape[1]), hidden, int(dataset.num_classes)],
                              heads=heads)
    return DistExecutor(grid, dense=dense), dataset.laid_out(dense)


def _convert(args) -> None:
    """``gblas-gnn convert``: a graph, data set or OGB folder in the tiled layout
    (:mod:`gblas_gnn.data.tiles`)."""
    from ..data.tiles import write_tiled_npz

    _check_outputs(output=args.output)
    if args.tiles is not None and args.tiles < 1:
        raise UsageError(f"--tiles must be positive, got {args.tiles}")
    show = not args.no_progress
    kind, _, rest = args.input.partition(":")
    if kind == "ogb":
        source = _ogb_source(Path(rest), show)
    else:
        source = _file_source(Path(args.input))
    stats = write_tiled_npz(args.output, source["n"], source["entries"],
                            vertex_arrays=source["vertex_arrays"], tiles=args.tiles,
                            relabel=args.relabel, weighted=source["weighted"], show=show,
                            size=source["size"], edge_features=source.get("edge_features"))
    extra = sorted(k for k in source["vertex_arrays"] if k != "name")
    if source.get("edge_features"):
        extra.append(f"{source['edge_features'][0]} features an edge")
    t = stats["tiles"]
    print(f"{args.output}: {stats['n']:,} vertices, {stats['nnz']:,} edges in {t}x{t} tiles"
          + (" laid out for --relabel" if args.relabel else "")
          + (f", and {', '.join(extra)}" if extra else "")
          + f" ({stats['bytes']:,} bytes); train on it with --dataset npz:{args.output}")


def _file_source(path: Path) -> dict:
    """A graph or data-set ``.npz``, or a ``.mtx``: loaded whole (one process), values kept."""
    from .._io import read_npz
    from ..graph import Graph

    if path.suffix == ".mtx":
        graph, extra = Graph.from_mtx(path), {}
    else:
        arrays = read_npz(path, "graph or data-set file")
        graph = Graph.from_npz(path)
        extra = {k: v for k, v in arrays.items()
                 if k not in ("row", "col", "data", "shape", "order", "tiles", "tile_ptr",
                              "relabel", "relabel_seed", "edge_attr")}
    rows, cols, vals = graph.A.to_coo()
    feats = graph.edge_attr
    if feats is None:
        return {"n": graph.n, "size": rows.size, "weighted": True, "vertex_arrays": extra,
                "entries": lambda: iter([(rows, cols, vals)])}
    return {"n": graph.n, "size": rows.size, "weighted": True, "vertex_arrays": extra,
            "edge_features": (feats.f, feats.dtype),       # CSR order, as the entries
            "entries": lambda: iter([(rows, cols, vals, feats.values)])}


def _ogb_source(path: Path, show: bool) -> dict:
    """An OGB folder, streamed (entries twice, features once): no whole-file read."""
    from ..data.ogb import OgbFolder
    from ..data.tiles import Streamed

    folder = OgbFolder(path)
    y, *masks = folder.labels_and_split()
    x = Streamed((folder.n, folder.num_features), np.dtype(np.float32),
                 lambda: (piece for _, piece in folder.feature_pieces(np.float32, show)))
    arrays = {"x": x, "y": y, "train_mask": masks[0], "val_mask": masks[1],
              "test_mask": masks[2], "num_classes": np.array(folder.conventions.num_classes),
              "name": np.array(folder.name)}
    source = {"n": folder.n, "size": folder.num_entries, "weighted": False,
              "vertex_arrays": arrays, "entries": lambda: folder.edges(show=show)}
    if folder.edge_feat is not None:
        source["edge_features"] = (folder.num_edge_features, np.dtype(np.float32))
        source["entries"] = lambda: folder.edges(show=show, features=True)
    return source


def _on_grid(args) -> bool:
    return getattr(args, "executor", None) == "dist"


def _root_only(args) -> bool:
    """On a grid, make every rank but the first quiet; a rank that raises an error nothing
    catches aborts the whole job (no rank is left waiting in a collective). Returns whether
    this process prints."""
    if not _on_grid(args):
        return True
    from mpi4py import MPI

    world = MPI.COMM_WORLD

    def abort(kind, value, tb):
        sys.__excepthook__(kind, value, tb)
        sys.stderr.flush()
        world.Abort(1)

    sys.excepthook = abort
    if world.Get_rank() != 0:
        sys.stdout = open(os.devnull, "w")      # noqa: SIM115 - for the process's lifetime
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``gblas-gnn`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    args.argv = argv            # for the resume command printed after Ctrl-C
    from threadpoolctl import threadpool_limits

    if getattr(args, "threads", None) is not None:
        if args.threads <= 0:
            print("gblas-gnn: error: --threads must be positive", file=sys.stderr)
            return 2
        from ..executors import get_executor

        get_executor("cpu").set_threads(args.threads)
    speaks = _root_only(args)
    command = {"train": _train, "infer": _infer, "convert": _convert}[args.command]
    try:
        # OpenBLAS spin-waits would steal cores from the GraphBLAS/numba kernels
        # (docs/performance.md); the dense products here are small enough for one thread.
        with threadpool_limits(1, user_api="blas"):
            command(args)
        sys.stdout.flush()          # a closed pipe is reported here, not at the exit
    except (UsageError, ValueError, TypeError, FileNotFoundError) as exc:
        if speaks:
            print(f"gblas-gnn: error: {exc}", file=sys.stderr)
        return 2
    except FloatingPointError as exc:
        if speaks:
            print(f"gblas-gnn: {exc}", file=sys.stderr)
        return 1
    except Interrupted as exc:
        if speaks:
            print(f"gblas-gnn: {exc}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        if speaks:
            print("gblas-gnn: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader of stdout went away (`gblas-gnn train | head -2`): stop quietly, and
        # point stdout at /dev/null so that the interpreter's final flush cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13             # what a shell reports for a process ended by SIGPIPE
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
