r"""Aggregations in which every edge weighs the same, on the ``plus_times`` SpMM kernel.

An edge program whose root is one constant ``c`` (``ops.structure(g)``, the pattern's 0/1
weights, as SAGE's and GIN's aggregations and DGL's ``copy_u`` read it) with a ``sum`` or
``mean`` sink is

.. math::
    Z_i = \frac{c}{d_i} \sum_{j \in N(i)} X_j \quad (d_i = 1 \text{ for sum}, \
    \max(|N(i)|, 1) \text{ for mean}), \qquad
    \bar X = c\, A^\top (D^{-1} \bar Z),

a pattern-only product and its transpose: no weight is read per edge. Both run on
:func:`._spmm_kernels.spmm_rows` with one value for every entry (its ``iso`` form), over the
pattern's CSR buffers and the CSC view it keeps (:meth:`~..patterns.CSRPattern.csc`), with the
row chunks of equal stored entries and the prefetch of the kernel. The generated edge kernels
would add into the output row in memory edge by edge and gather the backward's rows without
a prefetch, and were markedly slower for a mean aggregation, forward and backward
(``docs/performance.md`` has the measurement).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ...ir.program import Program, Structure
from ..patterns import CSRPattern
from ._spmm import spmm_run

__all__ = ["UniformContext", "weight", "forward", "backward"]


def weight(s: Structure) -> float | None:
    """The weight ``c`` every edge of ``s`` has, when ``s`` is a ``sum`` or ``mean``
    aggregation of messages whose root is one constant (no heads); None otherwise."""
    if s.sink not in (("aggregate", "sum"), ("aggregate", "mean")) or len(s.ops) != 1:
        return None
    op = s.ops[s.root]
    if op.kind != "const" or op.trail or [r for r, _ in s.roles] != ["x"]:
        return None
    return float(op.args[0])


@dataclass
class UniformContext:
    """What the backward needs: the pattern, the weight, the rows' divisors (None for
    ``sum``) and the messages' shape and dtype."""

    pattern: CSRPattern
    c: float
    divisors: np.ndarray | None
    x_shape: tuple
    dtype: np.dtype


def _product(pattern: CSRPattern, transposed: bool, X: np.ndarray, c: float,
             divisors: np.ndarray | None = None, scale: np.ndarray | None = None,
             into: np.ndarray | None = None) -> np.ndarray:
    """``D⁻¹ c P diag(s) X`` (``P``: the pattern, or its transpose over the kept CSC view;
    ``D = I`` without ``divisors``, ``s = 1`` without ``scale``), or that added into
    ``into``: the SpMM kernel's run with one value for every entry, each gathered row
    scaled and each output row divided as it is written, over the pattern's column tiles
    when ``X`` outgrows the cache (:func:`._spmm.tile_width`)."""
    if transposed:
        ptr, _, idx = pattern.csc()
        chunks, nrows = pattern.column_chunks, pattern.ncols
    else:
        ptr, idx, chunks, nrows = pattern.indptr, pattern.indices, pattern.chunks, pattern.nrows
    return spmm_run(ptr, idx, chunks, np.array([c], X.dtype), True, X, nrows, None, None,
                    divisors, functools.partial(pattern.column_tiles, transposed=transposed),
                    scale=scale, into=into)


def _width(shape: tuple) -> int:
    """The channels of one vertex's row (an explicit width: ``-1`` cannot be inferred for a
    graph without vertices)."""
    return int(np.prod(shape[1:], dtype=np.int64))


def forward(ex, prog: Program, keep: bool):
    """``(Z, ctx)`` of the aggregation (see the module docstring); ``ctx`` None unless
    ``keep``."""
    s = prog.structure
    dt = np.dtype(s.dtype)
    pattern = ex.csr_pattern(prog.pattern)
    x = prog.operands[0].value
    X = np.ascontiguousarray(np.asarray(x, dtype=dt).reshape(pattern.ncols, _width(np.shape(x))))
    c = weight(s)
    divisors = None
    if s.sink[1] == "mean":
        divisors = pattern.divisors(dt)[:, None]
    Z = _product(pattern, False, X, c, divisors)
    ctx = UniformContext(pattern, c, divisors, tuple(np.shape(x)), dt) if keep else None
    return Z.reshape((pattern.nrows, *np.shape(x)[1:])), ctx


def backward(ex, ctx: UniformContext, dout, into=None) -> list:
    """The messages' cotangent ``c Aᵀ (D⁻¹ dZ)``, as the one operand's: each row of ``dZ``
    scaled by ``c / d_i`` as the transposed product gathers it (no scaled copy of ``dZ``),
    and added into ``into[0]`` when that is the operand's cotangent so far (an array of the
    messages' shape and dtype): then ``into[0]`` itself is returned."""
    p = ctx.pattern
    k = _width(ctx.x_shape)
    dZ = np.ascontiguousarray(np.asarray(dout, dtype=ctx.dtype).reshape(p.nrows, k))
    scale = None if ctx.divisors is None else ctx.c / ctx.divisors
    offer = None if into is None else into[0]
    acc = None
    if (isinstance(offer, np.ndarray) and offer.shape == tuple(ctx.x_shape)
            and offer.dtype == ctx.dtype and offer.flags.c_contiguous
            and not np.may_share_memory(offer, dZ)):
        acc = offer.reshape(p.ncols, k)
    dX = _product(p, True, dZ, 1.0 if scale is not None else ctx.c, scale=scale, into=acc)
    return [offer if acc is not None else dX.reshape(ctx.x_shape)]
