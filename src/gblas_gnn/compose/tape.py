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

A value a backward context or a module's cache keeps may also be what a forward returns (a
program's output, ELU's output). The rule that keeps a user from changing a gradient by
writing into what they were handed: a value is copied where it leaves for code that may write
into it, and only if it shares memory with something kept (:meth:`Holder.released`). Composed
forwards (:class:`Scope`) and containers (``Sequential``) are :class:`Holder` frames: what
their parts keep is registered with them (:func:`hand_out`), and they apply the rule once,
to the value they return.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = ["Node", "Leaf", "Summed", "Tape", "Holder", "Scope", "current", "scope", "in_scope",
           "frame", "hand_out", "known_vertex_sum", "vertex_sum"]


class Node:
    """One recorded operation: ``parents`` (nodes) and ``vjp(cotangent) -> cotangents``
    (``vjp(cotangent, owned)`` for a node that may take its cotangent over, :attr:`donate`;
    ``vjp(cotangent, into)`` for one that may add into its parents' sums, :attr:`adds`)."""

    __slots__ = ("parents", "vjp", "index", "zero", "fresh", "donate", "adds")

    def __init__(self, parents: Sequence[Node | None], vjp: Callable, index: int,
                 zero: Callable[[], Any] | None = None, fresh: bool = False,
                 donate: bool = False, adds: bool = False):
        if donate and adds:
            raise ValueError("a node either takes its cotangent over or adds into its "
                             "parents' sums, not both")
        self.parents = tuple(parents)
        self.vjp = vjp
        self.index = index
        #: the zero cotangent of a node whose vjp runs even when nothing reaches it (a module
        #: whose backward must fill its grads); None for the others
        self.zero = zero
        #: whether the vjp returns arrays of its own that nothing else holds (a product's):
        #: the backward may sum other cotangents into them in place
        self.fresh = fresh
        #: whether the vjp takes a second argument, ``owned``: True when its cotangent is an
        #: array the backward itself made and holds alone (a sum it allocated, a product's
        #: own array), which the vjp may then overwrite with its result instead of writing a
        #: fresh array (a row normalisation's backward at n = 2²⁰, k = 32: 128 MiB less to
        #: map); never the caller's cotangent. What it returns for an owned cotangent is the
        #: backward's own too (a reshape's view of it)
        self.donate = donate
        #: whether the vjp takes a second argument, ``into``: per parent, the cotangent summed
        #: so far when the backward owns it (else None), which the vjp may add its own into
        #: and hand back as :class:`Summed` (a product's ``G Wᵀ`` accumulated by the GEMM
        #: itself, a slice's cotangent added into its rows: no fresh (n, k) array and no
        #: second pass to sum the two)
        self.adds = adds


class Leaf(Node):
    """An input of the recorded program: the module input or a parameter ``(module, name)``."""

    __slots__ = ("key",)

    def __init__(self, key: Any, index: int):
        super().__init__((), _no_vjp, index)
        self.key = key


def _no_vjp(_):
    return ()


def _spent(*_):
    raise RuntimeError("a vjp ran twice: the tape runs each node's once")


class Summed:
    """What a vjp of :attr:`Node.adds` returns for a parent whose offered sum ``value`` it
    added its cotangent into (in place): the tape keeps ``value`` as that parent's sum."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


class Tape:
    """The nodes of one forward, in the order they were recorded."""

    def __init__(self):
        self.nodes: list[Node] = []

    def leaf(self, key: Any) -> Leaf:
        node = Leaf(key, len(self.nodes))
        self.nodes.append(node)
        return node

    def add(self, parents: Sequence[Node | None], vjp: Callable,
            zero: Callable[[], Any] | None = None, fresh: bool = False,
            donate: bool = False, adds: bool = False) -> Node:
        node = Node(parents, vjp, len(self.nodes), zero, fresh, donate, adds)
        self.nodes.append(node)
        return node

    def backward(self, output: Node, cotangent, sums=None) -> dict[Any, Any]:
        """Cotangents of every leaf reached from ``output`` (keyed by the leaf's key); a node
        with a ``zero`` runs its vjp on it when no cotangent reaches it. ``sums``: the
        cotangent's sums over vertices when the caller has them, which :func:`vertex_sum`
        gives the vjps that sum that very cotangent (it is never written into: the tape owns
        only the sums it allocates)."""
        token = _ROOT_SUMS.set(None if sums is None else (cotangent, sums))
        try:
            return self._backward(output, cotangent)
        finally:
            _ROOT_SUMS.reset(token)

    def _backward(self, output: Node, cotangent) -> dict[Any, Any]:
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
            fresh = node.fresh
            if node.donate:
                ours = node.index in owned or node.index in products
                grads = node.vjp(g, ours)
                fresh = fresh or ours
            elif node.adds:
                grads = node.vjp(g, _offers(node.parents, acc, owned, products))
            else:
                grads = node.vjp(g)
            # what only this vjp held (the forward's values it read) is freed now, not when
            # the whole backward ends: HGT's activations go before its edge program's backward
            node.vjp = _spent
            del g
            for parent, pg in zip(node.parents, grads, strict=True):
                if parent is None or pg is None:
                    continue
                k = parent.index
                prev = acc.get(k)
                if isinstance(pg, Summed):
                    if pg.value is not prev:
                        raise RuntimeError("a vjp handed back a sum it was not offered")
                    continue
                if prev is None:
                    acc[k] = pg
                    if fresh:
                        products.add(k)
                elif k in owned or (k in products and _addable(prev, pg)):
                    prev += pg
                    acc[k] = prev
                elif fresh and _addable(pg, prev):
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


#: the cotangent the running backward started from and its sums over vertices, when its
#: caller had them (:meth:`Tape.backward`)
_ROOT_SUMS: ContextVar[tuple | None] = ContextVar("root_sums", default=None)


def known_vertex_sum(g):
    """A copy of ``g``'s sums over vertices when ``g`` is the very cotangent the running
    backward started from and its caller handed them (each gradient its own array: a
    module's check of ``dout`` read them off already), else None."""
    known = _ROOT_SUMS.get()
    if known is not None and g is known[0]:
        return known[1].copy()
    return None


def vertex_sum(ex, g):
    """``ex.vertex_sum(g)``, or the sums :func:`known_vertex_sum` has."""
    known = known_vertex_sum(g)
    return ex.vertex_sum(g) if known is None else known


def _offers(parents: Sequence[Node | None], acc: dict, owned: set, products: set
            ) -> tuple:
    """What a vjp of :attr:`Node.adds` may add into: per parent, its sum so far when the
    backward owns it (a sum it allocated, a product's own array), else None; a parent that
    appears twice is offered once (two in-place additions of one offer would be one)."""
    seen: set[int] = set()
    out = []
    for parent in parents:
        k = None if parent is None else parent.index
        mine = k is not None and k not in seen and (k in owned or k in products)
        out.append(acc.get(k) if mine else None)
        if k is not None:
            seen.add(k)
    return tuple(out)


def _addable(into, other) -> bool:
    """Whether ``into += other`` gives exactly ``other + into`` (same shape, and ``into``'s
    dtype is the sum's)."""
    return (getattr(into, "shape", None) == getattr(other, "shape", ()) and
            hasattr(into, "dtype") and into.dtype == getattr(other, "dtype", None))


class Holder:
    """A frame that hands values on without writing into them (a composed forward, a
    container's forward): what its parts keep for their backward is registered in
    :attr:`held`, and the rule is applied once, to the value it returns
    (:meth:`released`).

    Args:
        xp: the array module of the values.
    """

    def __init__(self, xp: Any):
        self.xp = xp
        #: arrays kept by backward contexts or caches that values of this frame may share
        self.held: list[Any] = []

    def released(self, value: Any) -> Any:
        """``value`` as it may leave the frame for code that may write into it: a copy when
        it shares memory with a kept array (a program's output, which its context reads for
        the softmax term; ELU's output, which its cache reads for the slope), else itself (an
        output computed after the last of those, a bias added or a mean over heads, is
        already its own array and is not copied again)."""
        return _unshared(value, self.held, self.xp)


class Scope(Holder):
    """Where a composed forward runs: its executor and, in training mode, its tape."""

    def __init__(self, executor, tape: Tape | None):
        super().__init__(executor.xp)
        self.executor = executor
        self.tape = tape
        #: the modules whose parameters are traced leaves of this tape
        self.modules: list = []
        #: the width of every graph operation run (the features an aggregation moves)
        self.widths: list[int] = []
        #: edge features read, by id: ``(features, their traced values)`` (the backward
        #: takes the values' cotangents back to the features the graph was given)
        self.features: dict[int, tuple[Any, Any]] = {}

    def record(self, parents: Sequence[Any], vjp: Callable,
               zero: Callable[[], Any] | None = None, fresh: bool = False,
               donate: bool = False, adds: bool = False) -> Node | None:
        """A node for an operation on ``parents`` (traced values or anything else), or None
        when nothing is recorded (evaluation mode, or no parent carries a node and the node
        need not run regardless: ``zero`` is None); ``fresh``, ``donate``, ``adds``: see
        :attr:`Node.fresh`, :attr:`Node.donate`, :attr:`Node.adds`."""
        if self.tape is None:
            return None
        nodes = [getattr(p, "node", None) for p in parents]
        if not any(n is not None for n in nodes) and zero is None:
            return None
        return self.tape.add(nodes, vjp, zero, fresh, donate, adds)


_STACK: list[Scope] = []
#: the forwards being run, innermost last: a :class:`Holder` (a composed forward, a
#: container's) or None (any other module's, whose code may write into what it is handed)
_FRAMES: list[Holder | None] = []


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
        with default(executor), frame(s):
            yield s
    finally:
        _STACK.pop()


@contextmanager
def frame(holder: Holder | None) -> Iterator[Holder | None]:
    """Run a module's forward as the innermost frame: ``holder`` for a container (its
    children hand their outputs to it), None for any other module."""
    _FRAMES.append(holder)
    try:
        yield holder
    finally:
        _FRAMES.pop()


def hand_out(value: Any, kept: Sequence[Any], xp: Any) -> Any:
    """``value``, a module's output, as its caller gets it, when the module keeps ``kept``
    for its backward: a caller that is a :class:`Holder` (a composed forward, a container)
    takes it as it is and registers ``kept``; any other caller, whose code may write into
    it, gets a copy if it shares memory with a kept array (:meth:`Holder.released`)."""
    if not kept:
        return value
    caller = _FRAMES[-1] if _FRAMES else None
    if caller is not None:
        caller.held.extend(kept)
        return value
    return _unshared(value, kept, xp)


def _unshared(value, kept: Sequence[Any], xp):
    """``value``, or a copy of it when it shares memory with an array of ``kept``."""
    if any(xp.may_share_memory(value, k) for k in kept):
        return value.copy()
    return value
