"""The cuda executor's kernels against the cpu executor where the conformance suite
(``tests/test_executor_conformance.py``, also run with ``--executor cuda``) does not reach:
features several lane groups wide, rows longer than a group, the generated kernels of edge
programs with channels and messages wider than a group, graphs without edges, user semirings
compiled for the device or run on the host, and the executor's errors. Hypothesis draws the
shapes; every graph has isolated vertices, self loops and one long row.
"""

from __future__ import annotations

import graphblas as gb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gblas_gnn as gg
from gblas_gnn import ops, semirings
from gblas_gnn.executors import to_numpy
from gblas_gnn.gpu import LANES, SIMULATOR, EdgeTensor
from gblas_gnn.gpu._device import SPLIT_EDGES
from gblas_gnn.ops import rep

#: examples per property: at the full warp width (32 lanes, a session of its own in the
#: simulator, tests/test_suite_on_executors.py) the graphs grow with the lanes and every lane
#: is a Python thread: two examples there, eight at the default 4 lanes and on a GPU
EXAMPLES = 2 if LANES == 32 and SIMULATOR else 8
SETTINGS = settings(max_examples=EXAMPLES, deadline=None)
WIDTHS = st.integers(1, 2 * LANES + 1)


def graph(seed: int, n: int, m: int, dtype, long_row: bool = True) -> gg.Graph:
    """Random edges among vertices 0..n-3 (n-2, n-1 isolated), every self loop of 0..3, and
    vertex 0 hearing from every active vertex (a row longer than a lane group)."""
    rng = np.random.default_rng(seed)
    active = max(n - 2, 1)
    src, dst = rng.integers(0, active, m), rng.integers(0, active, m)
    loops = np.arange(min(4, active))
    src, dst = np.r_[src, loops], np.r_[dst, loops]
    if long_row:
        src, dst = np.r_[src, np.arange(active)], np.r_[dst, np.zeros(active, np.int64)]
    return gg.Graph.from_edges(src, dst, n, dtype=dtype)


def feats(n, k, dtype, seed):
    return np.random.default_rng(seed).standard_normal((n, k)).astype(dtype)


def close(got, want, dtype, scale=1.0):
    tol = 5e-5 if np.dtype(dtype) == np.float32 else 1e-11
    np.testing.assert_allclose(to_numpy(got), to_numpy(want), rtol=tol, atol=tol * scale)


dtypes = st.sampled_from([np.float32, np.float64])
sizes = st.integers(LANES + 3, 3 * LANES + 4)


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), n=sizes, k=WIDTHS, dtype=dtypes,
       aggr=st.sampled_from(["sum", "mean", "max", "min"]))
def test_wide_aggregation_and_its_backward(cpu, cuda, seed, n, k, dtype, aggr):
    g = graph(seed, n, 3 * n, dtype)
    H, dZ = feats(n, k, dtype, 1), feats(n, k, dtype, 2)
    (Zc, cc), (Zg, cg) = (ex.aggregate(g.A, ex.asarray(H), aggr, keep_context=True)
                          for ex in (cpu, cuda))
    close(Zg, Zc, dtype, 4)
    dSc, dHc = cpu.aggregate_backward(cc, dZ)
    dSg, dHg = cuda.aggregate_backward(cg, cuda.asarray(dZ))
    close(cuda.edge_values(dSg), cpu.edge_values(dSc), dtype, 8)
    close(dHg, dHc, dtype, 8)


#: edge programs whose generated kernels split every loop over lanes: GATv2's score (a
#: channel contraction), two heads, the column strategy; and two softmax stages feeding a
#: max aggregation (the row strategy, winners per feature)
PROGRAMS = {
    "gatv2": lambda A, Xl, Xr, a: ops.aggregate(ops.softmax(
        ops.structure(A) * (ops.leaky_relu(rep(Xr) + rep(Xl).T, 0.2) * a).sum(-1)), Xl),
    "stages-max": lambda A, Xl, Xr, a: ops.aggregate(ops.softmax(ops.tanh(ops.softmax(
        A * (rep(Xr) * rep(Xl).T).sum(-1)))), Xl, "max"),
}


#: seeded draws per program: one at the full warp width (each case its own test, so that
#: the session's two workers share them), two at the default width
DRAWS = 1 if LANES == 32 and SIMULATOR else 2


@pytest.mark.parametrize("draw", range(DRAWS))
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_wide_edge_programs_and_their_backward(cpu, cuda, program, draw):
    """The generated kernels with channels and messages wider than a lane group (a width
    drawn from LANES + 1 … 2 LANES + 1), a row longer than one and isolated vertices equal
    the cpu executor's."""
    rng = np.random.default_rng(1009 * draw + sorted(PROGRAMS).index(program))
    seed, f = int(rng.integers(0, 2**31 - 1)), int(rng.integers(LANES + 1, 2 * LANES + 2))
    g = graph(seed, LANES + 3, 2 * LANES, np.float64)
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(s) for s in ((g.n, 2, f), (g.n, 2, f), (2, f))]
    dZ = rng.standard_normal((g.n, 2, f))

    def run(ex):
        out, pull = gg.compose.vjp(PROGRAMS[program], g.A, *map(ex.asarray, args),
                                   executor=ex, vertex=(1, 2))
        return [to_numpy(x) for x in (out, *pull(ex.asarray(dZ))[1:])]

    for got, want in zip(run(cuda), run(cpu), strict=True):
        close(got, want, np.float64, 8)


@pytest.mark.parametrize("aggr", ["max", "min_plus", "sum"])
def test_edge_program_with_a_constant_root_and_its_backward(cpu, cuda, aggr):
    """A composition whose weights are the graph's constant values (the root reads nothing
    differentiable, so the row pass computes no cotangent for it): the messages' gradient
    equals the cpu executor's (max/min from the winners, sum from the weights)."""
    g = graph(3, LANES + 3, 2 * LANES, np.float64)
    rng = np.random.default_rng(0)
    X, dZ = rng.standard_normal((g.n, LANES + 2)), rng.standard_normal((g.n, LANES + 2))

    def run(ex):
        out, pull = gg.compose.vjp(lambda A, X: ops.aggregate(A, X, aggr), g.A,
                                   ex.asarray(X), executor=ex, vertex=(1,))
        return to_numpy(out), to_numpy(pull(ex.asarray(dZ))[1])

    for got, want in zip(run(cuda), run(cpu), strict=True):
        close(got, want, np.float64, 8)


@pytest.mark.parametrize("name", ["plus_times", "min_plus", "max_plus", "max_times",
                                  "min_times", "avg"])
def test_wide_semiring_products(cpu, cuda, name):
    g = graph(3, 2 * LANES + 3, 40, np.float64)
    E = g.A.apply(gb.unary.abs).new()              # avg needs nonnegative weights
    H = feats(g.n, 2 * LANES + 1, np.float64, 1)
    for fn in ("spmm", "spmm_t"):
        close(getattr(cuda, fn)(E, cuda.asarray(H), name), getattr(cpu, fn)(E, H, name),
              np.float64, 8)


def _hub_graph(edge_dim: int | None = None) -> gg.Graph:
    """Row 0 hears from every vertex and column 1 speaks to every vertex (a power-law
    graph's hubs, each more than three folds long), row 2 has exactly one fold of edges and
    row 3 one more; random weights (and ``edge_dim`` random features an edge)."""
    L = SPLIT_EDGES
    n = 3 * L + 5
    pairs = {(j, 0) for j in range(n)} | {(1, i) for i in range(n)}
    # (with the hub column's edges into them: L and L + 1)
    pairs |= {(j, 2) for j in range(4, 3 + L)} | {(j, 3) for j in range(4, 4 + L)}
    src, dst = np.array(sorted(pairs)).T
    rng = np.random.default_rng(7)
    w = rng.uniform(0.5, 2.0, src.size)
    features = None if edge_dim is None else rng.standard_normal((src.size, edge_dim))
    return gg.Graph.from_edges(src, dst, n, values=w, dtype=np.float64, edge_attr=features)


@pytest.mark.parametrize("name", ["plus_times", "min_plus", "max_plus", "max_times",
                                  "min_times", "gpu_test_sum_of_squares"])
def test_rows_longer_than_a_fold_are_chunked_and_combined_in_order(cpu, cuda, name):
    """The rows (and, for the transpose, columns) longer than SPLIT_EDGES are folded in
    chunks by separate groups and the chunks combined in order: equal to the cpu executor
    both ways, for every shipped semiring and a user one compiled for the device."""
    sr = _user_semirings()[name] if name.startswith("gpu_test") else name
    g = _hub_graph()
    L, n = SPLIT_EDGES, g.n
    split = cuda.device_pattern(g.A).split
    assert to_numpy(split.rows).tolist() == [0, 3]          # row 2 (exactly L) is one fold
    assert to_numpy(split.first).tolist() == [0, -(-n // L), -(-n // L) + 2]
    assert (to_numpy(split.hi) - to_numpy(split.lo)).max() == L
    H = feats(n, LANES + 3, np.float64, 3)
    for fn in ("spmm", "spmm_t"):
        close(getattr(cuda, fn)(g.A, cuda.asarray(H), sr), getattr(cpu, fn)(g.A, H, sr),
              np.float64, 8)
    assert to_numpy(cuda.device_pattern(g.A).csc_split().rows).tolist() == [1]


@pytest.mark.parametrize("make", [
    lambda ex: gg.nn.GATConv(5, 3, heads=2, dtype=np.float64, executor=ex),
    lambda ex: gg.nn.GATv2Conv(5, 3, heads=2, dtype=np.float64, executor=ex),
    lambda ex: gg.nn.AGNNConv(5, dtype=np.float64, executor=ex),
    lambda ex: gg.nn.TransformerConv(5, 3, heads=2, dtype=np.float64, executor=ex),
    lambda ex: gg.nn.GATConv(5, 3, heads=2, edge_dim=2, dtype=np.float64, executor=ex),
    lambda ex: gg.nn.GATConv(5, 3, heads=2, aggr="max", dtype=np.float64, executor=ex),
    lambda ex: gg.nn.SAGEConv(5, 3, dtype=np.float64, executor=ex),
    lambda ex: gg.nn.SAGEConv(5, 3, aggr="max", dtype=np.float64, executor=ex)],
    ids=["gat", "gatv2", "agnn", "transformer", "gat-edge-features", "gat-max", "sage",
         "sage-max"])
def test_long_columns_of_the_attention_backward_are_walked_in_chunks(cpu, cuda, make):
    """The column passes skip the columns longer than SPLIT_EDGES and the light row pass
    the rows; their twins (``column_chunks``, ``row_column_chunks``, ``row_chunks``) walk
    the chunks into partial rows of the cotangents they accumulate, combined in order:
    every gradient equals the cpu executor's, on a graph whose hub column and hub row are
    several chunks long (both strategies: GAT by max and SAGE run the row strategy)."""
    layer = make(cpu)
    g = _hub_graph(getattr(layer, "edge_dim", None))
    pattern = cuda.device_pattern(g.with_self_loops().A)
    assert 0 in to_numpy(pattern.split.rows) and 1 in to_numpy(pattern.csc_split().rows)
    rng = np.random.default_rng(4)
    H = rng.standard_normal((g.n, 5))
    got, want = make(cuda), layer
    Z = want(g, H)
    dZ = rng.standard_normal(Z.shape)
    close(got(g, cuda.asarray(H)), Z, np.float64)
    close(got.backward(cuda.asarray(dZ)), want.backward(dZ), np.float64, 8)
    for name, grad in want.grads.items():
        close(got.grads[name], grad, np.float64, 8)


def _user_semirings():
    found = {}
    for name, args in (("gpu_test_sum_of_squares", (lambda a, b: a + b,
                                                    lambda s, h: s * h * h)),
                       ("gpu_test_plus_hypot", ("plus", "hypot"))):
        try:
            found[name] = semirings.get(name)
        except KeyError:
            found[name] = semirings.register(name, *args, add_identity=0.0)
    return found


def test_user_semirings_run_on_the_device_or_on_the_host(cpu, cuda):
    g = graph(5, 11, 30, np.float64)
    H = feats(g.n, LANES + 2, np.float64, 2)
    compiled, host = _user_semirings().values()
    assert compiled.scalar_mul is not None and host.scalar_mul is None
    cuda.transfers.reset()
    close(cuda.spmm(g.A, cuda.asarray(H), compiled), cpu.spmm(g.A, H, compiled),
          np.float64, 8)
    assert cuda.transfers.by_reason.get("to_numpy", 0) == 0      # a device kernel
    close(cuda.spmm_t(g.A, cuda.asarray(H), host), cpu.spmm_t(g.A, H, host), np.float64, 8)
    assert cuda.transfers.by_reason.get("to_numpy", 0) > 0       # the host reference


@pytest.mark.parametrize("n", [0, 5])
def test_graphs_without_edges(cpu, cuda, n):
    A = gb.Matrix(gb.dtypes.FP64, n, n)
    H = feats(n, 3, np.float64, 1)
    for ex in (cpu, cuda):
        Z, ctx = ex.aggregate(A, ex.asarray(H), "max", keep_context=True)
        assert to_numpy(Z).shape == (n, 3) and not to_numpy(Z).any()
        _, dH = ex.aggregate_backward(ctx, ex.asarray(H))
        assert not to_numpy(dH).any()
        assert to_numpy(ex.edge_values(ex.softmax(ex.sddmm(A, *(ex.asarray(H),) * 2)))).size \
            == 0
        d = feats(n, 1, np.float64, 2)[:, 0].copy()
        Z = gg.compose.evaluate(
            lambda A, H, d: gg.ops.aggregate(gg.ops.softmax(A * (rep(d) + rep(d).T)), H),
            A, ex.asarray(H), ex.asarray(d), executor=ex, vertex=(1, 2))
        assert to_numpy(Z).shape == (n, 3) and not to_numpy(Z).any()


def test_edge_tensors_round_trip_and_errors(cuda):
    g = graph(1, 9, 20, np.float32)
    E = cuda.sddmm(g.A, *(cuda.asarray(feats(9, 2, np.float32, 1)),) * 2)
    assert isinstance(E, EdgeTensor) and (E.nrows, E.ncols, E.nvals) == (9, 9, g.nnz)
    back = gg.ops.to_graphblas(E, executor=cuda)
    assert back.nvals == g.nnz and back.dtype == gb.dtypes.FP32
    rows, cols, _ = back.to_coo()
    want_rows, want_cols, _ = g.A.to_coo()
    np.testing.assert_array_equal(rows, want_rows)
    np.testing.assert_array_equal(cols, want_cols)
    with pytest.raises(ValueError, match="edge values"):
        cuda.edge_from_values(g.A, cuda.asarray(np.ones(g.nnz + 1, np.float32)))
    with pytest.raises(TypeError, match="graphblas.Matrix"):
        cuda.softmax(np.ones((3, 3)))
    with pytest.raises(ValueError, match="rows"):
        cuda.spmm(g.A, cuda.asarray(feats(8, 2, np.float32, 1)))
    with pytest.raises(ValueError, match="op must be"):
        cuda.row_reduce(E, "mean")


def test_a_host_array_never_reaches_a_kernel(cuda):
    """On a GPU and in the simulator alike (whose device arrays are told apart from host
    ones): a kernel launch refuses a host array, and so do device operations mixing one in."""
    from gblas_gnn.gpu import _sparse_kernels
    from gblas_gnn.gpu._device import group_grid

    H = np.ones((4, 2), np.float32)
    out = cuda.xp.empty((1, 4), np.float32)
    with pytest.raises(TypeError, match="host array"):
        cuda.launch(_sparse_kernels.head_dots, group_grid(4), H, H, 1, out)
    D = cuda.asarray(H)
    with pytest.raises(TypeError, match="host array"):
        cuda.launch(_sparse_kernels.head_dots, group_grid(4), D, D, 1, np.empty((1, 4)))
    cuda.launch(_sparse_kernels.head_dots, group_grid(4), D, D, 1, out)
    np.testing.assert_array_equal(to_numpy(out), [[2, 2, 2, 2]])
    with pytest.raises(TypeError):
        D + H                                   # as CuPy refuses it


_LIGHT_ROWS = ("@cuda.jit(cache=True)\ndef column_rows(indptr, EB, GF, dR0):\n"
               "    for i in range(group(), indptr.shape[0] - 1, groups()):\n"
               "        lo = indptr[i]\n        hi = indptr[i + 1]\n"
               "        for p in range(lo, hi):\n            dR0[i, 0] += EB[0, p]\n")


def _chunked_rows(text: str) -> str:
    from gblas_gnn.gpu._program_source import _with_chunks

    return _with_chunks(text, {"column_rows": ("indptr", "EB", "GF", "dR0")}, "column_rows",
                        "row_chunks", "i", "indptr", "r", ("dR0",))


def test_the_chunked_twin_of_a_pass_is_the_pass_over_a_chunk():
    """The rewrite behind the twins, on a small pass: the pass skips long rows, the twin
    walks a chunk's range and accumulates into its partial row; a pass that reads its row's
    range other than by walking it (its length here) is refused, since a chunk would read
    its own."""
    out = _chunked_rows(_LIGHT_ROWS)
    assert "def column_rows(indptr, EB, GF, dR0, split):" in out
    assert "        if indptr[i + 1] - indptr[i] > split:\n" in out
    assert "def row_chunks(rlo, rhi, rof, indptr, EB, GF, pdR0):" in out
    assert "        i = rof[qq]\n        lo = rlo[qq]\n        hi = rhi[qq]\n" in out
    assert "            pdR0[qq, 0] += EB[0, p]\n" in out
    with pytest.raises(AssertionError, match="range beyond walking it"):
        _chunked_rows(_LIGHT_ROWS.replace("EB[0, p]\n", "EB[0, p] / (hi - lo)\n"))
    with pytest.raises(AssertionError, match="indexes dR0 by more than its i"):
        _chunked_rows(_LIGHT_ROWS.replace("dR0[i, 0]", "dR0[p, 0]"))
