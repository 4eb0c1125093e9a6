"""The README is the front door: its commands, its tour, its links and its numbers stay true.

Every ```python block of README.md runs, in order and in one namespace, in a scratch folder;
the GPU block only where the cuda executor can run (``tests/gpu/test_gpu_readme.py`` runs it
in Numba's simulator). The first block is the tour: short, and showing the building blocks, a
composed module, a built-in layer and training. Every link resolves (a ``#fragment`` to a
heading of the linked markdown file), and every number of the results table is in a file
that its row or its column links.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TOUR_MAX_LINES = 35


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def is_gpu_block(block: str) -> bool:
    return 'get_executor("cuda")' in block


def cuda_available() -> bool:
    from gblas_gnn.executors import get_executor

    try:
        get_executor("cuda")
    except Exception:                 # noqa: BLE001 - no numba-cuda, no GPU, no simulator
        return False
    return True


def run_blocks(blocks: list[str], name: str) -> dict:
    """Execute the blocks in order in one namespace, skipping those that cannot run here:
    PyTorch Geometric interop without torch-geometric, the GPU example without a cuda
    executor."""
    namespace: dict = {"__name__": "__readme__"}
    for i, block in enumerate(blocks):
        if "torch" in block and importlib.util.find_spec("torch_geometric") is None:
            continue
        if is_gpu_block(block) and not cuda_available():
            continue
        exec(compile(block, f"{name} python block {i + 1}", "exec"), namespace)
    return namespace


def heading_anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a markdown file's headings (outside code blocks)."""
    text = re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M)
    anchors = set()
    for title in re.findall(r"^#+ (.+)$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def broken_links(path: Path) -> list[str]:
    """The relative links of a markdown file whose target or heading does not exist."""
    text = path.read_text()
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue                                  # an absolute URL
        file, _, fragment = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists():
            broken.append(target)
        elif fragment and linked.suffix == ".md" and \
                fragment not in heading_anchors(linked.read_text()):
            broken.append(target)
    return broken


TEST_COMMAND = 'python3 -m pip install -e ".[test]" && python3 -m pytest -q -n auto'


def test_ci_runs_the_readmes_test_command_from_an_empty_kernel_cache():
    """CI sees what a new user sees: the README's test command, with the generated kernels'
    cache in a fresh folder (a cache warmed by earlier runs on the machine would hide the
    compile time of a cold start), and no peer library's environment (DGL), which a new
    user's machine does not have."""
    ci = (README.parent / ".ci" / "run").read_text()
    lines = [line.strip() for line in ci.splitlines() if line.strip() and
             not line.lstrip().startswith("#")]
    assert lines[-1] == TEST_COMMAND
    for variable in ("GBLAS_GNN_KERNEL_CACHE", "GBLAS_GNN_PEERS_DIR"):
        fresh = [line for line in lines if line.startswith(f"export {variable}=")]
        assert fresh and "mktemp -d" in fresh[0], variable
        assert lines.index(fresh[0]) < len(lines) - 1


def test_readme_opens_with_the_two_commands():
    text = README.read_text()
    first = text.split("\n## ")[0]
    commands = [line.strip() for line in first.splitlines() if line.startswith("    ")]
    assert commands == ['python3 -m pip install -e . && gblas-gnn train', TEST_COMMAND]
    usage = text.split("\n## A tour\n")[1].split("```python")[0]
    assert "float32 unless float64 is asked for" in " ".join(usage.split())


def test_the_tour_is_short_and_shows_the_library():
    tour = python_blocks(README.read_text().split("\n## A tour\n")[1])[0]
    assert len(tour.splitlines()) <= TOUR_MAX_LINES
    assert "gg.ops.sddmm" in tour and "gg.ops.aggregate" in tour          # the building blocks
    composed = re.search(r"^class \w+\(gg\.nn\.Module\):.*?\n(.*?)^\S", tour, flags=re.S | re.M)
    assert composed and "def forward" in composed[1]                      # a composed module
    assert "def backward" not in composed[1] and ".backward(" in tour     # ... its derived backward
    assert "gg.nn.GATConv(" in tour                                       # a built-in layer
    assert "fit(" in tour and "test accuracy" in tour                     # training


def test_readme_code_runs_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(README.read_text())
    assert len(blocks) >= 2
    run_blocks(blocks, "README.md")
    assert re.search(r"test accuracy 0\.\d{3}", capsys.readouterr().out)


def test_readme_links_resolve():
    assert broken_links(README) == []


def _numbers(text: str) -> list[str]:
    return re.findall(r"\d+(?:\.\d+)?", text)


def _recorded(token: str, values: list[float]) -> bool:
    """Whether a table entry is one of the recorded values, as printed (rounded to the
    entry's decimals)."""
    decimals = len(token.partition(".")[2])
    return any(f"{v:.{decimals}f}" == token for v in values)


def test_every_number_of_the_results_table_is_in_a_linked_file():
    section = README.read_text().split("\n## Results\n")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header, rows = rows[0], rows[2:]
    cells = [c.strip() for c in header.strip("|").split("|")]
    column_sources = [re.findall(r"\]\(([^)]+)\)", c) for c in cells]
    assert cells[0] == "layer" and cells[-1] == "source"
    assert {"GAT", "AGNN", "GCN"} <= {r.strip("|").split("|")[0].strip() for r in rows}
    for row in rows:
        values = [c.strip() for c in row.strip("|").split("|")]
        assert len(values) == len(cells), row
        row_sources = re.findall(r"\]\(([^)]+)\)", values[-1])
        for column, value in enumerate(values[1:-1], start=1):
            files = row_sources + column_sources[column]
            if not _numbers(re.sub(r"\[.*?\]\(.*?\)", "", value)):
                continue
            assert files, f"{values[0]}, column {column}: numbers without a source"
            assert all(f.startswith("bench/results/") for f in files)
            recorded = [float(x) for f in files for x in _numbers(
                re.sub(r"(?<=\d),(?=\d{3}\b)", "", (ROOT / f).read_text()))]   # 1,599,227
            for token in _numbers(value):
                assert _recorded(token, recorded), f"{values[0]}: {token} is in none of {files}"
