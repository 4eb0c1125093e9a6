"""HGT (``gg.nn.HGTConv``) on heterogeneous graphs (``gg.HeteroGraph``).

The layer against a per-vertex loop written here (numpy, no torch), on every executor;
central differences in float64 for every parameter and input; against PyTorch Geometric's
``HGTConv`` with copied weights (forward and every gradient), through ``from_pyg`` /
``to_pyg``; bad input.
"""

from __future__ import annotations

import numpy as np
import pytest

import gblas_gnn as gg
from gblas_gnn.nn.pyg import from_pyg

NODES = {"author": 6, "paper": 8, "venue": 3, "field": 2}
# "field" is a source only (absent from the output); "venue" receives the edges of one
# relation; ("author", "writes", "paper") and ("author", "reviews", "paper") share pairs;
# ("venue", "lists", "paper") has no edges in the graph
EDGE_TYPES = [("author", "writes", "paper"), ("paper", "rev_writes", "author"),
              ("paper", "cites", "paper"), ("paper", "in", "venue"),
              ("author", "reviews", "paper"), ("field", "labels", "paper"),
              ("venue", "lists", "paper")]
METADATA = (list(NODES), EDGE_TYPES)
WIDTHS = {"author": 5, "paper": 8, "venue": 4, "field": 3}   # paper: the gated skip
COUNTS = [10, 10, 12, 5, 6, 4, 0]


def _edges(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for key, m in zip(EDGE_TYPES, COUNTS, strict=True):
        pairs = set()
        while len(pairs) < m:
            pairs.add((int(rng.integers(NODES[key[0]])), int(rng.integers(NODES[key[2]]))))
        out[key] = np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2).T
    shared = out[EDGE_TYPES[0]][:, :3]                    # writes and reviews share pairs
    out[EDGE_TYPES[4]] = np.unique(np.concatenate([out[EDGE_TYPES[4]], shared], 1), axis=1)
    return out


def _graph(seed: int = 0, dtype=np.float64):
    edges = _edges(seed)
    return gg.HeteroGraph.from_edge_index_dict(edges, NODES, dtype=dtype), edges


def _inputs(seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    return {t: rng.standard_normal((n, WIDTHS[t])) for t, n in NODES.items()}


def _randomised(layer, seed: int = 3):
    rng = np.random.default_rng(seed)
    for v in layer.params.values():
        v[...] = layer.executor.asarray(0.6 * rng.standard_normal(v.shape))
    return layer


def _on(executor, arrays: dict) -> dict:
    """Host arrays onto the executor."""
    return {t: executor.asarray(v) for t, v in arrays.items()}


def _off(arrays: dict) -> dict:
    """The executor's arrays as host arrays."""
    return {t: gg.to_numpy(v) for t, v in arrays.items()}


def _layer(executor=None, heads: int = 2, out_dim: int = 8, seed: int = 3):
    return _randomised(gg.nn.HGTConv(WIDTHS, out_dim, METADATA, heads=heads,
                                     dtype=np.float64, executor=executor), seed)


# ---------------------------------------------------------------------- per-vertex reference
def _gelu(x):
    from scipy.special import erf

    return 0.5 * x * (1 + erf(x / np.sqrt(2)))


def _reference(layer, edges: dict, x: dict) -> dict:
    """HGT vertex by vertex: for each target, the softmax over its in-edges of every
    relation, then GELU, the output projection and the gated skip."""
    p = {k: gg.to_numpy(v) for k, v in layer.params.items()}
    F, H = layer.out_dim, layer.heads
    d, R = F // H, len(layer.edge_types)
    kqv = {t: x[t] @ p[f"W_kqv_{t}"] + p[f"b_kqv_{t}"] for t in x}
    out = {}
    for t in layer.dst_types:
        z = np.zeros((NODES[t], F))
        for i in range(NODES[t]):
            q = kqv[t][i, F:2 * F].reshape(H, d)
            scores, values = [], []
            for r, key in enumerate(layer.edge_types):
                if key[2] != t or key not in edges:
                    continue
                for j in edges[key][0][edges[key][1] == i]:
                    k = kqv[key[0]][j, :F].reshape(H, d)
                    v = kqv[key[0]][j, 2 * F:].reshape(H, d)
                    kr = np.stack([k[h] @ p["k_rel"][h * R + r] for h in range(H)])
                    vr = np.stack([v[h] @ p["v_rel"][h * R + r] for h in range(H)])
                    scores.append((q * kr).sum(-1) * p["p_rel"][r] / np.sqrt(d))
                    values.append(vr)
            m = np.zeros((H, d))
            if scores:
                s = np.array(scores)                               # (edges, heads)
                e = np.exp(s - s.max(axis=0))
                alpha = e / (e.sum(axis=0) + 1e-16)
                m = np.einsum("eh,ehd->hd", alpha, np.array(values))
            z[i] = _gelu(m.reshape(F)) @ p[f"W_out_{t}"] + p[f"b_out_{t}"]
        if WIDTHS[t] == F:
            gate = 1 / (1 + np.exp(-p[f"skip_{t}"][0]))
            z = gate * z + (1 - gate) * x[t]
        out[t] = z
    return out


@pytest.mark.parametrize("heads", [1, 2])
def test_equals_the_per_vertex_reference(executor, heads):
    hg, edges = _graph()
    x = _inputs()
    layer = _layer(executor, heads=heads)
    got = layer(hg, {t: executor.asarray(v) for t, v in x.items()})
    want = _reference(layer, edges, x)
    assert list(got) == ["author", "paper", "venue"]           # "field" is never a target
    for t in want:
        np.testing.assert_allclose(gg.to_numpy(got[t]), want[t], rtol=1e-11, atol=1e-12,
                                   err_msg=t)


def test_a_target_without_in_edges_gets_the_output_bias(executor):
    edges = {("author", "writes", "paper"): np.array([[0, 1], [2, 2]])}
    hg = gg.HeteroGraph.from_edge_index_dict(edges, {"author": 3, "paper": 4},
                                             dtype=np.float64)
    layer = _randomised(gg.nn.HGTConv({"author": 2, "paper": 3}, 4, hg.metadata(), heads=2,
                                      dtype=np.float64, executor=executor))
    x = _inputs()
    x = {"author": x["author"][:3, :2], "paper": x["paper"][:4, :3]}
    got = gg.to_numpy(layer(hg, {t: executor.asarray(v) for t, v in x.items()})["paper"])
    bias = gg.to_numpy(layer.params["b_out_paper"])
    for i in (0, 1, 3):
        np.testing.assert_allclose(got[i], bias, rtol=1e-12, atol=1e-12)
    assert not np.allclose(got[2], bias)


def _sampled_differences(loss, x: np.ndarray, picks: np.ndarray) -> np.ndarray:
    """Central differences of ``loss`` for the entries ``picks`` of ``x`` (flat indices)."""
    flat, out = x.reshape(-1), np.zeros(picks.size)
    for k, idx in enumerate(picks):
        orig = flat[idx]
        flat[idx] = orig + 1e-6
        up = loss()
        flat[idx] = orig - 1e-6
        out[k] = (up - loss()) / 2e-6
        flat[idx] = orig
    return out


@pytest.mark.cpu_only
def test_central_differences():
    """Every parameter and every input, on entries drawn at random (each array's gradient is
    one formula for all its entries; every entry would take a minute)."""
    hg, _ = _graph(5)
    x = _inputs(6)
    layer = _layer(heads=2, seed=7)
    rng = np.random.default_rng(0)
    out = layer(hg, x)
    R = {t: rng.standard_normal(v.shape) for t, v in out.items()}

    def loss():
        return float(sum(np.sum(R[t] * v) for t, v in layer(hg, x).items()))

    layer(hg, x)
    dx = layer.backward(R)
    grads = {k: v.copy() for k, v in layer.grads.items()}
    for name, got in [*grads.items(), *((f"input {t}", dx[t]) for t in x)]:
        value = x[name[6:]] if name.startswith("input ") else layer.params[name]
        picks = rng.choice(value.size, min(value.size, 6), replace=False)
        np.testing.assert_allclose(got.reshape(-1)[picks],
                                   _sampled_differences(loss, value, picks), rtol=1e-5,
                                   atol=1e-7, err_msg=name)


def test_backward_reads_a_subset_of_the_types_as_zero(executor):
    hg, _ = _graph()
    x = _on(executor, _inputs())
    layer = _layer(executor)
    out = _off(layer(hg, x))
    dpaper = np.random.default_rng(2).standard_normal(out["paper"].shape)
    part = _off(layer.backward(_on(executor, {"paper": dpaper})))
    layer(hg, x)
    full = _off(layer.backward(_on(executor, {t: (dpaper if t == "paper" else
                                                  np.zeros_like(v)) for t, v in out.items()})))
    for t in x:
        np.testing.assert_array_equal(part[t], full[t])


def test_eval_mode_keeps_nothing_and_gives_the_same_output(executor):
    hg, _ = _graph()
    x = _on(executor, _inputs())
    layer = _layer(executor)
    trained = _off(layer(hg, x))
    layer.eval()
    inferred = layer(hg, x)
    for t in trained:
        np.testing.assert_array_equal(trained[t], gg.to_numpy(inferred[t]))
    with pytest.raises(RuntimeError, match="forward in training mode"):
        layer.backward({t: executor.xp.zeros_like(v) for t, v in inferred.items()})


def test_float32_is_close_to_float64(executor):
    hg64, _ = _graph()
    hg32, _ = _graph(dtype=np.float32)
    x = _inputs()
    a, b = (gg.nn.HGTConv(WIDTHS, 8, METADATA, heads=2, dtype=dt, seed=4, executor=executor)
            for dt in (np.float32, np.float64))
    for k in a.params:
        b.params[k][...] = executor.asarray(gg.to_numpy(a.params[k]).astype(np.float64))
    out32 = _off(a(hg32, _on(executor, {t: v.astype(np.float32) for t, v in x.items()})))
    out64 = _off(b(hg64, _on(executor, x)))
    for t in out64:
        assert out32[t].dtype == np.float32
        np.testing.assert_allclose(out32[t], out64[t], rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------- PyG
def _pyg_conv(heads: int, widths: dict, out_dim: int = 8):
    pytest.importorskip("torch")
    pyg = pytest.importorskip("torch_geometric.nn")
    import torch

    torch.manual_seed(0)
    conv = pyg.HGTConv(widths, out_dim, METADATA, heads=heads).double()
    with torch.no_grad():                    # non-trivial priors, gates and biases
        for name, value in conv.named_parameters():
            if "bias" in name or "skip" in name or "p_rel" in name:
                value.uniform_(-1.0, 1.5)
    return conv


@pytest.mark.parametrize("heads,widths", [(2, WIDTHS), (1, WIDTHS), (4, 8)],
                         ids=["2-heads", "1-head", "4-heads-skip-everywhere"])
def test_equals_pyg_forward_and_every_gradient(executor, heads, widths):
    import torch

    conv = _pyg_conv(heads, widths)
    layer = from_pyg(conv)
    assert layer.executor is executor
    hg, edges = _graph(8)
    x = _inputs(9) if widths is WIDTHS else \
        {t: np.random.default_rng(9).standard_normal((n, 8)) for t, n in NODES.items()}
    xt = {t: torch.tensor(v, requires_grad=True) for t, v in x.items()}
    want = conv(xt, {k: torch.tensor(v) for k, v in edges.items()})
    got = _off(layer(hg, _on(executor, x)))
    assert sorted(got) == sorted(want)
    rng = np.random.default_rng(10)
    dout = {t: rng.standard_normal(v.shape) for t, v in want.items()}
    for t in want:
        np.testing.assert_allclose(got[t], want[t].detach().numpy(), rtol=1e-10, atol=1e-12)
    sum((want[t] * torch.tensor(dout[t])).sum() for t in want).backward()
    dx = _off(layer.backward(_on(executor, dout)))
    grads = _off(layer.grads)
    for t in x:
        np.testing.assert_allclose(dx[t], xt[t].grad.numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=f"input {t}")
    twin = dict(conv.named_parameters())
    back = from_pyg(conv)                    # the same names, read back: the PyG gradients
    for name, (theirs, transposed) in _hgt_names(back).items():
        grad = twin[theirs].grad
        grad = np.zeros(grads[name].shape) if grad is None else grad.numpy()
        np.testing.assert_allclose(grads[name], grad.T if transposed else grad,
                                   rtol=1e-10, atol=1e-12, err_msg=name)
    for r, key in enumerate(EDGE_TYPES):
        grad = conv.p_rel["__".join(key)].grad
        grad = np.zeros(heads) if grad is None else grad.numpy()[0]
        np.testing.assert_allclose(grads["p_rel"][r], grad, rtol=1e-10, atol=1e-12)


def _hgt_names(layer):
    from gblas_gnn.nn.pyg import _hgt_names

    return _hgt_names(layer)


def test_to_pyg_round_trip(executor):
    import_torch = pytest.importorskip("torch")
    layer = _layer(executor, heads=2)
    conv = layer.to_pyg()
    hg, edges = _graph(11)
    x = _inputs(12)
    want = conv({t: import_torch.tensor(v) for t, v in x.items()},
                {k: import_torch.tensor(v) for k, v in edges.items()})
    got = _off(layer(hg, _on(executor, x)))
    for t in want:
        np.testing.assert_allclose(got[t], want[t].detach().numpy(), rtol=1e-10, atol=1e-12)
    again = from_pyg(conv)
    for k, v in layer.params.items():
        np.testing.assert_array_equal(gg.to_numpy(again.params[k]), gg.to_numpy(v), err_msg=k)


def test_from_pyg_refuses_lazy_inputs():
    pytest.importorskip("torch")
    pyg = pytest.importorskip("torch_geometric.nn")
    with pytest.raises(ValueError, match="lazily sized"):
        from_pyg(pyg.HGTConv(-1, 8, METADATA, heads=2))


# ---------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs,error,match", [
    (dict(in_dim=4, out_dim=6, metadata=METADATA, heads=4), ValueError, "divisible"),
    (dict(in_dim={"author": 3}, out_dim=4, metadata=METADATA), ValueError, "every node type"),
    (dict(in_dim=0, out_dim=4, metadata=METADATA), ValueError, "in_dim"),
    (dict(in_dim=3, out_dim=4, metadata=["author"]), TypeError, "metadata"),
    (dict(in_dim=3, out_dim=4, metadata=(["a.b"], [])), ValueError, "without '.'"),
    (dict(in_dim=3, out_dim=4, metadata=(["a"], [("a", "r", "b")])), ValueError, "node types"),
    (dict(in_dim=3, out_dim=4, metadata=(["a", "a"], [])), ValueError, "twice"),
])
def test_bad_configuration(kwargs, error, match):
    with pytest.raises(error, match=match):
        gg.nn.HGTConv(**kwargs)


def test_bad_calls(executor):
    hg, _ = _graph()
    x = _on(executor, _inputs())
    layer = _layer(executor)
    with pytest.raises(TypeError, match="HeteroGraph"):
        layer(hg.graph, x)
    with pytest.raises(TypeError, match="dict"):
        layer(hg, x["paper"])
    with pytest.raises(ValueError, match="lacks the vertex type 'venue'"):
        layer(hg, {t: v for t, v in x.items() if t != "venue"})
    with pytest.raises(ValueError, match="does not"):
        layer(hg, {**x, "institution": x["venue"]})
    with pytest.raises(ValueError, match=r"x\['paper'\] must be an array of shape \(8, 8\)"):
        layer(hg, {**x, "paper": x["paper"][:, :5]})
    with pytest.raises(TypeError, match="dtype float32"):
        layer(hg, {**x, "paper": x["paper"].astype(np.float32)})
    with pytest.raises(ValueError, match="NaN or Inf"):
        layer(hg, {**x, "paper": executor.xp.full_like(x["paper"], np.nan)})
    other = gg.HeteroGraph.from_edge_index_dict(
        {("author", "likes", "paper"): np.array([[0], [0]])}, {"author": 1, "paper": 1})
    with pytest.raises(ValueError, match="not in the layer's metadata"):
        layer(other, {"author": x["author"][:1], "paper": x["paper"][:1]})
    out = layer(hg, x)
    with pytest.raises(ValueError, match="the output has not"):
        layer.backward({"field": executor.xp.zeros((2, 8))})
    with pytest.raises(TypeError, match="dict"):
        layer.backward(out["paper"])
    with pytest.raises(ValueError, match=r"dout\['paper'\] must be an array of shape"):
        layer.backward({"paper": out["paper"][:, :3]})
