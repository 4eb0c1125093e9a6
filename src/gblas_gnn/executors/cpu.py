"""The ``cpu`` executor: python-graphblas (SuiteSparse:GraphBLAS) on one process.

Every hot step runs a SuiteSparse *factory* kernel (DESIGN.md rule 2); the kernel each
method runs, as read from ``gb.ss.burble``, is named in its comment. Typed operators
(``op["FP32"]``) and numpy scalars of the operand dtype keep float32 work in float32.
"""

from __future__ import annotations

import functools

import graphblas as gb
import numpy as np
from graphblas import binary, monoid, semiring, unary

from ..semirings import _gbio
from . import _argext
from . import _attention_kernels as _attn
from ._kernel_primitives import aligned_empty
from ._pattern import PatternCache
from .base import AggregateContext, AttentionContext, Executor, check_bias

_REDUCE = {"sum": monoid.plus, "max": monoid.max, "min": monoid.min}
# colscale / rowscale semirings: the multiply sees (diagonal value, edge value) or
# (edge value, diagonal value); ``r*`` ops swap arguments so that ``E op v`` comes out.
_ROW_SCALE = {"times": semiring.any_times, "div": semiring.any_rtruediv,
              "plus": semiring.any_plus, "minus": semiring.any_rminus}
_COL_SCALE = {"times": semiring.any_times, "div": semiring.any_truediv,
              "plus": semiring.any_plus, "minus": semiring.any_minus}


def _tname(dtype) -> str:
    return "FP64" if np.dtype(dtype) == np.float64 else "FP32"


def dense_to_gb(X: np.ndarray) -> gb.Matrix:
    """An (n, k) ndarray as a full row-major ``graphblas.Matrix`` (one copy)."""
    X = np.ascontiguousarray(X)
    if X.ndim == 1:
        X = X.reshape(-1, 1)
    return _gbio.dense_in(X)


def _by_head(X: np.ndarray, heads: int) -> np.ndarray:
    """An (n, heads·w) C-contiguous array as an (n, heads, w) view: the kernels index one
    head's row as ``X[i, h]``, a 1-D view LLVM vectorises (a column slice does not)."""
    return X.reshape(X.shape[0], heads, X.shape[1] // heads)


def vector_to_dense(v: gb.Vector, dtype) -> np.ndarray:
    """A ``graphblas.Vector`` as a dense ndarray, missing entries 0."""
    out = np.zeros(v.size, dtype=dtype)
    idx, vals = v.to_coo()
    out[idx] = vals
    return out


def csr_buffers(S: gb.Matrix):
    """``(indptr, indices, values)`` copies of S's CSR form, values expanded if S is iso."""
    d = S.ss.export("csr", give_ownership=False, sort=True)
    values = d["values"]
    if d["is_iso"]:
        values = np.full(d["col_indices"].shape[0], values[0], dtype=values.dtype)
    return d["indptr"].astype(np.int64, copy=False), d["col_indices"].astype(np.int64,
                                                                           copy=False), values


def spmm_plus_times(S: gb.Matrix, H: np.ndarray, transpose: bool = False) -> np.ndarray:
    """``S H`` (or ``Sᵀ H``) over ``plus_times`` into a preallocated full matrix.

    Accumulating into a full matrix runs SuiteSparse's in-place ``saxpy5`` kernel, several
    times faster than ``S.mxm(H).new()`` (PERFORMANCE-NOTES).
    """
    t = _tname(H.dtype)
    return _gbio.inplace_mxm(S, np.ascontiguousarray(H), semiring.plus_times[t],
                             binary.plus[t], 0, transpose=transpose)


@functools.cache
def _blas_controller():
    from threadpoolctl import ThreadpoolController
    return ThreadpoolController()


class CPUExecutor(Executor):
    """python-graphblas implementation of :class:`~gblas_gnn.executors.base.Executor`."""

    name = "cpu"

    def __init__(self):
        self._patterns = PatternCache()

    # ------------------------------------------------------------------ edge tensors
    def sddmm(self, A, X, Y):
        # masked dot3, factory plus_times: C<A.S> = X Yᵀ
        t = _tname(X.dtype)
        return dense_to_gb(X).mxm(dense_to_gb(Y).T, semiring.plus_times[t]).new(mask=A.S)

    def outer_add(self, A, u, v):
        # masked dot3 with n×1 factors over factory min_plus: min over one term = u[i] + v[j];
        # `u.outer(v)` would not push the mask (PERFORMANCE-NOTES: 26 s at n=1e5).
        t = _tname(u.dtype)
        return dense_to_gb(u).mxm(dense_to_gb(v).T, semiring.min_plus[t]).new(mask=A.S)

    def pattern(self, A, value, dtype):
        t = _tname(dtype)
        return A.apply(binary.second[t], right=np.dtype(dtype).type(value)).new(dtype=t)

    # ------------------------------------------------------------------ edge-wise
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

    def ewise_mult(self, E, F):
        return E.ewise_mult(F, binary.times[E.dtype.name]).new()

    def ewise_add(self, E, F, alpha=1.0, beta=1.0):
        t = E.dtype.name
        s = np.dtype(E.dtype.np_type).type
        if alpha != 1.0:
            E = E.apply(binary.times[t], right=s(alpha)).new()
        if beta != 1.0:
            F = F.apply(binary.times[t], right=s(beta)).new()
        return E.ewise_add(F, binary.plus[t]).new()

    def edge_values(self, E):
        return csr_buffers(E)[2]

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

    # ------------------------------------------------------------------ reductions & scaling
    def row_reduce(self, E, op="sum"):
        return vector_to_dense(E.reduce_rowwise(_REDUCE[op][E.dtype.name]).new(),
                               E.dtype.np_type)

    def col_reduce(self, E, op="sum"):
        return vector_to_dense(E.reduce_columnwise(_REDUCE[op][E.dtype.name]).new(),
                               E.dtype.np_type)

    def row_scale(self, E, v, op="times"):
        # colscale kernel: diag(v) ⊗ E with the `any` monoid (one term per entry)
        t = E.dtype.name
        d = gb.Vector.from_dense(np.asarray(v, dtype=E.dtype.np_type)).diag()
        return d.mxm(E, _ROW_SCALE[op][t]).new()

    def col_scale(self, E, v, op="times"):
        t = E.dtype.name
        d = gb.Vector.from_dense(np.asarray(v, dtype=E.dtype.np_type)).diag()
        return E.mxm(d, _COL_SCALE[op][t]).new()

    # ------------------------------------------------------------------ products
    def gemm(self, X, W, trans_a=False, trans_b=False):
        # One OpenBLAS thread: the products here are tall-skinny (n×k by k×k', 2–6 ms on one
        # core), and a second OpenBLAS thread spin-waits against the GraphBLAS and numba
        # OpenMP threads of the sparse steps; measured on M (PERFORMANCE-NOTES, bench/):
        # GAT forward+backward 404–429 ms with one BLAS thread, 1027–2120 ms with two (with
        # today's fused kernels: 117 against 157–183 ms).
        # The result is 64-byte aligned: it is usually the X whose rows the attention kernels
        # gather (a 128-byte row then spans two cache lines, not three).
        a, b = (X.T if trans_a else X), (W.T if trans_b else W)
        out = aligned_empty((a.shape[0], b.shape[1]), np.result_type(a, b))
        with _blas_controller().limit(limits=1, user_api="blas"):
            return np.matmul(a, b, out=out)

    def spmm(self, S, H, semiring="plus_times"):
        if isinstance(semiring, str) and semiring == "plus_times":
            return spmm_plus_times(S, H)
        from ..semirings import get
        return get(semiring).spmm(S, H)

    def transpose(self, S):
        return S.T.new()

    def spmm_t(self, S, H, semiring="plus_times"):
        if isinstance(semiring, str) and semiring == "plus_times":
            return spmm_plus_times(S, H, transpose=True)
        from ..semirings import get
        return get(semiring).spmm_t(S, H)

    # ------------------------------------------------------------------ aggregation
    def aggregate(self, S, H, aggr, keep_context=False):
        extra = None
        if aggr == "sum":
            Z = spmm_plus_times(S, H)
        elif aggr == "mean":
            counts = self._row_counts(S, H.dtype)
            Z = spmm_plus_times(S, H) / counts[:, None]
            extra = counts
        elif aggr in ("max", "min"):
            indptr, indices, values = csr_buffers(S)
            Z, arg = _argext.argext_forward(indptr, indices, values.astype(H.dtype), H,
                                            aggr == "max")
            extra = (indptr, indices, values.astype(H.dtype), arg)
        else:
            if keep_context:
                raise ValueError("backward is defined for the named aggregations "
                                 "'sum', 'max', 'min', 'mean' only, not for a semiring")
            return self.spmm(S, H, aggr)
        if keep_context:
            return Z, AggregateContext(aggr, S, H, extra)
        return Z

    @staticmethod
    def _row_counts(S, dtype):
        cnt = S.apply(unary.one[_tname(dtype)]).new().reduce_rowwise(monoid.plus).new()
        counts = vector_to_dense(cnt, dtype)
        counts[counts == 0] = 1          # empty row: Z is 0 either way
        return counts

    def aggregate_backward(self, ctx, dZ, need_dS=True):
        S, H, aggr = ctx.S, ctx.H, ctx.aggr
        if aggr in ("sum", "mean"):
            G = dZ if aggr == "sum" else dZ / ctx.extra[:, None]
            dS = self.sddmm(S, G, H) if need_dS else None
            return dS, spmm_plus_times(S, G, transpose=True)
        indptr, indices, values, arg = ctx.extra
        dS = None
        if need_dS:
            out = np.empty(indices.shape[0], dtype=H.dtype)
            _argext.argext_backward_edges(indptr, indices, arg, H, dZ, out)
            dS = gb.Matrix.ss.import_csr(nrows=S.nrows, ncols=S.ncols, indptr=indptr.copy(),
                                         col_indices=indices.copy(), values=out,
                                         sorted_cols=True, take_ownership=True)
        dH = _argext.argext_backward_features(indices, values, arg, dZ, S.ncols)
        return dS, dH

    # ------------------------------------------------------------------ fused attention
    # sum/mean run the fused numba kernels of ``_attention_kernels`` over the cached CSR/CSC
    # buffers of A (one row pass forward; one column pass backward, plus light passes over
    # the edge values) instead of six GraphBLAS passes that each build a matrix; max/min and
    # semirings use the primitives (the base class).
    _FUSED = ("sum", "mean")

    def _fused_setup(self, A, X, aggr):
        pattern = self._patterns.get(A)
        if X.shape[0] != pattern.ncols:
            raise ValueError(f"X has {X.shape[0]} rows, the pattern {pattern.ncols} columns")
        counts = None
        if aggr == "mean":
            counts = np.maximum(pattern.row_counts, 1).astype(X.dtype)[:, None]
        return pattern, counts

    @staticmethod
    def _fused_output(Z, counts, keep_context, context):
        """The returned output (``Z`` divided by the row counts for ``mean``) and, with
        ``keep_context``, the context holding ``Z`` itself: the backward's softmax term is
        ``t_i = ⟨dZ_i, Z_i⟩``, so the context keeps a copy the caller cannot modify."""
        out = Z if counts is None else Z / counts
        if not keep_context:
            return out
        context.data["Z"] = Z.copy() if out is Z else Z
        return out, context

    def additive_attention(self, A, d, s, X, slope, mask=None, aggr="sum",
                           keep_context=False, bias=None):
        if not (isinstance(aggr, str) and aggr in self._FUSED):
            return super().additive_attention(A, d, s, X, slope, mask, aggr, keep_context,
                                              bias)
        X = np.ascontiguousarray(X)
        dt = X.dtype
        heads = d.shape[0]
        check_bias(bias, X.shape[1])
        pattern, counts = self._fused_setup(A, X, aggr)
        d, s = (np.ascontiguousarray(v, dtype=dt) for v in (d, s))
        use_mask = mask is not None
        mask = np.ascontiguousarray(mask, dtype=dt) if use_mask else np.empty((1, 1), dt)
        # Inference with sum: the kernel starts every row from the bias, a pass over Z saved.
        # Otherwise the kept Z (t_i = <dZ_i, Z_i>) and the mean's division need Z without it.
        bias_in_kernel = bias is not None and counts is None and not keep_context
        Z0 = (np.ascontiguousarray(bias, dtype=dt) if bias_in_kernel
              else np.zeros(X.shape[1], dt)).reshape(heads, -1)
        psi = np.empty((heads, pattern.nnz), dt)
        Z = aligned_empty((pattern.nrows, X.shape[1]), dt)
        _attn.additive_forward(pattern.indptr, pattern.indices, d, s, dt.type(slope),
                               _by_head(X, heads), mask, use_mask, psi, Z0, _by_head(Z, heads))
        result = self._fused_output(Z, counts, keep_context, AttentionContext(
            "additive", aggr, {"pattern": pattern, "counts": counts, "d": d, "s": s, "X": X,
                               "psi": psi, "mask": mask, "use_mask": use_mask,
                               "slope": dt.type(slope)}))
        if bias is not None and not bias_in_kernel:
            out = result[0] if keep_context else result
            out += bias                 # the context holds its own Z
        return result

    def additive_attention_backward(self, ctx, dZ):
        c = ctx.data
        if "pattern" not in c:
            return super().additive_attention_backward(ctx, dZ)
        pattern, X, psi = c["pattern"], c["X"], c["psi"]
        dt, heads = X.dtype, psi.shape[0]
        dZ, t = self._fused_dZ(dZ, c, heads)
        colptr, perm, rows = pattern.csc()
        psiT = self._to_csc(perm, psi)
        maskT = self._to_csc(perm, c["mask"]) if c["use_mask"] else c["mask"]
        dC = np.empty_like(psi)
        ds = np.empty((heads, pattern.ncols), dt)
        dX = aligned_empty((pattern.ncols, X.shape[1]), dt)
        _attn.additive_backward(colptr, perm, rows, c["d"], c["s"], t, c["slope"],
                                _by_head(X, heads), _by_head(dZ, heads), psiT, maskT,
                                c["use_mask"], dC, ds, _by_head(dX, heads))
        dd = np.empty((heads, pattern.nrows), dt)
        _attn.row_sums(pattern.indptr, dC, dd)
        return dd, ds, dX

    def dot_attention(self, A, P, Q, beta, X, aggr="sum", keep_context=False, scale=None):
        if not (isinstance(aggr, str) and aggr in self._FUSED):
            return super().dot_attention(A, P, Q, beta, X, aggr, keep_context, scale)
        X = np.ascontiguousarray(X)
        dt = X.dtype
        pattern, counts = self._fused_setup(A, X, aggr)
        P, Q = (np.ascontiguousarray(v, dtype=dt) for v in (P, Q))
        use_c = scale is not None
        c = np.ascontiguousarray(scale, dtype=dt) if use_c else np.empty(1, dt)
        psi = np.empty((1, pattern.nnz), dt)
        Z = aligned_empty((pattern.nrows, X.shape[1]), dt)
        _attn.dot_forward(pattern.indptr, pattern.indices, P, Q, dt.type(beta), _by_head(X, 1),
                          c, use_c, psi, _by_head(Z, 1))
        return self._fused_output(Z, counts, keep_context, AttentionContext("dot", aggr, {
            "pattern": pattern, "counts": counts, "P": P, "Q": Q, "beta": dt.type(beta),
            "X": X, "c": c, "use_c": use_c, "psi": psi}))

    def dot_attention_backward(self, ctx, dZ):
        c = ctx.data
        if "pattern" not in c:
            return super().dot_attention_backward(ctx, dZ)
        pattern, X, psi, P, Q, beta = c["pattern"], c["X"], c["psi"], c["P"], c["Q"], c["beta"]
        dZ, t = self._fused_dZ(dZ, c, 1)
        colptr, perm, rows = pattern.csc()
        dE = np.empty_like(psi)
        dQ = np.empty_like(Q)
        dX = aligned_empty((pattern.ncols, X.shape[1]), X.dtype)
        dbeta_cols = _attn.dot_backward(colptr, perm, rows, P, Q, beta, X, c["c"], c["use_c"],
                                        dZ, t, self._to_csc(perm, psi), dE, dQ, dX)
        dP = np.empty_like(P)
        _attn.weighted_rows(pattern.indptr, pattern.indices, dE, beta, Q, dP)
        return dP, dQ, float(dbeta_cols.sum()), dX

    @staticmethod
    def _fused_dZ(dZ, data, heads):
        """``dZ`` of the kept ``Z`` (divided by the row counts for ``mean``) and the softmax
        term ``t[h, i] = ⟨dZ_i, Z_i⟩`` of each head."""
        Z, counts = data["Z"], data["counts"]
        dZ = np.ascontiguousarray(dZ, dtype=Z.dtype)
        if counts is not None:
            dZ = dZ / counts
        t = np.empty((heads, Z.shape[0]), Z.dtype)
        _attn.head_row_dots(_by_head(dZ, heads), _by_head(Z, heads), t)
        return dZ, t

    @staticmethod
    def _to_csc(perm, values):
        """Edge values (heads, nnz) from CSR into CSC order."""
        out = np.empty_like(values)
        _attn.gather_edges(perm, values, out)
        return out
