"""Edge features: the graph keeps them per edge, the self loops get PyG's ``fill_value``
features, and the layers that read them (``GATConv``, ``GATv2Conv``, ``TransformerConv``
with ``edge_dim``, ``GINEConv``) equal PyTorch Geometric's with copied weights in float64:
output, the input's gradient, every parameter's and the edge features' own (through the
loops' fill rule), on a graph with existing self loops and isolated vertices, on the executor
under test; messages computed at the edges against a per-edge loop and central differences;
bad input.
"""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import numerical_grad

import gblas_gnn as gg
from gblas_gnn import compose, ops
from gblas_gnn.nn.pyg import from_pyg
from gblas_gnn.ops import rep

torch = pytest.importorskip("torch")
pyg = pytest.importorskip("torch_geometric.nn")
pyg_utils = pytest.importorskip("torch_geometric.utils")

N = 12                   # vertex 11 has no edge; vertex 10 only an out-edge; loops at 3 and 5
F_E = 3


def _edges(seed: int = 0):
    rng = np.random.default_rng(seed)
    pairs = {(int(s), int(t)) for s, t in rng.integers(0, N - 2, size=(40, 2))}
    pairs |= {(3, 3), (5, 5), (10, 4)}
    order = rng.permutation(len(pairs))              # given in no particular order
    edge_index = np.array(sorted(pairs)).T[:, order]
    return edge_index, rng.standard_normal((edge_index.shape[1], F_E))


def _graph(seed: int = 0, dtype=np.float64):
    edge_index, attr = _edges(seed)
    return gg.Graph.from_edge_index(edge_index, N, edge_attr=attr, dtype=dtype), edge_index, attr


# ---------------------------------------------------------------------- the graph
def test_features_are_kept_per_edge_in_the_patterns_order():
    g, edge_index, attr = _graph()
    feats = g.edge_attr
    assert feats.shape == (N, N, F_E) and feats.nvals == g.nnz == edge_index.shape[1]
    rows, cols, _ = g.A.to_coo()                      # CSR order: targets, then sources
    by_pair = {(int(t), int(s)): attr[k] for k, (s, t) in enumerate(edge_index.T)}
    np.testing.assert_array_equal(feats.values, [by_pair[int(i), int(j)]
                                                 for i, j in zip(rows, cols, strict=True)])
    np.testing.assert_array_equal(feats.given(), attr)
    assert "edge_attr=3" in repr(g)


def test_features_survive_files_and_dtypes(tmp_path):
    g, _, attr = _graph(1)
    g.save_npz(tmp_path / "g.npz")
    back = gg.Graph.from_npz(tmp_path / "g.npz", dtype=np.float64)
    np.testing.assert_array_equal(back.edge_attr.values, g.edge_attr.values)
    g32 = gg.Graph.from_edge_index(_edges(1)[0], N, edge_attr=attr.astype(np.float32))
    wide = g32.astype(np.float64)
    assert wide.edge_attr.dtype == np.float64
    np.testing.assert_array_equal(wide.edge_attr.values, g32.edge_attr.values)
    one = gg.Graph.from_edges(np.array([0, 1]), np.array([1, 2]), 3,
                              edge_attr=np.array([2.0, 3.0]))
    assert one.edge_attr.f == 1                       # a 1-D edge_attr: one feature an edge


@pytest.mark.parametrize("fill", ["mean", "add", "max", "min", 0.5, "vector"])
def test_the_loops_features_are_pygs(fill):
    g, edge_index, attr = _graph(2)
    value = np.array([1.0, -2.0, 0.25]) if fill == "vector" else fill
    looped = g.with_self_loops(value)
    ei, ea = pyg_utils.remove_self_loops(torch.from_numpy(edge_index), torch.from_numpy(attr))
    ei, ea = pyg_utils.add_self_loops(ei, ea, fill_value=torch.from_numpy(value)
                                      if fill == "vector" else value, num_nodes=N)
    want = gg.Graph.from_edge_index(ei.numpy(), N, edge_attr=ea.numpy(), dtype=np.float64)
    assert looped.edge_tensor.pattern.nnz == want.nnz
    np.testing.assert_allclose(looped.edge_attr.values, want.edge_attr.values, rtol=1e-12)
    assert g.with_self_loops(value) is looped and looped.with_self_loops(value) is looped


def test_a_duplicate_pair_with_features_is_refused():
    with pytest.raises(ValueError, match="duplicate edge 1 -> 2"):
        gg.Graph.from_edges(np.array([0, 1, 1]), np.array([1, 2, 2]), 3,
                            edge_attr=np.ones((3, 2)))


@pytest.mark.parametrize("attr,error,match", [
    (np.ones((4, 2)), ValueError, "3 edges"),
    (np.array([[1.0], [np.nan], [0.0]]), ValueError, "NaN"),
    (np.ones((3, 2, 2)), ValueError, r"\(m, f\)"),
    (np.array([["a"], ["b"], ["c"]]), TypeError, "real numbers"),
])
def test_bad_features_are_refused(attr, error, match):
    with pytest.raises(error, match=match):
        gg.Graph.from_edges(np.array([0, 1, 2]), np.array([1, 2, 0]), 3, edge_attr=attr)


def test_fill_values_and_symmetrize_are_checked():
    g, _, _ = _graph()
    for bad, match in [("median", "fill_value must be one of"), (np.inf, "finite"),
                       (np.ones(2), r"shape \(3,\)")]:
        with pytest.raises(ValueError, match=match):
            g.with_self_loops(bad)
    with pytest.raises(ValueError, match="two sets of features"):
        g.symmetrize()


# ---------------------------------------------------------------------- the layers
def _randomize(conv, seed=1):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in conv.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.5)
    return conv


#: PyG layer -> our parameter name -> theirs (weights transposed where ours are (in, out))
LAYERS = {
    "gat": (lambda: pyg.GATConv(5, 4, heads=2, edge_dim=F_E, negative_slope=0.15),
            {"W": "lin.weight", "att_src": "att_src", "att_dst": "att_dst", "bias": "bias",
             "W_e": "lin_edge.weight", "att_edge": "att_edge"}),
    "gat-max-fill": (lambda: pyg.GATConv(5, 4, heads=1, concat=False, edge_dim=F_E,
                                         fill_value="max"),
                     {"W": "lin.weight", "W_e": "lin_edge.weight", "att_edge": "att_edge"}),
    "gatv2": (lambda: pyg.GATv2Conv(5, 4, heads=2, edge_dim=F_E, fill_value="add"),
              {"W_l": "lin_l.weight", "W_r": "lin_r.weight", "b_l": "lin_l.bias",
               "att": "att", "W_e": "lin_edge.weight"}),
    "gatv2-constant-fill": (lambda: pyg.GATv2Conv(5, 4, heads=1, edge_dim=F_E,
                                                  fill_value=0.5, share_weights=True),
                            {"W_l": "lin_l.weight", "W_e": "lin_edge.weight"}),
    "transformer": (lambda: pyg.TransformerConv(5, 4, heads=2, edge_dim=F_E),
                    {"W_q": "lin_query.weight", "W_k": "lin_key.weight",
                     "W_v": "lin_value.weight", "b_v": "lin_value.bias",
                     "W_e": "lin_edge.weight", "W_skip": "lin_skip.weight"}),
    "transformer-mean": (lambda: pyg.TransformerConv(5, 4, heads=2, edge_dim=F_E,
                                                     concat=False, aggr="mean"),
                         {"W_v": "lin_value.weight", "W_e": "lin_edge.weight"}),
    # max: the messages V_j + W_e e_ji at the edges (sum and mean move the edge term out)
    "transformer-max": (lambda: pyg.TransformerConv(5, 4, heads=2, edge_dim=F_E, aggr="max"),
                        {"W_q": "lin_query.weight", "W_v": "lin_value.weight",
                         "W_e": "lin_edge.weight"}),
    "gine": (lambda: pyg.GINEConv(pyg.MLP([5, 6, 4], norm=None), edge_dim=F_E,
                                  train_eps=True),
             {"lin0_W": "nn.lins.0.weight", "lin1_bias": "nn.lins.1.bias",
              "W_e": "lin.weight", "b_e": "lin.bias", "eps": "eps"}),
}


@pytest.mark.parametrize("name, derived", [(name, True) for name in LAYERS] +
                         [("transformer", False)])
def test_layers_equal_pyg_with_every_gradient(executor, name, derived):
    """Every layer with every gradient, the edge features' included (``derived``); features
    read as data take other kernels (TransformerConv's ``sum``: one program for both of its
    aggregations, :func:`gblas_gnn.ops.aggregate_with_edges`), equal to PyG as well."""
    make, names = LAYERS[name]
    conv = _randomize(make().double())
    layer = from_pyg(conv)                  # on the executor under test (the default)
    assert layer.executor is executor
    g, edge_index, attr = _graph(3)
    g.edge_attr.requires_grad_(derived)
    x0 = np.random.default_rng(4).standard_normal((N, 5))
    x = torch.tensor(x0, requires_grad=True)
    ea = torch.tensor(attr, requires_grad=True)
    want = conv(x, torch.from_numpy(edge_index), ea)
    got = gg.to_numpy(layer(g, executor.asarray(x0)))
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-10, atol=1e-12)
    R = np.random.default_rng(5).standard_normal(got.shape)
    (want * torch.from_numpy(R)).sum().backward()
    dx = gg.to_numpy(layer.backward(executor.asarray(R)))
    np.testing.assert_allclose(dx, x.grad.numpy(), rtol=1e-9, atol=1e-11)
    if derived:
        np.testing.assert_allclose(layer.edge_attr_grad, ea.grad.numpy(), rtol=1e-9,
                                   atol=1e-11)
    theirs = dict(conv.named_parameters())
    for ours, key in names.items():
        want_g = theirs[key].grad.numpy()
        want_g = want_g.T if ours.startswith("W") or ours.endswith("_W") else \
            want_g.reshape(np.shape(layer.grads[ours]))
        np.testing.assert_allclose(gg.to_numpy(layer.grads[ours]), want_g, rtol=1e-9,
                                   atol=1e-11, err_msg=ours)


@pytest.mark.parametrize("name", ["gat", "gatv2", "transformer", "gine"])
def test_features_read_as_data_change_no_other_gradient(executor, name):
    """By default the features are data (as a torch tensor without ``requires_grad``): the
    backward derives no gradient for them, says so when asked, and every other gradient is
    the one of a backward that derives it. The flag is the given features', read through
    the self loops and another dtype."""
    g, _, _ = _graph(3, dtype=np.float32)
    x = executor.asarray(np.random.default_rng(4).standard_normal((N, 5)))
    R = executor.asarray(np.random.default_rng(5).standard_normal((N, 8 if name in (
        "gat", "gatv2", "transformer") else 4)))
    runs = []
    for wanted in (False, True):
        layer = from_pyg(_randomize(LAYERS[name][0]().double()))
        g.edge_attr.requires_grad = wanted
        layer(g, x)
        runs.append((gg.to_numpy(layer.backward(R)), layer))
    (dx0, data), (dx1, derived) = runs
    assert g.with_self_loops().edge_attr.requires_grad           # the flag read through
    assert g.astype(np.float64).edge_attr.requires_grad
    np.testing.assert_allclose(dx0, dx1, rtol=1e-12, atol=1e-13)
    for k, v in derived.grads.items():
        np.testing.assert_allclose(gg.to_numpy(data.grads[k]), gg.to_numpy(v), rtol=1e-12,
                                   atol=1e-13, err_msg=k)
    assert derived.edge_attr_grad.shape == (g.edge_attr.nvals, F_E)
    with pytest.raises(RuntimeError, match=r"requires_grad_\(\) before the forward"):
        _ = data.edge_attr_grad
    with pytest.raises(TypeError, match="True or False"):
        g.edge_attr.requires_grad = "yes"
    assert g.edge_attr.requires_grad_(False) is g.edge_attr
    assert not g.with_self_loops().edge_attr.requires_grad


@pytest.mark.parametrize("name", ["gat", "gatv2", "transformer", "gine"])
def test_both_ways_through_pyg(name):
    conv = _randomize(LAYERS[name][0]().double())
    layer = from_pyg(conv)
    _randomize_ours(layer)
    back = layer.to_pyg()
    assert type(back) is type(conv) and not back.training
    g, edge_index, attr = _graph(6)
    x = np.random.default_rng(7).standard_normal((N, 5))
    with torch.no_grad():
        theirs = back(torch.from_numpy(x), torch.from_numpy(edge_index),
                      torch.from_numpy(attr)).numpy()
    np.testing.assert_allclose(layer.eval()(g, x), theirs, rtol=1e-10, atol=1e-12)


def _randomize_ours(layer):
    rng = np.random.default_rng(8)
    for p in layer.params.values():
        p[...] = rng.standard_normal(p.shape) * 0.5


def test_a_layer_reads_features_of_its_width_only():
    g, _, _ = _graph()
    plain = gg.Graph.from_edges(np.array([0, 1]), np.array([1, 2]), 3, dtype=np.float64)
    layer = gg.nn.GATv2Conv(5, 2, edge_dim=F_E, dtype=np.float64)
    with pytest.raises(ValueError, match="needs a graph with edge features"):
        layer(plain, np.ones((3, 5)))
    with pytest.raises(ValueError, match="edge features of width 3"):
        gg.nn.GATConv(5, 2, edge_dim=4, dtype=np.float64)(g, np.ones((N, 5)))
    with pytest.raises(ValueError, match="which need edge_dim"):
        gg.nn.GATConv(5, 2, fill_value="max")
    with pytest.raises(ValueError, match="edge_dim must be"):
        gg.nn.TransformerConv(5, 2, edge_dim=0)
    with pytest.raises(ValueError, match="aggr 'sum', 'mean', 'max' or 'min'"):
        gg.nn.TransformerConv(5, 2, edge_dim=3, aggr="max_plus")


# ---------------------------------------------------------------------- messages at the edges
def _loop_messages(edge_index, attr, X, W, b, aggr, n=N):
    """``⊕_j ReLU(X_j + e_ji W + b)`` vertex by vertex (an empty row gives 0)."""
    out = np.zeros((n, W.shape[1]))
    for i in range(n):
        ks = np.flatnonzero(edge_index[1] == i)
        if ks.size:
            msgs = np.maximum(X[edge_index[0, ks]] + attr[ks] @ W + b, 0)
            out[i] = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[aggr](
                msgs, axis=0)
    return out


@pytest.mark.parametrize("aggr", ["sum", "mean", "max", "min"])
def test_messages_at_the_edges_against_a_loop_and_central_differences(executor, aggr):
    g, edge_index, attr = _graph(9)
    rng = np.random.default_rng(10)
    X, W, b = rng.standard_normal((N, 4)), rng.standard_normal((F_E, 4)), rng.standard_normal(4)

    def f(X, W, b):
        return ops.aggregate(ops.structure(g), ops.relu(rep(X).T + g.edge_attr @ W + b), aggr)

    args = [executor.asarray(a) for a in (X, W, b)]
    out, pullback = compose.vjp(f, *args, executor=executor, vertex=(0,))
    np.testing.assert_allclose(gg.to_numpy(out), _loop_messages(edge_index, attr, X, W, b, aggr),
                               rtol=1e-12, atol=1e-12)
    R = rng.standard_normal((N, 4))
    grads = [gg.to_numpy(x) for x in pullback(executor.asarray(R))]
    for k, a in enumerate((X, W, b)):
        def loss():
            return float(np.sum(R * _loop_messages(edge_index, attr, X, W, b, aggr)))
        np.testing.assert_allclose(grads[k], numerical_grad(loss, a), rtol=1e-6, atol=1e-8,
                                   err_msg=f"argument {k}")


def test_messages_need_a_channel_axis_and_a_named_aggregation():
    g, _, _ = _graph()
    with pytest.raises(ValueError, match="'sum', 'mean', 'max' or 'min'"):
        ops.aggregate(ops.structure(g), g.edge_attr, "max_plus")
    with pytest.raises(ValueError, match="channel axis"):      # one number an edge
        compose.evaluate(lambda a: ops.aggregate(ops.structure(g), g.edge_attr @ a, "sum"),
                         np.ones(F_E))


@pytest.mark.cpu_only
@pytest.mark.parametrize("aggr, at_edges", [("sum", False), ("mean", False), ("max", True)])
def test_transformer_moves_a_linear_aggregations_edge_term_out_of_the_edges(monkeypatch, aggr,
                                                                          at_edges):
    """With ``sum`` and ``mean`` no edge program of TransformerConv contracts the features
    with ``W_e`` (the edges read them raw: ``(W_eᵀ q_i) · e_ji`` and ``W_e Σ α e_ji``); with
    ``max`` the messages ``V_j + W_e e_ji`` are computed at the edges. The values are
    PyG's either way (``test_layers_equal_pyg_with_every_gradient``)."""
    from gblas_gnn.codegen.scalar import edge_contractions
    from gblas_gnn.executors.cpu import programs

    plans = []
    real = programs.kernels
    monkeypatch.setattr(programs, "kernels", lambda p: plans.append(p) or real(p))
    g, _, _ = _graph(1)
    layer = gg.nn.TransformerConv(5, 4, heads=2, edge_dim=F_E, aggr=aggr, executor="cpu",
                                  dtype=np.float64)
    out = layer(g, np.random.default_rng(2).standard_normal((N, 5)))
    layer.backward(np.ones_like(gg.to_numpy(out)))
    assert plans
    assert any(edge_contractions(p.structure) for p in plans) == at_edges
    assert any(p.features for p in plans)
