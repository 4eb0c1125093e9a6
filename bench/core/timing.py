"""Interleaved repetitions and their statistics."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping

import numpy as np

__all__ = ["interleaved", "stats", "Measured"]


class Measured:
    """What a callable returns when it timed itself: a call that runs in another process
    (:mod:`bench.peers.client`) reports the seconds the worker measured around the work, not the
    round trip of the request."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float):
        self.seconds = float(seconds)


def stats(seconds: list[float]) -> dict:
    """Median, quartiles, min and max in milliseconds (and the raw runs)."""
    ms = np.asarray(seconds, dtype=np.float64) * 1e3
    q1, med, q3 = np.percentile(ms, [25, 50, 75])
    return {"median_ms": float(med), "q1_ms": float(q1), "q3_ms": float(q3),
            "min_ms": float(ms.min()), "max_ms": float(ms.max()), "runs": int(ms.size),
            "all_ms": [round(float(x), 3) for x in ms]}


def interleaved(fns: Mapping[str, Callable[[], object]], reps: int, warmup: int = 1,
                collect: bool = True) -> dict[str, dict]:
    """Time every callable ``reps`` times, round-robin (``a, b, c, a, b, c, ...``).

    Parameters
    ----------
    fns : mapping of label → zero-argument callable
        Called in insertion order within each round. A call that returns a
        :class:`Measured` is billed its ``seconds`` instead of the wall time around it.
    reps : int
        Timed rounds (≥ 1).
    warmup : int
        Untimed rounds first (numba compilation, caches, page faults).
    collect : bool
        Run ``gc.collect()`` (untimed) before every call, so that a collection triggered by
        one implementation's garbage is not billed to the next call. Everything alive before
        the rounds is frozen (``gc.freeze()``) meanwhile: with torch loaded a full collection
        otherwise walks millions of objects (0.2 s each here).

    Returns
    -------
    dict
        label → :func:`stats` of its timed runs.
    """
    if reps < 1:
        raise ValueError(f"reps must be ≥ 1, got {reps}")
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    if collect:
        gc.collect()
        gc.freeze()
    try:
        for _ in range(reps):
            for key, fn in fns.items():
                if collect:
                    gc.collect()
                t = time.perf_counter()
                out = fn()
                seconds = time.perf_counter() - t
                times[key].append(out.seconds if isinstance(out, Measured) else seconds)
                del out
    finally:
        if collect:
            gc.unfreeze()
    return {k: stats(v) for k, v in times.items()}
