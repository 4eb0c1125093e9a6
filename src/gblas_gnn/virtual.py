"""Virtual n×n tensors: lazy expressions that are only ever evaluated under a sparse mask.

The paper's building blocks ``rep(x) = x 1ᵀ``, ``rep(x)ᵀ = 1 xᵀ`` and ``X Yᵀ`` are dense
n×n in the mathematics but must never be built (rule 1 of docs/design.md). Here they are leaves
of an expression (:mod:`gblas_gnn.compose.expr`, which also holds the rank-3 ``rep(X)`` of an
(n, f) array); ``+ − × ÷``, numbers, arrays broadcast over the channels and the elementwise
functions build larger ones, ``E @ a`` contracts the channels, and ``A * expr`` evaluates the
expression *only on A's stored entries*.

``np.asarray(expr)`` materialises the dense tensor only for toy sizes
(at most :data:`MATERIALIZE_LIMIT` entries) and refuses otherwise.
"""

from __future__ import annotations

import graphblas as gb

from ._graphblas_adapter import structural_mask_type
from .compose.expr import MATERIALIZE_LIMIT, Expr, expr_binary, factor, masked, rep

__all__ = ["MATERIALIZE_LIMIT", "Virtual", "rep", "factor", "masked"]

#: the base class of lazy tensors (virtual or sparse)
Virtual = Expr


def _install_matrix_mul() -> None:
    """Let ``graphblas.Matrix`` arithmetic with an expression build the expression (``A *
    expr`` is :func:`masked`; ``E + expr`` evaluates ``expr`` on E's entries), where
    python-graphblas would raise, and ``A.S * expr`` mean the structural mask."""
    if getattr(gb.Matrix.__mul__, "_gblas_gnn", False):
        return

    def defer(name: str, lazy):
        original = getattr(gb.Matrix, name)

        def method(self, other):
            if isinstance(other, Expr):
                return lazy(self, other)
            return original(self, other)

        method._gblas_gnn = True
        setattr(gb.Matrix, name, method)

    defer("__mul__", masked)
    defer("__rmul__", masked)
    for name, op, swap in (("__add__", "add", False), ("__radd__", "add", True),
                           ("__sub__", "sub", False), ("__rsub__", "sub", True),
                           ("__truediv__", "div", False), ("__rtruediv__", "div", True)):
        defer(name, lambda self, other, op=op, swap=swap:
              expr_binary(op, other, self) if swap else expr_binary(op, self, other))
    mask_type = structural_mask_type()
    mask_mul = getattr(mask_type, "__mul__", None)

    def structural_mul(self, other):
        if isinstance(other, Expr):
            return masked(self.parent, other, structural=True)
        if mask_mul is None:
            return NotImplemented
        return mask_mul(self, other)

    mask_type.__mul__ = structural_mul


_install_matrix_mul()
