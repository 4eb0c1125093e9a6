"""One MPI job of the communication study (:mod:`bench.distributed.comm`): for one graph,
generated in place on the √p×√p grid, every model and feature size: the words each rank sent
in one layer's forward and in its backward, counted by the grid, beside the scheme's exact
count for that rank, and the compute/communication time of each step.

    mpiexec -n 4 python -m mpi4py -m bench.distributed.comm_worker \
        --graph er:n=20000,density=0.001 --models gat,agnn,gcn --ks 16,128

Rank 0 prints ``BENCH_RESULT <json>``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ..core.worker import emit

__all__ = ["scheme_words", "build_graph", "parse_graph"]

#: labels of the collectives that carry data (the rest is control: validation, agreement)
CONTROL = {"validation", "agree", "on_root", "bench", "graph.nnz"}


def parse_graph(spec: str) -> tuple[str, dict]:
    """``er:n=N,density=D`` or ``kron:scale=S,edge_factor=E`` → (kind, arguments)."""
    kind, _, args = spec.partition(":")
    kw = {}
    for item in filter(None, args.split(",")):
        key, _, value = item.partition("=")
        kw[key] = float(value) if "." in value or "e" in value else int(value)
    if kind not in ("er", "kron"):
        raise ValueError(f"unknown graph {spec!r}: er:n=N,density=D or kron:scale=S,"
                         "edge_factor=E")
    return kind, kw


def build_graph(grid, spec: str):
    from gblas_gnn import dist

    kind, kw = parse_graph(spec)
    if kind == "er":
        return dist.DistGraph.erdos_renyi(grid, kw["n"], kw["density"], seed=0)
    return dist.DistGraph.kronecker(grid, kw["scale"], kw.get("edge_factor", 16), seed=0)


def scheme_words(model: str, k: int, r: int, c: int, q: int, diagonal: bool
                 ) -> tuple[int, int]:
    """Words this rank *sends* in one layer (input width = output width = k, one head,
    bias) by the implemented scheme: ``(forward, backward)``; ``r`` = its rows, ``c`` = its
    block's columns (see ``docs/design.md`` and ``tests/dist/test_comm_counts.py``)."""
    if q == 1:
        return 0, 0
    swap = 0 if diagonal else 1               # the partner exchange moves nothing on x = y
    if model == "gat":                        # h = 1: [H' s] out, r(k+1)
        fwd = swap * r * (k + 1) + r + r + k * r
        bwd = r + c * (k + 1) + swap * c * (k + 1) + k + (2 * k + k * k)
    elif model == "agnn":                     # [Q X] out; dP rows; [dX dQ] columns; dβ
        fwd = swap * r * 2 * k + r + r + k * r
        bwd = k * r + 2 * k * c + swap * 2 * k * c + 1 + k * k
    elif model == "gcn":                      # X = H W out; partial rows; Aᵀ side back
        fwd = swap * r * k + k * r
        bwd = k * c + swap * k * c + k * k + k
    else:
        raise ValueError(model)
    return fwd, bwd


def _layer(model: str, k: int, ex):
    import gblas_gnn as gg

    if model == "gat":
        return gg.nn.GATConv(k, k, heads=1, executor=ex)
    if model == "agnn":
        return gg.nn.AGNNConv(k, k, executor=ex)
    return gg.nn.GCNConv(k, k, executor=ex)


def _words(grid, itemsize: int) -> tuple[int, dict]:
    by_op = grid.comm_stats()["by_op"]
    data = {k: v for k, v in by_op.items() if k not in CONTROL}
    return sum(v["bytes_sent"] for v in data.values()) // itemsize, data


def measure(spec: str, models: list[str], ks: list[int]) -> dict | None:
    from gblas_gnn import dist
    from gblas_gnn.executors import get_executor

    get_executor("cpu").set_threads(1)
    grid = dist.Grid()
    ex = dist.DistExecutor(grid)
    t0 = time.perf_counter()
    dg = build_graph(grid, spec)
    generated = time.perf_counter() - t0
    r, c = dg.n_local, dg.A.ncols
    rows = []
    for model in models:
        for k in ks:
            rng = np.random.default_rng(k)
            H = dg.scatter(rng.standard_normal((dg.n, k)).astype(np.float32))
            dZ = dg.scatter(rng.standard_normal((dg.n, k)).astype(np.float32))
            layer = _layer(model, k, ex)
            layer(dg, H)                                  # warm-up: caches, compilation
            layer.backward(dZ)
            grid.barrier()
            grid.reset_comm_stats()
            ex.reset_timers()
            layer(dg, H)
            fwd, fwd_ops = _words(grid, 4)
            grid.reset_comm_stats()
            layer.backward(dZ)
            bwd, bwd_ops = _words(grid, 4)
            want = scheme_words(model, k, r, c, grid.q, grid.partner == grid.rank)
            mine = {"fwd": fwd, "bwd": bwd, "scheme_fwd": want[0], "scheme_bwd": want[1],
                    "compute": ex.timers(),
                    "comm": {label: {"seconds": e["seconds"], "words": e["bytes_sent"] // 4}
                             for label, e in {**fwd_ops, **bwd_ops}.items()}}
            everyone = grid.allgather(mine, "bench")
            rows.append({"model": model, "k": k, "ranks": everyone,
                         "fwd": max(x["fwd"] for x in everyone),
                         "bwd": max(x["bwd"] for x in everyone),
                         "scheme_fwd": max(x["scheme_fwd"] for x in everyone),
                         "scheme_bwd": max(x["scheme_bwd"] for x in everyone),
                         "matches": all(x["fwd"] == x["scheme_fwd"] and
                                        x["bwd"] == x["scheme_bwd"] for x in everyone)})
    info = {"spec": spec, "p": grid.size, "n": dg.n, "nnz": dg.nnz,
            "imbalance": dg.imbalance(), "generation_seconds": generated}
    if grid.rank != 0:
        return None
    return {**info, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.distributed.comm_worker")
    p.add_argument("--graph", required=True)
    p.add_argument("--models", default="gat,agnn,gcn")
    p.add_argument("--ks", default="16,128")
    a = p.parse_args(argv)
    result = measure(a.graph, a.models.split(","), [int(k) for k in a.ks.split(",")])
    if result is not None:
        emit(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
