"""No executor reaches into another's internals (issue 23, "a narrow seam").

The executors ``cpu`` (``gblas_gnn.executors.cpu``), ``cuda`` (``gblas_gnn.gpu``) and ``dist``
(``gblas_gnn.dist``) share what they share through public modules
(``gblas_gnn.executors.patterns``, ``.alignment``, ``.contexts``, ``.program_context``,
``gblas_gnn.compose.kernel_cache``) and through each other's public API (the ``dist``
executor runs the cpu executor's fused programs through ``gblas_gnn.executors.cpu.programs``
and ``CPUExecutor.csr_pattern``). This file reads the source: a module outside one of those
packages that imports a ``_``-prefixed module of it, or code that reads a private member of
the grid's local executor (``self.local._x``), fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gblas_gnn

SRC = Path(gblas_gnn.__file__).resolve().parent
#: the executor packages whose ``_`` modules are theirs alone
EXECUTORS = ("gblas_gnn.executors.cpu", "gblas_gnn.gpu", "gblas_gnn.dist")


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path, tree: ast.AST):
    """``(line, module)`` for every module an import statement of ``path`` names (for
    ``from M import x``: ``M`` and ``M.x``, as ``x`` may be a submodule)."""
    package = _module_name(path)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield node.lineno, module
            for alias in node.names:
                yield node.lineno, f"{module}.{alias.name}"


def _private_of(module: str) -> str | None:
    """The executor package whose private module ``module`` is (None if it is none)."""
    for pkg in EXECUTORS:
        if module.startswith(pkg + "."):
            rest = module[len(pkg) + 1:].split(".")
            if any(part.startswith("_") and part != "__init__" for part in rest):
                return pkg
    return None


def _sources():
    for path in sorted(SRC.rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def test_no_module_imports_another_executors_private_modules():
    found = []
    for path, tree in _sources():
        me = _module_name(path)
        for line, module in _imported(path, tree):
            owner = _private_of(module)
            if owner is not None and not (me == owner or me.startswith(owner + ".")):
                found.append(f"{path.relative_to(SRC)}:{line} imports {module}")
    assert not found, "private modules of an executor imported from outside it:\n" + \
        "\n".join(found)


def test_the_scan_sees_a_private_import():
    # the rule itself: what it must catch, and what it must let through
    assert _private_of("gblas_gnn.executors.cpu._programs") == "gblas_gnn.executors.cpu"
    assert _private_of("gblas_gnn.gpu._pattern.DevicePattern") == "gblas_gnn.gpu"
    assert _private_of("gblas_gnn.executors.cpu.programs") is None
    assert _private_of("gblas_gnn.executors.patterns") is None
    tree = ast.parse("from ..executors.cpu._pattern import MatrixCache\n")
    modules = [m for _, m in _imported(SRC / "dist" / "executor.py", tree)]
    assert "gblas_gnn.executors.cpu._pattern" in modules


def test_no_code_reads_a_private_member_of_the_local_executor():
    found = []
    for path, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                    and not node.attr.startswith("__") \
                    and isinstance(node.value, ast.Attribute) and node.value.attr == "local":
                found.append(f"{path.relative_to(SRC)}:{node.lineno} .local.{node.attr}")
    assert not found, "private members of another executor read:\n" + "\n".join(found)
