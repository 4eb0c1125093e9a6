r"""The tape of a composed forward and the scope it is recorded in.

A training-mode forward of a composed module (or :func:`gblas_gnn.compose.vjp`) runs inside a
:class:`Scope` that holds the executor and a :class:`Tape`. Every operation on a traced value
appends one :class:`Node` to the tape: its parents and its vector-Jacobian product, a function
from the cotangent of its output to the cotangents of its parents. :meth:`Tape.backward` walks
the nodes in reverse order of recording and accumulates

.. math:: \bar{x}_p \mathrel{+}= \mathrm{vjp}_v(\bar{v}) \quad \text{for every parent } p
   \text{ of every node } v ,

which is reverse-mode differentiation of the recorded program. In evaluation mode the scope has
no tape: operations still run through the traced values (so reductions over vertices and
edge expressions reach the executor) but nothing is recorded and nothing is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = ["Node", "Leaf", "Tape", "Scope", "current", "scope", "in_scope"]


class Node:
    """One recorded operation: ``parents`` (nodes) and ``vjp(cotangent) -> cotangents``."""

    __slots__ = ("parents", "vjp", "index", "zero", "fresh")

    def __init__(self, parents: Sequence[Node | None], vjp: Callable, index: int,
                 zero: Callable[[], Any] | None = None, fresh: bool = False):
        self.parents = tuple(parents)
        self.vjp = vjp
        self.index = index
        #: the zero cotangent of a node whose vjp runs even when nothing reaches it (a module
        #: whose backward must fill its grads); None for the others
        self.zero = zero
        #: whether the vjp returns arrays of its own that nothing else holds (a product's):
        #: the backward may sum other cotangents into them in place
        self.fresh = fresh


class Leaf(Node):
    """An input of the recorded program: the module input or a parameter ``(module, name)``."""

    __slots__ = ("key",)

    def __init__(self, key: Any, index: int):
        super().__init__((), _no_vjp, index)
        self.key = key


def _no_vjp(_):
    return ()


class Tape:
    """The nodes of one forward, in the order they were recorded."""

    def __init__(self):
        self.nodes: list[Node] = []

    def leaf(self, key: Any) -> Leaf:
        node = Leaf(key, len(self.nodes))
        self.nodes.append(node)
        return node

    def add(self, parents: Sequence[Node | None], vjp: Callable,
            zero: Callable[[], Any] | None = None, fresh: bool = False) -> Node:
        node = Node(parents, vjp, len(self.nodes), zero, fresh)
        self.nodes.append(node)
        return node

    def backward(self, output: Node, cotangent) -> dict[Any, Any]:
        """Cotangents of every leaf reached from ``output`` (keyed by the leaf's key); a node
        with a ``zero`` runs its vjp on it when no cotangent reaches it."""
        acc: dict[int, Any] = {output.index: cotangent}
        owned: set[int] = set()          # sums this backward allocated: added to in place
        products: set[int] = set()       # cotangents that are a product's own array
        leaves: dict[Any, Any] = {}
        for node in reversed(self.nodes[:output.index + 1]):
            g = acc.pop(node.index, None)
            if g is None:
                if node.zero is None:
                    continue
                g = node.zero()
            if isinstance(node, Leaf):
                leaves[node.key] = g
                continue
            for parent, pg in zip(node.parents, node.vjp(g), strict=True):
                if parent is None or pg is None:
                    continue
                k = parent.index
                prev = acc.get(k)
                if prev is None:
                    acc[k] = pg
                    if node.fresh:
                        products.add(k)
                elif k in owned or (k in products and _addable(prev, pg)):
                    prev += pg
                    acc[k] = prev
                elif node.fresh and _addable(pg, prev):
                    # into the product's own array: no third (n, k) array while the two
                    # are summed (issue 21); x + y and y + x are the same bits
                    pg += prev
                    acc[k] = pg
                    owned.add(k)
                else:
                    acc[k] = prev + pg
                    owned.add(k)
        self.nodes = []                  # one backward per forward: free what the vjps hold
        return leaves


def _addable(into, other) -> bool:
    """Whether ``into += other`` gives exactly ``other + into`` (same shape, and ``into``'s
    dtype is the sum's)."""
    return (getattr(into, "shape", None) == getattr(other, "shape", ()) and
            hasattr(into, "dtype") and into.dtype == getattr(other, "dtype", None))


class Scope:
    """Where a composed forward runs: its executor and, in training mode, its tape."""

    def __init__(self, executor, tape: Tape | None):
        self.executor = executor
        self.tape = tape
        #: the modules whose parameters are traced leaves of this tape
        self.modules: list = []
        #: the width of every graph operation run (the features an aggregation moves)
        self.widths: list[int] = []
        #: outputs of programs whose backward contexts hold them (see :meth:`released`)
        self.held: list[Any] = []

    def released(self, value):
        """``value`` as it may leave the forward: a program's output is also held by its
        backward context (the softmax term reads ``Z``), so the output handed to the user,
        who may write into it, is a copy when it shares memory with one; an output computed
        after the last program (a bias added, a mean over heads) is already its own array
        and is not copied again."""
        xp = self.executor.xp
        if any(xp.may_share_memory(value, h) for h in self.held):
            return value.copy()
        return value

    def record(self, parents: Sequence[Any], vjp: Callable,
               zero: Callable[[], Any] | None = None, fresh: bool = False) -> Node | None:
        """A node for an operation on ``parents`` (traced values or anything else), or None
        when nothing is recorded (evaluation mode, or no parent carries a node and the node
        need not run regardless: ``zero`` is None); ``fresh``: see :attr:`Node.fresh`."""
        if self.tape is None:
            return None
        nodes = [getattr(p, "node", None) for p in parents]
        if not any(n is not None for n in nodes) and zero is None:
            return None
        return self.tape.add(nodes, vjp, zero, fresh)


_STACK: list[Scope] = []


def current() -> Scope | None:
    """The innermost active scope, or None outside any composed forward."""
    return _STACK[-1] if _STACK else None


def in_scope() -> bool:
    return bool(_STACK)


@contextmanager
def scope(executor, tape: Tape | None) -> Iterator[Scope]:
    """Run a composed forward: ``gg.ops`` calls inside use ``executor`` and record on
    ``tape`` (None: evaluation mode)."""
    from ..executors import default

    s = Scope(executor, tape)
    _STACK.append(s)
    try:
        with default(executor):
            yield s
    finally:
        _STACK.pop()
