r"""What consumes an edge program's root, each kind one registered object with its rules.

A program's sink (:attr:`gblas_gnn.ir.program.Structure.sink`, ``(kind, argument)``) names a
:class:`SinkRule` in :data:`SINKS`. The rule carries, once:

* its **shape rule** (:meth:`SinkRule.check_root`: the trailing shape of a root it takes);
* whether the **generated kernels** run it (:meth:`SinkRule.fusable`; the plan reads it);
* its **reference evaluation** on the root's edge arrays (:meth:`SinkRule.forward`) and its
  **VJP** (:meth:`SinkRule.backward`: the root's edge cotangents handed to the operations'
  VJPs, :mod:`.primitives`), read by :mod:`.reference` on every executor.

=============  ================================================  ==============================
kind           output                                            backward
=============  ================================================  ==============================
``values``     the root's values, an edge tensor per head         none (a materialised value)
``rows``       :math:`\oplus_j E_{ij}` per row (sum, max, min)    gathered by row (max/min: to
                                                                 the winning edge)
``cols``       :math:`\oplus_i E_{ij}` per column                 gathered by column
``aggregate``  :math:`Z = S \oplus X` (a named aggregation or a   :mod:`.semiring_grad`; the
               semiring)                                         softmax term as a row product
                                                                 when homogeneous
``spmm_t``     :math:`Z = S^T \oplus X`                           the same, transposed
``messages``   :math:`\oplus_j M_{ij}[h, c]` of messages made     channel by channel, as rows
               at the edge (``(heads, channels)`` per edge)
=============  ================================================  ==============================
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from ..semirings.aggregations import algebra_of
from .program import child_index, depends_on
from .registry import Registry
from .semiring_grad import semiring_backward, semiring_forward, winners

__all__ = ["SinkRule", "SINKS", "sink_rule", "register_sink", "edge_messages"]


class SinkRule(ABC):
    """One sink kind (see the module docstring); ``sink`` arguments are the whole
    ``(kind, argument)`` tuple."""

    name: ClassVar[str] = ""
    #: trailing axes of the root it takes: at most one (a head axis) unless it makes messages
    root_axes: ClassVar[tuple[int, ...]] = (0, 1)
    #: the messages ``X`` are gathered by source (``Z = S ⊕ X``): their rows come by column
    gathers_messages: ClassVar[bool] = False
    #: the messages ``X`` are scattered to sources (``Z = Sᵀ ⊕ X``): their cotangent is by row
    transposed: ClassVar[bool] = False
    #: its backward reads outputs of the row pass beyond the first (winners, weight sums)
    keeps_outputs: ClassVar[bool] = False
    #: its argument is an aggregation (a named one or a semiring) of the root and messages
    aggregates: ClassVar[bool] = False
    #: the root's cotangent is one value per edge and head (not per channel: messages)
    edge_cotangent: ClassVar[bool] = True
    #: it has a backward (a materialised value has none)
    has_backward: ClassVar[bool] = True
    #: the output's cotangent at a row is ``(heads, channels)``, read by target (an
    #: aggregation's or the messages'), not one number a head
    channel_cotangent_by_row: ClassVar[bool] = False
    #: its output's row ``i`` reads row ``i``'s stored entries alone: 0 on an empty row, whose
    #: cotangent no backward reads (:attr:`gblas_gnn.compose.traced.Traced.live`)
    by_target_row: ClassVar[bool] = False

    def check_root(self, root) -> None:
        """``ValueError`` for a root of a shape this sink cannot take."""
        if len(root.trail) not in self.root_axes:
            raise ValueError(f"an expression of shape {root.shape} has a channel axis: "
                             "contract it first (E @ a or E.sum(-1))")

    def fusable(self, sink: tuple) -> bool:
        """Whether the generated kernels run this sink (else the reference lowering)."""
        return True

    @abstractmethod
    def forward(self, ev, ctx, keep: bool) -> Any:
        """The output from the evaluator ``ev``'s root values (``ctx``: the reference
        context, which keeps what :meth:`backward` needs)."""

    def backward(self, ev, ctx, dout) -> list:
        """The operands' cotangents for the output's cotangent ``dout``."""
        raise ValueError(f"the sink {ev.prog.structure.sink!r} has no backward")


#: every sink kind, by name
SINKS: Registry[SinkRule] = Registry("sink")


def register_sink(rule: SinkRule) -> SinkRule:
    """Add ``rule`` under its name (``ValueError`` when the name is taken)."""
    return SINKS.add(rule)


def sink_rule(sink: tuple) -> SinkRule:
    """The rule of ``sink`` (``ValueError`` for an unknown kind)."""
    return SINKS.find(sink[0], sink)


def _stacked(xp, parts: list, heads: int | None):
    return parts[0] if heads is None else xp.stack(parts, axis=1)


def _heads_of(X, heads):
    """The per-head slices of a dense ``(n, heads, f)`` array (``(n, f)`` without heads)."""
    if heads is None:
        return [X]
    return [X[:, h] for h in range(heads)]


def _head_indices(heads) -> list[tuple]:
    return [()] if heads is None else [(h,) for h in range(heads)]


def _x_operand(prog):
    for o in prog.operands:
        if o.role == "x":
            return o.value
    raise ValueError("an aggregation program needs its messages")


def _reduction_cotangent(ev, by_row: bool, op: str, idx: tuple, d):
    """Edge cotangent of a row or column reduction of the root: the reduction's cotangent
    gathered to every edge (sum), or to the winning edge (max/min; ties to the first stored
    entry, the lowest source id, as every aggregation)."""
    ex = ev.ex
    gather = ex.gather_rows if by_row else ex.gather_cols
    g = gather(ev.A, ev.xp.ascontiguousarray(d))
    algebra = algebra_of(op)
    if not algebra.extreme:
        return g
    values = ev.full(ev.value(ev.s.root, idx))
    win = winners(ex, ev.A, values, algebra.maximises, rows=by_row)
    return ev.xp.where(win, g, ev.dtype.type(0))


class Values(SinkRule):
    """The root's values as edge tensors, one per head (a materialised expression)."""

    name = "values"
    has_backward = False

    def forward(self, ev, ctx, keep):
        return [ev.edges(v) for v in ev.root_values()]


class Reduction(SinkRule):
    """``⊕`` of the root over each row's (``rows``) or column's (``cols``) stored entries;
    the kernels run every row reduction and the column sum."""

    def __init__(self, name: str, by_row: bool):
        self.name, self.by_row = name, by_row
        self.by_target_row = by_row

    def fusable(self, sink):
        return self.by_row or sink[1] == "sum"

    def forward(self, ev, ctx, keep):
        ex, heads = ev.ex, ev.prog.heads
        reduce = ex.row_reduce if self.by_row else ex.col_reduce
        parts = [reduce(ev.edges(v), ev.prog.structure.sink[1]) for v in ev.root_values()]
        return _stacked(ev.xp, parts, heads)

    def backward(self, ev, ctx, dout):
        heads, r, op = ev.prog.heads, ev.s.root, ev.prog.structure.sink[1]
        douts = [dout] if heads is None else [dout[:, h] for h in range(heads)]
        seeds = {(r, idx): _reduction_cotangent(ev, self.by_row, op, idx, d)
                 for idx, d in zip(_head_indices(heads), douts, strict=True)}
        return ev.backward(seeds, {})


class Aggregation(SinkRule):
    """``Z = S ⊕ X`` (``aggregate``) or ``Z = Sᵀ ⊕ X`` (``spmm_t``) of the root's values as
    ``S`` and the messages ``X``, per head. The kernels run what the aggregation's algebra
    says they can (:class:`gblas_gnn.semirings.algebra.Algebra`)."""

    aggregates = True

    def __init__(self, name: str, transposed: bool):
        self.name, self.transposed = name, transposed
        self.gathers_messages = self.keeps_outputs = self.channel_cotangent_by_row = \
            self.by_target_row = not transposed

    def fusable(self, sink):
        algebra = algebra_of(sink[1])
        if not self.transposed:
            return algebra.fused
        return algebra.linear and algebra.divide is None

    def forward(self, ev, ctx, keep):
        ex, xp, prog = ev.ex, ev.xp, ev.prog
        slot = edge_messages(prog.structure.sink)
        parts = []
        for S_vals, Xh in zip(ev.root_values(), _heads_of(_x_operand(prog), prog.heads),
                              strict=True):
            Z, c = semiring_forward(ex, self.transposed, prog.structure.sink[1], ev.edges(S_vals),
                                    xp.ascontiguousarray(Xh), keep)
            if slot is not None:            # [S ⊕ X | S ⊕ E]: the edges' features appended
                Z = xp.concatenate([Z, _weighted_feature_sums(ev, S_vals, slot)], axis=1)
            parts.append(Z)
            ctx.sink_ctx.append(c)
        return _stacked(xp, parts, prog.heads)

    def backward(self, ev, ctx, dout):
        ex, xp, prog = ev.ex, ev.xp, ev.prog
        heads, r, aggr = prog.heads, ev.s.root, prog.structure.sink[1]
        sm = None if self.transposed else _softmax_feeding_root(ev)
        homogeneous = algebra_of(aggr).homogeneous
        seeds, t_for, parts = {}, {}, []
        edge_grads: list = []           # the appended features' cotangent, when derived
        slot = edge_messages(prog.structure.sink)
        f = _x_operand(prog).shape[-1]
        for idx, d, Z, c, S_vals in zip(_head_indices(heads), _heads_of(dout, heads),
                                        _heads_of(ctx.out, heads), ctx.sink_ctx,
                                        ev.root_values(), strict=True):
            d = xp.ascontiguousarray(d)
            dS, dX = semiring_backward(ex, self.transposed, aggr, c,
                                       d if slot is None else xp.ascontiguousarray(d[:, :f]))
            seeds[(r, idx)] = xp.asarray(ex.edge_values(dS), dtype=ev.dtype)
            if slot is not None:
                seeds[(r, idx)] = seeds[(r, idx)] + _feature_sums_cotangent(
                    ev, S_vals, slot, xp.ascontiguousarray(d[:, f:]), edge_grads)
            parts.append(dX)
            if sm is not None and homogeneous:
                t_for[(sm, child_index(idx, ev.ops[r].trail, ev.ops[sm].trail))] = \
                    ex.row_dot(d, xp.ascontiguousarray(Z))
        x_grad = _stacked(xp, parts, heads)
        grads = ev.backward(seeds, t_for)
        slot = next(k for k, o in enumerate(prog.operands) if o.role == "x")
        grads[slot] = x_grad if grads[slot] is None else grads[slot] + x_grad
        for e_slot, g in edge_grads:
            ev.grad_of(e_slot, grads)[...] += g
        return grads


def edge_messages(sink: tuple) -> int | None:
    r"""The edge-feature slot whose features an aggregation appends to its messages
    (``("aggregate", "sum", slot)``: :math:`[S \oplus X \mid S \oplus E]`), else None."""
    return sink[2] if sink[0] == "aggregate" and len(sink) > 2 else None


def _weighted_feature_sums(ev, S_vals, slot: int):
    r""":math:`\sum_j S_{ij} E_{p(i,j)}` per row: ``(n, f_e)`` of one head's weights."""
    E = ev.operand(slot)
    S_full = ev.full(S_vals)
    cols = [ev.ex.row_reduce(ev.edges(S_full * E[:, c]), "sum") for c in range(E.shape[1])]
    return ev.xp.stack(cols, axis=1).astype(ev.dtype, copy=False)


def _feature_sums_cotangent(ev, S_vals, slot: int, d, edge_grads: list):
    r"""The weights' edge cotangent of :func:`_weighted_feature_sums` for its cotangent ``d``
    ``(n, f_e)``: :math:`\bar S_p = \langle \bar Z^e_i, E_p \rangle`; the features' own,
    :math:`\bar E_p = S_p \bar Z^e_i`, into ``edge_grads`` when they are derived."""
    ex, xp, E = ev.ex, ev.xp, ev.operand(slot)
    # row i's cotangent at each of its edges, (nnz, f_e)
    g = xp.stack([ex.gather_rows(ev.A, xp.ascontiguousarray(d[:, c]))
                  for c in range(E.shape[1])], axis=1)
    if slot not in ev.prog.structure.constants:
        edge_grads.append((slot, ev.full(S_vals)[:, None] * g))
    return (g * E).sum(axis=1).astype(ev.dtype, copy=False)


def _softmax_feeding_root(ev) -> int | None:
    """The softmax op whose output reaches the root only through factors independent of it
    (the root itself, or ``softmax ⊙ m`` / ``softmax ⊘ m``), else None."""
    ops, r = ev.ops, ev.s.root
    op = ops[r]
    if op.kind == "softmax":
        return r
    if op.kind == "zip" and op.args[0] in ("mul", "div"):
        a, b = op.inputs
        if ops[a].kind == "softmax" and not depends_on(ops, b, a):
            return a
        if op.args[0] == "mul" and ops[b].kind == "softmax" and not depends_on(ops, a, b):
            return b
    return None


class Messages(SinkRule):
    """``OUT[i, h, c] = ⊕_j M_ij[h, c]`` of messages computed at the edge (``sum``, ``max``,
    ``min``), one channel at a time: no array of more than one value per edge and head."""

    name = "messages"
    root_axes = (2,)
    keeps_outputs = True
    by_target_row = True
    edge_cotangent = False
    channel_cotangent_by_row = True

    def check_root(self, root) -> None:
        if len(root.trail) != 2:
            raise ValueError(f"the messages of a row reduction have shape (rows, cols, "
                             f"heads, channels), got {root.shape}")

    def forward(self, ev, ctx, keep):
        ex, xp, op = ev.ex, ev.xp, ev.prog.structure.sink[1]
        H, K = ev.ops[ev.s.root].trail
        out = xp.zeros((ex.target_rows(ev.A), H, K), dtype=ev.dtype)
        for h, c in _channels(ev):
            out[:, h, c] = ex.row_reduce(ev.edges(ev.full(ev.value(ev.s.root, (h, c)))), op)
        return out

    def backward(self, ev, ctx, dout):
        """Channel by channel, the cotangent ``dOUT[i, h, c]`` at every edge of row ``i``
        (sum) or at its winner (max/min), taken back through the expression."""
        grads: list = [None] * len(ev.prog.operands)
        r, op = ev.s.root, ev.prog.structure.sink[1]
        for h, c in _channels(ev):
            seed = _reduction_cotangent(ev, True, op, (h, c), ev.xp.ascontiguousarray(
                dout[:, h, c]))
            for k, g in enumerate(ev.backward({(r, (h, c)): seed}, {})):
                if g is not None:
                    grads[k] = g if grads[k] is None else grads[k] + g
        return grads


def _channels(ev):
    """The (head, channel) indices of a messages root, each evaluated in a frame of its own
    (its per-channel values dropped after it: one array of a value per edge at a time)."""
    H, K = ev.ops[ev.s.root].trail
    ev.base = 1
    for h in range(H):
        for c in range(K):
            with ev.channel_frame():
                yield h, c


for _rule in (Values(), Reduction("rows", by_row=True), Reduction("cols", by_row=False),
              Aggregation("aggregate", transposed=False), Aggregation("spmm_t", transposed=True),
              Messages()):
    register_sink(_rule)
