"""``python -m bench gpu``: the cuda executor on one GPU, in one command that fits a lent
machine's minutes (``bench/gpu/run.sh`` there).

Steps, each recorded in the result:

1. **versions**: the card, its driver and CUDA, torch, CuPy, numba-cuda, GraphBLAS
   (:mod:`.versions`);
2. **ceilings**: the device's copy bandwidth and one float32 matrix product
   (:mod:`.ceilings`);
3. **timings**: for every case (default M, L, then ER1M) and row (default :data:`ROWS`), ours on
   the cuda executor against PyG on the same GPU, through :func:`bench.layers.run.run_case`:
   agreement first (a disagreement stops the row, the others go on), then warm-up and
   interleaved repetitions of forward and forward+backward, each call ended by a device
   synchronisation (the median of ``reps``); after them, in the same process, each side's
   peak device memory over one forward+backward (CuPy's pool for ours, torch's allocator for
   PyG; everything the side holds on the device counted, its inputs included), and a kernel
   profile of one forward+backward of ours (:mod:`.profile`);
4. **bandwidth**: each kernel's bytes over its time against the copy bandwidth;
5. **where the time goes**: a forward+backward of :data:`WHERE_ROWS` at the targets' case
   profiled with blocking launches, everything timed (:mod:`.where`, ``OUT/where-<case>.txt``);
6. **correctness**: the GPU suites (:mod:`.suite`) in the time left of ``budget``;
7. the results file ``OUT/gpu-<card>.json`` and ``.md`` (:mod:`.report`), and a short table
   printed last.

The timings come before the suites: the suites' length on a device is unknown until they
have run once, and a row's agreement with PyG is checked before it is timed anyway.

``dry_run``: the same steps in Numba's CUDA simulator on the ``dry`` case (48 vertices), one
repetition, rows gat and gcn, one small test file: a proof that the command, the wheels'
install line (``run.sh``) and the results writer work, never a measurement.
"""

from __future__ import annotations

import gc
import json
import time
from pathlib import Path

from ..layers.run import CaseAborted, run_case
from .ceilings import ceilings
from .profile import KernelProfile
from .report import gpu_markdown, gpu_table, gpu_targets, target_case
from .suite import DRY_SUITES, SUITES, run_suite
from .versions import card_name, gpu_environment
from .where import run_where

__all__ = ["run_gpu_study", "ROWS", "DEFAULT_CASES"]

#: the rows timed on the device (:data:`bench.layers.rows.ROWS`)
ROWS = ("gat", "gat-h4", "agnn", "gatv2", "transformer", "gcn", "sage")
#: M, L and ER1M: L's size with uniform degrees, beside which L's power-law tail shows
DEFAULT_CASES = ("M", "L", "ER1M")
#: the rows whose whole step is profiled with blocking launches (:mod:`.where`): the plain
#: aggregation and an attention layer
WHERE_ROWS = ("gcn", "gatv2")
_DRY = {"cases": ("dry",), "rows": ("gat", "gcn"), "reps": 1}


def _log(msg: str) -> None:
    print(f"[gpu] {msg}", flush=True)


class _DeviceMemory:
    """Peak device bytes of one call of each side, in process (:mod:`bench.core.device`'s
    trackers); nothing in the simulator."""

    def __init__(self, device):
        self.device = device
        self.trackers = ({impl: device.peak_tracker(impl) for impl in ("ours", "pyg")}
                         if device.on_gpu else {})

    def resident(self, impl: str) -> int:
        if impl == "ours":
            import cupy

            return int(cupy.get_default_memory_pool().used_bytes())
        import torch

        return int(torch.cuda.memory_allocated())

    def peak(self, impl: str, fn) -> dict | None:
        if impl not in self.trackers:
            return None
        self.device.synchronize()
        gc.collect()
        tracker = self.trackers[impl]
        tracker.reset()
        before = self.resident(impl)
        out = fn()
        self.device.synchronize()
        del out
        return {"peak_device_bytes": tracker.peak_bytes(), "resident_before_bytes": before}


def _row_hook(memory: _DeviceMemory):
    """What the study adds to each timed row: device memory and ours' kernel profile."""
    from gblas_gnn.executors import get_executor

    def hook(pair, entry) -> None:
        entry["device_memory"] = {"ours": memory.peak("ours", pair.ours_fwd_bwd),
                                  "pyg": (memory.peak("pyg", pair.pyg_fwd_bwd)
                                          if pair.pyg is not None else None)}
        with KernelProfile(get_executor("cuda")) as prof:
            out = pair.ours_fwd_bwd()
            memory.device.synchronize()
        del out
        entry["kernels"] = prof.summary()
    return hook


def _release(device) -> None:
    """Hand the device memory this process cached back to the driver (the suites run in
    processes of their own)."""
    gc.collect()
    if device.on_gpu:
        import cupy
        import torch

        cupy.get_default_memory_pool().free_all_blocks()
        torch.cuda.empty_cache()


def _time_case(case: str, rows: list[str], reps: int, workdir: Path, hook) -> dict:
    """``run_case`` of ``rows`` on the device; a row that fails or disagrees is recorded
    and the case goes on with the rows after it."""
    merged: dict | None = None
    failed: dict[str, str] = {}
    left = list(rows)
    while left:
        try:
            result = run_case(case, left, reps=reps, warmup=1, memory=False,
                              executor="cuda", workdir=workdir, row_hook=hook)
        except CaseAborted as exc:
            result = exc.result
            done = list(result["layers"])
            bad = done[-1] if done else left[0]
            failed[bad] = str(exc)
            _log(f"{case}: {bad} stopped: {exc}")
            result["layers"].pop(bad, None)
            left = left[left.index(bad) + 1:]
        else:
            left = []
        if merged is None:
            merged = result
        else:
            merged["layers"].update(result["layers"])
            merged["spmm"] = result["spmm"] or merged["spmm"]
        gc.collect()
    merged["failed_rows"] = failed
    merged["status"] = "ok" if not failed else "partial"
    return merged


def run_gpu_study(out: Path, cases: list[str] | None = None, rows: list[str] | None = None,
                  reps: int = 5, budget: float = 470.0, workers: int = 8,
                  dry_run: bool = False) -> dict:
    """Run the study (module docstring) and write ``OUT/gpu-<card>.{json,md}``; return the
    result. ``budget``: seconds the whole command may take (the suites get what the other
    steps leave, at least a minute)."""
    from bench.core.device import device_for

    start = time.perf_counter()
    if dry_run:
        cases, rows, reps = list(_DRY["cases"]), list(_DRY["rows"]), _DRY["reps"]
    cases, rows = list(cases or DEFAULT_CASES), list(rows or ROWS)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    device = device_for("cuda")
    env = gpu_environment()
    card = env["card"]
    _log(f"card: {card['name']}; " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()
                                                if v is not None))
    result: dict = {"dry_run": dry_run, "device": device.kind, "environment": env,
                    "reps": reps, "budget_seconds": budget}
    result["ceilings"] = ceilings(small=dry_run)
    if result["ceilings"]["measured"]:
        c = result["ceilings"]
        _log(f"copy {c['copy']['bytes_per_second'] / 1e12:.2f} TB/s, float32 matmul "
             f"{c['matmul']['flops'] / 1e12:.1f} TFLOP/s")
    hook = _row_hook(_DeviceMemory(device))
    result["cases"] = {}
    for case in cases:
        t = time.perf_counter()
        result["cases"][case] = _time_case(case, rows, reps, out / "tmp", hook)
        _log(f"case {case} timed in {time.perf_counter() - t:.0f} s")
    _release(device)
    where_case = target_case(result) if result["cases"] else None
    if where_case is not None:                      # where the step's time goes, all of it
        t = time.perf_counter()
        found = run_where(where_case, list(_DRY["rows"] if dry_run else WHERE_ROWS), out,
                          timeout=120.0)
        result["where"] = ({"case": where_case, "file": found.name,
                            "text": found.read_text()} if found else None)
        _log(f"where {where_case}: {found} in {time.perf_counter() - t:.0f} s")
    result["suites"] = {}
    suites = DRY_SUITES if dry_run else SUITES
    for i, (name, files) in enumerate(suites.items()):
        left = (budget - (time.perf_counter() - start)) / (len(suites) - i)
        result["suites"][name] = run_suite(name, files, max(60.0, left),
                                           0 if dry_run else workers,
                                           out / f"suite-{name}.log")
    result["targets"] = gpu_targets(result)
    result["seconds"] = time.perf_counter() - start
    stem = f"gpu-{card_name(env)}"
    (out / f"{stem}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    (out / f"{stem}.md").write_text(gpu_markdown(result))
    print(gpu_table(result), flush=True)
    _log(f"wrote {out / (stem + '.json')}, {out / (stem + '.md')} in "
         f"{result['seconds']:.0f} s")
    return result
