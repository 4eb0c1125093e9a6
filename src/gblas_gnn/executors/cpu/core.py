"""The ``cpu`` executors' shared base (:class:`GraphBLASExecutor`): tiers (a) and (b) of
:mod:`gblas_gnn.executors.base` on python-graphblas (SuiteSparse:GraphBLAS) and numba, on one
process.

It writes the core (the edge primitives, the reductions of edge tensors, the sampled product,
max/min aggregation) and the process tier's products (``gemm``, ``inner``, ``vertex_sum``,
``row_dot``, and ``spmm`` / ``spmm_t`` through the semiring lowerings of
:mod:`.semiring_lowering`), and no operation of the default tier (c): those are the base
class's, written with the primitives. Two executors derive from it:

* :class:`~gblas_gnn.executors.cpu.CPUExecutor` (``cpu``) adds fused and fast kernels for the
  default tier;
* :class:`~gblas_gnn.executors.primitives.PrimitivesExecutor` (``primitives``) adds nothing
  but its name: the reference the fast kernels are held to.

Every hot step runs a SuiteSparse *factory* kernel or a numba kernel over the same CSR
buffers (rule 2 of ``docs/design.md``); the kernel each method runs, as read from
``gb.ss.burble``, is named in its comment. Typed operators (``op["FP32"]``) and numpy scalars
of the operand dtype keep float32 work in float32. Edge tensors are ``graphblas.Matrix``
objects sharing A's pattern.
"""

from __future__ import annotations

import graphblas as gb
import numpy as np
from graphblas import monoid, semiring

from ..alignment import aligned_empty
from ..base import Executor
from ..contexts import ArgExtremeContext
from ..patterns import CSRPattern, MatrixCache, csr_of, csr_view, graphblas_of, unsigned_view
from . import _chunked_gemm, _dense_kernels, _gbio, _spmm
from . import _minmax_kernels as _minmax
from . import semiring_lowering as _lowering
from ._spmm import CSCOperand

__all__ = ["GraphBLASExecutor"]

_REDUCE = {"sum": monoid.plus, "max": monoid.max, "min": monoid.min}


class GraphBLASExecutor(Executor):
    """Tiers (a) and (b) of :class:`~gblas_gnn.executors.Executor` with python-graphblas and
    numba; every default-tier operation is the base class's (see the module docstring).

    Args:
        threads: GraphBLAS and numba threads of this process (``None``: leave them; see
            :meth:`set_threads`).
        blas_threads: OpenBLAS threads of the dense products (default 1, see :meth:`gemm`).
    """

    xp = np
    _LOWERINGS = _lowering.LOWERINGS

    def __init__(self, threads: int | None = None, blas_threads: int = 1):
        # a graph's AdjacencyPattern (with_self_loops) brings its own pattern, and its
        # matrix, once built, shares it (patterns.csr_of)
        self._patterns = MatrixCache(csr_of)
        self._values = MatrixCache(lambda A: _gbio.csr_arrays(graphblas_of(A))[2])
        self._transposes = MatrixCache(lambda A: A.T.new())
        self._csc = MatrixCache(lambda A: CSCOperand(A, self._patterns.get(A)))
        self.blas_threads = 1
        self.set_threads(threads, blas_threads)

    # ------------------------------------------------------------------ threads
    def set_threads(self, threads: int | None = None, blas_threads: int | None = None) -> dict:
        """Set the threads of SuiteSparse:GraphBLAS and numba (process-wide; numba is capped
        at ``NUMBA_NUM_THREADS``, fixed when it starts) and the BLAS threads :meth:`gemm`
        runs with; ``None`` leaves a setting. Returns what each runtime reports."""
        for name, value in (("threads", threads), ("blas_threads", blas_threads)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        import numba

        if threads is not None:
            gb.ss.config["nthreads"] = threads
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        if blas_threads is not None:
            self.blas_threads = blas_threads
        return {"graphblas": int(gb.ss.config["nthreads"]), "numba": numba.get_num_threads(),
                "blas": self.blas_threads}

    # ------------------------------------------------------------------ dense (tier b)
    def gemm(self, X, W):
        # One OpenBLAS thread by default: the products here are tall-skinny (n×k by k×k', a
        # few milliseconds on one core), and a second OpenBLAS thread spin-waits against the
        # GraphBLAS and numba OpenMP threads of the sparse steps, which made a GAT step
        # much slower, not faster (docs/performance.md has the measurement).
        # The result is 64-byte aligned: it is usually the X whose rows the attention kernels
        # gather (a 128-byte row then spans two cache lines, not three).
        # A tall product on one BLAS thread runs as blocks of rows shared among the numba
        # threads' count of Python threads, each calling BLAS on its own rows
        # (_chunked_gemm: both cores without a spinning BLAS thread, the same bits for any
        # thread count).
        return _chunked_gemm.matmul(X, W, self.blas_threads)

    def inner(self, X, Y):
        # under gemm's BLAS thread count (the default's X.T @ Y would run as many OpenBLAS
        # threads as the library starts with); a tall pair as blocks of rows on both cores,
        # summed in block order (the same bits for any thread count)
        return _chunked_gemm.inner(X, Y, self.blas_threads)

    def vertex_sum(self, X):
        # a float matrix (every bias gradient) in parallel chunks, summed in a fixed order
        if (isinstance(X, np.ndarray) and X.ndim == 2 and X.flags.c_contiguous
                and X.dtype in (np.float32, np.float64)):
            return _dense_kernels.column_sums(X)
        return super().vertex_sum(X)

    def row_dot(self, X, Y):
        if _dense_kernels.dense_rows(X, Y):
            return _dense_kernels.row_dots(X, Y)
        return super().row_dot(X, Y)

    # ------------------------------------------------------------------ edge primitives
    def edge_values(self, E):
        return _gbio.csr_arrays(graphblas_of(E))[2]

    def edge_from_values(self, A, values):
        # the structure comes from the cached pattern (no export of A per call, e.g. per
        # dropout mask); GraphBLAS takes ownership of fresh int64 copies
        pattern = self._patterns.get(A)
        if values.shape != (pattern.nnz,):
            raise ValueError(f"need {pattern.nnz} edge values, got {values.shape}")
        return gb.Matrix.ss.import_csr(nrows=A.nrows, ncols=A.ncols,
                                       indptr=pattern.indptr.copy(),
                                       col_indices=pattern.indices.astype(np.int64),
                                       values=np.array(values), sorted_cols=True,
                                       take_ownership=True)

    def gather_rows(self, E, u):
        return np.repeat(np.asarray(u), self._patterns.get(E).row_counts)

    def gather_cols(self, E, v):
        return np.asarray(v)[self._patterns.get(E).indices]

    def edge_ids(self, A):
        pattern = self._patterns.get(A)
        return pattern.rows(), pattern.indices.astype(np.int64)

    def csr_pattern(self, A: gb.Matrix) -> CSRPattern:
        """The CSR index buffers of ``A``'s pattern (a
        :class:`~gblas_gnn.executors.patterns.CSRPattern`), exported once per matrix and kept
        while it lives: what the kernels and the edge primitives here read, and what the
        ``dist`` executor reads of its block."""
        return self._patterns.get(A)

    def pattern_values(self, A: gb.Matrix, dtype: np.dtype) -> np.ndarray:
        """A's stored values in CSR order as ``dtype`` (exported once per matrix)."""
        values = self._values.get(A)
        return values if values.dtype == dtype else values.astype(dtype)

    def transposed(self, S: gb.Matrix) -> gb.Matrix:
        """``Sᵀ`` stored as a matrix of its own, built once per matrix (products with a
        transpose are several times faster with ``Sᵀ`` stored than with SuiteSparse
        transposing inside every product), for the semirings that run in GraphBLAS
        (``plus_times`` uses the CSC buffers instead)."""
        return self._transposes.get(S)

    # ------------------------------------------------------------------ reductions
    def row_reduce(self, E, op="sum"):
        return _gbio.vector_to_dense(E.reduce_rowwise(_REDUCE[op][E.dtype.name]).new(),
                                     E.dtype.np_type)

    def col_reduce(self, E, op="sum"):
        return _gbio.vector_to_dense(E.reduce_columnwise(_REDUCE[op][E.dtype.name]).new(),
                                     E.dtype.np_type)

    # ------------------------------------------------------------------ products
    def sddmm(self, A, X, Y):
        # masked dot3, factory plus_times: C<A.S> = X Yᵀ
        t = _gbio.float_type(X.dtype)
        return _gbio.dense_in(X).mxm(_gbio.dense_in(Y).T, semiring.plus_times[t]).new(mask=A.S)

    def spmm_plus_times(self, S: gb.Matrix, H: np.ndarray, transpose: bool = False,
                        self_weight: float | np.ndarray | None = None,
                        bias: np.ndarray | None = None,
                        divisors: np.ndarray | None = None) -> np.ndarray:
        r"""The ``plus_times`` product with the terms its kernel adds as it writes each row,

        .. math:: Z = D^{-1} (\mathrm{op}(S)\, H + w H + \mathbf{1} b^\top)

        (:mod:`._spmm`; ``op(S)`` is ``Sᵀ`` with ``transpose``, ``w`` is ``self_weight``,
        ``b`` is ``bias``, ``D`` is ``diag(divisors)``, each term optional): the numba kernel
        over the cached int32 CSR indices of ``S`` and its values in place, or over the CSC
        buffers of ``S`` built at the first transposed product and kept with ``S`` (a
        counting sort, no GraphBLAS transpose). GraphBLAS's in-place ``saxpy5`` with the copy
        of ``H`` in measured markedly slower (``docs/performance.md``)."""
        if transpose:
            return _spmm.product_t(self._csc.get(S), H, self_weight, bias, divisors)
        return _spmm.product(S, self._patterns.get(S), H, self_weight, bias, divisors)

    # ------------------------------------------------------------------ max/min aggregation
    def extreme_aggregate(self, S, H, is_max, keep_context):
        # no factory kernel exists for max_times / min_times: one numba pass over the rows of
        # S's cached int32 pattern, its values read in place, that records the winner of
        # every (row, feature) only when a backward will need it (._minmax_kernels)
        S = graphblas_of(S)             # a graph's adjacency pattern: its matrix
        pattern = self._patterns.get(S)
        H = _spmm.check_features(H, pattern.ncols, "aggregate")
        with csr_view(S) as (_, _, values, iso):
            Z, arg = _minmax.run_extreme(pattern, values, iso, H, is_max=is_max,
                                         with_arg=keep_context)
            if not keep_context:
                return Z
            # the backward reads the values after S has its buffers back: a copy of them
            kept = np.full(pattern.nnz, values.reshape(-1)[0] if values.size else 0, H.dtype) \
                if iso else values.astype(H.dtype)
        return Z, ArgExtremeContext("max" if is_max else "min", S, H, pattern.indptr,
                                    pattern.indices, kept, arg)

    def extreme_aggregate_backward(self, ctx: ArgExtremeContext, dZ, need_dS=True):
        # dS: a row pass (each row owns its entries); dH: a scatter from the winners
        dZ = np.ascontiguousarray(dZ, dtype=ctx.H.dtype)
        dS = None
        if need_dS:
            out = np.empty(ctx.indices.shape[0], dtype=ctx.H.dtype)
            _minmax.winner_edges(unsigned_view(ctx.indptr), unsigned_view(ctx.indices), ctx.arg,
                                 ctx.H, dZ, out)
            dS = self.edge_from_values(ctx.S, out)
        dH = aligned_empty((ctx.S.ncols, dZ.shape[1]), dZ.dtype)
        dH.fill(0)
        _minmax.winner_features(unsigned_view(ctx.indices), ctx.values.reshape(-1, 1),
                                max(dZ.shape[1], 1), ctx.arg, dZ, dH)
        return dS, dH
