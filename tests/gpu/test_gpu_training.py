"""Training on the cuda executor: the same models, optimisers, trainer, checkpoints and command
line as on the cpu executor, with every array on the device.

Three epochs of GAT, AGNN and GCN give the cpu executor's weights after every step (float64,
1e-6 relative); a training step copies nothing between host and device once the graph and
the parameters are there; a checkpoint written on one executor resumes on the other; the
command line trains and infers with ``--executor cuda``.
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


def test_a_training_step_copies_nothing_between_host_and_device(cuda):
    data = csbm(**SMALL, dtype=np.float32)
    model = gg.nn.models.build("gat", data.x.shape[1], data.num_classes, seed=0,
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
    assert cuda.transfers.total == 0, cuda.transfers
    # the counters see the executor's own copies
    cuda.to_numpy(cuda.asarray(np.ones(3)))
    assert (cuda.transfers.to_device, cuda.transfers.to_host) == (1, 1)


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
