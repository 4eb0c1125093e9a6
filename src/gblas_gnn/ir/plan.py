r"""How an edge program lowers to passes over the pattern: the analysis every kernel generator
shares (the ``cpu`` executor's numba kernels, the ``cuda`` executor's, and the grid's phases).

**Forward: one row pass.** For each target row, every softmax of the program in topological
order (its input at every edge of the row, the row maximum, the exponentials, the row sum,
the normalisation: a *stage*), then the root at every edge and the sink (the aggregation of
the row, its reduction, or the values). Softmax outputs are the only per-edge values kept
(one per edge and head); everything else is recomputed where it is needed, so no array of
more than one value per edge and head exists.

**Backward.** Two strategies, chosen by :func:`plan`:

* ``"column"`` — the common attention: one softmax feeding a ``sum`` / ``mean`` aggregation
  directly or through factors that do not depend on it (dropout scales, weights). Then the
  softmax term is :math:`t_i = \langle \bar Z_i, Z_i \rangle`, a dense row product, and one
  pass over the columns computes every edge's cotangent
  :math:`\bar e_{ij} = \Psi_{ij}(F_{ij} \langle \bar Z_i, X_j\rangle - t_i)`, the messages'
  gradient :math:`\bar X_j = \sum_i W_{ij} \bar Z_i` and the gradients of everything the
  scores read by source; a light row pass (recomputing the scores from what they read by
  target) gives the rest. It generalises the hand-written GAT and AGNN backward.
* ``"row"`` — anything else (several softmaxes, max/min and semiring aggregations, a
  softmax read non-linearly, reductions): a row pass computes the root's cotangent at every
  edge from the sink, walks the stages backwards (each softmax backward needs its row's
  :math:`t_i = \sum_j \Psi_{ij} \bar\Psi_{ij}`), and accumulates what is read by target and
  the parameters; a column pass then gives what is read by source and the messages' gradient
  from the cotangents the row pass stored (one per edge and head per stage).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from ..semirings.aggregations import algebra_of
from ..semirings.algebra import Algebra
from .program import Structure, depends_on
from .sinks import SinkRule, edge_messages, sink_rule

__all__ = ["Plan", "plan", "fusable", "appends_edge_features", "leaf_kinds", "head_index",
           "BY_ROW"]
#: the cotangents a pass over rows accumulates: what is read by target (a row's own), the
#: parameters (a partial per row) and the edges' features (each edge's own)
BY_ROW = frozenset({"row", "param", "eattr"})


@dataclass(frozen=True)
class Plan:
    """The lowering of one structure (see the module docstring)."""

    structure: Structure
    #: softmax operations in topological order (the stages)
    softmaxes: tuple[int, ...]
    #: heads of the root (1 without a heads axis)
    heads: int
    #: ``"column"`` or ``"row"``
    strategy: str
    #: for ``"column"``: the softmax and the factor operations of the root
    softmax: int | None = None
    factor: int | None = None
    factor_op: str = "mul"
    #: slots read by target / by source, parameters, edge features whose cotangent is
    #: derived (features read as data are :attr:`Structure.constants`), every edge
    #: feature read
    rows: tuple[int, ...] = field(default_factory=tuple)
    cols: tuple[int, ...] = field(default_factory=tuple)
    params: tuple[int, ...] = field(default_factory=tuple)
    eattrs: tuple[int, ...] = field(default_factory=tuple)
    features: tuple[int, ...] = field(default_factory=tuple)

    @property
    def sink(self) -> tuple:
        return self.structure.sink

    @property
    def aggr(self) -> str | None:
        return self.sink[1] if self.sink_rule.aggregates else None

    @cached_property
    def sink_rule(self) -> SinkRule:
        """The rule of the program's sink (:mod:`gblas_gnn.ir.sinks`)."""
        return sink_rule(self.sink)

    @cached_property
    def algebra(self) -> Algebra | None:
        """What the aggregation's ⊕ and ⊗ are (None: the sink aggregates nothing); the
        generators choose their code by it (:class:`gblas_gnn.semirings.algebra.Algebra`)."""
        return None if self.aggr is None else algebra_of(self.aggr)

    @property
    def counted_mean(self) -> bool:
        """An aggregation whose readout divides by the row's count (``mean``)."""
        return self.sink_rule.gathers_messages and self.algebra.divide == "count"

    @property
    def weighted_mean(self) -> bool:
        """An aggregation whose readout divides by the sum of the weights (``avg``): the
        kernels keep each row's weight sum (``DEN``) and flag a negative weight (``NEG``)."""
        return self.sink_rule.gathers_messages and self.algebra.weighted_mean

    @property
    def extreme(self) -> bool:
        """An aggregation whose ⊕ is max or min: each (row, head, feature) has one winning
        edge, which its backward routes the cotangent to."""
        return self.sink_rule.gathers_messages and self.algebra.extreme

    def heads_of(self, op: int) -> int:
        trail = self.structure.ops[op].trail
        return trail[0] if trail else 1


def fusable(structure: Structure) -> bool:
    """Whether the generated kernels run this structure (else the reference lowering): its
    sink's rule says (:meth:`gblas_gnn.ir.sinks.SinkRule.fusable`); an aggregation that
    appends edge features (:func:`~gblas_gnn.ir.sinks.edge_messages`) is fused with the
    column strategy and features read as data (their cotangent is the reference's)."""
    if not sink_rule(structure.sink).fusable(structure.sink):
        return False
    slot = edge_messages(structure.sink)
    return slot is None or (slot in structure.constants and plan(structure).strategy == "column")


def appends_edge_features(structure: Structure) -> bool:
    """Whether the program's aggregation appends edge features to its messages (only the
    ``cpu`` executor's kernels run it; the others take the reference lowering)."""
    return edge_messages(structure.sink) is not None


def plan(structure: Structure) -> Plan:
    """The lowering of ``structure`` (:func:`fusable` must hold)."""
    ops = structure.ops
    softmaxes = tuple(i for i, op in enumerate(ops) if op.kind == "softmax")
    heads = structure.heads or 1
    slots = {role: tuple(sorted({op.args[0] for op in ops if op.kind == role}))
             for role in ("row", "col", "param", "eattr")}
    sink = structure.sink
    appended = edge_messages(sink)
    common = dict(rows=slots["row"], cols=slots["col"], params=slots["param"],
                  eattrs=tuple(k for k in slots["eattr"] if k not in structure.constants),
                  features=tuple(sorted({*slots["eattr"], *(() if appended is None
                                                            else (appended,))})))
    if sink_rule(sink).gathers_messages and algebra_of(sink[1]).linear and len(softmaxes) == 1:
        found = _linear_softmax(structure, softmaxes[0])
        if found is not None:
            factor, factor_op = found
            return Plan(structure, softmaxes, heads, "column", softmaxes[0], factor,
                        factor_op, **common)
    return Plan(structure, softmaxes, heads, "row", **common)


def _linear_softmax(structure: Structure, sm: int):
    """``(factor, op)`` when the root is the softmax ``sm`` (factor None) or ``sm ⊙ F`` /
    ``sm ⊘ F`` with ``F`` independent of it; None otherwise."""
    ops, r = structure.ops, structure.root
    if r == sm:
        return None, "mul"
    op = ops[r]
    if op.kind != "zip" or op.args[0] not in ("mul", "div"):
        return None
    a, b = op.inputs
    if a == sm and not depends_on(ops, b, sm) and ops[a].trail == op.trail:
        return b, op.args[0]
    if op.args[0] == "mul" and b == sm and not depends_on(ops, a, sm) \
            and ops[b].trail == op.trail:
        return a, "mul"
    return None


def leaf_kinds(p: Plan, start: int) -> set[str]:
    """The kinds of leaves (``row``, ``col``, ``param``, ``eattr``, ``softmax``) the
    expression at operation ``start`` reads, softmax outputs counted as leaves (cut) and
    edge features read as data not: which cotangents its reverse mode produces."""
    ops = p.structure.ops
    kinds, stack, seen = set(), [start], set()
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        if ops[i].kind == "softmax":
            kinds.add("softmax")
            continue
        if ops[i].kind in ("row", "col", "param") or \
                (ops[i].kind == "eattr" and ops[i].args[0] in p.eattrs):
            kinds.add(ops[i].kind)
        stack.extend(ops[i].inputs)
    return kinds


def head_index(p: Plan, op: int, var: str) -> tuple:
    """The index of operation ``op`` at head ``var`` (empty without a heads axis)."""
    return (var,) if p.structure.ops[op].trail else ()
