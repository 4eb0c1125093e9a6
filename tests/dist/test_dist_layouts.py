"""The two layouts of dense tensors on a grid (:mod:`gblas_gnn.dist.layout`): what a rank
keeps of the rows, moving between the layouts, and the errors they promise.

Run on every rank under ``mpiexec`` (``tests/test_mpi.py``) and on a 1×1 grid here.
"""

from __future__ import annotations

import numpy as np
import pytest
from layer_cases import graph_and_inputs

import gblas_gnn as gg
from gblas_gnn import dist
from gblas_gnn.data import csbm
from gblas_gnn.dist.layout import shard


def test_a_rank_keeps_the_rows_of_its_layout(dex):
    """Replicated: the rows ``R_x`` of the rank's block; sharded: their y-th of q slices.
    Over the grid the sharded rows are every vertex exactly once; scatter and gather are
    inverse on both."""
    g, H, _ = graph_and_inputs(6, 3, 1)
    dg = dist.DistGraph.from_graph(g, dex.grid, relabel=True, seed=2)
    rows = dg.A.row_ids
    want = rows if dex.dense == "replicated" else rows[shard(rows.size, dex.grid.y,
                                                             dex.grid.q)]
    np.testing.assert_array_equal(dg.vertex_ids, want)
    assert dg.n_local == want.size
    if dex.dense == "sharded":
        everyone = np.concatenate(dex.grid.allgather(dg.vertex_ids, "test.ids"))
        np.testing.assert_array_equal(np.sort(everyone), np.arange(g.n))
    np.testing.assert_array_equal(dg.gather(dg.scatter(H)), H)
    np.testing.assert_array_equal(np.sort(np.concatenate(dg.parts)), np.arange(g.n))


def test_a_data_set_moves_between_the_layouts(dex):
    """``laid_out``: sliced towards sharded (no communication), gathered back towards
    replicated; the graph keeps its blocks."""
    data = csbm(n=60, classes=3, train_per_class=5, val=10, test=20, features=4, seed=1)
    dg = dist.DistGraph.from_graph(data.graph, dex.grid.laid_out("replicated"))
    here = dg.scatter_dataset(data)
    there = here.laid_out("sharded")
    assert there.graph.grid.dense == "sharded" and there.graph.A is here.graph.A
    for name in ("x", "y", "train_mask", "val_mask", "test_mask"):
        np.testing.assert_array_equal(getattr(there, name),
                                      getattr(data, name)[there.graph.vertex_ids])
        np.testing.assert_array_equal(getattr(there.laid_out("replicated"), name),
                                      getattr(here, name))
    assert here.laid_out("replicated") is here


def test_a_layout_must_be_named(dex):
    """Refused before any communication, so on every rank alike."""
    with pytest.raises(ValueError, match="dense must be one of"):
        dist.Grid(dense="rows")
    with pytest.raises(ValueError, match="dense must be one of"):
        dist.DistExecutor(dex.grid, dense="diagonal")
    with pytest.raises(ValueError, match="dense must be one of"):
        dex.grid.laid_out("columns")


def test_rows_of_the_other_layout_are_refused_on_every_rank(dex):
    """A tensor scattered for one layout given to an executor of the other: a clear error
    naming the layouts, on every rank (the rows differ on a grid of more than one rank)."""
    if dex.grid.q == 1:
        pytest.skip("one rank: both layouts keep the same rows")
    g, H, _ = graph_and_inputs(6, 3, 1)
    other = "sharded" if dex.dense == "replicated" else "replicated"
    theirs = dist.DistGraph.from_graph(g, dex.grid.laid_out(other))
    layer = gg.nn.GCNConv(3, 2, dtype=np.float64, executor=dex)
    ours = dist.DistGraph.from_graph(g, dex.grid)
    with pytest.raises(ValueError, match="layout"):
        with dex.validation():
            dex.spmm(ours.A, theirs.scatter(H))
    layer(ours, ours.scatter(H))                 # the grid is still in step afterwards
