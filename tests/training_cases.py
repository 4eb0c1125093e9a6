"""Training runs that other executors are held to the cpu executor on
(``tests/dist/test_dist_training.py``, ``tests/gpu/test_gpu_training.py``)."""

from __future__ import annotations

import numpy as np

import gblas_gnn as gg
from gblas_gnn.executors import to_numpy
from gblas_gnn.train import Adam, fit


def train(model_name: str, dataset, executor, epochs: int, **kw):
    """``(model, optimiser, history, weights)``: a float64 ``model_name`` (seed 1) trained
    with Adam for ``epochs``; ``weights`` holds a host copy of every parameter after each
    epoch."""
    model = gg.nn.models.build(model_name, dataset.x.shape[1], dataset.num_classes, seed=1,
                               dtype=np.float64, executor=executor)
    opt = Adam(model, lr=0.01, weight_decay=5e-4)
    weights = []

    def snapshot(epoch, metrics):
        weights.append({k: np.array(to_numpy(v)) for k, v in model.named_parameters()})

    hist = fit(model, dataset, opt, epochs, progress=False, metrics_callback=snapshot, **kw)
    return model, opt, hist, weights


def assert_same_weights(got, want, rtol=1e-6, atol=1e-9) -> None:
    """Two runs' weights after every epoch agree."""
    assert len(got) == len(want)
    for step, (a, b) in enumerate(zip(want, got, strict=True)):
        for k in a:
            np.testing.assert_allclose(b[k], a[k], rtol=rtol, atol=atol,
                                       err_msg=f"{k} after step {step + 1}")


def gat_paper_rule(val_acc, val_loss, patience):
    """The early-stopping loop of the GAT paper's reference code, transcribed: returns
    (epoch whose weights are kept, last epoch run), 1-based."""
    acc_max, loss_min, saved, bad = 0.0, np.inf, None, 0
    for i, (acc, loss) in enumerate(zip(val_acc, val_loss, strict=True)):
        if acc >= acc_max or loss <= loss_min:
            if acc >= acc_max and loss <= loss_min:
                saved = i + 1
            acc_max, loss_min, bad = max(acc, acc_max), min(loss, loss_min), 0
        else:
            bad += 1
            if bad == patience:
                return saved, i + 1
    return saved, len(val_acc)
