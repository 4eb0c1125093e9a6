r"""The ``cuda`` executor: the executor interface as numba-cuda kernels on one GPU.

Dense tensors are CuPy arrays (cuBLAS for :meth:`~CUDAExecutor.gemm` and the reductions over
vertices), edge tensors are :class:`~._pattern.EdgeTensor` objects: a device pattern and one
value per edge. A ``graphblas.Matrix`` handed in (a graph's adjacency, its GCN normalisation)
is moved to the device once and kept while the matrix lives; every other operation works on
device arrays only, and the executor's own copies between host and device are counted in
:attr:`CUDAExecutor.transfers`. Under ``NUMBA_ENABLE_CUDASIM=1`` the array module is numpy
with device arrays told apart from host ones (:mod:`._simulated`: a kernel refuses a host
array there too, and an implicit read is counted) and the very same kernels run in Numba's
simulator.

=========================  ==========================================================
operation                  kernel (:mod:`._sparse_kernels`, :mod:`._edge_kernels`)
=========================  ==========================================================
``gemm``, ``inner``,       CuPy (cuBLAS, CuPy reductions)
``vertex_sum``
``row_dot``                ``head_dots``: a group per row
``row_reduce``,            ``segment_reduce`` over the CSR / CSC view
``col_reduce``
``sddmm``                  ``edge_dots``: a group per row, a group sum per edge
``spmm``, ``spmm_t``       the semiring's kernel (:mod:`._semiring_kernels`) over CSR / CSC
``aggregate`` max/min      ``argext_forward``; backward ``edge_dots``, ``argext_features``
``softmax`` (+ backward)   ``softmax_rows``, ``softmax_backward_rows``
edge algebra               ``edge_unary``, ``edge_binary``, ``edge_gathered``, ``edge_outer``,
                           ``leaky_relu_backward``
edge programs (every       kernels generated from the program (:mod:`._programs`):
attention layer, every     a forward row pass, a column and a row pass backward
composition)
random masks               ``dropout_edges``, ``keep_mask`` (the counter-based hash)
=========================  ==========================================================
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import graphblas as gb
import numpy as np

from ..executors.base import Executor
from ..executors.patterns import AdjacencyPattern, MatrixCache, csr_arrays, csr_of, graphblas_of
from ..ir.plan import appends_edge_features, fusable
from ..semirings.algebra import WEIGHTED_MEAN
from . import _edge_kernels as edge
from . import _programs
from . import _semiring_kernels as srk
from . import _sparse_kernels as sparse
from ._device import LANES as _LANES
from ._device import (
    SIMULATOR,
    SPLIT_EDGES,
    Transfers,
    array_module,
    check_available,
    element_grid,
    group_grid,
)
from ._pattern import DevicePattern, EdgeTensor
from ._simulated import DeviceArray

__all__ = ["CUDAExecutor", "ArgExtremeContext"]

_REDUCE = {"sum": sparse.REDUCE_SUM, "max": sparse.REDUCE_MAX, "min": sparse.REDUCE_MIN}


@dataclass
class ArgExtremeContext:
    """``max``/``min`` aggregation: the edge tensor, the messages' rows ``H`` and the winner
    of every (row, feature): its CSR position, −1 for an empty row."""

    aggr: str
    S: EdgeTensor
    H: Any
    values: Any
    arg: Any


def _tiles(k: int) -> int:
    return -(-k // _LANES)


class CUDAExecutor(Executor):
    """numba-cuda implementation of :class:`~gblas_gnn.executors.Executor` (see the module
    docstring). Raises :class:`~._device.CUDAUnavailableError` where neither a GPU with CuPy
    nor the simulator is available.

    Attributes:
        transfers: the copies between host and device the executor has made
            (:class:`~._device.Transfers`).
    """

    name = "cuda"

    def __init__(self):
        check_available()
        self.xp = array_module()
        self.transfers = Transfers()
        self._patterns = MatrixCache(self._upload_pattern)
        self._matrices = MatrixCache(self._upload_matrix)
        self._no_arg = self.xp.zeros((1, 1), np.int64)     # edge_dots without winners

    def __repr__(self) -> str:
        return f"CUDAExecutor({'simulator' if SIMULATOR else 'gpu'})"

    # ================================================================== arrays and copies
    def _put(self, host: np.ndarray, reason: str):
        """A device copy of the host array ``host`` (counted)."""
        host = np.asarray(host, order="C")          # (ascontiguousarray makes 0-d 1-d)
        self.transfers.add("to_device", host.nbytes, reason)
        return np.array(host).view(DeviceArray) if SIMULATOR else self.xp.asarray(host)

    def _is_host(self, x) -> bool:
        return isinstance(x, np.ndarray) and not isinstance(x, DeviceArray)

    def asarray(self, x, dtype=None):
        """``x`` as a device array: a host array (or list, scalar) is copied there (counted);
        a device array is returned as it is (converted to ``dtype`` if given)."""
        if self._is_host(x) or isinstance(x, (np.generic, list, tuple, int, float, bool)):
            return self._put(np.asarray(x, dtype=dtype), "asarray")
        return self.xp.asarray(x, dtype=dtype)

    def to_numpy(self, x, reason: str = "to_numpy") -> np.ndarray:
        """A host copy of the device array ``x`` (counted under ``reason``)."""
        return self._get(x, reason)

    def _get(self, x, reason: str) -> np.ndarray:
        """A host copy of ``x`` (counted, as asked for by ``reason``); a host array as it is."""
        if not self._is_host(x):
            out = np.array(x) if SIMULATOR else self.xp.asnumpy(x)
            self.transfers.add("to_host", out.nbytes, reason)
            return out
        return x

    def on_device(self, x):
        """``x`` itself if it is a device array, else its device copy (counted): never an
        implicit copy."""
        return self._put(x, "operand") if self._is_host(x) else x

    def device_array(self, x, dtype=None):
        """``x`` on the device as a C-contiguous array of ``dtype`` (default: its own)."""
        x = self.xp.ascontiguousarray(self.on_device(x))
        return x if dtype is None or x.dtype == dtype else x.astype(dtype)

    def launch(self, kernel, grid: tuple[int, int], *args, shared: int = 0) -> None:
        """Run ``kernel[grid](*args)``. An array argument must already be a device array: a
        host array would be copied implicitly, which the executor never does (the simulator's
        device arrays are told apart from host ones, so it refuses them too). In the
        simulator, which runs every CUDA thread as a Python thread meeting the others at each
        barrier, the interpreter hands the GIL over every 50 µs during the launch instead of
        every 5 ms (its default), so the threads meet at the barriers sooner and launches run
        several times faster."""
        for a in args:
            if self._is_host(a):
                raise TypeError(f"{getattr(kernel, '__name__', kernel)}: a host array was "
                                "passed to a device kernel")
        if SIMULATOR:
            # (the simulated threads index plain arrays, as device code indexes memory)
            args = tuple(a.view(np.ndarray) if isinstance(a, DeviceArray) else a
                         for a in args)
            before = sys.getswitchinterval()
            sys.setswitchinterval(min(before, 5e-5))
            try:
                kernel[grid[0], grid[1], 0, shared](*args)
            finally:
                sys.setswitchinterval(before)
            return
        kernel[grid[0], grid[1], 0, shared](*args)

    # ================================================================== patterns
    def _upload_pattern(self, A: gb.Matrix | AdjacencyPattern) -> DevicePattern:
        # a graph's AdjacencyPattern (with_self_loops) brings its host pattern: no matrix
        return DevicePattern(csr_of(A), self._put)

    def _upload_matrix(self, A: gb.Matrix | AdjacencyPattern) -> EdgeTensor:
        values = csr_arrays(graphblas_of(A))[2]
        return EdgeTensor(self._patterns.get(A), self._put(values, "graph"))

    def _edges(self, S) -> EdgeTensor:
        """``S`` as an edge tensor: itself, or a matrix's device copy (made once)."""
        if isinstance(S, EdgeTensor):
            return S
        if isinstance(S, (gb.Matrix, AdjacencyPattern)):
            return self._matrices.get(S)
        raise TypeError(f"an edge tensor of the cuda executor or a graphblas.Matrix is "
                        f"needed, got {type(S).__name__}")

    def device_pattern(self, A) -> DevicePattern:
        """A's pattern on the device: an edge tensor's own, or a matrix's (uploaded once)."""
        if isinstance(A, EdgeTensor):
            return A.pattern
        if isinstance(A, (gb.Matrix, AdjacencyPattern)):
            return self._patterns.get(A)
        raise TypeError(f"a pattern (graphblas.Matrix or edge tensor) is needed, got "
                        f"{type(A).__name__}")

    def device_values(self, S, dtype):
        """S's values on the device in ``dtype`` (a matrix is uploaded once)."""
        values = self._edges(S).values
        return values if values.dtype == dtype else values.astype(dtype)

    def _nrows(self, S) -> int:
        return self.device_pattern(S).nrows

    def _ncols(self, S) -> int:
        return self.device_pattern(S).ncols

    def _local_coords(self, S):
        p = self.device_pattern(S)
        return p.rows, p.indices

    # ================================================================== edge programs
    def program_forward(self, program, keep):
        # the generated kernels of ._program_kernels; the reference lowering for the rest
        if not fusable(program.structure) or appends_edge_features(program.structure):
            return super().program_forward(program, keep)
        return _programs.forward(self, program, keep)

    def program_backward(self, ctx, dout, into=None):
        if not isinstance(ctx, _programs.ProgramContext):
            return super().program_backward(ctx, dout)
        return _programs.backward(self, ctx, dout)

    # ================================================================== (b) process tier: dense
    def gemm(self, X, W):
        return self.on_device(X) @ self.on_device(W)

    def row_dot(self, X, Y):
        X = self.device_array(X)
        out = self.xp.empty((1, X.shape[0]), X.dtype)
        if X.shape[0]:
            self.launch(sparse.head_dots, group_grid(X.shape[0]), X,
                         self.device_array(Y, X.dtype), 1, out)
        return out[0]

    # ================================================================== (a) core: edges
    def edge_values(self, E):
        return self._edges(E).values

    def edge_from_values(self, A, values):
        return EdgeTensor(self.device_pattern(A), self.device_array(values))

    def gather_rows(self, E, u):
        return self.device_array(u)[self.device_pattern(E).rows]

    def gather_cols(self, E, v):
        return self.device_array(v)[self.device_pattern(E).indices]

    def edge_ids(self, A):
        p = self.device_pattern(A)
        return p.rows, p.indices

    def _reduce(self, E, op: str, transpose: bool):
        if op not in _REDUCE:
            raise ValueError(f"op must be 'sum', 'max' or 'min', got {op!r}")
        E = self._edges(E)
        p = E.pattern
        if transpose:
            ptr, perm, _ = p.csc()
            m = p.ncols
        else:
            ptr, perm, m = p.indptr, p.indices, p.nrows       # perm unread
        out = self.xp.empty((1, m), E.values.dtype)
        if m:
            self.launch(sparse.segment_reduce, group_grid(m), ptr, perm, transpose,
                         E.values.reshape(1, -1), _REDUCE[op], out)
        return out[0]

    def row_reduce(self, E, op="sum"):
        return self._reduce(E, op, False)

    def col_reduce(self, E, op="sum"):
        return self._reduce(E, op, True)

    def sddmm(self, A, X, Y):
        p = self.device_pattern(A)
        X = self.device_array(X)
        Y = self.device_array(Y, X.dtype)
        if X.shape[0] != p.nrows or Y.shape[0] != p.ncols or X.shape[1] != Y.shape[1]:
            raise ValueError(f"sddmm of a {p.nrows}×{p.ncols} pattern needs X ({p.nrows}, k) "
                             f"and Y ({p.ncols}, k), got {X.shape} and {Y.shape}")
        out = self.xp.empty(p.nnz, X.dtype)
        if p.nrows:
            self.launch(sparse.edge_dots, group_grid(p.nrows), p.indptr, p.indices, X, Y,
                         self._no_arg, False, out)
        return EdgeTensor(p, out)

    # ------------------------------------------------------------------ semirings
    def _product(self, kernel, S, H, transpose: bool, identity=None):
        """``S ⊕ H`` (``Sᵀ ⊕ H``) with a semiring SpMM kernel over the CSR (CSC) view."""
        E = self._edges(S)
        p = E.pattern
        H = self.device_array(H)
        inner, m = (p.nrows, p.ncols) if transpose else (p.ncols, p.nrows)
        if H.ndim != 2 or H.shape[0] != inner:
            raise ValueError(f"H must have {inner} rows, got shape {tuple(H.shape)}")
        if transpose:
            ptr, perm, idx = p.csc()
            split = p.csc_split()
        else:
            ptr, perm, idx = p.indptr, p.indices, p.indices   # perm unread
            split = p.split
        Z = self.xp.empty((m, H.shape[1]), H.dtype)
        if not Z.size:
            return Z
        values = self.device_values(E, H.dtype)
        tiles = _tiles(H.shape[1])
        if not isinstance(kernel, sparse.SpMM):           # the averaging kernel
            self.launch(kernel, group_grid(m * tiles), ptr, idx, perm, transpose, values, H, Z)
            return Z
        zero = H.dtype.type(identity)
        self.launch(kernel.fold, group_grid(m * tiles), ptr[:-1], ptr[1:], idx, perm,
                    transpose, values, H, zero, SPLIT_EDGES, Z)
        if split is not None:           # the long rows: their chunks, then each row's fold
            partial = self.xp.empty((split.chunks, H.shape[1]), H.dtype)
            self.launch(kernel.fold, group_grid(split.chunks * tiles), split.lo, split.hi,
                        idx, perm, transpose, values, H, zero, SPLIT_EDGES, partial)
            self.launch(kernel.combine, group_grid(int(split.rows.shape[0]) * tiles),
                        split.rows, split.first, partial, Z)
        return Z

    def kernel_lowering(self, kernel, identity):
        """``(spmm, spmm_t)`` of a semiring through the SpMM ``kernel`` (``identity``: its
        ⊕'s, for rows without an entry; None: the averaging kernel's own)."""
        return (lambda S, H: self._product(kernel, S, H, False, identity),
                lambda S, H: self._product(kernel, S, H, True, identity))

    def generic_lowering(self, sr):
        found = srk.user_spmm(sr)
        if found is None:                    # no scalar operators: the host reference
            return super().generic_lowering(sr)
        return self.kernel_lowering(*found)

    # ------------------------------------------------------------------ aggregation
    def row_counts(self, S, dtype):
        return self.xp.maximum(self.device_pattern(S).row_counts, 1).astype(dtype)

    def extreme_aggregate(self, S, H, is_max, keep_context):
        E = self._edges(S)
        p = E.pattern
        H = self.device_array(H)
        self._check_sources(E, H)
        values = self.device_values(E, H.dtype)
        Z = self.xp.empty((p.nrows, H.shape[1]), H.dtype)
        arg = self.xp.empty((p.nrows, H.shape[1]), np.int64)
        if Z.size:
            self.launch(sparse.argext_forward, group_grid(p.nrows * _tiles(H.shape[1])),
                         p.indptr, p.indices, values, H, bool(is_max), Z, arg)
        if not keep_context:
            return Z
        return Z, ArgExtremeContext("max" if is_max else "min", E, H, values, arg)

    def extreme_aggregate_backward(self, ctx: ArgExtremeContext, dZ, need_dS=True):
        p = ctx.S.pattern
        dZ = self.device_array(dZ, ctx.H.dtype)
        dS = None
        if need_dS:
            out = self.xp.empty(p.nnz, ctx.H.dtype)
            if p.nrows:
                self.launch(sparse.edge_dots, group_grid(p.nrows), p.indptr, p.indices, dZ,
                             ctx.H, ctx.arg, True, out)
            dS = EdgeTensor(p, out)
        colptr, perm, crow = p.csc()
        dH = self.xp.empty((p.ncols, ctx.H.shape[1]), ctx.H.dtype)
        if dH.size:
            self.launch(sparse.argext_features, group_grid(p.ncols * _tiles(dH.shape[1])),
                         colptr, perm, crow, ctx.values, ctx.arg, dZ, dH)
        return dS, dH

    # ------------------------------------------------------------------ softmax
    def softmax(self, E):
        E = self._edges(E)
        p = E.pattern
        out = self.xp.empty_like(E.values)
        if p.nrows:
            self.launch(sparse.softmax_rows, group_grid(p.nrows), p.indptr, E.values, out)
        return EdgeTensor(p, out)

    def softmax_backward(self, Psi, dPsi):
        Psi = self._edges(Psi)
        p = Psi.pattern
        out = self.xp.empty_like(Psi.values)
        if p.nrows:
            self.launch(sparse.softmax_backward_rows, group_grid(p.nrows), p.indptr,
                         Psi.values, self.device_values(dPsi, Psi.values.dtype), out)
        return EdgeTensor(p, out)

    # ------------------------------------------------------------------ random masks
    def dropout_edges(self, A, key, p, heads, dtype):
        pattern = self.device_pattern(A)
        dtype = np.dtype(dtype)
        out = self.xp.empty((heads, pattern.nnz), dtype)
        if out.size:
            self.launch(edge.dropout_edges, element_grid(out.size), pattern.rows,
                         pattern.indices, np.uint64(key), float(p),
                         dtype.type(1.0 / (1.0 - p)), out)
        return out

    def keep_mask(self, key, p, shape, row_ids=None):
        rows = self.xp.arange(shape[0], dtype=np.int64) if row_ids is None else \
            self.device_array(row_ids, np.int64)
        out = self.xp.empty(shape, np.bool_)
        if out.size:
            self.launch(edge.keep_mask, element_grid(out.size), rows, np.uint64(key),
                         float(p), out)
        return out

    # ================================================================== (c) defaults: edge algebra
    def _map(self, E, kernel, *args):
        """A new edge tensor on E's pattern: ``kernel(*args, out)`` over its edges."""
        E = self._edges(E)
        out = self.xp.empty_like(E.values)
        if out.size:
            self.launch(kernel, element_grid(out.size), *args, out)
        return EdgeTensor(E.pattern, out)

    def pattern(self, A, value, dtype):
        dtype = np.dtype(dtype)
        return EdgeTensor(self.device_pattern(A),
                          self.xp.full(self.device_pattern(A).nnz, dtype.type(value), dtype))

    def apply(self, E, fn, alpha=None):
        if fn not in edge.UNARY:
            raise ValueError(f"unknown edge-wise function {fn!r}")
        x = self._edges(E).values
        a = x.dtype.type(0 if alpha is None else alpha)
        return self._map(E, edge.edge_unary, x, edge.UNARY[fn], a)

    def leaky_relu_backward(self, C, dE, alpha):
        c = self._edges(C).values
        return self._map(C, edge.leaky_relu_backward, c, self.device_values(dE, c.dtype),
                         c.dtype.type(alpha))

    def ewise(self, E, F, op):
        if op not in edge.BINARY:
            raise ValueError(f"op must be one of {sorted(edge.BINARY)}, got {op!r}")
        x = self._edges(E).values
        return self._map(E, edge.edge_binary, x, self.device_values(F, x.dtype), edge.BINARY[op])

    def _scaled(self, E, v, op, index):
        if op not in ("times", "div", "plus", "minus"):
            raise ValueError(f"op must be 'times', 'div', 'plus' or 'minus', got {op!r}")
        x = self._edges(E).values
        return self._map(E, edge.edge_gathered, x, self.device_array(v, x.dtype), index,
                         edge.BINARY[op])

    def row_scale(self, E, v, op="times"):
        return self._scaled(E, v, op, self.device_pattern(E).rows)

    def col_scale(self, E, v, op="times"):
        return self._scaled(E, v, op, self.device_pattern(E).indices)

    def scale_edges(self, E, u, v):
        x = self._edges(E).values
        p = self.device_pattern(E)
        return self._map(E, edge.edge_outer, x, True, self.device_array(u, x.dtype),
                         self.device_array(v, x.dtype), p.rows, p.indices)

    def outer_add(self, A, u, v):
        u = self.device_array(u)
        p = self.device_pattern(A)
        out = self.xp.empty(p.nnz, u.dtype)
        if p.nnz:
            self.launch(edge.edge_outer, element_grid(p.nnz), out, False, u,
                         self.device_array(v, u.dtype), p.rows, p.indices, out)
        return EdgeTensor(p, out)


for _algebra, (_kernel, _identity) in srk.SHIPPED.items():
    CUDAExecutor.lowers(_algebra)(lambda ex, sr, k=_kernel, e=_identity:
                                  ex.kernel_lowering(k, e))
CUDAExecutor.lowers(WEIGHTED_MEAN)(lambda ex, sr: ex.kernel_lowering(sparse.spmm_avg, None))
del _algebra, _kernel, _identity
