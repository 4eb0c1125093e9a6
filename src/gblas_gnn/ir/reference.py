r"""The reference lowering of edge programs: forward and backward written once against the
executor interface, so that every executor runs every composition without new code.

An expression is evaluated **per head** as arrays of one value per stored edge (in the CSR
order of the pattern), with the executor's gathers, reductions and softmax; a channel axis is
contracted one channel at a time, so no array of more than one value per edge and head ever
exists (rule 1). The backward is reverse-mode over the same operations, the global rules of
the paper applied node by node:

===============================  =============================================================
forward                          backward (cotangent :math:`\bar E` of the output)
===============================  =============================================================
:math:`E = X_i` (``rep(X)``)     :math:`\bar X = \mathrm{rs}(\bar E)` — a row reduction
:math:`E = Y_j` (``rep(Y)ᵀ``)    :math:`\bar Y = \mathrm{cs}(\bar E)` — a column reduction
:math:`E = a` (a parameter)      :math:`\bar a = \sum \bar E` over every edge
:math:`E = e_{ji,c}` (features)  :math:`\bar e_{ji,c} = \bar E` at the edge itself
:math:`E = f(U)`, :math:`U ⊙ V`  elementwise, as in :mod:`.functions`
:math:`E = \sum_c U_{\cdot c}`   :math:`\bar U_{\cdot c} = \bar E` for every channel
:math:`\Psi = \mathrm{sm}(E)`    :math:`\bar E = \Psi \odot (\bar\Psi - \mathrm{rep}(t))`,
                                 :math:`t = \mathrm{sum}(\Psi \odot \bar\Psi)`
:math:`Z = S \oplus X`           ``aggregate_backward`` (an SDDMM and a transposed SpMM),
                                 or the semiring rules of :mod:`.semiring_grad`
===============================  =============================================================

When the softmax feeds the aggregation directly (or through factors that do not depend on
it, such as dropout scales) and the aggregation is homogeneous of degree one in its weights
(sum, mean, max, min, ``plus_times``, ``max_times``, ``min_times``),
:math:`t_i = \langle \bar Z_i, Z_i \rangle` is a dense row product and needs no pass over the
edges (and no communication on a grid).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .primitives import primitive
from .program import Program, child_index
from .sinks import sink_rule

__all__ = ["forward", "backward", "Context"]



@dataclass
class Context:
    """What the reference backward needs: the evaluator (with the kept edge values), the
    sink's per-head contexts and outputs."""

    ev: Any
    sink_ctx: list = field(default_factory=list)
    out: Any = None


class _Evaluator:
    """Evaluates the operations of a program on its pattern (see the module docstring)."""

    def __init__(self, ex, prog: Program):
        self.ex, self.prog = ex, prog
        self.A = prog.pattern
        self.s = prog.structure
        self.ops = self.s.ops
        self.xp = ex.xp
        self.dtype = np.dtype(self.s.dtype)
        self.base = len(self.ops[self.s.root].trail)
        self.memo: dict[tuple, Any] = {}
        self.frames: list[list] = []
        self.cols: dict[int, Any] = {}
        self.kept: dict[Any, Any] = {}
        self.nnz = int(self.A.nvals)

    # ------------------------------------------------------------------ operands
    def operand(self, slot: int):
        return self.prog.operands[slot].value

    def column_copy(self, slot: int):
        """The source-side rows of operand ``slot`` (fetched once per program)."""
        if slot not in self.cols:
            self.cols[slot] = self.ex.columns(self.A, self.operand(slot))
        return self.cols[slot]

    def edges(self, v):
        """``v`` (an edge array or a scalar) as an edge tensor on the pattern."""
        xp = self.xp
        if getattr(v, "ndim", 0) == 0:
            v = xp.full(self.nnz, v, dtype=self.dtype)
        return self.ex.edge_from_values(self.A, xp.ascontiguousarray(v, dtype=self.dtype))

    def full(self, v):
        """``v`` as an array over the edges (a scalar is broadcast)."""
        if getattr(v, "ndim", 0) == 0:
            return self.xp.full(self.nnz, v, dtype=self.dtype)
        return v

    # ------------------------------------------------------------------ forward values
    def value(self, i: int, idx: tuple):
        key = (i, idx)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        v = self._compute(i, idx)
        self.memo[key] = v
        if len(idx) > self.base and self.frames:
            self.frames[-1].append(key)
        return v

    def input(self, i: int, k: int, idx: tuple):
        """The value of input ``k`` of operation ``i`` at the (broadcast) index ``idx``."""
        op = self.ops[i]
        c = op.inputs[k]
        return self.value(c, child_index(idx, op.trail, self.ops[c].trail))

    def _compute(self, i: int, idx: tuple):
        op = self.ops[i]
        return primitive(op.kind).evaluate(self, i, op, idx)

    @contextmanager
    def channel_frame(self):
        """Values of one channel computed inside are dropped at the end (one array of a value
        per edge at a time)."""
        self.frames.append([])
        try:
            yield
        finally:
            for key in self.frames.pop():
                self.memo.pop(key, None)

    def cached(self, key, make):
        """``make()`` once per program run (a primitive's per-run arrays: dropout scales)."""
        if key not in self.kept:
            self.kept[key] = make()
        return self.kept[key]

    def grad_of(self, slot: int, grads: list):
        """Operand ``slot``'s cotangent in ``grads``, zeros the first time."""
        if grads[slot] is None:
            value = self.operand(slot)
            grads[slot] = self.xp.zeros(value.shape, value.dtype)
        return grads[slot]

    def root_values(self) -> list:
        """The root's edge values, one array per head."""
        heads = self.s.heads
        r = self.s.root
        if heads is None:
            return [self.full(self.value(r, ()))]
        return [self.full(self.value(r, (h,))) for h in range(heads)]

    # ------------------------------------------------------------------ backward
    def backward(self, seeds: dict, t_for: dict) -> list:
        """Cotangents of the operands for edge cotangents ``seeds`` ``{(op, idx): array}``;
        ``t_for`` maps ``(softmax op, idx)`` to its row term when the sink supplies it."""
        grads: list = [None] * len(self.prog.operands)
        adj = dict(seeds)
        self.reverse(sorted({i for i, _ in adj}, reverse=True), adj, grads, t_for, None)
        return grads

    def region(self, sum_op: int) -> list[int]:
        """The operations evaluated per channel under ``sum_op`` (deeper than it)."""
        depth = len(self.ops[sum_op].trail)
        seen, stack = set(), [self.ops[sum_op].inputs[0]]
        while stack:
            i = stack.pop()
            if i in seen or len(self.ops[i].trail) <= depth:
                continue
            seen.add(i)
            stack.extend(self.ops[i].inputs)
        return sorted(seen, reverse=True)

    def reverse(self, order: list[int], adj: dict, grads: list, t_for: dict, region):
        """Process the cotangents in ``adj`` in reverse topological order. In a channel
        region (``region`` not None) only its operations are processed here; the rest are
        left in ``adj`` for the enclosing pass."""
        pending = sorted({i for i, _ in adj if region is None or i in region}, reverse=True) \
            if region is not None else None
        todo = order if region is None else pending
        ops = self.ops
        for i in (range(max(todo), -1, -1) if region is None and todo else (todo or [])):
            if region is not None and i not in region:
                continue
            keys = [k for k in adj if k[0] == i]
            for key in keys:
                g = adj.pop(key)
                self._rule(i, key[1], g, adj, grads, t_for)
        del ops

    @staticmethod
    def accumulate(adj: dict, key: tuple, g) -> None:
        """Add the cotangent ``g`` to ``adj[key]``."""
        prev = adj.get(key)
        adj[key] = g if prev is None else prev + g

    def push(self, adj: dict, i: int, k: int, idx: tuple, g):
        """Add ``g`` to the cotangent of input ``k`` of operation ``i`` (un-broadcast index)."""
        op = self.ops[i]
        c = op.inputs[k]
        self.accumulate(adj, (c, child_index(idx, op.trail, self.ops[c].trail)), g)

    def _rule(self, i: int, idx: tuple, g, adj: dict, grads: list, t_for: dict):
        op = self.ops[i]
        primitive(op.kind).vjp(self, i, op, idx, g, adj, grads, t_for)


# ---------------------------------------------------------------------- programs
def forward(ex, prog: Program, keep: bool):
    """Run ``prog`` on ``ex``: the sink's output and, with ``keep``, its context."""
    ev = _Evaluator(ex, prog)
    ctx = Context(ev)
    ctx.out = sink_rule(prog.structure.sink).forward(ev, ctx, keep)
    return ctx.out, (ctx if keep else None)


def backward(ex, ctx: Context, dout) -> list:
    """Cotangents of every operand of the program (None where there is none) for the
    cotangent ``dout`` of its output."""
    return sink_rule(ctx.ev.prog.structure.sink).backward(ctx.ev, ctx, dout)
