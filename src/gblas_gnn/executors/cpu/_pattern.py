"""Things derived from a ``graphblas.Matrix`` once and kept while the matrix lives.

The generated kernels of edge programs (:mod:`._program_kernels`) walk the pattern of ``A`` by rows
(CSR) in the forward and by columns (CSC) in the backward. Exporting the structure out of
GraphBLAS and sorting it by column costs far more than one kernel call, so the cpu executor
keeps one :class:`CSRPattern` per adjacency matrix. Products with a transpose ``Sᵀ H`` are
several times faster with ``Sᵀ`` stored than with SuiteSparse transposing inside every
product (n = 10⁵, 1.7 M edges, k = 32: 20 against 77 ms), so the executor keeps ``Sᵀ`` too.
Both caches are :class:`MatrixCache` objects, weakly keyed: an entry goes with its matrix.
A matrix is assumed not to change after its first use here; edge tensors and the graphs of
:class:`~gblas_gnn.Graph` never do.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import graphblas as gb
import numpy as np

from ._gbio import csr_arrays

__all__ = ["CSRPattern", "MatrixCache"]


def _index_dtype(bound: int):
    """int32 indices when they fit (half the memory traffic of int64), else int64."""
    return np.int32 if bound < np.iinfo(np.int32).max else np.int64


class CSRPattern:
    """Index buffers of one pattern: ``indptr``, ``indices`` (sorted within rows) and, on
    first use of :meth:`csc`, the column view ``(colptr, perm, rows)``: ``perm[q]`` is the
    CSR position of CSC slot ``q`` and ``rows[q]`` its row."""

    def __init__(self, A: gb.Matrix):
        self.nrows, self.ncols = A.nrows, A.ncols
        self.indptr, indices, _ = csr_arrays(A)
        self.indices = indices.astype(_index_dtype(self.ncols))
        self.nnz = int(self.indices.shape[0])
        self._csc = None

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
