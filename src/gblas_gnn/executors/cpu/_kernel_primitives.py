r"""Low-level building blocks of the numba CPU kernels: a cache-line prefetch of a feature row,
an exponential that vectorises, and scratch vectors on a kernel's stack.

The fused attention forward spends its time on two things a plain SpMM does not do: waiting
for the gathered rows ``X_j`` (random reads from an array larger than L2) and computing
``exp`` once per edge. :func:`prefetch_row` lets the score loop of a row ask for the rows its
aggregation loop will read a few hundred cycles later, and :func:`exp_nonpositive` replaces
the scalar libm call (which keeps LLVM from vectorising the softmax loop) by a polynomial.
(64-byte aligned allocation, :func:`gblas_gnn.executors.alignment.aligned_empty`, is shared
with the other executors.)
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from ..alignment import ALIGNMENT

__all__ = ["exp_nonpositive", "head_row_dots", "prefetch_heads", "prefetch_row", "stack_empty",
           "channels_first", "feature_row", "prefetch_feature_row"]

_FAST = {"reassoc", "contract"}


# ---------------------------------------------------------------------- prefetch
@intrinsic
def _prefetch(typingctx, array, index):
    """``llvm.prefetch`` (read, keep in all cache levels) of the address of ``array[index]``
    (1-D array). A prefetch never faults and has no visible effect but timing."""
    if not (isinstance(array, types.Array) and array.ndim == 1
            and isinstance(index, types.Integer)):
        return None
    sig = types.void(array, index)

    def codegen(context, builder, signature, args):
        array_type, index_type = signature.args
        view = context.make_array(array_type)(context, builder, args[0])
        idx = context.cast(builder, args[1], index_type, types.intp)
        ptr = cgutils.get_item_pointer(context, builder, array_type, view, [idx],
                                       wraparound=False, boundscheck=False)
        byte_ptr = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte_ptr, i32, i32, i32]),
            "llvm.prefetch.p0i8")
        # (address, rw = 0: read, locality = 3: keep in every level, cache type = 1: data)
        builder.call(fn, [builder.bitcast(ptr, byte_ptr), ir.Constant(i32, 0),
                          ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


def _line_step(array):
    """Elements of ``array`` on one cache line (a compile-time constant in a kernel)."""
    return max(1, ALIGNMENT // array.itemsize)


@overload(_line_step, inline="always")
def _line_step_overload(array):
    # folded at typing time: ``array.itemsize`` inside a kernel is a field of the array
    # struct, read at run time, and a division by it in every prefetch slowed the plain
    # aggregation markedly (docs/performance.md, the aggregation path)
    step = max(1, ALIGNMENT // (array.dtype.bitwidth // 8))
    return lambda array: step


@nb.njit(inline="always")
def prefetch_row(row):
    """Prefetch every cache line of the 1-D view ``row`` (e.g. ``X[j, h]``): one prefetch
    every :data:`ALIGNMENT` bytes from its first element, and its last element (the last
    line of a row that does not start on one)."""
    step = _line_step(row)
    for c in range(0, row.shape[0], step):
        _prefetch(row, c)
    if row.shape[0] > 0:
        _prefetch(row, row.shape[0] - 1)


@nb.njit(inline="always")
def feature_row(EA, EL, ED, p, i, j):
    r"""The features of the edge ``j → i`` at CSR position ``p``: ``EA[p]``, or, for a graph
    with loops whose features are its base's ``EA`` and the loops' ``EL`` apart
    (:class:`~gblas_gnn.edge_attr.LoopedValues`, ``ED`` its shift; ``EL`` has rows),
    ``EL[i]`` for the loop and :math:`EA_{p - ED_i}` before it, :math:`EA_{p - ED_{i+1}}`
    after it."""
    if EL.shape[0] == 0:
        return EA[p]
    ii = np.uint64(i)
    jj = np.uint64(j)
    if jj == ii:
        return EL[ii]
    return EA[np.uint64(p) - ED[ii + np.uint64(1) if jj > ii else ii]]


@nb.njit(inline="always")
def prefetch_feature_row(EA, EL, ED, p, i):
    """Prefetch the features of the edge at CSR position ``p`` of row ``i`` (of a graph with
    loops: the base's row of an edge before the loop, which is that or the row before the
    one of an edge after it: the same line or the next)."""
    if EL.shape[0] == 0:
        prefetch_row(EA[p])
    elif EA.shape[0] > 0:
        prefetch_row(EA[min(np.uint64(p) - ED[np.uint64(i)], np.uint64(EA.shape[0] - 1))])


@nb.njit(inline="always")
def prefetch_heads(block):
    """Prefetch every cache line of the C-contiguous 2-D view ``block`` (e.g. ``X[j]``: a
    row's heads, side by side), one prefetch per line. A loop of :func:`prefetch_row` over
    the heads asks for a line once per head on it (four prefetches for the two lines of a
    4 × 8 float32 row), and made GAT 4 × 8's row pass markedly slower
    (``docs/performance.md``)."""
    first = block[0]
    size = block.shape[0] * block.shape[1]
    step = _line_step(first)
    for c in range(0, size, step):
        _prefetch(first, c)                  # past the first head: the same contiguous row
    if size > 0:
        _prefetch(first, size - 1)


# ---------------------------------------------------------------------- exp
@intrinsic
def _float32_from_bits(typingctx, bits):
    """The float32 whose IEEE-754 bit pattern is ``bits`` (an integer, taken modulo 2^32)."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        low32 = context.cast(builder, args[0], signature.args[0], types.uint32)
        return builder.bitcast(low32, ir.FloatType())

    return types.float32(bits), codegen


_LOG2E = np.float32(1.4426950408889634)
_LN2_HI = np.float32(0.693145751953125)        # 15 significant bits: n·_LN2_HI is exact
_LN2_LO = np.float32(1.4286067653301870e-06)   # ln 2 - _LN2_HI
_LOWEST = np.float32(-87.0)                    # exp(-87) ≈ 1.6e-38, just above 2^-126
_HALF = np.float32(0.5)
_BIAS = np.float32(127.0)
_MANTISSA_SCALE = np.float32(2.0 ** 23)
# 1/k!, k = 7..1: the Taylor polynomial of degree 7 of exp on |r| ≤ ln2/2 errs by at most
# (ln2/2)^8 / 8! · e^(ln2/2) ≈ 7.4e-9 relative, below half a float32 ulp (6e-8).
_TAYLOR = tuple(np.float32(1.0 / f) for f in (5040.0, 720.0, 120.0, 24.0, 6.0, 2.0, 1.0))


@nb.njit(inline="always", fastmath=_FAST)
def _exp_nonpositive_f32(x):
    x = x if not x < _LOWEST else _LOWEST       # NaN passes through
    n = np.floor(x * _LOG2E + _HALF)            # x = n ln2 + r, |r| ≤ ln2/2
    r = (x - n * _LN2_HI) - n * _LN2_LO
    p = _TAYLOR[0]
    p = p * r + _TAYLOR[1]
    p = p * r + _TAYLOR[2]
    p = p * r + _TAYLOR[3]
    p = p * r + _TAYLOR[4]
    p = p * r + _TAYLOR[5]
    p = p * r + _TAYLOR[6]
    p = p * r + np.float32(1.0)
    # 2^n: the biased exponent n + 127 in bits 23..30 (an exact float32 product)
    return p * _float32_from_bits(np.int32((n + _BIAS) * _MANTISSA_SCALE))


def exp_nonpositive(x):
    r"""``exp(x)`` for ``x ≤ 0`` (the shifted scores :math:`e_{ij} - \max_j e_{ij}` of a
    softmax), usable inside numba kernels.

    float32: :math:`e^x = 2^n e^r` with :math:`n = \lfloor x/\ln 2 + 1/2 \rfloor`,
    :math:`r = x - n \ln 2` (Cody–Waite: ``ln 2`` split in two so that ``n ln2_hi`` is
    exact) and the degree-7 Taylor polynomial of :math:`e^r`; :math:`2^n` is built from its
    exponent bits. Branch-free, so the loop around it vectorises (libm's ``expf`` is a call
    that does not). Relative error ≤ 2·10⁻⁷ for ``x ≥ -87``; below, the result is
    ``exp(-87) ≈ 1.6e-38`` (absolute error < 2e-38). Other types use ``np.exp``.
    """
    return np.exp(x)


# not inlined in numba's IR (LLVM inlines it and vectorises the loop all the same): two
# IR-inlined calls in one loop body, as a forward with its heads written out has, trip
# numba's SSA check (NumbaIRAssumptionWarning)
@overload(exp_nonpositive)
def _exp_nonpositive_overload(x):
    if x == types.float32:
        return lambda x: _exp_nonpositive_f32(x)
    if isinstance(x, types.Float):
        return lambda x: np.exp(x)
    return None


# ---------------------------------------------------------------------- scratch
@intrinsic
def stack_empty(typingctx, count, like):
    """A 1-D array of ``count`` uninitialised numbers of ``like``'s dtype on the calling
    function's stack: scratch of a generated kernel, which allocates nothing on the heap
    (its threads each run the kernel, so each gets its own). Call it once, before the
    kernel's loops: it is freed when the kernel returns, and each call takes more stack."""
    if not (isinstance(count, types.Integer) and isinstance(like, types.Array)):
        return None
    vector = types.Array(like.dtype, 1, "C")

    def codegen(context, builder, signature, args):
        from numba.np.arrayobj import populate_array

        n = context.cast(builder, args[0], signature.args[0], types.intp)
        element = context.get_data_type(like.dtype)
        data = builder.alloca(element, size=n)
        itemsize = context.get_constant(types.intp, context.get_abi_sizeof(element))
        out = context.make_array(vector)(context, builder)
        populate_array(out, data=data, shape=[n], strides=[itemsize], itemsize=itemsize,
                       meminfo=None)
        return out._getvalue()

    return vector(count, like), codegen


@nb.njit(inline="always")
def channels_first(W, out):
    """``out[f * M + a] = W[a…, f]``: a C-contiguous parameter with its last axis (``f``,
    the features of :class:`gblas_gnn.codegen.scalar.EdgeContraction`) moved first, flat,
    ``a`` running over its ``M`` entries of the leading axes."""
    f_count = W.shape[-1]
    flat = W.reshape(W.size)
    m = W.size // f_count
    for a in range(m):
        for f in range(f_count):
            out[f * m + a] = flat[a * f_count + f]


# ---------------------------------------------------------------------- row products
@nb.njit(parallel=True, cache=True, fastmath=_FAST)
def head_row_dots(A, B, out):
    """``out[i, h] = ⟨A[i, h], B[i, h]⟩`` (A, B: (n, heads, width)): the softmax term
    :math:`t_i = \\langle \\bar Z_i, Z_i \\rangle` of an attention's backward, per head (by
    row, so that an edge's heads read one cache line)."""
    for i in nb.prange(A.shape[0]):
        for h in range(A.shape[1]):
            a, b = A[i, h], B[i, h]
            acc = a.dtype.type(0)
            for c in range(a.shape[0]):
                acc += a[c] * b[c]
            out[i, h] = acc
