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


def test_the_aggregation_curves_hold_what_notebook_02_says():
    """``notebooks/aggregation_curves.json`` (made by ``aggregation_curves.py``, plotted by
    notebook 02): every (model, aggregation) with and without weight decay, 1000 epochs
    sampled every 5, and the claims the notebook's text makes of them: AGNN's ``max`` peaks
    after the published 200 epochs, GAT's ``min`` rises on after the epoch it keeps, and
    without weight decay ``mean`` learns (GAT's within 5 points of ``sum``) while with it
    GAT's stays below 40 %."""
    import json

    curves = json.loads((NOTEBOOK_DIR / "aggregation_curves.json").read_text())
    assert curves["epochs"] == 1000 and "--patience 0" in curves["command"]
    runs = curves["runs"]
    assert set(runs) == {f"{a}-{g}{s}" for a in ("gat", "agnn")
                         for g in ("sum", "mean", "max", "min") for s in ("", "-wd0")}
    for key, r in runs.items():
        assert r["epochs_run"] == 1000 and len(r["val_acc"]) == len(r["test_acc"]) == 200, key
        assert 1 <= r["best_epoch"] <= 1000 and 0 < r["best_test_acc"] <= 100, key
        # the kept epoch's accuracy is on its curve (sampled every 5 epochs)
        assert r["best_val_acc"] <= max(r["val_acc"]) + 5, key
    assert runs["agnn-max"]["best_epoch"] > 200
    # GAT's min: the accuracy rises on after the epoch its loss-and-accuracy rule keeps
    assert max(runs["gat-min"]["val_acc"]) > runs["gat-min"]["best_val_acc"] + 5
    assert runs["gat-mean"]["best_val_acc"] < 40
    assert runs["gat-mean-wd0"]["best_test_acc"] > runs["gat-sum-wd0"]["best_test_acc"] - 5
    assert runs["agnn-mean-wd0"]["best_test_acc"] > runs["agnn-mean"]["best_test_acc"] + 20


# --- the memory figures of notebooks 04, 05 and 06 (notebooks/peak_memory.py) -----------

MIB = 1 << 20
#: the notebooks whose memory section measures a step in a fresh process (``STEP``)
MEMORY_NOTEBOOKS = ("04_compose.ipynb", "05_edges.ipynb", "06_relations.ipynb")

_TRAPPED_STEP = """
import json, resource
import numpy as np
from peak_memory import _status_bytes, step_growth
MIB = 1 << 20
build = [np.ones(16 * MIB // 8) for _ in range(6)]   # the graph's build: 96 MiB, then freed
del build
def step():                                          # 32 MiB, touched
    parts = [np.ones(16 * MIB // 8) for _ in range(2)]
    return sum(p.sum() for p in parts)
mark = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
step()
maxrss = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - mark) * 1024
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
base = _status_bytes("VmRSS")
step()
reset_only = _status_bytes("VmHWM") - base
print(json.dumps({"maxrss": maxrss, "reset_only": reset_only, "growth": step_growth(step)}))
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
def test_peak_memory_counts_a_step_that_reuses_freed_memory():
    """A 32 MiB step after a 96 MiB build that was freed but kept by the allocator (glibc's
    thresholds set so that it keeps it, as it does for the arrays a graph build frees): the
    high-water mark (``ru_maxrss``) and the mark reset alone both read nothing; the
    notebooks' helper reads the step's 32 MiB."""
    import json
    import os
    import subprocess

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(NOTEBOOK_DIR),
                                                       os.environ.get("PYTHONPATH", "")]),
               MALLOC_MMAP_THRESHOLD_=str(32 * MIB), MALLOC_TRIM_THRESHOLD_=str(1 << 30))
    done = subprocess.run([sys.executable, "-c", _TRAPPED_STEP], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["maxrss"] < 4 * MIB and got["reset_only"] < 4 * MIB, got    # the trap is set
    assert 30 * MIB <= got["growth"] <= 40 * MIB, got


def _step_script(name: str) -> str:
    """The ``STEP`` script of a notebook's memory section (the assignment's value alone)."""
    import ast
    import textwrap

    nb = nbformat.read(NOTEBOOK_DIR / name, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code" or "STEP = " not in cell.source:
            continue
        for node in ast.parse(cell.source).body:
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "STEP":
                return eval(compile(ast.Expression(node.value), name, "eval"),
                            {"textwrap": textwrap})
    raise AssertionError(f"{name} has no STEP")


def _memory_cases():
    for name in MEMORY_NOTEBOOKS:
        yield pytest.param(name, "ours", id=f"{name}-ours")
        yield pytest.param(name, "pyg", id=f"{name}-pyg", marks=pytest.mark.slow)


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
@pytest.mark.timeout(400)
@pytest.mark.parametrize("name, side", list(_memory_cases()))
def test_notebook_memory_figure_is_plausible(name, side):
    """Each memory notebook's own step script, on a tenth of its graph (2 000 vertices,
    32 000 edges): the figures it prints are positive and plausible. Ours: a later step's
    growth is at least 80 % of the peak of its numpy arrays alone (``tracemalloc``, a lower
    bound), at most twice that plus 8 MiB, and between 8 bytes (one float32 score and one
    gradient an edge) and 2 000 bytes an edge. PyG's: between 100 bytes (its per-edge
    messages) and 20 000 bytes an edge. A reading of the high-water mark without the reset,
    or without the allocator's free memory handed back, fails the lower bounds."""
    if side == "pyg":
        pytest.importorskip("torch_geometric")
    sys.path.insert(0, str(NOTEBOOK_DIR))
    try:
        from peak_memory import in_fresh_process
    finally:
        sys.path.remove(str(NOTEBOOK_DIR))
    got = in_fresh_process(_step_script(name), side, 2000, 32000, trace=side == "ours",
                           timeout=360)
    per_edge = got["later"] / got["edges"]
    assert 30000 <= got["edges"] <= 34000 and got["first"] > 0, got
    if side == "ours":
        assert 0.8 * got["traced"] <= got["later"] <= 2 * got["traced"] + 8 * MIB, got
        assert 8 <= per_edge <= 2000, got
    else:
        assert 100 <= per_edge <= 20000, got
