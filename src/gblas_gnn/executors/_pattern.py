"""CSR / CSC index buffers of an adjacency pattern, built once and shared by fused kernels.

The fused attention kernels (:mod:`._attention_kernels`) walk the pattern of ``A`` by rows
(CSR) in the forward and by columns (CSC) in the backward. Exporting the structure out of
GraphBLAS and sorting it by column costs far more than one kernel call, so the cpu executor
keeps one :class:`CSRPattern` per adjacency matrix (weakly keyed: it goes with the matrix).
A pattern is assumed not to change after its first use by a fused kernel; the graphs of
:class:`~gblas_gnn.Graph` never do.
"""

from __future__ import annotations

import weakref

import graphblas as gb
import numpy as np

__all__ = ["CSRPattern", "PatternCache"]


def _index_dtype(bound: int):
    """int32 indices when they fit (half the memory traffic of int64), else int64."""
    return np.int32 if bound < np.iinfo(np.int32).max else np.int64


class CSRPattern:
    """Index buffers of one pattern: ``indptr``, ``indices`` (sorted within rows) and, on
    first use of :meth:`csc`, the column view ``(colptr, perm, rows)``: ``perm[q]`` is the
    CSR position of CSC slot ``q`` and ``rows[q]`` its row."""

    def __init__(self, A: gb.Matrix):
        d = A.ss.export("csr", give_ownership=False, sort=True)
        self.nrows, self.ncols = A.nrows, A.ncols
        self.indptr = d["indptr"].astype(np.int64, copy=False)
        self.indices = d["col_indices"].astype(_index_dtype(self.ncols))
        self.nnz = int(self.indices.shape[0])
        self._csc = None

    @property
    def row_counts(self) -> np.ndarray:
        """Stored entries per row (int64, length ``nrows``)."""
        return np.diff(self.indptr)

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


class PatternCache:
    """``CSRPattern`` per live ``graphblas.Matrix`` (keyed by identity, dropped with it)."""

    def __init__(self):
        self._entries: dict[int, tuple[weakref.ref, CSRPattern]] = {}

    def get(self, A: gb.Matrix) -> CSRPattern:
        key = id(A)
        hit = self._entries.get(key)
        if hit is not None and hit[0]() is A and hit[1].nnz == A.nvals:
            return hit[1]
        pattern = CSRPattern(A)
        entries = self._entries
        self._entries[key] = (weakref.ref(A, lambda _ref: entries.pop(key, None)), pattern)
        return pattern
