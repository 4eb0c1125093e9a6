"""Our layers at two source revisions, timed in one interleaved run: a change's before and
after on the same graph, input, weights and upstream gradient, on the same machine at the
same time.

``python -m bench revisions --before REV [--after REV] --case M --layers gat,agnn`` extracts
each revision's ``src`` (``git archive``; ``--after`` defaults to this checkout's working
tree), starts one long-lived :mod:`.worker` per side and asks them in turn, the
order alternating every round, for one training-mode forward and backward of each layer.
Both sides read the same case file. A worker runs only the library of its tree; the harness
(layer rows, case data) is this checkout's, so a layer row must exist at both revisions.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

import numpy as np

from ..core.cases import build_case_data, get_case, save_case_data
from ..core.environment import environment, load_average
from ..core.worker import ROOT

__all__ = ["run_revisions", "revisions_markdown", "write_revisions"]

WORKER = "bench.revisions.worker"


def _resolve(rev: str) -> str:
    out = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=ROOT,
                         capture_output=True, text=True)
    if out.returncode:
        raise ValueError(f"unknown revision {rev!r}: {out.stderr.strip()}")
    return out.stdout.strip()


def _extract(rev: str, into: Path) -> Path:
    """``rev``'s ``src`` folder under ``into``; returns the path to put on ``PYTHONPATH``."""
    blob = subprocess.run(["git", "archive", "--format=tar", rev, "src"], cwd=ROOT,
                          capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


class _Side:
    """One running worker."""

    def __init__(self, label: str, src: Path, data_path: Path, threads: int):
        # the tree's library first, then the harness (this checkout's bench package)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), str(ROOT)]))
        self.label = label
        self.proc = subprocess.Popen(["python3", "-m", WORKER, str(data_path), str(threads)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=env, cwd=ROOT)
        ready = self._read()
        if not str(ready["ready"]).startswith(str(src)):
            self.close()
            raise RuntimeError(f"{label}: the worker imported {ready['ready']}, not the "
                               f"library under {src}")
        self.library = ready["ready"]

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.label}: the worker ended (exit {self.proc.wait()})")
        return json.loads(line)

    def time(self, layer: str) -> dict:
        self.proc.stdin.write(json.dumps({"layer": layer}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


def _stats(values: list[float]) -> dict:
    a = np.asarray(values) * 1000
    return {"median_ms": float(np.median(a)), "min_ms": float(a.min()),
            "max_ms": float(a.max()), "runs_ms": [round(float(v), 2) for v in a]}


def run_revisions(before: str, after: str | None, case: str, layers: list[str], reps: int,
                  threads: int, out: Path) -> dict:
    """Time ``layers`` at ``before`` and ``after`` (None: the working tree) interleaved."""
    spec = get_case(case)
    if spec.kind != "layer":
        raise ValueError(f"case {case} is not a layer case")
    revs = {"before": _resolve(before), "after": _resolve(after) if after else None}
    result = {"case": case, "layers": layers, "reps": reps, "threads": threads,
              "revisions": {k: v or "working tree" for k, v in revs.items()},
              "environment": environment()}
    out = Path(out).resolve()          # the workers run in ROOT: a relative --out moves
    (out / "tmp").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out / "tmp") as tmp:
        tmp = Path(tmp)
        _, data = build_case_data(spec)
        data_path = save_case_data(data, tmp / "case.npz")
        result["n"], result["nnz"] = data.n, data.nnz
        del data
        trees = {k: _extract(v, tmp / k) if v else ROOT / "src" for k, v in revs.items()}
        sides = {}
        try:
            for k, src in trees.items():
                sides[k] = _Side(k, src, data_path, threads)
            times = {(k, layer): [] for k in sides for layer in layers}
            for layer in layers:                 # build and warm up, untimed
                for side in sides.values():
                    side.time(layer)
            for r in range(reps):
                order = list(sides) if r % 2 == 0 else list(sides)[::-1]
                for layer in layers:
                    for k in order:
                        times[(k, layer)].append(sides[k].time(layer))
        finally:
            for side in sides.values():
                side.close()
    result["load_average_end"] = load_average()
    result["rows"] = {}
    for layer in layers:
        row = {}
        for k in sides:
            runs = times[(k, layer)]
            row[k] = {"forward": _stats([t["forward"] for t in runs]),
                      "backward": _stats([t["backward"] for t in runs]),
                      "total": _stats([t["forward"] + t["backward"] for t in runs])}
        row["after_over_before"] = row["after"]["total"]["median_ms"] / \
            row["before"]["total"]["median_ms"]
        result["rows"][layer] = row
    result["date"] = time.strftime("%Y-%m-%d")
    return result


def _cell(s: dict) -> str:
    return f"{s['median_ms']:.1f} ({s['min_ms']:.1f}–{s['max_ms']:.1f})"


def revisions_markdown(result: dict) -> str:
    """The table of one run."""
    env = result["environment"]
    revs = result["revisions"]
    lines = [f"# Before / after at case {result['case']} (n = {result['n']}, "
             f"{result['nnz']} edges without self loops)", "",
             f"{result['date']}, {env['cpu']}, {result['threads']} threads, "
             f"{result['reps']} interleaved rounds (order alternating), load average "
             f"{env['load_average_start']} at the start, {result['load_average_end']} at the "
             f"end. Before: `{revs['before']}`; after: `{revs['after']}`. Training-mode "
             "forward and backward in ms, median (min–max).", "",
             "| layer | before fwd | before bwd | before total | after fwd | after bwd "
             "| after total | after / before |", "|---|---|---|---|---|---|---|---|"]
    for layer, row in result["rows"].items():
        b, a = row["before"], row["after"]
        lines.append(f"| {layer} | {_cell(b['forward'])} | {_cell(b['backward'])} | "
                     f"{_cell(b['total'])} | {_cell(a['forward'])} | {_cell(a['backward'])} | "
                     f"{_cell(a['total'])} | {row['after_over_before']:.2f} |")
    return "\n".join(lines) + "\n"


def write_revisions(result: dict, out: Path, name: str) -> list[Path]:
    """``OUT/NAME.json`` and ``OUT/NAME.md``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.json", out / f"{name}.md"]
    paths[0].write_text(json.dumps(result, indent=1) + "\n")
    paths[1].write_text(revisions_markdown(result))
    return paths
