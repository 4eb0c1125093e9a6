"""The ``primitives`` executor: the cpu executor's tiers (a) and (b) and nothing fused.

:class:`PrimitivesExecutor` is :class:`~gblas_gnn.executors.cpu.GraphBLASExecutor` (the
GraphBLAS and numba edge primitives, reductions, sampled product and max/min kernels, and the
process tier: the products ``gemm``, ``inner``, ``spmm``, ``spmm_t`` and the reductions over
vertices, all as the ``cpu`` executor runs them) under its own name. Every operation of the
default tier (c) of :mod:`gblas_gnn.executors.base` is therefore the base class's, written
with the primitives: softmax, the random masks, ``linear``, ``matmul_vjp``, ``spmm_affine``,
aggregation, the whole edge algebra and the edge programs of compositions (the reference
lowering: every attention layer). Running the layer and training tests on it (``python -m
pytest --executor primitives``) proves that an executor implementing only tiers (a) and (b)
runs every layer, and it is the reference the ``cpu`` executor's kernels (the generated ones
included) are held to.
"""

from __future__ import annotations

from .cpu import GraphBLASExecutor

__all__ = ["PrimitivesExecutor"]


class PrimitivesExecutor(GraphBLASExecutor):
    """:class:`~gblas_gnn.executors.cpu.GraphBLASExecutor` registered as ``primitives`` (see
    the module docstring)."""

    name = "primitives"
