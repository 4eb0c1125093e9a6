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
sum, normalise and aggregate while the row is in cache), and the backward is one pass per
row (``dΨ = dZ_i · X_j``, softmax and score backward, the row-local gradients) plus one pass
per column over a cached CSC permutation (the column sums and ``dX = Sᵀ dZ``). No kernel
holds more than one scalar per edge per head (DESIGN.md rule 1); every loop is over rows or
columns, so ``prange`` needs no atomics and results are bitwise deterministic.

Arrays: ``indptr`` (n+1,), ``indices`` (nnz,) sorted within each row; edge arrays are
``(heads, nnz)`` in that CSR order. The CSC view is ``colptr`` (n_src+1,), ``perm`` (nnz,):
the CSR position of each CSC slot, and ``rows`` (nnz,): the target row of that slot.
Features of head ``h`` are the columns ``h*w:(h+1)*w`` of ``X`` (``w = X.shape[1] // heads``).
"""

from __future__ import annotations

import numba as nb
import numpy as np

# Every kernel is compiled with ``_FAST``: reassociation lets LLVM vectorise the k-loops of the
# dot products (a summation order fixed by the compiled code, so results are still bitwise
# reproducible from run to run) and ``contract`` allows fused multiply-adds. The helpers take
# 1-D row views: indexing 2-D arrays with a column offset inside the k-loop kept LLVM from
# vectorising and made the GAT backward row pass 4× slower (220 → 56 ms at n = 10⁵, 1.7 M
# edges, k = 32).
_FAST = {"reassoc", "contract"}


@nb.njit(inline="always")
def _dot(a, b):
    """``Σ_c a[c] b[c]`` over two 1-D views of equal length."""
    acc = a[0] * 0
    for c in range(a.shape[0]):
        acc += a[c] * b[c]
    return acc


@nb.njit(inline="always")
def _axpy(y, w, x):
    """``y += w · x`` over two 1-D views of equal length."""
    for c in range(y.shape[0]):
        y[c] += w * x[c]


@nb.njit(inline="always")
def _softmax_aggregate_row(start, end, h, i, base, width, psi, indices, X, mask, use_mask, Z,
                           c, use_c):
    """Turn the scores ``psi[h, start:end]`` into Ψ in place and add ``Ψ ⊙ M`` times the
    messages ``c_j X_j`` (``X_j`` without ``use_c``) to Z_i."""
    m = psi[h, start]
    for p in range(start + 1, end):
        if psi[h, p] > m:
            m = psi[h, p]
    total = 0.0
    for p in range(start, end):
        v = np.exp(psi[h, p] - m)
        psi[h, p] = v
        total += v
    inv = 1.0 / total
    for p in range(start, end):
        psi[h, p] = psi[h, p] * inv
        w = psi[h, p]
        if use_mask:
            w = w * mask[h, p]
        if use_c:
            w = w * c[indices[p]]
        if w != 0:
            _axpy(Z[i, base:base + width], w, X[indices[p], base:base + width])


@nb.njit(parallel=True, cache=True, fastmath=_FAST)
def additive_forward(indptr, indices, d, s, slope, X, mask, use_mask, psi, Z):
    """GAT forward: ``psi[h] = Ψ_h`` and ``Z[:, head h] = (Ψ_h ⊙ M_h) X_h`` (Z zeroed here)."""
    n = indptr.shape[0] - 1
    heads = d.shape[0]
    width = X.shape[1] // heads
    for i in nb.prange(n):
        start, end = indptr[i], indptr[i + 1]
        for c in range(Z.shape[1]):
            Z[i, c] = 0
        if start == end:
            continue
        for h in range(heads):
            di = d[h, i]
            for p in range(start, end):
                e = di + s[h, indices[p]]
                psi[h, p] = e if e > 0 else e * slope
            _softmax_aggregate_row(start, end, h, i, h * width, width, psi, indices, X,
                                   mask, use_mask, Z, d[h], False)


@nb.njit(parallel=True, cache=True, fastmath=_FAST)
def dot_forward(indptr, indices, P, Q, beta, X, c, use_c, psi, Z):
    """Dot-score forward (one head): ``e_ij = β ⟨P_i, Q_j⟩``, ``Z = Ψ (diag(c) X)``.

    Passing ``X = Q`` with a scale ``c`` (AGNN: ``H = diag(‖H‖) Ĥ``) makes the scores and the
    messages read the same rows: one gather per edge instead of two."""
    n = indptr.shape[0] - 1
    for i in nb.prange(n):
        start, end = indptr[i], indptr[i + 1]
        for col in range(Z.shape[1]):
            Z[i, col] = 0
        if start == end:
            continue
        for p in range(start, end):
            psi[0, p] = beta * _dot(P[i], Q[indices[p]])
        _softmax_aggregate_row(start, end, 0, i, 0, Z.shape[1], psi, indices, X, psi,
                               False, Z, c, use_c)


@nb.njit(inline="always")
def _softmax_backward_row(start, end, h, i, base, width, psi, indices, X, dZ, mask,
                          use_mask, dE):
    """``dE[h, row] = Ψ ⊙ (dΨ − Σ Ψ ⊙ dΨ)`` with ``dΨ_ij = M_ij ⟨dZ_i, X_j⟩``."""
    t = 0.0
    dz = dZ[i, base:base + width]
    for p in range(start, end):
        g = _dot(dz, X[indices[p], base:base + width])
        if use_mask:
            g = g * mask[h, p]
        dE[h, p] = g
        t += psi[h, p] * g
    for p in range(start, end):
        dE[h, p] = psi[h, p] * (dE[h, p] - t)


@nb.njit(parallel=True, cache=True, fastmath=_FAST)
def additive_backward_rows(indptr, indices, d, s, slope, X, dZ, psi, mask, use_mask, dC, dd):
    """Row pass of the GAT backward: ``dC`` (edge gradient of the pre-activation scores
    ``C = d_i + s_j``) and ``dd[h, i] = Σ_j dC[h, ij]``."""
    n = indptr.shape[0] - 1
    heads = d.shape[0]
    width = X.shape[1] // heads
    for i in nb.prange(n):
        start, end = indptr[i], indptr[i + 1]
        for h in range(heads):
            _softmax_backward_row(start, end, h, i, h * width, width, psi, indices, X, dZ,
                                  mask, use_mask, dC)
            di = d[h, i]
            acc = 0.0
            for p in range(start, end):
                if not di + s[h, indices[p]] > 0:      # LeakyReLU'(C) = 1 if C > 0 else α
                    dC[h, p] = dC[h, p] * slope
                acc += dC[h, p]
            dd[h, i] = acc


@nb.njit(parallel=True, cache=True, fastmath=_FAST)
def dot_backward_rows(indptr, indices, P, Q, beta, X, c, use_c, dZ, psi, dE, dP):
    """Row pass of the dot-score backward (messages ``c_j X_j``): ``dE`` (edge gradient of
    ``e``) from ``dΨ_ij = c_j ⟨dZ_i, X_j⟩``, ``dP_i = β Σ_j dE_ij Q_j``, and per row
    ``Σ_j dE_ij ⟨P_i, Q_j⟩`` (returned; its sum is ``dβ``).

    That row sum is ``a_i − t_i b_i`` with ``a_i = Σ_j Ψ_ij dΨ_ij q_ij``,
    ``b_i = Σ_j Ψ_ij q_ij``, ``t_i = Σ_j Ψ_ij dΨ_ij`` and ``q_ij = ⟨P_i, Q_j⟩``, so every
    ``q_ij`` is computed once, in the same pass as ``dΨ_ij`` (float64 accumulators).
    """
    n = indptr.shape[0] - 1
    k = P.shape[1]
    dbeta_rows = np.zeros(n, dtype=np.float64)
    for i in nb.prange(n):
        start, end = indptr[i], indptr[i + 1]
        for col in range(k):
            dP[i, col] = 0
        t = 0.0
        a = 0.0
        b = 0.0
        for p in range(start, end):
            j = indices[p]
            g = _dot(dZ[i], X[j])
            if use_c:
                g = g * c[j]
            q = _dot(P[i], Q[j])
            w = psi[0, p]
            dE[0, p] = g
            t += w * g
            a += w * g * q
            b += w * q
        dbeta_rows[i] = a - t * b
        for p in range(start, end):
            dE[0, p] = psi[0, p] * (dE[0, p] - t)
            _axpy(dP[i], beta * dE[0, p], Q[indices[p]])
    return dbeta_rows


@nb.njit(parallel=True, cache=True, fastmath=_FAST)
def column_pass(colptr, perm, rows, dE, psi, mask, use_mask, dZ, P, beta, colsum, dX, dQ):
    """Column pass of both backwards, for every source ``j`` and head ``h``:

    ``colsum[h, j] = Σ_i dE[h, ij]`` (GAT's ``ds``), ``dX_j = Σ_i Ψ_ij M_ij dZ_i`` (the
    product with ``Sᵀ``) and, when ``dQ`` has rows, ``dQ_j = β Σ_i dE_ij P_i`` (dot score).
    """
    n_src = colptr.shape[0] - 1
    heads = dE.shape[0]
    width = dX.shape[1] // heads
    want_q = dQ.shape[0] > 0
    k = P.shape[1]
    for j in nb.prange(n_src):
        for c in range(dX.shape[1]):
            dX[j, c] = 0
        if want_q:
            for c in range(k):
                dQ[j, c] = 0
        for h in range(heads):
            base = h * width
            acc = 0.0
            for q in range(colptr[j], colptr[j + 1]):
                p = perm[q]
                i = rows[q]
                acc += dE[h, p]
                w = psi[h, p]
                if use_mask:
                    w = w * mask[h, p]
                if w != 0:
                    _axpy(dX[j, base:base + width], w, dZ[i, base:base + width])
                if want_q:
                    _axpy(dQ[j], beta * dE[h, p], P[i])
            colsum[h, j] = acc
