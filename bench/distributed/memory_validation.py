"""The planned memory per rank (:func:`gblas_gnn.dist.planning.peak_bytes`) against what the
memory study measured: the validation table of ``docs/planning.md``.

    python -m bench.distributed.memory_validation            # the table
    mpiexec -n 4 python -m mpi4py -m bench.memory.grid --scale 18 --dense sharded \\
        --breakdown > p4-sharded.out                         # (and the other jobs)
    python -m bench.distributed.memory_validation --summarize p4-sharded.out ... \\
        > bench/results/current/memory-grid-p-traced.json

The measured runs are :data:`RECORDED`: the ``memory`` study's one-process runs and grid
jobs (a 3-layer GAT training step on a Kronecker graph, widths [k, k, k, k], one head,
float32). A run's *growth* is its largest rank's peak RSS (over the graph's generation and
the step) minus that process's baseline, as ``bench.memory.step.growth``; the plan is
``peak_bytes("gat", layout, n, m, p, [k] * (layers + 1), 1)`` with n and m (the edges of A,
without the self loops) of the run. :data:`TRACED` holds the same grid jobs run under
``--breakdown`` (``tracemalloc``), summarised per rank: the traced peak the inventory is
held to, and from which :data:`gblas_gnn.dist.planning.RUNTIME_SLACK_BYTES` was measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from gblas_gnn.dist import planning

__all__ = ["RECORDED", "TRACED", "MIB", "measured", "planned", "validation_rows",
           "validation_markdown", "summarize", "slack_samples", "main"]

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "current"
#: the memory study's recorded runs the plan is held to
RECORDED = (RESULTS / "memory-grid-p.json", RESULTS / "memory-k20-grid.json")
#: the scale-18 grid jobs of ``memory-grid-p.json`` (and its one process) under --breakdown
TRACED = RESULTS / "memory-grid-p-traced.json"
MIB = 2.0 ** 20


def _growth(run: dict) -> int:
    """``bench.memory.step.growth`` (read here without importing the worker)."""
    peak = max(run["graph_hwm"], run["step_hwm"]) if run["hwm_reset"] else run["step_hwm"]
    return peak - run["baseline_rss"]


def measured(paths=RECORDED) -> list[dict]:
    """One row per recorded run: scale, p, layout ("one process" for the ``runs`` entries),
    n, m (edges of A), widths, the largest rank's growth (bytes) and that rank's step-only
    growth (peak RSS of the step minus the baseline: the graph's generation left out)."""
    out = []
    for path in paths:
        data = json.loads(Path(path).read_text())
        for run in data["runs"]:
            out.append({"scale": run["scale"], "p": 1, "layout": "one process", "n": run["n"],
                        "m": run["nnz_graph"], "widths": [run["k"]] * (run["layers"] + 1),
                        "growth": _growth(run),
                        "step": run["step_hwm"] - run["baseline_rss"]})
        for job in data.get("grid_runs", []):
            top = max(job["ranks"], key=lambda r: r["growth"])
            out.append({"scale": job["scale"], "p": job["procs"], "layout": job["dense"],
                        "n": job["n"], "m": job["nnz_graph"],
                        "widths": [job["k"]] * (job["layers"] + 1), "growth": top["growth"],
                        "step": top["step_hwm"] - top["baseline_rss"], "rank": top["rank"]})
    return out


def planned(row: dict) -> float:
    """The planned growth of the run's largest rank (bytes)."""
    layout = "replicated" if row["layout"] == "one process" else row["layout"]
    return planning.peak_bytes("gat", layout, row["n"], row["m"], row["p"], row["widths"], 1)


def validation_rows(paths=RECORDED) -> list[dict]:
    """:func:`measured` with the plan and its relative error, ordered by scale, p, layout."""
    rows = [{**r, "planned": planned(r)} for r in measured(paths)]
    for r in rows:
        r["error"] = r["planned"] / r["growth"] - 1
    return sorted(rows, key=lambda r: (r["scale"], r["p"], r["layout"]))


def validation_markdown(paths=RECORDED) -> str:
    """The validation table of ``docs/planning.md`` (between its ``planning-validation``
    markers)."""
    lines = ["| scale | p | layout | measured MiB | step alone MiB | planned MiB | error |",
             "|---:|---:|---|---:|---:|---:|---:|"]
    for r in validation_rows(paths):
        lines.append(f"| {r['scale']} | {r['p']} | {r['layout']} | {r['growth'] / MIB:,.1f} | "
                     f"{r['step'] / MIB:,.1f} | {r['planned'] / MIB:,.1f} | "
                     f"{100 * r['error']:+.1f}% |")
    worst = max(validation_rows(paths), key=lambda r: abs(r["error"]))
    lines += ["", f"The largest error is {100 * worst['error']:+.1f}% (scale {worst['scale']}, "
              f"p = {worst['p']}, {worst['layout']}). At p = 4 `choose_layout` picks "
              + ", ".join(f"{_choice(r)} at scale {r['scale']}"
                          for r in validation_rows(paths)
                          if r["p"] == 4 and r["layout"] == "sharded") + "."]
    return "\n".join(lines) + "\n"


def _choice(row: dict) -> str:
    return planning.choose_layout("gat", row["n"], row["m"], 4, row["widths"], 1)


# ---------------------------------------------------------------------------- traced runs
def summarize(outputs: list[Path]) -> dict:
    """The traced summary of ``bench.memory.grid --breakdown`` / ``bench.memory.step
    --breakdown`` outputs (their ``BENCH_RESULT`` lines): per job and rank the block's
    sizes, the traced peak of the graph's generation, of the step and overall, and the
    components at the largest snapshot."""
    from ..core.worker import parse_result

    jobs = []
    for path in outputs:
        result = parse_result(Path(path).read_text())
        if result is None:
            raise ValueError(f"{path}: no BENCH_RESULT line")
        ranks = result.get("ranks", [result])
        job = {"scale": result["scale"], "procs": result.get("procs", 1),
               "dense": result.get("dense", "one process"), "n": result["n"],
               "nnz_graph": result["nnz_graph"], "nnz": result["nnz"], "k": result["k"],
               "layers": result["layers"], "ranks": []}
        for run in ranks:
            trace = run["trace"]
            peaks = [p["peak"] for p in trace["phase_peaks"]]
            top = max(trace["snapshots"], key=lambda s: s["traced"])
            job["ranks"].append({
                "rank": run.get("rank", 0), "rows": run.get("rows", result["n"]),
                "block_entries": run.get("block_entries", result["nnz"]),
                "traced_graph_peak": peaks[0], "traced_step_peak": max(peaks[1:]),
                "traced_peak": max(peaks), "largest_snapshot": top["name"],
                "components": top["components"]})
        jobs.append(job)
    return {"about": "bench.distributed.memory_validation --summarize of --breakdown runs",
            "jobs": jobs}


def slack_samples(paths=RECORDED, traced=TRACED) -> list[float]:
    """Per grid job of :data:`TRACED`: its largest rank's recorded growth minus the traced
    peak of the same rank (bytes): what a process holds beyond its traced arrays."""
    jobs = {(j["scale"], j["procs"], j["dense"]): j
            for j in json.loads(Path(traced).read_text())["jobs"]}
    out = []
    for path in paths:
        for job in json.loads(Path(path).read_text()).get("grid_runs", []):
            seen = jobs.get((job["scale"], job["procs"], job["dense"]))
            if seen is None:
                continue
            top = max(job["ranks"], key=lambda r: r["growth"])
            rank = next(r for r in seen["ranks"] if r["rank"] == top["rank"])
            out.append(top["growth"] - rank["traced_peak"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.distributed.memory_validation")
    ap.add_argument("--summarize", nargs="+", type=Path, metavar="OUTPUT",
                    help="print the traced summary of these --breakdown outputs (JSON)")
    a = ap.parse_args(argv)
    if a.summarize:
        print(json.dumps(summarize(a.summarize), indent=1))
        return 0
    print(validation_markdown(), end="")
    samples = slack_samples()
    if samples:
        print(f"\nslack samples (MiB): {', '.join(f'{v / MIB:.1f}' for v in samples)}; "
              f"median {statistics.median(samples) / MIB:.2f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
