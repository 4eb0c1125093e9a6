"""Sparse structure on the device: patterns moved there once per graph, and edge tensors.

A :class:`DevicePattern` holds the CSR index arrays of one ``graphblas.Matrix`` on the device
(``indptr``, ``indices`` and the row of every entry, ``rows``) and, on first use, its CSC view
(``colptr``, ``perm``: the CSR position of each CSC slot, ``crow``: its row), so products
with the transpose and the backward column passes read the same edge values without a
transposed copy and without atomics. An :class:`EdgeTensor` is a pattern and one value per
edge (CSR order). The executor keeps one pattern, and the values, per matrix it has seen
(weakly keyed, :class:`~gblas_gnn.executors.patterns.MatrixCache`): a graph's adjacency
moves to the device on first use and stays there while the matrix lives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..executors.edges import EdgeTensorOnPattern
from ..executors.patterns import CSRPattern, index_dtype
from ._device import SPLIT_EDGES

__all__ = ["DevicePattern", "EdgeTensor", "SplitRows", "index_dtype"]


@dataclass(frozen=True)
class SplitRows:
    """The rows of a pattern view longer than :data:`~._device.SPLIT_EDGES` edges, cut into
    chunks of at most that many (device arrays): chunk ``q`` covers the view's positions
    ``lo[q]:hi[q]`` of row ``row_of[q]``; the chunks of heavy row ``rows[h]`` are
    ``first[h]:first[h + 1]``, in order."""

    rows: Any
    first: Any
    lo: Any
    hi: Any
    row_of: Any

    @property
    def chunks(self) -> int:
        return int(self.lo.shape[0])


def split_rows(ptr: np.ndarray, put: Callable[[np.ndarray, str], Any],
               limit: int = SPLIT_EDGES) -> SplitRows | None:
    """The chunks of the rows of ``ptr`` (a host CSR or CSC pointer array) that have more
    than ``limit`` edges, moved to the device; None when no row has."""
    ptr = np.asarray(ptr, dtype=np.int64)
    counts = np.diff(ptr)
    rows = np.flatnonzero(counts > limit)
    if rows.size == 0:
        return None
    per_row = -(-counts[rows] // limit)
    first = np.zeros(rows.size + 1, np.int64)
    np.cumsum(per_row, out=first[1:])
    owner = np.repeat(np.arange(rows.size), per_row)
    lo = ptr[rows][owner] + (np.arange(first[-1]) - first[owner]) * limit
    hi = np.minimum(lo + limit, ptr[rows + 1][owner])
    return SplitRows(*(put(a, "graph") for a in (rows, first, lo, hi, rows[owner])))


class DevicePattern:
    """CSR (and, lazily, CSC) index arrays of one pattern on the device.

    Args:
        host: the pattern's host buffers.
        put: ``put(array, reason)`` copies a host array to the device (and counts it).
    """

    def __init__(self, host: CSRPattern, put: Callable[[np.ndarray, str], Any]):
        self.nrows, self.ncols, self.nnz = int(host.nrows), int(host.ncols), int(host.nnz)
        self.index_dtype = index_dtype(max(self.nnz, self.nrows, self.ncols))
        itype = self.index_dtype
        self._put = put
        self.indptr = put(host.indptr.astype(np.int64), "graph")
        self.indices = put(host.indices.astype(itype), "graph")
        self.rows = put(host.rows().astype(itype), "graph")
        self.row_counts = put(host.row_counts.astype(np.int64), "graph")
        #: the rows too long for one group's SpMM fold, chunked (None: none is)
        self.split = split_rows(host.indptr, put)
        self._host: CSRPattern | None = host
        self._csc = None
        self._csc_split: SplitRows | None = None

    def csc(self):
        """``(colptr, perm, crow)`` on the device, built (on the host, once) at first use;
        the host pattern, which a graph may hold on, does not keep its host copy."""
        if self._csc is None:
            colptr, perm, rows = self._host.column_view()
            itype = self.index_dtype
            self._csc = (self._put(colptr.astype(np.int64), "graph"),
                         self._put(perm.astype(itype), "graph"),
                         self._put(rows.astype(itype), "graph"))
            self._csc_split = split_rows(colptr, self._put)
            self._host = None
        return self._csc

    def csc_split(self) -> SplitRows | None:
        """:attr:`split` of the CSC view (the columns too long for one group's fold)."""
        self.csc()
        return self._csc_split


class EdgeTensor(EdgeTensorOnPattern):
    """One value per stored edge of a :class:`DevicePattern`, in CSR order.

    Attributes:
        pattern: the pattern.
        values: a device array of shape ``(nnz,)``.
    """

    __slots__ = ("pattern", "values")

    def __init__(self, pattern: DevicePattern, values):
        if tuple(values.shape) != (pattern.nnz,):
            raise ValueError(f"need {pattern.nnz} edge values, got {tuple(values.shape)}")
        self.pattern, self.values = pattern, values

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.values.dtype)

    def __repr__(self) -> str:
        return (f"EdgeTensor({self.nrows}×{self.ncols}, {self.nvals} edges, "
                f"{self.dtype.name})")
