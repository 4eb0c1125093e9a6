"""How the ``cpu`` executor runs each semiring: a GraphBLAS general form and a fast lowering.

==========  ==========================  ==========================  ==========================
name        ``spmm`` runs               ``spmm_t`` runs             general form runs
==========  ==========================  ==========================  ==========================
plus_times  numba CSR row kernel        the kernel on cached CSC    factory saxpy→dot
min_plus    numba CSR row kernel        the same kernel on Sᵀ       factory saxpy→dot
max_plus    numba CSR row kernel        the same kernel on Sᵀ       generic
max_times   numba CSR row kernel        the same kernel on Sᵀ       generic
min_times   numba CSR row kernel        the same kernel on Sᵀ       generic
avg         two plus_times, a division  the same on Sᵀ              generic, over a pair UDT
user        in place ``Z(accum=⊕) << S ⊕.⊗ H`` (saxpy5 for a factory pair, generic for UDFs)
==========  ==========================  ==========================  ==========================

(Kernels as reported by ``graphblas.ss.burble``.)  Why numba for ``min_plus`` although
SuiteSparse has a factory kernel for it: into a dense result the factory ``min_plus`` saxpy5
measured several times slower than the ``plus_times`` one, while the numba kernel runs close
to ``plus_times``.
``max_plus = −min_plus(−S, −H)`` would only move ``max_plus`` onto that same slow factory
kernel, so every min/max semiring uses the one kernel of :mod:`._minmax_kernels`.

The general forms (:func:`spmm_general`) are the references the fast lowerings are tested
against (``tests/test_semirings.py``).

**avg.** The general form is a python-graphblas *user-defined type* (numpy record dtype
``[('v', T), ('w', T)]`` for ``T`` = float32 and float64), ``⊕`` a user monoid with
identity ``(0, 0)`` and ``⊗`` a user binary op ``T × T → pair``. python-graphblas 2025.2.0
compiles UDFs with numba and stores their *return value*; a numba function cannot return a
freshly built record safely (records are returned as pointers, cf. python-graphblas issue
#564), so the two operators are numba ``cfunc``\\s that write the output record's fields
through GraphBLAS's ``z`` pointer; they are created with ``GrB_BinaryOp_new`` and attached
to python-graphblas ``BinaryOp`` objects by
:func:`gblas_gnn._graphblas_adapter.add_compiled_binary_op` (which says which
python-graphblas internals that takes).  The fast lowering is
``(S @ H) / (S @ 1)``: the ``plus_times`` kernel and a row sum (a factory kernel).
"""

from __future__ import annotations

import weakref

import graphblas as gb
import numba
import numpy as np
from numba import types as nt

from ..._graphblas_adapter import add_compiled_binary_op
from ...semirings import check_operands
from ...semirings.algebra import (
    MAX_PLUS,
    MAX_TIMES,
    MIN_PLUS,
    MIN_TIMES,
    PLUS_TIMES,
    WEIGHTED_MEAN,
)
from . import _gbio
from ._minmax_kernels import run_spmm_minmax
from ._spmm import check_features

__all__ = ["LOWERINGS", "PAIR32", "PAIR64", "gb_semiring", "inplace_lowering",
           "spmm_general"]

PAIR32 = np.dtype([("v", np.float32), ("w", np.float32)])
PAIR64 = np.dtype([("v", np.float64), ("w", np.float64)])


# ---------------------------------------------------------------------- general forms
_GB_FORMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def gb_semiring(sr):
    """The semiring as a python-graphblas semiring object (built once per semiring).

    Raises ``TypeError`` when the operators have no FP32 or FP64 form.
    """
    form = _GB_FORMS.get(sr)
    if form is None:
        if sr.algebra.weighted_mean:
            form = _build_avg()
        else:   # a built-in pair is python-graphblas's own object (factory kernels)
            form = getattr(gb.semiring, f"{sr.add_op.name}_{sr.mul_op.name}", None)
            if form is None or sr.add_op.binaryop is not form.monoid.binaryop \
                    or sr.mul_op is not form.binaryop:
                form = gb.semiring.register_anonymous(sr.add_op, sr.mul_op, sr.name)
        for t in ("FP32", "FP64"):
            if t not in form:
                raise TypeError(f"semiring {sr.name!r} has no {t} form "
                                "(⊗ must map floats to floats)")
        _GB_FORMS[sr] = form
    return form


def spmm_general(sr, S, H: np.ndarray, *, transpose: bool = False) -> np.ndarray:
    """``S ⊕ H`` (``Sᵀ ⊕ H``) through the plain GraphBLAS general form
    ``S.mxm(H, semiring).new()`` (validated first, empty rows 0): the reference path."""
    S, H = check_operands(S, H, transpose=transpose, nonnegative=sr.nonnegative_weights,
                          name=sr.name)
    m = S.ncols if transpose else S.nrows
    if S.nvals == 0 or m == 0 or H.shape[1] == 0:
        return np.zeros((m, H.shape[1]), dtype=H.dtype)
    T = _gbio.gb_dtype(H.dtype)
    if sr.algebra.weighted_mean:
        if S.dtype != T:
            S = S.dup(dtype=T)
        Z = _gbio.general_mxm(S, H, gb_semiring(sr)[T], transpose=transpose)
        rows, cols, vals = Z.to_coo()
        out = np.zeros((Z.nrows, Z.ncols), dtype=H.dtype)
        out[rows, cols] = np.where(vals["w"] > 0, vals["v"], 0)
        return out
    Z = _gbio.general_mxm(S, H, gb_semiring(sr)[T], transpose=transpose)
    return Z.to_dense(fill_value=H.dtype.type(0), dtype=H.dtype)


# ---------------------------------------------------------------------- fast lowerings
def _plus_times(ex, sr):
    # the numba kernel of ._spmm over S's cached CSR indices, or the CSC buffers of Sᵀ
    return ex.spmm_plus_times, lambda S, H: ex.spmm_plus_times(S, H, transpose=True)


def _minmax(ex, sr):
    """``(min|max, +|×)`` through the numba CSR row kernel over the executor's cached int32
    pattern of ``S`` (or of the cached ``Sᵀ``), its values read in place."""
    is_max, is_times = sr.algebra.maximises, not sr.algebra.tropical

    def run(S, H):
        pattern = ex.csr_pattern(S)
        H = check_features(H, pattern.ncols, f"{sr.name} product")
        with _gbio.csr_view(S) as (_, _, values, iso):
            return run_spmm_minmax(pattern, values, iso, H, is_max=is_max, is_times=is_times)

    return run, lambda S, H: run(ex.transposed(S), H)


def _avg(ex, sr):
    # Z = (S @ H) / (S @ 1): the plus_times kernel + row sums (a factory kernel)
    def run(S, H):
        num = ex.spmm_plus_times(S, H)
        den = _gbio.vector_to_dense(S.reduce_rowwise(gb.monoid.plus[_gbio.gb_dtype(H.dtype)])
                                    .new(), H.dtype)
        pos = den > 0
        np.divide(num, den[:, None], out=num, where=pos[:, None])
        if not pos.all():
            num[~pos] = 0
        return num

    return run, lambda S, H: run(ex.transposed(S), H)


def inplace_lowering(ex, sr):
    """Any semiring through ``Z << e; Z(accum=⊕) << S ⊕.⊗ H`` into a full matrix (saxpy5 when
    the pair is a factory one, a generic kernel for UDFs), empty rows set to 0."""
    form = gb_semiring(sr)

    def run(S, H):
        typed = form[_gbio.gb_dtype(H.dtype)]
        return _gbio.inplace_mxm(S, H, typed, typed.monoid.binaryop, typed.monoid.identity)

    return run, lambda S, H: run(ex.transposed(S), H)


#: the hand-written lowerings by what ⊕ and ⊗ are (any semiring with them, whatever its name)
LOWERINGS = {PLUS_TIMES: _plus_times, MIN_PLUS: _minmax, MAX_PLUS: _minmax,
             MAX_TIMES: _minmax, MIN_TIMES: _minmax, WEIGHTED_MEAN: _avg}


# ---------------------------------------------------------------------- avg: pair UDT
@numba.njit(inline="always", cache=True)
def _merge(v1, w1, v2, w2):  # pragma: no cover (numba)
    if w1 == 0:
        return v2, w2
    if w2 == 0:
        return v1, w1
    w = w1 + w2
    if w == 0:
        return v1 * 0, w
    return (w1 * v1 + w2 * v2) / w, w


def _add_body(z_ptr, x_ptr, y_ptr):  # pragma: no cover (numba)
    # z may alias x or y: read both inputs before writing
    z = numba.carray(z_ptr, 1)
    x = numba.carray(x_ptr, 1)
    y = numba.carray(y_ptr, 1)
    v, w = _merge(x[0].v, x[0].w, y[0].v, y[0].w)
    z[0].v = v
    z[0].w = w


def _mul_body(z_ptr, s_ptr, h_ptr):  # pragma: no cover (numba)
    z = numba.carray(z_ptr, 1)
    s = s_ptr[0]
    h = h_ptr[0]
    if s == 0:
        z[0].v = 0
        z[0].w = 0
    else:
        z[0].v = h
        z[0].w = s


def _no_udf(x, y):  # pragma: no cover (only reached for unsupported operand types)
    raise TypeError("avg operators exist only for (FP32, FP32) and (FP64, FP64) operands")


def _build_avg():
    """Register the pair UDTs and the cfunc operators; return the GraphBLAS semiring."""
    add_op = gb.binary.register_anonymous(_no_udf, "avg_merge", is_udt=True)
    mul_op = gb.binary.register_anonymous(_no_udf, "avg_lift", is_udt=True)
    for pair_np, name in ((PAIR32, "avg_pair32"), (PAIR64, "avg_pair64")):
        P = gb.dtypes.register_anonymous(pair_np, name)
        T = gb.dtypes.lookup_dtype(pair_np["v"])
        rec = numba.from_dtype(pair_np)
        ptr_p = nt.CPointer(rec)
        ptr_t = nt.CPointer(numba.from_dtype(pair_np["v"]))
        add_c = numba.cfunc(nt.void(ptr_p, ptr_p, ptr_p), cache=True)(_add_body)
        mul_c = numba.cfunc(nt.void(ptr_p, ptr_t, ptr_t), cache=True)(_mul_body)
        for parent, cf, in_types in ((add_op, add_c, (P, P)), (mul_op, mul_c, (T, T))):
            add_compiled_binary_op(parent, cf, P, in_types, udt=True)
    monoid = gb.monoid.register_anonymous(add_op, (0.0, 0.0), "avg_merge")
    return gb.semiring.register_anonymous(monoid, mul_op, "avg")
