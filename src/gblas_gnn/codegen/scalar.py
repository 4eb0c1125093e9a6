r"""Scalar code for one edge of an edge program: the values of its operations and their
reverse mode, emitted as Python source for a kernel compiler (numba on the cpu, numba-cuda on
a GPU).

The generators build a kernel from a :class:`~.program.Structure`: the loops over rows,
columns, heads and edges are theirs; what happens at one edge ``(i, j)`` at CSR position
``p`` is emitted here. An operation's value at an index (its trailing axes: a head, a channel)
becomes a local variable; a contraction ``Σ_c`` becomes a loop over ``c``. The reverse mode
walks the same operations backwards from a cotangent and hands every leaf's cotangent to the
generator (:class:`Leaves`), which decides where it goes (a row or column accumulator, a
parameter partial, the cotangent buffer of an earlier softmax).

Everything emitted comes from a closed set of templates (:mod:`.functions`) and from the
structure's numbers and slot indices; no text of a user ever reaches the source.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ..ir.primitives import Primitive, primitive
from ..ir.program import Structure, child_index

__all__ = ["SourceBlock", "ValueScope", "Leaves", "EdgeCode", "literal", "EdgeContraction",
           "edge_contractions", "MAX_FEATURES_ONCE", "MAX_SCRATCH"]

def literal(value: float, dtype: np.dtype) -> str:
    """A float constant in the program's dtype (float32 work must stay float32); an infinity
    or a NaN through numpy's names (``repr`` gives ``inf``, no name in a kernel's module)."""
    name = "np.float32" if np.dtype(dtype) == np.float32 else "np.float64"
    v = float(value)
    if np.isfinite(v):
        return f"{name}({v!r})"
    return f"{name}({'np.nan' if np.isnan(v) else ('np.inf' if v > 0 else '-np.inf')})"


class SourceBlock:
    """Lines of source at an indentation, with fresh names. An item of :attr:`lines` is a line
    or a block reserved at that place and filled later (:meth:`reserve`); :meth:`text`
    writes them all. :attr:`prologue`: where code that must run once per edge before the
    edge's channel loops goes (:meth:`EdgeCode.value`), and :attr:`epilogue`: where code
    that must run once per edge after them goes (:meth:`EdgeCode.reverse` of a contraction),
    both inherited by the blocks inside; None where no generator reserved one. :attr:`items`:
    the start and the end of every item of a loop over items (a block of rows or columns
    that shares a parameter partial, :meth:`item_body`), where code that runs once per item
    goes, inherited the same way."""

    def __init__(self, indent: int = 0, counter: list | None = None,
                 prologue: SourceBlock | None = None, epilogue: SourceBlock | None = None,
                 items: tuple[SourceBlock, SourceBlock] | None = None):
        self.lines: list = []
        self.indent = indent
        self._counter = counter if counter is not None else [0]
        self.prologue = prologue
        self.epilogue = epilogue
        self.items = items
        #: the operations whose once-per-edge code a reserved block holds (EdgeCode.value)
        self.done: set = set()

    def fresh(self, stem: str) -> str:
        self._counter[0] += 1
        return f"{stem}{self._counter[0]}"

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def deeper(self) -> SourceBlock:
        """A block one level deeper with lines of its own (a loop body), sharing the names."""
        return SourceBlock(self.indent + 1, self._counter, self.prologue, self.epilogue,
                           self.items)

    def nested(self) -> SourceBlock:
        """A block one level deeper writing into the same lines."""
        inner = self.deeper()
        inner.lines = self.lines
        return inner

    def reserve(self) -> SourceBlock:
        """A block at this indentation, placed here in the lines and filled later."""
        block = SourceBlock(self.indent, self._counter, self.prologue, self.epilogue,
                            self.items)
        self.lines.append(block)
        return block

    def loop_body(self) -> SourceBlock:
        """The body of a loop this block has just opened, one level deeper, with its
        :attr:`epilogue` reserved after it: what is emitted there later still runs at the
        end of every iteration, after everything the body holds."""
        body = self.deeper()
        self.lines.append(body)
        body.epilogue = SourceBlock(body.indent, self._counter, body.prologue, None,
                                    self.items)
        self.lines.append(body.epilogue)
        return body

    def item_body(self) -> SourceBlock:
        """The body of a loop over items this block has just opened, with :attr:`items`
        reserved at its start and after it (run at the start and the end of every item)."""
        body = self.deeper()
        self.lines.append(body)
        end = SourceBlock(body.indent, self._counter, body.prologue)
        self.lines.append(end)
        body.items = (body.reserve(), end)
        return body

    def text(self) -> str:
        """The source: every line, reserved blocks written where they were reserved."""
        return "\n".join(item.text() if isinstance(item, SourceBlock) else item
                         for item in self.lines if not (isinstance(item, SourceBlock)
                                                        and not item.lines))


@dataclass
class ValueScope:
    """Values already computed where the code is emitted: ``(op, index) -> name``; a loop
    body sees its parent's values, not the other way round. The body of a channel loop also
    records the 1-D row views it reads through (``views``: bound before the loop)."""

    values: dict = field(default_factory=dict)
    parent: ValueScope | None = None
    loop: str | None = None
    views: dict = field(default_factory=dict)

    def get(self, key):
        s = self
        while s is not None:
            if key in s.values:
                return s.values[key]
            s = s.parent
        return None

    def child(self, loop: str | None = None) -> ValueScope:
        return ValueScope(parent=self, loop=loop)


@dataclass(frozen=True)
class EdgeContraction:
    r"""A contraction of an edge's features with a parameter, ``g.edge_attr @ W`` in a
    composition: :math:`v[a] = \sum_f e_p[f]\, W[a, f]` at every index ``a`` of the
    operation ``op`` (``a`` one or more axes: heads, channels), the ``features`` numbers
    ``f`` of an edge in slot ``eattr`` and ``W`` (channels last) in slot ``param``."""

    op: int
    eattr: int
    param: int
    features: int


#: the most features an edge may have for its contractions to be computed once per edge
#: (their code has one term per feature, :meth:`EdgeCode.value`)
MAX_FEATURES_ONCE = 16
#: the most numbers of a contraction's parameter for its scratch (the parameter with its
#: feature axis first, and its values at an edge) to go on a kernel's stack: 128 KiB in
#: float32, well inside a thread's stack
MAX_SCRATCH = 1 << 15


def edge_contractions(structure: Structure) -> dict[int, EdgeContraction]:
    """The contractions of ``structure`` of the form of :class:`EdgeContraction` (a channel
    sum of the product of an edge-feature read of trail ``(f,)`` and a parameter read of the
    product's own trail ``(…, f)``, ``f`` at most :data:`MAX_FEATURES_ONCE`, the parameter
    of at most :data:`MAX_SCRATCH` numbers) with more than
    one value a head, by operation, for a generator to compute once per edge
    (:meth:`EdgeCode.value`) rather than once per channel of every loop that reads them
    (GINE's ``ReLU(x_j + W e)``, GATv2's LeakyReLU, TransformerConv's keys and values). A
    contraction with one value a head (GAT's edge score, its attention vector folded into
    ``W``) is computed once a head already, and stays where it is read."""
    ops, out = structure.ops, {}
    per_head = structure.heads or 1
    for i, op in enumerate(ops):
        if op.kind != "sum" or int(np.prod(op.trail)) <= per_head:
            continue
        m = ops[op.inputs[0]]
        if m.kind != "zip" or m.args[0] != "mul" or len(m.inputs) != 2:
            continue
        leaves = {ops[k].kind: ops[k] for k in m.inputs}
        e, w = leaves.get("eattr"), leaves.get("param")
        if e is None or w is None or e.trail != m.trail[-1:] or w.trail != m.trail:
            continue
        features = structure.roles[e.args[0]][1][-1]
        if features <= MAX_FEATURES_ONCE and int(np.prod(w.trail)) <= MAX_SCRATCH:
            out[i] = EdgeContraction(i, e.args[0], w.args[0], features)
    return out


class Leaves(ABC):
    """How a kernel reads its operands at an edge and where the reverse mode's cotangents
    go; a generator subclasses it (:class:`gblas_gnn.codegen.kernel_args.ArrayLeaves`).
    Indices are tuples of expressions over the leaf's own trailing shape."""

    def receives(self, kind: str, ref: int) -> bool:
        """Whether a cotangent of the leaf ``kind`` (``"row"``, ``"col"``, ``"param"``,
        ``"eattr"``; ``"softmax"``: an earlier softmax's buffer) at slot or operation
        ``ref`` is written anywhere by this code; the reverse mode computes nothing for one
        that is not (:meth:`EdgeCode.wants`). True unless a subclass knows better."""
        return True

    @abstractmethod
    def row(self, slot: int, idx: tuple) -> str:
        """The operand's value at this edge."""

    @abstractmethod
    def col(self, slot: int, idx: tuple) -> str:
        """The operand's value at this edge."""

    @abstractmethod
    def param(self, slot: int, idx: tuple) -> str:
        """The operand's value at this edge."""

    @abstractmethod
    def avals(self) -> str:
        """The operand's value at this edge."""

    @abstractmethod
    def edges(self, slot: int) -> str:
        """The operand's value at this edge."""

    @abstractmethod
    def eattr(self, slot: int, idx: tuple) -> str:
        """The features of operand ``slot`` at this edge (``idx``: the channel)."""

    @abstractmethod
    def dropout(self, op: int, idx: tuple, p: str, scale: str) -> str:
        """The keep-scale of dropout ``op`` at this edge (``p`` and ``scale``: the code of
        its probability and of ``1 / (1 - p)``, :meth:`EdgeCode.number`)."""

    def number(self, index: int, value: float, dtype: np.dtype) -> str:
        """The code of number ``index`` of the structure
        (:attr:`gblas_gnn.ir.program.Structure.numbers`), ``value`` in ``dtype``. The
        default writes it into the source (one kernel per value); a generator that passes
        the numbers to its kernels names them."""
        return literal(value, dtype)

    @abstractmethod
    def softmax(self, op: int, idx: tuple) -> str:
        """The value of an earlier softmax at this edge (its buffer)."""

    @abstractmethod
    def size(self, kind: str, ref: int, axis: int) -> str:
        """An expression for the extent of trailing axis ``axis`` of a leaf (``kind`` in
        row, col, param, eattr, dropout, softmax; ``ref`` its slot or operation), read from the
        kernel's arrays: kernels take no sizes from the structure, so one kernel serves every
        width of a formulation."""

    def view(self, kind: str, slot: int, prefix: tuple) -> str | None:
        """A 1-D view of a row, column or edge-feature operand at the current edge with the
        leading trailing indices ``prefix`` (``R0[i]``, ``C1[j, hh]``, ``EA2[p]``), so that a
        channel loop reads
        ``view[c]`` (numba vectorises loops over 1-D views, not over 2-D indexing); None: no
        views, plain indexing."""
        return None

    def grad_view(self, kind: str, slot: int, prefix: tuple) -> str | None:
        """The same for where this pass accumulates a row or column operand's cotangent, or
        a parameter's partial (None: not accumulated here, or no views)."""
        return None

    def channel_range(self, var: str, size: str) -> str | None:
        """The range of a contraction's channel loop over ``var`` when the kernel's threads
        split it among themselves (each summing its share of the channels, then combining
        them with :meth:`channel_total`); None (the default): one thread runs every
        channel."""
        return None

    def channel_total(self, name: str) -> str:
        """An expression combining the threads' partial sums ``name`` of a split channel
        loop (:meth:`channel_range`) into the total, on every thread. The default: no loop is
        split (one thread runs every channel), so the partial sum is the total."""
        return name

    # reverse mode: emit ``target += g`` where the cotangent of a leaf goes (the defaults
    # emit nothing: a forward-only generator accumulates no cotangent)
    def grad_row(self, block: SourceBlock, slot: int, idx: tuple, g: str) -> None:
        return None

    def grad_col(self, block: SourceBlock, slot: int, idx: tuple, g: str) -> None:
        return None

    def grad_param(self, block: SourceBlock, slot: int, idx: tuple, g: str) -> None:
        return None

    def grad_eattr(self, block: SourceBlock, slot: int, idx: tuple, g: str) -> None:
        return None

    def grad_softmax(self, block: SourceBlock, op: int, idx: tuple, g: str) -> None:
        return None


class EdgeCode:
    """Emits the value and the reverse mode of a structure's operations at one edge."""

    def __init__(self, structure: Structure, leaves: Leaves):
        self.s = structure
        self.ops = structure.ops
        self.leaves = leaves
        self.dtype = np.dtype(structure.dtype)
        self.one = literal(1.0, self.dtype)
        self.zero = literal(0.0, self.dtype)
        #: softmax outputs read from buffers (their own op is the stage boundary)
        self.cut: set[int] = set()
        #: whether the code is inside a channel loop the threads split
        self._split = False
        #: contractions computed once per edge where a block has a prologue (:meth:`value`)
        self.contractions = edge_contractions(structure)
        #: the head index of a loop over a row's ``heads · f`` lanes (``(lane_head, c)``:
        #: lane ``c`` of a head-major ``(heads, f)`` value), where a generator walks them
        #: at once; None: heads are indexed one at a time
        self.lane_head: str | None = None
        #: per operation, whether its cotangent reaches anything written (:meth:`wants`)
        self._wanted: dict[int, bool] = {}

    def lit(self, v: float) -> str:
        """The number ``v`` as a literal of the program's dtype."""
        return literal(v, self.dtype)

    def size(self, i: int, axis: int) -> str:
        """An expression for ``trail[axis]`` of operation ``i`` at run time."""
        op = self.ops[i]
        prim = primitive(op.kind)
        if op.trail[axis] == 1:
            return "1"
        if i in self.cut:
            return self.leaves.size("softmax", i, axis)
        return prim.extent(self, i, op, axis)

    def channels(self, var: str, child: int, axis: int) -> tuple[str, bool]:
        """The range of the channel loop of a contraction of ``child`` over its ``axis``,
        and whether the threads split it (:meth:`Leaves.channel_range`): never inside a
        split loop, nor when the contraction holds another one (each thread's share of
        an inner loop would not be its own)."""
        size = self.size(child, axis)
        if not self._split and not self._contracts(child):
            channels = self.leaves.channel_range(var, size)
            if channels is not None:
                return channels, True
        return f"range({size})", False

    def _contracts(self, i: int) -> bool:
        """Whether the value of operation ``i`` (up to the softmax buffers) holds a
        contraction."""
        stack, seen = [i], set()
        while stack:
            k = stack.pop()
            if k in seen or k in self.cut:
                continue
            seen.add(k)
            if primitive(self.ops[k].kind).contracts:
                return True
            stack.extend(self.ops[k].inputs)
        return False

    # ------------------------------------------------------------------ values
    def value(self, block: SourceBlock, scope: ValueScope, i: int, idx: tuple) -> str:
        key = (i, idx)
        hit = scope.get(key)
        if hit is not None:
            return hit
        if i in self.contractions and block.prologue is not None and not self._split:
            expr = self._once_per_edge(block.prologue, self.contractions[i], idx)
        else:
            expr = self._expr(block, scope, i, idx)
        name = block.fresh("v")
        block.emit(f"{name} = {expr}")
        scope.values[key] = name
        return name

    def _once_per_edge(self, prologue: SourceBlock, c: EdgeContraction, idx: tuple) -> str:
        r"""The value at ``idx`` of the contraction ``c`` from its values at every index,
        computed in the edge's ``prologue`` (once per edge, however many loops read it):

        .. math::  T[a] = \sum_{f < F} x_f\, W^\top[f, a], \qquad x_f = e_p[f]

        one expression of ``F`` terms (``F`` written in) per entry ``a``: the loop over ``a``
        vectorises, each entry summed in registers (a dot of the ``F`` features per channel,
        as before, did not vectorise; ``F`` updates of the whole of ``T`` in turn waited on
        their own stores). ``T`` and ``W^\top`` (flat, ``a`` running over the parameter's
        leading axes) are the kernel's scratch ``TH<op>`` and ``WT<op>``, which the
        generator makes at the kernel's start."""
        t, wt = f"TH{c.op}", f"WT{c.op}"
        if c.op not in prologue.done:
            prologue.done.add(c.op)
            xs = [prologue.fresh("x") for _ in range(c.features)]
            for f, x in enumerate(xs):
                prologue.emit(f"{x} = {self.leaves.eattr(c.eattr, (str(f),))}")
            m, a = prologue.fresh("m"), prologue.fresh("a")
            prologue.emit(f"{m} = {t}.shape[0]")
            prologue.emit(f"for {a} in range({m}):")
            terms = " + ".join(f"{x} * {wt}[{f} * {m} + {a}]" for f, x in enumerate(xs))
            prologue.nested().emit(f"{t}[{a}] = {terms}")
        return f"{t}[{self._flat(c, idx)}]"

    def _flat(self, c: EdgeContraction, idx: tuple) -> str:
        """The position of ``idx`` in the contraction's flat scratch (its parameter's
        leading axes, row-major): a lane's own index where the heads' lanes are walked at
        once (:attr:`lane_head`)."""
        if self.lane_head is not None and len(idx) == 2 and idx[0] == self.lane_head:
            return idx[1]
        flat = idx[0]
        for axis, index in enumerate(idx[1:], start=1):
            flat = f"({flat}) * {self.leaves.size('param', c.param, axis)} + {index}"
        return flat

    def _contraction_cotangent(self, block: SourceBlock, c: EdgeContraction, idx: tuple,
                               g: str) -> None:
        r"""The cotangent ``g`` of the contraction ``c`` at ``idx``, summed over the edge's
        channel loops into the scratch ``GT<op>`` (zeroed in the edge's prologue) and
        handed to the parameter and the features once per edge, in its epilogue:

        .. math::  \bar W[a, f] \mathrel{+}= \bar T[a]\, e_p[f], \qquad
                   \bar e_p[f] \mathrel{+}= \textstyle\sum_a \bar T[a]\, W^\top[f, a]

        where the reverse mode of the sum gave each channel a loop over the features: that
        inner loop kept the channel loops around it scalar (GINE's row pass and the row
        strategy's passes of TransformerConv with edge features spent most of their time
        there)."""
        wants = getattr(self.leaves, "accumulate", {"param", "eattr"})
        if "param" not in wants and ("eattr" not in wants or not self._derived(c.eattr)):
            return
        gt = f"GT{c.op}"
        prologue = block.prologue
        if ("grad", c.op) not in prologue.done:
            prologue.done.add(("grad", c.op))
            a = prologue.fresh("a")
            prologue.emit(f"for {a} in range({gt}.shape[0]):")
            prologue.nested().emit(f"{gt}[{a}] = {self.zero}")
            self._contraction_epilogue(block.epilogue, c, wants)
        block.emit(f"{gt}[{self._flat(c, idx)}] += {g}")

    def _derived(self, eattr: int) -> bool:
        """Whether the features in slot ``eattr`` get a cotangent (else they are data)."""
        return eattr not in self.s.constants

    def _contraction_epilogue(self, epi: SourceBlock, c: EdgeContraction, wants) -> None:
        """:meth:`_contraction_cotangent`'s updates, once per edge after its channel loops."""
        gt, lead = f"GT{c.op}", len(self.ops[c.op].trail)
        if "param" in wants and epi.items is not None:
            self._contraction_weight_per_item(epi, c)
        elif "param" in wants:
            f = epi.fresh("f")
            block, idx = epi, []
            for axis in range(lead):
                var = block.fresh("a")
                block.emit(f"for {var} in range({self.leaves.size('param', c.param, axis)}):")
                block, idx = block.nested(), [*idx, var]
            ga = block.fresh("ga")
            block.emit(f"{ga} = {gt}[{self._flat(c, tuple(idx))}]")
            # through 1-D views, as a channel loop reads: GINE's row pass 60 -> 54 ms
            d, w = block.fresh("dw"), block.fresh("w")
            block.emit(f"{d} = {self.leaves.grad_view('param', c.param, tuple(idx))}")
            block.emit(f"{w} = {self.leaves.view('eattr', c.eattr, ())}")
            block.emit(f"for {f} in range({w}.shape[0]):")
            block.nested().emit(f"{d}[{f}] += {ga} * {w}[{f}]")
        if "eattr" in wants and self._derived(c.eattr):
            acc = epi.fresh("acc")
            body, f = self._features_then_channels(
                epi, c, self.leaves.size("eattr", c.eattr, 0), lambda f: f"{acc} = {self.zero}",
                lambda f, a, m: f"{acc} += {gt}[{a}] * WT{c.op}[{f} * {m} + {a}]")
            self.leaves.grad_eattr(body, c.eattr, (f,), acc)

    @staticmethod
    def _features_then_channels(block: SourceBlock, c: EdgeContraction, features: str,
                                head, line) -> tuple[SourceBlock, str]:
        """Emit a loop over the ``features`` of the contraction ``c`` holding ``head(f)`` and
        a loop over its channels ``a`` (``m`` of them, ``GT``'s length) holding ``line(f, a,
        m)``; the outer loop's body and variable."""
        m, f, a = block.fresh("m"), block.fresh("f"), block.fresh("a")
        block.emit(f"{m} = GT{c.op}.shape[0]")
        block.emit(f"for {f} in range({features}):")
        body = block.nested()
        body.emit(head(f))
        body.emit(f"for {a} in range({m}):")
        body.nested().emit(line(f, a, m))
        return body, f

    def _contraction_weight_per_item(self, epi: SourceBlock, c: EdgeContraction) -> None:
        r"""The weight's cotangent of the contraction ``c`` summed over an item's edges in
        the scratch ``GW<op>`` (``[f, a]``: features first, so that an edge's update is f_e
        vectorised loops over the channels), zeroed at the item's start and added to the
        item's partial at its end, where the edge's rank-one update of the partial (``[a,
        f]``, k · f_e read–modify–writes) had cost GINE's pass over columns 30 % of its
        time:

        .. math:: \bar W[a, f] \mathrel{+}= \textstyle\sum_{p \in \text{item}}
                  \bar T_p[a]\, e_p[f]"""
        gt, gw, part = f"GT{c.op}", f"GW{c.op}", f"dP{c.param}"
        start, end = epi.items
        if ("weight", c.op) not in start.done:
            start.done.add(("weight", c.op))
            z = start.fresh("z")
            start.emit(f"for {z} in range({gw}.shape[0]):")
            start.nested().emit(f"{gw}[{z}] = {self.zero}")
            m, nf, flat = end.fresh("m"), end.fresh("nf"), end.fresh("dpf")
            a, f = end.fresh("a"), end.fresh("f")
            end.emit(f"{m} = {gt}.shape[0]")
            end.emit(f"{nf} = {gw}.shape[0] // {m}")
            end.emit(f"{flat} = {part}.reshape(({part}.shape[0], {part}.size // "
                     f"{part}.shape[0]))")
            end.emit(f"for {a} in range({m}):")
            inner = end.nested()
            inner.emit(f"for {f} in range({nf}):")
            inner.nested().emit(f"{flat}[{self.leaves.param_row}, {a} * {nf} + {f}] += "
                                f"{gw}[{f} * {m} + {a}]")
        e, w = epi.fresh("e"), epi.fresh("w")
        epi.emit(f"{w} = {self.leaves.view('eattr', c.eattr, ())}")
        self._features_then_channels(epi, c, f"{w}.shape[0]", lambda f: f"{e} = {w}[{f}]",
                                     lambda f, a, m: f"{gw}[{f} * {m} + {a}] += {e} * {gt}[{a}]")

    def input(self, block, scope, i: int, k: int, idx: tuple) -> str:
        """The value of input ``k`` of operation ``i`` at the (broadcast) index ``idx``."""
        op = self.ops[i]
        c = op.inputs[k]
        return self.value(block, scope, c, child_index(idx, op.trail, self.ops[c].trail, "0"))

    def number(self, i: int, k: int = 0) -> str:
        """Number ``k`` of operation ``i`` read at run time
        (:meth:`gblas_gnn.ir.primitives.Primitive.numbers`), in the program's dtype or, a
        wide one, in float64: what :meth:`Leaves.number` names."""
        at = self.s.number_at(i) + k
        value, wide = self.s.numbers[at]
        return self.leaves.number(at, value, np.dtype(np.float64) if wide else self.dtype)

    def fmt(self, template: str, x: str, y: str | None = None, alpha=None,
            a: str | None = None, am1: str | None = None) -> str:
        """A function's code template (:class:`gblas_gnn.ir.functions.Unary`) at ``x``
        (``y``: its value there; ``alpha``: its constant, written in unless ``a`` and
        ``am1`` give the code of it and of ``alpha - 1``)."""
        if a is None and alpha is not None:
            a, am1 = self.lit(alpha), self.lit(alpha - 1)
        pick = "max" if alpha is None or alpha <= 1 else "min"
        return template.format(x=x, y=y or "", a=a or "", am1=am1 or "", one=self.one,
                               zero=self.zero, half=self.lit(0.5), pick=pick,
                               rsqrt2=self.lit(np.sqrt(0.5)),
                               rsqrt2pi=self.lit(1 / np.sqrt(2 * np.pi)))

    def _expr(self, block, scope, i: int, idx: tuple) -> str:
        if i in self.cut:
            return self.leaves.softmax(i, idx)
        op = self.ops[i]
        return primitive(op.kind).emit(self, block, scope, i, op, idx)

    def through_view(self, scope: ValueScope, make, kind: str, slot: int, idx: tuple):
        """``view[c]`` when ``idx`` ends with the innermost channel loop's variable (and its
        prefix does not depend on it) and the generator gives views; None otherwise."""
        loop = scope.loop
        if loop is None or not idx or idx[-1] != loop or loop in idx[:-1]:
            return None
        key = (make.__name__, kind, slot, idx[:-1])
        name = scope.views.get(key)
        if name is None:
            base = make(kind, slot, idx[:-1])
            if base is None:
                return None
            name = f"w{len(scope.views)}_{loop}"
            scope.views[key] = (name, base)
        else:
            name = name[0]
        return f"{name}[{loop}]"

    @contextmanager
    def splitting(self, split: bool):
        """Code emitted inside runs in a channel loop the threads split (if ``split``, or if
        an enclosing one is)."""
        outside, self._split = self._split, self._split or split
        try:
            yield
        finally:
            self._split = outside

    @staticmethod
    def loop(block: SourceBlock, inner: ValueScope, var: str, channels: str,
             body: SourceBlock) -> None:
        """A channel loop over ``channels`` (a range expression): the views its body reads
        bound first, then the loop and body."""
        for name, base in inner.views.values():
            block.emit(f"{name} = {base}")
        block.emit(f"for {var} in {channels}:")
        block.lines.extend(body.lines)

    # ------------------------------------------------------------------ reverse mode
    def wants(self, i: int) -> bool:
        """Whether a cotangent of operation ``i`` reaches anything this code writes: a leaf
        whose cotangent :attr:`leaves` receives (:meth:`Leaves.receives`), an earlier
        softmax's buffer, a leaf whose primitive has a reverse rule of its own, or any of
        these through ``i``'s inputs. The reverse mode passes nothing to an operation that
        does not: no value is computed for it and no loop written, where LLVM had kept such
        dead channel loops (TransformerConv's light row pass with edge features re-summed
        its scores for a cotangent nothing read: 180 against 150 ms on one thread at M)."""
        found = self._wanted.get(i)
        if found is None:
            found = self._wanted[i] = self._reaches_a_write(i)
        return found

    def _reaches_a_write(self, i: int) -> bool:
        op = self.ops[i]
        if i in self.cut:
            return self.leaves.receives("softmax", i)
        if op.inputs:
            return any(self.wants(k) for k in op.inputs)
        if op.kind in ("row", "col", "param", "eattr"):
            return self.leaves.receives(op.kind, op.args[0])
        return type(primitive(op.kind)).emit_vjp is not Primitive.emit_vjp

    def reverse(self, block: SourceBlock, scope: ValueScope, seeds: dict) -> None:
        """Emit the reverse mode from ``seeds`` ``{(op, index): cotangent expression}``:
        every operation with a cotangent passes it to its inputs, in reverse topological
        order; leaves and earlier softmax outputs hand theirs to :attr:`leaves`. Only
        cotangents that reach a write are passed (:meth:`wants`)."""
        pending: dict = {}
        for key, expr in seeds.items():
            if self.wants(key[0]):
                self.accumulate(block, pending, key, expr)
        self.drain(block, scope, pending, inner=None, outer=None)

    def reverse_channels(self, block: SourceBlock, scope: ValueScope, var: str,
                         channels: str, seeds: dict) -> None:
        """The reverse mode from ``seeds`` given at every channel ``var`` of ``channels`` (a
        range expression): a loop whose body is one channel's, where what it gives to values
        that do not depend on ``var`` is summed into accumulators declared before the loop
        and passed on after it (as :meth:`reverse` does inside a contraction's loop): no
        cotangent is added to memory once per channel."""
        after: dict = {}
        for key, name in self.channel_loop_reverse(block, scope, var, channels,
                                                   seeds).items():
            self.accumulate(block, after, key, name)
        self.drain(block, scope, after, inner=None, outer=None)

    def channel_loop_reverse(self, block: SourceBlock, scope: ValueScope, var: str,
                             channels: str, seeds: dict, split: bool = False) -> dict:
        """Emit a loop over the channels ``var`` of ``channels`` whose body runs the reverse
        mode from ``seeds`` (inside a loop the threads split if ``split``), the cotangents of
        values that do not depend on ``var`` summed into accumulators declared (zeroed)
        before the loop; returns them, ``{(op, index): accumulator}``, for the caller to pass
        on after it."""
        seeds = {key: expr for key, expr in seeds.items() if self.wants(key[0])}
        if not seeds:
            return {}
        body, inner = block.deeper(), scope.child(var)
        pending: dict = {}
        outer: dict = {}
        with self.splitting(split):
            for key, expr in seeds.items():
                self.accumulate(body, pending, key, expr)
            self.drain(body, inner, pending, var, outer)
        for name in outer.values():
            block.emit(f"{name} = {self.zero}")
        self.loop(block, inner, var, channels, body)
        return outer

    def drain(self, block, scope, pending: dict, inner: str | None, outer: dict | None):
        """Process ``pending`` cotangents; inside a channel loop (``inner`` its variable)
        the cotangents of values that do not depend on it go to ``outer`` (accumulators
        declared before the loop)."""
        while pending:
            key = max(pending, key=lambda k: k[0])
            var = pending.pop(key)
            if inner is not None and inner not in key[1]:
                name = outer.get(key)
                if name is None:
                    name = outer[key] = block.fresh("g")
                block.emit(f"{name} += {var}")
                continue
            self._rule(block, scope, key[0], key[1], var, pending)

    def accumulate(self, block, pending: dict, key, expr: str) -> None:
        """Emit ``g = expr`` (the first cotangent of ``key``) or ``g += expr``."""
        var = pending.get(key)
        if var is None:
            var = block.fresh("g")
            block.emit(f"{var} = {expr}")
            pending[key] = var
        else:
            block.emit(f"{var} += {expr}")

    def push(self, block, pending, i: int, k: int, idx: tuple, expr: str) -> None:
        """Add ``expr`` to the cotangent of input ``k`` of operation ``i`` (nothing where
        that cotangent reaches no write: :meth:`wants`)."""
        op = self.ops[i]
        c = op.inputs[k]
        if not self.wants(c):
            return
        self.accumulate(block, pending,
                         (c, child_index(idx, op.trail, self.ops[c].trail, "0")), expr)

    def _rule(self, block, scope, i, idx, g, pending):
        if i in self.cut:
            self.leaves.grad_softmax(block, i, idx, g)
            return
        if i in self.contractions and block.prologue is not None and \
                block.epilogue is not None and not self._split and \
                self.leaves.view("eattr", self.contractions[i].eattr, ()) is not None:
            self._contraction_cotangent(block, self.contractions[i], idx, g)
            return
        op = self.ops[i]
        primitive(op.kind).emit_vjp(self, block, scope, i, op, idx, g, pending)


