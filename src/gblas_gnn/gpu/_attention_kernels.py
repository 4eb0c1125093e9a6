r"""Fused CUDA kernels of the attention layers, the same passes as the cpu executor's.

Per head :math:`h` and target row :math:`i`,

.. math::
    e_{ij} = \mathrm{score}(i, j), \qquad
    \Psi_{ij} = \frac{\exp(e_{ij} - \max_j e_{ij})}{\sum_j \exp(e_{ij} - \max_j e_{ij})},
    \qquad Z_i = Z^0 + \sum_j \Psi_{ij} M_{ij} c_j X_j

with the additive score :math:`\mathrm{LeakyReLU}(d_i + s_j)` (GAT) or the dot score
:math:`\beta \langle P_i, Q_j \rangle` (AGNN, softmax VA); ``M`` optional dropout scales,
``c`` optional message scales, ``Z⁰`` zeros or, in inference, the bias.

**Forward, one pass per row** (a group per (row, head)): the lanes compute the row's scores
(striding over its edges, or over the features with a group sum per edge for the dot score),
the row max and the sum of exponentials as group reductions, then the aggregation: the row's
normalised weights and source columns are staged in shared memory, :data:`LANES` at a time,
and each lane gathers its feature columns of the ``X_j`` rows (coalesced) into registers.

**Backward, one pass per column** (a group per (column, head)) over the CSC view: with
``t_i = ⟨dZ_i, Z_i⟩`` (:func:`~._sparse_kernels.head_dots`) the softmax needs no row pass;
per in-edge the lanes read ``dZ_i`` once for both the dot product ``⟨dZ_i, X_j⟩`` (a group
sum) and the update of ``dX_j``; the edge gradient goes to its CSR position for the row sums.
Features wider than a group take one more pass over the column per extra tile of LANES
columns. No atomics anywhere: every output has one writer.

Arrays: features ``(n, heads·w)`` (head ``h`` = columns ``h·w … (h+1)·w``), scores and
edge values ``(heads, ·)``; ``psiT``/``maskT`` are CSC ordered
(:func:`~._edge_kernels.gather_heads`).
"""

from __future__ import annotations

import math

from numba import cuda

from ._device import GROUPS_PER_BLOCK, LANES
from ._lanes import group, group_max, group_sum, group_sync, groups, lane

__all__ = ["additive_forward", "dot_forward", "additive_backward", "dot_backward"]


@cuda.jit(device=True)
def _softmax_aggregate_row(i, h, start, end, m, psi, indices, X, mask, use_mask, c, use_c,
                           Z0, Z):
    r"""From the row's scores ``psi[h, start:end]`` and their maximum ``m``: Ψ in place of the
    scores and ``Z[i, h·w + col] = Z0[h, col] + Σ_e Ψ_e M_e c_j X[j, h·w + col]`` for every
    feature column of the head. Each lane works on the edges ``start + lane + t·LANES``, the
    ones it wrote the scores of, so no barrier is needed before; the aggregation stages the
    row's weights and source columns in shared memory, LANES edges at a time."""
    sw = cuda.shared.array((GROUPS_PER_BLOCK, LANES), X.dtype)
    sj = cuda.shared.array((GROUPS_PER_BLOCK, LANES), indices.dtype)
    g = cuda.threadIdx.x // LANES
    ln = lane()
    total = X.dtype.type(0)
    for e in range(start + ln, end, LANES):
        v = math.exp(psi[h, e] - m)
        psi[h, e] = v
        total += v
    total = group_sum(total)
    inv = X.dtype.type(1) / total if end > start else X.dtype.type(0)
    w = Z0.shape[1]
    off = h * w
    for col0 in range(0, w, LANES):
        col = col0 + ln
        acc = Z0[h, col] if col < w else Z.dtype.type(0)
        for base in range(start, end, LANES):
            e = base + ln
            if e < end:
                j = indices[e]
                p = psi[h, e]
                if col0 == 0:                   # later tiles read Ψ back
                    p *= inv
                    psi[h, e] = p
                if use_mask:
                    p *= mask[h, e]
                if use_c:
                    p *= c[j]
                sw[g, ln] = p
                sj[g, ln] = j
            group_sync()
            if col < w:
                for t in range(min(LANES, end - base)):
                    acc += sw[g, t] * X[sj[g, t], off + col]
            group_sync()
        if col < w:
            Z[i, off + col] = acc


@cuda.jit
def additive_forward(indptr, indices, d, s, slope, X, mask, use_mask, psi, Z0, Z):
    """GAT forward: ``psi[h] = Ψ_h`` with ``e_ij = LeakyReLU(d[h, i] + s[h, j])`` and
    ``Z[:, head h] = Z0[h] + (Ψ_h ⊙ M_h) X[:, head h]``. Item: (row, head)."""
    heads = d.shape[0]
    ln = lane()
    for item in range(group(), (indptr.shape[0] - 1) * heads, groups()):
        i, h = divmod(item, heads)
        start, end = indptr[i], indptr[i + 1]
        di = d[h, i]
        m = X.dtype.type(-math.inf)
        for e in range(start + ln, end, LANES):
            v = di + s[h, indices[e]]
            v = v if v > 0 else v * slope
            psi[h, e] = v
            m = max(m, v)
        _softmax_aggregate_row(i, h, start, end, group_max(m), psi, indices, X, mask,
                               use_mask, X[0], False, Z0, Z)


@cuda.jit
def dot_forward(indptr, indices, P, Q, beta, X, c, use_c, psi, Z0, Z):
    """Dot-score forward (one head): ``e_ij = β ⟨P_i, Q_j⟩``, ``psi[0] = Ψ``,
    ``Z = Z0 + Ψ (diag(c) X)``. Item: a row; a group sum per edge for the score."""
    k = P.shape[1]
    ln = lane()
    for i in range(group(), indptr.shape[0] - 1, groups()):
        start, end = indptr[i], indptr[i + 1]
        m = X.dtype.type(-math.inf)
        for e in range(start, end):
            j = indices[e]
            part = X.dtype.type(0)
            for col in range(ln, k, LANES):
                part += P[i, col] * Q[j, col]
            v = beta * group_sum(part)            # the same on every lane
            if (e - start) % LANES == ln:         # kept by the lane that reads it next
                psi[0, e] = v
            m = max(m, v)
        _softmax_aggregate_row(i, 0, start, end, m, psi, indices, X, psi, False, c, use_c, Z0,
                               Z)


@cuda.jit
def additive_backward(colptr, perm, crow, d, s, t, slope, X, dZ, psiT, maskT, use_mask, dC,
                      ds, dX):
    r"""The GAT backward in one pass per (column ``j``, head ``h``):

    .. math::
        dC_{ij} = \mathrm{LeakyReLU}'(d_i + s_j)\,(W_{ij} \langle dZ_i, X_j \rangle -
                  \Psi_{ij} t_i), \qquad ds_j = \textstyle\sum_i dC_{ij}, \qquad
        dX_j = \textstyle\sum_i W_{ij}\, dZ_i

    with ``W = Ψ ⊙ M``; ``dC`` is written at CSR positions (``perm``)."""
    n_src = colptr.shape[0] - 1
    heads = d.shape[0]
    w = X.shape[1] // heads
    ln = lane()
    zero = X.dtype.type(0)
    for item in range(group(), n_src * heads, groups()):
        j, h = divmod(item, heads)
        off = h * w
        sj = s[h, j]
        start, end = colptr[j], colptr[j + 1]
        acc_s = zero
        acc_x = zero
        for q in range(start, end):
            i = crow[q]
            p = psiT[h, q]
            wq = p * maskT[h, q] if use_mask else p
            part = zero
            for col in range(ln, w, LANES):
                part += dZ[i, off + col] * X[j, off + col]
            v = wq * group_sum(part) - p * t[h, i]
            if not d[h, i] + sj > 0:            # LeakyReLU'(C) = 1 if C > 0 else slope
                v = v * slope
            if ln == 0:
                dC[h, perm[q]] = v
            acc_s += v
            if ln < w:
                acc_x += wq * dZ[i, off + ln]
        if ln == 0:
            ds[h, j] = acc_s
        if ln < w:
            dX[j, off + ln] = acc_x
        for col in range(ln + LANES, w, LANES):          # feature tiles beyond the first
            acc = zero
            for q in range(start, end):
                wq = psiT[h, q] * maskT[h, q] if use_mask else psiT[h, q]
                acc += wq * dZ[crow[q], off + col]
            dX[j, off + col] = acc


@cuda.jit
def dot_backward(colptr, perm, crow, P, Q, beta, X, c, use_c, dZ, t, psiT, dE, dQ, dX,
                 dbeta_cols):
    r"""The column pass of the dot-score backward (messages ``c_j X_j``), per source ``j``:

    .. math::
        dE_{ij} = \Psi_{ij} (c_j \langle dZ_i, X_j \rangle - t_i), \qquad
        dQ_j = \beta \textstyle\sum_i dE_{ij} P_i, \qquad
        dX_j = \textstyle\sum_i \Psi_{ij}\, dZ_i

    ``dE`` at CSR positions (for ``dP = β dE Q``), ``dbeta_cols[j] = Σ_i dE_ij ⟨P_i, Q_j⟩``
    (float64; their sum is ``dβ``)."""
    n_src = colptr.shape[0] - 1
    k = P.shape[1]
    w = X.shape[1]
    ln = lane()
    zero = X.dtype.type(0)
    for j in range(group(), n_src, groups()):
        cj = c[j] if use_c else X.dtype.type(1)
        start, end = colptr[j], colptr[j + 1]
        acc_b = 0.0
        acc_q = zero
        acc_x = zero
        for q in range(start, end):
            i = crow[q]
            p = psiT[0, q]
            part = zero
            for col in range(ln, w, LANES):
                part += dZ[i, col] * X[j, col]
            e = p * (cj * group_sum(part) - t[0, i])
            if ln == 0:
                dE[0, perm[q]] = e
            part = zero
            for col in range(ln, k, LANES):
                part += P[i, col] * Q[j, col]
            acc_b += e * group_sum(part)
            if ln < k:
                acc_q += beta * e * P[i, ln]
            if ln < w:
                acc_x += p * dZ[i, ln]
        if ln == 0:
            dbeta_cols[j] = acc_b
        if ln < k:
            dQ[j, ln] = acc_q
        if ln < w:
            dX[j, ln] = acc_x
        if k > LANES:
            group_sync()                        # lane 0's dE writes, read by every lane
        for col in range(ln + LANES, k, LANES):          # tiles beyond the first
            acc = zero
            for q in range(start, end):
                acc += beta * dE[0, perm[q]] * P[crow[q], col]
            dQ[j, col] = acc
        for col in range(ln + LANES, w, LANES):
            acc = zero
            for q in range(start, end):
                acc += psiT[0, q] * dZ[crow[q], col]
            dX[j, col] = acc
