"""Where a forward+backward of ours spends its time on the device, kernels and all.

The kernel profile (:mod:`.profile`) times our numba kernels alone. On the first H200 runs
they were a fraction of a step: GCN at ER1M spent 4.4 of 28.4 ms in them, GATv2 23 of
119 ms, and nothing else in the step (CuPy's element-wise work, cuBLAS, copies) was timed.
This step times everything: in a process of its own started with ``CUDA_LAUNCH_BLOCKING=1``
every launch, numba's or CuPy's or cuBLAS', returns only when its work is done, so
``cProfile``'s time of each Python function includes the device time of what it launched.
It writes, per row, the wall time of a step and the functions of the library and of the
array modules with the most inclusive (``cumulative``) and own (``tottime``) time.

Run by the study (:mod:`.study`); alone::

    CUDA_LAUNCH_BLOCKING=1 python -m bench.gpu.where --case ER1M --rows gcn,gatv2 --out DIR
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["profile_rows", "run_where"]

#: the frames reported: the library's, and the array modules' own
_OURS = ("gblas_gnn",)
_ARRAYS = ("cupy", "numba", "{method", "{built-in")


def _short(where: str) -> str:
    """A frame's path from its package on (``gblas_gnn/...``, ``cupy/...``)."""
    for mark in ("site-packages/", "/src/"):
        where = where.split(mark)[-1]
    return where


def _stats_text(prof: cProfile.Profile, calls: int, top: int) -> str:
    """The ``top`` library functions by inclusive time and the ``top`` functions of any
    module by own time, per step (``calls`` steps profiled)."""
    lines = []
    for order, what, keep in (("cumulative", "inclusive", _OURS),
                              ("tottime", "own", _OURS + _ARRAYS)):
        buf = io.StringIO()
        stats = pstats.Stats(prof, stream=buf)
        rows = []
        for (path, line, name), (_, ncalls, tt, ct, _) in stats.stats.items():
            where = f"{path}:{line}({name})"
            if any(k in where for k in keep):
                rows.append((ct if order == "cumulative" else tt, ncalls, where))
        rows.sort(reverse=True)
        lines.append(f"  by {what} time, ms a step (calls a step):")
        lines += [f"    {t / calls * 1e3:9.2f}  ({n / calls:7.1f})  {_short(w)}"
                  for t, n, w in rows[:top]]
    return "\n".join(lines)


def profile_rows(case: str, rows: list[str], steps: int = 3, top: int = 25) -> str:
    """The report of :mod:`this module <.where>` for ``rows`` at ``case`` (ours on the
    cuda executor, two untimed steps first)."""
    from bench.core.cases import CASES, build_case_data
    from bench.core.device import device_for
    from bench.layers.pair import LayerPair

    device = device_for("cuda")
    spec = CASES[case]
    g, data = build_case_data(spec)
    out = [f"# {case}: n = {data.n}, {data.edge_index.shape[1]} entries with loops; "
           f"CUDA_LAUNCH_BLOCKING={os.environ.get('CUDA_LAUNCH_BLOCKING', '0')}"]
    for row in rows:
        pair = LayerPair(row, g, data, spec.k_out, with_pyg=False, executor="cuda")
        step = device.timed(pair.ours_fwd_bwd)
        for _ in range(2):
            step()
        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.enable()
        for _ in range(steps):
            step()
        prof.disable()
        wall = (time.perf_counter() - t) / steps
        out += [f"## {row}: {wall * 1e3:.2f} ms a forward+backward (profiled, blocking)",
                _stats_text(prof, steps, top)]
        pair.close()
    return "\n".join(out) + "\n"


def run_where(case: str, rows: list[str], out: Path, timeout: float) -> Path | None:
    """:func:`profile_rows` in a subprocess with blocking launches, written to
    ``OUT/where-<case>.txt``; None (and the reason printed) if it failed or ran out of
    time."""
    path = Path(out) / f"where-{case}.txt"
    cmd = [sys.executable, "-m", "bench.gpu.where", "--case", case, "--rows", ",".join(rows),
           "--out", str(out)]
    try:
        done = subprocess.run(cmd, env={**os.environ, "CUDA_LAUNCH_BLOCKING": "1"},
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"[gpu] where {case}: stopped after {timeout:.0f} s", flush=True)
        return None
    if done.returncode != 0 or not path.exists():
        print(f"[gpu] where {case} failed: {done.stderr[-2000:]}", flush=True)
        return None
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu.where", description=__doc__)
    ap.add_argument("--case", required=True)
    ap.add_argument("--rows", required=True, type=lambda t: [r for r in t.split(",") if r])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    text = profile_rows(a.case, a.rows, a.steps)
    (a.out / f"where-{a.case}.txt").write_text(text)
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
