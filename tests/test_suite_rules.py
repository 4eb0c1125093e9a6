"""Rules the test suite keeps about itself, so that it can fail when the library regresses.

* A test never turns a missing part of the library into a skip: ``pytest.importorskip`` of a
  ``gblas_gnn`` module, or a skip saying a layer or semiring is "not available", would hide
  exactly the regression (a layer that no longer imports) the test is there to catch. Skips
  are for what the machine lacks (torch, mpiexec, a GPU, the Planetoid files).
* Every test ends: pytest-timeout gives each 300 s unless it says otherwise, the tests that
  launch a sub-suite, an MPI job or a notebook are marked ``slow`` with a timeout above
  their launches' own, and the default run (``python -m pytest``, what CI runs) runs them.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _calls(tree: ast.AST, name: str):
    """The calls ``pytest.<name>(...)`` in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == name and isinstance(node.func.value, ast.Name) \
                and node.func.value.id == "pytest":
            yield node


def _text(node: ast.Call) -> str:
    """The first argument's literal text ('' unless it is a string or an f-string)."""
    if not node.args:
        return ""
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr):
        return "".join(v.value for v in arg.values if isinstance(v, ast.Constant))
    return ""


def test_no_test_skips_a_missing_part_of_the_library():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for call in _calls(tree, "importorskip"):
            if _text(call).split(".")[0] == "gblas_gnn":
                found.append(f"{path.relative_to(TESTS)}:{call.lineno} importorskip"
                             f"({_text(call)!r})")
        for call in _calls(tree, "skip"):
            if "not available" in _text(call):
                found.append(f"{path.relative_to(TESTS)}:{call.lineno} skip({_text(call)!r})")
    assert not found, "skips that hide a regression:\n" + "\n".join(found)


def test_every_test_has_a_timeout_and_the_default_run_runs_the_slow_ones(pytestconfig):
    assert float(pytestconfig.getini("timeout")) == 300
    # a timeout raises in the test (its subprocess is killed, its fixtures clean up), where
    # "thread" would end the whole session
    assert pytestconfig.getini("timeout_method") == "signal"
    markers = {m.split(":")[0].strip() for m in pytestconfig.getini("markers")}
    assert {"slow", "cpu_only", "gpu"} <= markers
    assert "--strict-markers" in pytestconfig.getini("addopts")
    assert "slow" not in " ".join(pytestconfig.getini("addopts"))      # nothing deselected


def _marks(fn) -> dict:
    return {m.name: m for m in getattr(fn, "pytestmark", [])}


def test_tests_that_launch_long_jobs_are_slow_with_a_timeout_above_their_launches():
    import test_mpi
    import test_notebooks
    import test_suite_on_executors as suites

    launched = {suites.test_gpu_suite_in_the_cuda_simulator: 1500,
                suites.test_gpu_kernels_at_the_full_warp_width_in_the_cuda_simulator: 900,
                test_mpi.test_grid_suite: 600, test_notebooks.test_notebook_runs: 600}
    for fn, seconds in launched.items():
        marks = _marks(fn)
        assert "slow" in marks, fn.__name__
        assert marks["timeout"].args[0] > seconds, fn.__name__
