"""GraphBLAS plumbing shared by the semiring lowerings (internal).

* dense ``H`` in: ``Matrix.ss.import_fullr`` (one copy; GraphBLAS must never own
  the caller's buffer);
* dense ``Z`` out: ``Matrix.ss.unpack("fullr")`` of a matrix we created (zero-copy);
* CSR buffers of ``S`` for the numba kernels: ``S.ss.unpack("csr")`` and a
  ``pack_csr(..., take_ownership=True)`` back in a ``finally`` (both ~0 ms, no copy)
  when ``S`` is stored as CSR, else an exported copy (:func:`csr_view`,
  :func:`csr_buffers`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import graphblas as gb
import numpy as np
from graphblas import Matrix

__all__ = [
    "csr_arrays",
    "csr_buffers",
    "csr_view",
    "dense_in",
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


def vector_to_dense(v: gb.Vector, dtype) -> np.ndarray:
    """A ``graphblas.Vector`` as a dense ndarray, missing entries 0."""
    out = np.zeros(v.size, dtype=dtype)
    idx, vals = v.to_coo()
    out[idx] = vals
    return out


def csr_arrays(S: Matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(indptr, indices, values)``: an exported copy of S's CSR form (int64 indices, sorted
    within rows, values expanded if S is iso); ``S`` is untouched."""
    d = S.ss.export("csr", give_ownership=False, sort=True)
    values = d["values"]
    if d["is_iso"]:
        values = np.full(d["col_indices"].shape[0], values.reshape(-1)[0], dtype=values.dtype)
    return (d["indptr"].astype(np.int64, copy=False),
            d["col_indices"].astype(np.int64, copy=False), values)


def dense_in(H: np.ndarray) -> Matrix:
    """``H`` as a full row-major GraphBLAS matrix (a copy; ``H`` stays the caller's)."""
    return Matrix.ss.import_fullr(H, take_ownership=False)


def full_out(Z: Matrix, dtype: np.dtype) -> np.ndarray:
    """Move a *full* matrix we own out to numpy without copying (handles iso-valued)."""
    info = Z.ss.unpack("fullr")
    values = info["values"]
    if info["is_iso"]:
        return np.full((Z.nrows, Z.ncols), values.reshape(-1)[0], dtype=dtype)
    return values.reshape(Z.nrows, Z.ncols)


@contextmanager
def csr_view(S: Matrix) -> Iterator[tuple]:
    """``(indptr, indices, values, is_iso)`` of ``S``'s CSR form for the duration of a block,
    column indices sorted within rows.

    A matrix stored as CSR is unpacked zero-copy (it is empty inside the block; a jumbled
    one is sorted first) and packed back in a ``finally``, so ``S`` must not be used by
    anything else meanwhile; any other storage format is exported from a copy (``S``
    untouched). Index arrays come back as ``int64`` views; an iso-valued ``S`` has a single
    value (``is_iso`` True).
    """
    in_place = S.ss.format == "csr"
    info = S.ss.unpack("csr", sort=True) if in_place else S.ss.export("csr", sort=True)
    try:
        yield (info["indptr"].view(np.int64), info["col_indices"].view(np.int64),
               info["values"], bool(info["is_iso"]))
    finally:
        if in_place:
            S.ss.pack_csr(
                indptr=info["indptr"],
                col_indices=info["col_indices"],
                values=info["values"],
                is_iso=info["is_iso"],
                sorted_cols=True,
                take_ownership=True,
            )


@contextmanager
def csr_buffers(S: Matrix, dtype: np.dtype | None = None) -> Iterator[tuple]:
    """CSR arrays ``(indptr, indices, values)`` of ``S`` for the duration of a block
    (:func:`csr_view`, the same rules), with the values of an iso-valued ``S`` expanded and
    cast to ``dtype`` when given (a copy only if it differs)."""
    with csr_view(S) as (indptr, indices, values, is_iso):
        if is_iso:
            fill = values.reshape(-1)[0] if values.size else 0
            values = np.full(indices.size, fill, dtype=values.dtype)
        if dtype is not None:
            values = values.astype(dtype, copy=False)
        yield indptr, indices, values


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
