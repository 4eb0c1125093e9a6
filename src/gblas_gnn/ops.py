"""The paper's building blocks (Table 2) as public functions, on any executor.

Sparse operands are edge tensors of the executor (:mod:`gblas_gnn.executors.edges`): a
``graphblas.Matrix`` (``scipy.sparse`` accepted and converted), the ``cuda`` executor's device
edge tensors or the ``dist`` executor's blocks; :func:`to_graphblas` gives a host
``graphblas.Matrix`` of any of them. Dense operands are arrays of the executor's array module
(``numpy.ndarray`` on the cpu); on the ``cuda`` executor a host ``numpy.ndarray`` is accepted
too and copied to the device for the call (a counted copy, as a layer's input is: pass
device arrays to avoid it). Every function validates its input before any work and keeps
the operands' dtype (float32 or float64) end to end. None builds an n×n dense matrix or an
|E|×k tensor.

Virtual tensors (:func:`rep`, :func:`factor` and the arithmetic between them) are lazy and
evaluate only under a sparse mask: ``A * leaky_relu(rep(d) + rep(s).T)``.

Inside a composed forward (:mod:`gblas_gnn.compose`) every function also takes traced arrays
and lazy sparse expressions: sparse results stay lazy until a dense result is needed (an
aggregation, a reduction), and the backward of the whole is derived.
"""

from __future__ import annotations

import numbers

import graphblas as gb
import numpy as np
import scipy.sparse as sp

from ._validate import FLOAT_DTYPES, dense_matrix, dense_vector
from .compose import sinks
from .compose.expr import (
    Const,
    EdgeAttr,
    EdgeDropout,
    EdgeLeaf,
    Expand,
    Expr,
    Gather,
    Masked,
    Softmax,
    Zip,
    _finish,
    as_sparse,
    edge_dtype,
    expr_unary,
    factor,
    is_edge_tensor,
    masked,
    rep,
)
from .compose.relational import stacked_relational_linear, stacked_runs
from .compose.segments import segment_linear
from .compose.tape import in_scope
from .compose.traced import Traced, apply_unary, lift, value_of, vertex_rows
from .compose.traced import concat as _concat
from .edge_attr import EdgeFeatures
from .executors import default, get_executor
from .executors.base import check_aggregation
from .executors.edges import StructuralMask
from .executors.patterns import AdjacencyPattern
from .ir import functions

__all__ = [
    "as_sparse", "to_graphblas", "softmax", "softmax_backward", "aggregate",
    "aggregate_with_edges", "sddmm",
    "outer_add", "row_sum", "row_max", "row_min", "col_sum", "row_scale", "col_scale",
    "spmm", "spmm_t", "gemm", "exp", "log", "relu", "leaky_relu", "elu", "tanh", "sigmoid",
    "gelu", "unary", "sqrt", "maximum", "row_norm", "normalize", "concat", "edge_dropout",
    "structure",
    "rep", "factor", "masked", "vertex_rows", "segment_linear", "relational_linear",
]


#: a sparse operand or result: an edge tensor of some executor
Edges = gb.Matrix | Expr


def to_graphblas(E, executor=None) -> gb.Matrix:
    """A host ``graphblas.Matrix`` with the pattern and values of the edge tensor ``E`` of
    ``executor`` (a ``graphblas.Matrix`` is returned as it is; a sparse expression is
    evaluated). On the ``dist`` executor ``E`` is this rank's block, and the matrix has the
    whole graph's ``n × n`` shape with the block's entries at their global vertex ids (no
    communication: the ranks' matrices add up to the whole)."""
    E = as_sparse(E, "E")
    if isinstance(E, Expr):
        E = sinks.materialize(E, executor)
    return get_executor(executor).to_graphblas(E)


def _dtype_of(S) -> np.dtype:
    return S.dtype if isinstance(S, Expr) else edge_dtype(S)


def _lazy(*args) -> bool:
    """Whether this call composes (inside a composed forward, or with a lazy operand)."""
    return in_scope() or any(isinstance(a, (Expr, Traced)) for a in args)


def _edge_expr(S, name: str = "S") -> Expr:
    if isinstance(S, StructuralMask):            # the pattern alone: one per stored entry
        return Masked(S.parent, Const(1.0), structural=True)
    S = as_sparse(S, name)
    return S if isinstance(S, Expr) else EdgeLeaf(S)


def _pattern_of(S):
    return S.pattern if isinstance(S, Expr) else S


def _resident(ex, x):
    """``x`` on the executor: a host ``numpy.ndarray`` given to a device executor is copied
    there (counted in its transfers, as a layer's input is); anything else is left as it is
    for the checks to judge."""
    if ex.xp is not np and isinstance(x, np.ndarray) and not isinstance(x, ex.xp.ndarray):
        return ex.asarray(x)
    return x


def _features(ex, S, H, name: str = "H", side: str = "ncols"):
    # rows in the executor's layout of dense tensors: a grid holds the sources by rows too
    rows = ex.source_rows(S) if side == "ncols" else ex.target_rows(S)
    H = dense_matrix(_resident(ex, H), name, rows=rows, xp=ex.xp, finite=ex.all_finite)
    if H.dtype != _dtype_of(S):
        raise TypeError(f"{name} is {H.dtype} but the sparse operand is {_dtype_of(S)}; "
                        "convert one of them explicitly")
    return H


def _vector(ex, S, v, name: str, size: int):
    v = dense_vector(_resident(ex, v), name, size=size, xp=ex.xp, finite=ex.all_finite)
    if v.dtype != _dtype_of(S):
        raise TypeError(f"{name} is {v.dtype} but the sparse operand is {_dtype_of(S)}")
    return v


def _operand(ex, S, X, name: str, side: str, ndim: int | None = None):
    """A dense operand of a composed call: traced, or a validated array (a constant),
    checked against the pattern's layout (``side``: ``"row"`` targets, ``"col"``
    sources)."""
    A = _pattern_of(S)
    rows = ex.target_rows(A) if side == "row" else ex.source_rows(A)
    if isinstance(X, Traced):
        v = X.value
        if not X.vertex:
            raise TypeError(f"{name} must be vertex-indexed (one row per vertex)")
    else:
        X = _resident(ex, X)
        if not isinstance(X, ex.xp.ndarray):
            raise TypeError(f"{name} must be a {'numpy' if ex.xp is np else 'device'}.ndarray "
                            f"or a traced array, got {type(X).__name__}")
        v = X
        if v.dtype in FLOAT_DTYPES and not ex.all_finite(v):
            raise ValueError(f"{name} contains NaN or Inf")
    if ndim is not None and v.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D here, got shape {tuple(v.shape)}")
    if v.shape[0] != rows:
        raise ValueError(f"{name} has {v.shape[0]} rows, the pattern needs {rows}")
    if v.dtype != _dtype_of(S):
        raise TypeError(f"{name} is {v.dtype} but the sparse operand is {_dtype_of(S)}; "
                        "convert one of them explicitly")
    return X if isinstance(X, Traced) else (lift(X, True) if in_scope() else X)


def _aggr_name(aggr):
    """A semiring object is named in a program's sink (its structure stays hashable)."""
    return aggr if isinstance(aggr, str) else aggr.name


def _messages(ex, S: Expr, H, name: str, side: str):
    heads = S.trail[0] if S.trail else None
    H = _operand(ex, S, H, name, side, ndim=2 if heads is None else 3)
    if heads is not None and H.shape[1] != heads:
        raise ValueError(f"{name} of shape {tuple(H.shape)} does not match the {heads} heads "
                         "of the attention: (n, heads, f) is needed")
    return H


# ---------------------------------------------------------------------- softmax
def softmax(S, executor=None):
    r"""Row-wise stable softmax over the stored entries of ``S`` (per head).

    .. math:: \mathrm{sm}(S) = \exp(S - \mathrm{rep}(\max_j S)) \oslash
              \mathrm{rs}(\exp(S - \mathrm{rep}(\max_j S)))

    An empty row stays empty (never NaN); values around 1e4 stay finite and exact.
    """
    if _lazy(S):
        return _finish(Softmax(_edge_expr(S)))
    return get_executor(executor).softmax(as_sparse(S))


def softmax_backward(Psi, dPsi, executor=None):
    r"""Backward of :func:`softmax`.

    .. math:: dS = \Psi \odot (d\Psi - \mathrm{rep}(\mathrm{sum}(\Psi \odot d\Psi)))
    """
    if _lazy(Psi, dPsi):
        Psi, dPsi = _edge_expr(Psi, "Psi"), _edge_expr(dPsi, "dPsi")
        return Psi * (dPsi - rep(row_sum(Psi * dPsi)))
    return get_executor(executor).softmax_backward(as_sparse(Psi, "Psi"),
                                                   as_sparse(dPsi, "dPsi"))


# ---------------------------------------------------------------------- aggregation
def aggregate(S, H, aggr="sum", executor=None):
    r"""``Z = S ⊕ H``: aggregate the weighted messages ``S[i,j]·H[j]`` of each row.

    ``aggr`` is one of

    * ``"sum"``  — :math:`Z_i = \sum_j S_{ij} H_j` (factory ``plus_times``, saxpy5),
    * ``"max"`` / ``"min"`` — :math:`Z_{ic} = \max_j / \min_j\ S_{ij} H_{jc}` (so on a 0/1
      pattern, the neighbour max/min: the tropical aggregation); the gradient goes to the
      winner of each ``(i, c)``, ties to the first stored entry (the lowest source id),
    * ``"mean"`` — :math:`Z_i = \frac{1}{|N(i)|}\sum_j S_{ij} H_j`,

    or a semiring (name or object from :mod:`gblas_gnn.semirings`). An empty row gives 0.
    With heads (``S`` of shape ``(n, n, heads)``), ``H`` is ``(n, heads, f)`` and so is
    ``Z``. ``S = ops.structure(A)`` aggregates over A's pattern, its values not read (one
    per stored entry: ``"mean"`` is then the neighbours' mean, as GraphSAGE's).

    ``H`` may be an expression with a channel axis instead of an array: messages computed
    at every edge, such as GINE's ``relu(rep(X).T + g.edge_attr @ W)`` or
    ``g.edge_attr`` itself, :math:`Z_i = \bigoplus_j S_{ij} M_{ij}` (``"sum"``, ``"mean"``,
    ``"max"``, ``"min"``), evaluated edge by edge in the aggregation's own pass (never an
    |E|×k array); with heads, ``M`` is ``(n, n, heads, k)`` or shared by the heads.
    """
    check_aggregation(aggr)
    if isinstance(H, (Expr, EdgeFeatures)):
        return _aggregate_messages(S, H, aggr)
    if _lazy(S, H) or isinstance(S, StructuralMask):
        ex = get_executor(executor)
        S = _edge_expr(S)
        return sinks.run(S, ("aggregate", _aggr_name(aggr)), _messages(ex, S, H, "H", "col"))
    ex = get_executor(executor)
    S = as_sparse(S)
    H = _features(ex, S, H)
    return ex.aggregate(S, H, aggr)


def _aggregate_messages(S, M, aggr):
    """:func:`aggregate` of messages computed at the edges (an expression ``M``)."""
    if not isinstance(aggr, str) or aggr not in ("sum", "mean", "max", "min"):
        raise ValueError(f"messages computed at the edges aggregate by 'sum', 'mean', 'max' "
                         f"or 'min', got {aggr!r}")
    S = _edge_expr(S)
    M = M if isinstance(M, Expr) else M.expression()
    if not M.trail or len(M.trail) > 2:
        raise ValueError(f"messages need a channel axis, shape (n, n, k) or (n, n, heads, k); "
                         f"got {M.shape}")
    if S.trail and len(M.trail) == 2 and M.trail[0] not in (1, S.trail[0]):
        raise ValueError(f"messages of shape {M.shape} for weights of {S.trail[0]} heads")
    weight = Expand(S) if S.trail else Expand(Expand(S))
    root = Zip("mul", weight, M)
    out = sinks.run(root, ("messages", "sum" if aggr == "mean" else aggr))
    if aggr == "mean":
        counts = sinks.run(Masked(S.pattern, Const(1.0), structural=True), ("rows", "sum"))
        counts = value_of(counts) if isinstance(counts, Traced) else counts
        out = out / get_executor(None).xp.maximum(counts, 1)[:, None, None]
    heads = bool(S.trail) or len(M.trail) == 2
    # (rows as the executor keeps them: on a sharded grid fewer than the pattern's)
    return out if heads else out.reshape(out.shape[0], M.trail[-1])


def aggregate_with_edges(S, H, E):
    r"""Two sums sharing their weights, in one pass over the edges, side by side:
    :math:`[\,\sum_j S_{ij} H_j \mid \sum_j S_{ij} E_{ji}\,]`, the messages ``H`` and the
    edges' own features ``E`` (``g.edge_attr``, shared by the heads) appended to them.

    With heads, ``S`` is ``(n, n, heads)``, ``H`` ``(n, heads, f)`` and the result
    ``(n, heads, f + f_e)``; without, ``(n, f + f_e)``. It is the concatenation of
    :func:`aggregate` (``"sum"``) of ``H`` and of ``E``, at once: the weights (a softmax,
    say) are computed once, and so is their cotangent,
    :math:`\bar S_{ij} = \langle \bar Z_i, H_j \rangle + \langle \bar Z^e_i, E_{ji}
    \rangle`, where two aggregations each recompute them, forward and backward.
    TransformerConv with ``edge_dim`` is its user: :math:`\sum_j \alpha_{ij} (V_j +
    W_e e_{ji}) = [Z_i \mid Z^e_i] \begin{bmatrix} I \\ W_e \end{bmatrix}`.

    The ``cpu`` executor runs it in its kernels when the features are read as data (they
    do not require their gradient); the other executors, and features whose gradient is
    derived, take the reference lowering (same values).
    """
    if isinstance(E, EdgeFeatures):
        E = E.expression()
    if not isinstance(E, EdgeAttr):
        raise TypeError(f"E must be a graph's edge features (g.edge_attr), got "
                        f"{type(E).__name__}")
    S = _edge_expr(S)
    H = _messages(get_executor(None), S, H, "H", "col")
    return sinks.run(S, ("aggregate", "sum"), H, edges=E)


def relational_linear(g, H, W, aggr: str = "mean", executor=None, root=None, bias=None):
    r"""Every relation's aggregation through its own linear map (R-GCN's sum), with an
    optional root term and bias:

    .. math::  Z_i = \sum_{r < R} \Big(\textstyle\bigoplus_{j \in N_r(i)} H_j\Big) W_r
               \;[+\, H_i W_{root}]\;[+\, b]

    for a graph with relations ``g`` (``Graph.from_edge_index(..., edge_type=t)``), ``H``
    (n, k), ``W`` (R, k, o), ``root`` (k, o) and ``bias`` (o,), traced or arrays;
    :math:`\bigoplus` is ``"sum"``, ``"mean"`` (over the relation's in-edges; a vertex
    without any gets 0) or ``"max"``.

    One process with a sum or a mean runs it over the stacked relations
    (:mod:`gblas_gnn.compose.relational`): with ``k ≤ o`` one aggregation into (n, R·k), the
    root term's ``H`` a block beside them, one product with ``W`` and ``root`` stacked and the
    bias added as it is written; with ``k > o`` the projections first, each vertex's through
    the blocks of the relations it is a source of, and one aggregation at width ``o``; a
    backward as short either way, and on a typed graph each group of vertices with the
    blocks of its own relations (:meth:`gblas_gnn.Graph.segmented_relations`), as long as
    the stack holds at most 16 blocks a vertex (a knowledge graph of hundreds of relations
    takes the loop below). Anywhere
    else it is composed relation by relation, :math:`\sum_r`
    ``aggregate(structure(g.relation(r)), H, aggr) @ W[r]`` (a sum
    or mean with ``k > o`` projects first, aggregating at the smaller width), a relation
    without edges skipped, then ``+ H @ root + bias``: the same value and gradients.
    """
    if not isinstance(aggr, str) or aggr not in ("sum", "mean", "max"):
        raise ValueError(f"relational_linear aggregates by 'sum', 'mean' or 'max', got {aggr!r}")
    ex = get_executor(executor)
    R = g.num_relations
    if R is None:
        raise ValueError("relational_linear needs a graph with relations: build it with "
                         "edge_type (Graph.from_edge_index(edge_index, n, edge_type=t))")
    Wv, Hv = value_of(W), value_of(H)
    if getattr(Hv, "ndim", None) != 2:
        raise ValueError(f"relational_linear: H must be (n, k), got shape "
                         f"{getattr(Hv, 'shape', None)}")
    if Wv.ndim != 3 or Wv.shape[0] != R or Wv.shape[1] != Hv.shape[1]:
        raise ValueError(f"relational_linear: W must be (R={R}, k={Hv.shape[1]}, o), got "
                         f"{tuple(Wv.shape)}")
    k, o = Wv.shape[1], Wv.shape[2]
    for name, x, shape in (("root", root, (k, o)), ("bias", bias, (o,))):
        if x is not None and tuple(getattr(value_of(x), "shape", ())) != shape:
            raise ValueError(f"relational_linear: {name} must be of shape {shape}, got "
                             f"{getattr(value_of(x), 'shape', type(x).__name__)}")
    dtypes = {np.dtype(d) for d in (Hv.dtype, Wv.dtype, g.dtype,
                                    *(value_of(x).dtype for x in (root, bias)
                                      if x is not None))}
    if len(dtypes) != 1:
        raise TypeError(f"relational_linear: H is {Hv.dtype}, W {Wv.dtype} and the graph "
                        f"{np.dtype(g.dtype)}"
                        + "".join(f", {name} {value_of(x).dtype}"
                                  for name, x in (("root", root), ("bias", bias))
                                  if x is not None)
                        + "; convert them to one dtype explicitly")
    if stacked_runs(ex, g, aggr, k, o, root is not None):
        if Hv.shape[0] != g.n:
            raise ValueError(f"relational_linear: H has {Hv.shape[0]} rows, the graph {g.n} "
                             "vertices")
        return stacked_relational_linear(ex, g, H, W, aggr, root, bias)
    used = [r for r in range(R) if g.relation(r).nnz > 0] or [0]   # (0: computed as zeros)
    Z = None
    for r in used:
        S = structure(g.relation(r))
        term = (aggregate(S, H @ W[r], aggr) if aggr != "max" and k > o
                else aggregate(S, H, aggr) @ W[r])
        Z = term if Z is None else Z + term
    if root is not None:
        Z = Z + H @ root
    if bias is not None:
        Z = Z + bias
    return Z


def spmm(S, H, semiring="plus_times", executor=None):
    """``Z[i] = ⊕_j S[i,j] ⊗ H[j]`` over a semiring (empty row → 0)."""
    if _lazy(S, H):
        return aggregate(S, H, semiring, executor)
    ex = get_executor(executor)
    S = as_sparse(S)
    return ex.spmm(S, _features(ex, S, H), semiring)


def spmm_t(S, H, semiring="plus_times", executor=None):
    """``Z[j] = ⊕_i S[i,j] ⊗ H[i]``: the product with ``Sᵀ`` (empty column → 0)."""
    if _lazy(S, H):
        check_aggregation(semiring)
        ex = get_executor(executor)
        S = _edge_expr(S)
        return sinks.run(S, ("spmm_t", _aggr_name(semiring)),
                         _messages(ex, S, H, "H", "row"))
    ex = get_executor(executor)
    S = as_sparse(S)
    return ex.spmm_t(S, _features(ex, S, H, side="nrows"), semiring)


def gemm(X, W, executor=None):
    """Dense ``X W`` (the projection ``H W``)."""
    if _lazy(X, W):
        return lift(X) @ lift(W)
    ex = get_executor(executor)
    X = dense_matrix(_resident(ex, X), "X", xp=ex.xp, finite=ex.all_finite)
    W = dense_matrix(_resident(ex, W), "W", rows=X.shape[1], dtype=X.dtype, xp=ex.xp,
                     finite=ex.all_finite)
    return ex.gemm(X, W)


# ---------------------------------------------------------------------- edge tensors
def sddmm(A, X, Y, executor=None):
    r"""``A ⊙ (X Yᵀ)`` on A's pattern (masked dot3 ``plus_times``); never forms ``X Yᵀ``."""
    if _lazy(A, X, Y):
        return masked(A, factor(X) @ factor(Y).T, executor)
    ex = get_executor(executor)
    A = as_sparse(A, "A")
    X = _features(ex, A, X, "X", side="nrows")
    Y = _features(ex, A, Y, "Y")
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"X and Y must have the same number of columns, got {X.shape} {Y.shape}")
    return masked(A, factor(X) @ factor(Y).T, executor)


def outer_add(A, u, v, executor=None):
    """A-pattern matrix with entries ``u[i] + v[j]`` (masked ``min_plus`` dot3, no n×n)."""
    if _lazy(A, u, v):
        return masked(A, rep(u) + rep(v).T, executor, structural=True)
    ex = get_executor(executor)
    A = as_sparse(A, "A")
    return ex.outer_add(A, _vector(ex, A, u, "u", A.nrows), _vector(ex, A, v, "v", A.ncols))


def _reduce(S, op: str, axis: str, executor):
    if _lazy(S):
        return sinks.run(_edge_expr(S), ("rows" if axis == "row" else "cols", op))
    S = as_sparse(S)
    ex = get_executor(executor)
    return (ex.row_reduce if axis == "row" else ex.col_reduce)(S, op)


def row_sum(S, executor=None):
    """``sum(S) = S 1``: row sums over stored entries (empty row → 0)."""
    return _reduce(S, "sum", "row", executor)


def row_max(S, executor=None):
    """Row maxima over stored entries (empty row → 0)."""
    return _reduce(S, "max", "row", executor)


def row_min(S, executor=None):
    """Row minima over stored entries (empty row → 0)."""
    return _reduce(S, "min", "row", executor)


def col_sum(S, executor=None):
    """``1ᵀ S``: column sums over stored entries (empty column → 0)."""
    return _reduce(S, "sum", "col", executor)


_SCALE = {"times": "mul", "div": "div", "plus": "add", "minus": "sub"}


def _scaled(S, v, op: str, side: str, executor):
    _check_scale_op(op)
    if _lazy(S, v):
        S = _edge_expr(S)
        ex = get_executor(executor)
        v = _operand(ex, S, v, "v", side, ndim=1)
        return _finish(Zip(_SCALE[op], S, Gather(v, side)))
    ex = get_executor(executor)
    S = as_sparse(S)
    if side == "row":
        return ex.row_scale(S, _vector(ex, S, v, "v", S.nrows), op)
    return ex.col_scale(S, _vector(ex, S, v, "v", S.ncols), op)


def row_scale(S, v, op: str = "times", executor=None):
    """``S ⊛ rep(v)`` on S's pattern: ``S[i,j] op v[i]`` with op in times, div, plus, minus."""
    return _scaled(S, v, op, "row", executor)


def col_scale(S, v, op: str = "times", executor=None):
    """``S ⊛ rep(v)ᵀ`` on S's pattern: ``S[i,j] op v[j]``."""
    return _scaled(S, v, op, "col", executor)


def _check_scale_op(op: str) -> None:
    if op not in ("times", "div", "plus", "minus"):
        raise ValueError(f"op must be 'times', 'div', 'plus' or 'minus', got {op!r}")


def structure(A):
    """A's pattern without its values: ``structure(A) * expr`` evaluates ``expr`` on A's
    stored entries (``A * expr`` also multiplies by A's values).

    ``A`` may be a graph (a :class:`~gblas_gnn.Graph`, or a
    :class:`~gblas_gnn.dist.DistGraph`'s block on a grid): its :attr:`~gblas_gnn.Graph.edge_tensor`,
    so that ``structure(g.with_self_loops())`` runs on the pattern of ``A + I`` without a
    ``graphblas.Matrix`` of it (the layers' form; issue 21)."""
    edges = getattr(A, "edge_tensor", None)
    if edges is not None:
        return StructuralMask(edges)
    if isinstance(A, AdjacencyPattern):
        return StructuralMask(A)
    return StructuralMask(as_sparse(A, "A"))


def edge_dropout(S, p: float, key: int, heads: int | None = None):
    r"""``S ⊙ M``: attention dropout with counter-based scales ``M`` on S's pattern, one per
    edge (and head): ``1/(1-p)`` where the hash :math:`u(\kappa; h, i, j) \ge p`, else 0,
    the same on every executor and grid (:mod:`gblas_gnn.executors._random`). Lazy: for a
    composed forward; draw ``key`` from a generator per training step."""
    p = float(p)
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {p}")
    S = _edge_expr(S)
    if heads is None and S.trail:
        heads = S.trail[0]
    return _finish(Zip("mul", S, EdgeDropout(S.pattern, key, p, heads, S.dtype)))


# ---------------------------------------------------------------------- elementwise functions
def _elementwise(fn: str, x, alpha=None, executor=None):
    """``f(x)`` of a sparse operand (edge-wise), a virtual or traced one (lazily / traced),
    or a dense array."""
    if isinstance(x, Expr):
        return expr_unary(fn, x, alpha)
    if isinstance(x, Traced):
        return apply_unary(fn, x, alpha)
    if is_edge_tensor(x) or sp.issparse(x):
        if in_scope():
            return expr_unary(fn, _edge_expr(x), alpha)
        if fn in _EXECUTOR_APPLY:
            return get_executor(executor).apply(as_sparse(x), fn, alpha)
        with default(get_executor(executor)):
            return expr_unary(fn, _edge_expr(x), alpha)
    ex = get_executor(executor)
    if isinstance(x, ex.xp.ndarray):
        if in_scope():
            return apply_unary(fn, lift(x), alpha)
        return functions.unary(ex.xp, fn, x, functions.check_unary(fn, alpha))
    raise TypeError(f"{fn} needs a sparse matrix, an expression or an array, got "
                    f"{type(x).__name__}")


#: functions the executors apply to edge tensors themselves
_EXECUTOR_APPLY = ("exp", "relu", "leaky_relu")


def unary(fn: str, S, alpha: float | None = None, executor=None):
    """Function ``fn`` of the table (:mod:`gblas_gnn.ir.functions`, with its constant
    ``alpha`` where it takes one), applied as :func:`exp` is: the way to a function added with
    :func:`~gblas_gnn.ir.functions.register_unary` (``unary("softplus", x)``).

    Raises ``ValueError`` for an unknown name or a missing or invalid constant."""
    return _elementwise(fn, S, functions.check_unary(fn, alpha), executor)


def exp(S, executor=None):
    """``exp``: edge-wise on a sparse matrix, lazily on a virtual tensor, on a dense array."""
    return _elementwise("exp", S, executor=executor)


def log(S, executor=None):
    """Natural logarithm (elementwise, as :func:`exp`)."""
    return _elementwise("log", S, executor=executor)


def relu(S, executor=None):
    """``max(x, 0)`` (elementwise, as :func:`exp`)."""
    return _elementwise("relu", S, executor=executor)


def leaky_relu(S, negative_slope: float = 0.2, executor=None):
    """LeakyReLU ``x if x > 0 else negative_slope·x`` (elementwise, as :func:`exp`)."""
    if not np.isfinite(negative_slope) or negative_slope < 0:
        raise ValueError(f"negative_slope must be finite and ≥ 0, got {negative_slope}")
    return _elementwise("leaky_relu", S, float(negative_slope), executor)


def elu(S, alpha: float = 1.0, executor=None):
    """ELU ``x if x > 0 else alpha·(eˣ − 1)`` (elementwise, as :func:`exp`)."""
    return _elementwise("elu", S, alpha, executor)


def tanh(S, executor=None):
    """``tanh`` (elementwise, as :func:`exp`)."""
    return _elementwise("tanh", S, executor=executor)


def sigmoid(S, executor=None):
    """The logistic function ``1 / (1 + e⁻ˣ)`` (elementwise, as :func:`exp`)."""
    return _elementwise("sigmoid", S, executor=executor)


def gelu(S, executor=None):
    r"""The exact GELU :math:`x \Phi(x) = \tfrac{x}{2}(1 + \mathrm{erf}(x/\sqrt 2))`
    (elementwise, as :func:`exp`)."""
    return _elementwise("gelu", S, executor=executor)


def sqrt(S, executor=None):
    """Square root (elementwise, as :func:`exp`)."""
    return _elementwise("sqrt", S, executor=executor)


def maximum(x, y):
    """Elementwise ``max(x, y)`` of traced arrays, expressions and numbers; the gradient
    goes to ``x`` where ``x > y`` and to ``y`` elsewhere (``maximum(n, eps)`` clamps)."""
    from .compose.expr import expr_binary
    from .compose.traced import apply_binary

    if isinstance(x, Expr) or isinstance(y, Expr):
        return expr_binary("maximum", x, y)
    if isinstance(x, Traced) or isinstance(y, Traced):
        return apply_binary("maximum", x, y)
    return get_executor(None).xp.maximum(x, y)


def _row_rule(name: str, H, eps):
    """Run the row rule ``name`` of :mod:`.compose.rows` on a traced or plain (n, k) ``H``."""
    from .compose import rows

    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not np.isfinite(eps) \
            or eps < 0:
        raise ValueError(f"eps must be a finite number ≥ 0, got {eps!r}")
    if isinstance(H, Traced):
        return getattr(rows, name)(H, float(eps))
    ex = get_executor(None)
    H = _resident(ex, H)
    public = "row_norm" if name == "row_norm" else "normalize"     # the name users called
    if not isinstance(H, ex.xp.ndarray) or H.dtype.kind != "f":
        raise TypeError(f"{public} needs a floating-point array, got {type(H).__name__}")
    if in_scope():
        return getattr(rows, name)(lift(H, vertex=True), float(eps))
    if H.ndim != 2:
        raise ValueError(f"{public} needs an (n, k) array, got shape {tuple(H.shape)}")
    norms = ex.xp.maximum(ex.xp.sqrt(ex.row_dot(H, H)).astype(H.dtype, copy=False),
                          H.dtype.type(eps))
    if name == "row_norm":
        return norms
    Y = H / norms[:, None]
    return (Y, norms) if name == "normalize_with_norms" else Y


def row_norm(H, eps: float = 0.0):
    r"""The Euclidean norm of every row, clamped below: :math:`\max(\lVert H_i \rVert_2,
    \epsilon)`, shape (n,). Differentiable (one recorded operation inside a composition; the
    gradient of a clamped row is 0)."""
    return _row_rule("row_norm", H, eps)


def normalize(H, eps: float = 1e-12, return_norms: bool = False):
    r"""Rows scaled to unit length: :math:`H_i / \max(\lVert H_i \rVert_2, \epsilon)`
    (``torch.nn.functional.normalize(H, dim=1)``), shape (n, k). Differentiable, one
    recorded operation: :math:`\bar H_i = (\bar{\hat H}_i - \hat H_i \langle \hat H_i,
    \bar{\hat H}_i \rangle) / \max(\lVert H_i \rVert, \epsilon)`.

    With ``return_norms``: ``(normalize(H, eps), row_norm(H, eps))``, the norms computed
    once."""
    if not isinstance(return_norms, bool):
        raise TypeError(f"return_norms must be a bool, got {type(return_norms).__name__}")
    return _row_rule("normalize_with_norms" if return_norms else "normalize", H, eps)


def concat(xs, axis: int = -1):
    """Concatenate arrays along ``axis`` (e.g. per-head outputs side by side); traced
    arrays keep their gradient."""
    if in_scope() or any(isinstance(x, Traced) for x in xs):
        return _concat(xs, axis)
    return get_executor(None).xp.concatenate(list(xs), axis=axis)
