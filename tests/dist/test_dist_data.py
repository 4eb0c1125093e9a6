"""Graphs and data sets read or generated for a grid: a rank's block of a ``.npz`` read
through memory maps equals the block ``from_graph`` cuts (CSR-ordered files and shuffled
ones, relabelled or not); data-set specs give every rank the rows one process has; a
corrupt, truncated, compressed or missing file fails on every rank with a clear error."""

from __future__ import annotations

import numpy as np
import pytest

import gblas_gnn as gg
from gblas_gnn import dist
from gblas_gnn.data.specs import parse_dataset
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


@pytest.mark.any_layout
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


def _write_tiled(g, path, tiles, relabel):
    from gblas_gnn.data.tiles import write_tiled_npz

    r, c, v = g.A.to_coo()
    write_tiled_npz(path, g.n, lambda: iter([(r, c, v)]), vertex_arrays={}, tiles=tiles,
                    relabel=relabel, weighted=True, size=r.size)


@pytest.mark.any_layout
@pytest.mark.parametrize("relabel", [False, True])
@pytest.mark.parametrize("tiles", [6, 4])
def test_a_tiled_file_is_read_by_blocks(dex, tmp_path, relabel, tiles, monkeypatch):
    """A rank reads the tiles of its block and nothing else when the grid's side divides
    the tile count (6 tiles: 1×1, 2×2, 3×3), and its block plus boundary tiles otherwise;
    what it keeps equals the block ``from_graph`` cuts."""
    g = graph(n=90, m=700)
    path = shared(dex, tmp_path, "t.npz")
    if dex.is_root:
        _write_tiled(g, path, tiles, relabel)
    dex.grid.barrier()
    monkeypatch.setattr("gblas_gnn.dist.data.CHUNK", 13)
    read: dict = {}
    got = read_npz_block(path, dex.grid, relabel=relabel, read=read)
    same_block(got, dist.DistGraph.from_graph(g, dex.grid, relabel=relabel))
    entry = 4 + 4 + 8                                   # int32 row and col, float64 value
    assert read["total_edge_bytes"] == g.nnz * entry
    q = dex.grid.q
    ptr_bytes = 2 * 8 * (tiles // q if tiles % q == 0 else tiles)
    if tiles % q == 0:
        assert read["edge_bytes"] - 2 * 8 * (tiles // q) == got.A.nvals * entry
    else:
        assert got.A.nvals * entry < read["edge_bytes"] <= g.nnz * entry + ptr_bytes


def test_a_tiled_file_refuses_a_job_relabelled_otherwise(dex, tmp_path):
    path = shared(dex, tmp_path, "t.npz")
    if dex.is_root:
        _write_tiled(graph(), path, 6, relabel=False)
    dex.grid.barrier()
    with pytest.raises(ValueError, match="was converted without --relabel, and this job runs "
                                         "with --relabel"):
        read_npz_block(path, dex.grid, relabel=True)


@pytest.mark.parametrize("name", ["ogbn-arxiv", "ogbn-products", "ogbn-papers100M"])
def test_an_ogb_folder_and_its_conversion_give_every_rank_the_rows_of_one_process(
        dex, tmp_path, name, monkeypatch):
    from ogb_helpers import toy, write_ogb

    from gblas_gnn.cli import main
    from gblas_gnn.data import load_ogb

    root = shared(dex, tmp_path, "ogb")
    converted = root / "converted.npz"
    if dex.is_root:
        write_ogb(root, name, toy(n=70, m=300, unlabelled=5 if "papers" in name else 0))
        assert main(["convert", f"ogb:{root / name.replace('-', '_')}", str(converted),
                     "--no-progress"]) == 0
    dex.grid.barrier()
    monkeypatch.setattr("gblas_gnn.data._csvgz.CHUNK_BYTES", 100)
    folder = root / name.replace("-", "_")
    one = load_ogb(folder)
    for spec in (f"ogb:{folder}", f"npz:{converted}"):
        here = load_dataset(spec, dex.grid)
        assert here.name == name and here.num_classes == one.num_classes
        for key in ("x", "y", "train_mask", "val_mask", "test_mask"):
            np.testing.assert_array_equal(getattr(here, key),
                                          getattr(one, key)[here.graph.vertex_ids])
        same_block(here.graph, dist.DistGraph.from_graph(one.graph, dex.grid))


@pytest.mark.any_layout
def test_streaming_an_ogb_folder_holds_its_block_not_the_graph(dex, tmp_path, monkeypatch):
    """Every rank parses the whole edge file, in chunks, and keeps only its block: its peak
    of traced allocations while loading stays below its block and rows plus a few chunks,
    which on a grid is below the whole edge list."""
    import tracemalloc

    from ogb_helpers import toy, write_ogb

    root = shared(dex, tmp_path, "ogb")
    n, m = 400, 40000
    if dex.is_root:
        write_ogb(root, "ogbn-products", toy(n=n, m=m, f=4))
    dex.grid.barrier()
    monkeypatch.setattr("gblas_gnn.data._csvgz.CHUNK_BYTES", 4096)   # ~400 edges a chunk
    load_dataset(f"ogb:{root / 'ogbn_products'}", dex.grid)   # imports, caches: not traced
    tracemalloc.start()
    try:
        here = load_dataset(f"ogb:{root / 'ogbn_products'}", dex.grid)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    whole = 2 * m * 2 * 8                  # the edge list with its inverse, int64 pairs
    mine = dex.grid.allreduce(np.array([here.graph.A.nvals]), "max", "world", "test")[0]
    bound = 32 * mine + 100 * n + 16 * 4096 + 100_000
    assert peak < bound, (peak, bound, whole)
    if dex.grid.q > 1:
        assert bound < whole, "the test needs a graph larger than a rank's bound"


@pytest.mark.any_layout
def test_progress_shows_on_rank_0_only(dex, capsys, monkeypatch):
    monkeypatch.setattr("gblas_gnn._progress.PROGRESS_EDGES", 100)
    load_dataset("kronecker:scale=8,edge_factor=4", dex.grid)
    shown = "kronecker (rank 0's share):" in capsys.readouterr().err
    assert dex.grid.allgather(shown, "test.progress") == [True] + [False] * (dex.grid.size - 1)
    load_dataset("kronecker:scale=8,edge_factor=4", dex.grid, progress=False)
    assert capsys.readouterr().err == ""
