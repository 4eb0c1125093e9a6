"""Lazy bridge to :class:`gblas_gnn.graph.Graph` (imported only when called, so the
array-level generators do not depend on the graph module)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

if TYPE_CHECKING:
    from gblas_gnn.graph import Graph


def graph_from_csr(mat: sp.spmatrix, dtype: np.dtype | type = np.float32,
                   edge_attr: np.ndarray | None = None) -> Graph:
    """``Graph.from_scipy(mat, dtype=dtype)``; with ``edge_attr``, the features of the
    canonical CSR matrix's entries in their order."""
    from gblas_gnn.graph import Graph

    if edge_attr is None:
        return Graph.from_scipy(mat, dtype=dtype)
    csr = sp.csr_matrix(mat)
    rows = np.repeat(np.arange(csr.shape[0]), np.diff(csr.indptr))
    return Graph.from_edges(csr.indices, rows, csr.shape[0], values=csr.data, dtype=dtype,
                            edge_attr=edge_attr)


def graph_from_sorted_edges(
    src: np.ndarray, dst: np.ndarray, n: int, dtype: np.dtype | type = np.float32
) -> Graph:
    """Graph of unit-valued, already deduplicated edges ``src -> dst`` (``A[dst, src] = 1``)."""
    from gblas_gnn.graph import Graph

    return Graph.from_edges(src, dst, n, dtype=dtype)
