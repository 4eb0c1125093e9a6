"""Generated kernels equal the unfused reference on random expressions, forward and
backward, on the executor under test (seeded, one per sink): random elementwise chains over gathered
rows, columns, parameters, A's values and dropout scales, rank-3 contractions, zero, one or
two softmaxes, heads, every fused aggregation and semiring, row and column reductions, the
transposed product, float32 and float64, graphs with empty rows and isolated vertices.

The reference is the reference lowering (the ``primitives`` executor runs it); on the
``primitives`` executor (the ``[primitives]`` tests) the cpu executor's generated kernels are
held to it instead. Also:
the kernel cache is keyed by the whole structure (two formulations never share a module), and
the generated source is built from the structure alone (no user text in it), for the cpu and
the cuda generators.
"""

from __future__ import annotations

import ast
import dataclasses

import numba
import numpy as np
import pytest
from kernel_ast import Module

import gblas_gnn as gg
from gblas_gnn import compose, ops
from gblas_gnn.codegen.kernel_args import Layout
from gblas_gnn.compose.expr import EdgeDropout, Masked, Softmax, Zip
from gblas_gnn.compose.lower import build
from gblas_gnn.executors import CPUExecutor, PrimitivesExecutor, to_numpy
from gblas_gnn.executors.cpu._program_kernels import signature_key, source
from gblas_gnn.ir.plan import plan
from gblas_gnn.ir.program import Op
from gblas_gnn.ops import rep

UNARY = [lambda e: ops.tanh(e), lambda e: ops.sigmoid(e), lambda e: ops.leaky_relu(e, 0.1),
         lambda e: ops.elu(e, 0.7), lambda e: ops.relu(e), lambda e: -e, lambda e: e ** 2,
         lambda e: ops.exp(-(e * e)), lambda e: ops.sqrt(e * e + 1.0),
         lambda e: ops.log(ops.exp(e) + 1.0)]
SINKS = ["sum", "mean", "max", "min", "max_plus", "min_plus", "max_times", "min_times",
         "avg", "rows_sum", "rows_max", "rows_min", "cols", "spmm_t"]


def _reference_for(executor):
    return CPUExecutor() if isinstance(executor, PrimitivesExecutor) else PrimitivesExecutor()


def _leaf(rng, A, X, Y, u, v, P, heads):
    kind = rng.integers(6)
    if kind == 0:
        return rep(u)
    if kind == 1:
        return rep(v).T
    if kind == 2:                               # a rank-3 (rank-4 with heads) contraction
        inner = UNARY[rng.integers(len(UNARY))](rep(X) + rep(Y).T)
        return (inner * P["a"]).sum(-1)
    if kind == 3:
        return (rep(X) * rep(Y).T).sum(-1) * P["beta"]
    if kind == 4:
        return rep(u) * rep(v).T + 0.5
    return rep(ops.tanh(u)).T - P["beta"]


def _chain(rng, e, A, X, Y, u, v, P, heads, depth):
    for _ in range(depth):
        if rng.random() < 0.5:
            e = UNARY[rng.integers(len(UNARY))](e)
        else:
            other = _leaf(rng, A, X, Y, u, v, P, heads)
            op = rng.integers(5)
            e = [e + other, e - other, e * other, e / (ops.exp(other) + 1.0),
                 ops.maximum(e, other)][op]
    return e


def random_formulation(seed: int, heads, sink: str):
    """A function ``fn(A, X, Y, u, v, P)`` built from the seed (see the module docstring)."""
    def fn(A, X, Y, u, v, P):
        rng = np.random.default_rng(seed)
        e = _chain(rng, _leaf(rng, A, X, Y, u, v, P, heads), A, X, Y, u, v, P, heads,
                   int(rng.integers(1, 4)))
        masked = A * e if rng.random() < 0.5 else ops.structure(A) * e
        S = masked
        for _ in range(int(rng.integers(0, 3))):
            S = ops.softmax(S)
            if rng.random() < 0.5:
                S = _chain(rng, S, A, X, Y, u, v, P, heads, 1)
        if rng.random() < 0.3:
            S = ops.edge_dropout(S, 0.3, key=int(rng.integers(1 << 30)))
        if sink == "avg":
            S = ops.softmax(S)                      # nonnegative weights
        if sink.startswith("rows_"):
            return _rows(S, sink[5:])
        if sink == "cols":
            return ops.col_sum(S)
        if sink == "spmm_t":
            return ops.spmm_t(S, Y)
        return ops.aggregate(S, Y, sink)
    return fn


def _rows(S, op):
    return {"sum": ops.row_sum, "max": ops.row_max, "min": ops.row_min}[op](S)


def _inputs(seed: int, n: int, edges: int, heads, dtype):
    rng = np.random.default_rng(seed)
    active = max(n - 2, 1)
    g = gg.Graph.from_edges(rng.integers(0, active, edges), rng.integers(0, active, edges),
                            n, values=rng.uniform(0.5, 2.0, edges), dtype=dtype)
    hshape = () if heads is None else (heads,)
    arrays = [rng.standard_normal((n, *hshape, 3)), rng.standard_normal((n, *hshape, 3)),
              rng.standard_normal((n, *hshape)), rng.standard_normal((n, *hshape))]
    P = {"a": rng.standard_normal(3), "beta": np.asarray(0.8)}
    return g, [a.astype(dtype) for a in arrays], {k: v.astype(dtype) for k, v in P.items()}


def _run(fn, ex, g, arrays, P, R_seed):
    args = [ex.asarray(a) for a in arrays] + [{k: ex.asarray(v) for k, v in P.items()}]
    out, pull = compose.vjp(lambda *a: fn(g.A, *a), *args, executor=ex, vertex=(0, 1, 2, 3))
    R = np.random.default_rng(R_seed).standard_normal(np.shape(out)).astype(out.dtype)
    grads = pull(ex.asarray(R))
    return to_numpy(out), [to_numpy(x) for x in grads[:4]], \
        {k: to_numpy(v) for k, v in grads[4].items()}


TROPICAL = ("max", "min", "max_plus", "min_plus", "max_times", "min_times", "rows_max",
            "rows_min")
#: every sink once, alternately with one head and with two: a random formulation each
REFERENCE_CASES = [(None if k % 2 == 0 else 2, sink) for k, sink in enumerate(SINKS)]


@pytest.mark.parametrize("heads, sink", REFERENCE_CASES,
                         ids=[f"{'one-head' if h is None else 'two-heads'}-{s}"
                              for h, s in REFERENCE_CASES])
def test_generated_kernels_equal_the_reference(executor, heads, sink):
    """A random formulation ending in ``sink`` (seeded by the case: the graph's size, its
    edge count and the dtype; the first case's graph has no edge at all, every graph has
    isolated vertices) equals the reference executor's, forward and every gradient. The
    simulator runs every third case (it runs each kernel launch in Python threads)."""
    k = SINKS.index(sink)
    if executor.name == "cuda" and k % 3:
        pytest.skip("the simulator runs every third sink")
    reference = _reference_for(executor)
    rng = np.random.default_rng(7919 * k + 11)
    seed, n, edges = int(rng.integers(0, 2**20)), int(rng.integers(2, 10)), \
        int(rng.integers(0, 29))
    edges = 0 if k == 0 else edges
    # near-ties of max and min must not flip between two roundings: float64 for those
    dtype = np.float64 if sink in TROPICAL or rng.random() < 0.5 else np.float32
    fn = random_formulation(seed, heads, sink)
    g, arrays, P = _inputs(seed, n, edges, heads, dtype)
    got = _run(fn, executor, g, arrays, P, seed)
    want = _run(fn, reference, g, arrays, P, seed)
    tol = dict(rtol=2e-4, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(got[0], want[0], err_msg=f"{sink}: forward", **tol)
    for a in range(4):
        np.testing.assert_allclose(got[1][a], want[1][a], err_msg=f"{sink}: argument {a}",
                                   **tol)
    for key in P:
        np.testing.assert_allclose(got[2][key], want[2][key],
                                   err_msg=f"{sink}: parameter {key}", **tol)


MANY_SINKS = ["sum", "mean", "max", "rows_sum", "spmm_t"]
HEAD_PATHS = {3: "written-out", 4: "flat-entries", 9: "above-the-cap"}
#: every sink on two of the three paths and the max (its winners) on all three, each path
#: under three sinks or more and each seed over every sink and path: eleven formulations to
#: compile, not fifteen (a cold suite's time is mostly compiling)
MANY_HEAD_CASES = [("sum", 3), ("sum", 4), ("mean", 3), ("mean", 4), ("max", 3), ("max", 4),
                   ("max", 9), ("rows_sum", 4), ("rows_sum", 9), ("spmm_t", 4), ("spmm_t", 9)]


@pytest.mark.parametrize("sink, heads", MANY_HEAD_CASES,
                         ids=[f"{s}-{HEAD_PATHS[h]}" for s, h in MANY_HEAD_CASES])
def test_many_heads_equal_the_reference(executor, heads, sink):
    """Three heads (the cpu forward writes them out, edge by edge), four (written out, the
    softmax's exponentials and normalisation over the row's flat entries) and nine (above
    ``UNROLLED_HEADS``: a loop over heads), in float64: a random formulation each, the two
    seeds alternating over the cases (each seed's formulations cover every head count and
    sink between them)."""
    reference = _reference_for(executor)
    for seed in ((5, 17)[(MANY_SINKS.index(sink) + heads) % 2],):
        fn = random_formulation(seed, heads, sink)
        g, arrays, P = _inputs(seed, 9, 30, heads, np.float64)
        got, want = (_run(fn, ex, g, arrays, P, seed) for ex in (executor, reference))
        np.testing.assert_allclose(got[0], want[0], rtol=1e-9, atol=1e-11)
        for a, b in zip(got[1], want[1], strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)


def _gat_structure(heads: int, width: int):
    g = gg.Graph.from_edges([0, 1, 2], [1, 2, 0], 3)
    u, v = (np.ones((3, heads), np.float32) for _ in range(2))
    X = np.ones((3, heads, width), np.float32)
    return _structure(g.A, ops.leaky_relu(rep(u) + rep(v).T, 0.2), ("aggregate", "sum"), X)


def _module(p) -> Module:
    """The cpu generator's module for plan ``p``, parsed (:mod:`kernel_ast`)."""
    return Module(source(p))


def _operands(p, role: str, narrow: bool | None = None) -> list[str]:
    """The kernels' argument names of the operands of ``role`` (``"row"``, ``"col"``, …);
    ``narrow``: only those of one number a row (True) or of more (False)."""
    return [name for name, (r, trail) in zip(Layout.of(p).operands, p.structure.roles,
                                              strict=True)
            if r == role and (narrow is None or narrow == all(d == 1 for d in trail))]


def _constant_args(call: ast.Call) -> tuple:
    """The literal arguments of ``call`` (its offset and width for ``_dot_at``)."""
    return tuple(a.value for a in call.args if isinstance(a, ast.Constant))


def _is_call(node, name: str, first: str | None = None) -> bool:
    """Whether ``node`` is ``name(...)`` (with ``first``: ``name(first, ...)``)."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == name and (first is None or bool(node.args) and
                                          isinstance(node.args[0], ast.Name)
                                          and node.args[0].id == first))


@pytest.mark.cpu_only
def test_the_cpu_forward_writes_out_up_to_eight_heads():
    """The cpu module's key holds the head counts its forward writes out: 2 and 4 heads get
    modules of their own. From 2 to 8 heads the forward walks each row once per phase and the
    column pass visits an edge's heads without a loop over them; 9 and 10 heads keep the loop
    over heads (and share a module). With the heads written out, the sink and the column pass
    run over the lanes of all heads at once, each lane's head picked by selects against the
    bounds ``h · f`` written in as literals (the width is part of the key), the loops' trip
    count ``heads · f`` a literal from four heads on; a head's dot in the column pass runs
    over its own lanes (offset and width literals). The softmax walks the row's entries flat
    where the head count is a power of two (4), the edges otherwise (3). Each row maximum is
    a select (``max``), not a branch around an update.

    Checked on the generated modules' syntax trees (:mod:`kernel_ast`), not their text."""
    assert signature_key(_gat_structure(2, 8)) != signature_key(_gat_structure(4, 8))
    # the lanes' width is written in where the heads are (4), not where they loop (9)
    assert signature_key(_gat_structure(4, 8)) != signature_key(_gat_structure(4, 16))
    assert signature_key(_gat_structure(9, 8)) == signature_key(_gat_structure(9, 16))
    assert signature_key(_gat_structure(1, 8)) == signature_key(_gat_structure(1, 16))
    assert signature_key(_gat_structure(9, 8)) == signature_key(_gat_structure(10, 8))

    modules = {h: _module(_gat_structure(h, 8)) for h in (2, 3, 4, 8, 9, 10)}
    for h, m in modules.items():
        for kernel in ("forward", "column_pass"):
            loops = m[kernel].head_loops
            assert (not loops) == (h <= 8), \
                f"{h} heads, {kernel}: loops over heads {[ast.unparse(x.iter) for x in loops]}"
            assert m[kernel].edge_loops

    three, four, nine = modules[3], modules[4], modules[9]
    for kernel in ("forward", "column_pass"):
        # the lanes of every head in one loop, each lane's head by selects on h·f literals
        assert three[kernel].lane_bounds() == {8, 16}
        assert four[kernel].lane_bounds() == {8, 16, 24}
        assert not nine[kernel].lane_loops
        # the trip count: the row's length below four heads, heads·f written in from four
        assert three[kernel].lane_trip_counts() and \
            set(three[kernel].lane_trip_counts()) == {None}
        assert four[kernel].lane_trip_counts() and \
            set(four[kernel].lane_trip_counts()) == {32}
    # no per-head walk over a head's features: its dot over its own lanes, no per-head axpy
    assert sorted(_constant_args(c) for c in four["column_pass"].calls("_dot_at")) == \
        [(0, 8), (8, 8), (16, 8), (24, 8)]
    for kernel in ("forward", "column_pass"):
        assert not four[kernel].calls("_dot") and not four[kernel].calls("_axpy")
    assert nine["column_pass"].calls("_dot") and nine["forward"].calls("_axpy")
    # the exponentials and the normalisation over the row's flat entries (a power of two)
    assert len(four["forward"].flat_entry_loops()) == 2
    assert not three["forward"].flat_entry_loops() and not nine["forward"].flat_entry_loops()
    # each row maximum is a select, not a branch around an update
    for m, heads in ((four, 4), (nine, 1)):
        maxima = m["forward"].running_maxima()
        assert len(maxima) == heads and all(maxima.values())
        for name, updates in maxima.items():
            for u in updates:
                assert _is_call(u.value, "max", first=name), ast.unparse(u)
                assert not m["forward"].under_branch(u), ast.unparse(u)



@pytest.mark.cpu_only
def test_the_cpu_column_pass_prefetches_every_row_operand_it_gathers():
    """The column pass asks ahead for the row side's numbers of the edge it will reach, even
    one number a row (GAT's ``d_i``, one more random line beside ``dZ_i`` and ``Ψ``); the
    row pass leaves a source operand of one number to the hardware (checked on the syntax
    tree, :mod:`kernel_ast`)."""
    p = _gat_structure(1, 8)
    m = _module(p)
    column = m["column_pass"]
    rows = _operands(p, "row")
    assert rows and all(column.reads(r) for r in rows)
    # the row of an edge PREFETCH_AHEAD positions on (by the CSC's rows), not of this edge
    ahead = {s.value.id for s in column.prefetched() if column.ahead(s.slice, "crow")}
    assert set(rows) <= ahead, (rows, ahead)
    narrow = _operands(p, "col", narrow=True)
    assert narrow and all(m["forward"].reads(c) for c in narrow)
    assert not {s.value.id for s in m["forward"].prefetched()} & set(narrow)


@pytest.mark.cpu_only
def test_the_cpu_kernels_index_with_unsigned_integers_only(monkeypatch):
    """Every index buffer and item bound a generated kernel receives is unsigned (numba then
    never tests an index for wrap-around), on one thread and through the threads' driver;
    the GAT forward and backward still equal the reference."""
    from gblas_gnn.executors.cpu import _program_kernels, _shares, programs

    seen = []

    class Spy(_shares.ThreadedKernel):
        def __call__(self, *args):
            seen.append(args[:5])
            return super().__call__(*args)

    def spy_kernel(mod, name, work):
        k = real(mod, name, work)
        return Spy(k.kernel, k.columns, k.rows_per_item, k.threaded, k.driver)

    real = _program_kernels.kernel
    monkeypatch.setattr(programs, "kernel", spy_kernel)
    g = gg.data.erdos_renyi(60, 0.1, seed=1, dtype=np.float64)
    layer = gg.nn.GATConv(4, 3, dtype=np.float64, executor="cpu")
    H = np.random.default_rng(0).standard_normal((60, 4))
    ref = gg.nn.GATConv(4, 3, dtype=np.float64, executor="primitives")
    for threads in (1, 2):
        with _program_kernels.sized_like(1e6 if threads == 2 else 1.0):
            np.testing.assert_allclose(layer(g, H), ref(g, H), rtol=1e-10)
            dout = np.ones((60, 3))
            np.testing.assert_allclose(layer.backward(dout), ref.backward(dout), rtol=1e-10)
    assert seen and all(a.dtype.kind == "u" for args in seen for a in args)
    calls = []

    class Recording:                               # a kernel or the driver: records calls
        def __call__(self, *a):
            calls.append(a)

        def call_keyed(self, key, *a):
            calls.append(a)
            return True

        def address(self, key, *a):
            return 0

    k = _shares.ThreadedKernel(Recording(), False, 1, False, Recording())
    k(np.array([0, 3, 5], np.uint64))              # one thread: the kernel, over every item
    assert all(isinstance(v, np.uint64) for v in calls[-1][-2:])
    if numba.config.NUMBA_NUM_THREADS >= 2:        # the driver, with one share per thread
        before = numba.get_num_threads()
        numba.set_num_threads(2)
        try:
            k.threaded = True
            k(np.array([0, 3, 5], np.uint64))
        finally:
            numba.set_num_threads(before)
        assert calls[-1][1].dtype == np.uint64 and calls[-1][1].tolist() == [0, 1, 2]


@pytest.mark.cpu_only
def test_edge_features_read_as_data_are_prefetched_and_get_no_cotangent(monkeypatch):
    """Features that do not require their gradient are constants of the program: no kernel
    takes or writes a cotangent for them (no |E| × f array); with ``requires_grad_()`` the
    passes over rows write it. The passes over columns reach an edge's features at a random
    CSR position and ask for them ahead."""
    from gblas_gnn.executors.cpu import programs

    plans = []
    real = programs.kernels
    monkeypatch.setattr(programs, "kernels", lambda p: plans.append(p) or real(p))
    g = gg.Graph.from_edges([0, 1, 2, 2], [1, 2, 0, 1], 3, edge_attr=np.ones((4, 2)),
                            dtype=np.float64)
    for wanted in (False, True):
        g.edge_attr.requires_grad = wanted
        layer = gg.nn.GATv2Conv(3, 4, edge_dim=2, dtype=np.float64, executor="cpu")
        layer.backward(np.ones_like(layer(g, np.ones((3, 3)))))
        p = plans[-1]
        assert p.features and p.eattrs == (p.features if wanted else ())
        assert p.structure.constants == (() if wanted else p.features)
        m = _module(p)
        (features,) = _operands(p, "eattr")
        column = m["column_pass"]
        # the features at the CSR position (perm) of the edge ahead, in its row (crow)
        assert any(_is_call(c, "prefetch_feature_row", features)
                   and column.ahead(c.args[3], "perm") and column.ahead(c.args[4], "crow")
                   for c in column.calls("prefetch_feature_row"))
        # a cotangent array of the features (dEA<slot>) is an argument of a kernel or none
        assert (f"d{features}" in m.arguments()) == wanted


@pytest.mark.cpu_only
def test_a_reverse_mode_computes_and_prefetches_only_what_reaches_a_write(monkeypatch):
    """TransformerConv (``mean``) with edge features read as data: the second aggregation's
    pass over columns (row strategy) gives its softmax's cotangent to the keys alone, ``dK_j +=
    eb · Q_i``. It reads the queries and nothing else of the scores (no key, no projected
    query of the edge term, no features: no score is summed again for a cotangent nothing
    reads), and asks ahead for the queries' row and the edge's ``EB`` line, which it reads,
    not for rows or features it does not; nor does the messages' pass over columns."""
    from gblas_gnn.executors.cpu import programs

    plans = []
    real = programs.kernels
    monkeypatch.setattr(programs, "kernels", lambda p: plans.append(p) or real(p))
    g = gg.Graph.from_edges([0, 1, 2, 2, 0], [1, 2, 0, 1, 2], 3, edge_attr=np.ones((5, 3)),
                            dtype=np.float64)
    layer = gg.nn.TransformerConv(5, 4, heads=2, edge_dim=3, aggr="mean", dtype=np.float64,
                                  executor="cpu")
    layer.backward(np.ones_like(layer(g, np.ones((3, 5)))))
    p = next(p for p in plans if p.strategy == "row")         # the features' aggregation
    columns = _module(p)["row_columns"]
    (queries,) = [r for r in _operands(p, "row") if columns.reads(r)]
    assert not any(columns.reads(c) for c in _operands(p, "col"))
    (stage,) = p.softmaxes
    assert {sub.value.id for sub in columns.prefetched()} == {queries, f"EB{stage}"}
    assert not columns.calls("prefetch_feature_row")
    # the messages' aggregation (column strategy): its pass over columns asks ahead for
    # exactly the target's rows its body reads (the projected queries' it does not)
    p = next(p for p in plans if p.strategy == "column")
    columns = _module(p)["column_pass"]
    asked = {id(sub) for sub in columns.prefetched()}
    for row in _operands(p, "row"):
        read = any(id(sub) not in asked for sub in columns.reads(row))
        assert read == any(sub.value.id == row for sub in columns.prefetched()), row


@pytest.mark.cpu_only
def test_an_aggregation_appending_edge_features_is_one_program(monkeypatch):
    """TransformerConv (``sum``) with edge features: ``Σ α V_j`` and ``Σ α e_ji`` are one
    program (:func:`gblas_gnn.ops.aggregate_with_edges`): its forward writes the features'
    sums ``ZE`` beside ``Z``, and its one pass over columns adds ``⟨dZE_i, e_ji⟩`` to each
    edge's cotangent, reading the edge's features and asking ahead for ``dZE``'s row, as
    for ``dZ``'s. Features that require their gradient take the reference lowering."""
    from gblas_gnn.executors.cpu import programs
    from gblas_gnn.ir.sinks import edge_messages

    plans = []
    real = programs.kernels
    monkeypatch.setattr(programs, "kernels", lambda p: plans.append(p) or real(p))
    g = gg.Graph.from_edges([0, 1, 2, 2, 0], [1, 2, 0, 1, 2], 3, edge_attr=np.ones((5, 3)),
                            dtype=np.float64)
    # the kernels of test_nn_edge_features' TransformerConv (compiled once for both)
    layer = gg.nn.TransformerConv(5, 4, heads=2, edge_dim=3, dtype=np.float64, executor="cpu")
    layer.backward(np.ones_like(layer(g, np.ones((3, 5)))))
    assert len({p.structure for p in plans}) == 1
    p = plans[0]
    assert p.strategy == "column" and edge_messages(p.structure.sink) in p.features
    m = _module(p)
    assert "ZE" in m.arguments() and m["forward"].reads("ZE")     # its rows, summed into
    column = m["column_pass"]
    assert column.reads("dZE")
    assert any(sub.value.id == "dZE" for sub in column.prefetched())
    seen = len(plans)
    g.edge_attr.requires_grad_()
    layer.backward(np.ones_like(layer(g, np.ones((3, 5)))))
    assert len(plans) == seen                       # no kernels: the reference lowering


@pytest.mark.cpu_only
def test_the_cpu_light_row_pass_sums_the_edges_shares_when_a_row_gets_one_number():
    """GAT's scores give the row operand ``d_i`` one number an edge and head: the column
    pass stores that share at the edge (where it has ``C_j`` for LeakyReLU's slope) and the
    light row pass sums a row's edges, gathering no column operand. A row operand read over
    channels (GATv2's ``X_i`` under a nonlinearity) keeps the replay from ``eb``."""
    for heads in (1, 4, 9):
        p = _gat_structure(heads, 8)
        m = _module(p)
        column, rows = m["column_pass"], m["column_rows"]
        assert column.writes("EB") and rows.accumulated_from("EB")
        # no column operand read, nothing gathered by source
        assert not any(rows.reads(c) for c in _operands(p, "col"))
        assert not rows.reads("indices")
    g = gg.Graph.from_edges([0, 1, 2], [1, 2, 0], 3)
    X = np.ones((3, 4), np.float32)
    a = np.ones(4, np.float32)
    scores = (ops.leaky_relu(rep(X) + rep(X).T, 0.2) * a).sum(-1)
    p = _structure(g.A, scores, ("aggregate", "sum"), X)
    rows = _module(p)["column_rows"]
    (row,) = _operands(p, "row")
    assert not rows.accumulated_from("EB") and rows.reads(f"d{row}")
    assert all(rows.reads(c) for c in _operands(p, "col")) and rows.reads("indices")


def _structure(A, e, sink, X=None):
    return plan(build(Softmax(Masked(A, e, True)), sink, X).structure)


def _generators():
    """``(source, signature_key)`` of the cpu generator and, where numba-cuda is installed,
    the cuda one."""
    found = {"cpu": (source, signature_key)}
    try:
        from gblas_gnn.gpu._program_kernels import signature_key as cuda_key
        from gblas_gnn.gpu._program_source import source as cuda_source
    except ImportError:                 # no numba-cuda
        return found
    found["cuda"] = (cuda_source, cuda_key)
    return found


GENERATORS = _generators()


@pytest.mark.parametrize("generator", sorted(GENERATORS))
def test_two_formulations_never_share_a_kernel_module(generator):
    """Another operation, function, sink or dtype: another module. Another constant: the
    same module on the cpu (its kernels read the numbers at run time), another one for the
    cuda generator (it writes them in)."""
    source, signature_key = GENERATORS[generator]
    g = gg.Graph.from_edges([0, 1], [1, 2], 3)
    X = np.ones((3, 2), np.float32)
    d = np.arange(3, dtype=np.float32)
    variants = [
        ops.leaky_relu(rep(d) + rep(d).T, 0.2),
        ops.leaky_relu(rep(d) + rep(d).T, 0.3),          # another constant
        ops.leaky_relu(rep(d) - rep(d).T, 0.2),          # another operation
        ops.elu(rep(d) + rep(d).T, 0.2),                 # another function
    ]
    keys = {signature_key(_structure(g.A, e, sink, X if sink[0] == "aggregate" else None))
            for e in variants
            for sink in (("aggregate", "sum"), ("aggregate", "max"), ("rows", "sum"))}
    g64 = gg.Graph.from_edges([0, 1], [1, 2], 3, dtype=np.float64)
    d64 = d.astype(np.float64)
    keys.add(signature_key(_structure(g64.A, ops.leaky_relu(rep(d64) + rep(d64).T, 0.2),
                                      ("aggregate", "sum"), X.astype(np.float64))))
    formulations = 4 if generator == "cuda" else 3
    assert len(keys) == formulations * 3 + 1


def _numbered(slope, scale, p):
    """A formulation with a LeakyReLU's slope, a constant and a dropout's probability."""
    def fn(A, X, Y, u, v, P):
        S = ops.softmax(A * (ops.leaky_relu(rep(u) + rep(v).T, slope) * scale))
        return ops.aggregate(ops.edge_dropout(S, p, key=5), Y, "sum")
    return fn


@pytest.mark.cpu_only
def test_one_cpu_kernel_serves_every_value_of_its_numbers():
    """Slopes, constants and dropout probabilities are read at run time: the formulation
    at other values runs the kernels already compiled (no other module), and each gives the
    reference's numbers, forward and every gradient. A slope above one is another module
    (its LeakyReLU is a min, not a max)."""
    g, arrays, P = _inputs(3, 9, 30, None, np.float32)
    cpu, reference = CPUExecutor(), PrimitivesExecutor()
    values = [(0.2, 1.0, 0.1), (0.0, 0.25, 0.5), (0.7, 3.0, 0.3)]
    for slope, scale, p in values:
        fn = _numbered(slope, scale, p)
        got, want = _run(fn, cpu, g, arrays, P, 1), _run(fn, reference, g, arrays, P, 1)
        np.testing.assert_allclose(got[0], want[0], rtol=2e-4, atol=2e-5)
        for a in range(4):
            np.testing.assert_allclose(got[1][a], want[1][a], rtol=2e-4, atol=2e-5)

    def key(slope, scale, p):
        e = ops.leaky_relu(rep(arrays[2]) + rep(arrays[3]).T, slope) * scale
        S = Zip("mul", Softmax(Masked(g.A, e, True)), EdgeDropout(g.A, 5, p, None, np.float32))
        return signature_key(plan(build(S, ("aggregate", "sum"), arrays[1]).structure))
    assert len({key(*v) for v in values}) == 1
    assert key(1.5, 1.0, 0.1) != key(0.2, 1.0, 0.1)


@pytest.mark.parametrize("generator", sorted(GENERATORS))
def test_infinite_and_nan_constants_reach_the_source_by_numpys_names(generator):
    """A constant of ±inf or NaN: the cuda generator writes it as ``np.inf`` / ``np.nan``
    (``repr`` would write a bare ``inf``, an undefined name), the cpu's kernels read it."""
    source, _ = GENERATORS[generator]
    g = gg.Graph.from_edges([0, 1], [1, 2], 3)
    X = np.ones((3, 2), np.float32)
    d = np.arange(3, dtype=np.float32)
    for c in (np.inf, -np.inf, np.nan):
        text = source(_structure(g.A, ops.maximum(rep(d) + rep(d).T, c), ("aggregate", "sum"),
                                 X))
        names = {n.id for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Name)}
        assert not names & {"inf", "nan"}, c


@pytest.mark.parametrize("generator", sorted(GENERATORS))
def test_generated_source_is_a_function_of_the_structure_alone(generator):
    """Equal structures built from different arrays give the same source (no value, no user
    text reaches it), and an operation outside the closed set is refused."""
    source, signature_key = GENERATORS[generator]
    g = gg.Graph.from_edges([0, 1], [1, 2], 3)
    X1, X2 = np.ones((3, 2), np.float32), np.full((3, 2), 7, np.float32)
    a, b = (_structure(g.A, ops.tanh((rep(X) * rep(X).T).sum(-1)), ("aggregate", "sum"), X)
            for X in (X1, X2))
    assert source(a) == source(b) and signature_key(a) == signature_key(b)
    ops_ = list(a.structure.ops)
    ops_[0] = Op("__import__('os')", (), (), ops_[0].trail)
    bad = dataclasses.replace(a.structure, ops=tuple(ops_))
    with pytest.raises(ValueError, match="unknown operation"):
        source(plan(bad))


@pytest.mark.parametrize("aggr", ["sum", "mean"])
@pytest.mark.parametrize("factor", [None, "dropout", "weights"])
def test_the_column_strategy_with_heads(executor, aggr, factor):
    """One softmax feeding the aggregation linearly, two heads: the backward's single column
    pass (the plan's ``"column"`` strategy) against the reference."""
    reference = _reference_for(executor)

    def fn(A, X, Y, u, v, P):
        S = ops.softmax(ops.structure(A) * ops.leaky_relu(rep(u) + rep(v).T, 0.2))
        if factor == "dropout":
            S = ops.edge_dropout(S, 0.4, key=7)
        elif factor == "weights":
            S = S * ops.sigmoid(rep(v).T)
        return ops.aggregate(S, Y, aggr)

    g, arrays, P = _inputs(3, 9, 30, 2, np.float64)
    with gg.executors.default("cpu"):
        prog = build(Softmax(Masked(g.A, rep(arrays[2]) + rep(arrays[3]).T, True)),
                     ("aggregate", aggr), arrays[1])
    assert plan(prog.structure).strategy == "column"
    got, want = (_run(fn, ex, g, arrays, P, 5) for ex in (executor, reference))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-9, atol=1e-11)
    for a, b in zip(got[1], want[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("aggr", ["sum", "mean"])
def test_one_array_in_every_role_of_the_column_strategy(executor, aggr):
    """AGNN's shape: one array X is the scores' rows by target and by source and the
    messages (the cpu executor then sums the three cotangents into one buffer in its
    kernels); its gradient, and a second input's through a factor, against the reference."""
    reference = _reference_for(executor)

    def fn(A, X, Y, u, v, P):
        S = ops.softmax(ops.structure(A) * ((rep(X) * rep(X).T).sum(-1) * P["beta"]))
        return ops.aggregate(S * rep(u).T, X, aggr)

    g, arrays, P = _inputs(11, 9, 30, None, np.float64)
    got, want = (_run(fn, ex, g, arrays, P, 5) for ex in (executor, reference))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-9, atol=1e-11)
    assert np.abs(want[1][0]).max() > 0 and np.abs(want[1][2]).max() > 0
    for a, b in zip(got[1], want[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(got[2]["beta"], want[2]["beta"], rtol=1e-9, atol=1e-11)


@pytest.mark.cpu_only
def test_a_column_backward_runs_once_per_forward():
    """The column pass writes the edges' cotangents over the forward's softmax cache (issue
    21: no CSC copy of it and no array of its own): a second backward of one context is
    refused, never silently wrong, and the spent context holds neither ``Z`` nor ``S``."""
    ex = CPUExecutor()
    g, arrays, _ = _inputs(3, 9, 30, 2, np.float32)
    with gg.executors.default(ex):
        prog = build(Softmax(Masked(g.A, rep(arrays[2]) + rep(arrays[3]).T, True)),
                     ("aggregate", "sum"), arrays[1])
    out, ctx = ex.program_forward(prog, keep=True)
    ex.program_backward(ctx, np.ones_like(out))
    # spent, the context lets its aggregate and softmax cache go (the layer's backward
    # holds it until its last product)
    assert ctx.Z is None and not ctx.extra and not ctx.buffers.softmax
    with pytest.raises(RuntimeError, match="once per forward"):
        ex.program_backward(ctx, np.ones_like(out))


@pytest.mark.cpu_only
@pytest.mark.parametrize("sink", ["sum", "max", "rows_sum", "spmm_t"])
def test_the_threads_drivers_equal_the_reference(monkeypatch, sink):
    """The kernels through their drivers on shares (what a graph above the one-thread size
    runs; a test's graphs are below it) against the reference: the size forced to zero, a
    softmax over a rank-3 contraction into each kind of sink (column strategy, row strategy,
    a reduction, the transposed product), forward and backward."""
    from gblas_gnn.executors.cpu import _program_kernels, programs

    monkeypatch.setattr(_program_kernels, "SERIAL_WORK_BELOW", 0)
    ran = []
    monkeypatch.setattr(programs, "kernel", lambda mod, name, work: ran.append(name) or
                        _program_kernels.kernel(mod, name, work))

    def fn(A, X, Y, u, v, P):
        S = ops.softmax(ops.structure(A) * ops.tanh(rep(X) + rep(Y).T) @ P["a"])
        if sink.startswith("rows_"):
            return ops.row_sum(S * rep(v).T)
        if sink == "spmm_t":
            return ops.spmm_t(S * rep(u), Y)
        return ops.aggregate(S * ops.sigmoid(rep(v).T), Y, sink)

    g, arrays, P = _inputs(4, 9, 28, 2, np.float64)
    arrays = [arrays[0][:, 0], arrays[1][:, 0], arrays[2][:, 0], arrays[3][:, 0]]
    got, want = (_run(fn, ex, g, arrays, P, 4) for ex in (CPUExecutor(), PrimitivesExecutor()))
    assert "forward" in ran and len(set(ran)) >= 2
    np.testing.assert_allclose(got[0], want[0], rtol=1e-9, atol=1e-11)
    for a, b in zip([*got[1], *got[2].values()], [*want[1], *want[2].values()], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.cpu_only
def test_an_edge_contraction_is_computed_once_per_edge_in_every_pass(monkeypatch):
    """GINE's messages ``ReLU(x_j + W_e e_ji + b)``: the contraction ``W_e e_ji``
    (``g.edge_attr @ W`` in the composition) is computed once per edge, into the kernel's
    scratch before the edge's channel loops, in the forward and in both backward passes; the
    forward never reads the weight inside its loops (no dot over the features per channel).
    Its values are checked against PyG and central differences in the layer's tests."""
    from gblas_gnn.codegen.scalar import edge_contractions
    from gblas_gnn.executors.cpu import programs

    plans = []
    real = programs.kernels
    monkeypatch.setattr(programs, "kernels", lambda p: plans.append(p) or real(p))
    g = gg.Graph.from_edges([0, 1, 2, 2], [1, 2, 0, 1], 3, edge_attr=np.ones((4, 2)),
                            dtype=np.float64)
    g.edge_attr.requires_grad_()
    layer = gg.nn.GINEConv([3, 4, 4], edge_dim=2, train_eps=True, dtype=np.float64,
                           executor="cpu")
    layer.backward(np.ones_like(layer(g, np.ones((3, 3)))))
    p = plans[-1]
    (c,) = edge_contractions(p.structure).values()
    scratch, weight = f"TH{c.op}", f"P{c.param}"
    m = _module(p)
    # its backward is one pass over columns (columns_only): no row pass gathers x_j again
    assert "row_pass" not in m.functions
    for name in ("forward", "row_columns"):
        k = m[name]
        edge_loops = k.edge_loops
        assert k.reads(scratch), name
        for write in k.writes(scratch):             # inside exactly one edge loop
            assert sum(loop in edge_loops for loop in k.loops_around(write)) == 1, name
    assert not m["forward"].reads(weight)
    # its cotangent: summed over the channel loops into GT<op>, handed to the weight's
    # partial (per block of columns) and the features' cotangent once per edge after them
    # (no loop over the features inside a channel loop)
    k = m["row_columns"]
    sums = k.writes(f"GT{c.op}")
    edge_loops = set(k.edge_loops)
    channel_loops = {loop for w in sums for loop in k.loops_around(w)
                     if edge_loops & set(k.loops_around(loop))}
    assert sums and channel_loops
    # (ea<slot>: the edge's row of the features, feature_row's; GW<op>: the weight's
    # cotangent summed over the edges of a block of columns)
    for array in (f"ea{c.eattr}", f"GW{c.op}", f"dEA{c.eattr}"):
        touched = k.reads(array) + k.writes(array)
        assert touched, array
        for node in touched:
            assert not channel_loops & set(k.loops_around(node)), array
    # the block's partial of the weight gets that sum once, after the block's edges
    flushes = k.accumulated_from(f"GW{c.op}")
    assert flushes and not any(edge_loops & set(k.loops_around(n)) for n in flushes)


@pytest.mark.cpu_only
def test_a_contraction_too_large_for_the_stack_stays_in_its_loops(monkeypatch):
    """A contraction whose parameter has more than ``MAX_SCRATCH`` numbers is not computed
    once per edge: its scratch would go on the kernel's stack (and the module is another,
    its key holding what is computed once per edge)."""
    from gblas_gnn.codegen.scalar import MAX_SCRATCH, edge_contractions
    from gblas_gnn.executors.cpu import programs

    class Captured(Exception):
        pass

    plans = []

    def capture(p):
        plans.append(p)
        raise Captured

    monkeypatch.setattr(programs, "kernels", capture)
    g = gg.Graph.from_edges([0, 1, 2], [1, 2, 0], 3, edge_attr=np.ones((3, 2)),
                            dtype=np.float64)
    keys = []
    for width, once in ((MAX_SCRATCH // 2, True), (MAX_SCRATCH // 2 + 1, False)):
        layer = gg.nn.GINEConv([width, 4], edge_dim=2, dtype=np.float64, executor="cpu")
        with pytest.raises(Captured):
            layer(g, np.ones((3, width)))
        assert bool(edge_contractions(plans[-1].structure)) == once, width
        keys.append(signature_key(plans[-1]))
    assert keys[0] != keys[1]
