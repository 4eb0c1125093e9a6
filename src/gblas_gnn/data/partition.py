"""How a grid splits the vertices: q parts, contiguous or over a seeded permutation."""

from __future__ import annotations

import numpy as np

__all__ = ["partition", "relabel_order", "RELABEL_STREAM"]


#: the relabelling permutation's own stream (``SeedSequence((seed, RELABEL_STREAM))``): a
#: generator seeded with the same integer draws its vertex permutation from
#: ``default_rng(seed)`` (the Kronecker generator does), and splitting by that very
#: permutation would put R-MAT's quadrants back on the blocks (seen: block sizes in the
#: ratio a : b : c : d, an imbalance of 2.2 on a 2×2 grid)
RELABEL_STREAM = 0x7E1ABE1


def partition(n: int, q: int, relabel: bool = False, seed: int = 0) -> list[np.ndarray]:
    """The q vertex parts (sorted int64 id arrays): contiguous ranges of sizes differing by
    at most one, or — with ``relabel`` — the same sizes over a seeded random permutation
    (drawn from its own stream, :data:`RELABEL_STREAM`)."""
    starts = [(i * n) // q for i in range(q + 1)]
    if not relabel:
        return [np.arange(starts[i], starts[i + 1], dtype=np.int64) for i in range(q)]
    order = relabel_order(n, seed)
    return [np.sort(order[starts[i]:starts[i + 1]]).astype(np.int64) for i in range(q)]


def relabel_order(n: int, seed: int = 0) -> np.ndarray:
    """The vertices in the order ``partition(..., relabel=True, seed=seed)`` deals them out:
    part i of q holds ``order[(i n) // q : ((i + 1) n) // q]`` (sorted)."""
    return np.random.default_rng(np.random.SeedSequence((seed, RELABEL_STREAM))).permutation(n)
