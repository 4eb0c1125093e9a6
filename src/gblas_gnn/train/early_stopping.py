"""Early stopping for :func:`~gblas_gnn.train.fit`: which epoch's weights to keep, and when
to give up.

:class:`EarlyStopping` watches one validation quantity (the *monitor*) epoch by epoch. It
counts the epochs since the monitor last made progress (``bad_epochs``), says when that count
reaches the patience (:attr:`EarlyStopping.should_stop`), keeps a copy of the weights of the
best epoch and can copy them back into the model at the end. It draws no random numbers and
touches no model by itself: :func:`~gblas_gnn.train.fit` feeds it each epoch's metrics, hands
it the weights to keep, and stores its counter in the checkpoint so that a resumed run makes
the same decisions as an uninterrupted one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

__all__ = ["EarlyStopping", "MONITORS"]

#: the quantities :class:`EarlyStopping` can monitor
MONITORS = ("val_loss", "val_acc", "val_loss_acc")


class EarlyStopping:
    """The early-stopping and best-weights bookkeeping of one training run.

    Three monitors:

    * ``"val_loss"``: lower is better; an epoch is the new best when its validation loss is
      strictly below the best so far (a tie keeps the earlier epoch).
    * ``"val_acc"``: higher is better; strictly above the best so far (the first epoch of the
      maximum is kept, as PyG's examples do).
    * ``"val_loss_acc"``: the rule of the GAT paper's reference code (Veličković et al. 2018).
      An epoch whose validation accuracy is at least the highest so far *or* whose validation
      loss is at most the lowest so far makes progress (resets the counter); the weights are
      kept from the last epoch that did *both* (ties count), and ``best_value`` is that
      epoch's validation loss.

    Parameters
    ----------
    monitor : str
        One of :data:`MONITORS`.
    patience : int or None
        Stop once this many consecutive epochs made no progress (``None``: never stop).
    restore_best : bool or None
        Whether :meth:`restore` copies the best weights back; ``None`` (the default): when a
        ``patience`` is given.

    Attributes
    ----------
    best_epoch : int or None
        The epoch (as passed to :meth:`update`) whose weights are kept; ``None`` before any.
    best_value : float or None
        The monitored value of ``best_epoch`` (its validation loss for ``"val_loss_acc"``).
    bad_epochs : int
        Consecutive epochs without progress, up to the latest :meth:`update`.
    best_params : dict of str to array, or None
        The copy of the weights made by :meth:`keep` (``None`` until the first).

    Raises
    ------
    ValueError
        ``monitor`` is not one of :data:`MONITORS`, or ``patience`` is not an integer ≥ 1.

    Examples
    --------
    >>> es = EarlyStopping("val_acc", patience=2)
    >>> accuracies = [0.5, 0.7, 0.7, 0.6]
    >>> [es.update(e, {"val_loss": 1.0, "val_acc": a}) for e, a in enumerate(accuracies, 1)]
    [True, True, False, False]
    >>> es.best_epoch, es.bad_epochs, es.should_stop
    (2, 2, True)
    """

    def __init__(self, monitor: str = "val_loss", patience: int | None = None,
                 restore_best: bool | None = None):
        if monitor not in MONITORS:
            raise ValueError(f"monitor must be one of {MONITORS}, got {monitor!r}")
        if patience is not None and (isinstance(patience, bool)
                                     or not isinstance(patience, (int, np.integer))
                                     or patience < 1):
            raise ValueError(f"patience must be an integer ≥ 1, got {patience!r}")
        self.monitor = monitor
        self.patience = None if patience is None else int(patience)
        self.restore_best = self.patience is not None if restore_best is None else restore_best
        self.best_epoch: int | None = None
        self.best_value: float | None = None
        self.bad_epochs = 0
        self.best_params: dict[str, Any] | None = None
        # running extremes of the validation metrics (what "val_loss_acc" compares with)
        self._acc_max: Any = -math.inf
        self._loss_min: Any = math.inf

    def resume(self, history: Any, bad_epochs: int,
               best_params: Mapping[str, Any] | None) -> None:
        """Continue from the state of an earlier run.

        Parameters
        ----------
        history : History
            The earlier run's :class:`~gblas_gnn.train.History` (anything with ``best_epoch``,
            ``best_value`` and the lists ``val_loss`` and ``val_acc``); the running extremes
            of ``"val_loss_acc"`` are recomputed from its lists.
        bad_epochs : int
            The earlier run's :attr:`bad_epochs`.
        best_params : mapping of str to array, or None
            The earlier run's kept weights (taken as they are, not copied).
        """
        self.best_epoch, self.best_value = history.best_epoch, history.best_value
        self.bad_epochs = int(bad_epochs)
        self.best_params = None if best_params is None else dict(best_params)
        self._acc_max = max(history.val_acc, default=-math.inf)
        self._loss_min = min(history.val_loss, default=math.inf)

    def update(self, epoch: int, metrics: Mapping[str, Any]) -> bool:
        """Take one epoch's validation metrics into account.

        Parameters
        ----------
        epoch : int
            The epoch's number (recorded as :attr:`best_epoch` when it is the best).
        metrics : mapping
            At least ``"val_loss"`` and ``"val_acc"`` (numbers).

        Returns
        -------
        bool
            Whether this epoch is the new best, i.e. whether its weights should be kept
            (:meth:`keep`).
        """
        if self.monitor == "val_loss_acc":
            acc_ok = metrics["val_acc"] >= self._acc_max
            loss_ok = metrics["val_loss"] <= self._loss_min
            value, best, progressed = metrics["val_loss"], acc_ok and loss_ok, acc_ok or loss_ok
        else:
            value = metrics[self.monitor]
            best = progressed = self._improves(value)
        self._acc_max = max(self._acc_max, metrics["val_acc"])
        self._loss_min = min(self._loss_min, metrics["val_loss"])
        if best:
            self.best_value, self.best_epoch = float(value), epoch
        self.bad_epochs = 0 if progressed else self.bad_epochs + 1
        return bool(best)

    def _improves(self, value: Any) -> bool:
        """Whether ``value`` of a single-metric monitor beats :attr:`best_value` (strictly)."""
        if self.best_value is None:
            return True
        return value < self.best_value if self.monitor == "val_loss" else value > self.best_value

    @property
    def should_stop(self) -> bool:
        """Whether the patience has run out (never without a ``patience``)."""
        return self.patience is not None and self.bad_epochs >= self.patience

    def keep(self, params: Iterable[tuple[str, Any]]) -> None:
        """Keep a copy of the weights ``params`` (``(name, array)`` pairs, e.g.
        ``model.named_parameters()``) as the best ones."""
        self.best_params = {name: p.copy() for name, p in params}

    def restore(self, params: Mapping[str, Any]) -> bool:
        """Copy the kept weights into ``params`` (a mapping name → array, e.g.
        ``dict(model.named_parameters())``), in place.

        Returns
        -------
        bool
            Whether weights were restored: ``restore_best`` is set and :meth:`keep` was
            called.
        """
        if not self.restore_best or self.best_params is None:
            return False
        for name, p in self.best_params.items():
            params[name][...] = p
        return True
