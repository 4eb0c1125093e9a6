"""Bytes per stored entry of one 3-layer GAT training step: ``python -m bench memory``.

    python -m bench memory [--scales 18,20] [--k 16] [--layers 3] [--threads 2]
                           [--no-breakdown] [--mem-limit-gib 6] [--name memory]
                           [--out bench/results]

For every scale one fresh worker (:mod:`.step`) measures the peak RSS of the step, and
(unless ``--no-breakdown``) a second one the traced allocations by component. Writes
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
            limit: float) -> dict:
    args = ["--scale", str(scale), "--k", str(k), "--layers", str(layers),
            "--threads", str(threads)] + (["--breakdown"] if breakdown else [])
    res, answer = launch("bench.memory.step", args, int(limit * GIB))
    if answer is None:
        return {"scale": scale, "breakdown_run": breakdown, "failed": res.message or
                res.status, "stderr": res.stderr[-1500:]}
    return answer


def run_memory(scales: list[int], k: int, layers: int, threads: int, breakdown: bool,
               mem_limit_gib: float, out: Path, name: str = "memory") -> dict:
    """One worker per scale (and one traced worker per scale with ``breakdown``), one at a
    time; writes ``out/name.json`` and ``.md``."""
    runs = [_worker(s, k, layers, threads, False, mem_limit_gib) for s in scales]
    traced = [_worker(s, k, layers, threads, True, mem_limit_gib) for s in scales] \
        if breakdown else []
    result = {"runs": runs, "traced": traced, "target_bytes_per_entry": TARGET,
              "environment": environment()}
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(result, indent=1))
    (out / f"{name}.md").write_text(memory_markdown(result))
    return result


def _peak_snapshot(t: dict) -> dict:
    return max(t["trace"]["snapshots"], key=lambda s: s["traced"])


def memory_markdown(r: dict) -> str:
    """The report: the headline per scale, then the breakdown at the traced peak."""
    env = r["environment"]
    lines = ["# Memory of one 3-layer GAT training step, per stored entry", "",
             "One fresh process per row (`python -m bench memory`, `bench/memory/step.py`): "
             "Kronecker graph (edge factor 16, seed 0) and synthetic features and labels, "
             "`GATConv(k, k)` × layers with ELU between (the XL case's model), one step: "
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
    return "\n".join(lines) + "\n"


def _breakdown(t: dict) -> list[str]:
    nnz = t["nnz"]
    snaps = t["trace"]["snapshots"]
    peak = _peak_snapshot(t)
    gb = t["graphblas"]
    looped = "A with self loops: no matrix built (the layers ran on its int32 pattern)" \
        if gb["A_self_loops"] is None else \
        f"A with self loops {gb['A_self_loops'] / nnz:.1f} B/entry (iso: {gb['A_self_loops_iso']})"
    lines = ["", f"## Breakdown at scale {t['scale']} (tracemalloc, {nnz:,} entries)", "",
             "Every live block of at least 64 KiB, by the code that allocated it "
             "(GraphBLAS allocates through numpy, so its matrices are traced), at the "
             f"snapshot holding the most: **{peak['name']}**. GraphBLAS's own count: A "
             f"{gb['A'] / nnz:.1f} B/entry (iso values: {gb['A_iso']}), {looped}.", "",
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
