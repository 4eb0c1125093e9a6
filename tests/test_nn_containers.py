"""Activations, Dropout, Sequential and the model builders."""


import numpy as np
import pytest
import scipy.sparse as sp
from gradcheck import numerical_grad
from random_reference import feature_keep, next_key

import gblas_gnn as gg
from gblas_gnn.nn.activation import ELU, Identity, ReLU
from gblas_gnn.nn.dropout import Dropout
from gblas_gnn.nn.linear import Linear
from gblas_gnn.nn.models import MODELS, build, derive_seeds
from gblas_gnn.nn.sequential import Sequential

DTYPES = [np.float32, np.float64]


def feats(n=7, k=5, seed=0, dtype=np.float64):
    # keep entries away from 0 so that ReLU/ELU kinks do not sit inside a finite-difference step
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, k))
    x[np.abs(x) < 0.05] += 0.2
    return x.astype(dtype)


def small_graph(n=7, seed=0):
    rng = np.random.default_rng(seed)
    return gg.Graph.from_edges(rng.integers(0, n, 20), rng.integers(0, n, 20), n)


# ---------------------------------------------------------------------------- activations
def elu_ref(x, alpha):
    return np.array([[v if v > 0 else alpha * (np.exp(v) - 1) for v in row] for row in x])


@pytest.mark.parametrize("dtype", DTYPES)
def test_activation_forward_matches_reference(dtype):
    x = feats(dtype=dtype)
    tol = dict(rtol=1e-6, atol=1e-7) if dtype == np.float32 else dict(rtol=1e-14, atol=0)
    out = ReLU()(None, x)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, np.where(x > 0, x, 0))
    for alpha in (1.0, 0.3):
        out = ELU(alpha)(None, x)
        assert out.dtype == dtype
        np.testing.assert_allclose(out, elu_ref(x.astype(np.float64), alpha), **tol)
    out = Identity()(None, x)
    np.testing.assert_array_equal(out, x)


@pytest.mark.parametrize("module", [ReLU(), ELU(), ELU(alpha=0.7), Identity()],
                         ids=["relu", "elu", "elu0.7", "identity"])
def test_activation_gradients(module):
    x = feats()
    R = np.random.default_rng(1).standard_normal(x.shape)
    module.train()
    module(None, x)
    dx = module.backward(R)
    num = numerical_grad(lambda: float(np.sum(R * module(None, x))), x)
    np.testing.assert_allclose(dx, num, rtol=1e-6, atol=1e-8)
    assert module.params == {} and module.grads == {}


def test_activation_eval_keeps_no_cache_and_checks_inputs():
    x = feats()
    for m in (ReLU(), ELU(), Identity()):
        m.eval()
        m(None, x)
        assert m._cache is None
        with pytest.raises(RuntimeError, match="forward in training mode"):
            m.backward(x)
        m.train()
        m(None, x)
        with pytest.raises(ValueError, match="rows"):
            m.backward(x[:3])
        with pytest.raises(TypeError, match="dtype"):
            m.backward(x.astype(np.float32))
        bad = x.copy()
        bad[0, 0] = np.nan
        with pytest.raises(ValueError, match="NaN"):
            m(None, bad)
    with pytest.raises(TypeError, match="dtype"):
        ReLU(dtype=np.float32)(None, x)
    with pytest.raises(ValueError, match="finite"):
        ELU(alpha=np.inf)
    with pytest.raises(TypeError):
        ELU(alpha="1")


@pytest.mark.parametrize("dtype", DTYPES)
def test_elu_backward_keeps_one_array_with_the_bits_of_the_select(dtype):
    """ELU keeps one (n, k) array (issue 21): its output for α ≥ 0 (σ(x) > 0 ⇔ x > 0), σ'(x)
    for α < 0; its gradient has the bits of ``where(x > 0, dout, dout · (σ(x) + α))``, at 0,
    for every α, whatever the caller then writes into the output (called directly, the
    caller gets a copy of the array the cache keeps)."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((40, 5)).astype(dtype)
    x[0, :3] = 0
    dout = rng.standard_normal(x.shape).astype(dtype)
    for alpha in (1.0, 0.7, 0.0, -0.5):
        m = ELU(alpha)
        out = m(None, x)
        a = x.dtype.type(alpha)
        want = np.where(x > 0, dout, dout * (a * np.expm1(np.minimum(x, 0)) + a))
        out[...] = 3.0
        assert list(m._cache) == (["out"] if alpha >= 0 else ["slope"])
        assert m.backward(dout).tobytes() == want.tobytes()


class _Composed(gg.nn.Module):
    """Composed: an ELU child's output is the module's output."""

    def __init__(self):
        super().__init__(np.float64)
        self.add_param("W", np.eye(5))
        self.act = ELU()

    def forward(self, g, H):
        return self.act(g, H @ self.params["W"])


class _Doubler(gg.nn.Module):
    """Hand-written: twice its ELU child's output, computed into that output (a caller the
    library does not know) or into a new array."""

    def __init__(self, in_place: bool):
        super().__init__(np.float64)
        self.act, self.in_place = ELU(), in_place

    def forward(self, g, H):
        out = self.act(g, H)
        if not self.in_place:
            return 2.0 * out
        out *= 2.0
        return out

    def backward(self, dout):
        return self.act.backward(2.0 * dout)


@pytest.mark.parametrize("make", [
    lambda: ELU(),
    lambda: Sequential(Linear(5, 5, seed=1, dtype=np.float64), ELU()),
    lambda: Sequential(Linear(5, 5, seed=1, dtype=np.float64), ELU(), Identity()),
    lambda: Sequential(Sequential(Linear(5, 5, seed=1, dtype=np.float64), ELU())),
    lambda: _Composed(),
], ids=["elu", "sequential", "identity-last", "nested", "composed"])
def test_writing_into_an_output_never_changes_a_gradient(make):
    """ELU's cache keeps its output: whatever the module that hands it out (ELU itself, a
    container, a composed forward) the caller who may write into it gets a copy
    (``Scope.released``'s rule), so the gradients are those of an untouched run."""
    x, g = feats(), small_graph()
    runs = []
    for overwrite in (False, True):
        m = make()
        out = m(g, x)
        dout = np.random.default_rng(3).standard_normal(out.shape)
        if overwrite:
            out[...] = -7.0
        dH = m.backward(dout)
        runs.append([dH, *(v for _, v in m.named_grads())])
    for a, b in zip(*runs, strict=True):
        assert a.tobytes() == b.tobytes()


def test_a_module_writing_into_a_childs_output_changes_no_gradient():
    """A hand-written module inside a Sequential that doubles its ELU child's output in
    place gets the same gradients as one that doubles it into a new array: its ELU child
    hands it a copy (the module's code is not a container's)."""
    x, g = feats(), small_graph()
    runs = []
    for in_place in (False, True):
        m = Sequential(Linear(5, 5, seed=1, dtype=np.float64), _Doubler(in_place),
                       Linear(5, 3, seed=2, dtype=np.float64))
        out = m(g, x)
        dH = m.backward(np.random.default_rng(3).standard_normal(out.shape))
        runs.append([out, dH, *(v for _, v in m.named_grads())])
    for a, b in zip(*runs, strict=True):
        assert a.tobytes() == b.tobytes()


def test_a_container_passes_the_kept_output_on_uncopied():
    """Inside a Sequential the next layer keeps the very array ELU's cache keeps (the memory
    issue 21 saves): nothing between the two may write into it."""
    model = Sequential(Linear(5, 5, seed=1, dtype=np.float64), ELU(),
                       Linear(5, 3, seed=2, dtype=np.float64))
    model(small_graph(), feats())
    assert model[2]._cache["H"] is model[1]._cache["out"]


def test_elu_large_negative_and_positive_inputs_no_warning():
    x = np.array([[-1000.0, 1000.0, 0.0]])
    with np.errstate(all="raise"):
        out = ELU()(None, x)
    np.testing.assert_array_equal(out, [[-1.0, 1000.0, 0.0]])


# ---------------------------------------------------------------------------- dropout
@pytest.mark.parametrize("dtype", DTYPES)
def test_dropout_training_is_inverted_and_seeded(dtype):
    x = np.ones((400, 50), dtype=dtype)
    d = Dropout(0.3, seed=5)
    out = d(None, x)
    assert out.dtype == dtype
    kept = out != 0
    np.testing.assert_allclose(out[kept], 1 / 0.7, rtol=1e-6)
    assert abs(kept.mean() - 0.7) < 0.01          # 20000 draws: sd ≈ 0.0032
    # independent reference of the mask: the documented counter-based rule
    ref = feature_keep(next_key(np.random.default_rng(5)), 0.3, *x.shape)
    np.testing.assert_array_equal(kept, ref)
    # the generator advances: the next call draws a new mask ...
    out2 = d(None, x)
    assert not np.array_equal(out2 != 0, kept)
    # ... and a fresh module with the same seed repeats the sequence
    d2 = Dropout(0.3, seed=5)
    np.testing.assert_array_equal(d2(None, x), out)
    np.testing.assert_array_equal(d2(None, x), out2)
    # backward applies the same scaled mask
    g = np.random.default_rng(0).standard_normal(x.shape).astype(dtype)
    np.testing.assert_array_equal(d2.backward(g), g * (out2 != 0) * dtype(1 / 0.7))


def test_dropout_eval_is_identity_and_draws_nothing():
    x = feats()
    d = Dropout(0.5, seed=1)
    state = d.rng.bit_generator.state
    d.eval()
    out = d(None, x)
    np.testing.assert_array_equal(out, x)
    assert d._cache is None
    assert d.rng.bit_generator.state == state
    with pytest.raises(RuntimeError):
        d.backward(x)
    # p = 0 is the identity in training mode and draws nothing either
    d0 = Dropout(0.0)
    s0 = d0.rng.bit_generator.state
    np.testing.assert_array_equal(d0(None, x), x)
    np.testing.assert_array_equal(d0.backward(x), x)
    assert d0.rng.bit_generator.state == s0


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5, np.nan])
def test_dropout_bad_probability(p):
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        Dropout(p)


def test_dropout_bad_probability_type():
    with pytest.raises(TypeError):
        Dropout("0.5")
    with pytest.raises(TypeError):
        Dropout(True)


# ---------------------------------------------------------------------------- sequential
def sequential_gradcheck(model, g, H, reset=()):
    """Finite differences of L = Σ R ⊙ model(g, H) for every named parameter and the input;
    the generators in ``reset`` are rewound before every forward (fixed dropout masks).
    The caller sets the train / eval modes."""
    states = [d.rng.bit_generator.state for d in reset]

    def fwd():
        for d, s in zip(reset, states, strict=True):
            d.rng.bit_generator.state = s
        return model(g, H)

    R = np.random.default_rng(7).standard_normal(fwd().shape)
    fwd()
    dH = model.backward(R)
    grads = {k: v.copy() for k, v in model.named_grads()}
    params = dict(model.named_parameters())
    assert set(grads) == set(params)

    def loss():
        return float(np.sum(R * fwd()))

    for name, p in params.items():
        np.testing.assert_allclose(grads[name], numerical_grad(loss, p), rtol=1e-6, atol=1e-8,
                                   err_msg=name)
    np.testing.assert_allclose(dH, numerical_grad(loss, H), rtol=1e-6, atol=1e-8)


def mlp(dtype=np.float64, p=0.4):
    return Sequential(Dropout(p, seed=1), Linear(5, 6, seed=2, dtype=dtype), ReLU(),
                      Dropout(p, seed=3), Linear(6, 4, seed=4, dtype=dtype), ELU(),
                      Linear(4, 3, seed=5, dtype=dtype), Identity())


def test_sequential_gradcheck_fixed_mask_training():
    model = mlp()
    drops = [m for m in model if isinstance(m, Dropout)]
    sequential_gradcheck(model, None, feats(), reset=drops)


def test_sequential_eval_dropout_is_identity_and_p0_gradcheck():
    H = feats()
    model = mlp().eval()
    plain = Sequential(*[m for m in mlp() if not isinstance(m, Dropout)]).eval()
    np.testing.assert_array_equal(model(None, H), plain(None, H))
    # p = 0: dropout is the identity in training mode too; gradients flow through unchanged
    model0 = mlp(p=0.0).train()
    sequential_gradcheck(model0, None, H)
    plain.train()
    plain(None, H)
    model0(None, H)
    R = np.ones((7, 3))
    np.testing.assert_array_equal(model0.backward(R), plain.backward(R))


def test_sequential_nested_and_parameter_names():
    inner = Sequential(Linear(5, 4, seed=0, dtype=np.float64), ReLU())
    model = Sequential(Dropout(0.2), inner, Linear(4, 2, seed=1, dtype=np.float64))
    names = [n for n, _ in model.named_parameters()]
    assert names == ["1.0.W", "1.0.bias", "2.W", "2.bias"]
    assert [n for n, _ in model.named_grads()] == names
    assert dict(model.named_parameters())["2.W"] is model[2].params["W"]
    assert len(model) == 3 and model.children()[1] is inner
    sequential_gradcheck(model, None, feats(), reset=[model[0]])
    model.eval()
    assert not inner.training and not inner[0].training
    out = model(None, feats())
    assert out.shape == (7, 2)
    with pytest.raises(RuntimeError):
        model.backward(out)
    assert "Sequential" in repr(model)


def test_sequential_graph_inputs_identical():
    n = 7
    g = small_graph(n)
    from gblas_gnn.nn.gcn import GCNConv

    def make():
        return Sequential(GCNConv(5, 4, seed=0, dtype=np.float64), ReLU(),
                          GCNConv(4, 2, seed=1, dtype=np.float64))
    H = feats(n)
    ref = make().eval()(g, H)
    csr = g.to_scipy()
    assert sp.issparse(csr)
    np.testing.assert_array_equal(make().eval()(csr, H), ref)
    np.testing.assert_array_equal(make().eval()(g.A, H), ref)


def test_sequential_dtype_comes_from_parameterised_module():
    m = Sequential(Dropout(0.5), ReLU(), Linear(3, 2, dtype=np.float64))
    assert m.dtype == np.float64
    assert Sequential(ReLU(dtype=np.float64)).dtype == np.float64
    out = m(None, np.ones((4, 3)))
    assert out.dtype == np.float64


def test_sequential_errors():
    with pytest.raises(ValueError, match="at least one"):
        Sequential()
    with pytest.raises(TypeError, match="element 1"):
        Sequential(ReLU(), lambda g, h: h)
    r = ReLU()
    with pytest.raises(ValueError, match="twice"):
        Sequential(r, r)


# ---------------------------------------------------------------------------- models
@pytest.mark.parametrize("name", sorted(MODELS))
def test_builders_are_seeded_and_run(name):
    n, f, c = 9, 6, 3
    g = small_graph(n, seed=2)
    x = feats(n, f, dtype=np.float32)
    a = build(name, f, c, seed=4)
    b = build(name, f, c, seed=4)
    other = build(name, f, c, seed=5)
    pa, pb, po = (dict(m.named_parameters()) for m in (a, b, other))
    assert pa.keys() == pb.keys() and pa
    assert all(np.array_equal(pa[k], pb[k]) for k in pa)
    assert any(not np.array_equal(pa[k], po[k]) for k in pa if pa[k].size > 1)
    # distinct derived seeds: no two weight matrices of equal shape are identical
    mats = [v for k, v in pa.items() if v.ndim == 2]
    for i in range(len(mats)):
        for j in range(i + 1, len(mats)):
            if mats[i].shape == mats[j].shape:
                assert not np.array_equal(mats[i], mats[j])
    out = a.eval()(g, x)
    assert out.shape == (n, c) and out.dtype == np.float32
    a.train()
    out = a(g, x)
    dx = a.backward(np.ones_like(out))
    assert dx.shape == x.shape


def test_gat_builder_architecture():
    from gblas_gnn.nn.gat import GATConv
    m = build("gat", 10, 4, hidden=3, heads=2, dropout=0.25)
    kinds = [type(x).__name__ for x in m]
    assert kinds == ["Dropout", "GATConv", "ELU", "Dropout", "GATConv"]
    assert isinstance(m[1], GATConv) and m[1].heads == 2 and m[1].params["W"].shape == (10, 6)
    assert m[4].heads == 1 and not m[4].concat and m[4].params["W"].shape == (6, 4)
    assert m[0].p == m[3].p == 0.25


def test_gcn_and_agnn_builder_architecture():
    m = build("gcn", 10, 4, hidden=5)
    assert [type(x).__name__ for x in m] == ["Dropout", "GCNConv", "ReLU", "Dropout", "GCNConv"]
    m = build("AGNN", 10, 4, layers=3)
    kinds = [type(x).__name__ for x in m]
    assert kinds == ["Dropout", "Linear", "ReLU", "AGNNConv", "AGNNConv", "AGNNConv",
                     "Dropout", "Linear"]
    assert [x.learn_beta for x in m if type(x).__name__ == "AGNNConv"] == [False, True, True]


def test_build_errors():
    with pytest.raises(ValueError, match="unknown model 'gatt'.*available: agnn, gat, gcn"):
        build("gatt", 3, 2)
    with pytest.raises(ValueError, match="in_dim"):
        build("gcn", 0, 2)
    with pytest.raises(ValueError, match="num_classes"):
        build("gcn", 3, -1)
    with pytest.raises(ValueError, match="dropout"):
        build("gcn", 3, 2, dropout=1.0)
    with pytest.raises(ValueError, match="seed"):
        build("gcn", 3, 2, seed=-1)
    with pytest.raises(TypeError):
        build("gcn", 3, 2, hiden=4)


def test_derive_seeds_distinct_and_stable():
    s = derive_seeds(0, 20)
    assert len(set(s)) == 20 and s == derive_seeds(0, 20) and s != derive_seeds(1, 20)
    assert derive_seeds(0, 3) == s[:3]


def test_glorot_refuses_a_shape_without_two_fans():
    rng = np.random.default_rng(0)
    assert gg.nn.init.glorot((3, 4), rng).shape == (3, 4)
    with pytest.raises(ValueError, match=r"at least two sizes .* \(1, n\)"):
        gg.nn.init.glorot((16,), rng)
