"""The GPU study's targets, its results file (markdown) and the short table it prints last."""

from __future__ import annotations

__all__ = ["gpu_targets", "gpu_markdown", "gpu_table", "aggregation_share", "TARGETS"]

MIB = 2**20
#: (what, row, goal, op): the study's targets, read at its largest case
TARGETS = (("fwd+bwd speedup over PyG", "gat", 2.0, ">="),
           ("peak device memory ours / PyG", "gat", 1 / 5, "<="),
           ("fwd+bwd speedup over PyG", "gatv2", 3.0, ">="),
           ("fwd+bwd speedup over PyG", "transformer", 3.0, ">="))
#: the aggregation kernel and the row whose profile holds it; its bandwidth's goal
AGGREGATION = ("spmm_plus_times", "gcn", 0.5)


def _memory_ratio(entry: dict) -> float | None:
    mem = entry.get("device_memory") or {}
    ours, pyg = mem.get("ours"), mem.get("pyg")
    if not ours or not pyg or not pyg["peak_device_bytes"]:
        return None
    return ours["peak_device_bytes"] / pyg["peak_device_bytes"]


def _copy_bandwidth(r: dict) -> float | None:
    c = r["ceilings"]
    return c["copy"]["bytes_per_second"] if c["measured"] else None


def aggregation_share(r: dict, case: str) -> float | None:
    """The aggregation kernel's achieved bandwidth over the copy bandwidth in ``case``."""
    kernel, row, _ = AGGREGATION
    entry = r["cases"][case]["layers"].get(row)
    copy = _copy_bandwidth(r)
    if entry is None or copy is None:
        return None
    found = [v for k, v in entry.get("kernels", {}).items() if k.startswith(kernel)]
    if not found or not found[0]["bytes_per_second"]:
        return None
    return found[0]["bytes_per_second"] / copy


def _met(value, goal, op) -> bool | None:
    if value is None:
        return None
    return value >= goal if op == ">=" else value <= goal


def target_case(r: dict) -> str:
    """The case the targets are read at: ``L`` (the GPU issue's), else the study's last."""
    return "L" if "L" in r["cases"] else list(r["cases"])[-1]


def gpu_targets(r: dict) -> list[dict]:
    """The targets at :func:`target_case`, and every suite passing."""
    out = []
    if r["cases"]:
        case = target_case(r)
        layers = r["cases"][case]["layers"]
        for what, row, goal, op in TARGETS:
            entry = layers.get(row)
            value = None
            if entry is not None:
                value = (_memory_ratio(entry) if "memory" in what
                         else entry["speedup"]["fwd+bwd"])
            out.append({"name": f"{row.upper()} {what} ({case})", "value": value,
                        "goal": goal, "op": op, "met": _met(value, goal, op)})
        kernel, row, goal = AGGREGATION
        value = aggregation_share(r, case)
        out.append({"name": f"{kernel} ({row}) bandwidth / copy bandwidth ({case})",
                    "value": value, "goal": goal, "op": ">=", "met": _met(value, goal, ">=")})
    for name, s in r.get("suites", {}).items():
        ok = s["complete"] and s["failed"] == 0 and s["error"] == 0 and s["passed"] > 0
        out.append({"name": f"suite {name}: {s['passed']} passed, {s['failed']} failed, "
                            f"{s['error']} errors" + ("" if s["complete"] else ", stopped"),
                    "value": None, "goal": None, "op": None, "met": ok})
    return out


def _ms(entry: dict, key: str) -> str:
    t = entry.get("times", {}).get(key)
    return "—" if t is None else f"{t['median_ms']:.2f} ({t['min_ms']:.2f}–{t['max_ms']:.2f})"


def _mib(mem: dict | None) -> str:
    return "—" if not mem else f"{mem['peak_device_bytes'] / MIB:.0f}"


def _x(v: float | None, fmt: str = "{:.1f}×") -> str:
    return "—" if v is None else fmt.format(v)


def _case_table(name: str, c: dict) -> list[str]:
    g = c.get("graph", {})
    lines = [f"### {name}: {c['case']['description']} (n = {g.get('n')}, "
             f"{g.get('nnz_with_self_loops')} entries with loops)", "",
             "| row | ours fwd ms | PyG fwd ms | ours fwd+bwd ms | PyG fwd+bwd ms | speedup "
             "fwd+bwd | ours peak MiB | PyG peak MiB | ours / PyG |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row, e in c["layers"].items():
        mem = e.get("device_memory") or {}
        lines.append(f"| {row} | {_ms(e, 'ours fwd')} | {_ms(e, 'pyg fwd')} | "
                     f"{_ms(e, 'ours fwd+bwd')} | {_ms(e, 'pyg fwd+bwd')} | "
                     f"{_x(e['speedup']['fwd+bwd'])} | {_mib(mem.get('ours'))} | "
                     f"{_mib(mem.get('pyg'))} | {_x(_memory_ratio(e), '{:.2f}')} |")
    for row, why in c.get("failed_rows", {}).items():
        lines.append(f"| {row} | failed: {why} | | | | | | | |")
    return lines + [""]


def _kernel_table(name: str, c: dict, copy: float | None) -> list[str]:
    lines = [f"#### {name}: kernels of one forward+backward of ours", "",
             "| row | kernel | launches | ms | GB moved | GB/s | of copy |",
             "|---|---|---|---|---|---|---|"]
    for row, e in c["layers"].items():
        for kernel, k in e.get("kernels", {}).items():
            bw = k["bytes_per_second"]
            lines.append(f"| {row} | {kernel} | {k['launches']} | {k['seconds'] * 1e3:.3f} | "
                         f"{k['bytes'] / 1e9:.3f} | {_x(bw and bw / 1e9, '{:.0f}')} | "
                         f"{_x(bw and copy and bw / copy, '{:.0%}')} |")
    return lines + [""]


def _target_lines(r: dict) -> list[str]:
    lines = ["## Targets", "", "| target | value | goal | met |", "|---|---|---|---|"]
    for t in r["targets"]:
        value = "—" if t["value"] is None else f"{t['value']:.3g}"
        goal = "" if t["goal"] is None else f"{t['op']} {t['goal']:.3g}"
        met = {True: "yes", False: "**no**", None: "not measured"}[t["met"]]
        lines.append(f"| {t['name']} | {value} | {goal} | {met} |")
    return lines + [""]


def gpu_markdown(r: dict) -> str:
    """The results file."""
    env, card = r["environment"], r["environment"]["card"]
    v = env["versions"]
    lines = [f"# The cuda executor on {card['name']}" + (" (dry run: simulator, not a "
                                                          "measurement)" if r["dry_run"] else ""),
             "", f"{env['date']}, commit {env.get('git', {}).get('commit')}; host CPU "
             f"{env['cpu']} ({env['cpu_count']} cores).", "",
             "Versions: " + ", ".join(f"{k} {x}" for k, x in v.items() if x is not None) + ".",
             ""]
    if card["name"] != "simulator":
        lines += [f"Card: {card['name']}, {card['memory_bytes'] / 2**30:.0f} GiB, "
                  f"{card['multiprocessors']} SMs, L2 {card['l2_bytes'] / MIB:.0f} MiB, "
                  f"compute capability {card['compute_capability']}, driver {card['driver']},"
                  f" CUDA runtime {card['cuda_runtime']}.", ""]
    c = r["ceilings"]
    copy = _copy_bandwidth(r)
    lines += ["## Ceilings", ""]
    lines += ([f"Copy bandwidth (read + written) {copy / 1e12:.2f} TB/s; float32 matrix "
               f"product ({c['matmul']['n']}³) {c['matmul']['flops'] / 1e12:.1f} TFLOP/s.", ""]
              if c["measured"] else [f"Not measured: {c['why']}.", ""])
    lines += ["## Layers: ours (cuda executor) and PyG on the same GPU", "",
              f"Median of {r['reps']} interleaved repetitions after one warm-up (min–max), "
              "each call ended by a device synchronisation; peak device memory of one "
              "forward+backward, everything the side holds on the device counted.", ""]
    for name, case in r["cases"].items():
        lines += _case_table(name, case) + _kernel_table(name, case, copy)
    where = r.get("where")
    if where:
        lines += [f"## Where a step's time goes ({where['case']}, blocking launches)", "",
                  f"From `{where['file']}` (:mod:`bench.gpu.where`): every launch waits for "
                  "its work, so a function's time includes the device time of what it "
                  "launched.", "", "```", where["text"].rstrip(), "```", ""]
    lines += ["## Correctness on the device", "", "| session | passed | failed | errors | "
              "skipped | seconds | complete |", "|---|---|---|---|---|---|---|"]
    for name, s in r["suites"].items():
        lines.append(f"| {name} | {s['passed']} | {s['failed']} | {s['error']} | "
                     f"{s['skipped']} | {s['seconds']:.0f} | {s['complete']} |")
        lines += [f"| | failed: `{t}` | | | | | |" for t in s["failed_ids"][:20]]
    return "\n".join(lines + [""] + _target_lines(r)) + "\n"


def gpu_table(r: dict) -> str:
    """The short table the command prints last."""
    lines = [f"GPU study on {r['environment']['card']['name']}"
             + (" (dry run)" if r["dry_run"] else "") + ":"]
    for name, c in r["cases"].items():
        for row, e in c["layers"].items():
            lines.append(f"  {name:4} {row:12} fwd+bwd ours {_ms(e, 'ours fwd+bwd'):>24} ms "
                         f"PyG {_ms(e, 'pyg fwd+bwd'):>24} ms  speedup "
                         f"{_x(e['speedup']['fwd+bwd']):>7}  memory ours/PyG "
                         f"{_x(_memory_ratio(e), '{:.2f}')}")
    for t in r["targets"]:
        met = {True: "met", False: "NOT MET", None: "not measured"}[t["met"]]
        value = "" if t["value"] is None else f" {t['value']:.3g}"
        lines.append(f"  target {t['name']}:{value} {met}")
    return "\n".join(lines)
