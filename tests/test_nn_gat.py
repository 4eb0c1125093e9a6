"""GATConv against an independent per-vertex message-passing reference in plain numpy."""

import numpy as np
import pytest
from gradcheck import check_module_grads
from layer_cases import SELF_LOOPED, build, graph_and_inputs
from layer_helpers import features, in_neighbours, reduce_messages, unweighted_forms
from random_reference import next_key, uniform

import gblas_gnn as gg
from gblas_gnn.nn.gat import GATConv
from gblas_gnn.ops import leaky_relu, rep

AGGRS = ["sum", "max", "min", "mean"]
DTYPES = [np.float32, np.float64]
N = 10
ISOLATED = (4, 8)          # no in-edges and no out-edges
NO_IN = (2,)               # out-edges only (an empty row of A without self loops)


def tol(dtype):
    return dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------- test graphs
def random_edges(n=N, m=28, seed=0):
    """Directed edge list with isolated vertices, a vertex without in-edges, duplicate
    edges and one pre-existing self loop."""
    rng = np.random.default_rng(seed)
    others = [v for v in range(n) if v not in ISOLATED]
    src = rng.choice(others, m)
    dst = rng.choice([v for v in others if v not in NO_IN], m)
    src = np.r_[src, src[:3], 0]          # three duplicates and the loop 0 → 0
    dst = np.r_[dst, dst[:3], 0]
    return src, dst


def graph(src, dst, n=N, dtype=np.float32, values=None):
    return gg.Graph.from_edges(src, dst, n, values=values, dtype=dtype)


# ---------------------------------------------------------------------- reference
def ref_gat(src, dst, n, H, params, heads, out, concat=True, slope=0.2, aggr="sum",
            self_loops=True, mask=None):
    """Per-vertex message passing in float64. ``mask[h][i]`` lists the dropout factor of each
    in-edge of target ``i`` (sources ascending)."""
    H = H.astype(np.float64)
    W = params["W"].astype(np.float64)
    a_src = params["att_src"].astype(np.float64)
    a_dst = params["att_dst"].astype(np.float64)
    nb = in_neighbours(src, dst, n, self_loops)
    per_head = []
    for h in range(heads):
        Wh = W[:, h * out:(h + 1) * out]
        Zh = np.zeros((n, out))
        for i in range(n):
            if not nb[i]:
                continue
            xi = H[i] @ Wh
            scores = []
            for j in nb[i]:
                e = xi @ a_dst[h] + (H[j] @ Wh) @ a_src[h]
                scores.append(e if e > 0 else slope * e)
            scores = np.array(scores)
            w = np.exp(scores - scores.max())
            alpha = w / w.sum()
            if mask is not None:
                alpha = alpha * np.asarray(mask[h][i])
            msgs = np.array([alpha[k] * (H[j] @ Wh) for k, j in enumerate(nb[i])])
            Zh[i] = reduce_messages(msgs, aggr)
        per_head.append(Zh)
    Z = np.concatenate(per_head, axis=1) if concat else np.mean(per_head, axis=0)
    if "bias" in params:
        Z = Z + params["bias"].astype(np.float64)
    return Z


def make_layer(in_dim=3, out_dim=4, seed=0, random_bias=True, **kw):
    layer = GATConv(in_dim, out_dim, seed=seed, **kw)
    if random_bias and "bias" in layer.params:
        b = layer.params["bias"]
        b[:] = np.random.default_rng(seed + 99).standard_normal(b.shape)
    return layer


def ref_of(layer, src, dst, H, mask=None):
    return ref_gat(src, dst, N, H, layer.params, layer.heads, layer.out_dim, layer.concat,
                   layer.negative_slope, layer.aggr, layer.add_self_loops, mask)


# ---------------------------------------------------------------------- forward
@pytest.mark.parametrize("training", [True, False])   # inference: the bias starts the rows
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("self_loops", [True, False])
@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("heads", [1, 3])
@pytest.mark.parametrize("aggr", AGGRS)
def test_forward_matches_reference(aggr, heads, concat, self_loops, dtype, training):
    src, dst = random_edges()
    H = features(N, 3, dtype)
    layer = make_layer(heads=heads, concat=concat, aggr=aggr, add_self_loops=self_loops,
                       dtype=dtype).train(training)
    out = layer(graph(src, dst, dtype=dtype), H)
    assert out.dtype == dtype
    assert out.shape == (N, layer.out_width)
    ref = ref_of(layer, src, dst, H)
    np.testing.assert_allclose(out, ref, **tol(dtype))
    if not self_loops:                       # empty rows give exactly the bias
        for v in ISOLATED + NO_IN:
            np.testing.assert_array_equal(out[v], layer.params["bias"])


@pytest.mark.parametrize("slope", [0.0, 0.5])
@pytest.mark.parametrize("aggr", ["sum", "max"])
def test_negative_slopes(slope, aggr):
    src, dst = random_edges(seed=3)
    H = features(N, 3, np.float64, seed=4)
    layer = make_layer(heads=2, negative_slope=slope, aggr=aggr, dtype=np.float64)
    g = graph(src, dst, dtype=np.float64)
    np.testing.assert_allclose(layer(g, H), ref_of(layer, src, dst, H), rtol=1e-10, atol=1e-12)
    if aggr != "sum":          # the slope only touches the attention path: one aggr suffices
        return
    small = make_layer(in_dim=2, out_dim=2, heads=2, negative_slope=slope, dtype=np.float64)
    check_module_grads(small, gg.Graph.from_edges(src % 8, dst % 8, 8, dtype=np.float64),
                       features(8, 2, np.float64, seed=4))


def test_bias_false():
    src, dst = random_edges()
    H = features(N, 3, np.float64)
    layer = make_layer(heads=2, concat=False, bias=False, dtype=np.float64)
    assert set(layer.params) == {"W", "att_src", "att_dst"}
    g = graph(src, dst, dtype=np.float64)
    np.testing.assert_allclose(layer(g, H), ref_of(layer, src, dst, H), rtol=1e-10)
    layer.backward(np.ones((N, 4)))
    assert set(layer.grads) == {"W", "att_src", "att_dst"}
    check_module_grads(layer, g, H)


def test_parameter_shapes_and_init():
    layer = GATConv(5, 3, heads=4, seed=7)
    assert layer.params["W"].shape == (5, 12)
    assert layer.params["att_src"].shape == (4, 3)
    assert layer.params["att_dst"].shape == (4, 3)
    assert layer.params["bias"].shape == (12,)
    assert not layer.params["bias"].any()
    assert np.abs(layer.params["W"]).max() <= np.sqrt(6 / (5 + 12))
    assert GATConv(5, 3, heads=4, concat=False).params["bias"].shape == (3,)
    assert all(v.dtype == np.float32 for v in layer.params.values())
    again = GATConv(5, 3, heads=4, seed=7)
    for k in layer.params:
        np.testing.assert_array_equal(layer.params[k], again.params[k])
    assert not np.array_equal(GATConv(5, 3, heads=4, seed=8).params["W"], layer.params["W"])


def test_head_layout_matches_single_heads():
    """Head h uses the columns W[:, h*out:(h+1)*out] and the rows att_*[h]."""
    src, dst = random_edges()
    g = graph(src, dst, dtype=np.float64)
    H = features(N, 3, np.float64)
    multi = make_layer(heads=3, out_dim=2, bias=False, dtype=np.float64)
    full = multi(g, H)
    for h in range(3):
        single = make_layer(heads=1, out_dim=2, bias=False, dtype=np.float64)
        single.params["W"][:] = multi.params["W"][:, 2 * h:2 * h + 2]
        single.params["att_src"][:] = multi.params["att_src"][h]
        single.params["att_dst"][:] = multi.params["att_dst"][h]
        single._order = "project_first"
        np.testing.assert_allclose(single(g, H), full[:, 2 * h:2 * h + 2], rtol=1e-12)


def test_input_forms_identical():
    src, dst = random_edges()
    H = features(N, 3, np.float32)
    layer = make_layer(heads=2)
    g, csr, M = unweighted_forms(src, dst, N, np.float32)
    out = layer(g, H)
    np.testing.assert_array_equal(layer(csr, H), out)
    np.testing.assert_array_equal(layer(M, H), out)


def test_edge_values_are_ignored():
    """Attention uses the pattern of A only (PyG without edge_attr)."""
    src, dst = random_edges()
    H = features(N, 3, np.float64)
    layer = make_layer(heads=2, dtype=np.float64)
    w = np.random.default_rng(5).uniform(-3, 3, src.size)
    weighted = graph(src, dst, dtype=np.float64, values=w)
    np.testing.assert_allclose(layer(weighted, H), layer(graph(src, dst, dtype=np.float64), H),
                               rtol=1e-13, atol=1e-14)


def test_virtual_tensor_formulation():
    """GATConv == A * leaky_relu(rep(d) + rep(s).T), gg.ops.softmax, gg.ops.aggregate."""
    src, dst = random_edges()
    H = features(N, 3, np.float64)
    g = graph(src, dst, dtype=np.float64)
    A = g.with_self_loops().A
    for aggr in AGGRS:
        layer = make_layer(heads=2, out_dim=3, aggr=aggr, dtype=np.float64)
        W = layer.params["W"]
        parts = []
        for h in range(2):
            Hh = H @ W[:, 3 * h:3 * h + 3]
            s, d = Hh @ layer.params["att_src"][h], Hh @ layer.params["att_dst"][h]
            E = A * leaky_relu(rep(d) + rep(s).T, 0.2)
            parts.append(gg.ops.aggregate(gg.ops.softmax(E), Hh, aggr))
        expected = np.concatenate(parts, axis=1) + layer.params["bias"]
        np.testing.assert_allclose(layer(g, H), expected, rtol=1e-12, atol=1e-14)


def test_huge_logits_stay_finite():
    src, dst = random_edges()
    for dtype in DTYPES:
        H = features(N, 3, dtype, scale=1e3)
        for aggr in ("sum", "max"):
            layer = make_layer(heads=2, aggr=aggr, dtype=dtype)
            out = layer(graph(src, dst, dtype=dtype), H)
            assert np.isfinite(out).all()
            ref = ref_of(layer, src, dst, H)
            np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())
            dH = layer.backward(np.ones_like(out))
            assert np.isfinite(dH).all()
            assert all(np.isfinite(v).all() for v in layer.grads.values())


def test_graph_without_edges():
    H = features(4, 3, np.float64)
    g = gg.Graph.from_edges([], [], 4, dtype=np.float64)
    layer = make_layer(heads=2, add_self_loops=False, dtype=np.float64)
    out = layer(g, H)
    np.testing.assert_array_equal(out, np.broadcast_to(layer.params["bias"], out.shape))
    check_module_grads(layer, g, H)


# ---------------------------------------------------------------------- gradients
# every aggr with heads 1 and 2 and with concat on and off; heads 2 with concat on and off
@pytest.mark.parametrize("aggr, heads, concat", [
    ("sum", 1, True), ("sum", 2, False), ("max", 2, True), ("max", 1, False),
    ("min", 1, True), ("min", 2, False), ("mean", 2, True), ("mean", 1, False)])
def test_gradients_finite_differences(aggr, heads, concat):
    src, dst = random_edges(n=8, m=20, seed=2)
    src, dst = src % 8, dst % 8
    g = gg.Graph.from_edges(src, dst, 8, dtype=np.float64)
    H = features(8, 2, np.float64, seed=3)
    layer = make_layer(in_dim=2, out_dim=3, heads=heads, concat=concat, aggr=aggr,
                       dtype=np.float64)
    check_module_grads(layer, g, H)


def test_gradients_without_self_loops():
    src, dst = random_edges(n=8, m=20, seed=2)
    src, dst = src % 8, dst % 8
    g = gg.Graph.from_edges(src, dst, 8, dtype=np.float64)
    H = features(8, 2, np.float64, seed=3)
    for aggr in ("sum", "max"):
        check_module_grads(make_layer(in_dim=2, out_dim=2, heads=2, aggr=aggr,
                                      add_self_loops=False, dtype=np.float64), g, H)


def test_backward_float32_close_to_float64():
    src, dst = random_edges()
    H = features(N, 3, np.float64)
    R = np.random.default_rng(3).standard_normal((N, 8))
    grads = {}
    for dtype in DTYPES:
        layer = make_layer(heads=2, out_dim=4, dtype=dtype)
        layer(graph(src, dst, dtype=dtype), H.astype(dtype))
        dH = layer.backward(R.astype(dtype))
        assert dH.dtype == dtype and all(v.dtype == dtype for v in layer.grads.values())
        grads[dtype] = dict(layer.grads, H=dH)
    for k, v in grads[np.float64].items():
        np.testing.assert_allclose(grads[np.float32][k], v, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------- Φ∘⊕ order
@pytest.mark.parametrize("dims", [(2, 5), (5, 3)])
@pytest.mark.parametrize("aggr", ["sum", "mean"])
def test_orders_agree(aggr, dims):
    in_dim, out_dim = dims
    src, dst = random_edges()
    g = graph(src, dst, dtype=np.float64)
    H = features(N, in_dim, np.float64)
    R = np.random.default_rng(8).standard_normal((N, out_dim))
    results = {}
    for order in ("project_first", "aggregate_first"):
        layer = make_layer(in_dim, out_dim, aggr=aggr, dtype=np.float64)
        layer._order = order
        out = layer(g, H)
        dH = layer.backward(R)
        results[order] = (out, dH, dict(layer.grads))
        np.testing.assert_allclose(out, ref_of(layer, src, dst, H), rtol=1e-10, atol=1e-12)
    (o1, h1, g1), (o2, h2, g2) = results.values()
    np.testing.assert_allclose(o1, o2, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(h1, h2, rtol=1e-12, atol=1e-13)
    for k in g1:
        np.testing.assert_allclose(g1[k], g2[k], rtol=1e-12, atol=1e-13)
    small = make_layer(in_dim, out_dim, aggr=aggr, dtype=np.float64)
    assert small._aggregate_first() == (in_dim < out_dim)     # auto picks the cheaper order
    small._order = "aggregate_first"
    check_module_grads(small, gg.Graph.from_edges(src % 8, dst % 8, 8, dtype=np.float64),
                       features(8, in_dim, np.float64))


def test_aggregate_first_only_where_linear():
    H = features(N, 2, np.float32)
    g = graph(*random_edges())
    for kw in (dict(aggr="max"), dict(heads=2)):
        layer = GATConv(2, 5, **kw)
        assert not layer._aggregate_first()
        layer._order = "aggregate_first"
        with pytest.raises(ValueError, match="one head"):
            layer(g, H)


# ---------------------------------------------------------------------- dropout
def csr_mask(src, dst, rng_seed, p, heads, self_loops=True):
    """The documented mask: head h keeps the edge j → i when u(κ; h, i, j) ≥ p
    (``random_reference``), listed per target with the sources ascending."""
    nb = in_neighbours(src, dst, N, self_loops)
    key = next_key(np.random.default_rng(rng_seed))
    return [[np.array([1.0 / (1.0 - p) if uniform(key, h, i, j) >= p else 0.0 for j in nb[i]])
             for i in range(N)] for h in range(heads)]


def test_dropout_eval_equals_no_dropout():
    src, dst = random_edges()
    g = graph(src, dst)
    H = features(N, 3, np.float32)
    plain = make_layer(heads=2, dropout=0.0).eval()
    dropped = make_layer(heads=2, dropout=0.6).eval()
    np.testing.assert_array_equal(dropped(g, H), plain(g, H))
    dropped.train()
    assert not np.allclose(dropped(g, H), plain(g, H))


@pytest.mark.parametrize("aggr", ["sum", "max", "mean"])
def test_dropout_training_matches_reference_mask(aggr):
    src, dst = random_edges()
    g = graph(src, dst, dtype=np.float64)
    H = features(N, 3, np.float64)
    layer = make_layer(heads=2, dropout=0.4, aggr=aggr, dtype=np.float64)
    layer.dropout_rng = np.random.default_rng(11)
    out = layer(g, H)
    mask = csr_mask(src, dst, 11, 0.4, 2)
    dropped = sum(int((np.concatenate(m) == 0).sum()) for m in mask)
    assert dropped > 0
    np.testing.assert_allclose(out, ref_of(layer, src, dst, H, mask), rtol=1e-10, atol=1e-12)
    # the generator advances: the next forward draws a different mask
    assert not np.allclose(layer(g, H), out)


def test_dropout_seeded_reproducible():
    src, dst = random_edges()
    g = graph(src, dst)
    H = features(N, 3, np.float32)
    a, b = make_layer(heads=2, dropout=0.5, seed=3), make_layer(heads=2, dropout=0.5, seed=3)
    np.testing.assert_array_equal(a(g, H), b(g, H))
    c = make_layer(heads=2, dropout=0.5, seed=4)
    c.params.update({k: v.copy() for k, v in a.params.items()})
    assert not np.array_equal(c(g, H), a(g, H))


class FixedMask:
    """Re-seeds the layer's dropout generator before every forward: the mask is held fixed."""

    def __init__(self, layer, seed):
        self.layer, self.seed = layer, seed
        self.params, self.grads = layer.params, layer.grads

    def train(self):
        self.layer.train()
        return self

    def __call__(self, g, H):
        self.layer.dropout_rng = np.random.default_rng(self.seed)
        out = self.layer(g, H)
        self.grads = self.layer.grads
        return out

    def backward(self, dout):
        dH = self.layer.backward(dout)
        self.grads = self.layer.grads
        return dH


@pytest.mark.parametrize("aggr", ["sum", "min"])
def test_dropout_gradients_with_fixed_mask(aggr):
    src, dst = random_edges(n=8, m=20, seed=2)
    g = gg.Graph.from_edges(src % 8, dst % 8, 8, dtype=np.float64)
    H = features(8, 2, np.float64, seed=3)
    layer = make_layer(in_dim=2, out_dim=2, heads=2, dropout=0.3, aggr=aggr, dtype=np.float64)
    check_module_grads(FixedMask(layer, 5), g, H)


# ---------------------------------------------------------------------- modes and caches
def test_eval_keeps_no_cache():
    g = graph(*random_edges())
    H = features(N, 3, np.float32)
    layer = make_layer(heads=2)
    layer(g, H)
    assert layer._cache is not None
    layer.eval()
    assert layer._cache is None
    layer(g, H)
    assert layer._cache is None
    with pytest.raises(RuntimeError, match="training"):
        layer.backward(np.ones((N, 8), np.float32))
    with pytest.raises(RuntimeError, match="training"):
        make_layer().backward(np.ones((N, 4), np.float32))


@pytest.mark.parametrize("name, kw", SELF_LOOPED, ids=[n for n, _ in SELF_LOOPED])
def test_attention_layers_never_build_the_matrix_of_a_plus_i(name, kw):
    """The attention layers run on the int32 pattern of ``A + I`` (issue 21): a training
    step leaves ``with_self_loops()``'s matrix unbuilt, and gives the same bits on a graph
    whose matrix was built first (the executors then find the one pattern for both)."""
    steps = []
    for build_first in (False, True):
        g, H, _ = graph_and_inputs(7, kw["in_dim"], 1)
        if build_first:
            assert g.with_self_loops().A.nvals == g.with_self_loops().nnz
        layer = build(name, kw, "sum", None)
        layer.dropout_rng = np.random.default_rng(11)
        out = layer(g, H)
        dH = layer.backward(np.random.default_rng(8).standard_normal(out.shape))
        assert g.with_self_loops().edge_tensor.built is build_first
        steps.append([gg.to_numpy(a) for a in (out, dH, *layer.grads.values())])
    for a, b in zip(*steps, strict=True):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("by_name", [True, False])
def test_a_semiring_with_derivatives_trains_and_one_without_is_forward_only(by_name):
    # max_times is the named "max" written as a semiring: same forward, same gradients
    sr = gg.semirings.get("max_times")
    src, dst = random_edges()
    g = graph(src, dst)
    H = features(N, 3, np.float32)
    layer = make_layer(heads=2, aggr="max_times" if by_name else sr)
    named = make_layer(heads=2, aggr="max")
    np.testing.assert_allclose(layer(g, H), named(g, H), rtol=1e-6, atol=1e-7)
    dout = np.ones((N, 8), np.float32)
    np.testing.assert_allclose(layer.backward(dout), named.backward(dout), rtol=1e-5,
                               atol=1e-6)
    name = "test_gat_max_second"
    gg.semirings.register(name, "max", "second")          # no derivatives registered
    try:
        bare = make_layer(heads=2, aggr=name)
        bare(g, H)
        with pytest.raises(ValueError, match=f"semiring '{name}' has no backward"):
            bare.backward(dout)
        bare.eval()
        assert bare(g, H).shape == (N, 8)
    finally:
        gg.semirings.registry._unregister(name)


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize("kw, exc, match", [
    (dict(in_dim=0), ValueError, "in_dim"),
    (dict(out_dim=-2), ValueError, "out_dim"),
    (dict(heads=0), ValueError, "heads"),
    (dict(heads=2.5), ValueError, "heads"),
    (dict(heads=True), ValueError, "heads"),
    (dict(negative_slope=-0.1), ValueError, "negative_slope"),
    (dict(negative_slope=float("nan")), ValueError, "negative_slope"),
    (dict(negative_slope="0.2"), ValueError, "negative_slope"),
    (dict(dropout=1.0), ValueError, "dropout"),
    (dict(dropout=-0.1), ValueError, "dropout"),
    (dict(dropout=float("nan")), ValueError, "dropout"),
    (dict(aggr="median"), ValueError, "unknown aggregation"),
    (dict(aggr=42), ValueError, "unknown aggregation"),
    (dict(concat="yes"), TypeError, "concat"),
    (dict(dtype=np.int32), TypeError, "dtype"),
])
def test_constructor_errors(kw, exc, match):
    args = dict(in_dim=3, out_dim=4)
    args.update(kw)
    with pytest.raises(exc, match=match):
        GATConv(**args)


def test_input_errors():
    g = graph(*random_edges())
    layer = make_layer(heads=2)
    H = features(N, 3, np.float32)
    with pytest.raises(ValueError, match="columns"):
        layer(g, H[:, :2])
    with pytest.raises(ValueError, match="rows"):
        layer(g, H[:-1])
    with pytest.raises(TypeError, match="float64"):
        layer(g, H.astype(np.float64))
    bad = H.copy()
    bad[1, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        layer(g, bad)
    with pytest.raises(TypeError, match="graph"):
        layer(np.eye(N, dtype=np.float32), H)
    layer(g, H)
    with pytest.raises(ValueError, match="columns"):
        layer.backward(np.ones((N, 4), np.float32))
    with pytest.raises(ValueError, match="rows"):
        layer.backward(np.ones((N + 1, 8), np.float32))
    with pytest.raises(TypeError, match="float64"):
        layer.backward(np.ones((N, 8), np.float64))
