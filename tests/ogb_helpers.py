"""Small OGB node-property folders in OGB's own layout, written by the tests themselves
(``raw/*.csv.gz`` and ``split/<scheme>/*.csv.gz``, or papers100M's ``raw/data.npz`` and
``raw/node-label.npz``), with the arrays a correct reader must return."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

SCHEMES = {"ogbn-arxiv": "time", "ogbn-products": "sales_ranking", "ogbn-papers100M": "time"}
CLASSES = {"ogbn-arxiv": 40, "ogbn-products": 47, "ogbn-papers100M": 172}


def write_csv_gz(path: Path, rows, fmt: str = "{}") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = rows if isinstance(rows, list) else list(np.atleast_1d(rows))
    with gzip.open(path, "wt") as f:
        for row in rows:
            f.write(",".join(fmt.format(v) for v in np.atleast_1d(row)) + "\n")


def toy(n: int = 60, m: int = 240, f: int = 6, seed: int = 0, classes: int = 4,
        unlabelled: int = 0) -> dict:
    """Edges, features, labels (NaN for the last ``unlabelled`` vertices) and a split of
    the labelled vertices (60/20/20)."""
    rng = np.random.default_rng(seed)
    edges = rng.integers(0, n, (m, 2))
    x = rng.standard_normal((n, f)).astype(np.float32)
    y = rng.integers(0, classes, n).astype(np.float64)
    y[n - unlabelled:] = np.nan
    order = rng.permutation(n - unlabelled)
    cut = [int(0.6 * order.size), int(0.8 * order.size)]
    split = {"train": np.sort(order[:cut[0]]), "valid": np.sort(order[cut[0]:cut[1]]),
             "test": np.sort(order[cut[1]:])}
    return {"n": n, "edges": edges, "x": x, "y": y, "split": split}


def write_ogb(root: Path, name: str, data: dict) -> Path:
    """Write ``data`` (from :func:`toy`) as the OGB folder of ``name``; returns its path."""
    folder = Path(root) / name.replace("-", "_")
    raw = folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    if name == "ogbn-papers100M":
        np.savez_compressed(raw / "data.npz", edge_index=data["edges"].T.copy(),
                            node_feat=data["x"], node_year=np.zeros((data["n"], 1), np.int64),
                            num_nodes_list=np.array([data["n"]]),
                            num_edges_list=np.array([len(data["edges"])]))
        np.savez_compressed(raw / "node-label.npz", node_label=data["y"][:, None])
    else:
        write_csv_gz(raw / "edge.csv.gz", data["edges"])
        if "edge_feat" in data:                     # ogbn-proteins' layout
            write_csv_gz(raw / "edge-feat.csv.gz", data["edge_feat"], "{:.9g}")
        write_csv_gz(raw / "node-feat.csv.gz", data["x"], "{:.9g}")
        write_csv_gz(raw / "node-label.csv.gz", data["y"].astype(np.int64))
        write_csv_gz(raw / "num-node-list.csv.gz", [data["n"]])
        write_csv_gz(raw / "num-edge-list.csv.gz", [len(data["edges"])])
    for part, ids in data["split"].items():
        write_csv_gz(folder / "split" / SCHEMES[name] / f"{part}.csv.gz", ids)
    return folder
