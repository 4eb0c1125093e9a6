"""The contexts of the fused attention paths, shared by the executors that fuse them (``cpu``,
``dist``, ``cuda``).

A fused forward keeps the pattern it ran on (the executor's own buffers of ``A``), the
gathered rows ``X``, Ψ in CSR order, the row counts for ``mean`` and the output ``Z`` itself:
the backward's softmax term is ``t_i = ⟨dZ_i, Z_i⟩``, so it needs no pass over the rows.
Arrays are those of the executor's array module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["FusedContext", "FusedAdditiveContext", "FusedDotContext", "fused_output",
           "output_gradient", "column_pass_inputs"]


@dataclass
class FusedContext:
    """What the fused backward passes need from the forward: the pattern, the kept output
    ``Z`` and the row counts of ``mean`` (None for ``sum``), the gathered rows ``X`` and Ψ
    (heads, nnz) in CSR order."""

    aggr: str
    pattern: Any
    counts: Any
    X: Any
    psi: Any
    Z: Any = None


@dataclass
class FusedAdditiveContext(FusedContext):
    """The fused GAT forward (``additive_attention``)."""

    d: Any = None                   # (heads, n) target scores
    s: Any = None                   # (heads, n_src) source scores
    mask: Any = None                # (heads, nnz) dropout scales, or a (1, 1) placeholder
    use_mask: bool = False
    slope: Any = 0.2


@dataclass
class FusedDotContext(FusedContext):
    """The fused dot-score forward (``dot_attention``)."""

    P: Any = None
    Q: Any = None
    beta: Any = 1.0
    c: Any = None                   # the message scale, or a (1,) placeholder
    use_c: bool = False


def fused_output(Z, ctx: FusedContext, keep_context: bool, bias=None):
    """The returned output (``Z`` divided by the row counts for ``mean``, plus ``bias``)
    and, with ``keep_context``, the context holding ``Z`` itself: the backward's softmax
    term is ``t_i = ⟨dZ_i, Z_i⟩``, so the context keeps an array the caller cannot modify
    (``Z`` itself when the output is a new array anyway, else a copy)."""
    if ctx.counts is not None:
        out = Z / ctx.counts
        if bias is not None:
            out += bias
    elif bias is None:
        out = Z
    elif keep_context:
        out = Z + bias              # one pass: no copy of Z, then an addition
    else:
        Z += bias
        out = Z
    if not keep_context:
        return out
    ctx.Z = Z.copy() if out is Z else Z
    return out, ctx


def output_gradient(dZ, ctx: FusedContext):
    """The gradient with respect to the kept ``Z``: ``dZ`` divided by the row counts for
    ``mean``, ``dZ`` itself for ``sum``."""
    return dZ if ctx.counts is None else dZ / ctx.counts


def column_pass_inputs(ctx: FusedAdditiveContext, to_csc):
    """``(colptr, perm, rows, psiT, maskT)``: the CSC view of the context's pattern, and Ψ
    and the dropout scales (or their placeholder) reordered into it by the executor's
    ``to_csc(perm, values)``: what the backward's pass over the columns reads."""
    colptr, perm, rows = ctx.pattern.csc()
    maskT = to_csc(perm, ctx.mask) if ctx.use_mask else ctx.mask
    return colptr, perm, rows, to_csc(perm, ctx.psi), maskT
