"""The ``cpu`` executor: python-graphblas (SuiteSparse:GraphBLAS) and numba on one process.

Two classes, re-exported here: :class:`~.core.GraphBLASExecutor` (module :mod:`.core`) writes
tiers (a) and (b) of the executor interface and inherits the default tier, and
:class:`~.executor.CPUExecutor` (module :mod:`.executor`, the ``cpu`` executor) derives from it
and adds fused and fast kernels for the default tier; the ``primitives`` executor
(:mod:`gblas_gnn.executors.primitives`) is :class:`~.core.GraphBLASExecutor` under its own
name. Modules: :mod:`.core` and :mod:`.executor` (the two classes), :mod:`._gbio` (moving
arrays in and out of GraphBLAS), :mod:`.semiring_lowering` (how each semiring runs here),
:mod:`._spmm` (the ``plus_times`` products), :mod:`._chunked_gemm` (the dense products),
:mod:`._minmax_kernels`, :mod:`._spmm_kernels`, :mod:`._dense_kernels`,
:mod:`._kernel_primitives` and :mod:`._random_kernels` (the numba kernels),
:mod:`._program_kernels` (the kernels generated from edge programs: every attention layer,
every composition) and :mod:`.programs` (their runtime; public, as the ``dist`` executor runs
it on its blocks).
"""

from ..contexts import ArgExtremeContext
from .core import GraphBLASExecutor
from .executor import CPUExecutor

__all__ = ["CPUExecutor", "GraphBLASExecutor", "ArgExtremeContext"]
