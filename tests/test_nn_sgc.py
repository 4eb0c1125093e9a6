"""SGConv against an independent per-vertex message-passing reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
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

from gblas_gnn.executors import CPUExecutor
from gblas_gnn.nn.sgc import SGConv


def ref_sgc(E, H, W, b, K, add_self_loops):
    """K rounds of x_i ← Σ_{j→i} w_ij / sqrt(deg_i deg_j) x_j, then x W + b."""
    E = dict(E)
    if add_self_loops:
        for i in range(N):
            E.setdefault((i, i), 1.0)
    in_nbrs = in_edges(E)
    deg = [sum(x for _, x in in_nbrs[i]) for i in range(N)]
    dinv = [1.0 / math.sqrt(d) if d > 0 else 0.0 for d in deg]
    X = H.astype(np.float64)
    for _ in range(K):
        nxt = np.zeros_like(X)
        for i in range(N):
            for j, x in in_nbrs[i]:
                nxt[i] += x * dinv[i] * dinv[j] * X[j]
        X = nxt
    return X @ W.astype(np.float64) + (0.0 if b is None else b)


class CountingExecutor(CPUExecutor):
    """Counts sparse products so that the cache can be observed (every ``plus_times``
    product of the cpu executor, ``spmm`` and ``spmm_t`` included, runs ``spmm_affine``)."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def spmm_affine(self, S, H, self_weight=None, bias=None, transpose=False):
        self.calls += 1
        return super().spmm_affine(S, H, self_weight, bias, transpose)


TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-12, atol=1e-12)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("add_self_loops", [True, False])
@pytest.mark.parametrize("K", [1, 2, 3])
@pytest.mark.parametrize("dims", [(5, 3), (3, 5)])
@pytest.mark.parametrize("cached", [True, False])
def test_forward_matches_reference(dtype, weighted, add_self_loops, K, dims, cached):
    src, dst, w = make_edges(0, weighted)
    g = graph_of(src, dst, w, dtype)
    layer = SGConv(*dims, K=K, add_self_loops=add_self_loops, cached=cached, dtype=dtype)
    randomize_bias(layer)
    H = np.random.default_rng(2).standard_normal((N, dims[0])).astype(dtype)
    out = layer(g, H)
    assert out.dtype == dtype and out.shape == (N, dims[1])
    ref = ref_sgc(merged(src, dst, w), H, layer.params["W"], layer.params["bias"], K,
                  add_self_loops)
    np.testing.assert_allclose(out, ref, **TOL[dtype])
    np.testing.assert_allclose(layer(g, H), ref, **TOL[dtype])    # second call (cache hit)


def test_no_bias():
    src, dst, w = make_edges(1, True)
    layer = SGConv(4, 2, bias=False, dtype=np.float64)
    assert set(layer.params) == {"W"}
    H = np.random.default_rng(0).standard_normal((N, 4))
    np.testing.assert_allclose(layer(graph_of(src, dst, w, np.float64), H),
                               ref_sgc(merged(src, dst, w), H, layer.params["W"], None, 2,
                                       True), rtol=1e-12, atol=1e-12)
    layer.backward(np.ones((N, 2)))
    assert set(layer.grads) == {"W"}


def test_isolated_vertices():
    src, dst, w = make_edges(0, True)
    H = np.random.default_rng(0).standard_normal((N, 3))
    layer = SGConv(3, 2, K=3, dtype=np.float64)
    randomize_bias(layer)
    out = layer(graph_of(src, dst, w, np.float64), H)
    np.testing.assert_allclose(out[8:], H[8:] @ layer.params["W"] + layer.params["bias"],
                               rtol=1e-12)
    layer = SGConv(3, 2, K=3, add_self_loops=False, dtype=np.float64)
    randomize_bias(layer)
    out = layer(graph_of(src, dst, w, np.float64), H)
    np.testing.assert_array_equal(out[7:], np.broadcast_to(layer.params["bias"], (3, 2)))


@pytest.mark.parametrize("dims", [(5, 3), (3, 5), (4, 4)])
@pytest.mark.parametrize("K", [1, 2])
def test_both_orders_agree(dims, K):
    src, dst, w = make_edges(1, True)
    g = graph_of(src, dst, w, np.float64)
    H = np.random.default_rng(0).standard_normal((N, dims[0]))
    dZ = np.random.default_rng(1).standard_normal((N, dims[1]))

    def make():
        layer = SGConv(*dims, K=K, cached=False, dtype=np.float64, seed=4)
        randomize_bias(layer)
        return layer

    assert_orders_agree(run_both_orders(make, g, H, dZ))


def test_order_choice():
    assert not SGConv(5, 3)._project_first                # cached: propagate first
    assert SGConv(5, 3, cached=False)._project_first
    assert not SGConv(3, 5, cached=False)._project_first


GRAD_CONFIGS = [((3, 2), True, False), ((3, 2), False, True), ((3, 2), False, False),
                ((2, 3), True, False), ((2, 3), False, True), ((2, 3), False, False)]
GRAD_GRAPHS = [(False, True), (False, False), (True, True), (True, False)]


# every (dims, cached, order) config on every (weighted, self loops) graph; K = 1, 2, 3
# rotates so that each config and each graph meets every K
@pytest.mark.parametrize("weighted, add_self_loops, K, dims, cached, project_first", [
    (weighted, loops, 1 + (i + j) % 3, dims, cached, project_first)
    for i, (dims, cached, project_first) in enumerate(GRAD_CONFIGS)
    for j, (weighted, loops) in enumerate(GRAD_GRAPHS)])
def test_gradients_finite_differences(weighted, add_self_loops, K, dims, cached,
                                      project_first):
    src, dst, w = make_edges(5, weighted)
    g = graph_of(src, dst, w, np.float64)
    layer = SGConv(*dims, K=K, add_self_loops=add_self_loops, cached=cached,
                   dtype=np.float64, seed=7)
    randomize_bias(layer)
    layer._project_first = project_first
    H = np.random.default_rng(8).standard_normal((N, dims[0]))
    # with the cache on, the finite differences perturb H in place: the cache must notice
    check_grads_and_layout(layer, g, H)


def test_cache_computes_once_per_graph_and_features():
    src, dst, w = make_edges(3, True)
    g = graph_of(src, dst, w, np.float64)
    ex = CountingExecutor()
    layer = SGConv(4, 2, K=3, cached=True, dtype=np.float64, executor=ex)
    H = np.random.default_rng(0).standard_normal((N, 4))
    out = layer(g, H)
    assert ex.calls == 3
    np.testing.assert_array_equal(layer(g, H), out)
    np.testing.assert_array_equal(layer(g, H.copy()), out)   # equal features: still cached
    assert ex.calls == 3
    # gradient w.r.t. H after a cached forward: (Âᵀ)ᴷ dZ Wᵀ
    layer.backward(np.ones((N, 2)))
    assert ex.calls == 6
    # features changed in place → recomputed, and correct
    H[0, 0] += 1.0
    out2 = layer(g, H)
    assert ex.calls == 9
    np.testing.assert_allclose(out2, ref_sgc(merged(src, dst, w), H, layer.params["W"],
                                             layer.params["bias"], 3, True), rtol=1e-12)
    # another graph object → recomputed
    g2 = graph_of(*make_edges(4, True), np.float64)
    layer(g2, H)
    assert ex.calls == 12
    # parameters changed: the cache still serves Âᴷ H, the output follows the new W
    layer.params["W"] = layer.params["W"] * 2
    np.testing.assert_allclose(layer(g2, H), ref_sgc(merged(*make_edges(4, True)), H,
                                                     layer.params["W"], layer.params["bias"],
                                                     3, True), rtol=1e-12)
    assert ex.calls == 12
    # the cache survives eval() (not a backward cache); eval keeps no backward cache
    layer.eval()
    layer(g2, H)
    assert ex.calls == 12 and layer._cache is None
    # without the cache every forward propagates
    plain = SGConv(4, 2, K=2, cached=False, dtype=np.float64, executor=ex)
    plain(g, H)
    plain(g, H)
    assert ex.calls == 16 and plain._prop_cache is None


class OutvotedExecutor(CountingExecutor):
    """An executor whose processes' vote always goes against this one's hit (as if another
    process saw a miss); the rest of it is one process (a multi-process executor must
    override the whole process tier, which this test does not need)."""

    def all_agree(self, flag: bool) -> bool:
        self.votes = getattr(self, "votes", 0) + 1
        return False


def test_the_cache_is_used_only_when_every_process_hits_it():
    """The hit is decided together: a process whose own rows still match recomputes when
    another one's do not, or it would skip the collectives of the propagation (a hang)."""
    g = graph_of(*make_edges(3, True), np.float64)
    ex = OutvotedExecutor()
    layer = SGConv(4, 2, K=2, cached=True, dtype=np.float64, executor=ex)
    H = np.random.default_rng(0).standard_normal((N, 4))
    out = layer(g, H)
    np.testing.assert_array_equal(layer(g, H), out)
    assert ex.calls == 4 and ex.votes == 1           # this process hit; the other did not


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cached", [False, True])
def test_input_forms_identical(dtype, cached):
    forms = weighted_forms(4, dtype)
    H = np.random.default_rng(0).standard_normal((N, 4)).astype(dtype)
    dZ = np.random.default_rng(1).standard_normal((N, 3)).astype(dtype)
    outs = []
    for form in forms:
        layer = SGConv(4, 3, K=2, cached=cached, dtype=dtype)
        randomize_bias(layer)
        outs.append((layer(form, H), layer(form, H), layer.backward(dZ), layer.grads["W"]))
    assert_all_identical(outs)


@pytest.mark.parametrize("cached", [False, True])
def test_eval_mode_keeps_no_cache(cached):
    src, dst, w = make_edges(0, False)
    g = graph_of(src, dst, w, np.float32)
    H = np.random.default_rng(0).standard_normal((N, 3)).astype(np.float32)
    layer = SGConv(3, 2, cached=cached)
    assert_eval_keeps_no_cache(layer, g, H)
    if not cached:
        assert layer._prop_cache is None
    fresh = SGConv(3, 2, cached=cached).eval()
    fresh(g, H)
    assert fresh._cache is None


def test_params_layout_and_seed():
    layer = SGConv(6, 4)
    assert layer.K == 2 and layer.cached
    assert set(layer.params) == {"W", "bias"}
    assert layer.params["W"].shape == (6, 4) and layer.params["bias"].shape == (4,)
    assert layer.params["W"].dtype == np.float32
    np.testing.assert_array_equal(SGConv(6, 4, seed=3).params["W"],
                                  SGConv(6, 4, seed=3).params["W"])
    assert not np.array_equal(SGConv(6, 4, seed=3).params["W"], layer.params["W"])


@pytest.mark.parametrize("K", [0, -1, 1.5, True, None, "2"])
def test_bad_K(K):
    with pytest.raises(ValueError, match="K must be"):
        SGConv(3, 2, K=K)


@pytest.mark.parametrize("args", [(0, 2), (2, 0), (-1, 2), (2.5, 2), (True, 2)])
def test_bad_dims(args):
    with pytest.raises(ValueError, match="positive integer"):
        SGConv(*args)


@pytest.mark.parametrize("cached", [False, True])
def test_bad_inputs(cached):
    src, dst, w = make_edges(0, False)
    g = graph_of(src, dst, w, np.float32)
    layer = SGConv(3, 2, cached=cached)
    H = np.zeros((N, 3), np.float32)
    with pytest.raises(RuntimeError):
        layer.backward(np.zeros((N, 2), np.float32))
    layer(g, H)
    assert_bad_features(layer, g, N, 3)
    bad = H.copy()
    bad[1, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        layer(g, bad)
    with pytest.raises(TypeError):
        layer("not a graph", H)
    with pytest.raises(TypeError):
        SGConv(3, 2, dtype=np.float16)
    layer(g, H)
    with pytest.raises(ValueError):
        layer.backward(np.zeros((N, 3), np.float32))
