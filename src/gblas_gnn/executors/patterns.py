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

A pattern need not come from a matrix: :meth:`CSRPattern.with_diagonal` builds the pattern of
``A + I`` straight from A's buffers, and an :class:`AdjacencyPattern` is the edge tensor of
such a pattern whose ``graphblas.Matrix`` is built only when something asks for it (the
graph :meth:`gblas_gnn.Graph.with_self_loops` returns: SuiteSparse stores int64 indices, so a
matrix of ``A + I`` beside the int32 pattern cost 8.5 bytes an entry that the layers never
read; issue 21). :func:`csr_of` gives the pattern of either kind of edge tensor.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import graphblas as gb
import numba as nb
import numpy as np
from graphblas import Matrix
from numpy.typing import DTypeLike

from .edges import EdgeTensorOnPattern

__all__ = ["CHUNK_NNZ", "TILE_MISSES_PER_PASS", "AdjacencyPattern", "CSRPattern",
           "ColumnTiles", "MatrixCache",
           "balanced_bounds", "csr_arrays", "csr_of", "csr_view", "graphblas_of", "index_dtype",
           "unsigned_view"]

#: stored entries per chunk of rows a kernel hands to one thread at a time
CHUNK_NNZ = 16_384
#: gathers missing the cache (per row) that one more pass over the output rows costs, in
#: the rule of :meth:`ColumnTiles.if_they_pay`
TILE_MISSES_PER_PASS = 0.5


def index_dtype(bound: int) -> type[np.signedinteger]:
    """int32 indices when they fit (half the memory traffic of int64), else int64."""
    return np.int32 if bound < np.iinfo(np.int32).max else np.int64


def unsigned_view(indices: np.ndarray) -> np.ndarray:
    """The same nonnegative index buffer read as unsigned integers of its width (a view, no
    copy). A numba kernel indexing with an unsigned integer skips the wraparound of a
    negative index (a sign test and a conditional add on every access), which made the plain
    aggregation markedly faster (``docs/performance.md``, the aggregation path)."""
    if indices.dtype.kind == "u":
        return indices
    if indices.dtype.kind != "i":
        raise TypeError(f"index buffers are integers, got {indices.dtype}")
    return indices.view(np.dtype(f"u{indices.dtype.itemsize}"))


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


class ColumnTiles:
    r"""A CSR pattern (``indptr``, ``indices`` sorted within rows) split into column tiles of
    ``width`` columns, without moving an entry: tile ``b`` holds the columns
    :math:`[b w, (b + 1) w)` and, since a row's columns ascend, its entries in row ``i`` are
    the contiguous positions

    .. math:: \mathrm{indptr}[i] + o_{b,i} \le p < \mathrm{indptr}[i] + o_{b+1,i},
        \qquad o_{b,i} = |\{p \in \mathrm{row}\ i : \mathrm{idx}[p] < b w\}|

    (``offsets`` (T + 1, nrows), unsigned, :math:`o_{0,i} = 0`, :math:`o_{T,i}` the row's
    length): the indices and values stay where they are, so a weighted matrix needs no
    permuted copy of its values. ``chunks``: row chunks of about :data:`CHUNK_NNZ` entries
    per tile (:func:`balanced_bounds` of ``T·CHUNK_NNZ``)."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, ncols: int, width: int):
        if width < 1:
            raise ValueError(f"a tile is at least one column wide, got {width}")
        self.width = int(width)
        tiles = max(1, -(-int(ncols) // self.width))
        nrows = indptr.shape[0] - 1
        longest = int(np.max(np.diff(indptr))) if nrows > 0 else 0
        self.offsets = np.empty((tiles + 1, nrows), np.uint32 if longest < 2**32
                                else np.uint64)
        _tile_offsets(unsigned_view(indptr), unsigned_view(indices), np.uint64(self.width),
                      self.offsets)
        self.chunks = balanced_bounds(indptr, CHUNK_NNZ * tiles)

    @property
    def count(self) -> int:
        """The number of tiles ``T``."""
        return self.offsets.shape[0] - 1

    @classmethod
    def if_they_pay(cls, indptr: np.ndarray, indices: np.ndarray, ncols: int,
                    width: int) -> ColumnTiles | None:
        r"""The tiles of ``width`` columns, or None when they would not pay:

        .. math:: \mathrm{nnz} - \sum_{j \in H_w} c_j
            \ \ge\ \kappa\, (T - 1)\, n_{rows},

        ``c_j`` the entries of column ``j`` and ``H_w`` the ``width`` columns with the most
        (their rows of ``X`` are the ones a cache of one tile's size keeps without tiles).
        The left side counts the gathers that miss the cache without tiles, which tiles turn
        into hits; the right the output rows that ``T`` tiles read and write ``T − 1``
        times more. ``κ`` = :data:`TILE_MISSES_PER_PASS`: AMD EPYC, 2 threads, k = 32,
        16 MiB tiles, tiles pay on a random graph of 1 M rows (13.9 missed gathers a row
        against 7 extra passes: 0.74–0.95 of the untiled time in three runs) and cost
        1.8–2.1× the time on the Kronecker graph of scale 20 (2.7 against 7: 84 % of its
        gathers fall on the hottest 16 MiB of rows; ``docs/performance.md``)."""
        tiles = max(1, -(-int(ncols) // int(width)))
        nrows = indptr.shape[0] - 1
        if tiles <= 1 or nrows <= 0:
            return None
        counts = np.bincount(indices, minlength=int(ncols))
        hot = int(np.partition(counts, counts.shape[0] - width)[-width:].sum()) \
            if width < counts.shape[0] else int(counts.sum())
        if indices.shape[0] - hot < TILE_MISSES_PER_PASS * (tiles - 1) * nrows:
            return None
        return cls(indptr, indices, ncols, width)


@nb.njit(parallel=True, cache=True)
def _tile_offsets(indptr, indices, width, offsets):  # pragma: no cover (numba)
    """``offsets[b, i]``: the entries of row ``i`` with a column below ``b·width``
    (:class:`ColumnTiles`), one walk along each row."""
    tiles = offsets.shape[0] - 1
    one = np.uint64(1)
    for t in nb.prange(indptr.shape[0] - 1):
        i = np.uint64(t)
        lo = indptr[i]
        length = indptr[i + one] - lo
        q = np.uint64(0)
        for b in range(tiles):
            bound = np.uint64(b) * width
            while q < length and indices[lo + q] < bound:
                q += one
            offsets[b, i] = q
        offsets[tiles, i] = length


class CSRPattern:
    """Index buffers of one pattern: ``indptr``, ``indices`` (sorted within rows) and, on
    first use of :meth:`csc`, the column view ``(colptr, perm, rows)``: ``perm[q]`` is the
    CSR position of CSC slot ``q`` and ``rows[q]`` its row. The column tiles of either
    (:meth:`column_tiles`) are built on first use and kept too."""

    def __init__(self, A: gb.Matrix):
        # copies of the zero-copy view: no int64 export of the indices and values
        with csr_view(A) as (indptr, indices, _, _):
            self._set(A.nrows, A.ncols, indptr.copy(), indices.astype(index_dtype(A.ncols)))

    def _set(self, nrows: int, ncols: int, indptr: np.ndarray, indices: np.ndarray) -> None:
        self.nrows, self.ncols = int(nrows), int(ncols)
        self.indptr, self.indices = indptr, indices
        self.nnz = int(indices.shape[0])
        self._csc = None
        self._chunks = None
        self._column_chunks = None
        self._tiles: dict[tuple[bool, int], ColumnTiles | None] = {}
        self._divisors: dict[np.dtype, np.ndarray] = {}
        self._entry_rows: slice | None = None

    @classmethod
    def of_buffers(cls, nrows: int, ncols: int, indptr: np.ndarray,
                   indices: np.ndarray) -> CSRPattern:
        """The pattern of the CSR buffers ``indptr`` (int64, ``nrows + 1``) and ``indices``
        (columns sorted within rows, in ``[0, ncols)``), taken as they are: the caller
        vouches for them."""
        out = cls.__new__(cls)
        out._set(nrows, ncols, indptr, indices)
        return out

    @classmethod
    def with_diagonal(cls, A: gb.Matrix | CSRPattern) -> CSRPattern:
        r"""The pattern of ``A + I`` for a square ``A``: A's stored entries and ``(i, i)`` for
        every row ``i`` without one, columns sorted within rows,

        .. math:: \mathcal{P}(A + I) = \mathcal{P}(A) \cup \{(i, i) : 0 \le i < n\},

        written straight into the int32 buffers from a zero-copy view of A, or from A's own
        pattern (no matrix of ``A + I`` and no int64 export; :func:`csr_view`'s rules apply to
        ``A`` meanwhile)."""
        if A.nrows != A.ncols:
            raise ValueError(f"the diagonal needs a square matrix, got {A.nrows}×{A.ncols}")
        n = int(A.nrows)
        if isinstance(A, CSRPattern):
            return cls.of_buffers(n, n, *_with_diagonal(n, A.indptr, A.indices))
        with csr_view(A) as (indptr, indices, _, _):
            return cls.of_buffers(n, n, *_with_diagonal(n, indptr, indices))

    def has_diagonal_entry(self) -> bool:
        """Whether some row stores its diagonal entry (a self loop)."""
        counts = np.empty(self.nrows, np.int64)
        _diagonal_counts(self.indptr, self.indices, counts)
        return bool(np.any(counts == self.row_counts))

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

    @property
    def entry_rows(self) -> slice:
        """The rows from the first to the last that store an entry, as a slice (empty when
        no row does), found once and kept: a row outside it is empty."""
        if self._entry_rows is None:
            filled = np.flatnonzero(np.diff(self.indptr))
            self._entry_rows = slice(int(filled[0]), int(filled[-1]) + 1) if filled.size \
                else slice(0, 0)
        return self._entry_rows

    def divisors(self, dtype) -> np.ndarray:
        r"""A mean's divisors :math:`\max(|\mathrm{row}\ i|, 1)` as ``dtype`` (an empty row
        divides by 1), built once per dtype and kept, read-only (R-GCN's stacked mean at M:
        2.8 ms a step when they were counted at every call)."""
        dtype = np.dtype(dtype)
        if dtype not in self._divisors:
            d = np.maximum(self.row_counts, 1).astype(dtype)
            d.setflags(write=False)
            self._divisors[dtype] = d
        return self._divisors[dtype]

    def rows(self) -> np.ndarray:
        """The row of every stored entry, CSR order (int64)."""
        return np.repeat(np.arange(self.nrows, dtype=np.int64), self.row_counts)

    def csc(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(colptr, perm, rows)``, built on first call and kept (:meth:`column_view`)."""
        if self._csc is None:
            self._csc = self.column_view()
        return self._csc

    @property
    def column_chunks(self) -> np.ndarray:
        """Column chunks of about :data:`CHUNK_NNZ` entries of the kept :meth:`csc` view."""
        if self._column_chunks is None:
            self._column_chunks = balanced_bounds(self.csc()[0])
        return self._column_chunks

    def column_tiles(self, width: int, transposed: bool = False) -> ColumnTiles | None:
        """The :class:`ColumnTiles` of ``width`` columns of this pattern, or with
        ``transposed`` of its kept :meth:`csc` view (tiles of rows), when they pay
        (:meth:`ColumnTiles.if_they_pay`, else None); decided and built on first use and
        kept."""
        key = (bool(transposed), int(width))
        if key not in self._tiles:
            if transposed:
                colptr, _, rows = self.csc()
                self._tiles[key] = ColumnTiles.if_they_pay(colptr, rows, self.nrows, width)
            else:
                self._tiles[key] = ColumnTiles.if_they_pay(self.indptr, self.indices,
                                                           self.ncols, width)
        return self._tiles[key]

    def column_view(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(colptr, perm, rows)``: the cached one, else built and not kept (a device
        executor copies it away and needs no host copy beside the pattern a graph holds); a
        stable sort by column, rows ascend within a column."""
        if self._csc is not None:
            return self._csc
        colptr = np.zeros(self.ncols + 1, np.int64)
        np.cumsum(np.bincount(self.indices, minlength=self.ncols), out=colptr[1:])
        perm = np.empty(self.nnz, index_dtype(max(self.nnz, self.nrows)))
        rows = np.empty(self.nnz, index_dtype(self.nrows))
        _csc_scatter(self.indptr, self.indices, colptr, perm, rows)
        return colptr, perm, rows


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


def _with_diagonal(n: int, indptr: np.ndarray, indices: np.ndarray):
    """``(indptr, indices)`` of ``A + I`` from A's CSR buffers
    (:meth:`CSRPattern.with_diagonal`)."""
    ptr = np.zeros(n + 1, np.int64)
    _diagonal_counts(indptr, indices, ptr[1:])
    np.cumsum(ptr, out=ptr)
    loops = np.empty(int(ptr[-1]), index_dtype(n))
    _diagonal_fill(indptr, indices, ptr, loops)
    return ptr, loops


@nb.njit(cache=True)
def _diagonal_counts(indptr, indices, counts):
    """``counts[i]``: the entries of row ``i`` of ``A + I`` (one more than A's when the row
    has no diagonal entry; columns are sorted, so the scan stops at the first ``j ≥ i``)."""
    for i in range(indptr.shape[0] - 1):
        extra = 1
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            if j >= i:
                if j == i:
                    extra = 0
                break
        counts[i] = indptr[i + 1] - indptr[i] + extra


@nb.njit(cache=True)
def _diagonal_fill(indptr, indices, ptr, out):
    """Row ``i`` of ``A + I`` into ``out[ptr[i]:ptr[i + 1]]``: A's columns with ``i`` put in
    its sorted place when the row lacks it."""
    for i in range(indptr.shape[0] - 1):
        q = ptr[i]
        placed = False
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            if not placed and j >= i:
                if j != i:
                    out[q] = i
                    q += 1
                placed = True
            out[q] = j
            q += 1
        if not placed:
            out[q] = i


class MatrixCache:
    """``build(A)`` per live ``graphblas.Matrix`` or other edge tensor (keyed by identity,
    dropped with it)."""

    def __init__(self, build: Callable[[gb.Matrix], object]):
        self._build = build
        self._entries: dict[int, tuple[weakref.ref, int, object]] = {}

    def find(self, A) -> object | None:
        """The value kept for ``A``, or None (nothing is built)."""
        hit = self._entries.get(id(A))
        if hit is not None and hit[0]() is A and hit[1] == A.nvals:
            return hit[2]
        return None

    def get(self, A: gb.Matrix):
        hit = self.find(A)
        if hit is not None:
            return hit
        return self.put(A, self._build(A))

    def put(self, A, value: object) -> object:
        """Keep ``value`` for ``A`` (while ``A`` lives) and return it."""
        key = id(A)
        entries = self._entries

        def forget(ref):        # only our own entry: the id may have been reused meanwhile
            if entries.get(key, (None,))[0] is ref:
                del entries[key]

        self._entries[key] = (weakref.ref(A, forget), A.nvals, value)
        return value


#: the pattern an :class:`AdjacencyPattern` shares with the matrix it built
_SHARED = MatrixCache(CSRPattern)


class AdjacencyPattern(EdgeTensorOnPattern):
    """A graph's adjacency as an edge tensor whose ``graphblas.Matrix`` is built only when
    something asks for it (:attr:`matrix`): the CSR pattern (int32 indices) the executors
    run on, and the value dtype. Its values are the matrix's.

    Args:
        pattern: the :class:`CSRPattern`.
        dtype: the values' dtype.
        build: ``build()`` makes the matrix: ``pattern``'s entries, the adjacency's values.
    """

    def __init__(self, pattern: CSRPattern, dtype: DTypeLike,
                 build: Callable[[], gb.Matrix]):
        self.pattern = pattern
        self._dtype = np.dtype(dtype)
        self._build: Callable[[], gb.Matrix] | None = build
        self._matrix: gb.Matrix | None = None

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def built(self) -> bool:
        """Whether :attr:`matrix` exists."""
        return self._matrix is not None

    @property
    def matrix(self) -> gb.Matrix:
        """The ``graphblas.Matrix``, built at the first call; executors asked about it find
        this pattern (:func:`csr_of`) instead of exporting another."""
        if self._matrix is None:
            M = self._build()
            if M.nvals != self.nvals:
                raise RuntimeError(f"the adjacency's matrix has {M.nvals} entries, its "
                                   f"pattern {self.nvals}")
            _SHARED.put(M, self.pattern)
            self._matrix, self._build = M, None
        return self._matrix

    def __repr__(self) -> str:
        return (f"AdjacencyPattern({self.nrows}×{self.ncols}, {self.nvals} entries, "
                f"{self.dtype.name}, matrix {'built' if self.built else 'not built'})")


def csr_of(A: gb.Matrix | AdjacencyPattern) -> CSRPattern:
    """The host pattern of an edge tensor: an :class:`AdjacencyPattern`'s own (also for the
    matrix it built), else exported from the ``graphblas.Matrix`` ``A``."""
    if isinstance(A, AdjacencyPattern):
        return A.pattern
    shared = _SHARED.find(A)
    return shared if shared is not None else CSRPattern(A)


def graphblas_of(E: Any) -> Any:
    """``E`` as a ``graphblas.Matrix``: an :class:`AdjacencyPattern`'s matrix (built now if
    it was not), anything else as it is."""
    return E.matrix if isinstance(E, AdjacencyPattern) else E
