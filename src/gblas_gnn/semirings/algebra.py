r"""What an aggregation's ⊕ and ⊗ are: the facts kernels and gradients are chosen by.

An :class:`Algebra` names the ⊕ of an aggregation (``plus``, ``max``, ``min``: the monoids
kernels know), its ⊗ (``times``, ``plus``) and whether its readout divides the ⊕-sum (by the
row's count: ``mean``; by the sum of the weights: the averaging semiring). Executors, the
kernel generators and the gradient rules read these properties, never a semiring's name, so
a user semiring ``register("mine", "max", "times")`` runs on the same fused kernels as the
shipped ``max_times``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Algebra", "KNOWN_ADD", "KNOWN_MUL", "PLUS_TIMES", "MAX_TIMES", "MIN_TIMES",
           "MAX_PLUS", "MIN_PLUS", "WEIGHTED_MEAN"]

#: the ⊕ and ⊗ the kernels know by their python-graphblas names
KNOWN_ADD = ("plus", "max", "min")
KNOWN_MUL = ("times", "plus")


@dataclass(frozen=True)
class Algebra:
    """``⊕``, ``⊗`` (None: one the kernels do not know) and the readout's divisor
    (None, ``"count"`` or ``"weights"``)."""

    add: str | None
    mul: str | None
    divide: str | None = None

    @classmethod
    def of(cls, add_name: str | None, mul_name: str | None, divide: str | None = None
           ) -> Algebra:
        """From operator names: one the kernels do not know becomes None."""
        return cls(add_name if add_name in KNOWN_ADD else None,
                   mul_name if mul_name in KNOWN_MUL else None, divide)

    @property
    def label(self) -> str:
        """``⊕_⊗`` (``plus_times``, ``max_plus``, …), with the divisor (``_by_count``,
        ``_by_weights``): names of kernels and of communication labels."""
        text = f"{self.add}_{self.mul}"
        return text if self.divide is None else f"{text}_by_{self.divide}"

    @property
    def extreme(self) -> bool:
        """⊕ is max or min: each (row, feature) has one winning edge, which the backward
        routes the cotangent to."""
        return self.add in ("max", "min")

    @property
    def maximises(self) -> bool:
        return self.add == "max"

    @property
    def better(self) -> str | None:
        """The comparison by which a term replaces the running value of an extreme ⊕
        (``">"`` for max, ``"<"`` for min; None for a sum), as the generators write it."""
        return (">" if self.maximises else "<") if self.extreme else None

    @property
    def linear(self) -> bool:
        r"""``Z = S X`` (or its row mean): :math:`\sum_j S_{ij} X_j`, linear in ``S`` and in
        ``X``."""
        return self.add == "plus" and self.mul == "times" and self.divide != "weights"

    @property
    def weighted_mean(self) -> bool:
        r""":math:`\sum_j S_{ij} X_j / \sum_j S_{ij}` (the averaging semiring)."""
        return self.add == "plus" and self.mul == "times" and self.divide == "weights"

    @property
    def homogeneous(self) -> bool:
        r"""Homogeneous of degree one in the edge weights (⊗ is ×, ⊕ is +, max or min, no
        division by the weights): :math:`\sum_j S_{ij}\,\partial Z_i/\partial S_{ij} = Z_i`,
        so a softmax feeding it needs only the dense row product
        :math:`\langle \bar Z_i, Z_i\rangle` in its backward."""
        return self.mul == "times" and self.add is not None and self.divide != "weights"

    @property
    def tropical(self) -> bool:
        """⊗ is +: the weight shifts the message (``max_plus``, ``min_plus``)."""
        return self.mul == "plus"

    @property
    def fused(self) -> bool:
        """Whether the generated kernels run it: a (weighted) sum or mean, or a max/min of
        products or of sums."""
        return (self.add == "plus" and self.mul == "times") or \
            (self.extreme and self.mul is not None)


#: the algebras of the shipped semirings (executors register their kernels against them)
PLUS_TIMES = Algebra("plus", "times")
MAX_TIMES = Algebra("max", "times")
MIN_TIMES = Algebra("min", "times")
MAX_PLUS = Algebra("max", "plus")
MIN_PLUS = Algebra("min", "plus")
WEIGHTED_MEAN = Algebra("plus", "times", "weights")
