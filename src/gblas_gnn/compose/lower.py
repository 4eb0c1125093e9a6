"""Lowering a sparse expression and its sink to an edge program (:mod:`gblas_gnn.ir.program`).

:func:`build` flattens the expression DAG into operations in topological order: each node
adds its own operation (:meth:`gblas_gnn.compose.expr.Expr.lower`) through the
:class:`Builder`, which numbers the operand slots, shares repeated operations and checks that
one expression reads one pattern.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..executors import get_executor
from ..executors.edges import same_pattern
from ..ir.program import Op, Operand, Program, Structure
from ..ir.sinks import sink_rule
from .traced import Traced, value_of

__all__ = ["Builder", "build", "patterns_match"]


def patterns_match(P, Q) -> bool:
    """Whether edge tensors ``P`` and ``Q`` store the same entries (read through the default
    executor)."""
    return same_pattern(P, Q, get_executor(None))


class Builder:
    """The operations and operand slots of one program under construction."""

    def __init__(self, pattern):
        self.pattern = pattern
        self.ops: list[Op] = []
        self.index: dict[int, int] = {}          # id(expr node) -> op index
        self.keys: dict[Any, int] = {}           # op identity -> op index (dedup)
        self.operands: list[Operand] = []
        self.slots: dict[tuple[str, int], int] = {}
        self.keep: list[Any] = []                # objects whose ids are used as keys

    def slot(self, role: str, obj) -> int:
        """The operand slot of ``obj`` in ``role`` (one slot per object and role)."""
        key = (role, id(obj))
        if key not in self.slots:
            self.keep.append(obj)
            traced = obj if isinstance(obj, Traced) and obj.node is not None else None
            self.slots[key] = len(self.operands)
            self.operands.append(Operand(role, value_of(obj), traced))
        return self.slots[key]

    def key(self, value) -> int:
        """A fresh slot holding a dropout key."""
        return self.slot("key", _Key(value))

    def op(self, kind: str, args: tuple, inputs: tuple[int, ...], trail) -> int:
        """The index of operation ``kind`` (an equal one already added is shared)."""
        key = (kind, args, inputs)
        if key not in self.keys:
            self.keys[key] = len(self.ops)
            self.ops.append(Op(kind, args, inputs, tuple(int(t) for t in trail)))
        return self.keys[key]

    def visit(self, e) -> int:
        """The index of the operation of expression node ``e`` (lowered once)."""
        hit = self.index.get(id(e))
        if hit is not None:
            return hit
        i = e.lower(self)
        self.index[id(e)] = i
        self.keep.append(e)
        return i

    def edges(self, E) -> int:
        """The values of edge tensor ``E``: the pattern's own, or another operand's."""
        self.check(E)
        if E is self.pattern:
            return self.op("avals", (), (), ())
        return self.op("edges", (self.slot("edges", E),), (), ())

    def check(self, P) -> None:
        """``ValueError`` unless ``P`` stores the program's pattern."""
        if not patterns_match(P, self.pattern):
            raise ValueError("one expression mixes edge tensors of different patterns")


class _Key:
    """A dropout key as an operand (the object identity keys the slot)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def _role_shape(o: Operand) -> tuple[int, ...]:
    """The part of an operand's shape a kernel depends on: the trailing shape of a
    vertex-indexed array, the whole shape of a parameter, nothing for the rest."""
    if o.role in ("row", "col", "x", "eattr"):
        return tuple(np.shape(o.value))[1:]
    if o.role == "param":
        return tuple(np.shape(o.value))
    return ()


def build(root, sink: tuple, x=None, edges=None) -> Program:
    """Flatten the sparse expression ``root`` and its sink into a :class:`Program`; ``x`` is
    the dense operand of an aggregation sink (the messages), ``edges`` the edge features
    (:class:`~gblas_gnn.compose.expr.EdgeAttr`) it appends to them: their slot becomes the
    sink's third element (:func:`gblas_gnn.ir.sinks.edge_messages`)."""
    if not root.is_sparse:
        raise TypeError("this operation needs a sparse operand: mask the virtual tensor "
                        "first (A * expr)")
    sink_rule(sink).check_root(root)
    b = Builder(root.pattern)
    r = b.visit(root)
    if x is not None:
        b.slot("x", x)
    if edges is not None:
        b.check(edges.pattern)
        sink = (*sink, b.slot("eattr", edges.value))
    operands = [Operand(o.role, o.value.value if isinstance(o.value, _Key) else o.value,
                        o.traced) for o in b.operands]
    roles = tuple((o.role, _role_shape(o)) for o in operands)
    dtype = root.dtype if root.dtype is not None else np.dtype(np.float64)
    constants = tuple(slot for slot, o in enumerate(operands)
                      if o.role == "eattr" and o.traced is None)
    structure = Structure(tuple(b.ops), r, sink, roles, str(np.dtype(dtype)), constants)
    return Program(structure, root.pattern, operands)
