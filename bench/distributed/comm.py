r"""The communication study: ``python -m bench comm``.

    python -m bench comm [--procs 1,4,9,16] [--graphs er:n=20000,density=0.0001,...]
                         [--models gat,agnn,gcn] [--ks 16,128] [--out bench/results/current]

For every graph (generated in place on each grid) and process count P, one MPI job
(:mod:`bench.distributed.comm_worker`) runs one layer of every model forward and backward and
reports the words (float32) each rank sent, counted by the grid. Beside it, per layer and rank (the
maximum over the ranks, the BSP volume):

* **scheme** — the exact count of the implemented scheme for that rank's block (it must equal
  the measured count; the study stops if it does not);
* **model** — the paper's bound :math:`nk/\sqrt{P} + k^2` (§7, constant 1);
* **local** — what vertex-partitioned message passing (DistDGL, DistGNN) moves on the same
  graph: rank r owns n/P vertices (contiguous ids) and receives the k features of every
  remote in-neighbour of its vertices once in the forward, and sends the k gradient entries
  of each back once in the backward, computed exactly from the graph and the partition;
* **CAGNET** (GCN) — CAGNET's 2-D (SUMMA) algorithm, §IV-C: :math:`8nk/\sqrt{P} +
  2\,\mathrm{nnz}/\sqrt{P} + k^2` per layer, forward and backward together (it moves blocks
  of A too).

Then a **projection**, labelled as a model, of the per-layer communication time at
P = 64 … 1024 for a graph of MAKG's size (n = 111 M, 3.2 B edges, k = 16 and 128) under an
α–β network model, from the scheme's exact count (validated above) and, for the local
formulation, the average-degree bound on remote neighbours; and the **time breakdown** of one
layer step by step at P = 4 from the executor's own timers (compute) and the grid's
(communication). Writes ``OUT/comm.json``, ``comm.md`` and ``comm.png`` (the plot only when a
process count above 1 ran: one process sends nothing, and the plot is words against P on
log axes).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from gblas_gnn.dist.cost import bound_words

from ..core.environment import environment
from .comm_worker import parse_graph, scheme_words
from .executor import launch

__all__ = ["run_comm", "comm_markdown", "local_words", "projection", "NETWORK"]

DEFAULT_GRAPHS = ["er:n=20000,density=0.0001", "er:n=20000,density=0.001",
                  "er:n=20000,density=0.01", "kron:scale=14,edge_factor=16"]
#: the α–β model of the projection: an Aries-class network like the paper's (Piz Daint):
#: ~1.5 µs MPI latency, ~10 GB/s per node injection bandwidth
NETWORK = {"alpha_s": 1.5e-6, "beta_bytes_per_s": 10e9,
           "why": "Cray Aries-class interconnect of the paper's evaluation (Piz Daint): "
                  "MPI latency ~1.5 µs, ~10 GB/s injection bandwidth per node"}
MAKG = {"n": 111_000_000, "edges": 3_200_000_000}


def single_process_graph(spec: str):
    from gblas_gnn.data import erdos_renyi, kronecker

    kind, kw = parse_graph(spec)
    if kind == "er":
        return erdos_renyi(kw["n"], kw["density"], seed=0)
    return kronecker(kw["scale"], kw.get("edge_factor", 16), seed=0)


def local_words(g, p: int, k: int) -> int:
    """Words the busiest rank of vertex-partitioned message passing receives per layer in
    the forward (as many go back in the backward): k per distinct remote in-neighbour."""
    csr = g.with_self_loops().to_scipy()
    n = csr.shape[0]
    cuts = [(i * n) // p for i in range(p + 1)]
    worst = 0
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        sources = np.unique(csr.indices[csr.indptr[lo]:csr.indptr[hi]])
        worst = max(worst, int(np.count_nonzero((sources < lo) | (sources >= hi))))
    return k * worst


def _job(spec: str, p: int, models: list[str], ks: list[int], timeout: float) -> dict:
    return launch(p, "bench.distributed.comm_worker",
                  ["--graph", spec, "--models", ",".join(models), "--ks", ",".join(map(str, ks))],
                  timeout)


def run_comm(procs: list[int], graphs: list[str], models: list[str], ks: list[int],
             out: Path, timeout: float = 3600) -> dict:
    """Run the study (see the module docstring) and write its outputs."""
    studies = []
    for spec in graphs:
        g = single_process_graph(spec)
        nnz = g.with_self_loops().nnz
        for p in procs:
            job = _job(spec, p, models, ks, timeout)
            for row in job["rows"]:
                if not row["matches"]:
                    raise RuntimeError(f"{spec}, P={p}, {row['model']} k={row['k']}: the "
                                       "counted words differ from the scheme's count")
                k, n = row["k"], job["n"]
                studies.append({
                    "graph": spec, "n": n, "nnz": nnz, "degree": nnz / n, "p": p,
                    "model": row["model"], "k": k, "fwd": row["fwd"], "bwd": row["bwd"],
                    "scheme_fwd": row["scheme_fwd"], "scheme_bwd": row["scheme_bwd"],
                    "bound": bound_words(n, k, p),
                    "local": local_words(g, p, k) if p > 1 else 0,
                    "cagnet": (8 * n * k + 2 * nnz) / math.sqrt(p) + k * k
                    if row["model"] == "gcn" and p > 1 else None,
                    "imbalance": job["imbalance"],
                    "breakdown": row["ranks"][0] if p == 4 else None})
    result = {"procs": procs, "graphs": graphs, "models": models, "ks": ks,
              "rows": studies, "network": NETWORK, "projection": projection(),
              "environment": environment()}
    out.mkdir(parents=True, exist_ok=True)
    drawn = plot(result, out / "comm.png")
    result["plot"] = drawn.name if drawn is not None else None
    (out / "comm.json").write_text(json.dumps(result, indent=1))
    (out / "comm.md").write_text(comm_markdown(result))
    return result


def _allreduce_time(words: float, q: int, net: dict) -> float:
    """Ring / Rabenseifner allreduce of ``words`` float32 over q ranks (α–β)."""
    if q == 1:
        return 0.0
    return 2 * math.log2(q) * net["alpha_s"] + 2 * (q - 1) / q * 4 * words / \
        net["beta_bytes_per_s"]


def _exchange_time(words: float, net: dict) -> float:
    return net["alpha_s"] + 4 * words / net["beta_bytes_per_s"]


def scheme_time(model: str, n: int, k: int, p: int, net: dict) -> float:
    """Modelled seconds of one layer (forward + backward) of the scheme on P ranks: its
    collectives one by one, with r = c = n/√P rows (an off-diagonal rank)."""
    q = math.isqrt(p)
    r = n / q
    if model == "gat":
        allreduces = [r, r, k * r, r, (k + 1) * r, k, 2 * k + k * k]
        exchanges = [(k + 1) * r, (k + 1) * r]
    elif model == "agnn":
        allreduces = [r, r, k * r, k * r, 2 * k * r, 1, k * k]
        exchanges = [2 * k * r, 2 * k * r]
    else:
        allreduces = [k * r, k * r, k * k, k]
        exchanges = [k * r, k * r]
    return sum(_allreduce_time(w, q, net) for w in allreduces) + \
        sum(_exchange_time(w, net) for w in exchanges)


def local_time(n: int, edges: int, k: int, p: int, net: dict) -> float:
    """Modelled seconds of one layer of vertex-partitioned message passing: an all-to-all
    of the remote neighbours' features forward and of their gradients backward, each rank
    receiving at most min(n − n/P, (n/P) d) distinct remote neighbours (d = edges / n)."""
    remote = min(n - n / p, (n / p) * edges / n * (1 - 1 / p))
    return 2 * ((p - 1) * net["alpha_s"] + 4 * k * remote / net["beta_bytes_per_s"])


def projection(net: dict = NETWORK) -> list[dict]:
    """Per-layer communication time on a MAKG-sized graph (a model, see the docstring)."""
    rows = []
    for k in (16, 128):
        for p in (64, 256, 1024):
            words = scheme_words("gat", k, MAKG["n"] // math.isqrt(p),
                                 MAKG["n"] // math.isqrt(p), math.isqrt(p), False)
            rows.append({"k": k, "p": p, "scheme_words": sum(words),
                         **{f"{m}_s": scheme_time(m, MAKG["n"], k, p, net)
                            for m in ("gat", "agnn", "gcn")},
                         "local_s": local_time(MAKG["n"], MAKG["edges"], k, p, net)})
    return rows


def comm_markdown(r: dict) -> str:
    """The tables of a :func:`run_comm` result."""
    lines = ["# Communication per layer: the global scheme against the local formulation", "",
             "Words (float32) the busiest rank sends per layer, one layer k → k, measured by "
             "the grid's counters on graphs generated in place; *scheme* is the exact count "
             "of the implemented scheme (equal to the measurement in every row, checked), "
             "*bound* the paper's nk/√P + k², *local* vertex-partitioned message passing on "
             "the same graph and P (computed exactly from the partition, forward; as much "
             "again backward), *CAGNET* its 2-D algorithm for GCN (forward + backward).", "",
             "| graph | d | model | k | P | fwd | bwd | fwd + bwd | scheme | bound | local "
             "(fwd + bwd) | global / local | CAGNET |", "|---|---|---|---|---|---|---|---|"
             "---|---|---|---|---|"]
    for x in r["rows"]:
        total, local = x["fwd"] + x["bwd"], 2 * x["local"]
        ratio = f"{total / local:.2f}" if local else "–"
        cag = f"{x['cagnet']:,.0f}" if x["cagnet"] else "–"
        lines.append(f"| {x['graph']} | {x['degree']:.1f} | {x['model']} | {x['k']} | "
                     f"{x['p']} | {x['fwd']:,} | {x['bwd']:,} | {total:,} | "
                     f"{x['scheme_fwd'] + x['scheme_bwd']:,} | {x['bound']:,.0f} | "
                     f"{local:,} | {ratio} | {cag} |")
    net = r["network"]
    lines += ["", "## Projection to MAKG's size (a model, not a measurement)", "",
              f"n = {MAKG['n']:,}, {MAKG['edges']:,} edges, one layer forward + backward, "
              f"α–β network with α = {net['alpha_s'] * 1e6:.1f} µs and 1/β = "
              f"{net['beta_bytes_per_s'] / 1e9:.0f} GB/s ({net['why']}); the scheme's "
              "collectives priced one by one (ring allreduce, pairwise exchange); the local "
              "formulation as an all-to-all with the average-degree bound on remote "
              "neighbours.", "",
              "| k | P | scheme words per rank (GAT) | GAT s | AGNN s | GCN s | local s |",
              "|---|---|---|---|---|---|---|"]
    for x in r["projection"]:
        lines.append(f"| {x['k']} | {x['p']} | {x['scheme_words']:,} | {x['gat_s']:.3f} | "
                     f"{x['agnn_s']:.3f} | {x['gcn_s']:.3f} | {x['local_s']:.3f} |")
    breakdown = [x for x in r["rows"] if x["breakdown"] is not None]
    if breakdown:
        lines += ["", "## One layer step by step at P = 4 (rank 0)", "",
                  "Compute: CPU seconds of each executor operation (collectives excluded); "
                  "communication: wall seconds of each collective, waiting included "
                  "(4 ranks share 2 cores here).", "",
                  "| graph | model | k | compute ms by operation | communication ms by "
                  "step |", "|---|---|---|---|---|"]
        for x in breakdown:
            b = x["breakdown"]
            comp = ", ".join(f"{op} {s * 1e3:.1f}" for op, s in sorted(b["compute"].items()))
            comm = ", ".join(f"{op} {v['seconds'] * 1e3:.1f}"
                             for op, v in sorted(b["comm"].items()))
            lines.append(f"| {x['graph']} | {x['model']} | {x['k']} | {comp} | {comm} |")
    return "\n".join(lines) + "\n"


#: why :func:`plot` draws nothing for a study of one process
NO_PLOT = ("no plot: every run had one process, which sends nothing (words per rank against "
           "P needs a process count above 1)")


def plot(r: dict, path: Path) -> Path | None:
    """Words per rank against P: measured, the bound, local, CAGNET (GAT and GCN, the
    largest k), for the process counts above 1.

    Parameters
    ----------
    r : dict
        A :func:`run_comm` result.
    path : Path
        Where the PNG goes.

    Returns
    -------
    Path or None
        ``path``; None when no process count above 1 ran (:data:`NO_PLOT`): then nothing is
        drawn and an older plot at ``path`` is removed, so that it cannot pass for this
        study's.
    """
    if not any(x["p"] > 1 for x in r["rows"]):
        path.unlink(missing_ok=True)
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graphs = r["graphs"]
    fig, axes = plt.subplots(1, len(graphs), figsize=(4 * len(graphs), 3.4), squeeze=False)
    for ax, spec in zip(axes[0], graphs, strict=True):
        for model, style in (("gat", "-"), ("gcn", "--")):
            rows = [x for x in r["rows"] if x["graph"] == spec and x["model"] == model
                    and x["k"] == max(r["ks"]) and x["p"] > 1]
            if not rows:
                continue
            ps = [x["p"] for x in rows]
            ax.plot(ps, [x["fwd"] + x["bwd"] for x in rows], "o" + style,
                    label=f"{model} global (measured)")
            ax.plot(ps, [2 * x["local"] for x in rows], "s" + style, label=f"{model} local")
            if model == "gcn":
                ax.plot(ps, [x["cagnet"] for x in rows], "^" + style, label="gcn CAGNET 2-D")
        rows = [x for x in r["rows"] if x["graph"] == spec and x["p"] > 1
                and x["model"] == "gat" and x["k"] == max(r["ks"])]
        ax.plot([x["p"] for x in rows], [x["bound"] for x in rows], ":", color="gray",
                label="nk/√P + k²")
        ax.set(xscale="log", yscale="log", xlabel="P", title=spec, ylabel="words per rank")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
