"""The three tiers of :class:`gblas_gnn.executors.Executor` (issue 23; ``docs/design.md``,
"Writing a fourth executor").

* (a) :data:`~gblas_gnn.executors.base.CORE_TIER` is exactly the abstract methods;
* (b) :data:`~gblas_gnn.executors.base.PROCESS_TIER`: the one-process defaults refuse to run
  on an executor of more than one process that did not override them (a reduction over
  vertices would otherwise return this process's share as if it were the sum), and the
  ``dist`` executor overrides every one of them;
* (c) the rest are defaults; the three tiers cover every public method, and the table in
  ``docs/design.md`` lists each method with its tier.

The single-process executors are a class hierarchy by tier (issue 34): ``GraphBLASExecutor``
writes tiers (a) and (b) and no default, ``CPUExecutor`` adds default-tier kernels only, and
``PrimitivesExecutor`` adds its name only, so every default it runs is the base class's by
plain inheritance; no method is patched into any of them.

The fakes here implement the core with numpy over a CSR pattern of their own: no MPI needed.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from gblas_gnn.executors import CPUExecutor, PrimitivesExecutor
from gblas_gnn.executors.base import CORE_TIER, DEFAULT_TIER, PROCESS_TIER, Executor
from gblas_gnn.executors.cpu import GraphBLASExecutor

DESIGN = Path(__file__).resolve().parents[1] / "docs" / "design.md"


class _Pattern:
    """A tiny CSR pattern with values: the fakes' edge tensor."""

    def __init__(self, indptr, indices, values):
        self.indptr, self.indices = np.asarray(indptr), np.asarray(indices)
        self.values = np.asarray(values, np.float64)
        self.nrows, self.ncols, self.nvals = len(indptr) - 1, 3, len(indices)
        self.dtype = self.values.dtype


class OneProcess(Executor):
    """The core, written with numpy, and nothing else."""

    name = "fake"

    def edge_values(self, E):
        return E.values

    def edge_from_values(self, A, values):
        return _Pattern(A.indptr, A.indices, values)

    def _rows(self, E):
        return np.repeat(np.arange(E.nrows), np.diff(E.indptr))

    def gather_rows(self, E, u):
        return np.asarray(u)[self._rows(E)]

    def gather_cols(self, E, v):
        return np.asarray(v)[E.indices]

    def edge_ids(self, A):
        return self._rows(A), A.indices

    def row_reduce(self, E, op="sum"):
        out = np.zeros(E.nrows)
        np.add.at(out, self._rows(E), E.values)
        return out

    def col_reduce(self, E, op="sum"):
        out = np.zeros(E.ncols)
        np.add.at(out, E.indices, E.values)
        return out

    def sddmm(self, A, X, Y):
        return self.edge_from_values(A, (X[self._rows(A)] * Y[A.indices]).sum(axis=1))

    def extreme_aggregate(self, S, H, is_max, keep_context):
        raise NotImplementedError

    def extreme_aggregate_backward(self, ctx, dZ, need_dS=True):
        raise NotImplementedError


class TwoProcesses(OneProcess):
    """A multi-process executor that forgot the process tier."""

    processes = 2


A = _Pattern([0, 2, 3, 3], [0, 2, 1], [1.0, 2.0, 3.0])
X = np.arange(6, dtype=np.float64).reshape(3, 2)
W = np.ones((2, 2))


def _calls(ex):
    """One call of every method of the process tier (by name)."""
    def enter():
        with ex.validation():
            pass

    return {
        "is_root": lambda: ex.is_root,
        "agree": lambda: ex.agree(3),
        "all_agree": lambda: ex.all_agree(True),
        "validation": enter,
        "on_root": lambda: ex.on_root(lambda: 7),
        "gemm": lambda: ex.gemm(X, W),
        "inner": lambda: ex.inner(X, X),
        "vertex_sum": lambda: ex.vertex_sum(X),
        "vertex_scatter": lambda: ex.vertex_scatter(np.array([2, 0]), X[:2], 3),
        "row_dot": lambda: ex.row_dot(X, X),
        "spmm": lambda: ex.spmm(A, X),
        "spmm_t": lambda: ex.spmm_t(A, X),
        "source_rows": lambda: ex.source_rows(A),
        "columns": lambda: ex.columns(A, X),
        "gather_columns": lambda: ex.gather_columns(A, np.arange(3.0)),
        "to_graphblas": lambda: ex.to_graphblas(A),
    }


def test_the_core_is_exactly_the_abstract_methods():
    assert set(Executor.__abstractmethods__) == set(CORE_TIER)


def test_the_tiers_cover_every_public_method_once():
    public = {n for n in vars(Executor) if not n.startswith("_")} - {"name", "xp", "processes"}
    tiers = [*CORE_TIER, *PROCESS_TIER, *DEFAULT_TIER]
    assert len(tiers) == len(set(tiers))
    assert set(tiers) == public


def test_the_process_tier_has_a_call_here_for_every_method():
    assert set(_calls(OneProcess())) == set(PROCESS_TIER)


def test_on_one_process_the_defaults_are_the_local_operations():
    ex = OneProcess()
    np.testing.assert_array_equal(ex.gemm(X, W), X @ W)
    np.testing.assert_array_equal(ex.inner(X, X), X.T @ X)
    np.testing.assert_array_equal(ex.vertex_sum(X), X.sum(axis=0))
    assert ex.vertex_scatter(None, X, 3) is X
    np.testing.assert_array_equal(ex.vertex_scatter(np.array([2, 0]), X[:2], 3),
                                  np.stack([X[1], 0 * X[0], X[0]]))
    np.testing.assert_array_equal(ex.row_dot(X, X), (X * X).sum(axis=1))
    dense = np.zeros((3, 3))
    dense[[0, 0, 1], [0, 2, 1]] = [1.0, 2.0, 3.0]
    np.testing.assert_allclose(ex.spmm(A, X), dense @ X)
    np.testing.assert_allclose(ex.spmm_t(A, X), dense.T @ X)
    assert ex.is_root and ex.agree(3) == 3 and ex.all_agree(True) and ex.on_root(lambda: 7) == 7
    assert ex.source_rows(A) == 3 and ex.columns(A, X) is X
    M = ex.to_graphblas(A)
    assert (M.nrows, M.ncols) == (3, 3)
    np.testing.assert_array_equal(M.to_dense(fill_value=0), dense)


@pytest.mark.parametrize("method", PROCESS_TIER)
def test_a_multi_process_executor_must_override_the_process_tier(method):
    ex = TwoProcesses()
    with pytest.raises(NotImplementedError, match=rf"TwoProcesses\.{method}: .*multi-process "
                                                  rf"executor \(processes = 2\) must override "
                                                  rf"{method}"):
        _calls(ex)[method]()


def test_defaults_built_on_the_process_tier_refuse_too():
    # aggregate's default is spmm's: no silent local sum one level up either
    with pytest.raises(NotImplementedError, match="must override spmm"):
        TwoProcesses().aggregate(A, X, "sum")


def test_the_dist_executor_overrides_the_whole_process_tier():
    from gblas_gnn.dist import DistExecutor

    kept = [name for name in PROCESS_TIER if getattr(DistExecutor, name) is getattr(Executor, name)]
    assert not kept, f"DistExecutor keeps the one-process default of {kept}"
    assert isinstance(DistExecutor.processes, property)


@pytest.mark.parametrize("cls", [CPUExecutor, PrimitivesExecutor])
def test_the_single_process_executors_have_one_process(cls):
    assert cls.processes == 1


def _owner(cls: type, name: str) -> type:
    """The class of ``cls``'s method resolution order that defines ``name``."""
    return next(klass for klass in cls.__mro__ if name in vars(klass))


def _own_members(cls: type) -> set[str]:
    """What the body of ``cls`` defines itself, dunder names and ``abc``'s own
    ``_abc_impl`` aside."""
    return {n for n in vars(cls) if not (n.startswith("__") and n.endswith("__"))} \
        - {"_abc_impl"}


def test_the_primitives_executor_adds_its_name_to_the_cpu_tiers_only():
    assert PrimitivesExecutor.__bases__ == (GraphBLASExecutor,)
    assert _own_members(PrimitivesExecutor) == {"name"}
    assert PrimitivesExecutor.name == "primitives"


def test_the_primitives_executor_runs_every_default_of_the_base_class():
    kept = [n for n in DEFAULT_TIER if _owner(PrimitivesExecutor, n) is not Executor]
    assert not kept, f"PrimitivesExecutor does not run Executor's default of {kept}"
    assert not _own_members(GraphBLASExecutor) & set(DEFAULT_TIER)


def test_the_cpu_executor_adds_default_tier_kernels_only():
    public = {n for n in _own_members(CPUExecutor) if not n.startswith("_")}
    assert public - {"name"} <= set(DEFAULT_TIER)
    assert CPUExecutor.__bases__ == (GraphBLASExecutor,)
    # so cpu and primitives run the same core and process tier (``inner`` included): a
    # difference between them is a difference of the default tier
    for name in (*CORE_TIER, *PROCESS_TIER):
        assert _owner(CPUExecutor, name) is _owner(PrimitivesExecutor, name), name
    assert _owner(PrimitivesExecutor, "inner") is GraphBLASExecutor
    assert not GraphBLASExecutor.__abstractmethods__


@pytest.mark.parametrize("cls", [GraphBLASExecutor, CPUExecutor, PrimitivesExecutor])
def test_no_method_is_patched_into_the_cpu_classes(cls):
    # a function assigned onto the class after its body (setattr) keeps the qualified
    # name of where it was written, e.g. ``Executor.softmax``
    for name, member in vars(cls).items():
        fn = member.fget if isinstance(member, property) else \
            getattr(member, "__func__", member)
        if callable(fn) and hasattr(fn, "__qualname__") and not isinstance(fn, type):
            assert fn.__qualname__.startswith(f"{cls.__name__}."), (name, fn.__qualname__)


def _design_table() -> dict[str, str]:
    """``{method: tier}`` from the tier table of docs/design.md."""
    rows = {}
    for line in DESIGN.read_text().splitlines():
        m = re.match(r"\|\s*`([a-z_]+)`\s*\|\s*\(([abc])\)", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def test_the_design_table_lists_every_method_with_its_tier():
    want = {**{n: "a" for n in CORE_TIER}, **{n: "b" for n in PROCESS_TIER},
            **{n: "c" for n in DEFAULT_TIER}, "processes": "b"}
    assert _design_table() == want
