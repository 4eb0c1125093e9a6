"""Semiring registry: ``get``, ``names`` and ``register`` for user semirings.

A user semiring is a ⊕ *monoid* and a ⊗ *binary op*.  Each may be given as a
python-graphblas object (``gb.monoid.max``, ``gb.binary.plus``, a typed op such as
``gb.binary.plus["FP32"]``, or the name of one, ``"max"``), or as a plain Python
function of two scalars, compiled with numba to an FP32/FP64 GraphBLAS UDF
(:func:`._udf.compile_binary`; a monoid additionally needs ``add_identity``).  The
monoid is built with ``graphblas.monoid.register_anonymous``.

Registration asks the ``cpu`` executor, the reference every other executor is tested
against, to prepare its lowering (a GraphBLAS semiring built from the two operators), so a
semiring it cannot run is refused at once rather than at first use.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import graphblas as gb
import numpy as np

from .._graphblas_adapter import BinaryOp, Monoid, is_binary_op, is_monoid, untyped_op
from ._udf import compile_binary
from .averaging import AVG
from .builtin import BUILTIN
from .core import Semiring, resolve_executor

__all__ = ["UnknownSemiringError", "get", "names", "register"]


class UnknownSemiringError(KeyError, ValueError):
    """An unknown semiring name (both a ``KeyError`` and a ``ValueError``)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


_REGISTRY: dict[str, Semiring] = {**BUILTIN, AVG.name: AVG}

# numpy equivalents of built-in GraphBLAS operators (for Semiring.add / .mul)
_NUMPY_OPS: dict[str, Callable] = {
    "plus": np.add,
    "times": np.multiply,
    "min": np.minimum,
    "max": np.maximum,
    "minus": np.subtract,
    "rminus": lambda a, b: np.subtract(b, a),
    "first": lambda a, b: np.broadcast_arrays(a, b)[0].copy(),
    "second": lambda a, b: np.broadcast_arrays(a, b)[1].copy(),
    "pair": lambda a, b: np.ones(np.broadcast(a, b).shape, np.result_type(a, b)),
    "oneb": lambda a, b: np.ones(np.broadcast(a, b).shape, np.result_type(a, b)),
    "div": np.divide,
    "rdiv": lambda a, b: np.divide(b, a),
}
# plain Python forms of the same operators (kernel compilers take these)
_PYTHON_OPS: dict[str, Callable] = {
    "plus": operator.add, "times": operator.mul, "min": min, "max": max,
    "minus": operator.sub, "rminus": lambda a, b: b - a, "first": lambda a, b: a,
    "second": lambda a, b: b, "div": operator.truediv, "rdiv": lambda a, b: b / a,
}


def names() -> list[str]:
    """Names of all registered semirings (shipped ones first, then user ones)."""
    return list(_REGISTRY)


def get(name: str | Semiring) -> Semiring:
    """Look up a semiring by name; a :class:`Semiring` instance is returned unchanged.

    Raises
    ------
    UnknownSemiringError
        (a ``KeyError`` and a ``ValueError``) for an unknown name, listing the known ones.
    TypeError
        if ``name`` is neither a string nor a Semiring.
    """
    if isinstance(name, Semiring):
        return name
    if not isinstance(name, str):
        raise TypeError(f"semiring must be a name or a Semiring, not {type(name).__name__}")
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownSemiringError(
            f"unknown semiring {name!r}; known semirings: {', '.join(names())}"
        ) from None


def _vectorise(func: Callable) -> Callable:
    vec = np.vectorize(func)

    def op(a, b):
        dtype = np.result_type(np.asarray(a), np.asarray(b))
        return np.asarray(vec(a, b)).astype(dtype, copy=False)

    op.__name__ = getattr(func, "__name__", "op")
    op.__doc__ = f"numpy vectorisation of {op.__name__}"
    return op


def _resolve_monoid(name: str, add_monoid: Any, add_identity: Any
                    ) -> tuple[Monoid, Callable, Any, Callable | None]:
    """(gb Monoid, numpy add, identity, Python add) from a monoid, binary op, name or
    function."""
    op = untyped_op(add_monoid)
    if isinstance(op, str):
        found = getattr(gb.monoid, op, None)
        if found is None:
            raise ValueError(f"add_monoid {op!r} is not a graphblas monoid name")
        op = found
    if is_binary_op(op):
        if op.monoid is not None and add_identity is None:
            op = op.monoid
        else:
            if add_identity is None:
                raise ValueError(f"add_identity is required to build a monoid from {op!r}")
            op = gb.monoid.register_anonymous(op, add_identity, f"{name}_add")
    elif is_monoid(op):
        own = op["FP64"].identity
        if add_identity is not None and not _same_value(add_identity, own):
            raise ValueError(
                f"add_identity {add_identity!r} differs from {op!r}'s identity {own!r}"
            )
    elif callable(op):
        if add_identity is None:
            raise ValueError("add_identity is required when add_monoid is a Python function")
        func = op
        binop = compile_binary(func, f"{name}_add")
        op = gb.monoid.register_anonymous(binop, add_identity, f"{name}_add")
        return op, _vectorise(func), add_identity, func
    else:
        raise TypeError(
            "add_monoid must be a graphblas Monoid/BinaryOp, its name, or a Python function; "
            f"got {type(add_monoid).__name__}"
        )
    if add_identity is None:
        add_identity = op["FP64"].identity
    return op, _numpy_of(op.binaryop), add_identity, _python_of(op.binaryop)


def _same_value(a: Any, b: Any) -> bool:
    return bool(np.array_equal(np.asarray(a, dtype=float), np.asarray(b, dtype=float)))


def _resolve_binary(name: str, mul_op: Any) -> tuple[BinaryOp, Callable, Callable | None]:
    """(gb BinaryOp, numpy mul, Python mul) from a binary op, monoid, name or function."""
    op = untyped_op(mul_op)
    if isinstance(op, str):
        found = getattr(gb.binary, op, None)
        if found is None:
            raise ValueError(f"mul_op {op!r} is not a graphblas binary op name")
        op = found
    if is_monoid(op):
        op = op.binaryop
    if is_binary_op(op):
        return op, _numpy_of(op), _python_of(op)
    if callable(op):
        return compile_binary(op, f"{name}_mul"), _vectorise(op), op
    raise TypeError(
        "mul_op must be a graphblas BinaryOp, its name, or a Python function; "
        f"got {type(mul_op).__name__}"
    )


def _numpy_of(op: BinaryOp) -> Callable:
    if op.name in _NUMPY_OPS:
        return _NUMPY_OPS[op.name]
    orig = getattr(op, "orig_func", None)
    if orig is not None:
        return _vectorise(orig)
    return _gb_elementwise(op)


def _python_of(op: BinaryOp) -> Callable | None:
    return _PYTHON_OPS.get(op.name) or getattr(op, "orig_func", None)


def _gb_elementwise(op: BinaryOp) -> Callable:
    """A numpy-callable scalar op evaluated by GraphBLAS itself (any built-in op)."""

    def fn(a, b):
        a, b = np.broadcast_arrays(np.asarray(a, dtype=float), np.asarray(b, dtype=float))
        va = gb.Vector.from_dense(a.ravel())
        vb = gb.Vector.from_dense(b.ravel())
        return va.ewise_mult(vb, op).new().to_dense(dtype=np.float64).reshape(a.shape)

    fn.__name__ = op.name
    return fn


def register(
    name: str,
    add_monoid: Any,
    mul_op: Any,
    *,
    add_identity: Any = None,
    mul_identity: Any = None,
    annihilator: Any = None,
    formula: str = "",
    mul_grad: tuple[Callable, Callable] | None = None,
) -> Semiring:
    """Register a user semiring ``(⊕, ⊗)`` under ``name`` and return it.

    .. math::

        Z_{i,c} = \\bigoplus_{j:(i,j)\\in S} S_{i,j} \\otimes H_{j,c}
        \\quad(\\text{empty row} \\to 0)

    Parameters
    ----------
    name : str
        New, unused name.
    add_monoid : graphblas Monoid | BinaryOp | str | callable
        ``⊕``.  A binary op or a Python function ``f(x, y)`` needs ``add_identity``
        (unless the op already has a built-in monoid).
    mul_op : graphblas BinaryOp | str | callable
        ``⊗``; a Python function ``g(x, y)`` is compiled to a numba UDF.
    add_identity, mul_identity, annihilator : scalar, optional
        Recorded on the Semiring (``add_identity`` also builds the monoid).
    formula : str, optional
        Human-readable description.
    mul_grad : (callable, callable), optional
        The partial derivatives ``(d_s, d_h)`` of ``s ⊗ h`` as functions of two arrays
        (arithmetic only, so they run on every executor; a number stands for a constant).
        With a ⊕ of plus, max or min, aggregating over the semiring then has a backward.

    Raises
    ------
    ValueError
        ``name`` empty or already registered; missing ``add_identity``; unknown op name.
    TypeError
        ``name`` not a string, or ops of an unsupported kind / not compilable.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, not {type(name).__name__}")
    if not name:
        raise ValueError("name must be a non-empty string")
    if name in _REGISTRY:
        raise ValueError(f"a semiring named {name!r} is already registered")
    monoid, np_add, add_identity, py_add = _resolve_monoid(name, add_monoid, add_identity)
    binop, np_mul, py_mul = _resolve_binary(name, mul_op)
    sr = Semiring(
        name=name,
        add=np_add,
        mul=np_mul,
        add_identity=add_identity,
        mul_identity=mul_identity,
        annihilator=annihilator,
        formula=formula or f"Z[i,c] = {monoid.name}_j {binop.name}(S[i,j], H[j,c])",
        add_op=monoid,
        mul_op=binop,
        scalar_add=py_add,
        scalar_mul=py_mul,
        mul_grad=_check_mul_grad(mul_grad),
    )
    resolve_executor("cpu").semiring_lowering(sr)   # refuses what the reference cannot run
    _REGISTRY[name] = sr
    return sr


def _check_mul_grad(mul_grad):
    if mul_grad is None:
        return None
    if not (isinstance(mul_grad, tuple) and len(mul_grad) == 2
            and all(callable(f) for f in mul_grad)):
        raise TypeError("mul_grad must be a pair of functions (d_s, d_h) of (s, h), got "
                        f"{mul_grad!r}")
    return mul_grad


def _unregister(name: str) -> None:
    """Remove a *user* semiring (for tests); shipped semirings cannot be removed."""
    if name in BUILTIN or name == AVG.name:
        raise ValueError(f"{name!r} is a shipped semiring")
    _REGISTRY.pop(name, None)
