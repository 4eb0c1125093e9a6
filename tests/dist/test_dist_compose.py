"""Compositions on a grid equal one process: every derived rule (``tests/compose_rules.py``)
and the composed layers (the built-in ones written as compositions, ``tests/composed.py``),
forward and every gradient, float64 (the max/min ones also in evaluation); and a composed
GAT moves no more bytes than the built-in ``GATConv``.

Run as ``mpiexec -n P python -m mpi4py -m pytest --executor dist tests/dist`` (P = 4, 9 from
``tests/test_mpi.py``); the ordinary run checks the 1×1 grid.
"""

from __future__ import annotations

import numpy as np
import pytest
from compose_rules import RULES, inputs
from composed import ComposedAGNN, ComposedGAT, ComposedVA
from layer_cases import close, graph_and_inputs

import gblas_gnn as gg
from gblas_gnn import compose, dist
from gblas_gnn.executors import CPUExecutor

CPU = CPUExecutor()


def _run(rule, ex, A, args, params):
    return compose.vjp(lambda *a: rule(A, *a), *args, params, executor=ex,
                       vertex=(0, 1, 2, 3))


@pytest.mark.parametrize("rule", RULES, ids=[r.__name__ for r in RULES])
def test_rule_on_a_grid_equals_one_process(dex, rule):
    g, arrays, params = inputs(17)
    args = [arrays[k] for k in ("X", "Y", "u", "v")]
    out, pull = _run(rule, CPU, g.A, args, params)
    R = np.random.default_rng(3).standard_normal(out.shape)
    grads = pull(R)
    dg = dist.DistGraph.from_graph(g, dex.grid, relabel=True, seed=4)
    got, pull = _run(rule, dex, dg.A, [dg.scatter(a) for a in args], params)
    got_grads = pull(dg.scatter(R))
    close(dg.gather(got), out, f"{rule.__name__}: forward")
    for k in range(4):
        close(dg.gather(got_grads[k]), grads[k], f"{rule.__name__}: argument {k}")
    for key, value in grads[4].items():
        close(got_grads[4][key], value, f"{rule.__name__}: parameter {key}")


LAYERS = [(gg.nn.GATv2Conv, dict(in_dim=5, out_dim=3, heads=2), "max"),
          (gg.nn.TransformerConv, dict(in_dim=5, out_dim=3, heads=2, concat=False), "mean"),
          (ComposedGAT, dict(in_dim=5, out_dim=3, heads=2, dropout=0.4), "sum"),
          (ComposedAGNN, dict(in_dim=5, out_dim=4), "min"),
          (ComposedVA, dict(in_dim=5, out_dim=4, softmax=True), "sum")]


@pytest.mark.parametrize("cls, kw, aggr", LAYERS, ids=[c.__name__ for c, _, _ in LAYERS])
def test_composed_layer_on_a_grid_equals_one_process(dex, cls, kw, aggr):
    g, H, _ = graph_and_inputs(7, kw["in_dim"], 1)
    one = cls(**kw, aggr=aggr, dtype=np.float64, seed=3, executor=CPU)
    grid_layer = cls(**kw, aggr=aggr, dtype=np.float64, seed=3, executor=dex)
    for m in (one, grid_layer):
        if hasattr(m, "dropout_rng"):
            m.dropout_rng = np.random.default_rng(11)
    out = one(g, H)
    dout = np.random.default_rng(8).standard_normal(out.shape)
    dH = one.backward(dout)
    dg = dist.DistGraph.from_graph(g, dex.grid, relabel=True, seed=5)
    got = grid_layer(dg, dg.scatter(H))
    got_dH = grid_layer.backward(dg.scatter(dout))
    close(dg.gather(got), out, "forward")
    close(dg.gather(got_dH), dH, "input gradient")
    for k, v in one.grads.items():
        if k == "b_k":          # zero in exact arithmetic (softmax ignores a per-row shift)
            np.testing.assert_allclose(grid_layer.grads[k], v, atol=1e-12)
        else:
            close(grid_layer.grads[k], v, f"gradient of {k}")


EXTREME_LAYERS = [case for case in LAYERS if case[2] in ("max", "min")]


@pytest.mark.parametrize("cls, kw, aggr", EXTREME_LAYERS,
                         ids=[c.__name__ for c, _, _ in EXTREME_LAYERS])
def test_composed_layer_in_evaluation_on_a_grid_equals_one_process(dex, cls, kw, aggr):
    """Evaluation (no backward follows) of a max/min composition: one process skips the
    winners, a grid of more than one process still records them (they complete its
    rows)."""
    g, H, _ = graph_and_inputs(7, kw["in_dim"], 1)
    one = cls(**kw, aggr=aggr, dtype=np.float64, seed=3, executor=CPU).eval()
    grid_layer = cls(**kw, aggr=aggr, dtype=np.float64, seed=3, executor=dex).eval()
    dg = dist.DistGraph.from_graph(g, dex.grid, relabel=True, seed=5)
    close(dg.gather(grid_layer(dg, dg.scatter(H))), one(g, H), "forward")


def test_composed_gat_moves_no_more_than_the_builtin_layer(dex):
    """The composed GAT (two per-vertex score vectors named by the composition) moves at
    most the bytes of the built-in ``GATConv`` plus those vectors, on every rank."""
    g, H, _ = graph_and_inputs(9, 5, 1)
    dg = dist.DistGraph.from_graph(g, dex.grid)
    Hl = dg.scatter(H)
    sent = {}
    for cls in (gg.nn.GATConv, ComposedGAT):
        layer = cls(5, 3, heads=2, dtype=np.float64, seed=3, executor=dex)
        layer(dg, Hl)
        layer.backward(np.ones((dg.n_local, 6)))          # caches built, as in training
        dex.grid.reset_comm_stats()
        out = layer(dg, Hl)
        layer.backward(np.ones_like(out))
        sent[cls] = dex.grid.comm_stats()["bytes_sent"]
    vectors = 2 * 2 * 8 * (dg.n_local + dg.A.ncols)       # d and s per head, both sides
    assert sent[ComposedGAT] <= sent[gg.nn.GATConv] + vectors
