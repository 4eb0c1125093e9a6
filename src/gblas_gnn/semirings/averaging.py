"""The averaging semiring ``avg`` (paper §4.3): weighted-mean aggregation over pairs.

Carrier: pairs ``(v, w)`` = (value, weight).  ``⊗`` lifts an edge weight ``s``
and a feature ``h`` to a pair, ``⊕`` merges two pairs into their weighted mean:

.. math::

    s \\otimes h = (h, s), \\qquad
    (v_1, w_1) \\oplus (v_2, w_2) =
    \\Bigl(\\frac{w_1 v_1 + w_2 v_2}{w_1 + w_2},\\; w_1 + w_2\\Bigr),

with the conventions: a zero-weight operand returns the other pair unchanged
(so ``(0, 0)`` is an exact two-sided identity), ``0 ⊗ h = (0, 0)``, and a merge
whose weights cancel to 0 gives ``(0, 0)``.  The SpMM reads out the value
component, so

.. math::

    Z_{i,c} = \\frac{\\sum_j S_{i,j} H_{j,c}}{\\sum_j S_{i,j}}
    \\quad(\\text{a row with no stored entry, or only zero weights} \\to 0).

What holds (``tests/test_semirings_laws.py`` checks it): on pairs with
**positive** weights plus ``(0, 0)``, ``⊕`` is commutative (exactly, in floating
point), has identity ``(0, 0)`` (exactly), and is associative in exact arithmetic
(the mean form is isomorphic to ``(Σ w v, Σ w)`` with componentwise ``+``) -- in
floating point up to rounding.  Scaling the weights by ``c ≥ 0``,
``c·(v, w) = (v, c w)``, distributes over ``⊕``, is associative, has identity 1,
and ``0·p = (0, 0)`` annihilates; ``s ⊗ h = s·(h, 1)``.  With mixed-sign weights
associativity fails (a partial weight sum can vanish, so the result depends on
the merge order), hence :meth:`~gblas_gnn.semirings.Semiring.spmm` with ``avg``
rejects negative weights with a ``ValueError``.  ``⊗`` maps scalars to pairs, so
"⊗ associative" is the scaling-action law above; there is no ⊗ identity element
(``mul_identity`` is None) and the annihilator is the weight 0.

General form: a python-graphblas **user-defined type** (numpy record dtype
``[('v', T), ('w', T)]`` for ``T`` = float32 and float64, registered with
``graphblas.dtypes.register_anonymous``), ``⊕`` a user monoid with identity
``(0, 0)`` and ``⊗`` a user binary op ``T × T → pair``, combined with
``graphblas.semiring.register_anonymous``.  python-graphblas 2025.2.0 compiles
UDFs with numba and stores their *return value*; a numba function cannot return a
freshly built record safely (records are returned as pointers, cf.
python-graphblas issue #564), so the two operators are numba ``cfunc``\\s that
write the output record's fields through GraphBLAS's ``z`` pointer; they are
created with ``GrB_BinaryOp_new`` and attached to python-graphblas ``BinaryOp``
objects (``BinaryOp._add(..., is_jit=True)``, the hook python-graphblas uses for
externally compiled operators).  SuiteSparse runs a generic kernel for it.

Fast lowering: two factory ``plus_times`` products -- ``S @ H`` as saxpy5 in
place, and ``S @ 1`` as a row sum (``reduce_rowwise(plus)``) -- and a division.
``tests/test_semirings.py`` proves it equal to the general form.
"""

from __future__ import annotations

import graphblas as gb
import numba
import numpy as np
from graphblas import Matrix
from numba import types as nt

from . import _gbio
from .core import Semiring

__all__ = ["AVG", "PAIR32", "PAIR64", "add", "make_avg", "mul", "scale"]

PAIR32 = np.dtype([("v", np.float32), ("w", np.float32)])
PAIR64 = np.dtype([("v", np.float64), ("w", np.float64)])


# -- numpy scalar ops on pairs stored as (..., 2) arrays [value, weight] -------------
def add(p, q) -> np.ndarray:
    """``p ⊕ q`` for pairs given as arrays of shape ``(..., 2)`` = (value, weight)."""
    p = np.asarray(p)
    q = np.asarray(q)
    v1, w1, v2, w2 = p[..., 0], p[..., 1], q[..., 0], q[..., 1]
    w = w1 + w2
    with np.errstate(divide="ignore", invalid="ignore"):
        v = (w1 * v1 + w2 * v2) / w
    v = np.where(w == 0, 0, v)
    v = np.where(w2 == 0, v1, v)
    v = np.where(w1 == 0, v2, v)
    w = np.where(w2 == 0, w1, w)
    w = np.where(w1 == 0, w2, w)
    return np.stack([v, w], axis=-1).astype(np.result_type(p, q), copy=False)


def mul(s, h) -> np.ndarray:
    """``s ⊗ h = (h, s)`` (and ``0 ⊗ h = (0, 0)``) as an array of shape ``(..., 2)``."""
    s, h = np.broadcast_arrays(np.asarray(s), np.asarray(h))
    zero = s == 0
    return np.stack([np.where(zero, 0, h), np.where(zero, 0, s)], axis=-1).astype(
        np.result_type(s, h), copy=False
    )


def scale(c, p) -> np.ndarray:
    """The weight-scaling action ``c·(v, w) = (v, c w)``; ``0·p = (0, 0)``, ``s ⊗ h = s·(h, 1)``."""
    p = np.asarray(p)
    c = np.asarray(c)
    w = c * p[..., 1]
    v = np.where(w == 0, 0, p[..., 0])
    return np.stack([v, np.where(w == 0, 0, w)], axis=-1).astype(
        np.result_type(c, p), copy=False
    )


# -- the general form: UDT + cfunc operators -----------------------------------------
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


_KEEPALIVE: list = []  # the compiled cfuncs must outlive the GraphBLAS operators using them


def _build_gb():
    """Register the pair UDTs and the cfunc operators; return the GraphBLAS semiring."""
    from graphblas.core import ffi, lib
    from graphblas.core.operator.binary import BinaryOp, TypedUserBinaryOp
    from graphblas.exceptions import check_status_carg

    add_op = BinaryOp.register_anonymous(_no_udf, "avg_merge", is_udt=True)
    mul_op = BinaryOp.register_anonymous(_no_udf, "avg_lift", is_udt=True)
    for pair_np, name in ((PAIR32, "avg_pair32"), (PAIR64, "avg_pair64")):
        P = gb.dtypes.register_anonymous(pair_np, name)
        T = gb.dtypes.lookup_dtype(pair_np["v"])
        rec = numba.from_dtype(pair_np)
        ptr_p = nt.CPointer(rec)
        ptr_t = nt.CPointer(numba.from_dtype(pair_np["v"]))
        add_c = numba.cfunc(nt.void(ptr_p, ptr_p, ptr_p), cache=True)(_add_body)
        mul_c = numba.cfunc(nt.void(ptr_p, ptr_t, ptr_t), cache=True)(_mul_body)
        for parent, cf, (t1, t2) in ((add_op, add_c, (P, P)), (mul_op, mul_c, (T, T))):
            handle = ffi.new("GrB_BinaryOp*")
            check_status_carg(
                lib.GrB_BinaryOp_new(handle, cf.cffi, P._carg, t1._carg, t2._carg),
                "BinaryOp",
                handle[0],
            )
            typed = TypedUserBinaryOp(parent, parent.name, t1, P, handle[0], dtype2=t2)
            _KEEPALIVE.append(cf)
            parent._add(typed, is_jit=True)
    monoid = gb.monoid.register_anonymous(add_op, (0.0, 0.0), "avg_merge")
    return gb.semiring.register_anonymous(monoid, mul_op, "avg")


def _typed(H: np.ndarray):
    return AVG.gb_semiring[_gbio.gb_dtype(H.dtype)]


def _general(S: Matrix, H: np.ndarray, *, transpose: bool = False) -> np.ndarray:
    T = _gbio.gb_dtype(H.dtype)
    if S.dtype != T:
        S = S.dup(dtype=T)
    Z = _gbio.general_mxm(S, H, _typed(H), transpose=transpose)
    rows, cols, vals = Z.to_coo()
    out = np.zeros((Z.nrows, Z.ncols), dtype=H.dtype)
    out[rows, cols] = np.where(vals["w"] > 0, vals["v"], 0)
    return out


def _fast(S: Matrix, H: np.ndarray, *, transpose: bool = False) -> np.ndarray:
    # Z = (S @ H) / (S @ 1): saxpy5 in place + row sums (both factory kernels)
    T = _gbio.gb_dtype(H.dtype)
    num = _gbio.inplace_mxm(
        S, H, gb.semiring.plus_times[T], gb.binary.plus[T], 0, transpose=transpose
    )
    reduce = S.reduce_columnwise if transpose else S.reduce_rowwise
    den = reduce(gb.monoid.plus[T]).new().to_dense(fill_value=H.dtype.type(0), dtype=H.dtype)
    pos = den > 0
    np.divide(num, den[:, None], out=num, where=pos[:, None])
    if not pos.all():
        num[~pos] = 0
    return num


def make_avg() -> Semiring:
    """Build the ``avg`` :class:`~gblas_gnn.semirings.Semiring`."""
    return Semiring(
        name="avg",
        add=add,
        mul=mul,
        add_identity=(0.0, 0.0),
        mul_identity=None,
        annihilator=0.0,
        formula="Z[i,c] = sum_j S[i,j] H[j,c] / sum_j S[i,j]  (weights >= 0)",
        lowering="two factory plus_times products (saxpy5 S@H, row sum S@1) and a division",
        build_gb=_build_gb,
        fast=_fast,
        fast_t=lambda S, H: _fast(S, H, transpose=True),
        general=_general,
        general_t=lambda S, H: _general(S, H, transpose=True),
        nonnegative_weights=True,
    )


AVG = make_avg()
