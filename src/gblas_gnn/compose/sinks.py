"""Where a sparse expression becomes dense: aggregations, reductions and materialisation.

Each function builds the expression's :class:`~.program.Program`, runs it with the
executor's :meth:`~gblas_gnn.executors.Executor.program_forward` and, in training mode,
records one tape node whose vector-Jacobian product is the executor's
:meth:`~gblas_gnn.executors.Executor.program_backward`: the cotangents of every traced array
the expression read (gathered rows and columns, parameters, the messages) come back from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..executors import get_executor
from ..ir.sinks import sink_rule
from .lower import build
from .tape import Summed, current
from .traced import Traced, record, value_of

if TYPE_CHECKING:
    from .expr import Expr

__all__ = ["run", "materialize"]


def run(root: Expr, sink: tuple, x=None, edges=None):
    """The dense result of ``sink`` over the sparse expression ``root`` (``x``: the messages
    of an aggregation, ``edges``: edge features appended to them); a traced array inside a
    composed forward."""
    s = current()
    ex = s.executor if s is not None else get_executor(None)
    prog = build(root, sink, x, edges)
    traced = [o.traced for o in prog.operands]
    keep = s is not None and s.tape is not None and any(t is not None for t in traced)
    out, ctx = ex.program_forward(prog, keep)
    if s is None:
        return out
    s.widths.append(int(np.prod(np.shape(value_of(x))[1:])) if x is not None else
                    (prog.heads or 1))
    live = _live_rows(ex, prog, out)
    if not keep:
        return Traced(out, None, True, live)

    s.held.append(out)                  # the context may keep it (Scope.released)

    def vjp(g, into):
        grads = ex.program_backward(ctx, g, into)
        return _own(grads, [a is not None and a is o for a, o in zip(grads, into, strict=True)],
                    g, ex.xp)

    # its cotangents are arrays of its own (_own), or the sums it was offered, added into
    # (an executor's uniform aggregation): the tape may sum into them in place
    return record(out, traced, vjp, True, fresh=True, adds=True, live=live)


def _live_rows(ex, prog, out) -> slice | None:
    """The rows of a row-indexed sink's ``out`` from the first to the last with an entry
    where they are fewer than all (:attr:`.traced.Traced.live`), else None."""
    if not sink_rule(prog.structure.sink).by_target_row:
        return None
    live = ex.entry_rows(prog.pattern)
    n = np.shape(out)[0]
    if live is None or live.stop > n or (live.start == 0 and live.stop == n):
        return None
    return live


def _own(grads: list, summed: list[bool], g, xp) -> list:
    """``grads``, each an array no other holds: one added into the sum it was offered
    (``summed``) as :class:`~.tape.Summed`; one that may share memory with the cotangent
    ``g`` or with an earlier one of ``grads`` is copied (an executor's backward allocates
    its cotangents, so this copies nothing unless one is handed back twice)."""
    kept: list = [g]
    out = []
    for a, added in zip(grads, summed, strict=True):
        if added:
            out.append(Summed(a))
            continue
        if a is not None and any(xp.may_share_memory(a, k) for k in kept):
            a = a.copy()
        if a is not None:
            kept.append(a)
        out.append(a)
    return out


def materialize(e: Expr, executor=None):
    """The values of a sparse expression as the edge tensor of ``executor`` (the composed
    forward's inside one; default: the default executor), a tuple of them, one per head, for
    an expression with a heads axis. Not differentiable."""
    s = current()
    ex = s.executor if s is not None else get_executor(executor)
    prog = build(e, ("values",))
    out, _ = ex.program_forward(prog, False)
    return out[0] if prog.heads is None else tuple(out)
