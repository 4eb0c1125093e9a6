"""Full-batch node-classification training: :func:`fit`, :func:`predict`, :func:`evaluate`.

The dataset is duck-typed: any object with ``graph`` (a :class:`~gblas_gnn.Graph`,
``scipy.sparse`` matrix or ``graphblas.Matrix``), ``x`` (n, f) float features, ``y`` (n,)
integer labels and boolean ``train_mask`` / ``val_mask`` (``test_mask`` optional) works —
:class:`gblas_gnn.data.Dataset` is one.

Determinism: the trainer itself draws no random numbers; all randomness lives in the model's
generators (``rng`` attributes, seeded by the model builders), which checkpoints capture. A run
resumed from a checkpoint therefore ends with the same bits as an uninterrupted one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from ..graph import as_graph
from ..nn.module import Module
from .checkpoint import load_checkpoint, read_checkpoint, save_checkpoint
from .early_stopping import EarlyStopping
from .losses import accuracy, cross_entropy
from .progress import EpochProgress

__all__ = ["History", "fit", "predict", "evaluate", "resume_epoch"]

_METRICS = ("train_loss", "train_acc", "val_loss", "val_acc", "test_acc", "epoch_time")


@dataclass
class History:
    """Per-epoch metrics of a :func:`fit` run (lists aligned with ``epoch``, 1-based).

    ``train_loss`` is the loss of the training-mode forward (with dropout) that produced the
    gradient; ``train_acc``, ``val_*`` and ``test_acc`` come from the evaluation-mode forward
    after the update (``test_acc`` is NaN without a test mask). ``best_epoch`` / ``best_value``
    refer to the monitored quantity (the validation loss of the best epoch for
    ``"val_loss_acc"``); ``stopped_early`` tells whether patience ran out.
    """

    epoch: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    train_acc: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    val_acc: list[float] = field(default_factory=list)
    test_acc: list[float] = field(default_factory=list)
    epoch_time: list[float] = field(default_factory=list)
    monitor: str = "val_loss"
    best_epoch: int | None = None
    best_value: float | None = None
    stopped_early: bool = False
    restored_best: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> History:
        return cls(**d)

    def __len__(self) -> int:
        return len(self.epoch)


# ---------------------------------------------------------------------------- helpers
def _dataset_parts(dataset, dtype, ex):
    """``(graph, x, y, masks)`` of ``dataset`` validated and moved to the executor ``ex``
    (``n`` is this process's number of rows, ``g.n_local``)."""
    with ex.validation():
        g, x, y, masks = _local_parts(dataset, dtype, ex.xp)
    counts = {name: int(ex.vertex_sum(m.astype(np.int64))) for name, m in masks.items()}
    for name in ("train_mask", "val_mask"):
        if counts[name] == 0:
            raise ValueError(f"dataset.{name} selects no node")
    # through the executor: a copy to a device is its own (and counted there)
    masks = {name: ex.asarray(m) if counts[name] else None for name, m in masks.items()}
    return g, ex.asarray(x), ex.asarray(y), masks


def _array(value, xp):
    """``value`` itself if it is an array of ``xp`` or numpy, else ``numpy.asarray(value)``."""
    return value if isinstance(value, (np.ndarray, xp.ndarray)) else np.asarray(value)


def _local_parts(dataset, dtype, xp):
    for attr in ("graph", "x", "y", "train_mask", "val_mask"):
        if not hasattr(dataset, attr):
            raise TypeError(f"dataset must have attributes graph, x, y, train_mask, val_mask "
                            f"(missing {attr!r})")
    g = as_graph(dataset.graph, dtype=dtype)
    n = g.n_local
    x = dataset.x
    if not hasattr(x, "ndim") or x.ndim != 2 or x.shape[0] != n:
        raise ValueError(f"dataset.x must be an (n={n}, f) array, got "
                         f"{getattr(x, 'shape', type(x).__name__)}")
    if x.dtype != dtype:
        raise TypeError(f"dataset.x is {x.dtype} but the model computes in {np.dtype(dtype)}; "
                        f"build the model with dtype=np.{x.dtype} or convert the features")
    if not bool((xp if isinstance(x, xp.ndarray) else np).isfinite(x).all()):
        raise ValueError("dataset.x contains NaN or Inf")
    y = _array(dataset.y, xp)
    if tuple(y.shape) != (n,) or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"dataset.y must be (n={n},) integers, got {y.dtype}{tuple(y.shape)}")
    masks = {}
    for name in ("train_mask", "val_mask", "test_mask"):
        m = getattr(dataset, name, None)
        if m is None and name == "test_mask":
            continue
        m = None if m is None else _array(m, xp)
        if m is None or tuple(m.shape) != (n,) or m.dtype != np.bool_:
            raise ValueError(f"dataset.{name} must be a boolean array of shape ({n},), got "
                             f"{getattr(m, 'dtype', None)}{getattr(m, 'shape', None)}")
        masks[name] = m
    return g, x, y, masks


def _check_int(value, name: str, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise ValueError(f"{name} must be an integer ≥ {lo}, got {value!r}")
    return int(value)


def _params_finite(model: Module) -> str | None:
    """The name of a parameter that is not finite (one counted read when all are)."""
    ex = model.executor
    params = dict(model.named_parameters())
    if ex.all_finite(*params.values()):
        return None
    return next(name for name, p in params.items() if not ex.all_finite(p))


def _guarded(fn, *args):
    """Call ``fn``, reporting numerical blow-up inside the model (a layer refusing a NaN/Inf
    input) as FloatingPointError."""
    try:
        return fn(*args)
    except ValueError as exc:
        if "NaN or Inf" in str(exc):
            raise FloatingPointError(f"non-finite values inside the model ({exc})") from exc
        raise


@contextmanager
def _reported(diverged: Callable[[str], FloatingPointError], what: str) -> Iterator[None]:
    """A FloatingPointError inside becomes ``diverged(f"{what} (…)")``: the run's own error,
    naming the last good checkpoint."""
    try:
        yield
    except FloatingPointError as exc:
        raise diverged(f"{what} ({exc})") from exc


# ---------------------------------------------------------------------------- inference
def predict(model: Module, graph, x: np.ndarray) -> np.ndarray:
    """Logits of every vertex, computed in evaluation mode (no dropout, no caches kept).
    The model's previous train/eval mode is restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        return model(graph, x)
    finally:
        model.train(was_training)


def evaluate(model: Module, dataset, masks=("train_mask", "val_mask", "test_mask")) -> dict:
    """Evaluation-mode loss and accuracy on each named mask of ``dataset`` that exists and is
    non-empty: ``{"train_loss", "train_acc", "val_loss", ...}``."""
    ex = model.executor
    g, x, y, found = _dataset_parts(dataset, model.dtype, ex)
    logits = predict(model, g, x)
    out = {}
    for name in masks:
        m = found.get(name)
        if m is None:
            continue
        key = name.removesuffix("_mask")
        out[f"{key}_loss"], _ = cross_entropy(logits, y, m, ex)
        out[f"{key}_acc"] = accuracy(logits, y, m, ex)
    return out


# ---------------------------------------------------------------------------- training
class _Checkpoints:
    """Where :func:`fit` writes its checkpoints and how often; resuming from one.

    Parameters
    ----------
    path : path-like or None
        The checkpoint file (``None``: no checkpoints; :meth:`save` does nothing).
    every : int
        Save every this many epochs (and at the last epoch, and when training stops).
    model, optimizer
        What is saved besides the trainer's bookkeeping.
    metadata : mapping or None
        JSON-able description of the run, stored under ``"metadata"``.
    """

    def __init__(self, path, every: int, model: Module, optimizer, metadata: Mapping | None):
        self.path, self.every = path, every
        self.model, self.optimizer, self.metadata = model, optimizer, metadata
        #: the epoch of the last checkpoint written or resumed from (``None``: none)
        self.last_saved: int | None = None

    def resume(self, stopping: EarlyStopping, epochs: int) -> tuple[History, int]:
        """Load the checkpoint into the model, the optimiser and ``stopping``.

        Returns
        -------
        (History, int)
            The history so far and the number of epochs done (``epochs`` when the saved run
            had already finished, by early stopping or its callback).
        """
        ck = load_checkpoint(self.path, self.model, self.optimizer)
        tr = ck.trainer
        try:
            hist = History.from_dict(tr["history"])
            bad_epochs = int(tr["bad_epochs"])
            stopped = bool(tr["stopped"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"checkpoint {str(self.path)!r} was not written by fit "
                             f"(missing trainer state: {exc!r})") from exc
        if hist.monitor != stopping.monitor:
            raise ValueError(f"checkpoint monitored {hist.monitor!r}, this run "
                             f"{stopping.monitor!r}")
        ex = self.model.executor
        best_params = ({k: ex.asarray(v.copy()) for k, v in ck.best_params.items()}
                       if ck.best_params is not None else None)
        stopping.resume(hist, bad_epochs, best_params)
        self.last_saved = ck.epoch
        return hist, epochs if stopped else ck.epoch

    def due(self, epoch: int, epochs: int, stop: bool) -> bool:
        """Whether epoch ``epoch`` of ``epochs`` ends with a checkpoint."""
        return stop or epoch == epochs or epoch % self.every == 0

    def save(self, epoch: int, hist: History, stopping: EarlyStopping, stopped: bool) -> None:
        """Write the checkpoint of ``epoch`` (on the root process): the model, the optimiser,
        the kept best weights, the history and the patience counter; ``stopped`` marks a run
        that ends here."""
        if self.path is None:
            return
        trainer = {"history": hist.to_dict(), "bad_epochs": stopping.bad_epochs,
                   "stopped": stopped, "metadata": dict(self.metadata or {})}
        self.model.executor.on_root(lambda: save_checkpoint(
            self.path, self.model, self.optimizer, epoch=epoch,
            best_params=stopping.best_params, trainer=trainer))
        self.last_saved = epoch

    def diverged(self, what: str, epoch: int) -> FloatingPointError:
        """The error that stops a run whose numbers blew up: what, when, and which checkpoint
        is left intact."""
        where = (f"the last good checkpoint (epoch {self.last_saved}) is intact at "
                 f"{str(self.path)!r}" if self.last_saved is not None and self.path is not None
                 else "no checkpoint was written")
        return FloatingPointError(f"{what} at epoch {epoch} (a floating-point overflow or "
                                  f"NaN): training stopped; {where}. Try a smaller learning "
                                  "rate.")


def _epoch(model: Module, optimizer, g, x, y, masks: dict,
           diverged: Callable[[str], FloatingPointError]) -> dict:
    """One epoch: a training-mode forward, the loss on ``train_mask``, backward and
    ``optimizer.step()``, then an evaluation-mode forward for the metrics.

    Returns
    -------
    dict
        ``train_loss`` (of the training-mode forward), ``train_acc``, ``val_loss``,
        ``val_acc``, ``test_acc`` (NaN without a test mask) and ``epoch_time`` (seconds).

    Raises
    ------
    FloatingPointError
        ``diverged(what)``, when the loss, the gradient, the parameters or the validation
        logits are not finite.
    """
    ex = model.executor
    t0 = time.perf_counter()
    model.train()
    with _reported(diverged, "non-finite training loss"):
        logits = _guarded(model, g, x)
        loss, dlogits = cross_entropy(logits, y, masks["train_mask"], ex)
    if not math.isfinite(loss):
        raise diverged(f"non-finite training loss ({loss})")
    with _reported(diverged, "non-finite gradient"):
        _guarded(model.backward, dlogits)
    optimizer.step()
    bad = _params_finite(model)
    if bad is not None:
        raise diverged(f"parameter {bad!r} became NaN/Inf after the update")

    model.eval()
    with _reported(diverged, "non-finite validation logits"):
        out = _guarded(model, g, x)
        val_loss, _ = cross_entropy(out, y, masks["val_mask"], ex)
    metrics = {
        "train_loss": loss,
        "train_acc": accuracy(out, y, masks["train_mask"], ex),
        "val_loss": val_loss,
        "val_acc": accuracy(out, y, masks["val_mask"], ex),
        "test_acc": (accuracy(out, y, masks["test_mask"], ex)
                     if masks.get("test_mask") is not None else float("nan")),
        "epoch_time": time.perf_counter() - t0,
    }
    model.train()
    return metrics


def _record(hist: History, epoch: int, metrics: Mapping, stopping: EarlyStopping) -> None:
    """Append ``epoch``'s metrics to ``hist`` and copy the early-stopping verdicts into it."""
    hist.epoch.append(epoch)
    for k in _METRICS:
        getattr(hist, k).append(float(metrics[k]))
    hist.best_epoch, hist.best_value = stopping.best_epoch, stopping.best_value
    hist.stopped_early = hist.stopped_early or stopping.should_stop


def _progress_bar(show: bool, start: int, epochs: int, patience: int | None, model: Module,
                  g, x) -> EpochProgress | None:
    """The open progress bar of a run (``None`` when not shown: ``show`` is off, nothing is
    left to train, or this is not the root process), after the kernels' warm-up."""
    ex = model.executor
    if not (show and start < epochs and ex.is_root):
        return None
    bar = EpochProgress(start, epochs, patience)
    if ex.processes == 1:           # (a warm-up on the root alone would block a grid)
        bar.warm_up(model, g, x)    # compile the kernels before the bar's clock starts
    bar.open()
    return bar


def fit(model: Module, dataset, optimizer, epochs: int, patience: int | None = None,
        checkpoint=None, checkpoint_every: int = 1, resume: bool = False,
        progress: bool = True, metrics_callback: Callable[[int, dict], object] | None = None,
        monitor: str = "val_loss", restore_best: bool | None = None,
        metadata: Mapping | None = None) -> History:
    """Full-batch training of ``model`` on ``dataset``.

    Each epoch: training-mode forward on the whole graph, cross-entropy on ``train_mask``,
    backward, ``optimizer.step()``; then an evaluation-mode forward for the train / validation
    / test metrics.

    Args:
        model: the model (its generators make the run deterministic for its seed).
        dataset: object with ``graph, x, y, train_mask, val_mask`` (``test_mask`` optional).
        optimizer: a :class:`~gblas_gnn.train.optim.Optimizer` bound to ``model``.
        epochs: total number of epochs of the run (a resumed run counts the epochs already
            done).
        patience: stop when the monitored value has not improved for this many epochs
            (``None``: never stop early).
        checkpoint: path of the checkpoint file (``None``: no checkpoints); without
            ``resume`` an existing file is overwritten by the first save.
        checkpoint_every: write the checkpoint every this many epochs; it is also written at
            the last epoch and when training stops early.
        resume: continue from ``checkpoint`` (which must exist): parameters, optimiser state,
            generator states, history and early-stopping bookkeeping are restored, so the run
            ends bit-identical to an uninterrupted one.
        progress: show a tqdm progress bar (loss, accuracies, epoch time; with ``patience``
            the best epoch and the patience countdown instead of a percentage), after a
            warm-up that compiles the kernels without changing the run
            (:mod:`gblas_gnn.train.progress`).
        metrics_callback: called as ``metrics_callback(epoch, metrics)`` after every epoch;
            a truthy return value stops training (the checkpoint is written first).
        monitor: ``"val_loss"`` (lower is better), ``"val_acc"`` (higher is better; the
            first epoch of the maximum is kept, as PyG's examples do), or ``"val_loss_acc"``,
            the rule of the GAT paper's reference code (Veličković et al. 2018): an epoch
            whose validation accuracy is at least the best so far *or* whose validation loss
            is at most the lowest so far resets the patience counter, and the weights are
            kept from the last epoch that did *both* (ties count as improvements). The
            rules live in :class:`~gblas_gnn.train.early_stopping.EarlyStopping`.
        restore_best: copy the best weights (by ``monitor``) back into the model at the end;
            default: when ``patience`` is given.
        metadata: JSON-able description of the run (e.g. the model configuration) stored in
            the checkpoint's trainer state under ``"metadata"``.

    Returns:
        the :class:`History`.

    Raises:
        FloatingPointError: the training loss, the logits or the parameters became NaN/Inf;
            training stops and the last checkpoint written (an earlier, good one) is left as
            it was.
    """
    epochs = _check_int(epochs, "epochs", 1)
    if patience is not None:
        patience = _check_int(patience, "patience", 1)
    checkpoint_every = _check_int(checkpoint_every, "checkpoint_every", 1)
    stopping = EarlyStopping(monitor, patience, restore_best)
    if getattr(optimizer, "model", model) is not model:
        raise ValueError("the optimiser is bound to a different model")
    if resume and checkpoint is None:
        raise ValueError("resume=True needs a checkpoint path")
    if checkpoint is not None and not Path(checkpoint).resolve().parent.is_dir():
        raise FileNotFoundError(f"the directory of checkpoint {str(checkpoint)!r} does not exist")
    ex = model.executor
    g, x, y, masks = _dataset_parts(dataset, model.dtype, ex)
    checkpoints = _Checkpoints(checkpoint, checkpoint_every, model, optimizer, metadata)
    hist, start = (checkpoints.resume(stopping, epochs) if resume
                   else (History(monitor=monitor), 0))

    bar = _progress_bar(progress, start, epochs, patience, model, g, x)
    # an overflow inside the model surfaces as the non-finite values that stop the run below,
    # with the epoch and the checkpoint; numpy's RuntimeWarnings would only repeat it
    fp_errors = np.seterr(over="ignore", invalid="ignore", divide="ignore")
    try:
        for epoch in range(start + 1, epochs + 1):
            metrics = _epoch(model, optimizer, g, x, y, masks,
                             partial(checkpoints.diverged, epoch=epoch))
            if stopping.update(epoch, metrics):
                stopping.keep(model.named_parameters())
            _record(hist, epoch, metrics, stopping)
            stop = stopping.should_stop
            if metrics_callback is not None and ex.agree(bool(metrics_callback(epoch,
                                                                          dict(metrics)))):
                stop = True
            if bar is not None:
                bar.update(metrics, stopping.best_epoch, stopping.bad_epochs)
            if checkpoints.due(epoch, epochs, stop):
                checkpoints.save(epoch, hist, stopping, stopped=stop)
            if stop:
                break
    finally:
        np.seterr(**fp_errors)
        if bar is not None:
            bar.close()
        model.train()

    if stopping.restore(dict(model.named_parameters())):
        hist.restored_best = True
    return hist


def resume_epoch(checkpoint) -> int:
    """The number of epochs completed in a checkpoint written by :func:`fit`."""
    if not Path(checkpoint).is_file():
        raise FileNotFoundError(f"checkpoint {str(checkpoint)!r} does not exist")
    return read_checkpoint(checkpoint).epoch
