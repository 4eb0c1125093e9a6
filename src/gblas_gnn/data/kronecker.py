r"""Graph500 Kronecker (R-MAT) graphs.

Each of the :math:`m = \mathrm{edge\_factor}\cdot 2^{\mathrm{scale}}` raw edges is
drawn bit by bit: at every one of the ``scale`` levels the edge falls into one
quadrant of the (current sub-)matrix with probabilities

.. math::

    \begin{pmatrix} a & b \\ c & d \end{pmatrix}, \qquad d = 1 - a - b - c,

i.e. the level's (row bit, column bit) is ``(0,0)`` w.p. ``a``, ``(0,1)`` w.p.
``b``, ``(1,0)`` w.p. ``c`` and ``(1,1)`` w.p. ``d``.  This is the Graph500
reference generator's distribution (there drawn with two uniforms per level:
``ii = u1 > a+b``, ``jj = u2 > (c if ii else a) / (c+d if ii else a+b)``); here one
uniform per level decides the quadrant, which is the same distribution at half the
random numbers; the quadrant index ``(g1 + g2 + g3)`` with
``g1 = u >= a``, ``g2 = u >= a+b``, ``g3 = u >= a+b+c`` is ``2 * rowbit + colbit``.
As in Graph500 the vertex labels are then randomly permuted (so
vertex id carries no degree information).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import numpy as np

from .._progress import work_bar
from ._edges import (
    check_index_dtype,
    check_int,
    check_seed,
    sorted_unique_inplace,
    split_keys,
    symmetric_keys,
)
from ._edges import fill_empty_rows as _fill_empty_rows

if TYPE_CHECKING:
    from gblas_gnn.graph import Graph

__all__ = ["kronecker_edges", "kronecker"]

#: raw edges drawn per vectorised block.  Fixed (not a tuning knob) because the
#: random stream is consumed block by block: the same seed gives the same graph only
#: if the block size is the same.
RAW_BLOCK = 1 << 16
_MAX_SCALE = 31
_TWO32 = 1 << 32


def threshold_u32(p: float) -> int:
    """Integer threshold ``T`` with ``P(u >= T) = 1 - p`` for ``u ~ U{0..2**32-1}``."""
    return min(int(round(p * _TWO32)), _TWO32)


def _ge(u: np.ndarray, thr: int, out: np.ndarray) -> None:
    if thr >= _TWO32:
        out[:] = False
    else:
        np.greater_equal(u, np.uint32(thr), out=out)


def rmat_indices(
    u: np.ndarray, thr_a: int, thr_ab: int, thr_abc: int
) -> tuple[np.ndarray, np.ndarray]:
    """Row and column index of R-MAT edges from per-level uniforms ``u`` (scale, cnt).

    Level ``l`` contributes bit ``2**l``: row bit ``u >= T(a+b)`` (quadrant c or d),
    column bit ``g1 ^ g2 ^ g3`` with ``g1 = u >= T(a)``, ``g2 = u >= T(a+b)``,
    ``g3 = u >= T(a+b+c)`` (quadrant b or d).
    """
    scale, cnt = u.shape
    ii = np.zeros(cnt, dtype=np.int64)
    jj = np.zeros(cnt, dtype=np.int64)
    g1 = np.empty(cnt, dtype=bool)
    g2 = np.empty(cnt, dtype=bool)
    g3 = np.empty(cnt, dtype=bool)
    # Horner from the most significant level down
    for level in range(scale - 1, -1, -1):
        ul = u[level]
        _ge(ul, thr_a, g1)
        _ge(ul, thr_ab, g2)
        _ge(ul, thr_abc, g3)
        g1 ^= g2
        g1 ^= g3
        np.add(ii, ii, out=ii)
        np.add(ii, g2, out=ii)
        np.add(jj, jj, out=jj)
        np.add(jj, g1, out=jj)
    return ii, jj


def uniform_u32(rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` uniform uint32 from the generator's raw 64-bit stream (low half first,
    independent of the platform's byte order)."""
    raw = rng.bit_generator.random_raw((count + 1) // 2)
    u = raw.view(np.uint32)
    if sys.byteorder == "big":  # pragma: no cover - keep the little-endian order
        u = u.reshape(-1, 2)[:, ::-1].ravel()
    return u[:count]


def _check_initiator(a: float, b: float, c: float) -> tuple[float, float, float]:
    vals = []
    for name, v in (("a", a), ("b", b), ("c", c)):
        v = float(v)
        if not np.isfinite(v) or v < 0 or v > 1:
            raise ValueError(f"initiator probability {name}={v} not in [0, 1]")
        vals.append(v)
    if vals[0] + vals[1] + vals[2] > 1 + 1e-12:
        raise ValueError(f"a + b + c = {sum(vals)} exceeds 1 (d = 1 - a - b - c < 0)")
    return vals[0], vals[1], vals[2]


def check_arguments(scale, edge_factor, a, b, c) -> tuple[int, int, tuple[float, ...]]:
    """``(scale, edge_factor, (a, b, c))`` validated (``ValueError`` / ``TypeError``)."""
    scale = check_int("scale", scale, 0)
    if scale > _MAX_SCALE:
        raise ValueError(f"scale must be <= {_MAX_SCALE}, got {scale}")
    return scale, check_int("edge_factor", edge_factor, 0), _check_initiator(a, b, c)


def kronecker_edges(
    scale: int,
    edge_factor: int = 16,
    *,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    seed: int | np.random.SeedSequence = 0,
    symmetric: bool = False,
    fill_empty_rows: bool = True,
    dtype_index: np.dtype | type = np.int64,
    progress: bool | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    r"""Edge list of a Graph500 Kronecker graph.

    Parameters
    ----------
    scale : int
        :math:`n = 2^{\mathrm{scale}}` vertices (``0 <= scale <= 31``).
    edge_factor : int
        :math:`m = \mathrm{edge\_factor}\cdot n` raw edges are drawn (Graph500: 16).
    a, b, c : float
        Initiator probabilities; :math:`d = 1-a-b-c`.  Graph500 defaults
        0.57 / 0.19 / 0.19 (d = 0.05).
    seed : int or numpy.random.SeedSequence
        Seed of ``numpy.random.default_rng``; the output is a pure function of all
        arguments.
    symmetric : bool
        If true, every raw edge is taken as the undirected pair
        :math:`\{i, j\}` and both directions are returned (``A = A^T``).
    fill_empty_rows : bool
        If true (default, as in the paper's artifact) no row of ``A`` is empty:
        every vertex ``v`` without an in-edge (``dst == v``) gets one edge
        ``u -> v`` from ``u = (v + 1 + r) mod n``, :math:`r \sim U\{0..n-2\}`, drawn
        from the same generator for the empty vertices in increasing id order
        (for ``symmetric`` also ``v -> u``).  Kronecker graphs have many isolated
        vertices (directed, ``edge_factor=16``: 28 % of the rows are empty at scale
        12, 48 % at scale 20), so this adds up to ``n`` (``2n`` if symmetric) edges
        and the result can exceed ``edge_factor * n``.
    dtype_index : numpy integer dtype
        ``int64`` (default) or ``int32`` for the returned index arrays.
    progress : bool or None
        Show a progress bar on stderr when :math:`m` reaches
        :data:`gblas_gnn._progress.PROGRESS_EDGES` (``None`` or ``True``), or never
        (``False``).

    Returns
    -------
    src, dst : ndarray of dtype_index, shape (nnz,)
        Edge ``src[e] -> dst[e]`` is the entry ``A[dst[e], src[e]]``.  Sorted by
        ``(dst, src)`` (CSR order); no self loops, no duplicates.
    n : int
        Number of vertices, :math:`2^{\mathrm{scale}}`.

    Notes
    -----
    Generation runs in blocks of :math:`2^{16}` raw edges (vectorised numpy, one
    32-bit uniform integer per level and edge, compared with the integer thresholds
    :math:`\lfloor 2^{32}a \rceil`, :math:`\lfloor 2^{32}(a+b) \rceil`,
    :math:`\lfloor 2^{32}(a+b+c) \rceil`); each block is permuted, stripped of self
    loops and appended as int64 keys ``dst * n + src`` (for ``symmetric`` the
    canonical ``max * n + min``) to one preallocated array, which is then sorted in
    place and compacted.  Peak memory is about :math:`8m` bytes for the raw keys
    plus :math:`\approx 24\,\mathrm{nnz}` for the compacted keys and the two index
    arrays; ``symmetric`` holds both directions of every pair, so it needs more of
    both time and memory.

    The Graph500 rng call order is: ``permutation(n)`` first, then the blocks in
    order, then the empty-row draws.
    """
    scale, edge_factor, (a, b, c) = check_arguments(scale, edge_factor, a, b, c)
    n = 1 << scale
    idx_dtype = check_index_dtype(dtype_index, n)
    rng = np.random.default_rng(check_seed(seed))

    thr_a, thr_ab, thr_abc = (threshold_u32(t) for t in (a, a + b, a + b + c))
    m = edge_factor * n
    perm = rng.permutation(n).astype(np.int64)
    keys = np.empty(m, dtype=np.int64)
    filled = 0
    bar = work_bar(m, "kronecker", size=m, show=progress)
    for start in range(0, m, RAW_BLOCK):
        cnt = min(RAW_BLOCK, m - start)
        bar.update(cnt)
        u = uniform_u32(rng, scale * cnt).reshape(scale, cnt)
        i_, j_ = rmat_indices(u, thr_a, thr_ab, thr_abc)
        del u
        # the R-MAT matrix is the adjacency itself: row bit -> row of A (target),
        # column bit -> column (source).  With b == c (the default) the law is
        # transpose-invariant anyway.
        dst = perm[i_]
        src = perm[j_]
        keep = src != dst
        src, dst = src[keep], dst[keep]
        if symmetric:
            lo = np.minimum(src, dst)
            hi = np.maximum(src, dst)
            src, dst = lo, hi  # canonical key: row = larger id, col = smaller
        k = src.size
        np.multiply(dst, n, out=keys[filled : filled + k])
        keys[filled : filled + k] += src
        filled += k
    bar.close()
    del perm
    uniq = sorted_unique_inplace(keys[:filled])
    del keys
    if symmetric:
        hi, lo = np.divmod(uniq, n)
        del uniq
        uniq = symmetric_keys(lo, hi, n)
        del lo, hi
    if fill_empty_rows:
        uniq, _ = _fill_empty_rows(uniq, n, rng, symmetric)
    src_out, dst_out = split_keys(uniq, n, idx_dtype)
    return src_out, dst_out, n


def kronecker(
    scale: int,
    edge_factor: int = 16,
    *,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    seed: int | np.random.SeedSequence = 0,
    symmetric: bool = False,
    fill_empty_rows: bool = True,
    dtype: np.dtype | type = np.float32,
    progress: bool | None = None,
) -> Graph:
    """Graph500 Kronecker graph as a :class:`gblas_gnn.graph.Graph` (all values 1).

    Same parameters as :func:`kronecker_edges`; ``dtype`` is the value dtype of
    ``Graph.A``.
    """
    src, dst, n = kronecker_edges(
        scale,
        edge_factor,
        a=a,
        b=b,
        c=c,
        seed=seed,
        symmetric=symmetric,
        fill_empty_rows=fill_empty_rows,
        progress=progress,
    )
    from ._graph import graph_from_sorted_edges

    return graph_from_sorted_edges(src, dst, n, dtype)
