"""Compile a Python function of two floats into a GraphBLAS binary op (numba UDF).

``graphblas.binary.register_anonymous(func)`` (python-graphblas 2025.2.0) compiles
``func`` eagerly for every built-in type, complex ones included, and crashes (not a
``TypingError``) on functions such as ``max(x, y)`` that numba cannot lower for
complex numbers.  Semirings here only ever need FP32 and FP64, so we compile just
those two, with a numba ``cfunc`` wrapper that stores the result in the input type
(``x + 0.5 * y`` on float32 stays float32), and hand them to a python-graphblas
``BinaryOp`` -- from there ``graphblas.monoid.register_anonymous`` and
``graphblas.semiring.register_anonymous`` build the monoid and the semiring as
for any UDF.
"""

from __future__ import annotations

from collections.abc import Callable

import graphblas as gb
import numba
from numba import types as nt

__all__ = ["compile_binary"]

_KEEPALIVE: list = []  # compiled cfuncs must outlive the GraphBLAS operators using them


def _make_wrapper(jf):
    def wrapper(z, x, y):  # pragma: no cover (numba)
        z[0] = jf(x[0], y[0])

    return wrapper


def compile_binary(func: Callable[[float, float], float], name: str):
    """A python-graphblas ``BinaryOp`` computing ``func`` for FP32 and FP64 operands.

    Raises
    ------
    TypeError
        if numba cannot compile ``func`` for float arguments.
    """
    from graphblas.core import ffi, lib
    from graphblas.core.operator.binary import BinaryOp, TypedUserBinaryOp
    from graphblas.exceptions import check_status_carg

    jf = numba.njit(func)
    parent = BinaryOp(name, func, anonymous=True, is_udt=False, numba_func=jf)
    for T in (gb.dtypes.FP32, gb.dtypes.FP64):
        ptr = nt.CPointer(T.numba_type)
        try:
            cf = numba.cfunc(nt.void(ptr, ptr, ptr), nopython=True)(_make_wrapper(jf))
        except Exception as exc:  # numba raises many error classes
            raise TypeError(
                f"cannot compile {func!r} to a GraphBLAS UDF for {T.name} with numba: {exc}"
            ) from exc
        _KEEPALIVE.append(cf)
        handle = ffi.new("GrB_BinaryOp*")
        check_status_carg(
            lib.GrB_BinaryOp_new(handle, cf.cffi, T._carg, T._carg, T._carg),
            "BinaryOp",
            handle[0],
        )
        parent._add(TypedUserBinaryOp(parent, name, T, T, handle[0]))
    return parent
