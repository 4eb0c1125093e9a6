"""The IR's registries: every operation kind and sink kind is one registered object, names are
unique, and the front end, the reference and the code generators all read the same objects."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gblas_gnn
from gblas_gnn.ir import sinks
from gblas_gnn.ir.primitives import PRIMITIVES, Primitive, primitive, register_primitive
from gblas_gnn.ir.sinks import SINKS, sink_rule

SRC = Path(gblas_gnn.__file__).resolve().parent


def test_every_operation_kind_the_front_end_emits_is_registered():
    """The kinds ``Builder.op`` is called with by the expression nodes (the only place a node
    meets the IR) and the builder itself are exactly the registered ones."""
    trees = [ast.parse((SRC / "compose" / name).read_text()) for name in ("expr.py", "lower.py")]
    emitted = {node.args[0].value for tree in trees for node in ast.walk(tree)
               if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
               and node.func.attr == "op" and node.args and isinstance(node.args[0], ast.Constant)}
    emitted |= {"row", "col"}                   # Gather's side, a variable there
    assert emitted == set(PRIMITIVES)


def test_every_sink_the_front_end_builds_is_registered():
    assert set(SINKS) == {"values", "rows", "cols", "aggregate", "spmm_t", "messages"}
    with pytest.raises(ValueError, match="unknown sink"):
        sink_rule(("nowhere", None))


def test_every_runtime_names_registered_sinks():
    """The runtimes' and the generators' per-sink tables (the one-process and device
    runtime's, the cpu and cuda kernels' code, the grid's completions) are keyed by
    registered sink names; the grid runs the column-side sinks
    (``cols``, ``spmm_t``) through the reference lowering."""
    from gblas_gnn.executors.cpu._program_kernels import SINK_CODE
    from gblas_gnn.executors.program_runtime import SINK_RUNTIMES
    from gblas_gnn.gpu._program_source import SINK_CODE as GPU_SINK_CODE

    assert set(SINK_RUNTIMES) == set(SINKS) == set(SINK_CODE) == set(GPU_SINK_CODE)
    pytest.importorskip("mpi4py")
    from gblas_gnn.dist.programs import GRID_SINKS

    assert set(GRID_SINKS) == set(SINKS) - {"cols", "spmm_t"}


def test_unknown_and_duplicate_kinds_are_refused():
    with pytest.raises(ValueError, match="unknown operation"):
        primitive("no_such_kind")

    class Again(Primitive):
        name = "map"

    with pytest.raises(ValueError, match="new name"):
        register_primitive(Again())
    with pytest.raises(ValueError, match="new name"):
        sinks.register_sink(sinks.Values())


def test_no_module_dispatches_on_an_operation_kind_by_string_in_the_rules():
    """The reference evaluator and the code emitter hold no ``kind ==`` test: the rules are
    the primitives' (structure queries of the plan and runtimes read kinds, not rules)."""
    for module in ("ir/reference.py", "codegen/scalar.py"):
        tree = ast.parse((SRC / module).read_text())
        compares = [node for node in ast.walk(tree) if isinstance(node, ast.Compare)
                    and any(isinstance(side, ast.Name) and side.id == "kind"
                            for side in (node.left, *node.comparators))]
        assert not compares, f"{module} tests an operation kind {len(compares)} times"


def test_every_class_name_in_the_ir_and_codegen_is_unique():
    names: dict[str, list[str]] = {}
    for package in ("ir", "codegen", "compose"):
        for path in (SRC / package).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    names.setdefault(node.name, []).append(f"{package}/{path.name}")
    assert {n: where for n, where in names.items() if len(where) > 1} == {}
