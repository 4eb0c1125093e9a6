r"""Fused numba kernels for attention over the CSR buffers of one adjacency pattern.

One attention layer is, per head :math:`h` and target row :math:`i`,

.. math::
    e_{ij} = \mathrm{score}(i, j), \qquad
    \Psi_{ij} = \frac{\exp(e_{ij} - \max_j e_{ij})}{\sum_j \exp(e_{ij} - \max_j e_{ij})},
    \qquad Z_i = \sum_j \Psi_{ij} M_{ij} X_j

with the *additive* score :math:`e_{ij} = \mathrm{LeakyReLU}_\alpha(d_i + s_j)` (GAT) or the
*dot* score :math:`e_{ij} = \beta \langle P_i, Q_j \rangle` (AGNN, softmax VA), and ``M`` an
optional dropout scale per edge. Done with GraphBLAS this is five or six passes over the
edges, each building a new matrix; here the forward is one pass per row (scores, max, exp,
sum, normalise and aggregate while the row is in cache). The backward needs no row pass:
the softmax term of row ``i`` is

.. math::
    t_i = \sum_j \Psi_{ij}\, d\Psi_{ij} = \sum_j \Psi_{ij} M_{ij} \langle dZ_i, X_j \rangle
        = \langle dZ_i, Z_i \rangle,

a dense row product of the forward's output, so one pass per column over a cached CSC
permutation computes every edge gradient (``dΨ_ij``, the softmax and score backward), the
column sums and ``dX = Sᵀ dZ`` while ``X_j`` and ``dX_j`` stay in cache, and reads each
``dZ_i`` once for both. The edge gradients go back to CSR positions for the row sums. No
kernel holds more than one scalar per edge per head (rule 1 of docs/design.md); every loop is over
rows or columns, so ``prange`` needs no atomics and results are bitwise deterministic.

Arrays: ``indptr`` (n+1,), ``indices`` (nnz,) sorted within each row; edge arrays are
``(heads, nnz)`` in CSR order unless named ``...T`` (CSC order). The CSC view is ``colptr``
(n_src+1,), ``perm`` (nnz,): the CSR position of each CSC slot, and ``rows`` (nnz,): the
target row of that slot. Features are passed as ``(n, heads, w)`` views, so that one head's
row ``X[j, h]`` is a contiguous 1-D view.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from ._kernel_primitives import exp_nonpositive, prefetch_row

# Every kernel is compiled with ``_FAST``: reassociation lets LLVM vectorise the k-loops of the
# dot products (a summation order fixed by the compiled code, so results are still bitwise
# reproducible from run to run) and ``contract`` allows fused multiply-adds. What else kept
# the k-loops slow, measured at n = 10⁵, 1.7 M edges, k = 32:
# - accumulators must have the array's dtype (``a.dtype.type(0)``): ``a[0] * 0`` is float64
#   in numba, and a float32 dot accumulated in float64 took twice as long;
# - the helpers take 1-D row views ``X[j, h]``: a column slice ``X[j, b:b + w]`` or 2-D
#   indexing with an offset inside the k-loop was 20 % to 4× slower;
# - no data-dependent branch around an update: the backward column pass with ``if w != 0``
#   around its ``dX`` update was 40 % slower.
# The forward row pass also prefetches the rows ``X_j`` its aggregation will gather while it
# computes the scores, and takes ``exp`` from a polynomial that vectorises
# (:mod:`._kernel_primitives`): medians 42 → 33 ms at M (one process, 50 interleaved runs),
# 31 ms with 64-byte aligned ``X`` and ``Z``. Prefetching ``dZ_i`` in the backward column
# pass gained nothing.
_FAST = {"reassoc", "contract"}
# Edges ahead whose gathered rows a loop prefetches when the loop itself does the gathering,
# so that the prefetch must lead it. At M: the dot-score forward 10 % faster with 8 than
# with 2 or none (16 no better); the dot backward's column pass 91 → 61 ms (prefetching the
# current edge instead made it slower). A plain SpMM (``weighted_rows``) gained nothing.
_PREFETCH_AHEAD = 8


@nb.njit(inline="always")
def _dot(a, b):
    """``Σ_c a[c] b[c]`` over two 1-D views of equal length."""
    acc = a.dtype.type(0)
    for c in range(a.shape[0]):
        acc += a[c] * b[c]
    return acc


@nb.njit(inline="always")
def _axpy(y, w, x):
    """``y += w · x`` over two 1-D views of equal length."""
    for c in range(y.shape[0]):
        y[c] += w * x[c]


@nb.njit(inline="always")
def _softmax_aggregate_row(start, end, h, psi, indices, X, mask, use_mask, zi, c, use_c):
    """Turn the scores ``psi[h, start:end]`` into Ψ in place and add ``Ψ ⊙ M`` times the
    messages ``c_j X_j`` (``X_j = X[j, h]`` without ``use_c``) to the row ``zi``."""
    m = psi[h, start]
    for p in range(start + 1, end):
        if psi[h, p] > m:
            m = psi[h, p]
    total = psi.dtype.type(0)
    for p in range(start, end):
        v = exp_nonpositive(psi[h, p] - m)
        psi[h, p] = v
        total += v
    inv = 1 / total
    for p in range(start, end):
        psi[h, p] = psi[h, p] * inv
        w = psi[h, p]
        if use_mask:
            w = w * mask[h, p]
        if use_c:
            w = w * c[indices[p]]
        _axpy(zi, w, X[indices[p], h])


@nb.njit(parallel=True, cache=True, fastmath=_FAST)
def additive_forward(indptr, indices, d, s, slope, X, mask, use_mask, psi, Z0, Z):
    """GAT forward: ``psi[h] = Ψ_h`` and ``Z[:, h] = Z0[h] + (Ψ_h ⊙ M_h) X[:, h]`` (X, Z:
    (n, heads, width); ``Z0`` (heads, width): the start of every row, zeros or a bias)."""
    n = indptr.shape[0] - 1
    heads = d.shape[0]
    for i in nb.prange(n):
        start, end = indptr[i], indptr[i + 1]
        for h in range(heads):
            zi = Z[i, h]
            z0 = Z0[h]
            for c in range(zi.shape[0]):
                zi[c] = z0[c]
            if start == end:
                continue
            di = d[h, i]
            for p in range(start, end):
                j = indices[p]
                prefetch_row(X[j, h])       # read by the aggregation below
                e = di + s[h, j]
                psi[h, p] = e if e > 0 else e * slope
            _softmax_aggregate_row(start, end, h, psi, indices, X, mask, use_mask, zi, d[h],
                                   False)


@nb.njit(parallel=True, cache=True, fastmath=_FAST)
def dot_forward(indptr, indices, P, Q, beta, X, c, use_c, psi, Z):
    """Dot-score forward (one head): ``e_ij = β ⟨P_i, Q_j⟩``, ``Z = Ψ (diag(c) X)`` (X, Z:
    (n, 1, width)).

    Passing ``X = Q`` with a scale ``c`` (AGNN: ``H = diag(‖H‖) Ĥ``) makes the scores and the
    messages read the same rows: one gather per edge instead of two."""
    n = indptr.shape[0] - 1
    last = indices.shape[0] - 1
    for i in nb.prange(n):
        start, end = indptr[i], indptr[i + 1]
        zi = Z[i, 0]
        for col in range(zi.shape[0]):
            zi[col] = 0
        if start == end:
            continue
        for p in range(start, end):
            prefetch_row(Q[indices[min(p + _PREFETCH_AHEAD, last)]])
            psi[0, p] = beta * _dot(P[i], Q[indices[p]])
        _softmax_aggregate_row(start, end, 0, psi, indices, X, psi, False, zi, c, use_c)


@nb.njit(parallel=True, cache=True, fastmath=_FAST)
def gather_edges(perm, values, out):
    """``out[h, q] = values[h, perm[q]]``: edge values from CSR into CSC order."""
    for h in range(values.shape[0]):
        v, o = values[h], out[h]
        for q in nb.prange(perm.shape[0]):
            o[q] = v[perm[q]]


@nb.njit(parallel=True, cache=True, fastmath=_FAST)
def head_row_dots(A, B, out):
    """``out[h, i] = ⟨A[i, h], B[i, h]⟩`` (A, B: (n, heads, width))."""
    for i in nb.prange(A.shape[0]):
        for h in range(A.shape[1]):
            out[h, i] = _dot(A[i, h], B[i, h])


@nb.njit(parallel=True, cache=True, fastmath=_FAST)
def row_sums(indptr, E, out):
    """``out[h, i] = Σ_{p in row i} E[h, p]``."""
    heads = E.shape[0]
    for i in nb.prange(indptr.shape[0] - 1):
        for h in range(heads):
            acc = E.dtype.type(0)
            for p in range(indptr[i], indptr[i + 1]):
                acc += E[h, p]
            out[h, i] = acc


@nb.njit(parallel=True, cache=True, fastmath=_FAST)
def additive_backward(colptr, perm, rows, d, s, t, slope, X, dZ, psiT, maskT, use_mask,
                      dC, ds, dX):
    r"""The whole GAT backward in one pass over the columns (sources ``j``), per head ``h``:

    .. math::
        dC_{ij} = \mathrm{LeakyReLU}'(d_i + s_j)\,
                  (W_{ij} \langle dZ_i, X_j \rangle - \Psi_{ij} t_i), \qquad
        ds_j = \textstyle\sum_i dC_{ij}, \qquad dX_j = \textstyle\sum_i W_{ij}\, dZ_i

    with ``W = Ψ ⊙ M`` and ``t_i = Σ_j Ψ_ij dΨ_ij = ⟨dZ_i, Z_i⟩`` (``Z_i = Σ_j W_ij X_j``,
    computed beforehand by :func:`head_row_dots`): the softmax backward needs no row pass.
    X, dZ, dX: (n, heads, width). ``psiT``/``maskT`` are in CSC order (:func:`gather_edges`);
    ``dC`` is written in CSR order
    (``perm``) so that :func:`row_sums` gives ``dd``. ``X_j`` stays in registers and each
    ``dZ_i`` row is read once for both the dot product and the update of ``dX_j``.
    """
    n_src = colptr.shape[0] - 1
    heads = d.shape[0]
    for j in nb.prange(n_src):
        for h in range(heads):
            xj = X[j, h]
            dxj = dX[j, h]
            for c in range(dxj.shape[0]):
                dxj[c] = 0
            sj = s[h, j]
            acc = dC.dtype.type(0)
            for q in range(colptr[j], colptr[j + 1]):
                i = rows[q]
                dzi = dZ[i, h]
                psi = psiT[h, q]
                w = psi * maskT[h, q] if use_mask else psi
                v = w * _dot(dzi, xj) - psi * t[h, i]
                if not d[h, i] + sj > 0:            # LeakyReLU'(C) = 1 if C > 0 else α
                    v = v * slope
                dC[h, perm[q]] = v
                acc += v
                _axpy(dxj, w, dzi)
            ds[h, j] = acc


@nb.njit(parallel=True, cache=True, fastmath=_FAST)
def dot_backward(colptr, perm, rows, P, Q, beta, X, c, use_c, dZ, t, psiT, dE, dQ, dX):
    r"""The column pass of the dot-score backward (messages ``c_j X_j``), for every source
    ``j``:

    .. math::
        dE_{ij} = \Psi_{ij} (c_j \langle dZ_i, X_j \rangle - t_i), \qquad
        dQ_j = \beta \textstyle\sum_i dE_{ij} P_i, \qquad
        dX_j = \textstyle\sum_i \Psi_{ij}\, dZ_i

    with ``t_i = ⟨dZ_i, Z_i⟩`` (:func:`head_row_dots`). ``dE`` is written in CSR order for
    ``dP = β dE Q`` (:func:`weighted_rows`). Returns, per column,
    ``Σ_i dE_ij ⟨P_i, Q_j⟩`` in float64 (their sum is ``dβ``).
    """
    n_src = colptr.shape[0] - 1
    k = P.shape[1]
    last = rows.shape[0] - 1
    dbeta_cols = np.zeros(n_src, dtype=np.float64)
    for j in nb.prange(n_src):
        xj, qj, dxj, dqj = X[j], Q[j], dX[j], dQ[j]
        for col in range(dxj.shape[0]):
            dxj[col] = 0
        for col in range(k):
            dqj[col] = 0
        cj = c[j] if use_c else X.dtype.type(1)
        acc = 0.0
        for q in range(colptr[j], colptr[j + 1]):
            ahead = rows[min(q + _PREFETCH_AHEAD, last)]
            prefetch_row(dZ[ahead])
            prefetch_row(P[ahead])
            i = rows[q]
            dzi, pi = dZ[i], P[i]
            psi = psiT[0, q]
            e = psi * (cj * _dot(dzi, xj) - t[0, i])
            dE[0, perm[q]] = e
            acc += e * _dot(pi, qj)
            _axpy(dqj, beta * e, pi)
            _axpy(dxj, psi, dzi)
        dbeta_cols[j] = acc
    return dbeta_cols


@nb.njit(parallel=True, cache=True, fastmath=_FAST)
def weighted_rows(indptr, indices, E, scale, X, out):
    """``out_i = scale · Σ_{p in row i} E[0, p] X_{indices[p]}`` (a CSR SpMM)."""
    for i in nb.prange(indptr.shape[0] - 1):
        oi = out[i]
        for col in range(oi.shape[0]):
            oi[col] = 0
        for p in range(indptr[i], indptr[i + 1]):
            _axpy(oi, scale * E[0, p], X[indices[p]])


# ---------------------------------------------------------------------- split forward passes
# The distributed executor needs the row max and the row sum of a row that is spread over the
# q blocks of a grid row before it can go on, so there the forward runs as three passes with
# a collective between them (scores + local max, exp + local sum, normalise + aggregate).
@nb.njit(parallel=True, cache=True, fastmath=_FAST)
def additive_scores(indptr, indices, d, s, slope, psi, rowmax):
    """``psi[h, p] = LeakyReLU(d[h, i] + s[h, j])`` and ``rowmax[h, i]`` its maximum over the
    row (−∞ for an empty row)."""
    heads = d.shape[0]
    for i in nb.prange(indptr.shape[0] - 1):
        for h in range(heads):
            di = d[h, i]
            m = -np.inf
            for p in range(indptr[i], indptr[i + 1]):
                e = di + s[h, indices[p]]
                e = e if e > 0 else e * slope
                psi[h, p] = e
                m = max(m, e)
            rowmax[h, i] = m


@nb.njit(parallel=True, cache=True, fastmath=_FAST)
def dot_scores(indptr, indices, P, Q, beta, psi, rowmax):
    """``psi[0, p] = β ⟨P_i, Q_j⟩`` and ``rowmax[0, i]`` its maximum over the row."""
    last = indices.shape[0] - 1
    for i in nb.prange(indptr.shape[0] - 1):
        m = -np.inf
        for p in range(indptr[i], indptr[i + 1]):
            prefetch_row(Q[indices[min(p + _PREFETCH_AHEAD, last)]])
            e = beta * _dot(P[i], Q[indices[p]])
            psi[0, p] = e
            m = max(m, e)
        rowmax[0, i] = m


@nb.njit(parallel=True, cache=True, fastmath=_FAST)
def exp_rows(indptr, psi, rowmax, rowsum):
    """``psi[h, p] = exp(psi[h, p] − rowmax[h, i])`` (``rowmax`` the maximum over the whole
    row, so the argument is ≤ 0) and ``rowsum[h, i]`` its sum over this block's part of the
    row."""
    for i in nb.prange(indptr.shape[0] - 1):
        for h in range(psi.shape[0]):
            m = rowmax[h, i]
            total = psi.dtype.type(0)
            for p in range(indptr[i], indptr[i + 1]):
                v = exp_nonpositive(psi[h, p] - m)
                psi[h, p] = v
                total += v
            rowsum[h, i] = total


@nb.njit(parallel=True, cache=True, fastmath=_FAST)
def normalize_aggregate(indptr, indices, psi, rowsum, X, mask, use_mask, c, use_c, Z):
    """``psi[h, p] /= rowsum[h, i]`` (Ψ) and ``Z[i, h] = Σ_p Ψ_hp M_hp c_j X[j, h]`` (X, Z:
    (n, heads, width); ``M`` the dropout scales when ``use_mask``, ``c`` the message scales
    when ``use_c``)."""
    last = indices.shape[0] - 1
    for i in nb.prange(indptr.shape[0] - 1):
        start, end = indptr[i], indptr[i + 1]
        for h in range(psi.shape[0]):
            zi = Z[i, h]
            for col in range(zi.shape[0]):
                zi[col] = 0
            if start == end:
                continue
            inv = 1 / rowsum[h, i]
            for p in range(start, end):
                prefetch_row(X[indices[min(p + _PREFETCH_AHEAD, last)], h])
                w = psi[h, p] * inv
                psi[h, p] = w
                if use_mask:
                    w = w * mask[h, p]
                if use_c:
                    w = w * c[indices[p]]
                _axpy(zi, w, X[indices[p], h])
