"""Graphs and data sets on a grid: read blockwise from a file, generated in place, or cut out
of a small data set every rank loads.

:func:`read_npz_block` reads this rank's block of a graph ``.npz`` (``row``, ``col``,
``shape``, optional ``data``: the layout :meth:`gblas_gnn.Graph.save_npz` writes) through
memory maps, chunk by chunk, keeping only the entries of its block: no rank ever holds the
whole file. A file that says its entries are in CSR order (an ``order`` member ``"csr"``, as
``Graph.save_npz`` and ``gblas-gnn convert`` write) is read only over the rows of the rank's
row block; any other order is scanned in chunks. A compressed ``.npz`` cannot be mapped:
``gblas-gnn convert`` rewrites it.

:func:`load_dataset` turns every data-set spec of the command line into a
:class:`~gblas_gnn.dist.graph.DistDataset`: the generated graphs (``kronecker:``,
``erdos_renyi:``) and their synthetic features are made in place, ``npz:`` files are read
blockwise, and the small data sets (Planetoid, CSBM) are loaded by every rank and cut with
:meth:`DistGraph.from_graph`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .._io import map_npz
from .graph import DistDataset, DistGraph, partition
from .grid import Grid

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
    return arrays, int(shape[0])


def _ranges(arrays: dict, rows: np.ndarray) -> list[tuple[int, int]]:
    """The spans of the file that can hold entries of ``rows`` (sorted ids)."""
    order = arrays.get("order")
    if order is None or str(np.asarray(order)) != "csr" or rows.size == 0:
        return [(0, arrays["row"].shape[0])]
    row = arrays["row"]
    if rows[-1] - rows[0] + 1 == rows.size:               # a contiguous range of rows
        return [(int(np.searchsorted(row, rows[0])),
                 int(np.searchsorted(row, rows[-1], side="right")))]
    starts = np.searchsorted(row, rows)
    ends = np.searchsorted(row, rows, side="right")
    return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True) if b > a]


def read_npz_block(path, grid: Grid, *, relabel: bool = False, seed: int = 0,
                   dtype=np.float32) -> DistGraph:
    """This rank's block of the graph ``.npz`` at ``path`` (see the module docstring);
    duplicates summed, as :meth:`gblas_gnn.Graph.from_npz` does. Errors (a missing, corrupt,
    truncated or compressed file, bad arrays, vertex ids out of range) are raised on every
    rank."""
    path = Path(path)
    with grid.agreed("read_npz_block"):
        arrays, n = _graph_arrays(path)
    parts = partition(n, grid.q, relabel, seed)
    rows, cols = parts[grid.x], parts[grid.y]
    in_rows = np.zeros(n, bool)
    in_rows[rows] = True
    in_cols = np.zeros(n, bool)
    in_cols[cols] = True
    kept_r, kept_c, kept_v = [], [], []
    with grid.agreed("read_npz_block"):
        for lo, hi in _ranges(arrays, rows):
            for a in range(lo, hi, CHUNK):
                b = min(hi, a + CHUNK)
                r = np.asarray(arrays["row"][a:b], np.int64)
                c = np.asarray(arrays["col"][a:b], np.int64)
                if r.size and (min(r.min(), c.min()) < 0 or max(r.max(), c.max()) >= n):
                    raise ValueError(f"{path}: vertex ids outside [0, {n}) in entries "
                                     f"{a}..{b}")
                keep = in_rows[r] & in_cols[c]
                kept_r.append(r[keep])
                kept_c.append(c[keep])
                if "data" in arrays:
                    values = np.asarray(arrays["data"][a:b])[keep]
                    if not np.isfinite(values).all():
                        raise ValueError(f"{path}: edge values contain NaN or Inf")
                    kept_v.append(values)
    r = np.concatenate(kept_r) if kept_r else np.zeros(0, np.int64)
    c = np.concatenate(kept_c) if kept_c else np.zeros(0, np.int64)
    v = np.concatenate(kept_v) if kept_v else np.ones(r.size)
    block = sp.csr_matrix((v.astype(dtype), (np.searchsorted(rows, r),
                                             np.searchsorted(cols, c))),
                          shape=(rows.size, cols.size))
    block.sum_duplicates()
    return DistGraph.from_blocks(grid, n, parts, block, dtype=dtype)


def load_dataset(spec: str, grid: Grid, *, seed: int = 0, dtype=np.float32,
                 normalize_features: bool | None = None, relabel: bool = False,
                 features: int = 32, classes: int = 4) -> DistDataset:
    """The data set of a command-line spec (:func:`gblas_gnn.datasets.parse_dataset`) on
    ``grid``: this rank's block and rows."""
    from ..datasets import generated_spec, parse_dataset, synthetic_rows

    kind, _, arg = spec.partition(":")
    generated = generated_spec(spec) if kind in ("kronecker", "erdos_renyi") else None
    if generated is not None:
        name, kw = generated
        if kind == "kronecker":
            dg = DistGraph.kronecker(grid, kw["scale"], kw.get("edge_factor", 16), seed=seed,
                                     relabel=relabel, dtype=dtype)
        else:
            dg = DistGraph.erdos_renyi(grid, kw["n"], kw["degree"] / kw["n"], seed=seed,
                                       relabel=relabel, dtype=dtype)
        x, y, masks = synthetic_rows(dg.n, dg.vertex_ids, seed=seed, features=features,
                                     classes=classes, dtype=dtype)
        return DistDataset(name, dg, x, y, *masks, classes)
    if kind == "npz":
        return _npz_dataset(Path(arg), grid, relabel, dtype)
    with grid.agreed("load_dataset"):
        dataset = parse_dataset(spec, seed=seed, dtype=dtype,
                                normalize_features=normalize_features)
    dg = DistGraph.from_graph(dataset.graph, grid, relabel=relabel)
    return dg.scatter_dataset(dataset)


def _npz_dataset(path: Path, grid: Grid, relabel: bool, dtype) -> DistDataset:
    from ..datasets import NPZ_KEYS

    dg = read_npz_block(path, grid, relabel=relabel, dtype=dtype)
    with grid.agreed("load_dataset"):
        arrays = map_npz(path, "dataset file")
        missing = [k for k in NPZ_KEYS if k not in arrays]
        if missing:
            raise ValueError(f"{path} lacks {missing}; a dataset .npz holds {list(NPZ_KEYS)}")
        rows = dg.vertex_ids
        part = {k: np.array(arrays[k][rows]) for k in ("x", "y", "train_mask", "val_mask",
                                                       "test_mask")}
    classes = int(np.asarray(arrays["num_classes"])) if "num_classes" in arrays else int(
        grid.allreduce(np.array([part["y"].max(initial=-1) + 1]), "max", "world",
                       "load_dataset.classes")[0])
    return DistDataset(path.stem, dg, part["x"].astype(dtype, copy=False), part["y"],
                       part["train_mask"], part["val_mask"], part["test_mask"], classes)
