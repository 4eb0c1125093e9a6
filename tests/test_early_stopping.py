"""The early-stopping object of the trainer: patience counting, lower- and higher-is-better
monitors, ties, the GAT paper's rule, keeping and restoring the best weights, resuming."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from training_cases import gat_paper_rule

from gblas_gnn.train.early_stopping import MONITORS, EarlyStopping


def feed(es, val_loss, val_acc=None):
    """Feed the epochs 1, 2, ... to ``es``: per epoch ``(is_best, bad_epochs, should_stop)``."""
    val_acc = [0.0] * len(val_loss) if val_acc is None else val_acc
    out = []
    for epoch, (loss, acc) in enumerate(zip(val_loss, val_acc, strict=True), 1):
        best = es.update(epoch, {"val_loss": loss, "val_acc": acc})
        out.append((best, es.bad_epochs, es.should_stop))
    return out


# ---------------------------------------------------------------------------- patience
def test_patience_counts_epochs_without_improvement_and_resets():
    es = EarlyStopping("val_loss", patience=3)
    steps = feed(es, [3.0, 2.0, 2.5, 2.4, 1.0, 1.5, 1.6, 1.7])
    assert [s[0] for s in steps] == [True, True, False, False, True, False, False, False]
    assert [s[1] for s in steps] == [0, 0, 1, 2, 0, 1, 2, 3]
    assert [s[2] for s in steps] == [False] * 7 + [True]
    assert (es.best_epoch, es.best_value) == (5, 1.0)


def test_patience_one_stops_at_the_first_bad_epoch():
    es = EarlyStopping("val_acc", patience=1)
    assert feed(es, [1.0, 1.0], [0.3, 0.2])[-1] == (False, 1, True)


def test_without_patience_it_never_stops():
    es = EarlyStopping("val_loss")
    steps = feed(es, [1.0] + [2.0] * 50)
    assert es.bad_epochs == 50 and not any(s[2] for s in steps)
    assert es.best_epoch == 1


# ---------------------------------------------------------------------------- min vs max
def test_val_loss_is_minimised_and_val_acc_maximised():
    values = [0.5, 0.4, 0.6, 0.45]
    low = EarlyStopping("val_loss", patience=5)
    high = EarlyStopping("val_acc", patience=5)
    feed(low, values)
    feed(high, [9.0] * 4, values)               # val_acc reads the accuracy, not the loss
    assert (low.best_epoch, low.best_value) == (2, 0.4)
    assert (high.best_epoch, high.best_value) == (3, 0.6)
    assert (low.bad_epochs, high.bad_epochs) == (2, 1)


def test_a_single_metric_monitor_ignores_the_other_metric():
    es = EarlyStopping("val_loss", patience=2)
    # the accuracy rises every epoch, the loss does not fall: no progress
    steps = feed(es, [1.0, 1.0, 1.1], [0.1, 0.5, 0.9])
    assert steps[-1] == (False, 2, True) and es.best_epoch == 1


# ---------------------------------------------------------------------------- ties
@pytest.mark.parametrize("monitor", ["val_loss", "val_acc"])
def test_a_tie_is_no_improvement_and_keeps_the_first_epoch(monitor):
    es = EarlyStopping(monitor, patience=2)
    same = [0.5, 0.5, 0.5]
    steps = feed(es, same, same)
    assert [s[0] for s in steps] == [True, False, False]
    assert es.best_epoch == 1 and es.should_stop


def test_val_loss_acc_ties_count_and_move_the_kept_epoch():
    es = EarlyStopping("val_loss_acc", patience=1)
    steps = feed(es, [1.0, 1.0], [0.5, 0.5])       # both metrics tie: progress, new best
    assert steps[-1] == (True, 0, False) and es.best_epoch == 2


# ---------------------------------------------------------------------------- the GAT rule
def test_val_loss_acc_progress_on_either_metric_best_on_both():
    es = EarlyStopping("val_loss_acc", patience=2)
    steps = feed(es, [1.0, 0.9, 1.2, 0.8, 1.5, 1.5],
                 [0.5, 0.4, 0.6, 0.7, 0.1, 0.1])
    #          both  loss  acc  both  none  none
    assert [s[0] for s in steps] == [True, False, False, True, False, False]
    assert [s[1] for s in steps] == [0, 0, 0, 0, 1, 2]
    assert steps[-1][2]
    assert (es.best_epoch, es.best_value) == (4, 0.8)   # the loss of the kept epoch


@pytest.mark.parametrize("seed", range(5))
def test_val_loss_acc_is_the_gat_papers_rule(seed):
    rng = np.random.default_rng(seed)
    n = 80
    # coarse values, so that ties happen often
    acc = np.round(np.minimum.accumulate(rng.random(n))[::-1] * 10 + rng.random(n), 0) / 10
    loss = np.round(rng.random(n) * 4, 1) + np.linspace(1, 0, n)
    es = EarlyStopping("val_loss_acc", patience=4)
    last = n
    for epoch in range(1, n + 1):
        if es.update(epoch, {"val_loss": float(loss[epoch - 1]),
                             "val_acc": float(acc[epoch - 1])}):
            kept = epoch
        if es.should_stop:
            last = epoch
            break
    assert (kept, last) == gat_paper_rule(acc.tolist(), loss.tolist(), 4)
    assert es.best_epoch == kept


# ---------------------------------------------------------------------------- best weights
def weights():
    return {"w": np.arange(6.0).reshape(2, 3), "b": np.zeros(3, np.float32)}


def test_keep_copies_and_restore_writes_in_place():
    es = EarlyStopping("val_loss", patience=3)
    params = weights()
    assert es.update(1, {"val_loss": 1.0, "val_acc": 0.0})
    es.keep(params.items())
    before = {k: v.copy() for k, v in params.items()}
    arrays = {k: id(v) for k, v in params.items()}
    for v in params.values():
        v += 7                                       # training goes on
    assert all(np.array_equal(es.best_params[k], before[k]) for k in before)
    assert es.restore(params)
    assert {k: id(v) for k, v in params.items()} == arrays     # the same arrays
    for k in before:
        np.testing.assert_array_equal(params[k], before[k])
        assert params[k].dtype == before[k].dtype


@pytest.mark.parametrize("patience, restore_best, restores", [
    (3, None, True), (None, None, False), (None, True, True), (3, False, False)])
def test_restore_best_defaults_to_whether_there_is_a_patience(patience, restore_best,
                                                              restores):
    es = EarlyStopping("val_acc", patience=patience, restore_best=restore_best)
    params = weights()
    es.update(1, {"val_loss": 1.0, "val_acc": 0.5})
    es.keep(params.items())
    params["w"][...] = -1
    assert es.restore(params) is restores
    assert bool(params["w"][0, 1] == 1.0) is restores


def test_nothing_to_restore_before_any_weights_are_kept():
    es = EarlyStopping("val_loss", patience=2)
    params = weights()
    assert not es.restore(params)
    np.testing.assert_array_equal(params["w"], weights()["w"])


# ---------------------------------------------------------------------------- resuming
@pytest.mark.parametrize("monitor", MONITORS)
@pytest.mark.parametrize("cut", [1, 4, 9])
def test_resuming_makes_the_same_decisions(monitor, cut):
    rng = np.random.default_rng(3)
    loss = np.round(rng.random(20) * 3, 1).tolist()
    acc = np.round(rng.random(20), 1).tolist()
    whole = EarlyStopping(monitor, patience=50)
    want = feed(whole, loss, acc)

    first = EarlyStopping(monitor, patience=50)
    got = feed(first, loss[:cut], acc[:cut])
    history = SimpleNamespace(best_epoch=first.best_epoch, best_value=first.best_value,
                              val_loss=loss[:cut], val_acc=acc[:cut])
    second = EarlyStopping(monitor, patience=50)
    second.resume(history, first.bad_epochs, None)
    for epoch in range(cut + 1, 21):
        best = second.update(epoch, {"val_loss": loss[epoch - 1], "val_acc": acc[epoch - 1]})
        got.append((best, second.bad_epochs, second.should_stop))
    assert got == want
    assert (second.best_epoch, second.best_value) == (whole.best_epoch, whole.best_value)


def test_resume_takes_the_kept_weights():
    es = EarlyStopping("val_loss", patience=2)
    kept = weights()
    es.resume(SimpleNamespace(best_epoch=3, best_value=0.25, val_loss=[1.0, 0.5, 0.25],
                              val_acc=[0.1, 0.2, 0.3]), 0, kept)
    params = {k: np.ones_like(v) for k, v in kept.items()}
    assert es.restore(params)
    np.testing.assert_array_equal(params["w"], kept["w"])
    assert not es.update(4, {"val_loss": 0.25, "val_acc": 0.9})     # a tie: no better
    assert es.bad_epochs == 1


# ---------------------------------------------------------------------------- arguments
@pytest.mark.parametrize("kw, match", [
    (dict(monitor="loss"), "monitor"), (dict(patience=0), "patience"),
    (dict(patience=2.5), "patience"), (dict(patience=True), "patience"),
])
def test_argument_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        EarlyStopping(**kw)
