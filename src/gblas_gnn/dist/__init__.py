r"""Distributed training and inference on a √p×√p MPI grid (``pip install "gblas_gnn[dist]"``).

    mpiexec -n 4 python -m mpi4py script.py

.. code-block:: python

    from gblas_gnn import dist
    grid = dist.Grid(dense="sharded")               # COMM_WORLD as a q×q grid
    dg = dist.DistGraph.from_graph(g, grid)         # every rank passes the same Graph
    layer = gg.nn.GATConv(k, 8, heads=2, executor=dist.DistExecutor(grid))
    out = dg.gather(layer(dg, dg.scatter(H)))       # the global result on every rank

The adjacency is split in q×q blocks and never moves; feature blocks, vectors and
parameters travel through counted collectives (``grid.comm_stats()``). Dense vertex tensors
are kept ``replicated`` along each grid row (n·k/√p per rank) or ``sharded`` (n·k/p per rank,
gathered per use): :mod:`gblas_gnn.dist.layout`. The scheme and its
communication volume are in ``docs/design.md`` ("Distribution").
"""

from __future__ import annotations

from ..data.partition import partition
from .executor import DistExecutor
from .graph import Block, DistDataset, DistGraph
from .grid import DENSE_LAYOUTS, Grid, GridError
from .hetero import DistHeteroGraph

__all__ = ["DENSE_LAYOUTS", "Block", "DistDataset", "DistExecutor", "DistGraph",
           "DistHeteroGraph", "Grid", "GridError", "default_executor", "partition"]


def default_executor() -> DistExecutor:
    """The executor registered as ``"dist"``: a grid over ``COMM_WORLD``."""
    return DistExecutor(Grid())
