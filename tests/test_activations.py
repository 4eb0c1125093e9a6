"""Elementwise functions as registered objects (:mod:`gblas_gnn.ir.functions`): ``softplus``
against a float64 reference and central differences, and a function registered in this file
alone running on the executor under test, forward and backward, inside a fused edge program
and on dense arrays, against the reference executor and finite differences."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import numerical_grad
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from layer_cases import graph_and_inputs

from gblas_gnn import compose, ops
from gblas_gnn.executors import get_executor, to_numpy
from gblas_gnn.ir import functions as F
from gblas_gnn.ops import rep

#: defined here and nowhere else: ``x / (1 + |x|)``, derivative ``1 / (1 + |x|)²``
SOFTSIGN = F.Unary(
    lambda xp, x, a: x / (x.dtype.type(1) + xp.abs(x)),
    lambda xp, x, y, a: x.dtype.type(1) / (x.dtype.type(1) + xp.abs(x)) ** 2,
    code="({x} / ({one} + abs({x})))",
    code_derivative="({one} / (({one} + abs({x})) * ({one} + abs({x}))))")


@pytest.fixture(scope="module")
def softsign():
    if "softsign_test" not in F.UNARY:
        F.register_unary("softsign_test", SOFTSIGN)
    yield "softsign_test"


@settings(max_examples=50, deadline=None)
@given(arrays(st.sampled_from([np.float32, np.float64]), st.integers(0, 30),
              elements=st.floats(-80, 80, width=32)))
def test_softplus_equals_log1p_exp_without_overflow(x):
    with np.errstate(over="raise", invalid="raise"):
        got = to_numpy(ops.unary("softplus", x, executor="cpu"))
    want = np.logaddexp(0.0, x.astype(np.float64))
    assert got.dtype == x.dtype
    tol = 1e-6 if x.dtype == np.float32 else 1e-13
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_softplus_derivative_is_the_central_difference():
    x = np.linspace(-30, 30, 121)
    d = F.UNARY["softplus"].derivative(np, x, None, None)
    numeric = (np.logaddexp(0, x + 1e-6) - np.logaddexp(0, x - 1e-6)) / 2e-6
    np.testing.assert_allclose(d, numeric, rtol=1e-7, atol=1e-9)


def _attention(fn):
    def loss(A, X, params):
        E = A * (ops.unary(fn, rep(X) + rep(X).T) @ params["w"])
        return (ops.aggregate(ops.softmax(E), ops.unary(fn, X)) * params["r"]).sum()
    return loss


@pytest.mark.parametrize("fn", ["softplus", "gelu", "softsign"])
def test_a_registered_function_trains_on_the_executor(executor, softsign, fn):
    """Inside a fused edge program (the score) and on a dense array (the messages): the
    value and every gradient equal the reference executor's, and the reference's equal
    central differences."""
    fn = softsign if fn == "softsign" else fn
    g, H, _ = graph_and_inputs(7, 3, 5)
    rng = np.random.default_rng(11)
    w, r = rng.standard_normal(3), rng.standard_normal(H.shape)

    def run(ex, H, w):
        params = {"w": ex.asarray(w), "r": ex.asarray(r)}
        value, grads = compose.value_and_grad(_attention(fn), argnums=(1, 2), executor=ex,
                                              vertex=(1,))(g.A, ex.asarray(H), params)
        return float(to_numpy(value)), to_numpy(grads[0]), to_numpy(grads[1]["w"])

    reference = get_executor("primitives")
    got, want = run(executor, H, w), run(reference, H, w)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-10)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-8, atol=1e-10)
    Hc, wc = H.copy(), w.copy()
    np.testing.assert_allclose(want[1], numerical_grad(lambda: run(reference, Hc, w)[0], Hc),
                               rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(want[2], numerical_grad(lambda: run(reference, H, wc)[0], wc),
                               rtol=1e-5, atol=1e-7)


def test_registration_refuses_bad_functions(softsign):
    with pytest.raises(ValueError, match="exists"):
        F.register_unary("softplus", SOFTSIGN)
    with pytest.raises(ValueError, match="identifier"):
        F.register_unary("soft sign", SOFTSIGN)
    with pytest.raises(ValueError, match="template"):
        F.register_unary("bad_template", F.Unary(SOFTSIGN.forward, SOFTSIGN.derivative,
                                                  code="{x} + {user}", code_derivative="{one}"))
    with pytest.raises(TypeError, match="Unary"):
        F.register_unary("not_unary", lambda x: x)
    with pytest.raises(ValueError, match="unknown elementwise function"):
        ops.unary("no_such_function", np.ones(3))
