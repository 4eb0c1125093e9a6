"""A node-classification dataset: adjacency, features, labels and split masks."""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

if TYPE_CHECKING:
    from gblas_gnn.graph import Graph

__all__ = ["Dataset"]


def _check_mask(name: str, mask: Any, n: int) -> np.ndarray:
    if not isinstance(mask, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(mask).__name__}")
    if mask.dtype != np.bool_:
        raise TypeError(f"{name} must have dtype bool, got {mask.dtype}")
    if mask.shape != (n,):
        raise ValueError(f"{name} has shape {mask.shape}, expected ({n},)")
    return mask


@dataclass(eq=False)
class Dataset:
    """Node-classification data set.

    Parameters
    ----------
    name : str
        Human-readable name (``"Cora"``, ``"CSBM"``, ...).
    adjacency : scipy.sparse matrix, shape (n, n)
        ``A[i, j]`` stored ⇔ edge ``j -> i`` (row = target).  Any scipy sparse
        format is accepted and stored as canonical CSR (sorted indices, no
        duplicates; duplicates are rejected rather than summed).
    x : ndarray, shape (n, f), float32 or float64
        Node features; must be finite.
    y : ndarray, shape (n,), integer
        Labels in ``[0, num_classes)``; stored as int64.
    train_mask, val_mask, test_mask : ndarray of bool, shape (n,)
        Split masks; they must be pairwise disjoint.
    num_classes : int
        Number of classes (``>= 1``; ``0`` is allowed only for an empty data set).
    edge_attr : ndarray, shape (nnz, f), optional
        Edge features, one row per stored entry of ``adjacency`` in its canonical CSR
        order (finite; cast to ``x``'s dtype); the graph carries them
        (:attr:`gblas_gnn.Graph.edge_attr`).

    Attributes
    ----------
    graph : gblas_gnn.graph.Graph
        ``Graph.from_scipy(adjacency, dtype=x.dtype)``, built on first access and
        cached.

    Raises
    ------
    TypeError
        Wrong container or dtype (non-bool mask, non-integer labels, ...).
    ValueError
        Inconsistent shapes, non-square adjacency, labels out of range, NaN/Inf
        features, overlapping masks.
    """

    name: str
    adjacency: sp.csr_matrix
    x: np.ndarray
    y: np.ndarray
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray
    num_classes: int
    edge_attr: np.ndarray | None = None
    _graph: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"name must be a str, got {type(self.name).__name__}")
        adj = self.adjacency
        if not sp.issparse(adj):
            raise TypeError(f"adjacency must be a scipy.sparse matrix, got {type(adj).__name__}")
        if adj.ndim != 2 or adj.shape[0] != adj.shape[1]:
            raise ValueError(f"adjacency must be square, got shape {adj.shape}")
        n = adj.shape[0]
        if not (isinstance(adj, sp.csr_matrix | sp.csr_array) and adj.has_canonical_format):
            coo = sp.coo_matrix(adj)  # keeps duplicates of COO / non-canonical CSR input
            keys = coo.row.astype(np.int64) * n + coo.col
            if np.unique(keys).size != keys.size:
                raise ValueError("adjacency has duplicate entries")
            adj = sp.csr_matrix(coo)
            adj.sort_indices()
        else:
            adj = sp.csr_matrix(adj)
        self.adjacency = adj

        x = self.x
        if not isinstance(x, np.ndarray):
            raise TypeError(f"x must be a numpy.ndarray, got {type(x).__name__}")
        if x.dtype not in (np.float32, np.float64):
            raise TypeError(f"x must be float32 or float64, got {x.dtype}")
        if x.ndim != 2 or x.shape[0] != n:
            raise ValueError(f"x has shape {x.shape}, expected ({n}, f)")
        if not np.isfinite(x).all():
            raise ValueError("x contains NaN or Inf")

        y = self.y
        if not isinstance(y, np.ndarray):
            raise TypeError(f"y must be a numpy.ndarray, got {type(y).__name__}")
        if not np.issubdtype(y.dtype, np.integer):
            raise TypeError(f"y must have an integer dtype, got {y.dtype}")
        if y.shape != (n,):
            raise ValueError(f"y has shape {y.shape}, expected ({n},)")
        k = self.num_classes
        if isinstance(k, bool) or not isinstance(k, numbers.Integral):
            raise TypeError(f"num_classes must be an int, got {type(k).__name__}")
        if k < (1 if n else 0):
            raise ValueError(f"num_classes must be >= 1, got {k!r}")
        self.num_classes = int(k)
        if n and (y.min() < 0 or y.max() >= k):
            raise ValueError(f"labels must lie in [0, {k}), got range [{y.min()}, {y.max()}]")
        self.y = y.astype(np.int64, copy=False)

        masks = [
            _check_mask(nm, getattr(self, nm), n) for nm in ("train_mask", "val_mask", "test_mask")
        ]
        overlap = (
            (masks[0] & masks[1]).any()
            or (masks[0] & masks[2]).any()
            or (masks[1] & masks[2]).any()
        )
        if overlap:
            raise ValueError("train_mask, val_mask and test_mask must be disjoint")
        if self.edge_attr is not None:
            from ..edge_attr import check_edge_attr

            self.edge_attr = check_edge_attr(self.edge_attr, adj.nnz, self.x.dtype)

    # -- convenience -----------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        """Number of vertices ``n``."""
        return self.adjacency.shape[0]

    @property
    def num_edges(self) -> int:
        """Stored entries of ``A`` (an undirected edge counts twice)."""
        return self.adjacency.nnz

    @property
    def num_features(self) -> int:
        """Feature width ``f``."""
        return self.x.shape[1]

    @property
    def graph(self) -> Graph:
        """The adjacency as a :class:`gblas_gnn.graph.Graph` (cached)."""
        if self._graph is None:
            from ._graph import graph_from_csr

            self._graph = graph_from_csr(self.adjacency, dtype=self.x.dtype,
                                         edge_attr=self.edge_attr)
        return self._graph

    def __repr__(self) -> str:
        return (
            f"Dataset(name={self.name!r}, num_nodes={self.num_nodes}, "
            f"num_edges={self.num_edges}, num_features={self.num_features}, "
            f"num_classes={self.num_classes}, train/val/test="
            f"{int(self.train_mask.sum())}/{int(self.val_mask.sum())}/"
            f"{int(self.test_mask.sum())})"
        )
