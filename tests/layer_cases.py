"""The layer configurations every other executor is held to the cpu executor on
(``tests/dist/test_dist_layers.py``, ``tests/gpu/test_gpu_layers.py``): a random directed
graph with isolated vertices and n not divisible by 2 or 3, every layer with every named
aggregation, float64 and a relative tolerance of 1e-6.
"""

from __future__ import annotations

import numpy as np

import gblas_gnn as gg

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
#: the layers that add the missing self loops and run on A's pattern alone: the pattern of
#: ``A + I`` and never a ``graphblas.Matrix`` of it (issue 21)
SELF_LOOPED = [
    ("GATConv", dict(in_dim=5, out_dim=3, heads=2, dropout=0.4)),
    ("AGNNConv", dict(in_dim=5, out_dim=4)),
    ("VAConv", dict(in_dim=5, out_dim=4, softmax=True)),
    ("GATv2Conv", dict(in_dim=5, out_dim=3, heads=2)),
]


#: the layers that read edge features (``edge_dim`` = :data:`F_E`), every executor held to cpu
F_E = 3
EDGE_LAYERS = [
    ("GATConv", dict(in_dim=5, out_dim=3, heads=2, edge_dim=F_E)),
    ("GATv2Conv", dict(in_dim=5, out_dim=3, heads=2, edge_dim=F_E, fill_value="max")),
    ("TransformerConv", dict(in_dim=5, out_dim=3, heads=2, edge_dim=F_E)),
    # max keeps the messages V_j + W_e e_ji at the edges (sum and mean move the term out)
    ("TransformerConv", dict(in_dim=5, out_dim=3, heads=2, edge_dim=F_E, aggr="max")),
    ("GINEConv", dict(mlp_dims=[5, 6, 4], edge_dim=F_E, train_eps=True)),
]


def edge_case_ids(cases: list) -> list[str]:
    """Test ids of :data:`EDGE_LAYERS`: the layer, and its aggregation if named."""
    return [f"{name}-{kw['aggr']}" if "aggr" in kw else name for name, kw in cases]


#: gradients that are zero in exact arithmetic (the Transformer's key bias: its softmax is
#: invariant to it), compared with an absolute tolerance: their rounding noise differs
ZERO_GRADIENTS = {"b_k"}


def close_gradients(got: dict, want: dict, rtol: float = 1e-6) -> None:
    """Every parameter gradient of ``got`` equals ``want``'s (:data:`ZERO_GRADIENTS`
    absolutely, to 1e-9)."""
    assert got.keys() == want.keys()
    for k, v in want.items():
        if k in ZERO_GRADIENTS:
            np.testing.assert_allclose(got[k], v, rtol=0, atol=1e-9, err_msg=k)
        else:
            close(got[k], v, f"gradient of {k}", rtol)


def graph_with_features(seed: int, in_dim: int):
    """A float64 graph of :data:`N` vertices without duplicate pairs, :data:`F_E` features
    an edge that require their gradient (a self loop at 2), features ``H`` (N, in_dim)."""
    rng = np.random.default_rng(seed)
    active = N - len(ISOLATED)
    pairs = {(int(s), int(t)) for s, t in rng.integers(0, active, size=(70, 2))} | {(2, 2)}
    edge_index = np.array(sorted(pairs)).T
    g = gg.Graph.from_edge_index(edge_index, N, edge_attr=rng.standard_normal(
        (edge_index.shape[1], F_E)), dtype=np.float64)
    g.edge_attr.requires_grad_()
    return g, rng.standard_normal((N, in_dim))


def cases(layers=LAYERS) -> list[tuple[str, dict, str]]:
    """``(layer, keywords, aggregation)``: every named aggregation of the attention layers."""
    return [(name, kw, aggr) for name, kw in layers
            for aggr in (("sum", "max", "min", "mean") if name in ATTENTION else ("sum",))]


def case_ids(items) -> list[str]:
    return [f"{n}-{i}-{a}" for i, (n, _, a) in enumerate(items)]


def in_dim_of(kw: dict) -> int:
    return kw.get("in_dim", kw.get("mlp_dims", [0])[0])


def graph_and_inputs(seed: int, in_dim: int, out_dim: int):
    """A float64 graph of :data:`N` vertices (weighted, duplicates merged), features ``H``
    (N, in_dim) and an output gradient (N, out_dim)."""
    rng = np.random.default_rng(seed)
    active = N - len(ISOLATED)
    src, dst = rng.integers(0, active, 70), rng.integers(0, active, 70)
    g = gg.Graph.from_edges(src, dst, N, values=rng.uniform(0.5, 2, 70), dtype=np.float64)
    return g, rng.standard_normal((N, in_dim)), rng.standard_normal((N, out_dim))


def build(name: str, kw: dict, aggr: str, executor, dtype=np.float64):
    """The layer ``name`` with ``kw`` (and ``aggr`` for an attention layer), seed 3."""
    kw = dict(kw)
    if name in ATTENTION:
        kw["aggr"] = aggr
    return getattr(gg.nn, name)(**kw, dtype=dtype, seed=3, executor=executor)


def close(got, want, what, rtol=1e-6):
    scale = max(float(np.abs(want).max()), 1e-12)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale, err_msg=what)
