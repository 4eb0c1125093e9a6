"""Ranks pass different graphs (argument ``graph``) or features of different widths
(``features``): every rank must raise the same clear error."""

import sys

import numpy as np

import gblas_gnn as gg
from gblas_gnn import dist

grid = dist.Grid()
what = sys.argv[1]
n = 12
extra = grid.rank if what == "graph" else 0          # rank r adds r edges
src, dst = np.arange(n - 1 - extra), np.arange(1, n - extra)
g = gg.Graph.from_edges(src, dst, n)
dg = dist.DistGraph.from_graph(g, grid)
width = 4 + (grid.rank == 1)                           # rank 1 passes 5 columns
layer = gg.nn.GATConv(4, 2, executor=dist.DistExecutor(grid))
H = np.ones((n, width), np.float32)
layer(dg, dg.scatter(H))
print("not refused", flush=True)
