"""Lazy bridge to :class:`gblas_gnn.graph.Graph` (imported only when called)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._edges import edges_to_csr


def graph_from_csr(mat: sp.csr_matrix, dtype: np.dtype | type = np.float32):
    """``Graph.from_scipy(mat, dtype=dtype)``."""
    from gblas_gnn.graph import Graph

    return Graph.from_scipy(mat, dtype=dtype)


def graph_from_sorted_edges(
    src: np.ndarray, dst: np.ndarray, n: int, dtype: np.dtype | type = np.float32
):
    """Graph of unit-valued, already deduplicated edges ``src -> dst``."""
    return graph_from_csr(edges_to_csr(src, dst, n, dtype=dtype), dtype=dtype)
