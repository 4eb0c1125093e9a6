"""Loader for the Planetoid citation data sets (Cora, CiteSeer, PubMed).

Reads the original files ``ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}``
(Yang et al. 2016, as redistributed by Kipf & Welling) and reproduces PyTorch
Geometric's ``Planetoid(root, name)`` with the default ``split="public"`` and no
transform (``torch_geometric.io.planetoid.read_planetoid_data``):

* features ``x = [allx; tx]`` (dense float32), labels
  ``y = argmax([ally; ty], axis=1)``, then the test block is put back in the
  original vertex order: ``x[test_index] = x[sorted(test_index)]`` (same for ``y``);
* CiteSeer only: the test indices are not contiguous (isolated vertices were left
  out), so ``tx``/``ty`` are first padded with zero rows to
  ``max(test_index) - min(test_index) + 1`` rows; the padded vertices get all-zero
  features and label 0 (argmax of a zero row), and belong to no split;
* masks: train = ``range(len(y))`` (20 per class), val =
  ``range(len(y), len(y) + 500)``, test = ``test_index``;
* graph: ``graph[u]`` lists the neighbours of ``u``; every ``u -> v`` and its
  reverse are stored (``A = A^T``), duplicates merged, self loops removed.  For Cora
  and CiteSeer the list is already symmetric, so this equals PyG's
  ``remove_self_loops`` + ``coalesce``: Cora 10 556 stored entries, CiteSeer 9 104.

The pickles are read with a restricted unpickler (see ``_safe_pickle``): a file that
references anything but the numpy / scipy / collections names these files use is
rejected with ``ValueError`` and nothing in it is executed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ._safe_pickle import safe_load
from .dataset import Dataset

__all__ = ["load_planetoid", "find_planetoid_root", "PLANETOID_NAMES"]

#: lower-case key -> canonical name (the names PyG uses).
PLANETOID_NAMES: dict[str, str] = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
_PICKLED = ("x", "tx", "allx", "y", "ty", "ally", "graph")
_ENV = "GBLAS_GNN_PLANETOID"


def find_planetoid_root() -> Path | None:
    """Locate a directory with the Planetoid files, or ``None``.

    Looks at ``$GBLAS_GNN_PLANETOID``, then ``../shared/data/planetoid`` relative to
    the current directory and to the source checkout (``<repo>/../shared/...``).
    Only directories holding ``ind.cora.graph`` or ``ind.citeseer.graph`` count.
    """
    cands: list[Path] = []
    env = os.environ.get(_ENV)
    if env:
        cands.append(Path(env))
    cands.append(Path.cwd() / ".." / "shared" / "data" / "planetoid")
    here = Path(__file__).resolve()
    if len(here.parents) > 3:  # <repo>/src/gblas_gnn/data/planetoid.py
        cands.append(here.parents[3].parent / "shared" / "data" / "planetoid")
    for c in cands:
        if (c / "ind.cora.graph").is_file() or (c / "ind.citeseer.graph").is_file():
            return c.resolve()
    return None


def _resolve_dir(root: Path, key: str, canonical: str) -> Path:
    if not root.exists():
        raise FileNotFoundError(f"Planetoid directory not found: {root}")
    if not root.is_dir():
        raise NotADirectoryError(f"Planetoid root is not a directory: {root}")
    if not (root / f"ind.{key}.graph").exists():
        raw = root / canonical / "raw"  # PyG's on-disk layout
        if (raw / f"ind.{key}.graph").exists():
            return raw
    return root


def _dense_features(obj: Any, path: Path) -> np.ndarray:
    if sp.issparse(obj):
        arr = obj.toarray()
    elif isinstance(obj, np.ndarray) and obj.ndim == 2:
        arr = obj
    else:
        raise ValueError(f"{path}: expected a 2-D feature matrix, got {type(obj).__name__}")
    if not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{path}: non-numeric feature dtype {arr.dtype}")
    arr = arr.astype(np.float32)
    if not np.isfinite(arr).all():
        raise ValueError(f"{path}: features contain NaN or Inf")
    return arr


def _labels(obj: Any, path: Path) -> np.ndarray:
    if not isinstance(obj, np.ndarray) or obj.ndim != 2:
        raise ValueError(f"{path}: expected a 2-D one-hot label array, got {type(obj).__name__}")
    if not np.issubdtype(obj.dtype, np.number):
        raise ValueError(f"{path}: non-numeric label dtype {obj.dtype}")
    return obj


def _read_test_index(path: Path) -> np.ndarray:
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    try:
        text = path.read_text(encoding="ascii")
        idx = np.array([int(tok) for tok in text.split()], dtype=np.int64)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: corrupt test index file ({exc})") from None
    if idx.size == 0:
        raise ValueError(f"{path}: empty test index file")
    if idx.min() < 0:
        raise ValueError(f"{path}: negative vertex id in test index")
    if np.unique(idx).size != idx.size:
        raise ValueError(f"{path}: duplicate vertex ids in test index")
    return idx


def _edges_from_dict(graph: Any, n: int, path: Path) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(graph, Mapping):
        raise ValueError(f"{path}: expected a dict of adjacency lists, got {type(graph).__name__}")
    rows: list[int] = []
    cols: list[int] = []
    for key, nbrs in graph.items():
        if not isinstance(nbrs, list | tuple):
            raise ValueError(f"{path}: adjacency list of {key!r} is {type(nbrs).__name__}")
        rows.extend([key] * len(nbrs))
        cols.extend(nbrs)
    try:
        src = np.array(rows, dtype=np.int64)
        dst = np.array(cols, dtype=np.int64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"{path}: non-integer vertex id in graph ({exc})") from None
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
        raise ValueError(f"{path}: vertex id outside [0, {n})")
    return src, dst


def _row_normalize(x: np.ndarray) -> np.ndarray:
    # PyG NormalizeFeatures: x <- x - min(x); x <- x / clamp(rowsum, min=1)
    x = x - x.min() if x.size else x
    s = np.maximum(x.sum(axis=1, keepdims=True, dtype=np.float64), 1.0)
    return (x / s).astype(np.float32)


def load_planetoid(
    root: str | os.PathLike[str], name: str, *, normalize_features: bool = False
) -> Dataset:
    """Load Cora / CiteSeer / PubMed exactly as PyG's ``Planetoid`` (public split).

    Parameters
    ----------
    root : str or PathLike
        Directory holding ``ind.<name>.*`` (or PyG's ``<root>/<Name>/raw``).
    name : str
        ``"Cora"``, ``"CiteSeer"`` or ``"PubMed"`` (case-insensitive).  PubMed uses
        the same code path but was not checked against real files here.
    normalize_features : bool
        If true, apply PyG's ``NormalizeFeatures``: subtract the global minimum,
        then divide each row by ``max(row sum, 1)``.  Off by default, as in
        ``Planetoid`` without a transform.

    Returns
    -------
    Dataset
        ``x`` float32 dense ``(n, f)``, ``y`` int64, boolean masks, symmetric 0/1
        float32 adjacency without self loops.

    Raises
    ------
    ValueError
        Unknown ``name``; a pickle referencing a forbidden global (the message names
        the file and the global); a truncated or inconsistent file.
    FileNotFoundError
        ``root`` or one of the eight files is missing (the message names it).
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    key = name.lower()
    if key not in PLANETOID_NAMES:
        raise ValueError(
            f"unknown Planetoid data set {name!r}; expected one of "
            f"{sorted(PLANETOID_NAMES.values())}"
        )
    canonical = PLANETOID_NAMES[key]
    folder = _resolve_dir(Path(root), key, canonical)

    def path_of(suffix: str) -> Path:
        return folder / f"ind.{key}.{suffix}"

    # check every file exists before parsing any (clear error, no partial work)
    for suffix in (*_PICKLED, "test.index"):
        if not path_of(suffix).is_file():
            raise FileNotFoundError(f"data file not found: {path_of(suffix)}")
    raw = {s: safe_load(path_of(s)) for s in _PICKLED}
    test_index = _read_test_index(path_of("test.index"))

    tx = _dense_features(raw["tx"], path_of("tx"))
    allx = _dense_features(raw["allx"], path_of("allx"))
    _dense_features(raw["x"], path_of("x"))  # validated, as PyG reads it too
    y_train = _labels(raw["y"], path_of("y"))
    ty = _labels(raw["ty"], path_of("ty"))
    ally = _labels(raw["ally"], path_of("ally"))

    f = allx.shape[1]
    c = ally.shape[1]
    if tx.shape[1] != f:
        raise ValueError(f"{path_of('tx')}: {tx.shape[1]} feature columns, allx has {f}")
    if ty.shape[1] != c or y_train.shape[1] != c:
        raise ValueError(f"{folder}: y / ty / ally disagree on the number of classes")
    if tx.shape[0] != ty.shape[0] or tx.shape[0] != test_index.size:
        raise ValueError(
            f"{folder}: tx ({tx.shape[0]}), ty ({ty.shape[0]}) and test.index "
            f"({test_index.size}) disagree on the number of test vertices"
        )
    if allx.shape[0] != ally.shape[0]:
        raise ValueError(f"{folder}: allx ({allx.shape[0]}) and ally ({ally.shape[0]}) differ")
    sorted_test = np.sort(test_index)
    if key == "citeseer":
        lo = int(sorted_test[0])
        span = int(sorted_test[-1]) - lo + 1
        tx_ext = np.zeros((span, f), dtype=tx.dtype)
        tx_ext[sorted_test - lo] = tx
        ty_ext = np.zeros((span, c), dtype=ty.dtype)
        ty_ext[sorted_test - lo] = ty
        tx, ty = tx_ext, ty_ext

    x = np.concatenate([allx, tx], axis=0)
    n = x.shape[0]
    if sorted_test[-1] >= n or sorted_test[0] < allx.shape[0]:
        raise ValueError(f"{path_of('test.index')}: test ids must lie in [{allx.shape[0]}, {n})")
    ntrain = y_train.shape[0]
    if ntrain + 500 > allx.shape[0]:
        raise ValueError(f"{folder}: {ntrain} training + 500 validation rows exceed allx")
    x[test_index] = x[sorted_test]
    y = np.argmax(np.concatenate([ally, ty], axis=0), axis=1).astype(np.int64)
    y[test_index] = y[sorted_test]

    src, dst = _edges_from_dict(raw["graph"], n, path_of("graph"))
    keep = src != dst
    src, dst = src[keep], dst[keep]
    rows = np.concatenate([dst, src])
    cols = np.concatenate([src, dst])
    adj = sp.csr_matrix((np.ones(rows.size, dtype=np.float32), (rows, cols)), shape=(n, n))
    adj.sum_duplicates()
    adj.data[:] = 1.0  # merged duplicates count once
    adj.sort_indices()

    if normalize_features:
        x = _row_normalize(x)

    train_mask = np.zeros(n, dtype=bool)
    train_mask[:ntrain] = True
    val_mask = np.zeros(n, dtype=bool)
    val_mask[ntrain : ntrain + 500] = True
    test_mask = np.zeros(n, dtype=bool)
    test_mask[test_index] = True
    return Dataset(
        name=canonical,
        adjacency=adj,
        x=x,
        y=y,
        train_mask=train_mask,
        val_mask=val_mask,
        test_mask=test_mask,
        num_classes=c,
    )
