"""PyTorch Geometric interop: ``Graph.from_edge_index``, ``Layer.from_pyg``, ``layer.to_pyg``.

Every conversion is checked by output: after ``from_pyg`` our layer computes what the PyG
module computes on the same graph and features, and after ``to_pyg`` the PyG module computes
what our layer computes (float64 with tight tolerances, float32 looser), in both directions
with random weights and non-zero biases.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from test_cli_run import cli_env

import gblas_gnn as gg
from gblas_gnn.nn.pyg import from_pyg, to_pyg

torch = pytest.importorskip("torch")
pyg = pytest.importorskip("torch_geometric.nn")

N = 12
TOL = {np.float64: dict(rtol=1e-10, atol=1e-12), np.float32: dict(rtol=2e-5, atol=2e-6)}


@pytest.fixture(scope="module")
def graph():
    """A directed graph without duplicate edges: some self loops, an isolated vertex (11)."""
    rng = np.random.default_rng(0)
    pairs = {(int(s), int(t)) for s, t in rng.integers(0, N - 1, size=(40, 2))}
    edge_index = np.array(sorted(pairs)).T
    return edge_index, rng.standard_normal((N, 5)), rng.uniform(0.5, 2.0, edge_index.shape[1])


def tensor(a, dtype=np.float64):
    return torch.from_numpy(np.asarray(a, dtype=dtype))


def pyg_out(conv, graph, dtype=np.float64, weighted=False):
    edge_index, x, w = graph
    args = (tensor(x, dtype), torch.from_numpy(edge_index))
    if weighted:
        args += (tensor(w, dtype),)
    with torch.no_grad():
        return conv.eval()(*args).numpy()


def our_out(layer, graph, dtype=np.float64, weighted=False):
    edge_index, x, w = graph
    g = gg.Graph.from_edge_index(edge_index, N, edge_weight=w if weighted else None,
                                 dtype=dtype)
    return layer.eval()(g, x.astype(dtype))


def randomize(module, seed=1):
    """Random values in every floating parameter of a PyG module (biases start at zero)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.5)
    return module


def randomize_ours(layer, seed=2):
    rng = np.random.default_rng(seed)
    for name, p in layer.params.items():
        if name != "beta":
            p[...] = rng.standard_normal(p.shape) * 0.5
    return layer


def both_ways(pyg_conv, ours_cls, graph, weighted=False, dtype=np.float64, **from_kw):
    """Import a PyG module and compare; export the imported layer's twin and compare."""
    conv = randomize(pyg_conv.to(getattr(torch, np.dtype(dtype).name)))
    layer = ours_cls.from_pyg(conv, **from_kw)
    assert type(layer) is ours_cls and layer.dtype == dtype
    np.testing.assert_allclose(our_out(layer, graph, dtype, weighted),
                               pyg_out(conv, graph, dtype, weighted), **TOL[dtype])
    randomize_ours(layer)
    back = layer.to_pyg()
    assert type(back) is type(conv) and not back.training
    assert next(back.parameters(), next(back.buffers(), None)).dtype == conv_dtype(dtype)
    np.testing.assert_allclose(pyg_out(back, graph, dtype, weighted),
                               our_out(layer, graph, dtype, weighted), **TOL[dtype])
    return layer, back


def conv_dtype(dtype):
    return getattr(torch, np.dtype(dtype).name)


# ---------------------------------------------------------------------------- Graph
def test_from_edge_index_orientation_and_input_forms(graph):
    edge_index, _, w = graph
    g = gg.Graph.from_edge_index(edge_index, N)
    dense = g.to_scipy().toarray()
    for s, t in edge_index.T:
        assert dense[t, s] == 1              # edge s -> t is stored at A[target, source]
    assert g.nnz == edge_index.shape[1]
    from_torch = gg.Graph.from_edge_index(torch.from_numpy(edge_index), N,
                                          edge_weight=torch.from_numpy(w), dtype=np.float64)
    expected = gg.Graph.from_edges(edge_index[0], edge_index[1], N, values=w, dtype=np.float64)
    assert from_torch.A.isequal(expected.A) and from_torch.dtype == np.float64
    with pytest.raises(ValueError, match=r"shape \(2, m\)"):
        gg.Graph.from_edge_index(edge_index.T, N)
    with pytest.raises(ValueError, match="out of range"):
        gg.Graph.from_edge_index(edge_index, 5)


# ---------------------------------------------------------------------------- GAT
@pytest.mark.parametrize("heads,concat,bias,loops,aggr", [
    (1, True, True, True, "add"),
    (3, True, True, True, "add"),
    (3, False, True, True, "add"),                 # mean over heads, with a bias
    (2, True, False, False, "add"),
    (2, False, True, True, "max"),
    (2, True, True, True, "mean"),
])
def test_gat(graph, heads, concat, bias, loops, aggr):
    conv = pyg.GATConv(5, 4, heads=heads, concat=concat, bias=bias, add_self_loops=loops,
                       negative_slope=0.15, dropout=0.3, aggr=aggr)
    layer, back = both_ways(conv, gg.nn.GATConv, graph)
    assert (layer.heads, layer.concat, layer.add_self_loops) == (heads, concat, loops)
    assert layer.dropout == 0.3 and layer.negative_slope == 0.15
    assert ("bias" in layer.params) == bias and back.aggr == aggr


def test_gat_float32(graph):
    both_ways(pyg.GATConv(5, 4, heads=3), gg.nn.GATConv, graph, dtype=np.float32)


def test_gat_weight_layout(graph):
    conv = randomize(pyg.GATConv(5, 4, heads=3).double())
    layer = gg.nn.GATConv.from_pyg(conv)
    np.testing.assert_array_equal(layer.params["W"], conv.lin.weight.detach().numpy().T)
    np.testing.assert_array_equal(layer.params["att_src"], conv.att_src[0].detach().numpy())


@pytest.mark.parametrize("make,match", [
    (lambda: pyg.GATConv(5, 4, residual=True), "residual"),
    (lambda: pyg.GATConv((5, 6), 4, add_self_loops=False), "separate source"),
    (lambda: pyg.GATConv(5, 4, aggr="mul"), "aggr='mul'"),
])
def test_gat_features_without_counterpart(make, match):
    with pytest.raises(ValueError, match=match):
        gg.nn.GATConv.from_pyg(make())


def test_semiring_aggregation_does_not_export():
    with pytest.raises(ValueError, match="semiring 'max_plus'"):
        gg.nn.GATConv(5, 4, aggr="max_plus").to_pyg()


# ---------------------------------------------------------------------------- GCN / SGC
@pytest.mark.parametrize("normalize,loops,bias,weighted", [
    (True, True, True, False), (True, True, True, True), (True, False, False, True),
    (False, False, True, True),
])
def test_gcn(graph, normalize, loops, bias, weighted):
    conv = pyg.GCNConv(5, 3, normalize=normalize, add_self_loops=loops, bias=bias)
    layer, _ = both_ways(conv, gg.nn.GCNConv, graph, weighted=weighted)
    assert (layer.normalize, layer.add_self_loops) == (normalize, loops)


def test_gcn_improved_is_refused():
    with pytest.raises(ValueError, match="improved=True"):
        gg.nn.GCNConv.from_pyg(pyg.GCNConv(5, 3, improved=True))


@pytest.mark.parametrize("K,loops,bias", [(1, True, True), (2, True, True), (3, False, False)])
def test_sgc(graph, K, loops, bias):
    layer, back = both_ways(pyg.SGConv(5, 3, K=K, add_self_loops=loops, bias=bias),
                            gg.nn.SGConv, graph)
    assert layer.K == back.K == K


# ---------------------------------------------------------------------------- AGNN
@pytest.mark.parametrize("learn,loops", [(True, True), (False, True), (True, False)])
def test_agnn(graph, learn, loops):
    conv = pyg.AGNNConv(requires_grad=learn, add_self_loops=loops).double()
    conv.beta.data.fill_(0.7)
    layer = gg.nn.AGNNConv.from_pyg(conv, in_dim=5)
    assert layer.learn_beta == learn and layer.beta[0] == 0.7 and ("beta" in layer.params) == learn
    np.testing.assert_allclose(our_out(layer, graph), pyg_out(conv, graph), **TOL[np.float64])
    layer.beta = -1.3
    back = layer.to_pyg()
    assert isinstance(back.beta, torch.nn.Parameter) == learn and back.beta.item() == -1.3
    np.testing.assert_allclose(pyg_out(back, graph), our_out(layer, graph), **TOL[np.float64])


def test_agnn_needs_in_dim_and_refuses_a_projection():
    with pytest.raises(ValueError, match="needs in_dim"):
        gg.nn.AGNNConv.from_pyg(pyg.AGNNConv())
    with pytest.raises(ValueError, match="PyG's AGNNConv has none; only out_dim=None"):
        gg.nn.AGNNConv(5, 3).to_pyg()


# ---------------------------------------------------------------------------- GIN
@pytest.mark.parametrize("make_net", [
    lambda: pyg.MLP([5, 8, 3], norm=None),
    lambda: pyg.MLP([5, 8, 6, 3], norm=None, act="relu"),
    lambda: torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)),
], ids=["mlp", "mlp3", "sequential"])
@pytest.mark.parametrize("train_eps", [False, True])
def test_gin(graph, make_net, train_eps):
    conv = pyg.GINConv(make_net(), eps=0.3, train_eps=train_eps)
    layer, back = both_ways(conv, gg.nn.GINConv, graph, weighted=False)
    assert layer.train_eps == train_eps and layer.eps == back.eps.item()
    assert isinstance(back.eps, torch.nn.Parameter) == train_eps
    if not train_eps:             # a fixed eps is a buffer: randomize() left it at 0.3
        assert layer.eps == pytest.approx(0.3)


@pytest.mark.parametrize("net,match", [
    (lambda: pyg.MLP([5, 8, 3]), "normalisation layers"),              # batch_norm by default
    (lambda: pyg.MLP([5, 8, 3], norm=None, dropout=0.5), "dropout"),
    (lambda: pyg.MLP([5, 8, 3], norm=None, act="tanh"), "activation"),
    (lambda: pyg.MLP([5, 8, 3], norm=None, bias=False), "without biases"),
    (lambda: torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(),
                                 torch.nn.Linear(8, 3)), "a GIN network Sequential"),
    (lambda: torch.nn.Linear(5, 3), "of type Linear"),
])
def test_gin_networks_without_counterpart(net, match):
    with pytest.raises(ValueError, match=match):
        gg.nn.GINConv.from_pyg(pyg.GINConv(net()))


# ---------------------------------------------------------------------------- dispatch
def test_module_functions_and_type_errors(graph):
    conv = randomize(pyg.GCNConv(5, 3).double())
    layer = from_pyg(conv)
    assert isinstance(layer, gg.nn.GCNConv)
    assert isinstance(to_pyg(layer), pyg.GCNConv)
    with pytest.raises(TypeError, match="takes a torch_geometric.nn GATConv, got "
                                        "torch_geometric.nn.conv.gcn_conv.GCNConv"):
        gg.nn.GATConv.from_pyg(conv)
    with pytest.raises(TypeError, match="got torch.nn.modules.linear.Linear"):
        from_pyg(torch.nn.Linear(3, 3))
    with pytest.raises(TypeError, match="to_pyg takes"):
        to_pyg(gg.nn.VAConv(5, 3))
    with pytest.raises(TypeError, match="float16"):
        from_pyg(pyg.GCNConv(5, 3).half())
    with pytest.raises(ValueError, match="in_dim=4 but"):
        from_pyg(conv, in_dim=4)


def test_without_torch_one_clear_error(monkeypatch):
    for name in ("torch", "torch_geometric", "torch_geometric.nn"):
        monkeypatch.setitem(sys.modules, name, None)
    message = r'needs torch and torch-geometric.*pip install "gblas_gnn\[pyg\]"'
    with pytest.raises(ImportError, match=message):
        gg.nn.GATConv(5, 4).to_pyg()
    with pytest.raises(ImportError, match=message):
        gg.nn.GCNConv.from_pyg(object())


@pytest.mark.cpu_only            # a fresh process on its default executor, cpu
def test_the_core_library_never_imports_torch():
    """Training, inference and Graph.from_edge_index with numpy input run with torch
    unimportable; only the interop functions ask for it."""
    script = textwrap.dedent("""
        import sys
        sys.modules["torch"] = sys.modules["torch_geometric"] = None
        import numpy as np
        import gblas_gnn as gg
        from gblas_gnn.data import csbm
        from gblas_gnn.nn import models
        from gblas_gnn.train import Adam, fit
        d = csbm(n=60, classes=3, features=8, train_per_class=5, val=10, test=20)
        m = models.gat(8, 3, hidden=4, heads=2)
        fit(m, d, Adam(m), epochs=2, progress=False)
        gg.Graph.from_edge_index(np.array([[0, 1], [1, 2]]), 3)
        try:
            gg.nn.GATConv(4, 2).to_pyg()
        except ImportError as exc:
            print(exc)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=True, env=cli_env()).stdout
    assert out.strip().endswith('pip install "gblas_gnn[pyg]" (torch and torch-geometric)')
