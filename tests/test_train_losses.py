"""Masked softmax cross-entropy and accuracy against hand-computed references."""

import math

import numpy as np
import pytest
from gradcheck import numerical_grad

from gblas_gnn.train.losses import accuracy, cross_entropy


def test_cross_entropy_hand_computed():
    logits = np.array([[1.0, 2.0, 3.0],
                       [0.0, 0.0, 0.0],
                       [5.0, -5.0, 0.0],
                       [9.0, 9.0, 9.0]])
    y = np.array([2, 1, 0, 7])                 # the unmasked label 7 is never read
    mask = np.array([True, True, True, False])
    loss, d = cross_entropy(logits, y, mask)
    z = math.exp(1) + math.exp(2) + math.exp(3)
    l0 = -(3 - math.log(z))
    l1 = math.log(3)
    z2 = math.exp(5) + math.exp(-5) + 1
    l2 = -(5 - math.log(z2))
    assert loss == pytest.approx((l0 + l1 + l2) / 3, rel=1e-14)
    p0 = np.exp([1, 2, 3]) / z
    ref = np.zeros((4, 3))
    ref[0] = (p0 - [0, 0, 1]) / 3
    ref[1] = (np.full(3, 1 / 3) - [0, 1, 0]) / 3
    ref[2] = (np.exp([5, -5, 0]) / z2 - [1, 0, 0]) / 3
    np.testing.assert_allclose(d, ref, rtol=1e-13, atol=1e-16)
    assert np.all(d[3] == 0)


def test_cross_entropy_finite_differences_float64():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((10, 4)) * 3
    y = rng.integers(0, 4, 10)
    mask = rng.random(10) < 0.6
    mask[0] = True
    _, d = cross_entropy(logits, y, mask)
    num = numerical_grad(lambda: cross_entropy(logits, y, mask)[0], logits)
    np.testing.assert_allclose(d, num, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cross_entropy_stable_and_dtype(dtype):
    # huge logits: the naive exp would overflow; log-sum-exp gives the exact answer
    logits = np.array([[1000.0, 0.0], [-1000.0, 1000.0], [800.0, 800.0]], dtype=dtype)
    y = np.array([0, 0, 1])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        loss, d = cross_entropy(logits, y, np.ones(3, bool))
    assert d.dtype == dtype and np.isfinite(d).all()
    assert loss == pytest.approx((0 + 2000 + math.log(2)) / 3, rel=1e-6)
    np.testing.assert_allclose(d[1], [-1 / 3, 1 / 3], rtol=1e-6)
    np.testing.assert_allclose(d[2], [1 / 6, -1 / 6], rtol=1e-6)


def test_every_row_masked_gives_the_masked_form_bitwise_and_leaves_the_logits():
    """With every row masked the gradient is computed in place in the masked copy (one
    (n, C) array, issue 21): the same bits as scattering it into zeros, its own memory."""
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((40, 5)).astype(np.float32)
    before = logits.copy()
    y = rng.integers(0, 5, 40)
    loss, d = cross_entropy(logits, y, np.ones(40, bool))
    # the same rows through the masked path: one extra unmasked row of zeros
    padded = np.vstack([logits, np.zeros((1, 5), np.float32)])
    loss_p, d_p = cross_entropy(padded, np.append(y, 0), np.append(np.ones(40, bool), False))
    assert loss == loss_p and d.tobytes() == d_p[:40].tobytes()
    assert not np.shares_memory(d, logits)
    np.testing.assert_array_equal(logits, before)


def test_cross_entropy_float32_matches_float64():
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((50, 6))
    y = rng.integers(0, 6, 50)
    mask = rng.random(50) < 0.5
    l64, d64 = cross_entropy(logits, y, mask)
    l32, d32 = cross_entropy(logits.astype(np.float32), y, mask)
    assert l32 == pytest.approx(l64, rel=1e-6)
    np.testing.assert_allclose(d32, d64, rtol=1e-5, atol=1e-7)


def test_accuracy_hand_computed():
    logits = np.array([[0.1, 0.9], [0.8, 0.2], [0.5, 0.5], [0.3, 0.7], [1.0, 0.0]])
    y = np.array([1, 1, 0, 1, 1])
    mask = np.array([True, True, True, True, False])
    # predictions 1, 0, 0 (tie → lowest class), 1 → 3 of 4 right; node 4 is masked out
    assert accuracy(logits, y, mask) == 0.75
    assert accuracy(logits, y, np.array([False, True, False, False, True])) == 0.0


def test_errors():
    logits = np.zeros((3, 2))
    y = np.array([0, 1, 1])
    m = np.ones(3, bool)
    with pytest.raises(ValueError, match="selects no node"):
        cross_entropy(logits, y, np.zeros(3, bool))
    with pytest.raises(ValueError, match="boolean"):
        cross_entropy(logits, y, np.ones(3, int))
    with pytest.raises(ValueError, match="shape"):
        cross_entropy(logits, y[:2], m)
    with pytest.raises(TypeError, match="integers"):
        cross_entropy(logits, y.astype(float), m)
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        cross_entropy(logits, np.array([0, 2, 1]), m)
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        accuracy(logits, np.array([0, -1, 1]), m)
    with pytest.raises(ValueError, match="2-D"):
        cross_entropy(np.zeros(3), y, m)
    with pytest.raises(TypeError, match="float"):
        cross_entropy(np.zeros((3, 2), int), y, m)
    bad = logits.copy()
    bad[1, 0] = np.nan
    with pytest.raises(FloatingPointError, match="NaN or Inf"):
        cross_entropy(bad, y, m)
    # a NaN on an unmasked row is not read
    loss, _ = cross_entropy(bad, y, np.array([True, False, True]))
    assert loss == pytest.approx(math.log(2))
