"""Every layer on the cuda executor equals the cpu executor: the forward, the input gradient
and every parameter gradient (float64, 1e-6 relative; float32 for a few), GAT with 1 and 3
heads, concat and mean, every named aggregation, AGNN with and without W, VA with and without
softmax, GCN, SGC, GIN; semirings in inference. Beside the configurations the grid is held to
(``tests/layer_cases.py``), layers whose features are wider than a lane group, so that every
kernel's loop over feature tiles runs.
"""

from __future__ import annotations

import numpy as np
import pytest
from layer_cases import (
    EDGE_LAYERS,
    LAYERS,
    SELF_LOOPED,
    build,
    case_ids,
    cases,
    close,
    close_gradients,
    edge_case_ids,
    graph_and_inputs,
    graph_with_features,
    in_dim_of,
)

import gblas_gnn as gg
from gblas_gnn.executors import to_numpy
from gblas_gnn.gpu import LANES

WIDE = [  # every feature width above one lane group (4 lanes in the simulator, 32 on a GPU)
    ("GATConv", dict(in_dim=LANES + 3, out_dim=LANES + 2, heads=2)),
    ("GATConv", dict(in_dim=3, out_dim=2 * LANES + 1, heads=1)),                # aggregate first
    ("AGNNConv", dict(in_dim=LANES + 3, out_dim=LANES + 1)),
    ("VAConv", dict(in_dim=LANES + 2, out_dim=3, softmax=True)),
    ("GCNConv", dict(in_dim=LANES + 2, out_dim=LANES + 1)),
]
CASES = cases(LAYERS) + cases(WIDE)


def run(name, kw, aggr, ex, g, H, dtype):
    """Forward and backward of the layer on ``ex`` (dropout keys from the same seed: the same
    masks); host copies of the output, the input gradient and the parameter gradients."""
    layer = build(name, kw, aggr, ex, dtype)
    if hasattr(layer, "dropout_rng"):
        layer.dropout_rng = np.random.default_rng(11)
    out = layer(g, ex.asarray(H))
    dout = np.random.default_rng(8).standard_normal(out.shape).astype(dtype)
    dH = layer.backward(ex.asarray(dout))
    return to_numpy(out), to_numpy(dH), {k: to_numpy(v) for k, v in layer.grads.items()}


def compare(name, kw, aggr, cpu, cuda, dtype=np.float64, rtol=1e-6):
    g, H, _ = graph_and_inputs(7, in_dim_of(kw), 1)
    if dtype != np.float64:
        g = gg.Graph.from_scipy(g.to_scipy().astype(dtype), dtype=dtype)
    want, got = (run(name, kw, aggr, ex, g, H.astype(dtype), dtype) for ex in (cpu, cuda))
    close(got[0], want[0], "forward", rtol)
    close(got[1], want[1], "input gradient", rtol)
    assert got[2].keys() == want[2].keys()
    for k, v in want[2].items():
        close(got[2][k], v, f"gradient of {k}", rtol)


@pytest.mark.parametrize("name, kw, aggr", CASES, ids=case_ids(CASES))
def test_layer_equals_the_cpu_executor(cpu, cuda, name, kw, aggr):
    compare(name, kw, aggr, cpu, cuda)


@pytest.mark.parametrize("name, kw", [LAYERS[1], LAYERS[7], WIDE[0]],
                         ids=["gat", "agnn", "gat-wide"])
def test_float32_layers_equal_the_cpu_executor(cpu, cuda, name, kw):
    compare(name, kw, "sum", cpu, cuda, np.float32, rtol=2e-4)


@pytest.mark.parametrize("name, kw", EDGE_LAYERS, ids=edge_case_ids(EDGE_LAYERS))
def test_edge_feature_layers_equal_the_cpu_executor(cpu, cuda, name, kw):
    """Forward, every gradient and the edge features' own on the device equal the cpu's."""
    g, H = graph_with_features(9, in_dim_of(kw))
    results = []
    for ex in (cpu, cuda):
        layer = build(name, kw, "sum", ex)
        out = layer(g, ex.asarray(H))
        dout = np.random.default_rng(8).standard_normal(out.shape)
        dH = layer.backward(ex.asarray(dout))
        results.append((to_numpy(out), to_numpy(dH), layer.edge_attr_grad,
                        {k: to_numpy(v) for k, v in layer.grads.items()}))
    want, got = results
    for what, a, b in zip(("forward", "input gradient", "features' gradient"), got[:3],
                          want[:3], strict=True):
        close(a, b, what)
    close_gradients(got[3], want[3])


@pytest.mark.parametrize("name, kw", SELF_LOOPED, ids=[n for n, _ in SELF_LOOPED])
def test_attention_layers_run_on_the_pattern_of_a_plus_i(cpu, cuda, name, kw):
    """The device pattern of ``A + I`` comes from the graph's int32 host pattern: no
    ``graphblas.Matrix`` of it is built, and the step equals the cpu executor's."""
    g, H, _ = graph_and_inputs(7, kw["in_dim"], 1)
    got = run(name, kw, "sum", cuda, g, H, np.float64)
    assert not g.with_self_loops().edge_tensor.built
    want = run(name, kw, "sum", cpu, g, H, np.float64)
    for a, b, what in zip(got[:2], want[:2], ("forward", "input gradient"), strict=True):
        close(a, b, what)


@pytest.mark.parametrize("semiring", ["max_plus", "min_times", "avg"])
def test_inference_with_a_semiring(cpu, cuda, semiring):
    g, H, _ = graph_and_inputs(9, LANES + 1, 1)
    outs = []
    for ex in (cpu, cuda):
        layer = gg.nn.GATConv(LANES + 1, 3, heads=2, aggr=semiring, dtype=np.float64,
                              executor=ex).eval()
        outs.append(to_numpy(layer(g, ex.asarray(H))))
    close(outs[1], outs[0], semiring)


def test_results_stay_on_the_device_and_parameters_are_device_arrays(cuda):
    g, H, _ = graph_and_inputs(2, 4, 1)
    layer = gg.nn.GATConv(4, 3, heads=2, dtype=np.float64, executor="cuda")
    assert layer.executor is cuda
    out = layer(g, cuda.asarray(H))
    assert not isinstance(H, cuda.xp.ndarray)        # (the check can fail: H is on the host)
    assert isinstance(out, cuda.xp.ndarray)
    assert all(isinstance(p, cuda.xp.ndarray) for p in layer.params.values())
    layer.backward(cuda.xp.ones_like(out))
    assert all(isinstance(p, cuda.xp.ndarray) for p in layer.grads.values())


def test_a_host_executor_refuses_a_device_array_by_name(cpu, cuda):
    """A device array handed to the cpu executor (a parameter built on the wrong executor)
    is refused with the executor's name, on a GPU as in the simulator, where numpy would
    otherwise take it silently and CuPy's own message names no array."""
    device = cuda.asarray(np.ones((3, 2)))
    with pytest.raises(TypeError, match="GPU's memory was given to the 'cpu' executor"):
        cpu.asarray(device)
    with pytest.raises(TypeError, match="'cpu' executor"):
        gg.nn.Linear(2, 2, dtype=np.float64, executor="cpu").add_param("extra", device)
    np.testing.assert_array_equal(cpu.asarray(to_numpy(device)), np.ones((3, 2)))


def test_a_host_array_given_to_gg_ops_is_copied_to_the_device_and_counted(cuda):
    """gg.ops takes a host numpy array on the cuda executor as a layer does: one counted copy
    to the device for the call, a device result, the cpu executor's values."""
    g, H, _ = graph_and_inputs(2, 4, 1)
    cuda.transfers.reset()
    Z = gg.ops.aggregate(g.A, H, "max", executor=cuda)
    assert isinstance(Z, cuda.xp.ndarray)
    assert cuda.transfers.by_reason.get("asarray") == 1, cuda.transfers
    np.testing.assert_array_equal(to_numpy(Z), gg.ops.aggregate(g.A, H, "max", executor="cpu"))
