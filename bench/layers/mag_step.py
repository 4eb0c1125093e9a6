"""One full-batch R-GCN training step at ogbn-mag's size, in one process:
``python -m bench.layers.mag_step [--out bench/results/current]``.

A synthetic graph of ogbn-mag's shape (:func:`gblas_gnn.data.typed_random`): its four vertex
types at their real counts (papers 736 389, authors 1 134 649, institutions 8 740, fields of
study 59 965) and its four relations at their real edge counts (writes 7 145 660, cites
5 416 271, has_topic 7 505 078, affiliated_with 1 043 998; duplicate draws merged), in PyG's
homogeneous form (``HeteroGraph.to_homogeneous``). The layer is OGB's example's first:
``RGCNConv(128, 64, 4)`` (mean per relation, root weight, bias), float32, on 128 seeded
features per vertex. Measured: the build, one training forward + backward after a warm-up,
its peak RSS growth (``VmHWM`` reset before it) and the bytes per stored entry.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from ..core.environment import environment
from ..core.rss import MIB, hwm_bytes, reset_hwm, rss_bytes
from ..core.threads import set_threads

NODES = {"paper": 736_389, "author": 1_134_649, "institution": 8_740, "field_of_study": 59_965}
EDGES = {("author", "writes", "paper"): 7_145_660, ("paper", "cites", "paper"): 5_416_271,
         ("paper", "has_topic", "field_of_study"): 7_505_078,
         ("author", "affiliated_with", "institution"): 1_043_998}


def run(threads: int = 2, k_in: int = 128, k_out: int = 64, fraction: float = 1.0) -> dict:
    """The measurement (the module docstring).

    Parameters
    ----------
    threads : int, optional
        Threads of numba, GraphBLAS and BLAS.
    k_in, k_out : int, optional
        The layer's input and output widths.
    fraction : float, optional
        Every vertex and edge count times this (at least 1 each): 1 is ogbn-mag's size; the
        tests run a thousandth.

    Returns
    -------
    dict
        The readings (JSON-ready), :func:`markdown`'s input.
    """
    import gblas_gnn as gg
    from gblas_gnn.data import typed_random

    set_threads(threads)
    nodes = {t: max(int(c * fraction), 1) for t, c in NODES.items()}
    edges = {key: max(int(c * fraction), 1) for key, c in EDGES.items()}
    t0 = time.perf_counter()
    g, _ = typed_random(nodes, edges, seed=0).to_homogeneous()
    build = time.perf_counter() - t0
    H = np.random.default_rng(1).standard_normal((g.n, k_in)).astype(np.float32)
    layer = gg.nn.RGCNConv(k_in, k_out, len(EDGES))
    dout = np.ones((g.n, k_out), np.float32)
    layer(g, H)
    layer.backward(dout)                      # warm-up: kernels compiled, relations built
    reset_hwm()                               # the warm-up's freed memory handed back first
    before = rss_bytes()
    t0 = time.perf_counter()
    out = layer(g, H)
    t1 = time.perf_counter()
    layer.backward(dout)
    t2 = time.perf_counter()
    growth = hwm_bytes() - before
    del out
    return {"n": g.n, "entries": g.nnz, "relations": len(EDGES), "k_in": k_in, "k_out": k_out,
            "threads": threads, "build_s": build, "forward_s": t1 - t0, "backward_s": t2 - t1,
            "peak_growth_mib": growth / MIB, "bytes_per_entry": growth / g.nnz,
            "rss_mib": hwm_bytes() / MIB, "environment": environment()}


def markdown(r: dict) -> str:
    env = r["environment"]
    return "\n".join([
        "## One R-GCN training step at ogbn-mag's size (synthetic, one process)", "",
        f"n = {r['n']:,} vertices of 4 types, {r['entries']:,} stored entries in "
        f"{r['relations']} relations, `RGCNConv({r['k_in']}, {r['k_out']}, "
        f"{r['relations']})` (mean), float32; {env.get('cpu', '?')}, {r['threads']} threads; "
        f"commit {env.get('git', {}).get('commit', '?')[:10]}.", "",
        "| build s | forward s | backward s | peak RSS growth MiB | bytes per entry | "
        "process peak MiB |",
        "|---|---|---|---|---|---|",
        f"| {r['build_s']:.1f} | {r['forward_s']:.2f} | {r['backward_s']:.2f} | "
        f"{r['peak_growth_mib']:.0f} | {r['bytes_per_entry']:.1f} | {r['rss_mib']:.0f} |", ""])


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.layers.mag_step")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("bench/results/current"))
    a = p.parse_args()
    r = run(a.threads)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "mag-rgcn-step.json").write_text(json.dumps(r, indent=1))
    (a.out / "mag-rgcn-step.md").write_text(markdown(r))
    print(markdown(r))


if __name__ == "__main__":
    main()
