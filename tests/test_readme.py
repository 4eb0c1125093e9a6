"""The README is the front door: its first lines and its code must stay true.

Every ```python block of README.md runs, in order and in one namespace (the interop block
only where torch-geometric is installed, as with ".[test]"), in a scratch folder; the GPU
block only where the cuda executor can run (``tests/gpu/test_gpu_readme.py`` runs it in
Numba's simulator).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


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


def test_readme_opens_with_the_two_commands():
    text = README.read_text()
    first = text.split("\n## ")[0]
    commands = [line.strip() for line in first.splitlines() if line.startswith("    ")]
    assert commands == ['python3 -m pip install -e . && gblas-gnn train',
                        'python3 -m pip install -e ".[test]" && python3 -m pytest -q']
    usage = text.split("## Using it")[1].split("```python")[0]
    assert "float32 unless float64 is asked for" in " ".join(usage.split())


def test_readme_code_runs_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(README.read_text())
    assert len(blocks) >= 2
    namespace: dict = {"__name__": "__readme__"}
    for i, block in enumerate(blocks):
        if "torch" in block and importlib.util.find_spec("torch_geometric") is None:
            continue
        if is_gpu_block(block) and not cuda_available():
            continue
        exec(compile(block, f"README.md python block {i + 1}", "exec"), namespace)
    assert re.search(r"test accuracy 0\.\d{3}", capsys.readouterr().out)


def test_readme_links_resolve():
    text = README.read_text()
    for target in re.findall(r"\]\(([^)#:]+)\)", text):
        assert (README.parent / target).exists(), target
