"""The real and tropical semirings the library ships (their meaning).

==========  ========================  ===========  ===========  ===============
name        ``Z[i,c]`` (stored j)     ⊕ identity   ⊗ identity   annihilator
==========  ========================  ===========  ===========  ===============
plus_times  ``Σ_j S[i,j]·H[j,c]``     0            1            0
min_plus    ``min_j S[i,j]+H[j,c]``   +∞           0            +∞
max_plus    ``max_j S[i,j]+H[j,c]``   −∞           0            −∞
max_times   ``max_j S[i,j]·H[j,c]``   −∞           1            none
min_times   ``min_j S[i,j]·H[j,c]``   +∞           1            none
==========  ========================  ===========  ===========  ===============

Semiring laws (checked by ``tests/test_semirings_laws.py``):

* ``plus_times`` on ℝ: the usual ring laws; annihilator 0.
* ``min_plus`` on ℝ ∪ {+∞} and ``max_plus`` on ℝ ∪ {−∞}: all laws, ⊗ identity 0,
  annihilator = the ⊕ identity (±∞).
* ``max_times`` / ``min_times``: ⊗ distributes over ⊕ only for a **nonnegative**
  left/right factor (``a·max(b,c) = min(ab, ac)`` for ``a < 0``).  Their ⊕
  identities ``∓∞`` are not annihilated by ``×`` (``0·∞`` is NaN), so
  ``annihilator`` is None; on ℝ≥0 ``max_times`` is the semiring ``(max, ×, 0, 1)``
  with annihilator 0.  As SpMM operators they are still well defined for any
  finite weights (no ``∞`` is ever multiplied).

How each runs on the ``cpu`` executor is in
:mod:`gblas_gnn.executors.cpu.semiring_lowering`.
"""

from __future__ import annotations

import operator

import graphblas as gb
import numpy as np

from .core import Semiring

__all__ = ["BUILTIN", "make_builtin"]


def make_builtin() -> dict[str, Semiring]:
    """Build the shipped real and tropical semirings (name → Semiring)."""
    inf = float("inf")
    specs = [
        # name, ⊕ (numpy, python, graphblas monoid), ⊗ (numpy, python, graphblas op),
        # ⊕ identity, ⊗ identity, annihilator, formula
        ("plus_times", np.add, operator.add, "plus", np.multiply, operator.mul, "times",
         0.0, 1.0, 0.0, "Z[i,c] = sum_j S[i,j] * H[j,c]"),
        ("min_plus", np.minimum, min, "min", np.add, operator.add, "plus", inf, 0.0, inf,
         "Z[i,c] = min_j S[i,j] + H[j,c]"),
        ("max_plus", np.maximum, max, "max", np.add, operator.add, "plus", -inf, 0.0, -inf,
         "Z[i,c] = max_j S[i,j] + H[j,c]"),
        ("max_times", np.maximum, max, "max", np.multiply, operator.mul, "times", -inf, 1.0,
         None, "Z[i,c] = max_j S[i,j] * H[j,c]"),
        ("min_times", np.minimum, min, "min", np.multiply, operator.mul, "times", inf, 1.0,
         None, "Z[i,c] = min_j S[i,j] * H[j,c]"),
    ]
    out = {}
    for (name, add, py_add, gb_add, mul, py_mul, gb_mul, e_add, e_mul, zero,
         formula) in specs:
        out[name] = Semiring(
            name=name, add=add, mul=mul, add_identity=e_add, mul_identity=e_mul,
            annihilator=zero, formula=formula, add_op=getattr(gb.monoid, gb_add),
            mul_op=getattr(gb.binary, gb_mul), scalar_add=py_add, scalar_mul=py_mul,
            mul_grad=MUL_GRADS[gb_mul],
        )
    return out


#: the partial derivatives (∂/∂s, ∂/∂h) of the shipped ⊗ operators
MUL_GRADS = {"times": (lambda s, h: h, lambda s, h: s),
             "plus": (lambda s, h: 1.0, lambda s, h: 1.0)}


BUILTIN = make_builtin()
