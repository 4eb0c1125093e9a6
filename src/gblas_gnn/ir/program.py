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
``const``     the number ``args[0]`` (kernels read it at run time)
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
from functools import cached_property
from typing import Any

from .primitives import primitive

__all__ = ["Op", "Operand", "Structure", "Program", "child_index", "depends_on"]


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
        its sizes from its arrays; only broadcasting, extent one or not, shapes its code)
        and every number a kernel reads at run time erased
        (:meth:`~gblas_gnn.ir.primitives.Primitive.kernel_args`): the key of compiled
        kernels."""
        def erase(shape):
            return tuple(1 if d == 1 else -1 for d in shape)

        ops = tuple(Op(o.kind, primitive(o.kind).kernel_args(o), o.inputs, erase(o.trail))
                    for o in self.ops)
        roles = tuple((role, erase(shape)) for role, shape in self.roles)
        return (ops, self.root, self.sink, roles, self.dtype, self.constants)

    @cached_property
    def _number_layout(self) -> tuple[tuple, tuple[int, ...]]:
        """:attr:`numbers` and the position of each operation's first one, found once."""
        numbers, starts = [], []
        for o in self.ops:
            starts.append(len(numbers))
            numbers.extend(primitive(o.kind).numbers(o))
        return tuple(numbers), tuple(starts)

    @property
    def numbers(self) -> tuple[tuple[float, bool], ...]:
        """The numbers the kernels read at run time, operation by operation
        (:meth:`~gblas_gnn.ir.primitives.Primitive.numbers`: ``(value, wide)``); a kernel
        takes their values as one float64 array, ``NUM``."""
        return self._number_layout[0]

    def number_at(self, i: int) -> int:
        """The position in :attr:`numbers` of operation ``i``'s first number."""
        return self._number_layout[1][i]


@dataclass
class Operand:
    """An array a program reads: its value, its traced form (None: a constant) and role
    (``row``, ``col``, ``param``, ``edges``, ``key``, ``x``)."""

    role: str
    value: Any
    traced: Any = None


@dataclass
class Program:
    """A structure bound to its pattern (an edge tensor of the executor) and operands."""

    structure: Structure
    pattern: Any
    operands: list[Operand] = field(default_factory=list)

    @property
    def heads(self) -> int | None:
        return self.structure.heads


def child_index(idx: tuple, parent: tuple, child: tuple, zero: Any = 0) -> tuple:
    """The index into a broadcast input of trailing shape ``child`` from the index ``idx``
    of its operation (trailing shape ``parent``): an axis of extent one reads ``zero`` (the
    number 0; the code generators pass ``"0"``)."""
    off = len(parent) - len(child)
    return tuple(zero if child[k] == 1 else idx[off + k] for k in range(len(child)))


def depends_on(ops, i: int, target: int) -> bool:
    """Whether operation ``i`` reads operation ``target`` (directly or through its inputs)."""
    stack, seen = [i], set()
    while stack:
        j = stack.pop()
        if j == target:
            return True
        if j in seen:
            continue
        seen.add(j)
        stack.extend(ops[j].inputs)
    return False
