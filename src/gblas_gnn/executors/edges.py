"""The edge-tensor protocol: what every executor's sparse operand and result satisfies.

An edge tensor holds one value per stored entry of a pattern (row = target, column = source).
Three types satisfy the protocol: ``graphblas.Matrix`` (the ``cpu`` executor's), the ``cuda``
executor's device :class:`~gblas_gnn.gpu.EdgeTensor` and the ``dist`` executor's
:class:`~gblas_gnn.dist.Block` (this rank's block of a grid's matrix). ``gg.ops`` and the
virtual tensors take any of them; :meth:`Executor.to_graphblas` copies one to a host
``graphblas.Matrix``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from .base import EdgeTensorBase

__all__ = ["EdgeTensor", "is_edge_tensor", "edge_dtype", "same_pattern"]


@runtime_checkable
class EdgeTensor(Protocol):
    """One value per stored entry of an ``nrows × ncols`` pattern."""

    @property
    def nrows(self) -> int: ...

    @property
    def ncols(self) -> int: ...

    @property
    def nvals(self) -> int: ...


def is_edge_tensor(x) -> bool:
    """Whether ``x`` is an edge tensor of some executor."""
    import graphblas as gb

    return isinstance(x, (gb.Matrix, EdgeTensorBase))


def edge_dtype(E) -> np.dtype:
    """The numpy dtype of an edge tensor's values."""
    dtype = E.dtype
    return np.dtype(dtype.np_type if hasattr(dtype, "np_type") else dtype)


def same_pattern(P, Q) -> bool:
    """Whether two edge tensors store the same entries (the same object, or equal shapes and
    equal structure)."""
    if P is Q:
        return True
    if (int(P.nrows), int(P.ncols), int(P.nvals)) != (int(Q.nrows), int(Q.ncols),
                                                      int(Q.nvals)):
        return False
    from . import get_executor

    ex = get_executor(None)
    ids_p, ids_q = ex.edge_ids(P), ex.edge_ids(Q)
    xp = ex.xp
    return all(bool(xp.array_equal(a, b)) for a, b in zip(ids_p, ids_q, strict=True))
