"""Full-batch training on a grid: the same models, optimisers and trainer as one process.

Five epochs of GAT and GCN give the weights of one process after every step (float64,
1e-6 relative) and the same weights on every rank; loss, accuracy and early stopping are
global; a checkpoint is written once, resumes bit-identically on the same grid and carries
over to one process and back.
"""

from __future__ import annotations

import numpy as np
import pytest
from training_cases import assert_same_weights
from training_cases import train as run

import gblas_gnn as gg
from gblas_gnn import dist
from gblas_gnn.data import csbm
from gblas_gnn.executors import CPUExecutor
from gblas_gnn.train import evaluate, load_checkpoint, predict, read_checkpoint

CPU = CPUExecutor()


@pytest.fixture(scope="module")
def data():
    return csbm(n=300, classes=3, train_per_class=15, val=60, test=100, features=12, seed=4,
                dtype=np.float64)


def same_everywhere(dex, arrays) -> bool:
    digest = [float(np.sum(np.abs(a))) + float(np.sum(a)) for a in arrays]
    return all(d == digest for d in dex.grid.allgather(digest, "test.digest"))


@pytest.mark.parametrize("model_name", ["gat", "gcn"])
def test_five_epochs_equal_one_process(dex, data, model_name):
    dg = dist.DistGraph.from_graph(data.graph, dex.grid, relabel=True, seed=3)
    _, _, h1, w1 = run(model_name, data, CPU, 5)
    _, _, h2, w2 = run(model_name, dg.scatter_dataset(data), dex, 5)
    assert_same_weights(w2, w1)
    for metric in ("train_loss", "val_loss", "val_acc", "test_acc"):
        np.testing.assert_allclose(getattr(h2, metric), getattr(h1, metric), rtol=1e-6)
    assert same_everywhere(dex, list(w2[-1].values()))


def test_early_stopping_and_predict_are_global(dex, data):
    dg = dist.DistGraph.from_graph(data.graph, dex.grid)
    local = dg.scatter_dataset(data)
    m1, _, h1, _ = run("gcn", data, CPU, 40, patience=3, monitor="val_acc")
    m2, _, h2, _ = run("gcn", local, dex, 40, patience=3, monitor="val_acc")
    assert h2.stopped_early == h1.stopped_early and h2.best_epoch == h1.best_epoch
    assert len(h2) == len(h1)
    logits = dg.gather(predict(m2, dg, local.x))
    np.testing.assert_allclose(logits, predict(m1, data.graph, data.x), rtol=1e-6, atol=1e-9)
    got, want = evaluate(m2, local), evaluate(m1, data)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-9)


def test_checkpoints_resume_on_the_grid_and_across(dex, data, shared_tmp):
    dg = dist.DistGraph.from_graph(data.graph, dex.grid)
    local = dg.scatter_dataset(data)
    path = shared_tmp / "ck.npz"
    *_, whole = run("gat", local, dex, 5)
    run("gat", local, dex, 3, checkpoint=path)
    dex.grid.barrier()
    assert read_checkpoint(path).epoch == 3
    *_, resumed = run("gat", local, dex, 5, checkpoint=path, resume=True)
    for k in whole[-1]:                                   # bit-identical on the same grid
        np.testing.assert_array_equal(resumed[-1][k], whole[-1][k])
    # a checkpoint of the grid run continues on one process, and one of a single process on
    # the grid: both end where an uninterrupted single-process run ends
    *_, single = run("gat", data, CPU, 5)
    run("gat", local, dex, 3, checkpoint=path)
    dex.grid.barrier()
    # each rank resumes its own copy: single-process runs writing one file would race (a
    # rank starting late read the epoch-5 checkpoint of a faster one and ran no epoch)
    mine = shared_tmp / f"there-{dex.grid.rank}.npz"
    mine.write_bytes(path.read_bytes())
    *_, there = run("gat", data, CPU, 5, checkpoint=mine, resume=True)
    dex.grid.barrier()
    one_path = shared_tmp / f"one-{dex.grid.rank}.npz"
    run("gat", data, CPU, 3, checkpoint=one_path)
    model = gg.nn.models.build("gat", data.x.shape[1], data.num_classes, seed=1,
                               dtype=np.float64, executor=dex)
    load_checkpoint(one_path, model)                       # the single-process format
    *_, back = run("gat", local, dex, 5, checkpoint=one_path, resume=True)
    for k in single[-1]:
        np.testing.assert_allclose(there[-1][k], single[-1][k], rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(back[-1][k], single[-1][k], rtol=1e-6, atol=1e-9)


def test_a_checkpoint_carries_over_between_layouts(dex, data, shared_tmp):
    """A checkpoint holds parameters and the optimiser's state, never a vertex array: one
    written with dense tensors on one layout resumes on the other and ends where the
    uninterrupted run ends (a mixed-layout checkpoint cannot exist)."""
    other = dist.DistExecutor(dex.grid, dense="sharded" if dex.dense == "replicated"
                              else "replicated")
    dg = dist.DistGraph.from_graph(data.graph, dex.grid, relabel=True, seed=3)
    here, there = dg.scatter_dataset(data), dg.laid_out(other.dense).scatter_dataset(data)
    *_, whole = run("gat", here, dex, 5)
    path = shared_tmp / f"layouts-{dex.dense}.npz"
    run("gat", here, dex, 3, checkpoint=path)
    dex.grid.barrier()
    *_, resumed = run("gat", there, other, 5, checkpoint=path, resume=True)
    assert_same_weights(resumed[-1:], whole[-1:])
