"""Progress bars of long data work: graph generators, loaders and ``gblas-gnn convert``.

Work on a graph of :data:`PROGRESS_EDGES` edges or more takes long enough (tens of seconds
and up) to deserve a bar; smaller work stays quiet. Under MPI only rank 0 shows one: the
caller passes ``show=False`` on the other ranks (every rank does the same work, so rank 0's
bar speaks for all).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

__all__ = ["PROGRESS_EDGES", "work_bar", "ticking"]

#: the size (edges, or entries read) from which generators and loaders show progress
PROGRESS_EDGES = 10**7

T = TypeVar("T")


def work_bar(total: int | None, desc: str, *, size: int, show: bool | None = None,
             unit: str = "edges", unit_scale: bool = True):
    """A tqdm bar over ``total`` units of work on a graph of ``size`` edges.

    Parameters
    ----------
    total : int or None
        Units the bar counts to (``None``: unknown, the bar counts up).
    desc : str
        What is being done (``"kronecker"``, ``"read edge.csv.gz"``, ...).
    size : int
        Edges of the graph the work is on: the bar shows only from :data:`PROGRESS_EDGES`.
    show : bool or None
        ``False``: never (``--no-progress``, or an MPI rank other than 0); ``True`` or
        ``None``: when ``size`` is large enough.

    Returns
    -------
    tqdm.tqdm
        A bar (disabled, so costing nothing, when not shown); use it as a context manager
        and call ``update(k)``.
    """
    from tqdm.auto import tqdm

    on = show is not False and size >= PROGRESS_EDGES
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit_scale, disable=not on,
                file=sys.stderr, leave=False, mininterval=0.5)


def ticking(bar, items: Iterable[T]) -> Iterator[T]:
    """``items``, one tick of ``bar`` after each."""
    for item in items:
        yield item
        bar.update(1)
