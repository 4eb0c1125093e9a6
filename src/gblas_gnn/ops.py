"""The paper's building blocks (Table 2) as public functions on the ``cpu`` executor.

Sparse operands are ``graphblas.Matrix`` (``scipy.sparse`` accepted and converted); dense
operands are ``numpy.ndarray``. Every function validates its input before any work and keeps
the operands' dtype (float32 or float64) end to end. None builds an n×n dense matrix or an
|E|×k tensor.

Virtual tensors (:func:`rep`, :func:`factor` and the arithmetic between them) are lazy and
evaluate only under a sparse mask: ``A * leaky_relu(rep(d) + rep(s).T)``.
"""

from __future__ import annotations

import graphblas as gb
import numpy as np
import scipy.sparse as sp

from ._validate import FLOAT_DTYPES, dense_matrix, dense_vector
from .executors import get_executor
from .executors.base import check_aggregation
from .virtual import UnaryNode, Virtual, factor, masked, rep

__all__ = [
    "as_sparse", "softmax", "softmax_backward", "aggregate", "sddmm", "outer_add",
    "row_sum", "row_max", "row_min", "col_sum", "row_scale", "col_scale", "spmm", "spmm_t",
    "gemm", "exp", "relu", "leaky_relu", "rep", "factor", "masked",
]


def as_sparse(S, name: str = "S") -> gb.Matrix:
    """``S`` as a float ``graphblas.Matrix`` (a ``scipy.sparse`` matrix is converted)."""
    from .graph import Graph

    if isinstance(S, Graph):
        return S.A
    if sp.issparse(S):
        if S.dtype not in FLOAT_DTYPES:
            raise TypeError(f"{name} must hold float32 or float64 values, got {S.dtype}")
        S = gb.io.from_scipy_sparse(S.tocsr())
    if not isinstance(S, gb.Matrix):
        raise TypeError(f"{name} must be a graphblas.Matrix or scipy.sparse matrix, "
                        f"got {type(S).__name__}")
    if np.dtype(S.dtype.np_type) not in FLOAT_DTYPES:
        raise TypeError(f"{name} must hold FP32 or FP64 values, got {S.dtype.name}")
    return S


def _dtype_of(S: gb.Matrix) -> np.dtype:
    return np.dtype(S.dtype.np_type)


def _features(S: gb.Matrix, H, name: str = "H", side: str = "ncols") -> np.ndarray:
    rows = S.ncols if side == "ncols" else S.nrows
    H = dense_matrix(H, name, rows=rows)
    if H.dtype != _dtype_of(S):
        raise TypeError(f"{name} is {H.dtype} but the sparse operand is {S.dtype.name}; "
                        "convert one of them explicitly")
    return H


def _vector(S: gb.Matrix, v, name: str, size: int) -> np.ndarray:
    v = dense_vector(v, name, size=size)
    if v.dtype != _dtype_of(S):
        raise TypeError(f"{name} is {v.dtype} but the sparse operand is {S.dtype.name}")
    return v


# ---------------------------------------------------------------------- softmax
def softmax(S, executor=None) -> gb.Matrix:
    r"""Row-wise stable softmax over the stored entries of ``S``.

    .. math:: \mathrm{sm}(S) = \exp(S - \mathrm{rep}(\max_j S)) \oslash
              \mathrm{rs}(\exp(S - \mathrm{rep}(\max_j S)))

    An empty row stays empty (never NaN); values around 1e4 stay finite and exact.
    """
    return get_executor(executor).softmax(as_sparse(S))


def softmax_backward(Psi, dPsi, executor=None) -> gb.Matrix:
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
    S = as_sparse(S)
    H = _features(S, H)
    check_aggregation(aggr)
    return get_executor(executor).aggregate(S, H, aggr)


def spmm(S, H, semiring="plus_times", executor=None) -> np.ndarray:
    """``Z[i] = ⊕_j S[i,j] ⊗ H[j]`` over a semiring (empty row → 0)."""
    S = as_sparse(S)
    return get_executor(executor).spmm(S, _features(S, H), semiring)


def spmm_t(S, H, semiring="plus_times", executor=None) -> np.ndarray:
    """``Z[j] = ⊕_i S[i,j] ⊗ H[i]``: the product with ``Sᵀ`` (empty column → 0)."""
    S = as_sparse(S)
    return get_executor(executor).spmm_t(S, _features(S, H, side="nrows"), semiring)


def gemm(X, W, executor=None) -> np.ndarray:
    """Dense ``X W`` (the projection ``H W``)."""
    X = dense_matrix(X, "X")
    W = dense_matrix(W, "W", rows=X.shape[1], dtype=X.dtype)
    return get_executor(executor).gemm(X, W)


# ---------------------------------------------------------------------- edge tensors
def sddmm(A, X, Y, executor=None) -> gb.Matrix:
    r"""``A ⊙ (X Yᵀ)`` on A's pattern (masked dot3 ``plus_times``); never forms ``X Yᵀ``."""
    A = as_sparse(A, "A")
    X = _features(A, X, "X", side="nrows")
    Y = _features(A, Y, "Y")
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"X and Y must have the same number of columns, got {X.shape} {Y.shape}")
    return masked(A, factor(X) @ factor(Y).T, executor)


def outer_add(A, u, v, executor=None) -> gb.Matrix:
    """A-pattern matrix with entries ``u[i] + v[j]`` (masked ``min_plus`` dot3, no n×n)."""
    A = as_sparse(A, "A")
    u = _vector(A, u, "u", A.nrows)
    v = _vector(A, v, "v", A.ncols)
    return get_executor(executor).outer_add(A, u, v)


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


def row_scale(S, v, op: str = "times", executor=None) -> gb.Matrix:
    """``S ⊛ rep(v)`` on S's pattern: ``S[i,j] op v[i]`` with op in times, div, plus, minus."""
    S = as_sparse(S)
    _check_scale_op(op)
    return get_executor(executor).row_scale(S, _vector(S, v, "v", S.nrows), op)


def col_scale(S, v, op: str = "times", executor=None) -> gb.Matrix:
    """``S ⊛ rep(v)ᵀ`` on S's pattern: ``S[i,j] op v[j]``."""
    S = as_sparse(S)
    _check_scale_op(op)
    return get_executor(executor).col_scale(S, _vector(S, v, "v", S.ncols), op)


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
