"""Data set specifications as the command line spells them (used by the command and by the
grid's loaders).

=====================================  ===================================================
spec                                   data set
=====================================  ===================================================
``csbm`` or ``csbm:n=4000,classes=4``  contextual SBM (the embedded default), keyword args
                                       of :func:`gblas_gnn.data.csbm`
``planetoid:DIR/cora``                 Planetoid Cora / CiteSeer from the original files in DIR,
                                       features row-normalised by default (below)
``npz:PATH``                           a ``.npz`` with ``row``, ``col``, ``shape`` (graph) and
                                       ``x``, ``y``, ``train_mask``, ``val_mask``,
                                       ``test_mask`` (node classification data)
``ogb:DIR/ogbn_arxiv``                 an OGB node-property data set (arxiv, products,
                                       papers100M) in the folder OGB's downloader leaves
                                       (:mod:`gblas_gnn.data.ogb`; never downloaded)
``kronecker:scale=S,edge_factor=E``    Graph500 Kronecker graph (2^S vertices, E·2^S edges)
                                       with synthetic features and labels
``erdos_renyi:n=N,degree=D``           Erdős–Rényi graph (N vertices, average in-degree D)
                                       with synthetic features and labels
=====================================  ===================================================

The two generated graphs are throughput workloads: their features are Gaussian noise and
their labels ``argmax(x R)`` for a random ``R``, unrelated to the graph, so the accuracy a
model reaches on them says nothing about learning on graphs (:func:`synthetic_labels_note`
is what the command prints about it).

Feature normalisation: PyG's Planetoid examples (GCN, GAT, AGNN, SGC) load the data with
``T.NormalizeFeatures()``, which divides each bag-of-words row by its sum; the published
accuracies are measured that way. ``planetoid`` specs therefore normalise by default
(``normalize_features=None``); pass ``False`` for the raw 0/1 features. The option applies to
``planetoid`` only: asking for it on another kind is an error, not a silent no-op.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .._io import read_npz
from .csbm import csbm
from .dataset import Dataset
from .erdos_renyi import erdos_renyi_edges
from .kronecker import kronecker_edges
from .ogb import load_ogb
from .planetoid import load_planetoid

__all__ = ["parse_dataset", "default_normalize_features", "synthetic_labels_note",
           "DATASET_KINDS", "SYNTHETIC_LABELS"]

DATASET_KINDS = ("csbm", "planetoid", "npz", "ogb", "kronecker", "erdos_renyi")
#: kinds whose labels are a random function of random features, unrelated to the graph
SYNTHETIC_LABELS = ("kronecker", "erdos_renyi")
NPZ_KEYS = ("row", "col", "shape", "x", "y", "train_mask", "val_mask", "test_mask")


def default_normalize_features(spec: str) -> bool:
    """Whether ``spec`` gets row-normalised features unless told otherwise (planetoid only)."""
    return spec.partition(":")[0] == "planetoid"


def synthetic_labels_note(spec: str) -> str | None:
    """What to say about an accuracy measured on ``spec`` when its labels are synthetic
    (``None`` for real or learnable data)."""
    kind = spec.partition(":")[0]
    if kind not in SYNTHETIC_LABELS:
        return None
    return (f"note: {kind} labels are argmax(x R) of random features x and a random R, "
            "unrelated to the graph: this accuracy says nothing about learning on graphs "
            "(the data set is a throughput workload)")


def parse_dataset(spec: str, *, seed: int = 0, features: int = 32, classes: int = 4,
                  dtype=np.float32, normalize_features: bool | None = None,
                  progress: bool | None = None) -> Dataset:
    """Build the :class:`~gblas_gnn.data.Dataset` a spec names (see the module docstring).

    ``normalize_features``: divide each feature row by its sum (PyG's ``NormalizeFeatures``);
    ``None`` is the kind's default (:func:`default_normalize_features`: on for planetoid).
    ``progress``: generators and loaders show a bar for graphs from 10⁷ edges (``False``:
    never).

    Raises ``ValueError`` for an unknown kind, malformed arguments or ``normalize_features``
    on a kind other than planetoid, and ``FileNotFoundError`` for a missing file or directory.
    """
    kind, _, arg = spec.partition(":")
    if normalize_features is None:
        normalize_features = default_normalize_features(spec)
    if normalize_features and kind != "planetoid":
        raise ValueError(f"feature normalisation applies to planetoid data sets only, not "
                         f"{spec!r}")
    if kind == "csbm":
        return csbm(**_keywords(arg, spec), seed=seed, dtype=dtype)
    if kind == "planetoid":
        if not arg:
            raise ValueError("planetoid needs a path: planetoid:DIR/cora or planetoid:DIR/citeseer")
        path = Path(arg)
        return load_planetoid(path.parent, path.name,
                              normalize_features=bool(normalize_features))
    if kind == "npz":
        return _load_npz_dataset(Path(arg))
    if kind == "ogb":
        if not arg:
            raise ValueError("ogb needs a folder: ogb:DIR/ogbn_arxiv (or ogbn_products, "
                             "ogbn_papers100M)")
        return load_ogb(Path(arg), dtype=dtype, progress=progress)
    if kind == "kronecker":
        name, kw = generated_spec(spec)
        return synthetic_dataset(kw["scale"], kw.get("edge_factor", 16), seed=seed,
                                 features=features, classes=classes, dtype=dtype,
                                 progress=progress)
    if kind == "erdos_renyi":
        name, kw = generated_spec(spec)
        src, dst, _ = erdos_renyi_edges(kw["n"], kw["degree"] / kw["n"], seed=seed,
                                        progress=progress)
        return _synthetic_task(name, src, dst, kw["n"], seed=seed, features=features,
                               classes=classes, dtype=dtype)
    raise ValueError(f"unknown dataset {spec!r}; use one of {', '.join(DATASET_KINDS)} "
                     "(e.g. csbm, planetoid:DIR/cora, npz:PATH, ogb:DIR/ogbn_arxiv, "
                     "kronecker:scale=10, "
                     "erdos_renyi:n=1000,degree=8)")


def generated_spec(spec: str) -> tuple[str, dict]:
    """``(name, arguments)`` of a ``kronecker:`` or ``erdos_renyi:`` spec, validated."""
    kind, _, arg = spec.partition(":")
    kw = _keywords(arg, spec)
    if kind == "kronecker":
        if "scale" not in kw or set(kw) - {"scale", "edge_factor"}:
            raise ValueError(f"kronecker needs scale=S[,edge_factor=E], got {arg!r}")
        return f"Kronecker-{kw['scale']}-{kw.get('edge_factor', 16)}", kw
    if set(kw) != {"n", "degree"}:
        raise ValueError(f"erdos_renyi needs n=N,degree=D, got {arg!r}")
    n, degree = kw["n"], kw["degree"]
    if isinstance(n, float) or n < 1:
        raise ValueError(f"erdos_renyi: n must be a positive integer, got {n!r}")
    if not 0 <= degree <= n - 1:
        raise ValueError(f"erdos_renyi: degree must lie in [0, n - 1 = {n - 1}], "
                         f"got {degree!r}")
    return f"ErdosRenyi-{n}-{degree}", kw


def _keywords(arg: str, spec: str) -> dict:
    out = {}
    for item in filter(None, arg.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"malformed dataset argument {item!r} in {spec!r}: use key=value")
        try:
            out[key.strip()] = int(value)
        except ValueError:
            try:
                out[key.strip()] = float(value)
            except ValueError as exc:
                raise ValueError(f"{key} must be a number, got {value!r}") from exc
    return out


def synthetic_dataset(scale: int, edge_factor: int = 16, *, seed: int = 0, features: int = 32,
                      classes: int = 4, dtype=np.float32,
                      progress: bool | None = None) -> Dataset:
    """Kronecker graph with Gaussian features, labels ``argmax(x R)`` for a random ``R`` and a
    random 60/20/20 split (for throughput runs)."""
    src, dst, n = kronecker_edges(scale, edge_factor, seed=seed, progress=progress)
    return _synthetic_task(f"Kronecker-{scale}-{edge_factor}", src, dst, n, seed=seed,
                           features=features, classes=classes, dtype=dtype)


#: rows of features drawn from one generator (a process draws the chunks of its rows)
_FEATURE_ROWS = 1 << 16
#: spawn keys of the streams of R and of the split, past any chunk id
_R_STREAM, _SPLIT_STREAM = 1 << 40, (1 << 40) + 1


def synthetic_rows(n: int, rows: np.ndarray, *, seed: int, features: int, classes: int,
                   dtype) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """``(x, y, [train, val, test])`` of the synthetic task at the vertices ``rows``
    (sorted global ids): Gaussian features, labels ``argmax(x R)`` for a random ``R`` and a
    random 60/20/20 split of all n vertices.

    Features come in chunks of rows, each from its own generator
    (``SeedSequence(seed, spawn_key=(chunk,))``), ``R`` and the split from their own
    streams, so any process computes the rows it holds and all agree with one process.
    """
    rows = np.asarray(rows, np.int64)
    x = np.empty((rows.size, features), dtype)
    for chunk in np.unique(rows // _FEATURE_ROWS):
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(int(chunk),)))
        lo = int(chunk) * _FEATURE_ROWS
        block = rng.standard_normal((min(_FEATURE_ROWS, n - lo), features)).astype(dtype)
        here = (rows // _FEATURE_ROWS) == chunk
        x[here] = block[rows[here] - lo]
    R = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_R_STREAM,)))
    y = np.argmax(x.astype(np.float64) @ R.standard_normal((features, classes)), axis=1)
    order = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_SPLIT_STREAM,)))
    place = np.empty(n, np.int64)
    place[order.permutation(n)] = np.arange(n)           # where each vertex is in the split
    cuts = np.array([0, 0.6 * n, 0.8 * n, n]).astype(int)
    at = place[rows]
    masks = [(at >= lo) & (at < hi) for lo, hi in zip(cuts[:-1], cuts[1:], strict=True)]
    return x, y.astype(np.int64), masks


def _synthetic_task(name: str, src: np.ndarray, dst: np.ndarray, n: int, *, seed: int,
                    features: int, classes: int, dtype) -> Dataset:
    """The graph ``src → dst`` with the features, labels and split of
    :func:`synthetic_rows`."""
    adjacency = sp.csr_matrix((np.ones(src.size, dtype=dtype), (dst, src)), shape=(n, n))
    x, y, masks = synthetic_rows(n, np.arange(n), seed=seed, features=features,
                                 classes=classes, dtype=dtype)
    return Dataset(name, adjacency, x, y, *masks, classes)


def _load_npz_dataset(path: Path) -> Dataset:
    arrays = read_npz(path, "dataset file")
    missing = [k for k in NPZ_KEYS if k not in arrays]
    if missing:
        raise ValueError(f"{path} lacks {missing}; a dataset .npz holds {list(NPZ_KEYS)}")
    n = int(arrays["shape"][0])
    m = arrays["row"].shape[0]
    data = arrays.get("data", np.ones(m, dtype=np.float32))
    edge_attr = arrays.get("edge_attr")
    if edge_attr is not None:               # the features follow the entries into CSR order
        data = np.arange(1, m + 1, dtype=np.float64)
    adjacency = sp.csr_matrix((data, (arrays["row"], arrays["col"])),
                              shape=tuple(arrays["shape"]))
    if edge_attr is not None:
        if adjacency.nnz != m:
            raise ValueError(f"{path}: an entry is given twice, and the entries carry "
                             "edge_attr (a duplicate edge with two sets of features)")
        if edge_attr.shape[:1] != (m,):
            raise ValueError(f"{path}: edge_attr has {edge_attr.shape[0]} rows for {m} "
                             "entries")
        at = adjacency.data.astype(np.int64) - 1
        edge_attr = edge_attr[at]
        adjacency.data = np.asarray(arrays.get("data", np.ones(m, np.float32)))[at]
    y = arrays["y"]
    num_classes = int(arrays["num_classes"]) if "num_classes" in arrays else int(y.max()) + 1
    name = str(arrays["name"]) if "name" in arrays else path.stem
    return Dataset(name, adjacency, arrays["x"], y, arrays["train_mask"],
                   arrays["val_mask"], arrays["test_mask"], num_classes if n else 0,
                   edge_attr=edge_attr)
