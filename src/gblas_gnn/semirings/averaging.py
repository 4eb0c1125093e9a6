"""The averaging semiring ``avg`` (paper §4.3): weighted-mean aggregation over pairs.

Carrier: pairs ``(v, w)`` = (value, weight).  ``⊗`` lifts an edge weight ``s``
and a feature ``h`` to a pair, ``⊕`` merges two pairs into their weighted mean:

.. math::

    s \\otimes h = (h, s), \\qquad
    (v_1, w_1) \\oplus (v_2, w_2) =
    \\Bigl(\\frac{w_1 v_1 + w_2 v_2}{w_1 + w_2},\\; w_1 + w_2\\Bigr),

with the conventions: a zero-weight operand returns the other pair unchanged
(so ``(0, 0)`` is an exact two-sided identity), ``0 ⊗ h = (0, 0)``, and a merge
whose weights cancel to 0 gives ``(0, 0)``.  The SpMM reads out the value
component, so

.. math::

    Z_{i,c} = \\frac{\\sum_j S_{i,j} H_{j,c}}{\\sum_j S_{i,j}}
    \\quad(\\text{a row with no stored entry, or only zero weights} \\to 0).

What holds (``tests/test_semirings_laws.py`` checks it): on pairs with
**positive** weights plus ``(0, 0)``, ``⊕`` is commutative (exactly, in floating
point), has identity ``(0, 0)`` (exactly), and is associative in exact arithmetic
(the mean form is isomorphic to ``(Σ w v, Σ w)`` with componentwise ``+``) -- in
floating point up to rounding.  Scaling the weights by ``c ≥ 0``,
``c·(v, w) = (v, c w)``, distributes over ``⊕``, is associative, has identity 1,
and ``0·p = (0, 0)`` annihilates; ``s ⊗ h = s·(h, 1)``.  With mixed-sign weights
associativity fails (a partial weight sum can vanish, so the result depends on
the merge order), hence :meth:`~gblas_gnn.semirings.Semiring.spmm` with ``avg``
rejects negative weights with a ``ValueError``.  ``⊗`` maps scalars to pairs, so
"⊗ associative" is the scaling-action law above; there is no ⊗ identity element
(``mul_identity`` is None) and the annihilator is the weight 0.

How it runs on the ``cpu`` executor (a GraphBLAS user-defined pair type as the general
form, two factory products and a division as the fast lowering) is in
:mod:`gblas_gnn.executors.cpu.semiring_lowering`.
"""

from __future__ import annotations

import numpy as np

from .core import Semiring

__all__ = ["AVG", "add", "make_avg", "mul", "readout", "scale"]


# -- numpy scalar ops on pairs stored as (..., 2) arrays [value, weight] -------------
def add(p, q) -> np.ndarray:
    """``p ⊕ q`` for pairs given as arrays of shape ``(..., 2)`` = (value, weight)."""
    p = np.asarray(p)
    q = np.asarray(q)
    v1, w1, v2, w2 = p[..., 0], p[..., 1], q[..., 0], q[..., 1]
    w = w1 + w2
    with np.errstate(divide="ignore", invalid="ignore"):
        v = (w1 * v1 + w2 * v2) / w
    v = np.where(w == 0, 0, v)
    v = np.where(w2 == 0, v1, v)
    v = np.where(w1 == 0, v2, v)
    w = np.where(w2 == 0, w1, w)
    w = np.where(w1 == 0, w2, w)
    return np.stack([v, w], axis=-1).astype(np.result_type(p, q), copy=False)


def mul(s, h) -> np.ndarray:
    """``s ⊗ h = (h, s)`` (and ``0 ⊗ h = (0, 0)``) as an array of shape ``(..., 2)``."""
    s, h = np.broadcast_arrays(np.asarray(s), np.asarray(h))
    zero = s == 0
    return np.stack([np.where(zero, 0, h), np.where(zero, 0, s)], axis=-1).astype(
        np.result_type(s, h), copy=False
    )


def scale(c, p) -> np.ndarray:
    """The weight-scaling action ``c·(v, w) = (v, c w)``; ``0·p = (0, 0)``, ``s ⊗ h = s·(h, 1)``."""
    p = np.asarray(p)
    c = np.asarray(c)
    w = c * p[..., 1]
    v = np.where(w == 0, 0, p[..., 0])
    return np.stack([v, np.where(w == 0, 0, w)], axis=-1).astype(
        np.result_type(c, p), copy=False
    )


def readout(acc) -> np.ndarray:
    """The value component of accumulated pairs ``(..., 2)``; 0 where the weight is 0."""
    acc = np.asarray(acc)
    return np.where(acc[..., 1] > 0, acc[..., 0], 0).astype(acc.dtype, copy=False)


def make_avg() -> Semiring:
    """Build the ``avg`` :class:`~gblas_gnn.semirings.Semiring`."""
    return Semiring(
        name="avg",
        add=add,
        mul=mul,
        add_identity=(0.0, 0.0),
        mul_identity=None,
        annihilator=0.0,
        formula="Z[i,c] = sum_j S[i,j] H[j,c] / sum_j S[i,j]  (weights >= 0)",
        readout=readout,
        nonnegative_weights=True,
        divides_by_weights=True,
    )


AVG = make_avg()
