"""The edge-tensor protocol: what every executor's sparse operand and result satisfies.

An edge tensor holds one value per stored entry of a pattern (row = target, column = source).
Three types satisfy the protocol: ``graphblas.Matrix`` (the ``cpu`` executor's), the ``cuda``
executor's device :class:`~gblas_gnn.gpu.EdgeTensor` and the ``dist`` executor's
:class:`~gblas_gnn.dist.Block` (this rank's block of a grid's matrix). ``gg.ops`` and the
virtual tensors take any of them; :meth:`Executor.to_graphblas` copies one to a host
``graphblas.Matrix``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["EdgeTensor", "EdgeTensorBase", "EdgeTensorOnPattern", "StructuralMask",
           "is_edge_tensor", "edge_dtype", "same_pattern"]


class EdgeTensorBase(ABC):
    """An edge tensor of an executor that does not store it as a ``graphblas.Matrix`` (the
    ``cuda`` executor's device edge tensors): one value per stored edge of a pattern, with
    the matrix's shape and value type. :meth:`Executor.to_graphblas` makes a host
    ``graphblas.Matrix`` of it."""

    @property
    @abstractmethod
    def nrows(self) -> int:
        """Rows (targets) of the pattern."""

    @property
    @abstractmethod
    def ncols(self) -> int:
        """Columns (sources) of the pattern."""

    @property
    @abstractmethod
    def nvals(self) -> int:
        """Stored edges."""

    @property
    @abstractmethod
    def dtype(self) -> np.dtype:
        """The values' numpy dtype."""


class EdgeTensorOnPattern(EdgeTensorBase):
    """An edge tensor whose shape is that of its ``pattern`` (an object with ``nrows``,
    ``ncols`` and ``nnz``: a host or device CSR pattern)."""

    __slots__ = ()
    pattern: Any

    @property
    def nrows(self) -> int:
        return self.pattern.nrows

    @property
    def ncols(self) -> int:
        return self.pattern.ncols

    @property
    def nvals(self) -> int:
        return self.pattern.nnz


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


def same_pattern(P, Q, ex) -> bool:
    """Whether two edge tensors store the same entries (the same object, or equal shapes and
    equal structure, read through executor ``ex``)."""
    if P is Q:
        return True
    if (int(P.nrows), int(P.ncols), int(P.nvals)) != (int(Q.nrows), int(Q.ncols),
                                                      int(Q.nvals)):
        return False
    ids_p, ids_q = ex.edge_ids(P), ex.edge_ids(Q)
    xp = ex.xp
    return all(bool(xp.array_equal(a, b)) for a, b in zip(ids_p, ids_q, strict=True))


class StructuralMask:
    """The pattern of edge tensor ``parent`` without its values: ``ops.structure(A)``, or
    ``A.S`` as graphblas spells it. ``mask * expr`` evaluates the lazy ``expr`` on A's
    stored entries and does not multiply by A's values (the expression does the masking)."""

    __slots__ = ("parent",)

    def __init__(self, parent):
        if not is_edge_tensor(parent):
            raise TypeError(f"structure() needs an edge tensor, got {type(parent).__name__}")
        self.parent = parent

    def __repr__(self) -> str:
        return f"StructuralMask({self.parent!r})"
