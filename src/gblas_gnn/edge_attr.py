r"""Edge features: ``f`` numbers per stored edge of a graph, and the self loops' features.

A :class:`~gblas_gnn.Graph` built with ``edge_attr`` keeps one row of features per given
edge; :attr:`Graph.edge_attr <gblas_gnn.Graph.edge_attr>` is an :class:`EdgeFeatures`: the
features in the CSR order of the graph's pattern (row = target ``i``, column = source ``j``,
entry ``[i, j, :]`` the features of the edge ``j → i``), beside the map back to the order in
which the edges were given. Inside a composed forward it is a virtual edge tensor with a
channel axis (``g.edge_attr @ W`` contracts it, :mod:`gblas_gnn.compose`); it is never
copied per edge and channel into anything wider than itself.

The self loops PyTorch Geometric adds to an attention layer's graph get features by a
``fill_value`` rule (``torch_geometric.utils.add_self_loops``): every existing loop is
removed with its features, then every vertex ``i`` gets one loop whose features are

* ``"mean"`` (the default), ``"add"``, ``"max"`` or ``"min"`` of the features of the
  remaining in-edges of ``i``, per channel (:math:`\bar e_i = \frac{1}{|N(i)|} \sum_{j \in
  N(i)} e_{ji}` for ``"mean"``), 0 for a vertex without in-edges;
* a number, or a vector of ``f`` numbers, for every loop.

The graph with loops stores none of its base's features again: :class:`LoopedValues` keeps
the base's array, the loops' ``(n, f)`` fill and one shift a row, and the ``cpu`` executor's
kernels read an edge's row through them; other readers get the interleaved array, made when
first asked for.

:meth:`EdgeFeatures.pullback` takes a cotangent of the features of a graph with loops back to
the given edges: a kept edge's own share plus, through the fill rule, its loop's share
(divided by the in-degree for ``"mean"``; all of it for ``"add"``; to the edge that gave the
maximum or minimum, the first of ties, for ``"max"`` / ``"min"``).

Like a torch tensor, edge features are data unless asked otherwise: a backward derives their
gradient only when they require it (:meth:`EdgeFeatures.requires_grad_`, before the forward).
The flag belongs to the features as the graph was given them, so a graph derived from it (its
self loops, another dtype, a grid's block) reads the same flag.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .executors.looped_values import LoopedValues

__all__ = ["EdgeFeatures", "LoopedValues", "FILL_RULES", "IN_CSR_ORDER", "check_edge_attr",
           "check_fill_value", "loop_fill"]

#: the named fill rules of the self loops' features (PyG's ``fill_value`` strings)
FILL_RULES = ("mean", "add", "max", "min")

#: the :attr:`EdgeFeatures.order` of features given in their pattern's CSR order: no map
IN_CSR_ORDER = slice(None)

#: how features become an expression of a composition: set by :mod:`gblas_gnn.compose.expr`
#: when it loads (it sits above this layer: features hand themselves over through this)
as_expression: Callable[[EdgeFeatures], Any] | None = None


def check_edge_attr(edge_attr, m: int, dtype: np.dtype) -> np.ndarray:
    """``edge_attr`` as a finite ``(m, f)`` array of ``dtype`` (a 1-D array is one feature an
    edge, as PyG views it); a clear error otherwise, before any work."""
    if hasattr(edge_attr, "detach"):                         # a torch tensor
        edge_attr = edge_attr.detach().cpu().numpy()
    a = np.asarray(edge_attr)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2:
        raise ValueError(f"edge_attr must be (m, f) or (m,), got shape {a.shape}")
    if a.shape[0] != m:
        raise ValueError(f"edge_attr has {a.shape[0]} rows but there are {m} edges: one row "
                         "of features per given edge")
    if a.shape[1] < 1:
        raise ValueError("edge_attr has no feature columns")
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)
            or a.dtype == np.bool_):
        raise TypeError(f"edge_attr must hold real numbers, got dtype {a.dtype}")
    if a.size and not np.isfinite(a).all():
        raise ValueError("edge_attr contains NaN or Inf")
    out = np.ascontiguousarray(a, dtype=dtype)
    # the graph's own array: what the caller holds may change after
    return out.copy() if np.may_share_memory(out, a) else out


def check_fill_value(fill_value, f: int):
    """A fill rule (one of :data:`FILL_RULES`), a finite number or a finite vector of ``f``
    numbers; a hashable key of it is :func:`fill_key`'s."""
    if isinstance(fill_value, str):
        if fill_value not in FILL_RULES:
            raise ValueError(f"fill_value must be one of {FILL_RULES}, a number or a vector of "
                             f"{f} numbers, got {fill_value!r}")
        return fill_value
    if isinstance(fill_value, numbers.Real) and not isinstance(fill_value, bool):
        if not np.isfinite(fill_value):
            raise ValueError(f"fill_value must be finite, got {fill_value}")
        return float(fill_value)
    v = np.asarray(fill_value.detach().cpu().numpy() if hasattr(fill_value, "detach")
                   else fill_value, dtype=np.float64)
    if v.shape != (f,):
        raise ValueError(f"a fill_value vector needs one number per feature, shape ({f},), "
                         f"got {v.shape}")
    if not np.isfinite(v).all():
        raise ValueError("fill_value contains NaN or Inf")
    return v


def fill_key(fill) -> Any:
    """A hashable key of a checked fill value (graphs cache their loops by it)."""
    return ("vector", fill.tobytes()) if isinstance(fill, np.ndarray) else fill


def _alone(array: np.ndarray, op: str) -> np.ndarray:
    """The completion of a per-row partial when this process holds whole rows: itself."""
    return array


#: ``combine(array, op)``: a per-row partial (``op`` "sum", "max" or "min") completed over
#: every process that holds a part of those rows (a grid row's ranks), the same on each
Combine = Callable[[np.ndarray, str], np.ndarray]


def loop_fill(values: np.ndarray, rows: np.ndarray, cols: np.ndarray, n: int, fill,
              combine: Combine = _alone) -> tuple[np.ndarray, Any]:
    """The loops' features ``(n, f)`` from the features ``values`` (m, f) of edges into the
    rows ``rows`` (m,) from the sources ``cols`` (global ids), by the rule ``fill``
    (:func:`check_fill_value`), and what :meth:`EdgeFeatures.pullback` needs: the
    in-degrees (``"mean"``), the source id of the edge that gave every (row, channel) its
    extreme (``"max"`` / ``"min"``; the lowest id of ties, as PyG's first; -1 for none), or
    None. ``combine`` completes the rows over the processes that share them."""
    f = values.shape[1]
    dtype = values.dtype
    if not isinstance(fill, str):
        return np.broadcast_to(np.asarray(fill, dtype=dtype), (n, f)).copy(), None
    if fill in ("mean", "add"):
        out = np.zeros((n, f), dtype)
        np.add.at(out, rows, values)
        out = combine(out, "sum")
        if fill == "add":
            return out, None
        deg = combine(np.bincount(rows, minlength=n).astype(dtype), "sum")
        np.divide(out, np.maximum(deg, 1)[:, None], out=out)
        return out, deg
    reduce = np.maximum if fill == "max" else np.minimum
    out = np.full((n, f), -np.inf if fill == "max" else np.inf, dtype)
    reduce.at(out, rows, values)
    out = combine(out, fill)
    # the winner of every (row, channel): the lowest source id holding the extreme
    edge, chan = np.nonzero(values == out[rows])
    none = np.iinfo(np.int64).max
    winner = np.full((n, f), none, np.int64)
    np.minimum.at(winner, (rows[edge], chan), cols[edge])
    winner = combine(winner, "min")
    empty = winner == none
    out[empty] = 0
    winner[empty] = -1
    return out, winner


#: ``edges()``: the base and the looped patterns' ``(rows, global source ids)`` in CSR order
Edges = Callable[[], tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]]


@dataclass(frozen=True)
class _Placement:
    """Where the base edges and the loops sit in the looped pattern's CSR order."""

    kept: np.ndarray            # positions (base CSR) of the edges that are not loops
    kept_at: np.ndarray         # their positions in the looped CSR order
    loop_at: np.ndarray         # the loops' positions, row by row (none off a grid's diagonal)
    loop_rows: np.ndarray       # the row of each loop
    rows: np.ndarray            # the row of every kept edge
    cols: np.ndarray            # its source's global id

    @staticmethod
    def of(edges: Edges, ids: np.ndarray) -> _Placement:
        (base_rows, base_cols), (looped_rows, looped_cols) = edges()
        kept = np.flatnonzero(ids[base_rows] != base_cols)
        is_loop = ids[looped_rows] == looped_cols
        loop_at = np.flatnonzero(is_loop)
        return _Placement(kept, np.flatnonzero(~is_loop), loop_at, looped_rows[loop_at],
                          base_rows[kept], base_cols[kept])


@dataclass(eq=False)
class _Loops:
    """How the features of a graph with self loops derive from its base graph's: the base
    features, the patterns' edges (:class:`_Placement` derives from them where the loops
    sit: kept for no longer than a pullback, so a graph with loops holds no per-edge index
    beside its features), the rule and its pullback data."""

    base: EdgeFeatures
    edges: Edges
    ids: np.ndarray             # the global id of every row
    n: int                      # the rows
    fill: Any
    aux: Any
    combine: Combine


class EdgeFeatures:
    """The features of a graph's stored edges (see the module docstring).

    Attributes
    ----------
    pattern : edge tensor
        The graph's adjacency as the executors take it (the features' entries are its).
    values : numpy.ndarray
        ``(nnz, f)`` in the pattern's CSR order (rows ascending, sources ascending in a
        row); for a graph with loops made from :attr:`split` at the first read.
    split : LoopedValues or None
        A graph with loops: its features as its base's and the loops' (what the ``cpu``
        executor reads); None for the others.
    order : numpy.ndarray, slice or None
        ``order[k]``: the CSR position of the ``k``-th given edge; :data:`IN_CSR_ORDER` for
        edges given in that order; None for a graph with self loops, whose loops were not
        given (:meth:`pullback` maps to its base graph's edges instead).
    requires_grad : bool
        Whether a backward derives the features' gradient (False unless set, as for a torch
        tensor; read and set on the features they derive from).
    """

    __slots__ = ("pattern", "_values", "split", "order", "_loops", "_origin", "_requires_grad",
                 "_device")
    #: numpy defers to the expressions of a composition (``W @ E``, ``x + E``)
    __array_ufunc__ = None
    __array_priority__ = 2500

    def __init__(self, pattern, values: np.ndarray | LoopedValues,
                 order: np.ndarray | slice | None,
                 loops: _Loops | None = None, origin: EdgeFeatures | None = None):
        self.pattern, self.order = pattern, order
        split = isinstance(values, LoopedValues)
        self._values, self.split = (None, values) if split else (values, None)
        self._loops = loops
        #: the features these were copied from (another dtype, a grid's block): the flag's
        self._origin = origin
        self._requires_grad = False
        self._device: dict = {}

    def _source(self) -> EdgeFeatures:
        """The features these derive from, through loops and copies: the given ones."""
        f = self
        while True:
            up = f._loops.base if f._loops is not None else f._origin
            if up is None:
                return f
            f = up

    @property
    def requires_grad(self) -> bool:
        """Whether a backward derives the gradient of these features."""
        return self._source()._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"requires_grad must be True or False, got {value!r}")
        self._source()._requires_grad = bool(value)

    def requires_grad_(self, requires_grad: bool = True) -> EdgeFeatures:
        """Set :attr:`requires_grad` (for every graph derived from the same given features);
        returns these features, as ``torch.Tensor.requires_grad_`` does. Set it before the
        forward: the forward decides what its backward computes."""
        self.requires_grad = requires_grad
        return self

    @property
    def values(self) -> np.ndarray:
        """The ``(nnz, f)`` features in the pattern's CSR order (made once from
        :attr:`split` for a graph with loops, at the first read)."""
        if self._values is not None:
            return self._values

        def edges():
            _, (rows, cols) = self._loops.edges()
            return self._loops.ids[rows], cols
        return self.split.interleaved(edges)

    @property
    def f(self) -> int:
        """Features per edge."""
        return int(self._stored.shape[1])

    @property
    def dtype(self) -> np.dtype:
        return self._stored.dtype

    @property
    def _stored(self) -> np.ndarray | LoopedValues:
        return self._values if self._values is not None else self.split

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(n, n, f)``: a virtual tensor over vertex pairs with ``f`` channels."""
        return (int(self.pattern.nrows), int(self.pattern.ncols), self.f)

    @property
    def nvals(self) -> int:
        return int(self._stored.shape[0])

    def given(self) -> np.ndarray:
        """The features in the order the edges were given, ``(m, f)``."""
        if self.order is None:
            raise ValueError("the features of a graph with added self loops have no given "
                             "order; read them from the graph they were built on")
        given = self.values[self.order]
        return given.copy() if isinstance(self.order, slice) else given

    def on(self, executor) -> Any:
        """The values as an array of ``executor`` (moved there once and kept): what its
        default ``edge_features`` hands a program."""
        key = id(executor)
        found = self._device.get(key)
        if found is None or found[0] is not executor:
            found = self._device[key] = (executor, executor.asarray(self.values))
        return found[1]

    def pullback(self, d: np.ndarray) -> tuple[EdgeFeatures, np.ndarray]:
        """``(base, d_base)``: a cotangent ``d`` (nnz, f) of these features taken back to the
        features they derive from (themselves, or the base graph's through the loops'
        fill rule), in the base's CSR order."""
        d = np.asarray(d)
        loops = self._loops
        if loops is None:
            return self, d
        at = _Placement.of(loops.edges, loops.ids)
        out = np.zeros_like(loops.base.values)
        out[at.kept] = d[at.kept_at]
        fill = loops.fill
        if isinstance(fill, str):
            d_fill = np.zeros((loops.n, d.shape[1]), d.dtype)     # every row's loop's
            d_fill[at.loop_rows] = d[at.loop_at]
            d_fill = loops.combine(d_fill, "sum")    # (a grid: from its diagonal rank)
            share = d_fill[at.rows]
            if fill == "mean":
                share /= np.maximum(loops.aux, 1)[at.rows][:, None]
            elif fill in ("max", "min"):            # to each (row, channel)'s winner
                share *= loops.aux[at.rows] == at.cols[:, None]
            out[at.kept] += share
        return loops.base.pullback(out)

    def __repr__(self) -> str:
        grad = ", requires_grad" if self.requires_grad else ""
        return f"EdgeFeatures({self.nvals} edges × {self.f}, {self.dtype.name}{grad})"

    # ------------------------------------------------------------------ as an expression
    def expression(self) -> Any:
        """These features as a virtual edge tensor of a composition
        (:class:`gblas_gnn.compose.expr.EdgeAttr`)."""
        if as_expression is None:
            raise TypeError("edge features compute in the expressions of gblas_gnn.ops "
                            "(import gblas_gnn)")
        return as_expression(self)

    def __matmul__(self, other):
        return self.expression() @ other

    def __add__(self, other):
        return self.expression() + other

    def __radd__(self, other):
        return other + self.expression()

    def __sub__(self, other):
        return self.expression() - other

    def __rsub__(self, other):
        return other - self.expression()

    def __mul__(self, other):
        return self.expression() * other

    def __rmul__(self, other):
        return other * self.expression()

    def __truediv__(self, other):
        return self.expression() / other

    def __neg__(self):
        return -self.expression()


def with_loops(base: EdgeFeatures, looped_pattern, edges: Edges, fill,
               combine: Combine = _alone, row_ids: np.ndarray | None = None,
               shift: np.ndarray | None = None) -> EdgeFeatures:
    """The features on the pattern of ``A + I`` (every vertex one loop), from ``base`` on A's
    pattern: existing loops removed, a loop per vertex filled by ``fill``
    (:func:`check_fill_value`), as PyG's ``remove_self_loops`` + ``add_self_loops``.
    ``edges()`` gives the two patterns' ``(rows, global source ids)`` in CSR order, rows
    local (``row_ids``: their global ids, default the same); on a grid's block ``combine``
    completes the fill over the grid row (the loops are the diagonal blocks', the rows'
    other edges everywhere). With ``shift`` (one process: the row pointers of ``A + I``
    minus A's) the features stay the base's and the loops' apart (:class:`LoopedValues`),
    else they are one interleaved array."""
    n = int(looped_pattern.nrows)
    ids = np.arange(n) if row_ids is None else row_ids
    at = _Placement.of(edges, ids)
    # no loops removed (the usual case): the base's own array, not a copy of it
    kept = base.values if at.kept.size == base.nvals else base.values[at.kept]
    fill_values, aux = loop_fill(kept, at.rows, at.cols, n, fill, combine)
    nnz = at.kept_at.size + at.loop_at.size
    if shift is not None:
        values = LoopedValues(base.values, fill_values, shift, nnz)
    else:
        values = np.empty((nnz, base.f), base.dtype)
        values[at.kept_at] = kept
        values[at.loop_at] = fill_values[at.loop_rows]
    return EdgeFeatures(looped_pattern, values, None,
                        _Loops(base, edges, ids, n, fill, aux, combine))
