"""Command line of the benchmark harness.

    python -m bench run --case M|L|ER1M|XL|tiny|tinyXL [--k K] [--layers gat,agnn,gcn|all]
                        [--peers dgl] [--reps 5] [--warmup 1] [--threads 2] [--blas-threads N]
                        [--out bench/results/current] [--tol 1e-4] [--executor cpu]
                        [--mem-limit-gib 20] [--self-limit-gib G] [--no-memory]
                        [--keep-data] [--timeout S] [--omp-wait-policy passive]
                        [--pyg-in-process] [--hand-back-memory]
    python -m bench kernels [--n 100000] [--degree 16] [--k 32] [--threads 2] [--reps 7]
                            [--executor cpu] [--out bench/results/current]
    python -m bench aggregation [--cases M,KM,ER1M,L] [--reps 9] [--threads 2] [--no-peers]
                                [--hand-back-memory] [--name aggregation]
                                [--out bench/results/current]
    python -m bench cuda-kernels [--cases M,L] [--out bench/results/current]
    python -m bench gpu [--cases M,L] [--layers gat,...] [--reps 5] [--budget 470]
                        [--workers 8] [--dry-run] [--out bench/results/current]
    python -m bench peers [--setup [--dry-run]]
    python -m bench hgt [--n 100000] [--degree 16] [--k 32] [--heads 2] [--reps 5] [--peers dgl]
                        [--threads 2] [--no-memory] [--name M-hetero] [--out bench/results/current]
                        [--omp-wait-policy passive] [--hand-back-memory]
    python -m bench revisions --before REV [--after REV] --case M [--layers gat,agnn]
                              [--reps 5] [--threads 2] [--name NAME] [--out bench/results/current]
    python -m bench memory [--scales 18,20] [--k 16] [--layers 3] [--procs 1,4]
                           [--no-breakdown] [--mem-limit-gib 6] [--name memory]
                           [--out bench/results/current]

``--layers`` takes rows of :data:`bench.layers.rows.ROWS` (gat, gat-h4, agnn, gcn, sgc, gin,
gatv2, gatv2-h4, transformer, transformer-h4) or ``all``; ``--peers dgl`` times DGL's layers
beside them, in DGL's own environment, which ``python -m bench peers --setup`` creates once
(:mod:`bench.peers.env`); ``python -m bench peers`` prints its versions. On the host PyG's
layers run in a worker process of their own (``--pyg-in-process``: beside ours, as before).

Run from a checkout: the repository root as working directory or on ``PYTHONPATH``. Exit
status: 0 done, 1 case aborted (ours and PyG disagree, or our side failed), 2 bad arguments.

``--executor NAME`` (default ``cpu``; see :func:`gblas_gnn.executors.names`) is what our
layers and ops run on; the JSON and the markdown header record it. ``primitives`` is the cpu
executor without its fused kernels. ``dist`` is refused: the distributed study is a separate
command (an MPI job), not this single-process comparison. ``cuda`` runs both implementations
on one GPU (PyG through torch's CUDA build; :mod:`bench.core.device`) for the layer cases; ``--k``
sets their feature width (e.g. 128). ``cuda-kernels`` needs no GPU: it compiles every kernel
of the cuda executor and tabulates its resources and the bytes it must move
(:mod:`bench.kernels.cuda`). ``gpu`` is the study a lent GPU machine runs in one command
(``bash bench/gpu/run.sh``, :mod:`bench.gpu.study`): versions, ceilings, ours against PyG on
the device with memory and each kernel's bandwidth, the GPU correctness suites;
``--dry-run`` runs it in Numba's CUDA simulator on a 48-vertex graph.

``--omp-wait-policy`` (default ``passive``) sets ``OMP_WAIT_POLICY`` for every process of the
run. Torch and SuiteSparse each bring their own OpenMP runtime; with the default (spinning)
policy, idle threads of one runtime burn the cores the other needs, and on this 2-core
machine with another job running a PyG layer on 300 vertices took 200–440 ms per pass
instead of 2–5 ms (ours 7–30× slower too). OpenMP reads the variable when it loads, so the
command re-executes itself with it set (``main(..., reexec=True)``, what ``python -m
bench`` does); called in-process without ``reexec`` only the workers get it, and the JSON
records both.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .core.agreement import DEFAULT_TOL
from .core.cases import CASES
from .core.worker import with_root_on_path
from .layers.rows import DEFAULT_LAYERS, LAYERS
from .peers.env import PEERS

__all__ = ["main", "build_parser"]

DEFAULT_OUT = Path("bench/results/current")
POLICIES = ("passive", "active", "default")
#: executors this command refuses, and why
REFUSED_EXECUTORS = {"dist": "the distributed study is a separate command (an MPI job); "
                             "python -m bench compares one process with PyTorch Geometric"}


def _layer_list(allowed: tuple[str, ...]):
    """Parser of ``--layers``: ``all`` or a comma list of ``allowed``."""
    def parse(text: str) -> list[str]:
        if text.strip() == "all":
            return list(allowed)
        names = [s.strip() for s in text.split(",") if s.strip()]
        if not names or any(s not in allowed for s in names):
            raise argparse.ArgumentTypeError(f"layers must be 'all' or a comma list of "
                                             f"{allowed}, got {text!r}")
        return names
    return parse


_layers = _layer_list(LAYERS)
#: the layers the distributed study runs (ours only, no PyG)
DIST_LAYERS = ("gat", "agnn", "gcn")


#: the help of ``--hand-back-memory`` (``run``, ``hgt`` and ``aggregation``)
HAND_BACK_HELP = ("leave glibc's defaults in the timing processes (default: each keeps its "
                  "freed memory, see bench.core.rss.keep_freed_memory)")


def _peers_list(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names or any(n not in PEERS for n in names):
        raise argparse.ArgumentTypeError(f"peers must be a comma list of {sorted(PEERS)}, "
                                         f"got {text!r}")
    return names


def _executor_names() -> list[str]:
    """The registered executors this command runs on."""
    from gblas_gnn.executors import names

    return [n for n in names() if n not in REFUSED_EXECUTORS]


def _executor(text: str) -> str:
    if text in REFUSED_EXECUTORS:
        raise argparse.ArgumentTypeError(f"{text!r} is not benchmarked here: "
                                         f"{REFUSED_EXECUTORS[text]}")
    if text not in _executor_names():
        raise argparse.ArgumentTypeError(f"unknown executor {text!r}; choose from "
                                         f"{', '.join(_executor_names())}")
    return text


def _procs(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or any(v < 1 or round(v ** 0.5) ** 2 != v for v in values):
        raise argparse.ArgumentTypeError(f"--procs must be a comma list of square numbers "
                                         f"(1, 4, 9, 16), got {text!r}")
    return values


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value
    return parse


def _layer_cases(text: str) -> list[str]:
    """A comma-separated list of layer cases (``M,L``); ``ArgumentTypeError`` otherwise."""
    names = [c for c in text.split(",") if c]
    bad = [c for c in names if c not in CASES or CASES[c].kind != "layer"]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"not layer cases: {bad or text!r}; choose from "
            f"{sorted(c for c, v in CASES.items() if v.kind == 'layer')}")
    return names


def build_parser(prog: str = "python -m bench") -> argparse.ArgumentParser:
    """The argument parser (``run``, ``kernels`` and ``dist`` subcommands)."""
    p = argparse.ArgumentParser(prog=prog, description="Benchmarks against PyTorch Geometric "
                                "and kernel micro-benchmarks.")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run a case: ours vs PyG, timing, agreement, memory")
    r.add_argument("--case", required=True, choices=list(CASES))
    r.add_argument("--k", type=_positive(int), default=None,
                   help="feature width of a layer case instead of its own (k_in = k_out)")
    r.add_argument("--layers", type=_layers, default=list(DEFAULT_LAYERS),
                   help="'all' or a comma list of " + ",".join(LAYERS)
                        + " (layer cases; default " + ",".join(DEFAULT_LAYERS) + ")")
    r.add_argument("--peers", type=_peers_list, default=[],
                   help="also time these libraries' layers, each in its own environment "
                        "(dgl; create it with: python -m bench peers --setup)")
    r.add_argument("--reps", type=_positive(int), default=5,
                   help="timed repetitions (epochs for XL); ≥ 5 for reportable numbers")
    r.add_argument("--warmup", type=int, default=1)
    r.add_argument("--threads", type=_positive(int), default=2,
                   help="threads of torch, GraphBLAS, numba and BLAS")
    r.add_argument("--blas-threads", type=_positive(int), default=None,
                   help="override the BLAS (numpy OpenBLAS) threads only")
    r.add_argument("--out", type=Path, default=DEFAULT_OUT)
    r.add_argument("--tol", type=_positive(float), default=DEFAULT_TOL,
                   help="agreement tolerance, relative to the reference's max |value|")
    r.add_argument("--mem-limit-gib", type=_positive(float), default=20.0,
                   help="RSS limit of every worker process")
    r.add_argument("--self-limit-gib", type=_positive(float), default=None,
                   help="RSS limit of this process (default: --mem-limit-gib)")
    r.add_argument("--no-memory", dest="memory", action="store_false",
                   help="skip the peak-memory subprocesses (layer cases)")
    r.add_argument("--keep-data", action="store_true",
                   help="keep the case's data file in OUT/tmp")
    r.add_argument("--timeout", type=_positive(float), default=None,
                   help="wall-clock limit per worker process, seconds")
    r.add_argument("--no-plot", dest="plot", action="store_false")
    r.add_argument("--pyg-in-process", dest="pyg_process", action="store_false",
                   help="run PyG's layers in this process, beside ours (default: in a "
                        "worker process of their own, on the host)")
    r.add_argument("--hand-back-memory", dest="keep_freed", action="store_false",
                   help=HAND_BACK_HELP)
    r.add_argument("--quiet", action="store_true")
    k = sub.add_parser("kernels", help="kernel micro-benchmarks with SuiteSparse kernel names")
    k.add_argument("--n", type=_positive(int), default=100_000)
    k.add_argument("--degree", type=_positive(float), default=16)
    k.add_argument("--k", type=_positive(int), default=32)
    k.add_argument("--threads", type=_positive(int), default=2)
    k.add_argument("--reps", "--repeat", type=_positive(int), default=7)
    k.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ag = sub.add_parser("aggregation", help="the plain aggregation (sum, sum Aᵀ, mean, max) "
                        "against DGL's update_all(copy_u, ⊕), interleaved, with bytes/s")
    ag.add_argument("--cases", type=_layer_cases, default=["M", "KM", "ER1M", "L"])
    ag.add_argument("--reps", type=_positive(int), default=9)
    ag.add_argument("--threads", type=_positive(int), default=2)
    ag.add_argument("--no-peers", dest="peers", action="store_false",
                    help="ours only (no DGL environment needed)")
    ag.add_argument("--hand-back-memory", dest="keep_freed", action="store_false",
                    help=HAND_BACK_HELP)
    ag.add_argument("--name", default="aggregation")
    ag.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ag.add_argument("--omp-wait-policy", choices=POLICIES, default="passive",
                    help="OMP_WAIT_POLICY of the run ('default': leave unset)")
    ck = sub.add_parser("cuda-kernels", help="every kernel of the cuda executor compiled for "
                        "sm_80 and sm_90 (no GPU needed): resources, occupancy and the bytes "
                        "it moves on the M and L cases")
    ck.add_argument("--cases", type=lambda t: [c for c in t.split(",") if c],
                    default=["M", "L"])
    ck.add_argument("--out", type=Path, default=DEFAULT_OUT)
    gp = sub.add_parser("gpu", help="the cuda executor on one GPU: versions, ceilings, ours "
                                    "vs PyG with device memory and kernel bandwidth, the "
                                    "GPU suites (bench/gpu/run.sh on a lent machine)")
    gp.add_argument("--cases", type=lambda t: [c for c in t.split(",") if c], default=None,
                    help="layer cases, comma list (default M,L,ER1M)")
    gp.add_argument("--layers", type=_layers, default=None,
                    help="rows to time (default gat,gat-h4,agnn,gatv2,transformer,gcn,sage)")
    gp.add_argument("--reps", type=_positive(int), default=5)
    gp.add_argument("--budget", type=_positive(float), default=470.0,
                    help="seconds the whole study may take; the suites get what is left")
    gp.add_argument("--workers", type=int, default=8, help="xdist workers of the suites")
    gp.add_argument("--dry-run", action="store_true",
                    help="in Numba's CUDA simulator, on a 48-vertex graph: the plumbing only")
    gp.add_argument("--out", type=Path, default=DEFAULT_OUT)
    d = sub.add_parser("dist", help="the dist executor on 1..P processes against one process "
                                    "(MPI jobs)")
    d.add_argument("--case", required=True, choices=list(CASES))
    d.add_argument("--procs", type=_procs, default=[1, 4],
                   help="comma list of square process counts (default 1,4)")
    d.add_argument("--layers", type=_layer_list(DIST_LAYERS), default=["gat", "agnn"])
    d.add_argument("--reps", type=_positive(int), default=5)
    d.add_argument("--warmup", type=int, default=1)
    d.add_argument("--relabel", action="store_true", help="seeded random vertex relabelling")
    d.add_argument("--out", type=Path, default=DEFAULT_OUT)
    sc = sub.add_parser("scale", help="a 3-layer GAT training epoch on a Kronecker graph "
                                      "generated in place on P processes (an MPI job)")
    sc.add_argument("--scale", type=_positive(int), required=True)
    sc.add_argument("--edge-factor", type=_positive(int), default=16)
    sc.add_argument("--procs", type=_procs, default=[4])
    sc.add_argument("--epochs", type=_positive(int), default=2)
    sc.add_argument("--warmup", type=int, default=1)
    sc.add_argument("--mem-limit-gib", type=_positive(float), default=22.0,
                    help="stop the job above this resident memory (all ranks together)")
    sc.add_argument("--out", type=Path, default=DEFAULT_OUT)
    mm = sub.add_parser("memory", help="bytes per stored entry of one 3-layer GAT training "
                                       "step in one process, and a breakdown by component")
    mm.add_argument("--scales", type=lambda t: [int(v) for v in t.split(",") if v.strip()],
                    default=[18, 20], help="Kronecker scales, comma list (default 18,20)")
    mm.add_argument("--k", type=_positive(int), default=16)
    mm.add_argument("--layers", type=_positive(int), default=3)
    mm.add_argument("--threads", type=_positive(int), default=2)
    mm.add_argument("--model", choices=["gat", "gatv2", "gatv2-e"], default="gat",
                    help="the convolution: GATConv (default), GATv2Conv, or GATv2Conv with "
                         "8 features an edge (one process only)")
    mm.add_argument("--procs", type=_procs, default=[1],
                    help="also run every scale as a grid job of each count above 1 (MPI), "
                         "against one process (comma list of squares; default 1)")
    mm.add_argument("--dense", type=lambda t: [v for v in t.split(",") if v.strip()],
                    default=["replicated", "sharded"],
                    help="the grid jobs' layouts of dense tensors, comma list (default "
                         "replicated,sharded)")
    mm.add_argument("--no-breakdown", dest="breakdown", action="store_false",
                    help="skip the traced run (tracemalloc) that attributes the bytes")
    mm.add_argument("--mem-limit-gib", type=_positive(float), default=6.0,
                    help="RSS limit of every worker process")
    mm.add_argument("--name", default="memory", help="output file name without extension")
    mm.add_argument("--out", type=Path, default=DEFAULT_OUT)
    c = sub.add_parser("comm", help="words per rank per layer: the global scheme on 1..P "
                                    "processes against its formula, the bound, the local "
                                    "formulation and CAGNET (MPI jobs)")
    c.add_argument("--procs", type=_procs, default=[1, 4, 9, 16])
    c.add_argument("--graphs", type=lambda t: [g for g in t.split(";") if g],
                   default=None, help="';'-separated er:n=N,density=D / "
                                      "kron:scale=S,edge_factor=E (default: the study's)")
    c.add_argument("--models", type=lambda t: t.split(","), default=["gat", "agnn", "gcn"])
    c.add_argument("--ks", type=lambda t: [int(v) for v in t.split(",")], default=[16, 128])
    c.add_argument("--out", type=Path, default=DEFAULT_OUT)
    rv = sub.add_parser("revisions", help="our layers at two git revisions in one "
                                          "interleaved run (a change's before and after)")
    rv.add_argument("--before", required=True, help="git revision of the 'before' side")
    rv.add_argument("--after", default=None,
                    help="git revision of the 'after' side (default: the working tree)")
    rv.add_argument("--case", required=True, choices=[c for c, v in CASES.items()
                                                      if v.kind == "layer"])
    rv.add_argument("--layers", type=_layer_list((*LAYERS, "hgt")),
                    default=["gat", "gat-h4", "agnn"],
                    help="layer rows, and 'hgt' (HGT on the typed graph of 'bench hgt')")
    rv.add_argument("--reps", type=_positive(int), default=5)
    rv.add_argument("--threads", type=_positive(int), default=2)
    rv.add_argument("--name", default=None,
                    help="output file name without extension (default revisions-CASE)")
    rv.add_argument("--out", type=Path, default=DEFAULT_OUT)
    hg = sub.add_parser("hgt", help="HGT on a synthetic typed graph: ours against "
                        "PyG's HGTConv, time, agreement, peak memory (layers/hetero.py)")
    hg.add_argument("--n", type=_positive(int), default=100_000)
    hg.add_argument("--degree", type=_positive(int), default=16)
    hg.add_argument("--k", type=_positive(int), default=32)
    hg.add_argument("--heads", type=_positive(int), default=2)
    hg.add_argument("--reps", type=_positive(int), default=5)
    hg.add_argument("--threads", type=_positive(int), default=2)
    hg.add_argument("--no-memory", dest="memory", action="store_false")
    hg.add_argument("--hand-back-memory", dest="keep_freed", action="store_false",
                    help=HAND_BACK_HELP)
    hg.add_argument("--peers", choices=["dgl"], default=None,
                    help="also time DGL's HGTConv (another model: a reference, not compared "
                         "for equality; its environment: python -m bench peers --setup)")
    hg.add_argument("--name", default="M-hetero")
    hg.add_argument("--out", type=Path, default=DEFAULT_OUT)
    hg.add_argument("--omp-wait-policy", choices=POLICIES, default="passive",
                    help="OMP_WAIT_POLICY of the run ('default': leave unset)")
    pe = sub.add_parser("peers", help="the peer libraries' own environments (DGL): print "
                                      "their versions, or create them with --setup")
    pe.add_argument("--setup", action="store_true",
                    help="create the environments (a venv per peer, from PyPI)")
    pe.add_argument("--dry-run", action="store_true", help="with --setup: print the commands")
    pe.add_argument("--peer", choices=sorted(PEERS), default="dgl")
    for sp in (r, k):
        sp.add_argument("--executor", type=_executor, default="cpu",
                        metavar="{" + ",".join(_executor_names()) + "}",
                        help="the executor our layers and ops run on (default cpu; dist is "
                             "refused: the distributed study is a separate command)")
        sp.add_argument("--omp-wait-policy", choices=POLICIES, default="passive",
                        help="OMP_WAIT_POLICY for every process ('default': leave unset)")
    return p


def _run(a) -> int:
    from .core.device import DeviceUnavailable, device_for
    from .layers.report import markdown, write_outputs
    from .layers.run import CaseAborted, run_case

    if a.warmup < 0:
        print("error: --warmup must be ≥ 0", file=sys.stderr)
        return 2
    try:
        device_for(a.executor)
    except DeviceUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if a.peers:
        from .peers.env import PeerMissing, require

        if a.executor == "cuda" or CASES[a.case].kind != "layer":
            print("error: --peers runs the layer cases on the host (DGL on the CPU) only",
                  file=sys.stderr)
            return 2
        try:
            for peer in a.peers:
                require(peer)
        except PeerMissing as exc:
            print(f"error: --peers {','.join(a.peers)}: {exc}", file=sys.stderr)
            return 2
    if a.executor == "cuda" and CASES[a.case].kind != "layer":
        print(f"error: case {a.case} trains a model in worker processes; with --executor "
              "cuda only the layer cases run", file=sys.stderr)
        return 2
    code = 0
    try:
        result = run_case(a.case, a.layers, a.reps, a.warmup, a.threads, a.tol,
                          a.mem_limit_gib, a.memory, a.out / "tmp", a.keep_data, a.timeout,
                          a.quiet, worker_env=policy_env(a.omp_wait_policy),
                          self_limit_gib=a.self_limit_gib, blas_threads=a.blas_threads,
                          executor=a.executor, k=a.k, peers=tuple(a.peers),
                          pyg_process=a.pyg_process, keep_freed=a.keep_freed)
    except CaseAborted as exc:
        print(f"bench: case {a.case} aborted: {exc}", file=sys.stderr)
        result, code = exc.result, 1
    paths = write_outputs(result, a.out, with_plot=a.plot)
    print(markdown(result))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return code


def _dist(a) -> int:
    from .distributed.executor import dist_markdown, run_dist

    result = run_dist(a.case, a.procs, a.layers, a.reps, a.warmup, a.relabel, a.out)
    print(dist_markdown(result))
    print(f"wrote {a.out / f'dist-{a.case}.json'}, {a.out / f'dist-{a.case}.md'}")
    return 0


def _comm(a) -> int:
    from .distributed.comm import DEFAULT_GRAPHS, NO_PLOT, comm_markdown, run_comm

    result = run_comm(a.procs, a.graphs or DEFAULT_GRAPHS, a.models, a.ks, a.out)
    print(comm_markdown(result))
    written = ["comm.json", "comm.md", *([result["plot"]] if result["plot"] else [])]
    print("wrote " + ", ".join(str(a.out / name) for name in written))
    if not result["plot"]:
        print(NO_PLOT)
    return 0


def _scale(a) -> int:
    from .distributed.scale import run_scale, scale_markdown

    code = 0
    for p in a.procs:
        result = run_scale(a.scale, a.edge_factor, p, a.epochs, a.warmup, a.mem_limit_gib,
                           a.out)
        print(scale_markdown(result))
        code = max(code, 1 if "failed" in result else 0)
    return code


def _memory(a) -> int:
    from .memory.study import memory_markdown, run_memory

    result = run_memory(a.scales, a.k, a.layers, a.threads, a.breakdown, a.mem_limit_gib,
                        a.out, a.name, tuple(a.procs), a.model, tuple(a.dense))
    print(memory_markdown(result))
    print(f"wrote {a.out / (a.name + '.json')}, {a.out / (a.name + '.md')}")
    everything = result["runs"] + result["traced"] + result.get("grid_runs", []) + \
        result.get("grid_traced", [])
    return 1 if any("failed" in x for x in everything) else 0


def _cuda_kernels(a) -> int:
    from .kernels.cuda import cuda_kernels_markdown, run_cuda_kernels

    unknown = [c for c in a.cases if c not in CASES]
    if unknown:
        print(f"error: unknown cases {unknown}; choose from {sorted(CASES)}", file=sys.stderr)
        return 2
    result = run_cuda_kernels(a.cases, a.out)
    print(cuda_kernels_markdown(result))
    print(f"wrote {a.out / 'cuda-kernels.json'}, {a.out / 'cuda-kernels.md'}")
    return 0


def _gpu(a) -> int:
    from .core.device import DeviceUnavailable
    from .gpu.study import run_gpu_study

    unknown = [c for c in a.cases or () if c not in CASES or CASES[c].kind != "layer"]
    if unknown:
        print(f"error: --cases: {unknown} are not layer cases; choose from "
              f"{sorted(c for c, v in CASES.items() if v.kind == 'layer')}", file=sys.stderr)
        return 2
    try:
        result = run_gpu_study(a.out, a.cases, a.layers, a.reps, a.budget, a.workers,
                               a.dry_run)
    except DeviceUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    failed = [t for t in result["targets"] if t["name"].startswith("suite") and not t["met"]]
    return 1 if failed or any(c["failed_rows"] for c in result["cases"].values()) else 0


def _revisions(a) -> int:
    from .revisions.compare import revisions_markdown, run_revisions, write_revisions

    try:
        result = run_revisions(a.before, a.after, a.case, a.layers, a.reps, a.threads, a.out)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    paths = write_revisions(result, a.out, a.name or f"revisions-{a.case}")
    print(revisions_markdown(result))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _aggregation(a) -> int:
    from .kernels.aggregation import aggregation_markdown, run_aggregation
    from .peers.env import PeerMissing

    try:
        result = run_aggregation(a.cases, a.reps, a.threads, a.peers, a.out, a.name,
                                 a.keep_freed)
    except PeerMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(aggregation_markdown(result))
    print(f"wrote {a.out / (a.name + '.json')}, {a.out / (a.name + '.md')}")
    return 0


def _hgt(a) -> int:
    from .layers.hetero import hgt_markdown, run_hgt, write

    if a.peers:
        from .peers.env import PeerMissing, require

        try:
            require(a.peers)
        except PeerMissing as exc:
            print(f"error: --peers {a.peers}: {exc}", file=sys.stderr)
            return 2
    result = run_hgt(a.n, a.degree, a.k, a.heads, a.reps, a.threads, a.memory, a.keep_freed,
                     dgl=a.peers == "dgl")
    print(hgt_markdown(result))
    print("wrote " + ", ".join(str(p) for p in write(result, a.out, a.name)))
    return 0


def _peers(a) -> int:
    import subprocess

    from .peers.env import PeerMissing, installed_versions, peers_dir, setup

    if a.setup:
        try:
            versions = setup(a.peer, dry_run=a.dry_run)
        except subprocess.CalledProcessError as exc:
            print(f"error: {' '.join(map(str, exc.cmd))} failed (exit {exc.returncode})",
                  file=sys.stderr)
            return 1
        if a.dry_run:
            return 0
    else:
        try:
            versions = installed_versions(a.peer)
        except PeerMissing as exc:
            print(f"{a.peer}: {exc}", file=sys.stderr)
            return 1
    print(f"{a.peer} peer environment ({peers_dir()}):")
    for k, v in versions.items():
        print(f"  {k}: {v}")
    return 0


def _kernels(a) -> int:
    from .kernels.micro import kernels_table, run_kernels

    result = run_kernels(a.n, a.degree, a.k, a.threads, a.reps, a.out, executor=a.executor)
    print(kernels_table(result))
    print(f"wrote {a.out / 'kernels.json'}, {a.out / 'kernels.md'}")
    return 0


def policy_env(policy: str) -> dict[str, str]:
    """This process's environment with ``OMP_WAIT_POLICY`` set for ``policy``."""
    env = dict(os.environ)
    if policy == "default":
        env.pop("OMP_WAIT_POLICY", None)
    else:
        env["OMP_WAIT_POLICY"] = policy.upper()
    return env


def _reexec_if_needed(policy: str, argv: list[str]) -> None:
    """Re-execute this command with ``OMP_WAIT_POLICY`` set, unless it already is."""
    env = policy_env(policy)
    if env.get("OMP_WAIT_POLICY", "").upper() == os.environ.get("OMP_WAIT_POLICY", "").upper():
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "bench", *argv], with_root_on_path(env))


def main(argv: list[str] | None = None, prog: str = "python -m bench",
         reexec: bool = False) -> int:
    """Entry point of the harness: ``run`` or ``kernels``; returns the exit status.

    Parameters
    ----------
    argv : list of str, optional
        Arguments (default ``sys.argv[1:]``).
    prog : str
        Program name in the usage text.
    reexec : bool
        Re-execute the process when ``--omp-wait-policy`` differs from the environment
        (needed for this process's own OpenMP runtimes; the workers always get it).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    p = build_parser(prog)
    try:
        a = p.parse_args(argv)
    except SystemExit as exc:          # argparse exits 2 on bad input, 0 on --help
        return int(exc.code or 0)
    if a.command in ("dist", "comm", "scale", "cuda-kernels", "peers", "revisions", "memory",
                     "gpu"):
        return {"dist": _dist, "comm": _comm, "scale": _scale, "peers": _peers,
                "cuda-kernels": _cuda_kernels, "revisions": _revisions,
                "memory": _memory, "gpu": _gpu}[a.command](a)
    if reexec:
        _reexec_if_needed(a.omp_wait_policy, argv)
    from .core.threads import threads_kept

    # these studies set the process's threads; called in-process (a test) they give them back
    with threads_kept():
        return {"run": _run, "hgt": _hgt, "kernels": _kernels,
                "aggregation": _aggregation}[a.command](a)
