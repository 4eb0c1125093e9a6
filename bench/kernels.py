"""Micro-benchmark of the building blocks next to scipy's SpMM on the same graph.

    python bench/kernels.py [--n 100000] [--degree 16] [--k 32] [--threads 2] [--repeat 7]

Prints a markdown table (median and spread of ``--repeat`` runs after one warm-up) with the
SuiteSparse kernel each op ran (read from ``gb.ss.burble``) and writes
``bench/results/kernels.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

import graphblas as gb
import numpy as np
from threadpoolctl import threadpool_limits

import gblas_gnn as gg

RESULTS = Path(__file__).resolve().parent / "results"


def timed(fn, repeat: int) -> dict:
    fn()                                            # warm-up (numba compile, page faults)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    ms = np.array(times) * 1e3
    return {"median_ms": float(np.median(ms)), "min_ms": float(ms.min()),
            "max_ms": float(ms.max())}


def kernels_used(fn) -> str:
    """Names of the SuiteSparse kernels ``fn`` runs, from burble (printed to C stdout)."""
    r, w = os.pipe()
    saved = os.dup(1)
    sys.stdout.flush()
    os.dup2(w, 1)
    try:
        with gb.ss.burble:
            fn()
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(w)
    text = os.read(r, 1 << 20).decode(errors="replace")
    os.close(r)
    found = re.findall(r"(dot3|saxpy\w*|colscale|rowscale|emult|apply|reduce|generic|"
                       r"masked_dot_product|Method \d+)", text)
    return ", ".join(dict.fromkeys(found)) or "numba"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--degree", type=int, default=16)
    p.add_argument("--k", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--output", type=Path, default=RESULTS / "kernels.json")
    args = p.parse_args(argv)

    gb.ss.config["nthreads"] = args.threads
    g = gg.data.erdos_renyi(args.n, args.degree / args.n, seed=0)
    rng = np.random.default_rng(0)
    H = rng.standard_normal((args.n, args.k)).astype(np.float32)
    S = gg.ops.sddmm(g.A, H, H)
    csr = g.to_scipy()
    cases = {
        "sddmm": lambda: gg.ops.sddmm(g.A, H, H),
        "softmax": lambda: gg.ops.softmax(S),
        **{f"aggregate {a}": (lambda a=a: gg.ops.aggregate(S, H, a))
           for a in ("sum", "max", "min", "mean")},
        "scipy csr @ H": lambda: csr @ H,
    }
    rows = []
    with threadpool_limits(args.threads):
        for name, fn in cases.items():
            kern = "scipy" if name.startswith("scipy") else kernels_used(fn)
            with contextlib.redirect_stdout(io.StringIO()):
                stats = timed(fn, args.repeat)
            rows.append({"op": name, "kernels": kern, **stats})
    meta = {"n": args.n, "nnz": g.nnz, "k": args.k, "threads": args.threads,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "python_graphblas": gb.__version__}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"meta": meta, "results": rows}, indent=2))
    print(f"n={args.n}, nnz={g.nnz}, k={args.k}, threads={args.threads}\n")
    print("| op | median ms | min–max ms | SuiteSparse kernels |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['op']} | {r['median_ms']:.1f} | {r['min_ms']:.1f}–{r['max_ms']:.1f} "
              f"| {r['kernels']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
