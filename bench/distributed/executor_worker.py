"""One process (``--executor cpu``) or one rank of an MPI job (``--executor dist``) timing the
forward + backward of one layer on a case's data, for :mod:`bench.distributed.executor`.

    python -m bench.distributed.executor_worker --data CASE.npz --layer gat --executor cpu --reps 5
    mpiexec -n 4 python -m mpi4py -m bench.distributed.executor_worker --data CASE.npz --layer gat \
        --executor dist --reps 5

Each repetition records, per process, the wall time, the CPU time, the CPU time spent in
collectives (``Grid.comm_cpu_seconds``) and the bytes moved; *compute* is CPU time minus
collective CPU time, so ranks that share cores are not charged for waiting on each other.
The peak RSS (``VmHWM``) is reset after the data is loaded and the block built, so it is that
of the layer. Rank 0 prints one line ``BENCH_RESULT <json>`` with every rank's medians.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import numpy as np

from ..core.cases import graph_from_csr, load_case_data
from ..core.rss import peak_rss_bytes, reset_hwm
from ..core.worker import emit

__all__ = ["measure"]


def _layer(name: str, k_in: int, k_out: int, executor):
    import gblas_gnn as gg

    if name == "gat":
        return gg.nn.GATConv(k_in, k_out, heads=1, executor=executor)
    if name == "agnn":
        return gg.nn.AGNNConv(k_in, k_out, executor=executor)
    if name == "gcn":
        return gg.nn.GCNConv(k_in, k_out, executor=executor)
    raise ValueError(f"unknown layer {name!r}")


def measure(data_path: str, layer: str, executor: str, reps: int, warmup: int,
            relabel: bool) -> dict | None:
    """Time ``reps`` forward+backward passes; the result on rank 0 (None elsewhere)."""
    from gblas_gnn.executors import get_executor

    get_executor("cpu").set_threads(1)
    data = load_case_data(data_path, parts=("indptr", "indices", "H", "dZ"))
    g = graph_from_csr(data.n, data.indptr, data.indices)
    grid = None
    if executor == "dist":
        from gblas_gnn import dist

        grid = dist.Grid()
        ex = dist.DistExecutor(grid)
        graph = dist.DistGraph.from_graph(g, grid, relabel=relabel, seed=0)
        H, dZ = graph.scatter(data.H), graph.scatter(data.dZ)
        info = {"block_nnz": int(graph.A.nvals), "rows": graph.n_local,
                "imbalance": graph.imbalance()}
    else:
        ex, graph, H, dZ = get_executor(executor), g, data.H, data.dZ
        info = {"block_nnz": int(g.nnz), "rows": g.n, "imbalance": 1.0}
    del data, g
    gc.collect()
    model = _layer(layer, H.shape[1], dZ.shape[1], ex)
    rows = []
    for rep in range(warmup + reps):
        if rep == warmup:
            reset_hwm()
        if grid is not None:
            grid.barrier()
            grid.reset_comm_stats()
        t0, c0 = time.perf_counter(), time.process_time()
        model(graph, H)
        model.backward(dZ)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        comm = grid.comm_stats() if grid is not None else {"cpu_seconds": 0.0, "seconds": 0.0,
                                                           "bytes_sent": 0, "messages": 0}
        if rep >= warmup:
            rows.append({"wall": wall, "cpu": cpu, "comm_cpu": comm["cpu_seconds"],
                         "comm_wall": comm["seconds"], "compute": cpu - comm["cpu_seconds"],
                         "bytes_sent": comm["bytes_sent"], "messages": comm["messages"]})
    mine = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
    mine.update(info, peak_rss=peak_rss_bytes(), runs=[r["wall"] for r in rows])
    everyone = grid.allgather(mine, "bench") if grid is not None else [mine]
    if grid is not None and grid.rank != 0:
        return None
    return {"layer": layer, "executor": executor, "processes": len(everyone),
            "relabel": relabel, "ranks": everyone,
            "compute_sum": float(np.sum([r["compute"] for r in everyone])),
            "wall": max(r["wall"] for r in everyone)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.distributed.executor_worker")
    p.add_argument("--data", required=True)
    p.add_argument("--layer", default="gat", choices=["gat", "agnn", "gcn"])
    p.add_argument("--executor", default="cpu")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--relabel", action="store_true")
    a = p.parse_args(argv)
    result = measure(a.data, a.layer, a.executor, a.reps, a.warmup, a.relabel)
    if result is not None:
        emit(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
