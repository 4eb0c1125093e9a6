"""Graphs and data sets on a grid: read blockwise from a file, generated in place, or cut out
of a small data set every rank loads. No rank ever holds a whole graph read from a file.

:func:`read_npz_block` reads this rank's block of a graph ``.npz`` (``row``, ``col``,
``shape``, optional ``data`` and ``edge_attr``) through memory maps, chunk by chunk, keeping
only the entries of its block (and their features, which then live with the block). How
much of the file a rank reads depends on its ``order`` member:

* ``"tiles"`` (``gblas-gnn convert``, :mod:`gblas_gnn.data.tiles`): the tiles of its block
  only (and the boundary tiles, when the grid's side does not divide the tile count);
* ``"csr"`` (:meth:`gblas_gnn.Graph.save_npz`): the entries of its rows;
* none: every entry, a chunk at a time.

A compressed ``.npz`` cannot be mapped: ``gblas-gnn convert`` rewrites it.

:func:`load_dataset` turns every data-set spec of the command line into a
:class:`~gblas_gnn.dist.graph.DistDataset`: the generated graphs (``kronecker:``,
``erdos_renyi:``) and their synthetic features are made in place, ``npz:`` files are read
blockwise with the rows of their vertex arrays, ``ogb:`` folders are streamed by every rank,
which keeps its block and rows (``gblas-gnn convert`` turns them into the tiled layout), and
the small data sets (Planetoid, CSBM) are loaded by every rank and cut with
:meth:`DistGraph.from_graph`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .._io import map_npz
from ..data.partition import partition
from .graph import DistDataset, DistGraph
from .grid import Grid
from .layout import dense_layout

__all__ = ["read_npz_block", "load_dataset", "CHUNK"]

#: entries read from the file per step
CHUNK = 1 << 22


def _graph_arrays(path: Path) -> tuple[dict, int]:
    arrays = map_npz(path, "graph file")
    missing = {"row", "col", "shape"} - arrays.keys()
    if missing:
        raise ValueError(f"{path} lacks the array(s) {sorted(missing)}; expected row, col, "
                         "shape and optional data")
    shape = np.asarray(arrays["shape"])
    if shape.shape != (2,) or not np.issubdtype(shape.dtype, np.integer) or \
            shape[0] != shape[1] or shape[0] < 0:
        raise ValueError(f"{path}: 'shape' must be two equal non-negative integers, got "
                         f"{shape.tolist()}")
    row, col = arrays["row"], arrays["col"]
    for name, a in (("row", row), ("col", col)):
        if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"{path}: {name!r} must be a 1-D integer array, got "
                             f"{a.dtype}{a.shape}")
    if row.shape != col.shape or ("data" in arrays and arrays["data"].shape != row.shape):
        raise ValueError(f"{path}: row, col (and data) differ in length")
    if "edge_attr" in arrays and (arrays["edge_attr"].ndim != 2 or
                                  arrays["edge_attr"].shape[0] != row.shape[0]):
        raise ValueError(f"{path}: edge_attr must be (entries, f) with {row.shape[0]} rows, "
                         f"got {arrays['edge_attr'].shape}")
    return arrays, int(shape[0])


class _BlockEntries:
    """The entries of this rank's block, kept chunk by chunk (as local ids) from a source
    holding others too; ``examined`` counts the bytes of the chunks looked at. Memory: about
    8 bytes per kept entry (12 with values) while collecting, twice that while building."""

    def __init__(self, n: int, rows: np.ndarray, cols: np.ndarray, source):
        self.n, self.rows, self.cols, self.source = n, rows, cols, source
        self.in_rows = np.zeros(n, bool)
        self.in_rows[rows] = True
        self.in_cols = np.zeros(n, bool)
        self.in_cols[cols] = True
        self.local = np.int32 if max(rows.size, cols.size) < 2**31 else np.int64
        self.kept: list[tuple] = []
        self.examined = 0

    def add(self, r, c, v=None, where: str = "", e=None) -> None:
        self.examined += r.nbytes + c.nbytes + sum(0 if a is None else a.nbytes for a in (v, e))
        r, c = np.asarray(r, np.int64), np.asarray(c, np.int64)
        if r.size and (min(r.min(), c.min()) < 0 or max(r.max(), c.max()) >= self.n):
            raise ValueError(f"{self.source}: vertex ids outside [0, {self.n}){where}")
        keep = self.in_rows[r] & self.in_cols[c]
        if v is not None:
            v = np.asarray(v)[keep]
            if not np.isfinite(v).all():
                raise ValueError(f"{self.source}: edge values contain NaN or Inf")
        if e is not None:
            e = np.asarray(e)[keep]
            if not np.isfinite(e).all():
                raise ValueError(f"{self.source}: edge_attr contains NaN or Inf")
        self.kept.append((np.searchsorted(self.rows, r[keep]).astype(self.local),
                          np.searchsorted(self.cols, c[keep]).astype(self.local), v, e))

    def matrix(self, dtype, merge: str = "sum") -> tuple[sp.csr_matrix, np.ndarray | None]:
        """The block (local ids) and, when the entries carry features, theirs in its CSR
        order; duplicates summed, or merged into one entry of value 1
        (``merge="pattern"``); with features a duplicate is an error."""
        kept, self.kept = self.kept, []
        r = np.concatenate([k[0] for k in kept] or [np.zeros(0, self.local)])
        c = np.concatenate([k[1] for k in kept] or [np.zeros(0, self.local)])
        weighted = kept and kept[0][2] is not None
        v = np.concatenate([k[2] for k in kept]).astype(dtype) if weighted else \
            np.ones(r.size, dtype)
        feats = np.concatenate([k[3] for k in kept]) if kept and kept[0][3] is not None \
            else None
        del kept
        if feats is not None:                   # the entries' order, through the CSR build
            v, values = np.arange(1, r.size + 1, dtype=np.float64), v
        block = sp.csr_matrix((v, (r, c)), shape=(self.rows.size, self.cols.size))
        block.sum_duplicates()
        if feats is not None:
            if block.nnz != r.size:
                raise ValueError(f"{self.source}: an edge is given twice, and the edges carry "
                                 "edge_attr (a duplicate edge with two sets of features)")
            at = block.data.astype(np.int64) - 1
            feats = np.ascontiguousarray(feats[at], dtype=dtype)
            block.data = values[at]
        if merge == "pattern":
            block.data[:] = 1
        return block, feats


def _csr_ranges(arrays: dict, rows: np.ndarray) -> list[tuple[int, int]]:
    """The spans of a CSR-ordered file that hold the entries of ``rows`` (sorted ids)."""
    row = arrays["row"]
    if rows.size == 0:
        return []
    if rows[-1] - rows[0] + 1 == rows.size:               # a contiguous range of rows
        return [(int(np.searchsorted(row, rows[0])),
                 int(np.searchsorted(row, rows[-1], side="right")))]
    starts = np.searchsorted(row, rows)
    ends = np.searchsorted(row, rows, side="right")
    return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True) if b > a]


def _tile_ranges(path: Path, arrays: dict, n: int, grid: Grid, relabel: bool,
                 seed: int) -> tuple[list[tuple[int, int]], int]:
    """The spans of a tiled file (:mod:`gblas_gnn.data.tiles`) holding this rank's block,
    and the bytes of tile offsets read to find them."""
    from ..data.tiles import tile_bounds, tile_range

    laid = bool(np.asarray(arrays.get("relabel", False)))
    laid_seed = int(np.asarray(arrays.get("relabel_seed", 0)))
    if (laid, laid_seed if laid else 0) != (relabel, seed if relabel else 0):
        said = f"with --relabel (seed {laid_seed})" if laid else "without --relabel"
        asked = f"with --relabel (seed {seed})" if relabel else "without --relabel"
        raise ValueError(f"{path} was converted {said}, and this job runs {asked}: its blocks "
                         "are other vertex sets; run the job as converted, or convert again "
                         "(gblas-gnn convert" + (" --relabel" if relabel else "") + ")")
    t = int(np.asarray(arrays["tiles"]))
    ptr = arrays["tile_ptr"]
    m = arrays["row"].shape[0]
    if t < 1 or ptr.shape != (t * t + 1,) or int(ptr[0]) != 0 or int(ptr[-1]) != m:
        raise ValueError(f"{path} is a corrupt tiled file: tile_ptr does not match tiles = "
                         f"{t} and {m} entries")
    bounds = tile_bounds(n, t)
    cuts = [(i * n) // grid.q for i in range(grid.q + 1)]
    r0, r1 = tile_range(bounds, cuts[grid.x], cuts[grid.x + 1])
    c0, c1 = tile_range(bounds, cuts[grid.y], cuts[grid.y + 1])
    spans = []
    for tr in range(r0, r1):
        lo, hi = int(ptr[tr * t + c0]), int(ptr[tr * t + c1])
        if not 0 <= lo <= hi <= m:
            raise ValueError(f"{path} is a corrupt tiled file: tile_ptr is not increasing")
        if hi > lo:
            spans.append((lo, hi))
    return spans, 2 * (r1 - r0) * ptr.dtype.itemsize


def read_npz_block(path, grid: Grid, *, relabel: bool = False, seed: int = 0,
                   dtype=np.float32, read: dict | None = None) -> DistGraph:
    """This rank's block of the graph ``.npz`` at ``path`` (see the module docstring);
    duplicates summed, as :meth:`gblas_gnn.Graph.from_npz` does. Errors (a missing, corrupt,
    truncated or compressed file, bad arrays, vertex ids out of range, a tiled file laid out
    for another ``relabel``) are raised on every rank. ``read``, when given, receives what
    this rank read (``edge_bytes``, ``total_edge_bytes``, ``how``)."""
    path = Path(path)
    with grid.agreed("read_npz_block"):
        arrays, n = _graph_arrays(path)
        order = str(np.asarray(arrays["order"])) if "order" in arrays else None
        parts = partition(n, grid.q, relabel, seed)
        entries = _BlockEntries(n, parts[grid.x], parts[grid.y], path)
        extra = 0
        if order == "tiles":
            spans, extra = _tile_ranges(path, arrays, n, grid, relabel, seed)
            how = "the tiles of its block"
        elif order == "csr":
            spans, how = _csr_ranges(arrays, entries.rows), "the entries of its rows"
        else:
            spans = [(0, arrays["row"].shape[0])]
            how = "every entry, a chunk at a time; gblas-gnn convert makes it read its block"
    with grid.agreed("read_npz_block"):
        for lo, hi in spans:
            for a in range(lo, hi, CHUNK):
                b = min(hi, a + CHUNK)
                entries.add(arrays["row"][a:b], arrays["col"][a:b],
                            arrays["data"][a:b] if "data" in arrays else None,
                            f" in entries {a}..{b}",
                            arrays["edge_attr"][a:b] if "edge_attr" in arrays else None)
        block, feats = entries.matrix(dtype)
    if read is not None:
        itemsize = sum(arrays[k].dtype.itemsize * int(np.prod(arrays[k].shape[1:]))
                       for k in ("row", "col", "data", "edge_attr") if k in arrays)
        read.update(edge_bytes=entries.examined + extra, how=how,
                    total_edge_bytes=itemsize * arrays["row"].shape[0])
    return DistGraph.from_blocks(grid, n, parts, block, dtype=dtype, edge_attr=feats)


def load_dataset(spec: str, grid: Grid, *, seed: int = 0, dtype=np.float32,
                 normalize_features: bool | None = None, relabel: bool = False,
                 features: int = 32, classes: int = 4,
                 progress: bool | None = None) -> DistDataset:
    """The data set of a command-line spec (:func:`gblas_gnn.data.specs.parse_dataset`) on
    ``grid``: this rank's block and rows. ``progress``: bars on rank 0 for graphs from 10⁷
    edges (``False``: never)."""
    from ..data.specs import generated_spec, parse_dataset, synthetic_rows

    show = progress is not False and grid.rank == 0
    kind, _, arg = spec.partition(":")
    generated = generated_spec(spec) if kind in ("kronecker", "erdos_renyi") else None
    if generated is not None:
        name, kw = generated
        if kind == "kronecker":
            dg = DistGraph.kronecker(grid, kw["scale"], kw.get("edge_factor", 16), seed=seed,
                                     relabel=relabel, dtype=dtype, progress=show)
        else:
            dg = DistGraph.erdos_renyi(grid, kw["n"], kw["degree"] / kw["n"], seed=seed,
                                       relabel=relabel, dtype=dtype, progress=show)
        x, y, masks = synthetic_rows(dg.n, dg.vertex_ids, seed=seed, features=features,
                                     classes=classes, dtype=dtype)
        return DistDataset(name, dg, x, y, *masks, classes)
    if kind == "npz":
        return _npz_dataset(Path(arg), grid, relabel, dtype)
    if kind == "ogb":
        return _ogb_dataset(Path(arg), grid, relabel, dtype, show)
    with grid.agreed("load_dataset"):
        dataset = parse_dataset(spec, seed=seed, dtype=dtype,
                                normalize_features=normalize_features, progress=show)
    dg = DistGraph.from_graph(dataset.graph, grid, relabel=relabel)
    return dg.scatter_dataset(dataset)


def _npz_dataset(path: Path, grid: Grid, relabel: bool, dtype) -> DistDataset:
    from ..data.specs import NPZ_KEYS

    read: dict = {}
    dg = read_npz_block(path, grid, relabel=relabel, dtype=dtype, read=read)
    with grid.agreed("load_dataset"):
        arrays = map_npz(path, "dataset file")
        missing = [k for k in NPZ_KEYS if k not in arrays]
        if missing:
            raise ValueError(f"{path} lacks {missing}; a dataset .npz holds {list(NPZ_KEYS)}")
        rows = dg.vertex_ids
        part = {k: np.array(arrays[k][rows]) for k in ("x", "y", "train_mask", "val_mask",
                                                       "test_mask")}
    read["row_bytes"] = sum(a.nbytes for a in part.values())
    classes = int(np.asarray(arrays["num_classes"])) if "num_classes" in arrays else int(
        grid.allreduce(np.array([part["y"].max(initial=-1) + 1]), "max", "world",
                       "load_dataset.classes")[0])
    name = str(np.asarray(arrays["name"])) if "name" in arrays else path.stem
    return DistDataset(name, dg, part["x"].astype(dtype, copy=False), part["y"],
                       part["train_mask"], part["val_mask"], part["test_mask"], classes,
                       read=read)


def _ogb_dataset(path: Path, grid: Grid, relabel: bool, dtype, show: bool) -> DistDataset:
    """An OGB folder streamed by every rank, which keeps its block and its rows."""
    from ..data.ogb import OgbFolder

    with grid.agreed("load_dataset"):
        folder = OgbFolder(path)
        parts = partition(folder.n, grid.q, relabel, 0)
        entries = _BlockEntries(folder.n, parts[grid.x], parts[grid.y], path)
        with_feats = folder.edge_feat is not None
        for r, c, *e in folder.edges(show=show, features=with_feats):
            entries.add(r, c, e=e[0] if e else None)
        block, feats = entries.matrix(dtype, merge="pattern")
        rows = parts[grid.x][dense_layout(grid).local_rows(parts[grid.x].size)]
        x, y, *masks = folder.node_data(rows, dtype, show=show)
    dg = DistGraph.from_blocks(grid, folder.n, parts, block, dtype=dtype, edge_attr=feats)
    read = {"edge_bytes": entries.examined, "total_edge_bytes": entries.examined,
            "row_bytes": x.nbytes, "how": "every rank parses all of the OGB files and keeps "
            "its block; gblas-gnn convert makes it read its block only"}
    return DistDataset(folder.name, dg, x, y, *masks, folder.conventions.num_classes,
                       read=read)
