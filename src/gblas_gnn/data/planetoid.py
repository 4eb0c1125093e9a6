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


def _expected(key: str = "<name>") -> str:
    """What a Planetoid folder must hold (the end of every not-found message)."""
    which = " (name: cora, citeseer or pubmed)" if key == "<name>" else ""
    return (f"the folder must hold the original Planetoid files ind.{key}.{{x,y,tx,ty,allx,"
            f"ally,graph,test.index}}{which}, directly or in PyG's <Name>/raw/; nothing is "
            "downloaded")


def find_planetoid_root(root: str | os.PathLike[str] | None = None) -> Path | None:
    """The folder of the Planetoid files: ``root``, else ``$GBLAS_GNN_PLANETOID``.

    The library looks nowhere else: the caller says where the files are.

    Parameters
    ----------
    root : str, PathLike or None
        The folder; ``None`` reads ``$GBLAS_GNN_PLANETOID``.

    Returns
    -------
    pathlib.Path or None
        The resolved folder, or ``None`` when neither ``root`` nor the variable is given
        (so a caller can fall back to other data).

    Raises
    ------
    FileNotFoundError
        The folder given (by argument or by the variable, which the message names) does not
        exist, or holds no ``ind.<name>.graph`` of a Planetoid data set; the message says
        which files are expected.
    """
    given = root if root is not None else (os.environ.get(_ENV) or None)
    if given is None:
        return None
    folder = Path(given)
    where = "" if root is not None else f" (from ${_ENV})"
    if not folder.is_dir():
        raise FileNotFoundError(f"Planetoid folder not found: {folder}{where}; {_expected()}")
    if not any((_resolve_dir(folder, key, canonical) / f"ind.{key}.graph").is_file()
               for key, canonical in PLANETOID_NAMES.items()):
        raise FileNotFoundError(f"{folder}{where} holds no Planetoid files; {_expected()}")
    return folder.resolve()


def _resolve_dir(root: Path, key: str, canonical: str) -> Path:
    if not root.exists():
        raise FileNotFoundError(f"Planetoid folder not found: {root}; {_expected(key)}")
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
    root: str | os.PathLike[str] | None, name: str, *, normalize_features: bool = False
) -> Dataset:
    """Load Cora / CiteSeer / PubMed exactly as PyG's ``Planetoid`` (public split).

    Nothing is downloaded: the original files must be at hand.

    Parameters
    ----------
    root : str, PathLike or None
        Directory holding ``ind.<name>.*`` (or PyG's ``<root>/<Name>/raw``); ``None``
        reads ``$GBLAS_GNN_PLANETOID``.
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
        No folder given (``root`` is None and ``$GBLAS_GNN_PLANETOID`` unset), or the folder
        or one of the eight files is missing (the message names it and the files expected).
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
    if root is None:
        root = find_planetoid_root()
        if root is None:
            raise FileNotFoundError(f"no Planetoid folder given: pass its path or set "
                                    f"${_ENV}; {_expected(key)}")
    folder = _resolve_dir(Path(root), key, canonical)

    def path_of(suffix: str) -> Path:
        return folder / f"ind.{key}.{suffix}"

    # check every file exists before parsing any (clear error, no partial work)
    for suffix in (*_PICKLED, "test.index"):
        if not path_of(suffix).is_file():
            raise FileNotFoundError(f"data file not found: {path_of(suffix)}; "
                                    f"{_expected(key)}")
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
