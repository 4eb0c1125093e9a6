r"""The blockwise layout ``gblas-gnn convert`` writes: one uncompressed ``.npz`` whose
adjacency entries are grouped in T×T tiles, so that a rank of a grid reads its block and
nothing else.

The vertices, in *position* order (their ids, or with ``relabel`` the order in which
:func:`gblas_gnn.data.partition.partition` deals them out), are cut into T ranges
``[⌊jn/T⌋, ⌊(j+1)n/T⌋)``; tile ``(i, j)`` holds the entries whose row is in range i and
column in range j. A q×q grid cuts the same positions at ``⌊xn/q⌋``: when q divides T these
cuts are tile cuts, so rank (x, y) reads exactly the tiles of its block, one contiguous span
per tile row; otherwise it also reads the boundary tiles and drops their outside entries.
The default T is the largest of 1, 2, 6, 12, 60, 120, 360, 840, 2520 whose T² tile offsets
stay below nnz/4 (2520 = lcm(1…10) tiles divide every grid up to 10×10, and 12, 14, 15, 18,
20, …).

Members (all plain arrays, mapped in place by :func:`gblas_gnn._io.map_npz`):

``row``, ``col``     entries (target, source), int32 when n < 2³¹, grouped by tile (tiles in
                     row-major order, entries in CSR order inside a tile), duplicates merged
``data``             optional values (absent: all 1)
``edge_attr``        optional features of every entry, ``(nnz, f)`` in the entries' order
                     (a pair given twice is then refused: it would have two sets)
``shape``            (n, n)
``order``            ``"tiles"``; ``tiles``: T; ``tile_ptr``: T²+1 offsets of the tiles
``relabel``          whether positions follow the relabelling permutation (its seed:
                     ``relabel_seed``)
``x``, ``y``, masks, ``num_classes``, ``name``   the data set's vertex arrays, in id order

The writer makes two passes over the entries (count per tile, then place them into a
temporary file at their tile's offset), then sorts and merges duplicates one tile row at a
time: memory is one chunk and one tile row, whatever the size of the graph.
"""

from __future__ import annotations

import tempfile
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._io import atomic_write
from .._progress import ticking, work_bar

__all__ = ["TILE_CHOICES", "default_tiles", "tile_bounds", "tile_range", "Streamed",
           "write_tiled_npz"]

TILE_CHOICES = (1, 2, 6, 12, 60, 120, 360, 840, 2520)
#: entries copied per step when writing members
_PIECE = 1 << 22


def default_tiles(nnz: int) -> int:
    """The largest of :data:`TILE_CHOICES` with T² ≤ max(1, nnz / 4)."""
    return max(t for t in TILE_CHOICES if t * t <= max(1, nnz // 4))


def tile_bounds(n: int, tiles: int) -> np.ndarray:
    """The first position of every tile range and n: ``⌊jn/T⌋`` for j = 0…T."""
    return (np.arange(tiles + 1, dtype=np.int64) * n) // tiles


def tile_range(bounds: np.ndarray, lo: int, hi: int) -> tuple[int, int]:
    """The tiles ``[t0, t1)`` whose ranges cover the positions ``[lo, hi)``."""
    if hi <= lo:
        return 0, 0
    of = np.searchsorted(bounds, [lo, hi - 1], side="right") - 1
    return int(of[0]), int(of[1]) + 1


@dataclass
class Streamed:
    """A vertex array written piece by piece: its shape, dtype and the pieces (rows in
    order) from ``pieces()``."""

    shape: tuple[int, ...]
    dtype: np.dtype
    pieces: Callable[[], Iterable[np.ndarray]]


def write_tiled_npz(out: Path, n: int, entries: Callable[[], Iterator[tuple]], *,
                    vertex_arrays: Mapping[str, np.ndarray | Streamed],
                    tiles: int | None = None, relabel: bool = False, relabel_seed: int = 0,
                    weighted: bool = False, show: bool | None = None, size: int = 0,
                    edge_features: tuple[int, np.dtype] | None = None) -> dict:
    """Write the blockwise layout (see the module docstring) to ``out``, atomically.

    Parameters
    ----------
    out : Path
        The ``.npz`` to write (nothing is left there, nor in its folder, on an error).
    n : int
        Vertices.
    entries : callable
        Returns an iterator of ``(rows, cols)`` (or ``(rows, cols, values)`` when
        ``weighted``) chunks; called twice, it must give the same entries both times.
    vertex_arrays : mapping
        The data set's other members (``x``, ``y``, masks, ``num_classes``, ``name``):
        arrays, or :class:`Streamed` ones written piece by piece.
    tiles : int, optional
        T (default :func:`default_tiles` of the entries).
    relabel, relabel_seed : bool, int
        Lay the tiles out for grids run with ``--relabel`` (positions from
        :func:`gblas_gnn.data.partition.relabel_order`).
    weighted : bool
        Keep values (summed over duplicates); otherwise duplicates merge into one entry of
        value 1 and no ``data`` member is written.
    show, size : bool or None, int
        Progress bars (``False``: never) for a graph of about ``size`` entries (the number
        the source announces; it also chooses the default T).
    edge_features : (int, dtype), optional
        The width and dtype of the features every chunk of ``entries`` then carries last
        (``(rows, cols[, values], features)``), written as ``edge_attr`` in the entries'
        order; a duplicate entry is an error.

    Returns
    -------
    dict
        ``{"n", "nnz", "tiles", "bytes"}`` of the written file.
    """
    t = default_tiles(size) if tiles is None else int(tiles)
    if t < 1:
        raise ValueError(f"tiles must be positive, got {t}")
    position = _positions(n, relabel, relabel_seed)
    counts = _count(n, entries, t, position)
    m = int(counts.sum())
    idx = np.int32 if n < 2**31 else np.int64
    with tempfile.TemporaryDirectory(dir=out.resolve().parent, prefix=f".{out.name}.") as tmp:
        temp = {key: _scratch(Path(tmp, f"{key}.npy"), dtype, m) for key, dtype in
                [("row", idx), ("col", idx)] + ([("data", np.float64)] if weighted else [])}
        if edge_features is not None:
            temp["edge_attr"] = _scratch(Path(tmp, "edge_attr.npy"), edge_features[1], m,
                                         edge_features[0])
        ptr = np.concatenate([[0], np.cumsum(counts)])
        _place(n, entries, t, position, ptr, temp)
        ptr = _merge_tiles(t, position, ptr, temp, n, show, size)
        nnz = int(ptr[-1])
        members = {"shape": np.array([n, n]), "order": np.array("tiles"),
                   "tiles": np.array(t), "tile_ptr": ptr, "relabel": np.array(relabel),
                   "relabel_seed": np.array(relabel_seed),
                   **{k: _prefix(v, nnz) for k, v in temp.items()}, **vertex_arrays}
        atomic_write(out, lambda f: _write_zip(f, members))
    return {"n": n, "nnz": nnz, "tiles": t, "bytes": out.stat().st_size}


def _positions(n: int, relabel: bool, seed: int) -> np.ndarray | None:
    if not relabel:
        return None
    from .partition import relabel_order

    position = np.empty(n, np.int64)
    position[relabel_order(n, seed)] = np.arange(n)
    return position


def _tile_of(ids: np.ndarray, bounds: np.ndarray, position: np.ndarray | None) -> np.ndarray:
    at = ids if position is None else position[ids]
    return np.searchsorted(bounds, at, side="right") - 1


def _chunks(n: int, entries, features: bool = False) -> Iterator[tuple]:
    """``(rows, cols, values or None, features or None)`` chunk by chunk, ids checked."""
    for chunk in entries():
        r, c = (np.asarray(a, np.int64) for a in chunk[:2])
        if r.size and (min(r.min(), c.min()) < 0 or max(r.max(), c.max()) >= n):
            raise ValueError(f"vertex ids outside [0, {n})")
        rest = chunk[2:-1] if features else chunk[2:]
        yield r, c, (np.asarray(rest[0], np.float64) if rest else None), \
            (np.asarray(chunk[-1]) if features else None)


def _scratch(path: Path, dtype, m: int, width: int | None = None) -> np.ndarray:
    """A temporary array of m entries (of ``width`` numbers each) on disk (in memory when
    empty: nothing to map)."""
    shape = (m,) if width is None else (m, width)
    if m == 0:
        return np.zeros(shape, dtype)
    return np.lib.format.open_memmap(path, "w+", dtype, shape)


def _count(n, entries, t, position) -> np.ndarray:
    """Entries per tile."""
    bounds = tile_bounds(n, t)
    counts = np.zeros(t * t, np.int64)
    for r, c, *_ in _chunks(n, entries):
        tile = _tile_of(r, bounds, position) * t + _tile_of(c, bounds, position)
        counts += np.bincount(tile, minlength=t * t)
    return counts


def _place(n, entries, t, position, ptr, temp) -> None:
    """Every entry at the next free slot of its tile."""
    bounds = tile_bounds(n, t)
    cursor = ptr[:-1].copy()
    for r, c, v, e in _chunks(n, entries, "edge_attr" in temp):
        tile = _tile_of(r, bounds, position) * t + _tile_of(c, bounds, position)
        order = np.argsort(tile, kind="stable")
        tile = tile[order]
        which, first, count = np.unique(tile, return_index=True, return_counts=True)
        slot = cursor[tile] + (np.arange(tile.size) - np.repeat(first, count))
        if slot.size and slot.max() >= ptr[-1]:
            raise ValueError("the entries changed between the two passes over them")
        temp["row"][slot] = r[order]
        temp["col"][slot] = c[order]
        if "data" in temp:
            temp["data"][slot] = v[order]
        if e is not None:
            temp["edge_attr"][slot] = e[order]
        cursor[which] += count


def _merge_tiles(t, position, ptr, temp, n, show, size) -> np.ndarray:
    """Sort every tile's entries in CSR order and merge duplicates, one tile row at a time,
    compacting in place; the new tile offsets."""
    bounds = tile_bounds(n, t)
    counts = np.zeros(t * t, np.int64)
    write = 0
    with work_bar(t, "convert: sort tiles", size=size, show=show, unit="tile rows",
                  unit_scale=False) as bar:
        for band in ticking(bar, range(t)):
            lo, hi = int(ptr[band * t]), int(ptr[(band + 1) * t])
            if hi == lo:
                continue
            r, c = np.array(temp["row"][lo:hi]), np.array(temp["col"][lo:hi])
            v = np.array(temp["data"][lo:hi]) if "data" in temp else None
            tc = _tile_of(c, bounds, position)
            order = np.lexsort((c, r, tc))
            r, c, tc = r[order], c[order], tc[order]
            new = np.ones(r.size, bool)
            new[1:] = (r[1:] != r[:-1]) | (c[1:] != c[:-1])
            k = int(new.sum())
            if "edge_attr" in temp:
                if k < r.size:
                    d = int(np.flatnonzero(~new)[0])
                    raise ValueError(f"duplicate edge {c[d]} -> {r[d]} with edge_attr: each "
                                     "pair may be given once when the edges carry features")
                temp["edge_attr"][write:write + k] = np.array(temp["edge_attr"][lo:hi])[order]
            temp["row"][write:write + k] = r[new]
            temp["col"][write:write + k] = c[new]
            if v is not None:
                temp["data"][write:write + k] = np.add.reduceat(v[order], np.flatnonzero(new))
            counts[band * t:(band + 1) * t] = np.bincount(tc[new], minlength=t)
            write += k
    return np.concatenate([[0], np.cumsum(counts)])


def _prefix(array: np.ndarray, count: int) -> Streamed:
    return Streamed((count, *array.shape[1:]), array.dtype,
                    lambda: (array[i:min(i + _PIECE, count)] for i in range(0, count, _PIECE)))


def _write_zip(f, members: Mapping[str, np.ndarray | Streamed]) -> None:
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for key, value in members.items():
            with z.open(f"{key}.npy", "w", force_zip64=True) as member:
                if isinstance(value, Streamed):
                    _write_streamed(member, key, value)
                else:
                    np.lib.format.write_array(member, np.asarray(value), allow_pickle=False)


def _write_streamed(member, key: str, value: Streamed) -> None:
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(value.dtype)),
              "fortran_order": False, "shape": tuple(value.shape)}
    np.lib.format.write_array_header_2_0(member, header)
    rows = 0
    for piece in value.pieces():
        piece = np.ascontiguousarray(piece, value.dtype)
        member.write(piece.tobytes())
        rows += piece.shape[0]
    if rows != value.shape[0]:
        raise ValueError(f"{key}: {rows} rows written, {value.shape[0]} announced")
