"""Write a case's result: ``<case>.json``, a markdown table ``<case>.md`` and a plot ``<case>.png``.

Layout of the JSON (all times in milliseconds, memory in bytes):

* ``case``, ``status`` (``ok`` / ``aborted``), ``message``, ``executor`` (what ours ran on;
  results recorded before it was an option lack it and ran on ``cpu``), ``threads``,
  ``threads_set``, ``reps``, ``warmup``, ``tolerance``, ``mem_limit_bytes``, ``protocol``,
  ``environment`` (machine, load average at start and end, versions, git commit), ``graph``
  (n, nnz, nnz with self loops);
* ``layers[layer]``: ``agreement`` (ours against PyG, per output: max abs difference,
  reference scale, relative difference; None in a row without a layer of ours),
  ``times`` (``ours fwd``, ``pyg fwd``, ``ours fwd+bwd``, ``pyg fwd+bwd`` and, with
  ``--peers dgl``, ``dgl …`` and ``dgl.sparse …`` → median, quartiles, min, max, all runs),
  ``speedup`` (PyG / ours), ``memory[impl]`` (status, ``peak_rss_bytes``, setup and run
  increment), ``memory_ratio``; with peers also ``peer_agreement`` (``reference``: ``ours``
  or ``pyg``, and per DGL implementation a report like ``agreement``) and ``speedup_peers``
  (``{impl: {fwd, fwd+bwd}}``, peer / ours);
* ``environment.peers`` (with peers): the versions of the peer's environment and of its
  worker process;
* ``spmm``: the plain SpMM baselines' times; ``gat_fwd_over_spmm``;
* ``epochs[impl]`` (epoch cases): status, epoch time stats, losses, peak RSS; ``speedup``;
* ``targets``: ``{name, value, goal, op, met}``.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["write_outputs", "markdown", "plot"]

_MIB = 1 << 20


def _fmt_time(t: dict | None) -> str:
    if not t:
        return "—"
    return f"{t['median_ms']:.1f} [{t['min_ms']:.1f}–{t['max_ms']:.1f}]"


def _fmt_mem(m: dict | None) -> str:
    if not m:
        return "not measured"
    if m.get("status") != "ok":
        return m.get("message") or m.get("status", "?")
    if "peak_device_bytes" in m:
        return f"{m['peak_device_bytes'] / _MIB:.0f} on the GPU"
    return (f"{m['peak_rss_bytes'] / _MIB:.0f} "
            f"(+{m['run_increment_bytes'] / _MIB:.0f} in the passes)")


def _fmt_ratio(x: float | None, unit: str = "×") -> str:
    return "—" if x is None else f"{x:.2f}{unit}"


def _header(r: dict) -> list[str]:
    c, env = r["case"], r["environment"]
    g = r.get("graph", {})
    git = env.get("git", {})
    commit = (git.get("commit") or "?")[:10] + (" (dirty)" if git.get("dirty") else "")
    lines = [f"## Case {c['name']}: {c['description']}", ""]
    if g:
        lines.append(f"n = {g['n']:,}, edges = {g['nnz']:,} ({g['typed_edges']:,} in "
                     f"{g['relations']} relations), " if "typed_edges" in g else
                     f"n = {g['n']:,}, edges = {g['nnz']:,} ({g['nnz_with_self_loops']:,} "
                     "with self loops), ")
    if "executor" in r:       # results recorded before the option keep their header
        lines[-1] += f"executor = {r['executor']}, "
    if "device" in r:         # both implementations on one GPU (or the simulator's smoke test)
        lines[-1] += f"device = {r['device']}, "
    lines[-1] += (f"threads = {r['threads']}, {r['reps']} timed runs after {r['warmup']} "
                  f"warm-up; {env['cpu']} ({env['cpu_count']} cores); load average "
                  f"{env.get('load_average_start')} → {env.get('load_average_end')}; "
                  f"commit {commit}; {env['date']}.")
    peers = env.get("peers", {})
    if peers:
        lines += ["", "Peers in their own environments: " + "; ".join(
            f"DGL {v.get('dgl')} with torch {v.get('torch')}, numpy {v.get('numpy')} "
            f"({v.get('venv')})" for v in peers.values()) + "."]
    protocol = r.get("protocol", {})
    if "processes" in protocol:     # results recorded before the option keep their header
        lines += ["", f"Processes: {protocol['processes']}. Freed memory: "
                      f"{protocol.get('freed_memory', 'not recorded')}."]
    if r["reps"] < 5:
        lines.append("")
        lines.append(f"**Only {r['reps']} timed runs (fewer than 5): provisional.**")
    if r["status"] != "ok":
        lines += ["", f"**Case {r['status']}: {r['message']}**"]
    return lines


def _table_head(intro: str, *columns: str) -> list[str]:
    """A blank line, ``intro``, and the header and rule of a markdown table."""
    return ["", intro, "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


#: how each implementation is named in the tables, in table order
_IMPL_LABELS = {"ours": "ours", "pyg": "PyG", "dgl": "DGL", "dgl.sparse": "DGL sparse GAT"}


def _worst(report: dict | None) -> str:
    return (f"{max(v['rel_diff'] for v in report.values()):.1e}" if report else
            "not checked")


def _has_ours(e: dict) -> bool:
    """Whether a row ran a layer of ours (a row like ``gatv2`` may have none yet)."""
    return ("ours fwd" in e.get("times", {}) or "ours" in e.get("memory", {})
            or e.get("agreement") is not None)


def _impl_rows(layer: str, e: dict) -> list[str]:
    """One line per implementation of a row (PyG always, as recorded before DGL)."""
    t, mem, lines = e.get("times", {}), e.get("memory", {}), []
    peers = e.get("peer_agreement", {})
    for impl, label in _IMPL_LABELS.items():
        if impl == "ours" and not _has_ours(e):
            continue
        if impl not in ("ours", "pyg") and f"{impl} fwd" not in t and impl not in mem:
            continue
        if impl == "ours":
            agree = _worst(e.get("agreement"))
        elif impl == "pyg":
            agree = ""
        else:
            agree = _worst(peers.get(impl)) + (" (vs PyG)" if peers.get("reference") == "pyg"
                                               else "")
        lines.append(f"| {layer} | {label} | {_fmt_time(t.get(f'{impl} fwd'))} | "
                     f"{_fmt_time(t.get(f'{impl} fwd+bwd'))} | {_fmt_mem(mem.get(impl))} | "
                     f"{agree} |")
    return lines


def _ratio_rows(layer: str, e: dict) -> list[str]:
    """``PyG / ours`` (with the memory ratio) and ``<peer> / ours`` lines of a row."""
    if not _has_ours(e):
        return []
    sp = e.get("speedup", {})
    mem = (f" {_fmt_ratio(e['memory_ratio'], '')} (ours/PyG) " if "memory_ratio" in e
           else " ")
    lines = [f"| {layer} | **PyG / ours** | **{_fmt_ratio(sp.get('fwd'))}** | "
             f"**{_fmt_ratio(sp.get('fwd+bwd'))}** |{mem}| |"]
    for impl, ps in e.get("speedup_peers", {}).items():
        lines.append(f"| {layer} | **{_IMPL_LABELS[impl]} / ours** | "
                     f"**{_fmt_ratio(ps.get('fwd'))}** | **{_fmt_ratio(ps.get('fwd+bwd'))}**"
                     " | | |")
    return lines


def _layer_tables(r: dict) -> list[str]:
    on_gpu = r.get("device") == "gpu"
    lines = _table_head("Times in ms: median [min–max]" + (
        ", each call ended by a device synchronisation. Peak device memory in MiB of a fresh "
        "process (CuPy's pool for ours, torch's allocator for PyG)." if on_gpu else
        ". Peak RSS in MiB of a fresh process (VmHWM)."), "layer", "impl", "fwd", "fwd+bwd",
        "peak GPU MiB" if on_gpu else "peak RSS MiB", "agreement max rel. Δ")
    for layer, e in r["layers"].items():
        lines += _impl_rows(layer, e) + _ratio_rows(layer, e)
    if r.get("spmm"):
        lines += ["", "Plain SpMM `A @ H` (same A with self loops, same H):", "",
                  "| SpMM | ms |", "|---|---|"]
        for k, v in r["spmm"].items():
            lines.append(f"| {k} | {_fmt_time(v)} |")
        if r.get("gat_fwd_over_spmm"):
            g = r["gat_fwd_over_spmm"]
            lines.append(f"\nOur GAT forward = {_fmt_ratio(g['ratio'])} the fastest SpMM "
                         f"({g['fastest_spmm']}).")
    return lines


def _epoch_tables(r: dict) -> list[str]:
    lines = _table_head("One training epoch (forward + loss + backward + Adam step), each "
                        "implementation in its own guarded process.", "impl", "status",
                        "epoch ms median [min–max]", "peak RSS GiB", "first loss")
    for impl, label in (("ours", "ours"), ("pyg", "PyG")):
        e = r["epochs"].get(impl)
        if e is None:
            continue
        status = e["status"] if e["status"] == "ok" else e["message"]
        peak = (f"{e['peak_rss_bytes'] / (1 << 30):.2f}" if "peak_rss_bytes" in e else
                f"≥ {e['observed_peak_bytes'] / (1 << 30):.2f} (seen)")
        loss = f"{e['losses'][0]:.4f}" if e.get("losses") else "—"
        lines.append(f"| {label} | {status} | {_fmt_time(e.get('epoch'))} | {peak} | {loss} |")
    sp = r.get("speedup", {}).get("epoch")
    lines.append(f"\nEpoch speedup PyG / ours: {_fmt_ratio(sp)}.")
    for key, what in (("precheck", "on Kronecker scale 8, in one process"),
                      ("agreement", "of the two runs above")):
        if r.get(key):
            worst = max(v["rel_diff"] for v in r[key].values())
            lines.append(f"Agreement {what} (epoch-0 loss, logits sample, gradients): "
                         f"max relative difference {worst:.1e}.")
    if r.get("adam_step"):
        lines.append("Largest parameter difference after the first Adam step: "
                     f"{max(r['adam_step'].values()):.1e} (informative only).")
    return lines


def markdown(r: dict) -> str:
    """The markdown report of a case result."""
    lines = _header(r)
    lines += _layer_tables(r) if r["case"]["kind"] == "layer" else _epoch_tables(r)
    if r["targets"]:
        lines += ["", "| target | value | goal | met |", "|---|---|---|---|"]
        for t in r["targets"]:
            op = "≥" if t["op"] == ">=" else "≤"
            met = {True: "yes", False: "**no**", None: "—"}[t["met"]]
            val = "—" if t["value"] is None else f"{t['value']:.3g}"
            lines.append(f"| {t['name']} | {val} | {op} {t['goal']:.3g} | {met} |")
    return "\n".join(lines) + "\n"


def plot(r: dict, path: Path) -> Path:
    """Bar charts of the case: times (with min–max whiskers) and peak memory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = {"ours": "#1f77b4", "pyg": "#ff7f0e", "dgl": "#2ca02c", "dgl.sparse": "#9467bd"}
    impls = ["ours", "pyg"]
    if r["case"]["kind"] == "layer":
        impls += [i for i in ("dgl", "dgl.sparse")
                  if any(f"{i} fwd" in e.get("times", {}) for e in r["layers"].values())]
        width = 0.76 / len(impls)
        offset = {impl: (j - (len(impls) - 1) / 2) * width for j, impl in enumerate(impls)}
        groups = [(layer, kind) for layer in r["layers"] for kind in ("fwd", "fwd+bwd")]
        for impl in impls:
            med, lo, hi, xs = [], [], [], []
            for i, (layer, kind) in enumerate(groups):
                t = r["layers"][layer].get("times", {}).get(f"{impl} {kind}")
                if t:
                    xs.append(i + offset[impl])
                    med.append(t["median_ms"])
                    lo.append(t["median_ms"] - t["min_ms"])
                    hi.append(t["max_ms"] - t["median_ms"])
            ax_t.bar(xs, med, width, yerr=[lo, hi], capsize=3, color=colors[impl],
                     label=_IMPL_LABELS[impl])
        ax_t.set_xticks(range(len(groups)), [f"{a}\n{b}" for a, b in groups])
        ax_t.set_ylabel("ms (median, min–max)")
        mem_groups = list(r["layers"])
        mems = {impl: [r["layers"][lay].get("memory", {}).get(impl, {}).get("peak_rss_bytes")
                       for lay in mem_groups] for impl in impls}
    else:
        _plot_epoch(r, ax_t, ax_m, colors)
        mem_groups, mems = None, None
    if mems is not None:
        for impl in impls:
            xs = [i + offset[impl] for i, v in enumerate(mems[impl]) if v is not None]
            vals = [v / _MIB for v in mems[impl] if v is not None]
            ax_m.bar(xs, vals, width, color=colors[impl])
        ax_m.set_xticks(range(len(mem_groups)), mem_groups)
    ax_m.set_ylabel("peak RSS, MiB (fresh process)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[k]) for k in impls]
    labels = [_IMPL_LABELS[k] for k in impls]
    ax_t.legend(handles=handles, labels=labels)
    ax_m.legend(handles=handles, labels=labels)
    c = r["case"]
    fig.suptitle(f"case {c['name']}: {c['description']} — executor "
                 f"{r.get('executor', 'cpu')}, {r['threads']} threads", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_epoch(r: dict, ax_t, ax_m, colors: dict) -> None:
    """Epoch time and peak RSS per implementation; a killed run shows what was seen."""
    for j, impl in enumerate(("ours", "pyg")):
        e = r["epochs"].get(impl, {})
        if "epoch" in e:
            t = e["epoch"]
            ax_t.bar([j], [t["median_ms"] / 1e3], 0.6, color=colors[impl],
                     yerr=[[(t["median_ms"] - t["min_ms"]) / 1e3],
                           [(t["max_ms"] - t["median_ms"]) / 1e3]], capsize=3)
            ax_m.bar([j], [e["peak_rss_bytes"] / _MIB], 0.6, color=colors[impl])
        elif e:
            seen = e.get("observed_peak_bytes", 0) / _MIB
            ax_m.bar([j], [seen], 0.6, color="none", edgecolor=colors[impl], hatch="//")
            ax_m.text(j, seen, f"{e['status'].replace('_', ' ')}\n(≥ {seen:.0f} MiB seen)",
                      ha="center", va="bottom", fontsize=8)
            ax_t.text(j, 0, e["status"].replace("_", " "), ha="center", va="bottom",
                      fontsize=8)
    limit = r["mem_limit_bytes"] / _MIB
    ax_m.axhline(limit, color="red", lw=0.8, ls="--")
    ax_m.text(-0.55, limit, "guard limit", color="red", fontsize=8, ha="left", va="bottom")
    ax_m.set_ylim(0, limit * 1.2)
    for ax in (ax_t, ax_m):
        ax.set_xticks([0, 1], ["ours", "PyG"])
        ax.set_xlim(-0.6, 1.6)
    ax_t.set_ylabel("s per epoch (median, min–max)")


def write_outputs(r: dict, out: Path, with_plot: bool = True) -> dict[str, Path]:
    """Write ``<case>.json``, ``<case>.md`` and (when the case completed) ``<case>.png``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    name = r["case"]["name"]
    paths = {"json": out / f"{name}.json", "md": out / f"{name}.md"}
    paths["json"].write_text(json.dumps(r, indent=2) + "\n")
    paths["md"].write_text(markdown(r))
    if with_plot and r["status"] == "ok":
        paths["png"] = plot(r, out / f"{name}.png")
    return paths
