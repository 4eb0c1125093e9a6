"""Hypothesis property tests of the semiring laws, for every shipped semiring.

Values are small integers (exact in float64 under + and ×) plus the relevant
infinities, so the real and tropical laws are checked *exactly*.  Domains are
restricted honestly, and each restriction is a documented property of the semiring:

* ``max_times`` / ``min_times``: ⊗ distributes over ⊕ only for a nonnegative factor
  (``-1·max(0, 1) = -1 ≠ max(-0, -1) = 0``); their ⊕ identity ``∓∞`` is not
  annihilated by ``×`` (``0·∞`` is NaN), so they have no annihilator -- on ℝ≥0,
  ``max_times`` is the semiring ``(max, ×, 0, 1)`` with annihilator 0, tested as such.
* ``∞`` never meets ``×`` in the ⊗ laws of the ``*_times`` semirings (``0·∞``).
* ``avg``: pairs with positive weights plus the identity ``(0, 0)``; ⊕ is exactly
  commutative and has an exact identity, and is associative up to rounding (checked
  with a relative tolerance).  ⊗ maps (weight, feature) to a pair, so its laws are
  those of the weight-scaling action ``c·(v, w) = (v, c w)``.  A counterexample shows
  why mixed-sign weights are rejected.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import gblas_gnn.semirings as sr
from gblas_gnn.semirings import averaging

INF = float("inf")
ints = st.integers(-8, 8).map(float)
nonneg = st.integers(0, 8).map(float)


def with_(value):
    return ints | st.just(value)


# name -> strategies: ⊕ laws, ⊗ laws (and annihilation), distributivity (factor a, b/c)
DOMAINS = {
    "plus_times": dict(add=ints, mul=ints, dist_a=ints, dist_bc=ints),
    "min_plus": dict(add=with_(INF), mul=with_(INF), dist_a=with_(INF), dist_bc=with_(INF)),
    "max_plus": dict(add=with_(-INF), mul=with_(-INF), dist_a=with_(-INF), dist_bc=with_(-INF)),
    "max_times": dict(add=with_(-INF), mul=ints, dist_a=nonneg, dist_bc=ints),
    "min_times": dict(add=with_(INF), mul=ints, dist_a=nonneg, dist_bc=ints),
}
REAL = list(DOMAINS)
LAWS = settings(deadline=None, max_examples=60)


def test_every_shipped_semiring_has_law_tests():
    assert sorted([*REAL, "avg"]) == sorted(sr.names()[:6])


def same(x, y) -> bool:
    return bool(np.array_equal(np.asarray(x), np.asarray(y)))


@pytest.mark.parametrize("name", REAL)
@LAWS
@given(data=st.data())
def test_add_associative_commutative_identity(name, data):
    s = sr.get(name)
    a, b, c = (data.draw(DOMAINS[name]["add"]) for _ in range(3))
    assert same(s.add(s.add(a, b), c), s.add(a, s.add(b, c)))
    assert same(s.add(a, b), s.add(b, a))
    e = s.add_identity
    assert same(s.add(e, a), a) and same(s.add(a, e), a)


@pytest.mark.parametrize("name", REAL)
@LAWS
@given(data=st.data())
def test_mul_associative_identity_annihilator(name, data):
    s = sr.get(name)
    a, b, c = (data.draw(DOMAINS[name]["mul"]) for _ in range(3))
    assert same(s.mul(s.mul(a, b), c), s.mul(a, s.mul(b, c)))
    one = s.mul_identity
    assert same(s.mul(one, a), a) and same(s.mul(a, one), a)
    if s.annihilator is not None:
        z = s.annihilator
        assert same(z, s.add_identity)
        assert same(s.mul(z, a), z) and same(s.mul(a, z), z)


@pytest.mark.parametrize("name", REAL)
@LAWS
@given(data=st.data())
def test_distributive_both_sides(name, data):
    s = sr.get(name)
    dom = DOMAINS[name]
    a = data.draw(dom["dist_a"])
    b, c = data.draw(dom["dist_bc"]), data.draw(dom["dist_bc"])
    assert same(s.mul(a, s.add(b, c)), s.add(s.mul(a, b), s.mul(a, c)))
    assert same(s.mul(s.add(b, c), a), s.add(s.mul(b, a), s.mul(c, a)))


@pytest.mark.parametrize("name", ["max_times", "min_times"])
def test_times_semirings_restrictions_are_real(name):
    s = sr.get(name)
    assert s.annihilator is None
    with np.errstate(invalid="ignore"):
        assert np.isnan(s.mul(0.0, s.add_identity))  # 0·(∓∞): ⊕ identity not annihilated
    a, b, c = -1.0, 0.0, 1.0  # negative factor: distributivity fails
    assert not same(s.mul(a, s.add(b, c)), s.add(s.mul(a, b), s.mul(a, c)))


@LAWS
@given(a=nonneg, b=nonneg)
def test_max_times_on_nonnegatives_is_a_semiring_with_zero(a, b):
    s = sr.max_times
    assert same(s.add(0.0, a), a)  # on ℝ≥0 the ⊕ identity is 0 ...
    assert same(s.mul(0.0, b), 0.0) and same(s.mul(b, 0.0), 0.0)  # ... and it annihilates


@pytest.mark.parametrize("name", REAL)
@LAWS
@given(data=st.data())
def test_scalar_ops_are_vectorised(name, data):
    s = sr.get(name)
    arrays = hnp.arrays(np.float64, 6, elements=DOMAINS[name]["dist_bc"])
    x, y = data.draw(arrays), data.draw(arrays)
    for op in (s.add, s.mul):
        got = op(x, y)
        assert got.shape == (6,)
        assert same(got, [op(u, v) for u, v in zip(x, y, strict=True)])
    assert s.add(x.astype(np.float32), y.astype(np.float32)).dtype == np.float32


# -- avg -------------------------------------------------------------------------------
values = st.integers(-16, 16).map(lambda v: v / 4)  # dyadic
weights = st.integers(1, 8).map(float)
pos_pairs = st.tuples(values, weights).map(np.array)
pairs = pos_pairs | st.just(np.array([0.0, 0.0]))
ZERO = np.array([0.0, 0.0])


def close(p, q) -> bool:
    return bool(np.allclose(p, q, rtol=1e-12, atol=1e-12))


@LAWS
@given(p=pairs, q=pairs, r=pairs)
def test_avg_add_monoid_laws(p, q, r):
    add = sr.avg.add
    assert same(add(p, q), add(q, p))  # exactly commutative
    assert close(add(add(p, q), r), add(p, add(q, r)))  # associative up to rounding
    e = np.array(sr.avg.add_identity)
    assert same(add(e, p), p) and same(add(p, e), p)  # exact identity (0, 0)
    assert add(p, q)[1] == p[1] + q[1]  # weights add exactly


@LAWS
@given(ps=st.lists(pos_pairs, min_size=1, max_size=6), perm_seed=st.integers(0, 10**6))
def test_avg_fold_is_the_weighted_mean_in_any_order(ps, perm_seed):
    order = np.random.default_rng(perm_seed).permutation(len(ps))
    acc = ZERO
    for i in order:
        acc = sr.avg.add(acc, ps[i])
    v, w = np.array(ps).T
    assert close(acc, [np.sum(v * w) / np.sum(w), np.sum(w)])


@LAWS
@given(c=nonneg, d=nonneg, p=pairs, q=pairs, h=values)
def test_avg_mul_is_the_weight_scaling_action(c, d, p, q, h):
    scale, add = averaging.scale, sr.avg.add
    assert close(scale(c, add(p, q)), add(scale(c, p), scale(c, q)))  # distributes over ⊕
    assert same(scale(c, scale(d, p)), scale(c * d, p))  # associative action
    assert same(scale(1.0, p), p)  # identity 1
    assert same(scale(0.0, p), ZERO)  # annihilation by the weight 0 ...
    assert same(sr.avg.mul(sr.avg.annihilator, h), ZERO)  # ... also for ⊗
    assert same(sr.avg.mul(c, h), scale(c, np.array([h, 1.0])))  # s ⊗ h = s·(h, 1)


def test_avg_mixed_sign_weights_break_associativity():
    p, q, r = np.array([1.0, 1.0]), np.array([5.0, -1.0]), np.array([2.0, 1.0])
    add = sr.avg.add
    assert not close(add(add(p, q), r), add(p, add(q, r)))  # (2, 1) vs (1, 1)


def test_avg_vectorised_matches_scalar():
    rng = np.random.default_rng(0)
    P = np.stack([rng.integers(-8, 8, 20) / 2, rng.integers(0, 4, 20)], -1).astype(float)
    Q = np.stack([rng.integers(-8, 8, 20) / 2, rng.integers(0, 4, 20)], -1).astype(float)
    got = sr.avg.add(P, Q)
    for i in range(20):
        assert same(got[i], sr.avg.add(P[i], Q[i]))
    assert sr.avg.add(P.astype(np.float32), Q.astype(np.float32)).dtype == np.float32
