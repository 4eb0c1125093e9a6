"""How the ``cuda`` executor runs semirings: one SpMM kernel per ⊕/⊗ pair.

==========  ===========================================  ================================
name        kernel                                       ⊕ identity (start of each row)
==========  ===========================================  ================================
plus_times  :func:`~._sparse_kernels.make_spmm` (+, ×)   0
min_plus    ``make_spmm`` (min, +)                       +∞
max_plus    ``make_spmm`` (max, +)                       −∞
max_times   ``make_spmm`` (max, ×)                       −∞
min_times   ``make_spmm`` (min, ×)                       +∞
avg         :func:`~._sparse_kernels.spmm_avg`           Σ s h / Σ s, in one pass
user        ``make_spmm`` of the semiring's scalar ⊕ and ⊗, compiled as device functions
==========  ===========================================  ================================

``Sᵀ ⊕ H`` runs the same kernel over the pattern's CSC view. A user semiring whose scalar
operators numba cannot compile for the device, or that has none, runs on the host through the
interface's reference lowering (two counted copies).
"""

from __future__ import annotations

import math
import operator

from numba import cuda

from ..semirings.algebra import MAX_PLUS, MAX_TIMES, MIN_PLUS, MIN_TIMES, PLUS_TIMES
from ._device import inline_device
from ._lanes import add, maximum, minimum, mul
from ._sparse_kernels import make_spmm

__all__ = ["SHIPPED", "device_op", "user_spmm"]


@inline_device
def _sub(a, b):
    return a - b


@inline_device
def _div(a, b):
    return a / b


#: the kernels of the shipped semirings' algebras: what ⊕ and ⊗ are → (SpMM kernel, ⊕
#: identity); any semiring with one of these algebras runs on it
SHIPPED = {
    PLUS_TIMES: (make_spmm(add, mul), 0.0),
    MIN_PLUS: (make_spmm(minimum, add), math.inf),
    MAX_PLUS: (make_spmm(maximum, add), -math.inf),
    MAX_TIMES: (make_spmm(maximum, mul), -math.inf),
    MIN_TIMES: (make_spmm(minimum, mul), math.inf),
}

# Python's built-in operators are not numba functions: their device forms
_BUILTIN = {operator.add: add, operator.mul: mul, min: minimum, max: maximum,
            operator.sub: _sub, operator.truediv: _div}


def device_op(fn):
    """A device function computing ``fn(a, b)`` (a Python function of two scalars)."""
    found = _BUILTIN.get(fn)
    return found if found is not None else cuda.jit(device=True)(fn)


def user_spmm(sr):
    """``(kernel, identity)`` for a user semiring with scalar operators and a finite or
    infinite ⊕ identity, or None when it has neither."""
    if sr.scalar_add is None or sr.scalar_mul is None:
        return None
    try:
        identity = float(sr.add_identity)
    except (TypeError, ValueError):        # none, or not a scalar (a pair carrier)
        return None
    return make_spmm(device_op(sr.scalar_add), device_op(sr.scalar_mul)), identity
