"""No executor reaches into another's internals (issue 23, "a narrow seam").

The executors ``cpu`` (``gblas_gnn.executors.cpu``), ``cuda`` (``gblas_gnn.gpu``) and ``dist``
(``gblas_gnn.dist``) share what they share through public modules
(``gblas_gnn.executors.patterns``, ``.alignment``, ``.contexts``, ``.program_runtime``,
``gblas_gnn.codegen.kernel_cache``) and through each other's public API (the ``dist``
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


#: modules that use only the public members of the objects they are given (issue 34:
#: composed modules' machinery works through ``nn.Module``'s public surface)
PUBLIC_ONLY = ("nn/composed.py",)


def _private_reads(tree: ast.AST) -> list[str]:
    """``line: expr._x`` for every ``_``-prefixed (not dunder) attribute read or written on an
    object other than ``self`` or ``cls``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                and not node.attr.startswith("__") \
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_composed_modules_machinery_reads_no_private_member():
    found = [f"{path}:{hit}" for path in PUBLIC_ONLY
             for hit in _private_reads(ast.parse((SRC / path).read_text(), path))]
    assert not found, "private members of another object read:\n" + "\n".join(found)


def test_the_scan_sees_a_private_member_read():
    tree = ast.parse("def f(module, m):\n    x = module._cache\n    m._grad = 1\n"
                     "    module.params = self._y\n    return m.__dict__\n")
    assert _private_reads(tree) == ["2: module._cache", "3: m._grad"]


# ---------------------------------------------------------------------- the package order
#: the layers, bottom to top: a module may import its own layer and the layers below it, never
#: one above (docs/design.md, "Layout"). A module belongs to the layer of its longest prefix.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("meanings", ("gblas_gnn._validate", "gblas_gnn._io", "gblas_gnn._progress",
                  "gblas_gnn._graphblas_adapter", "gblas_gnn.semirings")),
    ("ir", ("gblas_gnn.ir",)),
    ("codegen", ("gblas_gnn.codegen",)),
    ("executors", ("gblas_gnn.executors", "gblas_gnn.gpu")),
    ("graphs", ("gblas_gnn.edge_attr", "gblas_gnn.relations", "gblas_gnn.relation_segments",
                "gblas_gnn.graph", "gblas_gnn.hetero", "gblas_gnn.data")),
    ("grid", ("gblas_gnn.dist",)),             # its executor runs on its graphs' blocks
    ("front end", ("gblas_gnn.compose",)),
    ("algebra", ("gblas_gnn.ops", "gblas_gnn.virtual")),
    ("layers", ("gblas_gnn.nn", "gblas_gnn.usermodel")),
    ("training", ("gblas_gnn.train", "gblas_gnn.dist.cost", "gblas_gnn.dist.planning",
                  "gblas_gnn.gpu._program_catalogue", "gblas_gnn.gpu.compile")),
    ("command", ("gblas_gnn.cli", "gblas_gnn.__main__", "gblas_gnn")),
)


def _layer(module: str) -> int:
    best, rank = "", None
    for k, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
                best, rank = prefix, k
    assert rank is not None, f"{module} is in no layer of LAYERS"
    return rank


def _executed(tree: ast.AST):
    """The import statements of ``tree`` that run (at the top or deferred inside a function),
    not those under ``if TYPE_CHECKING:`` (they never execute)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for s in node.orelse for n in _executed_stmt(s))
            continue
        yield from _executed_stmt(node)


def _executed_stmt(node: ast.AST):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from _executed(node)


def _graph(sources) -> dict[str, dict[str, int]]:
    """``{module: {module it imports: line}}`` over our modules; ``from P import x`` points at
    ``P.x`` when that is a module, else at ``P`` (a parent package's ``__init__`` that runs
    first on any import is not an edge: it is Python's order, not ours)."""
    sources = list(sources)
    modules = {_module_name(path) for path, _ in sources}

    def resolve(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    edges: dict[str, dict[str, int]] = {}
    for path, tree in sources:
        me = _module_name(path)
        package = me if path.name == "__init__.py" else me.rpartition(".")[0]
        out = edges.setdefault(me, {})
        for node in _executed(tree):
            if isinstance(node, ast.Import):
                targets = [resolve(a.name) for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - (node.level - 1)]
                                    + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else resolve(base)
                           for a in node.names]
            for target in targets:
                if target and target != me:
                    out.setdefault(target, node.lineno)
    return edges


def _circles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_anywhere_deferred_imports_included():
    circles = _circles(_graph(_sources()))
    assert not circles, "import circles:\n" + "\n".join(" ↔ ".join(c) for c in circles)


def test_every_import_points_down_the_layers():
    wrong = []
    for me, targets in _graph(_sources()).items():
        for target, line in targets.items():
            if _layer(target) > _layer(me):
                wrong.append(f"{me}:{line} ({LAYERS[_layer(me)][0]}) imports {target} "
                             f"({LAYERS[_layer(target)][0]})")
    assert not wrong, "imports that point up:\n" + "\n".join(sorted(wrong))


def _parsed(files: dict[str, str]):
    return [(SRC / path, ast.parse(text)) for path, text in files.items()]


def test_the_layer_rules_catch_a_circle_and_an_upward_import():
    # a deferred import closes a circle; one under TYPE_CHECKING does not
    files = {"ir/a.py": "from . import b\n",
             "ir/b.py": "def f():\n    from .a import x\n",
             "ir/c.py": ("from typing import TYPE_CHECKING\n"
                         "if TYPE_CHECKING:\n    from .d import y\n"),
             "ir/d.py": "from .c import z\n"}
    edges = _graph(_parsed(files))
    assert _circles(edges) == [["gblas_gnn.ir.a", "gblas_gnn.ir.b"]]
    assert "gblas_gnn.ir.d" not in edges["gblas_gnn.ir.c"]
    assert _layer("gblas_gnn.ir.a") < _layer("gblas_gnn.compose.expr")
    assert _layer("gblas_gnn.dist.cost") > _layer("gblas_gnn.nn.gat") > _layer("gblas_gnn.dist")


def test_the_executor_registry_loads_no_executor():
    """``import gblas_gnn`` (and the registry) import no executor implementation: ``cpu``
    loads on first use, like ``cuda`` and ``dist``."""
    code = ("import sys, gblas_gnn, gblas_gnn.executors as ex\n"
            "loaded = [m for m in ('gblas_gnn.executors.cpu', 'gblas_gnn.executors.primitives',"
            " 'gblas_gnn.gpu', 'gblas_gnn.dist') if m in sys.modules]\n"
            "assert not loaded, loaded\n"
            "ex.get_executor('cpu')\n"
            "assert 'gblas_gnn.executors.cpu' in sys.modules\n")
    import subprocess
    import sys
    subprocess.run([sys.executable, "-c", code], check=True)


def test_no_code_reads_a_private_member_of_an_executor_it_is_handed():
    """A runtime, lowering or benchmark handed an executor (``ex``, ``executor``) uses its
    public methods only (the gpu program runtime read six private ones)."""
    found = []
    bench = SRC.parents[1] / "bench"
    sources = [*_sources(), *((p, ast.parse(p.read_text(), str(p)))
                              for p in sorted(bench.rglob("*.py")))]
    for path, tree in sources:
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                    and not node.attr.startswith("__") and isinstance(node.value, ast.Name) \
                    and node.value.id in ("ex", "executor"):
                found.append(f"{path}:{node.lineno} {node.value.id}.{node.attr}")
    assert not found, "private members of an executor read:\n" + "\n".join(found)
