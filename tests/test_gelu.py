"""The exact GELU (``ops.gelu``, HGT's activation): the cpu executor's numba kernels against
SciPy's ``erf`` (a property test), the derivative against central differences, and the
generic array-module path against the kernels."""

from __future__ import annotations

import functools
import platform
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy.special import erf

from gblas_gnn import ops
from gblas_gnn.ir import gelu as gelu_kernels
from gblas_gnn.ir.functions import UNARY


def _packed_fma_expected() -> bool:
    """Whether this CPU is an x86-64 one with AVX2 and FMA (``/proc/cpuinfo``'s flags)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return " avx2" in flags and " fma" in flags


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


# ---------------------------------------------------------------- the float32 polynomials
def _exact_derivative(x):
    x = x.astype(np.float64)
    return 0.5 * (1 + erf(x / np.sqrt(2))) + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi)


def _f32_ulp(values):
    return np.spacing(np.abs(values).astype(np.float32)).astype(np.float64)


def test_the_float32_gelu_is_within_two_roundings_of_the_exact_value():
    """On a dense grid through every piece (a < 1, 1 ≤ a < 4.5, beyond) and the tails."""
    from gblas_gnn.ir.gelu import gelu

    x = np.linspace(-14, 14, 1_400_001).astype(np.float32)
    exact = _reference(x)
    err = np.abs(gelu(x).astype(np.float64) - exact)
    assert np.all(err <= 2 * _f32_ulp(exact) + 1e-9)


def test_the_float32_gelu_cotangent_is_within_two_roundings_of_the_exact_one():
    from gblas_gnn.ir.gelu import gelu_vjp

    x = np.linspace(-14, 14, 1_400_001).astype(np.float32)
    g = np.random.default_rng(0).uniform(-2, 2, x.size).astype(np.float32)
    exact = g.astype(np.float64) * _exact_derivative(x)
    err = np.abs(gelu_vjp(x, g).astype(np.float64) - exact)
    assert np.all(err <= 2 * _f32_ulp(exact) + 2e-8 * np.abs(g))


def test_the_polynomials_are_the_chebyshev_interpolants_the_module_names():
    """The coefficients are reproducible: degree-8 interpolant of erf(√s)/√s on [0, 1] and
    degree-12 of erfcx on [1, 4.5], as monomials (lowest degree first)."""
    from numpy.polynomial import Polynomial
    from numpy.polynomial import chebyshev as ch
    from scipy.special import erfcx

    from gblas_gnn.ir.gelu import ERF_SMALL, ERFCX_MID

    def small(u):
        s = (u + 1) / 2
        return np.where(s > 0, erf(np.sqrt(s)) / np.sqrt(np.maximum(s, 1e-300)),
                        2 / np.sqrt(np.pi))

    in_s = Polynomial(ch.cheb2poly(ch.chebinterpolate(small, 8)))(Polynomial([-1, 2])).coef
    np.testing.assert_allclose(ERF_SMALL, in_s, rtol=1e-12, atol=1e-15)
    mid = ch.cheb2poly(ch.chebinterpolate(lambda u: erfcx(1.0 + 3.5 * (u + 1) / 2), 12))
    np.testing.assert_allclose(ERFCX_MID, mid, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blocks_of_zeros_take_the_short_way_with_the_same_numbers(dtype):
    """Zeros in whole blocks (the stacked vertex set's source blocks) and scattered: the
    value 0 and the cotangent g / 2, as the full formula gives."""
    from gblas_gnn.ir.gelu import gelu, gelu_vjp

    rng = np.random.default_rng(1)
    x = np.zeros((40, 33), dtype)
    x[3:9] = rng.standard_normal((6, 33))
    x[20, 5] = 0.7
    g = rng.standard_normal(x.shape).astype(dtype)
    y, dx = gelu(x), gelu_vjp(x, g)
    assert y.shape == x.shape and dx.shape == x.shape
    assert np.all(y[x == 0] == 0) and np.all(dx[x == 0] == g[x == 0] / 2)
    live = x != 0
    tol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(y[live], _reference(x[live]), rtol=tol, atol=tol)
    np.testing.assert_allclose(dx[live], g[live] * _exact_derivative(x[live]), rtol=tol,
                               atol=tol)


@pytest.mark.parametrize("threads", [1, 2, 3, 7])
def test_every_block_is_written_whatever_the_share_count(threads):
    """The passes hand block ``b`` to share ``b mod threads`` (HGT's live rows in one run of
    the stacked set): every element is written, the blocks of zeros and a last partial
    block too, with the numbers one share gives, float32's and float64's."""
    from gblas_gnn.ir.gelu import _BLOCK, _gelu64, _gelu_pass32, _gelu_vjp64

    rng = np.random.default_rng(threads)
    x = np.zeros(9 * _BLOCK + 37, np.float32)
    x[: 3 * _BLOCK] = rng.standard_normal(3 * _BLOCK)        # a run of live blocks first
    x[-20:] = rng.standard_normal(20)
    g = rng.standard_normal(x.size).astype(np.float32)
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    passes = {   # (float32 value or cotangent, and float64's by libm): (kernel, its arguments)
        (np.float32, False): lambda out, t: _gelu_pass32(x, g, out, False, t),
        (np.float32, True): lambda out, t: _gelu_pass32(x, g, out, True, t),
        (np.float64, False): lambda out, t: _gelu64(x64, out, t),
        (np.float64, True): lambda out, t: _gelu_vjp64(x64, g64, out, t),
    }
    for (dtype, cotangent), run in passes.items():
        one = np.full(x.shape, np.nan, dtype)
        run(one, 1)
        out = np.full(x.shape, np.nan, dtype)
        run(out, threads)
        assert not np.isnan(out).any()
        np.testing.assert_array_equal(out, one)
        want = g64 * _exact_derivative(x64) if cotangent else _reference(x64)
        tol = 1e-6 if dtype == np.float32 else 1e-14
        np.testing.assert_allclose(out, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_fused_cotangent_is_the_derivative_times_g(dtype):
    x = np.linspace(-6, 6, 301).astype(dtype)
    g = np.random.default_rng(2).standard_normal(x.size).astype(dtype)
    gelu_fn = UNARY["gelu"]
    fused = gelu_fn.cotangent(np, x, None, g, None)
    assert fused.dtype == dtype
    tol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(fused, g * gelu_fn.derivative(np, x, None, None), rtol=tol,
                               atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_written_into_an_array_the_same_bits_as_a_fresh_one(dtype):
    rng = np.random.default_rng(4)
    x, g = (rng.standard_normal((70, 9)).astype(dtype) for _ in range(2))
    gelu_fn = UNARY["gelu"]
    for fresh, into in ((gelu_fn.apply(np, x, None),
                         lambda out: gelu_fn.apply(np, x, None, out=out)),
                        (gelu_fn.cotangent(np, x, None, g, None),
                         lambda out: gelu_fn.cotangent(np, x, None, g, None, out=out))):
        out = np.full((70, 9), np.nan, dtype)
        assert into(out) is out
        np.testing.assert_array_equal(out, fresh)
    # rows of a larger array, as the live rows of a traced array are written
    big = np.zeros((100, 9), dtype)
    gelu_kernels.gelu(x, out=big[10:80])
    np.testing.assert_array_equal(big[10:80], gelu_fn.apply(np, x, None))
    assert not big[:10].any() and not big[80:].any()


def test_an_output_of_another_shape_dtype_or_layout_is_refused():
    x = np.ones((4, 3), np.float32)
    for out in (np.empty((3, 4), np.float32), np.empty((4, 3)), np.empty((3, 4), np.float32).T):
        with pytest.raises(ValueError, match="out must be a C-contiguous float32 array"):
            gelu_kernels.gelu(x, out=out)
    # the table's into-path takes what the kernels take and copies the rest in
    out = np.empty((3, 4), np.float32).T
    np.testing.assert_array_equal(UNARY["gelu"].apply(np, x, None, out=out),
                                  UNARY["gelu"].apply(np, x, None))


@pytest.mark.parametrize("name, alpha", [("tanh", None), ("leaky_relu", 0.1)])
def test_a_function_without_its_own_way_is_computed_then_copied_in(name, alpha):
    x = np.linspace(-2, 2, 12).reshape(3, 4)
    g = np.arange(12.0).reshape(3, 4)
    fn = UNARY[name]
    out = np.empty_like(x)
    np.testing.assert_array_equal(fn.apply(np, x, alpha, out=out), fn.forward(np, x, alpha))
    y = fn.forward(np, x, alpha)
    np.testing.assert_array_equal(fn.cotangent(np, x, y, g, alpha, out=out),
                                  g * fn.derivative(np, x, y, alpha))


@functools.cache
def _serial_pass():
    """The float32 pass compiled serially from its source, once for both flags (its flag is
    an argument: one signature)."""
    import numba as nb

    return nb.njit(fastmath={"contract"})(gelu_kernels._gelu_pass32.py_func)


@pytest.mark.skipif(not _packed_fma_expected(), reason="needs an x86-64 CPU with AVX2 and FMA")
@pytest.mark.parametrize("cotangent", [False, True])
def test_the_float32_pass_is_vectorised(cotangent):
    """The element loops compile to packed float64 fused multiply-adds (``vfmadd…pd``): a
    choice between value and cotangent inside one loop had kept them scalar (2.3× slower on
    an AMD EPYC). Compiled serially from the kernel's Python source (numba does not show the
    machine code of a cached kernel)."""
    serial = _serial_pass()
    x = np.linspace(-3, 3, 600, dtype=np.float32)
    out = np.empty_like(x)
    serial(x, x, out, cotangent, 2)
    np.testing.assert_array_equal(out, gelu_kernels.gelu_vjp(x, x) if cotangent
                                  else gelu_kernels.gelu(x))
    machine_code = next(iter(serial.inspect_asm().values()))
    assert re.search(r"\bvfmadd\d{3}pd\b", machine_code)
