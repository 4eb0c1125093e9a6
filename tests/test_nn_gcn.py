"""GCNConv against an independent per-vertex message-passing reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
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
    randomize_bias,
    run_both_orders,
    weighted_forms,
)

from gblas_gnn.nn.gcn import GCNConv


def ref_gcn(E, H, W, b, normalize, add_self_loops):
    """Per-vertex loop: z_i = Σ_{j→i} w_ij / sqrt(deg_i deg_j) · (h_j W) + b."""
    E = dict(E)
    if normalize and add_self_loops:
        for i in range(N):
            E.setdefault((i, i), 1.0)               # remaining self loops only
    in_nbrs = in_edges(E)
    deg = [0.0] * N
    for i in range(N):
        for _, x in in_nbrs[i]:
            deg[i] += x
    dinv = [1.0 / math.sqrt(d) if d > 0 else 0.0 for d in deg]
    H, W = H.astype(np.float64), W.astype(np.float64)
    Z = np.zeros((N, W.shape[1]))
    for i in range(N):
        for j, x in in_nbrs[i]:
            coef = x * dinv[i] * dinv[j] if normalize else x
            Z[i] += coef * (H[j] @ W)
    return Z + (0.0 if b is None else b)


TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-12, atol=1e-12)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("add_self_loops", [True, False])
@pytest.mark.parametrize("dims", [(5, 3), (3, 5), (4, 4)])
@pytest.mark.parametrize("bias", [True, False])
def test_forward_matches_reference(dtype, weighted, normalize, add_self_loops, dims, bias):
    src, dst, w = make_edges(0, weighted)
    g = graph_of(src, dst, w, dtype)
    layer = GCNConv(*dims, bias=bias, normalize=normalize, add_self_loops=add_self_loops,
                    dtype=dtype)
    randomize_bias(layer)
    H = np.random.default_rng(2).standard_normal((N, dims[0])).astype(dtype)
    out = layer(g, H)
    assert out.dtype == dtype and out.shape == (N, dims[1])
    ref = ref_gcn(merged(src, dst, w), H, layer.params["W"], layer.params.get("bias"),
                  normalize, add_self_loops)
    np.testing.assert_allclose(out, ref, **TOL[dtype])


def test_isolated_vertices_get_bias_only():
    src, dst, w = make_edges(0, True)
    for add in (True, False):
        layer = GCNConv(3, 2, add_self_loops=add)
        randomize_bias(layer)
        H = np.random.default_rng(0).standard_normal((N, 3)).astype(np.float32)
        out = layer(graph_of(src, dst, w, np.float32), H)
        if add:   # a self loop of weight 1 and degree 1: z = h W + b
            np.testing.assert_allclose(out[8:], H[8:] @ layer.params["W"] + layer.params["bias"],
                                       rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_allclose(out[8:], np.broadcast_to(layer.params["bias"], (2, 2)))


def test_normalize_false_ignores_add_self_loops():
    src, dst, w = make_edges(3, True)
    g = graph_of(src, dst, w, np.float64)
    H = np.random.default_rng(0).standard_normal((N, 4))
    a = GCNConv(4, 3, normalize=False, add_self_loops=True, dtype=np.float64)(g, H)
    b = GCNConv(4, 3, normalize=False, add_self_loops=False, dtype=np.float64)(g, H)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dims", [(5, 3), (3, 5)])
@pytest.mark.parametrize("normalize", [True, False])
def test_both_orders_agree(dims, normalize):
    src, dst, w = make_edges(1, True)
    g = graph_of(src, dst, w, np.float64)
    H = np.random.default_rng(0).standard_normal((N, dims[0]))
    dZ = np.random.default_rng(1).standard_normal((N, dims[1]))

    def make():
        layer = GCNConv(*dims, normalize=normalize, dtype=np.float64, seed=4)
        randomize_bias(layer)
        return layer

    assert_orders_agree(run_both_orders(make, g, H, dZ))


def test_order_choice_follows_dims():
    assert GCNConv(5, 3)._project_first
    assert GCNConv(4, 4)._project_first
    assert not GCNConv(3, 5)._project_first


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("add_self_loops", [True, False])
@pytest.mark.parametrize("project_first", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_gradients_finite_differences(weighted, normalize, add_self_loops, project_first,
                                      bias):
    src, dst, w = make_edges(5, weighted)
    g = graph_of(src, dst, w, np.float64)
    layer = GCNConv(3, 2, bias=bias, normalize=normalize, add_self_loops=add_self_loops,
                    dtype=np.float64, seed=7)
    randomize_bias(layer)
    layer._project_first = project_first
    H = np.random.default_rng(8).standard_normal((N, 3))
    check_grads_and_layout(layer, g, H)


def test_gradients_cached():
    src, dst, w = make_edges(6, True)
    layer = GCNConv(3, 4, cached=True, dtype=np.float64)
    randomize_bias(layer)
    check_module_grads(layer, sp.csr_matrix(graph_of(src, dst, w, np.float64).to_scipy()),
                       np.random.default_rng(0).standard_normal((N, 3)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cached", [False, True])
def test_input_forms_identical(dtype, cached):
    forms = weighted_forms(4, dtype)
    H = np.random.default_rng(0).standard_normal((N, 4)).astype(dtype)
    dZ = np.random.default_rng(1).standard_normal((N, 3)).astype(dtype)
    outs = []
    for form in forms:
        layer = GCNConv(4, 3, cached=cached, dtype=dtype)
        randomize_bias(layer)
        outs.append((layer(form, H), layer.backward(dZ), layer.grads["W"]))
    assert_all_identical(outs)


def test_cached_reuses_adjacency_of_same_object_only():
    src, dst, w = make_edges(2, True)
    csr = graph_of(src, dst, w, np.float32).to_scipy()
    H = np.random.default_rng(0).standard_normal((N, 3)).astype(np.float32)
    layer = GCNConv(3, 2, cached=True)
    out1 = layer(csr, H)
    S1 = layer._cache.S
    out2 = layer(csr, H)
    assert layer._cache.S is S1                   # no conversion, no normalisation
    np.testing.assert_array_equal(out1, out2)
    other = graph_of(*make_edges(9, True), np.float32)   # another graph is not stale
    out3 = layer(other, H)
    assert layer._cache.S is not S1
    fresh = GCNConv(3, 2)(other, H)
    np.testing.assert_array_equal(out3, fresh)
    # the cache survives eval() (it is no backward cache) and answers there too
    layer.eval()
    np.testing.assert_array_equal(layer(other, H), fresh)
    assert layer._cache is None
    # without `cached` every scipy call converts afresh
    plain = GCNConv(3, 2)
    plain(csr, H)
    S_a = plain._cache.S
    plain(csr, H)
    assert plain._cache.S is not S_a
    assert plain._adj_cache is None


def test_eval_mode_keeps_no_cache():
    src, dst, w = make_edges(0, False)
    g = graph_of(src, dst, w, np.float32)
    H = np.random.default_rng(0).standard_normal((N, 3)).astype(np.float32)
    layer = GCNConv(3, 2)
    assert_eval_keeps_no_cache(layer, g, H)
    assert layer._adj_cache is None
    layer.train()
    layer(g, H)
    layer.backward(np.ones((N, 2), np.float32))


def test_params_layout_and_seed():
    layer = GCNConv(6, 4)
    assert set(layer.params) == {"W", "bias"}
    assert layer.params["W"].shape == (6, 4) and layer.params["bias"].shape == (4,)
    assert layer.params["W"].dtype == np.float32
    assert np.all(layer.params["bias"] == 0)
    assert set(GCNConv(6, 4, bias=False).params) == {"W"}
    assert GCNConv(6, 4, dtype=np.float64).params["W"].dtype == np.float64
    np.testing.assert_array_equal(GCNConv(6, 4, seed=3).params["W"],
                                  GCNConv(6, 4, seed=3).params["W"])
    assert not np.array_equal(GCNConv(6, 4, seed=3).params["W"], layer.params["W"])


@pytest.mark.parametrize("args", [(0, 2), (2, 0), (-1, 2), (2.5, 2), (True, 2), (2, None)])
def test_bad_dims(args):
    with pytest.raises(ValueError, match="positive integer"):
        GCNConv(*args)


def test_bad_dtype():
    with pytest.raises(TypeError):
        GCNConv(2, 2, dtype=np.int32)


@pytest.mark.parametrize("cached", [False, True])
def test_bad_inputs(cached):
    src, dst, w = make_edges(0, False)
    g = graph_of(src, dst, w, np.float32)
    layer = GCNConv(3, 2, cached=cached)
    H = np.zeros((N, 3), np.float32)
    with pytest.raises(RuntimeError):
        layer.backward(np.zeros((N, 2), np.float32))
    layer(g, H)                                           # fills the cache when cached
    assert_bad_features(layer, g, N, 3)
    with pytest.raises(TypeError):
        layer(g, [[0.0] * 3] * N)
    with pytest.raises(ValueError, match="2-D"):
        layer(g, np.zeros(N, np.float32))
    bad = H.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        layer(g, bad)
    bad[2, 1] = np.inf
    with pytest.raises(ValueError, match="NaN or Inf"):
        layer(g, bad)
    with pytest.raises(TypeError):
        layer(np.eye(N, dtype=np.float32), H)
    with pytest.raises(ValueError, match="square"):
        layer(sp.csr_matrix((N, N + 1), dtype=np.float32), H)
    layer(g, H)
    with pytest.raises(ValueError):
        layer.backward(np.zeros((N, 3), np.float32))
    with pytest.raises(ValueError):
        layer.backward(np.zeros((N + 1, 2), np.float32))
    with pytest.raises(TypeError):
        layer.backward(np.zeros((N, 2), np.float64))


@pytest.mark.cpu_only
def test_backward_builds_the_transpose_once_and_inference_never():
    """The cpu executor stores Âᵀ (the CSC buffers of Â) at the first backward, reuses it
    after, and never builds it in evaluation mode."""
    from gblas_gnn import Graph
    from gblas_gnn.executors import CPUExecutor

    ex = CPUExecutor()
    rng = np.random.default_rng(7)
    g = Graph.from_edges(rng.integers(0, 30, 90), rng.integers(0, 30, 90), 30)
    H = rng.standard_normal((30, 4)).astype(np.float32)
    layer = GCNConv(4, 3, executor=ex)
    layer.eval()
    layer(g, H)
    assert len(ex._csc._entries) == 0
    layer.train()
    for _ in range(3):
        out = layer(g, H)
        layer.backward(np.ones_like(out))
    assert len(ex._csc._entries) == 1
    assert len(ex._transposes._entries) == 0
