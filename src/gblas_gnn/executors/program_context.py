"""What the executors' fused edge programs share: the context a forward keeps for its
backward (:class:`ProgramContext`) and the layout of the cotangents it returns
(:func:`finish_grads`).

The ``cpu`` executor runs a program with the kernels generated for it
(:mod:`gblas_gnn.executors.cpu.programs`), the ``dist`` executor runs those kernels on its
block in phases between collectives, and the ``cuda`` executor runs device kernels
generated from the same plan; all three keep a :class:`ProgramContext` and finish the
gradients with :func:`finish_grads`, so a context built by one runtime is recognised by its
executor's ``program_backward`` (a context of another kind means the reference lowering).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..ir.plan import Plan
    from .base import DenseArray

__all__ = ["ProgramBuffers", "ProgramContext", "finish_grads", "aggregate_output"]


class ProgramBuffers(Protocol):
    """What :func:`finish_grads` reads of a runtime's buffers (each runtime has its own
    class: host arrays on the cpu, device arrays on a GPU)."""

    #: the kernels' operand arrays, by slot of the program's operands
    operands: list[Any]
    #: the messages' original shape (None when the program has no messages)
    x_shape: tuple[int, ...] | None


@dataclass
class ProgramContext:
    """What the backward of a fused program needs: its plan, the runtime's buffers (the
    pattern and operands as the kernels read them), the raw aggregate or reduction ``Z``,
    the sink's other outputs (``extra``: winners of max/min, ``avg``'s weights) and, for
    ``mean``, the row counts."""

    plan: Plan
    buffers: ProgramBuffers
    Z: DenseArray | None = None           # the raw aggregate (n, heads, f) or reduction
    extra: dict[str, DenseArray] = field(default_factory=dict)
    counts: DenseArray | None = None      # mean: the row counts (n, 1, 1)
    spent: bool = False                   # a backward has run (it may reuse the caches)


def finish_grads(p: Plan, b: ProgramBuffers, grads: dict[int, DenseArray]
                 ) -> list[DenseArray | None]:
    """Cotangents by slot in the operands' own shapes (parameters summed over rows)."""
    out: list = [None] * len(p.structure.roles)
    for slot, (role, _) in enumerate(p.structure.roles):
        g = grads.get(slot)
        if g is None:
            continue
        if role == "param":
            g = g.sum(axis=0)
            out[slot] = g.reshape(()) if b.operands[slot].shape == (1,) and \
                p.structure.roles[slot][1] == () else g
        elif role == "x":
            out[slot] = g.reshape(b.x_shape)
        else:
            out[slot] = g
    return out


def aggregate_output(ctx: ProgramContext | None, Z, heads: int | None, counts=None):
    """An aggregation program's output and context from its sum ``Z`` (n, heads, f):
    :math:`Z_i / c_i` with the row counts ``counts`` (n, 1, 1) for ``mean``, else ``Z``;
    without a heads axis the (n, f) view. The context keeps ``Z`` (and the counts): the
    output may be ``Z`` itself, which the caller copies before a user can write into it."""
    out = Z if counts is None else Z / counts
    if ctx is not None:
        ctx.Z = Z
        if counts is not None:
            ctx.counts = counts
    return (out[:, 0] if heads is None else out), ctx
