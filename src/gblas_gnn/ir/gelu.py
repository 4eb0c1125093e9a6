r"""The exact GELU and its backward on numpy float arrays: one parallel numba pass each.

.. math::
    \mathrm{GELU}(x) = x\,\Phi(x) = \tfrac{x}{2}\big(1 + \mathrm{erf}(x/\sqrt 2)\big), \qquad
    \bar x = \bar y\,\big(\Phi(x) + x\,\varphi(x)\big), \quad
    \varphi(x) = e^{-x^2/2} / \sqrt{2\pi}

*float64* uses ``math.erf`` and ``math.exp`` (libm's, correctly rounded to about an ulp).

*float32* is computed in float64 arithmetic from polynomials and rounded once, so that the
loop has no call and LLVM vectorises it (``math.erf`` is a scalar call in numba: at HGT's
3.2 M activations it took 19 ms a pass on two threads, the derivative 27 ms). With
:math:`a = |x|/\sqrt 2`:

* :math:`a < 1`: :math:`\mathrm{erf}(a) = a\,P_A(a^2)`, ``P_A`` the degree-8 Chebyshev
  interpolant of :math:`\mathrm{erf}(\sqrt s)/\sqrt s` on :math:`s \in [0, 1]` (relative
  error below :math:`10^{-12}`);
* :math:`1 \le a < 4.5`: :math:`\mathrm{erf}(a) = 1 - e^{-a^2} P_B(u)`, ``P_B`` the degree-12
  Chebyshev interpolant of the scaled complement :math:`\mathrm{erfcx}(a) = e^{a^2}
  \mathrm{erfc}(a)` on :math:`[1, 4.5]` in :math:`u = (2a - 5.5)/3.5` (relative error
  :math:`2.6 \cdot 10^{-8}` of a complement below 0.16: :math:`4 \cdot 10^{-9}` absolute);
* :math:`a \ge 4.5`: :math:`\mathrm{erf}(a) = 1` (the complement is below :math:`2 \cdot
  10^{-10}`);

and :math:`e^{z}` (:math:`z = -a^2 \le 0`) by :func:`_exp_nonpositive`: :math:`z = k \ln 2
+ r`, :math:`|r| \le \ln 2 / 2`, a degree-10 Taylor polynomial of :math:`e^r` (relative error
below :math:`10^{-12}`) scaled by :math:`2^{k}` (an integer power of two times a constant).
Every float32 result is then within one float32 rounding of the exact value's
(``tests/test_gelu.py`` checks both against SciPy on a dense grid and refits the
coefficients from the interpolants named here).
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

__all__ = ["gelu", "gelu_vjp", "ERF_SMALL", "ERFCX_MID"]

_RSQRT2 = 1.0 / math.sqrt(2.0)
_RSQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)
_LOG2E = 1.0 / math.log(2.0)
#: ln 2 in two parts: the first has trailing zero bits, so k · _LN2_HI is exact for |k| < 2¹¹
_LN2_HI = 0.693145751953125
_LN2_LO = math.log(2.0) - _LN2_HI
#: below it e^z is taken as e^-40 (4 · 10⁻¹⁸): 2^(58 + k) stays an int64 shift
_EXP_FLOOR = -40.0
_TWO_M58 = 2.0 ** -58
_INV_3_5 = 1.0 / 3.5

#: erf(√s)/√s = P_A(s), s = a² in [0, 1]: monomial coefficients, lowest degree first
ERF_SMALL = (1.1283791670946748, -0.3761263888962168, 0.11283791308362076,
             -0.026866133217233766, 0.005223783410444189, -0.0008542636619672962,
             0.00011956546657269529, -1.3909243643854573e-05, 1.058914226311901e-06)
#: erfcx(a) = P_B(u), u = (2a − 5.5)/3.5 for a in [1, 4.5]: lowest degree first
ERFCX_MID = (0.19366209627906883, -0.11066581022395072, 0.06051066943386606,
             -0.03180588810915833, 0.016128398697731666, -0.00790210583809585,
             0.0037631722811986403, -0.0017849400316976582, 0.0008023072995661375,
             -0.00028099269527083514, 0.00012335585107063054, -0.00010964403592516941,
             4.418843544885186e-05)
_ERF_SMALL_DESC = ERF_SMALL[::-1]
_ERFCX_MID_DESC = ERFCX_MID[::-1]


#: LLVM may fuse a product and a sum into one FMA (one rounding fewer); nothing else
_CONTRACT = {"contract"}
#: the elements a kernel tests for zeros at once: a block of only zeros (HGT's activations on
#: the stacked vertex set's source blocks) is written without the polynomials
_BLOCK = 256


@nb.njit(cache=True, inline="always", fastmath=_CONTRACT)
def _horner(coefs, x):                         # pragma: no cover (numba)
    acc = 0.0
    for c in coefs:                            # highest degree first; a constant tuple
        acc = acc * x + c
    return acc


@nb.njit(cache=True, inline="always", fastmath=_CONTRACT)
def _exp_nonpositive(z):                       # pragma: no cover (numba)
    """e^z for z ≤ 0 (module docstring), with no call and no division: vectorisable. 2^k is
    the exact float of the integer 2^(58 + k) times the constant 2^-58."""
    z = max(z, _EXP_FLOOR)
    k = math.floor(z * _LOG2E + 0.5)
    r = (z - k * _LN2_HI) - k * _LN2_LO
    p = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6 + r * (1.0 / 24 + r * (
        1.0 / 120 + r * (1.0 / 720 + r * (1.0 / 5040 + r * (1.0 / 40320 + r * (
            1.0 / 362880 + r * (1.0 / 3628800))))))))))
    return p * np.float64(np.int64(1) << np.int64(58 + k)) * _TWO_M58


@nb.njit(cache=True, inline="always", fastmath=_CONTRACT)
def _phi_parts(x):                             # pragma: no cover (numba)
    """(Φ(x), e^{-x²/2}) for a float64 ``x`` by the polynomials (module docstring)."""
    a = abs(x) * _RSQRT2
    s = a * a
    e = _exp_nonpositive(-s)
    small = a * _horner(_ERF_SMALL_DESC, s)
    mid = 1.0 - e * _horner(_ERFCX_MID_DESC, (2.0 * a - 5.5) * _INV_3_5)
    erf_a = small if a < 1.0 else (mid if a < 4.5 else 1.0)
    erf_x = erf_a if x >= 0 else -erf_a
    return 0.5 * (1.0 + erf_x), e


@nb.njit(cache=True, inline="always")
def _live(x):                                  # pragma: no cover (numba)
    """Whether ``x`` holds a nonzero."""
    nonzero = 0
    for i in range(x.size):
        nonzero += x[i] != 0
    return nonzero > 0


@nb.njit(cache=True, parallel=True, fastmath=_CONTRACT)
def _gelu_pass32(x, g, out, cotangent, threads):  # pragma: no cover (numba)
    """``out = GELU(x)``, or with ``cotangent`` ``out = g · GELU'(x)`` (``g`` unread
    without). The flag is tested outside the element loops, each loop its own: a choice
    inside one loop kept LLVM from vectorising it (scalar float64 code, 48 ms a pass on
    one thread at HGT's 3.2 M activations, AMD EPYC, AVX2). Share ``t`` of ``threads`` (the
    caller's numba thread count: read inside, it keeps numba from caching the kernel) takes
    the blocks ``t, t + threads, …``: HGT's live rows are one run of the stacked vertex set
    (its targets, 29 % of the rows), which a split into contiguous ranges gave to one
    thread."""
    n = x.size
    blocks = (n + _BLOCK - 1) // _BLOCK
    for t in nb.prange(threads):
        for b in range(t, blocks, threads):
            lo, hi = b * _BLOCK, min(n, (b + 1) * _BLOCK)
            _gelu_block(x[lo:hi], g[lo:hi], out[lo:hi], cotangent)


@nb.njit(cache=True, inline="always", fastmath=_CONTRACT)
def _gelu_block(x, g, out, cotangent):         # pragma: no cover (numba)
    """:func:`_gelu_pass32` on one block, given as views: their loops count from 0, so
    LLVM knows no index is negative and drops numba's wraparound of negative indices, which
    a loop over ``range(lo, hi)`` of the whole arrays keeps on every access (and runs
    2.5× slower: 3.3 against 1.3 ns an element on one thread, AMD EPYC Zen 5)."""
    live = _live(x)
    if live and cotangent:
        for i in range(x.size):
            v = np.float64(x[i])
            cdf, e = _phi_parts(v)
            out[i] = np.float64(g[i]) * (cdf + v * e * _RSQRT2PI)
    elif live:
        for i in range(x.size):
            v = np.float64(x[i])
            out[i] = v * _phi_parts(v)[0]
    elif cotangent:
        for i in range(x.size):
            out[i] = 0.5 * g[i]
    else:
        for i in range(x.size):
            out[i] = 0.0


@nb.njit(cache=True, parallel=True)
def _gelu64(x, out, threads):                  # pragma: no cover (numba)
    """float64 GELU by libm's ``erf``, the blocks round-robin as :func:`_gelu_pass32`'s."""
    blocks = (x.size + _BLOCK - 1) // _BLOCK
    for t in nb.prange(threads):
        for b in range(t, blocks, threads):
            for i in range(b * _BLOCK, min(x.size, (b + 1) * _BLOCK)):
                v = x[i]
                out[i] = 0.0 if v == 0 else 0.5 * v * (1.0 + math.erf(v * _RSQRT2))


@nb.njit(cache=True, parallel=True)
def _gelu_vjp64(x, g, out, threads):           # pragma: no cover (numba)
    """float64 ``g · GELU'(x)`` by libm's ``erf`` and ``exp``, the blocks round-robin."""
    blocks = (x.size + _BLOCK - 1) // _BLOCK
    for t in nb.prange(threads):
        for b in range(t, blocks, threads):
            for i in range(b * _BLOCK, min(x.size, (b + 1) * _BLOCK)):
                v = x[i]
                if v == 0:
                    out[i] = 0.5 * g[i]
                else:
                    out[i] = g[i] * (0.5 * (1.0 + math.erf(v * _RSQRT2))
                                     + v * math.exp(-0.5 * v * v) * _RSQRT2PI)


def _flat(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).reshape(-1)


def _output(x: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """``out`` flat (a C-contiguous array of ``x``'s shape and dtype: ``ValueError``
    otherwise), or a fresh flat array."""
    if out is None:
        return np.empty(x.size, x.dtype)
    if out.shape != x.shape or out.dtype != x.dtype or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous {x.dtype} array of shape {x.shape}, "
                         f"got {out.dtype} {out.shape}")
    return out.reshape(-1)


def gelu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """:math:`x\\,\\Phi(x)` of a float32 or float64 array: into ``out`` when given (a
    C-contiguous array of ``x``'s shape and dtype), else a fresh array of its shape."""
    flat = _flat(x)
    written = _output(x, out)
    if flat.dtype == np.float32:
        _gelu_pass32(flat, flat, written, False, nb.get_num_threads())
    else:
        _gelu64(flat, written, nb.get_num_threads())
    return written.reshape(x.shape)


def gelu_vjp(x: np.ndarray, g: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    r"""The cotangent :math:`\bar y\,(\Phi(x) + x\,\varphi(x))` of the input for the
    cotangent ``g`` of :func:`gelu`'s output (same shape and dtype as ``x``), in one pass:
    no derivative array; into ``out`` as :func:`gelu`."""
    flat, gf = _flat(x), _flat(g)
    written = _output(x, out)
    if flat.dtype == np.float32:
        _gelu_pass32(flat, gf, written, True, nb.get_num_threads())
    else:
        _gelu_vjp64(flat, gf, written, nb.get_num_threads())
    return written.reshape(x.shape)
