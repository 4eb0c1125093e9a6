r"""The counter-based uniform numbers of :mod:`gblas_gnn.executors._random` as numba kernels.

Same arithmetic, modulo :math:`2^{64}` in ``uint64`` (every operand is cast: numba turns a
mix of signed and unsigned integers into float64), serial kernels over a range of rows that
run on the threads through the one driver (:mod:`._shares`), so a mask costs one pass instead
of the dozen array passes of the numpy form.
``tests/test_executor_conformance.py`` holds the masks to the documented hash on every
executor.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from .._random import uniform_entry

#: ``u(key; a, b, c)`` for one entry (all uint64), compiled for the cpu
uniform = nb.njit(inline="always")(uniform_entry)


@nb.njit(cache=True, _nrt=False)
def edge_scales(indptr, indices, row_ids, col_ids, key, params, out, r0, r1):
    """``out[h, q] = scale`` where ``u(key; h, i, j) ≥ p`` for the entry ``q`` of the rows
    ``[r0, r1)`` of the CSR pattern, with ``i = row_ids[row]`` and ``j = col_ids[column]`` its
    global vertex ids, else 0 (``out``: (heads, nnz); ``key`` a ``numpy.uint64``; ``params``
    ``(p, scale)``, float64: a float argument would keep the kernel off the threads' driver,
    :mod:`._share_driver`). The bounds come unsigned and the rows are counted signed (an
    unsigned row beside a signed column index made such a kernel slower)."""
    k = key
    p, scale = params[0], params[1]
    for r in range(np.int64(r0), np.int64(r1)):
        ui = np.uint64(row_ids[r])
        for q in range(indptr[r], indptr[r + 1]):
            uj = np.uint64(col_ids[indices[q]])
            for h in range(out.shape[0]):
                out[h, q] = scale if uniform(k, np.uint64(h), ui, uj) >= p else 0


@nb.njit(cache=True, _nrt=False)
def keep_mask(rows, key, params, out, r0, r1):
    """``out[r, c] = u(key; 0, rows[r], c) ≥ p`` for the rows ``r`` in ``[r0, r1)``
    (``out``: boolean (len(rows), k); ``params``: ``(p,)``, float64, as in
    :func:`edge_scales`)."""
    k = key
    zero = np.uint64(0)
    p = params[0]
    for r in range(np.int64(r0), np.int64(r1)):
        ur = np.uint64(rows[r])
        for c in range(out.shape[1]):
            out[r, c] = uniform(k, zero, ur, np.uint64(c)) >= p
