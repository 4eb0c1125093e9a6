"""Graph generators and data set loaders.

Generators return plain arrays (``src, dst, n`` with ``A[dst, src]`` stored) or
:class:`Dataset` objects; the ``kronecker`` / ``erdos_renyi`` convenience functions
wrap the edges into a :class:`gblas_gnn.graph.Graph`.
"""

from ._edges import edges_to_csr
from ._safe_pickle import UnsafePickleError, safe_load
from .csbm import csbm
from .dataset import Dataset
from .erdos_renyi import erdos_renyi, erdos_renyi_edges
from .kronecker import kronecker, kronecker_edges
from .ogb import OGB_NODE_DATASETS, load_ogb
from .ogb_mag import OGB_MAG_CLASSES, HeteroDataset, load_ogb_mag
from .planetoid import PLANETOID_NAMES, find_planetoid_root, load_planetoid
from .typed import typed_random

__all__ = [
    "Dataset",
    "HeteroDataset",
    "OGB_MAG_CLASSES",
    "OGB_NODE_DATASETS",
    "PLANETOID_NAMES",
    "UnsafePickleError",
    "csbm",
    "edges_to_csr",
    "erdos_renyi",
    "erdos_renyi_edges",
    "find_planetoid_root",
    "kronecker",
    "kronecker_edges",
    "load_ogb",
    "load_ogb_mag",
    "load_planetoid",
    "safe_load",
    "typed_random",
]
