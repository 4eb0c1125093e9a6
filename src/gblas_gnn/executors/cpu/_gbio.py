"""GraphBLAS plumbing shared by the semiring lowerings (internal).

* dense ``H`` in: ``Matrix.ss.import_fullr`` (one copy; GraphBLAS must never own
  the caller's buffer);
* dense ``Z`` out: ``Matrix.ss.unpack("fullr")`` of a matrix we created (zero-copy);
* CSR buffers of ``S`` for the numba kernels: ``S.ss.unpack("csr")`` and a
  ``pack_csr(..., take_ownership=True)`` back in a ``finally`` (both hand over pointers, no copy)
  when ``S`` is stored as CSR, else an exported copy (:func:`csr_view`).
"""

from __future__ import annotations

import graphblas as gb
import numpy as np
from graphblas import Matrix

from ..patterns import csr_arrays, csr_view

__all__ = [
    "csr_arrays",
    "csr_view",
    "dense_in",
    "float_type",
    "full_out",
    "general_mxm",
    "gb_dtype",
    "inplace_mxm",
    "nonempty_rows",
    "vector_to_dense",
]


def gb_dtype(np_dtype: np.dtype) -> gb.dtypes.DataType:
    """The GraphBLAS type of a numpy float dtype (``FP32`` / ``FP64``)."""
    return gb.dtypes.lookup_dtype(np.dtype(np_dtype))


def float_type(np_dtype) -> str:
    """The name of the GraphBLAS float type an operation over ``np_dtype`` runs in: ``FP64``
    for float64, ``FP32`` for any other."""
    return "FP64" if np.dtype(np_dtype) == np.float64 else "FP32"


def vector_to_dense(v: gb.Vector, dtype) -> np.ndarray:
    """A ``graphblas.Vector`` as a dense ndarray, missing entries 0."""
    out = np.zeros(v.size, dtype=dtype)
    idx, vals = v.to_coo()
    out[idx] = vals
    return out


def dense_in(H: np.ndarray) -> Matrix:
    """``H`` (n, k), or (n,) as one column, as a full row-major GraphBLAS matrix (a copy;
    ``H`` stays the caller's)."""
    H = np.ascontiguousarray(H)
    return Matrix.ss.import_fullr(H.reshape(-1, 1) if H.ndim == 1 else H, take_ownership=False)


def full_out(Z: Matrix, dtype: np.dtype) -> np.ndarray:
    """Move a *full* matrix we own out to numpy without copying (handles iso-valued)."""
    info = Z.ss.unpack("fullr")
    values = info["values"]
    if info["is_iso"]:
        return np.full((Z.nrows, Z.ncols), values.reshape(-1)[0], dtype=dtype)
    return values.reshape(Z.nrows, Z.ncols)


def _operand(S: Matrix, transpose: bool):
    return S.T if transpose else S


def inplace_mxm(
    S: Matrix,
    H: np.ndarray,
    typed_semiring,
    typed_accum,
    identity,
    *,
    transpose: bool = False,
) -> np.ndarray:
    """``Z << identity; Z(accum=⊕) << op(S) ⊕.⊗ H`` into a full matrix (saxpy5 when factory).

    Rows of ``op(S)`` with no stored entry are set to 0 afterwards (they hold the
    ⊕-identity otherwise).  Returns a numpy array of ``H``'s dtype.
    """
    T = gb_dtype(H.dtype)
    m = S.ncols if transpose else S.nrows
    Hm = dense_in(H)
    Z = Matrix(T, m, H.shape[1])
    Z << H.dtype.type(identity)
    Z(accum=typed_accum) << _operand(S, transpose).mxm(Hm, typed_semiring)
    out = full_out(Z, H.dtype)
    if identity != 0:
        empty = ~nonempty_rows(S, transpose=transpose)
        if empty.any():
            if not out.flags.writeable:  # pragma: no cover (iso expansion is writeable)
                out = out.copy()
            out[empty] = 0
    return out


def general_mxm(S: Matrix, H: np.ndarray, typed_semiring, *, transpose: bool = False) -> Matrix:
    """The plain GraphBLAS form ``op(S).mxm(H, semiring).new()`` (a sparse-structured result)."""
    return _operand(S, transpose).mxm(dense_in(H), typed_semiring).new()


def nonempty_rows(S: Matrix, *, transpose: bool = False) -> np.ndarray:
    """Boolean mask of the rows of ``op(S)`` holding at least one stored entry."""
    counts = S.reduce_columnwise(gb.agg.count) if transpose else S.reduce_rowwise(gb.agg.count)
    idx, _ = counts.new().to_coo()
    mask = np.zeros(S.ncols if transpose else S.nrows, dtype=bool)
    mask[idx] = True
    return mask
