"""Every layer on a grid equals the single-process cpu executor: the forward, the input
gradient and every parameter gradient (float64, 1e-6 relative), on a random directed graph
with isolated vertices and n not divisible by q, with and without relabelling.

Run as ``mpiexec -n P python -m mpi4py -m pytest --executor dist tests/dist`` (P = 4, 9 from
``tests/test_mpi.py``); the ordinary run checks the 1×1 grid.
"""

from __future__ import annotations

import graphblas as gb
import numpy as np
import pytest
import scipy.sparse as sp
from layer_cases import (
    EDGE_LAYERS,
    N,
    build,
    case_ids,
    cases,
    close,
    close_gradients,
    edge_case_ids,
    graph_and_inputs,
    graph_with_features,
    in_dim_of,
)
from layer_cases import SELF_LOOPED as LOOPED

import gblas_gnn as gg
from gblas_gnn import dist
from gblas_gnn.executors import CPUExecutor
from gblas_gnn.executors.patterns import AdjacencyPattern

CPU = CPUExecutor()
CASES = cases()


@pytest.mark.parametrize("relabel", [False, True])
@pytest.mark.parametrize("name, kw, aggr", CASES, ids=case_ids(CASES))
def test_layer_equals_one_process(dex, name, kw, aggr, relabel):
    one = build(name, kw, aggr, CPU)
    grid_layer = build(name, kw, aggr, dex)
    g, H, _ = graph_and_inputs(7, in_dim_of(kw), 1)
    out = one(g, H)
    dout = np.random.default_rng(8).standard_normal(out.shape)
    dH = one.backward(dout)
    dg = dist.DistGraph.from_graph(g, dex.grid, relabel=relabel, seed=5)
    if "dropout" in kw:                         # the same key: the same mask on every grid
        grid_layer.dropout_rng = np.random.default_rng(11)
        one.dropout_rng = np.random.default_rng(11)
        out, dH = one(g, H), one.backward(dout)
    got = grid_layer(dg, dg.scatter(H))
    got_dH = grid_layer.backward(dg.scatter(dout))
    close(dg.gather(got), out, "forward")
    close(dg.gather(got_dH), dH, "input gradient")
    assert grid_layer.grads.keys() == one.grads.keys()
    for k, v in one.grads.items():
        close(grid_layer.grads[k], v, f"gradient of {k}")
    # parameters and their gradients are the same on every rank
    digests = dex.grid.allgather([float(np.sum(v)) for v in grid_layer.grads.values()], "t")
    assert all(d == digests[0] for d in digests)


@pytest.mark.parametrize("name, kw", EDGE_LAYERS, ids=edge_case_ids(EDGE_LAYERS))
def test_edge_feature_layers_equal_one_process(dex, name, kw):
    """The features live with their block and never move; the self loops' fill is
    completed over each grid row. Output, every gradient, and each block's share of the
    features' gradient equal one process's."""
    one, grid_layer = build(name, kw, "sum", CPU), build(name, kw, "sum", dex)
    g, H = graph_with_features(9, in_dim_of(kw))
    out = one(g, H)
    dout = np.random.default_rng(8).standard_normal(out.shape)
    dH = one.backward(dout)
    dg = dist.DistGraph.from_graph(g, dex.grid, relabel=True, seed=5)
    got = grid_layer(dg, dg.scatter(H))
    got_dH = grid_layer.backward(dg.scatter(dout))
    close(dg.gather(got), out, "forward")
    close(dg.gather(got_dH), dH, "input gradient")
    close_gradients(grid_layer.grads, one.grads)
    by_csr = np.empty_like(one.edge_attr_grad)
    by_csr[g.edge_attr.order] = one.edge_attr_grad          # one process's, CSR order
    close(grid_layer.edge_attr_grad, by_csr[dg.edge_positions], "edge features' gradient")


@pytest.mark.any_layout
@pytest.mark.parametrize("name, kw", LOOPED, ids=[n for n, _ in LOOPED])
def test_attention_layers_keep_no_matrix_of_a_plus_i(dex, name, kw):
    """On a diagonal rank the block of ``A + I`` is the int32 pattern built from A's block
    (issue 21): a training step builds no ``graphblas.Matrix`` of it; ``A`` builds the one
    the graph always had (A's values, 1 on the added loops)."""
    g, H, _ = graph_and_inputs(7, kw["in_dim"], 1)
    dg = dist.DistGraph.from_graph(g, dex.grid, relabel=True, seed=5)
    layer = build(name, kw, "sum", dex)
    layer.dropout_rng = np.random.default_rng(11)
    out = layer(dg, dg.scatter(H))
    layer.backward(np.ones_like(out))
    looped = dg.with_self_loops()
    M = looped.edge_tensor.M
    diagonal = dex.grid.x == dex.grid.y
    assert isinstance(M, AdjacencyPattern) is diagonal
    assert not (diagonal and M.built)
    eye = sp.identity(dg.A.nrows) if diagonal else sp.csr_matrix(dg.A.shape)
    want = dg.A.M.ewise_add(gb.io.from_scipy_sparse(eye.astype(dg.dtype)), gb.binary.first)
    assert looped.A.M.isequal(want.new()) and looped.nnz == g.with_self_loops().nnz


def test_layers_with_and_without_self_loops_run_on_one_grid(dex):
    """A layer without self loops after one with them on the same graph: each equals one
    process. The global row counts a block's programs read are kept per block and made by
    a collective at the first use; off the diagonal both graphs have the same local matrix,
    and a cache per local matrix had those ranks skip the collective the diagonal one
    entered (the grid waited for ever)."""
    g, H, _ = graph_and_inputs(7, 5, 1)
    dg = dist.DistGraph.from_graph(g, dex.grid)
    for loops in (True, False):
        one, grid_layer = (gg.nn.GATConv(5, 3, add_self_loops=loops, aggr="mean",
                                         dtype=np.float64, seed=3, executor=ex)
                           for ex in (CPU, dex))
        close(dg.gather(grid_layer(dg, dg.scatter(H))), one(g, H), f"loops={loops}")


@pytest.mark.parametrize("aggr", ["sum", "max", "mean"])
def test_inference_with_a_semiring_and_named_aggregations(dex, aggr):
    g, H, _ = graph_and_inputs(9, 4, 1)
    dg = dist.DistGraph.from_graph(g, dex.grid)
    for sr in (aggr, "max_plus", "avg"):
        one = gg.nn.VAConv(4, 3, aggr=sr, dtype=np.float64, executor=CPU).eval()
        grid_layer = gg.nn.VAConv(4, 3, aggr=sr, dtype=np.float64, executor=dex).eval()
        if sr == "avg":                        # avg needs nonnegative attention weights
            one.softmax = grid_layer.softmax = True
        close(dg.gather(grid_layer(dg, dg.scatter(H))), one(g, H), sr)


def test_scatter_gather_round_trip_and_errors(dex):
    g, H, _ = graph_and_inputs(1, 3, 1)
    for relabel in (False, True):
        dg = dist.DistGraph.from_graph(g, dex.grid, relabel=relabel, seed=2)
        local = dg.scatter(H)
        assert local.shape == (dg.n_local, 3) and dg.n == N and dg.nnz == g.nnz
        np.testing.assert_array_equal(dg.gather(local), H)
        np.testing.assert_array_equal(local, H[dg.vertex_ids])
        with pytest.raises(ValueError, match="global array"):
            dg.scatter(H[:-1])
        with pytest.raises(ValueError, match="rows"):
            dg.gather(local[:-1] if dg.n_local else np.zeros((1, 3)))
    assert dg.imbalance() >= 1.0


@pytest.mark.parametrize("relabel", [False, True])
def test_to_graphblas_gives_the_blocks_entries_at_their_global_ids(dex, relabel):
    """An edge tensor of the grid (this rank's block) as a host matrix: the global n × n
    shape with the block's entries where they are in the whole matrix, and nothing else (so
    the ranks' matrices add up to the whole); no communication."""
    g, H, _ = graph_and_inputs(6, 3, 1)
    dg = dist.DistGraph.from_graph(g, dex.grid, relabel=relabel, seed=7)
    whole = gg.ops.to_graphblas(gg.ops.sddmm(g.A, H, H, executor=CPU), executor=CPU)
    E = gg.ops.sddmm(dg.A, dg.scatter(H), dg.scatter(H), executor=dex)
    dex.grid.reset_comm_stats()
    got = gg.ops.to_graphblas(E, executor=dex)
    assert dex.grid.comm_stats()["messages"] == 0
    rows, cols, values = whole.to_coo()                   # CSR order, as got's
    mine = np.isin(rows, dg.A.row_ids) & np.isin(cols, dg.A.col_ids)
    assert (got.nrows, got.ncols, got.nvals) == (g.n, g.n, dg.A.nvals) == (g.n, g.n, mine.sum())
    assert got.dtype == whole.dtype
    # entries compared as arrays: Matrix.isclose compiles a numba function per GraphBLAS
    # type, in every rank (20 s of a cold grid job)
    got_rows, got_cols, got_values = got.to_coo()
    np.testing.assert_array_equal(got_rows, rows[mine])
    np.testing.assert_array_equal(got_cols, cols[mine])
    np.testing.assert_allclose(got_values, values[mine], rtol=1e-12)


def test_sgc_cache_hit_is_agreed_when_only_some_ranks_see_new_features(dex):
    """Features changed in the rows of grid row 0 only: every rank recomputes (those whose
    own rows still match the cache too), so no rank skips the propagation's collectives."""
    g, H, _ = graph_and_inputs(4, 5, 1)
    dg = dist.DistGraph.from_graph(g, dex.grid)
    one = gg.nn.SGConv(5, 4, K=2, cached=True, dtype=np.float64, executor=CPU)
    layer = gg.nn.SGConv(5, 4, K=2, cached=True, dtype=np.float64, executor=dex)
    close(dg.gather(layer(dg, dg.scatter(H))), one(g, H), "first forward")
    changed = H.copy()
    changed[dg.parts[0]] += 1.0                     # R_0: the rows of grid row 0
    close(dg.gather(layer(dg, dg.scatter(changed))), one(g, changed), "after the change")


def test_avg_refuses_a_negative_weight_of_one_block_on_every_rank(dex):
    """One negative weight, in the block of rank 0 only (and, for the layer, signed
    attention in some rows only): every rank raises the same error, none is left waiting in a
    collective (gg.ops with the name, the transpose product, a layer's fused program)."""
    g, H, _ = graph_and_inputs(6, 4, 1)
    rows, cols = (a.astype(np.int64) for a in g.to_scipy().nonzero())
    vals = np.ones(rows.size)
    vals[0] = -1.0                             # A[rows[0], cols[0]]: one block holds it
    signed = gg.Graph.from_edges(cols, rows, g.n, values=vals, dtype=np.float64)
    dg = dist.DistGraph.from_graph(signed, dex.grid)
    Hl = dg.scatter(H)
    message = "the semiring 'avg' needs nonnegative edge weights"
    for call in (lambda: gg.ops.aggregate(dg.A, Hl, "avg", executor=dex),
                 lambda: gg.ops.spmm_t(dg.A, Hl, "avg", executor=dex)):
        with pytest.raises(ValueError, match=message):
            call()
    positive = np.abs(H) + 1.0                  # attention >= 0 in every row but vertex 0's
    positive[0] *= -1.0
    layer = gg.nn.VAConv(4, 3, aggr="avg", dtype=np.float64, executor=dex)
    with pytest.raises(ValueError, match=message):
        layer(dg, dg.scatter(positive))


def test_layer_input_errors_reach_every_rank(dex):
    g, H, _ = graph_and_inputs(2, 4, 1)
    dg = dist.DistGraph.from_graph(g, dex.grid)
    layer = gg.nn.GATConv(4, 2, dtype=np.float64, executor=dex)
    with pytest.raises(ValueError, match="columns"):
        layer(dg, dg.scatter(H)[:, :3])
    with pytest.raises(ValueError, match="rows"):
        layer(dg, np.zeros((dg.n_local + 1, 4)))
    bad = dg.scatter(H)
    if dex.grid.rank == 0 and bad.size:           # one rank's input is bad: all raise
        bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        layer(dg, bad)


@pytest.mark.parametrize("layer_of", [
    lambda dex: gg.nn.GCNConv(4, 2, dtype=np.float64, executor=dex),
    lambda dex: gg.nn.GCNConv(4, 2, bias=False, dtype=np.float64, executor=dex),
    lambda dex: gg.nn.GATConv(4, 2, dtype=np.float64, executor=dex)],
    ids=["gcn", "gcn-no-bias", "gat"])
def test_a_bad_dout_on_one_rank_reaches_every_rank(dex, layer_of):
    """GCN reads dout's finiteness off its bias's sums (the same on every rank after their
    allreduce, so every rank takes the exact test together), GCN without a bias and GAT on a
    grid in a pass of their own: one rank's NaN is raised on every rank."""
    g, H, _ = graph_and_inputs(2, 4, 1)
    dg = dist.DistGraph.from_graph(g, dex.grid)
    layer = layer_of(dex)
    layer.train()
    bad = np.ones_like(layer(dg, dg.scatter(H)))
    if dex.grid.rank == 0 and bad.size:           # one rank's cotangent is bad: all raise
        bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="dout contains NaN or Inf"):
        layer.backward(bad)


@pytest.mark.parametrize("featureless", [False, True], ids=["features", "featureless"])
@pytest.mark.parametrize("relabel", [False, True])
def test_relations_equal_one_process(dex, featureless, relabel):
    """R-GCN on a typed graph: each relation's block on the grid, a relation without edges,
    and featureless input (the parameters' rows read as this rank's vertices' rows, their
    gradient gathered over the grid once per vertex)."""
    rng = np.random.default_rng(3)
    edge_index, t = rng.integers(0, N - 1, (2, 50)), rng.integers(0, 3, 50)
    _, keep = np.unique(np.stack([*edge_index, t]), axis=1, return_index=True)
    g = gg.Graph.from_edge_index(edge_index[:, keep], N, edge_type=t[keep], num_relations=4,
                                 dtype=np.float64)
    in_dim = N if featureless else 5
    one, grid_layer = (gg.nn.RGCNConv(in_dim, 3, 4, num_bases=2, dtype=np.float64, seed=2,
                                      executor=ex) for ex in (CPU, dex))
    H = None if featureless else rng.standard_normal((N, in_dim))
    out = one(g, H)
    dout = rng.standard_normal(out.shape)
    dH = one.backward(dout)
    dg = dist.DistGraph.from_graph(g, dex.grid, relabel=relabel, seed=5)
    assert dg.num_relations == 4 and dg.relation(3).nnz == 0
    got = grid_layer(dg, None if featureless else dg.scatter(H))
    got_dH = grid_layer.backward(dg.scatter(dout))
    close(dg.gather(got), out, "forward")
    if featureless:
        assert got_dH is None and dH is None
    else:
        close(dg.gather(got_dH), dH, "input gradient")
    close_gradients(grid_layer.grads, one.grads)


@pytest.mark.parametrize("relabel", [False, True])
def test_vertex_types_equal_one_process(dex, relabel):
    """HGT on a heterogeneous graph: every relation's block of the stacked vertex set on the
    grid (one without edges), each rank's rows of every type in and out, the softmax over a
    vertex's in-edges of every relation across the grid's columns."""
    rng = np.random.default_rng(4)
    nodes = {"author": 7, "paper": 11, "venue": 2}
    keys = [("author", "writes", "paper"), ("paper", "cites", "paper"),
            ("paper", "in", "venue"), ("venue", "lists", "paper")]
    edges = {}
    for key, m in zip(keys, [14, 16, 6, 0], strict=True):
        pairs = {(int(rng.integers(nodes[key[0]])), int(rng.integers(nodes[key[2]])))
                 for _ in range(m)}
        edges[key] = np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2).T
    hg = gg.HeteroGraph.from_edge_index_dict(edges, nodes, dtype=np.float64)
    widths = {"author": 3, "paper": 4, "venue": 4}
    one, grid_layer = (gg.nn.HGTConv(widths, 4, hg.metadata(), heads=2, dtype=np.float64,
                                     seed=2, executor=ex) for ex in (CPU, dex))
    for layer in (one, grid_layer):
        for name, value in layer.params.items():
            value[...] = np.random.default_rng(len(name)).uniform(-1, 1, value.shape)
    x = {t: rng.standard_normal((n, widths[t])) for t, n in nodes.items()}
    out = one(hg, x)
    dout = {t: rng.standard_normal(v.shape) for t, v in out.items()}
    dx = one.backward(dout)
    dhg = dist.DistHeteroGraph.from_hetero(hg, dex.grid, relabel=relabel, seed=5)
    assert sum(dhg.held(r) for r in dhg.regions) == dhg.n_local
    got = grid_layer(dhg, dhg.scatter(x))
    got_dx = grid_layer.backward(dhg.scatter(dout, copies=False))
    for t, v in dhg.gather(got).items():
        close(v, out[t], f"forward of {t}")
    for t, v in dhg.gather(got_dx).items():
        close(v, dx[t], f"input gradient of {t}")
    close_gradients(grid_layer.grads, one.grads)


def test_distributed_vertex_types_bad_input(dex):
    hg = gg.HeteroGraph.from_edge_index_dict({("a", "r", "b"): np.array([[0, 1], [1, 0]])},
                                             {"a": 2, "b": 3})
    with pytest.raises(TypeError, match="HeteroGraph"):
        dist.DistHeteroGraph.from_hetero(hg.graph, dex.grid)
    dhg = dist.DistHeteroGraph.from_hetero(hg, dex.grid)
    with pytest.raises(ValueError, match="whole 'b' array with 3 rows"):
        dhg.scatter({"b": np.zeros((2, 1))})
    with pytest.raises(ValueError, match="no vertex type 'c'"):
        dhg.scatter({"c": np.zeros((2, 1))})
    layer = gg.nn.HGTConv(2, 2, hg.metadata(), executor=dex)
    with pytest.raises(ValueError, match=r"x\['a'\] must be an array of shape"):
        layer(dhg, {"a": np.zeros((9, 2), np.float32), "b": np.zeros((9, 2), np.float32)})


@pytest.mark.parametrize("name, kw", [c for c in LOOPED if c[0] in ("GATConv", "GATv2Conv")],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_a_sharded_backward_in_ranges_of_columns_equals_one_process(dex, name, kw,
                                                                     monkeypatch):
    """The sharded backward gathers the messages, and completes their cotangent, a range of
    the block's columns at a time (``layout.COLUMN_CHUNK_BYTES``): ranges of a few rows,
    each meeting one or two ranks' slices, give one process's gradients."""
    from gblas_gnn.dist import layout

    monkeypatch.setattr(layout, "COLUMN_CHUNK_BYTES", 4 * 8 * kw["out_dim"] * kw["heads"])
    one, grid_layer = build(name, kw, "sum", CPU), build(name, kw, "sum", dex)
    g, H, _ = graph_and_inputs(7, kw["in_dim"], 1)
    dg = dist.DistGraph.from_graph(g, dex.grid, relabel=True, seed=5)
    one.dropout_rng, grid_layer.dropout_rng = (np.random.default_rng(11) for _ in range(2))
    out = one(g, H)
    dout = np.random.default_rng(8).standard_normal(out.shape)
    dH = one.backward(dout)
    got = grid_layer(dg, dg.scatter(H))
    dex.grid.reset_comm_stats()
    got_dH = grid_layer.backward(dg.scatter(dout))
    ranges = dex.grid.comm_stats()["by_op"].get("program.backward.messages.gather", {})
    close(dg.gather(got_dH), dH, "input gradient")
    close(dg.gather(got), out, "forward")
    close_gradients(grid_layer.grads, one.grads)
    if dex.dense == "sharded" and dex.grid.q > 1:
        assert ranges["messages"] > 1
