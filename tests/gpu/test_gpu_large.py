"""On a real GPU, on graphs that launch thousands of blocks: every layer, one with edge
features and a composed module equal the cpu executor (float32 to 1e-4 of the largest
value, float64 to 1e-9), forward, input gradient and every parameter gradient.

The simulator runs the same kernels on graphs of tens of vertices (``test_gpu_layers.py``);
these are marked ``gpu`` and skipped without a device (``tests/conftest.py``), and run from
``python -m bench gpu`` on a lent machine.
"""

from __future__ import annotations

import numpy as np
import pytest
from composed import ComposedGAT
from layer_cases import ZERO_GRADIENTS, close

import gblas_gnn as gg
from gblas_gnn.executors import to_numpy

pytestmark = pytest.mark.gpu

N, DEGREE, K, F_E = 20_000, 12, 32, 4
LAYERS = {
    "gat": lambda ex, dt: gg.nn.GATConv(K, K, heads=1, seed=3, dtype=dt, executor=ex),
    "gat-h4": lambda ex, dt: gg.nn.GATConv(K, K // 4, heads=4, seed=3, dtype=dt, executor=ex),
    "gat-max": lambda ex, dt: gg.nn.GATConv(K, K, aggr="max", seed=3, dtype=dt, executor=ex),
    "agnn": lambda ex, dt: gg.nn.AGNNConv(K, seed=3, dtype=dt, executor=ex),
    "gatv2": lambda ex, dt: gg.nn.GATv2Conv(K, K // 2, heads=2, seed=3, dtype=dt,
                                            executor=ex),
    "transformer": lambda ex, dt: gg.nn.TransformerConv(K, K // 2, heads=2, seed=3, dtype=dt,
                                                        executor=ex),
    "gcn": lambda ex, dt: gg.nn.GCNConv(K, K, seed=3, dtype=dt, executor=ex),
    "sage": lambda ex, dt: gg.nn.SAGEConv(K, K, seed=3, dtype=dt, executor=ex),
    "gin": lambda ex, dt: gg.nn.GINConv([K, K, K], train_eps=True, seed=3, dtype=dt,
                                        executor=ex),
}
EDGE_LAYERS = {
    "gat-edges": lambda ex, dt: gg.nn.GATConv(K, K // 2, heads=2, edge_dim=F_E, seed=3,
                                              dtype=dt, executor=ex),
    "gatv2-edges": lambda ex, dt: gg.nn.GATv2Conv(K, K // 2, heads=2, edge_dim=F_E, seed=3,
                                                  dtype=dt, executor=ex),
    "gine": lambda ex, dt: gg.nn.GINEConv([K, K, K], edge_dim=F_E, seed=3, dtype=dt,
                                          executor=ex),
    "transformer-edges": lambda ex, dt: gg.nn.TransformerConv(K, K // 2, heads=2,
                                                              edge_dim=F_E, seed=3, dtype=dt,
                                                              executor=ex),
    "transformer-edges-max": lambda ex, dt: gg.nn.TransformerConv(K, K // 2, heads=2,
                                                                  edge_dim=F_E, aggr="max",
                                                                  seed=3, dtype=dt,
                                                                  executor=ex),
}
TOL = {np.float32: 1e-4, np.float64: 1e-9}


def _graph(dtype, features: bool):
    rng = np.random.default_rng(5)
    m = N * DEGREE
    pairs = np.unique(rng.integers(0, N, (m, 2)), axis=0)
    edge_attr = rng.standard_normal((len(pairs), F_E)) if features else None
    g = gg.Graph.from_edge_index(pairs.T, N, edge_attr=edge_attr, dtype=dtype)
    if features:
        g.edge_attr.requires_grad_()             # their gradient's kernels too
    return g, rng.standard_normal((N, K)).astype(dtype)


def _step(make, ex, dtype, g, H):
    layer = make(ex, dtype)
    out = layer(g, ex.asarray(H))
    dout = np.random.default_rng(8).standard_normal(out.shape).astype(dtype)
    dH = layer.backward(ex.asarray(dout))
    grads = {k: to_numpy(v) for k, v in layer.grads.items()}
    if g.edge_attr is not None:
        grads["edge features"] = to_numpy(layer.edge_attr_grad)
    return to_numpy(out), to_numpy(dH), grads


def _compare(make, cpu, cuda, dtype, features=False):
    g, H = _graph(dtype, features)
    want, got = (_step(make, ex, dtype, g, H) for ex in (cpu, cuda))
    rtol = TOL[dtype]
    close(got[0], want[0], "forward", rtol)
    close(got[1], want[1], "input gradient", rtol)
    assert got[2].keys() == want[2].keys()
    for k, v in want[2].items():
        if k in ZERO_GRADIENTS:
            np.testing.assert_allclose(got[2][k], v, rtol=0, atol=100 * rtol, err_msg=k)
        else:
            close(got[2][k], v, f"gradient of {k}", rtol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_on_a_large_graph_equals_the_cpu_executor(cpu, cuda, name, dtype):
    _compare(LAYERS[name], cpu, cuda, dtype)


@pytest.mark.parametrize("name", list(EDGE_LAYERS))
def test_edge_feature_layer_on_a_large_graph_equals_the_cpu_executor(cpu, cuda, name):
    _compare(EDGE_LAYERS[name], cpu, cuda, np.float32, features=True)


def test_a_composed_module_on_a_large_graph_equals_the_cpu_executor(cpu, cuda):
    """GAT written with ``gg.ops`` (``tests/composed.py``; its backward derived and fused),
    four heads, float32."""
    _compare(lambda ex, dt: ComposedGAT(K, K // 4, heads=4, seed=3, dtype=dt, executor=ex),
             cpu, cuda, np.float32)
