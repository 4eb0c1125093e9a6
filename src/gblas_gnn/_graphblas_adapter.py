"""Every python-graphblas internal gblas_gnn relies on, in one place.

python-graphblas (pinned ``==2025.2.0`` in ``setup.cfg``) exposes matrices, operators and
their namespaces (``gb.binary``, ``gb.monoid``, ``gb.dtypes``) publicly, but not the few
things below.  Each is reached through one small function here whose docstring says why the
public API does not suffice, so that nothing else in the package touches
``graphblas.core`` or a ``_``-prefixed member of a graphblas object.
``tests/test_graphblas_adapter.py`` pins every internal used here: after an upgrade that
changes one, that test fails and names the function of this module to fix.

This module sits at the bottom of the package order (``tests/test_layering.py``): it imports
python-graphblas, numpy and the standard library only, never another gblas_gnn module.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import graphblas as gb
from graphblas.core.infix import MatrixEwiseAddExpr, MatrixEwiseMultExpr
from graphblas.core.matrix import MatrixExpression, TransposedMatrix
from graphblas.core.operator import BinaryOp, Monoid
from graphblas.core.operator.base import TypedOpBase
from graphblas.core.operator.binary import TypedUserBinaryOp
from graphblas.exceptions import check_status_carg

__all__ = ["BinaryOp", "Monoid", "add_compiled_binary_op", "is_binary_op",
           "is_matrix_expression", "is_monoid", "is_structural_mask", "is_transposed_matrix",
           "is_user_defined_type", "new_binary_op", "structural_mask_type", "untyped_op"]


# ---------------------------------------------------------------------- user binary ops
_KEEPALIVE: list = []  # compiled functions must outlive the GraphBLAS operators calling them


def new_binary_op(name: str, func: Callable, numba_func: Callable) -> BinaryOp:
    """An anonymous, non-UDT ``BinaryOp`` named ``name`` with no typed operator yet:
    :func:`add_compiled_binary_op` attaches one per operand type.

    Parameters
    ----------
    name : str
        the operator's name (it is not registered in ``gb.binary``).
    func : callable
        the Python function (``orig_func``: what pickling and ``repr`` use).
    numba_func : callable
        ``numba.njit(func)`` (what python-graphblas compiles UDT variants from).

    Why not public: ``gb.binary.register_anonymous(func)`` compiles ``func`` at once for
    every built-in type, complex ones included, and crashes (not a ``TypingError``) on
    functions such as ``max(x, y)`` that numba cannot lower for complex numbers; and it
    stores numba's inferred return type (``x + 0.5 * y`` on FP32 would return FP64).  The
    ``BinaryOp`` constructor with ``anonymous=True`` builds the operator without compiling
    anything.
    """
    return BinaryOp(name, func, anonymous=True, is_udt=False, numba_func=numba_func)


def add_compiled_binary_op(parent: BinaryOp, cfunc: Any, out_type: Any,
                           in_types: Sequence[Any], *, udt: bool = False) -> None:
    """Attach to ``parent`` the GraphBLAS operator ``z = f(x, y)`` compiled as ``cfunc``.

    Parameters
    ----------
    parent : BinaryOp
        from :func:`new_binary_op` (``udt=False``) or ``gb.binary.register_anonymous(...,
        is_udt=True)`` (``udt=True``).
    cfunc : numba ``CFunc``
        ``void f(z*, const x*, const y*)`` (anything whose ``.cffi`` is its cffi function
        pointer); it is kept alive here as long as the process runs, as GraphBLAS calls it
        through the pointer.
    out_type, in_types : graphblas DataType
        the type of ``z`` and of ``(x, y)``.
    udt : bool
        ``parent`` is a UDT operator: the typed operator is keyed by the pair ``in_types``
        (``_add(..., is_jit=True)``, python-graphblas's hook for externally compiled
        operators); else by ``in_types[0]`` and both must be equal.

    Raises
    ------
    ValueError
        ``udt=False`` with two different input types.
    graphblas.exceptions.GraphblasException
        if ``GrB_BinaryOp_new`` fails.

    Why not public: python-graphblas creates operators only by compiling a Python function
    with its own numba wrapper, which stores the function's *return value*; a numba
    function cannot return a freshly built record (a pair UDT) safely (python-graphblas
    issue #564), and the return type would be numba's, not ``out_type``.  Operators that
    write through the output pointer must be made with ``GrB_BinaryOp_new`` (``ffi``,
    ``lib``, ``check_status_carg``, the types' ``_carg``) and attached as
    ``TypedUserBinaryOp`` through ``BinaryOp._add``.
    """
    from graphblas.core import ffi, lib  # deferred, as python-graphblas loads them lazily

    t1, t2 = in_types
    if not udt and t1 != t2:
        raise ValueError(f"a non-UDT operator takes one operand type, got {t1} and {t2}")
    handle = ffi.new("GrB_BinaryOp*")
    check_status_carg(
        lib.GrB_BinaryOp_new(handle, cfunc.cffi, out_type._carg, t1._carg, t2._carg),
        "BinaryOp",
        handle[0],
    )
    _KEEPALIVE.append(cfunc)
    if udt:
        parent._add(TypedUserBinaryOp(parent, parent.name, t1, out_type, handle[0], dtype2=t2),
                    is_jit=True)
    else:
        parent._add(TypedUserBinaryOp(parent, parent.name, t1, out_type, handle[0]))


# ---------------------------------------------------------------------- operator classes
# ``BinaryOp`` and ``Monoid`` are re-exported for annotations; python-graphblas names its
# operator classes only under ``graphblas.core.operator``.

def is_binary_op(obj: Any) -> bool:
    """Whether ``obj`` is an untyped python-graphblas binary operator (``gb.binary.plus``,
    a registered or anonymous UDF).

    Why not public: the class ``BinaryOp`` is named only in ``graphblas.core.operator``;
    the public namespaces hold instances of it, not the class.
    """
    return isinstance(obj, BinaryOp)


def is_monoid(obj: Any) -> bool:
    """Whether ``obj`` is an untyped python-graphblas monoid (``gb.monoid.plus``, one from
    ``gb.monoid.register_anonymous``).

    Why not public: as for :func:`is_binary_op`, the class ``Monoid`` is named only in
    ``graphblas.core.operator``.
    """
    return isinstance(obj, Monoid)


def untyped_op(obj: Any) -> Any:
    """The operator a typed operator belongs to (``gb.binary.plus["FP32"]`` →
    ``gb.binary.plus``); anything else unchanged.

    Why not public: a typed operator is recognised by its base class ``TypedOpBase``
    (``graphblas.core.operator.base``); its ``parent`` attribute is public, but other
    python-graphblas objects (masks) have a ``parent`` too, so the attribute alone does not
    tell a typed operator.
    """
    return obj.parent if isinstance(obj, TypedOpBase) else obj


# ---------------------------------------------------------------------- types and views
def is_user_defined_type(dtype: Any) -> bool:
    """Whether the python-graphblas ``DataType`` ``dtype`` is a user-defined type (UDT).

    Why not public: python-graphblas has no public predicate (``DataType._is_udt``), and
    ``dtype.np_type.kind`` does not tell: a UDT may wrap a plain numeric numpy type that
    GraphBLAS has no built-in for (``gb.dtypes.register_anonymous(numpy.float16)`` is a UDT
    of kind ``"f"``).
    """
    return bool(dtype._is_udt)


def is_transposed_matrix(obj: Any) -> bool:
    """Whether ``obj`` is the lazy transpose ``A.T`` of a ``graphblas.Matrix`` (a
    ``TransposedMatrix``: not a ``Matrix``; ``obj.new()`` materialises it).

    Why not public: ``A.T`` is public but its class is named only in
    ``graphblas.core.matrix``.
    """
    return isinstance(obj, TransposedMatrix)


#: the lazy matrix expressions :func:`is_matrix_expression` accepts (exactly these classes)
_MATRIX_EXPRESSIONS = (MatrixExpression, TransposedMatrix, MatrixEwiseMultExpr,
                       MatrixEwiseAddExpr)


def is_matrix_expression(obj: Any) -> bool:
    """Whether ``obj`` is an unevaluated python-graphblas matrix expression that ``obj.new()``
    turns into a ``graphblas.Matrix``: a method call such as ``A.apply(op)``,
    ``A.ewise_mult(B)`` or ``A * 2.0`` (``MatrixExpression``), ``A.T``
    (``TransposedMatrix``), or the infix ``A & B`` / ``A | B`` (``MatrixEwiseMultExpr`` /
    ``MatrixEwiseAddExpr``).  The classes must match exactly; ``A @ B`` is not accepted.

    Why not public: python-graphblas names these classes only in ``graphblas.core.matrix``
    and ``graphblas.core.infix``, and ``hasattr(obj, "new")`` would also accept a vector
    expression, a mask (``A.S``) or ``A @ B``.
    """
    return type(obj) in _MATRIX_EXPRESSIONS and hasattr(obj, "new")


@functools.cache
def structural_mask_type() -> type:
    """The class of ``A.S`` (the structural mask of a ``graphblas.Matrix`` or ``Vector``;
    its public ``parent`` is ``A``).

    :mod:`gblas_gnn.virtual` patches this class's ``__mul__`` so that ``A.S * expr`` means
    the structural mask of ``expr``.

    Why not public: ``A.S`` is public but its class (``StructuralMask``) is named only in
    ``graphblas.core.mask``; it is found here from a one-entry matrix, so that the class
    patched is the one ``A.S`` returns.
    """
    return type(gb.Matrix(float, 1, 1).S)


def is_structural_mask(obj: Any) -> bool:
    """Whether ``obj`` is a graphblas structural mask ``A.S`` (see
    :func:`structural_mask_type`)."""
    return isinstance(obj, structural_mask_type())
