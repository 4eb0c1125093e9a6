"""gblas_gnn: attentional graph neural networks as global GraphBLAS tensor algebra.

``import gblas_gnn as gg`` gives :class:`Graph`, :class:`HeteroGraph`, the building blocks
``gg.ops`` and ``gg.to_numpy``; the subpackages ``gg.semirings``, ``gg.nn``, ``gg.train``,
``gg.data``, ``gg.executors``, ``gg.compose``, ``gg.dist`` (MPI) and ``gg.gpu`` (CUDA) load on
first use (so importing the package does not compile numba kernels or start MPI).
"""

from __future__ import annotations

import importlib

from . import ops, virtual  # noqa: F401  (virtual: A * expr on graphblas matrices)
from .codegen import compile_log
from .executors import to_numpy
from .graph import Graph, as_graph
from .hetero import HeteroGraph

__version__ = "0.1.0"
__all__ = ["Graph", "HeteroGraph", "as_graph", "ops", "to_numpy", "semirings", "nn", "train",
           "data", "executors", "compose", "dist", "gpu"]

compile_log.install()          # only when $GBLAS_GNN_COMPILE_LOG names a file

_LAZY = {"semirings", "nn", "train", "data", "executors", "compose", "dist", "gpu"}


def __getattr__(name: str):
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'gblas_gnn' has no attribute {name!r}")
