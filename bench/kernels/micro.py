"""Kernel micro-benchmarks: the building blocks next to scipy's and torch's SpMM.

    python -m bench kernels [--n 100000] [--degree 16] [--k 32] [--threads 2] [--reps 7]
                            [--executor cpu] [--out bench/results/current]

On an Erdős–Rényi graph (seed 0, float32): SDDMM ``A ⊙ (H Hᵀ)``, the masked outer sum of
GAT, the row softmax, SpMM over every registered semiring (weights = the softmax of the
SDDMM, so they are nonnegative as ``avg`` needs), the named aggregations, a composition
aggregating with max (weights ``u_i + v_j`` on A's pattern: evaluated, and forward plus
derived backward), scipy's CSR SpMM and ``torch.sparse.mm``. Repetitions are round-robin
over all ops (median and spread after one warm-up). Our ops run on the executor
``--executor`` names. The SuiteSparse kernel each op runs is read from ``gb.ss.burble``.
Writes ``kernels.json`` and ``kernels.md`` and prints the table.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

from ..core.environment import environment, load_average
from ..core.threads import set_threads
from ..core.timing import interleaved
from ..core.worker import omp_policy_note
from .burble import kernels_used

__all__ = ["run_kernels", "kernels_table"]


def _ops(n: int, degree: float, k: int, with_torch: bool, executor: str = "cpu"
         ) -> tuple[dict, dict]:
    import scipy.sparse as sp

    import gblas_gnn as gg

    ex = gg.executors.get_executor(executor)
    g = gg.data.erdos_renyi(n, degree / n, seed=0)
    rng = np.random.default_rng(0)
    H = rng.standard_normal((n, k), dtype=np.float32)
    Hx, u, v = ex.asarray(H), ex.asarray(H[:, 0].copy()), ex.asarray(H[:, 1].copy())
    S = gg.ops.sddmm(g.A, Hx, Hx, executor=ex)
    P = gg.ops.softmax(S, executor=ex)
    fns = {"sddmm": lambda: gg.ops.sddmm(g.A, Hx, Hx, executor=ex),
           "outer_add": lambda: gg.ops.outer_add(g.A, u, v, executor=ex),
           "softmax": lambda: gg.ops.softmax(S, executor=ex)}
    for name in gg.semirings.names():
        sr = gg.semirings.get(name)
        fns[f"spmm {name}"] = lambda sr=sr: sr.spmm(P, Hx, executor=ex)
    for a in ("sum", "max", "min", "mean"):
        fns[f"aggregate {a}"] = lambda a=a: gg.ops.aggregate(P, Hx, a, executor=ex)
    fns.update(_composed_max(g, Hx, u, v, ex))
    d = P.ss.export("csr", give_ownership=False, sort=True)
    values = d["values"] if not d["is_iso"] else np.full(d["col_indices"].size, d["values"][0])
    csr = sp.csr_matrix((values.astype(np.float32), d["col_indices"], d["indptr"]),
                        shape=(n, n))
    fns["scipy csr @ H"] = lambda: csr @ H
    foreign = {"scipy csr @ H": "scipy"}
    if with_torch:
        import torch

        with warnings.catch_warnings():     # "beta state" / "invariant checks" notices
            warnings.simplefilter("ignore", UserWarning)
            At = torch.sparse_csr_tensor(torch.from_numpy(csr.indptr.astype(np.int64)),
                                         torch.from_numpy(csr.indices.astype(np.int64)),
                                         torch.from_numpy(csr.data), size=(n, n))
        Ht = torch.from_numpy(H)
        fns["torch.sparse.mm (CSR)"] = lambda: torch.sparse.mm(At, Ht)
        foreign["torch.sparse.mm (CSR)"] = f"torch {torch.__version__}"
    meta = {"n": n, "nnz": g.nnz, "degree": degree, "k": k}
    return fns, {"foreign": foreign, **meta}


def _composed_max(g, Hx, u, v, ex) -> dict:
    """``Z = max_j (u_i + v_j) X_j`` over A's pattern as a composition: its evaluation, and
    its forward with the derived backward (cotangent: ones)."""
    from gblas_gnn import compose, ops
    from gblas_gnn.ops import rep

    def fn(X, u, v):
        return ops.aggregate(ops.structure(g.A) * (rep(u) + rep(v).T), X, "max")

    ones = ex.asarray(np.ones(Hx.shape, Hx.dtype))

    def train():
        _, pull = compose.vjp(fn, Hx, u, v, executor=ex, vertex=(0, 1, 2))
        return pull(ones)

    return {"composed max, evaluation":
            lambda: compose.evaluate(fn, Hx, u, v, executor=ex, vertex=(0, 1, 2)),
            "composed max, fwd+bwd": train}


def run_kernels(n: int = 100_000, degree: float = 16, k: int = 32, threads: int = 2,
                reps: int = 7, out: Path | None = None, with_torch: bool | None = None,
                executor: str = "cpu") -> dict:
    """Run the micro-benchmarks; write ``out/kernels.json`` and ``out/kernels.md``.

    Parameters
    ----------
    n, degree, k : graph size, average degree and feature width.
    threads : thread count for every runtime.
    reps : timed rounds (round-robin over the ops) after one warm-up.
    out : output folder (nothing written when None).
    with_torch : include ``torch.sparse.mm``; default: when torch is installed.
    executor : the executor our ops run on.

    Returns
    -------
    dict
        ``{"meta": ..., "results": [{"op", "kernels", "median_ms", ...}]}``.
    """
    if with_torch is None:
        import importlib.util

        with_torch = importlib.util.find_spec("torch") is not None
    got = set_threads(threads, torch=with_torch, executor=executor)
    fns, info = _ops(n, degree, k, with_torch, executor)
    foreign = info.pop("foreign")
    kernels = {}
    for name, fn in fns.items():
        kernels[name] = (foreign[name], []) if name in foreign else kernels_used(fn)
    times = interleaved(fns, reps, warmup=1)
    rows = [{"op": name, "kernels": kernels[name][0], **times[name],
             "burble": kernels[name][1]} for name in fns]
    meta = {**info, "executor": executor, "threads": threads, "threads_set": got, "reps": reps,
            "omp_wait_policy": omp_policy_note()["this_process"],
            "environment": environment(), "load_average_end": load_average()}
    result = {"meta": meta, "results": rows}
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "kernels.json").write_text(json.dumps(result, indent=2) + "\n")
        (out / "kernels.md").write_text(kernels_table(result) + "\n")
    return result


def kernels_table(result: dict) -> str:
    """The markdown table of a :func:`run_kernels` result (a result recorded before the
    executor was an option has no ``executor`` in its meta, and none in its header)."""
    m = result["meta"]
    executor = f"executor={m['executor']}, " if "executor" in m else ""
    lines = [f"n={m['n']}, nnz={m['nnz']}, k={m['k']}, {executor}threads={m['threads']}, "
             f"{m['reps']} runs after 1 warm-up (load average "
             f"{m['environment']['load_average_start']} → {m['load_average_end']})", "",
             "| op | median ms | min–max ms | kernels (SuiteSparse burble) |",
             "|---|---|---|---|"]
    for r in result["results"]:
        lines.append(f"| {r['op']} | {r['median_ms']:.1f} | {r['min_ms']:.1f}–{r['max_ms']:.1f}"
                     f" | {r['kernels']} |")
    return "\n".join(lines)
