"""OGB node-property data sets (ogbn-arxiv, ogbn-products, ogbn-papers100M) read from the
folder OGB's own downloader leaves; nothing is ever downloaded and the ``ogb`` package is not
needed.

The folder (``ogb.nodeproppred.NodePropPredDataset(name, root=DIR)`` makes
``DIR/ogbn_arxiv``; unzipping OGB's ``arxiv.zip`` gives the same folder named ``arxiv``)::

    ogbn_arxiv/raw/edge.csv.gz            one edge "source,target" per line
              /raw/num-node-list.csv.gz    the number of vertices n (one graph)
              /raw/num-edge-list.csv.gz    the number of edges in edge.csv.gz
              /raw/node-feat.csv.gz        n lines of comma-separated floats
              /raw/node-label.csv.gz       n lines, one class each
              /raw/edge-feat.csv.gz        optional (ogbn-proteins' layout): one line of
                                           comma-separated floats per edge of edge.csv.gz
              /split/time/{train,valid,test}.csv.gz   one vertex id per line
    ogbn_papers100M/raw/data.npz          edge_index (2, E), node_feat (n, f),
                                          num_nodes_list, num_edges_list (OGB's "binary")
                   /raw/node-label.npz     node_label (n,) or (n, 1), NaN = unlabelled

OGB's per-data-set conventions (its ``nodeproppred/master.csv``), followed here:

=================  ================  ==============  =======  ========
data set           add_inverse_edge  split           classes  binary
=================  ================  ==============  =======  ========
ogbn-arxiv         False             time            40       False
ogbn-products      True              sales_ranking   47       False
ogbn-papers100M    False             time            172      True
=================  ================  ==============  =======  ========

``add_inverse_edge`` (products): every edge of ``edge.csv.gz`` is stored in both
directions. arxiv and papers100M are directed citation graphs and stay directed, as OGB
leaves them (PyG's and OGB's examples symmetrise them themselves; so can you, e.g. with
``gblas-gnn convert``'s input being your own symmetrised ``.npz``). An edge ``s,t`` of the
file is the entry ``A[t, s]`` (row = target, PyG's ``edge_index`` convention); duplicate
entries are merged into one (the library's convention, :class:`~gblas_gnn.Graph`), self loops
are kept as given. Vertices without a label (papers100M: NaN) get label 0 and belong to no
split; a split that names an unlabelled vertex is an error. Where ``raw/edge-feat.csv.gz``
is there, every edge keeps its features (:attr:`gblas_gnn.Graph.edge_attr`; the reverse of
an ``add_inverse_edge`` edge gets the same ones), and a duplicate edge is then an error.
ogbn-proteins (112 binary tasks) and ogbn-mag (heterogeneous) are not single-label node
classification and are refused.

Everything is read front to back in chunks (:mod:`~gblas_gnn.data._csvgz`,
:class:`~gblas_gnn._io.NpyStream`): a caller that keeps only some rows or some edges (a
rank of an MPI grid) never holds the whole file.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .._io import NpyStream
from .._progress import work_bar
from ._csvgz import csv_gz_chunks, first_line
from .dataset import Dataset

__all__ = ["OGB_NODE_DATASETS", "OgbConventions", "OgbFolder", "load_ogb", "ogb_help"]

#: items (numbers) read from a binary member per step
CHUNK_ITEMS = 1 << 22


@dataclass(frozen=True)
class OgbConventions:
    """OGB's description of one node-property data set (``master.csv``)."""

    name: str
    download: str
    add_inverse_edge: bool
    split: str
    num_classes: int
    binary: bool

    @property
    def folder(self) -> str:
        """The folder OGB's downloader makes (``ogbn_arxiv``)."""
        return self.name.replace("-", "_")

    @property
    def url(self) -> str:
        return f"http://snap.stanford.edu/ogb/data/nodeproppred/{self.download}.zip"


OGB_NODE_DATASETS = {c.name: c for c in (
    OgbConventions("ogbn-arxiv", "arxiv", False, "time", 40, False),
    OgbConventions("ogbn-products", "products", True, "sales_ranking", 47, False),
    OgbConventions("ogbn-papers100M", "papers100M-bin", False, "time", 172, True),
)}
_REFUSED = {"ogbn-proteins": "its 112 binary tasks are multi-label prediction",
            "ogbn-mag": "it is a heterogeneous graph (papers, authors, institutions, fields; "
                        "gblas_gnn.data.load_ogb_mag reads it)"}


def ogb_help(path: Path | None = None, conventions: OgbConventions | None = None) -> str:
    """Where to put an OGB data set (``conventions``' one, else ogbn-arxiv as the example),
    and that gblas_gnn does not fetch it."""
    c = conventions or OGB_NODE_DATASETS["ogbn-arxiv"]
    where = f" at {path}" if path is not None else ""
    return (f"gblas_gnn never downloads data sets: put the folder{where} yourself, as OGB's "
            "own downloader leaves it, with raw/ and split/ inside (python -c \"from "
            f"ogb.nodeproppred import NodePropPredDataset as D; D('{c.name}', root='DIR')\" "
            f"makes DIR/{c.folder}; or unzip {c.url} in DIR and rename DIR/{c.download} to "
            f"DIR/{c.folder}); then --dataset ogb:DIR/{c.folder}")


def _conventions(path: Path) -> OgbConventions | None:
    """The data set a folder's name names (``None``: none); a refused one raises."""
    key = path.name.lower().replace("_", "-")
    for c in OGB_NODE_DATASETS.values():
        if key in (c.name.lower(), c.download.lower(), "ogbn-" + c.download.lower()):
            return c
    for name, why in _REFUSED.items():
        if key in (name, name.removeprefix("ogbn-")):
            raise ValueError(f"{path}: {name} is not supported here: {why}, not single-label "
                             "node classification on one vertex set")
    return None


class OgbFolder:
    """An OGB node-property data set folder, checked on construction (files present, one
    graph, sizes that agree) without reading the big files.

    Attributes
    ----------
    path : Path
    conventions : OgbConventions
    n : int
        Vertices.
    raw_edges : int
        Edges in the file (each stored twice when ``conventions.add_inverse_edge``).
    num_features : int

    Raises
    ------
    FileNotFoundError
        The folder, or a file of it, is missing (the message says where to put it).
    ValueError
        An unsupported or unrecognised data set, or files that disagree.
    """

    def __init__(self, path):
        self.path = path = Path(path)
        c = _conventions(path)
        if not path.is_dir():
            raise FileNotFoundError(f"no OGB data set at {path} (no such folder); "
                                    + ogb_help(path, c))
        if c is None:
            raise ValueError(f"{path}: the folder's name does not say which OGB data set it "
                             "holds; name it " + ", ".join(c.folder for c in
                                                          OGB_NODE_DATASETS.values())
                             + " (as OGB's downloader does)")
        self.conventions = c
        raw, split = path / "raw", path / "split" / c.split
        self._split = [split / f"{part}.csv.gz" for part in ("train", "valid", "test")]
        if c.binary:
            self._data, self._labels = raw / "data.npz", raw / "node-label.npz"
            need = [self._data, self._labels]
        else:
            self._edge, self._feat = raw / "edge.csv.gz", raw / "node-feat.csv.gz"
            self._labels = raw / "node-label.csv.gz"
            counts = [raw / "num-node-list.csv.gz", raw / "num-edge-list.csv.gz"]
            need = [self._edge, self._feat, self._labels, *counts]
        missing = [str(p.relative_to(path)) for p in [*need, *self._split] if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"{path} is not a complete {c.name} folder: "
                                    f"{', '.join(missing)} missing; " + ogb_help(path, c))
        if c.binary:
            self.n, self.raw_edges, self.num_features = self._binary_sizes()
        else:
            self.n = self._one_count(counts[0])
            self.raw_edges = self._one_count(counts[1])
            self.num_features = first_line(self._feat).count(b",") + 1
        feat = raw / "edge-feat.csv.gz"
        #: the edges' features file (None: the folder has none)
        self.edge_feat = feat if not c.binary and feat.is_file() else None
        self.num_edge_features = first_line(feat).count(b",") + 1 if self.edge_feat else 0

    # ------------------------------------------------------------------ sizes
    @property
    def name(self) -> str:
        return self.conventions.name

    @property
    def num_entries(self) -> int:
        """Entries of the adjacency before duplicates are merged."""
        return self.raw_edges * (2 if self.conventions.add_inverse_edge else 1)

    def _one_count(self, path: Path) -> int:
        rows = np.concatenate([r for _, r in csv_gz_chunks(path, np.int64, 1)] or
                              [np.zeros((0, 1), np.int64)])
        if rows.shape != (1, 1) or rows[0, 0] < 0:
            raise ValueError(f"{path} must hold one non-negative count (one graph), got "
                             f"{rows.ravel()[:5].tolist()}")
        return int(rows[0, 0])

    def _binary_sizes(self) -> tuple[int, int, int]:
        with NpyStream(self._data, "num_nodes_list", "OGB data file") as s:
            nodes = s.read(int(np.prod(s.shape)))
        with NpyStream(self._data, "num_edges_list", "OGB data file") as s:
            edges = s.read(int(np.prod(s.shape)))
        if nodes.size != 1 or edges.size != 1:
            raise ValueError(f"{self._data} must hold one graph, got num_nodes_list "
                             f"{nodes[:5].tolist()}, num_edges_list {edges[:5].tolist()}")
        n, m = int(nodes[0]), int(edges[0])
        with NpyStream(self._data, "edge_index", "OGB data file") as s:
            _c_order(s, (2, m))
        with NpyStream(self._data, "node_feat", "OGB data file") as s:
            _c_order(s, (n, -1))
            f = int(s.shape[1])
        return n, m, f

    # ------------------------------------------------------------------ edges
    def edges(self, show: bool | None = None, features: bool = False) -> Iterator[tuple]:
        """``(rows, cols)`` of the adjacency's entries (``A[t, s]`` for an edge ``s → t``,
        and ``A[s, t]`` too for ``add_inverse_edge``), chunk by chunk, ids checked; with
        ``features`` (a folder with :attr:`edge_feat`) ``(rows, cols, features)``.
        ``show``: a progress bar from 10⁷ edges (``False``: never)."""
        n, seen = self.n, 0
        source = self._data if self.conventions.binary else self._edge
        raw = self._raw_edges()
        if features:
            raw = _with_features(raw, self.edge_feat, self.num_edge_features)
        with work_bar(self.raw_edges, f"read {source.name}", size=self.num_entries,
                      show=show) as bar:
            for first, src, dst, *feats in raw:
                if src.size and (min(src.min(), dst.min()) < 0 or
                                 max(src.max(), dst.max()) >= n):
                    bad = np.flatnonzero((src < 0) | (src >= n) | (dst < 0) | (dst >= n))[0]
                    raise ValueError(f"{source}: edge {first + bad + 1} "
                                     f"({src[bad]} -> {dst[bad]}) names a vertex outside "
                                     f"[0, {n})")
                seen += src.size
                bar.update(src.size)
                yield dst, src, *feats
                if self.conventions.add_inverse_edge:
                    yield src, dst, *feats
        if seen != self.raw_edges:
            raise ValueError(f"{source} holds {seen} edges but the data set says "
                             f"{self.raw_edges} (num-edge-list / num_edges_list)")

    def _raw_edges(self) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        if not self.conventions.binary:
            for first, rows in csv_gz_chunks(self._edge, np.int64, 2):
                yield first, rows[:, 0], rows[:, 1]
            return
        with NpyStream(self._data, "edge_index", "OGB data file") as s, \
                NpyStream(self._data, "edge_index", "OGB data file") as t:
            t.skip(self.raw_edges)
            for first in range(0, self.raw_edges, CHUNK_ITEMS):
                k = min(CHUNK_ITEMS, self.raw_edges - first)
                yield first, s.read(k).astype(np.int64), t.read(k).astype(np.int64)

    # ------------------------------------------------------------------ vertices
    def node_data(self, rows: np.ndarray | None = None, dtype=np.float32,
                  show: bool | None = None):
        """``(x, y, train_mask, val_mask, test_mask)`` at the vertices ``rows`` (sorted
        global ids; ``None``: all), read front to back keeping only those rows."""
        rows = np.arange(self.n) if rows is None else np.asarray(rows, np.int64)
        x = _keep_rows(self.feature_pieces(dtype, show), rows, self.num_features, dtype)
        return x, *self.labels_and_split(rows)

    def feature_pieces(self, dtype=np.float32, show: bool | None = None
                       ) -> Iterator[tuple[int, np.ndarray]]:
        """``(first row, rows)``: the node features front to back in ``dtype``, checked
        (finite, ``num_features`` columns, n rows in all)."""
        path = self._data if self.conventions.binary else self._feat
        with work_bar(self.n, "read node features", size=self.num_entries, show=show,
                      unit="vertices") as bar:
            for first, piece in _checked(self._feature_chunks(), self.n, self.num_features,
                                         path):
                piece = piece.astype(dtype, copy=False)
                if not np.isfinite(piece).all():
                    raise ValueError(f"{path}: node features contain NaN or Inf (rows "
                                     f"{first}..{first + piece.shape[0] - 1})")
                bar.update(piece.shape[0])
                yield first, piece

    def labels_and_split(self, rows: np.ndarray | None = None):
        """``(y, train_mask, val_mask, test_mask)`` at ``rows`` (``None``: all): labels
        checked against the data set's classes, unlabelled vertices (label 0) in no split."""
        rows = np.arange(self.n) if rows is None else np.asarray(rows, np.int64)
        label = _keep_rows(_checked(self._label_chunks(), self.n, 1, self._labels), rows, 1,
                           np.float64).ravel()
        masks = self._masks(rows)
        labelled = np.isfinite(label)
        for name, mask in zip(("train", "valid", "test"), masks, strict=True):
            if (mask & ~labelled).any():
                bad = rows[np.flatnonzero(mask & ~labelled)[0]]
                raise ValueError(f"{self._split[0].parent / name}.csv.gz names vertex {bad}, "
                                 f"which has no label in {self._labels}")
        c = self.conventions.num_classes
        values = label[labelled]
        if values.size and ((values != np.round(values)).any() or values.min() < 0 or
                            values.max() >= c):
            raise ValueError(f"{self._labels}: labels must be whole numbers in [0, {c}) "
                             f"({self.name} has {c} classes), got range "
                             f"[{values.min():g}, {values.max():g}]")
        return np.where(labelled, label, 0).astype(np.int64), *masks

    def _feature_chunks(self) -> Iterator[tuple[int, np.ndarray]]:
        if not self.conventions.binary:
            yield from csv_gz_chunks(self._feat, np.float32, self.num_features)
            return
        with NpyStream(self._data, "node_feat", "OGB data file") as s:
            yield from _row_chunks(s, self.n, self.num_features)

    def _label_chunks(self) -> Iterator[tuple[int, np.ndarray]]:
        if not self.conventions.binary:
            yield from csv_gz_chunks(self._labels, np.float64, 1)
            return
        with NpyStream(self._labels, "node_label", "OGB label file") as s:
            if s.shape not in ((self.n,), (self.n, 1)):
                raise ValueError(f"{self._labels}: node_label has shape {s.shape}, expected "
                                 f"({self.n},) or ({self.n}, 1)")
            yield from _row_chunks(s, self.n, 1)

    def _masks(self, rows: np.ndarray) -> list[np.ndarray]:
        ids = []
        for path in self._split:
            got = np.concatenate([r[:, 0] for _, r in csv_gz_chunks(path, np.int64, 1)] or
                                 [np.zeros(0, np.int64)])
            if got.size and (got.min() < 0 or got.max() >= self.n):
                raise ValueError(f"{path}: vertex ids outside [0, {self.n})")
            ids.append(np.unique(got))
        for i, j in ((0, 1), (0, 2), (1, 2)):
            both = np.intersect1d(ids[i], ids[j])
            if both.size:
                raise ValueError(f"{self._split[i]} and {self._split[j]} share vertex "
                                 f"{both[0]}: the splits must be disjoint")
        return [np.isin(rows, part, assume_unique=False) for part in ids]


def _with_features(raw, path: Path, width: int) -> Iterator[tuple]:
    """``(first, src, dst, features)``: the edges' chunks with the lines of ``path`` that
    belong to them (the two files are read in chunks of their own sizes)."""
    lines = (rows for _, rows in csv_gz_chunks(path, np.float64, width))
    held = np.zeros((0, width))
    for first, src, dst in raw:
        while held.shape[0] < src.size:
            more = next(lines, None)
            if more is None:
                raise ValueError(f"{path} has fewer lines than the edges")
            held = np.concatenate([held, more])
        if not np.isfinite(held[:src.size]).all():
            raise ValueError(f"{path}: features of edges {first + 1}.. contain NaN or Inf")
        yield first, src, dst, held[:src.size]
        held = held[src.size:]
    if held.shape[0] or next(lines, None) is not None:
        raise ValueError(f"{path} has more lines than the edges")


def _c_order(stream: NpyStream, shape: tuple[int, int]) -> None:
    ok = len(stream.shape) == 2 and stream.shape[0] == shape[0] and \
        (shape[1] < 0 or stream.shape[1] == shape[1])
    if not ok:
        raise ValueError(f"{stream.path}: {stream.key} has shape {stream.shape}, expected "
                         f"{shape}")
    if stream.fortran:
        raise ValueError(f"{stream.path}: {stream.key} is stored in Fortran order; OGB "
                         "writes it in C order (rewrite it with numpy.ascontiguousarray)")


def _row_chunks(stream: NpyStream, n: int, width: int) -> Iterator[tuple[int, np.ndarray]]:
    step = max(1, CHUNK_ITEMS // max(width, 1))
    for first in range(0, n, step):
        k = min(step, n - first)
        yield first, stream.read(k * width).reshape(k, width)


def _checked(chunks, n: int, width: int, path: Path) -> Iterator[tuple[int, np.ndarray]]:
    """The ``(first row, chunk)`` pieces of an ``(n, width)`` array, checked to cover
    exactly n rows of ``width`` columns."""
    seen = 0
    for first, chunk in chunks:
        if chunk.shape[1] != width:
            raise ValueError(f"{path}: {chunk.shape[1]} columns, expected {width}")
        seen = first + chunk.shape[0]
        if seen > n:
            raise ValueError(f"{path} has more than the data set's {n} rows")
        yield first, chunk
    if seen != n:
        raise ValueError(f"{path} has {seen} rows, the data set has {n} vertices")


def _keep_rows(pieces, rows: np.ndarray, width: int, dtype) -> np.ndarray:
    """The ``rows`` (sorted ids) of an array given as ``(first row, chunk)`` pieces."""
    out = np.empty((rows.size, width), dtype)
    for first, chunk in pieces:
        lo, hi = np.searchsorted(rows, [first, first + chunk.shape[0]])
        out[lo:hi] = chunk[rows[lo:hi] - first]
    return out


def load_ogb(path, dtype=np.float32, progress: bool | None = None) -> Dataset:
    """The whole OGB data set at ``path`` (see the module docstring) as a
    :class:`~gblas_gnn.data.Dataset` with features in ``dtype``."""
    folder = OgbFolder(path)
    with_feats = folder.edge_feat is not None
    parts = list(folder.edges(show=progress, features=with_feats))
    dst = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
    src = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
    feats = np.concatenate([p[2] for p in parts]) if with_feats and parts else None
    del parts
    # with features, the entries' positions follow them into the CSR order
    values = np.arange(1, dst.size + 1, dtype=np.float64) if with_feats else \
        np.ones(dst.size, dtype)
    adjacency = sp.csr_matrix((values, (dst, src)), shape=(folder.n, folder.n))
    del dst, src
    adjacency.sum_duplicates()
    edge_attr = None
    if with_feats:
        if adjacency.nnz != values.size:
            raise ValueError(f"{folder.edge_feat}: an edge is given twice, and the edges "
                             "carry features (a duplicate edge with two sets of features)")
        edge_attr = feats[adjacency.data.astype(np.int64) - 1].astype(dtype)
    adjacency.data = np.ones(adjacency.nnz, dtype)     # duplicates merged, not summed
    x, y, *masks = folder.node_data(dtype=dtype, show=progress)
    return Dataset(folder.name, adjacency, x, y, *masks, folder.conventions.num_classes,
                   edge_attr=edge_attr)
