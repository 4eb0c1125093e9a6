"""The cuda executor's kernels as a GPU would run them, measured without a GPU:
``python -m bench cuda-kernels``.

    python -m bench cuda-kernels [--cases M,L] [--out bench/results/current]

For every kernel (:mod:`gblas_gnn.gpu.compile`), the hand-written ones and those generated
from the edge programs of the built-in attention layers
(:mod:`gblas_gnn.gpu._program_catalogue`): registers per thread, shared memory per block,
spills and the theoretical occupancy at the executor's launch shape, for sm_80 (A100) and
sm_90 (H100), in the float32 / int32 variant the M and L cases launch. Then, for each
hand-written kernel and case, the bytes one launch of the kernel must move (a model, below)
and the time that takes at the H100's memory bandwidth: a lower bound on the kernel's time,
not a measurement.

The byte model, for ``n`` vertices, ``m`` stored edges (self loops included), feature width
``k``, float32 values, int32 indices and int64 row pointers, one head:

* *compulsory*: every array the kernel reads or writes, once (a dense ``n × k`` matrix,
  a vertex vector, an edge tensor, an index array, the row pointers), as if every gathered
  feature row stayed in cache after its first use;
* *gathered*: the rows it gathers by edge (``m·k`` values per gathered operand), each
  fetched again: the traffic when the gathered matrix does not fit in the L2 cache (50 MB on
  an H100; M's ``n × 32`` float32 matrix is 12.8 MB and fits, L's is 134 MB and does not).

Writes ``OUT/cuda-kernels.json`` and ``.md``.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from ..core.environment import environment

__all__ = ["run_cuda_kernels", "cuda_kernels_markdown", "BYTES", "BY_DEGREES",
           "H100_BANDWIDTH"]

#: HBM3 bandwidth of an H100 SXM5 (NVIDIA's datasheet), bytes per second
H100_BANDWIDTH = 3.35e12
_F, _I, _P, _ARG = 4, 4, 8, 8          # float32, int32 index, int64 pointer, int64 arg-max


def _sizes(n: int, m: int, k: int) -> dict[str, float]:
    return {"x": n * k * _F, "v": n * _F, "e": m * _F, "ix": m * _I, "ptr": (n + 1) * _P,
            "arg": n * k * _ARG, "g": m * k * _F}


_SEMIRINGS = ("plus_times", "min_plus", "max_plus", "max_times", "min_times")
#: kernel → (compulsory, gathered) bytes as coefficients of the sizes of :func:`_sizes`
BYTES = {
    "segment_reduce": (dict(ptr=1, e=1, v=1), {}),
    "edge_dots": (dict(ptr=1, ix=1, x=2, e=1), dict(g=1)),      # SDDMM (max/min: + arg)
    "head_dots": (dict(x=2, v=1), {}),
    "softmax_rows": (dict(ptr=1, e=2), {}),
    "softmax_backward_rows": (dict(ptr=1, e=3), {}),
    **{f"spmm_{name}": (dict(ptr=1, ix=1, e=1, x=2), dict(g=1))
       for name in (*_SEMIRINGS, "avg")},
    "argext_forward": (dict(ptr=1, ix=1, e=1, x=2, arg=1), dict(g=1)),
    "argext_features": (dict(ptr=1, ix=2, e=1, arg=1, x=2), dict(g=1)),
    "edge_unary": (dict(e=2), {}),
    "edge_binary": (dict(e=3), {}),
    "edge_gathered": (dict(e=2, ix=1, v=1), {}),
    "edge_outer": (dict(e=1, ix=2, v=2), {}),
    "leaky_relu_backward": (dict(e=3), {}),
    "dropout_edges": (dict(ix=2, e=1), {}),
    "keep_mask": (dict(v=2, x=0.25), {}),          # int64 row ids, one byte per entry
}


#: hand-written kernels whose bytes depend on how many rows are longer than
#: ``gpu._device.SPLIT_EDGES`` (the combination of an SpMM's partial rows): not modelled from
#: ``(n, m, k)``
BY_DEGREES = frozenset(f"spmm_{name}_combine" for name in _SEMIRINGS)


def _bytes(coefficients: dict[str, float], sizes: dict[str, float]) -> float:
    return float(sum(c * sizes[name] for name, c in coefficients.items()))


def _formula(coefficients: dict[str, float]) -> str:
    return " + ".join(f"{c:g}·{name}" for name, c in coefficients.items()) or "0"


def _case_size(name: str, out: Path) -> dict:
    """``n``, ``m`` (with self loops) and ``k`` of a case: from its recorded result when there
    is one, else by generating the graph."""
    from ..core.cases import build_case_data, get_case

    case = get_case(name)
    recorded = out / f"{name}.json"
    if recorded.exists():
        g = json.loads(recorded.read_text())["graph"]
        return {"n": g["n"], "m": g["nnz_with_self_loops"], "k": case.k_in,
                "source": str(recorded)}
    _, data = build_case_data(case)
    return {"n": data.n, "m": data.nnz_looped, "k": case.k_in, "source": "generated"}


def _toolkit() -> dict:
    from gblas_gnn.gpu.compile import ptxas_path

    version = subprocess.run([ptxas_path(), "--version"], capture_output=True, text=True)
    from importlib import metadata

    return {"ptxas": version.stdout.strip().splitlines()[-1],
            "numba-cuda": metadata.version("numba-cuda")}


def run_cuda_kernels(cases: list[str], out: Path) -> dict:
    """Compile, assemble and model every kernel; write the JSON and markdown."""
    from numba import float32

    from gblas_gnn.gpu._catalogue import variants
    from gblas_gnn.gpu._program_catalogue import all_kernels
    from gblas_gnn.gpu.compile import assemble, compile_kernels, occupancy, threads_per_block

    t0 = time.perf_counter()
    kernels = []
    for spec in all_kernels():
        if float32 not in spec.float_types and None not in spec.float_types:
            continue                        # a generated float64 kernel: the float32 one shows
        label, signature = next(variants(spec))          # float32/int32: what M and L run
        row = {"kernel": spec.name, "launch": spec.launch, "types": label,
               "threads_per_block": threads_per_block(spec), "resources": {}}
        for cc, ptx in compile_kernels(spec, signature, ((8, 0), (9, 0))).items():
            r = assemble(ptx, cc)
            r["occupancy"] = occupancy(r["registers"], r["shared_bytes"],
                                       row["threads_per_block"], cc)
            row["resources"][f"sm_{cc[0]}{cc[1]}"] = r
        kernels.append(row)
    sizes = {name: _case_size(name, out) for name in cases}
    for row in kernels:
        row["bytes"] = {}
        if row["kernel"] not in BYTES:            # generated, or BY_DEGREES: not modelled
            continue
        compulsory, gathered = BYTES[row["kernel"]]
        for name, s in sizes.items():
            z = _sizes(s["n"], s["m"], s["k"])
            c, g = _bytes(compulsory, z), _bytes(gathered, z)
            row["bytes"][name] = {"compulsory": c, "gathered": g,
                                  "lower_bound_us": c / H100_BANDWIDTH * 1e6,
                                  "no_reuse_us": (c + g) / H100_BANDWIDTH * 1e6}
    result = {"kernels": kernels, "cases": sizes, "h100_bandwidth": H100_BANDWIDTH,
              "byte_model": {k: {"compulsory": _formula(a), "gathered": _formula(b)}
                             for k, (a, b) in BYTES.items()},
              "toolkit": _toolkit(), "environment": environment(),
              "seconds": time.perf_counter() - t0}
    out.mkdir(parents=True, exist_ok=True)
    (out / "cuda-kernels.json").write_text(json.dumps(result, indent=1))
    (out / "cuda-kernels.md").write_text(cuda_kernels_markdown(result))
    return result


def cuda_kernels_markdown(r: dict) -> str:
    """The two tables of a :func:`run_cuda_kernels` result."""
    env = r["environment"]
    lines = ["# The cuda executor's kernels, compiled for A100 (sm_80) and H100 (sm_90)", "",
             f"Compiled without a GPU ({r['toolkit']['ptxas']}, numba-cuda "
             f"{r['toolkit']['numba-cuda']}), float32 values and int32 indices; commit "
             f"{(env.get('git', {}).get('commit') or '?')[:10]}, {env['date']}. Occupancy: "
             "resident warps per SM over 64 at the executor's block size (group kernels: 4 "
             "warps, a warp per row or column; element kernels: 256 threads). Rows "
             "`formulation:kernel` are the kernels generated from the edge programs of a "
             "built-in attention layer (`gat`: GATConv with 1 head, `gat4` with 4, "
             "`gat4-dropout` with attention dropout, `gat4-max` aggregating by max, `agnn`, "
             "`gatv2-4`, `transformer4`, `hgt2`: HGTConv with 2 heads on a typed graph): "
             "`forward` is the row pass, `column_pass` / `column_rows` and `row_pass` / "
             "`row_columns` the backward, with the twins that walk long items in chunks "
             "(`column_chunks`, `row_chunks`, `row_column_chunks`).", "",
             "| kernel | threads/block | registers sm_80 / sm_90 | shared B | spills B | "
             "occupancy sm_80 / sm_90 |", "|---|---|---|---|---|---|"]
    for row in r["kernels"]:
        a, b = row["resources"]["sm_80"], row["resources"]["sm_90"]
        spills = a["spill_stores"] + a["spill_loads"] + b["spill_stores"] + b["spill_loads"]
        lines.append(f"| {row['kernel']} | {row['threads_per_block']} | {a['registers']} / "
                     f"{b['registers']} | {b['shared_bytes']} | {spills} | "
                     f"{a['occupancy']:.0%} / {b['occupancy']:.0%} |")
    cases = list(r["cases"])
    desc = "; ".join(f"{c}: n = {s['n']:,}, m = {s['m']:,}, k = {s['k']}"
                     for c, s in r["cases"].items())
    lines += ["", "**A model, not a measurement.** Bytes one launch must move and the time "
              f"that takes at the H100's {r['h100_bandwidth'] / 1e12:.2f} TB/s ({desc}): "
              "*compulsory* counts every array once (gathered rows cached after first use), "
              "*no reuse* adds every gathered row fetched again (the case when the gathered "
              "matrix outgrows the 50 MB L2, as L's does). The generated kernels are not "
              "modelled: what they move depends on the formulation.", "",
              "| kernel | " + " | ".join(f"{c} MB | {c} µs (no reuse)" for c in cases) + " |",
              "|---|" + "---|---|" * len(cases)]
    for row in r["kernels"]:
        if not row["bytes"]:
            continue
        cells = []
        for c in cases:
            b = row["bytes"][c]
            cells += [f"{b['compulsory'] / 1e6:.1f}",
                      f"{b['lower_bound_us']:.1f} ({b['no_reuse_us']:.1f})"]
        lines.append(f"| {row['kernel']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
