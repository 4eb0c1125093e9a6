"""Progress on long data work: the generators and loaders of graphs of 10⁷ edges or more,
and ``gblas-gnn convert``, show a bar on stderr; smaller work and ``--no-progress`` stay
quiet. (The threshold is lowered here so that tiny graphs count as large.)"""

from __future__ import annotations

import pytest
from ogb_helpers import toy, write_ogb

from gblas_gnn.cli import main
from gblas_gnn.data import erdos_renyi_edges, kronecker_edges, load_ogb


@pytest.fixture
def threshold(monkeypatch):
    monkeypatch.setattr("gblas_gnn._progress.PROGRESS_EDGES", 1000)


@pytest.mark.parametrize("make,desc", [
    (lambda **kw: kronecker_edges(8, 8, **kw), "kronecker"),           # 2048 edges
    (lambda **kw: erdos_renyi_edges(300, 0.02, **kw), "erdos_renyi"),  # ~1800 edges
])
def test_generators_show_progress_on_large_graphs_only(make, desc, threshold, capsys,
                                                       monkeypatch):
    make()
    assert f"{desc}:" in capsys.readouterr().err
    make(progress=False)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr("gblas_gnn._progress.PROGRESS_EDGES", 10**7)
    make()
    assert capsys.readouterr().err == ""


def test_the_ogb_loader_and_convert_show_progress(threshold, tmp_path, capsys):
    folder = write_ogb(tmp_path, "ogbn-products", toy(n=100, m=800))   # 1600 entries
    load_ogb(folder)
    err = capsys.readouterr().err
    assert "read edge.csv.gz:" in err and "read node features:" in err
    assert main(["convert", f"ogb:{folder}", str(tmp_path / "a.npz")]) == 0
    err = capsys.readouterr().err
    assert "read edge.csv.gz:" in err and "convert: sort tiles:" in err
    assert main(["convert", f"ogb:{folder}", str(tmp_path / "b.npz"), "--no-progress"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["train", "--model", "sgc", "--dataset", f"ogb:{folder}", "--epochs", "1",
                 "--no-progress"]) == 0
    assert capsys.readouterr().err == ""
