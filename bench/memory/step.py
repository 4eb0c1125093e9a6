"""One training step of the 3-layer GAT on a Kronecker graph, in a fresh process: its memory.

    python -m bench.memory.step --scale 20 [--edge-factor 16] [--k 16] [--layers 3]
                                [--threads 2] [--model gat] [--breakdown]

``--model`` names the convolution (:data:`MODELS`): ``gat`` (the default, the XL recipe),
``gatv2``, or ``gatv2-e``: ``GATv2Conv(edge_dim=8)`` on the same graph given
:data:`EDGE_DIM` seeded float32 features per edge (the loops get their mean, as PyG fills
them), so that the two GATv2 rows differ by the edge features alone.

Order of work:

1. imports, threads and one warm-up step on a scale-12 Kronecker graph (numba loads or
   compiles its kernels: code and JIT state land in the baseline, not in the step);
   ``VmHWM`` reset (:func:`bench.core.rss.reset_hwm`, which first hands the allocator's
   free memory back: else the graph and the step reuse what the warm-up freed, unseen, and
   the mark holds the warm-up's peak), then ``baseline_rss``;
2. the graph ``gblas_gnn.data.kronecker(scale, edge_factor, seed=0)`` and its features and
   labels (``gblas_gnn.data.specs.synthetic_rows``: k columns, k classes); the high-water
   mark since the reset is ``graph_hwm`` (the generator's peak);
3. ``VmHWM`` reset again, then ``graph_rss``; the model
   (:func:`bench.layers.epoch.ours_model`: ``GATConv(k, k)`` × ``layers`` with ELU between,
   one head, the layers add the self loops), Adam (lr 0.005) and one step as
   :func:`gblas_gnn.train.fit` runs it: forward, cross-entropy over every vertex, backward,
   Adam step, the logits and their gradient alive until the step ends; then ``step_hwm``.

Per stored entry of the pattern the layers run on (``A`` with its self loops, ``nnz``):

* ``bytes_per_entry`` = (max(graph_hwm, step_hwm) − baseline_rss) / nnz: the process's
  growth, everything included (the graph, its self-looped copy, the patterns, features,
  caches, optimiser): the number of issue 21;
* ``step_bytes_per_entry`` = (step_hwm − graph_rss) / nnz: what the step adds to a process
  that holds the graph and its features.

With ``--breakdown`` the same work runs under ``tracemalloc`` (GraphBLAS allocates through
numpy's allocator, so its matrices are traced too) and a snapshot is taken where the memory
can peak: after the graph, after the forward, after the loss, at the start of every column
pass of the backward, after the CSC view is built and after the step. Every live block of a
snapshot is given a component (``A``, ``A`` with self loops, the CSR pattern, the CSC view,
softmax caches, backward edge buffers, vertex arrays, …) by the code that allocated it.
Tracing costs time and memory: the headline numbers come from a run without it.
"""

from __future__ import annotations

import argparse
import ast
import functools
import linecache
import time
import tracemalloc
from pathlib import Path

import numpy as np

from ..core.rss import hwm_bytes, reset_hwm, rss_bytes
from ..core.threads import set_threads
from ..core.worker import worker_main

__all__ = ["run_step", "measure", "growth", "local_entries", "component", "worker_parser",
           "main"]

LR = 0.005
#: features per edge of the ``gatv2-e`` model
EDGE_DIM = 8
#: ``--model`` -> (convolution of :func:`bench.layers.epoch.ours_model`, features per edge)
MODELS = {"gat": ("gat", 0), "gatv2": ("gatv2", 0), "gatv2-e": ("gatv2", EDGE_DIM)}
#: blocks smaller than this are summed as "small objects" in a breakdown
SMALL = 64 << 10
#: frames kept per traced block (deep enough to reach the library from numpy's allocator)
NFRAME = 40


# ---------------------------------------------------------------------------- the step
def _data(scale: int, edge_factor: int, k: int, edge_dim: int = 0):
    """The Kronecker graph (with ``edge_dim`` seeded features per stored edge), features
    and labels."""
    from gblas_gnn import Graph
    from gblas_gnn.data import kronecker
    from gblas_gnn.data.specs import synthetic_rows

    g = kronecker(scale, edge_factor, seed=0)
    if edge_dim:
        coo = g.to_scipy().tocoo()
        feats = np.random.default_rng(0).standard_normal((coo.nnz, edge_dim),
                                                         dtype=np.float32)
        g = Graph.from_edges(coo.col, coo.row, g.n, dtype=g.dtype, edge_attr=feats)
        del coo, feats
    x, y, _ = synthetic_rows(g.n, np.arange(g.n), seed=0, features=k, classes=k,
                             dtype=np.float32)
    return g, x, y


def _train_step(g, x, y, layers: int, k: int, hook=None, executor="cpu",
                model: str = "gat") -> float:
    """Build the model (``model``: a key of :data:`MODELS`) and Adam, run one step;
    ``hook(name)`` at the step's milestones."""
    from gblas_gnn.train import Adam
    from gblas_gnn.train.losses import cross_entropy

    from ..layers.epoch import ours_model

    conv, edge_dim = MODELS[model]
    model = ours_model(layers, k, k, executor=executor, conv=conv, edge_dim=edge_dim)
    if hook is None:
        hook = _no_hook
    else:
        _hook_children(model, hook)
    opt = Adam(model, lr=LR)
    every = np.ones(g.n_local, bool)
    model.train()
    logits = model(g, x)
    hook("after forward")
    loss, dlogits = cross_entropy(logits, y, every, executor=executor)
    hook("after loss")
    model.backward(dlogits)
    hook("after backward")
    opt.step()
    hook("after Adam step")
    del logits, dlogits
    return float(loss)


def _no_hook(name: str) -> None:
    pass


def _hook_children(model, hook) -> None:
    """``hook`` after every child's forward and before and after every child's backward
    (instance attributes over the methods: the model is this run's own)."""
    for i, child in enumerate(model.children()):
        label = f"{i}:{type(child).__name__}"

        def forward(g, H, child=child, label=label, call=child.forward):
            out = call(g, H)
            hook(f"forward {label} done")
            return out

        def backward(dout, label=label, call=child.backward):
            hook(f"backward {label} start")
            out = call(dout)
            hook(f"backward {label} done")
            return out

        child.backward = backward
        if not child.composed:          # a composed module's forward is traced, not called
            child.forward = forward


def measure(load, train, scale: int, breakdown: bool) -> tuple[dict, object]:
    """This process's readings (the module docstring's order): ``load(scale)`` gives
    ``(graph, x, y)``, ``train(g, x, y, hook)`` runs the step; also the graph at scale."""
    g0, x0, y0 = load(12)                   # the parallel kernels, as at scale
    train(g0, x0, y0, None)                 # kernels compiled or loaded
    del g0, x0, y0
    reset_hwm()                             # the warm-up's peak and freed memory are not
    baseline = rss_bytes()                  # the graph's
    tracer = _Tracer() if breakdown else None
    if tracer is not None:
        tracer.start()
    t0 = time.perf_counter()
    g, x, y = load(scale)
    graph_seconds = time.perf_counter() - t0
    graph_hwm = hwm_bytes()
    if tracer is not None:                  # this process's rows and entries
        tracer.sizes(g.n_local, local_entries(g))
        tracer.snap("after graph and features")
    reset_ok = reset_hwm()                  # the generator's freed memory handed back first
    graph_rss = rss_bytes()
    t0 = time.perf_counter()
    loss = train(g, x, y, tracer.snap if tracer else None)
    step_seconds = time.perf_counter() - t0
    step_hwm = hwm_bytes()
    readings = {"breakdown_run": breakdown, "hwm_reset": reset_ok,
                "baseline_rss": baseline, "graph_rss": graph_rss, "graph_hwm": graph_hwm,
                "step_hwm": step_hwm, "loss": loss,
                "graph_seconds": graph_seconds, "step_seconds": step_seconds}
    if tracer is not None:
        readings["trace"] = tracer.finish()
    return readings, g


def local_entries(g) -> int:
    """Stored entries of this process's pattern of ``A + I`` (sources before the pattern
    had no matrix of its own: the matrix's)."""
    looped = g.with_self_loops()
    edges = getattr(looped, "edge_tensor", None)
    return int((edges if edges is not None else looped.A).nvals)


def growth(r: dict) -> int:
    """Peak RSS over the graph's generation and the step, minus the baseline (bytes)."""
    peak = max(r["graph_hwm"], r["step_hwm"]) if r["hwm_reset"] else r["step_hwm"]
    return peak - r["baseline_rss"]


def run_step(scale: int, edge_factor: int = 16, k: int = 16, layers: int = 3,
             threads: int = 2, breakdown: bool = False, model: str = "gat") -> dict:
    """The worker (see the module docstring); the result as a JSON-ready dict."""
    set_threads(threads, torch=False)
    edge_dim = MODELS[model][1]
    r, g = measure(lambda s: _data(s, edge_factor, k, edge_dim),
                   lambda g, x, y, hook: _train_step(g, x, y, layers, k, hook, model=model),
                   scale, breakdown)
    nnz = g.with_self_loops().nnz
    return {"scale": scale, "edge_factor": edge_factor, "k": k, "layers": layers,
            "model": model, "edge_dim": edge_dim,
            "threads": threads, "n": g.n, "nnz_graph": g.nnz, "nnz": nnz, **r,
            "bytes_per_entry": growth(r) / nnz,
            "step_bytes_per_entry": (r["step_hwm"] - r["graph_rss"]) / nnz,
            "graph_bytes_per_entry": (r["graph_rss"] - r["baseline_rss"]) / nnz,
            "graphblas": _graphblas_sizes(g)}


def _graphblas_sizes(g) -> dict:
    """GraphBLAS's bytes of ``A`` and of ``A`` with self loops, each ``None`` when its graph
    never built the matrix (a generator's graph and the self-looped one hold int32 patterns;
    sources before that always built them). Reading them here must not build them."""
    def built(graph) -> bool:
        return getattr(getattr(graph, "edge_tensor", None), "built", True)

    looped = g.with_self_loops()
    return {"A": g.A.ss.nbytes if built(g) else None,
            "A_iso": bool(g.A.ss.is_iso) if built(g) else None,
            "A_self_loops": looped.A.ss.nbytes if built(looped) else None,
            "A_self_loops_iso": bool(looped.A.ss.is_iso) if built(looped) else None}


# ---------------------------------------------------------------------------- breakdown
#: (file under src/gblas_gnn, enclosing function, component), first match wins; a function
#: is matched against the chain of the definitions enclosing the line ("Graph.with_self_loops
#: .build")
SITES = (
    ("graph.py", "with_self_loops", "A with self loops (GraphBLAS)"),
    ("graph.py", "self_looped_matrix", "A with self loops (GraphBLAS)"),
    ("graph.py", "from_edges", "A (GraphBLAS)"),
    ("dist/graph.py", "DistGraph.from_", "A (GraphBLAS)"),
    ("dist/grid.py", "", "source-side rows from the partner (grid exchange)"),
    ("dist/generate.py", "", "graph generator (transient)"),
    ("data/specs.py", "", "input features and labels"),
    ("data/_graph.py", "graph_from_sorted_edges", "A (int32 CSR pattern)"),
    ("data/", "", "graph generator (transient)"),
    ("executors/patterns.py", "CSRPattern.csc", "CSC view of A+I (colptr, perm, rows)"),
    ("executors/patterns.py", "CSRPattern.column_view", "CSC view of A+I (colptr, perm, rows)"),
    ("executors/patterns.py", "CSRPattern", "CSR pattern of A+I (indptr, indices)"),
    ("executors/patterns.py", "_with_diagonal", "CSR pattern of A+I (indptr, indices)"),
    ("executors/cpu/programs.py", "prepare", "softmax caches S (one per layer)"),
    ("executors/cpu/programs.py", "", "backward edge buffers (ST, EB, GF)"),
    ("executors/cpu/_gbio.py", "", "edge tensors exported from GraphBLAS"),
    ("train/optim.py", "", "optimiser state"),
)
#: components that hold per-edge blocks only (a block of another size from the same code
#: is a vertex array)
PER_EDGE = {"softmax caches S (one per layer)", "backward edge buffers (ST, EB, GF)",
            "edge tensors exported from GraphBLAS"}
VERTEX = "vertex arrays (n × k: features, forward caches, gradients)"


@functools.cache
def _definitions(path: str) -> list[tuple[int, int, str]]:
    """``(first line, last line, qualified name)`` of every function and class in ``path``."""
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError):
        return []
    out = []

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}.{child.name}" if prefix else child.name
                out.append((child.lineno, child.end_lineno, name))
                walk(child, name)
            else:
                walk(child, prefix)

    walk(tree, "")
    return out


def _enclosing(path: str, line: int) -> str:
    """The qualified name of the innermost definition holding ``line`` of ``path``."""
    best = ""
    for lo, hi, name in _definitions(path):
        if lo <= line <= hi and len(name) > len(best):
            best = name
    return best


def _site(traceback) -> tuple[str, str, int, str] | None:
    """``(file under the package or bench, enclosing function, line, source)`` of the
    innermost frame of a block's traceback in gblas_gnn or the harness."""
    for frame in reversed(list(traceback)):
        path = frame.filename.replace("\\", "/")
        if path.endswith("/executors/alignment.py"):       # the caller names the array
            continue
        for root in ("/gblas_gnn/", "/bench/"):
            if root in path:
                rel = ("" if root == "/gblas_gnn/" else "bench/") + path.split(root, 1)[1]
                return (rel, _enclosing(frame.filename, frame.lineno), frame.lineno,
                        linecache.getline(frame.filename, frame.lineno).strip())
    return None


def component(site, size: int, n: int, nnz: int) -> str:
    """The component a block of ``size`` bytes allocated at ``site`` belongs to."""
    if size < SMALL:
        return "small objects (< 64 KiB each)"
    per_edge = size % nnz == 0          # one or more numbers per stored entry
    if site is not None:
        rel, func, _, _ = site
        for where, fn, name in SITES:
            if rel.startswith(where) and fn in func and (per_edge or name not in PER_EDGE):
                return name
    if per_edge:
        return "other per-edge arrays"
    if size % n <= 64 and size // n <= 1024:      # (64: an aligned array's margin)
        return VERTEX
    return "other"


class _Tracer:
    """tracemalloc snapshots at the step's milestones, summarised at once."""

    def __init__(self):
        self.n = self.nnz = 1
        self.snaps: list[dict] = []
        self.phase_peaks: list[dict] = []
        self._undo: list = []
        self._last = "start"

    def start(self):
        from gblas_gnn.executors.cpu import programs
        from gblas_gnn.executors.patterns import CSRPattern

        kernel = programs.kernel
        csc = CSRPattern.csc
        passes = {"n": 0}

        def traced_kernel(mod, name, work):
            fn = kernel(mod, name, work)
            if name != "column_pass":
                return fn

            def run(*args):
                passes["n"] += 1
                self.snap(f"column pass {passes['n']} (backward, before its kernel)")
                return fn(*args)
            return run

        def traced_csc(pattern):
            fresh = pattern._csc is None
            out = csc(pattern)
            if fresh:
                self.snap("CSC view built (first backward)")
            return out

        programs.kernel = traced_kernel
        CSRPattern.csc = traced_csc
        self._undo = [(programs, "kernel", kernel), (CSRPattern, "csc", csc)]
        tracemalloc.start(NFRAME)

    def sizes(self, n: int, nnz: int):
        self.n, self.nnz = n, nnz

    def snap(self, name: str):
        current, peak = tracemalloc.get_traced_memory()
        self.phase_peaks.append({"from": self._last, "to": name, "peak": peak})
        snapshot = tracemalloc.take_snapshot()
        by_component: dict[str, int] = {}
        by_site: dict[str, list] = {}
        total = 0
        for trace in snapshot.traces:
            site = _site(trace.traceback) if trace.size >= SMALL else None
            comp = component(site, trace.size, self.n, self.nnz)
            by_component[comp] = by_component.get(comp, 0) + trace.size
            total += trace.size
            if site is not None:
                key = f"{site[0]}:{site[2]} ({site[1]}) {site[3]}"
                entry = by_site.setdefault(key, [0, 0, comp])
                entry[0] += trace.size
                entry[1] += 1
        del snapshot
        top = sorted(by_site.items(), key=lambda kv: -kv[1][0])[:30]
        self.snaps.append({"name": name, "traced": total, "traced_now": current,
                           "rss": rss_bytes(), "components": by_component,
                           "sites": [{"site": s, "bytes": b, "blocks": c, "component": comp}
                                     for s, (b, c, comp) in top]})
        tracemalloc.reset_peak()
        self._last = name

    def finish(self) -> dict:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        for obj, attr, value in self._undo:
            setattr(obj, attr, value)
        return {"snapshots": self.snaps, "phase_peaks": self.phase_peaks,
                "last_peak": peak}


def worker_parser(module: str, doc: str) -> argparse.ArgumentParser:
    """The arguments of a memory worker (this one, :mod:`.grid`)."""
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.splitlines()[0])
    p.add_argument("--scale", type=int, required=True)
    p.add_argument("--edge-factor", type=int, default=16)
    p.add_argument("--k", type=int, default=16)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--model", choices=sorted(MODELS), default="gat")
    p.add_argument("--breakdown", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    """Command-line entry of the worker."""
    a = worker_parser("bench.memory.step", __doc__).parse_args(argv)
    return worker_main(lambda: run_step(a.scale, a.edge_factor, a.k, a.layers, a.threads,
                                        a.breakdown, a.model))


if __name__ == "__main__":
    raise SystemExit(main())
