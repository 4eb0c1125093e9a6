r"""Semirings for ``S ⊕ H`` aggregation (paper §4.3): objects, registry, fast lowerings.

.. math::

    Z_{i,c} = \bigoplus_{j:(i,j)\in S} S_{i,j} \otimes H_{j,c}
    \qquad(\text{a row of } S \text{ storing nothing gives } 0)

Shipped: ``plus_times`` (sum), ``min_plus`` / ``max_plus`` (tropical), ``max_times``,
``min_times`` and ``avg`` (weighted mean over (value, weight) pairs).  A :class:`Semiring`
is the meaning (⊕, ⊗, identities); each executor registers how it runs one (the ``cpu``
executor's lowerings and GraphBLAS general forms are in
:mod:`gblas_gnn.executors.cpu.semiring_lowering`, where the tests prove each lowering equal to
its general form).

>>> import gblas_gnn.semirings as sr
>>> sr.get("max_plus").spmm(S, H)                           # doctest: +SKIP
>>> sr.register("lse", lambda x, y: max(x, y), "plus", add_identity=-inf)  # doctest: +SKIP
"""

from .averaging import AVG as avg
from .builtin import BUILTIN as _BUILTIN
from .core import Semiring, check_operands, negative_weight_error
from .registry import UnknownSemiringError, get, names, register

plus_times = _BUILTIN["plus_times"]
min_plus = _BUILTIN["min_plus"]
max_plus = _BUILTIN["max_plus"]
max_times = _BUILTIN["max_times"]
min_times = _BUILTIN["min_times"]

__all__ = [
    "Semiring",
    "UnknownSemiringError",
    "avg",
    "check_operands",
    "get",
    "max_plus",
    "max_times",
    "min_plus",
    "min_times",
    "names",
    "negative_weight_error",
    "plus_times",
    "register",
]
