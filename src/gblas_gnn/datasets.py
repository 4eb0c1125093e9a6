"""Dataset specifications as the command line spells them.

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

from ._io import read_npz
from .data import Dataset, csbm, erdos_renyi_edges, kronecker_edges, load_planetoid

__all__ = ["parse_dataset", "default_normalize_features", "synthetic_labels_note",
           "DATASET_KINDS", "SYNTHETIC_LABELS"]

DATASET_KINDS = ("csbm", "planetoid", "npz", "kronecker", "erdos_renyi")
#: kinds whose labels are a random function of random features, unrelated to the graph
SYNTHETIC_LABELS = ("kronecker", "erdos_renyi")
_NPZ_KEYS = ("row", "col", "shape", "x", "y", "train_mask", "val_mask", "test_mask")


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
                  dtype=np.float32, normalize_features: bool | None = None) -> Dataset:
    """Build the :class:`~gblas_gnn.data.Dataset` a spec names (see the module docstring).

    ``normalize_features``: divide each feature row by its sum (PyG's ``NormalizeFeatures``);
    ``None`` is the kind's default (:func:`default_normalize_features`: on for planetoid).

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
    if kind == "kronecker":
        kw = _keywords(arg, spec)
        unknown = set(kw) - {"scale", "edge_factor"}
        if "scale" not in kw or unknown:
            raise ValueError(f"kronecker needs scale=S[,edge_factor=E], got {arg!r}")
        return synthetic_dataset(kw["scale"], kw.get("edge_factor", 16), seed=seed,
                                 features=features, classes=classes, dtype=dtype)
    if kind == "erdos_renyi":
        kw = _keywords(arg, spec)
        if set(kw) != {"n", "degree"}:
            raise ValueError(f"erdos_renyi needs n=N,degree=D, got {arg!r}")
        n, degree = kw["n"], kw["degree"]
        if isinstance(n, float) or n < 1:
            raise ValueError(f"erdos_renyi: n must be a positive integer, got {n!r}")
        if not 0 <= degree <= n - 1:
            raise ValueError(f"erdos_renyi: degree must lie in [0, n - 1 = {n - 1}], "
                             f"got {degree!r}")
        src, dst, _ = erdos_renyi_edges(n, degree / n, seed=seed)
        return _synthetic_task(f"ErdosRenyi-{n}-{degree}", src, dst, n, seed=seed,
                               features=features, classes=classes, dtype=dtype)
    raise ValueError(f"unknown dataset {spec!r}; use one of {', '.join(DATASET_KINDS)} "
                     "(e.g. csbm, planetoid:DIR/cora, npz:PATH, kronecker:scale=10, "
                     "erdos_renyi:n=1000,degree=8)")


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
                      classes: int = 4, dtype=np.float32) -> Dataset:
    """Kronecker graph with Gaussian features, labels ``argmax(x R)`` for a random ``R`` and a
    random 60/20/20 split (for throughput runs)."""
    src, dst, n = kronecker_edges(scale, edge_factor, seed=seed)
    return _synthetic_task(f"Kronecker-{scale}-{edge_factor}", src, dst, n, seed=seed,
                           features=features, classes=classes, dtype=dtype)


def _synthetic_task(name: str, src: np.ndarray, dst: np.ndarray, n: int, *, seed: int,
                    features: int, classes: int, dtype) -> Dataset:
    """The graph ``src → dst`` with Gaussian features, labels ``argmax(x R)`` for a random
    ``R`` and a random 60/20/20 split."""
    adjacency = sp.csr_matrix((np.ones(src.size, dtype=dtype), (dst, src)), shape=(n, n))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, features)).astype(dtype)
    y = np.argmax(x @ rng.standard_normal((features, classes)), axis=1).astype(np.int64)
    part = rng.permutation(n)
    masks = [np.zeros(n, dtype=bool) for _ in range(3)]
    cuts = np.array([0, 0.6 * n, 0.8 * n, n]).astype(int)
    for mask, lo, hi in zip(masks, cuts[:-1], cuts[1:], strict=True):
        mask[part[lo:hi]] = True
    return Dataset(name, adjacency, x, y, *masks, classes)


def _load_npz_dataset(path: Path) -> Dataset:
    arrays = read_npz(path, "dataset file")
    missing = [k for k in _NPZ_KEYS if k not in arrays]
    if missing:
        raise ValueError(f"{path} lacks {missing}; a dataset .npz holds {list(_NPZ_KEYS)}")
    n = int(arrays["shape"][0])
    data = arrays.get("data", np.ones(arrays["row"].shape[0], dtype=np.float32))
    adjacency = sp.csr_matrix((data, (arrays["row"], arrays["col"])),
                              shape=tuple(arrays["shape"]))
    y = arrays["y"]
    num_classes = int(arrays["num_classes"]) if "num_classes" in arrays else int(y.max()) + 1
    return Dataset(path.stem, adjacency, arrays["x"], y, arrays["train_mask"],
                   arrays["val_mask"], arrays["test_mask"], num_classes if n else 0)
