"""The planning formulas (:mod:`gblas_gnn.dist.planning`): the replicated GAT count is the
table of ``tests/dist/test_comm_counts.py``; a sharded count worked by hand, rule by rule;
nothing moves on one process; the sharded dense arrays fall as 1/p; the memory plan against
the recorded memory study (every run within :data:`MEMORY_TOLERANCE`, every traced rank's
inventory within :data:`INVENTORY_TOLERANCE`, the runtime slack the measured median);
CAGNET's totals as the paper's equations give them, worked by hand; ``choose_layout``; clear
errors; and ``docs/planning.md`` holds exactly what its script prints."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import statistics
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from gblas_gnn.dist import planning

ROOT = Path(__file__).resolve().parents[1]
#: how far the planned peak of a rank may be from the measured growth of the largest rank of
#: every recorded run (``bench/results/current/memory-grid-p.json``, ``memory-k20-grid.json``)
MEMORY_TOLERANCE = 0.10
#: how far the inventory (the plan without the runtime slack) of every rank of the traced
#: jobs may be from its traced peak (``memory-grid-p-traced.json``)
INVENTORY_TOLERANCE = 0.03
MIB = 2 ** 20


def _comm_counts():
    """``tests/dist/test_comm_counts.py`` as a module (its ``expected`` table and sizes)."""
    spec = importlib.util.spec_from_file_location(
        "comm_counts_table", ROOT / "tests" / "dist" / "test_comm_counts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _draws(seed: int, count: int):
    """(r, c, q, diagonal) of ranks of a few grids, drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        q = int(rng.integers(1, 6))
        r, c = (int(v) for v in rng.integers(0, 40, 2))
        yield r, (r if q == 1 else c), q, bool(q == 1 or rng.random() < 0.3)


@pytest.mark.parametrize("dense", ["replicated", "sharded"])
def test_gat_is_the_count_table(dense):
    """:func:`planning.layer_words` sums the per-label table the grid's counters are held
    to (``tests/dist/test_comm_counts.py``), on both layouts."""
    table = _comm_counts()
    seen = set()
    for r, c, q, diagonal in [(14, 15, 2, False), (14, 14, 2, True), (29, 29, 1, True),
                              *_draws(0, 20)]:
        rank = 0 if diagonal else 1
        x, y = (0, 0) if diagonal else (0, q - 1)
        grid = SimpleNamespace(q=q, rank=rank, partner=0, dense=dense, x=x, y=y)
        want = table.expected(grid, r, c)
        shards = {} if dense == "replicated" else dict(
            s=r * (y + 1) // q - r * y // q, s_col=c * (x + 1) // q - c * x // q)
        got = planning.layer_words("gat", dense, r=r, c=c, q=q, diagonal=diagonal,
                                   f=table.F, k=table.K, heads=table.HEADS, **shards)
        assert got == {"sent": sum(v[0] for v in want.values()) // 8,
                       "received": sum(v[1] for v in want.values()) // 8}, (r, c, q, diagonal)
        seen.add((q > 1, diagonal))
    assert seen == {(False, True), (True, True), (True, False)}


def test_sharded_gat_worked_by_hand():
    # r = 15, c = 14, s = 8 (shard 1 of R_x), s' = 7, q = 2, off the diagonal; h = 2, k = 6,
    # f = 5: [s H'] is w = 8, d w = 2, dZ w = 6, t w = 2, dd w = 2; P = 6 + 2·2·6 + 5·6 = 60
    kw = dict(r=15, c=14, s=8, s_col=7, q=2, diagonal=False, f=5, k=6, heads=2)
    fwd_sent = 8 * 8 + 8 * 7 + 2 * 8 + 2 * 15 * 2 + 6 * (15 - 8)
    fwd_recv = 8 * 7 + 8 * (14 - 7) + 2 * (15 - 8) + 2 * 15 * 2 + 6 * 8 * 1
    assert planning.layer_words("gat", "sharded", backward=False, **kw) == \
        {"sent": fwd_sent, "received": fwd_recv}
    again_sent = 8 * 8 + 8 * 7 + 2 * 8 + 6 * 8 + 2 * 8           # rule 6: gathered again
    again_recv = 8 * 7 + 8 * 7 + 2 * 7 + 6 * 7 + 2 * 7
    bwd_sent = again_sent + 8 * (14 - 7) + 8 * 7 + 2 * (15 - 8) + 60
    bwd_recv = again_recv + 8 * 7 * 1 + 8 * 8 + 2 * 8 * 1 + 60
    assert planning.layer_words("gat", "sharded", **kw) == \
        {"sent": fwd_sent + bwd_sent, "received": fwd_recv + bwd_recv}
    # on the diagonal the two exchanges (forward, again, and back to the rows) move nothing
    diag = planning.layer_words("gat", "sharded", **{**kw, "diagonal": True, "c": 15,
                                                      "s_col": 8})
    off = planning.layer_words("gat", "sharded", **{**kw, "c": 15, "s_col": 8})
    assert off["sent"] - diag["sent"] == 3 * 8 * 8 and off["received"] - diag["received"] == \
        3 * 8 * 8


@pytest.mark.parametrize("project_first", [True, False])
def test_gcn_runs_its_spmms_on_the_narrower_width(project_first):
    f, k = (6, 3) if project_first else (3, 6)
    w = 3
    # the replicated counts measured on a 2x2 grid, rank (0, 1): r = 14, c = 15
    steps = planning.layer_steps("gcn", "replicated", r=14, c=15, q=2, diagonal=False, f=f,
                                 k=k)
    assert [(a, b) for _, a, b in steps] == [(w * 14, w * 15), (w * 14, w * 14),
                                             (w * 15, w * 15), (w * 15, w * 14), (f * k, f * k),
                                             (k, k)]
    sharded = planning.layer_words("gcn", "sharded", r=14, c=15, s=7, s_col=8, q=2,
                                   diagonal=False, f=f, k=k)
    # spmm: 7w / 8w, 8w / 7w, then 7w / 7w; spmm_t: 7w / 7w, 7w / 8w, 8w / 7w; fk; k
    assert sharded == {"sent": 7 * w + 8 * w + 7 * w + 7 * w + 7 * w + 8 * w + f * k + k,
                       "received": 8 * w + 7 * w + 7 * w + 7 * w + 8 * w + 7 * w + f * k + k}


@pytest.mark.parametrize("kind", planning.KINDS)
def test_nothing_moves_on_one_process(kind):
    for backward in (False, True):
        kw = dict(r=31, c=31, q=1, diagonal=True, f=8, k=4, backward=backward)
        assert planning.layer_words(kind, "replicated", **kw) == {"sent": 0, "received": 0}
        assert planning.layer_words(kind, "sharded", s=31, s_col=31, **kw) == \
            {"sent": 0, "received": 0}
    for layout in planning.LAYOUTS:
        assert planning.epoch_words(kind, layout, 1e6, 1, [16, 8, 4]) == \
            {"sent": 0.0, "received": 0.0}
    assert planning.peak_bytes(kind, "sharded", 1e6, 1e7, 1, [16, 8, 4]) == \
        planning.peak_bytes(kind, "replicated", 1e6, 1e7, 1, [16, 8, 4])
    assert planning.choose_layout(kind, 1e6, 1e7, 1, [16, 8, 4]) == "replicated"


@pytest.mark.parametrize("kind", planning.KINDS)
def test_epoch_words_average_the_diagonal_and_the_rest(kind):
    # n = 144, p = 16: r = c = 36, s = s' = 9, one rank in q = 4 on the diagonal
    heads = 2 if kind == "gat" else 1
    for layout in planning.LAYOUTS:
        want = {"sent": 0.0, "received": 0.0}
        for f, k in ((10, 8), (8, 4)):
            for diagonal, share in ((True, 0.25), (False, 0.75)):
                one = planning.layer_words(kind, layout, r=36, c=36, s=9, s_col=9, q=4,
                                           diagonal=diagonal, f=f, k=k, heads=heads)
                want = {key: want[key] + share * one[key] for key in want}
        got = planning.epoch_words(kind, layout, 144, 16, [10, 8, 4], heads)
        assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("kind", planning.KINDS)
def test_sharded_dense_memory_falls_as_one_over_p(kind):
    heads = 4 if kind == "gat" else 1
    dense = {p: planning.memory_terms(kind, "sharded", 1e8, 1e9, p, [128, 256, 256, 64],
                                      heads)["dense saved"] for p in (4, 16, 64, 256, 1024)}
    assert {p: v * p for p, v in dense.items()} == pytest.approx(
        {p: dense[4] * 4 for p in dense}, rel=1e-12)
    replicated = {p: planning.memory_terms(kind, "replicated", 1e8, 1e9, p,
                                           [128, 256, 256, 64], heads)["dense saved"]
                  for p in (4, 16, 64)}
    assert replicated[4] == pytest.approx(2 * replicated[16]) == \
        pytest.approx(4 * replicated[64])
    # the whole peak: sharded below replicated, and falling with p
    peaks = [planning.peak_bytes(kind, "sharded", 1e8, 1e9, p, [128, 256, 256, 64], heads)
             for p in (4, 16, 64)]
    assert peaks[0] > peaks[1] > peaks[2]


def _validation():
    from bench.distributed import memory_validation

    return memory_validation


def test_the_memory_plan_holds_every_measured_run():
    """The planned peak of the largest rank against the measured growth of every recorded
    run: one process and the grid jobs, both layouts, scales 18 and 20."""
    rows = _validation().validation_rows()
    seen = {(r["scale"], r["p"], r["layout"]) for r in rows}
    assert {(18, 1, "one process"), (20, 1, "one process"), (20, 4, "replicated"),
            (20, 4, "sharded")} | {(18, p, layout) for p in (4, 9, 16)
                                   for layout in planning.LAYOUTS} <= seen
    bad = [(r["scale"], r["p"], r["layout"], round(r["growth"] / MIB, 1),
            round(r["planned"] / MIB, 1)) for r in rows
           if abs(r["error"]) > MEMORY_TOLERANCE]
    assert not bad, f"planned peaks off the measured growth by more than " \
                    f"{MEMORY_TOLERANCE:.0%} (scale, p, layout, measured MiB, planned MiB): {bad}"


def test_the_inventory_is_every_traced_ranks_peak():
    """:func:`planning.rank_memory_terms` without the runtime slack, with each rank's own
    sizes (its block's rows, columns, shards and entries), against the rank's traced peak."""
    traced = json.loads(_validation().TRACED.read_text())["jobs"]
    assert {(j["procs"], j["dense"]) for j in traced} == \
        {(1, "one process")} | {(p, layout) for p in (4, 9, 16) for layout in planning.LAYOUTS}
    checked = 0
    for job in traced:
        q = math.isqrt(job["procs"])
        n = job["n"]
        sizes = [n * (i + 1) // q - n * i // q for i in range(q)]
        layout = "replicated" if job["dense"] == "one process" else job["dense"]
        for rank in job["ranks"]:
            x, y = divmod(rank["rank"], q)
            r, c = sizes[x], sizes[y]
            s = r * (y + 1) // q - r * y // q
            assert rank["rows"] == (s if layout == "sharded" else r)      # (the grid's)
            terms = planning.rank_memory_terms(
                "gat", layout, r=r, c=c, s=s, s_col=c * (x + 1) // q - c * x // q, q=q,
                diagonal=x == y, entries=rank["block_entries"],
                widths=[job["k"]] * (job["layers"] + 1))
            inventory = sum(terms.values()) - terms["runtime slack"]
            assert inventory == pytest.approx(rank["traced_peak"], rel=INVENTORY_TOLERANCE), \
                (job["procs"], job["dense"], rank["rank"])
            checked += 1
    assert checked == 1 + 2 * (4 + 9 + 16)


def test_the_runtime_slack_is_the_measured_median():
    """:data:`planning.RUNTIME_SLACK_BYTES` is the median over the traced grid jobs of the
    largest rank's growth beyond its traced peak, rounded to whole MiB."""
    samples = _validation().slack_samples()
    assert len(samples) == 6
    assert planning.RUNTIME_SLACK_BYTES == round(statistics.median(samples) / MIB) * MIB


def test_the_plan_reads_the_layouts_column_ranges():
    from gblas_gnn.dist.layout import COLUMN_CHUNK_BYTES

    assert planning.COLUMN_RANGE_BYTES == COLUMN_CHUNK_BYTES


@pytest.mark.parametrize("kind", planning.KINDS)
def test_memory_terms_take_the_larger_rank(kind):
    # replicated GAT: the column copies make an off-diagonal rank the larger; sharded: the
    # diagonal one, whose block holds the self loops
    heads = 2 if kind == "gat" else 1
    n, m, p, widths = 2 ** 18, 4e6, 16, [16, 32, 32]
    for layout in planning.LAYOUTS:
        ranks = [planning.rank_memory_terms(kind, layout, r=n / 4, c=n / 4, s=n / 16,
                                            s_col=n / 16, q=4, diagonal=d,
                                            entries=m / 16 + (n / 4 if d else 0),
                                            widths=widths, heads=heads)
                 for d in (True, False)]
        assert planning.peak_bytes(kind, layout, n, m, p, widths, heads) == \
            pytest.approx(max(sum(t.values()) for t in ranks), rel=1e-12)
    if kind == "gat":
        diagonal, off = (planning.rank_memory_terms(
            "gat", "replicated", r=n / 4, c=n / 4, q=4, diagonal=d, entries=m / 16,
            widths=widths, heads=heads)["kept columns"] for d in (True, False))
        assert off - diagonal == 4 * (n / 4) * (32 + 32)      # H' of the partner, per layer


def test_choose_layout_at_p4_for_the_measured_graphs():
    for row in _validation().validation_rows():
        if row["p"] == 4:
            assert planning.choose_layout("gat", row["n"], row["m"], 4, row["widths"]) == \
                "sharded"


def test_cagnet_worked_by_hand():
    # 1.5D, §IV-B5: L(2nf/c + 2nfc/P); n = 1000, f = 16, P = 16, c = 4, L = 2
    assert planning.cagnet_words("1.5d", 1000, 8000, 16, 16, 2, c=4) == \
        2 * (2 * 1000 * 16 / 4 + 2 * 1000 * 16 * 4 / 16) == 32_000
    assert planning.cagnet_words("1.5d", 1000, 8000, 16, 16, 2) == 32_000     # c = √p
    # c = 2: 2(16000 + 4000) = 40 000
    assert planning.cagnet_words("1.5d", 1000, 8000, 16, 16, 2, c=2) == 40_000
    # 1.5D memory, §IV-B: L(nnz/(p/c) + nf/(p/c)) = 2(8000 + 16000)/4 words, 4 bytes each
    assert planning.cagnet_memory("1.5d", 1000, 8000, 16, 16, 2, c=4) == 12_000 * 4
    # 3D, §IV-D5: L(2nnz/P^{2/3} + 12nf/P^{2/3}); P = 64: P^{2/3} = 16
    assert planning.cagnet_words("3d", 1000, 8000, 16, 64, 2) == pytest.approx(
        2 * (2 * 8000 / 16 + 12 * 1000 * 16 / 16)) == 26_000
    # 3D memory, §IV-D: (nnz + nf(L-1) + ∛p nf) / p = (8000 + 16000 + 4·16000)/64 words
    assert planning.cagnet_memory("3d", 1000, 8000, 16, 64, 2, itemsize=1) == \
        pytest.approx(88_000 / 64)
    assert planning.cagnet_replication(64) == 8 and planning.cagnet_replication(32) == 4


def test_the_bound_is_the_papers():
    from gblas_gnn.dist.cost import bound_words

    assert planning.bound_for_widths(1e6, 16, [100, 64, 128]) == \
        bound_words(1e6, 100, 16) + bound_words(1e6, 128, 16)


@pytest.mark.parametrize("kind", planning.KINDS)
def test_choose_layout_shards_a_big_graph(kind):
    heads = 4 if kind == "gat" else 1
    for p in (4, 16, 64, 256, 1024):
        assert planning.choose_layout(kind, 1.1e8, 1.6e9, p, [128, 256, 256, 256],
                                      heads) == "sharded"


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown layer kind 'gin': planning knows gat, gcn"):
        planning.layer_words("gin", "replicated", r=4, c=4, q=2, diagonal=False, f=2, k=2)
    with pytest.raises(ValueError, match="unknown layer kind"):
        planning.peak_bytes("sage", "sharded", 100, 1000, 4, [8, 8])


def test_an_unknown_layout_is_refused():
    with pytest.raises(ValueError, match="unknown layout 'rows': the dense arrays are "
                                         "replicated or sharded"):
        planning.epoch_words("gat", "rows", 100, 4, [8, 8])
    with pytest.raises(ValueError, match="the sharded layout needs s"):
        planning.layer_words("gat", "sharded", r=4, c=4, q=2, diagonal=False, f=2, k=2)


@pytest.mark.parametrize("p", [2, 8, 12, 1000])
def test_a_grid_that_is_not_square_is_refused(p):
    with pytest.raises(ValueError, match=rf"p = {p} is not a square: the grid is q×q"):
        planning.peak_bytes("gcn", "sharded", 100, 1000, p, [8, 8])
    with pytest.raises(ValueError, match="not a square"):
        planning.choose_layout("gat", 100, 1000, p, [8, 8])
    with pytest.raises(ValueError, match="positive integer"):
        planning.epoch_words("gat", "sharded", 100, 0, [8, 8])


def test_other_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="only its diagonal rank"):
        planning.layer_words("gcn", "replicated", r=4, c=4, q=1, diagonal=False, f=2, k=2)
    with pytest.raises(ValueError, match="multiple of heads"):
        planning.layer_words("gat", "replicated", r=4, c=4, q=2, diagonal=True, f=2, k=6,
                             heads=4)
    with pytest.raises(ValueError, match="widths must list"):
        planning.epoch_words("gcn", "sharded", 100, 4, [8])
    with pytest.raises(ValueError, match="unknown CAGNET algorithm '2d'"):
        planning.cagnet_words("2d", 100, 1000, 8, 4, 2)
    with pytest.raises(ValueError, match="divisor of p"):
        planning.cagnet_words("1.5d", 100, 1000, 8, 16, 2, c=8)


def test_the_document_holds_the_scripts_table():
    from bench.distributed.planning_plot import table_markdown

    text = (ROOT / "docs" / "planning.md").read_text()
    found = re.search(r"<!-- planning-table:start -->\n(.*?)<!-- planning-table:end -->",
                      text, re.S)
    assert found, "docs/planning.md lost its planning-table markers"
    assert found[1] == table_markdown(), ("docs/planning.md's table is not what "
                                          "python -m bench.distributed.planning_plot prints")


def test_the_document_holds_the_validation_table():
    text = (ROOT / "docs" / "planning.md").read_text()
    found = re.search(r"<!-- planning-validation:start -->\n(.*?)"
                      r"<!-- planning-validation:end -->", text, re.S)
    assert found, "docs/planning.md lost its planning-validation markers"
    assert found[1] == _validation().validation_markdown(), (
        "docs/planning.md's validation table is not what "
        "python -m bench.distributed.planning_plot --validation prints")
