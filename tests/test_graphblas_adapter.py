"""The python-graphblas internals :mod:`gblas_gnn._graphblas_adapter` relies on, pinned.

Nothing else in gblas_gnn touches ``graphblas.core`` or a ``_``-prefixed member of a
graphblas object (the last test reads the sources to hold that).  Each test here asserts that
an internal the adapter uses still exists with the signature and behaviour it expects, so an
upgrade of python-graphblas that changes one fails here, with a message naming the adapter
function to fix, rather than somewhere deep in a semiring.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import graphblas as gb
import numba
import numpy as np
import pytest
from numba import types as nt

import gblas_gnn
from gblas_gnn import _graphblas_adapter as adapter

SRC = Path(gblas_gnn.__file__).resolve().parent


def _fix(function: str, what: str) -> str:
    return (f"python-graphblas {gb.__version__} changed {what}: "
            f"fix gblas_gnn._graphblas_adapter.{function}")


def _internal(module: str, name: str, function: str):
    """``module.name``, or a failure naming the adapter function that uses it."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        pytest.fail(_fix(function, f"{module}.{name} ({exc})"))


def _parameters(fn) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(fn).parameters)


def _matrix() -> gb.Matrix:
    return gb.Matrix.from_coo([0, 1], [1, 0], [1.0, 2.0], nrows=2, ncols=2)


# ---------------------------------------------------------------------- operator classes
def test_operator_classes():
    BinaryOp = _internal("graphblas.core.operator", "BinaryOp", "is_binary_op")
    Monoid = _internal("graphblas.core.operator", "Monoid", "is_monoid")
    TypedOpBase = _internal("graphblas.core.operator.base", "TypedOpBase", "untyped_op")
    assert isinstance(gb.binary.plus, BinaryOp), _fix("is_binary_op", "the class of gb.binary")
    assert isinstance(gb.monoid.plus, Monoid), _fix("is_monoid", "the class of gb.monoid")
    typed = gb.binary.plus["FP32"]
    assert isinstance(typed, TypedOpBase) and typed.parent is gb.binary.plus, \
        _fix("untyped_op", "what a typed operator is (TypedOpBase with .parent)")

    assert adapter.is_binary_op(gb.binary.plus) and not adapter.is_binary_op(gb.monoid.plus)
    assert adapter.is_monoid(gb.monoid.plus) and not adapter.is_monoid(gb.binary.plus)
    assert adapter.untyped_op(typed) is gb.binary.plus
    assert adapter.untyped_op(gb.monoid.max["FP64"]) is gb.monoid.max
    mask = _matrix().S                       # has a .parent too, but is no typed operator
    assert adapter.untyped_op(mask) is mask
    assert adapter.untyped_op("plus") == "plus"


# ---------------------------------------------------------------------- user binary ops
def test_binary_op_constructor():
    BinaryOp = _internal("graphblas.core.operator", "BinaryOp", "new_binary_op")
    params = _parameters(BinaryOp.__init__)
    assert list(params)[:3] == ["self", "name", "func"], \
        _fix("new_binary_op", f"BinaryOp.__init__'s positional parameters {list(params)}")
    for name in ("anonymous", "is_udt", "numba_func"):
        assert name in params and params[name].kind is inspect.Parameter.KEYWORD_ONLY, \
            _fix("new_binary_op", f"BinaryOp.__init__'s keyword {name!r}")

    def func(x, y):
        return x - y

    op = adapter.new_binary_op("test_adapter_new", func, numba.njit(func))
    assert op.name == "test_adapter_new" and op.orig_func is func
    assert op.types == {}, _fix("new_binary_op", "the constructor now compiles types")


def test_binary_op_registration_internals():
    BinaryOp = _internal("graphblas.core.operator", "BinaryOp", "add_compiled_binary_op")
    TypedUserBinaryOp = _internal("graphblas.core.operator.binary", "TypedUserBinaryOp",
                                  "add_compiled_binary_op")
    check_status_carg = _internal("graphblas.exceptions", "check_status_carg",
                                  "add_compiled_binary_op")
    ffi = _internal("graphblas.core", "ffi", "add_compiled_binary_op")
    lib = _internal("graphblas.core", "lib", "add_compiled_binary_op")

    add = _parameters(BinaryOp._add)
    assert list(add)[:2] == ["self", "op"] and "is_jit" in add \
        and add["is_jit"].kind is inspect.Parameter.KEYWORD_ONLY \
        and add["is_jit"].default is False, \
        _fix("add_compiled_binary_op", f"BinaryOp._add's signature {list(add)}")
    assert list(_parameters(TypedUserBinaryOp.__init__)) == \
        ["self", "parent", "name", "type_", "return_type", "gb_obj", "dtype2"], \
        _fix("add_compiled_binary_op", "TypedUserBinaryOp's constructor "
             f"{inspect.signature(TypedUserBinaryOp.__init__)}")
    assert list(_parameters(check_status_carg)) == ["response_code", "type_name", "carg"], \
        _fix("add_compiled_binary_op", "check_status_carg's signature")
    assert hasattr(lib, "GrB_BinaryOp_new") and ffi.new("GrB_BinaryOp*") is not None, \
        _fix("add_compiled_binary_op", "graphblas.core.ffi/lib")
    pair = gb.dtypes.register_anonymous(np.dtype([("a", np.float64), ("b", np.float64)]))
    for dtype in (gb.dtypes.FP32, gb.dtypes.FP64, pair):
        assert getattr(dtype, "_carg", None) is not None, \
            _fix("add_compiled_binary_op", f"DataType._carg (on {dtype.name})")


def _x_plus_two_y(z, x, y):  # pragma: no cover (numba)
    z[0] = x[0] + 2 * y[0]


def _cfunc(dtype):
    ptr = nt.CPointer(dtype.numba_type)
    return numba.cfunc(nt.void(ptr, ptr, ptr), nopython=True)(_x_plus_two_y)


def _run(op, dtype) -> np.ndarray:
    u = gb.Vector.from_dense(np.array([1.0, 2.0], dtype.np_type))
    v = gb.Vector.from_dense(np.array([10.0, 20.0], dtype.np_type))
    return u.ewise_mult(v, op).new().to_dense()


def test_a_compiled_binary_op_runs_and_keeps_its_type():
    def unused(x, y):  # the operator must run the cfunc, never this
        raise AssertionError("python-graphblas compiled the Python function")

    op = adapter.new_binary_op("test_adapter_x2y", unused, numba.njit(unused))
    for dtype in (gb.dtypes.FP32, gb.dtypes.FP64):
        adapter.add_compiled_binary_op(op, _cfunc(dtype), dtype, (dtype, dtype))
    for dtype in (gb.dtypes.FP32, gb.dtypes.FP64):
        assert op.types[dtype] == dtype, _fix("add_compiled_binary_op", "BinaryOp._add")
        got = _run(op, dtype)
        assert got.dtype == dtype.np_type, _fix("add_compiled_binary_op", "the output type")
        np.testing.assert_array_equal(got, [21.0, 42.0])
    with pytest.raises(ValueError, match="one operand type"):
        adapter.add_compiled_binary_op(op, _cfunc(gb.dtypes.FP64), gb.dtypes.FP64,
                                       (gb.dtypes.FP64, gb.dtypes.FP32))


def test_a_compiled_udt_binary_op_is_found_by_its_operand_types():
    def unused(x, y):  # pragma: no cover (must not run)
        raise AssertionError("python-graphblas compiled the Python function")

    op = gb.binary.register_anonymous(unused, "test_adapter_udt", is_udt=True)
    T = gb.dtypes.FP64
    adapter.add_compiled_binary_op(op, _cfunc(T), T, (T, T), udt=True)
    assert op[T].return_type == T, _fix("add_compiled_binary_op", "BinaryOp._add(is_jit=True)")
    np.testing.assert_array_equal(_run(op, T), [21.0, 42.0])


# ---------------------------------------------------------------------- types and views
def test_user_defined_types():
    DataType = _internal("graphblas.dtypes", "DataType", "is_user_defined_type")
    assert isinstance(inspect.getattr_static(DataType, "_is_udt", None), property), \
        _fix("is_user_defined_type", "DataType._is_udt")
    for name in ("BOOL", "INT8", "UINT64", "FP32", "FP64", "FC64"):
        assert not adapter.is_user_defined_type(getattr(gb.dtypes, name)), \
            _fix("is_user_defined_type", f"DataType._is_udt on {name}")
    for np_type in (np.dtype([("v", np.float32), ("w", np.float32)]), np.dtype(np.float16)):
        assert adapter.is_user_defined_type(gb.dtypes.register_anonymous(np_type)), \
            _fix("is_user_defined_type", f"DataType._is_udt on a UDT of {np_type}")


def test_matrix_expressions():
    classes = {
        "MatrixExpression": _internal("graphblas.core.matrix", "MatrixExpression",
                                      "is_matrix_expression"),
        "TransposedMatrix": _internal("graphblas.core.matrix", "TransposedMatrix",
                                      "is_transposed_matrix"),
        "MatrixEwiseMultExpr": _internal("graphblas.core.infix", "MatrixEwiseMultExpr",
                                         "is_matrix_expression"),
        "MatrixEwiseAddExpr": _internal("graphblas.core.infix", "MatrixEwiseAddExpr",
                                        "is_matrix_expression"),
    }
    A = _matrix()
    B = gb.Matrix.from_coo([0], [1], [True], nrows=2, ncols=2)  # infix & and | need BOOL
    for expression, name in ((A.apply(gb.unary.abs), "MatrixExpression"),
                             (A.ewise_mult(A), "MatrixExpression"),
                             (A.T, "TransposedMatrix"), (B & B, "MatrixEwiseMultExpr"),
                             (B | B, "MatrixEwiseAddExpr")):
        assert type(expression) is classes[name], \
            _fix("is_matrix_expression", f"the class of {name} ({type(expression).__name__})")
        assert adapter.is_matrix_expression(expression)
        assert isinstance(expression.new(), gb.Matrix)
    assert adapter.is_transposed_matrix(A.T) and not adapter.is_transposed_matrix(A)
    for other in (A, A @ A, A.S, gb.Vector.from_dense([1.0]).apply(gb.unary.abs)):
        assert not adapter.is_matrix_expression(other), type(other).__name__


def test_structural_masks():
    A = _matrix()
    mask_type = adapter.structural_mask_type()
    assert mask_type.__name__ == "StructuralMask" and type(A.S) is mask_type, \
        _fix("structural_mask_type", f"the class of A.S ({type(A.S).__name__})")
    assert A.S.parent is A, _fix("structural_mask_type", "StructuralMask.parent")
    assert adapter.is_structural_mask(A.S) and adapter.is_structural_mask(
        gb.Vector.from_dense([1.0]).S)
    for other in (A, ~A.S, A.V):
        assert not adapter.is_structural_mask(other), type(other).__name__


# ---------------------------------------------------------------------- the one place
def test_no_other_module_reads_graphblas_internals():
    """Only the adapter imports ``graphblas.core`` (or reads ``gb.core``) or reads
    ``_is_udt``, ``_carg`` or another object's ``_add``; nothing reads mpi4py's
    ``MPI._typedict`` (``MPI.Datatype.fromcode`` is the public way)."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "_graphblas_adapter.py" and path.parent == SRC:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "graphblas.core"):
                found.append(f"{path.relative_to(SRC)}:{node.lineno} from {node.module}")
            elif isinstance(node, ast.Import) and any(
                    a.name.startswith("graphblas.core") for a in node.names):
                found.append(f"{path.relative_to(SRC)}:{node.lineno} import graphblas.core")
            elif isinstance(node, ast.Attribute) and (
                    node.attr in ("_is_udt", "_carg", "_typedict")
                    or node.attr == "_add" and not (isinstance(node.value, ast.Name)
                                                    and node.value.id in ("self", "cls"))
                    or node.attr == "core" and isinstance(node.value, ast.Name)
                    and node.value.id in ("gb", "graphblas")):
                found.append(f"{path.relative_to(SRC)}:{node.lineno} .{node.attr}")
    assert not found, "graphblas/mpi4py internals outside gblas_gnn._graphblas_adapter:\n" + \
        "\n".join(found)
