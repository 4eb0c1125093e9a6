"""Run one benchmark case end to end and collect its result dict.

``layer`` cases (tiny, M, L), for every layer row (:mod:`.rows`):

1. peak memory of ours and of PyG, each in a fresh guarded subprocess (:mod:`.memory`);
   an implementation that runs out of memory there is not run in this process; with
   ``peers=("dgl",)`` also of each DGL implementation, in a fresh process of DGL's own
   environment (:mod:`bench.peers.dgl_worker`);
2. agreement: every side runs forward+backward once on the same graph, input, weights and
   upstream gradient; ``Z``, ``dH``, every parameter gradient and the inference ``Z`` are
   compared (:mod:`bench.core.agreement`), ours with PyG, DGL with ours (with PyG in a row that has
   no layer of ours) — a disagreement aborts the case;
3. timing: warm-up, then ``reps`` rounds of *ours fwd, PyG fwd, [DGL fwd, ...], ours
   fwd+bwd, PyG fwd+bwd, [DGL fwd+bwd, ...]* (DGL's calls run in its worker process,
   which times them itself: :mod:`bench.peers.client`; on the host PyG's run in a worker
   process of our environment the same way, :mod:`bench.peers.pyg_worker`, so that each
   library runs in a process by itself unless ``pyg_process=False``);

then the plain SpMM baselines (scipy, torch.sparse, GraphBLAS and our kernel) are timed the
same way. With ``executor="cuda"`` both sides run on one GPU (:mod:`bench.core.device`): every timed
call ends with a device synchronisation and memory is each side's peak device allocation.

``epoch`` cases (XL): the model is first checked against PyG on a small Kronecker graph in
this process; then each implementation trains in its own guarded subprocess
(:mod:`.epoch`), ours first — PyG is allowed to run out of memory, which is recorded — and
the two runs' epoch-0 losses, gradients and logits are compared.

This process itself runs under an :class:`~bench.core.guard.RSSWatchdog` with the same limit.
"""

from __future__ import annotations

import gc
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from ..core.agreement import DEFAULT_TOL, DisagreementError, compare
from ..core.cases import Case, build_case_data, case_dict, get_case, save_case_data, with_width
from ..core.device import BenchDevice, device_for
from ..core.environment import environment, load_average
from ..core.guard import RSSWatchdog
from ..core.rss import GIB, freed_memory_kept
from ..core.threads import set_threads
from ..core.timing import interleaved
from ..core.worker import launch, omp_policy_note
from ..peers.env import require
from .baselines import spmm_baselines
from .pair import LayerPair
from .rows import DEFAULT_LAYERS, get_row, make_ours, shared_params

__all__ = ["run_case", "CaseAborted", "RowHook", "KEEP_FREED_MAX_ENTRIES"]

#: the most stored entries (with self loops) of a case whose timing processes keep their
#: freed memory (:func:`run_case`'s ``keep_freed``)
KEEP_FREED_MAX_ENTRIES = 4_000_000

#: what :func:`run_case` calls after each timed row: ``(pair, entry) -> None``
RowHook = Callable[[LayerPair, dict], None]


class CaseAborted(RuntimeError):
    """The case stopped (ours and PyG disagree, or our side failed); ``result`` says why."""

    def __init__(self, message: str, result: dict):
        super().__init__(message)
        self.result = result


def _graph_record(data, seconds: float, quiet: bool) -> dict:
    """The case's graph as the result records it (a typed case: its typed edges and
    relations, no self loops), logged."""
    record = {"n": data.n, "nnz": data.nnz}
    if data.typed:
        record.update(typed_edges=data.nnz_looped, relations=int(data.edge_type.max()) + 1)
        extra = f"{data.nnz_looped} typed edges, {record['relations']} relations"
    else:
        record["nnz_with_self_loops"] = data.nnz_looped
        extra = f"+loops {data.nnz_looped}"
    record["build_seconds"] = seconds
    _log(f"graph n={data.n} nnz={data.nnz} ({extra}) built in {seconds:.1f} s", quiet)
    return record


def _log(msg: str, quiet: bool) -> None:
    if not quiet:
        print(f"[bench] {msg}", flush=True)


def _worker_args(threads: int, blas: int | None, executor: str) -> list[str]:
    """The thread and executor options every worker gets."""
    return (["--threads", str(threads), "--executor", executor]
            + ([] if blas is None else ["--blas-threads", str(blas)]))


def _memory_entry(res, answer: dict | None, limit: int) -> dict:
    """A memory worker's outcome as recorded in ``layers[layer]["memory"][impl]``."""
    out = {"status": res.status, "message": res.message,
           "observed_peak_bytes": res.observed_peak_bytes, "limit_bytes": limit,
           "wall_seconds": res.seconds}
    if answer is not None:
        out.update(answer)
    else:
        out["stderr_tail"] = res.stderr[-2000:]
    return out


def _memory(data_path: Path, layer: str, impl: str, case: Case, worker_args: list[str],
            limit: int, timeout: float | None, env: dict | None) -> dict:
    res, answer = launch("bench.layers.memory",
                         ["--data", str(data_path), "--layer", layer, "--impl", impl,
                          "--k-in", str(case.k_in), "--k-out", str(case.k_out),
                          *worker_args],
                         limit, timeout, env)
    return _memory_entry(res, answer, limit)


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den


def _target(name: str, value: float | None, goal: float, op: str) -> dict:
    met = None if value is None else (value >= goal if op == ">=" else value <= goal)
    return {"name": name, "value": value, "goal": goal, "op": op, "met": met}


def _log_memory(layer: str, impl: str, m: dict, quiet: bool) -> None:
    _log(f"{layer} {impl}: memory {m['status']}"
         + (f", peak {m['peak_rss_bytes'] / 2**20:.0f} MiB"
            if "peak_rss_bytes" in m else f" — {m['message']}"), quiet)


def _row_memory(ctx: dict, layer: str, entry: dict) -> bool:
    """Peak memory of every side of row ``layer`` in fresh processes; False if PyG's
    failed (then it is not run here)."""
    case, row = ctx["case"], get_row(layer)
    for impl in (("ours",) if row.ours is not None else ()) + ("pyg",):
        m = _memory(ctx["data_path"], layer, impl, case, ctx["worker_args"], ctx["limit"],
                    ctx["timeout"], ctx["env"])
        entry["memory"][impl] = m
        _log_memory(layer, impl, m, ctx["quiet"])
        if m["status"] != "ok" and impl == "ours":
            raise CaseAborted(f"{layer}: our layer failed in the memory run: "
                              f"{m['message']}", ctx["result"])
    if ctx["worker"] is not None and row.dgl:
        from ..peers.client import peer_memory

        ours = make_ours(layer, case.k_in, case.k_out) if row.ours is not None else None
        params = shared_params(layer, case.k_in, case.k_out, ours)
        for impl in row.dgl:
            res, answer = peer_memory(ctx["data_path"], layer, impl, params, case.k_in,
                                      case.k_out, ctx["result"]["threads"], ctx["limit"],
                                      ctx["timeout"], ctx["env"], ctx["workdir"])
            entry["memory"][impl] = m = _memory_entry(res, answer, ctx["limit"])
            _log_memory(layer, impl, m, ctx["quiet"])
    return entry["memory"]["pyg"]["status"] == "ok"


def _row_agreement(pair: LayerPair, entry: dict, tol: float, ctx: dict) -> None:
    """Ours against PyG, then every DGL implementation against ours (or PyG); a
    disagreement aborts the case before anything is timed."""
    layer, quiet = pair.name, ctx["quiet"]
    tol = max(tol, pair.row.tol)                  # the row's own floor, where it has one
    entry["agreement"] = None
    try:
        if pair.ours is not None and pair.has_pyg:
            entry["agreement"] = pair.check(tol)
            worst = max(r["rel_diff"] for r in entry["agreement"].values())
            _log(f"{layer}: ours and PyG agree (max relative difference {worst:.2e})", quiet)
        if pair.peers:
            if pair.ours is None and not pair.has_pyg:
                raise CaseAborted(f"{layer}: no reference for DGL (no layer of ours, PyG "
                                  "failed its memory run)", ctx["result"])
            entry["peer_agreement"] = {}
            entry["peer_agreement"] = pair.check_peers(tol)
            for impl, rep in entry["peer_agreement"].items():
                if impl != "reference":
                    _log(f"{layer}: {impl} agrees with {entry['peer_agreement']['reference']}"
                         f" (max relative difference "
                         f"{max(r['rel_diff'] for r in rep.values()):.2e})", quiet)
    except DisagreementError as exc:
        if "peer_agreement" in entry:
            entry["peer_agreement"]["failed"] = exc.report
        else:
            entry["agreement"] = exc.report
        raise CaseAborted(str(exc), ctx["result"]) from exc


def _layer_row(ctx: dict, layer: str) -> None:
    """Memory, agreement and interleaved times of one row (see the module docstring)."""
    result, quiet, device = ctx["result"], ctx["quiet"], ctx["device"]
    entry: dict = {"memory": {}}
    result["layers"][layer] = entry
    pyg_ok = _row_memory(ctx, layer, entry) if ctx["memory"] else True
    pair = LayerPair(layer, ctx["g"], ctx["data"], ctx["case"].k_out, with_pyg=pyg_ok,
                     executor=result["executor"], device=device,
                     peers=ctx["worker"] if get_row(layer).dgl else None,
                     pyg_worker=ctx["pyg_worker"])
    peer_impls = list(pair.peers)
    try:
        _row_agreement(pair, entry, ctx["tol"], ctx)
        entry["times"] = interleaved({k: device.timed(f) for k, f in pair.calls().items()},
                                     ctx["reps"], ctx["warmup"])
        if ctx["row_hook"] is not None:
            ctx["row_hook"](pair, entry)
    finally:
        pair.close()
    med = {k: v["median_ms"] for k, v in entry["times"].items()}
    entry["speedup"] = {kind: _ratio(med.get(f"pyg {kind}"), med.get(f"ours {kind}"))
                        for kind in ("fwd", "fwd+bwd")}
    if peer_impls:
        entry["speedup_peers"] = {impl: {kind: _ratio(med.get(f"{impl} {kind}"),
                                                      med.get(f"ours {kind}"))
                                         for kind in ("fwd", "fwd+bwd")}
                                  for impl in peer_impls}
    _log(f"{layer}: " + ", ".join(f"{k} {v:.1f} ms" for k, v in med.items()), quiet)


def _layer_case(case: Case, layers: list[str], reps: int, warmup: int,
                worker_args: list[str], tol: float, limit: int, memory: bool, workdir: Path,
                timeout: float | None, env: dict | None, result: dict, quiet: bool,
                device: BenchDevice, peers: tuple[str, ...] = (),
                row_hook: RowHook | None = None, pyg_process: bool = False,
                keep_freed: bool = False) -> None:
    executor = result["executor"]
    t = time.perf_counter()
    g, data = build_case_data(case)
    result["graph"] = _graph_record(data, time.perf_counter() - t, quiet)
    data_path = (save_case_data(data, workdir / f"{case.name}.npz")
                 if memory or peers or pyg_process else None)
    ctx = {"case": case, "g": g, "data": data, "data_path": data_path, "reps": reps,
           "warmup": warmup, "worker_args": worker_args, "tol": tol, "limit": limit,
           "memory": memory, "workdir": workdir, "timeout": timeout, "env": env,
           "result": result, "quiet": quiet, "device": device, "worker": None,
           "pyg_worker": None, "row_hook": row_hook}
    if keep_freed and data.nnz_looped > KEEP_FREED_MAX_ENTRIES:
        keep_freed = False
        result["protocol"]["freed_memory"] = (
            f"glibc's defaults: {data.nnz_looped:,} entries is above the "
            f"{KEEP_FREED_MAX_ENTRIES:,} up to which the timing processes keep their freed "
            "memory (a heap that never unmaps fragments: PyG's worker outgrew the box at L)")
    else:
        result["protocol"]["freed_memory"] = (
            "kept in every timing process (glibc mallopt: no mmap, no trim; "
            "bench.core.rss.keep_freed_memory)" if keep_freed else "glibc's defaults")
    try:
        if peers:
            ctx["worker"] = _start_peer(data_path, result, workdir, env, quiet, keep_freed)
        if pyg_process:
            ctx["pyg_worker"] = _start_pyg(data_path, result, workdir, env, quiet,
                                           keep_freed)
        with freed_memory_kept(keep_freed):
            for layer in layers:
                _layer_row(ctx, layer)
                gc.collect()
    finally:
        for worker in (ctx["worker"], ctx["pyg_worker"]):
            if worker is not None:
                worker.close()
    spmm = spmm_baselines(g, data.H, executor=executor, device=device)
    result["spmm"] = interleaved({k: device.timed(f) for k, f in spmm.items()}, reps, warmup)
    _log("SpMM: " + ", ".join(f"{k} {v['median_ms']:.1f} ms"
                              for k, v in result["spmm"].items()), quiet)
    _layer_targets(case, result)


def _start_peer(data_path: Path, result: dict, workdir: Path, env: dict | None,
                quiet: bool, keep_freed: bool):
    """The DGL worker of the case, its versions recorded in the result's environment."""
    from ..peers.client import PeerWorker
    from ..peers.env import installed_versions

    worker = PeerWorker(data_path, result["threads"], workdir, env, keep_freed=keep_freed)
    result["environment"]["peers"] = {"dgl": {**installed_versions("dgl"),
                                              "worker": worker.versions}}
    result["protocol"]["dgl"] = (
        "DGL 2.1.0 in its own venv (torch 2.2.1), one worker process for the case, its calls "
        "interleaved with ours and PyG's and timed inside the worker; same graph (our "
        "self-looped pattern as src -> dst edges), same weights, agreement with ours (PyG "
        "where we have no layer) checked first; GraphConv gets PyG's normalisation as "
        "edge_weight (norm='none')")
    _log(f"DGL worker: dgl {worker.versions['dgl']}, torch {worker.versions['torch']}",
         quiet)
    return worker


def _start_pyg(data_path: Path, result: dict, workdir: Path, env: dict | None,
               quiet: bool, keep_freed: bool):
    """PyG's worker of the case (:mod:`bench.peers.pyg_worker`)."""
    from ..peers.client import PeerWorker

    worker = PeerWorker(data_path, result["threads"], workdir, env, peer="pyg",
                        keep_freed=keep_freed)
    result["environment"]["pyg_worker"] = worker.versions
    result["protocol"]["processes"] = (
        "ours in this process, PyG in a worker process of the same environment (one for "
        "the case), DGL in its own: calls interleaved round-robin, each timed where it "
        "runs, after an untimed gc.collect()")
    _log(f"PyG worker: torch_geometric {worker.versions['torch_geometric']}, torch "
         f"{worker.versions['torch']}", quiet)
    return worker


def _layer_targets(case: Case, result: dict) -> None:
    goals = case.targets
    targets = result["targets"]
    for layer, entry in result["layers"].items():
        goal = goals.get("speedup_fwd_bwd", {}).get(layer)
        if goal is not None:
            targets.append(_target(f"{layer.upper()} fwd+bwd speedup over PyG",
                                   entry["speedup"]["fwd+bwd"], goal, ">="))
        if "memory_ratio_max" in goals and entry["memory"]:
            key = "peak_device_bytes" if result.get("device") == "gpu" else "peak_rss_bytes"
            ours = entry["memory"].get("ours", {}).get(key)
            pyg = entry["memory"].get("pyg", {}).get(key)
            entry["memory_ratio"] = _ratio(ours, pyg)
            targets.append(_target(f"{layer.upper()} peak RSS ours / PyG",
                                   entry["memory_ratio"], goals["memory_ratio_max"], "<="))
    if "gat" in result["layers"] and result["spmm"]:
        fastest = min(result["spmm"], key=lambda k: result["spmm"][k]["median_ms"])
        ratio = _ratio(result["layers"]["gat"]["times"]["ours fwd"]["median_ms"],
                       result["spmm"][fastest]["median_ms"])
        result["gat_fwd_over_spmm"] = {"ratio": ratio, "fastest_spmm": fastest}
        if "gat_fwd_over_spmm_max" in goals:
            targets.append(_target(f"GAT fwd / fastest SpMM ({fastest})", ratio,
                                   goals["gat_fwd_over_spmm_max"], "<="))


def _epoch_check(case: Case, tol: float, quiet: bool, executor: str) -> dict:
    """Ours vs PyG, one epoch of the case's model on a small Kronecker graph, in process."""
    from dataclasses import replace

    from .epoch import check_arrays, train_epochs

    small = replace(case, graph={"kind": "kronecker", "scale": 8, "edge_factor": 16})
    g, data = build_case_data(small)
    ours = train_epochs("ours", data, case.num_layers, case.k_out, epochs=1, warmup=0, g=g,
                        executor=executor)
    pyg = train_epochs("pyg", data, case.num_layers, case.k_out, epochs=1, warmup=0)
    report = compare(check_arrays(ours)[0], check_arrays(pyg)[0], tol,
                     what=f"{case.name} model on Kronecker scale 8")
    _log(f"{case.name}: model agrees with PyG on Kronecker scale 8 (max relative difference "
         f"{max(r['rel_diff'] for r in report.values()):.2e})", quiet)
    return report


def _epoch_case(case: Case, reps: int, warmup: int, worker_args: list[str], tol: float,
                limit: int, workdir: Path, timeout: float | None, env: dict | None,
                result: dict, quiet: bool) -> None:
    from .epoch import check_arrays

    try:
        result["precheck"] = _epoch_check(case, tol, quiet, result["executor"])
    except DisagreementError as exc:
        result["precheck"] = exc.report
        raise CaseAborted(str(exc), result) from exc
    t = time.perf_counter()
    g, data = build_case_data(case)
    result["graph"] = _graph_record(data, time.perf_counter() - t, quiet)
    data_path = save_case_data(data, workdir / f"{case.name}.npz")
    del g, data
    gc.collect()
    runs = {}
    for impl in ("ours", "pyg"):
        res, answer = launch("bench.layers.epoch",
                             ["--data", str(data_path), "--impl", impl,
                              "--layers", str(case.num_layers), "--k-out", str(case.k_out),
                              "--epochs", str(reps), "--warmup", str(warmup),
                              *worker_args],
                             limit, timeout, env)
        run = {"status": res.status, "message": res.message,
               "observed_peak_bytes": res.observed_peak_bytes, "limit_bytes": limit,
               "wall_seconds": res.seconds}
        if answer is not None:
            from ..core.timing import stats

            run.update({k: v for k, v in answer.items() if k != "check"})
            run["epoch"] = stats(answer["epoch_seconds"])
            runs[impl] = answer
        else:
            run["stderr_tail"] = res.stderr[-2000:]
        result["epochs"][impl] = run
        _log(f"{impl}: {res.status}" + (f", epoch {run['epoch']['median_ms']:.0f} ms, peak "
                                        f"{run['peak_rss_bytes'] / GIB:.2f} GiB"
                                        if answer else f" — {res.message}"), quiet)
    if "ours" in runs and "pyg" in runs:
        (a, a_info), (b, b_info) = check_arrays(runs["ours"]), check_arrays(runs["pyg"])
        result["adam_step"] = {k: float(abs(a_info[k] - b_info[k]).max()) for k in a_info}
        try:
            result["agreement"] = compare(a, b, tol, what=case.name)
        except DisagreementError as exc:
            result["agreement"] = exc.report
            raise CaseAborted(str(exc), result) from exc
    ours, pyg = result["epochs"]["ours"], result["epochs"]["pyg"]
    med = {k: r["epoch"]["median_ms"] if "epoch" in r else None for k, r in
           (("ours", ours), ("pyg", pyg))}
    result["speedup"] = {"epoch": _ratio(med["pyg"], med["ours"])}
    if "peak_rss_max_gib" in case.targets:
        peak = ours.get("peak_rss_bytes")
        result["targets"].append(_target("our epoch completes: peak RSS in GiB",
                                         None if peak is None else peak / GIB,
                                         case.targets["peak_rss_max_gib"], "<="))


def run_case(name: str, layers: list[str] | None = None, reps: int = 5, warmup: int = 1,
             threads: int = 2, tol: float = DEFAULT_TOL, mem_limit_gib: float = 20.0,
             memory: bool = True, workdir: Path | None = None, keep_data: bool = False,
             timeout: float | None = None, quiet: bool = False,
             worker_env: dict[str, str] | None = None,
             self_limit_gib: float | None = None, blas_threads: int | None = None,
             executor: str = "cpu", k: int | None = None,
             peers: tuple[str, ...] = (), row_hook: RowHook | None = None,
             pyg_process: bool = True, keep_freed: bool = True) -> dict:
    """Run case ``name`` and return its result dict (see :mod:`.report` for the layout).

    Parameters
    ----------
    name : str
        A key of :data:`~bench.core.cases.CASES`.
    layers : list of str, optional
        Rows of a ``layer`` case (:data:`~.rows.ROWS`; default gat, agnn, gcn).
    reps, warmup : int
        Timed and untimed repetitions (epochs for an ``epoch`` case).
    threads : int
        Threads for torch, GraphBLAS, numba and BLAS, here and in every worker.
    tol : float
        Agreement tolerance (relative to the reference's max abs value).
    mem_limit_gib : float
        RSS limit of every worker process.
    memory : bool
        Measure peak memory in subprocesses (``layer`` cases; ``epoch`` cases always do).
    workdir : Path, optional
        Where the case's data file goes (default ``bench/results/tmp``).
    keep_data : bool
        Keep the data file afterwards.
    timeout : float, optional
        Wall-clock limit per worker, seconds.
    quiet : bool
        No progress lines.
    worker_env : dict, optional
        Environment of the workers (default ours); the command sets ``OMP_WAIT_POLICY``
        in it.
    self_limit_gib : float, optional
        RSS limit of this process (default ``mem_limit_gib``).
    blas_threads : int, optional
        Threads of numpy's BLAS (default ``threads``).
    executor : str
        The executor our layers and ops run on, here and in every worker (``cuda``: PyG
        runs on the same GPU).
    k : int, optional
        Feature width of the case's layers instead of its own (``k_in = k_out = k``; the
        result is named ``<case>-k<k>``).
    peers : tuple of str
        Peer libraries timed beside ours and PyG (``("dgl",)``): each row's DGL layers run in
        a worker of DGL's own environment (:mod:`bench.peers.client`), with the same weights,
        agreement checked (``layers[layer]["peer_agreement"]``), times interleaved and peak
        memory in a fresh process of that environment. Host only.
    row_hook : callable, optional
        ``row_hook(pair, entry)`` after each row of a layer case is timed, with the row's
        :class:`~.pair.LayerPair` (still open) and its result entry, to which it may add
        what it measures (the GPU study's device memory and kernel profile).
    pyg_process : bool
        On the host, run PyG's layers in a worker process of their own
        (:mod:`bench.peers.pyg_worker`) rather than in this one, beside ours. Off, the two
        libraries share this process and its allocator, as the harness did before.
    keep_freed : bool
        On the host, every process that times calls keeps its freed memory
        (:func:`~bench.core.rss.keep_freed_memory`: why) while the rows run, on graphs of at
        most :data:`KEEP_FREED_MAX_ENTRIES` stored entries (M and KM, not L: a heap that never
        unmaps fragments, and at L PyG's worker grew past the box's 24 GiB); the memory runs
        are fresh processes with glibc's defaults either way.

    Raises
    ------
    CaseAborted
        Ours and PyG disagree, or our implementation failed; ``exc.result`` holds what was
        collected, with ``status`` and ``message`` set.
    """
    case = get_case(name)
    if k is not None:
        case = with_width(case, k)
    if reps < 1 or warmup < 0:
        raise ValueError(f"need reps ≥ 1 and warmup ≥ 0, got {reps}, {warmup}")
    device = device_for(executor)
    if device.kind != "host" and case.kind != "layer":
        raise ValueError(f"case {name} trains a model in worker processes; with "
                         f"--executor {executor} only the layer cases run")
    layers = list(layers or DEFAULT_LAYERS)
    for layer in layers:
        get_row(layer)
    if peers and (device.kind != "host" or case.kind != "layer"):
        raise ValueError("peers (DGL) run in the layer cases on the host only")
    for peer in peers:
        require(peer)                                  # PeerMissing: run bench peers --setup
    limit = int(mem_limit_gib * GIB)
    workdir = Path(workdir) if workdir is not None else Path("bench/results/tmp")
    env = environment()
    got = set_threads(threads, blas=blas_threads, executor=executor)
    wargs = _worker_args(threads, blas_threads, executor)
    result: dict = {"case": case_dict(case), "status": "ok", "message": "",
                    "executor": executor, **({} if device.kind == "host" else
                                             {"device": device.kind}),
                    "threads": threads, "threads_set": got,
                    "reps": reps, "warmup": warmup, "tolerance": tol,
                    "mem_limit_bytes": limit, "environment": env,
                    "protocol": {
                        "forward": "inference: ours eval(), PyG eval() + torch.no_grad()",
                        "fwd+bwd": "training mode; input requires grad on both sides; "
                                   "fixed random upstream gradient",
                        "order": "warm-up, then round-robin ours/PyG per repetition",
                        "processes": "ours and PyG in this process",
                        "gc": "gc.collect() before every timed call (untimed)",
                        "graph": "PyG gets edge_index of our self-looped pattern and "
                                 "add_self_loops=False; GCN cached=True on both sides",
                        "memory": "peak RSS (VmHWM) of a fresh process per "
                                  "(case, impl, layer)",
                        "omp_wait_policy": omp_policy_note(worker_env)},
                    "layers": {}, "spmm": {}, "epochs": {}, "targets": []}
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        self_limit = limit if self_limit_gib is None else int(self_limit_gib * GIB)
        with RSSWatchdog(self_limit):
            if case.kind == "layer":
                _layer_case(case, layers, reps, warmup, wargs, tol, limit, memory,
                            workdir, timeout, worker_env, result, quiet, device, tuple(peers),
                            row_hook, pyg_process and device.kind == "host",
                            keep_freed and device.kind == "host")
            else:
                _epoch_case(case, reps, warmup, wargs, tol, limit, workdir, timeout,
                            worker_env, result, quiet)
    except CaseAborted as exc:
        result["status"], result["message"] = "aborted", str(exc)
        raise
    finally:
        result["environment"]["load_average_end"] = load_average()
        if not keep_data:
            for f in workdir.glob(f"{case.name}.npz"):
                f.unlink()
            if workdir.name == "tmp" and not any(workdir.iterdir()):
                shutil.rmtree(workdir, ignore_errors=True)
    return result
