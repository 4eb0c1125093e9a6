"""Graphs and data sets read or generated for a grid: a rank's block of a ``.npz`` read
through memory maps equals the block ``from_graph`` cuts (CSR-ordered files and shuffled
ones, relabelled or not); data-set specs give every rank the rows one process has; a
corrupt, truncated, compressed or missing file fails on every rank with a clear error."""

from __future__ import annotations

import numpy as np
import pytest

import gblas_gnn as gg
from gblas_gnn import dist
from gblas_gnn.datasets import parse_dataset
from gblas_gnn.dist.data import load_dataset, read_npz_block


def graph(seed=0, n=37, m=160):
    rng = np.random.default_rng(seed)
    return gg.Graph.from_edges(rng.integers(0, n - 3, m), rng.integers(0, n - 3, m), n,
                               values=rng.uniform(0.5, 2, m))


def same_block(a: dist.DistGraph, b: dist.DistGraph) -> None:
    np.testing.assert_array_equal(a.A.row_ids, b.A.row_ids)
    np.testing.assert_array_equal(a.A.col_ids, b.A.col_ids)
    for x, y in zip(a.A.M.to_coo(), b.A.M.to_coo(), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-6)
    assert (a.n, a.nnz) == (b.n, b.nnz)


def shared(dex, tmp_path, name):
    from pathlib import Path

    return Path(dex.grid.bcast(str(tmp_path / name), "test.path"))


@pytest.mark.parametrize("relabel", [False, True])
@pytest.mark.parametrize("ordered", [True, False])
def test_blockwise_read_equals_from_graph(dex, tmp_path, relabel, ordered, monkeypatch):
    g = graph()
    path = shared(dex, tmp_path, "g.npz")
    if dex.is_root:
        if ordered:
            g.save_npz(path)                       # CSR order, says so
        else:                                      # shuffled entries, no order member
            r, c, v = g.A.to_coo()
            perm = np.random.default_rng(1).permutation(r.size)
            np.savez(path, row=r[perm], col=c[perm], data=v[perm], shape=[g.n, g.n])
    dex.grid.barrier()
    monkeypatch.setattr("gblas_gnn.dist.data.CHUNK", 17)    # many chunks on a small file
    got = read_npz_block(path, dex.grid, relabel=relabel, seed=4)
    same_block(got, dist.DistGraph.from_graph(g, dex.grid, relabel=relabel, seed=4))


def test_data_set_specs_give_every_rank_the_rows_of_one_process(dex, tmp_path):
    path = shared(dex, tmp_path, "d.npz")
    base = parse_dataset("csbm:n=200,classes=3,train_per_class=5,val=40,test=60")
    if dex.is_root:
        r, c, v = base.graph.A.to_coo()
        np.savez(path, row=r, col=c, data=v, shape=[base.graph.n] * 2, order="csr",
                 x=base.x, y=base.y, train_mask=base.train_mask, val_mask=base.val_mask,
                 test_mask=base.test_mask)
    dex.grid.barrier()
    for spec in ("kronecker:scale=7,edge_factor=4", "erdos_renyi:n=150,degree=6",
                 f"npz:{path}", "csbm:n=200,classes=3,train_per_class=5,val=40,test=60"):
        one = parse_dataset(spec, seed=2)
        here = load_dataset(spec, dex.grid, seed=2)
        dg = here.graph
        assert (dg.n, dg.nnz, here.num_classes) == (one.graph.n, one.graph.nnz,
                                                    one.num_classes), spec
        for key in ("x", "y", "train_mask", "val_mask", "test_mask"):
            np.testing.assert_array_equal(getattr(here, key),
                                          getattr(one, key)[dg.vertex_ids], err_msg=spec)
        same_block(dg, dist.DistGraph.from_graph(one.graph, dex.grid))


def test_bad_files_fail_on_every_rank(dex, tmp_path):
    good = shared(dex, tmp_path, "good.npz")
    cut = shared(dex, tmp_path, "cut.npz")
    packed = shared(dex, tmp_path, "packed.npz")
    junk = shared(dex, tmp_path, "junk.npz")
    if dex.is_root:
        graph().save_npz(good)
        data = good.read_bytes()
        cut.write_bytes(data[: len(data) // 2])
        np.savez_compressed(packed, row=[0], col=[1], shape=[2, 2])
        junk.write_bytes(b"not a zip at all")
    dex.grid.barrier()
    for path, match in ((cut, "corrupt"), (packed, "compressed.*gblas-gnn convert"),
                        (junk, "corrupt")):
        with pytest.raises(ValueError, match=match):
            read_npz_block(path, dex.grid)
    with pytest.raises(FileNotFoundError):
        read_npz_block(tmp_path / "missing.npz", dex.grid)
