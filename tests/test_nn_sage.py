"""GraphSAGE (``gg.nn.SAGEConv``) against PyTorch Geometric's ``SAGEConv`` with copied
weights: the output and every gradient (the input's and each parameter's) in float64, for
each aggregation and option, on a graph with self loops and isolated vertices; central
differences; the DGL variants ``gcn`` and ``pool`` written as compositions (the ones
``docs/composition.md`` shows) against a per-vertex loop; bad input.
"""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_module_grads

import gblas_gnn as gg
from gblas_gnn import ops
from gblas_gnn.nn.init import glorot, zeros

torch = pytest.importorskip("torch")
pyg = pytest.importorskip("torch_geometric.nn")

N = 13                   # vertex 12 has no edge, vertex 11 only an out-edge


def _graph(seed: int = 0):
    rng = np.random.default_rng(seed)
    pairs = {(int(s), int(t)) for s, t in rng.integers(0, N - 2, size=(45, 2))}
    pairs |= {(11, 3), (4, 4)}
    edge_index = np.array(sorted(pairs)).T
    return edge_index, rng.standard_normal((N, 5))


def _pyg_twin(layer, conv):
    """Copy ``conv``'s weights into ``layer`` (our names: ``W_l``, ``b_l``, ``W_r``,
    ``W_p``, ``b_p``)."""
    p = dict(conv.named_parameters())
    names = {"W_l": "lin_l.weight", "b_l": "lin_l.bias", "W_r": "lin_r.weight",
             "W_p": "lin.weight", "b_p": "lin.bias"}
    for ours, theirs in names.items():
        if ours in layer.params:
            value = p[theirs].detach().numpy()
            layer.params[ours][...] = value.T if ours.startswith("W") else value
    return names


OPTIONS = [dict(), dict(normalize=True), dict(root_weight=False), dict(project=True),
           dict(bias=False), dict(project=True, normalize=True, root_weight=False)]


@pytest.mark.parametrize("aggr", ["mean", "max", "sum"])
@pytest.mark.parametrize("options", OPTIONS, ids=lambda kw: "-".join(kw) or "default")
@pytest.mark.parametrize("out_dim", [3, 8])          # aggregate last / first for mean, sum
def test_equals_pyg_forward_and_every_gradient(executor, aggr, options, out_dim):
    """Both orders of the projection and the aggregation: at ``out_dim`` 3 mean and sum
    project first, at 8 they aggregate first (max always aggregates first)."""
    edge_index, x = _graph()
    torch.manual_seed(0)
    conv = pyg.SAGEConv(5, out_dim, aggr=aggr, **options).double()
    layer = gg.nn.SAGEConv(5, out_dim, aggr=aggr, dtype=np.float64, executor=executor,
                           **options)
    names = _pyg_twin(layer, conv)
    assert layer.aggregates_first() == (aggr == "max" or out_dim > 5)
    g = gg.Graph.from_edge_index(edge_index, N, dtype=np.float64)
    xt = torch.tensor(x, requires_grad=True)
    want = conv(xt, torch.from_numpy(edge_index))
    got = gg.to_numpy(layer(g, executor.asarray(x)))
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-10, atol=1e-12)
    R = np.random.default_rng(1).standard_normal(got.shape)
    (want * torch.from_numpy(R)).sum().backward()
    dH = gg.to_numpy(layer.backward(executor.asarray(R)))
    np.testing.assert_allclose(dH, xt.grad.numpy(), rtol=1e-9, atol=1e-11)
    p = dict(conv.named_parameters())
    for ours, theirs in names.items():
        if ours in layer.params:
            want_g = p[theirs].grad.numpy()
            np.testing.assert_allclose(gg.to_numpy(layer.grads[ours]),
                                       want_g.T if ours.startswith("W") else want_g,
                                       rtol=1e-9, atol=1e-11, err_msg=ours)


@pytest.mark.parametrize("aggr", ["mean", "max"])
def test_central_differences(aggr):
    edge_index, x = _graph(5)
    g = gg.Graph.from_edge_index(edge_index, N, dtype=np.float64)
    layer = gg.nn.SAGEConv(5, 3, aggr=aggr, project=True, normalize=True, dtype=np.float64,
                           seed=4)
    check_module_grads(layer, g, x)


def test_edge_values_are_not_read():
    """SAGE aggregates over the pattern, as PyG (which has no edge weights there)."""
    edge_index, x = _graph(7)
    w = np.random.default_rng(0).uniform(0.5, 3.0, edge_index.shape[1])
    layer = gg.nn.SAGEConv(5, 4, dtype=np.float64).eval()
    plain = layer(gg.Graph.from_edge_index(edge_index, N, dtype=np.float64), x)
    weighted = layer(gg.Graph.from_edge_index(edge_index, N, edge_weight=w, dtype=np.float64),
                     x)
    np.testing.assert_array_equal(plain, weighted)


def test_both_ways_through_pyg():
    edge_index, x = _graph(9)
    conv = pyg.SAGEConv(5, 4, aggr="max", project=True, normalize=True).double()
    layer = gg.nn.SAGEConv.from_pyg(conv)
    assert (layer.aggr, layer.project, layer.normalize) == ("max", True, True)
    g = gg.Graph.from_edge_index(edge_index, N, dtype=np.float64)
    with torch.no_grad():
        want = conv.eval()(torch.from_numpy(x), torch.from_numpy(edge_index)).numpy()
    np.testing.assert_allclose(layer.eval()(g, x), want, rtol=1e-10, atol=1e-12)
    back = gg.nn.SAGEConv(5, 4, aggr="sum", root_weight=False, bias=False, seed=5).to_pyg()
    assert isinstance(back, pyg.SAGEConv) and back.aggr == "add" and not back.root_weight
    assert back.lin_l.bias is None and not back.training


@pytest.mark.parametrize("make,match", [
    (lambda: pyg.SAGEConv((5, 4), 3), "bipartite"),
    (lambda: pyg.SAGEConv(5, 3, aggr="lstm"), "aggr='lstm'"),
    (lambda: pyg.SAGEConv(5, 3, aggr=["mean", "max"]), "aggr="),
])
def test_what_has_no_counterpart_is_named(make, match):
    with pytest.raises(ValueError, match=match):
        gg.nn.SAGEConv.from_pyg(make())


@pytest.mark.parametrize("kw,error,match", [
    (dict(aggr="min"), ValueError, "mean', 'max', 'sum'"),
    (dict(aggr="lstm"), ValueError, "SAGEConv aggr"),
    (dict(project="yes"), TypeError, "project"),
    (dict(in_dim=0), ValueError, "in_dim"),
])
def test_bad_arguments(kw, error, match):
    args = {"in_dim": 5, "out_dim": 3, **kw}
    with pytest.raises(error, match=match):
        gg.nn.SAGEConv(**args)


# ---------------------------------------------------------------------- DGL's variants
class SAGEGCN(gg.nn.Module):
    """DGL's ``SAGEConv(aggregator_type="gcn")``: the mean over the neighbours and the
    vertex itself, ``W ((Σ_j h_j + h_i) / (deg_i + 1)) + b``."""

    def __init__(self, k, f, seed=0, dtype=np.float64, executor=None):
        super().__init__(dtype, executor)
        self.add_param("W", glorot((k, f), np.random.default_rng(seed), self.dtype))
        self.add_param("b", zeros((f,), self.dtype))

    def forward(self, g, H):
        S = ops.structure(g.with_self_loops())
        return ops.aggregate(S, H, "mean") @ self.params["W"] + self.params["b"]


class SAGEPool(gg.nn.Module):
    """DGL's ``SAGEConv(aggregator_type="pool")``:
    ``W_self h_i + W_neigh max_j ReLU(W_pool h_j + b_pool) + b``."""

    def __init__(self, k, f, seed=0, dtype=np.float64, executor=None):
        super().__init__(dtype, executor)
        rng = np.random.default_rng(seed)
        for name, shape in [("W_pool", (k, k)), ("W_self", (k, f)), ("W_neigh", (k, f))]:
            self.add_param(name, glorot(shape, rng, self.dtype))
        self.add_param("b_pool", zeros((k,), self.dtype))
        self.add_param("b", zeros((f,), self.dtype))

    def forward(self, g, H):
        p = self.params
        M = ops.aggregate(ops.structure(g), ops.relu(H @ p["W_pool"] + p["b_pool"]), "max")
        return H @ p["W_self"] + M @ p["W_neigh"] + p["b"]


def _loop_reference(model, edge_index, x):
    """The DGL variants vertex by vertex (a vertex without in-edges: max over nothing = 0)."""
    p = {k: gg.to_numpy(v) for k, v in model.params.items()}
    out = []
    for i in range(N):
        nbrs = sorted(set(edge_index[0][edge_index[1] == i].tolist()))
        if isinstance(model, SAGEGCN):
            group = sorted(set(nbrs) | {i})
            out.append(x[group].mean(axis=0) @ p["W"] + p["b"])
        else:
            pooled = np.maximum(x[nbrs] @ p["W_pool"] + p["b_pool"], 0)
            m = pooled.max(axis=0) if nbrs else np.zeros(x.shape[1])
            out.append(x[i] @ p["W_self"] + m @ p["W_neigh"] + p["b"])
    return np.array(out)


@pytest.mark.parametrize("variant", [SAGEGCN, SAGEPool])
def test_dgl_variants_as_compositions(variant):
    edge_index, x = _graph(11)
    g = gg.Graph.from_edge_index(edge_index, N, dtype=np.float64)
    model = variant(5, 3, seed=1)
    for k, v in model.params.items():
        v[...] = np.random.default_rng(len(k)).standard_normal(v.shape)
    np.testing.assert_allclose(model(g, x), _loop_reference(model, edge_index, x),
                               rtol=1e-12, atol=1e-12)
    check_module_grads(model, g, x)
