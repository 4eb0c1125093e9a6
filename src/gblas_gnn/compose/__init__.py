r"""Composing formulations: write the forward, get the backward.

A :class:`gblas_gnn.nn.Module` that defines only ``forward`` gets ``backward`` derived from
what its training-mode forward recorded, on every executor; :func:`vjp` and
:func:`value_and_grad` do the same for a plain function. See ``docs/composition.md``.

Modules: :mod:`.tape` (the tape and the scope of a forward), :mod:`.traced` (traced dense
arrays and their rules), :mod:`.expr` (lazy virtual and sparse tensors), :mod:`.program`
(an expression and its sink in canonical form), :mod:`.reference` (the edge rules written
once against the executor interface), :mod:`.semiring_grad` (aggregations and their
gradients), :mod:`.sinks`, :mod:`.modules` and :mod:`.functional`.
"""

from .functional import evaluate, value_and_grad, vjp
from .traced import Traced

__all__ = ["Traced", "vjp", "value_and_grad", "evaluate"]
