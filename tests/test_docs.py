"""The documentation stays true: the guide's code runs and every link of ``docs/`` resolves.

``docs/guide.md`` holds what the README's tour leaves out; its ```python blocks run in order
and in one namespace, like the README's (the PyTorch Geometric block only where
torch-geometric is installed, as with ".[test]").
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_readme import broken_links, python_blocks, run_blocks

DOCS = Path(__file__).resolve().parents[1] / "docs"
GUIDE = DOCS / "guide.md"


def test_the_guide_code_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(GUIDE.read_text())
    assert len(blocks) >= 3
    namespace = run_blocks(blocks, "docs/guide.md")
    assert "SkipGAT" in namespace                   # the model file of "Your own model"


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_docs_links_resolve(page):
    assert broken_links(DOCS / page) == []
