"""VAConv against an independent per-vertex message-passing reference, plus gradients."""

import math

import numpy as np
import pytest
from gradcheck import check_module_grads
from layer_helpers import (
    assert_attention_orders_agree,
    assert_edge_values_ignored,
    assert_eval_keeps_no_cache,
    features,
    in_neighbours,
    random_edges,
    reduce_messages,
    unweighted_forms,
)

import gblas_gnn as gg
from gblas_gnn.nn.va import VAConv

AGGRS = ["sum", "max", "min", "mean"]
DTYPES = [np.float32, np.float64]


# ---------------------------------------------------------------------- reference (numpy loops)
def edges_of(n, m, seed):
    """Random directed edges; vertices 2 and n-1 isolated; three duplicates."""
    return random_edges(n, m, seed, isolated=(2, n - 1))


def va_reference(src, dst, n, H, W, aggr, softmax, self_loops, combine="times"):
    """For each target i: score_ij = <H_i, H_j> (softmax over j if asked), message
    score_ij · (H W)_j (or score_ij + (H W)_j with ``combine="plus"``), reduced by ``aggr``."""
    H = H.astype(np.float64)
    X = H @ W.astype(np.float64)
    nb = in_neighbours(src, dst, n, self_loops)
    out = np.zeros((n, X.shape[1]))
    for i in range(n):
        js = nb[i]
        if not js:
            continue
        scores = [float(np.dot(H[i], H[j])) for j in js]
        if softmax:
            top = max(scores)
            ex = [math.exp(s - top) for s in scores]
            scores = [e / sum(ex) for e in ex]
        msgs = np.array([(s + X[j]) if combine == "plus" else s * X[j]
                         for s, j in zip(scores, js, strict=True)])
        out[i] = reduce_messages(msgs, aggr)
    return out


def tol(dtype):
    return dict(rtol=2e-4, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)


N = 11


@pytest.fixture(scope="module")
def edges():
    return edges_of(N, 24, seed=4)


# ---------------------------------------------------------------------- forward
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("aggr", AGGRS)
@pytest.mark.parametrize("softmax", [False, True])
@pytest.mark.parametrize("self_loops", [True, False])
@pytest.mark.parametrize("out_dim", [2, 6])
def test_forward_matches_reference(edges, dtype, aggr, softmax, self_loops, out_dim):
    src, dst = edges
    g = gg.Graph.from_edges(src, dst, N, dtype=dtype)
    H = features(N, 4, dtype)
    layer = VAConv(4, out_dim, softmax=softmax, add_self_loops=self_loops, aggr=aggr, seed=3,
                   dtype=dtype)
    Z = layer(g, H)
    ref = va_reference(src, dst, N, H, layer.params["W"], aggr, softmax, self_loops)
    assert Z.dtype == dtype and Z.shape == (N, out_dim)
    np.testing.assert_allclose(Z, ref, **tol(dtype))
    if not self_loops:                      # isolated vertices have no in-edges → 0
        assert np.all(Z[[2, N - 1]] == 0)


def test_defaults_and_params():
    layer = VAConv(5, 7, seed=2)
    assert set(layer.params) == {"W"} and set(layer.grads) == {"W"}
    assert layer.params["W"].shape == (5, 7) and layer.params["W"].dtype == np.float32
    assert np.abs(layer.params["W"]).max() <= math.sqrt(6 / 12)
    assert not layer.softmax and layer.add_self_loops and layer.aggr == "sum"
    np.testing.assert_array_equal(layer.params["W"], VAConv(5, 7, seed=2).params["W"])
    assert not np.array_equal(layer.params["W"], VAConv(5, 7, seed=3).params["W"])


# ---------------------------------------------------------------------- gradients
# every aggr with and without softmax and at out_dim < in_dim and > in_dim (both orders)
@pytest.mark.parametrize("aggr, softmax, out_dim", [
    ("sum", False, 2), ("sum", True, 5), ("max", True, 2), ("max", False, 5),
    ("min", False, 2), ("min", True, 5), ("mean", True, 2), ("mean", False, 5)])
def test_gradients_finite_differences(aggr, softmax, out_dim):
    n = 9
    src, dst = edges_of(n, 18, seed=12)
    g = gg.Graph.from_edges(src, dst, n, dtype=np.float64)
    layer = VAConv(3, out_dim, softmax=softmax, aggr=aggr, seed=1, dtype=np.float64)
    check_module_grads(layer, g, features(n, 3, np.float64, seed=5))
    assert layer.grads["W"].shape == (3, out_dim) and layer.grads["W"].dtype == np.float64


@pytest.mark.parametrize("aggr", ["sum", "min"])
@pytest.mark.parametrize("softmax", [False, True])
def test_gradients_without_self_loops(aggr, softmax):
    n = 8
    src, dst = edges_of(n, 16, seed=6)
    g = gg.Graph.from_edges(src, dst, n, dtype=np.float64)
    layer = VAConv(3, 4, softmax=softmax, add_self_loops=False, aggr=aggr, dtype=np.float64)
    check_module_grads(layer, g, features(n, 3, np.float64, seed=2))


def test_gradients_match_paper_equations():
    """Eqs. 7–13 written out with dense numpy on a toy graph (Ψ = A ⊙ HHᵀ, Z = Ψ H W)."""
    n = 7
    src, dst = edges_of(n, 14, seed=1)
    g = gg.Graph.from_edges(src, dst, n, dtype=np.float64)
    A = (g.with_self_loops().to_scipy().toarray() != 0).astype(float)
    H = features(n, 3, np.float64)
    dZ = features(n, 4, np.float64, seed=9)
    layer = VAConv(3, 4, dtype=np.float64)
    W = layer.params["W"]
    layer(g, H)
    dH = layer.backward(dZ)
    Psi = A * (H @ H.T)
    dPsi = A * (dZ @ (H @ W).T)
    np.testing.assert_allclose(layer.grads["W"], (Psi @ H).T @ dZ, rtol=1e-12)
    np.testing.assert_allclose(dH, Psi.T @ dZ @ W.T + (dPsi + dPsi.T) @ H, rtol=1e-11)


@pytest.mark.parametrize("aggr", ["sum", "mean"])
@pytest.mark.parametrize("softmax", [False, True])
@pytest.mark.parametrize("shape", [(3, 5), (5, 3)])
def test_both_orders_agree(aggr, softmax, shape):
    n = 9
    src, dst = edges_of(n, 18, seed=2)
    g = gg.Graph.from_edges(src, dst, n, dtype=np.float64)
    H = features(n, shape[0], np.float64)
    dout = features(n, shape[1], np.float64, seed=8)
    assert_attention_orders_agree(
        lambda: VAConv(*shape, softmax=softmax, aggr=aggr, dtype=np.float64), g, H, dout)
    layer = VAConv(*shape, softmax=softmax, aggr=aggr, dtype=np.float64)
    layer.order = "aggregate_first"
    check_module_grads(layer, g, H)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("softmax", [False, True])
def test_float32_backward_matches_float64(edges, dtype, softmax):
    src, dst = edges
    H64 = features(N, 4, np.float64)
    dout = features(N, 3, np.float64, seed=6)
    ref = VAConv(4, 3, softmax=softmax, dtype=np.float64)
    ref(gg.Graph.from_edges(src, dst, N, dtype=np.float64), H64)
    dH_ref = ref.backward(dout)
    layer = VAConv(4, 3, softmax=softmax, dtype=dtype)
    layer(gg.Graph.from_edges(src, dst, N, dtype=dtype), H64.astype(dtype))
    dH = layer.backward(dout.astype(dtype))
    assert dH.dtype == dtype and layer.grads["W"].dtype == dtype
    np.testing.assert_allclose(dH, dH_ref, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(layer.grads["W"], ref.grads["W"], rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("softmax", [False, True])
def test_zero_feature_rows(edges, dtype, softmax):
    src, dst = edges
    g = gg.Graph.from_edges(src, dst, N, dtype=dtype)
    H = features(N, 4, dtype)
    H[[0, 2, 5]] = 0
    layer = VAConv(4, 3, softmax=softmax, dtype=dtype)
    Z = layer(g, H)
    np.testing.assert_allclose(Z, va_reference(src, dst, N, H, layer.params["W"], "sum",
                                               softmax, True), **tol(dtype))
    dH = layer.backward(np.ones_like(Z))
    assert np.isfinite(dH).all() and np.isfinite(layer.grads["W"]).all()


# ---------------------------------------------------------------------- input forms, modes
@pytest.mark.parametrize("dtype", DTYPES)
def test_graph_input_forms_identical(edges, dtype):
    src, dst = edges
    H = features(N, 4, dtype)
    layer = VAConv(4, 3, softmax=True, dtype=dtype)
    outs = [layer(x, H) for x in unweighted_forms(src, dst, N, dtype)]
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])


def test_edge_values_are_ignored(edges):
    src, dst = edges
    assert_edge_values_ignored(VAConv(4, 3, dtype=np.float64), src, dst, N)


def test_eval_mode_keeps_no_cache(edges):
    src, dst = edges
    g = gg.Graph.from_edges(src, dst, N)
    H = features(N, 4, np.float32)
    assert_eval_keeps_no_cache(VAConv(4, 3, softmax=True, aggr="min"), g, H)


# ---------------------------------------------------------------------- semirings
def test_a_tropical_semiring_trains(edges):
    # min_plus has registered derivatives: the layer trains through it
    src, dst = edges
    g = gg.Graph.from_edges(src, dst, N, dtype=np.float64)
    H = features(N, 4, np.float64)
    for aggr in ("min_plus", gg.semirings.get("min_plus")):
        layer = VAConv(4, 3, softmax=True, aggr=aggr, dtype=np.float64).eval()
        Z = layer(g, H)
        ref = va_reference(src, dst, N, H, layer.params["W"], "min", True, True,
                           combine="plus")
        np.testing.assert_allclose(Z, ref, rtol=1e-10)
        layer.train()
        np.testing.assert_allclose(layer(g, H), Z, rtol=1e-12)
        check_module_grads(layer, g, H)


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(in_dim=0, out_dim=2), ValueError, "in_dim"),
    (dict(in_dim=3, out_dim=-1), ValueError, "out_dim"),
    (dict(in_dim=3, out_dim=None), ValueError, "out_dim"),
    (dict(in_dim=3, out_dim=2.0), ValueError, "out_dim"),
    (dict(in_dim=3, out_dim=2, aggr="median"), ValueError, "aggregation"),
    (dict(in_dim=3, out_dim=2, aggr=None), ValueError, "aggr"),
    (dict(in_dim=3, out_dim=2, dtype=np.float16), TypeError, "dtype"),
])
def test_constructor_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        VAConv(**kwargs)


def test_forward_backward_errors(edges):
    src, dst = edges
    g = gg.Graph.from_edges(src, dst, N)
    layer = VAConv(4, 3)
    with pytest.raises(RuntimeError):
        layer.backward(np.ones((N, 3), np.float32))
    with pytest.raises(ValueError, match="columns"):
        layer(g, features(N, 2, np.float32))
    with pytest.raises(ValueError, match="rows"):
        layer(g, features(N - 1, 4, np.float32))
    with pytest.raises(TypeError, match="dtype"):
        layer(g, features(N, 4, np.float64))
    bad = features(N, 4, np.float32)
    bad[0, 0] = np.inf
    with pytest.raises(ValueError, match="NaN or Inf"):
        layer(g, bad)
    with pytest.raises(ValueError, match="order"):
        layer.order = "random"
    layer(g, features(N, 4, np.float32))
    with pytest.raises(ValueError, match="dout"):
        layer.backward(np.ones((N + 1, 3), np.float32))
    with pytest.raises(TypeError, match="dout"):
        layer.backward(np.ones((N, 3), np.float64))
    layer.params["W"][1, 2] = np.nan
    with pytest.raises(ValueError, match="'W'"):
        layer(g, features(N, 4, np.float32))
