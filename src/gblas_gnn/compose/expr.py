r"""Lazy tensors over pairs of vertices: virtual ones (defined everywhere, never built) and
sparse ones (defined on the stored entries of a pattern ``A``).

An expression has the shape ``(rows, cols, *trail)``: two vertex axes (row = target ``i``,
column = source ``j``) and a trailing shape, ``()`` for one value per pair, ``(heads,)`` for one
per head, or ``(…, f)`` for a channel axis that a contraction removes again. The leaves:

===========================  ======================================  =====================
expression                   entry ``[i, j, …]``                     leaf
===========================  ======================================  =====================
``rep(x)`` / ``rep(X)``      ``x[i]`` / ``X[i, …]``                  :class:`Gather` (row)
``rep(x).T``, ``rep(X).T``   ``x[j]`` / ``X[j, …]``                  :class:`Gather` (col)
an array ``a``, a scalar     ``a[…]`` (broadcast over both vertices)  :class:`Bcast`,
                                                                     :class:`Const`
an edge tensor ``E``         ``E[i, j]`` on E's pattern              :class:`EdgeLeaf`
``g.edge_attr``              ``e_{ji}[…, c]``, the features of the    :class:`EdgeAttr`
                             edge ``j → i`` (on g's pattern)
===========================  ======================================  =====================

and the operations: the elementwise functions of :mod:`.functions` (:class:`Map`,
:class:`Zip`, numpy broadcasting over the trailing shape), the contraction of the last axis
(:class:`Sum`: ``E.sum(-1)``, ``E @ a``; ``factor(X) @ factor(Y).T`` is
``(rep(X) * rep(Y).T).sum(-1)``; ``g.edge_attr @ W`` for a matrix ``W`` of shape
``(f, …)`` is ``(g.edge_attr * Wᵀ).sum(-1)`` with ``W``'s first axis moved last, one
product per edge, never an |E|×k array), masking (:class:`Masked`: ``A * E`` multiplies by A's
values, ``ops.structure(A) * E`` keeps only its pattern) and the row softmax
(:class:`Softmax`). A sparse expression may carry at most one trailing axis (heads): an edge
tensor holds one value per edge per head, never an |E|×f tensor.

Outside a composed forward, an operation whose result is sparse is evaluated at once and
gives the executor's edge tensor (a ``graphblas.Matrix`` on the cpu), as the paper's building
blocks always did. Inside a composed forward (:mod:`.tape`) it stays lazy until a dense result
is needed (:mod:`.sinks`): the whole expression then runs as one program, forward and
backward (:mod:`.program`).
"""

from __future__ import annotations

import numbers
from typing import Any

import graphblas as gb
import numpy as np
import scipy.sparse as sp

from .. import edge_attr as _edge_attr
from .._graphblas_adapter import is_matrix_expression, is_structural_mask
from .._validate import FLOAT_DTYPES, array_module_of, dense_matrix, dense_vector
from ..edge_attr import EdgeFeatures
from ..executors import get_executor, to_numpy
from ..executors.edges import StructuralMask, edge_dtype, is_edge_tensor
from ..executors.patterns import AdjacencyPattern
from ..graph import Graph
from ..ir import functions as F
from ..ir.primitives import primitive
from .lower import patterns_match
from .sinks import materialize
from .tape import current, in_scope
from .traced import Lazy, Traced, ufunc_call, value_of

__all__ = ["Expr", "Gather", "Bcast", "Const", "EdgeLeaf", "EdgeAttr", "EdgeDropout", "Map", "Zip",
           "Sum", "Expand",
           "Masked", "Softmax", "rep", "factor", "Factor", "masked",
           "expr_unary", "expr_binary", "is_edge_tensor", "edge_dtype", "edge_shape",
           "as_expr", "as_sparse", "MATERIALIZE_LIMIT"]

MATERIALIZE_LIMIT = 1 << 20
"""Largest number of entries ``np.asarray(virtual)`` will build densely."""


# ---------------------------------------------------------------------- edge tensors
def edge_shape(E) -> tuple[int, int]:
    return int(E.nrows), int(E.ncols)


def _structure_of(x):
    """The edge tensor whose pattern ``x`` is (a :class:`StructuralMask`, or graphblas's
    ``A.S``), else None."""
    if isinstance(x, StructuralMask) or is_structural_mask(x):
        return x.parent
    return None


# ---------------------------------------------------------------------- the node classes
class Expr(Lazy):
    """Base of the lazy tensors (see the module docstring)."""

    __slots__ = ("trail", "dtype", "pattern", "vshape")
    __array_priority__ = 1500

    trail: tuple[int, ...]
    dtype: np.dtype | None
    #: the edge tensor whose stored entries this is defined on (None: virtual)
    pattern: Any
    #: ``(rows, cols)`` of a virtual tensor for shape checks and toy materialisation
    vshape: tuple[int, int] | None

    children: tuple[Expr, ...] = ()

    def _init(self, trail, dtype, pattern=None, vshape=None):
        self.trail, self.dtype, self.pattern, self.vshape = tuple(trail), dtype, pattern, vshape

    # ------------------------------------------------------------------ shape
    @property
    def shape(self) -> tuple:
        rows, cols = self.vshape if self.pattern is None else edge_shape(self.pattern)
        return (rows, cols, *self.trail)

    @property
    def ndim(self) -> int:
        return 2 + len(self.trail)

    @property
    def is_sparse(self) -> bool:
        return self.pattern is not None

    @property
    def nrows(self) -> int:
        return self.shape[0]

    @property
    def ncols(self) -> int:
        return self.shape[1]

    @property
    def nvals(self) -> int:
        if self.pattern is None:
            raise TypeError("a virtual tensor stores no entries; mask it (A * expr)")
        return int(self.pattern.nvals)

    def __repr__(self) -> str:
        kind = "sparse" if self.is_sparse else "virtual"
        return f"<{kind} {type(self).__name__} of shape {self.shape}>"

    # ------------------------------------------------------------------ algebra
    def __add__(self, o):
        return expr_binary("add", self, o)

    def __radd__(self, o):
        return expr_binary("add", o, self)

    def __sub__(self, o):
        return expr_binary("sub", self, o)

    def __rsub__(self, o):
        return expr_binary("sub", o, self)

    def __mul__(self, o):
        pattern = _structure_of(o)
        if pattern is not None or is_edge_tensor(o):
            return masked(o if pattern is None else pattern, self, structural=pattern is not None)
        return expr_binary("mul", self, o)

    def __rmul__(self, o):
        return self.__mul__(o)

    def __truediv__(self, o):
        return expr_binary("div", self, o)

    def __rtruediv__(self, o):
        return expr_binary("div", o, self)

    def __pow__(self, o):
        if isinstance(o, numbers.Real) and not isinstance(o, bool):
            return expr_unary("pow", self, float(o))
        return NotImplemented

    def __neg__(self):
        return expr_unary("neg", self)

    def __matmul__(self, a):
        """``E @ a``: contract the last axis with a 1-D array ``a``; ``E @ W`` with an array
        ``W`` of shape ``(f, …)``, for ``E`` of one channel axis of ``f`` (edge features):
        entry ``[i, j, …] = Σ_c E[i, j, c] W[c, …]``."""
        if isinstance(a, Expr):
            raise TypeError("E @ a contracts the channels with a 1-D array a; for the dot "
                            "products of rows write factor(X) @ factor(Y).T")
        shape = np.shape(value_of(a))
        if not shape:
            raise ValueError("E @ a needs a 1-D or larger a, got a scalar")
        if not self.trail or self.trail[-1] != shape[0]:
            raise ValueError(f"@: the last axis of E {self.shape} and a {shape} differ")
        if len(shape) == 1:
            return (self * a).sum(-1)
        if len(self.trail) != 1:
            raise ValueError(f"E @ W with a matrix W contracts an expression of one channel "
                             f"axis (edge features, shape (n, n, f)); got shape {self.shape}")
        return (self * _channels_last(a)).sum(-1)

    def sum(self, axis=-1):
        """Contract the last trailing axis (``axis=-1`` or its positive index)."""
        if axis not in (-1, self.ndim - 1) or not self.trail:
            raise ValueError(f"sum contracts the last (channel) axis of an expression of shape "
                             f"{self.shape}; got axis={axis}")
        return _finish(Sum(self))

    @property
    def T(self) -> Expr:
        """Swap the two vertex axes of a virtual tensor."""
        if self.is_sparse:
            raise TypeError("transposing a sparse expression is not supported; "
                            "transpose its virtual operand before masking")
        return self._transposed()

    def _transposed(self) -> Expr:
        raise TypeError(f"a {type(self).__name__} expression has no transpose (only the "
                        "virtual, unmasked tensors do)")

    # ------------------------------------------------------------------ numpy interop
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return ufunc_call(ufunc, method, inputs, kwargs, expr_unary, expr_binary)

    def __array__(self, dtype=None, copy=None):
        if self.is_sparse:
            raise TypeError("a sparse expression is not a dense array; ops.to_graphblas(E) "
                            "gives its values")
        rows, cols = self.vshape
        if rows * cols * int(np.prod(self.trail)) > MATERIALIZE_LIMIT:
            raise ValueError(
                f"refusing to materialise a {rows}×{cols} virtual tensor "
                f"(limit {MATERIALIZE_LIMIT} entries); multiply it by a sparse matrix "
                "(A * expr) to evaluate it on A's pattern")
        out = np.asarray(self._dense())
        return out if dtype is None else out.astype(dtype)

    def lower(self, b) -> int:
        """Add this node's operation to the program builder ``b``
        (:class:`gblas_gnn.compose.lower.Builder`: ``b.visit`` lowers an input first) and
        return its index: the one place a node meets the IR."""
        raise TypeError(f"cannot compile {type(self).__name__}")

    def _dense(self) -> np.ndarray:
        raise TypeError(f"a {type(self).__name__} expression has no dense form (only the "
                        "virtual, unmasked tensors do)")


def _dtype(*nodes) -> np.dtype | None:
    types = {n.dtype for n in nodes if n.dtype is not None}
    if len(types) > 1:
        a, b = sorted(str(t) for t in types)
        raise TypeError(f"dtype mismatch: {a} and {b} in one expression; convert one of them "
                        "explicitly")
    return types.pop() if types else None


def _trail(kind: str, args: tuple, *inputs: Expr) -> tuple[int, ...]:
    """The trailing shape of operation ``kind`` of ``inputs`` (its primitive's shape rule)."""
    return primitive(kind).trail(args, tuple(x.trail for x in inputs))


def _broadcast(op: str, a: Expr, b: Expr) -> tuple[int, ...]:
    try:
        return _trail("zip", (op,), a, b)
    except ValueError:
        raise ValueError(f"{op}: shapes {a.shape} and {b.shape} do not broadcast") from None


class Gather(Expr):
    """``rep(X)`` (side ``"row"``: entry ``[i, j] = X[i]``) or ``rep(X).T`` (``"col"``:
    ``X[j]``) of a vertex-indexed array ``X`` of shape ``(n, …)``."""

    __slots__ = ("X", "side", "other")

    def __init__(self, X, side: str, other: int | None = None):
        self.X, self.side, self.other = X, side, other
        n = int(value_of(X).shape[0])
        m = n if other is None else other
        self._init(value_of(X).shape[1:], value_of(X).dtype,
                   vshape=(n, m) if side == "row" else (m, n))

    def _transposed(self):
        return Gather(self.X, "col" if self.side == "row" else "row", self.other)

    def _dense(self):
        x = np.asarray(_host(value_of(self.X)))
        rows, cols = self.vshape
        if self.side == "row":
            return np.broadcast_to(x[:, None], (rows, cols, *self.trail)).copy()
        return np.broadcast_to(x[None, :], (rows, cols, *self.trail)).copy()

    def lower(self, b) -> int:
        return b.op(self.side, (b.slot(self.side, self.X),), (), self.trail)


class Bcast(Expr):
    """A dense array broadcast over both vertex axes (a parameter; ``a[…]`` everywhere)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value
        v = value_of(value)
        self._init(v.shape, v.dtype)

    def _transposed(self):
        return self

    def _dense(self):
        v = np.asarray(_host(value_of(self.value)))
        return v.reshape((1, 1) + v.shape)

    def lower(self, b) -> int:
        return b.op("param", (b.slot("param", self.value),), (), self.trail)


class Const(Expr):
    """A Python number broadcast over every entry."""

    __slots__ = ("value",)

    def __init__(self, value: float):
        self.value = float(value)
        self._init((), None)

    def _transposed(self):
        return self

    def _dense(self):
        return np.full((1, 1), self.value)

    def lower(self, b) -> int:
        return b.op("const", (self.value,), (), ())


class EdgeLeaf(Expr):
    """The values of an edge tensor ``E`` on its own pattern."""

    __slots__ = ("E",)

    def __init__(self, E):
        self.E = E
        self._init((), edge_dtype(E), pattern=E)

    def lower(self, b) -> int:
        return b.edges(self.E)


class EdgeAttr(Expr):
    """The features of the stored edges of a graph (:class:`~gblas_gnn.edge_attr.
    EdgeFeatures`): entry ``[i, j, c]`` the feature ``c`` of the edge ``j → i`` (on the
    graph's pattern); ``value`` is the ``(nnz, f)`` array on the executor (traced in a
    training-mode forward when the features require their gradient: it is derived too)."""

    __slots__ = ("features", "value")

    def __init__(self, features: EdgeFeatures, value):
        self.features, self.value = features, value
        v = value_of(value)
        self._init(tuple(v.shape[1:]), v.dtype, pattern=features.pattern)

    def lower(self, b) -> int:
        b.check(self.pattern)
        return b.op("eattr", (b.slot("eattr", self.value),), (), self.trail)


def _feature_values(features: EdgeFeatures):
    """The values of ``features`` on the executor: inside a training-mode forward, for
    features that require their gradient, a traced leaf of the tape (one per features and
    forward, kept by the scope for the backward); else a constant, whose cotangent no kernel
    computes."""
    s = current()
    if s is None:
        return get_executor(None).edge_features(features)
    hit = s.features.get(id(features))
    if hit is None:
        leaf = s.tape.leaf(("edge_attr", id(features))) \
            if s.tape is not None and features.requires_grad else None
        hit = s.features[id(features)] = (features,
                                          Traced(s.executor.edge_features(features), leaf,
                                                 False))
    return hit[1]


def edge_attr_expr(features: EdgeFeatures) -> EdgeAttr:
    """``features`` as an expression (:class:`EdgeAttr`)."""
    return EdgeAttr(features, _feature_values(features))


# g.edge_attr computes in expressions: the graph layer hands its features over to this one
_edge_attr.as_expression = edge_attr_expr


def _channels_last(W):
    """``W`` of shape ``(f, d1, …)`` as ``(d1, …, f)`` (traced when ``W`` is)."""
    if isinstance(W, Traced):
        shape = W.shape
        return W.reshape(shape[0], -1).T.reshape(*shape[1:], shape[0])
    xp = _xp_of(W)
    return xp.ascontiguousarray(xp.moveaxis(W, 0, -1))


def _xp_of(x):
    return array_module_of(x)


class EdgeDropout(Expr):
    """Counter-based dropout scales on A's pattern, one per edge and head: ``1/(1-p)`` where
    the hash :math:`u(\\kappa; h, i, j) \\ge p`, else 0 (:mod:`gblas_gnn.executors._random`:
    the same mask on every executor and grid); ``heads=None`` gives one scale per edge."""

    __slots__ = ("key", "p", "heads")

    def __init__(self, A, key: int, p: float, heads: int | None, dtype):
        self.key, self.p, self.heads = int(key), float(p), heads
        self._init(() if heads is None else (heads,), np.dtype(dtype), pattern=A)

    def lower(self, b) -> int:
        b.check(self.pattern)
        key = b.key(np.uint64(self.key))
        return b.op("dropout", (key, self.p, self.heads), (), self.trail)


class Map(Expr):
    """An elementwise function of the table in :mod:`.functions`."""

    __slots__ = ("fn", "alpha", "x")

    def __init__(self, fn: str, x: Expr, alpha=None):
        self.fn, self.x, self.alpha = fn, x, F.check_unary(fn, alpha)
        self._init(_trail("map", (fn, alpha), x), x.dtype, x.pattern, x.vshape)

    @property
    def children(self):
        return (self.x,)

    def _transposed(self):
        return Map(self.fn, self.x._transposed(), self.alpha)

    def _dense(self):
        x = np.asarray(self.x._dense(), dtype=self.dtype or np.float64)
        return F.unary(np, self.fn, x, self.alpha)

    def lower(self, b) -> int:
        return b.op("map", (self.fn, self.alpha), (b.visit(self.x),), self.trail)


class Zip(Expr):
    """``a op b`` for the binary functions of :mod:`.functions` (broadcast trailing shapes)."""

    __slots__ = ("op", "a", "b")

    def __init__(self, op: str, a: Expr, b: Expr):
        self.op, self.a, self.b = op, a, b
        pattern = _common_pattern(op, a, b)
        vshape = None
        if pattern is None:
            vshape = _common_vshape(op, a, b)
        self._init(_broadcast(op, a, b), _dtype(a, b), pattern, vshape)

    @property
    def children(self):
        return (self.a, self.b)

    def _transposed(self):
        return Zip(self.op, self.a._transposed(), self.b._transposed())

    def _dense(self):
        dt = self.dtype or np.float64
        n = len(self.trail)
        a = _align(np.asarray(self.a._dense(), dtype=dt), len(self.a.trail), n)
        b = _align(np.asarray(self.b._dense(), dtype=dt), len(self.b.trail), n)
        return F.binary_forward(np, self.op, a, b)

    def lower(self, b) -> int:
        return b.op("zip", (self.op,), (b.visit(self.a), b.visit(self.b)), self.trail)


class Sum(Expr):
    """The contraction of the last trailing axis: ``Σ_c x[i, j, …, c]``."""

    __slots__ = ("x",)

    def __init__(self, x: Expr):
        self.x = x
        self._init(_trail("sum", (), x), x.dtype, x.pattern, x.vshape)

    @property
    def children(self):
        return (self.x,)

    def _transposed(self):
        return Sum(self.x._transposed())

    def _dense(self):
        return np.asarray(self.x._dense()).sum(axis=-1)

    def lower(self, b) -> int:
        return b.op("sum", (), (b.visit(self.x),), self.trail)


class Expand(Expr):
    """``x[..., None]``: a unit axis appended to the trailing shape (a weight per edge and
    head beside messages with a channel axis)."""

    __slots__ = ("x",)

    def __init__(self, x: Expr):
        self.x = x
        self._init(_trail("expand", (), x), x.dtype, x.pattern, x.vshape)

    @property
    def children(self):
        return (self.x,)

    def _transposed(self):
        return Expand(self.x._transposed())

    def _dense(self):
        return np.asarray(self.x._dense())[..., None]

    def lower(self, b) -> int:
        return b.op("expand", (), (b.visit(self.x),), self.trail)


class Masked(Expr):
    """``A ⊙ x`` on A's stored entries (``structural``: A's pattern only, not its values)."""

    __slots__ = ("A", "x", "structural")

    def __init__(self, A, x: Expr, structural: bool):
        self.A, self.x, self.structural = A, x, structural
        self._init(x.trail, _dtype(x, EdgeLeaf(A)), pattern=A)

    @property
    def children(self):
        return (self.x,)

    def lower(self, b) -> int:
        b.check(self.A)
        inner = b.visit(self.x)
        if self.structural:
            return inner
        return b.op("zip", ("mul",), (b.op("avals", (), (), ()), inner), self.trail)


class Softmax(Expr):
    """The stable row softmax over the stored entries, one per head."""

    __slots__ = ("x",)

    def __init__(self, x: Expr):
        if not x.is_sparse:
            raise TypeError("softmax needs a sparse operand: mask the virtual tensor first "
                            "(A * expr)")
        if len(x.trail) > 1:
            raise ValueError(f"softmax of an expression of shape {x.shape}: contract the "
                             "channels first (an edge tensor holds one value per head)")
        self.x = x
        self._init(_trail("softmax", (), x), x.dtype, x.pattern)

    @property
    def children(self):
        return (self.x,)

    def lower(self, b) -> int:
        return b.op("softmax", (), (b.visit(self.x),), self.trail)


def _align(x, have: int, want: int):
    """A dense ``(R, C, *trail)`` array with ``want - have`` unit axes inserted after the
    vertex axes, so that numpy broadcasts trailing shapes as the expressions do."""
    return x.reshape(x.shape[:2] + (1,) * (want - have) + x.shape[2:])


def _host(x):
    return to_numpy(x)


def _same_pattern(p, q) -> bool:
    return p is q or patterns_match(p, q)


def _common_pattern(op: str, a: Expr, b: Expr):
    pa, pb = a.pattern, b.pattern
    if pa is not None and pb is not None and not _same_pattern(pa, pb):
        raise ValueError(f"{op}: the operands are defined on different sparsity patterns "
                         f"({edge_shape(pa)} with {pa.nvals} entries, {edge_shape(pb)} with "
                         f"{pb.nvals})")
    return pa if pa is not None else pb


def _common_vshape(op: str, a: Expr, b: Expr):
    if a.vshape is None:
        return b.vshape
    if b.vshape is not None and a.vshape != b.vshape:
        raise ValueError(f"shapes differ: {op} of {a.shape} and {b.shape}")
    return a.vshape


# ---------------------------------------------------------------------- constructors
def _is_real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def as_expr(x) -> Expr | Any:
    """``x`` as an expression: itself, an edge tensor's values, a number or a broadcast
    array; ``NotImplemented`` for anything else."""
    if isinstance(x, Expr):
        return x
    if _is_real(x):
        return Const(x)
    if is_edge_tensor(x):
        return EdgeLeaf(x)
    if isinstance(x, EdgeFeatures):
        return edge_attr_expr(x)
    if isinstance(x, Traced):
        if x.vertex:
            raise TypeError("a vertex-indexed array in an expression over vertex pairs must "
                            "say which vertex indexes it: rep(X) (targets) or rep(X).T "
                            "(sources)")
        return Bcast(x)
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        if np.dtype(x.dtype) not in FLOAT_DTYPES:
            raise TypeError(f"arrays in an expression must be float32 or float64, got "
                            f"{x.dtype}")
        return Bcast(x)
    return NotImplemented


def _finish(e: Expr, executor=None):
    """Outside a composed forward a sparse result of one value per edge is evaluated now on
    ``executor`` (an edge tensor); one with a heads axis stays lazy until an aggregation or
    reduction consumes it (no edge tensor holds several values per edge)."""
    if e.is_sparse and not e.trail and not in_scope():
        return materialize(e, executor)
    return e


def expr_binary(op: str, a, b):
    """``a op b`` with at least one expression operand."""
    ea, eb = as_expr(a), as_expr(b)
    if ea is NotImplemented or eb is NotImplemented:
        return NotImplemented
    _check_leaves_against(ea, eb)
    return _finish(Zip(op, ea, eb))


def expr_unary(fn: str, x, alpha=None):
    """``f(x)`` of an expression (lazy)."""
    return _finish(Map(fn, as_expr(x), alpha))


def _check_leaves_against(a: Expr, b: Expr) -> None:
    """A virtual operand combined with a sparse one is evaluated on its pattern: its gathered
    arrays must match it."""
    for sparse, virtual in ((a, b), (b, a)):
        if sparse.is_sparse and not virtual.is_sparse:
            _check_gathers(sparse.pattern, virtual)


def _check_gathers(A, e: Expr, executor=None) -> None:
    ex = get_executor(executor)
    rows, sources = ex.target_rows(A), ex.source_rows(A)
    for leaf in _leaves(e):
        if isinstance(leaf, Gather):
            n = int(value_of(leaf.X).shape[0])
            want = rows if leaf.side == "row" else sources
            if n != want:
                side = "rep(X)" if leaf.side == "row" else "rep(X).T"
                raise ValueError(f"shape mismatch: {side} has {n} rows but the pattern "
                                 f"{edge_shape(A)} needs {want} there")
            if leaf.other is not None and leaf.other != (
                    int(A.ncols) if leaf.side == "row" else int(A.nrows)):
                raise ValueError(f"shape mismatch: A is {A.nrows}×{A.ncols}, expression "
                                 f"{leaf.vshape}")


def _leaves(e: Expr):
    seen, stack = set(), [e]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if not node.children and not isinstance(node, Masked):
            yield node
        stack.extend(node.children)


def rep(x, n: int | None = None) -> Gather:
    r"""``rep(x) = x 1ᵀ``: the virtual tensor whose entry ``[i, j]`` is ``x[i]`` (a vector
    ``x``) or ``X[i, …]`` (an ``(n, f)`` or ``(n, heads, f)`` array: a rank-3 or rank-4
    tensor with the channels last). ``rep(x).T`` has entry ``[i, j] = x[j]``.

    ``n`` is the number of columns (default ``len(x)``, a square tensor); ``np.asarray`` of a
    small one builds it densely.
    """
    if n is not None and (not isinstance(n, (int, np.integer)) or n < 0):
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    if isinstance(x, Traced):
        if not x.vertex and in_scope():
            raise TypeError("rep() takes a vertex-indexed array (one row per vertex); "
                            "a parameter is used in an expression as it is")
        return Gather(x, "row", n)
    xp = array_module_of(x)
    if getattr(x, "ndim", 0) == 1:
        x = dense_vector(x, "x", xp=xp)
    else:
        x = _dense_nd(x, xp)
    return Gather(x, "row", n)


def _dense_nd(x, xp):
    if not isinstance(x, xp.ndarray) or x.ndim < 1:
        raise TypeError(f"rep() needs a 1-D or 2-D array, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"rep() needs float32 or float64 values, got {x.dtype}")
    if not bool(xp.isfinite(x).all()):
        raise ValueError("x contains NaN or Inf")
    return xp.ascontiguousarray(x)


class Factor:
    """A dense ``(n, k)`` array usable in ``factor(X) @ factor(Y).T``: the virtual tensor of
    the dot products of rows, ``(rep(X) * rep(Y).T).sum(-1)``."""

    def __init__(self, X, transposed: bool = False):
        self.X, self.transposed = X, transposed

    @property
    def T(self) -> Factor:
        return Factor(self.X, not self.transposed)

    def __matmul__(self, other: Factor) -> Expr:
        if not isinstance(other, Factor) or self.transposed or not other.transposed:
            raise TypeError("only factor(X) @ factor(Y).T is a virtual tensor")
        xs, ys = np.shape(value_of(self.X)), np.shape(value_of(other.X))
        if xs[1:] != ys[1:]:
            raise ValueError(f"inner dimensions differ: {xs} @ {ys}ᵀ")
        return Sum(Zip("mul", Gather(self.X, "row"), Gather(other.X, "col")))


def factor(X) -> Factor:
    """Wrap an ``(n, k)`` array (or traced array) so that ``factor(X) @ factor(Y).T`` is the
    virtual ``X Yᵀ``."""
    if isinstance(X, Traced):
        if X.ndim < 2:
            raise ValueError(f"factor() needs an (n, k) array, got shape {X.shape}")
        return Factor(X)
    return Factor(dense_matrix(X, "X", xp=array_module_of(X)))


def as_sparse(S, name: str = "S"):
    """``S`` as a float sparse operand: an edge tensor (a ``scipy.sparse`` matrix or a
    :class:`~gblas_gnn.Graph` is converted to a ``graphblas.Matrix``, and so is an
    :class:`~gblas_gnn.executors.patterns.AdjacencyPattern`, built if it was not) or a sparse
    expression."""
    if isinstance(S, Graph):
        return S.A
    if isinstance(S, AdjacencyPattern):
        return S.matrix
    if isinstance(S, Expr):
        if not S.is_sparse:
            raise TypeError(f"{name} must be sparse: mask the virtual tensor first (A * expr)")
        return S
    if sp.issparse(S):
        if S.dtype not in FLOAT_DTYPES:
            raise TypeError(f"{name} must hold float32 or float64 values, got {S.dtype}")
        S = gb.io.from_scipy_sparse(S.tocsr())
    if is_matrix_expression(S):
        S = S.new()                       # a graphblas expression such as ``A * 2.0``
    if not is_edge_tensor(S):
        raise TypeError(f"{name} must be a graphblas.Matrix or scipy.sparse matrix (or an "
                        f"executor's edge tensor), got {type(S).__name__}")
    if edge_dtype(S) not in FLOAT_DTYPES:
        raise TypeError(f"{name} must hold FP32 or FP64 values, got {edge_dtype(S)}")
    return S



def masked(A, expr, executor=None, structural: bool = False):
    """``A ⊙ expr`` evaluated only on A's stored entries (also spelled ``A * expr``): an edge
    tensor of the executor (lazy inside a composed forward).

    A's values multiply the result unless ``structural`` (``ops.structure(A) * expr``).
    """
    if not is_edge_tensor(A):
        A = as_sparse(A, "A")
    if not isinstance(expr, Expr) or isinstance(expr, Const):
        raise TypeError(f"expected a virtual tensor expression, got {type(expr).__name__}")
    if expr.is_sparse:
        if not _same_pattern(expr.pattern, A):
            raise ValueError("masking a sparse expression with a different pattern")
    elif expr.dtype is not None and np.dtype(expr.dtype) != edge_dtype(A):
        raise TypeError(f"dtype mismatch: A is {edge_dtype(A)}, expression is {expr.dtype}")
    if len(expr.trail) > 1:
        raise ValueError(f"A * expr of shape {expr.shape}: contract the channel axis first "
                         "(expr @ a or expr.sum(-1)); an edge tensor holds one value per "
                         "edge per head")
    _check_gathers(A, expr, executor)
    return _finish(Masked(A, expr, structural), executor)
