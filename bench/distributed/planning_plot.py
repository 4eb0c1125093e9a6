"""The planning table and plot of ``docs/planning.md``: per-rank memory and words received per
epoch of the two dense layouts beside CAGNET's 1.5D and 3D algorithms, from
:mod:`gblas_gnn.dist.planning` (no measurement: the formulas).

    python -m bench.distributed.planning_plot [--png docs/planning.png] [--no-plot]
    python -m bench.distributed.planning_plot --validation

prints the markdown that ``docs/planning.md`` holds between its ``planning-table`` markers
(``tests/test_planning.py`` checks the two are equal, so the numbers are never typed by hand)
and draws the plot (matplotlib, the ``bench`` extra); ``--validation`` prints instead the
table between its ``planning-validation`` markers: the planned memory per rank against the
recorded memory study (:mod:`.memory_validation`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gblas_gnn.dist import planning

__all__ = ["DATASETS", "PROCS", "KS", "LAYERS", "GAT_HEADS", "ITEMSIZE", "rows",
           "table_markdown", "plot", "main"]

#: name → (n, m, input width f0): the OGB graphs (n and m as OGB lists them; their
#: feature widths: 100 and 128) and a Kronecker graph of scale 30, edge factor 16 (random
#: features of width 128)
DATASETS = {
    "ogbn-products": (2.4e6, 1.2e8, 100),
    "ogbn-papers100M": (1.1e8, 1.6e9, 128),
    "Kronecker-30": (2.0 ** 30, 16 * 2.0 ** 30, 128),
}
PROCS = (16, 64, 256, 1024)
KS = (128, 256)
#: graph layers of every model: widths [f0, k, k, k]
LAYERS = 3
#: GAT's heads (k = heads·d, concatenated)
GAT_HEADS = 4
#: float32
ITEMSIZE = 4
GIB = 2.0 ** 30
MEGA = 1e6
ROOT = Path(__file__).resolve().parents[2]


def _widths(f0: int, k: int) -> list[int]:
    return [f0] + [k] * LAYERS


def rows(name: str) -> list[dict]:
    """One row per (model, k, p) of data set ``name``: memory (GiB per rank) and words
    received per epoch (per rank) of both layouts, CAGNET's (GCN only) and the bound."""
    n, m, f0 = DATASETS[name]
    out = []
    for kind in planning.KINDS:
        heads = GAT_HEADS if kind == "gat" else 1
        for k in KS:
            ws = _widths(f0, k)
            f_avg = sum(ws) / len(ws)          # CAGNET's "average feature vector length"
            for p in PROCS:
                row = {"model": kind, "k": k, "p": p,
                       "auto": planning.choose_layout(kind, n, m, p, ws, heads, ITEMSIZE),
                       "bound": planning.bound_for_widths(n, p, ws, heads)}
                for layout in planning.LAYOUTS:
                    row[f"mem {layout}"] = planning.peak_bytes(kind, layout, n, m, p, ws,
                                                               heads, ITEMSIZE) / GIB
                    row[f"words {layout}"] = planning.epoch_words(kind, layout, n, p, ws,
                                                                  heads)["received"]
                for alg in planning.CAGNET_ALGORITHMS:
                    gcn = kind == "gcn"
                    row[f"mem {alg}"] = planning.cagnet_memory(
                        alg, n, m, f_avg, p, LAYERS, itemsize=ITEMSIZE) / GIB if gcn else None
                    row[f"words {alg}"] = planning.cagnet_words(
                        alg, n, m, f_avg, p, LAYERS) if gcn else None
                out.append(row)
    return out


def _num(x: float | None) -> str:
    """Three significant digits, no exponent ("—" for none)."""
    if x is None:
        return "—"
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def table_markdown() -> str:
    """The tables of ``docs/planning.md`` (between its ``planning-table`` markers)."""
    lines = []
    head = ("| model | k | p | repl. GiB | shard. GiB | 1.5D GiB | 3D GiB | repl. Mw | "
            "shard. Mw | 1.5D Mw | 3D Mw | bound Mw | auto |")
    rule = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    for name, (n, m, f0) in DATASETS.items():
        lines += [f"**{name}** (n = {n:.3g}, m = {m:.3g}, f0 = {f0})", "", head, rule]
        for r in rows(name):
            cells = [r["model"].upper(), str(r["k"]), str(r["p"])]
            cells += [_num(r[f"mem {x}"]) for x in ("replicated", "sharded", "1.5d", "3d")]
            cells += [_num(None if r[f"words {x}"] is None else r[f"words {x}"] / MEGA)
                      for x in ("replicated", "sharded", "1.5d", "3d")]
            cells += [_num(r["bound"] / MEGA), r["auto"]]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    all_rows = [r for name in DATASETS for r in rows(name)]
    mem = [r["mem sharded"] / r["mem replicated"] for r in all_rows]
    words = [r["words sharded"] / r["words replicated"] for r in all_rows]
    lines.append(f"Over these rows the sharded layout needs {_num(min(mem))}–{_num(max(mem))}× "
                 f"the replicated layout's memory and receives {_num(min(words))}–"
                 f"{_num(max(words))}× its words; `auto` picks "
                 + ", ".join(f"{layout} in {sum(r['auto'] == layout for r in all_rows)} rows"
                             for layout in planning.LAYOUTS) + ".")
    return "\n".join(lines) + "\n"


def plot(path: Path, name: str = "ogbn-papers100M", k: int = 256) -> Path:
    """Memory and words per rank against p for data set ``name`` and width ``k``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n, m, f0 = DATASETS[name]
    ps = [4, *PROCS]
    ws = _widths(f0, k)
    f_avg = sum(ws) / len(ws)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for kind, style in (("gat", "-"), ("gcn", "--")):
        heads = GAT_HEADS if kind == "gat" else 1
        for layout, marker in (("replicated", "o"), ("sharded", "s")):
            left.plot(ps, [planning.peak_bytes(kind, layout, n, m, p, ws, heads, ITEMSIZE) / GIB
                           for p in ps], marker + style, label=f"{kind.upper()} {layout}")
            right.plot(ps, [planning.epoch_words(kind, layout, n, p, ws, heads)["received"]
                            for p in ps], marker + style, label=f"{kind.upper()} {layout}")
    for alg, marker in (("1.5d", "^"), ("3d", "v")):
        left.plot(ps, [planning.cagnet_memory(alg, n, m, f_avg, p, LAYERS, itemsize=ITEMSIZE)
                       / GIB for p in ps], marker + ":", label=f"CAGNET {alg.upper()} (GCN)")
        right.plot(ps, [planning.cagnet_words(alg, n, m, f_avg, p, LAYERS) for p in ps],
                   marker + ":", label=f"CAGNET {alg.upper()} (GCN)")
    right.plot(ps, [planning.bound_for_widths(n, p, ws, GAT_HEADS) for p in ps], "-",
               color="gray", label="Σ nk/√P + k²")
    left.set(ylabel="GiB per rank (planned peak)")
    right.set(ylabel="words received per rank per epoch")
    for ax in (left, right):
        ax.set(xscale="log", yscale="log", xlabel="P", xticks=ps, xticklabels=map(str, ps),
               title=f"{name}, 3 layers, k = {k}")
        ax.grid(alpha=0.3)
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.distributed.planning_plot")
    ap.add_argument("--png", type=Path, default=ROOT / "docs" / "planning.png")
    ap.add_argument("--no-plot", action="store_true", help="print the table only")
    ap.add_argument("--validation", action="store_true",
                    help="print the validation table (planned against measured memory) only")
    a = ap.parse_args(argv)
    if a.validation:
        from .memory_validation import validation_markdown

        print(validation_markdown(), end="")
        return 0
    print(table_markdown(), end="")
    if not a.no_plot:
        plot(a.png)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
