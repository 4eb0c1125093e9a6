r"""CUDA kernels of the sparse building blocks: reductions of edge tensors, SDDMM, softmax and
its backward, SpMM over a semiring, and max/min aggregation with its backward.

Every kernel here is a *group kernel* (:mod:`._lanes`): a group of lanes owns one item, a row
(CSR) or a column (CSC) of the pattern, possibly with a head or a tile of
:data:`~._device.LANES` feature columns, and a grid-stride loop walks the items. Lanes stride
over the item's edges for scalar work (softmax, reductions) and over the feature columns for
vector work, so one feature row ``H[j, c0:c0+LANES]`` is one coalesced load. No two groups
write the same output and no kernel uses atomics: results are deterministic.

Patterns: ``ptr`` (m+1,) int64 and ``idx`` (nnz,) are a CSR (rows) or CSC (columns) view; the
CSC view reads the CSR-ordered edge values through ``perm`` (``use_perm``), so edge tensors
are stored once, in CSR order. Edge values are ``(heads, nnz)``.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from numba import cuda

from ._device import GROUPS_PER_BLOCK, LANES, inline_device
from ._lanes import (
    group,
    group_max,
    group_min,
    group_sum,
    group_sync,
    groups,
    lane,
    split_tile,
    tile_count,
)

__all__ = ["segment_reduce", "edge_dots", "softmax_rows", "softmax_backward_rows", "head_dots",
           "SpMM", "make_spmm", "spmm_avg", "argext_forward", "argext_features", "REDUCE_SUM",
           "REDUCE_MAX", "REDUCE_MIN"]

REDUCE_SUM, REDUCE_MAX, REDUCE_MIN = 0, 1, 2


@cuda.jit
def segment_reduce(ptr, perm, use_perm, vals, op, out):
    """``out[h, i] = ⊕_{q in segment i} vals[h, e(q)]`` with ⊕ = sum, max or min (``op``:
    :data:`REDUCE_SUM` / ``MAX`` / ``MIN``); an empty segment gives 0. Item: (segment, head)."""
    heads = vals.shape[0]
    m = out.shape[1]
    ln = lane()
    zero = vals.dtype.type(0)
    for item in range(group(), m * heads, groups()):
        i, h = divmod(item, heads)
        start, end = ptr[i], ptr[i + 1]
        acc = zero
        if op == REDUCE_MAX:
            acc = vals.dtype.type(-math.inf)
        elif op == REDUCE_MIN:
            acc = vals.dtype.type(math.inf)
        for q in range(start + ln, end, LANES):
            v = vals[h, perm[q] if use_perm else q]
            if op == REDUCE_SUM:
                acc += v
            elif op == REDUCE_MAX:
                acc = max(acc, v)
            else:
                acc = min(acc, v)
        if op == REDUCE_SUM:
            acc = group_sum(acc)
        elif op == REDUCE_MAX:
            acc = group_max(acc)
        else:
            acc = group_min(acc)
        if ln == 0:
            out[h, i] = acc if end > start else zero


@cuda.jit
def edge_dots(indptr, indices, X, Y, arg, use_arg, out):
    """``out[e] = ⟨X_i, Y_j⟩`` for every stored ``(i, j)`` (CSR position ``e``): the SDDMM;
    with ``use_arg`` only over the features ``c`` whose winner ``arg[i, c]`` is ``e``: the
    edge gradient of max/min aggregation. Item: a row; lanes over the features, one group
    sum per edge."""
    k = X.shape[1]
    ln = lane()
    for i in range(group(), indptr.shape[0] - 1, groups()):
        for e in range(indptr[i], indptr[i + 1]):
            j = indices[e]
            part = X.dtype.type(0)
            for c in range(ln, k, LANES):
                if not use_arg or arg[i, c] == e:
                    part += X[i, c] * Y[j, c]
            part = group_sum(part)
            if ln == 0:
                out[e] = part


@cuda.jit
def head_dots(A, B, heads, out):
    """``out[h, i] = ⟨A[i, h·w:(h+1)·w], B[i, h·w:(h+1)·w]⟩`` (``w = A.shape[1] / heads``):
    per-vertex products, e.g. the softmax term ``t_i = ⟨dZ_i, Z_i⟩``. Item: (row, head)."""
    n = A.shape[0]
    w = A.shape[1] // heads
    ln = lane()
    for item in range(group(), n * heads, groups()):
        i, h = divmod(item, heads)
        part = A.dtype.type(0)
        for c in range(h * w + ln, (h + 1) * w, LANES):
            part += A[i, c] * B[i, c]
        part = group_sum(part)
        if ln == 0:
            out[h, i] = part


@cuda.jit
def softmax_rows(indptr, vals, out):
    """Stable row softmax of the stored entries, ``out = exp(v − max) / Σ exp(v − max)`` per
    row (an empty row has no entry to write). Item: a row; lanes over its edges."""
    n = indptr.shape[0] - 1
    ln = lane()
    for i in range(group(), n, groups()):
        start, end = indptr[i], indptr[i + 1]
        m = vals.dtype.type(-math.inf)
        for e in range(start + ln, end, LANES):
            m = max(m, vals[e])
        m = group_max(m)
        total = vals.dtype.type(0)
        for e in range(start + ln, end, LANES):
            v = math.exp(vals[e] - m)
            out[e] = v
            total += v
        total = group_sum(total)
        for e in range(start + ln, end, LANES):       # the lane's own writes: no barrier
            out[e] = out[e] / total


@cuda.jit
def softmax_backward_rows(indptr, psi, dpsi, out):
    """``out = Ψ ⊙ (dΨ − rep(Σ_j Ψ ⊙ dΨ))`` per row. Item: a row; lanes over its edges."""
    n = indptr.shape[0] - 1
    ln = lane()
    for i in range(group(), n, groups()):
        start, end = indptr[i], indptr[i + 1]
        t = psi.dtype.type(0)
        for e in range(start + ln, end, LANES):
            t += psi[e] * dpsi[e]
        t = group_sum(t)
        for e in range(start + ln, end, LANES):
            out[e] = psi[e] * (dpsi[e] - t)


class SpMM(NamedTuple):
    """The kernels of one semiring's SpMM (:func:`make_spmm`): ``fold`` folds segments
    (the rows of at most ``split`` edges, or the chunks of the longer ones,
    :class:`~._pattern.SplitRows`); ``combine`` folds each long row's partials, in order,
    into its output row."""

    fold: Any
    combine: Any


def make_spmm(add, mul) -> SpMM:
    r"""The SpMM kernels of the semiring ``(add, mul)`` (device functions of two scalars):

    .. math:: Z_{i,c} = \bigoplus_{q \in \mathrm{segment}\ i} \mathrm{vals}[e(q)] \otimes
              H_{\mathrm{idx}[q], c} \quad (\text{empty segment} \to 0)

    over a CSR view (``Z = S ⊕ H``) or the CSC view (``Z = Sᵀ ⊕ H``). ``fold``'s item:
    (segment ``lo[i]:hi[i]``, tile of LANES feature columns), a segment longer than
    ``split`` skipped: the rows are segments (``lo, hi = ptr[:-1], ptr[1:]``), and so are
    the chunks of the longer rows, folded by separate groups into partial rows that
    ``combine`` folds in order (no atomics: the result is deterministic; ⊕ is associative,
    so the grouping changes a sum only by rounding). A group stages its edges' values and
    columns in shared memory, LANES at a time, by a coalesced load (one edge per lane);
    then every lane reads them from there while it gathers its feature column, over a full
    stage in a loop of constant length, which the compiler unrolls so that the stage's
    gathers are in flight together.
    """
    @inline_device
    def fold(lo, hi, idx, perm, use_perm, vals, H, c, acc):
        # (a kernel's static shared memory: every call of a group uses the same two rows)
        sval = cuda.shared.array((GROUPS_PER_BLOCK, LANES), H.dtype)
        scol = cuda.shared.array((GROUPS_PER_BLOCK, LANES), idx.dtype)
        g = cuda.threadIdx.x // LANES
        ln = lane()
        k = H.shape[1]
        for base in range(lo, hi, LANES):
            q = base + ln
            if q < hi:
                sval[g, ln] = vals[perm[q] if use_perm else q]
                scol[g, ln] = idx[q]
            group_sync()
            if c < k:
                if hi - base >= LANES:
                    for t in range(LANES):
                        acc = add(acc, mul(sval[g, t], H[scol[g, t], c]))
                else:
                    for t in range(hi - base):
                        acc = add(acc, mul(sval[g, t], H[scol[g, t], c]))
            group_sync()
        return acc

    @cuda.jit
    def spmm(lo, hi, idx, perm, use_perm, vals, H, identity, split, Z):
        k = Z.shape[1]
        tiles = tile_count(k)
        for item in range(group(), Z.shape[0] * tiles, groups()):
            i, c = split_tile(item, tiles)
            start, end = lo[i], hi[i]
            if end - start > split:
                continue                      # folded in chunks
            acc = fold(start, end, idx, perm, use_perm, vals, H, c, identity)
            if c < k:
                Z[i, c] = acc if end > start else H.dtype.type(0)

    @cuda.jit
    def spmm_combine(rows, first, P, Z):
        k = Z.shape[1]
        tiles = tile_count(k)
        for item in range(group(), rows.shape[0] * tiles, groups()):
            h, c = split_tile(item, tiles)
            if c < k:
                acc = P[first[h], c]
                for q in range(first[h] + 1, first[h + 1]):
                    acc = add(acc, P[q, c])
                Z[rows[h], c] = acc

    return SpMM(spmm, spmm_combine)


@cuda.jit
def spmm_avg(ptr, idx, perm, use_perm, vals, H, Z):
    r"""The averaging semiring's SpMM: :math:`Z_{i,c} = \sum_q s_q H_{j_q,c} / \sum_q s_q`
    (0 when the weights sum to 0, and for an empty segment). Item: (segment, tile)."""
    k = Z.shape[1]
    tiles = tile_count(k)
    zero = H.dtype.type(0)
    for item in range(group(), Z.shape[0] * tiles, groups()):
        i, c = split_tile(item, tiles)
        if c >= k:
            continue
        num = zero
        den = zero
        for q in range(ptr[i], ptr[i + 1]):
            s = vals[perm[q] if use_perm else q]
            num += s * H[idx[q], c]
            den += s
        Z[i, c] = num / den if den > 0 else zero


@cuda.jit
def argext_forward(indptr, indices, vals, H, is_max, Z, arg):
    """``Z[i, c] = max_e / min_e vals[e] · H[j_e, c]`` over the row's edges and ``arg[i, c]``
    the CSR position of the winner (the first in CSR order on ties, i.e. the lowest source
    id; −1 and ``Z = 0`` for an empty row). Item: (row, tile)."""
    k = Z.shape[1]
    tiles = tile_count(k)
    for item in range(group(), Z.shape[0] * tiles, groups()):
        i, c = split_tile(item, tiles)
        if c >= k:
            continue
        best = H.dtype.type(0)
        win = -1
        for e in range(indptr[i], indptr[i + 1]):
            v = vals[e] * H[indices[e], c]
            if win < 0 or (v > best if is_max else v < best):
                best = v
                win = e
        Z[i, c] = best
        arg[i, c] = win


@cuda.jit
def argext_features(colptr, perm, crow, vals, arg, dZ, dH):
    """``dH[j, c] = Σ_i [arg[i, c] = e(i, j)] dZ[i, c] vals[e(i, j)]`` over the column's
    edges (CSC): the feature gradient of max/min aggregation. Item: (column, tile)."""
    k = dH.shape[1]
    tiles = tile_count(k)
    for item in range(group(), dH.shape[0] * tiles, groups()):
        j, c = split_tile(item, tiles)
        if c >= k:
            continue
        acc = dH.dtype.type(0)
        for q in range(colptr[j], colptr[j + 1]):
            i = crow[q]
            e = perm[q]
            if arg[i, c] == e:
                acc += dZ[i, c] * vals[e]
        dH[j, c] = acc
