"""AGNNConv against an independent per-vertex message-passing reference, plus gradients."""

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
from gblas_gnn.nn.agnn import AGNNConv

AGGRS = ["sum", "max", "min", "mean"]
DTYPES = [np.float32, np.float64]


# ---------------------------------------------------------------------- reference (numpy loops)
def edges_of(n, m, seed):
    """Random directed edges; vertices 1 and n-1 isolated; three duplicates."""
    return random_edges(n, m, seed, isolated=(1, n - 1))


def agnn_reference(src, dst, n, H, beta, W, aggr, self_loops, combine="times"):
    """For each target i: α_ij = softmax_j(β cos(H_i, H_j)), message α_ij·x_j (x = H W or H),
    reduced with ``aggr``; ``combine="plus"`` gives the max_plus messages α_ij + x_j."""
    H = H.astype(np.float64)
    X = H if W is None else H @ W.astype(np.float64)
    nb = in_neighbours(src, dst, n, self_loops)
    out = np.zeros((n, X.shape[1]))

    def unit(v):
        return v / max(math.sqrt(float(v @ v)), 1e-12)

    for i in range(n):
        js = nb[i]
        if not js:
            continue
        scores = [beta * float(unit(H[i]) @ unit(H[j])) for j in js]
        top = max(scores)
        ex = [math.exp(s - top) for s in scores]
        total = sum(ex)
        msgs = []
        for j, e in zip(js, ex, strict=True):
            a = e / total
            msgs.append(a + X[j] if combine == "plus" else a * X[j])
        out[i] = reduce_messages(msgs, aggr)
    return out


def tol(dtype):
    return dict(rtol=2e-4, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)


N = 10


@pytest.fixture(scope="module")
def edges():
    return edges_of(N, 22, seed=3)


# ---------------------------------------------------------------------- forward
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("aggr", AGGRS)
@pytest.mark.parametrize("out_dim", [None, 3, 6])
@pytest.mark.parametrize("learn_beta", [True, False])
@pytest.mark.parametrize("self_loops", [True, False])
def test_forward_matches_reference(edges, dtype, aggr, out_dim, learn_beta, self_loops):
    src, dst = edges
    g = gg.Graph.from_edges(src, dst, N, dtype=dtype)
    H = features(N, 4, dtype)
    layer = AGNNConv(4, out_dim, beta=0.8, learn_beta=learn_beta, add_self_loops=self_loops,
                     aggr=aggr, seed=5, dtype=dtype)
    Z = layer(g, H)
    W = layer.params.get("W")
    ref = agnn_reference(src, dst, N, H, 0.8, W, aggr, self_loops)
    assert Z.dtype == dtype and Z.shape == (N, out_dim or 4)
    np.testing.assert_allclose(Z, ref, **tol(dtype))
    if not self_loops:                      # isolated vertices have no in-edges → 0
        assert np.all(Z[[1, N - 1]] == 0)


def test_pyg_defaults(edges):
    src, dst = edges
    layer = AGNNConv(4)
    assert set(layer.params) == {"beta"}
    assert layer.params["beta"].shape == (1,) and layer.params["beta"][0] == 1.0
    assert layer.params["beta"].dtype == np.float32
    assert layer.add_self_loops and layer.aggr == "sum"
    H = features(N, 4, np.float32)
    Z = layer(gg.Graph.from_edges(src, dst, N), H)
    assert Z.shape == (N, 4)                # out_dim=None: output = input dim, no W
    np.testing.assert_allclose(Z, agnn_reference(src, dst, N, H, 1.0, None, "sum", True),
                               **tol(np.float32))
    fixed = AGNNConv(4, learn_beta=False, beta=2.0)     # PyG requires_grad=False
    assert fixed.params == {} and fixed.grads == {}
    np.testing.assert_array_equal(fixed.beta, np.array([2.0], np.float32))
    assert fixed.beta.dtype == np.float32


def test_params_layout_and_glorot():
    layer = AGNNConv(5, 7, seed=2, dtype=np.float64)
    assert set(layer.params) == {"beta", "W"}
    assert layer.params["W"].shape == (5, 7) and layer.params["W"].dtype == np.float64
    assert np.abs(layer.params["W"]).max() <= math.sqrt(6 / 12)
    np.testing.assert_array_equal(layer.params["W"], AGNNConv(5, 7, seed=2,
                                                              dtype=np.float64).params["W"])
    assert not np.array_equal(layer.params["W"], AGNNConv(5, 7, seed=3,
                                                          dtype=np.float64).params["W"])
    assert set(layer.grads) == {"beta", "W"}


def test_fixed_and_learnt_beta_agree_and_beta_setter(edges):
    src, dst = edges
    g = gg.Graph.from_edges(src, dst, N, dtype=np.float64)
    H = features(N, 4, np.float64)
    a = AGNNConv(4, 3, beta=1.7, learn_beta=True, dtype=np.float64)
    b = AGNNConv(4, 3, beta=1.7, learn_beta=False, dtype=np.float64)
    np.testing.assert_array_equal(a(g, H), b(g, H))
    b.beta = 0.25
    assert b.beta[0] == 0.25
    np.testing.assert_allclose(b(g, H), agnn_reference(src, dst, N, H, 0.25, b.params["W"],
                                                       "sum", True), rtol=1e-10)
    with pytest.raises(ValueError, match="finite"):
        b.beta = float("nan")


def test_large_beta_is_stable(edges):
    src, dst = edges
    g = gg.Graph.from_edges(src, dst, N)
    H = features(N, 4, np.float32)
    Z = AGNNConv(4, beta=1e4)(g, H)
    assert np.isfinite(Z).all()
    np.testing.assert_allclose(Z, agnn_reference(src, dst, N, H, 1e4, None, "sum", True),
                               rtol=1e-3, atol=1e-4)


# ---------------------------------------------------------------------- gradients
# every aggr with every out_dim (no W, out_dim < in_dim, > in_dim) and learn_beta on and off
@pytest.mark.parametrize("aggr, out_dim, learn_beta", [
    (aggr, out_dim, learn_beta)
    for aggr, first in zip(AGGRS, (True, False, True, False), strict=True)
    for out_dim, learn_beta in ((None, first), (2, not first), (5, first))])
def test_gradients_finite_differences(aggr, out_dim, learn_beta):
    n = 9
    src, dst = edges_of(n, 18, seed=11)
    g = gg.Graph.from_edges(src, dst, n, dtype=np.float64)
    H = features(n, 3, np.float64, seed=4)
    layer = AGNNConv(3, out_dim, beta=1.3, learn_beta=learn_beta, aggr=aggr, seed=1,
                     dtype=np.float64)
    check_module_grads(layer, g, H)
    assert set(layer.grads) == set(layer.params)
    for k, v in layer.grads.items():
        assert v.shape == layer.params[k].shape and v.dtype == np.float64


@pytest.mark.parametrize("aggr", ["sum", "max"])
def test_gradients_without_self_loops(aggr):
    n = 8
    src, dst = edges_of(n, 16, seed=7)
    g = gg.Graph.from_edges(src, dst, n, dtype=np.float64)
    layer = AGNNConv(3, 4, beta=-0.6, add_self_loops=False, aggr=aggr, dtype=np.float64)
    check_module_grads(layer, g, features(n, 3, np.float64, seed=9))


@pytest.mark.parametrize("aggr", ["sum", "mean"])
@pytest.mark.parametrize("shape", [(3, 5), (5, 3)])
def test_both_orders_agree(aggr, shape):
    n = 9
    src, dst = edges_of(n, 18, seed=2)
    g = gg.Graph.from_edges(src, dst, n, dtype=np.float64)
    H = features(n, shape[0], np.float64)
    dout = features(n, shape[1], np.float64, seed=8)
    assert_attention_orders_agree(
        lambda: AGNNConv(*shape, aggr=aggr, dtype=np.float64), g, H, dout, z_atol=1e-14)
    layer = AGNNConv(*shape, aggr=aggr, dtype=np.float64)
    layer.order = "aggregate_first"
    check_module_grads(layer, g, H)


@pytest.mark.parametrize("dtype", DTYPES)
def test_float32_backward_matches_float64(edges, dtype):
    src, dst = edges
    H64 = features(N, 4, np.float64)
    dout = features(N, 3, np.float64, seed=6)
    ref = AGNNConv(4, 3, dtype=np.float64)
    ref(gg.Graph.from_edges(src, dst, N, dtype=np.float64), H64)
    dH_ref = ref.backward(dout)
    layer = AGNNConv(4, 3, dtype=dtype)
    layer(gg.Graph.from_edges(src, dst, N, dtype=dtype), H64.astype(dtype))
    dH = layer.backward(dout.astype(dtype))
    assert dH.dtype == dtype and all(v.dtype == dtype for v in layer.grads.values())
    np.testing.assert_allclose(dH, dH_ref, **tol(dtype))
    for k in ref.grads:
        np.testing.assert_allclose(layer.grads[k], ref.grads[k], rtol=1e-3, atol=1e-4)


# ---------------------------------------------------------------------- zero rows
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("aggr", AGGRS)
@pytest.mark.parametrize("out_dim", [None, 3])
def test_zero_feature_rows_give_no_nan(edges, dtype, aggr, out_dim):
    src, dst = edges
    g = gg.Graph.from_edges(src, dst, N, dtype=dtype)
    H = features(N, 4, dtype)
    H[[0, 1, 4]] = 0                         # norm 0: F.normalize gives a zero unit vector
    layer = AGNNConv(4, out_dim, aggr=aggr, dtype=dtype)
    Z = layer(g, H)
    assert np.isfinite(Z).all()
    np.testing.assert_allclose(Z, agnn_reference(src, dst, N, H, 1.0, layer.params.get("W"),
                                                 aggr, True), **tol(dtype))
    dH = layer.backward(np.ones_like(Z))
    assert np.isfinite(dH).all()
    assert all(np.isfinite(v).all() for v in layer.grads.values())


def test_zero_and_tiny_rows_gradients_are_exact():
    """A zero row and a row of norm below F.normalize's eps (1e-12): gradients of the other
    rows and of the parameters match finite differences, and so does the gradient of the
    tiny row itself, in its clamped regime (Ĥ_i = H_i / eps) probed with a step 1e-16."""
    n = 8
    src, dst = edges_of(n, 16, seed=5)
    g = gg.Graph.from_edges(src, dst, n, dtype=np.float64)
    H = features(n, 3, np.float64)
    H[2] = 0
    H[4] *= 1e-13 / np.linalg.norm(H[4])
    layer = AGNNConv(3, 2, dtype=np.float64)
    R = np.random.default_rng(0).standard_normal((n, 2))
    layer(g, H)
    dH = layer.backward(R)
    grads = dict(layer.grads)

    def numeric(i, c, eps):
        Hp, Hm = H.copy(), H.copy()
        Hp[i, c] += eps
        Hm[i, c] -= eps
        return (np.sum(R * layer(g, Hp)) - np.sum(R * layer(g, Hm))) / (2 * eps)

    for i in (0, 3, 5):
        for c in range(3):
            np.testing.assert_allclose(dH[i, c], numeric(i, c, 1e-6), rtol=1e-5, atol=1e-7)
    for c in range(3):
        np.testing.assert_allclose(dH[4, c], numeric(4, c, 1e-16), rtol=1e-5)
    for name, p in layer.params.items():
        flat = p.reshape(-1)
        for idx in range(flat.size):
            orig = flat[idx]
            flat[idx] = orig + 1e-6
            fp = np.sum(R * layer(g, H))
            flat[idx] = orig - 1e-6
            fm = np.sum(R * layer(g, H))
            flat[idx] = orig
            np.testing.assert_allclose(grads[name].reshape(-1)[idx], (fp - fm) / 2e-6,
                                       rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------------- input forms, modes
@pytest.mark.parametrize("dtype", DTYPES)
def test_graph_input_forms_identical(edges, dtype):
    src, dst = edges
    H = features(N, 4, dtype)
    layer = AGNNConv(4, 3, aggr="sum", dtype=dtype)
    outs = [layer(x, H) for x in unweighted_forms(src, dst, N, dtype)]
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])


def test_edge_values_are_ignored(edges):
    src, dst = edges
    assert_edge_values_ignored(AGNNConv(4, 3, dtype=np.float64), src, dst, N)


def test_eval_mode_keeps_no_cache(edges):
    src, dst = edges
    g = gg.Graph.from_edges(src, dst, N)
    H = features(N, 4, np.float32)
    layer = AGNNConv(4, 3, aggr="max")
    Z_eval = assert_eval_keeps_no_cache(layer, g, H)
    layer.train()
    layer(g, H)
    layer.backward(np.ones_like(Z_eval))


# ---------------------------------------------------------------------- semirings
def test_a_tropical_semiring_trains(edges):
    # max_plus has registered derivatives: the layer trains through it
    src, dst = edges
    g = gg.Graph.from_edges(src, dst, N, dtype=np.float64)
    H = features(N, 4, np.float64)
    for aggr in ("max_plus", gg.semirings.get("max_plus")):
        layer = AGNNConv(4, 3, aggr=aggr, dtype=np.float64).eval()
        Z = layer(g, H)
        ref = agnn_reference(src, dst, N, H, 1.0, layer.params["W"], "max", True,
                             combine="plus")
        np.testing.assert_allclose(Z, ref, rtol=1e-10)
        layer.train()
        np.testing.assert_allclose(layer(g, H), Z, rtol=1e-12)
        check_module_grads(layer, g, H)


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(in_dim=0), ValueError, "in_dim"),
    (dict(in_dim=-2), ValueError, "in_dim"),
    (dict(in_dim=2.5), ValueError, "in_dim"),
    (dict(in_dim=3, out_dim=0), ValueError, "out_dim"),
    (dict(in_dim=3, out_dim=True), ValueError, "out_dim"),
    (dict(in_dim=3, beta=float("nan")), ValueError, "beta"),
    (dict(in_dim=3, beta=float("inf")), ValueError, "beta"),
    (dict(in_dim=3, beta="1"), TypeError, "beta"),
    (dict(in_dim=3, beta=True), TypeError, "beta"),
    (dict(in_dim=3, aggr="median"), ValueError, "aggregation"),
    (dict(in_dim=3, aggr="add"), ValueError, "aggregation"),
    (dict(in_dim=3, aggr=3), ValueError, "aggr"),
    (dict(in_dim=3, dtype=np.int32), TypeError, "dtype"),
])
def test_constructor_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        AGNNConv(**kwargs)


def test_forward_backward_errors(edges):
    src, dst = edges
    g = gg.Graph.from_edges(src, dst, N)
    layer = AGNNConv(4, 3)
    with pytest.raises(RuntimeError):
        layer.backward(np.ones((N, 3), np.float32))        # no forward yet
    with pytest.raises(ValueError, match="columns"):
        layer(g, features(N, 5, np.float32))
    with pytest.raises(ValueError, match="rows"):
        layer(g, features(N + 1, 4, np.float32))
    with pytest.raises(TypeError, match="dtype"):
        layer(g, features(N, 4, np.float64))
    bad = features(N, 4, np.float32)
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        layer(g, bad)
    with pytest.raises(ValueError, match="order"):
        layer.order = "sideways"
    layer(g, features(N, 4, np.float32))
    with pytest.raises(ValueError, match="dout"):
        layer.backward(np.ones((N, 4), np.float32))
    layer.params["W"][0, 0] = np.inf
    with pytest.raises(ValueError, match="'W'"):
        layer(g, features(N, 4, np.float32))
    layer = AGNNConv(4)
    layer.params["beta"][0] = np.nan
    with pytest.raises(ValueError, match="beta"):
        layer(g, features(N, 4, np.float32))
