"""Compositions exercising every derived rule, shared by the finite-difference tests
(``tests/test_compose_rules.py``, any single-process executor) and the grid tests
(``tests/dist/test_dist_compose.py``, against one process).

Each rule is ``fn(A, X, Y, u, v, P)``: ``A`` the (weighted) adjacency's edge tensor, ``X``
(n, 4) and ``Y`` (n, 4) vertex-indexed features, ``u`` and ``v`` (n,) vertex vectors, ``P``
a dict of parameters (``a`` (4,), ``b`` (2, 2), ``W`` (4, 4), ``beta`` ()); it returns a
vertex-indexed (n, ·) array. Together they cover SDDMM, the masked outer sum, the rank-3 and
rank-4 virtual tensors (contraction by ``@`` and ``.sum(-1)``), the row softmax, every named
aggregation and the semirings with a gradient, row and column reductions and scalings, edge
dropout, row norms and normalisation, and the dense operations.
"""

from __future__ import annotations

import numpy as np

import gblas_gnn as gg
from gblas_gnn import ops
from gblas_gnn.ops import factor, leaky_relu, rep

N, K = 9, 4


def _gat(aggr):
    def fn(A, X, Y, u, v, P):
        E = A * leaky_relu(rep(u) + rep(v).T, 0.2)
        return ops.aggregate(ops.softmax(E), X, aggr)
    fn.__name__ = f"gat_{aggr}"
    return fn


def sddmm_sum(A, X, Y, u, v, P):
    return ops.aggregate(ops.sddmm(A, X, Y), Y) + ops.row_sum(ops.sddmm(A, X, X))[:, None]


def rank3(A, X, Y, u, v, P):
    E = ops.structure(A) * (ops.tanh(rep(X) + rep(Y).T) @ P["a"])
    return ops.aggregate(ops.softmax(E), Y, "sum")


def rank4_heads(A, X, Y, u, v, P):
    n = X.shape[0]
    X3, Y3 = X.reshape(n, 2, 2), Y.reshape(n, 2, 2)
    E = ops.structure(A) * (ops.elu(rep(X3) * rep(Y3).T, 1.0) * P["b"]).sum(-1)
    return ops.aggregate(ops.softmax(E), Y3, "mean").reshape(n, 4)


def dot_scores(A, X, Y, u, v, P):
    E = ops.structure(A) * (P["beta"] * (factor(X) @ factor(Y).T))
    return ops.aggregate(ops.softmax(E), X @ P["W"], "max")


def cosine(A, X, Y, u, v, P):
    Xn = ops.normalize(X)
    E = ops.structure(A) * (P["beta"] * (factor(Xn) @ factor(Xn).T))
    return ops.aggregate(ops.softmax(E) * rep(ops.row_norm(Y, 1e-3)).T, Xn, "sum")


def reductions(A, X, Y, u, v, P):
    E = A * (rep(u) * rep(v).T + ops.sigmoid(rep(X) @ P["a"]))
    return (ops.row_sum(E)[:, None] * X + ops.col_sum(E)[:, None] * Y
            + ops.row_max(E)[:, None] - ops.row_min(E * 2.0)[:, None])


def scalings(A, X, Y, u, v, P):
    S = ops.col_scale(ops.row_scale(ops.exp(A * (rep(u) - rep(v).T) * 0.5), u, "times"),
                      ops.sigmoid(v) + 0.5, "div")
    return ops.aggregate(S, X, "sum") + ops.spmm_t(ops.softmax(S), Y)


def _semiring(name):
    def fn(A, X, Y, u, v, P):
        S = ops.softmax(A * (rep(u) + rep(v).T))          # nonnegative weights (avg)
        return ops.aggregate(S, X, name)
    fn.__name__ = f"semiring_{name}"
    return fn


def nested(A, X, Y, u, v, P):
    inner = ops.softmax(A * (rep(u) * rep(v).T))
    E = ops.softmax(inner * 3.0 + ops.log(rep(ops.exp(u)).T))
    return ops.aggregate(ops.edge_dropout(E, 0.3, key=5), X, "sum")


def dense_chain(A, X, Y, u, v, P):
    H = ops.relu(X @ P["W"] + P["a"]) * ops.sigmoid(Y @ P["W"].T) - X / 3.0
    H = ops.concat([H[:, :2], (Y ** 2)[:, 2:]], axis=1) + (X * Y).sum(1)[:, None]
    scale = (H * H).mean(axis=0) + P["b"].sum()
    return ops.aggregate(A * (rep(u) + rep(v).T), H * scale, "min") + (X.T @ Y).sum() * 0.01


RULES = [sddmm_sum, *[_gat(a) for a in ("sum", "mean", "max", "min")], rank3, rank4_heads,
         dot_scores, cosine, reductions, scalings,
         *[_semiring(s) for s in ("max_plus", "min_plus", "max_times", "min_times", "avg")],
         nested, dense_chain]


def inputs(seed: int, n: int = N, edges: int = 24, isolated: int = 2, dtype=np.float64):
    """A weighted random graph of ``n`` vertices, the last ``isolated`` of them with no
    edge (so some rows and columns are empty), and the arguments of the rules."""
    rng = np.random.default_rng(seed)
    active = max(n - isolated, 1)
    src, dst = rng.integers(0, active, edges), rng.integers(0, active, edges)
    g = gg.Graph.from_edges(src, dst, n, values=rng.uniform(0.5, 2.0, edges), dtype=dtype)
    arrays = {"X": rng.standard_normal((n, K)), "Y": rng.standard_normal((n, K)),
              "u": rng.standard_normal(n), "v": rng.standard_normal(n)}
    params = {"a": rng.standard_normal(K), "b": rng.standard_normal((2, 2)),
              "W": rng.standard_normal((K, K)) * 0.5, "beta": np.asarray(0.7)}
    cast = {k: a.astype(dtype) for k, a in arrays.items()}
    return g, cast, {k: np.asarray(p, dtype) for k, p in params.items()}


def call(rule, A, arrays, params):
    """``rule`` as a function of ``(X, Y, u, v, P)`` with the adjacency fixed."""
    return lambda X, Y, u, v, P: rule(A, X, Y, u, v, P)
