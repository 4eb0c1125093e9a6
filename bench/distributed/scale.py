"""Training at scale on a grid: ``python -m bench scale``.

    python -m bench scale --scale 23 [--procs 4] [--epochs 2] [--mem-limit-gib 22]

One MPI job (:func:`worker`, run as ``python -m mpi4py -m bench.distributed.scale``): every rank
generates its block of the Kronecker graph in place (``DistGraph.kronecker``, vertices
relabelled for balance) and its rows of synthetic features (k = 16) and labels, then trains a
3-layer GAT (the XL case's model: ``GATConv(16, 16)`` ×3 with ELU, cross-entropy over every
vertex, Adam) for a warm-up and ``--epochs`` timed epochs. The parent watches the resident
memory of the whole job and stops it above ``--mem-limit-gib``. Writes
``OUT/scale-<scale>-p<P>.json`` and ``.md``: time per epoch, per-rank peak RSS, the graph
and how long generating it took.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ..core.environment import environment
from ..core.rss import GIB, MIB, peak_rss_bytes
from ..core.worker import emit, parse_result
from .executor import _env, mpiexec_path

__all__ = ["run_scale", "worker"]

K = 16


def worker(scale: int, edge_factor: int, epochs: int, warmup: int) -> dict | None:
    """One rank's part (see the module docstring); the result on rank 0."""
    from gblas_gnn import dist
    from gblas_gnn.data.specs import synthetic_rows
    from gblas_gnn.executors import get_executor
    from gblas_gnn.train import Adam
    from gblas_gnn.train.losses import cross_entropy

    from ..layers.epoch import ours_model

    get_executor("cpu").set_threads(1)
    grid = dist.Grid()
    ex = dist.DistExecutor(grid)
    t0 = time.perf_counter()
    dg = dist.DistGraph.kronecker(grid, scale, edge_factor, seed=0, relabel=True)
    x, y, _ = synthetic_rows(dg.n, dg.vertex_ids, seed=0, features=K, classes=K,
                             dtype=np.float32)
    generated = time.perf_counter() - t0
    generation_rss = peak_rss_bytes()
    model = ours_model(3, K, K, executor=ex)
    opt = Adam(model, lr=0.005)
    every = np.ones(dg.n_local, bool)
    times, losses = [], []
    for epoch in range(warmup + epochs):
        grid.barrier()
        t = time.perf_counter()
        logits = model(dg, x)
        loss, dlogits = cross_entropy(logits, y, every, executor=ex)
        model.backward(dlogits)
        opt.step()
        grid.barrier()
        if epoch >= warmup:
            times.append(time.perf_counter() - t)
            losses.append(loss)
    mine = {"peak_rss": peak_rss_bytes(), "generation_rss": generation_rss,
            "block_nnz": int(dg.A.nvals), "rows": dg.n_local, "comm": grid.comm_stats(),
            "compute": ex.timers()}
    everyone = grid.allgather(mine, "bench")
    imbalance = dg.imbalance()
    if grid.rank != 0:
        return None
    return {"scale": scale, "edge_factor": edge_factor, "processes": grid.size, "n": dg.n,
            "nnz": dg.nnz, "imbalance": imbalance,
            "generation_seconds": generated, "epoch_seconds": times, "losses": losses,
            "ranks": [{k: v for k, v in r.items() if k != "comm"} |
                      {"bytes_sent": r["comm"]["bytes_sent"]} for r in everyone]}


def _job_rss(proc) -> int:
    import psutil

    try:
        root = psutil.Process(proc.pid)
        return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
    except psutil.Error:
        return 0


def run_scale(scale: int, edge_factor: int, procs: int, epochs: int, warmup: int,
              mem_limit_gib: float, out: Path, timeout: float = 7200) -> dict:
    """Launch the job, watch its memory, write the result."""
    cmd = [mpiexec_path(), "-n", str(procs), sys.executable, "-m", "mpi4py", "-m",
           "bench.distributed.scale", "--worker", "--scale", str(scale), "--edge-factor",
           str(edge_factor), "--epochs", str(epochs), "--warmup", str(warmup)]
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    peak, started, stopped = 0, time.perf_counter(), None
    while proc.poll() is None:
        peak = max(peak, _job_rss(proc))
        if peak > mem_limit_gib * GIB:
            proc.kill()
            stopped = f"the job's resident memory passed {mem_limit_gib} GiB"
        elif time.perf_counter() - started > timeout:
            proc.kill()
            stopped = f"no result after {timeout} s"
        time.sleep(0.5)
    stdout, stderr = proc.communicate()
    result = parse_result(stdout)
    if result is None:
        result = {"scale": scale, "processes": procs,
                  "failed": stopped or f"exit {proc.returncode}: {stderr[-1500:]}"}
    result.update(job_peak_rss=peak, mem_limit_gib=mem_limit_gib, environment=environment())
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"scale-{scale}-p{procs}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1))
    stem.with_suffix(".md").write_text(scale_markdown(result))
    return result


def scale_markdown(r: dict) -> str:
    lines = [f"# A 3-layer GAT epoch on Kronecker scale {r['scale']}, {r['processes']} "
             "processes", ""]
    if "failed" in r:
        return "\n".join(lines + [f"Did not complete: {r['failed']} (whole job's peak RSS "
                                  f"{r['job_peak_rss'] / GIB:.2f} GiB).", ""])
    t = r["epoch_seconds"]
    lines += [f"n = {r['n']:,}, {r['nnz']:,} edges (before self loops), generated in place in "
              f"{r['generation_seconds']:.1f} s; k = {K}; one thread per process on a "
              "2-core machine (the ranks share the cores).", "",
              f"Epoch (forward, loss, backward, Adam): median {np.median(t):.1f} s "
              f"[{min(t):.1f}–{max(t):.1f}] over {len(t)} epochs; whole job's peak RSS "
              f"{r['job_peak_rss'] / GIB:.2f} GiB; block imbalance (max / mean entries) "
              f"{r['imbalance']:.2f}.", "",
              "| rank | rows | block entries | peak RSS MiB | after generation MiB | "
              "bytes sent |", "|---|---|---|---|---|---|"]
    for i, x in enumerate(r["ranks"]):
        lines.append(f"| {i} | {x['rows']:,} | {x['block_nnz']:,} | "
                     f"{x['peak_rss'] / MIB:,.0f} | {x['generation_rss'] / MIB:,.0f} | "
                     f"{x['bytes_sent']:,} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """The worker's entry point (``python -m mpi4py -m bench.distributed.scale --worker ...``); the
    command is ``python -m bench scale``."""
    p = argparse.ArgumentParser(prog="python -m bench.distributed.scale")
    p.add_argument("--worker", action="store_true", required=True)
    p.add_argument("--scale", type=int, required=True)
    p.add_argument("--edge-factor", type=int, default=16)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--warmup", type=int, default=1)
    a = p.parse_args(argv)
    result = worker(a.scale, a.edge_factor, a.epochs, a.warmup)
    if result is not None:
        emit(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
