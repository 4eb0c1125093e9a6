"""One training step of the 3-layer GAT on a √p×√p grid, one MPI job: the memory of every
rank, for ``python -m bench memory --procs 1,4``.

    mpiexec -n 4 python -m mpi4py -m bench.memory.grid --scale 20 [--edge-factor 16]
                                                        [--k 16] [--layers 3] [--breakdown]
                                                        [--dense replicated|sharded]

Every rank does what :mod:`.step` does in one process (:func:`.step.measure`: imports, a
warm-up step on a scale-12 graph, ``baseline_rss``, the graph, ``VmHWM`` reset, the step),
on the ``dist`` executor with one thread per rank: the graph is its block of
``DistGraph.kronecker(grid, scale, edge_factor, seed=0, relabel=True)`` (the graph of one
process, its vertices dealt out at random for balance) and its rows of the same synthetic
features and labels. Per stored entry of the whole ``A + I`` (``nnz``, as for one process):

* ``bytes_per_entry`` = Σ over ranks of (peak − ``baseline_rss``) / nnz: the job's growth;
* ``rss_bytes_per_entry`` = Σ over ranks of the peak RSS / nnz: every process's fixed
  runtime (interpreter, numba, GraphBLAS, MPI) included, issue 21's measure of a grid job.

Each rank also reports its block's entries and rows, and with ``--breakdown`` its traced
components at its own peak (:class:`.step._Tracer`).
"""

from __future__ import annotations

import numpy as np

from ..core.worker import emit
from .step import _train_step, growth, local_entries, measure, worker_parser

__all__ = ["run_grid_step", "main"]


def run_grid_step(scale: int, edge_factor: int = 16, k: int = 16, layers: int = 3,
                  breakdown: bool = False, dense: str = "replicated") -> dict | None:
    """One rank's part (see the module docstring); the job's result on rank 0."""
    from gblas_gnn import dist
    from gblas_gnn.data.specs import synthetic_rows
    from gblas_gnn.executors import get_executor

    get_executor("cpu").set_threads(1)
    grid = dist.Grid(dense=dense)
    ex = dist.DistExecutor(grid)

    def load(s):
        dg = dist.DistGraph.kronecker(grid, s, edge_factor, seed=0, relabel=True)
        x, y, _ = synthetic_rows(dg.n, dg.vertex_ids, seed=0, features=k, classes=k,
                                 dtype=np.float32)
        return dg, x, y

    r, dg = measure(load, lambda g, x, y, hook: _train_step(g, x, y, layers, k, hook, ex),
                    scale, breakdown)
    r.update(rank=grid.rank, rows=dg.n_local, block_entries=local_entries(dg),
             growth=growth(r))
    r["peak_rss"] = r["growth"] + r["baseline_rss"]
    everyone = grid.allgather(r, "bench.memory")
    nnz = dg.with_self_loops().nnz
    if grid.rank != 0:
        return None
    return {"scale": scale, "edge_factor": edge_factor, "k": k, "layers": layers,
            "threads": 1, "procs": grid.size, "dense": dense, "n": dg.n,
            "nnz_graph": dg.nnz, "nnz": nnz,
            "breakdown_run": breakdown,
            "bytes_per_entry": sum(x["growth"] for x in everyone) / nnz,
            "rss_bytes_per_entry": sum(x["peak_rss"] for x in everyone) / nnz,
            "ranks": everyone}


def main(argv: list[str] | None = None) -> int:
    """The job's entry point (every rank runs it; rank 0 prints the result). ``--threads``
    is accepted and ignored: one thread per rank; the model is the GAT (a grid's generated
    Kronecker blocks carry no edge features)."""
    p = worker_parser("bench.memory.grid", __doc__)
    p.add_argument("--dense", choices=["replicated", "sharded"], default="replicated")
    a = p.parse_args(argv)
    if a.model != "gat":
        p.error(f"--model {a.model}: a grid job measures the GAT only")
    result = run_grid_step(a.scale, a.edge_factor, a.k, a.layers, a.breakdown, a.dense)
    if result is not None:
        emit(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
