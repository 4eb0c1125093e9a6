"""The paper's building blocks (Table 2) as public functions, on any executor.

Sparse operands are ``graphblas.Matrix`` (``scipy.sparse`` accepted and converted) or an edge
tensor of the executor (``executor="cuda"`` returns and takes device edge tensors;
:func:`to_graphblas` gives a host ``graphblas.Matrix`` of any of them); dense operands are
arrays of the executor's array module (``numpy.ndarray`` on the cpu). Every function validates
its input before any work and keeps the operands' dtype (float32 or float64) end to end. None
builds an n×n dense matrix or an |E|×k tensor.

Virtual tensors (:func:`rep`, :func:`factor` and the arithmetic between them) are lazy and
evaluate only under a sparse mask: ``A * leaky_relu(rep(d) + rep(s).T)``.
"""

from __future__ import annotations

import graphblas as gb
import numpy as np
import scipy.sparse as sp

from ._validate import FLOAT_DTYPES, dense_matrix, dense_vector
from .executors import get_executor
from .executors.base import EdgeTensorBase, check_aggregation
from .virtual import UnaryNode, Virtual, factor, masked, rep

__all__ = [
    "as_sparse", "to_graphblas", "softmax", "softmax_backward", "aggregate", "sddmm", "outer_add",
    "row_sum", "row_max", "row_min", "col_sum", "row_scale", "col_scale", "spmm", "spmm_t",
    "gemm", "exp", "relu", "leaky_relu", "rep", "factor", "masked",
]


#: a sparse operand or result: a ``graphblas.Matrix`` or an executor's own edge tensor
Edges = gb.Matrix | EdgeTensorBase


def as_sparse(S, name: str = "S") -> Edges:
    """``S`` as a float sparse operand: a ``graphblas.Matrix`` (a ``scipy.sparse`` matrix or a
    :class:`~gblas_gnn.Graph` is converted) or an executor's own edge tensor."""
    from .graph import Graph

    if isinstance(S, Graph):
        return S.A
    if sp.issparse(S):
        if S.dtype not in FLOAT_DTYPES:
            raise TypeError(f"{name} must hold float32 or float64 values, got {S.dtype}")
        S = gb.io.from_scipy_sparse(S.tocsr())
    if not isinstance(S, (gb.Matrix, EdgeTensorBase)):
        raise TypeError(f"{name} must be a graphblas.Matrix or scipy.sparse matrix (or an "
                        f"executor's edge tensor), got {type(S).__name__}")
    if _dtype_of(S) not in FLOAT_DTYPES:
        raise TypeError(f"{name} must hold FP32 or FP64 values, got {_dtype_of(S)}")
    return S


def to_graphblas(E, executor=None) -> gb.Matrix:
    """A host ``graphblas.Matrix`` with the pattern and values of the edge tensor ``E`` of
    ``executor`` (a ``graphblas.Matrix`` is returned as it is)."""
    return get_executor(executor).to_graphblas(as_sparse(E, "E"))


def _dtype_of(S) -> np.dtype:
    return np.dtype(S.dtype.np_type) if isinstance(S, gb.Matrix) else np.dtype(S.dtype)


def _features(ex, S, H, name: str = "H", side: str = "ncols"):
    rows = S.ncols if side == "ncols" else S.nrows
    H = dense_matrix(H, name, rows=rows, xp=ex.xp)
    if H.dtype != _dtype_of(S):
        raise TypeError(f"{name} is {H.dtype} but the sparse operand is {_dtype_of(S)}; "
                        "convert one of them explicitly")
    return H


def _vector(ex, S, v, name: str, size: int):
    v = dense_vector(v, name, size=size, xp=ex.xp)
    if v.dtype != _dtype_of(S):
        raise TypeError(f"{name} is {v.dtype} but the sparse operand is {_dtype_of(S)}")
    return v


# ---------------------------------------------------------------------- softmax
def softmax(S, executor=None) -> Edges:
    r"""Row-wise stable softmax over the stored entries of ``S``.

    .. math:: \mathrm{sm}(S) = \exp(S - \mathrm{rep}(\max_j S)) \oslash
              \mathrm{rs}(\exp(S - \mathrm{rep}(\max_j S)))

    An empty row stays empty (never NaN); values around 1e4 stay finite and exact.
    """
    return get_executor(executor).softmax(as_sparse(S))


def softmax_backward(Psi, dPsi, executor=None) -> Edges:
    r"""Backward of :func:`softmax`.

    .. math:: dS = \Psi \odot (d\Psi - \mathrm{rep}(\mathrm{sum}(\Psi \odot d\Psi)))
    """
    return get_executor(executor).softmax_backward(as_sparse(Psi, "Psi"), as_sparse(dPsi, "dPsi"))


# ---------------------------------------------------------------------- aggregation
def aggregate(S, H, aggr="sum", executor=None) -> np.ndarray:
    r"""``Z = S ⊕ H``: aggregate the weighted messages ``S[i,j]·H[j]`` of each row.

    ``aggr`` is one of

    * ``"sum"``  — :math:`Z_i = \sum_j S_{ij} H_j` (factory ``plus_times``, saxpy5),
    * ``"max"`` / ``"min"`` — :math:`Z_{ic} = \max_j / \min_j\ S_{ij} H_{jc}` (so on a 0/1
      pattern, the neighbour max/min: the tropical aggregation),
    * ``"mean"`` — :math:`Z_i = \frac{1}{|N(i)|}\sum_j S_{ij} H_j`,

    or a semiring (name or object from :mod:`gblas_gnn.semirings`). An empty row gives 0.
    """
    ex = get_executor(executor)
    S = as_sparse(S)
    H = _features(ex, S, H)
    check_aggregation(aggr)
    return ex.aggregate(S, H, aggr)


def spmm(S, H, semiring="plus_times", executor=None) -> np.ndarray:
    """``Z[i] = ⊕_j S[i,j] ⊗ H[j]`` over a semiring (empty row → 0)."""
    ex = get_executor(executor)
    S = as_sparse(S)
    return ex.spmm(S, _features(ex, S, H), semiring)


def spmm_t(S, H, semiring="plus_times", executor=None) -> np.ndarray:
    """``Z[j] = ⊕_i S[i,j] ⊗ H[i]``: the product with ``Sᵀ`` (empty column → 0)."""
    ex = get_executor(executor)
    S = as_sparse(S)
    return ex.spmm_t(S, _features(ex, S, H, side="nrows"), semiring)


def gemm(X, W, executor=None) -> np.ndarray:
    """Dense ``X W`` (the projection ``H W``)."""
    ex = get_executor(executor)
    X = dense_matrix(X, "X", xp=ex.xp)
    W = dense_matrix(W, "W", rows=X.shape[1], dtype=X.dtype, xp=ex.xp)
    return ex.gemm(X, W)


# ---------------------------------------------------------------------- edge tensors
def sddmm(A, X, Y, executor=None) -> Edges:
    r"""``A ⊙ (X Yᵀ)`` on A's pattern (masked dot3 ``plus_times``); never forms ``X Yᵀ``."""
    ex = get_executor(executor)
    A = as_sparse(A, "A")
    X = _features(ex, A, X, "X", side="nrows")
    Y = _features(ex, A, Y, "Y")
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"X and Y must have the same number of columns, got {X.shape} {Y.shape}")
    return masked(A, factor(X) @ factor(Y).T, executor)


def outer_add(A, u, v, executor=None) -> Edges:
    """A-pattern matrix with entries ``u[i] + v[j]`` (masked ``min_plus`` dot3, no n×n)."""
    ex = get_executor(executor)
    A = as_sparse(A, "A")
    return ex.outer_add(A, _vector(ex, A, u, "u", A.nrows), _vector(ex, A, v, "v", A.ncols))


def _reduce(S, op: str, axis: str, executor) -> np.ndarray:
    S = as_sparse(S)
    ex = get_executor(executor)
    return (ex.row_reduce if axis == "row" else ex.col_reduce)(S, op)


def row_sum(S, executor=None) -> np.ndarray:
    """``sum(S) = S 1``: row sums over stored entries (empty row → 0)."""
    return _reduce(S, "sum", "row", executor)


def row_max(S, executor=None) -> np.ndarray:
    """Row maxima over stored entries (empty row → 0)."""
    return _reduce(S, "max", "row", executor)


def row_min(S, executor=None) -> np.ndarray:
    """Row minima over stored entries (empty row → 0)."""
    return _reduce(S, "min", "row", executor)


def col_sum(S, executor=None) -> np.ndarray:
    """``1ᵀ S``: column sums over stored entries (empty column → 0)."""
    return _reduce(S, "sum", "col", executor)


def row_scale(S, v, op: str = "times", executor=None) -> Edges:
    """``S ⊛ rep(v)`` on S's pattern: ``S[i,j] op v[i]`` with op in times, div, plus, minus."""
    ex = get_executor(executor)
    S = as_sparse(S)
    _check_scale_op(op)
    return ex.row_scale(S, _vector(ex, S, v, "v", S.nrows), op)


def col_scale(S, v, op: str = "times", executor=None) -> Edges:
    """``S ⊛ rep(v)ᵀ`` on S's pattern: ``S[i,j] op v[j]``."""
    ex = get_executor(executor)
    S = as_sparse(S)
    _check_scale_op(op)
    return ex.col_scale(S, _vector(ex, S, v, "v", S.ncols), op)


def _check_scale_op(op: str) -> None:
    if op not in ("times", "div", "plus", "minus"):
        raise ValueError(f"op must be 'times', 'div', 'plus' or 'minus', got {op!r}")


# ---------------------------------------------------------------------- edge-wise functions
def _unary(fn: str, S, alpha: float | None = None, executor=None):
    if isinstance(S, Virtual):
        return UnaryNode(fn, S, alpha)
    return get_executor(executor).apply(as_sparse(S), fn, alpha)


def exp(S, executor=None):
    """Edge-wise ``exp`` of a sparse matrix, or a lazy ``exp`` of a virtual tensor."""
    return _unary("exp", S, executor=executor)


def relu(S, executor=None):
    """Edge-wise ``max(x, 0)``, or lazily on a virtual tensor."""
    return _unary("relu", S, executor=executor)


def leaky_relu(S, negative_slope: float = 0.2, executor=None):
    """Edge-wise LeakyReLU ``x if x > 0 else negative_slope·x``, or lazily on a virtual tensor."""
    if not np.isfinite(negative_slope) or negative_slope < 0:
        raise ValueError(f"negative_slope must be finite and ≥ 0, got {negative_slope}")
    return _unary("leaky_relu", S, float(negative_slope), executor)
