"""What fit shows and leaks: the kernel warm-up, the progress bar, numpy's overflow warnings."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from test_train_trainer import gcn, synthetic

from gblas_gnn.cli import main
from gblas_gnn.nn.module import Module
from gblas_gnn.train import SGD, Adam, fit, named_modules, rng_states
from gblas_gnn.train.progress import warm_up

SMALL = "csbm:n=300,classes=3,train_per_class=10,val=60,test=100,features=16"


@pytest.fixture(scope="module")
def data():
    return synthetic()


def test_overflow_warnings_do_not_leak(data, recwarn):
    model = gcn()
    with pytest.raises(FloatingPointError, match="a floating-point overflow or NaN"):
        fit(model, data, SGD(model, lr=1e30), epochs=5, progress=False)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    # numpy's error state is the caller's again
    assert np.geterr()["over"] == "warn"


@pytest.mark.parametrize("model", ["gat", "gcn", "sgc"])
def test_command_line_divergence_is_one_line(model, capsys, recwarn):
    code = main(["train", "--model", model, "--dataset", SMALL, "--lr", "1e30",
                 "--epochs", "5", "--no-progress"])
    err = capsys.readouterr().err
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    if code:      # sgc: Adam's second moment overflows to Inf, the weights stay finite
        assert code == 1 and err.count("\n") == 1 and "RuntimeWarning" not in err
        assert err.startswith("gblas-gnn: non-finite") and "smaller learning rate" in err


def small_gat(data, seed=3):
    from gblas_gnn.nn.models import gat

    return gat(data.x.shape[1], data.num_classes, hidden=4, heads=2, dropout=0.5, seed=seed)


def run(data, make, **kw):
    model = make(data)
    hist = fit(model, data, Adam(model, lr=0.01), **kw)
    hist_dict = hist.to_dict()
    del hist_dict["epoch_time"]
    return {k: v.copy() for k, v in model.named_parameters()}, hist_dict


@pytest.mark.parametrize("make", [small_gat, lambda data: gcn()], ids=["gat", "gcn"])
def test_the_warm_up_changes_nothing(data, make, capsys):
    """Dropout masks, attention dropout, cached normalisations: a run with the bar (and its
    warm-up) ends with the same bits as one without."""
    kw = dict(epochs=8, patience=3, monitor="val_loss")
    quiet = run(data, make, progress=False, **kw)
    shown = run(data, make, progress=True, **kw)
    assert "compiling kernels" in capsys.readouterr().err
    assert quiet[1] == shown[1]
    for k, v in quiet[0].items():
        np.testing.assert_array_equal(shown[0][k], v, err_msg=k)


def test_resume_with_the_bar_is_bit_identical(data, tmp_path):
    kw = dict(epochs=10, patience=50, restore_best=False, progress=True)
    ref = run(data, small_gat, **kw)
    ck = tmp_path / "ck.npz"
    run(data, small_gat, checkpoint=ck, **{**kw, "epochs": 4})
    resumed = run(data, small_gat, checkpoint=ck, resume=True, **kw)
    assert ref[1] == resumed[1]
    for k, v in ref[0].items():
        np.testing.assert_array_equal(resumed[0][k], v, err_msg=k)


def test_warm_up_restores_generators_gradients_and_mode(data):
    model = small_gat(data)
    model.eval()
    for _, m in named_modules(model):
        for k in m.grads:
            m.grads[k] = np.full_like(m.grads[k], 7.0)
    states = rng_states(model)
    assert warm_up(model, data.graph, data.x) is True
    assert rng_states(model) == states and model.training is False
    assert all((grad == 7.0).all() for _, grad in model.named_grads())
    assert all(m._cache is None for _, m in named_modules(model))


@pytest.mark.cpu_only
def test_threads_are_chosen_as_for_a_larger_program():
    from gblas_gnn.executors.cpu.programs import SERIAL_WORK_BELOW, serial, sized_like

    small = SERIAL_WORK_BELOW // 64
    assert serial(small)
    with sized_like(100.0):
        assert not serial(small) and serial(small // 2)
        with sized_like(1.0):
            assert serial(small)
    assert serial(small)


def test_the_warm_up_compiles_the_real_graphs_drivers(data, monkeypatch):
    """One thread or several is chosen as for the real graph's edges: a graph above the
    one-thread size compiles the kernels' drivers in the warm-up, not in the first epoch
    (the command line's default GAT compiled its parallel kernels there once: 17 s of
    warm-up, then 48 s)."""
    import gblas_gnn.train.progress as progress

    seen = []
    real = progress.sized_like

    def spy(factor):
        seen.append(factor)
        return real(factor)

    monkeypatch.setattr(progress, "sized_like", spy)
    assert warm_up(small_gat(data), data.graph, data.x) is True
    ring_edges = 2 * min(data.graph.n, progress.WARM_UP_VERTICES)
    assert seen == [data.graph.nnz / ring_edges]


class PerVertex(Module):
    """A transductive model with one learnt row per vertex: it cannot run on another graph."""

    def __init__(self, n, k):
        super().__init__()
        self.params["E"] = np.zeros((n, k), np.float32)
        self.zero_grad()

    def forward(self, g, H):
        if H.shape[0] != self.params["E"].shape[0]:
            raise ValueError("wrong number of vertices")
        return H + self.params["E"]

    def backward(self, dout):
        self.grads["E"] = dout
        return dout


def test_warm_up_skips_a_model_that_needs_the_real_graph(data, capsys):
    three = SimpleNamespace(**{**vars(data), "x": data.x[:, :3].copy()})   # logits: 3 classes
    model = PerVertex(*three.x.shape)
    assert warm_up(model, three.graph, three.x) is False
    fit(model, three, Adam(model, lr=0.01), epochs=2, progress=True)
    assert "compiling kernels (numba, cached after the first run)... skipped" in \
        capsys.readouterr().err


class Broken(PerVertex):
    """A model whose forward fails for a reason other than the graph's size (a bug)."""

    def forward(self, g, H):
        raise RuntimeError("a bug in the model")


def test_warm_up_lets_a_real_error_through_and_still_restores_the_model(data):
    """Only a model that cannot run on the small graph (a shape error) is skipped; any other
    failure is the caller's to see, and the warm-up still puts the model back."""
    model = Broken(*data.x.shape)
    model.eval()
    model.grads["E"] = np.full_like(model.grads["E"], 7.0)
    with pytest.raises(RuntimeError, match="a bug in the model"):
        warm_up(model, data.graph, data.x)
    assert model.training is False and (model.grads["E"] == 7.0).all()


def test_bar_with_early_stopping_counts_epochs_and_patience(data, capsys):
    model = gcn()
    hist = fit(model, data, Adam(model, lr=0.05), epochs=10_000, patience=3,
               monitor="val_loss", progress=True)
    assert hist.stopped_early
    err = capsys.readouterr().err
    frames = err.replace("\r", "\n").splitlines()
    assert frames[0].startswith("train: compiling kernels") and frames[0].endswith(" s")
    bar = [f for f in frames if f.startswith("train (early stopping, at most 10000 epochs)")]
    assert bar and "%" not in "".join(bar)
    last = bar[-1]
    assert f"epoch {len(hist)} " in last and "stop_in=0" in last
    assert f"best={hist.best_epoch}" in last
    assert err.endswith("\n")                                    # closed cleanly
