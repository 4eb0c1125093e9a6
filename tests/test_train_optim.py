"""SGD and Adam against hand-written reference updates (PyTorch's documented algorithms)."""

import math

import numpy as np
import pytest

from gblas_gnn.nn.activation import ReLU
from gblas_gnn.nn.linear import Linear
from gblas_gnn.nn.sequential import Sequential
from gblas_gnn.train.optim import SGD, Adam


def make_model(dtype=np.float64, seed=0):
    m = Sequential(Linear(3, 4, seed=seed, dtype=dtype), ReLU(), Linear(4, 2, seed=seed + 1,
                                                                       dtype=dtype))
    # non-zero biases so that weight decay acts on every parameter
    m[0].params["bias"][:] = np.linspace(-1, 1, 4)
    m[2].params["bias"][:] = [0.5, -0.25]
    return m


def fake_grad(name, p, step):
    """A deterministic gradient that depends on the parameter value and on the step."""
    h = sum(map(ord, name))
    return (np.sin(p * 3.0 + h) + 0.1 * step).astype(p.dtype)


def set_grads(model, step):
    for i, child in enumerate(model):
        for k, p in child.params.items():
            child.grads[k] = fake_grad(f"{i}.{k}", p, step)


def run(model, opt, steps):
    for t in range(1, steps + 1):
        set_grads(model, t)
        opt.step()
    return {k: v.copy() for k, v in model.named_parameters()}


def ref_sgd(params, steps, lr, momentum=0.0, dampening=0.0, wd=0.0, nesterov=False,
            wd_of=None):
    params = {k: v.astype(np.float64).copy() for k, v in params.items()}
    bufs = {}
    for t in range(1, steps + 1):
        for name, p in params.items():
            d = fake_grad(name, p, t)
            lam = wd_of(name) if wd_of else wd
            d = d + lam * p
            if momentum != 0:
                if name not in bufs:
                    bufs[name] = d.copy()
                else:
                    bufs[name] = momentum * bufs[name] + (1 - dampening) * d
                d = d + momentum * bufs[name] if nesterov else bufs[name]
            params[name] = p - lr * d
    return params


def ref_adam(params, steps, lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0):
    params = {k: v.astype(np.float64).copy() for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(p) for k, p in params.items()}
    for t in range(1, steps + 1):
        for name, p in params.items():
            g = fake_grad(name, p, t) + wd * p
            m[name] = b1 * m[name] + (1 - b1) * g
            v[name] = b2 * v[name] + (1 - b2) * g * g
            mhat = m[name] / (1 - b1 ** t)
            vhat = v[name] / (1 - b2 ** t)
            params[name] = p - lr * mhat / (np.sqrt(vhat) + eps)
    return params


def initial(dtype=np.float64):
    return {k: v.copy() for k, v in make_model(dtype).named_parameters()}


def close(got, ref, rtol=1e-12, atol=1e-14):
    assert got.keys() == ref.keys()
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=rtol, atol=atol, err_msg=k)


def case_id(case):
    return ",".join(f"{k}={v}" for k, v in case.items())


SGD_CASES = [
    dict(lr=0.1),
    dict(lr=0.05, wd=0.01),
    dict(lr=0.1, momentum=0.9),
    dict(lr=0.1, momentum=0.9, dampening=0.3, wd=5e-3),
    dict(lr=0.1, momentum=0.8, nesterov=True, wd=1e-2),
]


@pytest.mark.parametrize("case", SGD_CASES, ids=case_id)
@pytest.mark.parametrize("steps", [1, 5])
def test_sgd_matches_reference(case, steps):
    model = make_model()
    kw = dict(case)
    wd = kw.pop("wd", 0.0)
    opt = SGD(model, weight_decay=wd, **kw)
    got = run(model, opt, steps)
    close(got, ref_sgd(initial(), steps, wd=wd, **kw))
    assert opt.step_count == steps


def test_sgd_one_step_by_hand():
    model = make_model()
    p0 = model[0].params["W"].copy()
    opt = SGD(model, lr=0.5, weight_decay=0.1)
    set_grads(model, 1)
    g = model[0].grads["W"].copy()
    opt.step()
    np.testing.assert_allclose(model[0].params["W"], p0 - 0.5 * (g + 0.1 * p0), rtol=1e-15)


def test_sgd_updates_in_place():
    model = make_model()
    W = model[0].params["W"]
    run(model, SGD(model, lr=0.1, momentum=0.5), 2)
    assert model[0].params["W"] is W and dict(model.named_parameters())["0.W"] is W


ADAM_CASES = [dict(lr=0.01), dict(lr=0.005, wd=5e-4), dict(lr=0.1, b1=0.5, b2=0.9, eps=1e-3)]


@pytest.mark.parametrize("case", ADAM_CASES, ids=case_id)
@pytest.mark.parametrize("steps", [1, 7])
def test_adam_matches_reference(case, steps):
    model = make_model()
    kw = dict(case)
    wd = kw.pop("wd", 0.0)
    b1, b2, eps = kw.pop("b1", 0.9), kw.pop("b2", 0.999), kw.pop("eps", 1e-8)
    opt = Adam(model, lr=kw["lr"], betas=(b1, b2), eps=eps, weight_decay=wd)
    got = run(model, opt, steps)
    close(got, ref_adam(initial(), steps, lr=kw["lr"], b1=b1, b2=b2, eps=eps, wd=wd))


def test_adam_first_step_is_lr_times_sign():
    # bias correction makes the first Adam step ≈ lr · sign(g) (for |g| ≫ eps)
    model = make_model()
    p0 = initial()
    opt = Adam(model, lr=0.01)
    set_grads(model, 1)
    grads = {k: v.copy() for k, v in model.named_grads()}
    opt.step()
    for k, p in model.named_parameters():
        np.testing.assert_allclose(p0[k] - p, 0.01 * np.sign(grads[k]), rtol=1e-5, atol=1e-9)
    assert opt.lr == 0.01 and opt.betas == (0.9, 0.999)
    assert math.isclose(Adam(model).lr, 0.005)


def test_adam_float32_close_to_float64_reference():
    model = make_model(np.float32)
    got = run(model, Adam(model, lr=0.01, weight_decay=1e-3), 5)
    assert all(v.dtype == np.float32 for v in got.values())
    close(got, ref_adam(initial(np.float32), 5, lr=0.01, wd=1e-3), rtol=1e-4, atol=1e-6)


def test_per_prefix_weight_decay():
    model = make_model()
    opt = SGD(model, lr=0.1, weight_decay={"0.": 0.05, "0.bias": 0.0})
    assert opt.decay_of("0.W") == 0.05 and opt.decay_of("0.bias") == 0.0
    assert opt.decay_of("2.W") == 0.0
    got = run(model, opt, 3)
    close(got, ref_sgd(initial(), 3, lr=0.1,
                       wd_of=lambda n: 0.05 if n == "0.W" else 0.0))


@pytest.mark.parametrize("cls", [SGD, Adam])
def test_state_dict_round_trip_continues_bit_identically(cls):
    kw = dict(lr=0.05, momentum=0.9) if cls is SGD else dict(lr=0.05, weight_decay=1e-3)
    a = make_model()
    oa = cls(a, **kw)
    run(a, oa, 3)
    state = oa.state_dict()
    assert int(state["step"]) == 3
    # a fresh model with the saved weights and a fresh optimiser with other hyper-parameters
    b = make_model(seed=9)
    for (_, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        pb[...] = pa
    ob = cls(b, lr=1.0)
    ob.load_state_dict(state)
    assert ob.lr == 0.05 and ob.step_count == 3
    for t in range(4, 7):
        set_grads(a, t)
        set_grads(b, t)
        oa.step()
        ob.step()
    for (k, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        np.testing.assert_array_equal(pa, pb, err_msg=k)
    # the state dict holds copies, not the live buffers
    key = next(k for k in state if "/" in k)
    before = state[key].copy()
    run(a, oa, 1)
    np.testing.assert_array_equal(state[key], before)


def test_load_state_dict_errors_leave_optimizer_unchanged():
    model = make_model()
    opt = Adam(model, lr=0.01)
    run(model, opt, 2)
    good = opt.state_dict()
    other = SGD(make_model(), lr=0.1).state_dict()
    with pytest.raises(ValueError, match="saved by SGD"):
        opt.load_state_dict(other)
    bad = dict(good)
    bad["exp_avg/0.W"] = np.zeros((2, 2))
    with pytest.raises(ValueError, match="exp_avg/0.W"):
        opt.load_state_dict(bad)
    bad = dict(good)
    bad["exp_avg/9.W"] = np.zeros((2, 2))
    with pytest.raises(ValueError, match="unexpected"):
        opt.load_state_dict(bad)
    bad = {k: v for k, v in good.items() if k != "exp_avg_sq/2.bias"}
    with pytest.raises(ValueError, match="lacks"):
        opt.load_state_dict(bad)
    bad = {k: v for k, v in good.items() if k != "step"}
    with pytest.raises(ValueError, match="incomplete"):
        opt.load_state_dict(bad)
    bad = dict(good)
    bad["hyper"] = np.array('{"lr": -1, "weight_decay": 0, "betas": [0.9, 0.9], "eps": 0}')
    with pytest.raises(ValueError, match="hyper"):
        opt.load_state_dict(bad)
    assert opt.lr == 0.01 and opt.step_count == 2
    after = opt.state_dict()
    for k in good:
        np.testing.assert_array_equal(after[k], good[k])


@pytest.mark.parametrize("kw, match", [
    (dict(lr=0.0), "lr"), (dict(lr=-1.0), "lr"), (dict(lr=np.nan), "lr"),
    (dict(lr=0.1, momentum=-0.1), "momentum"), (dict(lr=0.1, weight_decay=-1), "weight_decay"),
    (dict(lr=0.1, nesterov=True), "Nesterov"),
    (dict(lr=0.1, weight_decay={"7.": 0.1}), "matches no parameter"),
])
def test_sgd_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        SGD(make_model(), **kw)


@pytest.mark.parametrize("kw, match", [
    (dict(betas=(1.0, 0.9)), "beta1"), (dict(betas=(0.9, -0.1)), "beta2"),
    (dict(betas=(0.9,)), "pair"), (dict(eps=-1e-8), "eps"), (dict(lr=np.inf), "lr"),
])
def test_adam_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        Adam(make_model(), **kw)


def test_optimizer_type_errors():
    with pytest.raises(TypeError, match="Module"):
        SGD([np.zeros(3)], lr=0.1)
    with pytest.raises(TypeError, match="lr"):
        Adam(make_model(), lr="0.1")
    with pytest.raises(ValueError, match="no parameters"):
        SGD(Sequential(ReLU()), lr=0.1)
