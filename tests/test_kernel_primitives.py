"""The numba building blocks of the CPU kernels: the softmax exponential against float64
``np.exp``, the 64-byte aligned allocation, the row prefetch (which must change nothing
but timing), the edge gather into CSC order and the softmax term per head."""

from __future__ import annotations

import numba as nb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gblas_gnn.executors.alignment import ALIGNMENT, aligned_empty
from gblas_gnn.executors.cpu._kernel_primitives import (
    _line_step,
    exp_nonpositive,
    head_row_dots,
    prefetch_row,
)

_REL_ERR = 2e-7          # the documented bound (about 1.2 float32 ulp measured)
_FLOOR = np.exp(-87.0)   # below x = -87 the float32 result is clamped to exp(-87)
_FAST = {"reassoc", "contract"}     # the flags of the kernels that inline it

pytestmark = pytest.mark.cpu_only  # the cpu executor's own kernel helpers


@nb.njit(fastmath=_FAST)
def _exp_all(x):
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = exp_nonpositive(x[i])
    return out


@nb.njit(fastmath=_FAST)
def _exp_sum(x, out):
    """The loop shape of the softmax kernels (vectorised, with a running sum)."""
    total = x.dtype.type(0)
    for i in range(x.shape[0]):
        v = exp_nonpositive(x[i])
        out[i] = v
        total += v
    return total


def _check_f32(x: np.ndarray, got: np.ndarray) -> None:
    ref = np.exp(x.astype(np.float64))
    inside = x >= -87.0
    rel = np.abs(got[inside] - ref[inside]) / ref[inside]
    assert rel.max(initial=0.0) <= _REL_ERR
    below = got[~inside]
    assert np.all((below > 0) & (below <= 1.01 * _FLOOR))


def test_exp_float32_on_a_dense_grid():
    x = np.linspace(-87.0, 0.0, 2_000_001, dtype=np.float32)
    x = np.concatenate([x, np.float32(-87.0) * np.random.default_rng(0).random(100_000,
                                                                              np.float32)])
    _check_f32(x, _exp_all(x))


def test_exp_float32_vectorised_loop_matches_scalar_loop():
    x = -np.random.default_rng(1).exponential(8.0, 100_003).astype(np.float32)
    out = np.empty_like(x)
    total = _exp_sum(x, out)
    np.testing.assert_array_equal(out, _exp_all(x))
    assert total == pytest.approx(float(np.exp(x.astype(np.float64)).sum()), rel=1e-5)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-200.0, 0.0, width=32), min_size=1, max_size=64))
def test_exp_float32_property(values):
    x = np.array(values, dtype=np.float32)
    _check_f32(x, _exp_all(x))


def test_exp_float32_special_values():
    x = np.array([0.0, -0.0, -1e-30, -87.0, -88.0, -1e30, -np.inf, np.nan], np.float32)
    got = _exp_all(x)
    assert got[0] == 1.0 and got[1] == 1.0 and got[2] == 1.0
    assert got[3] == pytest.approx(np.exp(-87.0), rel=_REL_ERR)
    assert np.all((got[4:7] > 0) & (got[4:7] <= 1.01 * _FLOOR))
    assert np.isnan(got[7])             # a NaN score is not hidden


def test_exp_float32_is_monotone_where_a_softmax_needs_it():
    x = np.linspace(0.0, -87.0, 1_000_003, dtype=np.float32)
    assert np.all(np.diff(_exp_all(x)) <= 0)


def test_exp_float64_is_libm_exp():
    x = -np.random.default_rng(2).exponential(50.0, 10_000)
    x[:3] = [0.0, -745.0, -800.0]
    np.testing.assert_allclose(_exp_all(x), np.exp(x), rtol=1e-15, atol=0)
    assert exp_nonpositive(-1.5) == np.exp(-1.5)          # plain Python call


@pytest.mark.parametrize("shape", [(0,), 1, (3,), (7, 5), (100_001, 1, 32), (2, 3, 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_aligned_empty(shape, dtype):
    a = aligned_empty(shape, dtype)
    expect = (shape,) if isinstance(shape, int) else shape
    assert a.shape == expect and a.dtype == np.dtype(dtype)
    assert a.flags.c_contiguous and a.flags.writeable
    if a.size:
        assert a.ctypes.data % ALIGNMENT == 0
        a[...] = 1
        assert a.sum() == a.size


@nb.njit
def _prefetch_then_sum(X):
    total = 0.0
    for j in range(X.shape[0]):
        for h in range(X.shape[1]):
            prefetch_row(X[j, h])
            for c in range(X.shape[2]):
                total += X[j, h, c]
    return total


@pytest.mark.parametrize("width", [0, 1, 15, 16, 17, 32, 33])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_prefetch_changes_nothing(width, dtype):
    rng = np.random.default_rng(width)
    X = rng.standard_normal((9, 2, width)).astype(dtype)
    before = X.copy()
    unaligned = np.empty(X.size + 1, dtype)[1:].reshape(X.shape)   # rows off the line grid
    unaligned[...] = X
    for arr in (X, unaligned):
        assert _prefetch_then_sum(arr) == pytest.approx(float(X.sum(dtype=np.float64)))
    np.testing.assert_array_equal(X, before)


@nb.njit
def _jitted_line_step(row):
    return _line_step(row)


@pytest.mark.parametrize("dtype", [np.int8, np.float32, np.float64, np.complex128])
def test_a_prefetch_steps_one_cache_line_of_elements(dtype):
    # the kernels' step (folded at compile time from the dtype) equals the Python one
    row = np.zeros(3, dtype)
    assert _jitted_line_step(row) == _line_step(row) == ALIGNMENT // row.itemsize


def test_the_softmax_term_is_by_row_and_head():
    rng = np.random.default_rng(3)
    A, B = (rng.standard_normal((7, 3, 5)) for _ in range(2))
    out = np.empty((7, 3))
    head_row_dots(A, B, out)
    np.testing.assert_allclose(out, np.einsum("ihc,ihc->ih", A, B), rtol=1e-12)
