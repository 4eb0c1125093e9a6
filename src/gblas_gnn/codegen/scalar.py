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
from dataclasses import dataclass, field

import numpy as np

from ..ir import functions as F
from ..ir.program import Structure

__all__ = ["SourceBlock", "ValueScope", "Leaves", "EdgeCode", "child_index", "literal"]

#: the operations of a structure (:mod:`.program`): the closed set code is emitted for
_KINDS = ("row", "col", "param", "const", "avals", "edges", "eattr", "dropout", "map", "zip",
          "sum", "expand", "softmax")


def literal(value: float, dtype: np.dtype) -> str:
    """A float constant in the program's dtype (float32 work must stay float32)."""
    name = "np.float32" if np.dtype(dtype) == np.float32 else "np.float64"
    return f"{name}({float(value)!r})"


def child_index(idx: tuple, parent: tuple, child: tuple) -> tuple:
    """The index (expressions) of a broadcast operand of trailing shape ``child``."""
    off = len(parent) - len(child)
    return tuple("0" if child[k] == 1 else idx[off + k] for k in range(len(child)))


class SourceBlock:
    """Lines of source at an indentation, with fresh names."""

    def __init__(self, indent: int = 0, counter: list | None = None):
        self.lines: list[str] = []
        self.indent = indent
        self._counter = counter if counter is not None else [0]

    def fresh(self, stem: str) -> str:
        self._counter[0] += 1
        return f"{stem}{self._counter[0]}"

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def nested(self) -> SourceBlock:
        """A block one level deeper writing into the same lines."""
        inner = SourceBlock(self.indent + 1, self._counter)
        inner.lines = self.lines
        return inner


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


class Leaves(ABC):
    """How a kernel reads its operands at an edge and where the reverse mode's cotangents
    go; a generator subclasses it (:class:`gblas_gnn.codegen.kernel_args.ArrayLeaves`).
    Indices are tuples of expressions over the leaf's own trailing shape."""

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
    def dropout(self, op: int, idx: tuple) -> str:
        """The keep-scale of dropout ``op`` at this edge."""

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
        """The same for where this pass accumulates a row or column operand's cotangent
        (None: not accumulated here, or no views)."""
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

    def _lit(self, v: float) -> str:
        return literal(v, self.dtype)

    def size(self, i: int, axis: int) -> str:
        """An expression for ``trail[axis]`` of operation ``i`` at run time."""
        op = self.ops[i]
        kind = op.kind
        if kind not in _KINDS:
            raise ValueError(f"unknown operation {kind!r}")
        if op.trail[axis] == 1:
            return "1"
        if kind in ("row", "col", "param", "eattr", "dropout"):
            return self.leaves.size(kind, op.args[0], axis)
        if kind == "softmax" or i in self.cut:
            return self.leaves.size("softmax", i, axis)
        if kind in ("map", "sum", "expand"):
            return self.size(op.inputs[0], axis)
        for c in op.inputs:                            # zip: an input with this axis
            tc = self.ops[c].trail
            pos = axis - (len(op.trail) - len(tc))
            if pos >= 0 and tc[pos] != 1:
                return self.size(c, pos)
        raise ValueError(f"no array gives the extent of axis {axis} of operation {i}")

    def _channels(self, var: str, child: int, axis: int) -> tuple[str, bool]:
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
            if self.ops[k].kind == "sum":
                return True
            stack.extend(self.ops[k].inputs)
        return False

    # ------------------------------------------------------------------ values
    def value(self, block: SourceBlock, scope: ValueScope, i: int, idx: tuple) -> str:
        key = (i, idx)
        hit = scope.get(key)
        if hit is not None:
            return hit
        expr = self._expr(block, scope, i, idx)
        name = block.fresh("v")
        block.emit(f"{name} = {expr}")
        scope.values[key] = name
        return name

    def _input(self, block, scope, i: int, k: int, idx: tuple) -> str:
        op = self.ops[i]
        c = op.inputs[k]
        return self.value(block, scope, c, child_index(idx, op.trail, self.ops[c].trail))

    def _fmt(self, fn: str, template: str, x: str, y: str | None = None, alpha=None) -> str:
        a = self._lit(alpha) if alpha is not None else ""
        am1 = self._lit(alpha - 1) if alpha is not None else ""
        pick = "max" if alpha is None or alpha <= 1 else "min"
        return template.format(x=x, y=y or "", a=a, am1=am1, one=self.one, zero=self.zero,
                               half=self._lit(0.5), pick=pick, rsqrt2=self._lit(np.sqrt(0.5)),
                               rsqrt2pi=self._lit(1 / np.sqrt(2 * np.pi)))

    def _expr(self, block, scope, i: int, idx: tuple) -> str:
        op = self.ops[i]
        kind, L = op.kind, self.leaves
        if i in self.cut or kind == "softmax":
            if i not in self.cut:
                raise ValueError("a softmax is read from its buffer only")
            return L.softmax(i, idx)
        if kind in ("row", "col", "eattr"):
            viewed = self._through_view(scope, L.view, kind, op.args[0], idx)
            if viewed is not None:
                return viewed
            return getattr(L, kind)(op.args[0], idx)
        if kind == "param":
            return L.param(op.args[0], idx)
        if kind == "expand":                # the appended unit axis indexes nothing
            return self.value(block, scope, op.inputs[0], idx[:-1])
        if kind == "const":
            return self._lit(op.args[0])
        if kind == "avals":
            return L.avals()
        if kind == "edges":
            return L.edges(op.args[0])
        if kind == "dropout":
            return L.dropout(i, idx)
        if kind == "map":
            fn, alpha = op.args
            x = self._input(block, scope, i, 0, idx)
            return self._fmt(fn, F.UNARY[fn].code, x, alpha=alpha)
        if kind == "zip":
            a = self._input(block, scope, i, 0, idx)
            b = self._input(block, scope, i, 1, idx)
            return _binary(op.args[0], a, b)
        if kind == "sum":
            child = op.inputs[0]
            acc = block.fresh("acc")
            c = block.fresh("c")
            block.emit(f"{acc} = {self.zero}")
            channels, split = self._channels(c, child, len(op.trail))
            body = SourceBlock(block.indent + 1, block._counter)
            inner = scope.child(c)
            outside, self._split = self._split, self._split or split
            v = self.value(body, inner, child, (*idx, c))
            body.emit(f"{acc} += {v}")
            self._split = outside
            self._loop(block, inner, c, channels, body)
            if split:
                block.emit(f"{acc} = {self.leaves.channel_total(acc)}")
            return acc
        raise ValueError(f"unknown operation {kind!r}")

    def _through_view(self, scope: ValueScope, make, kind: str, slot: int, idx: tuple):
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

    @staticmethod
    def _loop(block: SourceBlock, inner: ValueScope, var: str, channels: str,
              body: SourceBlock) -> None:
        """A channel loop over ``channels`` (a range expression): the views its body reads
        bound first, then the loop and body."""
        for name, base in inner.views.values():
            block.emit(f"{name} = {base}")
        block.emit(f"for {var} in {channels}:")
        block.lines.extend(body.lines)

    # ------------------------------------------------------------------ reverse mode
    def reverse(self, block: SourceBlock, scope: ValueScope, seeds: dict) -> None:
        """Emit the reverse mode from ``seeds`` ``{(op, index): cotangent expression}``:
        every operation with a cotangent passes it to its inputs, in reverse topological
        order; leaves and earlier softmax outputs hand theirs to :attr:`leaves`."""
        pending: dict = {}
        for key, expr in seeds.items():
            self._accumulate(block, pending, key, expr)
        self._drain(block, scope, pending, inner=None, outer=None)

    def _drain(self, block, scope, pending: dict, inner: str | None, outer: dict | None):
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

    def _accumulate(self, block, pending: dict, key, expr: str) -> None:
        var = pending.get(key)
        if var is None:
            var = block.fresh("g")
            block.emit(f"{var} = {expr}")
            pending[key] = var
        else:
            block.emit(f"{var} += {expr}")

    def _push(self, block, pending, i: int, k: int, idx: tuple, expr: str) -> None:
        op = self.ops[i]
        c = op.inputs[k]
        self._accumulate(block, pending,
                         (c, child_index(idx, op.trail, self.ops[c].trail)), expr)

    def _rule(self, block, scope, i, idx, g, pending):
        op, L = self.ops[i], self.leaves
        kind = op.kind
        if i in self.cut:
            L.grad_softmax(block, i, idx, g)
            return
        if kind in ("const", "avals", "edges", "dropout"):
            return
        if kind in ("row", "col", "eattr"):
            viewed = self._through_view(scope, L.grad_view, kind, op.args[0], idx)
            if viewed is not None:
                block.emit(f"{viewed} += {g}")
            else:
                getattr(L, f"grad_{kind}")(block, op.args[0], idx, g)
            return
        if kind == "expand":
            self._accumulate(block, pending, (op.inputs[0], idx[:-1]), g)
            return
        if kind == "param":
            L.grad_param(block, op.args[0], idx, g)
            return
        if kind == "map":
            fn, alpha = op.args
            x = self._input(block, scope, i, 0, idx)
            y = self.value(block, scope, i, idx)
            d = self._fmt(fn, F.UNARY[fn].code_derivative, x, y, alpha)
            self._push(block, pending, i, 0, idx, f"{g} * {d}")
            return
        if kind == "zip":
            a = self._input(block, scope, i, 0, idx)
            b = self._input(block, scope, i, 1, idx)
            ga, gb = _binary_vjp(op.args[0], a, b, self.value(block, scope, i, idx), g,
                                 self.zero)
            self._push(block, pending, i, 0, idx, ga)
            self._push(block, pending, i, 1, idx, gb)
            return
        if kind == "sum":
            self._sum_rule(block, scope, i, idx, g, pending)
            return
        raise ValueError(f"no reverse rule for {kind!r}")

    def _sum_rule(self, block, scope, i, idx, g, pending):
        """``Σ_c`` passes its cotangent to every channel: a loop whose body is the reverse
        mode of one channel; what it gives to values outside the loop is summed into
        accumulators declared before it."""
        child = self.ops[i].inputs[0]
        c = block.fresh("c")
        channels, split = self._channels(c, child, len(self.ops[i].trail))
        body = SourceBlock(block.indent + 1, block._counter)
        outer: dict = {}
        inner_pending: dict = {}
        inner = scope.child(c)
        outside, self._split = self._split, self._split or split
        self._accumulate(body, inner_pending, (child, (*idx, c)), g)
        self._drain(body, inner, inner_pending, c, outer)
        self._split = outside
        for name in outer.values():
            block.emit(f"{name} = {self.zero}")
        self._loop(block, inner, c, channels, body)
        for key, name in outer.items():
            if split:
                block.emit(f"{name} = {self.leaves.channel_total(name)}")
            self._accumulate(block, pending, key, name)


def _binary(op: str, a: str, b: str) -> str:
    if op == "add":
        return f"({a} + {b})"
    if op == "sub":
        return f"({a} - {b})"
    if op == "mul":
        return f"({a} * {b})"
    if op == "div":
        return f"({a} / {b})"
    if op == "maximum":                 # no branch (see functions.Unary); ties give b's value
        return f"max({b}, {a})"
    if op == "minimum":
        return f"min({b}, {a})"
    raise ValueError(f"unknown binary function {op!r}")


def _binary_vjp(op: str, a: str, b: str, out: str, g: str, zero: str) -> tuple[str, str]:
    if op == "add":
        return g, g
    if op == "sub":
        return g, f"(-{g})"
    if op == "mul":
        return f"{g} * {b}", f"{g} * {a}"
    if op == "div":
        return f"{g} / {b}", f"(-{g} * {out} / {b})"
    win = f"{a} > {b}" if op == "maximum" else f"{a} < {b}"
    return f"({g} if {win} else {zero})", f"({zero} if {win} else {g})"
