r"""The closed set of elementwise functions a composition may use, each with its derivative.

One table serves the dense traced arrays, the lazy edge expressions and the kernel
generators: a function is a name and an optional constant ``a`` (a slope, an exponent), never
user code. For :math:`y = f(x)`:

============  ===============================  ======================================
name          :math:`f(x)`                     :math:`f'(x)`
============  ===============================  ======================================
neg           :math:`-x`                       :math:`-1`
exp           :math:`e^x`                      :math:`y`
log           :math:`\ln x`                    :math:`1/x`
relu          :math:`\max(x, 0)`               :math:`[x > 0]`
leaky_relu    :math:`x` if :math:`x>0` else    :math:`1` if :math:`x > 0` else :math:`a`
              :math:`a x`
elu           :math:`x` if :math:`x>0` else    :math:`1` if :math:`x > 0` else :math:`y + a`
              :math:`a(e^x - 1)`
tanh          :math:`\tanh x`                  :math:`1 - y^2`
sigmoid       :math:`1/(1 + e^{-x})`           :math:`y (1 - y)`
sqrt          :math:`\sqrt{x}`                 :math:`1 / (2 y)`
abs           :math:`|x|`                      :math:`\mathrm{sign}(x)`
pow           :math:`x^a`                      :math:`a x^{a-1}`
gelu          :math:`x \Phi(x)` (exact, erf)   :math:`\Phi(x) + x \varphi(x)`
softplus      :math:`\ln(1 + e^x)`             :math:`\sigma(x)`
============  ===============================  ======================================

Each row is one :class:`Unary` object: its forward and derivative on arrays (the reference
executor and the dense traced arrays) and its scalar code and derivative code (both kernel
generators), so a function added with :func:`register_unary` runs on every executor, forward
and backward, fused kernels included, with no other change (``ops.unary(name, x)`` applies
it).

Binary functions: ``add``, ``sub``, ``mul``, ``div``, ``maximum`` and ``minimum``; the
gradient of ``maximum(u, v)`` goes to ``u`` where ``u > v`` and to ``v`` elsewhere (ties to the
second operand, so ``maximum(x, eps)`` clamps with a zero gradient at the clamp), and likewise
for ``minimum`` with ``u < v``.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import gelu as gelu_kernels

__all__ = ["Unary", "UNARY", "BINARY", "unary", "binary_forward", "binary_vjp",
           "check_unary", "keeps_zero", "register_unary"]


@dataclass(frozen=True)
class Unary:
    """``forward(xp, x, a)`` and ``derivative(xp, x, y, a)`` (:math:`f'(x)` given
    :math:`y = f(x)`), both in the dtype of ``x``; ``code`` and ``code_derivative`` are the
    same for one scalar, as templates of the kernel generators (``{x}``, ``{y}``, ``{a}``,
    ``{one}``, ``{zero}``, ``{pick}``: ``max`` for a ≤ 1, else ``min``; ``math``
    functions and ``max`` / ``min`` only).

    A piecewise function whose pieces are cheap is written with ``max`` / ``min``, not as a
    conditional expression: LLVM compiles ``x if x > 0 else a * x`` to a branch on the sign
    of ``x``, which a random sign mispredicts half the time; ``max(x, a * x)`` compiles to
    a select and gives the same numbers. GATv2's row pass with edge features ran much faster
    that way (``docs/performance.md`` records the measurement)."""

    forward: Callable
    derivative: Callable
    needs_alpha: bool = False
    code: str = ""
    code_derivative: str = ""
    #: ``vjp(xp, x, y, g, a)``, the cotangent :math:`g\,f'(x)` in one step where a function
    #: has a faster way than the derivative's array times ``g`` (GELU's one numba pass);
    #: None: ``g * derivative(...)``
    vjp: Callable | None = None
    #: whether the kernels have the constant written into their code (a power's exponent:
    #: the compiler specialises ``x ** 2``), one kernel per value; else they read ``{a}``
    #: and ``{am1}`` (``a - 1``) at run time, and one kernel serves every value
    alpha_in_code: bool = False
    #: ``forward_into(xp, x, a, out)`` and ``vjp_into(xp, x, y, g, a, out)``: the same
    #: written into ``out`` (a C-contiguous array of ``x``'s shape and dtype), where a
    #: function has a way with no array of its own (GELU's passes); None: computed, then
    #: copied in
    forward_into: Callable | None = None
    vjp_into: Callable | None = None

    def apply(self, xp, x, a, out=None):
        """:math:`f(x)`, written into ``out`` when given (see :attr:`forward_into`)."""
        if out is None:
            return self.forward(xp, x, a)
        if self.forward_into is not None and self.forward_into(xp, x, a, out):
            return out
        out[...] = self.forward(xp, x, a)
        return out

    def cotangent(self, xp, x, y, g, a, out=None):
        r""":math:`g\,f'(x)` for the cotangent ``g`` of :math:`y = f(x)`, written into ``out``
        when given."""
        if out is not None and self.vjp_into is not None \
                and self.vjp_into(xp, x, y, g, a, out):
            return out
        dx = self.vjp(xp, x, y, g, a) if self.vjp is not None else \
            g * self.derivative(xp, x, y, a)
        if out is None:
            return dx
        out[...] = dx
        return out


def _t(x, value):
    """``value`` as a scalar of ``x``'s dtype (no float64 promotion of float32 work)."""
    return x.dtype.type(value)


def _erf(xp, x):
    """``erf(x)`` elementwise on the array module ``xp``: SciPy's, CuPy's on a GPU (the CUDA
    simulator's array module carries its own ``erf``)."""
    if xp is np:
        from scipy.special import erf
        return erf(x)
    erf = getattr(xp, "erf", None)
    if erf is None:                                 # pragma: no cover - needs a GPU
        from cupyx.scipy.special import erf
    return erf(x)


def _gelu(xp, x):
    r""":math:`x \Phi(x) = \tfrac{x}{2}(1 + \mathrm{erf}(x / \sqrt 2))` (PyTorch's exact
    GELU); one numba pass for a numpy float array (:mod:`.gelu`)."""
    if xp is np and x.dtype in (np.float32, np.float64):
        return gelu_kernels.gelu(x)
    return _t(x, 0.5) * x * (_t(x, 1) + _erf(xp, x * _t(x, np.sqrt(0.5))))


def _gelu_vjp(xp, x, g):
    r"""The cotangent :math:`\bar y\,(\Phi(x) + x \varphi(x))`: one numba pass for numpy
    float arrays of one dtype, no derivative array."""
    if xp is np and x.dtype in (np.float32, np.float64) and g.dtype == x.dtype \
            and g.shape == x.shape:
        return gelu_kernels.gelu_vjp(x, g)
    return g * _gelu_derivative(xp, x)


def _numba_gelu_operands(xp, out, *arrays) -> bool:
    """Whether GELU's numba passes take ``arrays`` and write ``out``: numpy float32 or
    float64, one dtype and shape, ``out`` C-contiguous."""
    return xp is np and out.dtype in (np.float32, np.float64) and out.flags.c_contiguous \
        and all(a.dtype == out.dtype and a.shape == out.shape for a in arrays)


def _gelu_into(xp, x, out) -> bool:
    """GELU of ``x`` written into ``out`` by the numba pass; False (nothing written) where
    it does not take them."""
    if not _numba_gelu_operands(xp, out, x):
        return False
    gelu_kernels.gelu(x, out=out)
    return True


def _gelu_vjp_into(xp, x, g, out) -> bool:
    """:func:`_gelu_vjp` written into ``out``, as :func:`_gelu_into`."""
    if not _numba_gelu_operands(xp, out, x, g):
        return False
    gelu_kernels.gelu_vjp(x, g, out=out)
    return True


def _gelu_derivative(xp, x):
    r""":math:`\Phi(x) + x \varphi(x)`; one numba pass for a numpy float array."""
    if xp is np and x.dtype in (np.float32, np.float64):
        return gelu_kernels.gelu_vjp(x, np.ones_like(x))
    phi = xp.exp(_t(x, -0.5) * x * x) * _t(x, 1 / np.sqrt(2 * np.pi))
    return _t(x, 0.5) * (_t(x, 1) + _erf(xp, x * _t(x, np.sqrt(0.5)))) + x * phi


UNARY: dict[str, Unary] = {
    "neg": Unary(lambda xp, x, a: -x, lambda xp, x, y, a: xp.full_like(x, -1),
                 code="(-{x})", code_derivative="(-{one})"),
    "exp": Unary(lambda xp, x, a: xp.exp(x), lambda xp, x, y, a: y,
                 code="math.exp({x})", code_derivative="{y}"),
    "log": Unary(lambda xp, x, a: xp.log(x), lambda xp, x, y, a: _t(x, 1) / x,
                 code="math.log({x})", code_derivative="({one} / {x})"),
    "relu": Unary(lambda xp, x, a: xp.maximum(x, _t(x, 0)),
                  lambda xp, x, y, a: (x > 0).astype(x.dtype),
                  code="max({x}, {zero})",
                  code_derivative="({one} if {x} > {zero} else {zero})"),
    "leaky_relu": Unary(lambda xp, x, a: xp.where(x > 0, x, x * _t(x, a)),
                        lambda xp, x, y, a: xp.where(x > 0, _t(x, 1), _t(x, a)), True,
                        code="{pick}({x}, {x} * {a})",
                        code_derivative="({one} if {x} > {zero} else {a})"),
    "elu": Unary(lambda xp, x, a: xp.where(x > 0, x, _t(x, a) * xp.expm1(xp.minimum(x, 0))),
                 lambda xp, x, y, a: xp.where(x > 0, _t(x, 1), y + _t(x, a)), True,
                 code="({x} if {x} > {zero} else {a} * math.expm1({x}))",
                 code_derivative="({one} if {x} > {zero} else {y} + {a})"),
    "tanh": Unary(lambda xp, x, a: xp.tanh(x), lambda xp, x, y, a: _t(x, 1) - y * y,
                  code="math.tanh({x})", code_derivative="({one} - {y} * {y})"),
    "sigmoid": Unary(lambda xp, x, a: _t(x, 1) / (_t(x, 1) + xp.exp(-x)),
                     lambda xp, x, y, a: y * (_t(x, 1) - y),
                     code="({one} / ({one} + math.exp(-{x})))",
                     code_derivative="({y} * ({one} - {y}))"),
    "sqrt": Unary(lambda xp, x, a: xp.sqrt(x), lambda xp, x, y, a: _t(x, 0.5) / y,
                  code="math.sqrt({x})", code_derivative="({half} / {y})"),
    "abs": Unary(lambda xp, x, a: xp.abs(x), lambda xp, x, y, a: xp.sign(x),
                 code="abs({x})",
                 code_derivative="({one} if {x} > {zero} else (-{one} if {x} < {zero} "
                                 "else {zero}))"),
    "pow": Unary(lambda xp, x, a: x ** _t(x, a),
                 lambda xp, x, y, a: _t(x, a) * x ** _t(x, a - 1), True,
                 code="({x} ** {a})", code_derivative="({a} * {x} ** {am1})",
                 alpha_in_code=True),
    "gelu": Unary(lambda xp, x, a: _gelu(xp, x), lambda xp, x, y, a: _gelu_derivative(xp, x),
                  vjp=lambda xp, x, y, g, a: _gelu_vjp(xp, x, g),
                  forward_into=lambda xp, x, a, out: _gelu_into(xp, x, out),
                  vjp_into=lambda xp, x, y, g, a, out: _gelu_vjp_into(xp, x, g, out),
                  code="({half} * {x} * ({one} + math.erf({x} * {rsqrt2})))",
                  code_derivative="({half} * ({one} + math.erf({x} * {rsqrt2})) + {x} * "
                                  "math.exp(-{half} * {x} * {x}) * {rsqrt2pi})"),
    # ln(1 + eˣ) as max(x, 0) + ln(1 + e^-|x|): no overflow; σ(x) as (1 + tanh(x/2)) / 2
    "softplus": Unary(lambda xp, x, a: xp.maximum(x, _t(x, 0)) + xp.log1p(xp.exp(-xp.abs(x))),
                      lambda xp, x, y, a: _t(x, 0.5) * (_t(x, 1) + xp.tanh(_t(x, 0.5) * x)),
                      code="(max({x}, {zero}) + math.log1p(math.exp(-abs({x}))))",
                      code_derivative="({half} * ({one} + math.tanh({half} * {x})))"),
}

#: the names a template may use (:meth:`gblas_gnn.codegen.scalar.EdgeCode` fills them in)
TEMPLATE_NAMES = ("x", "y", "a", "am1", "one", "zero", "half", "pick", "rsqrt2", "rsqrt2pi")


def register_unary(name: str, fn: Unary) -> Unary:
    """Add ``fn`` to the table under ``name``: from then on ``ops.unary(name, x)``, traced
    arrays, lazy edge expressions and the generated kernels of every executor apply it.

    Raises ``ValueError`` for a taken or invalid name (it becomes part of kernel keys) and
    for a template naming anything but :data:`TEMPLATE_NAMES`; ``TypeError`` for a ``fn``
    that is not a :class:`Unary` with callable forward and derivative."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"a function name must be an identifier, got {name!r}")
    if name in UNARY:
        raise ValueError(f"an elementwise function named {name!r} exists")
    if not (isinstance(fn, Unary) and callable(fn.forward) and callable(fn.derivative)):
        raise TypeError(f"expected a Unary with callable forward and derivative, got {fn!r}")
    for template in (fn.code, fn.code_derivative):
        used = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
        unknown = used - set(TEMPLATE_NAMES)
        if not template or unknown:
            raise ValueError(f"{name}: a code template must be given and use only "
                             f"{TEMPLATE_NAMES}, got {template!r}")
    UNARY[name] = fn
    return fn

@dataclass(frozen=True)
class Binary:
    """``out = u op v`` as one object: ``forward(xp, u, v)`` with numpy broadcasting;
    ``vjp(xp, u, v, out, g, need)`` the pair ``(ḡ_u, ḡ_v)`` before un-broadcasting, a side not
    in ``need`` None (not computed); ``code`` and ``code_vjp`` the same for one scalar, as
    templates of the kernel generators (``{a}``, ``{b}``, ``{out}``, ``{g}``, ``{zero}``).
    ``graphblas``: the executors' edge-wise name of the operation
    (:meth:`gblas_gnn.executors.Executor.ewise`), if it has one."""

    forward: Callable
    vjp: Callable
    code: str
    code_vjp: tuple[str, str]
    graphblas: str | None = None


def _pair(need, ga: Callable, gb: Callable) -> tuple:
    return ga() if need[0] else None, gb() if need[1] else None


def _div_vjp(xp, u, v, out, g, need):
    gu = g / v                              # ḡ_v = -ḡ_u · out reuses it
    return gu if need[0] else None, -gu * out if need[1] else None


def _select_vjp(win: Callable) -> Callable:
    """The vjp of ``maximum`` (``win = u > v``) or ``minimum`` (``u < v``): the cotangent goes
    to the winner, ties to the second operand."""
    def vjp(xp, u, v, out, g, need):
        w, zero = win(u, v), xp.zeros((), dtype=g.dtype)
        return _pair(need, lambda: xp.where(w, g, zero), lambda: xp.where(w, zero, g))
    return vjp


#: ``maximum`` / ``minimum`` have no branch in code (see :class:`Unary`); ties give ``b``
BINARY: dict[str, Binary] = {
    "add": Binary(lambda xp, u, v: u + v,
                  lambda xp, u, v, out, g, need: _pair(need, lambda: g, lambda: g),
                  "({a} + {b})", ("{g}", "{g}"), "plus"),
    "sub": Binary(lambda xp, u, v: u - v,
                  lambda xp, u, v, out, g, need: _pair(need, lambda: g, lambda: -g),
                  "({a} - {b})", ("{g}", "(-{g})"), "minus"),
    "mul": Binary(lambda xp, u, v: u * v,
                  lambda xp, u, v, out, g, need: _pair(need, lambda: g * v, lambda: g * u),
                  "({a} * {b})", ("{g} * {b}", "{g} * {a}"), "times"),
    "div": Binary(lambda xp, u, v: u / v, _div_vjp,
                  "({a} / {b})", ("{g} / {b}", "(-{g} * {out} / {b})"), "div"),
    "maximum": Binary(lambda xp, u, v: xp.maximum(u, v), _select_vjp(lambda u, v: u > v),
                      "max({b}, {a})",
                      ("({g} if {a} > {b} else {zero})", "({zero} if {a} > {b} else {g})")),
    "minimum": Binary(lambda xp, u, v: xp.minimum(u, v), _select_vjp(lambda u, v: u < v),
                      "min({b}, {a})",
                      ("({g} if {a} < {b} else {zero})", "({zero} if {a} < {b} else {g})")),
}

#: the executors' edge-wise operations (``plus``, ``minus``, ``times``, ``div``) by our names
BY_GRAPHBLAS_NAME = {b.graphblas: name for name, b in BINARY.items() if b.graphblas}


def check_unary(fn: str, alpha) -> float | None:
    """Validate a function name and its constant (``ValueError`` before any work)."""
    if fn not in UNARY:
        raise ValueError(f"unknown elementwise function {fn!r}; known: {sorted(UNARY)}")
    if not UNARY[fn].needs_alpha:
        return None
    if alpha is None or isinstance(alpha, bool) or not np.isfinite(float(alpha)):
        raise ValueError(f"{fn} needs a finite constant, got {alpha!r}")
    if fn in ("leaky_relu", "elu") and float(alpha) < 0:
        raise ValueError(f"the constant of {fn} must be ≥ 0, got {alpha}")
    return float(alpha)


def unary(xp, fn: str, x, alpha=None):
    """``f(x)`` of the table."""
    return UNARY[fn].forward(xp, x, alpha)


@functools.cache
def keeps_zero(fn: str, dtype, alpha=None) -> bool:
    """Whether :math:`f(0) = 0` for the function ``fn`` of the table (with ``alpha``) in
    ``dtype``: evaluated on a numpy zero once (a registered function answers too; a name is
    never registered twice)."""
    with np.errstate(all="ignore"):
        return bool(UNARY[fn].forward(np, np.zeros(1, np.dtype(dtype)), alpha)[0] == 0)


def binary(op: str) -> Binary:
    """The binary function ``op`` (``ValueError`` for an unknown name)."""
    found = BINARY.get(op)
    if found is None:
        raise ValueError(f"unknown binary function {op!r}; known: {tuple(BINARY)}")
    return found


def binary_forward(xp, op: str, u, v):
    """``u op v`` with numpy broadcasting."""
    return binary(op).forward(xp, u, v)


def binary_vjp(xp, op: str, u, v, out, g, need=(True, True)):
    """``(ḡ_u, ḡ_v)`` of ``out = u op v`` for the cotangent ``g`` (before un-broadcasting);
    a side not in ``need`` is None (not computed)."""
    return binary(op).vjp(xp, u, v, out, g, need)
