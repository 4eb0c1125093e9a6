"""Every derived rule against central finite differences in float64, on random small graphs
with empty rows and isolated vertices (hypothesis), on the executor under test.

For each input ``x`` of a composition ``f`` and a random direction ``δ``, the derived
gradient must give the directional derivative
``⟨∇ₓ L, δ⟩ ≈ (L(x + εδ) − L(x − εδ)) / 2ε`` of ``L = Σ R ⊙ f``. Max/min aggregations are
differentiable almost everywhere; random continuous inputs avoid their ties, whose rule is
tested on its own (``tests/test_compose.py``).
"""

from __future__ import annotations

import numpy as np
import pytest
from compose_rules import RULES, inputs
from hypothesis import given, settings
from hypothesis import strategies as st

from gblas_gnn import compose
from gblas_gnn.executors import to_numpy

EPS = 1e-6


def _examples(executor) -> int:
    # the simulator runs every kernel launch in Python threads: a few examples there
    return 2 if executor.name == "cuda" else 6


def _loss(rule, A, R, ex):
    """``L = Σ R ⊙ rule(...)`` evaluated as a composed forward in evaluation mode (no tape)."""
    def L(X, Y, u, v, P):
        out = compose.evaluate(lambda *a: rule(A, *a), *(ex.asarray(a) for a in (X, Y, u, v)),
                               {k: ex.asarray(p) for k, p in P.items()}, executor=ex,
                               vertex=(0, 1, 2, 3))
        return float(np.sum(R * to_numpy(out)))
    return L


def _directional(L, args, k, key, direction):
    """Central difference of ``L`` along ``direction`` in argument ``k`` (entry ``key`` of
    the parameter dict when given)."""
    def shifted(step):
        moved = [dict(a) if isinstance(a, dict) else a.copy() for a in args]
        if key is None:
            moved[k] = moved[k] + step * direction
        else:
            moved[k][key] = moved[k][key] + step * direction
        return L(*moved)
    return (shifted(EPS) - shifted(-EPS)) / (2 * EPS)


@pytest.mark.parametrize("rule", RULES, ids=[r.__name__ for r in RULES])
def test_rule_matches_central_differences(rule, executor):
    @settings(max_examples=_examples(executor), deadline=None)
    @given(seed=st.integers(0, 2**16), n=st.integers(3, 9), edges=st.integers(0, 30))
    def check(seed, n, edges):
        g, arrays, params = inputs(seed, n=n, edges=edges)
        A = g.A
        args = [arrays["X"], arrays["Y"], arrays["u"], arrays["v"], params]
        ex_args = [executor.asarray(a) for a in args[:4]] + \
            [{k: executor.asarray(p) for k, p in params.items()}]
        out, pullback = compose.vjp(lambda *a: rule(A, *a), *ex_args, executor=executor,
                                    vertex=(0, 1, 2, 3))
        rng = np.random.default_rng(seed + 1)
        R = rng.standard_normal(np.shape(out))
        grads = pullback(executor.asarray(R))
        L = _loss(rule, A, R, executor)
        # central differences lose ~|L|·1e-16/ε to rounding
        tol = 1e-6 + 1e-9 * abs(L(*args))
        for k in range(4):
            d = rng.standard_normal(args[k].shape)
            want = _directional(L, args, k, None, d)
            got = float(np.sum(to_numpy(grads[k]) * d))
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=tol,
                                       err_msg=f"{rule.__name__}: argument {k}")
        for key, p in params.items():
            d = rng.standard_normal(p.shape)
            want = _directional(L, args, 4, key, d)
            got = float(np.sum(to_numpy(grads[4][key]) * d))
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=tol,
                                       err_msg=f"{rule.__name__}: parameter {key}")

    check()
