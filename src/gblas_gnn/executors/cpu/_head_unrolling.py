r"""The forward row pass of a multi-head plan with its heads written out, edge by edge.

:class:`~gblas_gnn.compose.kernel_source.ProgramSource` writes each softmax phase as a loop
over the heads around a loop over the row's edges: with ``H`` heads the row is walked ``H``
times per phase, and an edge's heads, which sit side by side in ``S[p, :]`` and in the rows
``R[i, :]``, ``C[j, :]``, ``X[j, :, :]``, are read ``H`` strides apart. On the cpu the
generator knows the number of heads (it is part of the module's key,
:func:`head_counts`), so it writes the heads out instead: one walk over the row per phase,
every head of an edge from the lines the edge already holds, each head's running maximum,
sum and reciprocal in a scalar of its own:

.. math::

    m_h = \max_p s_{p,h},\qquad \Sigma_h = \sum_p e^{s_{p,h} - m_h},\qquad
    \psi_{p,h} = e^{s_{p,h} - m_h} / \Sigma_h,\qquad
    Z_{i,h} = \sum_p w_{p,h} X_{j,h}.

Measured at case M (GAT 4 heads × 8, two threads, the row pass alone): the generated
kernel 66–69 → 56–59 ms; a hand-written trial of the scheme 54 → 43 ms (the scores phase
29 → 16 ms, exponentials and normalisation 16 → 10 ms, the aggregation 25 → 17 ms).
The phases stay apart (a grid completes a row between them) and compute the same numbers
in the same order per head as the loop form, so results are bitwise equal.
"""

from __future__ import annotations

from ...compose.plan import Plan, head_index
from ...compose.scalar import Block, Scope

__all__ = ["UNROLLED_HEADS", "head_counts", "HeadUnrolling"]

#: the most heads a forward writes out (more: the loop over heads of the skeleton)
UNROLLED_HEADS = 8
#: the aggregations whose sink is written out per head (a sum of weighted messages)
_LINEAR = ("sum", "mean", "plus_times")


def _unrolled(heads: int) -> int:
    """``heads`` if a forward writes them out, else 0."""
    return heads if 1 < heads <= UNROLLED_HEADS else 0


def head_counts(p: Plan) -> tuple[int, ...]:
    """The head counts the generated source of ``p`` depends on (the root's and each
    softmax's, where written out): part of the module's cache key, so that plans with
    different head counts never share a module."""
    counts = (_unrolled(p.heads), *(_unrolled(p.heads_of(k)) for k in p.softmaxes))
    return counts if any(counts) else ()


class HeadUnrolling:
    """Overrides of the forward's pieces of a
    :class:`~gblas_gnn.compose.kernel_source.ProgramSource` (mixed in before it) that write
    a multi-head stage's heads out; a single-head stage keeps the skeleton's code."""

    p: Plan

    def _stage_heads(self, k: int) -> int:
        return _unrolled(self.p.heads_of(k))

    @staticmethod
    def _each_head(block: Block, n: int, *lines: str) -> None:
        """``lines`` for heads ``0 … n-1`` in turn (``{h}``: the head)."""
        for h in range(n):
            for line in lines:
                block.emit(line.format(h=h))

    def _scores(self, row: Block, k: int) -> None:
        n = self._stage_heads(k)
        if not n:
            return super()._scores(row, k)
        s = f"S{k}"
        self._each_head(row, n, f"m{{h}} = {self.neg_inf}")
        e = self._edges(row)
        if k == self.p.softmaxes[0]:
            self._prefetch_rows(e, "col", "p")
        code, scope = self.code(), Scope()
        for h in range(n):
            v = code.value(e, scope, self._stage_input(k), head_index(self.p, k, str(h)))
            e.emit(f"{self.at(s, str(h))} = {v}")
            e.emit(f"if {v} > m{h}:")
            e.nested().emit(f"m{h} = {v}")
        self._each_head(row, n, f"RM{k}[{{h}}, i] = m{{h}}")

    def _exp(self, row: Block, k: int) -> None:
        n = self._stage_heads(k)
        if not n:
            return super()._exp(row, k)
        self._each_head(row, n, f"m{{h}} = RM{k}[{{h}}, i]", f"t{{h}} = {self.zero}")
        row.emit(self.own_edges)
        at = self.at(f"S{k}", "{h}")
        self._each_head(row.nested(), n, f"v = {self.exp}({at} - m{{h}})", f"{at} = v",
                        "t{h} += v")
        self._each_head(row, n, f"RS{k}[{{h}}, i] = t{{h}}")

    def _norm(self, row: Block, k: int) -> None:
        n = self._stage_heads(k)
        if not n:
            return super()._norm(row, k)
        row.emit("if hi > lo:")
        body = row.nested()
        self._each_head(body, n, f"inv{{h}} = {self.one} / RS{k}[{{h}}, i]")
        body.emit(self.own_edges)
        self._each_head(body.nested(), n, f"{self.at(f'S{k}', '{h}')} *= inv{{h}}")

    def _aggregate_heads(self, row: Block) -> bool:
        """The sink of a multi-head sum of weighted messages, written out per head, edge by
        edge; False (nothing written) for any other sink."""
        n = _unrolled(self.p.heads)
        if not n or self.sink[0] != "aggregate" or self.aggr not in _LINEAR:
            return False
        row.emit("zi = Z[i]")
        row.emit(f"for hh in range({n}):")
        z = row.nested()
        z.emit("for c in range(zi.shape[1]):")
        z.nested().emit(f"zi[hh, c] = {self.zero}")
        e = self._edges(row)
        e.emit("xj = X[j]")
        code, scope, r = self.code(), Scope(), self.s.root
        for h in range(n):
            w = code.value(e, scope, r, head_index(self.p, r, str(h)))
            e.emit(f"_axpy(zi[{h}], {w}, xj[{h}])")
        return True
