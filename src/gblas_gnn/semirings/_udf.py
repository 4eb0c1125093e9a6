"""Compile a Python function of two floats into a GraphBLAS binary op (numba UDF).

``graphblas.binary.register_anonymous(func)`` (python-graphblas 2025.2.0) compiles
``func`` eagerly for every built-in type, complex ones included, and crashes (not a
``TypingError``) on functions such as ``max(x, y)`` that numba cannot lower for
complex numbers.  Semirings here only ever need FP32 and FP64, so we compile just
those two, with a numba ``cfunc`` wrapper that stores the result in the input type
(``x + 0.5 * y`` on float32 stays float32), and hand them to a python-graphblas
``BinaryOp`` (:func:`gblas_gnn._graphblas_adapter.new_binary_op` and
:func:`~gblas_gnn._graphblas_adapter.add_compiled_binary_op`, where the python-graphblas
internals this needs are kept) -- from there ``graphblas.monoid.register_anonymous`` and
``graphblas.semiring.register_anonymous`` build the monoid and the semiring as
for any UDF.
"""

from __future__ import annotations

from collections.abc import Callable

import graphblas as gb
import numba
from numba import types as nt

from .._graphblas_adapter import BinaryOp, add_compiled_binary_op, new_binary_op

__all__ = ["compile_binary"]

def _make_wrapper(jf):
    def wrapper(z, x, y):  # pragma: no cover (numba)
        z[0] = jf(x[0], y[0])

    return wrapper


def compile_binary(func: Callable[[float, float], float], name: str) -> BinaryOp:
    """A python-graphblas ``BinaryOp`` computing ``func`` for FP32 and FP64 operands.

    Raises
    ------
    TypeError
        if numba cannot compile ``func`` for float arguments.
    """
    jf = numba.njit(func)
    parent = new_binary_op(name, func, jf)
    for T in (gb.dtypes.FP32, gb.dtypes.FP64):
        ptr = nt.CPointer(T.numba_type)
        try:
            cf = numba.cfunc(nt.void(ptr, ptr, ptr), nopython=True)(_make_wrapper(jf))
        except Exception as exc:  # numba raises many error classes
            raise TypeError(
                f"cannot compile {func!r} to a GraphBLAS UDF for {T.name} with numba: {exc}"
            ) from exc
        add_compiled_binary_op(parent, cf, T, (T, T))
    return parent
