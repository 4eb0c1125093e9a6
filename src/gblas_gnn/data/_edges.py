"""Edge-list helpers shared by the generators.

Convention (the library's): an edge ``j -> i`` (``src = j``, ``dst = i``) is the
stored entry ``A[i, j]``; row = target, column = source.  The generators encode an
edge as the int64 key ``dst * n + src``, so sorting keys sorts edges in CSR order
(by row, then column) and duplicates become adjacent.
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp

__all__ = ["edges_to_csr"]

_INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


def check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_index_dtype(dtype_index: object, n: int) -> np.dtype:
    dt = np.dtype(dtype_index)
    if dt not in _INDEX_DTYPES:
        raise TypeError(f"dtype_index must be int32 or int64, got {dt}")
    if n - 1 > np.iinfo(dt).max:
        raise ValueError(f"n={n} vertices do not fit dtype_index={dt}")
    return dt


def check_seed(seed: object) -> int | np.random.SeedSequence:
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise TypeError(f"seed must be a non-negative int or SeedSequence, got {seed!r}")
    return int(seed)


def sorted_unique_inplace(keys: np.ndarray) -> np.ndarray:
    """Sort ``keys`` in place and return its distinct values (a new compact array)."""
    keys.sort()
    if keys.size == 0:
        return keys.copy()
    keep = np.empty(keys.size, dtype=bool)
    keep[0] = True
    np.not_equal(keys[1:], keys[:-1], out=keep[1:])
    return keys[keep]


def split_keys(keys: np.ndarray, n: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """``key = dst * n + src`` -> ``(src, dst)`` in ``dtype``."""
    if n & (n - 1) == 0:  # power of two: shift / mask
        shift = n.bit_length() - 1
        dst = (keys >> shift).astype(dtype, copy=False)
        src = (keys & (n - 1)).astype(dtype, copy=False)
    else:
        dst64, src64 = np.divmod(keys, n)
        dst, src = dst64.astype(dtype, copy=False), src64.astype(dtype, copy=False)
    return src, dst


def symmetric_keys(lo: np.ndarray, hi: np.ndarray, n: int) -> np.ndarray:
    """Both directions of undirected pairs ``lo < hi`` as sorted keys."""
    keys = np.empty(2 * lo.size, dtype=np.int64)
    np.multiply(lo, n, out=keys[: lo.size])
    keys[: lo.size] += hi
    np.multiply(hi, n, out=keys[lo.size :])
    keys[lo.size :] += lo
    keys.sort()
    return keys


def fill_empty_rows(
    keys: np.ndarray, n: int, rng: np.random.Generator, symmetric: bool
) -> tuple[np.ndarray, int]:
    """Give every empty row (vertex without in-edge) one edge.

    Rule: the empty rows ``v`` are taken in increasing order and, for each, one
    ``u = (v + 1 + r) mod n`` with ``r ~ U{0, ..., n-2}`` drawn from ``rng`` in that
    order, so ``u != v``; the edge ``u -> v`` (entry ``A[v, u]``) is added, and for a
    symmetric graph also ``v -> u``.  Added keys never collide with existing ones
    (row ``v`` was empty; in the symmetric case ``v`` was isolated), only with each
    other when two isolated vertices pick each other, which is merged.

    ``keys`` must be sorted and distinct; returns ``(new_keys, number_filled)``.
    """
    if n < 2:
        return keys, 0
    if n & (n - 1) == 0:
        rows = keys >> (n.bit_length() - 1)
    else:
        rows = keys // n
    indeg = np.bincount(rows, minlength=n)
    del rows
    empty = np.flatnonzero(indeg == 0).astype(np.int64)
    del indeg
    if empty.size == 0:
        return keys, 0
    u = (empty + 1 + rng.integers(0, n - 1, size=empty.size, dtype=np.int64)) % n
    new = empty * n + u
    if symmetric:
        new = np.concatenate([new, u * n + empty])
    new = np.unique(new)
    pos = np.searchsorted(keys, new)
    return np.insert(keys, pos, new), int(empty.size)


def edges_to_csr(
    src: np.ndarray,
    dst: np.ndarray,
    n: int,
    values: np.ndarray | None = None,
    dtype: np.dtype | type = np.float32,
) -> sp.csr_matrix:
    """Build the ``n x n`` adjacency ``A`` with ``A[dst[e], src[e]] = values[e]``.

    Parameters
    ----------
    src, dst : ndarray of int, shape (m,)
        Source and target vertex of each edge, in ``[0, n)``.
    n : int
        Number of vertices.
    values : ndarray, shape (m,), optional
        Edge values; ones by default.
    dtype : numpy dtype
        Value dtype of the result (float32 by default).

    Returns
    -------
    scipy.sparse.csr_matrix
        Canonical CSR (sorted column indices).  Duplicate edges are summed, as
        scipy does; the generators never produce duplicates.
    """
    n = check_int("n", n, 0)
    src = np.asarray(src)
    dst = np.asarray(dst)
    if src.ndim != 1 or src.shape != dst.shape:
        raise ValueError(f"src and dst must be 1-D of equal length, got {src.shape}, {dst.shape}")
    for name, arr in (("src", src), ("dst", dst)):
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise TypeError(f"{name} must be an integer array, got {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() >= n):
            raise ValueError(f"{name} has vertex ids outside [0, {n})")
    if values is None:
        values = np.ones(src.size, dtype=dtype)
    else:
        values = np.asarray(values, dtype=dtype)
        if values.shape != src.shape:
            raise ValueError(f"values shape {values.shape} != edge count {src.shape}")
    if src.size:
        keys = dst.astype(np.int64) * n + src
        if keys.size == 1 or bool(np.all(keys[1:] > keys[:-1])):
            # already in canonical CSR order (what the generators return): no sort
            indptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
            return sp.csr_matrix((values, src.astype(np.int64), indptr), shape=(n, n))
    mat = sp.coo_matrix((values, (dst, src)), shape=(n, n)).tocsr()
    mat.sum_duplicates()
    mat.sort_indices()
    return mat
