r"""The executor interface: the only vocabulary layers use (rule 3 of ``docs/design.md``).

Layers write their forward and backward once with these operations and never look at which
executor runs them. Two kinds of operand appear:

* **dense tensors** are arrays of the executor's array module :attr:`Executor.xp` (numpy for
  ``cpu`` and ``dist``, CuPy on a GPU) with *vertices on axis 0*: ``(n, k)`` features,
  ``(n,)`` or ``(n, heads)`` vectors. Parameters and other small matrices are arrays of the
  same module. On a distributed executor "the n rows" are this process's share of them;
  every operation below is written so that the layer cannot tell.
* **edge tensors** hold one scalar per stored edge of a fixed pattern (the adjacency ``A``,
  or a block of it); their type is the executor's (a ``graphblas.Matrix`` for ``cpu``).
  Edge values in array form (``edge_values``, dropout scales) are in ``A``'s CSR order:
  target-major, sources ascending.

No operation materialises an n×n dense matrix or an |E|×k tensor (rule 1).

The interface has two tiers.

**Tier 1, the layer contract** — what layers call, and what a new executor implements:
dense products and the reductions over vertices (:meth:`gemm`, :meth:`inner`,
:meth:`vertex_sum`, :meth:`row_dot`), the sparse products (:meth:`sddmm`, :meth:`spmm`,
:meth:`spmm_t`, :meth:`spmm_affine`), aggregation with its backward (:meth:`aggregate`,
:meth:`aggregate_backward`; max/min through :meth:`extreme_aggregate`), the reductions of
edge tensors (:meth:`row_reduce`, :meth:`col_reduce`), and the edge primitives the rest is
built from (:meth:`edge_values`, :meth:`edge_from_values`, :meth:`gather_rows`,
:meth:`gather_cols`, :meth:`edge_ids`). Softmax, its backward, the random masks and the edge
programs of compositions (:meth:`program_forward`, :meth:`program_backward`: every attention
layer is one) have defaults written with the primitives, so a new executor has them at once
and may override them with generated kernels that give the same result (the ``cpu``
executor does).

**Tier 2, the edge algebra** of :mod:`gblas_gnn.ops` and :mod:`gblas_gnn.virtual`
(:meth:`pattern`, :meth:`apply`, :meth:`ewise`, :meth:`row_scale`, :meth:`col_scale`,
:meth:`scale_edges`, :meth:`outer_add`, :meth:`leaky_relu_backward`) has defaults built from
tier 1 (edge values, gathers and the array module), so an executor inherits it.

Semirings are meanings (:mod:`gblas_gnn.semirings`); each executor says how it runs one
(:meth:`semiring_lowering`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from . import _random

__all__ = ["AGGREGATIONS", "Executor", "EdgeTensorBase", "AggregateContext", "MeanContext",
           "check_aggregation", "is_named"]

#: the aggregations with a backward; any other ``aggr`` is a semiring (forward only)
AGGREGATIONS = ("sum", "max", "min", "mean")

Reduce = Literal["sum", "max", "min"]
ScaleOp = Literal["times", "div", "plus", "minus"]
Unary = Literal["exp", "relu", "leaky_relu", "scale", "neg", "add", "rdiv"]
EwiseOp = Literal["plus", "minus", "times", "div"]

_BINARY = {"plus": lambda xp, a, b: a + b, "minus": lambda xp, a, b: a - b,
           "times": lambda xp, a, b: a * b, "div": lambda xp, a, b: a / b}


def _unary(xp, fn: str, x, alpha):
    if fn == "exp":
        return xp.exp(x)
    if fn == "neg":
        return -x
    if fn == "relu":
        return xp.maximum(x, 0)
    a = x.dtype.type(alpha)
    if fn == "scale":
        return x * a
    if fn == "add":
        return x + a
    if fn == "rdiv":
        return a / x
    if fn == "leaky_relu":
        return xp.where(x > 0, x, x * a)
    raise ValueError(f"unknown edge-wise function {fn!r}")


def is_named(aggr: Any) -> bool:
    """True for the aggregations with a backward (:data:`AGGREGATIONS`)."""
    return isinstance(aggr, str) and aggr in AGGREGATIONS


def check_aggregation(aggr: Any) -> Any:
    """``aggr`` if it is a named aggregation or a registered semiring (name or object);
    ``ValueError`` otherwise (before any work)."""
    if is_named(aggr):
        return aggr
    from .. import semirings
    try:
        semirings.get(aggr)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"unknown aggregation {aggr!r}: use one of {AGGREGATIONS} or a "
                         f"semiring from gblas_gnn.semirings {semirings.names()}") from exc
    return aggr


class EdgeTensorBase(ABC):
    """An edge tensor of an executor that does not store it as a ``graphblas.Matrix`` (the
    ``cuda`` executor's device edge tensors): one value per stored edge of a pattern, with
    the matrix's shape and value type. :meth:`Executor.to_graphblas` makes a host
    ``graphblas.Matrix`` of it."""

    @property
    @abstractmethod
    def nrows(self) -> int:
        """Rows (targets) of the pattern."""

    @property
    @abstractmethod
    def ncols(self) -> int:
        """Columns (sources) of the pattern."""

    @property
    @abstractmethod
    def nvals(self) -> int:
        """Stored edges."""

    @property
    @abstractmethod
    def dtype(self) -> np.dtype:
        """The values' numpy dtype."""


# ---------------------------------------------------------------------- forward contexts
@dataclass
class AggregateContext:
    """``Z = S ⊕ H`` with ``aggr = "sum"``: backward needs ``S`` and ``H``."""

    S: Any
    H: Any

    aggr = "sum"


@dataclass
class MeanContext(AggregateContext):
    """``"mean"``: also the row counts (an empty row counts 1; its output is 0 anyway)."""

    counts: Any = None

    aggr = "mean"


@dataclass
class _Lowering:
    """How one executor runs one semiring: ``spmm(S, H)`` and ``spmm_t(S, H)``."""

    spmm: Any
    spmm_t: Any


class Executor(ABC):
    """Abstract executor (see the module docstring for the two tiers)."""

    name: str = "abstract"
    #: the array module of dense tensors
    xp = np

    # ================================================================== arrays
    def asarray(self, x, dtype=None):
        """``x`` (a host array, or already one of ours) as an array of :attr:`xp`."""
        return self.xp.asarray(x, dtype=dtype)

    def to_numpy(self, x, reason: str = "to_numpy") -> np.ndarray:
        """A host ``numpy.ndarray`` with the values of ``x`` (no copy when it is one).
        Every read of device values on the host goes through here; ``reason`` says what it is
        for (a device executor counts its copies by reason)."""
        return np.asarray(x)

    def all_finite(self, *arrays) -> bool:
        """Whether every value of ``arrays`` (of :attr:`xp`) is finite: one reduction and
        one read on the host (:meth:`to_numpy`, reason ``"finite"``: a counted copy on a
        device). The NaN/Inf checks of rule 5 use it, so that a device's syncs are seen."""
        if not arrays:
            return True
        xp = self.xp
        flags = [xp.isfinite(a).all() for a in arrays]
        ok = flags[0] if len(flags) == 1 else xp.stack(flags).all()
        return bool(self.to_numpy(ok, "finite"))

    #: processes that run every operation together (a grid's size; 1 here)
    processes = 1

    @property
    def is_root(self) -> bool:
        """Whether this process prints and writes files (one process per job does)."""
        return True

    def agree(self, value):
        """``value`` as every process of the job sees it: the root's (identity here)."""
        return value

    def all_agree(self, flag: bool) -> bool:
        """Whether ``flag`` holds in every process of the job (``flag`` itself here). A
        decision that chooses between paths with and without collectives (a cache hit) must
        be taken with it, or one process waits for ever in a collective the others skip."""
        return bool(flag)

    @contextmanager
    def validation(self) -> Iterator[None]:
        """Input checks run inside this block: on a multi-process executor an error in any
        process is raised in every process (none is left waiting in a collective); here it
        simply propagates. The block must not communicate itself."""
        yield

    def to_graphblas(self, E):
        """A host ``graphblas.Matrix`` with the pattern and values of the edge tensor ``E``
        (``E`` itself when it is one)."""
        import graphblas as gb

        if isinstance(E, gb.Matrix):
            return E
        rows, cols = (self.to_numpy(a) for a in self.edge_ids(E))
        return gb.Matrix.from_coo(rows, cols, self.to_numpy(self.edge_values(E)),
                                  nrows=self._nrows(E), ncols=self._ncols(E))

    def on_root(self, fn):
        """``fn()`` run by the root process only (writing a file), its error raised in every
        process; returns its result on the root, None elsewhere."""
        return fn()

    # ================================================================== tier 1: dense
    def gemm(self, X, W):
        """Dense ``X W`` of a vertex-indexed ``X`` (or a parameter) by a small matrix ``W``;
        pass ``W.T`` for ``X Wᵀ``. Never a reduction over vertices."""
        return X @ W

    def inner(self, X, Y):
        r"""The reduction over vertices :math:`X^\top Y = \sum_i X_i^\top Y_i` (weight
        gradients ``Hᵀ dZ``): ``(a, b)`` for ``X`` (n, a) and ``Y`` (n, b)."""
        return X.T @ Y

    def vertex_sum(self, X):
        r"""The reduction over vertices :math:`\sum_i X_i` (bias gradients, loss sums):
        shape ``X.shape[1:]``."""
        return X.sum(axis=0)

    def row_dot(self, X, Y):
        r"""Per-vertex products :math:`r_i = \langle X_i, Y_i \rangle` (row norms, the
        softmax term of a backward), shape (n,)."""
        return self.xp.einsum("ij,ij->i", X, Y)

    # ================================================================== tier 1: edges
    @abstractmethod
    def edge_values(self, E):
        """E's values as a 1-D array in CSR order."""

    @abstractmethod
    def edge_from_values(self, A, values):
        """An edge tensor with A's pattern holding ``values`` (CSR order, as
        :meth:`edge_values`)."""

    @abstractmethod
    def gather_rows(self, E, u):
        """``u[i]`` for every stored entry ``(i, j)`` of E, in CSR order (``u``: (n,))."""

    @abstractmethod
    def gather_cols(self, E, v):
        """``v[j]`` for every stored entry ``(i, j)`` of E, in CSR order (``v`` is indexed by
        E's columns, i.e. by source vertices, and laid out like every dense tensor)."""

    @abstractmethod
    def edge_ids(self, A):
        """``(rows, cols)``: the global vertex ids of A's stored entries, CSR order (random
        masks hash them, so a mask does not depend on the executor or the partition)."""

    @abstractmethod
    def row_reduce(self, E, op: Reduce = "sum"):
        """``r[i] = ⊕_j E[i,j]`` over stored entries; an empty row gives 0."""

    @abstractmethod
    def col_reduce(self, E, op: Reduce = "sum"):
        """``r[j] = ⊕_i E[i,j]`` over stored entries (laid out like a dense vector over
        vertices); an empty column gives 0."""

    @abstractmethod
    def sddmm(self, A, X, Y):
        """Sampled dense-dense product on A's *pattern*: ``E[i,j] = Σ_c X[i,c] Y[j,c]``."""

    def spmm(self, S, H, semiring="plus_times"):
        """``Z[i] = ⊕_j S[i,j] ⊗ H[j]`` over a semiring; an empty row gives 0. A semiring for
        nonnegative weights only (``avg``) refuses a negative one first
        (:meth:`_check_weights`)."""
        self._check_weights(S, semiring)
        return self.semiring_lowering(semiring).spmm(S, H)

    def spmm_t(self, S, H, semiring="plus_times"):
        """``Z[j] = ⊕_i S[i,j] ⊗ H[i]`` (the product with ``Sᵀ``); an empty column gives 0."""
        self._check_weights(S, semiring)
        return self.semiring_lowering(semiring).spmm_t(S, H)

    def _check_weights(self, S, semiring) -> None:
        """Raise :func:`~gblas_gnn.semirings.negative_weight_error` before any work when
        ``semiring`` holds only for nonnegative edge weights (``avg``) and ``S`` has a
        negative one; on a multi-process executor in every process (a weight of one block
        stops the whole grid). Every product over such a semiring checks here."""
        from .. import semirings

        sr = semirings.get(semiring)
        if not sr.nonnegative_weights:
            return
        with self.validation():
            values = self.edge_values(S)
            if values.size and bool(self.to_numpy((values < 0).any())):
                raise semirings.negative_weight_error(sr.name)

    def spmm_affine(self, S, H, self_weight=None, bias=None, transpose: bool = False):
        r"""The ``plus_times`` product with a self term and a row bias,

        .. math::
            Z = \mathrm{op}(S)\, H + w H + \mathbf{1} b^\top, \qquad
            \mathrm{op}(S) = S \text{ (or } S^\top \text{ with ``transpose``)},

        ``w`` (``self_weight``: a scalar or a (1,) array, e.g. GIN's :math:`1 + \varepsilon`;
        square ``S`` only) and ``b`` (``bias``: (k,)) each optional. The layers' SpMMs go
        through here so that an executor can fuse the terms into the product (the ``cpu``
        executor does); this default is :meth:`spmm` / :meth:`spmm_t` and two updates."""
        Z = self.spmm_t(S, H) if transpose else self.spmm(S, H)
        if self_weight is not None:
            Z = self_weight * H + Z
        if bias is not None:
            Z += bias
        return Z

    # ------------------------------------------------------------------ semirings
    #: hand-written lowerings by semiring name, per executor class (``lowers`` fills it)
    _LOWERINGS: dict = {}

    @classmethod
    def lowers(cls, *names: str):
        """Decorator registering ``fn(executor, semiring) -> (spmm, spmm_t)`` as how this
        executor class runs the semirings ``names``."""
        def register(fn):
            table = dict(cls.__dict__.get("_LOWERINGS", {}))
            for name in names:
                table[name] = fn
            cls._LOWERINGS = table
            return fn
        return register

    def semiring_lowering(self, semiring) -> _Lowering:
        """How this executor runs ``semiring`` (a name or a
        :class:`~gblas_gnn.semirings.Semiring`): a registered lowering for its name, else
        :meth:`generic_lowering`; built once per executor and semiring."""
        from .. import semirings

        sr = semirings.get(semiring)
        cache = self.__dict__.setdefault("_lowering_cache", {})
        hit = cache.get(id(sr))
        if hit is None or hit[0] is not sr:
            build = None
            for klass in type(self).__mro__:
                build = klass.__dict__.get("_LOWERINGS", {}).get(sr.name)
                if build is not None:
                    break
            pair = build(self, sr) if build is not None else self.generic_lowering(sr)
            hit = cache[id(sr)] = (sr, _Lowering(*pair))
        return hit[1]

    def generic_lowering(self, sr):
        r"""``(spmm, spmm_t)`` for any semiring from its meaning alone:
        :math:`Z_i = \mathrm{readout}(\bigoplus_j S_{ij} \otimes H_j)`, row by row over the
        gathered messages on the host. Correct for every semiring and slow: the reference an
        executor's registered lowerings are tested against."""
        def run(S, H, transpose):
            rows, cols = (self.to_numpy(a) for a in self._local_coords(S))
            if transpose:
                rows, cols = cols, rows
            m = self._ncols(S) if transpose else self._nrows(S)
            Z = _segment_semiring(sr, self.to_numpy(self.edge_values(S)), rows, cols,
                                  self.to_numpy(H), m)
            return self.asarray(Z)

        return (lambda S, H: run(S, H, False)), (lambda S, H: run(S, H, True))

    def _local_coords(self, S):
        """``(rows, cols)`` local indices of S's stored entries (for :meth:`generic_lowering`;
        single-process executors: the global ids)."""
        return self.edge_ids(S)

    def _check_sources(self, A, X) -> None:
        """The messages ``X`` must have one row per column (source) of ``A``."""
        if X.shape[0] != self._ncols(A):
            raise ValueError(f"X has {X.shape[0]} rows, the pattern {self._ncols(A)} columns")

    def _nrows(self, S) -> int:
        return int(S.nrows)

    def _ncols(self, S) -> int:
        return int(S.ncols)

    # ------------------------------------------------------------------ layouts
    def target_rows(self, A) -> int:
        """Rows of a dense tensor gathered by A's rows (targets): A's row count."""
        return self._nrows(A)

    def source_rows(self, A) -> int:
        """Rows of a dense tensor gathered by A's columns (sources), in the layout every
        dense tensor has: A's column count on one process (a grid holds them by rows)."""
        return self._ncols(A)

    def columns(self, A, X):
        """The rows of ``X`` for A's columns (the source side), for :meth:`gather_columns`:
        ``X`` itself on one process; a grid fetches them once (the partner exchange)."""
        return X

    def gather_columns(self, A, v):
        """``v[j]`` for every stored entry ``(i, j)`` of A, CSR order, from a vector of
        :meth:`columns` (no communication)."""
        return self.gather_cols(A, v)

    # ------------------------------------------------------------------ edge programs
    def program_forward(self, program, keep: bool):
        """Run an edge program (:mod:`gblas_gnn.compose.program`): a sparse expression on
        A's pattern and the sink that consumes it. Returns ``(out, ctx)``, ``ctx`` None
        unless ``keep``; ``out`` may be an array ``ctx`` holds (the caller copies it before
        handing it to a user who may write into it: :meth:`.compose.tape.Scope.released`). The default is the reference lowering written with this interface
        (:mod:`gblas_gnn.compose.reference`); an executor may compile programs into fused
        kernels that give the same result."""
        from ..compose import reference

        return reference.forward(self, program, keep)

    def program_backward(self, ctx, dout) -> list:
        """The cotangents of a program's operands (None where there is none) for the
        cotangent ``dout`` of its output."""
        from ..compose import reference

        return reference.backward(self, ctx, dout)

    # ------------------------------------------------------------------ aggregation
    def aggregate(self, S, H, aggr, keep_context: bool = False):
        """Weighted-message aggregation ``Z = S ⊕ H``.

        ``aggr`` is ``"sum" | "max" | "min" | "mean"`` over messages ``S[i,j]·H[j]`` (empty
        row → 0) or a semiring. Returns ``Z`` or, with ``keep_context``, ``(Z, ctx)`` for
        :meth:`aggregate_backward`.
        """
        if aggr in ("max", "min"):
            return self.extreme_aggregate(S, H, aggr == "max", keep_context)
        if not is_named(aggr):
            if keep_context:
                raise ValueError("backward is defined for the named aggregations "
                                 f"{AGGREGATIONS} only, not for a semiring")
            return self.spmm(S, H, aggr)
        Z = self.spmm(S, H)
        if aggr == "sum":
            return (Z, AggregateContext(S, H)) if keep_context else Z
        counts = self.row_counts(S, H.dtype)
        Z /= counts[:, None]
        return (Z, MeanContext(S, H, counts)) if keep_context else Z

    def row_counts(self, S, dtype):
        """Stored entries per row of ``S`` as ``dtype``, an empty row counting 1."""
        counts = self.row_reduce(self.pattern(S, 1.0, dtype), "sum")
        return self.xp.maximum(counts, dtype.type(1))

    def aggregate_backward(self, ctx, dZ, need_dS: bool = True):
        """Gradients ``(dS, dH)`` of a named aggregation; ``dS`` is an edge tensor (or None).

        sum: ``dS = S ⊙ (dZ Hᵀ)`` on S's pattern (:meth:`sddmm`), ``dH = Sᵀ dZ``; mean
        divides ``dZ`` by the row counts first; max/min route the gradient to the
        arg-extreme neighbour of each (row, feature), ties to the first stored entry
        (lowest source id).
        """
        if not isinstance(ctx, AggregateContext):
            return self.extreme_aggregate_backward(ctx, dZ, need_dS)
        G = dZ / ctx.counts[:, None] if isinstance(ctx, MeanContext) else dZ
        dS = self.sddmm(ctx.S, G, ctx.H) if need_dS else None
        return dS, self.spmm_t(ctx.S, G)

    @abstractmethod
    def extreme_aggregate(self, S, H, is_max: bool, keep_context: bool):
        """``Z[i,c] = max_j / min_j S[i,j] H[j,c]`` (empty row → 0), with the arg-extreme of
        each (row, feature) in the context: ``Z`` or ``(Z, ctx)``."""

    @abstractmethod
    def extreme_aggregate_backward(self, ctx, dZ, need_dS: bool = True):
        """``(dS, dH)`` of :meth:`extreme_aggregate`: ``dS[i,j] = Σ_c [j wins (i,c)]
        dZ[i,c] H[j,c]``, ``dH[j,c] = Σ_i [j wins (i,c)] dZ[i,c] S[i,j]``."""

    # ------------------------------------------------------------------ softmax
    def softmax(self, E):
        """Stable row softmax over stored entries: ``exp(E − rep(max)) ⊘ rs(exp(E − rep(max)))``.

        An empty row stays empty.
        """
        shifted = self.row_scale(E, self.row_reduce(E, "max"), "minus")
        ex = self.apply(shifted, "exp")
        return self.row_scale(ex, self.row_reduce(ex, "sum"), "div")

    def softmax_backward(self, Psi, dPsi):
        """``dS = Ψ ⊙ (dΨ − rep(sum(Ψ ⊙ dΨ)))``, the backward of :meth:`softmax`."""
        t = self.row_reduce(self.ewise(Psi, dPsi, "times"), "sum")
        return self.ewise(Psi, self.row_scale(dPsi, t, "minus"), "times")

    # ------------------------------------------------------------------ random masks
    def dropout_edges(self, A, key: int, p: float, heads: int, dtype):
        r"""Attention-dropout scales, (heads, nnz) in CSR order: ``1/(1-p)`` where
        :math:`u(\kappa; h, i, j) \ge p` for the edge ``j → i`` of head ``h``, else 0
        (:mod:`._random`: the same mask on every executor)."""
        xp = self.xp
        rows, cols = self.edge_ids(A)
        u = _random.uniform(xp, key, xp.arange(heads)[:, None], rows[None, :], cols[None, :])
        dtype = np.dtype(dtype)
        return xp.where(u >= p, dtype.type(1.0 / (1.0 - p)), dtype.type(0)).astype(dtype)

    def keep_mask(self, key: int, p: float, shape: tuple[int, int], row_ids=None):
        r"""Feature-dropout mask, boolean ``shape``: entry ``(r, c)`` is kept when
        :math:`u(\kappa; 0, i_r, c) \ge p` with :math:`i_r` the global id of row ``r``
        (``row_ids``; ``None``: row ``r`` is vertex ``r``)."""
        xp = self.xp
        rows = xp.arange(shape[0]) if row_ids is None else self.asarray(row_ids)
        u = _random.uniform(xp, key, 0, rows[:, None], xp.arange(shape[1])[None, :])
        return u >= p

    # ================================================================== tier 2: edge algebra
    def pattern(self, A, value: float, dtype):
        """Edge tensor with A's pattern and every value equal to ``value``."""
        values = self.edge_values(A)
        dtype = np.dtype(dtype)
        return self.edge_from_values(A, self.xp.full(values.shape, dtype.type(value), dtype))

    def apply(self, E, fn: Unary, alpha: float | None = None):
        """Edge-wise ``exp``, ``relu``, ``neg``, ``leaky_relu`` (slope ``alpha``), ``scale``
        (× alpha), ``add`` (+ alpha) or ``rdiv`` (alpha ÷ x)."""
        return self.edge_from_values(E, _unary(self.xp, fn, self.edge_values(E), alpha))

    def leaky_relu_backward(self, C, dE, alpha: float):
        """``dC = dE ⊙ (1 if C > 0 else alpha)`` edge-wise."""
        c, de = self.edge_values(C), self.edge_values(dE)
        return self.edge_from_values(C, self.xp.where(c > 0, de, de * de.dtype.type(alpha)))

    def ewise(self, E, F, op: EwiseOp):
        """``E op F`` entry by entry (same pattern), op in plus, minus, times, div."""
        if op not in _BINARY:
            raise ValueError(f"op must be one of {sorted(_BINARY)}, got {op!r}")
        return self.edge_from_values(E, _BINARY[op](self.xp, self.edge_values(E),
                                                    self.edge_values(F)))

    def row_scale(self, E, v, op: ScaleOp = "times"):
        """``E[i,j] op v[i]`` on E's pattern (``rep(v)`` under a mask)."""
        return self.edge_from_values(E, _scale_op(op, self.edge_values(E),
                                                  self.gather_rows(E, v)))

    def col_scale(self, E, v, op: ScaleOp = "times"):
        """``E[i,j] op v[j]`` on E's pattern (``rep(v)ᵀ`` under a mask)."""
        return self.edge_from_values(E, _scale_op(op, self.edge_values(E),
                                                  self.gather_cols(E, v)))

    def scale_edges(self, E, u, v):
        """``E[i,j] · u[i] · v[j]`` (a two-sided diagonal scaling, e.g. GCN's
        ``D^-1/2 A D^-1/2``)."""
        return self.edge_from_values(
            E, self.edge_values(E) * self.gather_rows(E, u) * self.gather_cols(E, v))

    def outer_add(self, A, u, v):
        """Masked outer sum on A's pattern: ``E[i,j] = u[i] + v[j]`` (never n×n)."""
        return self.edge_from_values(A, self.gather_rows(A, u) + self.gather_cols(A, v))


def _scale_op(op: str, values, gathered):
    if op not in ("times", "div", "plus", "minus"):
        raise ValueError(f"op must be 'times', 'div', 'plus' or 'minus', got {op!r}")
    return _BINARY[op](None, values, gathered)


def _segment_semiring(sr, values, rows, cols, H, m: int) -> np.ndarray:
    r"""``Z[r] = readout(⊕_{e: rows[e] = r} values[e] ⊗ H[cols[e]])`` on the host with the
    semiring's vectorised ⊕ and ⊗ (rows without an entry give 0)."""
    Z = np.zeros((m, H.shape[1]), H.dtype)
    if rows.size == 0:
        return Z
    order = np.argsort(rows, kind="stable")
    rows, cols, values = rows[order], cols[order], values[order].astype(H.dtype)
    starts = np.flatnonzero(np.r_[True, np.diff(rows) != 0])
    for a, b in zip(starts, [*starts[1:], rows.size], strict=True):
        msgs = sr.mul(values[a:b, None], H[cols[a:b]])
        acc = msgs[0]
        for msg in msgs[1:]:
            acc = sr.add(acc, msg)
        Z[rows[a]] = sr.readout(acc)
    return Z
