"""The README's GPU example runs as written on the cuda executor (in Numba's simulator here)."""

from __future__ import annotations

from test_readme import README, is_gpu_block, python_blocks


def test_the_readme_gpu_example_runs(cuda, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    blocks = [b for b in python_blocks(README.read_text()) if is_gpu_block(b)]
    assert len(blocks) == 1
    exec(compile(blocks[0], "README.md GPU block", "exec"), {"__name__": "__readme__"})
    assert "(4, 8) Transfers(" in capsys.readouterr().out
