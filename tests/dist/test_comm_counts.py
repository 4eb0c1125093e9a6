"""The communication of one GAT layer (training forward and backward) on a grid, counted by
the grid's wrapper, equals the scheme's formula exactly, on every rank and on both layouts
of dense tensors.

``GATConv`` is a composition: its attention runs as one edge program
(:mod:`gblas_gnn.dist.programs`), its projections as dense products. With ``r = |R_x|``
(this rank's block rows), ``c = |C_y|`` (its block's columns), ``k`` the output width
(heads·width), ``h`` the heads, ``f`` the input width and 8-byte words (float64), per rank,
**replicated** (every rank keeps the rows ``R_x``):

========================================  ==================  =====================
step                                      sent / received     messages
========================================  ==================  =====================
exchange of ``[s H']`` for the columns    r(h+k) / c(h+k)     2 (0 on the diagonal)
row max, row sum                          hr each             1 each
aggregate                                 kr                  1
column partials ``[ds dX]``               c(h+k)              1
their exchange back to the rows           c(h+k) / r(h+k)     2 (0 on the diagonal)
row partials ``dd``                       hr                  1
bias gradient                             k                   1
``dB = H'ᵀ [ds dd]`` and ``dW = Hᵀ dH'``  2hk + fk            2
========================================  ==================  =====================

**sharded** (rank (x, y) keeps the y-th slice of ``R_x``, ``s`` rows; its partner (y, x)
the x-th slice of ``R_y``, ``s'`` rows; :mod:`gblas_gnn.dist.layout`), with ``q`` the
grid's side:

==========================================  =====================  ========================
step                                        sent / received        messages
==========================================  =====================  ========================
gather of ``d`` by the rows (forward and    hs / h(r − s)          1 each
backward)
``[s H']`` to the partner, then gathered    (h+k)s / (h+k)s',      2 (0 on the diagonal)
over the column (forward)                   (h+k)s' / (h+k)(c−s')  + 1 per array
the same again in the backward, ``s`` and   as the forward         ``H'``: 1 per range of
``H'`` apart: ``H'`` a range of columns at                         columns (q here)
a time
row max, row sum                            hr each                1 each
aggregate (reduce-scatter)                  k(r − s) / ks(q − 1)   1
gather of ``[dZ t]`` by the rows            (k+h)s / (k+h)(r − s)  1 per array
column partials ``ds`` and ``dH'``          (h+k)(c − s') /        1 per array (``dH'``: per
(reduce-scatter, ``dH'`` range by range)    (h+k)s'(q − 1)         range)
their exchange back to the kept rows        (h+k)s' / (h+k)s       2 each (0 on the
                                                                   diagonal)
row partials ``dd`` (reduce-scatter)        h(r − s) / hs(q − 1)   1
bias and weight gradients                   as replicated          3
==========================================  =====================  ========================

so a rank moves O(nk/q + k²) words per layer either way (sharded: about 1.5× the
replicated words, for 1/q of the dense memory); on a 1×1 grid nothing moves.
"""

from __future__ import annotations

import numpy as np
import pytest

import gblas_gnn as gg
from gblas_gnn import dist

N, F, HEADS, WIDTH = 29, 6, 2, 3
K = HEADS * WIDTH


def _slices(rows: int, q: int) -> list[int]:
    return [rows * (j + 1) // q - rows * j // q for j in range(q)]


def program_table(grid, r: int, c: int, *, by_target: int, by_source: int, out: int,
                  heads: int, row_grad: int, source_arrays: int = 2) -> dict:
    """(words sent, words received, messages) per label of one edge program's training
    forward and backward on this rank: ``by_target``/``by_source`` the widths read by
    target/source (``source_arrays`` arrays by source: a sharded layout gathers and reduces
    each in a message of its own), ``out`` the aggregate's width (the backward gathers its
    cotangent and the softmax term t, ``heads`` words a row), ``row_grad`` the width of the
    row partial gradients."""
    q, off, rows = grid.q, grid.partner != grid.rank, grid.q > 1
    table = {
        "program.row_max": (heads * r, heads * r, 1) if rows else None,
        "program.row_sum": (heads * r, heads * r, 1) if rows else None,
    }
    if grid.dense == "replicated":
        table.update({
            "program.columns": (by_source * r, by_source * c, 2) if off else None,
            "program.aggregate": (out * r, out * r, 1) if rows else None,
            "program.column_partials": (by_source * c, by_source * c, 1) if rows else None,
            "program.to_rows": (by_source * c, by_source * r, 2) if off else None,
            "program.row_partials": (row_grad * r, row_grad * r, 1) if rows else None,
        })
        return table
    s, s2 = _slices(r, q)[grid.y], _slices(c, q)[grid.x]
    scores = by_source - out                 # read by source besides the messages
    step = -(-c // q)                        # a range of columns: at most a slice's rows
    ranges = -(-c // step) if c else 0
    table.update({
        "program.rows": (by_target * s, by_target * (r - s), 1) if rows else None,
        "program.columns": (by_source * s, by_source * s2, 2) if off else None,
        "program.columns.gather": (by_source * s2, by_source * (c - s2), source_arrays)
        if rows else None,
        "program.aggregate": (out * (r - s), out * s * (q - 1), 1) if rows else None,
        # the backward: the rows and the scores by source gathered again, the messages a
        # range of columns at a time (a slice's rows each here) with their cotangent
        "program.backward.rows": (by_target * s, by_target * (r - s), 1) if rows else None,
        "program.backward.columns": (scores * s, scores * s2, 2) if off else None,
        "program.backward.columns.gather": (scores * s2, scores * (c - s2),
                                            source_arrays - 1) if rows else None,
        "program.backward.messages": (out * s, out * s2, 2) if off else None,
        "program.backward.messages.gather": (out * s2, out * (c - s2), ranges)
        if rows and ranges else None,
        "program.backward.messages.partials": (out * (c - s2), out * s2 * (q - 1), ranges)
        if rows and ranges else None,
        "program.backward.messages.to_rows": (out * s2, out * s, 2) if off else None,
        "program.backward.cotangent": ((out + heads) * s, (out + heads) * (r - s), 2)
        if rows else None,
        "program.column_partials": (scores * (c - s2), scores * s2 * (q - 1),
                                    source_arrays - 1) if rows else None,
        "program.to_rows": (scores * s2, scores * s, 2) if off else None,
        "program.row_partials": (row_grad * (r - s), row_grad * s * (q - 1), 1)
        if rows else None,
    })
    return table


def in_bytes(table: dict, w: int = 8) -> dict:
    return {k: (v[0] * w, v[1] * w, v[2]) for k, v in table.items() if v is not None}


def expected(grid, r: int, c: int) -> dict[str, tuple[int, int, int]]:
    """(bytes sent, bytes received, messages) per label for this rank."""
    rows = grid.q > 1
    table = program_table(grid, r, c, by_target=HEADS, by_source=K + HEADS, out=K,
                          heads=HEADS, row_grad=HEADS)
    table.update({
        "vertex_sum": (K, K, 1) if rows else None,
        "inner": (2 * HEADS * K + F * K, 2 * HEADS * K + F * K, 2) if rows else None,
    })
    return in_bytes(table)


def _graph(edge_dim: int = 0) -> gg.Graph:
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, N, 120), rng.integers(0, N, 120)
    keep = np.unique(src * N + dst, return_index=True)[1]        # features: no duplicates
    attr = rng.standard_normal((keep.size, edge_dim)) if edge_dim else None
    return gg.Graph.from_edges(src[keep], dst[keep], N, dtype=np.float64, edge_attr=attr)


def _counted(dex, g: gg.Graph, **layer_kw) -> tuple[dict, dist.DistGraph]:
    """What one training forward and backward of a GAT layer sends, by label, on this rank
    (after a first step that builds the self loops once)."""
    rng = np.random.default_rng(1)
    dg = dist.DistGraph.from_graph(g, dex.grid)
    layer = gg.nn.GATConv(F, WIDTH, heads=HEADS, dtype=np.float64, executor=dex, **layer_kw)
    H = dg.scatter(rng.standard_normal((N, F)))
    dout = dg.scatter(rng.standard_normal((N, K)))
    layer(dg, H)                          # first call: self loops built (and counted) once
    layer.backward(dout)
    dex.grid.reset_comm_stats()
    layer(dg, H)
    layer.backward(dout)
    stats = dex.grid.comm_stats()["by_op"]
    return ({label: (e["bytes_sent"], e["bytes_received"], e["messages"])
             for label, e in stats.items() if label != "validation"}, dg)


def _agree(grid, scheme: dict, want: dict) -> None:
    checks = grid.allgather((scheme == want, scheme, want), "test.counts")
    for rank, (ok, got, expect) in enumerate(checks):
        assert ok, f"rank {rank}: counted {got}, the scheme says {expect}"


def test_gat_layer_moves_what_the_scheme_says(dex):
    scheme, dg = _counted(dex, _graph())
    want = expected(dex.grid, dg.A.nrows, dg.A.ncols)
    _agree(dex.grid, scheme, want)
    # in words: O(nk/q + k^2) per rank, and nothing at all on one process
    words = sum(v[0] for v in want.values()) // 8
    assert words <= 6 * (N // dex.grid.q + 1) * (K + HEADS) + 3 * HEADS * (N // dex.grid.q + 1) \
        + 2 * HEADS * K + F * K + K
    if dex.grid.q == 1:
        assert scheme == {}


@pytest.mark.parametrize("their_gradient", [False, True], ids=["data", "requires-grad"])
def test_edge_features_never_move(dex, their_gradient):
    """GAT with ``edge_dim``: each rank's edge features stay with its block of A. What moves
    is GAT's traffic plus one sum over the grid of the edge term's parameter gradient (the
    ``f_e × heads`` matrix ``W_e a_e`` that the scores read) and, only for features that
    require their gradient, the self loops' feature cotangent (``r × f_e``: a loop holds
    the mean of its row's in-edge features, which span the grid row) completed over the
    grid row. Nothing of size |E|."""
    f_e = 5
    g = _graph(f_e)
    g.edge_attr.requires_grad = their_gradient
    scheme, dg = _counted(dex, g, edge_dim=f_e)
    want = expected(dex.grid, dg.A.nrows, dg.A.ncols)
    if dex.grid.q > 1:
        r = dg.A.nrows
        want["program.parameters"] = (f_e * HEADS * 8, f_e * HEADS * 8, 1)
        if their_gradient:
            want["edge_attr.loops"] = (r * f_e * 8, r * f_e * 8, 1)
    _agree(dex.grid, scheme, want)


@pytest.mark.any_layout
def test_exchange_parts_is_one_counted_message_of_views(dex):
    """Several arrays go to the partner as one message of their bytes; what comes back are
    aligned views of the partner's arrays (the diagonal ranks get their own arrays)."""
    grid = dex.grid
    rows = 5 + grid.x                          # the partner (y, x) has 5 + y rows
    mine = [np.full((rows, 3), grid.rank, np.float32), np.arange(2 * rows, dtype=np.float32)
            .reshape(2, rows) + 100 * grid.rank, np.empty((0, 4), np.float32)]
    theirs = 5 + grid.y
    grid.reset_comm_stats()
    got = grid.exchange_parts(mine, [(theirs, 3), (2, theirs), (0, 4)], "test.parts")
    partner = grid.partner
    assert got[0].shape == (theirs, 3) and (got[0] == partner).all()
    np.testing.assert_array_equal(
        got[1], np.arange(2 * theirs, dtype=np.float32).reshape(2, theirs) + 100 * partner)
    assert got[2].shape == (0, 4)
    stats = grid.comm_stats()["by_op"]
    if partner == grid.rank:
        assert all(g is m for g, m in zip(got, mine, strict=True)) and stats == {}
    else:
        assert got[0].ctypes.data % 64 == 0 and got[1].base is not None
        assert (stats["test.parts"]["bytes_sent"], stats["test.parts"]["bytes_received"],
                stats["test.parts"]["messages"]) == (5 * rows * 4, 5 * theirs * 4, 2)


def test_hgt_moves_what_the_formula_says(dex):
    """HGT on a typed graph (``HGTConv``: one edge program over the stacked vertex set, the
    projections as per-region products). With ``r``, ``c`` this rank's rows and block
    columns of the *stacked* set (the types and the relations' source blocks), ``F`` the
    output width and ``h`` the heads, per training forward and backward:

    * the program: ``[QK | V]`` for the columns, ``2F·r`` / ``2F·c`` (2 messages, none on
      the diagonal); the row maximum and sum ``h·r`` each; the aggregate ``F·r``; the
      column partials ``[dQK dV]`` ``2F·c`` and their way back ``2F·c`` / ``2F·r``; the row
      partials ``dQ`` ``F·r``;
    * one reduction over vertices per region's weight (``inner``) and bias (``vertex_sum``):
      the queries' ``in·F`` and ``F`` per target type, the keys' and the values' ``in·F`` and
      ``F`` each per source block, the output's ``F·F`` and ``F`` per target type, and one
      ``F·F`` more per target type with the gated skip (its own product, summed with the
      output's without a concatenation).

    Nothing of the edges' size, and nothing at all on one process."""
    rng = np.random.default_rng(0)
    widths, F, heads = {"a": 5, "b": 4}, 4, 2
    edges = {("a", "r", "b"): np.stack([rng.integers(0, 13, 30), rng.integers(0, 11, 30)]),
             ("b", "s", "a"): np.stack([rng.integers(0, 11, 25), rng.integers(0, 13, 25)]),
             ("b", "t", "b"): rng.integers(0, 11, (2, 20))}
    hg = gg.HeteroGraph.from_edge_index_dict({k: np.unique(v, axis=1) for k, v in edges.items()},
                                             {"a": 13, "b": 11}, dtype=np.float64)
    layer = gg.nn.HGTConv(widths, F, hg.metadata(), heads=heads, dtype=np.float64,
                          executor=dex)
    dhg = dist.DistHeteroGraph.from_hetero(hg, dex.grid)
    x = dhg.scatter({t: rng.standard_normal((n, widths[t]))
                     for t, n in hg.num_nodes_dict.items()})
    for _ in range(2):
        dex.grid.reset_comm_stats()
        out = layer(dhg, x)
        layer.backward({t: np.ones_like(v) for t, v in out.items()})
    stats = dex.grid.comm_stats()["by_op"]
    scheme = {label: (e["bytes_sent"], e["bytes_received"], e["messages"])
              for label, e in stats.items() if label != "validation"}
    r, c, grid = dhg.graph.A.nrows, dhg.graph.A.ncols, dex.grid
    rows = grid.q > 1
    targets, blocks = ["a", "b"], list(hg.blocks)
    weights = sum(widths[t] * F for t in targets) + \
        sum(widths[k[0]] * 2 * F for k in blocks) + \
        sum((2 * F if widths[t] == F else F) * F for t in targets)
    segments = 2 * len(targets) + 2 * len(blocks)
    products = segments + sum(widths[t] == F for t in targets)
    biases = len(targets) * F + len(blocks) * 2 * F + len(targets) * F
    table = program_table(grid, r, c, by_target=F, by_source=2 * F, out=F, heads=heads,
                          row_grad=F)
    table.update({
        "inner": (weights, weights, products) if rows else None,
        "vertex_sum": (biases, biases, segments) if rows else None,
    })
    want = in_bytes(table)
    _agree(grid, scheme, want)
    if grid.q == 1:
        assert scheme == {}
