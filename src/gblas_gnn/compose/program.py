r"""A sparse expression and what consumes it, in canonical form: one *edge program*.

When a dense result of a sparse expression is needed (an aggregation, a row or column
reduction) or its values are asked for, the expression DAG is flattened into a
:class:`Structure`: a tuple of :class:`Op` in topological order whose leaves refer to
operand *slots*, and the *sink* that consumes the root. The structure is data (names of
operations from a closed set, slot numbers, shapes and constants), never code, and it is
hashable: its :attr:`Structure.signature` keys the kernels an executor compiles for it. A
:class:`Program` binds a structure to the pattern it runs on and to the operand arrays.

Operations (``Op.kind``):

============  ====================================================================
``row``       operand ``slot`` gathered by target: ``X[i, …]``
``col``       operand ``slot`` gathered by source: ``X[j, …]``
``param``     operand ``slot`` broadcast over every edge: ``a[…]``
``const``     the number ``args[0]``
``avals``     the pattern's own values ``A[i, j]``
``edges``     the values of another edge tensor with the same pattern (operand ``slot``)
``dropout``   counter-based dropout scales (operand ``slot`` holds the key; ``args``:
              ``p``, heads)
``eattr``     operand ``slot``'s features of the edge: ``E[p, …]`` at CSR position ``p``
``expand``    its input with a unit axis appended (``S[..., None]``: a weight per head
              beside messages with a channel axis)
``map``       elementwise function ``args = (fn, alpha)`` of its input
``zip``       binary function ``args = (op,)`` of its two inputs (broadcasting)
``sum``       contraction of the last trailing axis of its input
``softmax``   stable row softmax of its input (per head)
============  ====================================================================

Sinks: ``("aggregate", aggr)`` (``Z = S ⊕ X``, the messages are operand ``x``),
``("spmm_t", semiring)`` (``Z = Sᵀ ⊕ X``), ``("rows", op)`` / ``("cols", op)`` (reductions
over the stored entries of a row / column), ``("values",)`` (the edge values) and
``("messages", op)``: the reduction (``sum``, ``max``, ``min``) over each row's edges of a
root of shape ``(heads, channels)``, messages computed at the edge
(:func:`gblas_gnn.ops.aggregate` of an expression, GINE's ``ReLU(x_j + W e_ji)``), into
``(n, heads, channels)``; no array of more than one value per edge and head exists for it,
forward or backward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .expr import (
    Bcast,
    Const,
    Dropout,
    EdgeAttr,
    EdgeLeaf,
    Expand,
    Expr,
    Gather,
    Map,
    Masked,
    Softmax,
    Sum,
    Zip,
    _same_pattern,
)
from .traced import Traced, value_of

__all__ = ["Op", "Operand", "Structure", "Program", "build"]


@dataclass(frozen=True)
class Op:
    """One operation of a program (see the module docstring)."""

    kind: str
    args: tuple
    inputs: tuple[int, ...]
    trail: tuple[int, ...]


@dataclass(frozen=True)
class Structure:
    """The program without its arrays: operations, root, sink, operand roles and dtype."""

    ops: tuple[Op, ...]
    root: int
    sink: tuple
    roles: tuple[tuple[str, tuple[int, ...]], ...]    # (role, trailing shape) per slot
    dtype: str
    #: edge-feature slots read as data: their cotangent is not derived
    constants: tuple[int, ...] = ()

    @property
    def heads(self) -> int | None:
        """Heads of the root (None: one value per edge)."""
        trail = self.ops[self.root].trail
        return trail[0] if trail else None

    @property
    def signature(self) -> tuple:
        """A hashable description that identifies the computation."""
        return (self.ops, self.root, self.sink, self.roles, self.dtype, self.constants)

    @property
    def kernel_signature(self) -> tuple:
        """:attr:`signature` with every extent above one replaced by ``-1`` (a kernel reads
        its sizes from its arrays; only broadcasting, extent one or not, shapes its code):
        the key of compiled kernels."""
        def erase(shape):
            return tuple(1 if d == 1 else -1 for d in shape)

        ops = tuple(Op(o.kind, _erase_args(o), o.inputs, erase(o.trail)) for o in self.ops)
        roles = tuple((role, erase(shape)) for role, shape in self.roles)
        return (ops, self.root, self.sink, roles, self.dtype, self.constants)


@dataclass
class Operand:
    """An array a program reads: its value, its traced form (None: a constant) and role
    (``row``, ``col``, ``param``, ``edges``, ``key``, ``x``)."""

    role: str
    value: Any
    traced: Traced | None = None


@dataclass
class Program:
    """A structure bound to its pattern (an edge tensor of the executor) and operands."""

    structure: Structure
    pattern: Any
    operands: list[Operand] = field(default_factory=list)

    @property
    def heads(self) -> int | None:
        return self.structure.heads


def _erase_args(op: Op) -> tuple:
    """An operation's constants as the kernels see them: a dropout's head count is read
    from its key operand, not written into the code."""
    if op.kind == "dropout":
        slot, p, heads = op.args
        return (slot, p, None if heads is None or heads == 1 else -1)
    return op.args


class _Builder:
    def __init__(self, pattern):
        self.pattern = pattern
        self.ops: list[Op] = []
        self.index: dict[int, int] = {}          # id(expr node) -> op index
        self.keys: dict[Any, int] = {}           # op identity -> op index (dedup)
        self.operands: list[Operand] = []
        self.slots: dict[tuple[str, int], int] = {}
        self.keep: list[Any] = []                # objects whose ids are used as keys

    def slot(self, role: str, obj) -> int:
        key = (role, id(obj))
        if key not in self.slots:
            self.keep.append(obj)
            traced = obj if isinstance(obj, Traced) and obj.node is not None else None
            self.slots[key] = len(self.operands)
            self.operands.append(Operand(role, value_of(obj), traced))
        return self.slots[key]

    def op(self, kind: str, args: tuple, inputs: tuple[int, ...], trail) -> int:
        key = (kind, args, inputs)
        if key not in self.keys:
            self.keys[key] = len(self.ops)
            self.ops.append(Op(kind, args, inputs, tuple(int(t) for t in trail)))
        return self.keys[key]

    def visit(self, e: Expr) -> int:
        hit = self.index.get(id(e))
        if hit is not None:
            return hit
        i = self._visit(e)
        self.index[id(e)] = i
        self.keep.append(e)
        return i

    def _visit(self, e: Expr) -> int:
        if isinstance(e, Gather):
            return self.op(e.side, (self.slot(e.side, e.X),), (), e.trail)
        if isinstance(e, Bcast):
            return self.op("param", (self.slot("param", e.value),), (), e.trail)
        if isinstance(e, Const):
            return self.op("const", (e.value,), (), ())
        if isinstance(e, EdgeLeaf):
            return self._edges(e.E)
        if isinstance(e, EdgeAttr):
            self._check(e.pattern)
            return self.op("eattr", (self.slot("eattr", e.value),), (), e.trail)
        if isinstance(e, Expand):
            return self.op("expand", (), (self.visit(e.x),), e.trail)
        if isinstance(e, Dropout):
            self._check(e.pattern)
            key = np.uint64(e.key)
            return self.op("dropout", (self.slot("key", _Key(key)), e.p, e.heads), (),
                           e.trail)
        if isinstance(e, Map):
            return self.op("map", (e.fn, e.alpha), (self.visit(e.x),), e.trail)
        if isinstance(e, Zip):
            return self.op("zip", (e.op,), (self.visit(e.a), self.visit(e.b)), e.trail)
        if isinstance(e, Sum):
            return self.op("sum", (), (self.visit(e.x),), e.trail)
        if isinstance(e, Softmax):
            return self.op("softmax", (), (self.visit(e.x),), e.trail)
        if isinstance(e, Masked):
            self._check(e.A)
            inner = self.visit(e.x)
            if e.structural:
                return inner
            return self.op("zip", ("mul",), (self.op("avals", (), (), ()), inner), e.trail)
        raise TypeError(f"cannot compile {type(e).__name__}")

    def _edges(self, E) -> int:
        self._check(E)
        if E is self.pattern:
            return self.op("avals", (), (), ())
        return self.op("edges", (self.slot("edges", E),), (), ())

    def _check(self, P) -> None:
        if not _same_pattern(P, self.pattern):
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


def build(root: Expr, sink: tuple, x=None) -> Program:
    """Flatten the sparse expression ``root`` and its sink into a :class:`Program`; ``x`` is
    the dense operand of an aggregation sink (the messages)."""
    if not root.is_sparse:
        raise TypeError("this operation needs a sparse operand: mask the virtual tensor "
                        "first (A * expr)")
    if sink[0] == "messages" and len(root.trail) != 2:
        raise ValueError(f"the messages of a row reduction have shape (rows, cols, heads, "
                         f"channels), got {root.shape}")
    if len(root.trail) > (2 if sink[0] == "messages" else 1):
        raise ValueError(f"an expression of shape {root.shape} has a channel axis: contract "
                         "it first (E @ a or E.sum(-1))")
    b = _Builder(root.pattern)
    r = b.visit(root)
    if x is not None:
        b.slot("x", x)
    operands = [Operand(o.role, o.value.value if isinstance(o.value, _Key) else o.value,
                        o.traced) for o in b.operands]
    roles = tuple((o.role, _role_shape(o)) for o in operands)
    dtype = root.dtype if root.dtype is not None else np.dtype(np.float64)
    constants = tuple(slot for slot, o in enumerate(operands)
                      if o.role == "eattr" and o.traced is None)
    structure = Structure(tuple(b.ops), r, sink, roles, str(np.dtype(dtype)), constants)
    return Program(structure, root.pattern, operands)
