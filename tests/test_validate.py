"""The shared input checks: the finite check on both of its paths (numpy for small or
strided arrays, one parallel pass for large contiguous ones) and the errors it backs."""

from __future__ import annotations

import numpy as np
import pytest

from gblas_gnn._validate import _PARALLEL_MIN, all_finite, dense_matrix, dense_vector

_BAD = [np.nan, np.inf, -np.inf]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size", [1, 7, _PARALLEL_MIN - 1, _PARALLEL_MIN, 3 * _PARALLEL_MIN + 5])
def test_all_finite_finds_every_bad_value_anywhere(dtype, size):
    x = np.random.default_rng(size).standard_normal(size).astype(dtype)
    x[0] = np.finfo(dtype).max                      # huge but finite
    x[-1] = -np.finfo(dtype).tiny / 4               # subnormal
    assert all_finite(x)
    for bad in _BAD:
        for pos in {0, size // 2, size - 1}:
            y = x.copy()
            y[pos] = bad
            assert not all_finite(y), (bad, pos)


def test_all_finite_on_strided_and_2d_views():
    x = np.zeros((_PARALLEL_MIN, 4), np.float32)
    assert all_finite(x) and all_finite(x[:, ::2]) and all_finite(x.T)
    x[-1, 3] = np.nan
    assert not all_finite(x) and not all_finite(x.T) and not all_finite(x[:, 1::2])
    assert all_finite(x[:, ::2])
    assert all_finite(np.empty((0, 3)))


@pytest.mark.parametrize("bad", _BAD)
def test_dense_checks_reject_non_finite_large_inputs(bad):
    M = np.ones((_PARALLEL_MIN, 2), np.float32)
    M[123, 1] = bad
    with pytest.raises(ValueError, match="NaN or Inf"):
        dense_matrix(M, "H")
    v = np.ones(2 * _PARALLEL_MIN)
    v[-1] = bad
    with pytest.raises(ValueError, match="NaN or Inf"):
        dense_vector(v, "v")
