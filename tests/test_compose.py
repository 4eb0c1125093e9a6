"""Composed modules and functions: a forward written with ``gg.ops`` gets its backward
derived, on the executor under test.

* the built-in attention layers written as compositions (``tests/composed.py``) equal the
  built-in layers, forward and every gradient, for every named aggregation;
* the composed ``GATv2Conv`` and ``TransformerConv`` equal PyTorch Geometric's, one and four
  heads, with copied weights (forward, input and weight gradients);
* gradients of composed modules match central finite differences, nested modules (built-in
  and composed) included;
* the tie rule of max/min, evaluation mode, tracing never changing a result, the functional
  form, and the errors the composition promises.
"""

from __future__ import annotations

import numpy as np
import pytest
from composed import TWINS, ComposedAGNN, ComposedGAT, ComposedVA
from gradcheck import check_module_grads
from layer_cases import graph_and_inputs

import gblas_gnn as gg
from gblas_gnn import compose, ops, semirings
from gblas_gnn.executors import CPUExecutor, to_numpy
from gblas_gnn.ops import factor, leaky_relu, rep

CPU = CPUExecutor()
TWIN_CASES = [
    (ComposedGAT, dict(in_dim=5, out_dim=3, heads=1), ("sum", "max", "min", "mean")),
    (ComposedGAT, dict(in_dim=5, out_dim=3, heads=3, concat=False), ("sum", "max")),
    (ComposedGAT, dict(in_dim=5, out_dim=3, heads=2, dropout=0.4), ("sum", "mean")),
    (ComposedAGNN, dict(in_dim=5), ("sum", "min")),
    (ComposedAGNN, dict(in_dim=5, out_dim=4), ("sum", "max")),
    (ComposedVA, dict(in_dim=5, out_dim=4), ("sum", "mean")),
    (ComposedVA, dict(in_dim=5, out_dim=4, softmax=True), ("sum", "min")),
]
TWINS_FLAT = [(cls, kw, a) for cls, kw, aggrs in TWIN_CASES for a in aggrs]


def host(x):
    return to_numpy(x)


def run_layer(layer, ex, g, H, dout=None):
    if hasattr(layer, "dropout_rng"):
        layer.dropout_rng = np.random.default_rng(11)
    out = layer(g, ex.asarray(H))
    if dout is None:
        dout = np.random.default_rng(8).standard_normal(host(out).shape)
    dH = layer.backward(ex.asarray(dout))
    return host(out), host(dH), {k: host(v) for k, v in layer.grads.items()}, dout


def assert_close(got, want, what, rtol=1e-9):
    scale = max(float(np.abs(want).max()), 1e-12)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale, err_msg=what)


# ---------------------------------------------------------------------- equal to built-ins
@pytest.mark.parametrize("cls, kw, aggr", TWINS_FLAT,
                         ids=[f"{c.__name__}-{i}-{a}" for i, (c, _, a) in enumerate(TWINS_FLAT)])
def test_composed_layer_equals_the_builtin_layer(cls, kw, aggr, executor):
    g, H, _ = graph_and_inputs(7, kw["in_dim"], 1)
    builtin = getattr(gg.nn, TWINS[cls])(**kw, aggr=aggr, dtype=np.float64, seed=3,
                                         executor=CPU)
    out, dH, grads, dout = run_layer(builtin, CPU, g, H)
    composed = cls(**kw, aggr=aggr, dtype=np.float64, seed=3, executor=executor)
    got, got_dH, got_grads, _ = run_layer(composed, executor, g, H, dout)
    assert_close(got, out, "forward")
    assert_close(got_dH, dH, "input gradient")
    assert got_grads.keys() == grads.keys()
    for k, v in grads.items():
        assert_close(got_grads[k], v, f"gradient of {k}")


# ---------------------------------------------------------------------- equal to PyG
def _pyg_graph(seed=0, n=12):
    rng = np.random.default_rng(seed)
    g = gg.Graph.from_edges(rng.integers(0, 10, 30), rng.integers(0, 10, 30), n,
                            dtype=np.float64)
    return g, rng.standard_normal((n, 5)), rng


@pytest.mark.parametrize("heads, concat", [(1, True), (4, True), (4, False)])
def test_gatv2_equals_pyg(heads, concat, executor):
    torch = pytest.importorskip("torch")
    pyg = pytest.importorskip("torch_geometric.nn")
    g, H, rng = _pyg_graph()
    ours = gg.nn.GATv2Conv(5, 3, heads=heads, concat=concat, dtype=np.float64, seed=1,
                           executor=executor)
    for v in ours.params.values():
        v += executor.asarray(rng.standard_normal(v.shape) * 0.3)
    conv = ours.to_pyg()
    assert isinstance(conv, pyg.GATv2Conv)
    _check_against_torch(torch, conv, ours, g, H, executor, rng,
                         {"W_l": conv.lin_l.weight, "W_r": conv.lin_r.weight,
                          "att": conv.att, "b_r": conv.lin_r.bias})


@pytest.mark.parametrize("heads, concat", [(1, True), (4, True), (2, False)])
def test_transformer_equals_pyg(heads, concat, executor):
    torch = pytest.importorskip("torch")
    pyg = pytest.importorskip("torch_geometric.nn")
    g, H, rng = _pyg_graph(1)
    ours = gg.nn.TransformerConv(5, 3, heads=heads, concat=concat, dtype=np.float64, seed=1,
                                 executor=executor)
    for v in ours.params.values():
        v += executor.asarray(rng.standard_normal(v.shape) * 0.3)
    conv = ours.to_pyg()
    assert isinstance(conv, pyg.TransformerConv)
    # the key bias has a zero gradient (softmax ignores a constant per row): absolute check
    _check_against_torch(torch, conv, ours, g, H, executor, rng,
                         {"W_q": conv.lin_query.weight, "W_skip": conv.lin_skip.weight,
                          "b_v": conv.lin_value.bias, "b_k": conv.lin_key.bias})


def _check_against_torch(torch, conv, ours, g, H, executor, rng, tensors):
    A = g.to_scipy().tocoo()
    edge_index = torch.tensor(np.vstack([A.col, A.row]), dtype=torch.long)
    Ht = torch.from_numpy(H).requires_grad_()
    conv.train()
    ref = conv(Ht, edge_index)
    out = host(ours(g, executor.asarray(H)))
    R = rng.standard_normal(out.shape)
    (ref * torch.from_numpy(R)).sum().backward()
    dH = host(ours.backward(executor.asarray(R)))
    assert_close(out, ref.detach().numpy(), "forward")
    assert_close(dH, Ht.grad.numpy(), "input gradient")
    for name, tensor in tensors.items():
        want = tensor.grad.numpy()
        want = want.T if name.startswith("W_") else want.reshape(host(ours.grads[name]).shape)
        np.testing.assert_allclose(host(ours.grads[name]), want, rtol=1e-9, atol=1e-10,
                                   err_msg=f"gradient of {name}")


def test_from_pyg_round_trip():
    pytest.importorskip("torch_geometric")
    layer = gg.nn.GATv2Conv(4, 2, heads=2, seed=3)
    back = gg.nn.GATv2Conv.from_pyg(layer.to_pyg())
    for k, v in layer.params.items():
        np.testing.assert_array_equal(host(back.params[k]), host(v))
    t = gg.nn.TransformerConv(4, 2, heads=3, concat=False, seed=3)
    back = gg.nn.TransformerConv.from_pyg(t.to_pyg())
    assert back.heads == 3 and not back.concat
    for k, v in t.params.items():
        np.testing.assert_array_equal(host(back.params[k]), host(v))


# ---------------------------------------------------------------------- finite differences
class Nested(gg.nn.Module):
    """A composition holding a built-in layer and a composed one, with its own parameters."""

    def __init__(self, dtype=np.float64, executor=None):
        super().__init__(dtype, executor)
        rng = np.random.default_rng(0)
        self.gat = gg.nn.GATConv(3, 2, heads=2, seed=1, dtype=dtype, executor=executor)
        self.v2 = gg.nn.GATv2Conv(4, 2, seed=2, dtype=dtype, executor=executor)
        self.add_param("a", rng.standard_normal(4).astype(dtype))
        self.add_param("W", rng.standard_normal((3, 4)).astype(dtype))

    def forward(self, g, H):
        A = g.with_self_loops().A
        Z = ops.elu(self.gat(g, H)) + self.v2(g, H @ self.params["W"]).sum(1)[:, None]
        E = A * (ops.sigmoid(rep(Z) - rep(Z).T) @ self.params["a"])
        return ops.aggregate(ops.softmax(E), Z, "max") + Z


def test_nested_modules_match_finite_differences(executor):
    g, H, _ = graph_and_inputs(4, 3, 1)
    m = Nested(executor=executor)
    assert [type(c).__name__ for c in m.children()] == ["GATConv", "GATv2Conv"]
    assert {name for name, _ in m.named_parameters()} == {
        "a", "W", "0.W", "0.att_src", "0.att_dst", "0.bias", "1.W_l", "1.b_l", "1.W_r",
        "1.b_r", "1.att", "1.bias"}
    if executor.name == "cpu":
        check_module_grads(m, g, H)
        for child in m.children():                 # the children's grads are filled too
            assert all(np.abs(v).sum() > 0 for v in child.grads.values())


def test_gatv2_matches_finite_differences():
    g, H, _ = graph_and_inputs(5, 3, 1)
    m = gg.nn.GATv2Conv(3, 2, heads=2, dtype=np.float64, seed=4, executor=CPU)
    check_module_grads(m, g, H)


# ---------------------------------------------------------------------- semantics
@pytest.mark.parametrize("heads", [None, 3])
def test_aggregate_with_edges_is_both_sums_at_once(executor, heads):
    """``[Σ_j S_ij H_j | Σ_j S_ij e_ji]`` of one softmax (the features shared by the heads)
    equals the two aggregations side by side, forward and every gradient; rows without
    in-edges give 0."""
    rng = np.random.default_rng(21)
    n, d, f = 6, 4, 3
    src = np.array([1, 2, 3, 0, 2, 4, 4, 1, 3])
    dst = np.array([0, 0, 0, 1, 1, 2, 3, 3, 4])          # vertex 5: no in-edges
    g = gg.Graph.from_edges(src, dst, n, edge_attr=rng.standard_normal((9, f)),
                            dtype=np.float64)
    shape = (n, d) if heads is None else (n, heads, d)
    Q, K, V = (executor.asarray(rng.standard_normal(shape)) for _ in range(3))
    R = rng.standard_normal((*shape[:-1], d + f))

    def weights(Q, K):
        scores = factor(Q) @ factor(K).T if heads is not None else \
            (factor(Q) @ factor(K).T)
        return ops.softmax(ops.structure(g) * scores)

    def joint(Q, K, V):
        return ops.aggregate_with_edges(weights(Q, K), V, g.edge_attr)

    def apart(Q, K, V):
        alpha = weights(Q, K)
        return ops.concat([ops.aggregate(alpha, V), ops.aggregate(alpha, g.edge_attr)], -1)

    outs, grads = [], []
    for fn in (joint, apart):
        out, pull = compose.vjp(fn, Q, K, V, executor=executor, vertex=(0, 1, 2))
        outs.append(host(out))
        grads.append([host(x) for x in pull(executor.asarray(R))])
    assert outs[0].shape == (*shape[:-1], d + f)
    assert_close(outs[0], outs[1], "forward")
    assert np.all(outs[0][5] == 0)
    for got, want, name in zip(grads[0], grads[1], "QKV", strict=True):
        assert_close(got, want, f"d{name}")


def test_aggregate_with_edges_refuses_what_is_not_a_graphs_edge_features():
    g = gg.Graph.from_edges([0, 1], [1, 0], 2, edge_attr=np.ones((2, 3)), dtype=np.float64)
    other = gg.Graph.from_edges([0, 1, 1], [1, 0, 1], 2, edge_attr=np.ones((3, 3)),
                                dtype=np.float64)
    H = np.ones((2, 4))
    with pytest.raises(TypeError, match="edge features"):
        ops.aggregate_with_edges(ops.structure(g), H, np.ones((2, 3)))
    with pytest.raises(ValueError, match="patterns"):
        ops.aggregate_with_edges(ops.structure(g), H, other.edge_attr)
    with pytest.raises(ValueError):
        ops.aggregate_with_edges(ops.structure(g), np.ones((3, 4)), g.edge_attr)


def test_max_and_min_route_ties_to_the_lowest_source_id(executor):
    # row 0 aggregates sources 1, 2, 3 whose messages tie
    g = gg.Graph.from_edges([1, 2, 3], [0, 0, 0], 4, dtype=np.float64)
    X = np.array([[0.0], [2.0], [2.0], [1.0]])
    for aggr, tie in (("max", 1), ("min", 1), ("max_plus", 1)):
        Xt = X if aggr != "min" else -X
        out, pull = compose.vjp(lambda A, X, aggr=aggr: ops.aggregate(A, X, aggr), g.A,
                                executor.asarray(Xt), executor=executor, vertex=(1,))
        dX = host(pull(executor.asarray(np.ones((4, 1))))[1])
        want = np.zeros((4, 1))
        want[tie] = 1.0
        np.testing.assert_array_equal(dX, want, err_msg=aggr)


def test_evaluation_mode_records_nothing_and_tracing_changes_no_result(executor):
    g, H, _ = graph_and_inputs(3, 5, 1)
    m = gg.nn.GATv2Conv(5, 3, heads=2, dtype=np.float64, executor=executor)
    train_out = host(m.train()(g, executor.asarray(H)))
    assert m._cache is not None
    eval_out = host(m.eval()(g, executor.asarray(H)))
    assert m._cache is None
    np.testing.assert_array_equal(train_out, eval_out)
    with pytest.raises(RuntimeError, match="forward in training mode"):
        m.backward(executor.asarray(np.ones_like(eval_out)))
    # the same function traced (recording) and evaluated (nothing recorded): bit for bit
    A = g.with_self_loops().A
    d, s = H[:, 0].copy(), H[:, 1].copy()

    def fn(A, X, d, s):
        return ops.aggregate(ops.softmax(A * leaky_relu(rep(d) + rep(s).T)), X)

    with gg.executors.default(executor):
        plain = host(fn(A, *(executor.asarray(a) for a in (H, d, s))))
    traced, _ = compose.vjp(fn, A, *(executor.asarray(a) for a in (H, d, s)),
                            executor=executor, vertex=(1, 2, 3))
    evaluated = compose.evaluate(fn, A, *(executor.asarray(a) for a in (H, d, s)),
                                 executor=executor, vertex=(1, 2, 3))
    np.testing.assert_array_equal(host(traced), host(evaluated))
    # the eager building blocks (one operation at a time) agree to rounding
    np.testing.assert_allclose(host(traced), plain, rtol=1e-12, atol=1e-14)


class Attend(gg.nn.Module):
    """An attention whose output is the fused program's own (no bias after it): the array
    its backward context keeps."""

    def __init__(self, dtype=np.float64, executor=None):
        super().__init__(dtype, executor)
        self.add_param("a", np.linspace(-1.0, 1.0, 3).astype(dtype))

    def forward(self, g, H):
        E = g.with_self_loops().A * (ops.tanh(rep(H) + rep(H).T) @ self.params["a"])
        return ops.aggregate(ops.softmax(E), H)


def test_writing_into_the_output_changes_no_gradient(executor):
    """The output handed to the user is never the array a backward context reads (the
    softmax term uses the program's output): overwriting it changes no gradient, for a
    module and for the functional form."""
    g, H, _ = graph_and_inputs(6, 3, 1)
    dout = np.random.default_rng(4).standard_normal(H.shape)
    grads = []
    for overwrite in (False, True):
        m = Attend(executor=executor)
        out = m(g, executor.asarray(H))
        if overwrite:
            out[...] = 7.0
        dH = m.backward(executor.asarray(dout))
        grads.append((host(dH), host(m.grads["a"])))
    for got, want in zip(grads[1], grads[0], strict=True):
        np.testing.assert_array_equal(got, want)

    def fn(X):
        E = g.with_self_loops().A * (ops.tanh(rep(X) + rep(X).T) @ executor.asarray(
            np.linspace(-1.0, 1.0, 3)))
        return ops.aggregate(ops.softmax(E), X)

    pulled = []
    for overwrite in (False, True):
        out, pullback = compose.vjp(fn, executor.asarray(H), executor=executor, vertex=(0,))
        if overwrite:
            out[...] = 7.0
        pulled.append(host(pullback(executor.asarray(dout))[0]))
    np.testing.assert_array_equal(pulled[1], pulled[0])


@pytest.mark.cpu_only
def test_a_sum_keeps_nothing_for_its_backward():
    """A sum's (or difference's) gradient reads neither operand nor the result, so the tape
    keeps none of them: a layer's output ``Z + b`` lives only as long as its user holds it
    (issue 21: a 3-layer GAT step held every layer's output until the backward)."""
    import gc
    import weakref

    rng = np.random.default_rng(0)
    X, W, b = rng.standard_normal((50, 4)), rng.standard_normal((4, 3)), np.ones(3)
    out, pullback = compose.vjp(lambda X, W, b: X @ W + b - 1.0, X, W, b,
                                executor=CPUExecutor(), vertex=(0,))
    gone = weakref.ref(out)
    del out
    gc.collect()
    assert gone() is None
    dX, dW, db = pullback(np.ones((50, 3)))
    np.testing.assert_allclose(db, np.full(3, 50.0))
    np.testing.assert_allclose(dW, X.T @ np.ones((50, 3)))


@pytest.mark.cpu_only
def test_cotangents_sum_into_a_products_own_array_and_nothing_else():
    """A product's cotangents are its own new arrays, so the tape sums X's other cotangents
    into them in place (issue 21); the caller's ``dout``, which reaches X unchanged through
    the sum, is never written."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((30, 4))
    W1, W2 = rng.standard_normal((4, 4)), rng.standard_normal((4, 4))
    out, pullback = compose.vjp(lambda X, W1, W2: X @ W1 + X @ W2 + X * 2.0 + X, X, W1, W2,
                                executor=CPUExecutor(), vertex=(0,))
    dout = rng.standard_normal(out.shape)
    kept = dout.copy()
    dX, dW1, dW2 = pullback(dout)
    np.testing.assert_array_equal(dout, kept)
    np.testing.assert_allclose(dX, dout @ W1.T + dout @ W2.T + 3.0 * dout, rtol=1e-12)
    np.testing.assert_allclose(dW1, X.T @ dout, rtol=1e-12)
    assert not np.shares_memory(dX, dout)


def test_a_row_normalisation_writes_its_gradient_into_a_cotangent_the_backward_owns():
    """The backward of ``normalize`` writes into its cotangent when the tape made it (a
    product's own array, here ``ḡ Wᵀ``) and leaves the caller's ``dout`` alone when that is
    what reaches it; the gradient is :math:`(\\bar g - \\hat Y \\langle \\hat Y, \\bar g
    \\rangle) / \\nu` either way."""
    rng = np.random.default_rng(2)
    X, W = rng.standard_normal((40, 5)), rng.standard_normal((5, 5))
    norm = np.linalg.norm(X, axis=1, keepdims=True)
    Y = X / norm

    def want(g):
        return (g - Y * (Y * g).sum(1, keepdims=True)) / norm

    class Recording(CPUExecutor):
        def combine_rows(self, a, X, b=None, Y=None, overwrite=False):
            overwrites.append(overwrite)
            return super().combine_rows(a, X, b, Y, overwrite)

    ex = Recording()
    for fn, owned in ((lambda X: ops.normalize(X, 1e-12), False),
                      (lambda X: ops.normalize(X, 1e-12) @ W, True)):
        overwrites = []
        out, pullback = compose.vjp(fn, X, executor=ex, vertex=(0,))
        dout = rng.standard_normal(out.shape)
        kept = dout.copy()
        (dX,) = pullback(dout)
        np.testing.assert_array_equal(dout, kept)
        g = dout @ W.T if owned else dout
        np.testing.assert_allclose(dX, want(g), rtol=1e-10, atol=1e-12)
        assert overwrites[-1] is owned


@pytest.mark.cpu_only
def test_the_scores_product_adds_its_gradient_into_the_messages_cotangent():
    """GAT's shape: the messages ``X`` (one head) and the scores ``X B`` (two slices of one
    product). The backward holds ``X``'s cotangent from the aggregation, an array of the
    program's own (through a reshape's view), so the product adds ``ḡ Bᵀ`` into it
    (``into``) and the second slice adds into the first's array; the gradient equals
    central differences, the caller's ``dout`` stays."""
    rng = np.random.default_rng(4)
    g, X0, dout = graph_and_inputs(12, 3, 3)
    A = g.with_self_loops().A
    B = rng.standard_normal((3, 2))

    class Recording(CPUExecutor):
        def matmul_vjp(self, G, W, X, into=None):
            offered.append(into is not None)
            return super().matmul_vjp(G, W, X, into=into)

    def fn(X):
        SD = X @ B
        P = ops.softmax(A * leaky_relu(rep(SD[:, 1:]) + rep(SD[:, :1]).T))
        return ops.aggregate(P, X.reshape(-1, 1, 3)).reshape(-1, 3)

    def loss(X):
        return float((compose.vjp(fn, X, executor=CPUExecutor(), vertex=(0,))[0] * dout).sum())

    offered = []
    _, pullback = compose.vjp(fn, X0, executor=Recording(), vertex=(0,))
    kept = dout.copy()
    (dX,) = pullback(dout)
    np.testing.assert_array_equal(dout, kept)
    assert offered == [True]
    eps, fd = 1e-6, np.empty_like(X0)
    for i, c in np.ndindex(*X0.shape):
        step = np.zeros_like(X0)
        step[i, c] = eps
        fd[i, c] = (loss(X0 + step) - loss(X0 - step)) / (2 * eps)
    np.testing.assert_allclose(dX, fd, rtol=1e-6, atol=1e-8)


def test_a_programs_cotangents_are_arrays_of_their_own():
    """The tape sums into a program's cotangents in place, so one that shares memory with
    the cotangent handed in or with an earlier one is copied; the others are kept as they
    are, and one added into the sum it was offered goes back as that sum."""
    from gblas_gnn.compose.sinks import _own
    from gblas_gnn.compose.tape import Summed

    g, a, b, s = np.ones((4, 3)), np.zeros((4, 3)), np.zeros(3), np.zeros((4, 3))
    got = _own([a, g[:, :2], None, a.reshape(12), b, s], [False] * 5 + [True], g, np)
    assert got[0] is a and got[4] is b and got[2] is None
    assert isinstance(got[5], Summed) and got[5].value is s
    for copied, was in ((got[1], g[:, :2]), (got[3], a.reshape(12))):
        assert not np.shares_memory(copied, was)
        np.testing.assert_array_equal(copied, was)


def test_the_tape_offers_only_sums_it_owns_and_each_once():
    """A node of ``adds`` is offered a parent's sum only when the backward owns it (a
    product's array, not the caller's cotangent) and once however often the parent appears;
    handing back a sum it was not offered, or asking to donate and add at once, is an
    error."""
    from gblas_gnn.compose.tape import Summed, Tape

    t = Tape()
    x, y = t.leaf("x"), t.leaf("y")
    seen = []

    def adder(g, into):
        seen.append(into)
        out = []
        for o in into:
            if o is not None:
                o += g
            out.append(g if o is None else Summed(o))
        return tuple(out)

    a = t.add([x, x, y], adder, adds=True)
    p = t.add([x], lambda g: (g * 2.0,), fresh=True)       # x's sum: a product's own
    q = t.add([y], lambda g: (g,))                         # y's: the caller's dout itself
    out = t.add([a, p, q], lambda g: (g, g, g))
    dout = np.ones(3)
    got = t.backward(out, dout)
    (offers,) = seen
    assert offers[0] is not None and offers[1] is None and offers[2] is None
    np.testing.assert_array_equal(got["x"], np.full(3, 4.0))
    np.testing.assert_array_equal(got["y"], np.full(3, 2.0))
    np.testing.assert_array_equal(dout, np.ones(3))
    t = Tape()
    x = t.leaf("x")
    bad = t.add([x], lambda g, into: (Summed(np.zeros(3)),), adds=True)
    with pytest.raises(RuntimeError, match="not offered"):
        t.backward(t.add([bad], lambda g: (g.copy(),), fresh=True), np.ones(3))
    with pytest.raises(ValueError, match="not both"):
        t.add([x], lambda g, o: (g,), donate=True, adds=True)


def test_the_tape_frees_what_a_vjp_held_as_soon_as_it_has_run():
    """A forward value only a vjp reads (HGT's activations) is released when that vjp has
    run, not when the whole backward ends; a spent vjp cannot run again."""
    import weakref

    from gblas_gnn.compose.tape import Tape

    t = Tape()
    x = t.leaf("x")
    held = np.ones(3)
    alive = weakref.ref(held)
    seen = []
    # recorded first, so its vjp runs last: after the one that holds the value
    probe = t.add([x], lambda g: (seen.append(("probe", alive() is None)) or g,))
    holder = t.add([x], lambda g, kept=held: (g * kept,))
    del held
    later = t.add([holder, probe],
                  lambda g: (seen.append(("later", alive() is None)) or g, g))
    t.backward(t.add([later], lambda g: (g,)), np.ones(3))
    # there while its vjp may still run, gone as soon as it has
    assert seen == [("later", False), ("probe", True)]
    with pytest.raises(RuntimeError, match="ran twice"):
        holder.vjp(np.ones(3))


def test_functional_form_gives_gradients_in_the_structure_of_the_arguments(executor):
    g, H, _ = graph_and_inputs(6, 4, 1)
    w = np.linspace(-1, 1, 4)

    def loss(A, X, params):
        E = A * (ops.tanh(rep(X) + rep(X).T) @ params["w"])
        return (ops.aggregate(ops.softmax(E), X) * params["scale"]).sum()

    params = {"w": executor.asarray(w), "scale": executor.asarray(np.asarray(2.0))}
    value, grads = compose.value_and_grad(loss, argnums=(1, 2), executor=executor,
                                          vertex=(1,))(g.A, executor.asarray(H), params)
    assert np.shape(value) == () and grads[0].shape == H.shape
    assert set(grads[1]) == {"w", "scale"}
    # the gradient of the scale is the loss divided by it
    np.testing.assert_allclose(float(host(grads[1]["scale"])), float(host(value)) / 2.0)


def test_a_user_semiring_with_derivatives_trains_and_one_without_is_refused_at_backward():
    name, bare = "test_softplus_times", "test_bare_max_min"
    semirings.register(name, "plus", lambda s, h: s * h,
                       add_identity=0.0, mul_grad=(lambda s, h: h, lambda s, h: s))
    semirings.register(bare, "max", "min")
    try:
        g, H, _ = graph_and_inputs(2, 3, 1)
        S = g.A
        out, pull = compose.vjp(lambda X: ops.aggregate(S, X, name), H, executor=CPU)
        np.testing.assert_allclose(out, host(ops.aggregate(S, H, "sum", executor=CPU)))
        np.testing.assert_allclose(pull(np.ones_like(out))[0],
                                   host(ops.spmm_t(S, np.ones_like(out), executor=CPU)))
        out, pull = compose.vjp(lambda X: ops.aggregate(S, X, bare), H, executor=CPU)
        with pytest.raises(ValueError, match=f"semiring '{bare}' has no backward"):
            pull(np.ones_like(out))
    finally:
        semirings.registry._unregister(name)
        semirings.registry._unregister(bare)


def test_row_norms_and_normalisation_equal_numpy_and_clamp_like_torch(executor):
    """Row norms and ``normalize`` on a matrix with a zero row: equal numpy forward; the
    gradient of a clamped row is linear (``dĤ / eps``) for ``normalize`` and 0 for the
    norm; plain arrays give the same values outside a composition."""
    rng = np.random.default_rng(3)
    H = rng.standard_normal((5, 3))
    H[2] = 0.0
    G = rng.standard_normal((5, 3))
    w = rng.standard_normal(5)
    eps = 1e-6
    norms = np.maximum(np.linalg.norm(H, axis=1), eps)

    def loss(X):
        return (ops.normalize(X, eps) * G).sum() + (ops.row_norm(X, eps) * w).sum()

    value, dH = compose.value_and_grad(loss, executor=executor, vertex=(0,))(
        executor.asarray(H))
    Hn = H / norms[:, None]
    np.testing.assert_allclose(float(host(value)), (Hn * G).sum() + (norms * w).sum())
    want = (G - Hn * (Hn * G).sum(1)[:, None]) / norms[:, None] + \
        H * (w / norms)[:, None]
    want[2] = G[2] / eps
    np.testing.assert_allclose(host(dH), want, rtol=1e-12)
    with gg.executors.default(executor):
        np.testing.assert_allclose(host(ops.normalize(executor.asarray(H), eps)), Hn)
        np.testing.assert_allclose(host(ops.row_norm(executor.asarray(H))),
                                   np.linalg.norm(H, axis=1))


def test_normalize_with_its_norms_equals_the_two_rules(executor):
    """``normalize(X, eps, return_norms=True)``: the pair of ``normalize`` and ``row_norm``,
    values and gradient (a zero row included), in a composition and outside one."""
    rng = np.random.default_rng(5)
    H = rng.standard_normal((6, 4))
    H[3] = 0.0
    G, w, eps = rng.standard_normal((6, 4)), rng.standard_normal(6), 1e-6

    def together(X):
        Xn, norms = ops.normalize(X, eps, return_norms=True)
        return (Xn * G).sum() + (norms * w).sum()

    def apart(X):
        return (ops.normalize(X, eps) * G).sum() + (ops.row_norm(X, eps) * w).sum()

    got, want = (compose.value_and_grad(fn, executor=executor, vertex=(0,))(
        executor.asarray(H)) for fn in (together, apart))
    np.testing.assert_allclose(float(host(got[0])), float(host(want[0])), rtol=1e-14)
    np.testing.assert_allclose(host(got[1]), host(want[1]), rtol=1e-14)
    with gg.executors.default(executor):
        Hn, norms = ops.normalize(executor.asarray(H), eps, return_norms=True)
        np.testing.assert_allclose(host(Hn), host(ops.normalize(executor.asarray(H), eps)))
        np.testing.assert_allclose(host(norms), host(ops.row_norm(executor.asarray(H), eps)))
    with pytest.raises(TypeError, match="return_norms must be a bool"):
        ops.normalize(H, eps, return_norms=1)
    with pytest.raises(ValueError, match="^normalize needs an \\(n, k\\) array"):
        ops.normalize(np.ones(3), eps, return_norms=True)    # the name the user called


@pytest.mark.parametrize("args, error, match", [
    ((np.ones((3, 2)), -1.0), ValueError, "eps must be a finite number ≥ 0"),
    ((np.ones((3, 2)), float("nan")), ValueError, "eps must be a finite number ≥ 0"),
    ((np.ones((3, 2, 2)), 0.0), ValueError, r"needs an \(n, k\) array, got shape \(3, 2, 2\)"),
    ((np.ones((3, 2), int), 0.0), TypeError, "needs a floating-point array"),
    (([[1.0]], 0.0), TypeError, "needs a floating-point array, got list"),
])
def test_row_rules_refuse_bad_input(args, error, match):
    for fn in (ops.normalize, ops.row_norm):
        with pytest.raises(error, match=match):
            fn(*args)


# ---------------------------------------------------------------------- errors
class Broken(gg.nn.Module):
    def __init__(self, kind):
        super().__init__(np.float64)
        self.kind = kind
        self.add_param("W", np.ones((4, 3)))

    def forward(self, g, H):
        A = g.A
        if self.kind == "shapes":
            return ops.aggregate(A * (rep(H) + rep(H @ self.params["W"]).T).sum(-1), H)
        if self.kind == "matmul":
            return H @ self.params["W"].T
        if self.kind == "float":
            return H * float(self.params["W"][0, 0])
        if self.kind == "avg":
            return ops.aggregate(A * (rep(H) @ self.params["W"][:, 0] - 100.0), H, "avg")
        return np.zeros(3)


@pytest.mark.parametrize("kind, error, match", [
    ("shapes", ValueError, r"add: shapes \(10, 10, 4\) and \(10, 10, 3\) do not broadcast"),
    ("matmul", ValueError, r"@: inner dimensions differ, \(10, 4\) @ \(3, 4\)"),
    ("float", TypeError, "would drop its gradient"),
    ("avg", ValueError, "nonnegative edge weights"),
    ("none", TypeError, "must return an array computed"),
])
def test_errors_inside_a_composed_forward(kind, error, match):
    g = gg.Graph.from_edges([0, 1, 2], [1, 2, 3], 10, dtype=np.float64)
    with pytest.raises(error, match=match):
        Broken(kind)(g, np.ones((10, 4)))


def test_backward_needs_exactly_one_forward_per_backward():
    g, H, _ = graph_and_inputs(1, 5, 1)
    m = ComposedVA(5, 2, dtype=np.float64)
    with pytest.raises(RuntimeError, match="forward in training mode first"):
        m.backward(np.ones((H.shape[0], 2)))
    out = m(g, H)
    m.backward(np.ones_like(out))
    with pytest.raises(RuntimeError, match="one backward"):
        m.backward(np.ones_like(out))
    m(g, H)
    with pytest.raises(ValueError, match="dout"):
        m.backward(np.ones((H.shape[0], 3)))


def test_declared_parameters_are_checked():
    m = ComposedVA(5, 2, dtype=np.float64)
    with pytest.raises(ValueError, match="declared twice"):
        m.add_param("W", np.ones((5, 2)))
    with pytest.raises(TypeError, match="float32"):
        m.add_param("V", np.ones(3, np.float32))
    with pytest.raises(ValueError, match="NaN or Inf"):
        m.add_param("V", np.array([np.nan]))
    with pytest.raises(TypeError, match="vertex-indexed"):
        compose.vjp(lambda A, X, w: ops.aggregate(A * (rep(X) * X).sum(-1), X),
                    gg.Graph.from_edges([0], [1], 2).A, np.ones((2, 2), np.float32),
                    np.ones(2, np.float32), vertex=(1,))
    with pytest.raises(TypeError, match="only factor"):
        factor(np.ones((2, 2))) @ factor(np.ones((2, 2)))
