r"""How dense vertex tensors lie on the grid, and how an operation gets the rows it reads.

Rank (x, y) holds the block ``A[R_x, C_y]`` (``C_y = R_y``). An operation on the block
reads dense tensors by its rows ``R_x`` (targets) or by its columns ``C_y`` (sources) and
completes row sums over the row communicator and column sums over the column
communicator. The two layouts differ in what a rank keeps between operations:

``replicated``
    the rows ``R_x`` of every tensor (the same on the q ranks of a grid row): n·w/q words
    per rank for a tensor of width w. Reading by target needs nothing; reading by source
    is one partner exchange; a row sum is one allreduce.
``sharded``
    the y-th of q consecutive slices of ``R_x`` (its *shard*, about n/p rows): n·w/p
    words per rank. Reading by target gathers the shards of ``R_x`` over the row
    communicator; reading by source sends the shard to the partner (y, x), which then
    holds the x-th shard of ``R_y``, and gathers those over the column communicator; a
    row sum is a reduce-scatter over the row communicator, a column sum a reduce-scatter
    over the column communicator followed by the partner exchange. The gathered rows live
    for one operation; a backward gathers again what its forward read.

Words per rank for a tensor of width w, with ``r = |R_x|``, ``c = |C_y|``, ``s`` the
shard of ``R_x`` here and ``s'`` the x-th shard of ``R_y`` (the partner's):

=====================  ======================  ============================================
step                   replicated              sharded
=====================  ======================  ============================================
read by target         none                    allgather (row): sends w·s, gets w·(r − s)
read by source         exchange: w·r / w·c     exchange w·s / w·s', allgather (col):
                                               sends w·s', gets w·(c − s')
row sum                allreduce (row): w·r    reduce-scatter (row): sends w·(r − s),
                                               gets w·s·(q − 1)
column sum to rows     allreduce (col): w·c,   reduce-scatter (col): sends w·(c − s'),
                       exchange w·c / w·r      gets w·s'·(q − 1); exchange w·s' / w·s
=====================  ======================  ============================================

The diagonal ranks (x = y) are their own partner and exchange nothing; on a 1×1 grid the two
layouts are the same and nothing moves.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from .grid import Grid

__all__ = ["COLUMN_CHUNK_BYTES", "ColumnChunks", "DenseLayout", "Replicated", "Sharded",
           "dense_layout", "shard"]

#: the messages a sharded backward gathers for one range of its block's columns, at most
COLUMN_CHUNK_BYTES = 4 << 20


def shard(rows: int, j: int, q: int) -> slice:
    """The j-th of q consecutive slices of ``rows`` rows (sizes differ by at most one)."""
    return slice(rows * j // q, rows * (j + 1) // q)


def _sizes(rows: int, q: int) -> list[int]:
    return [rows * (j + 1) // q - rows * j // q for j in range(q)]


class DenseLayout(ABC):
    """The layout of dense tensors on ``grid`` (see the module docstring). ``r`` is the
    number of rows ``|R_x|`` of this rank's block, ``c`` its columns ``|C_y|``."""

    name: str

    def __init__(self, grid: Grid):
        self.grid = grid

    @abstractmethod
    def local_rows(self, r: int) -> slice:
        """The rows of ``R_x`` this rank keeps."""

    def kept(self, r: int) -> int:
        """How many rows of ``R_x`` (``r`` rows) this rank keeps."""
        rows = self.local_rows(r)
        return rows.stop - rows.start

    def check(self, X, r: int, side: str) -> None:
        """``ValueError`` unless ``X`` has the rows this rank keeps of ``R_x``."""
        kept = self.kept(r)
        if np.shape(X)[:1] != (kept,):
            raise ValueError(f"a dense tensor read {side} has {np.shape(X)[0]} rows, and "
                             f"this rank keeps {kept} ({self.name} layout of its {r} rows "
                             "R_x): build the graph and its tensors on the executor's grid "
                             "(DistGraph.from_graph(g, executor.grid), graph.scatter)")

    @abstractmethod
    def share(self, rows: int) -> slice:
        """This rank's share of its ``rows`` local rows in a reduction over all vertices
        (each vertex counted once over the grid)."""

    @abstractmethod
    def rows(self, parts: list[np.ndarray], r: int, label: str) -> list[np.ndarray]:
        """``X[R_x]`` of each array of ``parts`` (this rank's rows)."""

    @abstractmethod
    def columns(self, parts: list[np.ndarray], r: int, c: int, label: str) -> list[np.ndarray]:
        """``X[C_y]`` of each array of ``parts`` (this rank's rows), the partner exchange of
        all of them in one message."""

    @abstractmethod
    def row_sum(self, Z: np.ndarray, label: str) -> np.ndarray:
        """The sum over the grid row of the partial rows ``Z`` (``R_x``), as kept here."""

    @abstractmethod
    def own(self, Z: np.ndarray) -> np.ndarray:
        """This rank's rows of ``Z`` (``R_x``, the same on the whole grid row)."""

    @abstractmethod
    def column_sum(self, parts: list[np.ndarray], r: int, partials: str, to_rows: str
                   ) -> list[np.ndarray]:
        """The sums over the grid column of the partial columns ``parts`` (each ``C_y``
        rows), as this rank keeps them: one reduction (``partials``) and one exchange
        (``to_rows``) for all of them."""

    @abstractmethod
    def columns_to_rows(self, Z: np.ndarray, r: int, label: str) -> np.ndarray:
        """A result by columns ``C_y`` (the same on the whole grid column) as this rank
        keeps its rows: from the partner (y, x), which holds it for ``R_x``."""


class Replicated(DenseLayout):
    name = "replicated"

    def local_rows(self, r):
        return slice(0, r)

    def share(self, rows):
        return shard(rows, self.grid.y, self.grid.q)

    def rows(self, parts, r, label):
        return list(parts)

    def columns(self, parts, r, c, label):
        parts = [np.ascontiguousarray(a) for a in parts]
        return self.grid.exchange_parts(parts, [(c, *a.shape[1:]) for a in parts], label)

    def row_sum(self, Z, label):
        return self.grid.allreduce(Z, "sum", "row", label)

    def own(self, Z):
        return Z

    def column_sum(self, parts, r, partials, to_rows):
        # one buffer, the arrays one after the other: what comes back from the partner is
        # its arrays for the rows R_x in the same order, each piece a view
        widths = [int(np.prod(a.shape[1:], dtype=np.int64)) for a in parts]
        flat = np.concatenate([np.ravel(a) for a in parts])
        self.grid.allreduce(flat, "sum", "col", partials)
        back = self.columns_to_rows(flat, r * sum(widths), to_rows)
        out, start = [], 0
        for a, w in zip(parts, widths, strict=True):
            out.append(back[start:start + r * w].reshape(r, *a.shape[1:]))
            start += r * w
        return out

    def columns_to_rows(self, Z, r, label):
        return self.grid.exchange(Z, label, rows=r)


class Sharded(DenseLayout):
    """One collective per array (no packing copy: every gathered or reduced array is made
    in its own buffer, the kernels read it as it is)."""

    name = "sharded"

    def local_rows(self, r):
        return shard(r, self.grid.y, self.grid.q)

    def share(self, rows):
        return slice(0, rows)

    def rows(self, parts, r, label):
        sizes = _sizes(r, self.grid.q)
        return [self.grid.allgather_rows(np.ascontiguousarray(a), sizes, label, "row")
                for a in parts]

    def columns(self, parts, r, c, label):
        g = self.grid
        parts = [np.ascontiguousarray(a) for a in parts]
        theirs = _sizes(c, g.q)
        mine = g.exchange_parts(parts, [(theirs[g.x], *a.shape[1:]) for a in parts], label)
        return [g.allgather_rows(a, theirs, f"{label}.gather", "col") for a in mine]

    def row_sum(self, Z, label):
        return self.grid.reduce_scatter_rows(Z, _sizes(Z.shape[0], self.grid.q), label, "row")

    def own(self, Z):
        return Z[self.local_rows(Z.shape[0])].copy()

    def column_sum(self, parts, r, partials, to_rows):
        g = self.grid
        pieces = [g.reduce_scatter_rows(a, _sizes(a.shape[0], g.q), partials, "col")
                  for a in parts]
        s = _sizes(r, g.q)[g.y]
        return g.exchange_parts([np.ascontiguousarray(a) for a in pieces],
                                [(s, *a.shape[1:]) for a in pieces], to_rows)

    def columns_to_rows(self, Z, r, label):
        g = self.grid
        piece = np.ascontiguousarray(Z[shard(Z.shape[0], g.x, g.q)])
        return g.exchange(piece, label, rows=_sizes(r, g.q)[g.y])


class ColumnChunks:
    """The messages read by source in a sharded backward, a range of the block's columns
    ``C_y`` at a time (:class:`gblas_gnn.executors.cpu.programs.MessageChunks`), and their
    cotangent completed range by range: no rank holds all of ``X[C_y]`` or its cotangent at
    once, only ranges of at most :data:`COLUMN_CHUNK_BYTES` and at most a slice (c/q rows).

    ``mine`` is what the partner (y, x) sent: the x-th slice of ``R_y``, which the q ranks
    of the grid column (x' = 0 … q−1) hold slice by slice. The summed cotangent of the slice
    takes its place range by range (a range of it is read once, by the gather before the
    range's column pass), unless ``mine`` is the caller's own array (the diagonal ranks
    exchange nothing). A range ``[j0, j1)`` is gathered
    from the slices it meets (allgather over the column communicator, ``label.gather``); its
    cotangent is summed over the grid column into the slices' holders (``label.partials``);
    :meth:`result` sends the summed slice back to the partner and returns this rank's own
    rows' (``label.to_rows``). The words are those of the whole gather, reduce-scatter and
    exchange (:mod:`gblas_gnn.dist.layout`), in one message per range."""

    def __init__(self, grid: Grid, mine: np.ndarray, r: int, c: int, label: str,
                 owned: bool, chunk_bytes: int | None = None):
        self.grid, self.mine, self.r, self.c, self.label = grid, mine, r, c, label
        sizes = _sizes(c, grid.q)
        self.starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
        self.summed = mine if owned else np.empty_like(mine)
        row = max(int(np.prod(mine.shape[1:], dtype=np.int64)) * mine.itemsize, 1)
        # a range is at most a slice's rows (about n/p) and COLUMN_CHUNK_BYTES: what a rank
        # holds of the messages then falls as 1/p, not as the block's columns' 1/√p
        cap = (COLUMN_CHUNK_BYTES if chunk_bytes is None else chunk_bytes) // row
        self.step = max(min(cap, -(-c // grid.q)), 1)

    def _overlaps(self, j0: int, j1: int) -> list[int]:
        st = self.starts
        return [max(0, min(j1, st[m + 1]) - max(j0, st[m])) for m in range(self.grid.q)]

    def _own(self, j0: int, j1: int) -> slice:
        """The rows of ``[j0, j1)`` in this rank's slice, counted from the slice's start."""
        lo = self.starts[self.grid.x]
        return slice(max(j0, lo) - lo, max(min(j1, self.starts[self.grid.x + 1]), lo) - lo)

    def __iter__(self):
        for j0 in range(0, self.c, self.step):
            j1 = min(self.c, j0 + self.step)
            yield j0, j1, self.grid.allgather_rows(
                np.ascontiguousarray(self.mine[self._own(j0, j1)]), self._overlaps(j0, j1),
                f"{self.label}.gather", "col")

    def complete(self, j0: int, j1: int, dX: np.ndarray) -> None:
        self.grid.reduce_scatter_rows(dX, self._overlaps(j0, j1), f"{self.label}.partials",
                                      "col", out=self.summed[self._own(j0, j1)])

    def result(self) -> np.ndarray:
        s = _sizes(self.r, self.grid.q)[self.grid.y]
        return self.grid.exchange(self.summed, f"{self.label}.to_rows", rows=s)


def dense_layout(grid: Grid) -> DenseLayout:
    """The layout object of ``grid.dense``."""
    return (Sharded if grid.dense == "sharded" else Replicated)(grid)
