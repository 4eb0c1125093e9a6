"""What the ``gblas-gnn`` command prints: the help epilogs, the end-of-run summary and the
Ctrl-C line.

Kept apart from :mod:`gblas_gnn.cli.command` (which parses, validates and runs) so that the
wording can be read, and tested, in one place. One thing per line.
"""

from __future__ import annotations

import shlex
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..data.specs import synthetic_labels_note

if TYPE_CHECKING:
    from ..train import History

__all__ = ["summary", "run_lines", "interrupted", "train_epilog", "INFER_EPILOG",
           "CONVERT_EPILOG"]

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
  ogb:DIR/ogbn_arxiv     an OGB node-property data set (ogbn_arxiv, ogbn_products,
                         ogbn_papers100M) in the folder OGB's own downloader leaves: raw/ and
                         split/ (never downloaded; OGB's conventions: products gets its
                         inverse edges, arxiv and papers100M stay directed; unlabelled
                         vertices are in no split). Under mpiexec every rank streams the files
                         and keeps its block; gblas-gnn convert writes the layout in which a
                         rank reads its block only (then --dataset npz:OUT.npz)
  kronecker:scale=S[,edge_factor=E]   Graph500 Kronecker graph, 2^S vertices, E*2^S edges
  erdos_renyi:n=N,degree=D            Erdos-Renyi graph, N vertices, average in-degree D
                         the two generated graphs carry random features and labels argmax(x R)
                         unrelated to the graph: throughput workloads whose accuracy means
                         nothing
"""

USER_MODEL_HELP = """\
your own model (--model FILE.py:NAME):
  NAME is a gblas_gnn.nn.Module subclass or a function in FILE.py, called as
  NAME(in_dim, num_classes, seed=..., dtype=..., executor=...); it returns the module to
  train (its backward written or derived). It runs on every --executor, mpiexec included.
  FILE.py runs as Python code with your rights: only the file named on the command line is
  ever run, never one read from a checkpoint. The checkpoint records the file's path and
  SHA-256; infer --model FILE.py:NAME refuses a file that changed since. The schedule
  defaults to lr 0.01, weight decay 5e-4, 200 epochs, kept at the best val_acc.
"""

INFER_EPILOG = """\
infer predicts with the weights train selected and reported on (the best epoch by
--monitor), so both commands print the same test accuracy. Another --dataset must have the
features and classes the model was trained on; it is drawn with the training run's --seed
and --dtype, and feature normalisation follows the training run on planetoid data only.
A checkpoint of your own model needs --model FILE.py:NAME: the same file, unchanged (its
SHA-256 is checked before it runs); infer never runs code named only by a checkpoint.
"""

CONVERT_EPILOG = """\
examples:
  gblas-gnn convert ogb:data/ogbn_products products.npz
  mpiexec -n 4 python -m mpi4py -m gblas_gnn train --executor dist --dataset npz:products.npz
A grid run with --relabel reads only its blocks from a file converted with --relabel.
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
            f"{table}\n\n--monitor keeps the weights of\n{monitors}\n\n{USER_MODEL_HELP}\n"
            f"{DATASETS_HELP}")


def _pct(x: float) -> str:
    return f"{x * 100:.2f}%"


def summary(result: dict, hist: History, cfg: dict, *, dataset_name: str, epochs_here: int,
            checkpoint: Path | None, metrics_json: Path | None,
            facts: dict | None = None) -> list[str]:
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
        facts: :func:`gblas_gnn.cli.facts.run_facts` of the run (:func:`run_lines`).

    Returns:
        the selected epoch's accuracies; why the run stopped; how long an epoch took; where
        it ran and on what (:func:`run_lines`); what was written where (or that nothing was
        saved and which flag saves it); and, for data with synthetic labels, that the
        accuracy means nothing.
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
    if facts is not None:
        lines += run_lines(facts)
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


def _size(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes:.0f} B"


def run_lines(facts: dict) -> list[str]:
    """Where a run ran and on what (:func:`gblas_gnn.cli.facts.run_facts`): executor, grid,
    graph size and peak memory; on a grid the bytes each rank sent in the last epoch beside
    the scheme's bound, and what each rank read of a data set read by parts."""
    where = ("one process" if facts["grid"] is None else
             f"a {facts['grid'][0]}x{facts['grid'][1]} grid of {facts['processes']} processes"
             f" (dense tensors {facts['dense']})")
    peak = _size(facts["peak_rss_bytes"])
    peak += "" if facts["grid"] is None else f" (rank {facts['peak_rank']}, the largest)"
    lines = [f"ran on executor {facts['executor']}, {where}; graph of {facts['vertices']:,} "
             f"vertices and {facts['edges']:,} edges; peak memory {peak}"]
    sent = facts.get("bytes_sent_per_epoch")
    if sent is not None:
        ranks = ", ".join(f"{rank}: {_size(b)}" for rank, b in enumerate(sent)) \
            if len(sent) <= 16 else (f"min {_size(min(sent))}, median "
                                     f"{_size(float(np.median(sent)))}, max {_size(max(sent))}")
        lines.append(f"bytes sent per epoch by each rank (the last epoch; rank: bytes): "
                     f"{ranks}")
        q = facts["grid"][0]
        if facts.get("scheme_bound_bytes") is not None:
            widths = ", ".join(map(str, facts["layer_widths"]))
            lines.append(f"  the scheme's formula, the sum over the graph layers of "
                         f"(n k/sqrt(p) + k^2) words for one forward and backward (n = "
                         f"{facts['vertices']:,}, sqrt(p) = {q}, k = {widths}): "
                         f"{_size(facts['scheme_bound_bytes'])}; the largest rank sent "
                         f"{max(sent) / facts['scheme_bound_bytes']:.2f} times that per epoch "
                         "(training forward and backward, and the evaluation forward)")
        else:
            lines.append(f"  the scheme's formula: (n k/sqrt(p) + k^2) words per graph layer "
                         f"of width k, forward and backward (n = {facts['vertices']:,}, "
                         f"sqrt(p) = {q}; this model's layer widths are not known to the "
                         "command)")
    read = facts.get("read")
    if read is not None:
        lines.append(f"data: each rank read at most {_size(read['edge_bytes'])} of the "
                     f"{_size(read['total_edge_bytes'])} of edges ({read['how']}) and "
                     f"{_size(read['row_bytes'])} of vertex rows")
    return lines


def interrupted(epoch: int | None, checkpoint: Path | None, argv: Sequence[str]) -> str:
    """The one line printed when Ctrl-C stops ``gblas-gnn train``.

    ``epoch`` is the epoch that was running (``None``: before training started); the
    checkpoint's epoch is read from the file itself, which an interrupted write never
    leaves half-written. The command writes the checkpoint after every epoch, once the
    epoch's metrics are in: a Ctrl-C during that write leaves the previous epoch's file,
    and the epoch under way is then the one after the file's (not the one after the
    metrics'), the epoch a resumed run starts with.
    """
    from ..train import CheckpointError, read_checkpoint

    def where(at: int | None) -> str:
        return f"interrupted at epoch {at}" if at is not None else \
            "interrupted before training started"

    if checkpoint is None:
        return f"{where(epoch)}; nothing was saved (--checkpoint PATH makes a run resumable)"
    try:
        saved = read_checkpoint(checkpoint).epoch
    except FileNotFoundError:
        return f"{where(epoch)}; no checkpoint was written yet"
    except CheckpointError as exc:
        return f"{where(epoch)}; the checkpoint cannot be read ({exc})"
    if epoch is not None:
        epoch = min(epoch, saved + 1)
    resume = list(argv) if "--resume" in argv else [*argv, "--resume"]
    return (f"{where(epoch)}; the checkpoint {checkpoint} holds epoch {saved}; resume with: "
            f"{shlex.join(['gblas-gnn', *resume])}")
