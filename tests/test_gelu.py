"""The exact GELU (``ops.gelu``, HGT's activation): the cpu executor's numba kernels against
SciPy's ``erf`` (a property test), the derivative against central differences, and the
generic array-module path against the kernels."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy.special import erf

from gblas_gnn import ops
from gblas_gnn.ir.functions import UNARY


def _reference(x):
    x = x.astype(np.float64)
    return 0.5 * x * (1 + erf(x / np.sqrt(2)))


@settings(max_examples=60, deadline=None)
@given(arrays(st.sampled_from([np.float32, np.float64]), st.integers(0, 40),
              elements=st.floats(-30, 30, width=32)))
def test_the_kernel_equals_the_erf_formula(x):
    got = ops.gelu(x, executor="cpu")
    assert got.dtype == x.dtype and got.shape == x.shape
    tol = 1e-6 if x.dtype == np.float32 else 1e-14
    np.testing.assert_allclose(got, _reference(x), rtol=tol, atol=tol)


def test_the_derivative_is_the_central_difference():
    x = np.concatenate([np.linspace(-6, 6, 97), [0.0]]).reshape(7, 14)
    got = UNARY["gelu"].derivative(np, x, None, None)
    numeric = (_reference(x + 1e-6) - _reference(x - 1e-6)) / 2e-6
    np.testing.assert_allclose(got, numeric, rtol=1e-7, atol=1e-9)
    assert got[-1, -1] == 0.5                               # at zero: Φ(0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_array_module_path_equals_the_kernel(dtype):
    """The generic path (SciPy's erf in numpy, as CuPy's on a GPU) gives the same numbers."""
    from gblas_gnn.ir.functions import _erf

    x = np.linspace(-5, 5, 41).astype(dtype)
    generic = 0.5 * x * (1 + _erf(np, x * dtype(np.sqrt(0.5))))
    np.testing.assert_allclose(ops.gelu(x, executor="cpu"), generic, rtol=1e-6, atol=1e-7)
