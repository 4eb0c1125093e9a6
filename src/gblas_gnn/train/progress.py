"""What :func:`~gblas_gnn.train.fit` shows while it trains: a kernel warm-up, then a bar.

The first call of every numba kernel compiles it (or loads it from numba's cache), which
takes seconds, far longer than an epoch. A bar started before that would open with an ETA of
hours. So :class:`EpochProgress` first says what is being waited for and runs
:func:`warm_up`, then opens the bar:

* without early stopping the bar's total is the epoch budget (percentage and ETA hold);
* with early stopping the end is unknown: the bar counts epochs and shows the best epoch
  and the patience countdown (``stop_in``: epochs left unless the monitored value
  improves), never a percentage of the epoch cap.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import TextIO

import numpy as np

from ..executors.cpu.programs import sized_like
from ..graph import Graph
from ..nn.module import Module
from .checkpoint import named_modules, rng_states, set_rng_states

__all__ = ["warm_up", "EpochProgress"]

#: vertices of the graph :func:`warm_up` runs the model on
WARM_UP_VERTICES = 16


def warm_up(model: Module, g: Graph, x: np.ndarray) -> bool:
    """Run ``model`` once in training mode (forward and backward) and once in evaluation
    mode on a small ring graph with the first rows of ``x``, so that every kernel of a
    training epoch is compiled before the first epoch.

    Numba compiles one machine-code version per argument types (dtypes, dimensions, memory
    layout), not per size, so a ring of :data:`WARM_UP_VERTICES` vertices with ``g``'s dtype
    and ``x``'s width compiles what the real graph needs, at no cost; the cpu executor runs
    each kernel on one thread or through its driver on several as for ``g``'s number of
    edges (:func:`~gblas_gnn.executors.cpu.programs.sized_like`), so the drivers compiled are
    the ones the epochs run.

    Nothing of the run changes: no optimiser step is taken, the model's random generators
    are restored to their states before the warm-up (so dropout draws the same masks), its
    gradients and train/eval mode are put back and its backward caches dropped. Layer caches
    keyed by graph (GCN's normalised adjacency, SGC's propagated features) are keyed by the
    graph object, so the real graph misses them and computes its own.

    Returns ``False`` (having changed nothing) when the model cannot run on the small graph,
    e.g. a model with per-vertex parameters, which refuses the graph's size with a
    ``ValueError``; the first epoch then compiles the kernels. Any other error is raised (the
    model is put back first): it is a failure of the model or of the library, not of the
    warm-up's small graph.
    """
    m = min(g.n, WARM_UP_VERTICES)
    ring = np.arange(m)
    tiny = Graph.from_edges(np.r_[ring, (ring + 1) % m], np.r_[(ring + 1) % m, ring], m,
                            dtype=g.dtype)
    h = x[:m].copy()                   # on x's device: numpy and CuPy alike
    try:
        states = rng_states(model)
    except TypeError:           # a generator checkpoints cannot capture: leave it untouched
        return False
    grads = [(module, dict(module.grads)) for _, module in named_modules(model)]
    was_training = model.training
    try:
        # one thread or the threads' drivers, as for the real graph's size
        with np.errstate(all="ignore"), sized_like(max(g.nnz, 1) / tiny.nnz):
            model.train()
            out = model(tiny, h)
            model.backward(np.full_like(out, 1.0 / out.size))
            model.eval()
            model(tiny, h)
        return True
    except ValueError:          # shapes tied to the real graph (per-vertex parameters)
        return False
    finally:
        model.eval()                        # drops whatever the training forward cached
        model.train(was_training)
        set_rng_states(model, states)
        for module, saved in grads:         # (a derived backward replaces the dict)
            module.grads = saved


class EpochProgress:
    """The progress display of one :func:`~gblas_gnn.train.fit` run (a tqdm bar).

    Args:
        start: epochs already done (a resumed run).
        epochs: the epoch budget.
        patience: early-stopping patience (``None``: no early stopping).
        file: where to write (default ``sys.stderr``).
    """

    def __init__(self, start: int, epochs: int, patience: int | None,
                 file: TextIO | None = None):
        self.start, self.epochs, self.patience = start, epochs, patience
        self.file = sys.stderr if file is None else file
        self._bar = None

    def warm_up(self, model: Module, g: Graph, x: np.ndarray) -> None:
        """:func:`warm_up` behind a status line that says what is being waited for (and, when
        done, how long it took)."""
        print("train: compiling kernels (numba, cached after the first run)...",
              end="", file=self.file, flush=True)
        t0 = time.perf_counter()
        done = warm_up(model, g, x)
        print(f" {time.perf_counter() - t0:.1f} s" if done else " skipped (the model does not "
              "run on a small graph; the first epoch compiles them)", file=self.file,
              flush=True)

    def open(self) -> None:
        """Start the bar (after the warm-up)."""
        from tqdm.auto import tqdm

        if self.patience is None:
            self._bar = tqdm(total=self.epochs, initial=self.start, desc="train",
                             unit="epoch", file=self.file, leave=True)
        else:
            # the end is unknown: count epochs, no percentage of the epoch cap
            self._bar = tqdm(total=None, initial=self.start, unit="epoch", file=self.file,
                             leave=True, desc=f"train (early stopping, at most "
                                              f"{self.epochs} epochs)",
                             bar_format="{desc}: epoch {n_fmt} [{elapsed}, {rate_fmt}"
                                        "{postfix}]")

    def update(self, metrics: Mapping[str, float], best_epoch: int | None,
               bad_epochs: int) -> None:
        """One epoch done: its metrics, the best epoch so far and the epochs since the
        monitored value last improved."""
        if self._bar is None:
            return
        post = {"loss": f"{metrics['train_loss']:.4f}", "train": f"{metrics['train_acc']:.3f}",
                "val": f"{metrics['val_acc']:.3f}",
                "t": f"{metrics['epoch_time'] * 1e3:.0f}ms"}
        if self.patience is not None:
            post["best"] = str(best_epoch)
            post["stop_in"] = str(self.patience - bad_epochs)
        self._bar.update(1)
        self._bar.set_postfix(post, refresh=False)

    def close(self) -> None:
        """Close the bar (its last state stays on screen, the cursor on a new line)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
