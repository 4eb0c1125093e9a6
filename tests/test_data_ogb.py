"""OGB node-property folders (``--dataset ogb:DIR/ogbn_NAME``) in OGB's own layout, written
by the tests themselves: what a reader returns for each data set and its conventions, read
whole or chunk by chunk; and a clear error, naming the file (and line), for every bad
input, before anything is written."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import scipy.sparse as sp
from ogb_helpers import CLASSES, SCHEMES, toy, write_csv_gz, write_ogb

from gblas_gnn.cli import main
from gblas_gnn.data import load_ogb
from gblas_gnn.data.specs import parse_dataset

NAMES = ["ogbn-arxiv", "ogbn-products", "ogbn-papers100M"]


def expected_adjacency(data: dict, inverse: bool) -> sp.csr_matrix:
    src, dst = data["edges"][:, 0], data["edges"][:, 1]
    if inverse:
        src, dst = np.r_[src, dst], np.r_[dst, src]
    a = sp.csr_matrix((np.ones(src.size), (dst, src)), shape=(data["n"],) * 2)
    a.sum_duplicates()
    a.data[:] = 1
    return a


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_each_data_set_reads_as_ogb_defines_it(name, chunked, tmp_path, monkeypatch):
    """edge s,t is A[t, s]; products gets its inverse edges (OGB's add_inverse_edge), arxiv
    and papers100M stay directed; duplicates merge; unlabelled papers100M vertices get label
    0 and no split; the split scheme and the number of classes are OGB's."""
    if chunked:                                   # many chunks of every file
        monkeypatch.setattr("gblas_gnn.data._csvgz.CHUNK_BYTES", 64)
        monkeypatch.setattr("gblas_gnn.data.ogb.CHUNK_ITEMS", 7)
    data = toy(unlabelled=6 if name == "ogbn-papers100M" else 0)
    data["edges"] = np.r_[data["edges"], data["edges"][:5]]          # duplicates
    d = load_ogb(write_ogb(tmp_path, name, data))
    assert d.name == name and d.num_classes == CLASSES[name]
    want = expected_adjacency(data, inverse=name == "ogbn-products")
    assert (d.adjacency != want).nnz == 0 and d.adjacency.nnz == want.nnz
    np.testing.assert_array_equal(d.x, data["x"])
    labelled = np.isfinite(data["y"])
    np.testing.assert_array_equal(d.y[labelled], data["y"][labelled])
    assert (d.y[~labelled] == 0).all()
    for mask, part in zip((d.train_mask, d.val_mask, d.test_mask), ("train", "valid", "test"),
                          strict=True):
        np.testing.assert_array_equal(np.flatnonzero(mask), data["split"][part])
    assert not (d.train_mask | d.val_mask | d.test_mask)[~labelled].any()


def test_the_spec_and_the_command_line_read_it(tmp_path, capsys):
    folder = write_ogb(tmp_path, "ogbn-arxiv", toy())
    assert parse_dataset(f"ogb:{folder}").name == "ogbn-arxiv"
    assert main(["train", "--model", "sgc", "--dataset", f"ogb:{folder}", "--epochs", "2",
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ogbn-arxiv: sgc test accuracy")
    assert "graph of 60 vertices and" in out


def test_a_missing_folder_says_where_to_put_it_and_that_nothing_is_fetched(tmp_path, capsys):
    assert main(["train", "--dataset", f"ogb:{tmp_path / 'ogbn_arxiv'}", "--epochs", "1",
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"no OGB data set at {tmp_path / 'ogbn_arxiv'} (no such folder)" in err
    assert "never downloads data sets: put the folder at" in err
    assert "with raw/ and split/ inside" in err and "makes DIR/ogbn_arxiv" in err
    assert not (tmp_path / "ogbn_arxiv").exists()


def _break(folder, name, how):
    """Damage a written folder (``how``) and return the message expected."""
    raw = folder / "raw"
    split = folder / "split" / SCHEMES[name]
    if how == "missing file":
        (raw / "node-feat.csv.gz").unlink()
        return "raw/node-feat.csv.gz missing"
    if how == "not a number":
        write_csv_gz(raw / "edge.csv.gz", [[0, 1], [2, 3], [4, "x"]])
        return "edge.csv.gz: could not convert string 'x' to int64 at line 3"
    if how == "columns":
        write_csv_gz(raw / "edge.csv.gz", [[0, 1], [2, 3, 4]])
        return "edge.csv.gz: the number of columns changed from 2 to 3 at line 2"
    if how == "id out of range":
        write_csv_gz(raw / "edge.csv.gz", [[0, 1], [2, 60]])
        return "edge.csv.gz: edge 2 (2 -> 60) names a vertex outside [0, 60)"
    if how == "edge count":
        write_csv_gz(raw / "num-edge-list.csv.gz", [999])
        return "holds 240 edges but the data set says 999"
    if how == "feature rows":
        write_csv_gz(raw / "node-feat.csv.gz", np.ones((59, 6)))
        return "node-feat.csv.gz has 59 rows, the data set has 60 vertices"
    if how == "feature NaN":
        x = np.ones((60, 6))
        x[7, 2] = np.nan
        write_csv_gz(raw / "node-feat.csv.gz", x)
        return "node features contain NaN or Inf"
    if how == "label range":
        write_csv_gz(raw / "node-label.csv.gz", np.full(60, 40))
        return "labels must be whole numbers in [0, 40)"
    if how == "split range":
        write_csv_gz(split / "test.csv.gz", [3, 75])
        return "test.csv.gz: vertex ids outside [0, 60)"
    if how == "split overlap":
        write_csv_gz(split / "valid.csv.gz", [0, 1, 2])
        write_csv_gz(split / "train.csv.gz", [2, 5])
        return "share vertex 2: the splits must be disjoint"
    if how == "corrupt gzip":
        data = (raw / "edge.csv.gz").read_bytes()
        (raw / "edge.csv.gz").write_bytes(data[: len(data) // 2])
        return "edge.csv.gz is not a readable gzip file"
    if how == "two graphs":
        write_csv_gz(raw / "num-node-list.csv.gz", [30, 30])
        return "must hold one non-negative count (one graph)"
    raise AssertionError(how)


HOW = ["missing file", "not a number", "columns", "id out of range", "edge count",
       "feature rows", "feature NaN", "label range", "split range", "split overlap",
       "corrupt gzip", "two graphs"]


@pytest.mark.parametrize("how", HOW)
def test_bad_folders_are_refused_with_the_file_and_the_reason(how, tmp_path, capsys):
    folder = write_ogb(tmp_path, "ogbn-arxiv", toy())
    message = _break(folder, "ogbn-arxiv", how)
    with pytest.raises((ValueError, FileNotFoundError)) as exc:
        load_ogb(folder)
    assert message in str(exc.value)
    # the command line says so on one line, and converts nothing
    out = tmp_path / "out.npz"
    assert main(["convert", f"ogb:{folder}", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == [folder]          # no output, no temporary files


@pytest.mark.parametrize("how,message", [
    ("unlabelled split vertex", "names vertex 55, which has no label"),
    ("label shape", "node_label has shape (60, 2), expected (60,) or (60, 1)"),
    ("fortran edges", "edge_index is stored in Fortran order"),
    ("truncated", "is a corrupt .npz OGB data file"),
])
def test_bad_papers100m_files_are_refused(how, message, tmp_path):
    data = toy(unlabelled=6)
    folder = write_ogb(tmp_path, "ogbn-papers100M", data)
    raw = folder / "raw"
    if how == "unlabelled split vertex":
        write_csv_gz(folder / "split" / "time" / "test.csv.gz", [1, 55])
    elif how == "label shape":
        np.savez(raw / "node-label.npz", node_label=np.zeros((60, 2)))
    elif how == "fortran edges":
        arrays = dict(np.load(raw / "data.npz"))
        arrays["edge_index"] = np.asfortranarray(arrays["edge_index"])
        np.savez(raw / "data.npz", **arrays)
    else:
        (raw / "data.npz").write_bytes((raw / "data.npz").read_bytes()[:100])
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_ogb(folder)


@pytest.mark.parametrize("folder,message", [
    ("ogbn_proteins", "ogbn-proteins is not supported here: its 112 binary tasks"),
    ("ogbn_mag", "ogbn-mag is not supported here: it is a heterogeneous graph.*load_ogb_mag"),
    ("my_graph", "the folder's name does not say which OGB data set it holds"),
])
def test_other_folders_are_refused(folder, message, tmp_path):
    (tmp_path / folder).mkdir()
    with pytest.raises(ValueError, match=message):
        load_ogb(tmp_path / folder)


def test_the_download_names_are_understood_too(tmp_path):
    """OGB's zip unpacks to ``arxiv/`` (its download name) before OGB renames it."""
    write_ogb(tmp_path, "ogbn-arxiv", toy())
    (tmp_path / "ogbn_arxiv").rename(tmp_path / "arxiv")
    assert load_ogb(tmp_path / "arxiv").name == "ogbn-arxiv"


def test_a_last_line_without_newline_is_read(tmp_path):
    folder = write_ogb(tmp_path, "ogbn-arxiv", toy())
    path = folder / "raw" / "node-label.csv.gz"
    text = gzip.decompress(path.read_bytes()).rstrip(b"\n")
    path.write_bytes(gzip.compress(text))
    assert load_ogb(folder).y.shape == (60,)
