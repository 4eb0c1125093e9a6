"""Inverted dropout on dense features, with a seeded generator that checkpoints capture."""

from __future__ import annotations

import numpy as np

from ..executors._random import draw_key
from .module import Module

__all__ = ["Dropout", "vertex_ids"]


def vertex_ids(g):
    """The global ids of the rows a dense tensor over ``g`` holds in this process, or None
    when row ``r`` is vertex ``r`` (one process, or no graph given)."""
    return getattr(g, "vertex_ids", None)


class Dropout(Module):
    r"""Inverted dropout (PyTorch's ``Dropout``): each entry is zeroed with probability ``p``
    and the survivors are scaled by :math:`1/(1-p)`, so the expectation is unchanged.

    .. math:: Z = H \odot M / (1 - p), \qquad M_{ic} = [u(\kappa; 0, i, c) \ge p]

    In evaluation mode (``module.eval()``) it is the identity and draws nothing.

    The mask is counter-based (:mod:`gblas_gnn.executors._random`): entry ``(i, c)`` of
    vertex ``i`` is kept when a hash :math:`u` of a per-call key :math:`\kappa` and of
    ``(i, c)`` is at least ``p``, so every executor and every MPI grid draws the same mask.
    The key comes from ``self.rng`` (``numpy.random.default_rng(seed)``), one draw per
    training-mode call: a run is reproducible for a seed, and the generator state is saved in
    checkpoints (every module's ``rng`` attribute is, see
    :func:`gblas_gnn.train.checkpoint.named_rngs`), so a resumed run draws the same masks as an
    uninterrupted one. The vertex ids are those of the graph argument (a
    :class:`gblas_gnn.dist.DistGraph` knows which vertices its rows are); without one, row
    ``i`` is vertex ``i``.

    Args:
        p: drop probability, ``0 <= p < 1`` (``p = 0`` is the identity and draws nothing).
        seed: seed of the key generator.
        dtype: if given, the input must have this dtype; by default float32 and float64 both pass.
        executor: the executor whose arrays it takes (a container gives it its own).

    Shapes:
        H (n, k) → (n, k).
    """

    def __init__(self, p: float = 0.5, seed: int = 0, dtype=None, executor=None):
        super().__init__(np.float32 if dtype is None else dtype, executor)
        if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)):
            raise TypeError(f"dropout probability p must be a real number, got {p!r}")
        if not (0.0 <= float(p) < 1.0):
            raise ValueError(f"dropout probability p must be in [0, 1), got {p!r}")
        self.p = float(p)
        self._strict_dtype = dtype is not None
        self.rng = np.random.default_rng(seed)

    def forward(self, g, H: np.ndarray) -> np.ndarray:
        H = self._dense(H, "H", dtype=self.dtype if self._strict_dtype else None)
        if not self.training:
            self._cache = None
            return H
        if self.p == 0.0:
            self._cache = {"keep": None, "scale": None, "shape": H.shape, "dtype": H.dtype}
            return H
        keep = self.executor.keep_mask(draw_key(self.rng), self.p, H.shape, vertex_ids(g))
        scale = H.dtype.type(1.0 / (1.0 - self.p))
        # the cache is the boolean mask (1 byte per entry); H ⊙ M / (1 − p) in two passes
        self._cache = {"keep": keep, "scale": scale, "shape": H.shape, "dtype": H.dtype}
        out = self.xp.multiply(H, keep)
        out *= scale
        return out

    def backward(self, dout: np.ndarray) -> np.ndarray:
        cache = self._need_cache()
        shape = cache["shape"]
        dout = self._dense(dout, "dout", rows=shape[0], cols=shape[1], dtype=cache["dtype"])
        if cache["scale"] is None:
            return dout
        grad = self.xp.multiply(dout, cache["keep"])
        grad *= cache["scale"]
        return grad

    def __repr__(self) -> str:
        return f"Dropout(p={self.p})"
