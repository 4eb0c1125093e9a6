"""The ``cpu`` executor (:class:`CPUExecutor`): python-graphblas (SuiteSparse:GraphBLAS) and
numba on one process.

Its tiers (a) and (b) are :class:`~.core.GraphBLASExecutor`'s. This class overrides
operations of the default tier (c) that the base class runs as several passes or in Python:
the generated kernels of edge programs (:mod:`.programs`, :mod:`.uniform_aggregation`), the
fused ``plus_times`` products and dense products, one-pass dense row operations, the random
masks in numba, and the edge algebra as GraphBLAS factory kernels. Each gives the default's
result (``tests/test_executor_conformance.py`` holds it to the ``primitives`` executor, which
runs the defaults over the same tiers (a) and (b)). The kernel each method runs, as read from
``gb.ss.burble``, is named in its comment. The package's other modules are listed in
:mod:`gblas_gnn.executors.cpu`.
"""

from __future__ import annotations

import graphblas as gb
import numba
import numpy as np
from graphblas import binary, semiring, unary

from ..contexts import MeanContext
from . import (
    _chunked_gemm,
    _dense_kernels,
    _gbio,
    _random_kernels,
    programs,
    uniform_aggregation,
)
from . import semiring_lowering as _lowering
from ._program_kernels import serial
from ._shares import ThreadedKernel, run_rows, static_kernel
from .core import GraphBLASExecutor

__all__ = ["CPUExecutor"]

# colscale / rowscale semirings: the multiply sees (diagonal value, edge value) or
# (edge value, diagonal value); ``r*`` ops swap arguments so that ``E op v`` comes out.
_ROW_SCALE = {"times": semiring.any_times, "div": semiring.any_rtruediv,
              "plus": semiring.any_plus, "minus": semiring.any_rminus}
_COL_SCALE = {"times": semiring.any_times, "div": semiring.any_truediv,
              "plus": semiring.any_plus, "minus": semiring.any_minus}
_EWISE = {"plus": binary.plus, "minus": binary.minus, "times": binary.times,
          "div": binary.truediv}


def _leaky_relu(E, t, s, alpha):
    """max(x, αx) for 0 ≤ α ≤ 1, min(x, αx) for α > 1: factory apply + emult."""
    scaled = E.apply(binary.times[t], right=s(alpha)).new()
    return E.ewise_mult(scaled, (binary.max if alpha <= 1 else binary.min)[t]).new()


#: ``apply``'s functions as GraphBLAS operations ``(E, type name, scalar type, α)``
_APPLY = {
    "exp": lambda E, t, s, alpha: E.apply(unary.exp[t]).new(),
    "neg": lambda E, t, s, alpha: E.apply(unary.ainv[t]).new(),
    "relu": lambda E, t, s, alpha: E.apply(binary.max[t], right=s(0)).new(),
    "scale": lambda E, t, s, alpha: E.apply(binary.times[t], right=s(alpha)).new(),
    "add": lambda E, t, s, alpha: E.apply(binary.plus[t], right=s(alpha)).new(),
    "rdiv": lambda E, t, s, alpha: E.apply(binary.truediv[t], left=s(alpha)).new(),
    "leaky_relu": _leaky_relu,
}


def _part_sums(a: np.ndarray) -> list:
    """The sums of ``a``'s contiguous parts, one per numba thread on the process's helper
    threads (numpy's sum leaves Python's lock), where ``a`` is C-contiguous with at least
    :data:`~._chunked_gemm.PAIR_WORK` numbers; else ``[a.sum()]``. (At 10⁵ × 32 float32:
    0.32 ms on two threads against 0.49 on one.)"""
    threads = numba.get_num_threads()
    if threads < 2 or a.size < _chunked_gemm.PAIR_WORK or not a.flags.c_contiguous:
        return [a.sum()]
    flat = a.reshape(-1)
    sums = [None] * threads

    def part(k: int) -> None:
        with np.errstate(over="ignore", invalid="ignore"):       # per thread in numpy
            sums[k] = flat[k * flat.size // threads:(k + 1) * flat.size // threads].sum()

    _chunked_gemm.on_threads(threads, threads, part)
    return sums


class CPUExecutor(GraphBLASExecutor):
    """The ``cpu`` executor: :class:`~.core.GraphBLASExecutor` with fused and fast kernels for
    the default tier (see the module docstring).

    Args:
        threads: GraphBLAS and numba threads of this process (``None``: leave them; see
            :meth:`set_threads`).
        blas_threads: OpenBLAS threads of the dense products (default 1, see :meth:`gemm`).
    """

    name = "cpu"

    # ------------------------------------------------------------------ dense
    def linear(self, X, W, bias=None, relu=False, out=None):
        # gemm's product, each block of rows biased and rectified as soon as it is written
        # (GIN's MLP: two numpy passes over (n, k) an activation fewer); into ``out`` when
        # given (a block of rows of a larger array: no product array and no copy of it)
        return _chunked_gemm.matmul(X, W, self.blas_threads, bias, relu, out)

    def gemm_add(self, Y, X, W):
        # summed by BLAS into each block of Y's rows as it is formed (beta = 1): no (n, k)
        # product of its own and no second pass to add it
        if (isinstance(Y, np.ndarray) and Y.flags.c_contiguous and Y.ndim == X.ndim == 2
                and Y.dtype == np.result_type(X, W) and Y.dtype in (np.float32, np.float64)):
            return _chunked_gemm.matmul_add(Y, X, W, self.blas_threads)
        return super().gemm_add(Y, X, W)

    def all_finite(self, *arrays):
        # the sum first: finite only if every term is (a NaN stays NaN, an infinity stays
        # one or meets its opposite in a NaN), one read and no (n, k) mask, so faster than
        # np.isfinite(a).all(); a sum that is not finite (an overflow of finite values too)
        # gets the exact test
        for a in arrays:
            a = np.asarray(a)
            with np.errstate(over="ignore", invalid="ignore"):
                quick = all(np.isfinite(s) for s in _part_sums(a))
            if not quick and not np.isfinite(a).all():
                return False
        return True

    def matmul_vjp(self, G, W, X, into=None, out=None, sums=False):
        # G Wᵀ and Xᵀ G by blocks of rows on both cores, each on one OpenBLAS thread (one BLAS
        # call with two threads loses more to their spin-waits than it gains, see gemm), the
        # blocks' products shared as the threads come free; G Wᵀ written into ``out`` or
        # summed into ``into`` when given; with ``sums`` G's column sums (vertex_sum's bits)
        # taken block by block after each block's weight product, while its rows are cached
        if (self.blas_threads != 1
                or G.shape[0] * (G.shape[1] + X.shape[1]) < _chunked_gemm.PAIR_WORK):
            if into is None:
                return super().matmul_vjp(G, W, X, out=out, sums=sums)
            with _chunked_gemm.blas_limit(self.blas_threads):
                pair = _chunked_gemm.gemm_into(into, G, W), self.inner(X, G)
        elif into is not None and _dense_kernels.skinny(G, W, X, into):
            pair = into, _dense_kernels.skinny_matmul_vjp(G, W, X, into)
        else:
            fused = sums and _dense_kernels.dense_rows(G)
            with _chunked_gemm.blas_limit(1):
                pair = _chunked_gemm.matmul_vjp_blocks(G, W, X, numba.get_num_threads(), into,
                                                       out, sums=fused)
            if fused:
                return pair
        return (*pair, self.vertex_sum(G)) if sums else pair

    def combine_rows(self, a, X, b=None, Y=None, overwrite=False):
        # one pass instead of numpy's pass and temporary per operation
        rows = (X,) if Y is None else (X, Y)
        coefs = (a,) if b is None else (a, b)
        if (_dense_kernels.dense_rows(*rows) and (Y is None) == (b is None)
                and all(isinstance(c, np.ndarray) and c.shape == (X.shape[0],)
                        and c.dtype == X.dtype for c in coefs)):
            return _dense_kernels.combine_rows(a, X, b, Y, out=X if overwrite else None)
        return super().combine_rows(a, X, b, Y, overwrite)

    # ------------------------------------------------------------------ edge programs
    def edge_features(self, features):
        # a graph with loops: its base's and the loops' apart (LoopedValues), which the
        # generated kernels read without an interleaved copy
        return features.split if features.split is not None else features.on(self)

    def program_forward(self, program, keep):
        # the generated kernels of ._program_kernels (one row pass, .programs); the
        # reference lowering for what they do not cover (a user semiring's aggregation)
        if uniform_aggregation.weight(program.structure) is not None:
            return uniform_aggregation.forward(self, program, keep)
        if not programs.fused(program.structure):
            return super().program_forward(programs.interleaved(self, program), keep)
        return programs.forward(self, program, keep)

    def program_backward(self, ctx, dout, into=None):
        if isinstance(ctx, uniform_aggregation.UniformContext):
            return uniform_aggregation.backward(self, ctx, dout, into)
        if not isinstance(ctx, programs.ProgramContext):
            return super().program_backward(ctx, dout)
        return programs.backward(self, ctx, dout)

    # ------------------------------------------------------------------ products
    def spmm_affine(self, S, H, self_weight=None, bias=None, transpose=False):
        # the self term and the bias are the start value of each row of the one kernel pass
        return self.spmm_plus_times(S, H, transpose, self_weight, bias)

    def generic_lowering(self, sr):
        return _lowering.inplace_lowering(self, sr)

    # ------------------------------------------------------------------ aggregation
    def row_counts(self, S, dtype):
        # the cached pattern's divisors: no GraphBLAS reduction, and no count, per call
        return self.csr_pattern(S).divisors(dtype)

    def zeroed_outside(self, shape, dtype, gaps):
        # the slices' rows zeroed on the numba threads' count of threads at once (HGT's
        # stacked arrays: 2.5·10⁵ of 3.5·10⁵ rows), index arrays of rows as the default does
        out = np.empty(shape, dtype)
        slices, others = [], []
        for gap in gaps:
            (slices if isinstance(gap, slice) and gap.step in (None, 1) else others).append(gap)
        _dense_kernels.zero_rows(out, slices, numba.get_num_threads())
        for gap in others:
            out[gap if isinstance(gap, slice) else np.asarray(gap)] = 0
        return out

    def entry_rows(self, A):
        # kept with the cached pattern: found once per matrix
        return self.csr_pattern(A).entry_rows

    def aggregate(self, S, H, aggr, keep_context=False):
        if not (isinstance(aggr, str) and aggr == "mean"):
            return super().aggregate(S, H, aggr, keep_context)
        # the division by the row counts is the product's own, as each row is written
        H = np.asarray(H)
        counts = self.row_counts(S, H.dtype)
        Z = self.spmm_plus_times(S, H, divisors=counts)
        return (Z, MeanContext(S, H, counts)) if keep_context else Z

    # ------------------------------------------------------------------ random masks
    def dropout_edges(self, A, key, p, heads, dtype, row_ids=None, col_ids=None):
        """As :meth:`Executor.dropout_edges`; ``row_ids`` / ``col_ids`` give the global ids of
        A's rows and columns when A is a block of a larger graph (default: their indices)."""
        pattern = self.csr_pattern(A)
        dtype = np.dtype(dtype)
        rows = np.arange(pattern.nrows) if row_ids is None else row_ids
        cols = np.arange(pattern.ncols) if col_ids is None else col_ids
        out = np.empty((heads, pattern.nnz), dtype)
        kernel = ThreadedKernel(static_kernel(_random_kernels, "edge_scales"), False, 1,
                                not serial(out.size))
        kernel(pattern.indptr, pattern.indices, rows.astype(np.int64), cols.astype(np.int64),
               np.uint64(key), np.array([p, 1.0 / (1.0 - p)]), out)
        return out

    def keep_mask(self, key, p, shape, row_ids=None):
        rows = np.arange(shape[0], dtype=np.int64) if row_ids is None else \
            np.asarray(row_ids, dtype=np.int64)
        out = np.empty(shape, np.bool_)
        run_rows(static_kernel(_random_kernels, "keep_mask"), shape[0], not serial(out.size),
                 rows, np.uint64(key), np.array([float(p)]), out)
        return out

    # ------------------------------------------------------------------ edge algebra
    def pattern(self, A, value, dtype):
        t = _gbio.float_type(dtype)
        return A.apply(binary.second[t], right=np.dtype(dtype).type(value)).new(dtype=t)

    def apply(self, E, fn, alpha=None):
        lower = _APPLY.get(fn)
        if lower is None:
            raise ValueError(f"unknown edge-wise function {fn!r}")
        return lower(E, E.dtype.name, np.dtype(E.dtype.np_type).type, alpha)

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
        t = _gbio.float_type(u.dtype)
        return _gbio.dense_in(u).mxm(_gbio.dense_in(v).T, semiring.min_plus[t]).new(mask=A.S)

