"""Forward contexts of aggregation: what :meth:`Executor.aggregate
<gblas_gnn.executors.Executor.aggregate>` keeps for its backward, shared by the executors.

:class:`AggregateContext` and :class:`MeanContext` are the base class's (``sum`` and
``mean``: every executor's default); :class:`ArgExtremeContext` is the host form of
``max``/``min`` (CSR buffers and the winners as numpy arrays) that the ``cpu`` executor builds
and the ``dist`` executor restricts to the winners its rank owns. The ``cuda`` executor keeps
its own, on the device (:class:`gblas_gnn.gpu.executor.ArgExtremeContext`).
The fused edge programs' context is
:class:`~gblas_gnn.executors.program_runtime.ProgramContext`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np

if TYPE_CHECKING:
    import graphblas as gb

    from .base import DenseArray
    from .edges import EdgeTensor

__all__ = ["AggregateContext", "MeanContext", "ArgExtremeContext"]


@dataclass
class AggregateContext:
    """``Z = S ⊕ H`` with ``aggr = "sum"``: backward needs ``S`` and ``H``."""

    S: EdgeTensor
    H: DenseArray

    aggr: ClassVar[str] = "sum"


@dataclass
class MeanContext(AggregateContext):
    """``"mean"``: also the row counts (an empty row counts 1; its output is 0 anyway)."""

    counts: DenseArray | None = None

    aggr: ClassVar[str] = "mean"


@dataclass
class ArgExtremeContext:
    """``max``/``min`` aggregation on the host: the CSR buffers of ``S`` and the winner of
    each (row, feature) (its CSR position, −1 for an empty row)."""

    aggr: Literal["max", "min"]
    S: gb.Matrix
    H: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    arg: np.ndarray
