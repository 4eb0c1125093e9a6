r"""The ``plus_times`` products of the ``cpu`` executor, with the terms the layers add:

.. math::
    Z = \mathrm{op}(S)\, X + w X + \mathbf{1} b^\top, \qquad
    \mathrm{op}(S) = S \text{ or } S^\top,

one pass of :func:`._spmm_kernels.spmm_rows` over the buffers cached per matrix
(:mod:`gblas_gnn.executors.patterns`): the CSR index arrays of ``S`` with its values read
zero-copy at each call, or the CSC buffers of ``Sᵀ`` built once (:class:`CSCOperand`, a
counting sort: faster than SuiteSparse's transpose and far faster than an argsort, with int32
rows instead of int64; ``docs/performance.md``). No copy of ``X`` goes into GraphBLAS and no
full matrix comes out of it. GCN's bias and GIN's :math:`(1 + \varepsilon) H` are the start
value of each output row, so the layers need no further pass over ``Z``. Where ``X``
outgrows half of the last-level cache (:func:`tile_width`) and the pattern's gathers would
miss it (:meth:`~..patterns.ColumnTiles.if_they_pay`), the pass runs over column tiles
instead (:func:`._spmm_kernels.spmm_tiled_rows`, the same bits), kept with the pattern or
the :class:`CSCOperand`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import graphblas as gb
import numba
import numpy as np

from ..alignment import ALIGNMENT, aligned_empty
from ..patterns import (
    ColumnTiles,
    CSRPattern,
    balanced_bounds,
    csr_view,
    index_dtype,
    unsigned_view,
)
from ._spmm_kernels import prefetch_distance, spmm_rows, spmm_tiled_rows, transpose_csr

__all__ = ["CSCOperand", "TILE_CACHE_SHARE", "check_features", "last_level_cache_bytes",
           "product", "product_t", "spmm_run", "tile_width"]

#: the tiles of one pattern, given their width in columns (None: untiled)
TilesOf = Callable[[int], ColumnTiles | None]


class CSCOperand:
    """``Sᵀ`` as CSR buffers (the CSC form of ``S``) for the ``plus_times`` kernel: ``colptr``
    (int64), ``rows`` (int32 when they fit), the values in that order and the column chunks
    of :func:`balanced_bounds`. An iso-valued ``S`` (one value for every entry, e.g. a 0/1
    adjacency) keeps only that value. Values cast to another dtype are kept per dtype."""

    def __init__(self, S: gb.Matrix, pattern: CSRPattern):
        self.nrows, self.ncols, self.nnz = S.ncols, S.nrows, pattern.nnz
        self.colptr = np.zeros(S.ncols + 1, np.int64)
        self.rows = np.empty(pattern.nnz, index_dtype(S.nrows))
        with csr_view(S) as (_, _, values, iso):
            values_t = np.empty(0 if iso else pattern.nnz, values.dtype)
            transpose_csr(pattern.indptr, pattern.indices, values, iso, self.colptr,
                          self.rows, values_t)
            if iso:
                values_t = values.reshape(-1)[:1].copy()
        self.iso = iso
        self.chunks = balanced_bounds(self.colptr)
        self._values = {values_t.dtype: values_t}
        self._tiles: dict[int, ColumnTiles | None] = {}

    def column_tiles(self, width: int) -> ColumnTiles | None:
        """The :class:`ColumnTiles` of ``width`` columns of ``Sᵀ`` (ranges of S's rows) when
        they pay (:meth:`ColumnTiles.if_they_pay`, else None), decided and built on first use
        and kept."""
        if width not in self._tiles:
            self._tiles[width] = ColumnTiles.if_they_pay(self.colptr, self.rows, self.ncols,
                                                         width)
        return self._tiles[width]

    def values(self, dtype) -> np.ndarray:
        """The values in CSC order as ``dtype`` (one value when :attr:`iso`)."""
        dtype = np.dtype(dtype)
        if dtype not in self._values:
            self._values[dtype] = next(iter(self._values.values())).astype(dtype)
        return self._values[dtype]


def check_features(X, rows: int, what: str) -> np.ndarray:
    """``X`` as a C-contiguous 2-D float array with ``rows`` rows; ``ValueError`` otherwise
    (the kernel must never index past an array). A large ``X`` whose rows do not start on a
    cache line is copied to one whose rows do (:func:`_aligned_rows`)."""
    X = np.ascontiguousarray(X)
    if X.ndim != 2 or X.shape[0] != rows:
        raise ValueError(f"{what} needs a 2-D operand with {rows} rows, got shape {X.shape}")
    if X.dtype not in (np.float32, np.float64):
        raise TypeError(f"{what} needs float32 or float64 features, got {X.dtype}")
    return _aligned_rows(X)


#: the smallest gathered operand worth a copy to aligned rows (2 cores' L2)
ALIGN_COPY_BYTES = 4 << 20


def _aligned_rows(X: np.ndarray) -> np.ndarray:
    """``X`` itself, or a 64-byte aligned copy when ``X`` is at least
    :data:`ALIGN_COPY_BYTES`, its rows a whole number of cache lines and its start not on
    one: every gathered row then reads 2 lines instead of 3 (k = 32 float32). Measured with one
    thread, the aligned rows save more than the copy costs, the more so when ``X`` misses
    the caches (``docs/performance.md`` has the measurement)."""
    row_bytes = X.shape[1] * X.itemsize
    if (X.nbytes < ALIGN_COPY_BYTES or row_bytes % ALIGNMENT
            or X.ctypes.data % ALIGNMENT == 0):
        return X
    out = aligned_empty(X.shape, X.dtype)
    out[...] = X
    return out


#: the share of the last-level cache one column tile's rows of ``X`` may fill
TILE_CACHE_SHARE = 0.5
#: DGL's fallback (``DGL_CPU_LLC_SIZE``) when the system does not say
_DEFAULT_LLC_BYTES = 40_000_000
_LLC_PATH = Path("/sys/devices/system/cpu/cpu0/cache/index3/size")


@functools.cache
def last_level_cache_bytes() -> int:
    """The last-level cache of the CPU this process runs on, in bytes: Linux's
    ``/sys/devices/system/cpu/cpu0/cache/index3/size`` (e.g. ``32768K``), else DGL's
    fallback of 40 MB."""
    try:
        text = _LLC_PATH.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        size = int(text.rstrip("KMG")) * scale
    except (OSError, ValueError):
        return _DEFAULT_LLC_BYTES
    return size if size > 0 else _DEFAULT_LLC_BYTES


def tile_width(ncols: int, row_bytes: int, llc_bytes: int | None = None) -> int | None:
    r"""The column tile width of a gather from ``X`` (``ncols`` rows of ``row_bytes``), or
    None for no tiling:

    .. math:: T = \left\lceil n_{cols} \Big/ \left\lfloor
        \frac{s \cdot \mathrm{LLC}}{b_{row}} \right\rfloor \right\rceil, \qquad
        w = \lceil n_{cols} / T \rceil,

    so that one tile's rows, :math:`w \cdot b_{row}` bytes, fill at most the share ``s`` =
    :data:`TILE_CACHE_SHARE` of the last-level cache (:func:`last_level_cache_bytes`), the
    rest left to the streams of indices and output rows; the ``T`` tiles are as wide as
    they can be equal (the last holds the rest, never nothing). ``T = 1`` (``X`` fits its
    share: every gathered row stays cached anyway, and a tiled pass could only cost) gives
    None. Whether a pattern is tiled at that width is its own question
    (:meth:`ColumnTiles.if_they_pay`)."""
    llc = last_level_cache_bytes() if llc_bytes is None else llc_bytes
    if ncols <= 0 or row_bytes <= 0:
        return None
    fits = max(1, int(TILE_CACHE_SHARE * llc) // int(row_bytes))
    tiles = -(-int(ncols) // fits)
    return None if tiles <= 1 else -(-int(ncols) // tiles)


def _read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (``a`` itself unchanged)."""
    view = a.view()
    view.setflags(write=False)
    return view


def spmm_run(ptr, idx, chunks, values, iso, X, nrows, self_weight, bias,
             divisors: np.ndarray | None = None, tiles: TilesOf | None = None,
             width: int | None = None, scale: np.ndarray | None = None,
             into: np.ndarray | None = None) -> np.ndarray:
    """``Z_i = (b + w X_i + Σ_{p ∈ row i} v_p s_{idx[p]} X_{idx[p]}) / d_i`` over the CSR
    (or CSC) buffers ``(ptr, idx)`` of ``nrows`` rows (``d_i = divisors[i]``, or no
    division; ``s = scale``, or 1) into a 64-byte-aligned output, or added into ``into``
    (``into += Z``, in the pass: no array of ``Z``'s own), chunks handed out one at a time:
    one :func:`spmm_rows` call with the prefetch distance of the row width, or, when
    :func:`tile_width` asks for tiles (``width`` forces a width) and ``tiles(width)`` gives
    them (they pay on this pattern), one :func:`spmm_tiled_rows` call over them (bitwise
    the same result; ``into`` is then summed after it). Returns ``Z``, or ``into``."""
    dt = X.dtype
    k = X.shape[1]
    if bias is None:
        z0 = np.zeros(k, dt)
    else:
        z0 = np.ascontiguousarray(bias, dtype=dt)
        if z0.shape != (k,):
            raise ValueError(f"bias must have shape ({k},), got {z0.shape}")
    if self_weight is not None and X.shape[0] != nrows:
        raise ValueError("a self term needs a square matrix")
    alpha = dt.type(0 if self_weight is None else np.asarray(self_weight).reshape(-1)[0])
    divisors = np.empty(0, dt) if divisors is None else np.asarray(divisors, dt).reshape(-1)
    if divisors.size not in (0, nrows):
        raise ValueError(f"divisors must have {nrows} entries, got {divisors.size}")
    scale = np.empty(0, dt) if scale is None else np.asarray(scale, dt).reshape(-1)
    if scale.size not in (0, X.shape[0]):
        raise ValueError(f"scale must have {X.shape[0]} entries, got {scale.size}")
    if into is not None and (into.shape != (nrows, k) or into.dtype != dt
                             or not into.flags.c_contiguous):
        raise ValueError(f"into must be a C-contiguous {dt} array of shape {(nrows, k)}")
    if into is not None and np.may_share_memory(into, X):
        raise ValueError("into must not share memory with the gathered operand")
    # the operands the kernels only read go in as read-only views: numba types a read-only
    # array apart, and a cached, read-only divisor vector beside a fresh scale compiled the
    # kernel twice in one process (5 s each)
    values, X, z0, divisors, scale = (_read_only(a) for a in (
        values.astype(dt, copy=False), X, z0, divisors, scale))
    ahead = prefetch_distance(k * dt.itemsize)
    if width is None and tiles is not None:
        width = tile_width(X.shape[0], k * dt.itemsize)
    tiled = None if width is None or tiles is None else tiles(width)
    # 64-byte rows: a later gather reads 2 lines, not 3
    out = into if into is not None and tiled is None else aligned_empty((nrows, k), dt)
    with numba.parallel_chunksize(1):       # dynamic: one chunk of rows at a time
        if tiled is None:
            spmm_rows(chunks, unsigned_view(ptr), unsigned_view(idx), values, iso, X, alpha,
                      self_weight is not None, z0, ahead, divisors, scale, into is not None,
                      out)
            return out
        # rows whose entries in one tile number about the prefetch distance
        per_row = max(idx.shape[0], 1) / max(nrows * tiled.count, 1)
        spmm_tiled_rows(tiled.chunks, unsigned_view(ptr), tiled.offsets,
                        unsigned_view(idx), values, iso, X, alpha,
                        self_weight is not None, z0, max(1, round(ahead / per_row)),
                        divisors, scale, out)
    if into is None:
        return out
    into += out
    return into


def product(S, pattern: CSRPattern, X, self_weight=None, bias=None,
            divisors=None) -> np.ndarray:
    """``D⁻¹ (S X + w X + 1 bᵀ)`` (``pattern``: the cached :class:`CSRPattern` of ``S``; ``S``
    is unpacked for the duration of the kernel, its values used in place; ``D = I`` when
    ``divisors`` is None)."""
    X = check_features(X, pattern.ncols, "S @ X")
    with csr_view(S) as (_, _, values, iso):
        return spmm_run(pattern.indptr, pattern.indices, pattern.chunks, values, iso, X,
                        pattern.nrows, self_weight, bias, divisors, pattern.column_tiles)


def product_t(csc: CSCOperand, X, self_weight=None, bias=None, divisors=None) -> np.ndarray:
    """``D⁻¹ (Sᵀ X + w X + 1 bᵀ)`` over the cached CSC buffers of ``S`` (``D = I`` when
    ``divisors`` is None)."""
    X = check_features(X, csc.ncols, "Sᵀ @ X")
    return spmm_run(csc.colptr, csc.rows, csc.chunks, csc.values(X.dtype), csc.iso, X,
                    csc.nrows, self_weight, bias, divisors, csc.column_tiles)
