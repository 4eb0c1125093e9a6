r"""The features of a graph with self loops kept as its base graph's and the loops' apart
(:class:`LoopedValues`): what a graph with loops stores, and what the ``cpu`` executor's
kernels read without an interleaved copy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

__all__ = ["LoopedValues"]


@dataclass(frozen=True, eq=False)
class LoopedValues:
    r"""The features of a graph with self loops kept as its base graph's and the loops' apart:
    no copy of the base's features per graph with loops.

    ``base`` (m, f) are the base graph's features in its CSR order, ``loops`` (n, f) row
    ``i``'s loop's, ``shift`` (n + 1,) the difference :math:`L_i - B_i` of the two patterns'
    row pointers. A row of the graph with loops is its base row with the given loop (if any)
    dropped and one loop in its place, so the edge ``j → i`` at CSR position ``p`` reads

    .. math:: e_p = \begin{cases} \mathrm{loops}_i & j = i \\
              \mathrm{base}_{p - \mathrm{shift}_i} & j < i \\
              \mathrm{base}_{p - \mathrm{shift}_{i+1}} & j > i \end{cases}

    (the edges before the loop sit ``L_i - B_i`` places later than in the base, those after
    it one place more unless the base had its own loop there). The ``cpu`` executor's
    kernels read them so (``feature_row`` of their modules); every other reader gets the
    interleaved ``(nnz, f)`` array made from them (:meth:`interleaved`,
    ``EdgeFeatures.values``)."""

    base: np.ndarray
    loops: np.ndarray
    shift: np.ndarray
    nnz: int
    #: the interleaved array, once :meth:`interleaved` made it
    _array: np.ndarray | None = field(default=None, repr=False)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.nnz, int(self.base.shape[1]))

    @property
    def dtype(self) -> np.dtype:
        return self.base.dtype

    ndim = 2

    def astype(self, dtype) -> LoopedValues:
        """These features in ``dtype`` (themselves when they are)."""
        if np.dtype(dtype) == self.dtype:
            return self
        return LoopedValues(self.base.astype(dtype), self.loops.astype(dtype), self.shift,
                            self.nnz)

    def interleaved(self, edges: Callable[[], tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        """The ``(nnz, f)`` array in the CSR order of the pattern whose entries ``edges()``
        gives, ``(rows, sources)`` (both ``(nnz,)``, in that order): made at the first call,
        then kept."""
        if self._array is None:
            rows, cols = edges()
            out = np.empty(self.shape, self.dtype)
            loop = rows == cols
            out[loop] = self.loops[rows[loop]]
            p = np.flatnonzero(~loop)
            r = rows[p]
            out[p] = self.base[p - self.shift[r + (cols[p] > r)].astype(np.int64)]
            object.__setattr__(self, "_array", out)      # a cache: the values are the same
        return self._array
