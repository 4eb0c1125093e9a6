"""The ``primitives`` executor: the cpu executor's layer contract and nothing fused.

It keeps the ``cpu`` executor's core and process-tier operations (GraphBLAS products,
reductions, the edge primitives and the max/min kernels: tiers (a) and (b) of
:mod:`gblas_gnn.executors.base`) and takes everything else from the base class: softmax,
the random masks, the whole edge algebra and the edge programs of compositions (the
reference lowering: every attention layer) are the defaults written with the primitives.
Running the layer and training tests on it (``python -m pytest --executor primitives``)
proves that an executor implementing only those runs every layer, and it is the reference
the generated kernels are held to.
"""

from __future__ import annotations

from .base import Executor
from .cpu import CPUExecutor

__all__ = ["PrimitivesExecutor"]

#: what the base class defines with the primitives (the cpu executor overrides these)
DEFAULTED = ("softmax", "softmax_backward", "dropout_edges", "keep_mask", "pattern", "apply",
             "leaky_relu_backward", "ewise", "row_scale", "col_scale", "scale_edges", "outer_add",
             "row_counts", "inner", "generic_lowering", "program_forward", "program_backward")


class PrimitivesExecutor(CPUExecutor):
    """The ``cpu`` executor with every operation of :data:`DEFAULTED` taken from the base
    class (see the module docstring)."""

    name = "primitives"


for _name in DEFAULTED:
    setattr(PrimitivesExecutor, _name, getattr(Executor, _name))
del _name
