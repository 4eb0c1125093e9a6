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
    """Graph of unit-valued, deduplicated edges ``src -> dst`` (``A[dst, src] = 1``) given in
    CSR order (by target, then source): the graph holds their int32 CSR pattern, half the
    bytes of GraphBLAS's int64 indices, and builds ``A`` at its first access (a layer that
    adds self loops never asks for it). Edges in any other order go through
    :meth:`Graph.from_edges`."""
    from gblas_gnn.graph import Graph

    src, dst = np.asarray(src), np.asarray(dst)
    if not _csr_ordered(src, dst, n):
        return Graph.from_edges(src, dst, n, dtype=dtype)
    return Graph._of_csr_edges(src, dst, n, dtype)


def _csr_ordered(src: np.ndarray, dst: np.ndarray, n: int) -> bool:
    """Whether the edges are integers in ``[0, n)``, sorted by target and then by source,
    each pair once."""
    if src.shape != dst.shape or src.ndim != 1:
        return False
    if not (np.issubdtype(src.dtype, np.integer) and np.issubdtype(dst.dtype, np.integer)):
        return False
    if src.size == 0:
        return True
    if min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n:
        return False
    from gblas_gnn.graph import in_csr_order

    return in_csr_order(src, dst)
