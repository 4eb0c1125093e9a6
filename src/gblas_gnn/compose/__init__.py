r"""Composing formulations: write the forward, get the backward.

A :class:`gblas_gnn.nn.Module` that defines only ``forward`` gets ``backward`` derived from
what its training-mode forward recorded, on every executor; :func:`vjp` and
:func:`value_and_grad` do the same for a plain function. See ``docs/composition.md``.

Modules: :mod:`.tape` (the tape and the scope of a forward), :mod:`.traced` (traced dense
arrays and their rules), :mod:`.rows` (row norms), :mod:`.expr` (lazy virtual and sparse
tensors), :mod:`.lower` (an expression and its sink to an edge program of
:mod:`gblas_gnn.ir`), :mod:`.sinks` and :mod:`.functional`. Calling a module inside and
outside a composition is the layers' part: :mod:`gblas_gnn.nn.composed`.
"""

from .functional import evaluate, value_and_grad, vjp
from .traced import Traced

__all__ = ["Traced", "vjp", "value_and_grad", "evaluate"]
