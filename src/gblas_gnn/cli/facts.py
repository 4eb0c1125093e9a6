"""The facts of a ``gblas-gnn train`` run that its summary states beside the accuracy:
executor, grid, graph size, peak memory of the largest process and, on a grid, the bytes each
rank sent per epoch beside the scheme's bound, and what each rank read of the data set.

Gathered here (collectives on a grid, every rank calls them); worded in
:mod:`gblas_gnn.cli.report`.
"""

from __future__ import annotations

import resource
import sys

import numpy as np

__all__ = ["CommMeter", "run_facts", "peak_rss_bytes"]


def peak_rss_bytes() -> int:
    """This process's peak resident memory so far: ``VmHWM`` where ``/proc`` has it.

    Not ``getrusage().ru_maxrss`` on Linux: the kernel carries the parent's high-water mark
    across ``fork`` and ``exec``, so a run started by a large process (a notebook, a test
    session) reported the parent's peak. ``ru_maxrss`` (KiB on Linux, bytes on macOS) is the
    fallback elsewhere.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


class CommMeter:
    """Bytes this rank sends per epoch: the grid's counters (``grid.comm_stats()``) read
    after every epoch. The last epoch's count is the steady state (the first one also builds
    the caches some layers communicate for once)."""

    def __init__(self, executor):
        self.grid = getattr(executor, "grid", None)
        self.marks = [0]
        if self.grid is not None:
            self.grid.reset_comm_stats()

    def epoch_done(self) -> None:
        if self.grid is not None:
            self.marks.append(int(self.grid.comm_stats()["bytes_sent"]))

    def last_epoch(self) -> int | None:
        """Bytes sent in the last epoch (``None``: no epoch ran, or one process)."""
        return self.marks[-1] - self.marks[-2] if len(self.marks) > 1 else None


def run_facts(executor, name: str, dataset, model, meter: CommMeter, dtype) -> dict:
    """The run's facts (JSON-able), the same on every rank.

    Keys: ``executor``, ``grid`` ([q, q] or ``None``), ``processes``, ``vertices``,
    ``edges``, ``peak_rss_bytes`` and ``peak_rank`` (the largest process); on a grid also
    ``dense`` (the layout of dense tensors), ``bytes_sent_per_epoch`` (one entry per rank),
    ``layer_widths`` and ``scheme_bound_bytes``
    (:func:`gblas_gnn.dist.cost.model_bound_words` in bytes; ``None`` for a model whose
    graph layers are unknown), and ``read`` (what each rank read of a data set read by
    parts: the largest ``edge_bytes`` and ``row_bytes``, ``total_edge_bytes``, ``how``).
    """
    grid = getattr(executor, "grid", None)
    g = dataset.graph
    facts = {"executor": name, "grid": None, "processes": 1, "vertices": int(g.n),
             "edges": int(g.nnz), "peak_rss_bytes": peak_rss_bytes(), "peak_rank": 0}
    if grid is None:
        return facts
    from ..dist.cost import graph_layer_widths, model_bound_words

    peaks = grid.allgather(facts["peak_rss_bytes"], "summary.peak")
    sent = grid.allgather(meter.last_epoch(), "summary.sent")
    reads = grid.allgather(getattr(dataset, "read", None), "summary.read")
    bound = model_bound_words(model, g.n, grid.size)
    facts.update(grid=[grid.q, grid.q], processes=grid.size, dense=grid.dense,
                 peak_rss_bytes=int(max(peaks)), peak_rank=int(np.argmax(peaks)),
                 bytes_sent_per_epoch=None if sent[0] is None else [int(b) for b in sent],
                 layer_widths=graph_layer_widths(model),
                 scheme_bound_bytes=None if bound is None else bound * np.dtype(dtype).itemsize)
    if reads[0] is not None:
        facts["read"] = {"edge_bytes": max(r["edge_bytes"] for r in reads),
                         "row_bytes": max(r.get("row_bytes", 0) for r in reads),
                         "total_edge_bytes": reads[0]["total_edge_bytes"],
                         "how": reads[0]["how"]}
    return facts
