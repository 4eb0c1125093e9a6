r"""Erdős–Rényi graphs (the paper's "Rand" graphs), sampled without :math:`n^2` memory.

:math:`G(n, p)` over the :math:`n(n-1)` ordered off-diagonal pairs (directed) or the
:math:`n(n-1)/2` unordered pairs (symmetric), with :math:`p = \rho\,n/(n-1)` so that
the expected number of stored entries of ``A`` is exactly :math:`\rho n^2`.  Edges
are sampled by geometric skipping (Batagelj & Brandes 2005): the gaps between
consecutive chosen pairs in a fixed linear order are i.i.d. geometric, so only
:math:`O(m)` numbers are drawn and the output comes out sorted, with no duplicates
and no self loops by construction.

The position space is cut into *chunks* of whole rows (about :math:`2^{26}` positions
each), and chunk ``c`` draws from its own generator,
``SeedSequence(seed, spawn_key=(c,))``; the empty-row fill draws from
``SeedSequence(seed, spawn_key=(FILL_STREAM,))``. So any process can generate any chunk on
its own, and :meth:`gblas_gnn.dist.DistGraph.erdos_renyi` builds exactly this graph on any
grid without a process ever holding the whole edge list.
"""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING

import numpy as np

from .._progress import ticking, work_bar
from ._edges import check_index_dtype, check_int, check_seed, split_keys, symmetric_keys
from ._edges import fill_empty_rows as _fill_empty_rows

if TYPE_CHECKING:
    from gblas_gnn.graph import Graph

__all__ = ["erdos_renyi_edges", "erdos_renyi", "bernoulli_positions", "chunk_rows",
           "chunk_keys", "edge_probability", "fill_rng", "FILL_STREAM"]

RAW_BLOCK = 1 << 20
_MAX_N = 1 << 31  # keeps n*(n-1) and the running gap sums inside int64
_CHUNK_POSITIONS = 1 << 26
#: the spawn key of the empty-row fill's generator (past any chunk id)
FILL_STREAM = 1 << 40


def bernoulli_positions(total: int, p: float, rng: np.random.Generator) -> np.ndarray:
    r"""Sorted positions in ``[0, total)``, each included independently w.p. ``p``.

    Geometric skipping: position of the k-th success is
    :math:`\sum_{t\le k} G_t - 1` with :math:`G_t \sim \mathrm{Geom}(p)` (support
    1, 2, ...).  Gaps are drawn in blocks of :math:`2^{20}` (expected-count sized
    first block) until the running position passes ``total``.  Memory
    :math:`O(p \cdot \mathrm{total})`.
    """
    if total <= 0 or p <= 0.0:
        return np.empty(0, dtype=np.int64)
    if p >= 1.0:
        return np.arange(total, dtype=np.int64)
    chunks = []
    pos = -1  # position of the last success
    expected = total * p
    block = int(min(RAW_BLOCK, max(1024, expected + 6 * math.sqrt(expected) + 16)))
    while True:
        gaps = rng.geometric(p, size=block).astype(np.int64)
        np.cumsum(gaps, out=gaps)
        gaps += pos
        if gaps[-1] >= total:
            chunks.append(gaps[: np.searchsorted(gaps, total)])
            break
        chunks.append(gaps)
        pos = int(gaps[-1])
        block = RAW_BLOCK
    return np.concatenate(chunks) if len(chunks) > 1 else chunks[0]


def chunk_rows(n: int) -> tuple[int, int]:
    """``(rows per chunk, number of chunks)`` of an n-vertex graph (independent of how
    many processes generate it)."""
    rows = max(1, _CHUNK_POSITIONS // max(n - 1, 1))
    return rows, -(-n // rows)


def edge_probability(n: int, density: float) -> float:
    """``p = ρ n / (n − 1)`` (capped at 1): each off-diagonal pair is an edge w.p. ``p``."""
    return min(1.0, density * n / (n - 1)) if n > 1 else 0.0


def chunk_keys(n: int, p: float, seed, chunk: int, symmetric: bool) -> np.ndarray:
    """Sorted keys ``dst * n + src`` of the edges chunk ``chunk`` draws (its rows' pairs;
    for ``symmetric`` only the pairs below the diagonal, ``src < dst``)."""
    rows, _ = chunk_rows(n)
    r0, r1 = chunk * rows, min(n, (chunk + 1) * rows)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(chunk,)))
    pos = bernoulli_positions((r1 - r0) * (n - 1), p, rng)
    row, c = np.divmod(pos, n - 1)
    del pos
    row += r0
    col = c + (c >= row)
    del c
    if symmetric:
        keep = col < row
        row, col = row[keep], col[keep]
    keys = row
    keys *= n
    keys += col
    return keys


def fill_rng(seed) -> np.random.Generator:
    """The generator of the empty-row fill (its own stream, after every chunk)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(FILL_STREAM,)))


def check_density(density: float, n: int) -> float:
    if isinstance(density, bool) or not isinstance(density, numbers.Real):
        raise TypeError(f"density must be a real number, got {type(density).__name__}")
    rho = float(density)
    if not math.isfinite(rho) or rho < 0:
        raise ValueError(f"density must be finite and >= 0, got {rho}")
    if n > 1 and rho > (n - 1) / n * (1 + 1e-12):
        raise ValueError(
            f"density {rho} exceeds the maximum (n-1)/n = {(n - 1) / n} without self loops"
        )
    return rho


def erdos_renyi_edges(
    n: int,
    density: float,
    *,
    seed: int | np.random.SeedSequence = 0,
    symmetric: bool = False,
    fill_empty_rows: bool = True,
    dtype_index: np.dtype | type = np.int64,
    progress: bool | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    r"""Edge list of an Erdős–Rényi graph of density :math:`\rho = m / n^2`.

    Parameters
    ----------
    n : int
        Number of vertices.
    density : float
        :math:`\rho`, expected stored entries over :math:`n^2`; average degree is
        :math:`\rho n`.  ``0 <= density <= (n-1)/n``.
    seed : int or numpy.random.SeedSequence
        Seed of ``numpy.random.default_rng``.
    symmetric : bool
        If false, each ordered pair ``(i, j)``, ``i != j``, is an edge independently
        with :math:`p = \rho n/(n-1)`.  If true, each unordered pair is drawn with
        the same ``p`` and stored in both directions (``A = A^T``); the expected
        number of stored entries is :math:`\rho n^2` either way, with variance
        :math:`n(n-1)p(1-p)` (directed) or :math:`2n(n-1)p(1-p)` (symmetric).
    fill_empty_rows : bool
        Give every empty row one edge, with the rule of
        :func:`gblas_gnn.data.kronecker_edges` (``u -> v`` from
        ``u = (v + 1 + r) mod n``).  At average degree :math:`d` a row is empty with
        probability about :math:`e^{-d}`, so this only matters for sparse graphs.
    dtype_index : numpy integer dtype
        ``int64`` (default) or ``int32``.
    progress : bool or None
        Show a progress bar on stderr when about :math:`\rho n^2` edges reach
        :data:`gblas_gnn._progress.PROGRESS_EDGES` (``None`` or ``True``), or never
        (``False``).

    Returns
    -------
    src, dst : ndarray, shape (nnz,)
        Edge ``src[e] -> dst[e]`` = entry ``A[dst[e], src[e]]``; sorted in CSR order,
        no self loops, no duplicates.
    n : int
        Number of vertices.

    Notes
    -----
    Directed: linear index :math:`L \in [0, n(n-1))`, row ``i = L // (n-1)``,
    ``c = L % (n-1)``, column ``j = c + (c >= i)`` (skipping the diagonal).
    Symmetric: the same positions are drawn and only those with ``j < i`` are kept
    (each unordered pair has exactly one such ordered representative, so the kept
    pairs are i.i.d. Bernoulli(p)), then mirrored. The positions are drawn chunk by
    chunk (:func:`chunk_keys`, see the module docstring).
    """
    n = check_int("n", n, 0)
    if n > _MAX_N:
        raise ValueError(f"n must be <= {_MAX_N}, got {n}")
    rho = check_density(density, n)
    idx_dtype = check_index_dtype(dtype_index, n)
    seed = check_seed(seed)
    if n < 2:
        empty = np.empty(0, dtype=idx_dtype)
        return empty, empty.copy(), n
    p = edge_probability(n, rho)
    _, chunks = chunk_rows(n)
    with work_bar(chunks, "erdos_renyi", size=int(rho * n * n), show=progress,
                  unit="chunks", unit_scale=False) as bar:
        keys = np.concatenate([chunk_keys(n, p, seed, c, symmetric)
                               for c in ticking(bar, range(chunks))])
    if symmetric:
        hi, lo = np.divmod(keys, n)
        del keys
        keys = symmetric_keys(lo, hi, n)
        del lo, hi
    if fill_empty_rows:
        keys, _ = _fill_empty_rows(keys, n, fill_rng(seed), symmetric)
    src, dst = split_keys(keys, n, idx_dtype)
    return src, dst, n


def erdos_renyi(
    n: int,
    density: float,
    *,
    seed: int | np.random.SeedSequence = 0,
    symmetric: bool = False,
    fill_empty_rows: bool = True,
    dtype: np.dtype | type = np.float32,
    progress: bool | None = None,
) -> Graph:
    """Erdős–Rényi graph as a :class:`gblas_gnn.graph.Graph` (all values 1).

    Same parameters as :func:`erdos_renyi_edges`; ``dtype`` is the value dtype.
    """
    src, dst, n = erdos_renyi_edges(
        n, density, seed=seed, symmetric=symmetric, fill_empty_rows=fill_empty_rows,
        progress=progress,
    )
    from ._graph import graph_from_sorted_edges

    return graph_from_sorted_edges(src, dst, n, dtype)
