"""``python -m bench hgt``: HGT on a typed graph, ours against PyG's ``HGTConv`` (≥ 2.4).

The graph is seeded and typed like a citation graph, the shape issue 36 sets: three vertex
types (papers 50 %, authors 35 %, fields 15 % of ``n``) and six relations, three and their
reverses (PyG's ``ToUndirected``: cites, writes, has_topic), with about ``n · degree``
edges over them (cites and its reverse 20 % each, the others 15 % each), drawn by
:func:`gblas_gnn.data.typed_random` (pairs uniform per relation, each once;
:func:`bench.core.cases.typed_graph`, also the typed cases' graph). Every type
has ``k`` features; the layer is ``HGTConv(k, k, metadata, heads)``, the same weights on
both sides (``from_pyg``), float32. The run sets ``OMP_WAIT_POLICY=passive`` (torch's and
numba's OpenMP threads otherwise spin against each other on two cores).

Measured, on ``threads`` threads (torch, numba, BLAS): forward and forward + backward,
interleaved, median [min–max] of ``reps``; the agreement of the outputs and of the input
gradients; and each side's peak RSS growth over one forward + backward after a warm-up, in a
fresh process of its own (``VmHWM``). PyG's layer runs and is timed in a process of its own
(:class:`PyGProcess`, the same seeds build the same graph and weights there), ours in this
one: in one process torch's freed memory stalls our next calls on this VM (``bench run``
does the same, :mod:`bench.peers.pyg_worker`). Results go to ``OUT/<name>.{json,md}``.
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ..core.cases import typed_graph
from ..core.environment import environment
from ..core.rss import MIB, freed_memory_kept, hwm_bytes, keep_freed_memory, reset_hwm, rss_bytes
from ..core.threads import set_threads
from ..core.timing import Measured, interleaved

__all__ = ["typed_graph", "run_hgt", "hgt_markdown", "PyGProcess"]

def _setup(n: int, degree: int, k: int, heads: int):
    """The graph, inputs, output cotangents, our layer and PyG's, one set of weights."""
    import torch
    import torch_geometric.nn as pyg

    from gblas_gnn.nn.pyg import from_pyg

    hg = typed_graph(n, degree)
    nodes, edges = hg.num_nodes_dict, hg.edge_index_dict
    rng = np.random.default_rng(1)
    x = {t: rng.standard_normal((c, k)).astype(np.float32) for t, c in nodes.items()}
    torch.manual_seed(0)
    conv = pyg.HGTConv(k, k, (list(nodes), list(edges)), heads=heads)
    ours = from_pyg(conv)
    dout = {t: rng.standard_normal((nodes[t], k)).astype(np.float32) for t in ours.dst_types}
    eit = {key: torch.from_numpy(ei) for key, ei in edges.items()}
    return hg, x, dout, ours, conv, eit, edges


def _torch_side(conv, x: dict, eit: dict, dout: dict, backward: bool):
    import torch

    xt = {t: torch.from_numpy(v).requires_grad_(backward) for t, v in x.items()}
    if not backward:
        with torch.no_grad():
            return conv(xt, eit), None
    out = conv(xt, eit)
    sum((out[t] * torch.from_numpy(dout[t])).sum() for t in out).backward()
    return out, {t: v.grad for t, v in xt.items()}


def _pyg_serve(conn, n: int, degree: int, k: int, heads: int, threads: int,
               keep_freed: bool) -> None:
    """PyG's side in its own process: answer ``"fwd"`` and ``"fwd+bwd"`` with the seconds
    of one call (after an untimed collection), ``"check"`` with the outputs and the input
    gradients of one training call, until ``"quit"``."""
    set_threads(threads)
    if keep_freed:
        keep_freed_memory()
    _, x, dout, _, conv, eit, _ = _setup(n, degree, k, heads)
    conn.send("ready")
    while (op := conn.recv()) != "quit":
        if op == "check":
            conv.train()
            out, dx = _torch_side(conv, x, eit, dout, True)
            conn.send(({t: v.detach().numpy() for t, v in out.items()},
                       {t: v.numpy() for t, v in dx.items()}))
            continue
        backward = op == "fwd+bwd"
        conv.train(backward)
        conv.zero_grad(set_to_none=True)
        gc.collect()
        t = time.perf_counter()
        _torch_side(conv, x, eit, dout, backward)
        conn.send(time.perf_counter() - t)


class PyGProcess:
    """PyG's ``HGTConv`` of the study in a process of its own (a context manager): the
    same seeded graph, inputs and weights as :func:`_setup` gives this process; with
    ``keep_freed`` the process keeps its freed memory (:func:`~bench.core.rss.
    keep_freed_memory`)."""

    def __init__(self, n: int, degree: int, k: int, heads: int, threads: int,
                 keep_freed: bool = False):
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_pyg_serve, args=(child, n, degree, k, heads, threads,
                                                       keep_freed),
                                daemon=True)
        self.proc.start()
        child.close()
        if self.conn.recv() != "ready":
            raise RuntimeError("PyG's HGT process did not start")

    def call(self, op: str) -> Measured:
        """One timed call (``"fwd"`` or ``"fwd+bwd"``), billed the seconds it measured."""
        self.conn.send(op)
        return Measured(self.conn.recv())

    def outputs(self) -> tuple[dict, dict]:
        """The outputs and input gradients of one training call, per vertex type."""
        self.conn.send("check")
        return self.conn.recv()

    def close(self) -> None:
        if self.proc.is_alive():
            self.conn.send("quit")
            self.proc.join(timeout=60)
        self.conn.close()

    def __enter__(self) -> PyGProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _rel(a, b) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def _memory_worker(side: str, n: int, degree: int, k: int, heads: int, threads: int) -> dict:
    """One side's peak RSS growth over a forward + backward after a warm-up (this process)."""
    set_threads(threads)
    hg, x, dout, ours, conv, eit, _ = _setup(n, degree, k, heads)
    if side == "ours":
        def step():
            ours(hg, x)
            ours.backward(dout)
    else:
        conv.train()

        def step():
            conv.zero_grad(set_to_none=True)
            _torch_side(conv, x, eit, dout, True)
    step()
    reset_hwm()                 # the warm-up's freed memory handed back first
    before = rss_bytes()
    step()
    return {"peak_growth_mib": (hwm_bytes() - before) / MIB, "rss_mib": hwm_bytes() / MIB}


def _dgl_worker(stack, hg, x: dict, dout: dict, k: int, heads: int, threads: int,
                keep_freed: bool, workdir: Path):
    """DGL's ``HGTConv`` on the same typed graph in a worker of DGL's environment (entered on
    ``stack``), built: the reference row (:mod:`bench.peers.dgl_layers`, ``hgt``). It gets the
    homogeneous graph, every edge's relation, each type's vertex count and the same inputs
    and output cotangents, stacked type after type."""
    from ..core.cases import CaseData, save_case_data
    from ..peers.client import PeerWorker

    g, _ = hg.to_homogeneous()
    src, dst, rel = [], [], []
    for r, (key, ei) in enumerate(hg.edge_index_dict.items()):
        src.append(ei[0] + hg.type_rows(key[0]).start)
        dst.append(ei[1] + hg.type_rows(key[2]).start)
        rel.append(np.full(ei.shape[1], r, np.int64))
    types = list(hg.num_nodes_dict)
    H = np.concatenate([x[t] for t in types])
    dZ = np.concatenate([dout.get(t, np.zeros((hg.num_nodes_dict[t], k), np.float32))
                         for t in types])
    empty = np.zeros(0, np.int64)
    data = CaseData(g.n, empty, empty, np.stack([np.concatenate(src), np.concatenate(dst)]),
                    H, dZ, np.zeros(g.n, np.int64), np.concatenate(rel))
    path = save_case_data(data, workdir / "hgt-case.npz")
    worker = stack.enter_context(PeerWorker(path, threads, workdir, keep_freed=keep_freed))
    params = workdir / "hgt-params.npz"
    np.savez(params)                     # no shared weights: DGL's own, seeded
    worker.call("build", row="hgt", impl="dgl", params=str(params), k_in=k, k_out=k,
                heads=heads, config={"ntypes": [hg.num_nodes_dict[t] for t in types],
                                     "relations": len(hg.edge_types)})
    return worker


def run_hgt(n: int, degree: int, k: int, heads: int, reps: int, threads: int,
            memory: bool = True, keep_freed: bool = True, dgl: bool = False) -> dict:
    """The study (module docstring); the result as a dict. With ``keep_freed`` both timing
    processes keep their freed memory (:func:`~bench.core.rss.keep_freed_memory`: why).
    With ``dgl``, DGL's ``HGTConv`` is timed in the same interleaving as a reference (another
    model: :func:`_dgl_worker`), its outputs not compared."""
    import contextlib
    import tempfile

    set_threads(threads)
    env = environment()
    hg, x, dout, ours, _, _, edges = _setup(n, degree, k, heads)
    with contextlib.ExitStack() as stack, \
            PyGProcess(n, degree, k, heads, threads, keep_freed) as pyg, \
            freed_memory_kept(keep_freed):
        peer = None
        if dgl:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            peer = _dgl_worker(stack, hg, x, dout, k, heads, threads, keep_freed, workdir)
            env["peers"] = {"dgl": peer.versions}
        got, dx = ours(hg, x), ours.backward(dout)
        want, want_dx = pyg.outputs()
        agreement = {"forward": max(_rel(got[t], want[t]) for t in got),
                     "input_gradient": max(_rel(dx[t], want_dx[t]) for t in dx)}

        def ours_fwd():
            ours.eval()
            ours(hg, x)

        def ours_both():
            ours.train()
            ours(hg, x)
            ours.backward(dout)

        sides = {"ours fwd": ours_fwd, "pyg fwd": lambda: pyg.call("fwd"),
                 "ours fwd+bwd": ours_both, "pyg fwd+bwd": lambda: pyg.call("fwd+bwd")}
        if peer is not None:
            for what in ("fwd", "fwd+bwd"):
                sides[f"dgl {what}"] = (lambda w=what: Measured(
                    peer.call("time", impl="dgl", what=w)["seconds"]))
        times = interleaved(sides, reps)
    result = {"n": int(sum(hg.num_nodes_dict.values())),
              "edges": int(sum(e.shape[1] for e in edges.values())),
              "nodes": hg.num_nodes_dict, "relations": {"__".join(k_): int(e.shape[1])
                                                        for k_, e in edges.items()},
              "k": k, "heads": heads, "threads": threads, "reps": reps, "times": times,
              "agreement": agreement, "environment": env,
              "protocol": "ours in this process, PyG in a process of its own (same seeds); "
                          "calls interleaved, each timed where it runs",
              "freed_memory": "kept in both timing processes" if keep_freed
                              else "glibc's defaults"}
    if memory:
        result["memory"] = {side: _fresh(side, n, degree, k, heads, threads)
                            for side in ("ours", "pyg")}
    return result


def _fresh(side: str, n: int, degree: int, k: int, heads: int, threads: int) -> dict:
    code = ("import json, sys; from bench.layers.hetero import _memory_worker; "
            f"print(json.dumps(_memory_worker({side!r}, {n}, {degree}, {k}, {heads}, "
            f"{threads})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _ms(s: dict) -> str:
    return f"{s['median_ms']:.1f} [{s['min_ms']:.1f}–{s['max_ms']:.1f}]"


def hgt_markdown(r: dict) -> str:
    """The result as a markdown table."""
    t, env = r["times"], r["environment"]
    lines = [f"## HGT on a typed graph: n = {r['n']:,}, "
             f"{r['edges']:,} edges, {len(r['nodes'])} vertex types, {len(r['relations'])} "
             "relations, "
             f"k = {r['k']}, {r['heads']} heads",
             "",
             f"{env.get('cpu', '?')}; threads = {r['threads']}; {r['reps']} timed runs "
             f"interleaved after 1 warm-up; commit {env.get('git', {}).get('commit', '?')}; "
             f"{time.strftime('%Y-%m-%d')}. Times in ms: median [min–max].",
             "",
             "| impl | fwd | fwd+bwd | peak RSS growth of fwd+bwd, MiB |",
             "|---|---|---|---|"]
    mem = r.get("memory", {})
    dgl = "dgl fwd" in t
    for side, label in (("ours", "ours"), ("pyg", "PyG"), ("dgl", "DGL (another model)")):
        if side == "dgl" and not dgl:
            continue
        growth = f"{mem[side]['peak_growth_mib']:.0f}" if side in mem else "–"
        lines.append(f"| {label} | {_ms(t[side + ' fwd'])} | {_ms(t[side + ' fwd+bwd'])} | "
                     f"{growth} |")
    ratio = [t[f"pyg {p}"]["median_ms"] / t[f"ours {p}"]["median_ms"] for p in
             ("fwd", "fwd+bwd")]
    mratio = (f"{mem['pyg']['peak_growth_mib'] / max(mem['ours']['peak_growth_mib'], 1e-9):.1f}×"
              if mem else "–")
    lines.append(f"| **PyG / ours** | **{ratio[0]:.2f}×** | **{ratio[1]:.2f}×** | **{mratio}** |")
    if dgl:
        dratio = [t[f"dgl {p}"]["median_ms"] / t[f"ours {p}"]["median_ms"] for p in
                  ("fwd", "fwd+bwd")]
        lines += [f"| DGL / ours | {dratio[0]:.2f}× | {dratio[1]:.2f}× | – |", "",
                  "DGL's `HGTConv` is another model than PyG's and ours (no biases, no GELU, "
                  "its own residual; DGL's seeded weights, dropout 0): a reference time, not "
                  "compared for equality. It ran with " + ", ".join(
                      f"{k_} {v}" for k_, v in r["environment"]["peers"]["dgl"].items()
                      if k_ in ("dgl", "torch")) + " in its own environment."]
    lines += ["",
              f"Agreement (max relative Δ to PyG): output {r['agreement']['forward']:.1e}, "
              f"input gradient {r['agreement']['input_gradient']:.1e}.",
              "",
              "Edges per relation: " + ", ".join(f"{k} {v:,}" for k, v in
                                                r["relations"].items()) + "."]
    return "\n".join(lines) + "\n"


def write(result: dict, out: Path, name: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.json", out / f"{name}.md"]
    paths[0].write_text(json.dumps(result, indent=1))
    paths[1].write_text(hgt_markdown(result))
    return paths
