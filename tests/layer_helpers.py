"""Helpers shared by the layer tests (``tests/test_nn_*.py``): random test graphs, neighbour
lists, per-vertex reductions, the three graph input forms and recurring comparisons.

Only graph *construction* uses the library (``Graph.from_edges``); every per-vertex reference
stays in its test file and never calls layer code.
"""

from __future__ import annotations

import graphblas as gb
import numpy as np
import pytest
import scipy.sparse as sp
from gradcheck import check_module_grads

from gblas_gnn.graph import Graph

#: vertices of the weighted test graphs: 0..6 random, 7 has out-edges only, 8 and 9 isolated
N = 10


# ---------------------------------------------------------------------- weighted graphs
def make_edges(seed: int, weighted: bool):
    """Random directed edges with duplicates, one stored self loop, a source-only vertex (7)
    and two isolated vertices (8, 9)."""
    rng = np.random.default_rng(seed)
    src = list(rng.integers(0, 7, 16))
    dst = list(rng.integers(0, 7, 16))
    src += [7, 7, src[0], src[1], 3]          # 7 → ·, two duplicates, a self loop 3 → 3
    dst += [0, 4, dst[0], dst[1], 3]
    w = list(rng.uniform(0.5, 2.0, len(src))) if weighted else None
    return src, dst, w


def merged(src, dst, w):
    """{(target, source): value}: unweighted duplicates are one edge of value 1, weighted
    duplicates sum (the Graph convention)."""
    E: dict = {}
    for e, (s, d) in enumerate(zip(src, dst, strict=True)):
        key = (int(d), int(s))
        E[key] = 1.0 if w is None else E.get(key, 0.0) + float(w[e])
    return E


def in_edges(E, n=N):
    """``[[(source, value), …] for each target]`` of a merged edge dict."""
    nbrs: list[list] = [[] for _ in range(n)]
    for (i, j), x in E.items():
        nbrs[i].append((j, x))
    return nbrs


def graph_of(src, dst, w, dtype, n=N):
    return Graph.from_edges(np.array(src), np.array(dst), n,
                            values=None if w is None else np.array(w), dtype=dtype)


def weighted_forms(seed, dtype, n=N):
    """The same weighted graph as ``Graph``, scipy CSR and ``graphblas.Matrix``."""
    src, dst, w = make_edges(seed, True)
    s, d, v = np.array(src), np.array(dst), np.array(w, dtype=dtype)
    return [
        Graph.from_edges(s, d, n, values=v, dtype=dtype),
        sp.coo_matrix((v, (d, s)), shape=(n, n)).tocsr(),
        gb.Matrix.from_coo(d, s, v, nrows=n, ncols=n, dup_op=gb.binary.plus),
    ]


def randomize_bias(layer, seed=1):
    if "bias" in layer.params:
        rng = np.random.default_rng(seed)
        layer.params["bias"][:] = rng.standard_normal(layer.params["bias"].shape)


# ---------------------------------------------------------------------- attention graphs
def random_edges(n, m, seed, isolated):
    """Random directed edges; the vertices ``isolated`` have no in- or out-edges; the first
    three edges repeated (duplicates)."""
    rng = np.random.default_rng(seed)
    active = [v for v in range(n) if v not in isolated]
    src = rng.choice(active, m)
    dst = rng.choice(active, m)
    return np.concatenate([src, src[:3]]), np.concatenate([dst, dst[:3]])


def features(n, k, dtype, seed=1, scale=1.0):
    """Seeded standard-normal features (continuous: no ties for max/min)."""
    return (np.random.default_rng(seed).standard_normal((n, k)) * scale).astype(dtype)


def in_neighbours(src, dst, n, self_loops):
    """Sorted, de-duplicated in-neighbour list of every target (edge s → d: d aggregates
    from s); ``self_loops`` adds the missing ones (PyG add_remaining_self_loops)."""
    nb = [set() for _ in range(n)]
    for s, d in zip(np.asarray(src).tolist(), np.asarray(dst).tolist(), strict=True):
        nb[d].add(s)
    if self_loops:
        for i in range(n):
            nb[i].add(i)
    return [sorted(x) for x in nb]


def reduce_messages(msgs, aggr):
    """Reduce the messages of one target (a non-empty list of vectors) by ``aggr``."""
    M = np.array(msgs)
    if aggr == "sum":
        return M.sum(axis=0)
    if aggr == "mean":
        return M.sum(axis=0) / len(msgs)
    if aggr == "max":
        return M.max(axis=0)
    if aggr == "min":
        return M.min(axis=0)
    raise AssertionError(aggr)


def unweighted_forms(src, dst, n, dtype):
    """The same unweighted graph (duplicates summed) as ``Graph``, scipy CSR and
    ``graphblas.Matrix``."""
    csr = sp.csr_matrix((np.ones(src.size), (dst, src)), shape=(n, n))
    M = gb.Matrix.from_coo(dst, src, np.ones(src.size, dtype), nrows=n, ncols=n,
                           dup_op=gb.binary.plus)
    return [Graph.from_edges(src, dst, n, dtype=dtype), csr, M]


# ---------------------------------------------------------------------- comparisons
def assert_all_identical(results):
    """Every entry of ``results`` (tuples of arrays and dicts of arrays) equals the first,
    bit for bit."""
    def same(a, b):
        if isinstance(a, dict):
            assert a.keys() == b.keys()
            for k in a:
                np.testing.assert_array_equal(a[k], b[k])
        elif isinstance(a, (tuple, list)):
            for x, y in zip(a, b, strict=True):
                same(x, y)
        else:
            np.testing.assert_array_equal(a, b)

    for res in results[1:]:
        same(res, results[0])


def run_both_orders(make_layer, g, H, dZ, attr="_project_first", values=(True, False)):
    """``[(out, dH, grads)]`` of a fresh ``make_layer()`` for each value of its order flag."""
    results = []
    for value in values:
        layer = make_layer()
        setattr(layer, attr, value)
        out = layer(g, H)
        dH = layer.backward(dZ)
        results.append((out, dH, dict(layer.grads)))
    return results


def assert_orders_agree(results, grad_rtol=1e-12, grad_atol=1e-13):
    (o1, h1, g1), (o2, h2, g2) = results
    np.testing.assert_allclose(o1, o2, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(h1, h2, rtol=1e-12, atol=1e-13)
    assert g1.keys() == g2.keys()
    for k in g1:
        np.testing.assert_allclose(g1[k], g2[k], rtol=grad_rtol, atol=grad_atol)


def check_grads_and_layout(layer, g, H):
    """Finite differences for every parameter and the input, then one gradient per parameter
    of the parameter's shape and dtype."""
    check_module_grads(layer, g, H)
    assert set(layer.grads) == set(layer.params)
    for k, v in layer.params.items():
        assert layer.grads[k].shape == v.shape and layer.grads[k].dtype == v.dtype


def assert_eval_keeps_no_cache(layer, g, H, match="training", no_cache=None):
    """Training forward caches; ``eval()`` drops the cache, forwards equal and cache nothing,
    and backward then raises ``RuntimeError``. ``no_cache(layer)`` is checked wherever the
    layer's own cache must be empty. Returns the eval-mode output."""
    def empty():
        return layer._cache is None and (no_cache is None or no_cache(layer))

    train_out = layer(g, H)
    assert layer._cache is not None
    layer.eval()
    assert empty()
    out = layer(g, H)
    assert empty()
    np.testing.assert_array_equal(out, train_out)
    with pytest.raises(RuntimeError, match=match):
        layer.backward(np.ones_like(out))
    return out


def assert_bad_features(layer, g, n, k):
    """A float32 layer with ``in_dim = k`` on an ``n``-vertex graph rejects features with a
    wrong column count, a wrong row count or the wrong dtype."""
    with pytest.raises(ValueError, match="columns"):
        layer(g, np.zeros((n, k + 1), np.float32))
    with pytest.raises(ValueError, match="rows"):
        layer(g, np.zeros((n - 1, k), np.float32))
    with pytest.raises(TypeError, match="float64"):
        layer(g, np.zeros((n, k), np.float64))


def assert_edge_values_ignored(layer, src, dst, n):
    """A float64 attention layer with ``in_dim = 4`` gives the same output on the weighted
    and the unweighted graph (scores use A's pattern only)."""
    H = features(n, 4, np.float64)
    w = np.random.default_rng(0).uniform(0.1, 5, src.size)
    a = layer(Graph.from_edges(src, dst, n, dtype=np.float64), H)
    b = layer(Graph.from_edges(src, dst, n, values=w, dtype=np.float64), H)
    np.testing.assert_array_equal(a, b)


def assert_attention_orders_agree(make_layer, g, H, dout, z_atol=1e-13):
    """``order`` = ``"auto"`` (aggregating at the smaller width), ``"aggregate_first"`` and
    ``"project_first"`` give the same output and gradients."""
    in_dim, out_dim = H.shape[1], dout.shape[1]
    results = []
    for order in ("auto", "aggregate_first", "project_first"):
        layer = make_layer()
        layer.order = order
        if order == "auto":         # aggregate at the smaller width
            assert layer.aggregates_first() == (in_dim < out_dim)
        Z = layer(g, H)
        dH = layer.backward(dout)
        results.append((Z, dH, layer.grads))
    for Z, dH, grads in results[1:]:
        np.testing.assert_allclose(Z, results[0][0], rtol=1e-12, atol=z_atol)
        np.testing.assert_allclose(dH, results[0][1], rtol=1e-10, atol=1e-12)
        for k in grads:
            np.testing.assert_allclose(grads[k], results[0][2][k], rtol=1e-10, atol=1e-12)
