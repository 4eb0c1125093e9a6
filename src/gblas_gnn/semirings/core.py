"""The :class:`Semiring` — what a semiring *means* — and the input checks of its SpMM.

A semiring ``(⊕, ⊗)`` defines the sparse-dense product (the paper's ``S ⊕ H``)

.. math::

    Z_{i,c} = \\mathrm{readout}\\Big(\\bigoplus_{j:\\,(i,j)\\in S} S_{i,j} \\otimes
    H_{j,c}\\Big), \\qquad Z_{i,:} = 0 \\text{ when row } i \\text{ of } S \\text{ stores
    nothing},

and its transpose form ``Sᵀ ⊕ H``: :math:`Z_{j,c} = \\bigoplus_{i:(i,j)\\in S} S_{i,j}
\\otimes H_{i,c}`.  Only stored entries take part (an explicit stored 0 is an edge of weight
0); ``readout`` is the identity except for semirings over pairs (``avg``).

This module holds the meaning only. *How* a semiring runs is each executor's business
(:meth:`gblas_gnn.executors.Executor.semiring_lowering`): the ``cpu`` executor lowers the
shipped ones onto SuiteSparse factory kernels or numba kernels and any other onto a
GraphBLAS semiring built from :attr:`Semiring.add_op` / :attr:`Semiring.mul_op`; another
executor registers its own lowerings without touching this package.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import graphblas as gb
import numpy as np
from graphblas import Matrix

from .._graphblas_adapter import is_transposed_matrix, is_user_defined_type
from .._validate import in_device_memory
from .algebra import Algebra

__all__ = ["Semiring", "check_operands", "negative_weight_error", "install_executor_resolver",
           "resolve_executor"]

#: how ``executor=`` (a name, an instance or None) becomes an executor: the registry
#: (:mod:`gblas_gnn.executors`) sits above the meanings and installs itself here when it is
#: imported, so that a meaning never imports an executor
_RESOLVER: list[Callable[[Any], Any]] = []


def install_executor_resolver(resolve: Callable[[Any], Any]) -> None:
    """Make ``resolve(executor)`` what :meth:`Semiring.spmm` and :func:`resolve_executor`
    use (the executor registry installs :func:`gblas_gnn.executors.get_executor`)."""
    _RESOLVER[:] = [resolve]


def resolve_executor(executor: Any) -> Any:
    """The executor ``executor`` names (None: the default) through the installed registry."""
    if not _RESOLVER:
        raise RuntimeError("no executor registry is installed: import gblas_gnn first")
    return _RESOLVER[0](executor)

_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _as_matrix(S: Any) -> Matrix:
    if isinstance(S, Matrix):
        return S
    if is_transposed_matrix(S):  # ``A.T``: materialise the transpose
        return S.new()
    import scipy.sparse as sp

    if sp.issparse(S):
        return gb.io.from_scipy_sparse(S)
    raise TypeError(
        f"S must be a graphblas.Matrix (or a scipy.sparse matrix), not {type(S).__name__}"
    )


def _all_finite(x: np.ndarray) -> bool:
    # One fast pass (a sum); the exact element-wise check only when the sum is not
    # finite, which also happens for huge-but-finite values that overflow.
    if x.size == 0:
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(x.sum()):
            return True
    return bool(np.isfinite(x).all())


def negative_weight_error(name: str) -> ValueError:
    """The error of a semiring for nonnegative edge weights only (``avg``) given a negative
    one: one wording on every path and every executor."""
    return ValueError(f"the semiring {name!r} needs nonnegative edge weights (its ⊕ is "
                      "associative only for them); a weight it was given is negative")


def check_operands(
    S: Any, H: Any, *, transpose: bool = False, nonnegative: bool = False,
    name: str = "this semiring",
) -> tuple[Matrix, np.ndarray]:
    """Validate ``(S, H)`` for ``S ⊕ H`` (or ``Sᵀ ⊕ H``); raise before any work.

    Returns
    -------
    S : graphblas.Matrix
        ``S`` itself, or the conversion of a scipy.sparse input / of ``A.T``.
    H : numpy.ndarray
        ``H`` as a C-contiguous array of its own dtype (a copy only if it was not); an array
        in a GPU's memory (for the cuda executor) as it is.

    Raises
    ------
    TypeError
        ``H`` not an ndarray, ``H`` not float32/float64, ``S`` not a matrix, or ``S``
        of a non-numeric (user-defined / complex) type.
    ValueError
        ``H`` not 2-D, inner dimensions differ, NaN/Inf in ``H`` or in ``S``'s
        values, or (``nonnegative=True``) a negative weight in ``S`` (the message names
        the semiring ``name``, see :func:`negative_weight_error`).
    """
    if not isinstance(H, np.ndarray) and not in_device_memory(H):
        raise TypeError(f"H must be a numpy.ndarray (or a GPU array for the cuda executor), "
                        f"not {type(H).__name__}")
    if H.ndim != 2:
        raise ValueError(f"H must be 2-D (n, k); got shape {H.shape}")
    if H.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"H must be float32 or float64, not {H.dtype} (nothing is coerced)")
    S = _as_matrix(S)
    sd = S.dtype
    if is_user_defined_type(sd) or sd.name.startswith("FC"):
        raise TypeError(f"S must hold real numbers (bool, int or float), not {sd.name}")
    inner = S.nrows if transpose else S.ncols
    if inner != H.shape[0]:
        what = "S.nrows (transpose product)" if transpose else "S.ncols"
        raise ValueError(
            f"shape mismatch: {what} = {inner} but H has {H.shape[0]} rows "
            f"(S is {S.nrows}x{S.ncols}, H is {H.shape[0]}x{H.shape[1]})"
        )
    if not _all_finite(H):
        raise ValueError("H contains NaN or Inf")
    if S.nvals and sd.name.startswith("FP"):
        # a plus-reduction is finite iff every value is (up to overflow: then check exactly)
        total = S.reduce_scalar(gb.monoid.plus[sd]).new().value
        if not np.isfinite(total):
            ok = S.apply(gb.unary.isfinite[sd]).new().reduce_scalar(gb.monoid.land).new()
            if not ok.value:
                raise ValueError("S contains NaN or Inf values")
    signed = sd.name.startswith(("FP", "INT"))
    if nonnegative and signed and S.nvals and S.reduce_scalar(gb.monoid.min[sd]).new().value < 0:
        raise negative_weight_error(name)
    return S, (H if in_device_memory(H) else np.ascontiguousarray(H))


def _identity(x):
    return x


@dataclass(frozen=True, eq=False)
class Semiring:
    """A semiring ``(⊕, ⊗)``: its operations, identities and how to describe it.

    .. math::

        Z = S \\oplus H, \\qquad
        Z_{i,c} = \\bigoplus_{j:(i,j)\\in S} S_{i,j} \\otimes H_{j,c}
        \\quad(\\text{empty row} \\to 0).

    Attributes
    ----------
    name : str
        Registry name (``gg.semirings.get(name)``).
    add, mul : callable
        Vectorised numpy ops ``⊕`` and ``⊗`` (law tests, references, generic lowerings).
    add_identity, mul_identity : scalar or None
        Identities of ``⊕`` and ``⊗``; None where none exists.
    annihilator : scalar or None
        ``z`` with ``z ⊗ a = a ⊗ z = z`` (the ``⊕``-identity); None where none exists.
    formula : str
        The aggregation in words/symbols.
    add_op, mul_op : object
        ``⊕`` and ``⊗`` as the semiring was described: python-graphblas operators (a
        monoid for ``⊕``, a binary op for ``⊗``); executors build their lowerings from them.
    scalar_add, scalar_mul : callable or None
        ``⊕`` and ``⊗`` as plain Python functions of two floats, when known (a kernel
        compiler such as numba can compile them).
    readout : callable
        Maps the ``⊕``-accumulation of a row to its output (the identity except for
        semirings over pairs).
    nonnegative_weights : bool
        The semiring is only one for nonnegative edge weights; SpMM refuses negative ones.
    divides_by_weights : bool
        The readout is the weighted mean ``Σ S H / Σ S`` (the averaging semiring).
    mul_grad : (callable, callable) or None
        The partial derivatives ``(d_s, d_h)`` of ``s ⊗ h`` with respect to the edge weight
        and the message, as functions of two arrays (of any array module: use arithmetic,
        and return a number for a constant), e.g. ``(lambda s, h: h, lambda s, h: s)`` for
        ``×``. With a ⊕ of plus, max or min they give the aggregation a backward
        (:mod:`gblas_gnn.ir.semiring_grad`); None: forward only.

    Notes
    -----
    Every SpMM computes in ``H``'s dtype (float32 or float64, never promoted); the
    values of ``S`` are cast to it.  Construct user semirings with
    :func:`gblas_gnn.semirings.register`.
    """

    name: str
    add: Callable[[Any, Any], Any] = field(repr=False)
    mul: Callable[[Any, Any], Any] = field(repr=False)
    add_identity: Any = None
    mul_identity: Any = None
    annihilator: Any = None
    formula: str = ""
    add_op: Any = field(default=None, repr=False)
    mul_op: Any = field(default=None, repr=False)
    scalar_add: Callable[[float, float], float] | None = field(default=None, repr=False)
    scalar_mul: Callable[[float, float], float] | None = field(default=None, repr=False)
    readout: Callable[[Any], Any] = field(default=_identity, repr=False)
    nonnegative_weights: bool = False
    mul_grad: tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Any]] | None = field(
        default=None, repr=False)
    #: the readout divides the ⊕-sum of the products by the sum of the weights (a weighted
    #: mean over pairs: ``avg``)
    divides_by_weights: bool = False

    @property
    def algebra(self) -> Algebra:
        """What ⊕ and ⊗ are (:class:`~gblas_gnn.semirings.algebra.Algebra`): the facts
        executors choose kernels and gradients by."""
        if self.divides_by_weights:
            return Algebra("plus", "times", "weights")
        return Algebra.of(getattr(self.add_op, "name", None), getattr(self.mul_op, "name", None))

    # -- products on an executor (the cpu one unless told otherwise) ----------------
    def spmm(self, S: Matrix, H: np.ndarray, executor=None) -> np.ndarray:
        """``Z = S ⊕ H`` (validated first; see :func:`check_operands`).

        Parameters
        ----------
        S : graphblas.Matrix (m × n) or scipy.sparse matrix
        H : numpy.ndarray (n × k), float32 or float64
        executor : executor name or instance, default ``"cpu"``

        Returns
        -------
        numpy.ndarray (m × k), ``H.dtype``; rows of ``S`` that store nothing give 0.
        """
        return self._run(S, H, transpose=False, executor=executor)

    def spmm_t(self, S: Matrix, H: np.ndarray, executor=None) -> np.ndarray:
        """``Z = Sᵀ ⊕ H`` (``Z[j,c] = ⊕_i S[i,j] ⊗ H[i,c]``), shape ``(S.ncols, k)``."""
        return self._run(S, H, transpose=True, executor=executor)

    def _run(self, S: Any, H: Any, *, transpose: bool, executor) -> np.ndarray:
        S, H = check_operands(S, H, transpose=transpose, nonnegative=self.nonnegative_weights,
                              name=self.name)
        m = S.ncols if transpose else S.nrows
        ex = resolve_executor(executor)
        if S.nvals == 0 or m == 0 or H.shape[1] == 0:
            return ex.xp.zeros((m, H.shape[1]), dtype=H.dtype)
        return (ex.spmm_t if transpose else ex.spmm)(S, H, self)
