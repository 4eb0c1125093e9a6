r"""Graphs generated in place on a grid: every rank draws a share of the edges and keeps only
its block, and the graph is the single-process generator's graph, for every grid.

Both generators work in *chunks* whose random numbers do not depend on who draws them:

* Kronecker (:func:`gblas_gnn.data.kronecker_edges`): the single-process generator draws the
  vertex permutation, then blocks of 2^16 raw edges from one PCG64 stream, each block taking
  a known number of raw 64-bit draws. Every rank draws the permutation (O(n)), then for its
  blocks jumps to their place in the stream (``PCG64.advance``) and draws exactly what one
  process would have drawn there.
* Erdős–Rényi (:func:`gblas_gnn.data.erdos_renyi_edges`): chunks of whole rows, each with its
  own generator (``SeedSequence(seed, spawn_key=(c,))``).

Chunk ``c`` is drawn by rank ``c mod p``; its edges go to the ranks owning their blocks in
one ``Alltoallv``; each rank removes duplicates in its block. The empty-row fill (every
vertex without an in-edge gets one, from ``u = (v + 1 + r) mod n``) needs the global list of
empty rows in id order and one draw of ``r`` per row from the fill stream: the row
communicator completes the in-degrees of the row block, the column communicator gathers the
empty rows of every block, and each rank draws all ``r`` (as one process would) and keeps the
edges of its block. Memory per rank: its block and the chunk being drawn, plus O(n) for the
permutation and the fill draws that reproduce the single-process stream.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._progress import ticking, work_bar
from ..data._edges import check_int, check_seed
from ..data.erdos_renyi import (
    check_density,
    chunk_keys,
    chunk_rows,
    edge_probability,
    fill_rng,
)
from ..data.kronecker import RAW_BLOCK, check_arguments, rmat_indices, threshold_u32, uniform_u32
from ..data.partition import partition
from .grid import Grid

__all__ = ["kronecker", "erdos_renyi", "Blocks"]

#: what a generator hands :meth:`gblas_gnn.dist.DistGraph.from_blocks`: the vertex count,
#: the q parts, this rank's block (local ids, unit values) and the dtype
Blocks = tuple[int, list[np.ndarray], sp.csr_matrix, np.dtype]


class _Owners:
    """Which part a vertex is in, and which rank owns an edge's block."""

    def __init__(self, n: int, parts: list[np.ndarray], q: int):
        self.n, self.q, self.parts = n, q, parts
        self.lookup = np.empty(n, np.int32)
        for i, part in enumerate(parts):
            self.lookup[part] = i

    def rank_of(self, dst: np.ndarray, src: np.ndarray) -> np.ndarray:
        return self.lookup[dst].astype(np.int64) * self.q + self.lookup[src]


def _route(grid: Grid, owners: _Owners, keys: np.ndarray, label: str) -> np.ndarray:
    """Send each edge key ``dst * n + src`` to the rank owning its block."""
    dst, src = np.divmod(keys, owners.n)
    rank = owners.rank_of(dst, src)
    order = np.argsort(rank, kind="stable")
    counts = np.bincount(rank, minlength=grid.size)
    return grid.alltoallv(keys[order], counts, label)


def _blocks(grid: Grid, owners: _Owners, keys: np.ndarray,
            fill: np.random.Generator | None, symmetric: bool, dtype) -> Blocks:
    """The :class:`Blocks` of this rank's edge keys (``dst * n + src``, every key already
    on its block's owner): duplicates merged, then the empty rows filled with one edge each
    from ``fill`` (None: no fill), unit values."""
    n, parts = owners.n, owners.parts
    keys = np.unique(keys)
    if fill is not None and n > 1:
        keys = _fill(grid, owners, keys, fill, symmetric)
    rows, cols = parts[grid.x], parts[grid.y]
    dst, src = np.divmod(keys, n)
    block = sp.csr_matrix((np.ones(keys.size, dtype),
                           (np.searchsorted(rows, dst), np.searchsorted(cols, src))),
                          shape=(rows.size, cols.size))
    return n, parts, block, np.dtype(dtype)


def _fill(grid: Grid, owners: _Owners, keys, rng, symmetric: bool) -> np.ndarray:
    """Keys plus this block's share of the fill edges (see the module docstring)."""
    n, rows = owners.n, owners.parts[grid.x]
    degree = np.bincount(np.searchsorted(rows, keys // n), minlength=rows.size)
    degree = grid.allreduce(degree.astype(np.int64), "sum", "row", "generate.fill_degrees")
    mine = rows[degree == 0]
    sizes = grid.allgather(int(mine.size), "generate.fill_counts")
    counts = [int(c) for c in sizes[grid.y::grid.q]]      # the column communicator's, by x
    empty = np.sort(grid.allgather_rows(mine, counts, "generate.fill_rows"))
    if empty.size == 0:
        return keys
    r = rng.integers(0, n - 1, size=empty.size, dtype=np.int64)   # one process's draws
    u = (empty + 1 + r) % n
    extra = []
    for d, s in [(empty, u)] + ([(u, empty)] if symmetric else []):
        inside = (owners.lookup[d] == grid.x) & (owners.lookup[s] == grid.y)
        extra.append(d[inside] * n + s[inside])
    return np.unique(np.concatenate([keys, *extra]))


def kronecker(grid: Grid, scale: int, edge_factor: int = 16, *, a: float = 0.57,
              b: float = 0.19, c: float = 0.19, seed: int = 0, symmetric: bool = False,
              fill_empty_rows: bool = True, relabel: bool = False, relabel_seed: int = 0,
              dtype=np.float32, progress: bool | None = None) -> Blocks:
    """This rank's block of :func:`gblas_gnn.data.kronecker` with the same arguments,
    generated in place (see the module docstring). ``relabel`` spreads the vertices over the
    blocks by a seeded permutation (load balance; the graph is the same). ``progress``: rank
    0 shows its share of the drawing on a bar from 10⁷ edges (``False``: never)."""
    scale, edge_factor, (a, b, c) = check_arguments(scale, edge_factor, a, b, c)
    n = 1 << scale
    rng = np.random.default_rng(check_seed(seed))
    perm = rng.permutation(n).astype(np.int64)
    start_state = rng.bit_generator.state
    thr = [threshold_u32(t) for t in (a, a + b, a + b + c)]
    m = edge_factor * n
    block = RAW_BLOCK
    parts = partition(n, grid.q, relabel, relabel_seed)
    owners = _Owners(n, parts, grid.q)
    received = []
    bitgen = np.random.PCG64()
    mine = range(grid.rank, -(-m // block), grid.size)
    bar = work_bar(len(mine), "kronecker (rank 0's share)", size=m, unit="blocks",
                   unit_scale=False, show=progress is not False and grid.rank == 0)
    for t in ticking(bar, mine):
        count = min(block, m - t * block)
        bitgen.state = start_state
        bitgen.advance(t * ((scale * block + 1) // 2))      # the draws of blocks 0..t-1
        u = uniform_u32(np.random.Generator(bitgen), scale * count).reshape(scale,
                                                                                  count)
        i_, j_ = rmat_indices(u, *thr)
        dst, src = perm[i_], perm[j_]
        keep = src != dst
        dst, src = dst[keep], src[keep]
        keys = [dst * n + src] + ([src * n + dst] if symmetric else [])
        received.append(np.concatenate(keys))
    bar.close()
    del perm
    # every rank takes part in the exchange, also with nothing to send
    mine = _route(grid, owners, np.concatenate(received) if received else
                  np.zeros(0, np.int64), "generate.route")
    fill = None
    if fill_empty_rows:
        total = sum((scale * min(block, m - t * block) + 1) // 2
                    for t in range(-(-m // block)))
        bitgen.state = start_state
        bitgen.advance(total)
        # raw draws leave the half-used 32-bit word the permutation may have cached, and
        # advance() drops it: put it back, as the single process still holds it
        state = bitgen.state
        state.update(has_uint32=start_state["has_uint32"], uinteger=start_state["uinteger"])
        bitgen.state = state
        fill = np.random.Generator(bitgen)
    return _blocks(grid, owners, mine, fill, symmetric, dtype)


def erdos_renyi(grid: Grid, n: int, density: float, *, seed: int = 0, symmetric: bool = False,
                fill_empty_rows: bool = True, relabel: bool = False, relabel_seed: int = 0,
                dtype=np.float32, progress: bool | None = None) -> Blocks:
    """This rank's block of :func:`gblas_gnn.data.erdos_renyi` with the same arguments,
    generated in place (see the module docstring; ``progress`` as for :func:`kronecker`)."""
    n = check_int("n", n, 0)
    rho = check_density(density, n)
    seed = check_seed(seed)
    parts = partition(n, grid.q, relabel, relabel_seed)
    owners = _Owners(n, parts, grid.q)
    drawn = []
    if n > 1:
        p = edge_probability(n, rho)
        _, chunks = chunk_rows(n)
        mine = range(grid.rank, chunks, grid.size)
        with work_bar(len(mine), "erdos_renyi (rank 0's share)", size=int(rho * n * n),
                      unit="chunks", unit_scale=False,
                      show=progress is not False and grid.rank == 0) as bar:
            drawn = [_drawn_chunk(n, p, seed, chunk, symmetric)
                     for chunk in ticking(bar, mine)]
    mine = _route(grid, owners, np.concatenate(drawn) if drawn else np.zeros(0, np.int64),
                  "generate.route")
    fill = fill_rng(seed) if fill_empty_rows else None
    return _blocks(grid, owners, mine, fill, symmetric, dtype)


def _drawn_chunk(n: int, p: float, seed, chunk: int, symmetric: bool) -> np.ndarray:
    """The keys of one chunk of the Erdős–Rényi draw (both directions when symmetric)."""
    keys = chunk_keys(n, p, seed, chunk, symmetric)
    if symmetric:
        hi, lo = np.divmod(keys, n)
        keys = np.concatenate([keys, lo * n + hi])
    return keys
