"""What the ``gblas-gnn`` command prints: the help epilogs, the end-of-run summary and the
Ctrl-C line.

Kept apart from :mod:`gblas_gnn.cli` (which parses, validates and runs) so that the wording
can be read, and tested, in one place. One thing per line.
"""

from __future__ import annotations

import shlex
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .datasets import synthetic_labels_note

if TYPE_CHECKING:
    from .train import History

__all__ = ["summary", "interrupted", "train_epilog", "INFER_EPILOG"]

#: how each monitor picks the reported epoch, and what "not improving" means for it
_SELECTION = {
    "val_acc": ("the first epoch of highest validation accuracy",
                "the validation accuracy had not improved"),
    "val_loss": ("the epoch of lowest validation loss",
                 "the validation loss had not improved"),
    "val_loss_acc": ("the last epoch reaching both the best validation accuracy and the "
                     "lowest validation loss",
                     "neither the validation loss nor the validation accuracy had improved"),
}


DATASETS_HELP = """\
data sets (--dataset):
  csbm[:key=value,...]   contextual stochastic block model, the embedded default task:
                         2000 vertices in 5 classes, 64 Gaussian features around a class
                         mean, intra-class edges 6x likelier; keys n, classes, p_in, p_out,
                         features, feature_std, train_per_class, val, test (--seed draws it)
  planetoid:DIR/NAME     Planetoid Cora or CiteSeer from the original ind.NAME.* files in DIR
                         (never downloaded); features row-normalised unless
                         --no-normalize-features
  npz:PATH               your own data: a .npz written by numpy.savez holding
                           row, col      int (m,): edge col -> row (A[row, col], row = target)
                           shape         (n, n)
                           data          optional (m,) edge weights (default 1)
                           x             (n, f) float features
                           y             (n,) int labels in [0, C)
                           train_mask, val_mask, test_mask   (n,) bool
                           num_classes   optional C (default max(y) + 1)
                         object arrays (pickled data) are refused
  kronecker:scale=S[,edge_factor=E]   Graph500 Kronecker graph, 2^S vertices, E*2^S edges
  erdos_renyi:n=N,degree=D            Erdos-Renyi graph, N vertices, average in-degree D
                         the two generated graphs carry random features and labels argmax(x R)
                         unrelated to the graph: throughput workloads whose accuracy means
                         nothing
"""

INFER_EPILOG = """\
infer predicts with the weights train selected and reported on (the best epoch by
--monitor), so both commands print the same test accuracy. Another --dataset must have the
features and classes the model was trained on; it is drawn with the training run's --seed
and --dtype, and feature normalisation follows the training run on planetoid data only.
"""


def train_epilog(defaults: Mapping[str, Mapping], takes: Mapping[str, set]) -> str:
    """The epilog of ``gblas-gnn train --help``: the per-model defaults (from the CLI's
    ``DEFAULTS``, so it cannot drift), the --monitor rules and the data set specs."""
    head = ("model", "lr", "weight decay", "hidden", "heads", "dropout", "epochs", "patience",
            "monitor")
    rows = [head]
    for model, d in sorted(defaults.items()):
        hidden = "-" if "hidden" not in takes[model] else \
            f"{d['hidden']}/head" if "heads" in takes[model] else str(d["hidden"])
        rows.append((model, f"{d['lr']:g}", f"{d['weight_decay']:g} ({d['weight_decay_layers']})",
                     hidden, str(d.get("heads", "-")), f"{d['dropout']:g}", str(d["epochs"]),
                     str(d["patience"] or "off"), d["monitor"]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    table = "\n".join("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))
                      .rstrip() for r in rows)
    monitors = "\n".join(textwrap.fill(picked, 90, initial_indent=f"  {name:<14}",
                                       subsequent_indent=" " * 16)
                         for name, (picked, _) in _SELECTION.items())
    return (f"per-model defaults (flags override them; --show-config prints the result):\n"
            f"{table}\n\n--monitor keeps the weights of\n{monitors}\n\n{DATASETS_HELP}")


def _pct(x: float) -> str:
    return f"{x * 100:.2f}%"


def summary(result: dict, hist: History, cfg: dict, *, dataset_name: str, epochs_here: int,
            checkpoint: Path | None, metrics_json: Path | None) -> list[str]:
    """The lines printed after ``gblas-gnn train``.

    Args:
        result: :func:`~gblas_gnn.train.evaluate` of the selected weights.
        hist: the run's history (a resumed run's includes the epochs before the resume).
        cfg: the run's configuration (``model``, ``epochs``, ``patience``, ``monitor``,
            ``dataset``).
        dataset_name: the data set's name.
        epochs_here: epochs trained by this process (fewer than ``len(hist)`` after
            ``--resume``).
        checkpoint, metrics_json: the files written, or ``None``.

    Returns:
        the selected epoch's accuracies; why the run stopped; how long an epoch took; what
        was written where (or that nothing was saved and which flag saves it); and, for data
        with synthetic labels, that the accuracy means nothing.
    """
    best, last = hist.best_epoch, (hist.epoch[-1] if len(hist) else 0)
    picked, stalled = _SELECTION[hist.monitor]
    lines = [f"{dataset_name}: {cfg['model']} test accuracy {_pct(result['test_acc'])} "
             f"(validation {_pct(result['val_acc'])}, training {_pct(result['train_acc'])}) "
             f"with the weights of epoch {best}"]
    if hist.stopped_early:
        lines.append(f"stopped early after epoch {last}: {stalled} for {cfg['patience']} "
                     f"epochs (--patience {cfg['patience']})")
    else:
        stopping = (f"--patience {cfg['patience']} did not run out" if cfg["patience"]
                    else "early stopping off")
        lines.append(f"stopped at the epoch limit, epoch {last} (--epochs {cfg['epochs']}; "
                     f"{stopping})")
    lines.append(f"epoch {best} selected by --monitor {hist.monitor}: {picked}")
    if len(hist):
        resumed = len(hist) - epochs_here
        lines.append(f"{len(hist)} epochs, {np.median(hist.epoch_time) * 1e3:.1f} ms per epoch "
                     f"(median)" + (f", {resumed} of them before --resume" if resumed else ""))
    if checkpoint is not None:
        state = (f"the finished run's state at epoch {last}" if hist.stopped_early else
                 f"--resume with a larger --epochs continues after epoch {last}")
        lines.append(f"checkpoint: {checkpoint} (infer uses the weights of epoch {best}; "
                     f"{state})")
    if metrics_json is not None:
        lines.append(f"metrics: {metrics_json} (configuration, results, every epoch's metrics)")
    if checkpoint is None:
        lines.append("the model was not saved: --checkpoint PATH keeps it for infer and --resume"
                     + ("" if metrics_json is not None
                        else "; --metrics-json PATH keeps every epoch's metrics"))
    note = synthetic_labels_note(cfg["dataset"])
    if note:
        lines.append(note)
    return lines


def interrupted(epoch: int | None, checkpoint: Path | None, argv: Sequence[str]) -> str:
    """The one line printed when Ctrl-C stops ``gblas-gnn train``.

    ``epoch`` is the epoch that was running (``None``: before training started); the
    checkpoint's epoch is read from the file itself, which an interrupted write never
    leaves half-written.
    """
    from .train import CheckpointError, read_checkpoint

    where = f"interrupted at epoch {epoch}" if epoch is not None else \
        "interrupted before training started"
    if checkpoint is None:
        return f"{where}; nothing was saved (--checkpoint PATH makes a run resumable)"
    try:
        saved = read_checkpoint(checkpoint).epoch
    except FileNotFoundError:
        return f"{where}; no checkpoint was written yet"
    except CheckpointError as exc:
        return f"{where}; the checkpoint cannot be read ({exc})"
    resume = list(argv) if "--resume" in argv else [*argv, "--resume"]
    return (f"{where}; the checkpoint {checkpoint} holds epoch {saved}; resume with: "
            f"{shlex.join(['gblas-gnn', *resume])}")
