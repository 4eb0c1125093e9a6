"""The documentation stays true: the API reference builds from the docstrings without a
warning, the guide's code runs and every link of ``docs/`` resolves.

The API reference is pdoc's (pinned in the ``test`` extra), built by the very command the
README gives, with Python's warnings as errors: a public module that fails to import, an
``__all__`` entry that does not resolve or an annotation pdoc cannot read fails the suite.
``docs/guide.md`` holds what the README's tour leaves out; its ```python blocks run in order
and in one namespace, like the README's (the PyTorch Geometric block only where
torch-geometric is installed, as with ".[test]").
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_readme import README, broken_links, python_blocks, run_blocks

import gblas_gnn

DOCS = Path(__file__).resolve().parents[1] / "docs"
GUIDE = DOCS / "guide.md"
API_COMMAND = "python3 -m pdoc -d google --math -o build/api gblas_gnn"
# the pages of the public API: the package and what its __all__ exposes
API_PAGES = {"gblas_gnn.html", "gblas_gnn/ops.html", "gblas_gnn/semirings.html",
             "gblas_gnn/nn.html", "gblas_gnn/nn/models.html", "gblas_gnn/train.html",
             "gblas_gnn/data.html", "gblas_gnn/executors.html", "gblas_gnn/compose.html",
             "gblas_gnn/dist.html", "gblas_gnn/gpu.html"}


def build_reference(output: Path, source: Path, module: str = "gblas_gnn"):
    """Run the README's pdoc command (warnings as errors) on ``module`` from ``source``."""
    args = API_COMMAND.split()
    assert args[:3] == ["python3", "-m", "pdoc"] and args[-2:] == ["build/api", "gblas_gnn"]
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(source),
                                                       os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-W", "error", *args[1:-2], str(output), module],
                          env=env, capture_output=True, text=True, timeout=120)


def test_the_readme_says_how_to_build_the_api_reference():
    assert API_COMMAND in README.read_text()


def test_the_api_reference_builds_without_a_warning(tmp_path):
    source = Path(gblas_gnn.__file__).resolve().parents[1]   # the gblas_gnn under test
    result = build_reference(tmp_path / "api", source)
    assert result.returncode == 0, result.stderr[-4000:]
    pages = {p.relative_to(tmp_path / "api").as_posix()
             for p in (tmp_path / "api").rglob("*.html")}
    assert API_PAGES <= pages, sorted(API_PAGES - pages)
    nn = (tmp_path / "api" / "gblas_gnn" / "nn.html").read_text()
    assert "GATConv" in nn and "Module" in nn


def test_a_pdoc_warning_fails_the_build(tmp_path):
    package = tmp_path / "src" / "undocumentable"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        '"""A module pdoc warns about."""\n\nfrom __future__ import annotations\n\n\n'
        'def f(x: Missing) -> int:  # noqa: F821\n    """Doc."""\n    return 1\n')
    result = build_reference(tmp_path / "api", tmp_path / "src", "undocumentable")
    assert result.returncode != 0
    assert "Error parsing type annotation" in result.stderr


def test_the_guide_code_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(GUIDE.read_text())
    assert len(blocks) >= 3
    namespace = run_blocks(blocks, "docs/guide.md")
    assert "SkipGAT" in namespace                   # the model file of "Your own model"


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_docs_links_resolve(page):
    assert broken_links(DOCS / page) == []
