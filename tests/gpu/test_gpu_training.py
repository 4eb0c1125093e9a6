"""Training on the cuda executor: the same models, optimisers, trainer, checkpoints and command
line as on the cpu executor, with every array on the device.

Three epochs of GAT, AGNN and GCN give the cpu executor's weights after every step (float64,
1e-6 relative); once the graph and the parameters are there, a training step copies nothing
to the device and reads back only the numbers it means to, each through the executor's counted
reads (the simulator counts an implicit read too); a checkpoint written on one executor
resumes on the other; the command line trains and infers with ``--executor cuda``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from training_cases import assert_same_weights, train

import gblas_gnn as gg
from gblas_gnn.cli import main
from gblas_gnn.data import csbm
from gblas_gnn.executors import to_numpy
from gblas_gnn.gpu import SIMULATOR
from gblas_gnn.train import Adam, predict, read_checkpoint
from gblas_gnn.train.losses import cross_entropy

SMALL = dict(n=48, classes=3, train_per_class=6, val=12, test=18, features=6, p_in=0.12,
             p_out=0.02, seed=4)


@pytest.fixture(scope="module")
def data():
    return csbm(**SMALL, dtype=np.float64)


@pytest.mark.parametrize("model_name", ["gat", "agnn", "gcn"])
def test_three_epochs_equal_the_cpu_executor(cpu, cuda, data, model_name):
    _, _, h1, w1 = train(model_name, data, cpu, 3)
    _, _, h2, w2 = train(model_name, data, cuda, 3)
    assert_same_weights(w2, w1)
    for metric in ("train_loss", "val_loss", "val_acc", "test_acc"):
        np.testing.assert_allclose(getattr(h2, metric), getattr(h1, metric), rtol=1e-6)


def test_predict_equals_the_cpu_executor(cpu, cuda, data):
    models = [gg.nn.models.build("gat", data.x.shape[1], data.num_classes, seed=2,
                                 dtype=np.float64, executor=ex) for ex in (cpu, cuda)]
    want = predict(models[0], data.graph, data.x)
    got = predict(models[1], data.graph, cuda.asarray(data.x))
    np.testing.assert_allclose(to_numpy(got), want, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("model_name", ["gat", "agnn", "gin", "sgc"])
def test_a_training_step_copies_nothing_but_the_numbers_it_reads(cuda, model_name):
    data = csbm(**SMALL, dtype=np.float32)
    model = gg.nn.models.build(model_name, data.x.shape[1], data.num_classes, seed=0,
                               executor=cuda)
    opt = Adam(model, lr=0.01)
    x, y, mask = (cuda.asarray(a) for a in (data.x, data.y, data.train_mask))

    def step():
        logits = model(data.graph, x)
        _, dlogits = cross_entropy(logits, y, mask, cuda)
        model.backward(dlogits)
        opt.step()

    cuda.transfers.reset()
    step()                      # the graph's structure and edge values move here, once
    assert cuda.transfers.by_reason.get("graph", 0) > 0
    cuda.transfers.reset()
    step()
    t = cuda.transfers
    # nothing moves to the device; what comes back is one number a read, each read on
    # purpose: the NaN/Inf checks of the layers' inputs and of the parameters (rule 5), SGC's
    # cache check, and the loss's count of nodes, label check, finiteness and sum; no
    # implicit read (float() of a device array), which the simulator would count
    assert t.to_device == 0 and set(t.by_reason) <= {"finite", "cache", "labels", "loss"}, t
    assert t.by_reason["loss"] == 3 and t.by_reason["labels"] == 1, t
    assert t.to_host_bytes <= 8 * t.to_host, t
    # the counters see the executor's own copies
    cuda.transfers.reset()
    cuda.to_numpy(cuda.asarray(np.ones(3)))
    assert (cuda.transfers.to_device, cuda.transfers.to_host) == (1, 1)
    # and a host array handed to the model (moved once, counted), and values read back on
    # the host behind the executor's back (in the simulator too: its device arrays are not
    # host arrays)
    cuda.transfers.reset()
    model(data.graph, data.x)
    assert cuda.transfers.by_reason.get("operand", 0) + \
        cuda.transfers.by_reason.get("asarray", 0) == 1, cuda.transfers
    cuda.transfers.reset()
    float(cuda.asarray(np.ones(2)).sum())
    # (the simulator counts the implicit read; a GPU's CuPy makes it without telling)
    want = {"asarray": 1, "implicit": 1} if SIMULATOR else {"asarray": 1}
    assert cuda.transfers.by_reason == want


def test_the_progress_bars_warm_up_slices_the_features_on_the_device(cuda):
    """``fit(..., progress=True)`` first runs the model on a small ring with the first rows
    of ``x``: on the device those rows are sliced there. A host copy of device features is
    what CuPy refuses (the first GPU run failed so), and what the simulator's numpy took
    silently: the model then copied the rows back, which is counted here."""
    from gblas_gnn.train.progress import warm_up

    data = csbm(**SMALL, dtype=np.float32)
    model = gg.nn.models.build("gat", data.x.shape[1], data.num_classes, seed=0,
                               executor=cuda)
    x = cuda.asarray(data.x)
    assert warm_up(model, data.graph, x)        # (the layers' constants move once, here)
    cuda.transfers.reset()
    assert warm_up(model, data.graph, x)
    # the ring's structure moves, and the finiteness checks read one number each
    assert set(cuda.transfers.by_reason) <= {"graph", "finite"}, cuda.transfers


@pytest.mark.parametrize("first, second", [("cuda", "cpu"), ("cpu", "cuda")])
def test_a_checkpoint_resumes_on_the_other_executor(cpu, cuda, data, tmp_path, first, second):
    executors = {"cpu": cpu, "cuda": cuda}
    *_, whole = train("gat", data, cpu, 4)
    path = tmp_path / "ck.npz"
    train("gat", data, executors[first], 2, checkpoint=path)
    assert read_checkpoint(path).epoch == 2
    *_, resumed = train("gat", data, executors[second], 4, checkpoint=path, resume=True)
    assert_same_weights(resumed, whole[2:])


def test_the_command_line_trains_and_infers_on_the_device(cuda, tmp_path, capsys):
    spec = "csbm:" + ",".join(f"{k}={v}" for k, v in SMALL.items() if k != "seed")
    ck, metrics = tmp_path / "ck.npz", tmp_path / "m.json"
    assert main(["train", "--executor", "cuda", "--model", "gat", "--dataset", spec,
                 "--epochs", "3", "--heads", "2", "--checkpoint", str(ck),
                 "--metrics-json", str(metrics), "--no-progress"]) == 0
    acc = json.loads(metrics.read_text())["test_acc"]
    capsys.readouterr()
    assert main(["infer", "--executor", "cpu", "--checkpoint", str(ck)]) == 0
    assert f"{acc * 100:.2f}%" in capsys.readouterr().out


def test_a_model_file_trains_on_the_device_and_infers_on_the_host(cuda, tmp_path, capsys):
    """``--model FILE.py:NAME`` on the cuda executor: the user's module computes with the
    executor it is given; its checkpoint predicts the same on the cpu."""
    from pathlib import Path

    spec = "csbm:" + ",".join(f"{k}={v}" for k, v in SMALL.items() if k != "seed")
    model = f"{Path(__file__).parents[1] / 'model_files' / 'my_models.py'}:TropicalGATv2"
    ck, metrics = tmp_path / "ck.npz", tmp_path / "m.json"
    assert main(["train", "--executor", "cuda", "--model", model, "--dataset", spec,
                 "--epochs", "2", "--checkpoint", str(ck), "--metrics-json", str(metrics),
                 "--no-progress"]) == 0
    acc = json.loads(metrics.read_text())["test_acc"]
    assert "ran on executor cuda, one process" in capsys.readouterr().out
    assert main(["infer", "--executor", "cpu", "--checkpoint", str(ck), "--model",
                 model]) == 0
    assert f"{acc * 100:.2f}%" in capsys.readouterr().out


def test_the_loss_names_the_executor_a_host_array_missed(cuda):
    """Host logits given to the cuda executor's loss are refused by name (they read as a
    shape error before); host labels and mask are taken, each by one counted copy (the
    first GPU run indexed the host labels with the device mask, which CuPy refuses)."""
    logits, y, mask = np.zeros((3, 2)), np.array([0, 1, 1]), np.ones(3, bool)
    with pytest.raises(TypeError, match=r"'cuda' executor \(cupy.ndarray\), got a numpy"):
        cross_entropy(logits, y, mask, cuda)
    logits = cuda.asarray(logits)
    cuda.transfers.reset()
    loss, _ = cross_entropy(logits, y, mask, cuda)
    assert loss == pytest.approx(np.log(2))
    assert cuda.transfers.by_reason.get("asarray") == 2, cuda.transfers
