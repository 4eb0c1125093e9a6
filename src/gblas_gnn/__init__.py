"""gblas_gnn: attentional graph neural networks as global GraphBLAS tensor algebra.

``import gblas_gnn as gg`` gives :class:`Graph` and the building blocks ``gg.ops``; the
subpackages ``gg.semirings``, ``gg.nn``, ``gg.train``, ``gg.data`` and ``gg.executors`` load
on first use (so importing the package does not compile numba kernels).
"""

from __future__ import annotations

import importlib

from . import ops
from .graph import Graph, as_graph

__version__ = "0.1.0"
__all__ = ["Graph", "as_graph", "ops", "semirings", "nn", "train", "data", "executors"]

_LAZY = {"semirings", "nn", "train", "data", "executors"}


def __getattr__(name: str):
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'gblas_gnn' has no attribute {name!r}")
