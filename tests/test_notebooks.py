"""Execute every ``notebooks/*.ipynb`` so that the notebooks cannot rot.

Each notebook runs top to bottom in a fresh kernel with ``notebooks/`` as its working
directory; any cell that raises (the notebooks check themselves with ``assert`` and
``np.testing.assert_allclose``) fails the test.

The kernel is made hermetic: the ``python3`` kernelspec is written into a temporary
directory that ``JUPYTER_PATH`` puts first, pointing at the interpreter running pytest
(``sys.executable``). So a clean machine that only ran ``pip install -e ".[test]"`` needs no
``python -m ipykernel install``, and a stale user-level ``python3`` kernelspec that points
at another environment (without ``gblas_gnn``) cannot be picked up instead. IPython's
profile and Jupyter's runtime files also go to temporary directories.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_data_planetoid import ROOT as PLANETOID

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
ipykernel_spec = pytest.importorskip("ipykernel.kernelspec")

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))


def _planetoid_at_hand() -> bool:
    return (PLANETOID / "ind.cora.graph").is_file()


@pytest.fixture
def python3_kernel(tmp_path, monkeypatch):
    """A ``python3`` kernelspec for ``sys.executable``, found before any other one. The
    kernel is told where the Planetoid files are (``$GBLAS_GNN_PLANETOID``: the library looks
    nowhere by itself) when the tests have them; elsewhere the variable is unset."""
    if _planetoid_at_hand():
        monkeypatch.setenv("GBLAS_GNN_PLANETOID", str(PLANETOID))
    else:
        monkeypatch.delenv("GBLAS_GNN_PLANETOID", raising=False)
    data_dir = tmp_path / "jupyter"
    ipykernel_spec.write_kernel_spec(data_dir / "kernels" / "python3")
    monkeypatch.setenv("JUPYTER_PATH", str(data_dir))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    return "python3"


def test_kernelspec_is_this_interpreter(python3_kernel):
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec(python3_kernel)
    assert spec.argv[0] == sys.executable


@pytest.mark.slow
@pytest.mark.timeout(660)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, python3_kernel):
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name=python3_kernel,
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
    client.execute()        # raises CellExecutionError if any cell raises
    errors = [out for cell in nb.cells if cell.cell_type == "code"
              for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    assert not errors
    if "find_planetoid_root" in nb.cells[1].source and _planetoid_at_hand():
        # the files are at hand, so the notebook shows Cora (not only its CSBM fallback)
        printed = "".join(out.get("text", "") for out in nb.cells[1].outputs)
        assert "Cora: 2708 vertices" in printed, printed


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_committed_without_outputs(path):
    """Notebooks are stored with cleared outputs so that their diffs stay readable."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert not cell.outputs, f"cell {i} of {path.name} has stored outputs"
            assert cell.execution_count is None, f"cell {i} of {path.name} has an execution count"


def test_notebooks_exist():
    assert NOTEBOOKS, f"no notebooks found in {NOTEBOOK_DIR}"


def test_the_aggregations_notebook_reads_converged_runs():
    """Notebook 02 shows each aggregation trained to convergence on Cora from the recorded
    runs of ``bench/accuracy/planetoid.py``: every (model, aggregation) it reads is there,
    three seeds of the published schedule each."""
    import json

    table = json.loads((NOTEBOOK_DIR.parent / "bench" / "results" / "current" /
                        "accuracy_cora.json").read_text())
    for arch in ("gat", "agnn"):
        for aggr in ("sum", "mean", "max", "min"):
            row = table[f"{arch}-{aggr}"]
            assert len(row["runs"]) == 3 and f"--aggr {aggr}" in row["command"]
            assert 0 < row["mean"] <= 100
