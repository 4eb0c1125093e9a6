r"""The executor interface: the only vocabulary layers use (rule 3 of ``docs/design.md``).

Layers write their forward and backward once with these operations and never look at which
executor runs them. Two kinds of operand appear:

* **dense tensors** (:class:`DenseArray`) are arrays of the executor's array module
  :attr:`Executor.xp` (numpy for ``cpu`` and ``dist``, CuPy on a GPU) with *vertices on
  axis 0*: ``(n, k)`` features, ``(n,)`` or ``(n, heads)`` vectors. Parameters and other
  small matrices are arrays of the same module. On a distributed executor "the n rows" are
  this process's share of them; every operation below is written so that the layer cannot
  tell.
* **edge tensors** (:class:`~gblas_gnn.executors.edges.EdgeTensor`) hold one scalar per
  stored edge of a fixed pattern (the adjacency ``A``, or a block of it); their type is the
  executor's (a ``graphblas.Matrix`` for ``cpu``). Edge values in array form
  (``edge_values``, dropout scales) are in ``A``'s CSR order: target-major, sources
  ascending.

No operation materialises an n×n dense matrix or an |E|×k tensor (rule 1).

The methods of :class:`Executor` fall in three tiers (the table with every method is in
``docs/design.md``, "Writing a fourth executor"):

**(a) The core** (:data:`CORE_TIER`): the abstract methods a new executor must write — the
edge primitives (:meth:`~Executor.edge_values`, :meth:`~Executor.edge_from_values`,
:meth:`~Executor.gather_rows`, :meth:`~Executor.gather_cols`, :meth:`~Executor.edge_ids`),
the reductions of edge tensors (:meth:`~Executor.row_reduce`, :meth:`~Executor.col_reduce`),
the sampled product :meth:`~Executor.sddmm` and the max/min aggregation with its backward
(:meth:`~Executor.extreme_aggregate`, :meth:`~Executor.extreme_aggregate_backward`).

**(b) The process tier** (:data:`PROCESS_TIER`): what depends on how many processes run
every operation together (:attr:`~Executor.processes`). The defaults are those of one
process: :meth:`~Executor.agree`, :meth:`~Executor.all_agree`, :meth:`~Executor.validation`,
:meth:`~Executor.on_root` and :attr:`~Executor.is_root` are identities, the reductions over
vertices (:meth:`~Executor.inner`, :meth:`~Executor.vertex_sum`,
:meth:`~Executor.vertex_scatter`) and the per-vertex products
(:meth:`~Executor.gemm`, :meth:`~Executor.row_dot`) are local, the products
:meth:`~Executor.spmm` / :meth:`~Executor.spmm_t` reduce over this process's pattern, and
the source side of a pattern is this process's rows (:meth:`~Executor.source_rows`,
:meth:`~Executor.columns`, :meth:`~Executor.gather_columns`). On a multi-process executor
each would silently give this process's share, so there every default of this tier raises
``NotImplementedError`` naming the method: such an executor must override all of them.

**(c) Defaults** built on the core (and on tier (b)), safe on every executor: array
conversion, softmax and its backward, the random masks, ``spmm_affine``, aggregation with
its backward, the edge programs of compositions (:meth:`~Executor.program_forward`,
:meth:`~Executor.program_backward`: the reference lowering), the semiring lowerings, and
the edge algebra of :mod:`gblas_gnn.ops` and :mod:`gblas_gnn.virtual`
(:meth:`~Executor.pattern`, :meth:`~Executor.apply`, :meth:`~Executor.ewise`,
:meth:`~Executor.row_scale`, :meth:`~Executor.col_scale`, :meth:`~Executor.scale_edges`,
:meth:`~Executor.outer_add`, :meth:`~Executor.leaky_relu_backward`). An executor may
override any of them with kernels that give the same result (the ``cpu`` executor does,
with numba kernels generated for programs).

Semirings are meanings (:mod:`gblas_gnn.semirings`); each executor says how it runs one
(:meth:`~Executor.semiring_lowering`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, get_args

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from .. import semirings
from .._validate import in_device_memory
from ..ir import functions
from ..semirings.aggregations import AGGREGATIONS, check_aggregation, is_named
from ..semirings.algebra import Algebra
from . import _random
from .contexts import AggregateContext, MeanContext

if TYPE_CHECKING:
    import graphblas as gb

    from ..ir.program import Program
    from ..semirings import Semiring
    from .edges import EdgeTensor

__all__ = ["AGGREGATIONS", "CORE_TIER", "PROCESS_TIER", "DEFAULT_TIER", "Executor",
           "DenseArray", "Lowering", "AggregateContext", "MeanContext", "check_aggregation",
           "is_named"]

Reduce = Literal["sum", "max", "min"]
ScaleOp = Literal["times", "div", "plus", "minus"]
Unary = Literal["exp", "relu", "leaky_relu", "scale", "neg", "add", "rdiv"]
EwiseOp = Literal["plus", "minus", "times", "div"]
T = TypeVar("T")

#: tier (a): the abstract methods every executor writes
CORE_TIER = ("edge_values", "edge_from_values", "gather_rows", "gather_cols", "edge_ids",
             "row_reduce", "col_reduce", "sddmm", "extreme_aggregate",
             "extreme_aggregate_backward")
#: tier (b): defaults correct on one process only; an executor with ``processes > 1``
#: overrides every one (their defaults raise there). ``processes`` itself decides.
PROCESS_TIER = ("is_root", "agree", "all_agree", "validation", "on_root", "gemm", "inner",
                "vertex_sum", "vertex_scatter", "row_dot", "spmm", "spmm_t", "source_rows",
                "columns", "gather_columns", "to_graphblas")
#: tier (c): defaults built on tiers (a) and (b), right on every executor (an executor may
#: override them with faster kernels giving the same result)
DEFAULT_TIER = ("asarray", "to_numpy", "all_finite", "combine_rows", "spmm_affine",
                "linear", "gemm_add", "matmul_vjp", "lowers", "semiring_lowering",
                "generic_lowering", "target_rows", "entry_rows", "zeroed_outside",
                "program_forward", "program_backward", "aggregate", "row_counts",
                "aggregate_backward", "softmax", "softmax_backward", "dropout_edges",
                "keep_mask", "pattern", "apply", "leaky_relu_backward", "ewise", "row_scale",
                "col_scale", "scale_edges", "outer_add", "edge_features")


class DenseArray(Protocol):
    """What the interface needs of a dense tensor: an array of an executor's array module
    (a ``numpy.ndarray`` on ``cpu`` and ``dist``, a CuPy array on ``cuda``, the CUDA
    simulator's device array under it)."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> np.dtype: ...

    @property
    def ndim(self) -> int: ...


def _ewise(xp, op: str, a, b):
    """``a op b`` for the executors' edge-wise names (``plus``, ``minus``, ``times``, ``div``)."""
    name = functions.BY_GRAPHBLAS_NAME.get(op)
    if name is None:
        raise ValueError(f"op must be one of {sorted(functions.BY_GRAPHBLAS_NAME)}, got {op!r}")
    return functions.BINARY[name].forward(xp, a, b)


@dataclass(frozen=True)
class Affine:
    """One of :meth:`Executor.apply`'s maps of an edge value ``x`` and a constant ``a`` beside
    the table's functions: ``forward(x, a)`` on arrays, ``code`` its scalar template
    (``{x}``, ``{a}``) for generated kernels."""

    forward: Callable
    code: str


#: :meth:`Executor.apply`'s functions that are not rows of :mod:`gblas_gnn.ir.functions`
EDGE_AFFINE = {"scale": Affine(lambda x, a: x * a, "({x} * {a})"),
               "add": Affine(lambda x, a: x + a, "({x} + {a})"),
               "rdiv": Affine(lambda x, a: a / x, "({a} / {x})")}


def _unary(xp, fn: str, x, alpha):
    if fn in EDGE_AFFINE:
        return EDGE_AFFINE[fn].forward(x, x.dtype.type(alpha))
    if fn in get_args(Unary):
        return functions.unary(xp, fn, x, alpha)
    raise ValueError(f"unknown edge-wise function {fn!r}")


#: ``spmm(S, H)`` (or ``spmm_t``) of one semiring on one executor
Product = Callable[["EdgeTensor", DenseArray], DenseArray]
#: ``build(executor, semiring) -> (spmm, spmm_t)``, registered with :meth:`Executor.lowers`
LoweringBuilder = Callable[["Executor", "Semiring"], tuple[Product, Product]]


@dataclass
class Lowering:
    """How one executor runs one semiring: ``spmm(S, H)`` and ``spmm_t(S, H)``."""

    spmm: Product
    spmm_t: Product


class Executor(ABC):
    """Abstract executor: tier (a) abstract, tiers (b) and (c) defaults (see the module
    docstring and :data:`CORE_TIER`, :data:`PROCESS_TIER`, :data:`DEFAULT_TIER`)."""

    name: str = "abstract"
    #: the array module of dense tensors
    xp: Any = np

    # ================================================================== (b) process tier
    #: processes that run every operation together (a grid's size; 1 here). Above 1, every
    #: method of :data:`PROCESS_TIER` must be overridden: its default raises.
    processes: int = 1

    def _one_process(self, method: str) -> None:
        """Refuse the one-process default of ``method`` (:data:`PROCESS_TIER`) on an executor
        of more than one process that did not override it (it would answer for this
        process's share alone)."""
        if self.processes > 1:
            raise NotImplementedError(
                f"{type(self).__name__}.{method}: the default Executor.{method} is right on "
                f"one process only (it would see this process's share alone); a "
                f"multi-process executor (processes = {self.processes}) must override "
                f"{method}")

    @property
    def is_root(self) -> bool:
        """Whether this process prints and writes files (one process per job does)."""
        self._one_process("is_root")
        return True

    def agree(self, value: T) -> T:
        """``value`` as every process of the job sees it: the root's (identity here)."""
        self._one_process("agree")
        return value

    def all_agree(self, flag: bool) -> bool:
        """Whether ``flag`` holds in every process of the job (``flag`` itself here). A
        decision that chooses between paths with and without collectives (a cache hit) must
        be taken with it, or one process waits for ever in a collective the others skip."""
        self._one_process("all_agree")
        return bool(flag)

    @contextmanager
    def validation(self) -> Iterator[None]:
        """Input checks run inside this block: on a multi-process executor an error in any
        process is raised in every process (none is left waiting in a collective); here it
        simply propagates. The block must not communicate itself."""
        self._one_process("validation")
        yield

    def on_root(self, fn: Callable[[], T]) -> T | None:
        """``fn()`` run by the root process only (writing a file), its error raised in every
        process; returns its result on the root, None elsewhere."""
        self._one_process("on_root")
        return fn()

    def gemm(self, X: DenseArray, W: DenseArray) -> DenseArray:
        """Dense ``X W`` of a vertex-indexed ``X`` (or a parameter) by a small matrix ``W``;
        pass ``W.T`` for ``X Wᵀ``. Never a reduction over vertices."""
        self._one_process("gemm")
        return X @ W

    def gemm_add(self, Y: DenseArray, X: DenseArray, W: DenseArray) -> DenseArray:
        """``Y += X W`` in place, and ``Y`` (a vertex-indexed ``Y`` of the product's shape
        and dtype, ``W`` small, as :meth:`gemm`): a sum of products without an array of
        each (the cpu executor's BLAS sums each block as it forms it)."""
        Y += self.gemm(X, W)
        return Y

    def linear(self, X: DenseArray, W: DenseArray, bias: DenseArray | None = None,
               relu: bool = False, out: DenseArray | None = None) -> DenseArray:
        r"""A layer's dense step :math:`Z = X W + \mathbf{1} b^\top`, then
        :math:`\max(Z, 0)` with ``relu``: :meth:`gemm`, the row bias and the rectifier in
        place (the cpu executor applies them to each block of rows its product has just
        written, while it is in cache). Bitwise :meth:`gemm` followed by ``+ b`` and
        ``max(·, 0)``. With ``out`` (an array of the product's shape and dtype, e.g. a block
        of rows of a larger one) ``Z`` is written there and ``out`` returned: the cpu
        executor's product writes it directly, with no array of its own to copy."""
        Z = self.gemm(X, W)
        if bias is not None:
            Z += bias
        if relu:
            Z = self.xp.maximum(Z, 0, out=Z)
        if out is None:
            return Z
        out[...] = Z
        return out

    def inner(self, X: DenseArray, Y: DenseArray) -> DenseArray:
        r"""The reduction over vertices :math:`X^\top Y = \sum_i X_i^\top Y_i` (weight
        gradients ``Hᵀ dZ``): ``(a, b)`` for ``X`` (n, a) and ``Y`` (n, b)."""
        self._one_process("inner")
        return X.T @ Y

    def matmul_vjp(self, G: DenseArray, W: DenseArray, X: DenseArray,
                   into: DenseArray | None = None, out: DenseArray | None = None,
                   sums: bool = False) -> tuple[DenseArray, ...]:
        r"""The two products of the backward of :math:`Y = X W` (a vertex-indexed ``X``)
        for the cotangent ``G`` of ``Y``: :math:`(G W^\top, X^\top G)`, the cotangents of
        ``X`` and of ``W`` (:meth:`gemm` and :meth:`inner`, which an executor may run at
        the same time).

        With ``into`` (a C-contiguous array of :math:`G W^\top`'s shape and dtype that the
        caller owns, the cotangent of ``X`` summed so far) the first product is added into
        it, :math:`\text{into} \mathrel{+}= G W^\top`, and ``into`` is returned in its
        place (an executor may have the product accumulate there itself, with no array of
        its own). With ``out`` (such an array whose values do not matter: a block of rows of
        a larger one) :math:`G W^\top` is written there, and ``out`` returned in its place.
        With ``sums`` a third result, :meth:`vertex_sum` of ``G`` (the cotangent of a bias
        added to ``Y``), which an executor may take while it reads ``G`` for the products."""
        ga = self.gemm(G, W.T)
        if into is not None:
            into += ga
            ga = into
        elif out is not None:
            out[...] = ga
            ga = out
        if sums:
            return ga, self.inner(X, G), self.vertex_sum(G)
        return ga, self.inner(X, G)

    def vertex_sum(self, X: DenseArray) -> DenseArray:
        r"""The reduction over vertices :math:`\sum_i X_i` (bias gradients, loss sums):
        shape ``X.shape[1:]``."""
        self._one_process("vertex_sum")
        return X.sum(axis=0)

    def vertex_scatter(self, ids: DenseArray | None, G: DenseArray, n: int) -> DenseArray:
        r"""The ``(n, ...)`` array whose row ``ids[k]`` is ``G[k]``, for vertex rows ``G``
        of this process whose global ids are ``ids`` (None: all ``n`` vertices in order):
        the cotangent of a parameter whose rows are read as the vertices' rows
        (:func:`gblas_gnn.ops.vertex_rows`, featureless input), every vertex counted once."""
        self._one_process("vertex_scatter")
        if ids is None:
            return G
        full = self.xp.zeros((n, *G.shape[1:]), G.dtype)
        full[ids] = G
        return full

    def row_dot(self, X: DenseArray, Y: DenseArray) -> DenseArray:
        r"""Per-vertex products :math:`r_i = \langle X_i, Y_i \rangle` (row norms, the
        softmax term of a backward), shape (n,)."""
        self._one_process("row_dot")
        return self.xp.einsum("ij,ij->i", X, Y)

    def spmm(self, S: EdgeTensor, H: DenseArray,
             semiring: str | Semiring = "plus_times") -> DenseArray:
        """``Z[i] = ⊕_j S[i,j] ⊗ H[j]`` over a semiring; an empty row gives 0. A semiring for
        nonnegative weights only (``avg``) refuses a negative one first
        (:meth:`_check_weights`). The default runs :meth:`semiring_lowering` on this
        process's pattern."""
        self._one_process("spmm")
        self._check_weights(S, semiring)
        return self.semiring_lowering(semiring).spmm(S, H)

    def spmm_t(self, S: EdgeTensor, H: DenseArray,
               semiring: str | Semiring = "plus_times") -> DenseArray:
        """``Z[j] = ⊕_i S[i,j] ⊗ H[i]`` (the product with ``Sᵀ``); an empty column gives 0."""
        self._one_process("spmm_t")
        self._check_weights(S, semiring)
        return self.semiring_lowering(semiring).spmm_t(S, H)

    def source_rows(self, A: EdgeTensor) -> int:
        """Rows of a dense tensor gathered by A's columns (sources), in the layout every
        dense tensor has: A's column count on one process (a grid holds them by rows)."""
        self._one_process("source_rows")
        return self._ncols(A)

    def columns(self, A: EdgeTensor, X: DenseArray) -> DenseArray:
        """The rows of ``X`` for A's columns (the source side), for :meth:`gather_columns`:
        ``X`` itself on one process; a grid fetches them once (the partner exchange)."""
        self._one_process("columns")
        return X

    def gather_columns(self, A: EdgeTensor, v: DenseArray) -> DenseArray:
        """``v[j]`` for every stored entry ``(i, j)`` of A, CSR order, from a vector of
        :meth:`columns` (no communication)."""
        self._one_process("gather_columns")
        return self.gather_cols(A, v)

    def to_graphblas(self, E: EdgeTensor) -> gb.Matrix:
        """A host ``graphblas.Matrix`` with the pattern and values of the edge tensor ``E``
        (``E`` itself when it is one), in the whole matrix's shape, each entry at its global
        vertex ids (:meth:`edge_ids`). On one process that is E's own shape; an executor of
        several processes holds a share of each edge tensor and says where it lies in the
        whole (``dist``: this rank's block in the global ``n × n`` shape)."""
        self._one_process("to_graphblas")
        import graphblas as gb

        from .patterns import graphblas_of

        E = graphblas_of(E)             # a graph's adjacency pattern: its matrix
        if isinstance(E, gb.Matrix):
            return E
        rows, cols = (self.to_numpy(a) for a in self.edge_ids(E))
        return gb.Matrix.from_coo(rows, cols, self.to_numpy(self.edge_values(E)),
                                  nrows=self._nrows(E), ncols=self._ncols(E))

    # ================================================================== (a) the core
    @abstractmethod
    def edge_values(self, E: EdgeTensor) -> DenseArray:
        """E's values as a 1-D array in CSR order."""

    @abstractmethod
    def edge_from_values(self, A: EdgeTensor, values: DenseArray) -> EdgeTensor:
        """An edge tensor with A's pattern holding ``values`` (CSR order, as
        :meth:`edge_values`)."""

    @abstractmethod
    def gather_rows(self, E: EdgeTensor, u: DenseArray) -> DenseArray:
        """``u[i]`` for every stored entry ``(i, j)`` of E, in CSR order (``u``: (n,))."""

    @abstractmethod
    def gather_cols(self, E: EdgeTensor, v: DenseArray) -> DenseArray:
        """``v[j]`` for every stored entry ``(i, j)`` of E, in CSR order (``v`` is indexed by
        E's columns, i.e. by source vertices, and laid out like every dense tensor)."""

    @abstractmethod
    def edge_ids(self, A: EdgeTensor) -> tuple[DenseArray, DenseArray]:
        """``(rows, cols)``: the global vertex ids of A's stored entries, CSR order (random
        masks hash them, so a mask does not depend on the executor or the partition)."""

    @abstractmethod
    def row_reduce(self, E: EdgeTensor, op: Reduce = "sum") -> DenseArray:
        """``r[i] = ⊕_j E[i,j]`` over stored entries; an empty row gives 0."""

    @abstractmethod
    def col_reduce(self, E: EdgeTensor, op: Reduce = "sum") -> DenseArray:
        """``r[j] = ⊕_i E[i,j]`` over stored entries (laid out like a dense vector over
        vertices); an empty column gives 0."""

    @abstractmethod
    def sddmm(self, A: EdgeTensor, X: DenseArray, Y: DenseArray) -> EdgeTensor:
        """Sampled dense-dense product on A's *pattern*: ``E[i,j] = Σ_c X[i,c] Y[j,c]``."""

    @abstractmethod
    def extreme_aggregate(self, S: EdgeTensor, H: DenseArray, is_max: bool,
                          keep_context: bool) -> DenseArray | tuple[DenseArray, Any]:
        """``Z[i,c] = max_j / min_j S[i,j] H[j,c]`` (empty row → 0), with the arg-extreme of
        each (row, feature) in the context: ``Z`` or ``(Z, ctx)``."""

    @abstractmethod
    def extreme_aggregate_backward(self, ctx: Any, dZ: DenseArray, need_dS: bool = True
                                   ) -> tuple[EdgeTensor | None, DenseArray]:
        """``(dS, dH)`` of :meth:`extreme_aggregate`: ``dS[i,j] = Σ_c [j wins (i,c)]
        dZ[i,c] H[j,c]``, ``dH[j,c] = Σ_i [j wins (i,c)] dZ[i,c] S[i,j]``."""

    # ================================================================== (c) defaults
    # ------------------------------------------------------------------ arrays
    def asarray(self, x: ArrayLike, dtype: DTypeLike | None = None) -> DenseArray:
        """``x`` (a host array, or already one of ours) as an array of :attr:`xp`; an array
        in a GPU's memory given to a host executor is refused (``TypeError``), as CuPy
        refuses the implicit copy, whose message would not say which array it was."""
        if self.xp is np and in_device_memory(x):
            raise TypeError(f"a {type(x).__name__} in a GPU's memory was given to the "
                            f"{self.name!r} executor, which takes host arrays: copy it with "
                            "gg.to_numpy first")
        return self.xp.asarray(x, dtype=dtype)

    def to_numpy(self, x: DenseArray, reason: str = "to_numpy") -> np.ndarray:
        """A host ``numpy.ndarray`` with the values of ``x`` (no copy when it is one).
        Every read of device values on the host goes through here; ``reason`` says what it is
        for (a device executor counts its copies by reason)."""
        return np.asarray(x)

    def all_finite(self, *arrays: DenseArray) -> bool:
        """Whether every value of ``arrays`` (of :attr:`xp`) is finite: one reduction and
        one read on the host (:meth:`to_numpy`, reason ``"finite"``: a counted copy on a
        device). The NaN/Inf checks of rule 5 use it, so that a device's syncs are seen."""
        if not arrays:
            return True
        xp = self.xp
        flags = [xp.isfinite(a).all() for a in arrays]
        ok = flags[0] if len(flags) == 1 else xp.stack(flags).all()
        return bool(self.to_numpy(ok, "finite"))

    # ------------------------------------------------------------------ products
    def combine_rows(self, a: DenseArray, X: DenseArray, b: DenseArray | None = None,
                     Y: DenseArray | None = None, overwrite: bool = False) -> DenseArray:
        r"""A per-row linear combination, an array of ``X``'s shape:

        .. math:: O_i = a_i X_i + b_i Y_i \qquad (O_i = a_i X_i \text{ without } b, Y)

        with ``X``, ``Y`` (n, k) and the coefficients ``a``, ``b`` (n,). A fresh array, or
        ``X`` itself with ``overwrite`` (the caller holds ``X`` alone and needs it no more:
        no array of its size to allocate) where the result has ``X``'s dtype. Rows are
        local, so it is right on every executor; the ``cpu`` executor makes it one pass (a
        row normalisation and its backward are built from it)."""
        xp = self.xp
        types = (X, a) if Y is None else (X, a, Y, b)
        if overwrite and Y is not X and xp.result_type(*types) == X.dtype:
            out = X
            out *= a[:, None]
        else:
            out = X * a[:, None]
        if Y is not None:
            out += Y * b[:, None]
        return out

    def spmm_affine(self, S: EdgeTensor, H: DenseArray,
                    self_weight: float | DenseArray | None = None,
                    bias: DenseArray | None = None, transpose: bool = False) -> DenseArray:
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
    #: hand-written lowerings by what ⊕ and ⊗ are, per executor class (``lowers`` fills it)
    _LOWERINGS: dict = {}

    @classmethod
    def lowers(cls, *algebras: Algebra) -> Callable[[LoweringBuilder], LoweringBuilder]:
        """Decorator registering ``fn(executor, semiring) -> (spmm, spmm_t)`` as how this
        executor class runs every semiring whose ⊕ and ⊗ are one of ``algebras``
        (:class:`~gblas_gnn.semirings.algebra.Algebra`), whatever its name."""
        for algebra in algebras:
            if not isinstance(algebra, Algebra) or algebra.add is None or algebra.mul is None:
                raise TypeError(f"a lowering is registered for a known algebra, got "
                                f"{algebra!r}")

        def register(fn):
            table = dict(cls.__dict__.get("_LOWERINGS", {}))
            for algebra in algebras:
                table[algebra] = fn
            cls._LOWERINGS = table
            return fn
        return register

    def semiring_lowering(self, semiring: str | Semiring) -> Lowering:
        """How this executor runs ``semiring`` (a name or a
        :class:`~gblas_gnn.semirings.Semiring`): a registered lowering for its algebra, else
        :meth:`generic_lowering`; built once per executor and semiring."""
        sr = semirings.get(semiring)
        cache = self.__dict__.setdefault("_lowering_cache", {})
        hit = cache.get(id(sr))
        if hit is None or hit[0] is not sr:
            build = None
            for klass in type(self).__mro__:
                build = klass.__dict__.get("_LOWERINGS", {}).get(sr.algebra)
                if build is not None:
                    break
            pair = build(self, sr) if build is not None else self.generic_lowering(sr)
            hit = cache[id(sr)] = (sr, Lowering(*pair))
        return hit[1]

    def generic_lowering(self, sr: Semiring) -> tuple[Product, Product]:
        r"""``(spmm, spmm_t)`` for any semiring from its meaning alone:
        :math:`Z_i = \mathrm{readout}(\bigoplus_j S_{ij} \otimes H_j)`, row by row over the
        gathered messages on the host, over this process's pattern
        (:meth:`_local_coords`). Correct for every semiring and slow: the reference an
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

    # ------------------------------------------------------------------ layouts
    def target_rows(self, A: EdgeTensor) -> int:
        """Rows of a dense tensor gathered by A's rows (targets): A's row count."""
        return self._nrows(A)

    def entry_rows(self, A: EdgeTensor) -> slice | None:
        """The rows of this process's A from its first to its last that store an entry, as
        a slice, where the executor knows them at no cost worth counting (a row outside is
        empty, so a row-indexed sink's output is 0 there); None where it does not (the
        default: every row is then treated as live)."""
        return None

    def zeroed_outside(self, shape: tuple, dtype, gaps: Sequence) -> DenseArray:
        """An array of ``shape`` and ``dtype`` whose rows in ``gaps`` (slices, or index
        arrays of rows) are zero and whose other rows are to be written by the caller (they
        hold anything): the output of an operation that writes some rows, 0 on the rest."""
        xp = self.xp
        out = xp.empty(shape, dtype)
        for gap in gaps:
            out[gap if isinstance(gap, slice) else xp.asarray(gap)] = 0
        return out

    # ------------------------------------------------------------------ edge programs
    def program_forward(self, program: Program, keep: bool
                        ) -> tuple[DenseArray | list[EdgeTensor], Any]:
        """Run an edge program (:mod:`gblas_gnn.ir.program`): a sparse expression on
        A's pattern and the sink that consumes it. Returns ``(out, ctx)``, ``ctx`` None
        unless ``keep``; ``out`` may be an array ``ctx`` holds (the caller copies it before
        handing it to a user who may write into it:
        :meth:`gblas_gnn.compose.tape.Scope.released`). The default is the reference lowering
        written with this interface (:mod:`gblas_gnn.ir.reference`); an executor may
        compile programs into fused kernels that give the same result."""
        from ..ir import reference

        return reference.forward(self, program, keep)

    def program_backward(self, ctx: Any, dout: Any, into: Sequence[Any] | None = None
                         ) -> list[Any]:
        """The cotangents of a program's operands (None where there is none) for the
        cotangent ``dout`` of its output. ``into``: per operand, the cotangent summed so far
        where the caller owns it (else None); an executor may add the operand's cotangent
        into it, in place, and return that very array in its place (the ``cpu`` executor's
        uniform aggregations do: no array of their own and no second pass to sum them). The
        reference lowering returns fresh arrays."""
        from ..ir import reference

        return reference.backward(self, ctx, dout)

    # ------------------------------------------------------------------ aggregation
    def aggregate(self, S: EdgeTensor, H: DenseArray, aggr: str | Semiring,
                  keep_context: bool = False) -> DenseArray | tuple[DenseArray, Any]:
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

    def row_counts(self, S: EdgeTensor, dtype: np.dtype) -> DenseArray:
        """Stored entries per row of ``S`` as ``dtype``, an empty row counting 1; not to be
        written into (the ``cpu`` executor's are kept with the pattern, read-only)."""
        counts = self.row_reduce(self.pattern(S, 1.0, dtype), "sum")
        return self.xp.maximum(counts, dtype.type(1))

    def aggregate_backward(self, ctx: Any, dZ: DenseArray, need_dS: bool = True
                           ) -> tuple[EdgeTensor | None, DenseArray]:
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

    # ------------------------------------------------------------------ softmax
    def softmax(self, E: EdgeTensor) -> EdgeTensor:
        """Stable row softmax over stored entries: ``exp(E − rep(max)) ⊘ rs(exp(E − rep(max)))``.

        An empty row stays empty.
        """
        shifted = self.row_scale(E, self.row_reduce(E, "max"), "minus")
        ex = self.apply(shifted, "exp")
        return self.row_scale(ex, self.row_reduce(ex, "sum"), "div")

    def softmax_backward(self, Psi: EdgeTensor, dPsi: EdgeTensor) -> EdgeTensor:
        """``dS = Ψ ⊙ (dΨ − rep(sum(Ψ ⊙ dΨ)))``, the backward of :meth:`softmax`."""
        t = self.row_reduce(self.ewise(Psi, dPsi, "times"), "sum")
        return self.ewise(Psi, self.row_scale(dPsi, t, "minus"), "times")

    # ------------------------------------------------------------------ random masks
    def dropout_edges(self, A: EdgeTensor, key: int, p: float, heads: int,
                      dtype: DTypeLike) -> DenseArray:
        r"""Attention-dropout scales, (heads, nnz) in CSR order: ``1/(1-p)`` where
        :math:`u(\kappa; h, i, j) \ge p` for the edge ``j → i`` of head ``h``, else 0
        (:mod:`._random`: the same mask on every executor)."""
        xp = self.xp
        rows, cols = self.edge_ids(A)
        u = _random.uniform(xp, key, xp.arange(heads)[:, None], rows[None, :], cols[None, :])
        dtype = np.dtype(dtype)
        return xp.where(u >= p, dtype.type(1.0 / (1.0 - p)), dtype.type(0)).astype(dtype)

    def keep_mask(self, key: int, p: float, shape: tuple[int, int],
                  row_ids: ArrayLike | None = None) -> DenseArray:
        r"""Feature-dropout mask, boolean ``shape``: entry ``(r, c)`` is kept when
        :math:`u(\kappa; 0, i_r, c) \ge p` with :math:`i_r` the global id of row ``r``
        (``row_ids``; ``None``: row ``r`` is vertex ``r``)."""
        xp = self.xp
        rows = xp.arange(shape[0]) if row_ids is None else self.asarray(row_ids)
        u = _random.uniform(xp, key, 0, rows[:, None], xp.arange(shape[1])[None, :])
        return u >= p

    # ------------------------------------------------------------------ edge algebra
    def pattern(self, A: EdgeTensor, value: float, dtype: DTypeLike) -> EdgeTensor:
        """Edge tensor with A's pattern and every value equal to ``value``."""
        values = self.edge_values(A)
        dtype = np.dtype(dtype)
        return self.edge_from_values(A, self.xp.full(values.shape, dtype.type(value), dtype))

    def apply(self, E: EdgeTensor, fn: Unary, alpha: float | None = None) -> EdgeTensor:
        """Edge-wise ``exp``, ``relu``, ``neg``, ``leaky_relu`` (slope ``alpha``), ``scale``
        (× alpha), ``add`` (+ alpha) or ``rdiv`` (alpha ÷ x)."""
        return self.edge_from_values(E, _unary(self.xp, fn, self.edge_values(E), alpha))

    def leaky_relu_backward(self, C: EdgeTensor, dE: EdgeTensor, alpha: float) -> EdgeTensor:
        """``dC = dE ⊙ (1 if C > 0 else alpha)`` edge-wise."""
        c, de = self.edge_values(C), self.edge_values(dE)
        return self.edge_from_values(C, self.xp.where(c > 0, de, de * de.dtype.type(alpha)))

    def ewise(self, E: EdgeTensor, F: EdgeTensor, op: EwiseOp) -> EdgeTensor:
        """``E op F`` entry by entry (same pattern), op in plus, minus, times, div."""
        return self.edge_from_values(E, _ewise(self.xp, op, self.edge_values(E),
                                               self.edge_values(F)))

    def row_scale(self, E: EdgeTensor, v: DenseArray, op: ScaleOp = "times") -> EdgeTensor:
        """``E[i,j] op v[i]`` on E's pattern (``rep(v)`` under a mask)."""
        return self.edge_from_values(E, _scale_op(op, self.edge_values(E),
                                                  self.gather_rows(E, v)))

    def col_scale(self, E: EdgeTensor, v: DenseArray, op: ScaleOp = "times") -> EdgeTensor:
        """``E[i,j] op v[j]`` on E's pattern (``rep(v)ᵀ`` under a mask)."""
        return self.edge_from_values(E, _scale_op(op, self.edge_values(E),
                                                  self.gather_cols(E, v)))

    def scale_edges(self, E: EdgeTensor, u: DenseArray, v: DenseArray) -> EdgeTensor:
        """``E[i,j] · u[i] · v[j]`` (a two-sided diagonal scaling, e.g. GCN's
        ``D^-1/2 A D^-1/2``)."""
        return self.edge_from_values(
            E, self.edge_values(E) * self.gather_rows(E, u) * self.gather_cols(E, v))

    def outer_add(self, A: EdgeTensor, u: DenseArray, v: DenseArray) -> EdgeTensor:
        """Masked outer sum on A's pattern: ``E[i,j] = u[i] + v[j]`` (never n×n)."""
        return self.edge_from_values(A, self.gather_rows(A, u) + self.gather_cols(A, v))

    def edge_features(self, features) -> Any:
        """A graph's edge features (``g.edge_attr``) as this executor's programs read them:
        the ``(nnz, f)`` array in the CSR order of their pattern, on the executor
        (``features.on(self)``, kept there)."""
        return features.on(self)

    # ================================================================== hooks
    # Private helpers the defaults read; an executor whose edge tensors are not
    # ``graphblas.Matrix`` objects or blocks of one (``cuda``, ``dist``) overrides them.
    def _check_weights(self, S: EdgeTensor, semiring: str | Semiring) -> None:
        """Raise :func:`~gblas_gnn.semirings.negative_weight_error` before any work when
        ``semiring`` holds only for nonnegative edge weights (``avg``) and ``S`` has a
        negative one; on a multi-process executor in every process (a weight of one block
        stops the whole grid). Every product over such a semiring checks here."""
        sr = semirings.get(semiring)
        if not sr.nonnegative_weights:
            return
        with self.validation():
            values = self.edge_values(S)
            if values.size and bool(self.to_numpy((values < 0).any())):
                raise semirings.negative_weight_error(sr.name)

    def _local_coords(self, S: EdgeTensor) -> tuple[DenseArray, DenseArray]:
        """``(rows, cols)`` local indices of S's stored entries (for :meth:`generic_lowering`;
        single-process executors: the global ids)."""
        return self.edge_ids(S)

    def _check_sources(self, A: EdgeTensor, X: DenseArray) -> None:
        """The messages ``X`` must have one row per column (source) of ``A``."""
        if X.shape[0] != self._ncols(A):
            raise ValueError(f"X has {X.shape[0]} rows, the pattern {self._ncols(A)} columns")

    def _nrows(self, S: EdgeTensor) -> int:
        """Rows of S's pattern on this process."""
        return int(S.nrows)

    def _ncols(self, S: EdgeTensor) -> int:
        """Columns of S's pattern on this process."""
        return int(S.ncols)


def _scale_op(op: str, values, gathered):
    if op not in ("times", "div", "plus", "minus"):
        raise ValueError(f"op must be 'times', 'div', 'plus' or 'minus', got {op!r}")
    return _ewise(None, op, values, gathered)


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
