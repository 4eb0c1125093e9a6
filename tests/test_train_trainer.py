"""The full-batch trainer: determinism, early stopping, checkpoints, SIGKILL + resume, errors."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from training_cases import gat_paper_rule

import gblas_gnn as gg
from gblas_gnn.nn.activation import ReLU
from gblas_gnn.nn.dropout import Dropout
from gblas_gnn.nn.linear import Linear
from gblas_gnn.nn.module import Module
from gblas_gnn.nn.sequential import Sequential
from gblas_gnn.train import (
    SGD,
    Adam,
    History,
    evaluate,
    fit,
    load_checkpoint,
    predict,
    read_checkpoint,
)

REPO = Path(__file__).resolve().parents[1]


def synthetic(n=60, f=8, c=3, seed=0, dtype=np.float32):
    """Features = noisy class centroid, edges mostly within a class, 20/20/20 split."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    centres = rng.standard_normal((c, f)) * 1.5
    x = (centres[y] + rng.standard_normal((n, f))).astype(dtype)
    src, dst = [], []
    for _ in range(4 * n):
        i = rng.integers(n)
        same = np.flatnonzero(y == y[i]) if rng.random() < 0.8 else np.arange(n)
        src.append(i)
        dst.append(rng.choice(same))
    g = gg.Graph.from_edges(np.r_[src, dst], np.r_[dst, src], n, dtype=dtype)
    perm = rng.permutation(n)
    masks = [np.zeros(n, bool) for _ in range(3)]
    for m, part in zip(masks, np.array_split(perm, 3), strict=True):
        m[part] = True
    return SimpleNamespace(graph=g, x=x, y=y, train_mask=masks[0], val_mask=masks[1],
                           test_mask=masks[2], num_classes=c)


def mlp(f=8, c=3, seed=0):
    return Sequential(Dropout(0.5, seed=seed + 1), Linear(f, 16, seed=seed + 2), ReLU(),
                      Dropout(0.5, seed=seed + 3), Linear(16, c, seed=seed + 4))


def gcn(f=8, c=3, seed=0):
    from gblas_gnn.nn.models import gcn as build_gcn
    return build_gcn(f, c, hidden=8, seed=seed)


def params(model):
    return {k: v.copy() for k, v in model.named_parameters()}


def assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.fixture(scope="module")
def data():
    return synthetic()


# ---------------------------------------------------------------------------- training
@pytest.mark.parametrize("make", [mlp, gcn], ids=["mlp", "gcn"])
def test_learns_and_is_deterministic(data, make):
    runs = []
    for _ in range(2):
        model = make(seed=3)
        hist = fit(model, data, Adam(model, lr=0.02, weight_decay=5e-4), epochs=40,
                   progress=False)
        runs.append((params(model), hist))
    assert_same(runs[0][0], runs[1][0])
    assert runs[0][1].train_loss == runs[1][1].train_loss
    h = runs[0][1]
    assert len(h) == 40 and h.epoch == list(range(1, 41))
    assert h.train_loss[-1] < 0.7 * h.train_loss[0]
    assert h.val_acc[-1] > 0.6                       # chance is 1/3
    assert all(0 <= a <= 1 for a in h.test_acc)
    other = make(seed=4)
    fit(other, data, Adam(other, lr=0.02), epochs=3, progress=False)
    assert any(not np.array_equal(v, params(other)[k]) for k, v in runs[0][0].items())


def fit_with_snapshots(data, **kw):
    """Fit a fresh MLP with SGD at a large learning rate (it overfits / oscillates quickly)
    and keep a copy of the weights after every epoch: ``(model, history, snapshots)``."""
    model = mlp()
    snaps = {}

    def cb(epoch, metrics):
        snaps[epoch] = params(model)

    hist = fit(model, data, SGD(model, lr=0.5, momentum=0.9), epochs=300,
               metrics_callback=cb, progress=False, **kw)
    return model, hist, snaps


def test_early_stopping_restores_best_weights(data):
    model, hist, snaps = fit_with_snapshots(data, patience=5)
    assert hist.stopped_early and hist.restored_best
    last = hist.epoch[-1]
    assert last < 300
    best = int(np.argmin(hist.val_loss)) + 1
    assert hist.best_epoch == best and hist.best_value == min(hist.val_loss)
    assert last - best == 5                          # stopped after `patience` bad epochs
    assert_same(params(model), snaps[best])
    np.testing.assert_allclose(evaluate(model, data)["val_loss"], hist.best_value, rtol=1e-6)


def test_monitor_val_acc_and_no_restore_without_patience(data):
    model = mlp()
    hist = fit(model, data, Adam(model, lr=0.01), epochs=15, monitor="val_acc", progress=False)
    assert hist.best_value == max(hist.val_acc)
    assert hist.best_epoch == int(np.argmax(hist.val_acc)) + 1   # first maximum
    assert not hist.restored_best and not hist.stopped_early and len(hist) == 15


def test_monitor_val_loss_acc_is_the_gat_papers_rule(data):
    model, hist, snaps = fit_with_snapshots(data, patience=8, monitor="val_loss_acc")
    saved, last = gat_paper_rule(hist.val_acc, hist.val_loss, 8)
    assert hist.stopped_early and hist.restored_best and hist.monitor == "val_loss_acc"
    assert (hist.best_epoch, hist.epoch[-1]) == (saved, last)
    assert hist.best_value == hist.val_loss[saved - 1]
    assert_same(params(model), snaps[saved])
    # the run exercises the rule: some epoch improved one metric but not the other
    acc, loss = np.array(hist.val_acc), np.array(hist.val_loss)
    acc_up = acc[1:] >= np.maximum.accumulate(acc)[:-1]
    loss_down = loss[1:] <= np.minimum.accumulate(loss)[:-1]
    assert (acc_up != loss_down).any()


def test_monitor_val_loss_acc_resumes_bit_identically(data, tmp_path):
    kw = dict(epochs=40, patience=4, monitor="val_loss_acc", progress=False)
    ref = mlp(seed=2)
    href = fit(ref, data, SGD(ref, lr=0.5, momentum=0.9), **kw)
    assert href.stopped_early

    def crash(epoch, metrics):
        if epoch == href.epoch[-1] - 2:
            raise KeyboardInterrupt

    path = tmp_path / "ck.npz"
    model = mlp(seed=2)
    with pytest.raises(KeyboardInterrupt):
        fit(model, data, SGD(model, lr=0.5, momentum=0.9), checkpoint=path,
            metrics_callback=crash, **kw)
    fresh = mlp(seed=9)
    hres = fit(fresh, data, SGD(fresh, lr=0.5, momentum=0.9), checkpoint=path, resume=True,
               **kw)
    assert hres.epoch == href.epoch and hres.best_epoch == href.best_epoch
    assert_same(params(fresh), params(ref))


def test_callback_can_stop(data):
    model = mlp()
    seen = []
    hist = fit(model, data, Adam(model), epochs=50, progress=False,
               metrics_callback=lambda e, m: seen.append((e, sorted(m))) or e == 4)
    assert len(hist) == 4 and seen[0][0] == 1
    assert seen[0][1] == sorted(["train_loss", "train_acc", "val_loss", "val_acc", "test_acc",
                                 "epoch_time"])


def test_progress_bar(data, capsys):
    model = mlp()
    fit(model, data, Adam(model), epochs=3, progress=True)
    err = capsys.readouterr().err
    assert "loss=" in err and "val=" in err and "3/3" in err


def test_real_dataset_object():
    from gblas_gnn.data import csbm

    ds = csbm(n=150, classes=3, features=8, train_per_class=10, val=30, test=50, seed=0)
    model = gcn(8, 3)
    hist = fit(model, ds, Adam(model, lr=0.01), epochs=5, progress=False)
    assert len(hist) == 5 and np.isfinite(hist.train_loss).all()


# ---------------------------------------------------------------------------- inference
def test_predict_is_eval_mode_and_cacheless(data):
    model = mlp()
    fit(model, data, Adam(model), epochs=3, progress=False)
    assert model.training
    a = predict(model, data.graph, data.x)
    b = predict(model, data.graph, data.x)
    np.testing.assert_array_equal(a, b)            # no dropout
    assert model.training                          # mode restored
    assert all(m._cache is None for m in model)
    model.eval()
    predict(model, data.graph, data.x)
    assert not model.training
    ev = evaluate(model, data)
    assert set(ev) == {"train_loss", "train_acc", "val_loss", "val_acc", "test_loss", "test_acc"}


# ---------------------------------------------------------------------------- checkpoints
def test_checkpoint_cadence_and_content(data, tmp_path):
    path = tmp_path / "ck.npz"
    model = gcn()
    written = []

    def cb(epoch, metrics):
        if path.exists():
            written.append(read_checkpoint(path).epoch)

    fit(model, data, Adam(model), epochs=7, checkpoint=path, checkpoint_every=3,
        metrics_callback=cb, progress=False)
    # the callback runs before the epoch's own checkpoint: it sees the previous one
    assert written == [3, 3, 3, 6]
    ck = read_checkpoint(path)
    assert ck.epoch == 7                            # the last epoch is always saved
    assert set(ck.rng) == {"0.rng", "3.rng"}
    hist = History.from_dict(ck.trainer["history"])
    assert len(hist) == 7


def gat(f=8, c=3, seed=0):
    from gblas_gnn.nn.models import gat as build_gat
    return build_gat(f, c, hidden=4, heads=2, seed=seed)


def composed(f=8, c=3, seed=0):
    """Composed layers (the backward derived) with attention and feature dropout."""
    from gblas_gnn.nn import ELU, Dropout, GATv2Conv, Sequential
    s = [int(x) for x in np.random.SeedSequence(seed).generate_state(3)]
    return Sequential(Dropout(0.2, seed=s[0]), GATv2Conv(f, 4, heads=2, dropout=0.3, seed=s[1]),
                      ELU(), GATv2Conv(8, c, seed=s[2]))


@pytest.mark.parametrize("make", [gcn, gat, composed], ids=["gcn", "gat", "composed"])
def test_in_process_resume_is_bit_identical(data, tmp_path, make):
    # GAT also draws attention-dropout masks from its layers' own generators
    kw = dict(epochs=12, patience=50, progress=False, restore_best=False)
    ref = make(seed=1)
    href = fit(ref, data, Adam(ref, lr=0.01, weight_decay=5e-4), **kw)

    path = tmp_path / "ck.npz"
    model = make(seed=1)

    def crash(epoch, metrics):
        if epoch == 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fit(model, data, Adam(model, lr=0.01, weight_decay=5e-4), checkpoint=path,
            metrics_callback=crash, **kw)
    assert read_checkpoint(path).epoch == 5
    fresh = make(seed=99)                           # other initial weights and dropout streams
    hres = fit(fresh, data, Adam(fresh, lr=0.5), checkpoint=path, resume=True, **kw)
    assert_same(params(fresh), params(ref))
    assert hres.train_loss == href.train_loss and hres.val_loss == href.val_loss
    assert hres.best_epoch == href.best_epoch
    # resuming a finished run changes nothing
    again = make(seed=5)
    h3 = fit(again, data, Adam(again), checkpoint=path, resume=True, **kw)
    assert_same(params(again), params(ref)) and len(h3) == 12


SCRIPT = textwrap.dedent("""
    import sys, time
    import numpy as np
    sys.path.insert(0, {tests!r})
    from test_train_trainer import synthetic, gcn
    from gblas_gnn.train import Adam, fit

    mode, ck, out = sys.argv[1], sys.argv[2], sys.argv[3]
    data = synthetic(n=80, seed=2)
    model = gcn(seed=7)
    slow = (lambda e, m: time.sleep(0.04)) if mode == "killed" else None
    hist = fit(model, data, Adam(model, lr=0.01, weight_decay=5e-4), epochs=60, patience=200,
               restore_best=False, checkpoint=None if mode == "plain" else ck,
               resume=(mode == "resume"), progress=False, metrics_callback=slow)
    np.savez(out, val_loss=np.array(hist.val_loss), train_loss=np.array(hist.train_loss),
             **dict(model.named_parameters()))
""")


@pytest.mark.cpu_only            # a fresh process on its default executor, cpu
def test_sigkill_then_resume_is_bit_identical(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT.format(tests=str(REPO / "tests")))
    ck = tmp_path / "ck.npz"
    env = {**os.environ, "PYTHONHASHSEED": "0"}

    def run(mode, out):
        subprocess.run([sys.executable, str(script), mode, str(ck), str(out)], check=True,
                       env=env, timeout=120, cwd=tmp_path)

    # the job that gets killed: poll for a checkpoint of epoch ≥ 3, then SIGKILL
    proc = subprocess.Popen([sys.executable, str(script), "killed", str(ck),
                             str(tmp_path / "never.npz")], env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 90
        epoch = 0
        while time.monotonic() < deadline and proc.poll() is None:
            if ck.exists():
                try:
                    epoch = read_checkpoint(ck).epoch
                except Exception:     # noqa: BLE001 - read during a rename: retry
                    epoch = 0
                if epoch >= 3:
                    break
            time.sleep(0.01)
        assert proc.poll() is None, "the job finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    killed_at = read_checkpoint(ck).epoch
    assert 3 <= killed_at < 60
    assert not (tmp_path / "never.npz").exists()

    run("resume", tmp_path / "resumed.npz")
    run("plain", tmp_path / "plain.npz")
    with np.load(tmp_path / "resumed.npz") as a, np.load(tmp_path / "plain.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        for k in a.files:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert read_checkpoint(ck).epoch == 60


# ---------------------------------------------------------------------------- divergence
class Boom(Module):
    """Identity that returns NaN from its ``at``-th training-mode call on."""

    def __init__(self, at):
        super().__init__()
        self.at, self.calls = at, 0

    def forward(self, g, H):
        if self.training:
            self.calls += 1
            if self.calls >= self.at:
                return H * np.float32(np.nan)
        return H

    def backward(self, dout):
        return dout


def test_nonfinite_loss_stops_and_keeps_last_good_checkpoint(data, tmp_path):
    path = tmp_path / "ck.npz"
    model = Sequential(Linear(8, 3, seed=0), Boom(at=4))
    with pytest.raises(FloatingPointError,
                       match=r"non-finite training loss.*epoch 4.*checkpoint \(epoch 3\)"):
        fit(model, data, Adam(model), epochs=10, checkpoint=path, progress=False)
    ck = read_checkpoint(path)
    assert ck.epoch == 3 and all(np.isfinite(v).all() for v in ck.params.values())
    # that checkpoint is usable: resume a fresh model from it
    fresh = Sequential(Linear(8, 3, seed=5), Boom(at=100))
    hist = fit(fresh, data, Adam(fresh), epochs=5, checkpoint=path, resume=True,
               progress=False)
    assert len(hist) == 5


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_divergence_from_a_huge_learning_rate(data, tmp_path):
    path = tmp_path / "ck.npz"
    model = Sequential(Linear(8, 32, seed=0), ReLU(), Linear(32, 32, seed=1), ReLU(),
                       Linear(32, 3, seed=2))
    with pytest.raises(FloatingPointError, match=r"non-finite.*epoch 3.*checkpoint \(epoch 2\)"
                       r".*smaller learning rate"):
        fit(model, data, SGD(model, lr=1e3), epochs=50, checkpoint=path, progress=False)
    ck = read_checkpoint(path)
    assert ck.epoch == 2
    assert all(np.isfinite(v).all() for v in ck.params.values())
    before = path.read_bytes()
    load_checkpoint(path, model)
    assert path.read_bytes() == before


def test_no_checkpoint_message(data):
    model = Sequential(Linear(8, 3), Boom(at=1))
    with pytest.raises(FloatingPointError, match="no checkpoint was written"):
        fit(model, data, Adam(model), epochs=3, progress=False)


# ---------------------------------------------------------------------------- errors
@pytest.mark.parametrize("kw, exc, match", [
    (dict(epochs=0), ValueError, "epochs"),
    (dict(epochs=2.5), ValueError, "epochs"),
    (dict(epochs=3, patience=0), ValueError, "patience"),
    (dict(epochs=3, checkpoint_every=0), ValueError, "checkpoint_every"),
    (dict(epochs=3, monitor="loss"), ValueError, "monitor"),
    (dict(epochs=3, resume=True), ValueError, "needs a checkpoint"),
])
def test_fit_argument_errors(data, kw, exc, match):
    model = mlp()
    with pytest.raises(exc, match=match):
        fit(model, data, Adam(model), progress=False, **kw)


def test_fit_input_errors(data, tmp_path):
    model = mlp()
    opt = Adam(model)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        fit(model, data, opt, epochs=2, checkpoint=tmp_path / "none.npz", resume=True,
            progress=False)
    with pytest.raises(FileNotFoundError, match="directory"):
        fit(model, data, opt, epochs=2, checkpoint=tmp_path / "no" / "ck.npz", progress=False)
    with pytest.raises(ValueError, match="different model"):
        fit(model, data, Adam(mlp()), epochs=2, progress=False)
    with pytest.raises(TypeError, match="missing 'val_mask'"):
        fit(model, SimpleNamespace(graph=data.graph, x=data.x, y=data.y,
                                   train_mask=data.train_mask), opt, epochs=2, progress=False)
    bad = SimpleNamespace(**{**vars(data), "train_mask": np.zeros(60, bool)})
    with pytest.raises(ValueError, match="train_mask selects no node"):
        fit(model, bad, opt, epochs=2, progress=False)
    bad = SimpleNamespace(**{**vars(data), "val_mask": data.val_mask.astype(int)})
    with pytest.raises(ValueError, match="val_mask must be a boolean"):
        fit(model, bad, opt, epochs=2, progress=False)
    x = data.x.copy()
    x[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        fit(model, SimpleNamespace(**{**vars(data), "x": x}), opt, epochs=2, progress=False)
    with pytest.raises(TypeError, match="dataset.x is float64.*float32"):
        fit(model, SimpleNamespace(**{**vars(data), "x": data.x.astype(np.float64)}), opt,
            epochs=2, progress=False)
    with pytest.raises(ValueError, match="dataset.y"):
        fit(model, SimpleNamespace(**{**vars(data), "y": data.y[:5]}), opt, epochs=2,
            progress=False)
    # a checkpoint from another architecture
    path = tmp_path / "other.npz"
    other = gcn()
    fit(other, data, Adam(other), epochs=1, checkpoint=path, progress=False)
    with pytest.raises(ValueError, match="does not match the model"):
        fit(model, data, opt, epochs=2, checkpoint=path, resume=True, progress=False)
