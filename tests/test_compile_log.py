"""The compile log: one line per compiled signature, from every process that imports the
package with ``$GBLAS_GNN_COMPILE_LOG`` set, and its summary."""

import os
import subprocess
import sys

from gblas_gnn.codegen.compile_log import ENV, read, summarise
from gblas_gnn.codegen.compile_report import main

PROGRAM = """
import numba, numpy as np
import gblas_gnn

def helper(x):
    return x + 1

inner = numba.njit(helper)

@numba.njit
def outer(a):
    return inner(a[0]) * 2

outer(np.ones(3))            # compiles outer (and inner inside it)
outer(np.ones(3))            # no compile
outer(np.ones(3, np.int64))  # a second signature
"""


def _run(log, **env):
    base = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    subprocess.run([sys.executable, "-c", PROGRAM], check=True,
                   env={**base, ENV: str(log), **env})


def test_every_compiled_signature_is_one_line_with_its_test(tmp_path):
    log = tmp_path / "compiles.jsonl"
    _run(log, PYTEST_CURRENT_TEST="tests/x.py::test_y (call)")
    _run(log)
    records = read(log)
    # the outermost compile only: inner is compiled inside outer's
    assert [r["function"] for r in records] == ["outer"] * 4
    assert [r["types"][0].startswith("array(float64") for r in records] == [True, False] * 2
    assert all(r["seconds"] > 0 for r in records)
    assert [r["test"] for r in records] == ["tests/x.py::test_y (call)"] * 2 + [None] * 2
    s = summarise(records)
    assert (s["compiles"], s["functions"], s["processes"]) == (4, 1, 2)
    assert list(s["by_test"]) in (["tests/x.py::test_y", "(outside a test)"],
                                  ["(outside a test)", "tests/x.py::test_y"])
    assert s["by_function"]["<string>:outer"][0] == 4


def test_nothing_is_recorded_without_the_variable(tmp_path):
    """Unset or empty, the variable asks for no log: no listener, no file (not even one
    named by an empty path in the working folder)."""
    base = {k: v for k, v in os.environ.items() if k != ENV}
    check = PROGRAM + "from gblas_gnn.codegen import compile_log\nprint(compile_log.install())\n"
    for env in (base, {**base, ENV: ""}):
        done = subprocess.run([sys.executable, "-c", check], check=True, env=env, cwd=tmp_path,
                              capture_output=True, text=True)
        assert done.stdout.split() == ["False"]
    assert list(tmp_path.iterdir()) == []
    with_log = subprocess.run([sys.executable, "-c", check], check=True, cwd=tmp_path,
                              env={**base, ENV: str(tmp_path / "log")}, capture_output=True,
                              text=True)
    assert with_log.stdout.split() == ["True"] and read(tmp_path / "log")


def test_a_torn_line_is_skipped_and_the_report_prints(tmp_path, capsys):
    log = tmp_path / "compiles.jsonl"
    log.write_text('{"pid": 1, "function": "f", "module": "m.py", "types": [], '
                   '"seconds": 1.5, "test": null}\n{"pid": 2, "func')
    assert main([str(log), "1"]) == 0
    out = capsys.readouterr().out
    assert "1 compiles of 1 functions in 1 processes, 1.5 s" in out
    assert main([]) == 2
