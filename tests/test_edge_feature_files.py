"""Edge features through files: a data-set ``.npz`` (entries in any order), the tiled
layout ``gblas-gnn convert`` writes (read back whole and block by block on a grid, here the
1×1 grid of this process), and an OGB folder with ``raw/edge-feat.csv.gz`` (ogbn-proteins'
layout), read whole, converted, and streamed by a grid's ranks. Each keeps every edge's own
features; a duplicate edge with features is refused, the message naming it.
"""

from __future__ import annotations

import numpy as np
import pytest
from ogb_helpers import toy, write_ogb

import gblas_gnn as gg
from gblas_gnn import dist
from gblas_gnn.cli import main as cli
from gblas_gnn.data.ogb import load_ogb
from gblas_gnn.data.specs import parse_dataset
from gblas_gnn.dist.data import load_dataset, read_npz_block


def _features_by_pair(graph) -> dict:
    rows, cols, _ = graph.A.to_coo()
    return {(int(j), int(i)): graph.edge_attr.values[k]
            for k, (i, j) in enumerate(zip(rows, cols, strict=True))}


def _dataset_npz(path, n=30, m=90, f=3, seed=0):
    rng = np.random.default_rng(seed)
    pairs = np.array(sorted({(int(s), int(t)) for s, t in rng.integers(0, n, (m, 2))}))
    pairs = pairs[rng.permutation(len(pairs))]             # entries in no particular order
    feats = rng.standard_normal((len(pairs), f)).astype(np.float32)
    masks = np.zeros((3, n), bool)
    masks[0, :10], masks[1, 10:20], masks[2, 20:] = True, True, True
    np.savez(path, row=pairs[:, 1], col=pairs[:, 0], shape=np.array([n, n]),
             edge_attr=feats, x=rng.standard_normal((n, 4)).astype(np.float32),
             y=rng.integers(0, 3, n), train_mask=masks[0], val_mask=masks[1],
             test_mask=masks[2])
    return {(int(s), int(t)): feats[k] for k, (s, t) in enumerate(pairs)}


def test_a_dataset_npz_and_its_tiled_conversion_keep_each_edges_features(tmp_path, capsys):
    want = _dataset_npz(tmp_path / "d.npz")
    data = parse_dataset(f"npz:{tmp_path / 'd.npz'}")
    got = _features_by_pair(data.graph)
    assert got.keys() == want.keys()
    assert all(np.array_equal(got[k], want[k]) for k in want)
    assert cli(["convert", str(tmp_path / "d.npz"), str(tmp_path / "t.npz"), "--tiles", "2",
                "--no-progress"]) == 0
    assert "3 features an edge" in capsys.readouterr().out
    tiled = gg.Graph.from_npz(tmp_path / "t.npz")
    got = _features_by_pair(tiled)
    assert all(np.array_equal(got[k], want[k]) for k in want)
    grid = dist.Grid()
    block = read_npz_block(tmp_path / "t.npz", grid)              # the 1×1 grid's block
    np.testing.assert_array_equal(block.edge_attr.values, tiled.edge_attr.values)


def test_a_duplicate_edge_with_features_is_refused_in_files(tmp_path, capsys):
    n = 4
    np.savez(tmp_path / "g.npz", row=np.array([1, 2, 2]), col=np.array([0, 1, 1]),
             shape=np.array([n, n]), edge_attr=np.ones((3, 2)))
    with pytest.raises(ValueError, match="duplicate edge 1 -> 2"):
        gg.Graph.from_npz(tmp_path / "g.npz")
    assert cli(["convert", str(tmp_path / "g.npz"), str(tmp_path / "t.npz"),
                "--no-progress"]) != 0
    assert "duplicate edge 1 -> 2" in capsys.readouterr().err
    assert not (tmp_path / "t.npz").exists()


@pytest.mark.parametrize("name", ["ogbn-arxiv", "ogbn-products"])   # products: inverse edges
def test_an_ogb_folder_with_edge_features(tmp_path, name):
    data = toy(n=40, m=120, f=5)
    pairs = {(int(s), int(t)) for s, t in data["edges"]}
    pairs = {p for p in pairs if (p[1], p[0]) not in pairs and p[0] != p[1]}
    data["edges"] = np.array(sorted(pairs))
    data["edge_feat"] = np.random.default_rng(1).standard_normal((len(pairs), 4))
    folder = write_ogb(tmp_path, name, data)
    loaded = load_ogb(folder)
    got = _features_by_pair(loaded.graph)
    inverse = name == "ogbn-products"
    for k, (s, t) in enumerate(data["edges"]):
        np.testing.assert_allclose(got[s, t], data["edge_feat"][k], rtol=1e-6)
        if inverse:
            np.testing.assert_allclose(got[t, s], data["edge_feat"][k], rtol=1e-6)
    assert len(got) == len(pairs) * (2 if inverse else 1)
    grid = dist.Grid()
    on_grid = load_dataset(f"ogb:{folder}", grid, progress=False)
    np.testing.assert_allclose(on_grid.graph.edge_attr.values, loaded.graph.edge_attr.values,
                               rtol=1e-6)
    assert cli(["convert", f"ogb:{folder}", str(tmp_path / "t.npz"), "--no-progress"]) == 0
    tiled = gg.Graph.from_npz(tmp_path / "t.npz")
    np.testing.assert_allclose(tiled.edge_attr.values, loaded.graph.edge_attr.values,
                               rtol=1e-6)


def test_an_ogb_edge_features_file_of_the_wrong_length_is_refused(tmp_path):
    data = toy(n=20, m=40, f=3)
    data["edge_feat"] = np.ones((len(data["edges"]) - 1, 2))
    folder = write_ogb(tmp_path, "ogbn-arxiv", data)
    with pytest.raises(ValueError, match="fewer lines than the edges"):
        load_ogb(folder)
