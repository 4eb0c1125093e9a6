"""Every layer on a grid equals the single-process cpu executor: the forward, the input
gradient and every parameter gradient (float64, 1e-6 relative), on a random directed graph
with isolated vertices and n not divisible by q, with and without relabelling.

Run as ``mpiexec -n P python -m mpi4py -m pytest --executor dist tests/dist`` (P = 4, 9 from
``tests/test_mpi.py``); the ordinary run checks the 1×1 grid.
"""

from __future__ import annotations

import numpy as np
import pytest

import gblas_gnn as gg
from gblas_gnn import dist
from gblas_gnn.executors import CPUExecutor

CPU = CPUExecutor()
N = 23                    # not divisible by 2 or 3
ISOLATED = (20, 21, 22)   # no in- or out-edges

LAYERS = [
    ("GATConv", dict(in_dim=5, out_dim=3, heads=1)),
    ("GATConv", dict(in_dim=5, out_dim=3, heads=3, concat=True)),
    ("GATConv", dict(in_dim=5, out_dim=3, heads=3, concat=False)),
    ("GATConv", dict(in_dim=2, out_dim=4, heads=1)),                 # aggregate first
    ("GATConv", dict(in_dim=5, out_dim=3, heads=2, dropout=0.4)),
    ("GATConv", dict(in_dim=5, out_dim=3, heads=2, add_self_loops=False)),
    ("AGNNConv", dict(in_dim=5)),
    ("AGNNConv", dict(in_dim=5, out_dim=4)),
    ("VAConv", dict(in_dim=5, out_dim=4)),
    ("VAConv", dict(in_dim=5, out_dim=4, softmax=True)),
    ("GCNConv", dict(in_dim=5, out_dim=4)),
    ("GCNConv", dict(in_dim=3, out_dim=6, normalize=False)),
    ("SGConv", dict(in_dim=5, out_dim=4, K=2)),
    ("GINConv", dict(mlp_dims=[5, 6, 4], train_eps=True)),
]
ATTENTION = {"GATConv", "AGNNConv", "VAConv"}


def graph_and_inputs(seed: int, in_dim: int, out_dim: int):
    rng = np.random.default_rng(seed)
    active = N - len(ISOLATED)
    src, dst = rng.integers(0, active, 70), rng.integers(0, active, 70)
    g = gg.Graph.from_edges(src, dst, N, values=rng.uniform(0.5, 2, 70), dtype=np.float64)
    return g, rng.standard_normal((N, in_dim)), rng.standard_normal((N, out_dim))


def build(name, kw, aggr, executor):
    kw = dict(kw)
    if name in ATTENTION:
        kw["aggr"] = aggr
    return getattr(gg.nn, name)(**kw, dtype=np.float64, seed=3, executor=executor)


def close(got, want, what):
    scale = max(float(np.abs(want).max()), 1e-12)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * scale, err_msg=what)


CASES = [(name, kw, aggr) for name, kw in LAYERS
         for aggr in (("sum", "max", "min", "mean") if name in ATTENTION else ("sum",))]


@pytest.mark.parametrize("relabel", [False, True])
@pytest.mark.parametrize("name, kw, aggr", CASES,
                         ids=[f"{n}-{i}-{a}" for i, (n, _, a) in enumerate(CASES)])
def test_layer_equals_one_process(dex, name, kw, aggr, relabel):
    one = build(name, kw, aggr, CPU)
    grid_layer = build(name, kw, aggr, dex)
    in_dim = kw.get("in_dim", kw.get("mlp_dims", [0])[0])
    g, H, _ = graph_and_inputs(7, in_dim, 1)
    out = one(g, H)
    dout = np.random.default_rng(8).standard_normal(out.shape)
    dH = one.backward(dout)
    dg = dist.DistGraph.from_graph(g, dex.grid, relabel=relabel, seed=5)
    if "dropout" in kw:                         # the same key: the same mask on every grid
        grid_layer.dropout_rng = np.random.default_rng(11)
        one.dropout_rng = np.random.default_rng(11)
        out, dH = one(g, H), one.backward(dout)
    got = grid_layer(dg, dg.scatter(H))
    got_dH = grid_layer.backward(dg.scatter(dout))
    close(dg.gather(got), out, "forward")
    close(dg.gather(got_dH), dH, "input gradient")
    assert grid_layer.grads.keys() == one.grads.keys()
    for k, v in one.grads.items():
        close(grid_layer.grads[k], v, f"gradient of {k}")
    # parameters and their gradients are the same on every rank
    digests = dex.grid.allgather([float(np.sum(v)) for v in grid_layer.grads.values()], "t")
    assert all(d == digests[0] for d in digests)


@pytest.mark.parametrize("aggr", ["sum", "max", "mean"])
def test_inference_with_a_semiring_and_named_aggregations(dex, aggr):
    g, H, _ = graph_and_inputs(9, 4, 1)
    dg = dist.DistGraph.from_graph(g, dex.grid)
    for sr in (aggr, "max_plus", "avg"):
        one = gg.nn.VAConv(4, 3, aggr=sr, dtype=np.float64, executor=CPU).eval()
        grid_layer = gg.nn.VAConv(4, 3, aggr=sr, dtype=np.float64, executor=dex).eval()
        if sr == "avg":                        # avg needs nonnegative attention weights
            one.softmax = grid_layer.softmax = True
        close(dg.gather(grid_layer(dg, dg.scatter(H))), one(g, H), sr)


def test_scatter_gather_round_trip_and_errors(dex):
    g, H, _ = graph_and_inputs(1, 3, 1)
    for relabel in (False, True):
        dg = dist.DistGraph.from_graph(g, dex.grid, relabel=relabel, seed=2)
        local = dg.scatter(H)
        assert local.shape == (dg.n_local, 3) and dg.n == N and dg.nnz == g.nnz
        np.testing.assert_array_equal(dg.gather(local), H)
        np.testing.assert_array_equal(local, H[dg.vertex_ids])
        with pytest.raises(ValueError, match="global array"):
            dg.scatter(H[:-1])
        with pytest.raises(ValueError, match="rows"):
            dg.gather(local[:-1] if dg.n_local else np.zeros((1, 3)))
    assert dg.imbalance() >= 1.0


def test_layer_input_errors_reach_every_rank(dex):
    g, H, _ = graph_and_inputs(2, 4, 1)
    dg = dist.DistGraph.from_graph(g, dex.grid)
    layer = gg.nn.GATConv(4, 2, dtype=np.float64, executor=dex)
    with pytest.raises(ValueError, match="columns"):
        layer(dg, dg.scatter(H)[:, :3])
    with pytest.raises(ValueError, match="rows"):
        layer(dg, np.zeros((dg.n_local + 1, 4)))
    bad = dg.scatter(H)
    if dex.grid.rank == 0 and bad.size:           # one rank's input is bad: all raise
        bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        layer(dg, bad)
