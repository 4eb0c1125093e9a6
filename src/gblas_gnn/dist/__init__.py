r"""Distributed training and inference on a √p×√p MPI grid (``pip install "gblas_gnn[dist]"``).

    mpiexec -n 4 python -m mpi4py script.py

.. code-block:: python

    from gblas_gnn import dist
    grid = dist.Grid()                              # COMM_WORLD as a q×q grid
    dg = dist.DistGraph.from_graph(g, grid)         # every rank passes the same Graph
    layer = gg.nn.GATConv(k, 8, heads=2, executor=dist.DistExecutor(grid))
    out = dg.gather(layer(dg, dg.scatter(H)))       # the global result on every rank

The adjacency is split in q×q blocks and never moves; feature blocks, vectors and
parameters travel through counted collectives (``grid.comm_stats()``). The scheme and its
communication volume are in ``docs/design.md`` ("Distribution").
"""

from __future__ import annotations

from ..data.partition import partition
from .executor import DistExecutor
from .graph import Block, DistDataset, DistGraph
from .grid import Grid, GridError
from .hetero import DistHeteroGraph

__all__ = ["Block", "DistDataset", "DistExecutor", "DistGraph", "DistHeteroGraph", "Grid",
           "GridError", "default_executor", "partition"]


def default_executor() -> DistExecutor:
    """The executor registered as ``"dist"``: a grid over ``COMM_WORLD``."""
    return DistExecutor(Grid())
