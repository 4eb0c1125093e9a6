r"""The operations of an edge program, each one registered object with every rule it has.

An operation kind (:attr:`gblas_gnn.ir.program.Op.kind`) names a :class:`Primitive` in
:data:`PRIMITIVES`. The primitive carries, once:

* its **shape rule** (:meth:`Primitive.trail`: the trailing shape of its value at an edge);
* its **reference evaluation** on arrays of one value per edge (:meth:`Primitive.evaluate`,
  read by :mod:`gblas_gnn.ir.reference` on every executor);
* its **VJP** on those arrays (:meth:`Primitive.vjp`);
* its **scalar code** at one edge (:meth:`Primitive.emit`) and its **scalar VJP**
  (:meth:`Primitive.emit_vjp`), read by both kernel generators through
  :class:`gblas_gnn.codegen.scalar.EdgeCode`;
* the run-time **extent** of its axes in a kernel (:meth:`Primitive.extent`: kernels read
  their sizes from their arrays);
* the **numbers** a kernel reads at run time (:meth:`Primitive.numbers`: a constant, a
  LeakyReLU's slope, a dropout's probability) and its arguments as they shape a kernel's
  code (:meth:`Primitive.kernel_args`: those numbers erased), so that one compiled kernel
  serves every value of a hyperparameter.

The reference evaluator ``ev`` and the code emitter ``c`` hand a primitive their public
helpers (``ev.value``, ``ev.input``, ``ev.push``; ``c.value``, ``c.input``, ``c.push``, …); a
primitive imports neither. Elementwise functions are rows of :mod:`.functions` (one
:class:`~.functions.Unary` or :class:`~.functions.Binary` object each), read by ``map`` and
``zip``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from . import functions as F
from .registry import Registry

__all__ = ["Primitive", "PRIMITIVES", "primitive", "register_primitive"]


class Primitive:
    """One operation kind (see the module docstring). A subclass sets :attr:`name` and
    overrides the rules it has; the defaults are those of a constant (no cotangent)."""

    #: the kind in :attr:`gblas_gnn.ir.program.Op.kind`
    name: ClassVar[str] = ""
    #: the operand role a leaf reads by its slot ``args[0]`` (``row``, ``col``, ``param``,
    #: ``eattr``, ``edges``, ``key``), None for the rest
    role: ClassVar[str | None] = None
    #: whether its value is a contraction over a channel axis (a loop in code)
    contracts: ClassVar[bool] = False
    #: whether it ends a stage: its values are kept per edge (a softmax's buffer)
    stage: ClassVar[bool] = False

    # ------------------------------------------------------------------ shape
    def trail(self, args: tuple, inputs: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
        """The trailing shape of the value from its inputs' (a leaf's is the node's own)."""
        return inputs[0] if inputs else ()

    # ------------------------------------------------------------------ reference
    def evaluate(self, ev, i: int, op, idx: tuple) -> Any:
        """The value at every edge, for trailing index ``idx``."""
        raise ValueError(f"unknown operation {op.kind!r}")

    def vjp(self, ev, i: int, op, idx: tuple, g, adj: dict, grads: list, t_for: dict) -> None:
        """Pass the edge cotangent ``g`` of ``(i, idx)`` on: to the inputs' entries of
        ``adj`` (``ev.push``) or, for a leaf, into its operand's cotangent ``grads``."""

    # ------------------------------------------------------------------ scalar code
    def emit(self, c, block, scope, i: int, op, idx: tuple) -> str:
        """An expression for the value at one edge (lines it needs go to ``block``)."""
        raise ValueError(f"unknown operation {op.kind!r}")

    def emit_vjp(self, c, block, scope, i: int, op, idx: tuple, g: str, pending: dict) -> None:
        """Emit the passing on of the cotangent ``g`` (an expression) at one edge."""

    def extent(self, c, i: int, op, axis: int) -> str:
        """An expression for the extent of trailing axis ``axis`` in a kernel."""
        raise ValueError(f"no array gives the extent of axis {axis} of operation {i}")

    # ------------------------------------------------------------------ kernel key
    def numbers(self, op) -> tuple[tuple[float, bool], ...]:
        """The numbers of ``op`` a kernel reads at run time rather than from its source,
        as ``(value, wide)`` pairs: ``wide``, a float64 whatever the program's dtype; else
        one in the program's dtype (:meth:`gblas_gnn.codegen.scalar.EdgeCode.number`)."""
        return ()

    def kernel_args(self, op) -> tuple:
        """``op.args`` as they shape a kernel's code (a part of
        :attr:`gblas_gnn.ir.program.Structure.kernel_signature`): its :meth:`numbers`
        erased, and any extent a kernel reads from its arrays."""
        return op.args


#: every operation kind, by name
PRIMITIVES: Registry[Primitive] = Registry("operation")


def register_primitive(p: Primitive) -> Primitive:
    """Add ``p`` under its :attr:`~Primitive.name` (``ValueError`` when the name is taken)."""
    return PRIMITIVES.add(p)


def primitive(kind: str) -> Primitive:
    """The primitive of operation kind ``kind`` (``ValueError`` for an unknown one)."""
    return PRIMITIVES.find(kind)


# ---------------------------------------------------------------------- leaves
class _Gathered(Primitive):
    """A vertex-indexed operand read at the edge: ``X[i, …]`` (``row``: by target),
    ``X[j, …]`` (``col``: by source) or an edge's features ``E[p, …]`` (``eattr``). Its
    cotangent is a row or column reduction, or the edge's own."""

    def emit(self, c, block, scope, i, op, idx):
        viewed = c.through_view(scope, c.leaves.view, self.name, op.args[0], idx)
        if viewed is not None:
            return viewed
        return getattr(c.leaves, self.name)(op.args[0], idx)

    def emit_vjp(self, c, block, scope, i, op, idx, g, pending):
        viewed = c.through_view(scope, c.leaves.grad_view, self.name, op.args[0], idx)
        if viewed is not None:
            block.emit(f"{viewed} += {g}")
        else:
            getattr(c.leaves, f"grad_{self.name}")(block, op.args[0], idx, g)

    def extent(self, c, i, op, axis):
        return c.leaves.size(self.name, op.args[0], axis)


class VertexGather(_Gathered):
    """A vertex-indexed operand gathered by target (``row``: ``X[i]``, cotangent a row sum)
    or by source (``col``: ``X[j]`` from the source-side rows, cotangent a column sum)."""

    def __init__(self, name: str, by_target: bool):
        self.name = self.role = name
        self.by_target = by_target

    def evaluate(self, ev, i, op, idx):
        ex, slot = ev.ex, op.args[0]
        rows = ev.operand(slot) if self.by_target else ev.column_copy(slot)
        gather = ex.gather_rows if self.by_target else ex.gather_columns
        return gather(ev.A, ev.xp.ascontiguousarray(rows[(slice(None), *idx)]))

    def vjp(self, ev, i, op, idx, g, adj, grads, t_for):
        reduce = ev.ex.row_reduce if self.by_target else ev.ex.col_reduce
        ev.grad_of(op.args[0], grads)[(slice(None), *idx)] += \
            reduce(ev.edges(ev.full(g)), "sum")


class EdgeFeatureRead(_Gathered):
    name = role = "eattr"

    def evaluate(self, ev, i, op, idx):
        return ev.xp.ascontiguousarray(ev.operand(op.args[0])[(slice(None), *idx)])

    def vjp(self, ev, i, op, idx, g, adj, grads, t_for):
        ev.grad_of(op.args[0], grads)[(slice(None), *idx)] += ev.full(g)


class Parameter(Primitive):
    """A parameter broadcast over every edge: ``a[…]``; its cotangent sums every edge."""

    name = role = "param"

    def evaluate(self, ev, i, op, idx):
        return ev.operand(op.args[0])[idx]

    def vjp(self, ev, i, op, idx, g, adj, grads, t_for):
        ex = ev.ex
        total = ex.vertex_sum(ex.row_reduce(ev.edges(ev.full(g)), "sum")[:, None])[0]
        ev.grad_of(op.args[0], grads)[idx] += total

    def emit(self, c, block, scope, i, op, idx):
        return c.leaves.param(op.args[0], idx)

    def emit_vjp(self, c, block, scope, i, op, idx, g, pending):
        c.leaves.grad_param(block, op.args[0], idx, g)

    def extent(self, c, i, op, axis):
        return c.leaves.size(self.name, op.args[0], axis)


class Constant(Primitive):
    """The number ``args[0]``."""

    name = "const"

    def evaluate(self, ev, i, op, idx):
        return ev.dtype.type(op.args[0])

    def emit(self, c, block, scope, i, op, idx):
        return c.number(i)

    def numbers(self, op):
        return ((float(op.args[0]), False),)

    def kernel_args(self, op):
        return (None,)


class PatternValues(Primitive):
    """The pattern's own values ``A[i, j]``."""

    name = "avals"

    def evaluate(self, ev, i, op, idx):
        return ev.xp.asarray(ev.ex.edge_values(ev.A), dtype=ev.dtype)

    def emit(self, c, block, scope, i, op, idx):
        return c.leaves.avals()


class EdgeValues(Primitive):
    """The values of another edge tensor on the same pattern (operand ``args[0]``)."""

    name = role = "edges"

    def evaluate(self, ev, i, op, idx):
        return ev.xp.asarray(ev.ex.edge_values(ev.operand(op.args[0])), dtype=ev.dtype)

    def emit(self, c, block, scope, i, op, idx):
        return c.leaves.edges(op.args[0])


class DropoutScale(Primitive):
    """Counter-based dropout scales (``args``: the key's slot, ``p``, heads): 0 or
    ``1 / (1 - p)`` per edge and head, from the key alone (every executor draws the same).
    A kernel reads ``p`` (float64, as the draw compares it) and the scale at run time, and
    its head count from the key operand."""

    name = "dropout"
    role = "key"

    def evaluate(self, ev, i, op, idx):
        slot, p, heads = op.args
        scales = ev.cached(("dropout", slot), lambda: ev.ex.dropout_edges(
            ev.A, int(ev.operand(slot)), p, heads or 1, ev.dtype))
        return scales[idx[0] if idx else 0]

    def emit(self, c, block, scope, i, op, idx):
        return c.leaves.dropout(i, idx, c.number(i, 0), c.number(i, 1))

    def extent(self, c, i, op, axis):
        return c.leaves.size(self.name, op.args[0], axis)

    def numbers(self, op):
        p = float(op.args[1])
        return ((p, True), (1.0 / (1.0 - p), False))

    def kernel_args(self, op):
        slot, _, heads = op.args
        return (slot, None, None if heads is None or heads == 1 else -1)


# ---------------------------------------------------------------------- operations
class AppendAxis(Primitive):
    """Its input with a unit axis appended (``S[..., None]``: the appended axis indexes
    nothing)."""

    name = "expand"

    def trail(self, args, inputs):
        return (*inputs[0], 1)

    def evaluate(self, ev, i, op, idx):
        return ev.value(op.inputs[0], idx[:-1])

    def vjp(self, ev, i, op, idx, g, adj, grads, t_for):
        ev.accumulate(adj, (op.inputs[0], idx[:-1]), g)

    def emit(self, c, block, scope, i, op, idx):
        return c.value(block, scope, op.inputs[0], idx[:-1])

    def emit_vjp(self, c, block, scope, i, op, idx, g, pending):
        if c.wants(op.inputs[0]):
            c.accumulate(block, pending, (op.inputs[0], idx[:-1]), g)

    def extent(self, c, i, op, axis):
        return c.size(op.inputs[0], axis)


class UnaryMap(Primitive):
    """Elementwise function ``args = (fn, alpha)`` of its input (a row of
    :data:`gblas_gnn.ir.functions.UNARY`). A kernel reads ``alpha`` and ``alpha - 1`` at run
    time, unless the function writes it into the code
    (:attr:`~gblas_gnn.ir.functions.Unary.alpha_in_code`: a power's exponent); the code
    depends on it only through ``{pick}`` (``alpha ≤ 1``), which stays in the key."""

    name = "map"

    @staticmethod
    def _read_at_run_time(op) -> bool:
        fn, alpha = op.args
        return alpha is not None and not F.UNARY[fn].alpha_in_code

    def numbers(self, op):
        if not self._read_at_run_time(op):
            return ()
        alpha = float(op.args[1])
        return ((alpha, False), (alpha - 1, False))

    def kernel_args(self, op):
        if not self._read_at_run_time(op):
            return op.args
        fn, alpha = op.args
        return (fn, alpha <= 1)

    def _fmt(self, c, i, op, template, x, y=None):
        fn, alpha = op.args
        if self._read_at_run_time(op):
            return c.fmt(template, x, y, alpha, a=c.number(i, 0), am1=c.number(i, 1))
        return c.fmt(template, x, y, alpha)

    def evaluate(self, ev, i, op, idx):
        fn, alpha = op.args
        return F.unary(ev.xp, fn, ev.input(i, 0, idx), alpha)

    def vjp(self, ev, i, op, idx, g, adj, grads, t_for):
        fn, alpha = op.args
        x, y = ev.input(i, 0, idx), ev.value(i, idx)
        ev.push(adj, i, 0, idx, F.UNARY[fn].cotangent(ev.xp, ev.full(x), ev.full(y), g, alpha))

    def emit(self, c, block, scope, i, op, idx):
        fn, _ = op.args
        return self._fmt(c, i, op, F.UNARY[fn].code, c.input(block, scope, i, 0, idx))

    def emit_vjp(self, c, block, scope, i, op, idx, g, pending):
        if not c.wants(op.inputs[0]):
            return
        fn, _ = op.args
        x = c.input(block, scope, i, 0, idx)
        y = c.value(block, scope, i, idx)
        d = self._fmt(c, i, op, F.UNARY[fn].code_derivative, x, y)
        c.push(block, pending, i, 0, idx, f"{g} * {d}")

    def extent(self, c, i, op, axis):
        return c.size(op.inputs[0], axis)


class BinaryZip(Primitive):
    """Binary function ``args = (op,)`` of its two inputs, broadcasting (a row of
    :data:`gblas_gnn.ir.functions.BINARY`)."""

    name = "zip"

    def trail(self, args, inputs):
        return tuple(np.broadcast_shapes(*inputs))      # ValueError unless they broadcast

    def evaluate(self, ev, i, op, idx):
        return F.binary_forward(ev.xp, op.args[0], ev.input(i, 0, idx), ev.input(i, 1, idx))

    def vjp(self, ev, i, op, idx, g, adj, grads, t_for):
        u, v = ev.input(i, 0, idx), ev.input(i, 1, idx)
        gu, gv = F.binary_vjp(ev.xp, op.args[0], u, v, ev.value(i, idx), g)
        ev.push(adj, i, 0, idx, gu)
        ev.push(adj, i, 1, idx, gv)

    def emit(self, c, block, scope, i, op, idx):
        a = c.input(block, scope, i, 0, idx)
        b = c.input(block, scope, i, 1, idx)
        return F.binary(op.args[0]).code.format(a=a, b=b)

    def emit_vjp(self, c, block, scope, i, op, idx, g, pending):
        """The cotangent of each input a write wants (:meth:`EdgeCode.wants`), computing
        only the values its rule reads."""
        rules = F.binary(op.args[0]).code_vjp
        wanted = [k for k in (0, 1) if c.wants(op.inputs[k])]
        read = "".join(rules[k] for k in wanted)
        names = {"g": g, "zero": c.zero}
        for name, k in (("a", 0), ("b", 1)):
            if f"{{{name}}}" in read:
                names[name] = c.input(block, scope, i, k, idx)
        if "{out}" in read:
            names["out"] = c.value(block, scope, i, idx)
        for k in wanted:
            c.push(block, pending, i, k, idx, rules[k].format(**names))

    def extent(self, c, i, op, axis):
        for k in op.inputs:                            # an input with this axis
            tk = c.ops[k].trail
            pos = axis - (len(op.trail) - len(tk))
            if pos >= 0 and tk[pos] != 1:
                return c.size(k, pos)
        return super().extent(c, i, op, axis)


class ChannelSum(Primitive):
    r""":math:`\sum_c` of its input's last trailing axis: a loop over the channels, one
    channel's values at a time; its cotangent goes to every channel."""

    name = "sum"
    contracts = True

    def trail(self, args, inputs):
        return inputs[0][:-1]

    def evaluate(self, ev, i, op, idx):
        child = op.inputs[0]
        total = None
        for c in range(ev.ops[child].trail[-1]):
            with ev.channel_frame():
                v = ev.value(child, (*idx, c))
            total = v if total is None else total + v
        return total

    def vjp(self, ev, i, op, idx, g, adj, grads, t_for):
        child = op.inputs[0]
        region = set(ev.region(i))
        for c in range(ev.ops[child].trail[-1]):
            inner = {(child, (*idx, c)): g}
            with ev.channel_frame():
                ev.reverse([], inner, grads, t_for, region)
            for key, val in inner.items():         # cotangents of shallower operations
                ev.accumulate(adj, key, val)

    def emit(self, c, block, scope, i, op, idx):
        child = op.inputs[0]
        acc = block.fresh("acc")
        var = block.fresh("c")
        block.emit(f"{acc} = {c.zero}")
        channels, split = c.channels(var, child, len(op.trail))
        body = block.deeper()
        inner = scope.child(var)
        with c.splitting(split):
            v = c.value(body, inner, child, (*idx, var))
            body.emit(f"{acc} += {v}")
        c.loop(block, inner, var, channels, body)
        if split:
            block.emit(f"{acc} = {c.leaves.channel_total(acc)}")
        return acc

    def emit_vjp(self, c, block, scope, i, op, idx, g, pending):
        """A loop whose body is the reverse mode of one channel; what it gives to values
        outside the loop is summed into accumulators declared before it."""
        child = op.inputs[0]
        if not c.wants(child):
            return
        var = block.fresh("c")
        channels, split = c.channels(var, child, len(op.trail))
        outer = c.channel_loop_reverse(block, scope, var, channels,
                                       {(child, (*idx, var)): g}, split)
        for key, name in outer.items():
            if split:
                block.emit(f"{name} = {c.leaves.channel_total(name)}")
            c.accumulate(block, pending, key, name)

    def extent(self, c, i, op, axis):
        return c.size(op.inputs[0], axis)


class RowSoftmax(Primitive):
    r"""The stable row softmax of its input, per head:
    :math:`\bar E = \Psi \odot (\bar\Psi - \mathrm{rep}(t))`,
    :math:`t = \mathrm{sum}(\Psi \odot \bar\Psi)` (``t_for`` gives ``t`` when the sink
    supplies it as a dense row product). In code a softmax is read from its buffer."""

    name = "softmax"
    stage = True

    def evaluate(self, ev, i, op, idx):
        E = ev.edges(ev.input(i, 0, idx))
        return ev.xp.asarray(ev.ex.edge_values(ev.ex.softmax(E)), dtype=ev.dtype)

    def vjp(self, ev, i, op, idx, g, adj, grads, t_for):
        psi = ev.value(i, idx)
        t = t_for.get((i, idx))
        if t is None:
            t = ev.ex.row_reduce(ev.edges(psi * g), "sum")
        ev.push(adj, i, 0, idx, psi * (g - ev.ex.gather_rows(ev.A, t)))

    def emit(self, c, block, scope, i, op, idx):
        raise ValueError("a softmax is read from its buffer only")

    def emit_vjp(self, c, block, scope, i, op, idx, g, pending):
        raise ValueError(f"no reverse rule for {op.kind!r}")

    def extent(self, c, i, op, axis):
        return c.leaves.size("softmax", i, axis)


for _p in (VertexGather("row", by_target=True), VertexGather("col", by_target=False),
           EdgeFeatureRead(), Parameter(), Constant(),
           PatternValues(), EdgeValues(), DropoutScale(), AppendAxis(), UnaryMap(), BinaryZip(),
           ChannelSum(), RowSoftmax()):
    register_primitive(_p)
