"""Virtual n×m tensors: lazy expressions that are only ever evaluated under a sparse mask.

The paper's building blocks ``rep(x) = x 1ᵀ``, ``rep(x)ᵀ = 1 xᵀ`` and ``X Yᵀ`` are dense
n×n in the mathematics but must never be built (rule 1 of docs/design.md). Here they are leaves of
an expression tree; ``+ − × ÷``, scalars and unary functions (``exp``, ``relu``,
``leaky_relu``) build larger trees, and ``A * expr`` evaluates the tree *only on A's stored
entries*, lowered to masked GraphBLAS ops:

==========================  ==========================================
expression                  lowering on A's pattern
==========================  ==========================================
``rep(u) + rep(v).T``       masked outer-add (one dot3 ``min_plus``)
``factor(X) @ factor(Y).T`` masked SDDMM (dot3 ``plus_times``)
``rep(x) ⊛ E``              row scaling (``colscale``) of the edge tensor
``rep(x).T ⊛ E``            column scaling (``rowscale``) of the edge tensor
``E ⊛ F``                   edge-wise ``emult`` / ``eadd``
``f(E)``                    edge-wise ``apply``
==========================  ==========================================

``np.asarray(expr)`` materialises the dense tensor only for toy sizes
(at most :data:`MATERIALIZE_LIMIT` entries) and refuses otherwise.
"""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod

import graphblas as gb
import numpy as np

from ._validate import array_module_of, dense_matrix, dense_vector
from .executors import get_executor

MATERIALIZE_LIMIT = 1 << 20
"""Largest number of entries ``np.asarray(virtual)`` will build densely."""

_BIN = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}


class Virtual(ABC):
    """Base of the lazy expression tree. ``shape`` is (rows, cols)."""

    __array_priority__ = 1000
    shape: tuple[int, int]

    # -------------------------------------------------------------- algebra
    def _bin(self, other, op: str, swap: bool = False):
        other = _wrap(other)
        if other is NotImplemented:
            return NotImplemented
        left, right = (other, self) if swap else (self, other)
        return BinaryNode(op, left, right)

    def __add__(self, o):
        return self._bin(o, "+")

    def __radd__(self, o):
        return self._bin(o, "+", True)

    def __sub__(self, o):
        return self._bin(o, "-")

    def __rsub__(self, o):
        return self._bin(o, "-", True)

    def __mul__(self, o):
        if isinstance(o, gb.Matrix):
            return masked(o, self)
        return self._bin(o, "*")

    def __rmul__(self, o):
        if isinstance(o, gb.Matrix):
            return masked(o, self)
        return self._bin(o, "*", True)

    def __truediv__(self, o):
        return self._bin(o, "/")

    def __rtruediv__(self, o):
        return self._bin(o, "/", True)

    def __neg__(self):
        return UnaryNode("neg", self)

    # -------------------------------------------------------------- dense (toy sizes only)
    def __array__(self, dtype=None, copy=None):
        rows, cols = self.shape
        if rows * cols > MATERIALIZE_LIMIT:
            raise ValueError(
                f"refusing to materialise a {rows}×{cols} virtual tensor "
                f"(limit {MATERIALIZE_LIMIT} entries); multiply it by a sparse matrix "
                "(A * expr) to evaluate it on A's pattern")
        out = self._dense()
        return out if dtype is None else out.astype(dtype)

    @abstractmethod
    def _dense(self) -> np.ndarray:
        """The dense tensor (toy sizes only)."""

    @abstractmethod
    def _eval(self, A: gb.Matrix, ex):
        """Evaluate on A's pattern, returning an edge tensor (graphblas.Matrix)."""

    @property
    @abstractmethod
    def dtype(self) -> np.dtype | None:
        """dtype of the leaves (None for a bare scalar)."""


class Scalar(Virtual):
    """A constant broadcast over every entry (only appears inside an expression)."""

    def __init__(self, value: float):
        self.value = float(value)
        self.shape = (1, 1)

    def _dense(self):
        return np.asarray(self.value)

    def _eval(self, A, ex):
        raise TypeError("a bare scalar has no pattern; combine it with a virtual tensor")

    @property
    def dtype(self):
        return None


class Rep(Virtual):
    """``rep(x) = x 1ᵀ`` (``transposed=False``: entry [i, j] = x[i]) or its transpose."""

    def __init__(self, x: np.ndarray, ncols: int | None = None, transposed: bool = False):
        self.x = x
        self.ncols = x.shape[0] if ncols is None else ncols
        self.transposed = transposed
        self.shape = (self.ncols, x.shape[0]) if transposed else (x.shape[0], self.ncols)

    @property
    def T(self) -> Rep:
        return Rep(self.x, self.ncols, not self.transposed)

    @property
    def dtype(self):
        return self.x.dtype

    def _dense(self):
        return np.broadcast_to(self.x[None, :] if self.transposed else self.x[:, None],
                               self.shape).copy()

    def _eval(self, A, ex):
        ones = ex.pattern(A, 1.0, self.x.dtype)
        return (ex.col_scale if self.transposed else ex.row_scale)(ones, self.x, "times")


class Factor:
    """A dense n×k matrix usable in ``factor(X) @ factor(Y).T`` without a dense n×n result."""

    def __init__(self, X: np.ndarray, transposed: bool = False):
        self.X = X
        self.transposed = transposed

    @property
    def T(self) -> Factor:
        return Factor(self.X, not self.transposed)

    def __matmul__(self, other: Factor) -> Outer:
        if not isinstance(other, Factor) or self.transposed or not other.transposed:
            raise TypeError("only factor(X) @ factor(Y).T is a virtual tensor")
        if self.X.shape[1] != other.X.shape[1]:
            raise ValueError(f"inner dimensions differ: {self.X.shape} @ {other.X.shape}ᵀ")
        return Outer(self.X, other.X)


class Outer(Virtual):
    """``X Yᵀ`` (rows of X against rows of Y)."""

    def __init__(self, X: np.ndarray, Y: np.ndarray):
        self.X, self.Y = X, Y
        self.shape = (X.shape[0], Y.shape[0])

    @property
    def dtype(self):
        return self.X.dtype

    def _dense(self):
        return self.X @ self.Y.T

    def _eval(self, A, ex):
        return ex.sddmm(A, self.X, self.Y)


class UnaryNode(Virtual):
    """``f(expr)`` for f in exp, relu, leaky_relu (slope ``alpha``), neg."""

    def __init__(self, fn: str, arg: Virtual, alpha: float | None = None):
        self.fn, self.arg, self.alpha = fn, arg, alpha
        self.shape = arg.shape

    @property
    def dtype(self):
        return self.arg.dtype

    def _dense(self):
        x = self.arg._dense()
        if self.fn == "leaky_relu":
            return np.where(x > 0, x, self.alpha * x)
        if self.fn == "relu":
            return np.maximum(x, 0)
        return np.exp(x) if self.fn == "exp" else -x

    def _eval(self, A, ex):
        return ex.apply(self.arg._eval(A, ex), self.fn, self.alpha)


class BinaryNode(Virtual):
    """``left op right`` for op in ``+ − × ÷``; either side may be a scalar."""

    def __init__(self, op: str, left: Virtual, right: Virtual):
        if not isinstance(left, Scalar) and not isinstance(right, Scalar) \
                and left.shape != right.shape:
            raise ValueError(f"shapes differ: {left.shape} {op} {right.shape}")
        self.op, self.left, self.right = op, left, right
        self.shape = left.shape if not isinstance(left, Scalar) else right.shape

    @property
    def dtype(self):
        return self.left.dtype if self.left.dtype is not None else self.right.dtype

    def _dense(self):
        return _BIN[self.op](self.left._dense(), self.right._dense())

    def _eval(self, A, ex):
        l, r, op = self.left, self.right, self.op
        # rep(u) + rep(v)ᵀ: one masked outer-add instead of two scalings and an add
        if op == "+" and isinstance(l, Rep) and isinstance(r, Rep) \
                and l.transposed != r.transposed:
            u, v = (r.x, l.x) if l.transposed else (l.x, r.x)
            return ex.outer_add(A, u, v)
        if isinstance(r, Scalar):
            return _scalar_op(ex, l._eval(A, ex), op, r.value, scalar_right=True)
        if isinstance(l, Scalar):
            return _scalar_op(ex, r._eval(A, ex), op, l.value, scalar_right=False)
        # rep(x) ⊛ E and E ⊛ rep(x): row / column scaling of the other side
        if isinstance(r, Rep) and op in ("*", "/", "+", "-"):
            return _scale(ex, l._eval(A, ex), r, op)
        if isinstance(l, Rep) and op in ("*", "+"):
            return _scale(ex, r._eval(A, ex), l, op)
        return ex.ewise(l._eval(A, ex), r._eval(A, ex), _SCALE_OP[op])


_SCALE_OP = {"*": "times", "/": "div", "+": "plus", "-": "minus"}


def _scale(ex, E, rep: Rep, op: str):
    fn = ex.col_scale if rep.transposed else ex.row_scale
    return fn(E, rep.x, _SCALE_OP[op])


def _scalar_op(ex, E, op: str, value: float, scalar_right: bool):
    """``E op value`` (``value op E`` unless ``scalar_right``) entry by entry."""
    if op == "*":
        return ex.apply(E, "scale", value)
    if op == "+":
        return ex.apply(E, "add", value)
    if op == "-":
        return ex.apply(E, "add", -value) if scalar_right else \
            ex.apply(ex.apply(E, "neg"), "add", value)
    return ex.apply(E, "scale", 1.0 / value) if scalar_right else ex.apply(E, "rdiv", value)


def _wrap(x):
    if isinstance(x, Virtual):
        return x
    if isinstance(x, numbers.Real) and not isinstance(x, bool):
        return Scalar(x)
    return NotImplemented


# ---------------------------------------------------------------------- public constructors
def rep(x: np.ndarray, n: int | None = None) -> Rep:
    """``rep(x) = x 1ᵀ``: the virtual len(x)×n matrix whose row i is constant ``x[i]``.

    ``rep(x).T`` is ``1 xᵀ``. ``np.asarray(rep(x, n))`` materialises it for small sizes only.
    """
    x = dense_vector(x, "x", xp=array_module_of(x))
    if n is not None and (not isinstance(n, (int, np.integer)) or n < 0):
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    return Rep(x, n)


def factor(X: np.ndarray) -> Factor:
    """Wrap a dense n×k matrix so that ``factor(X) @ factor(Y).T`` is the virtual ``X Yᵀ``."""
    return Factor(dense_matrix(X, "X", xp=array_module_of(X)))


def masked(A, expr: Virtual, executor=None):
    """``A ⊙ expr`` evaluated only on A's stored entries (also spelled ``A * expr``), an edge
    tensor of the executor (a ``graphblas.Matrix`` on the cpu).

    ``A``'s values multiply the result (a 0/1 pattern leaves it unchanged).
    """
    from .ops import _dtype_of, as_sparse

    A = as_sparse(A, "A")
    if not isinstance(expr, Virtual) or isinstance(expr, Scalar):
        raise TypeError(f"expected a virtual tensor expression, got {type(expr).__name__}")
    if expr.shape != (A.nrows, A.ncols):
        raise ValueError(f"shape mismatch: A is {A.nrows}×{A.ncols}, expression {expr.shape}")
    if expr.dtype is not None and np.dtype(expr.dtype) != _dtype_of(A):
        raise TypeError(f"dtype mismatch: A is {_dtype_of(A)}, expression is {expr.dtype}")
    ex = get_executor(executor)
    return ex.ewise(A, expr._eval(A, ex), "times")


def _install_matrix_mul() -> None:
    """Let ``graphblas.Matrix * Virtual`` mean :func:`masked` (python-graphblas raises else)."""
    original = gb.Matrix.__mul__
    if getattr(original, "_gblas_gnn", False):
        return

    def __mul__(self, other):
        if isinstance(other, Virtual):
            return masked(self, other)
        return original(self, other)

    __mul__._gblas_gnn = True
    gb.Matrix.__mul__ = __mul__


_install_matrix_mul()
