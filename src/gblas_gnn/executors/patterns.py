"""The CSR structure of a ``graphblas.Matrix``, read once and kept while the matrix lives:
shared by every executor that works on host or device CSR buffers (``cpu``, ``cuda``, and the
``dist`` executor's blocks).

The generated kernels of edge programs walk the pattern of ``A`` by rows (CSR) in the
forward and by columns (CSC) in the backward. Exporting the structure out of GraphBLAS and
sorting it by column costs far more than one kernel call, so an executor keeps one
:class:`CSRPattern` per adjacency matrix (the ``cuda`` executor moves it to the device once).
The caches are :class:`MatrixCache` objects, weakly keyed: an entry goes with its matrix.
A matrix is assumed not to change after its first use; edge tensors and the graphs of
:class:`~gblas_gnn.Graph` never do. :func:`csr_view` and :func:`csr_arrays` read a matrix's
CSR buffers (zero-copy for the duration of a block, or an exported copy).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import graphblas as gb
import numba as nb
import numpy as np
from graphblas import Matrix

__all__ = ["CHUNK_NNZ", "CSRPattern", "MatrixCache", "balanced_bounds", "csr_arrays",
           "csr_view", "index_dtype"]

#: stored entries per chunk of rows a kernel hands to one thread at a time
CHUNK_NNZ = 16_384


def index_dtype(bound: int) -> type[np.signedinteger]:
    """int32 indices when they fit (half the memory traffic of int64), else int64."""
    return np.int32 if bound < np.iinfo(np.int32).max else np.int64


def csr_arrays(S: Matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(indptr, indices, values)``: an exported copy of S's CSR form (int64 indices, sorted
    within rows, values expanded if S is iso); ``S`` is untouched."""
    d = S.ss.export("csr", give_ownership=False, sort=True)
    values = d["values"]
    if d["is_iso"]:
        values = np.full(d["col_indices"].shape[0], values.reshape(-1)[0], dtype=values.dtype)
    return (d["indptr"].astype(np.int64, copy=False),
            d["col_indices"].astype(np.int64, copy=False), values)


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
            self.indices = indices.astype(index_dtype(self.ncols))
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
        """``(colptr, perm, rows)``, built on first call (a stable sort by column: rows ascend
        within a column)."""
        if self._csc is None:
            colptr = np.zeros(self.ncols + 1, np.int64)
            np.cumsum(np.bincount(self.indices, minlength=self.ncols), out=colptr[1:])
            perm = np.empty(self.nnz, index_dtype(max(self.nnz, self.nrows)))
            rows = np.empty(self.nnz, index_dtype(self.nrows))
            _csc_scatter(self.indptr, self.indices, colptr, perm, rows)
            self._csc = (colptr, perm, rows)
        return self._csc


@nb.njit(cache=True)
def _csc_scatter(indptr, indices, colptr, perm, rows):
    """A counting sort of the CSR entries by column into ``perm`` and ``rows`` (CSR order
    kept within a column): the arrays' final int32 form is written directly, where
    ``np.argsort(indices, kind="stable")`` held an int64 permutation, its merge buffer and
    two int32 temporaries at once (about 16 bytes an entry on top of the result, at the
    first backward, when the forward's caches are all held; issue 21)."""
    nxt = colptr[:-1].copy()
    for i in range(indptr.shape[0] - 1):
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            q = nxt[j]
            perm[q] = p
            rows[q] = i
            nxt[j] = q + 1


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
