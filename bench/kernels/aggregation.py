r"""The plain aggregation against DGL's: ours and ``update_all(copy_u, ⊕)``, interleaved.

    python -m bench aggregation [--cases M,KM,ER1M,L] [--reps 9] [--threads 2]
                                [--no-peers] [--name aggregation] [--out bench/results/current]

On each case's self-looped 0/1 pattern ``A`` (row = target) and its features ``X`` (n, k)
float32, four products:

* ``sum``: :math:`Z_i = \sum_{j \to i} X_j` (ours ``ex.spmm(A, X)``; DGL
  ``update_all(copy_u, sum)``, its cache-blocked libxsmm kernel);
* ``sum Aᵀ``: :math:`Z_j = \sum_{j \to i} X_i`, the product of a backward (ours
  ``ex.spmm_t(A, X)``; DGL the same call on ``dgl.reverse(g)``);
* ``mean`` and ``max``: ``ex.aggregate(A, X, ⊕)`` against ``update_all(copy_u, ⊕)``.

DGL runs in its own environment (:mod:`bench.peers`), a worker process that times its own
call; the repetitions are round-robin over every implementation (:func:`~bench.core.timing.
interleaved`), ours and DGL's of one product side by side, so that each call follows the
other library's (whose arrays have pushed its own out of the shared cache) and neither is
timed warm after itself; each pair is checked for agreement first. Beside each time: the bytes a
product must move, :math:`(|E| + n) \cdot k \cdot 4` (every gathered row once, every output
row once), over the time, against the box's copy bandwidth (:func:`copy_bandwidth`: a
parallel copy of 256 MiB, read plus write, on the same threads), and for the sums and the
mean the column tiles our kernel ran over (:func:`_tiles`: none where ``X`` fits half the last-level
cache or where the pattern's gathers hit the cache anyway).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np

from ..core.cases import build_case_data, get_case, graph_from_csr, save_case_data
from ..core.environment import environment, load_average
from ..core.rss import freed_memory_kept
from ..core.threads import set_threads
from ..core.timing import interleaved

__all__ = ["OPS", "copy_bandwidth", "run_aggregation", "aggregation_markdown"]

#: our products and DGL's counterparts: label → (aggregation, transposed)
OPS = {"sum": ("sum", False), "sum Aᵀ": ("sum", True), "mean": ("mean", False),
       "max": ("max", False)}

_COPY_BYTES = 256 << 20


def copy_bandwidth(reps: int = 7) -> float:
    """Bytes per second of a parallel copy of 256 MiB (read plus write counted), on numba's
    threads: the median of ``reps`` after one warm-up."""
    import numba as nb

    @nb.njit(parallel=True)
    def copy(src, dst):  # pragma: no cover (numba)
        for i in nb.prange(src.shape[0]):
            dst[i] = src[i]

    src = np.ones(_COPY_BYTES // 4, np.float32)
    dst = np.zeros_like(src)
    copy(src, dst)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        copy(src, dst)
        times.append(time.perf_counter() - t)
    return 2 * _COPY_BYTES / float(np.median(times))


def _looped_pattern(data):
    """The self-looped 0/1 pattern of a case (its ``edge_index``, in CSR order)."""
    sources, targets = data.edge_index
    indptr = np.zeros(data.n + 1, np.int64)
    np.cumsum(np.bincount(targets, minlength=data.n), out=indptr[1:])
    return graph_from_csr(data.n, indptr, sources.astype(np.int64, copy=True)).A


def _ours(A, X) -> dict:
    from gblas_gnn.executors import get_executor

    ex = get_executor("cpu")
    return {"sum": lambda: ex.spmm(A, X), "sum Aᵀ": lambda: ex.spmm_t(A, X),
            "mean": lambda: ex.aggregate(A, X, "mean"),
            "max": lambda: ex.aggregate(A, X, "max")}


def _tiles(A, k: int, transposed: bool) -> int:
    """The column tiles our ``plus_times`` kernel runs over for ``A``'s product with float32
    features of width ``k`` (1: none), as the executor's rule decides them
    (:func:`gblas_gnn.executors.cpu._spmm.tile_width`,
    :meth:`~gblas_gnn.executors.patterns.ColumnTiles.if_they_pay`)."""
    from gblas_gnn.executors.cpu._spmm import tile_width
    from gblas_gnn.executors.patterns import csr_of

    pattern = csr_of(A)
    width = tile_width(pattern.nrows if transposed else pattern.ncols, k * 4)
    tiles = None if width is None else pattern.column_tiles(width, transposed)
    return 1 if tiles is None else tiles.count


def _agreement(ours: np.ndarray, theirs: np.ndarray) -> dict:
    err = float(np.max(np.abs(ours - theirs))) if ours.size else 0.0
    scale = float(np.max(np.abs(theirs))) if theirs.size else 0.0
    return {"max_abs_err": err, "agree": bool(err <= 1e-5 * max(scale, 1.0))}


def _case(name: str, reps: int, threads: int, peers: bool, workdir: Path,
          keep_freed: bool) -> dict:
    case = get_case(name)
    _, data = build_case_data(case)
    A = _looped_pattern(data)
    X = data.H
    fns = _ours(A, X)
    timed = {}
    row: dict = {"case": name, "description": case.description, "n": data.n,
                 "entries": int(A.nvals), "k": int(X.shape[1]), "ops": {}}
    worker = None
    try:
        if peers:
            from ..peers.client import PeerAggregation, PeerWorker

            worker = PeerWorker(save_case_data(data, workdir / f"{name}.npz"), threads,
                                workdir, keep_freed=keep_freed)
            row["peer_versions"] = worker.versions
        for op, (reduce, transposed) in OPS.items():
            timed[f"ours {op}"] = fns[op]
            if worker is not None:
                theirs = PeerAggregation(worker, reduce, transposed)
                row["ops"][op] = {"agreement": _agreement(fns[op](), theirs.result())}
                timed[f"dgl {op}"] = theirs
        with freed_memory_kept(keep_freed):
            times = interleaved(timed, reps)
    finally:
        if worker is not None:
            worker.close()
    moved = (row["entries"] + data.n) * row["k"] * 4
    for op in OPS:
        entry = row["ops"].setdefault(op, {})
        entry["ours"] = times[f"ours {op}"]
        entry["bytes"] = moved
        entry["ours_bytes_per_s"] = moved / (entry["ours"]["median_ms"] / 1e3)
        if OPS[op][0] != "max":                 # the sums and the mean run the SpMM kernel
            entry["tiles"] = _tiles(A, row["k"], OPS[op][1])
        if f"dgl {op}" in times:
            entry["dgl"] = times[f"dgl {op}"]
            entry["dgl_over_ours"] = entry["dgl"]["median_ms"] / entry["ours"]["median_ms"]
    return row


def run_aggregation(cases: list[str], reps: int = 9, threads: int = 2, peers: bool = True,
                    out: Path | None = None, name: str = "aggregation",
                    keep_freed: bool = True) -> dict:
    """Time the products of :data:`OPS` on every case (ours, and DGL's unless not
    ``peers``); write ``out/name.json`` and ``out/name.md`` when ``out`` is given. With
    ``keep_freed`` both timing processes keep their freed memory
    (:func:`~bench.core.rss.keep_freed_memory`: why)."""
    with tempfile.TemporaryDirectory(prefix="aggregation-") as tmp:
        set_threads(threads, torch=False)
        result = {"threads": threads, "reps": reps, "load_average_start": load_average(),
                  "freed_memory": "kept" if keep_freed else "glibc's defaults",
                  "copy_bytes_per_s": copy_bandwidth(), "cases": []}
        for case in cases:
            result["cases"].append(_case(case, reps, threads, peers, Path(tmp), keep_freed))
    result["environment"] = environment()
    result["load_average_end"] = load_average()
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
        (out / f"{name}.md").write_text(aggregation_markdown(result) + "\n")
    return result


def _ms(t: dict | None) -> str:
    if t is None:
        return "—"
    return f"{t['median_ms']:.2f} ({t['q1_ms']:.2f}–{t['q3_ms']:.2f})"


def aggregation_markdown(result: dict) -> str:
    """The tables of :func:`run_aggregation`: medians with quartiles, DGL over ours, and the
    bytes moved per second against the copy bandwidth."""
    env = result.get("environment", {})
    copy = result["copy_bytes_per_s"] / 1e9
    lines = ["# The plain aggregation: ours against DGL's `update_all(copy_u, ⊕)`", "",
             f"{env.get('cpu', 'cpu')}, {result['threads']} threads, median of "
             f"{result['reps']} interleaved runs (quartiles), float32; load "
             f"{result['load_average_start']} → {result.get('load_average_end')}. Copy "
             f"bandwidth (256 MiB, read + write): {copy:.1f} GB/s."
             + (f" Freed memory in the timing processes: {result['freed_memory']}."
                if "freed_memory" in result else ""), ""]
    for row in result["cases"]:
        lines += [f"## {row['case']}: {row['description']} ({row['entries']:,} entries "
                  f"with self loops)", "",
                  "| product | ours ms | DGL ms | DGL / ours | ours GB/s (of copy) | our tiles | "
                  "agree |",
                  "|---|---|---|---|---|---|---|"]
        for op, e in row["ops"].items():
            ratio = f"{e['dgl_over_ours']:.2f}×" if "dgl_over_ours" in e else "—"
            rate = e["ours_bytes_per_s"] / 1e9
            agree = e.get("agreement", {}).get("agree")
            lines.append(f"| {op} | {_ms(e['ours'])} | {_ms(e.get('dgl'))} | {ratio} | "
                         f"{rate:.1f} ({rate / copy:.0%}) | {e.get('tiles', '—')} | "
                         f"{'—' if agree is None else ('yes' if agree else 'NO')} |")
        lines.append("")
    return "\n".join(lines)
