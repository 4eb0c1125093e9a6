r"""Rows by segment through their own parameters: PyG's ``HeteroLinear``, and the sum of
several such maps of several arrays.

.. math::
    Y_S = \sum_m X^{(m)}_{S,\,:k_m} W^{(m)}_S + b_S \quad \text{for each segment } S,
    \qquad Y_i = 0 \text{ for a row } i \text{ in no segment}

The backward, for the cotangent :math:`\bar Y`:

.. math::
    \bar X^{(m)}_{S,\,:k_m} = \bar Y_S W^{(m)\top}_S, \qquad
    \bar W^{(m)}_S = X^{(m)\top}_{S,\,:k_m} \bar Y_S, \qquad
    \bar b_S = \textstyle\sum_{i \in S} \bar Y_i

(the last two reductions over vertices: a collective on a grid). The cotangent of an input is
added by the products themselves into the sum the backward already holds for it when it
offers one (:attr:`gblas_gnn.compose.tape.Node.adds`), so an input that several operations
read (a layer's input, its queries' and keys' and values' projections and a skip) gets one
array, not one per reader and their sums.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .tape import Summed, known_vertex_sum, vertex_sum
from .traced import Traced, _as_traced, _scope, record

__all__ = ["segment_linear"]


def _inputs(X) -> tuple[list[Traced], bool]:
    """The inputs as traced vertex-indexed 2-D arrays (of this process's rows, so of one
    height), and whether ``X`` was a sequence of them."""
    many = isinstance(X, (list, tuple))
    xs = [_as_traced(x) for x in (X if many else (X,))]
    if not xs:
        raise ValueError("segment_linear needs at least one input array")
    for x in xs:
        if not isinstance(x, Traced) or not x.vertex or x.value.ndim != 2:
            raise TypeError("segment_linear reads 2-D vertex-indexed arrays")
    return xs, many


def _segments(segments, xs: list[Traced], many: bool, width: int) -> list[tuple]:
    """``(rows, [W or None per input], b or None)`` per segment, each weight checked."""
    out = []
    for seg in segments:
        rows, W, b = seg
        Ws = list(W) if many else [W]
        if len(Ws) != len(xs):
            raise ValueError(f"segment_linear: a segment has {len(Ws)} weights for "
                             f"{len(xs)} inputs (one per input, None for an input it skips)")
        Ws = [None if w is None else _as_traced(w) for w in Ws]
        if all(w is None for w in Ws):
            raise ValueError("segment_linear: a segment needs at least one weight")
        for x, w in zip(xs, Ws, strict=True):
            if w is None:
                continue
            if w.vertex or w.value.ndim != 2 or w.value.shape[1] != width \
                    or w.value.shape[0] > x.value.shape[1]:
                raise ValueError(f"segment_linear: a weight of shape {w.value.shape} for rows "
                                 f"of {x.value.shape[1]} columns and {width} outputs")
        out.append((rows, Ws, None if b is None else _as_traced(b)))
    return out


def _row_cover(n: int, rows_list: Sequence) -> list:
    """The rows of ``n`` in none of ``rows_list`` (slices or index arrays), as slices when
    every segment is a slice, else as one boolean mask; a clear error when segments
    overlap (the forward would write a row twice, its backward add twice)."""
    covered = np.zeros(n, bool)
    total = 0
    for rows in rows_list:
        picked = covered[rows]
        total += picked.size
        covered[rows] = True
    if int(covered.sum()) != total:
        raise ValueError("segment_linear's segments overlap: each row belongs to one "
                         "segment at most")
    if not all(isinstance(r, slice) for r in rows_list):
        return [~covered]
    edges = np.flatnonzero(np.diff(np.concatenate([[True], covered, [True]]).astype(np.int8)))
    return [slice(int(lo), int(hi)) for lo, hi in zip(edges[::2], edges[1::2], strict=True)]


def _every_row(rows, n: int) -> bool:
    """Whether ``rows`` is the slice of all ``n`` rows in order (not reversed, not an index
    array): a product over them is then the whole array, row for row."""
    return isinstance(rows, slice) and rows.indices(n) == (0, n, 1)


def _whole(segs: list, m: int, shape: tuple) -> bool:
    """Whether input ``m`` is read by one segment, over all its rows and columns: its
    cotangent is then that segment's product ``G Wᵀ`` itself."""
    readers = [(rows, Ws[m]) for rows, Ws, _ in segs if Ws[m] is not None]
    if len(readers) != 1:
        return False
    rows, w = readers[0]
    return _every_row(rows, shape[0]) and w.value.shape[0] == shape[1]


def _rows_cotangent(ex, xp, acc, rows, G, W, piece, add: bool, sums: bool):
    """``acc[rows, :k] += G Wᵀ`` with ``add``, else ``acc[rows, :k] = G Wᵀ`` (rows this
    segment alone writes), by the product itself where the rows are one C-contiguous block:
    summed into it, or written there, with no array of the product's own to copy in
    (zeroing the block and having the product add into it was slower than such a copy:
    HGT's backward 289 → 222 ms in an A/B of 9); returns the weight's cotangent
    ``pieceᵀ G`` and, with ``sums``, ``G``'s sums over vertices (else None)."""
    k = W.shape[0]
    block = acc[rows, :k] if isinstance(rows, slice) else None
    if block is not None and block.flags.c_contiguous:
        found = ex.matmul_vjp(G, W, piece, sums=sums, **{"into" if add else "out": block})
    else:
        found = ex.matmul_vjp(G, W, piece, sums=sums)
        index = (rows if isinstance(rows, slice) else xp.asarray(rows), slice(0, k))
        if add:
            acc[index] += found[0]
        else:
            acc[index] = found[0]
    return found[1], (found[2] if sums else None)


def segment_linear(X, segments, width: int) -> Traced:
    r"""Rows by segment through their own parameters: :math:`Y_S = X_{S, :k} W + b` for each
    segment ``(S, W, b)`` (``S`` a slice or index array of this process's rows, ``W`` of
    shape ``(k, width)`` reading the first ``k`` columns of ``X``, ``b`` a row or None),
    zero rows outside every segment; segments do not overlap. PyG's ``HeteroLinear``: a
    vertex type's projection on that type's rows only, not on every row under a mask.

    ``X`` may also be a list of vertex-indexed arrays ``[X_0, X_1, …]`` (of one height):
    each segment's ``W`` is then a list with one weight per array (None for an array it does
    not read), and :math:`Y_S = \sum_m X_{m,\,S,\,:k_m} W_m + b`, with no concatenation of
    the arrays (HGT's output projection and gated skip,
    :math:`[\mathrm{GELU}(M) \,|\, X] [W ; (1 - g) I]`, is ``segment_linear([GELU(M), X],
    [(S, [W, (1 - g) I], b)], F)``).

    Segments hold the same rows on every process that holds the same vertices, so each
    parameter's cotangent :math:`X_{S,:k}^\top \bar Y_S` is the executor's reduction over
    vertices and :math:`\bar X_{S,:k} = \bar Y_S W^\top`, both from the executor's
    :meth:`~gblas_gnn.executors.Executor.matmul_vjp` (on two cores at once on ``cpu``), the
    latter added into the input's cotangent where the backward holds one (the module
    docstring)."""
    xs, many = _inputs(X)
    segs = _segments(segments, xs, many, width)
    ex = _scope().executor
    xp = ex.xp
    n = xs[0].value.shape[0]
    values = [x.value for x in xs]
    dtype = np.result_type(*(v.dtype for v in values),
                           *(w.value.dtype for _, Ws, _ in segs for w in Ws if w is not None))
    # one segment over every row (SAGE's [AGG(H) | H] [W_l; W_r], a projection with a bias):
    # its product is the output, and no row is left out
    whole = len(segs) == 1 and _every_row(segs[0][0], n)
    gaps = [] if whole else _row_cover(n, [rows for rows, _, _ in segs])
    out = None if whole else ex.zeroed_outside((n, width), dtype, gaps)
    pieces = []                                  # per segment, per input: the rows read
    for rows, Ws, b in segs:
        ps = [None if w is None else xp.ascontiguousarray(v[rows, :w.value.shape[0]])
              for v, w in zip(values, Ws, strict=True)]
        pieces.append(ps)
        # a block of rows of the output is written by the products themselves (no array of
        # the segment's own, no copy of it)
        into = out[rows] if isinstance(rows, slice) and out is not None else None
        if into is not None and not into.flags.c_contiguous:     # a reversed slice
            into = None
        y = None
        for p, w in zip(ps, Ws, strict=True):
            if w is None:
                continue
            if y is None:
                direct = into is not None and np.result_type(p.dtype, w.value.dtype) == dtype
                y = ex.linear(p, w.value, None if b is None else b.value,
                              out=into if direct else None)
            else:
                y = ex.gemm_add(y, p, w.value)
        if whole:
            out = xp.ascontiguousarray(y, dtype=dtype)
        elif y is not into:
            out[rows] = y

    def vjp(G, into):
        # per input: (its cotangent so far, how it is written): "offered" (the tape's sum,
        # added into), "fresh" (zeroed outside what the segments write, written), "whole"
        # (one segment reads it all: that product's own array), "unread" (None)
        accs = []
        for m, v in enumerate(values):
            offer = into[m]
            dtype = np.result_type(v.dtype, G.dtype)
            if all(Ws[m] is None for _, Ws, _ in segs):
                accs.append((None, "unread"))
            elif (offer is not None and tuple(offer.shape) == tuple(v.shape)
                    and offer.dtype == dtype):
                accs.append((offer, "offered"))
            elif _whole(segs, m, v.shape):
                accs.append((None, "whole"))
            else:
                acc = ex.zeroed_outside(v.shape, dtype, gaps)
                for rows, Ws, _ in segs:
                    cols = slice(None) if Ws[m] is None else slice(Ws[m].value.shape[0], None)
                    acc[rows if isinstance(rows, slice) else xp.asarray(rows), cols] = 0
                accs.append((acc, "fresh"))
        grads = []
        for (rows, Ws, b), ps in zip(segs, pieces, strict=True):
            # the cotangent itself when the segment is every row of it, in order and
            # contiguous (its sum over vertices may be known: tape.vertex_sum)
            g = G if _every_row(rows, n) and G.flags.c_contiguous else \
                xp.ascontiguousarray(G[rows])
            # the bias's cotangent: sums the caller had, else taken by the first product
            # as it reads g (sums=True)
            db = None if b is None else known_vertex_sum(g)
            for m, (w, p) in enumerate(zip(Ws, ps, strict=True)):
                if w is None:
                    continue
                acc, mode = accs[m]
                sums = b is not None and db is None
                if mode == "whole":
                    found = ex.matmul_vjp(g, w.value, p, sums=sums)
                    accs[m] = (found[0], "fresh")
                    dw, summed = found[1], (found[2] if sums else None)
                else:
                    dw, summed = _rows_cotangent(ex, xp, acc, rows, g, w.value, p,
                                                 mode == "offered", sums)
                db = summed if sums else db
                grads.append(dw)
            if b is not None:
                grads.append((vertex_sum(ex, g) if db is None else db).reshape(b.value.shape))
        return (*(Summed(acc) if mode == "offered" else acc for acc, mode in accs), *grads)

    parents = list(xs)
    for _, Ws, b in segs:
        parents += [w for w in Ws if w is not None] + ([] if b is None else [b])
    return record(out, parents, vjp, True, fresh=True, adds=True)
