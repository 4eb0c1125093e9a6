"""ogbn-mag's layout read locally (``gg.data.load_ogb_mag``: a small folder written here, as
OGB's downloader leaves it) and the seeded typed generator (``gg.data.typed_random``)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

import gblas_gnn as gg
from gblas_gnn.data import load_ogb_mag, typed_random

COUNTS = {"author": 5, "field_of_study": 3, "institution": 2, "paper": 6}
RELATIONS = {("author", "affiliated_with", "institution"): [[0, 0], [1, 1], [4, 0]],
             ("author", "writes", "paper"): [[0, 0], [1, 0], [2, 3], [4, 5]],
             ("paper", "cites", "paper"): [[1, 0], [2, 0], [5, 3]],
             ("paper", "has_topic", "field_of_study"): [[0, 2], [3, 1]]}


def _write(path: Path, lines) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write("".join(f"{line}\n" for line in lines))


def _folder(root: Path, **broken) -> Path:
    path = root / "ogbn_mag"
    raw = path / "raw"
    _write(raw / "num-node-dict.csv.gz", [",".join(COUNTS),
                                          ",".join(str(broken.get("count", c))
                                                   for c in COUNTS.values())])
    _write(raw / "triplet-type-list.csv.gz", [",".join(k) for k in RELATIONS])
    for key, edges in RELATIONS.items():
        folder = raw / "relations" / "___".join(key)
        _write(folder / "edge.csv.gz", [f"{a},{b}" for a, b in edges])
        _write(folder / "num-edge-list.csv.gz", [broken.get("edges", len(edges))])
    rng = np.random.default_rng(0)
    feat = rng.standard_normal((6, 4))
    _write(raw / "node-feat" / "paper" / "node-feat.csv.gz",
           [",".join(f"{v:.6f}" for v in row) for row in feat])
    _write(raw / "node-label" / "paper" / "node-label.csv.gz",
           [broken.get("label", v) for v in [3, 1, 0, 348, 7, 2]])
    split = path / "split" / "time" / "paper"
    _write(split / "train.csv.gz", [0, 1, 2])
    _write(split / "valid.csv.gz", [3])
    _write(split / "test.csv.gz", broken.get("test", [4, 5]))
    return path


def test_reads_the_layout(tmp_path):
    data = load_ogb_mag(_folder(tmp_path))
    hg = data.graph
    assert hg.num_nodes_dict == COUNTS
    assert hg.edge_types == tuple(RELATIONS)
    for key, edges in RELATIONS.items():
        np.testing.assert_array_equal(hg.edge_index_dict[key], np.array(edges).T)
    assert list(data.x) == ["paper"] and data.x["paper"].shape == (6, 4)
    assert data.x["paper"].dtype == np.float32
    np.testing.assert_array_equal(data.y, [3, 1, 0, 348, 7, 2])
    assert data.train_mask.sum() == 3 and data.val_mask[3] and data.test_mask[[4, 5]].all()
    assert data.target == "paper" and data.num_classes == 349


def test_reverse_relations_and_an_hgt_layer_on_them(tmp_path):
    data = load_ogb_mag(_folder(tmp_path), dtype=np.float64, add_reverse=True)
    hg = data.graph
    assert ("paper", "rev_writes", "author") in hg.edge_types and len(hg.edge_types) == 8
    widths = {t: 4 for t in COUNTS}
    x = {t: data.x.get(t, np.ones((n, 4))) for t, n in COUNTS.items()}
    out = gg.nn.HGTConv(widths, 4, hg.metadata(), heads=2, dtype=np.float64)(hg, x)
    assert sorted(out) == sorted(COUNTS)           # every type is a target with reverses


@pytest.mark.parametrize("broken,error,match", [
    (dict(edges=9), ValueError, "affiliated_with___institution/edge.csv.gz holds 3 edges but "
     "num-edge-list.csv.gz says 9"),
    (dict(count=1), ValueError, "out of range"),
    (dict(label=400), ValueError, "one label in"),
    (dict(test=[3, 4]), ValueError, "disjoint"),
    (dict(test=[9]), ValueError, "names a vertex outside"),
])
def test_bad_folders(tmp_path, broken, error, match):
    with pytest.raises(error, match=match):
        load_ogb_mag(_folder(tmp_path, **broken))


def test_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="never downloads"):
        load_ogb_mag(tmp_path / "nothing")
    path = _folder(tmp_path)
    (path / "raw" / "relations" / "paper___cites___paper" / "edge.csv.gz").unlink()
    with pytest.raises(FileNotFoundError, match="paper___cites___paper/edge.csv.gz is missing"):
        load_ogb_mag(path)


def test_the_typed_generator_is_seeded_and_sized():
    nodes = {"paper": 40, "author": 30}
    edges = {("author", "writes", "paper"): 100, ("paper", "cites", "paper"): 80}
    a = typed_random(nodes, edges, seed=3, reverse=True)
    b = typed_random(nodes, edges, seed=3, reverse=True)
    assert a.edge_types == (*edges, ("paper", "rev_writes", "author"),
                            ("paper", "rev_cites", "paper"))
    for key in a.edge_types:
        np.testing.assert_array_equal(a.edge_index_dict[key], b.edge_index_dict[key])
    m = a.edge_index_dict[("author", "writes", "paper")].shape[1]
    assert 80 <= m <= 100                           # duplicate draws merged
    np.testing.assert_array_equal(a.edge_index_dict[("paper", "rev_writes", "author")],
                                  a.edge_index_dict[("author", "writes", "paper")][::-1])
    with pytest.raises(ValueError, match="non-negative"):
        typed_random(nodes, {("author", "writes", "paper"): -1})
