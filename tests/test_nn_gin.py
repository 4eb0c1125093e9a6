"""GINConv against an independent per-vertex message-passing reference."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_module_grads
from layer_helpers import (
    N,
    assert_all_identical,
    assert_bad_features,
    assert_eval_keeps_no_cache,
    assert_orders_agree,
    check_grads_and_layout,
    graph_of,
    in_edges,
    make_edges,
    merged,
    run_both_orders,
    weighted_forms,
)

from gblas_gnn.graph import Graph
from gblas_gnn.nn.gin import GINConv


def ref_gin(E, H, weights, eps):
    """x_i = (1+ε) h_i + Σ_{j→i} w_ij h_j, then Linear → ReLU → … → Linear per vertex."""
    in_nbrs = in_edges(E)
    H = H.astype(np.float64)
    out = []
    for i in range(N):
        x = (1.0 + eps) * H[i]
        for j, a in in_nbrs[i]:
            x = x + a * H[j]
        for layer, (W, b) in enumerate(weights):
            x = x @ W.astype(np.float64) + b
            if layer < len(weights) - 1:
                x = np.where(x > 0, x, 0.0)
        out.append(x)
    return np.array(out)


def mlp_weights(layer):
    L = len(layer.mlp_dims) - 1
    return [(layer.params[f"lin{i}.W"], layer.params[f"lin{i}.bias"]) for i in range(L)]


def randomize_biases(layer, seed=1):
    rng = np.random.default_rng(seed)
    for k, v in layer.params.items():
        if k.endswith(".bias"):
            v[:] = 0.5 * rng.standard_normal(v.shape)


TOL = {np.float32: dict(rtol=3e-5, atol=3e-5), np.float64: dict(rtol=1e-12, atol=1e-12)}
DIMS = [[4, 2], [4, 3, 2], [3, 5, 2], [3, 6, 5, 2], [2, 2, 2]]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dims", DIMS)
@pytest.mark.parametrize("eps,train_eps", [(0.0, False), (0.3, False), (-0.2, True),
                                           (0.0, True)])
def test_forward_matches_reference(dtype, weighted, dims, eps, train_eps):
    src, dst, w = make_edges(0, weighted)
    g = graph_of(src, dst, w, dtype)
    layer = GINConv(dims, eps=eps, train_eps=train_eps, dtype=dtype)
    randomize_biases(layer)
    H = np.random.default_rng(2).standard_normal((N, dims[0])).astype(dtype)
    out = layer(g, H)
    assert out.dtype == dtype and out.shape == (N, dims[-1])
    ref = ref_gin(merged(src, dst, w), H, mlp_weights(layer), eps)
    np.testing.assert_allclose(out, ref, **TOL[dtype])


def test_isolated_vertices_see_only_themselves():
    src, dst, w = make_edges(0, True)
    layer = GINConv([3, 4, 2], eps=0.5, dtype=np.float64)
    randomize_biases(layer)
    H = np.random.default_rng(0).standard_normal((N, 3))
    out = layer(graph_of(src, dst, w, np.float64), H)
    lone = layer(Graph.from_edges([], [], N, dtype=np.float64), H)   # no edges at all
    np.testing.assert_array_equal(out[7:], lone[7:])
    assert not np.allclose(out[:7], lone[:7])


@pytest.mark.parametrize("dims", [[4, 2], [4, 3, 2], [3, 5, 2], [3, 6, 5, 2]])
@pytest.mark.parametrize("train_eps", [False, True])
def test_both_orders_agree(dims, train_eps):
    src, dst, w = make_edges(1, True)
    g = graph_of(src, dst, w, np.float64)
    H = np.random.default_rng(0).standard_normal((N, dims[0]))
    dZ = np.random.default_rng(1).standard_normal((N, dims[-1]))

    def make():
        layer = GINConv(dims, eps=0.25, train_eps=train_eps, dtype=np.float64, seed=4)
        randomize_biases(layer)
        return layer

    assert_orders_agree(run_both_orders(make, g, H, dZ), grad_rtol=1e-11, grad_atol=1e-12)


def test_order_choice():
    assert GINConv([4, 3, 2])._project_first
    assert not GINConv([3, 5, 2])._project_first
    assert not GINConv([3, 3])._project_first


GRAD_EPS = [(0.0, False), (0.3, True), (-0.4, True)]


# every MLP depth in both orders on both graphs; the eps settings rotate so that each
# depth and each order meets a fixed and a trained eps
@pytest.mark.parametrize("weighted, dims, eps, train_eps, project_first", [
    (weighted, dims, *GRAD_EPS[(i + j) % 3], project_first)
    for i, dims in enumerate(DIMS)
    for j, (weighted, project_first) in enumerate(
        [(False, True), (True, True), (False, False), (True, False)])])
def test_gradients_finite_differences(weighted, dims, eps, train_eps, project_first):
    src, dst, w = make_edges(5, weighted)
    g = graph_of(src, dst, w, np.float64)
    layer = GINConv(dims, eps=eps, train_eps=train_eps, dtype=np.float64, seed=7)
    randomize_biases(layer)
    layer._project_first = project_first
    H = np.random.default_rng(8).standard_normal((N, dims[0]))
    check_grads_and_layout(layer, g, H)


def test_params_layout():
    layer = GINConv([5, 4, 3, 2])
    assert list(layer.params) == ["lin0.W", "lin0.bias", "lin1.W", "lin1.bias", "lin2.W",
                                  "lin2.bias"]
    shapes = {k: v.shape for k, v in layer.params.items()}
    assert shapes == {"lin0.W": (5, 4), "lin0.bias": (4,), "lin1.W": (4, 3),
                      "lin1.bias": (3,), "lin2.W": (3, 2), "lin2.bias": (2,)}
    assert all(v.dtype == np.float32 for v in layer.params.values())
    assert layer.eps == 0.0 and not layer.train_eps
    trained = GINConv([5, 2], eps=0.5, train_eps=True, dtype=np.float64)
    assert set(trained.params) == {"lin0.W", "lin0.bias", "eps"}
    assert trained.params["eps"].shape == (1,) and trained.params["eps"].dtype == np.float64
    assert trained.eps == 0.5
    trained.params["eps"][0] = 0.75
    assert trained.eps == 0.75
    # different layers get different initial weights; the seed reproduces them
    a, b = GINConv([4, 4, 4], seed=1), GINConv([4, 4, 4], seed=1)
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k])
    assert not np.array_equal(a.params["lin0.W"], a.params["lin1.W"])
    assert not np.array_equal(a.params["lin0.W"], GINConv([4, 4, 4], seed=2).params["lin0.W"])


def test_replaced_params_are_used():
    """An optimiser may rebind ``params[k]`` to a new array; forward and backward follow."""
    src, dst, w = make_edges(2, True)
    g = graph_of(src, dst, w, np.float64)
    layer = GINConv([3, 4, 2], eps=0.1, train_eps=True, dtype=np.float64)
    H = np.random.default_rng(0).standard_normal((N, 3))
    rng = np.random.default_rng(1)
    for k in list(layer.params):
        layer.params[k] = rng.standard_normal(layer.params[k].shape)
    np.testing.assert_allclose(layer(g, H), ref_gin(merged(src, dst, w), H, mlp_weights(layer),
                                                    layer.eps), rtol=1e-12, atol=1e-12)
    check_module_grads(layer, g, H)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_input_forms_identical(dtype):
    forms = weighted_forms(4, dtype)
    H = np.random.default_rng(0).standard_normal((N, 4)).astype(dtype)
    dZ = np.random.default_rng(1).standard_normal((N, 3)).astype(dtype)
    outs = []
    for form in forms:
        layer = GINConv([4, 5, 3], eps=0.2, train_eps=True, dtype=dtype)
        randomize_biases(layer)
        outs.append((layer(form, H), layer.backward(dZ), dict(layer.grads)))
    assert_all_identical(outs)


def test_eval_mode_keeps_no_cache():
    src, dst, w = make_edges(0, False)
    g = graph_of(src, dst, w, np.float32)
    H = np.random.default_rng(0).standard_normal((N, 3)).astype(np.float32)
    layer = GINConv([3, 4, 4, 2], train_eps=True)
    assert_eval_keeps_no_cache(layer, g, H)
    layer.train()
    layer(g, H)
    layer.backward(np.ones((N, 2), np.float32))
    fresh = GINConv([3, 4, 2]).eval()
    fresh(g, H)
    assert fresh._cache is None


@pytest.mark.parametrize("dims", [[], [4], [4, 0], [0, 4], [4, -2, 3], [4, 2.5], [4, True]])
def test_bad_mlp_dims(dims):
    with pytest.raises(ValueError, match="mlp_dims"):
        GINConv(dims)


@pytest.mark.parametrize("dims", [4, "42", None])
def test_mlp_dims_not_a_sequence(dims):
    with pytest.raises(TypeError, match="mlp_dims"):
        GINConv(dims)


def test_bad_eps():
    with pytest.raises(ValueError, match="eps"):
        GINConv([3, 2], eps=float("nan"))
    with pytest.raises(ValueError, match="eps"):
        GINConv([3, 2], eps=float("inf"))
    with pytest.raises(TypeError, match="eps"):
        GINConv([3, 2], eps="0.1")
    with pytest.raises(TypeError, match="eps"):
        GINConv([3, 2], eps=True)
    with pytest.raises(TypeError):
        GINConv([3, 2], dtype=np.int64)


def test_bad_inputs():
    src, dst, w = make_edges(0, False)
    g = graph_of(src, dst, w, np.float32)
    layer = GINConv([3, 4, 2])
    H = np.zeros((N, 3), np.float32)
    with pytest.raises(RuntimeError):
        layer.backward(np.zeros((N, 2), np.float32))
    assert_bad_features(layer, g, N, 3)
    bad = H.copy()
    bad[0, 0] = np.inf
    with pytest.raises(ValueError, match="NaN or Inf"):
        layer(g, bad)
    with pytest.raises(TypeError):
        layer([[0, 1], [1, 0]], H)
    layer(g, H)
    with pytest.raises(ValueError):
        layer.backward(np.zeros((N, 4), np.float32))
    with pytest.raises(ValueError):
        layer.backward(np.zeros((N - 1, 2), np.float32))
