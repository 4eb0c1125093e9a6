"""Rules the test suite keeps about itself, so that it can fail when the library regresses.

* A test never turns a missing part of the library into a skip: ``pytest.importorskip`` of a
  ``gblas_gnn`` module, or a skip saying a layer or semiring is "not available", would hide
  exactly the regression (a layer that no longer imports) the test is there to catch. Skips
  are for what the machine lacks (torch, mpiexec, a GPU, the Planetoid files).
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
