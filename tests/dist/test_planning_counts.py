"""The planning formulas (:mod:`gblas_gnn.dist.planning`) are the counts of both layouts:
one training step of a GCN layer (both orders: projecting first when k ≤ f, propagating
first otherwise) and of a GAT layer with two heads, counted by the grid on every rank, equal
:func:`~gblas_gnn.dist.planning.layer_words` in words sent and received, step by step.
Nothing moves on a 1×1 grid."""

from __future__ import annotations

import numpy as np
import pytest

import gblas_gnn as gg
from gblas_gnn import dist
from gblas_gnn.dist import planning

N = 29
#: the grid's labels that carry no data of the layer
CONTROL = {"validation"}


def _graph() -> gg.Graph:
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, N, 120), rng.integers(0, N, 120)
    keep = np.unique(src * N + dst, return_index=True)[1]
    return gg.Graph.from_edges(src[keep], dst[keep], N, dtype=np.float64)


@pytest.mark.parametrize(("kind", "f", "k", "heads"),
                         [("gcn", 6, 3, 1), ("gcn", 3, 6, 1), ("gat", 5, 6, 2)],
                         ids=["gcn-project-first", "gcn-propagate-first", "gat"])
def test_layer_moves_what_planning_says(dex, kind, f, k, heads):
    grid = dex.grid
    rng = np.random.default_rng(1)
    dg = dist.DistGraph.from_graph(_graph(), grid)
    layer = gg.nn.GCNConv(f, k, dtype=np.float64, executor=dex) if kind == "gcn" else \
        gg.nn.GATConv(f, k // heads, heads=heads, dtype=np.float64, executor=dex)
    H = dg.scatter(rng.standard_normal((N, f)))
    dZ = dg.scatter(rng.standard_normal((N, k)))
    layer(dg, H)                         # first step: normalisation, self loops (once)
    layer.backward(dZ)
    counted = {}
    for phase in ("forward", "backward"):
        grid.reset_comm_stats()
        if phase == "forward":
            layer(dg, H)
        else:
            layer.backward(dZ)
        counted[phase] = [sum(e[key] for label, e in grid.comm_stats()["by_op"].items()
                              if label not in CONTROL) // 8
                          for key in ("bytes_sent", "bytes_received")]
    r, c = dg.A.nrows, dg.A.ncols
    shape = dict(r=r, c=c, q=grid.q, diagonal=grid.partner == grid.rank, f=f, k=k,
                 heads=heads)
    if grid.dense == "sharded":
        shape.update(s=dg.n_local, s_col=c * (grid.x + 1) // grid.q - c * grid.x // grid.q)
    fwd = planning.layer_words(kind, grid.dense, backward=False, **shape)
    both = planning.layer_words(kind, grid.dense, **shape)
    want = {"forward": [fwd["sent"], fwd["received"]],
            "backward": [both["sent"] - fwd["sent"], both["received"] - fwd["received"]]}
    checks = grid.allgather((counted == want, counted, want), "test.counts")
    for rank, (ok, got, expect) in enumerate(checks):
        assert ok, f"rank {rank}: counted {got}, planning says {expect}"
    if grid.q == 1:
        assert both == {"sent": 0, "received": 0}
