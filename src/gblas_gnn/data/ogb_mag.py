"""ogbn-mag read from the folder OGB's own downloader leaves: a heterogeneous citation graph
(papers, authors, institutions, fields of study), nothing downloaded, the ``ogb`` package not
imported.

The layout (OGB's ``read_csv_heterograph_raw``, ``read_node_label_hetero``,
``read_nodesplitidx_split_hetero``)::

    ogbn_mag/raw/num-node-dict.csv.gz                   header: the vertex types; one row of
                                                        counts
             /raw/triplet-type-list.csv.gz              one relation "src,rel,dst" per line
             /raw/relations/<src>___<rel>___<dst>/edge.csv.gz           "source,target" ids
             /raw/relations/<src>___<rel>___<dst>/num-edge-list.csv.gz  one count
             /raw/node-feat/<type>/node-feat.csv.gz     a type's features (papers only)
             /raw/node-label/<type>/node-label.csv.gz   a type's labels, one per line
             /split/time/<type>/{train,valid,test}.csv.gz   vertex ids of the labelled type

``add_reverse=True`` adds every relation turned around as ``rev_<rel>`` (PyG's
``ToUndirected`` on a heterogeneous graph), as HGT and R-GCN are usually trained on it.
Everything is checked before it is used: a missing file, a count that disagrees with its
file, an id out of its type's range, a label outside the classes, overlapping splits each get
an error that names the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..hetero import HeteroGraph
from ._csvgz import csv_gz_chunks, first_line

__all__ = ["HeteroDataset", "load_ogb_mag", "OGB_MAG_CLASSES"]

#: ogbn-mag's venues (``master.csv``)
OGB_MAG_CLASSES = 349


@dataclass
class HeteroDataset:
    """A node-classification data set on a heterogeneous graph: the graph, the features of
    the types that have them, and the labels and splits of one ``target`` type."""

    name: str
    graph: HeteroGraph
    x: dict[str, np.ndarray]
    target: str
    y: np.ndarray
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray
    num_classes: int


def _read(path: Path, dtype, columns: int | None = None) -> np.ndarray:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing")
    parts = [rows for _, rows in csv_gz_chunks(path, dtype, columns)]
    return np.concatenate(parts) if parts else np.zeros((0, columns or 1), dtype)


def _count(path: Path) -> int:
    rows = _read(path, np.int64, 1)
    if rows.shape != (1, 1) or rows[0, 0] < 0:
        raise ValueError(f"{path} must hold one non-negative count, got "
                         f"{rows.ravel()[:5].tolist()}")
    return int(rows[0, 0])


def _node_counts(raw: Path) -> dict[str, int]:
    path = raw / "num-node-dict.csv.gz"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing")
    types = first_line(path).decode("utf-8", "replace").split(",")
    rows = [r for _, r in csv_gz_chunks(path, str, len(types))]
    values = np.concatenate(rows) if rows else np.zeros((0, len(types)), str)
    if values.shape != (2, len(types)):
        raise ValueError(f"{path} must hold a header of vertex types and one row of counts")
    try:
        counts = [int(v) for v in values[1]]
    except ValueError:
        raise ValueError(f"{path}: the counts must be integers, got {values[1].tolist()}") \
            from None
    return dict(zip(types, counts, strict=True))


def _relations(raw: Path) -> list[tuple[str, str, str]]:
    path = raw / "triplet-type-list.csv.gz"
    rows = _read(path, str, 3)
    return [tuple(str(x) for x in row) for row in rows]


def _edges(raw: Path, key: tuple[str, str, str]) -> np.ndarray:
    folder = raw / "relations" / "___".join(key)
    edges = _read(folder / "edge.csv.gz", np.int64, 2)
    count = _count(folder / "num-edge-list.csv.gz")
    if edges.shape[0] != count:
        raise ValueError(f"{folder / 'edge.csv.gz'} holds {edges.shape[0]} edges but "
                         f"num-edge-list.csv.gz says {count}")
    return edges.T


def load_ogb_mag(path, dtype=np.float32, add_reverse: bool = False) -> HeteroDataset:
    """ogbn-mag from ``path`` (the folder, e.g. ``DIR/ogbn_mag``): the heterogeneous graph,
    the papers' features, labels and time split (module docstring).

    Raises
    ------
    FileNotFoundError
        The folder or one of its files is missing (named).
    ValueError
        Files that disagree: a count, an id out of its type's range, a duplicate edge, a
        feature row of another width, a label outside ``[0, 349)``, overlapping splits.
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"no ogbn-mag folder at {path}; gblas_gnn never downloads "
                                "data sets: put the folder OGB's downloader makes there "
                                "(python -c \"from ogb.nodeproppred import "
                                "NodePropPredDataset as D; D('ogbn-mag', root='DIR')\")")
    raw = path / "raw"
    counts = _node_counts(raw)
    edges = {}
    for key in _relations(raw):
        if key[0] not in counts or key[2] not in counts:
            raise ValueError(f"{raw / 'triplet-type-list.csv.gz'}: relation {key} names a "
                             f"type not in num-node-dict.csv.gz ({sorted(counts)})")
        edges[key] = _edges(raw, key)
    if add_reverse:
        for (s, r, d), ei in list(edges.items()):
            edges[(d, f"rev_{r}", s)] = ei[::-1].copy()
    graph = HeteroGraph.from_edge_index_dict(edges, counts, dtype=dtype)
    x = {}
    for t in counts:
        feat = raw / "node-feat" / t / "node-feat.csv.gz"
        if feat.is_file():
            x[t] = _read(feat, dtype)
            if x[t].shape[0] != counts[t]:
                raise ValueError(f"{feat} holds {x[t].shape[0]} rows but there are "
                                 f"{counts[t]} {t!r} vertices")
            if not np.isfinite(x[t]).all():
                raise ValueError(f"{feat} holds NaN or Inf")
    target = "paper"
    y = _read(raw / "node-label" / target / "node-label.csv.gz", np.float64, 1)[:, 0]
    if y.shape[0] != counts[target] or not np.array_equal(y, np.round(y)) or \
            (y.size and (y.min() < 0 or y.max() >= OGB_MAG_CLASSES)):
        raise ValueError(f"{raw / 'node-label' / target / 'node-label.csv.gz'} must hold one "
                         f"label in [0, {OGB_MAG_CLASSES}) per {target!r} vertex "
                         f"({counts[target]})")
    masks = []
    for part in ("train", "valid", "test"):
        file = path / "split" / "time" / target / f"{part}.csv.gz"
        ids = _read(file, np.int64, 1)[:, 0]
        if ids.size and (ids.min() < 0 or ids.max() >= counts[target]):
            raise ValueError(f"{file} names a vertex outside [0, {counts[target]})")
        mask = np.zeros(counts[target], bool)
        mask[ids] = True
        masks.append(mask)
    if (masks[0] & masks[1]).any() or (masks[0] & masks[2]).any() or (masks[1] & masks[2]).any():
        raise ValueError(f"{path / 'split' / 'time' / target}: the splits must be disjoint")
    return HeteroDataset("ogbn-mag", graph, x, target, y.astype(np.int64), *masks,
                         OGB_MAG_CLASSES)
