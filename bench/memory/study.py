"""Bytes per stored entry of one 3-layer GAT training step: ``python -m bench memory``.

    python -m bench memory [--scales 18,20] [--k 16] [--layers 3] [--threads 2]
                           [--model gat] [--procs 1] [--dense replicated,sharded]
                           [--no-breakdown] [--mem-limit-gib 6]
                           [--name memory] [--out bench/results/current]

``--model`` (one process only): ``gat``, ``gatv2`` or ``gatv2-e`` (:data:`.step.MODELS`).

For every scale one fresh worker (:mod:`.step`) measures the peak RSS of the step, and
(unless ``--no-breakdown``) a second one the traced allocations by component. With
``--procs 1,4`` every scale also runs as a grid job of 4 ranks (:mod:`.grid`; a count of
1 is the one-process worker), once per layout of dense tensors of ``--dense``
(:mod:`gblas_gnn.dist.layout`), traced too unless ``--no-breakdown``, and the report compares
the job's bytes per entry, summed over its ranks, with one process's. Writes
``OUT/NAME.json`` and ``OUT/NAME.md``.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..core.environment import environment
from ..core.rss import GIB, MIB
from ..core.worker import launch

__all__ = ["run_memory", "memory_markdown"]

#: issue 21's goal: bytes per stored entry of the process, everything included
TARGET = 80.0


def _worker(scale: int, k: int, layers: int, threads: int, breakdown: bool,
            limit: float, model: str = "gat") -> dict:
    args = ["--scale", str(scale), "--k", str(k), "--layers", str(layers),
            "--threads", str(threads), "--model", model] + \
        (["--breakdown"] if breakdown else [])
    res, answer = launch("bench.memory.step", args, int(limit * GIB))
    if answer is None:
        return {"scale": scale, "breakdown_run": breakdown, "failed": res.message or
                res.status, "stderr": res.stderr[-1500:]}
    return answer


def _grid(scale: int, procs: int, k: int, layers: int, breakdown: bool, dense: str,
          timeout: float = 3600) -> dict:
    from ..distributed.executor import launch as launch_job

    args = ["--scale", str(scale), "--k", str(k), "--layers", str(layers),
            "--dense", dense] + (["--breakdown"] if breakdown else [])
    try:
        return launch_job(procs, "bench.memory.grid", args, timeout)
    except (RuntimeError, OSError, SystemExit) as exc:
        return {"scale": scale, "procs": procs, "dense": dense, "breakdown_run": breakdown,
                "failed": str(exc)[-1500:]}


def run_memory(scales: list[int], k: int, layers: int, threads: int, breakdown: bool,
               mem_limit_gib: float, out: Path, name: str = "memory",
               procs: tuple[int, ...] = (1,), model: str = "gat",
               dense: tuple[str, ...] = ("replicated", "sharded")) -> dict:
    """One worker per scale (and one traced worker per scale with ``breakdown``), one at a
    time, and one grid job per scale and process count above 1 (traced too with
    ``breakdown``; the GAT only); writes ``out/name.json`` and ``.md``."""
    grids = [p for p in procs if p > 1]
    if grids and model != "gat":
        raise ValueError(f"--model {model}: grid jobs (--procs) measure the GAT only")
    runs = [_worker(s, k, layers, threads, False, mem_limit_gib, model) for s in scales]
    traced = [_worker(s, k, layers, threads, True, mem_limit_gib, model) for s in scales] \
        if breakdown else []
    result = {"runs": runs, "traced": traced, "target_bytes_per_entry": TARGET,
              "model": model, "environment": environment()}
    if grids:
        result["grid_runs"] = [_grid(s, p, k, layers, False, d) for s in scales
                               for p in grids for d in dense]
        result["grid_traced"] = [_grid(s, p, k, layers, True, d) for s in scales
                                 for p in grids for d in dense] if breakdown else []
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(result, indent=1))
    (out / f"{name}.md").write_text(memory_markdown(result))
    return result


def _peak_snapshot(t: dict) -> dict:
    return max(t["trace"]["snapshots"], key=lambda s: s["traced"])


def memory_markdown(r: dict) -> str:
    """The report: the headline per scale, then the breakdown at the traced peak."""
    env = r["environment"]
    model = r.get("model", "gat")
    conv = {"gat": "`GATConv(k, k)` × layers with ELU between (the XL case's model)",
            "gatv2": "`GATv2Conv(k, k)` × layers with ELU between",
            "gatv2-e": "`GATv2Conv(k, k, edge_dim=8)` × layers with ELU between (8 seeded "
                       "float32 features per given edge, the loops' the mean)"}[model]
    lines = [f"# Memory of one 3-layer {model.upper()} training step, per stored entry", "",
             "One fresh process per row (`python -m bench memory`, `bench/memory/step.py`): "
             "Kronecker graph (edge factor 16, seed 0) and synthetic features and labels, "
             f"{conv}, one step: "
             "forward, cross-entropy over every vertex, backward, Adam. *Entries* are the "
             "stored entries of A with its self loops (what the layers run on). *Growth* is "
             "the peak RSS (VmHWM over the graph's generation and the step) minus the RSS "
             "after imports and a warm-up step on a scale-12 graph: everything included. "
             "*Step* is the step's peak minus the RSS with the graph and features built.",
             "", f"Commit {env.get('git', {}).get('commit', '?')}; "
             f"{env.get('date', '')}.", "",
             "| scale | n | entries (A+I) | growth B/entry | step B/entry | graph+features "
             f"B/entry | peak RSS MiB | ≤ {TARGET:g} |", "|---|---|---|---|---|---|---|---|"]
    for x in r["runs"]:
        if "failed" in x:
            lines.append(f"| {x['scale']} | failed: {x['failed']} | | | | | | |")
            continue
        peak = max(x["graph_hwm"], x["step_hwm"])
        lines.append(f"| {x['scale']} | {x['n']:,} | {x['nnz']:,} | "
                     f"**{x['bytes_per_entry']:.1f}** | {x['step_bytes_per_entry']:.1f} | "
                     f"{x['graph_bytes_per_entry']:.1f} | {peak / MIB:,.0f} | "
                     f"{'yes' if x['bytes_per_entry'] <= TARGET else 'no'} |")
    for t in r["traced"]:
        if "failed" in t:
            lines += ["", f"Breakdown at scale {t['scale']} failed: {t['failed']}"]
            continue
        lines += _breakdown(t)
    if "grid_runs" in r:
        lines += _grid_report(r)
    return "\n".join(lines) + "\n"


def _grid_report(r: dict) -> list[str]:
    """The grid jobs against one process at the same scale, then every rank."""
    one = {x["scale"]: x for x in r["runs"] if "failed" not in x}
    lines = ["", "## Grid jobs against one process", "",
             "The same step on a √p×√p grid, one MPI job, one thread per rank "
             "(`bench/memory/grid.py`): every rank's growth and peak RSS summed over the "
             "ranks, per stored entry of the whole A+I. *Peak RSS* includes every process's "
             "fixed runtime (interpreter, numba, GraphBLAS, MPI: its *baseline*), as issue 21 "
             "counts a grid job; *growth* leaves it out, as the one-process number does.", "",
             "| scale | ranks | dense | entries (A+I) | growth Σ B/entry | one process | ratio "
             "| peak RSS Σ B/entry | one process | ratio |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for x in r["grid_runs"]:
        if "failed" in x:
            lines.append(f"| {x['scale']} | {x['procs']} | {x.get('dense', 'replicated')} "
                         f"| failed: {x['failed'][:200]} | | | | | | |")
            continue
        o = one.get(x["scale"])
        o_rss = max(o["graph_hwm"], o["step_hwm"]) / o["nnz"] if o else None
        cells = [f"{x['bytes_per_entry']:.1f}",
                 f"{o['bytes_per_entry']:.1f}" if o else "–",
                 f"{x['bytes_per_entry'] / o['bytes_per_entry']:.2f}" if o else "–",
                 f"{x['rss_bytes_per_entry']:.1f}", f"{o_rss:.1f}" if o else "–",
                 f"{x['rss_bytes_per_entry'] / o_rss:.2f}" if o else "–"]
        lines.append(f"| {x['scale']} | {x['procs']} | {x.get('dense', 'replicated')} | "
                     f"{x['nnz']:,} | " + " | ".join(cells) + " |")
    for x in r["grid_runs"]:
        if "failed" in x:
            continue
        lines += ["", f"Ranks at scale {x['scale']}, {x['procs']} ranks, "
                  f"{x.get('dense', 'replicated')}:", "",
                  "| rank | rows | block entries (A+I) | baseline MiB | growth MiB | "
                  "growth B/block entry |", "|---|---|---|---|---|---|"]
        for q in x["ranks"]:
            lines.append(f"| {q['rank']} | {q['rows']:,} | {q['block_entries']:,} | "
                         f"{q['baseline_rss'] / MIB:,.0f} | {q['growth'] / MIB:,.0f} | "
                         f"{q['growth'] / max(q['block_entries'], 1):.1f} |")
    for t in r.get("grid_traced", []):
        if "failed" in t:
            lines += ["", f"Grid breakdown at scale {t['scale']} failed: {t['failed'][:300]}"]
            continue
        lines += _grid_breakdown(t)
    return lines


def _grid_breakdown(t: dict) -> list[str]:
    """Every rank's traced components at its own peak, in B per entry of its block."""
    peaks = [_peak_snapshot(q) for q in t["ranks"]]
    comps = sorted({c for p in peaks for c in p["components"]},
                   key=lambda c: -sum(p["components"].get(c, 0) for p in peaks))
    head = " | ".join(f"rank {q['rank']}" for q in t["ranks"])
    lines = ["", f"Traced components of every rank at its own peak, scale {t['scale']}, "
             f"{t['procs']} ranks, {t.get('dense', 'replicated')}: MiB (B per entry of the "
             "rank's block of A+I). Peaks: "
             + "; ".join(f"rank {q['rank']} at {p['name']}"
                         for q, p in zip(t["ranks"], peaks, strict=True)) + ".", "",
             f"| component | {head} |", "|---|" + "---|" * len(peaks)]
    for c in comps + ["total traced"]:
        cells = []
        for q, p in zip(t["ranks"], peaks, strict=True):
            b = p["traced"] if c == "total traced" else p["components"].get(c, 0)
            cells.append(f"{b / MIB:,.1f} ({b / max(q['block_entries'], 1):.1f})")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return lines


def _breakdown(t: dict) -> list[str]:
    nnz = t["nnz"]
    snaps = t["trace"]["snapshots"]
    peak = _peak_snapshot(t)
    gb = t["graphblas"]
    looped = "A with self loops: no matrix built (the layers ran on its int32 pattern)" \
        if gb["A_self_loops"] is None else \
        f"A with self loops {gb['A_self_loops'] / nnz:.1f} B/entry (iso: {gb['A_self_loops_iso']})"
    own = ("A: no matrix built (the graph holds its int32 pattern)" if gb["A"] is None
           else f"A {gb['A'] / nnz:.1f} B/entry (iso values: {gb['A_iso']})")
    lines = ["", f"## Breakdown at scale {t['scale']} (tracemalloc, {nnz:,} entries)", "",
             "Every live block of at least 64 KiB, by the code that allocated it "
             "(GraphBLAS allocates through numpy, so its matrices are traced), at the "
             f"snapshot holding the most: **{peak['name']}**. GraphBLAS's own count: "
             f"{own}, {looped}.", "",
             "| component | MiB | B/entry |", "|---|---|---|"]
    for comp, b in sorted(peak["components"].items(), key=lambda kv: -kv[1]):
        lines.append(f"| {comp} | {b / MIB:,.1f} | {b / nnz:.1f} |")
    lines.append(f"| **total traced** | **{peak['traced'] / MIB:,.1f}** | "
                 f"**{peak['traced'] / nnz:.1f}** |")
    lines += ["", "Traced bytes at each snapshot (B/entry) and the traced peak since the "
              "previous one:", "", "| snapshot | live | peak since previous |", "|---|---|---|"]
    for s, ph in zip(snaps, t["trace"]["phase_peaks"], strict=True):
        lines.append(f"| {s['name']} | {s['traced'] / nnz:.1f} | {ph['peak'] / nnz:.1f} |")
    lines += ["", f"Largest allocation sites at **{peak['name']}**:", "",
              "| site | blocks | MiB | B/entry | component |", "|---|---|---|---|---|"]
    for s in peak["sites"][:20]:
        site = s["site"].replace("|", "\\|")
        lines.append(f"| `{site}` | {s['blocks']} | {s['bytes'] / MIB:,.1f} | "
                     f"{s['bytes'] / nnz:.1f} | {s['component']} |")
    return lines
