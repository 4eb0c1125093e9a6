"""A relational formulation composed in a few lines: RGAT (relational GAT with attention
across relations, Busbridge et al. 2019) on a ``HeteroGraph``, against a per-vertex loop,
central differences, a max aggregation, and trained.

The composition is the one ``docs/composition.md`` ("Vertex types") shows: each relation's
projection on its source block (``ops.segment_linear``), a destination score per relation
on the target rows, the source block's one-hot picking the edge's relation, and one
softmax over a vertex's in-edges of every relation.
"""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_module_grads

import gblas_gnn as gg
from gblas_gnn import ops
from gblas_gnn.ops import rep

N = 10
KEYS = [("v", "cites", "v"), ("v", "extends", "v"), ("v", "refutes", "v"), ("v", "none", "v")]


class RGAT(gg.nn.Module):
    r""":math:`z_i = \bigoplus_{(j, r) \to i} \alpha_{ij} h_j W_r + b`,
    :math:`\alpha = \mathrm{softmax}_{(j, r) \to i}(\mathrm{LeakyReLU}(h_i W_r a^{dst}_r +
    h_j W_r a^{src}_r))`, the softmax over the in-edges of every relation."""

    def __init__(self, k_in, k_out, relations, aggr="sum", seed=0, dtype=np.float64,
                 executor=None):
        super().__init__(dtype, executor)
        rng = np.random.default_rng(seed)
        R = len(relations)
        self.relations, self.aggr, self.k_out = relations, aggr, k_out
        self.add_param("W", rng.standard_normal((R, k_in, k_out)) * 0.5)
        self.add_param("a_src", rng.standard_normal((R, k_out)))
        self.add_param("a_dst", rng.standard_normal((R, k_out)))
        self.add_param("b", rng.standard_normal(k_out) * 0.1)

    def forward(self, hg, H):
        p, R = self.params, len(self.relations)
        rel = {key: self.relations.index(key) for key in hg.blocks}
        W = {key: p["W"][r] for key, r in rel.items()}
        M = ops.segment_linear(H, [(hg.type_rows(k), W[k], None) for k in hg.blocks],
                               self.k_out)
        src = ops.segment_linear(H, [(hg.type_rows(k), W[k] @ p["a_src"][r].reshape(-1, 1),
                                      None) for k, r in rel.items()], 1)[:, 0]
        dst = ops.segment_linear(H, [(hg.type_rows("v"), ops.concat(
            [p["W"][r] @ p["a_dst"][r].reshape(-1, 1) for r in range(R)], 1), None)], R)
        which = ops.vertex_rows(hg.graph, self._one_hot(hg))          # a block's relation
        score = (rep(dst) * rep(which).T).sum(-1) + rep(src).T
        alpha = ops.softmax(ops.structure(hg.graph) * ops.leaky_relu(score, 0.2))
        return ops.aggregate(alpha, M, self.aggr) + p["b"]

    def _one_hot(self, hg):
        out = np.zeros((hg.n, len(self.relations)), self.dtype)
        for key in hg.blocks:
            out[hg.type_rows(key), self.relations.index(key)] = 1
        return out


def _typed(seed=0):
    """Three relations with edges (a pair carries two), one without, vertex 9 isolated."""
    rng = np.random.default_rng(seed)
    edges = {}
    for key, m in zip(KEYS, [14, 10, 8, 0], strict=True):
        pairs = {(int(a), int(b)) for a, b in rng.integers(0, N - 1, (m, 2))}
        edges[key] = np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2).T
    edges[KEYS[1]] = np.unique(np.concatenate([edges[KEYS[1]], edges[KEYS[0]][:, :2]], 1),
                               axis=1)
    return gg.HeteroGraph.from_edge_index_dict(edges, {"v": N}, dtype=np.float64), edges


def _reference(layer, edges, x):
    p = {k: gg.to_numpy(v) for k, v in layer.params.items()}
    out = np.zeros((N, layer.k_out))
    for i in range(N):
        scores, msgs = [], []
        for r, key in enumerate(KEYS):
            for j in edges[key][0][edges[key][1] == i]:
                e = x[i] @ p["W"][r] @ p["a_dst"][r] + x[j] @ p["W"][r] @ p["a_src"][r]
                scores.append(e if e > 0 else 0.2 * e)
                msgs.append(x[j] @ p["W"][r])
        if scores:
            w = np.exp(np.array(scores) - max(scores))
            w /= w.sum()
            m = np.array(msgs) * w[:, None]
            out[i] = m.sum(0) if layer.aggr == "sum" else m.max(0)
    return out + p["b"]


@pytest.mark.parametrize("aggr", ["sum", "max"])
def test_equals_the_per_vertex_loop(executor, aggr):
    hg, edges = _typed()
    x = np.random.default_rng(1).standard_normal((N, 3))
    layer = RGAT(3, 4, KEYS, aggr=aggr, executor=executor)
    X = hg.stack({"v": executor.asarray(x)}, {"v": 3}, np.float64, executor.xp)
    out = hg.split(layer(hg, X), ["v"])["v"]
    np.testing.assert_allclose(gg.to_numpy(out), _reference(layer, edges, x), rtol=1e-11,
                               atol=1e-12)


@pytest.mark.cpu_only
def test_central_differences():
    hg, _ = _typed(2)
    X = hg.stack({"v": np.random.default_rng(3).standard_normal((N, 3))}, {"v": 3},
                 np.float64)
    check_module_grads(RGAT(3, 2, KEYS, seed=4), hg, X)


@pytest.mark.cpu_only
def test_trains():
    """A relational task: a vertex's class is the relation of most of its in-edges; 60
    Adam steps fit it."""
    hg, edges = _typed(5)
    counts = np.zeros((N, len(KEYS)))
    for r, key in enumerate(KEYS):
        np.add.at(counts[:, r], edges[key][1], 1)
    y = counts.argmax(1)
    x = np.random.default_rng(6).standard_normal((N, 4))
    X = hg.stack({"v": x}, {"v": 4}, np.float64)
    layer = RGAT(4, len(KEYS), KEYS, seed=7)
    opt = gg.train.Adam(layer, lr=0.05)
    mask = np.ones(N, bool)
    rows = hg.type_rows("v")
    losses = []
    for _ in range(60):
        Z = layer(hg, X)
        loss, dZ = gg.train.cross_entropy(Z[rows], y, mask)
        full = np.zeros_like(Z)
        full[rows] = dZ
        layer.backward(full)
        opt.step()
        losses.append(loss)
    assert losses[-1] < 0.3 * losses[0]
    assert gg.train.accuracy(layer(hg, X)[rows], y, mask) >= 0.9
