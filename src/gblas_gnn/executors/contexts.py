"""Forward contexts of aggregation: what :meth:`Executor.aggregate
<gblas_gnn.executors.Executor.aggregate>` keeps for its backward, shared by the executors.

:class:`ArgExtremeContext` is the host form of ``max``/``min`` (CSR buffers and the winners
as numpy arrays) that the ``cpu`` executor builds and the ``dist`` executor restricts to the
winners its rank owns. The ``cuda``
executor keeps its own, on the device (:class:`gblas_gnn.gpu.executor.ArgExtremeContext`).
The fused edge programs' context is
:class:`~gblas_gnn.executors.program_context.ProgramContext`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:
    import graphblas as gb

__all__ = ["ArgExtremeContext"]


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
