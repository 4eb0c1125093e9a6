r"""Traced dense arrays: the values a composed forward computes with.

Inside a composed forward the input ``H`` and every ``self.params[name]`` are
:class:`Traced` arrays. They support ``@``, ``+ − × ÷`` and ``**`` with arrays, rows and
scalars on either side, unary ``−``, ``.T``, basic slicing, ``.reshape``, ``.sum`` /
``.mean`` over an axis, the numpy ufuncs of :mod:`.functions` (``np.exp(X)``), and every
``gg.ops`` function. Each operation computes at once on the executor and, in training mode,
records its vector-Jacobian product on the tape (:mod:`.tape`).

A traced array knows whether its axis 0 runs over **vertices** (``H`` and whatever is
computed row by row from it) or not (parameters). That decides how a reduction over that axis
runs: on one process it is a sum, on an MPI grid a collective (the executor's
:meth:`~gblas_gnn.executors.Executor.vertex_sum` and
:meth:`~gblas_gnn.executors.Executor.inner`), so a composition is right on every executor.
The rules, for :math:`Y = X W` with vertex-indexed :math:`X` and a parameter :math:`W`:
:math:`\bar{X} = \bar{Y} W^\top`, :math:`\bar{W} = X^\top \bar{Y}` (a reduction over
vertices); for a bias :math:`Y = X + b`: :math:`\bar{b} = \sum_i \bar{Y}_i`.

Converting a traced array to a Python number or to a plain array would drop its gradient
silently, so ``float(x)``, ``bool(x)`` and ``np.asarray(x)`` raise; :meth:`Traced.detach`
gives the value when that is what is meant.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ..ir import functions as F
from .tape import Summed, current, vertex_sum

__all__ = ["Lazy", "Traced", "ufunc_call", "lift", "value_of", "is_traced", "record", "concat",
           "apply_unary", "apply_binary", "VertexTranspose", "vertex_rows"]


def is_traced(x) -> bool:
    return isinstance(x, Traced)


def value_of(x):
    """The array (or scalar) behind ``x``."""
    return x.value if isinstance(x, Traced) else x


def _scope():
    s = current()
    if s is None:
        raise RuntimeError("traced arrays compute inside a composed forward only")
    return s


def record(value, parents, vjp, vertex: bool, zero=None, fresh: bool = False,
           donate: bool = False, adds: bool = False, live: slice | None = None) -> Traced:
    """A traced result: ``value``, recorded with ``vjp`` over ``parents`` in training mode
    (``zero``, ``fresh``, ``donate`` and ``adds``: see :meth:`.tape.Scope.record`; ``live``:
    :attr:`Traced.live`)."""
    return Traced(value, _scope().record(parents, vjp, zero, fresh, donate, adds), vertex,
                  live)


def lift(x, vertex: bool = False) -> Traced:
    """``x`` as a traced value (an array of the executor; no node: a constant)."""
    if isinstance(x, Traced):
        return x
    ex = _scope().executor
    return Traced(ex.asarray(x), None, vertex)


class VertexTranspose:
    """``X.T`` of a vertex-indexed ``X``: only ``X.T @ Y`` (a reduction over vertices,
    the executor's :meth:`~gblas_gnn.executors.Executor.inner`) is defined."""

    def __init__(self, X: Traced):
        self.X = X

    def __matmul__(self, other):
        other = _as_traced(other)
        if other is NotImplemented or not other.vertex:
            raise TypeError("X.T @ Y of a vertex-indexed X needs a vertex-indexed Y "
                            "(it sums over vertices)")
        return _inner(self.X, other)

    @property
    def T(self) -> Traced:
        return self.X


def _as_traced(x):
    if isinstance(x, Traced):
        return x
    if isinstance(x, numbers.Real) and not isinstance(x, bool):
        return x
    ex = _scope().executor
    if isinstance(x, (np.ndarray, ex.xp.ndarray)) or np.isscalar(x):
        return Traced(ex.asarray(x), None, False)
    return NotImplemented


def _unbroadcast(ex, g, shape: tuple, operand_vertex: bool, result_vertex: bool):
    """Sum the cotangent ``g`` of a broadcast result down to an operand of ``shape``; a sum
    over the vertex axis of a result whose operand does not run over vertices is the
    executor's :meth:`vertex_sum`."""
    extra = g.ndim - len(shape)
    vertex_axis = result_vertex and not operand_vertex and g.ndim > 0 and \
        (extra > 0 or shape[0] == 1)
    if vertex_axis:
        g = vertex_sum(ex, g)                    # drops axis 0
        if extra == 0:
            g = g[None]
        else:
            extra -= 1
    if extra:
        g = g.sum(axis=tuple(range(extra)))
    axes = tuple(k for k, s in enumerate(shape) if s == 1 and g.shape[k] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g.reshape(shape)


def apply_binary(op: str, a, b):
    """``a op b`` for traced values and scalars (numpy broadcasting)."""
    ex = _scope().executor
    xp = ex.xp
    a, b = _as_traced(a), _as_traced(b)
    if a is NotImplemented or b is NotImplemented:
        return NotImplemented
    av, bv = value_of(a), value_of(b)
    if not isinstance(a, Traced):
        av = bv.dtype.type(av)
    if not isinstance(b, Traced):
        bv = av.dtype.type(bv)
    out = F.binary_forward(xp, op, av, bv)
    a_vertex = isinstance(a, Traced) and a.vertex
    b_vertex = isinstance(b, Traced) and b.vertex
    vertex = a_vertex or b_vertex
    ashape, bshape = np.shape(av), np.shape(bv)

    need = (isinstance(a, Traced) and a.node is not None,
            isinstance(b, Traced) and b.node is not None)
    # the vjp keeps what binary_vjp reads of this op only: a sum or a difference nothing, so
    # that e.g. a layer's output Z + b is not held until the backward (issue 21)
    held = (None if op in ("add", "sub", "div") else av,
            None if op in ("add", "sub") else bv,
            out if op == "div" else None)
    del av, bv

    def vjp(g):
        ga, gb = F.binary_vjp(xp, op, *held, g, need)
        return (_unbroadcast(ex, ga, ashape, a_vertex, vertex) if need[0] else None,
                _unbroadcast(ex, gb, bshape, b_vertex, vertex) if need[1] else None)

    return record(out, [a, b], vjp, vertex)


def apply_unary(fn: str, x: Traced, alpha=None) -> Traced:
    """``f(x)`` of the table in :mod:`.functions`; on the live rows alone of an ``x`` that has
    them when :math:`f(0) = 0` (:func:`_apply_unary_live`)."""
    alpha = F.check_unary(fn, alpha)
    xp = _scope().executor.xp
    xv = x.value
    if x.live is not None and F.keeps_zero(fn, xv.dtype, alpha):
        return _apply_unary_live(fn, x, alpha)
    y = F.unary(xp, fn, xv, alpha)

    def vjp(g):
        return (F.UNARY[fn].cotangent(xp, xv, y, g, alpha),)

    return record(y, [x], vjp, x.vertex)


def _outside(live: slice) -> list[slice]:
    """The rows before and after the live rows ``live``."""
    return [slice(0, live.start), slice(live.stop, None)]


def _apply_unary_live(fn: str, x: Traced, alpha) -> Traced:
    r"""``f(x)`` for an ``x`` that is 0 outside its live rows :math:`L`, with :math:`f(0) =
    0`: :math:`f` on the rows of :math:`L` alone, 0 elsewhere (live rows: the result's).
    Its cotangent :math:`\bar y_L \, f'(x_L)` on :math:`L`, 0 elsewhere: no backward reads
    it there (:attr:`Traced.live`). HGT's GELU reads its targets' rows of the stacked set,
    not the source blocks' zeros."""
    ex = _scope().executor
    xp = ex.xp
    xv, live = x.value, x.live
    f = F.UNARY[fn]
    y = ex.zeroed_outside(xv.shape, xv.dtype, _outside(live))
    f.apply(xp, xv[live], alpha, out=y[live])

    def vjp(g):
        dx = ex.zeroed_outside(xv.shape, xp.result_type(xv, g), _outside(live))
        f.cotangent(xp, xv[live], y[live], xp.ascontiguousarray(g[live]), alpha, out=dx[live])
        return (dx,)

    return record(y, [x], vjp, x.vertex, fresh=True, live=live)


def _matmul(a: Traced, b: Traced) -> Traced:
    ex = _scope().executor
    xp = ex.xp
    if b.vertex:
        raise TypeError("A @ X with a vertex-indexed right operand is not defined; for the "
                        "reduction over vertices write X.T @ Y")
    av, bv = a.value, b.value
    if bv.ndim not in (1, 2):
        raise ValueError(f"the right operand of @ must be 1-D or 2-D, got shape {bv.shape}")
    if av.shape[-1] != bv.shape[0]:
        raise ValueError(f"@: inner dimensions differ, {av.shape} @ {bv.shape}")
    vector = bv.ndim == 1
    B = bv[:, None] if vector else bv
    if a.vertex:
        A2 = av.reshape(-1, av.shape[-1])
        out = ex.gemm(A2, B).reshape(*av.shape[:-1], B.shape[1])
    else:
        out = xp.matmul(av, B)
    if vector:
        out = out[..., 0]

    def vjp(g, into):
        G = g[..., None] if vector else g
        G2 = G.reshape(-1, G.shape[-1])
        if not a.vertex:
            ga = xp.matmul(G, B.T).reshape(av.shape)
            gb = xp.matmul(av.reshape(-1, av.shape[-1]).T, G2)
            return ga, (gb[:, 0] if vector else gb)
        # G Bᵀ summed by the product itself into the cotangent the backward holds for `a`
        # (the attention's messages X, whose scores SD = X B come after them)
        target = _rows_into(into[0], av.shape, xp.result_type(G2, B))
        ga, gb = ex.matmul_vjp(G2, B, av.reshape(-1, av.shape[-1]), into=target)
        return (Summed(into[0]) if target is not None else ga.reshape(av.shape),
                gb[:, 0] if vector else gb)

    # products: both cotangents are new arrays (views of them), held by nothing else
    return record(out, [a, b], vjp, a.vertex, fresh=True, adds=True)


def _rows_into(offer, shape: tuple, dtype):
    """The 2-D C-contiguous view of an offered sum (:attr:`.tape.Node.adds`) that a
    cotangent of ``shape`` and ``dtype`` may be added into, or None (nothing offered, or a
    sum of another shape, dtype or layout)."""
    if (offer is None or tuple(offer.shape) != tuple(shape) or offer.dtype != dtype
            or not offer.flags.c_contiguous):
        return None
    return offer.reshape(-1, shape[-1])


def _inner(X: Traced, Y: Traced) -> Traced:
    ex = _scope().executor
    if X.value.ndim != 2 or Y.value.ndim != 2:
        raise ValueError("X.T @ Y needs 2-D vertex-indexed operands, got shapes "
                         f"{X.value.shape} and {Y.value.shape}")
    if X.value.shape[0] != Y.value.shape[0]:
        raise ValueError(f"X.T @ Y: X has {X.value.shape[0]} rows, Y {Y.value.shape[0]}")
    Xv, Yv = X.value, Y.value
    out = ex.inner(Xv, Yv)

    def vjp(g):
        return ex.gemm(Yv, g.T), ex.gemm(Xv, g)

    return record(out, [X, Y], vjp, False)


def vertex_rows(g, W) -> Traced:
    r"""The rows of ``W`` (``(n, ...)``, a parameter: row ``v`` belongs to vertex ``v`` of
    ``g``) as a vertex-indexed array: this process's vertices' rows (all of them on one
    process, :attr:`~gblas_gnn.dist.DistGraph.vertex_ids` on a grid). A one-hot input
    without the n × n matrix: :math:`I W = W`. Its cotangent reaches ``W`` through the
    executor's :meth:`~gblas_gnn.executors.Executor.vertex_scatter`, every vertex once."""
    W = _as_traced(W)
    if not isinstance(W, Traced) or W.vertex or W.value.ndim < 1:
        raise TypeError("vertex_rows reads a parameter (an array whose rows are the "
                        "vertices), not a vertex-indexed array")
    n = W.value.shape[0]
    if n != g.n:
        raise ValueError(f"vertex_rows: the array has {n} rows but the graph has {g.n} "
                         "vertices")
    ex = _scope().executor
    ids = getattr(g, "vertex_ids", None)
    value = W.value if ids is None else W.value[ids]
    return record(value, [W], lambda G: (ex.vertex_scatter(ids, G, n),), True)


def concat(xs, axis: int = -1) -> Traced:
    """``concatenate`` of traced arrays (heads side by side); on vertex-indexed arrays along
    a feature axis only."""
    xs = [lift(x) for x in xs]
    if not xs:
        raise ValueError("concat needs at least one array")
    ndim = xs[0].value.ndim
    if any(x.value.ndim != ndim for x in xs):
        raise ValueError(f"concat: arrays of different ranks {[x.value.ndim for x in xs]}")
    ax = axis % ndim if ndim else 0
    vertex = any(x.vertex for x in xs)
    if vertex and (ax == 0 or not all(x.vertex for x in xs)):
        raise ValueError("concat of vertex-indexed arrays runs along a feature axis "
                         "(axis ≥ 1), and all of them must be vertex-indexed")
    xp = _scope().executor.xp
    out = xp.concatenate([x.value for x in xs], axis=ax)
    bounds = np.cumsum([x.value.shape[ax] for x in xs])[:-1]

    def vjp(g):
        return tuple(xp.split(g, [int(b) for b in bounds], axis=ax))

    return record(out, xs, vjp, vertex)


class Lazy:
    """Base of the lazy tensors (:class:`gblas_gnn.compose.expr.Expr`): a traced array's
    operators and numpy ufuncs return ``NotImplemented`` for them, so the lazy operand
    answers (a dense array never becomes lazy by itself)."""

    __slots__ = ()


class Traced:
    """A dense array of a composed forward: ``value`` (an array of the executor's array
    module), its tape ``node`` (None when nothing is recorded) and whether its axis 0 runs
    over vertices (``vertex``).

    ``live``, a slice of axis 0 or None: the value is 0 on every row outside it, and no
    backward reads its cotangent there (a row-indexed aggregation's rows beyond the first and
    last that hold an entry, :attr:`gblas_gnn.ir.sinks.SinkRule.by_target_row`: constants,
    whatever the parameters). An elementwise :math:`f` with :math:`f(0) = 0` then computes
    those rows alone; None: every row may be anything.
    """

    __slots__ = ("value", "node", "vertex", "live")
    __array_priority__ = 2000

    def __init__(self, value, node=None, vertex: bool = False, live: slice | None = None):
        self.value, self.node, self.vertex, self.live = value, node, vertex, live

    # ------------------------------------------------------------------ array attributes
    @property
    def shape(self) -> tuple:
        return tuple(self.value.shape)

    @property
    def ndim(self) -> int:
        return self.value.ndim

    @property
    def dtype(self) -> np.dtype:
        return self.value.dtype

    @property
    def size(self) -> int:
        return int(self.value.size)

    def __len__(self) -> int:
        return len(self.value)

    def __repr__(self) -> str:
        kind = "vertex-indexed " if self.vertex else ""
        return f"Traced({kind}{self.value.dtype} array of shape {self.shape})"

    def detach(self):
        """The value, without its gradient."""
        return self.value

    # ------------------------------------------------------------------ no silent detaching
    def _refuse(self, what: str):
        raise TypeError(f"{what} of a traced array would drop its gradient; compute with it "
                        "as an array (or call .detach() if the value alone is meant)")

    def __float__(self):
        self._refuse("float()")

    def __int__(self):
        self._refuse("int()")

    def __index__(self):
        self._refuse("using as an index")

    def __bool__(self):
        self._refuse("bool() (data-dependent control flow)")

    def __array__(self, dtype=None, copy=None):
        self._refuse("np.asarray()")

    # ------------------------------------------------------------------ arithmetic
    def __add__(self, o):
        return _dispatch_binary("add", self, o)

    def __radd__(self, o):
        return _dispatch_binary("add", o, self)

    def __sub__(self, o):
        return _dispatch_binary("sub", self, o)

    def __rsub__(self, o):
        return _dispatch_binary("sub", o, self)

    def __mul__(self, o):
        return _dispatch_binary("mul", self, o)

    def __rmul__(self, o):
        return _dispatch_binary("mul", o, self)

    def __truediv__(self, o):
        return _dispatch_binary("div", self, o)

    def __rtruediv__(self, o):
        return _dispatch_binary("div", o, self)

    def __pow__(self, o):
        if isinstance(o, numbers.Real) and not isinstance(o, bool):
            return apply_unary("pow", self, float(o))
        return NotImplemented

    def __neg__(self):
        return apply_unary("neg", self)

    def __matmul__(self, o):
        if isinstance(o, Lazy):
            return NotImplemented
        o = _as_traced(o)
        if o is NotImplemented or not isinstance(o, Traced):
            return NotImplemented
        return _matmul(self, o)

    def __rmatmul__(self, o):
        o = _as_traced(o)
        if o is NotImplemented or not isinstance(o, Traced):
            return NotImplemented
        return _matmul(o, self)

    @property
    def T(self):
        if self.vertex:
            return VertexTranspose(self)
        xp = _scope().executor.xp
        value = xp.ascontiguousarray(self.value.T)
        return record(value, [self], lambda g: (g.T,), False)

    # ------------------------------------------------------------------ shape
    def __getitem__(self, index) -> Traced:
        idx = index if isinstance(index, tuple) else (index,)
        if any(isinstance(i, Traced) for i in idx):
            raise TypeError("indexing with a traced array is not supported")
        if self.vertex and not _keeps_vertex_axis(idx, self.value.ndim):
            raise IndexError("a vertex-indexed array is sliced along its feature axes only "
                             "(X[:, ...]): its rows are laid out differently on every "
                             "executor")
        xp = _scope().executor.xp
        value = self.value[index]
        source_shape, dtype = self.value.shape, self.value.dtype

        basic = all(i is None or i is Ellipsis or isinstance(i, slice)
                    or (isinstance(i, int) and not isinstance(i, bool)) for i in idx)

        def vjp(g, into):
            offer = into[0]
            if basic and offer is not None and offer.shape == source_shape and \
                    offer.dtype == dtype:
                offer[index] += g               # a slice's rows, added where they belong
                return (Summed(offer),)
            full = xp.zeros(source_shape, dtype)
            full[index] = g
            return (full,)

        return record(value, [self], vjp, self.vertex, fresh=True, adds=True)

    def reshape(self, *shape) -> Traced:
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        value = self.value.reshape(shape)
        if self.vertex and (value.ndim == 0 or value.shape[0] != self.value.shape[0]):
            raise ValueError(f"reshape of a vertex-indexed array must keep its rows: "
                             f"{self.shape} -> {tuple(value.shape)}")
        source = self.value.shape
        # a view of its cotangent: the backward's own when that is (Node.donate)
        return record(value, [self], lambda g, _owned: (g.reshape(source),), self.vertex,
                      donate=True, live=self.live if self.vertex else None)

    def sum(self, axis=None, keepdims: bool = False) -> Traced:
        return _reduce(self, axis, keepdims, mean=False)

    def mean(self, axis=None, keepdims: bool = False) -> Traced:
        return _reduce(self, axis, keepdims, mean=True)

    # ------------------------------------------------------------------ numpy functions
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if any(isinstance(i, Lazy) for i in inputs):
            return NotImplemented               # the lazy tensor answers
        return ufunc_call(ufunc, method, inputs, kwargs, apply_unary, apply_binary)


def _keeps_vertex_axis(idx: tuple, ndim: int) -> bool:
    first = idx[0] if idx else slice(None)
    if isinstance(first, slice):
        return first == slice(None)
    if first is Ellipsis:
        used = sum(1 for i in idx if i is not None and i is not Ellipsis)
        return used < ndim
    return False


def _dispatch_binary(op: str, a, b):
    if isinstance(a, Lazy) or isinstance(b, Lazy):
        return NotImplemented
    return apply_binary(op, a, b)


def _reduce(x: Traced, axis, keepdims: bool, mean: bool) -> Traced:
    ex = _scope().executor
    xp = ex.xp
    ndim = x.value.ndim
    axes = tuple(range(ndim)) if axis is None else \
        tuple(a % ndim for a in (axis if isinstance(axis, tuple) else (axis,)))
    local = tuple(a for a in axes if not (x.vertex and a == 0))
    v = x.value.sum(axis=local, keepdims=True) if local else x.value
    count = int(np.prod([x.value.shape[a] for a in local])) if local else 1
    over_vertices = x.vertex and 0 in axes
    if over_vertices:
        v = ex.vertex_sum(v)[None]
        if mean:
            count *= int(ex.vertex_sum(xp.ones((x.value.shape[0], 1), x.value.dtype))[0])
    if mean:
        v = v / x.value.dtype.type(count)
    out = v if keepdims else v.reshape([s for k, s in enumerate(v.shape) if k not in axes])
    source = x.value.shape
    scale = x.value.dtype.type(1.0 / count) if mean else None

    def vjp(g):
        g = g.reshape([1 if k in axes else s for k, s in enumerate(source)])
        g = xp.broadcast_to(g, source)
        return ((g * scale) if mean else xp.array(g),)

    return record(out, [x], vjp, x.vertex and not over_vertices)


#: numpy ufuncs a traced array (or a lazy expression) answers, by our function names
UFUNC_UNARY = {np.negative: "neg", np.exp: "exp", np.log: "log", np.tanh: "tanh",
               np.sqrt: "sqrt", np.absolute: "abs"}
UFUNC_BINARY = {np.add: "add", np.subtract: "sub", np.multiply: "mul", np.true_divide: "div",
                np.maximum: "maximum", np.minimum: "minimum"}


def ufunc_call(ufunc, method, inputs, kwargs, unary, binary) -> Any:
    """A numpy ufunc call on traced arrays or lazy tensors as ``unary(fn, x)`` or
    ``binary(op, a, b)`` of our function names (:data:`UFUNC_UNARY`, :data:`UFUNC_BINARY`);
    ``TypeError`` for any other ufunc, method or keyword."""
    if method != "__call__" or kwargs:
        raise TypeError(f"numpy {ufunc.__name__}.{method} with {sorted(kwargs)} is not "
                        "supported on traced arrays; use gblas_gnn.ops")
    if ufunc in UFUNC_UNARY and len(inputs) == 1:
        return unary(UFUNC_UNARY[ufunc], inputs[0])
    if ufunc in UFUNC_BINARY and len(inputs) == 2:
        return binary(UFUNC_BINARY[ufunc], *inputs)
    raise TypeError(f"numpy {ufunc.__name__} is not supported on traced arrays; the "
                    f"functions with a gradient are in gblas_gnn.ops "
                    f"({sorted(F.UNARY)} and {list(F.BINARY)})")
