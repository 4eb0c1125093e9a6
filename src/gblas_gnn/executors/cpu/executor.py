"""The ``cpu`` executor (:class:`CPUExecutor`): python-graphblas (SuiteSparse:GraphBLAS) and
numba on one process.

Every hot step runs a SuiteSparse *factory* kernel or a numba kernel over the same CSR
buffers (rule 2 of ``docs/design.md``); the kernel each method runs, as read from
``gb.ss.burble``, is named in its comment. Typed operators (``op["FP32"]``) and numpy scalars
of the operand dtype keep float32 work in float32. Edge tensors are ``graphblas.Matrix``
objects sharing A's pattern. The package's other modules are listed in
:mod:`gblas_gnn.executors.cpu`.
"""

from __future__ import annotations

import functools
import threading

import graphblas as gb
import numpy as np
from graphblas import binary, monoid, semiring, unary

from ..alignment import aligned_empty
from ..base import Executor
from ..contexts import ArgExtremeContext, MeanContext
from ..patterns import CSRPattern, MatrixCache, csr_of, csr_view, graphblas_of, unsigned_view
from . import _dense_kernels, _gbio, _random_kernels, _spmm, programs, uniform_aggregation
from . import _minmax_kernels as _minmax
from . import semiring_lowering as _lowering
from ._chunked_gemm import chunked_matmul, epilogue
from ._spmm import CSCOperand

__all__ = ["CPUExecutor", "ArgExtremeContext"]

_REDUCE = {"sum": monoid.plus, "max": monoid.max, "min": monoid.min}
# colscale / rowscale semirings: the multiply sees (diagonal value, edge value) or
# (edge value, diagonal value); ``r*`` ops swap arguments so that ``E op v`` comes out.
_ROW_SCALE = {"times": semiring.any_times, "div": semiring.any_rtruediv,
              "plus": semiring.any_plus, "minus": semiring.any_rminus}
_COL_SCALE = {"times": semiring.any_times, "div": semiring.any_truediv,
              "plus": semiring.any_plus, "minus": semiring.any_minus}
_EWISE = {"plus": binary.plus, "minus": binary.minus, "times": binary.times,
          "div": binary.truediv}


def _tname(dtype) -> str:
    return "FP64" if np.dtype(dtype) == np.float64 else "FP32"


def _dense_to_gb(X: np.ndarray) -> gb.Matrix:
    """An (n, k) or (n,) ndarray as a full row-major ``graphblas.Matrix`` (one copy)."""
    X = np.ascontiguousarray(X)
    return _gbio.dense_in(X.reshape(-1, 1) if X.ndim == 1 else X)


#: below this much work (rows × the two products' widths) a vjp's two products run one after
#: the other: a thread's start and join would cost what the overlap saves
_PAIR_WORK = 1 << 18


@functools.cache
def _blas_controller():
    from threadpoolctl import ThreadpoolController
    return ThreadpoolController()


def _gemm_into(into: np.ndarray, G: np.ndarray, W: np.ndarray) -> np.ndarray:
    r"""``into += G Wᵀ`` by the GEMM itself (:math:`C \leftarrow G W^\top + 1 \cdot C`):
    the product is summed as it is formed, with no array of its own and no second pass
    (several times faster than ``np.matmul`` and the sum: ``docs/performance.md``). The
    row-major ``into`` is the column-major ``intoᵀ = W Gᵀ``, which BLAS overwrites in place.
    Returns ``into``."""
    if into.dtype in (np.float32, np.float64) and into.flags.c_contiguous:
        from scipy.linalg.blas import get_blas_funcs

        gemm = get_blas_funcs("gemm", dtype=into.dtype)
        out = gemm(1.0, W.astype(into.dtype, copy=False), G.T.astype(into.dtype, copy=False),
                   beta=1.0, c=into.T, overwrite_c=True)
        if out.ctypes.data == into.ctypes.data:
            return into
        into[...] = out.T                       # BLAS wrote a copy (not expected)
        return into
    into += G @ W.T
    return into


class CPUExecutor(Executor):
    """python-graphblas and numba implementation of :class:`~gblas_gnn.executors.Executor`.

    Args:
        threads: GraphBLAS and numba threads of this process (``None``: leave them; see
            :meth:`set_threads`).
        blas_threads: OpenBLAS threads of the dense products (default 1, see :meth:`gemm`).
    """

    name = "cpu"
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

    # ------------------------------------------------------------------ dense
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
        return self.linear(X, W)

    def linear(self, X, W, bias=None, relu=False):
        # gemm's product, each block of rows biased and rectified as soon as it is written
        # (GIN's MLP: two numpy passes over (n, k) an activation fewer)
        out = aligned_empty((X.shape[0], W.shape[1]), np.result_type(X, W))
        if bias is not None:
            bias = np.asarray(bias)
        with _blas_controller().limit(limits=self.blas_threads, user_api="blas"):
            if (self.blas_threads == 1 and X.ndim == 2 and W.ndim == 2
                    and X.shape[0] * (X.shape[1] + W.shape[1]) >= _PAIR_WORK):
                import numba

                return chunked_matmul(X, W, out, numba.get_num_threads(), bias, relu)
            np.matmul(X, W, out=out)
            epilogue(out, bias, relu)
            return out

    def inner(self, X, Y):
        return self.gemm(X.T, Y)

    def all_finite(self, *arrays):
        # the sum first: finite only if every term is (a NaN stays NaN, an infinity stays
        # one or meets its opposite in a NaN), one read and no (n, k) mask, so faster than
        # np.isfinite(a).all(); a sum that is not finite (an overflow of finite values too)
        # gets the exact test
        for a in arrays:
            a = np.asarray(a)
            with np.errstate(over="ignore", invalid="ignore"):
                quick = np.isfinite(a.sum())
            if not quick and not np.isfinite(a).all():
                return False
        return True

    def matmul_vjp(self, G, W, X, into=None):
        # G Wᵀ and Xᵀ G on the two cores at once, each on one OpenBLAS thread (one BLAS call
        # with two threads loses more to their spin-waits than it gains, see gemm); a
        # thread of its own per call, so a fork never inherits a pool without its thread
        if self.blas_threads != 1 or G.shape[0] * (G.shape[1] + X.shape[1]) < _PAIR_WORK:
            if into is None:
                return super().matmul_vjp(G, W, X)
            with _blas_controller().limit(limits=self.blas_threads, user_api="blas"):
                return _gemm_into(into, G, W), self.inner(X, G)
        gw = aligned_empty((X.shape[1], G.shape[1]), np.result_type(X, G))
        failed: list[BaseException] = []

        def weights():
            try:
                np.matmul(X.T, G, out=gw)
            except BaseException as exc:        # re-raised by the caller's thread
                failed.append(exc)

        with _blas_controller().limit(limits=1, user_api="blas"):
            second = threading.Thread(target=weights, name="gblas_gnn-matmul-vjp")
            second.start()
            try:
                if into is None:
                    ga = aligned_empty((G.shape[0], W.shape[0]), np.result_type(G, W))
                    np.matmul(G, W.T, out=ga)               # aligned as gemm's
                else:
                    ga = _gemm_into(into, G, W)
            finally:
                second.join()
        if failed:
            raise failed[0]
        return ga, gw

    def vertex_sum(self, X):
        # a float matrix (every bias gradient) in parallel chunks, summed in a fixed order
        if (isinstance(X, np.ndarray) and X.ndim == 2 and X.flags.c_contiguous
                and X.dtype in (np.float32, np.float64)):
            return _dense_kernels.column_sums(X)
        return super().vertex_sum(X)

    def row_dot(self, X, Y):
        if _dense_rows(X, Y):
            return _dense_kernels.row_dots(X, Y)
        return super().row_dot(X, Y)

    def combine_rows(self, a, X, b=None, Y=None, overwrite=False):
        # one pass instead of numpy's pass and temporary per operation
        rows = (X,) if Y is None else (X, Y)
        coefs = (a,) if b is None else (a, b)
        if (_dense_rows(*rows) and (Y is None) == (b is None)
                and all(isinstance(c, np.ndarray) and c.shape == (X.shape[0],)
                        and c.dtype == X.dtype for c in coefs)):
            return _dense_kernels.combine_rows(a, X, b, Y, out=X if overwrite else None)
        return super().combine_rows(a, X, b, Y, overwrite)

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

    def pattern_values(self, A, dtype) -> np.ndarray:
        """A's stored values in CSR order as ``dtype`` (exported once per matrix)."""
        values = self._values.get(A)
        return values if values.dtype == dtype else values.astype(dtype)

    # ------------------------------------------------------------------ edge programs
    def program_forward(self, program, keep):
        # the generated kernels of ._program_kernels (one row pass, .programs); the
        # reference lowering for what they do not cover (a user semiring's aggregation)
        if uniform_aggregation.weight(program.structure) is not None:
            return uniform_aggregation.forward(self, program, keep)
        if not programs.fused(program.structure):
            return super().program_forward(program, keep)
        return programs.forward(self, program, keep)

    def program_backward(self, ctx, dout):
        if isinstance(ctx, uniform_aggregation.UniformContext):
            return uniform_aggregation.backward(self, ctx, dout)
        if not isinstance(ctx, programs.ProgramContext):
            return super().program_backward(ctx, dout)
        return programs.backward(self, ctx, dout)

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
        t = _tname(X.dtype)
        return _dense_to_gb(X).mxm(_dense_to_gb(Y).T, semiring.plus_times[t]).new(mask=A.S)

    def spmm_plus_times(self, S, H):
        """``S H`` over ``plus_times``: the numba kernel of :mod:`._spmm` over the cached
        int32 CSR indices of ``S`` and its values in place (GraphBLAS's in-place ``saxpy5``
        with the copy of ``H`` in measured markedly slower: ``docs/performance.md``)."""
        return self.spmm_affine(S, H)

    def spmm_affine(self, S, H, self_weight=None, bias=None, transpose=False):
        # one kernel pass; Sᵀ runs over the CSC buffers of S, built at the first transposed
        # product and kept with S (a counting sort, no GraphBLAS transpose)
        if transpose:
            return _spmm.product_t(self._csc.get(S), H, self_weight, bias)
        return _spmm.product(S, self._patterns.get(S), H, self_weight, bias)

    def generic_lowering(self, sr):
        return _lowering.inplace_lowering(self, sr)

    # ------------------------------------------------------------------ aggregation
    def row_counts(self, S, dtype):
        # the cached pattern's row lengths: no GraphBLAS reduction per call
        return np.maximum(self._patterns.get(S).row_counts, 1).astype(dtype)

    def aggregate(self, S, H, aggr, keep_context=False):
        if not (isinstance(aggr, str) and aggr == "mean"):
            return super().aggregate(S, H, aggr, keep_context)
        # the division by the row counts is the product's own, as each row is written
        H = np.asarray(H)
        counts = self.row_counts(S, H.dtype)
        Z = _spmm.product(S, self._patterns.get(S), H, divisors=counts)
        return (Z, MeanContext(S, H, counts)) if keep_context else Z

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

    # ------------------------------------------------------------------ random masks
    def dropout_edges(self, A, key, p, heads, dtype, row_ids=None, col_ids=None):
        """As :meth:`Executor.dropout_edges`; ``row_ids`` / ``col_ids`` give the global ids of
        A's rows and columns when A is a block of a larger graph (default: their indices)."""
        pattern = self._patterns.get(A)
        dtype = np.dtype(dtype)
        rows = np.arange(pattern.nrows) if row_ids is None else row_ids
        cols = np.arange(pattern.ncols) if col_ids is None else col_ids
        out = np.empty((heads, pattern.nnz), dtype)
        _random_kernels.edge_scales(pattern.indptr, pattern.indices, rows.astype(np.int64),
                                    cols.astype(np.int64), np.uint64(key), float(p),
                                    dtype.type(1.0 / (1.0 - p)), out)
        return out

    def keep_mask(self, key, p, shape, row_ids=None):
        rows = np.arange(shape[0], dtype=np.int64) if row_ids is None else \
            np.asarray(row_ids, dtype=np.int64)
        out = np.empty(shape, np.bool_)
        _random_kernels.keep_mask(rows, np.uint64(key), float(p), out)
        return out

    # ------------------------------------------------------------------ edge algebra
    def pattern(self, A, value, dtype):
        t = _tname(dtype)
        return A.apply(binary.second[t], right=np.dtype(dtype).type(value)).new(dtype=t)

    def apply(self, E, fn, alpha=None):
        t = E.dtype.name
        s = np.dtype(E.dtype.np_type).type
        if fn == "exp":
            return E.apply(unary.exp[t]).new()
        if fn == "neg":
            return E.apply(unary.ainv[t]).new()
        if fn == "relu":
            return E.apply(binary.max[t], right=s(0)).new()
        if fn == "scale":
            return E.apply(binary.times[t], right=s(alpha)).new()
        if fn == "add":
            return E.apply(binary.plus[t], right=s(alpha)).new()
        if fn == "rdiv":
            return E.apply(binary.truediv[t], left=s(alpha)).new()
        if fn == "leaky_relu":
            # max(x, αx) for 0 ≤ α ≤ 1, min(x, αx) for α > 1: factory apply + emult
            scaled = E.apply(binary.times[t], right=s(alpha)).new()
            op = binary.max[t] if alpha <= 1 else binary.min[t]
            return E.ewise_mult(scaled, op).new()
        raise ValueError(f"unknown edge-wise function {fn!r}")

    def leaky_relu_backward(self, C, dE, alpha):
        t = C.dtype.name
        s = np.dtype(C.dtype.np_type).type
        slope = C.apply(binary.gt[t], right=s(0)).new(dtype=t)       # 1 where C > 0 else 0
        # factor = α + (1 − α)·[C > 0]
        factor = slope.apply(binary.times[t], right=s(1 - alpha)).new()
        factor = factor.apply(binary.plus[t], right=s(alpha)).new()
        return dE.ewise_mult(factor, binary.times[t]).new()

    def ewise(self, E, F, op):
        if op not in _EWISE:
            raise ValueError(f"op must be one of {sorted(_EWISE)}, got {op!r}")
        return E.ewise_mult(F, _EWISE[op][E.dtype.name]).new()

    def row_scale(self, E, v, op="times"):
        # colscale kernel: diag(v) ⊗ E with the `any` monoid (one term per entry)
        t = E.dtype.name
        d = gb.Vector.from_dense(np.asarray(v, dtype=E.dtype.np_type)).diag()
        return d.mxm(E, _ROW_SCALE[op][t]).new()

    def col_scale(self, E, v, op="times"):
        t = E.dtype.name
        d = gb.Vector.from_dense(np.asarray(v, dtype=E.dtype.np_type)).diag()
        return E.mxm(d, _COL_SCALE[op][t]).new()

    def scale_edges(self, E, u, v):
        # E[i,j] u[i] v[j] on one exported copy of E's CSR buffers: a pair of diagonal
        # products would hold E, D E and D E D at once (measured for GCN's normalisation at
        # n = 2^20, 17.6 M edges: 220 MB more peak memory)
        indptr, indices, values = _gbio.csr_arrays(E)
        dtype = E.dtype.np_type
        values = values.astype(dtype, copy=False)
        values *= np.repeat(np.asarray(u, dtype), np.diff(indptr))
        values *= np.asarray(v, dtype)[indices]
        return gb.Matrix.ss.import_csr(nrows=E.nrows, ncols=E.ncols, indptr=indptr,
                                       col_indices=indices, values=values, sorted_cols=True,
                                       take_ownership=True)

    def outer_add(self, A, u, v):
        # masked dot3 with n×1 factors over factory min_plus: min over one term = u[i] + v[j];
        # `u.outer(v)` would not push the mask: it forms all n² sums (docs/performance.md).
        t = _tname(u.dtype)
        return _dense_to_gb(u).mxm(_dense_to_gb(v).T, semiring.min_plus[t]).new(mask=A.S)


def _dense_rows(*arrays) -> bool:
    """Whether ``arrays`` are C-contiguous 2-D float arrays of one shape and dtype (what the
    row kernels of :mod:`._dense_kernels` take)."""
    first = arrays[0]
    return all(isinstance(x, np.ndarray) and x.ndim == 2 and x.flags.c_contiguous
               and x.dtype in (np.float32, np.float64) and x.shape == first.shape
               and x.dtype == first.dtype for x in arrays)
