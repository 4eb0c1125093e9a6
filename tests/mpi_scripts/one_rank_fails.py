"""Rank 2 raises in the middle of a run while the others wait in a collective: run with
``python -m mpi4py``, the job must end with the error, not hang. The argument: the layout
of dense tensors (default replicated)."""

import sys

import numpy as np

import gblas_gnn as gg
from gblas_gnn import dist

grid = dist.Grid(dense=sys.argv[1] if len(sys.argv) > 1 else "replicated")
dg = dist.DistGraph.from_graph(gg.Graph.from_edges(np.arange(7), np.arange(1, 8), 8), grid)
layer = gg.nn.GCNConv(3, 2, executor=dist.DistExecutor(grid))
H = dg.scatter(np.ones((8, 3), np.float32))
layer(dg, H)
if grid.rank == 2:
    raise RuntimeError("rank 2 gives up")
for _ in range(100):
    layer(dg, H)
print(f"rank {grid.rank} reached the end")      # it must not: rank 2's abort ends the job
