"""Things derived from a ``graphblas.Matrix`` once and kept while the matrix lives.

The generated kernels of edge programs (:mod:`._program_kernels`) walk the pattern of ``A`` by rows
(CSR) in the forward and by columns (CSC) in the backward. Exporting the structure out of
GraphBLAS and sorting it by column costs far more than one kernel call, so the cpu executor
keeps one :class:`CSRPattern` per adjacency matrix. Products with a transpose ``Sᵀ H`` are
several times faster with ``Sᵀ`` stored than with SuiteSparse transposing inside every
product (n = 10⁵, 1.7 M edges, k = 32: 20 against 77 ms), so the executor keeps ``Sᵀ`` too:
as a GraphBLAS matrix for the semirings that run in GraphBLAS, and as the CSC buffers of
:class:`CSCOperand` for the ``plus_times`` kernel (:mod:`._spmm`), built by a counting sort
(20 ms at that size, against 30 ms for SuiteSparse's transpose and 176 ms for an argsort).
The caches are :class:`MatrixCache` objects, weakly keyed: an entry goes with its matrix.
A matrix is assumed not to change after its first use here; edge tensors and the graphs of
:class:`~gblas_gnn.Graph` never do.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import graphblas as gb
import numpy as np

from ._gbio import csr_view
from ._spmm_kernels import transpose_csr

__all__ = ["CHUNK_NNZ", "CSCOperand", "CSRPattern", "MatrixCache", "balanced_bounds"]

#: stored entries per chunk of rows a kernel hands to one thread at a time
CHUNK_NNZ = 16_384


def _index_dtype(bound: int):
    """int32 indices when they fit (half the memory traffic of int64), else int64."""
    return np.int32 if bound < np.iinfo(np.int32).max else np.int64


def balanced_bounds(indptr: np.ndarray, chunk_nnz: int = CHUNK_NNZ) -> np.ndarray:
    """Row boundaries ``b`` (int64, ``b[0] = 0``, ``b[-1] = nrows``) splitting a CSR pattern
    into chunks of fewer than ``chunk_nnz`` + (the longest row's) stored entries: a chunk
    starts at the row holding entry ``t·nnz/parts`` (a row is never split)."""
    nrows = indptr.shape[0] - 1
    nnz = int(indptr[-1]) if nrows > 0 else 0
    parts = max(1, min(nrows, -(-nnz // chunk_nnz)))
    starts = np.searchsorted(indptr, np.linspace(0, nnz, parts + 1)[1:-1], side="right") - 1
    return np.unique(np.concatenate(([0], starts, [max(nrows, 0)])).astype(np.int64))


class CSRPattern:
    """Index buffers of one pattern: ``indptr``, ``indices`` (sorted within rows) and, on
    first use of :meth:`csc`, the column view ``(colptr, perm, rows)``: ``perm[q]`` is the
    CSR position of CSC slot ``q`` and ``rows[q]`` its row."""

    def __init__(self, A: gb.Matrix):
        self.nrows, self.ncols = A.nrows, A.ncols
        # copies of the zero-copy view: no int64 export of the indices and values
        with csr_view(A) as (indptr, indices, _, _):
            self.indptr = indptr.copy()
            self.indices = indices.astype(_index_dtype(self.ncols))
        self.nnz = int(self.indices.shape[0])
        self._csc = None
        self._chunks = None

    @property
    def chunks(self) -> np.ndarray:
        """Row chunks of about :data:`CHUNK_NNZ` entries (:func:`balanced_bounds`)."""
        if self._chunks is None:
            self._chunks = balanced_bounds(self.indptr)
        return self._chunks

    @property
    def row_counts(self) -> np.ndarray:
        """Stored entries per row (int64, length ``nrows``)."""
        return np.diff(self.indptr)

    def rows(self) -> np.ndarray:
        """The row of every stored entry, CSR order (int64)."""
        return np.repeat(np.arange(self.nrows, dtype=np.int64), self.row_counts)

    def csc(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(colptr, perm, rows)``, built on first call (a stable sort by column)."""
        if self._csc is None:
            itype = _index_dtype(max(self.nnz, self.nrows))
            perm = np.argsort(self.indices, kind="stable").astype(itype)
            colptr = np.zeros(self.ncols + 1, np.int64)
            np.cumsum(np.bincount(self.indices, minlength=self.ncols), out=colptr[1:])
            rows = np.repeat(np.arange(self.nrows, dtype=_index_dtype(self.nrows)),
                             self.row_counts)[perm]
            self._csc = (colptr, perm, rows)
        return self._csc


class CSCOperand:
    """``Sᵀ`` as CSR buffers (the CSC form of ``S``) for the ``plus_times`` kernel: ``colptr``
    (int64), ``rows`` (int32 when they fit), the values in that order and the column chunks
    of :func:`balanced_bounds`. An iso-valued ``S`` (one value for every entry, e.g. a 0/1
    adjacency) keeps only that value. Values cast to another dtype are kept per dtype."""

    def __init__(self, S: gb.Matrix, pattern: CSRPattern):
        self.nrows, self.ncols, self.nnz = S.ncols, S.nrows, pattern.nnz
        self.colptr = np.zeros(S.ncols + 1, np.int64)
        self.rows = np.empty(pattern.nnz, _index_dtype(S.nrows))
        with csr_view(S) as (_, _, values, iso):
            values_t = np.empty(0 if iso else pattern.nnz, values.dtype)
            transpose_csr(pattern.indptr, pattern.indices, values, iso, self.colptr,
                          self.rows, values_t)
            if iso:
                values_t = values.reshape(-1)[:1].copy()
        self.iso = iso
        self.chunks = balanced_bounds(self.colptr)
        self._values = {values_t.dtype: values_t}

    def values(self, dtype) -> np.ndarray:
        """The values in CSC order as ``dtype`` (one value when :attr:`iso`)."""
        dtype = np.dtype(dtype)
        if dtype not in self._values:
            self._values[dtype] = next(iter(self._values.values())).astype(dtype)
        return self._values[dtype]


class MatrixCache:
    """``build(A)`` per live ``graphblas.Matrix`` (keyed by identity, dropped with it)."""

    def __init__(self, build: Callable[[gb.Matrix], object]):
        self._build = build
        self._entries: dict[int, tuple[weakref.ref, int, object]] = {}

    def get(self, A: gb.Matrix):
        key = id(A)
        hit = self._entries.get(key)
        if hit is not None and hit[0]() is A and hit[1] == A.nvals:
            return hit[2]
        value = self._build(A)
        entries = self._entries

        def forget(ref):        # only our own entry: the id may have been reused meanwhile
            if entries.get(key, (None,))[0] is ref:
                del entries[key]

        self._entries[key] = (weakref.ref(A, forget), A.nvals, value)
        return value
