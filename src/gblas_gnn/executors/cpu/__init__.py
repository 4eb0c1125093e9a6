"""The ``cpu`` executor: python-graphblas (SuiteSparse:GraphBLAS) and numba on one process.

The class is :class:`~.executor.CPUExecutor` (module :mod:`.executor`); this package
re-exports it. Modules: :mod:`.executor` (the executor), :mod:`._gbio` (moving arrays in and
out of GraphBLAS), :mod:`.semiring_lowering` (how each semiring runs here), :mod:`._spmm` (the
``plus_times`` products), :mod:`._minmax_kernels`, :mod:`._spmm_kernels`,
:mod:`._dense_kernels`, :mod:`._kernel_primitives` and :mod:`._random_kernels` (the numba
kernels), :mod:`._program_kernels` (the kernels generated from edge programs: every
attention layer, every composition) and :mod:`.programs` (their runtime; public, as the
``dist`` executor runs it on its blocks).
"""

from .executor import ArgExtremeContext, CPUExecutor

__all__ = ["CPUExecutor", "ArgExtremeContext"]
