"""The thresholds and constants the documents state are the code's.

``docs/*.md`` name values that live as constants in the code: below how much work a generated
kernel runs on one thread, how many edges ahead a pass prefetches, the rows of a block, the
most heads written out, the chunks of the SpMM, the alignment and the aligned copy, the
prefetch distance of the row kernels, the work from which a matmul's backward pair and a tall
product use both cores, the block of the chunked product, the GPU's lanes and warps, the
kernel cache's folder. Each case below finds the statement in its document (a pattern with
one group around the stated value), reads the value as the text writes it (``2¹⁸``,
``16 384``, ``eight``, ``4 MiB``) and asserts it equals the constant imported from the code.
A document that drops the statement, or code that changes the constant without the
document, fails here; ``docs/composition.md`` once said the serial kernels ran "below 2¹⁵
edges" while the code had ``1 << 18`` units of edges × numbers per edge.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gblas_gnn.codegen import kernel_cache
from gblas_gnn.executors import patterns
from gblas_gnn.executors.alignment import ALIGNMENT
from gblas_gnn.executors.cpu import (
    _chunked_gemm,
    _head_unrolling,
    _program_kernels,
    _spmm,
    _spmm_kernels,
)
from gblas_gnn.gpu import _device

DOCS = Path(__file__).resolve().parents[1] / "docs"

SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹", "0123456789")
WORDS = {"one": 1, "two": 2, "four": 4, "eight": 8, "sixteen": 16, "thirty-two": 32}
UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def value(text: str) -> int:
    """An integer as the documents write it.

    Parameters
    ----------
    text : str
        ``2¹⁸`` (a power of two with a superscript exponent), ``16 384`` or ``8 192`` (digits
        grouped by spaces), ``eight`` (a number word), ``4 MiB`` (a binary size), or plain
        digits.

    Returns
    -------
    int
        The value the text states.
    """
    text = " ".join(text.split())
    power = re.fullmatch(r"2([⁰¹²³⁴⁵⁶⁷⁸⁹]+)", text)
    if power:
        return 2 ** int(power[1].translate(SUPERSCRIPTS))
    size = re.fullmatch(r"(\d+) (KiB|MiB|GiB)", text)
    if size:
        return int(size[1]) * UNITS[size[2]]
    if text.lower() in WORDS:
        return WORDS[text.lower()]
    if re.fullmatch(r"\d{1,3}(?: \d{3})*", text):
        return int(text.replace(" ", ""))
    raise ValueError(f"not a stated number: {text!r}")


def statements(page: str, pattern: str) -> list[int]:
    """The values that ``pattern`` (one group around the value) finds in ``docs/page``,
    whitespace in the text taken as one space."""
    text = " ".join((DOCS / page).read_text().split())
    return [value(m) for m in re.findall(pattern, text)]


SERIAL = _program_kernels.SERIAL_WORK_BELOW
AHEAD = _program_kernels.PREFETCH_AHEAD
BLOCK = _program_kernels.ROW_BLOCK
PAIR = _chunked_gemm.PAIR_WORK
NUMBER = r"(2[⁰¹²³⁴⁵⁶⁷⁸⁹]+|\d{1,3}(?: \d{3})+|\d+(?: [KMG]iB)?|[a-z]+(?:-[a-z]+)?)"

#: (page, pattern with one group around the stated value, the code's value, what it is)
CASES = [
    ("composition.md", rf"one thread below {NUMBER} of work, edges × numbers per edge",
     SERIAL, "SERIAL_WORK_BELOW: the work below which a program runs on one thread"),
    ("performance.md", rf"less than {NUMBER} of work \(edges × the numbers each edge moves; "
                       r"`SERIAL_WORK_BELOW`\)",
     SERIAL, "SERIAL_WORK_BELOW"),
    ("composition.md", rf"the rows an edge {NUMBER} positions on will gather",
     AHEAD, "PREFETCH_AHEAD: the edges ahead a pass prefetches"),
    ("composition.md", rf"the slot {NUMBER} edges ahead is prefetched", AHEAD, "PREFETCH_AHEAD"),
    ("performance.md", rf"{NUMBER} edges ahead \(`PREFETCH_AHEAD`", AHEAD, "PREFETCH_AHEAD"),
    ("composition.md", rf"per block of {NUMBER} rows, never per edge",
     BLOCK, "ROW_BLOCK: the rows of an item where edge features give partials"),
    ("performance.md", rf"blocks of {NUMBER} rows \(`ROW_BLOCK`\)", BLOCK, "ROW_BLOCK"),
    ("performance.md", rf"blocks of {NUMBER} rows where edge features give per-block partials",
     BLOCK, "ROW_BLOCK"),
    ("performance.md", rf"`UNROLLED_HEADS = {NUMBER}`", _head_unrolling.UNROLLED_HEADS,
     "UNROLLED_HEADS: the most heads a forward writes out"),
    ("performance.md", rf"chunks of about {NUMBER} stored entries \(`CHUNK_NNZ`\)",
     patterns.CHUNK_NNZ, "CHUNK_NNZ: the entries of a chunk of rows handed to a thread"),
    ("performance.md", rf"at least {NUMBER} \(`ALIGN_COPY_BYTES`\)", _spmm.ALIGN_COPY_BYTES,
     "ALIGN_COPY_BYTES: the smallest gathered operand copied to aligned rows"),
    ("performance.md", rf"aligned to {NUMBER} bytes \(`ALIGNMENT`", ALIGNMENT,
     "ALIGNMENT: the alignment of dense outputs and copies"),
    ("performance.md", rf"about {NUMBER} of rows ahead, between \d+ and \d+ entries",
     _spmm_kernels._PREFETCH_BYTES,
     "_PREFETCH_BYTES: the gathered bytes a row kernel asks for ahead"),
    ("performance.md", rf"about \d+ KiB of rows ahead, between {NUMBER} and \d+ entries",
     _spmm_kernels.prefetch_distance(1 << 20), "prefetch_distance: its fewest entries ahead"),
    ("performance.md", rf"about \d+ KiB of rows ahead, between \d+ and {NUMBER} entries",
     _spmm_kernels.prefetch_distance(1), "prefetch_distance: its most entries ahead"),
    ("performance.md", rf"entries \({NUMBER} for rows of 32 float32\)",
     _spmm_kernels.prefetch_distance(32 * 4), "prefetch_distance for rows of 32 float32"),
    ("performance.md", rf"from {NUMBER} rows × widths of work on",
     PAIR, "PAIR_WORK: the work from which a matmul's backward pair runs at once"),
    ("performance.md", rf"A product of at least {NUMBER} numbers \(rows × \(inputs \+ "
                       r"outputs\)\)",
     PAIR, "PAIR_WORK: the work from which a product runs as blocks of rows"),
    ("performance.md", rf"per fixed block of {NUMBER} rows", _chunked_gemm.ROWS,
     "ROWS: the rows of one BLAS call of the chunked product"),
]


@pytest.mark.parametrize(("page", "pattern", "code", "what"), CASES,
                         ids=[f"{page}: {what.split(':')[0]}" for page, _, _, what in
                              CASES])
def test_the_document_states_the_code_value(page, pattern, code, what):
    stated = statements(page, pattern)
    assert stated, f"{page} no longer states {what} (pattern {pattern!r})"
    assert set(stated) == {code}, f"{page} states {what} as {stated}, the code has {code}"


def test_the_gpu_lanes_and_warps_are_the_design_notes(monkeypatch):
    """``docs/design.md``: in the simulator a group has 4 lanes unless
    ``GBLAS_GNN_CUDASIM_LANES`` says otherwise, and on hardware a block holds 4 warps."""
    monkeypatch.delenv("GBLAS_GNN_CUDASIM_LANES", raising=False)
    lanes = statements("design.md", rf"a group has {NUMBER} lanes \(\d+ with "
                                    r"`GBLAS_GNN_CUDASIM_LANES")
    assert lanes == [_device._sim_lanes()]
    warps = statements("design.md", rf"blocks hold {NUMBER} warps on hardware")
    assert warps
    if _device.SIMULATOR:
        pytest.skip("the simulator runs one group a block; the hardware value is not loaded")
    assert warps == [_device.GROUPS_PER_BLOCK]


def test_the_kernel_cache_folders_are_the_documented_defaults(monkeypatch):
    """``docs/composition.md`` and ``docs/performance.md`` give the generated kernels'
    folders without ``$GBLAS_GNN_KERNEL_CACHE``."""
    monkeypatch.delenv("GBLAS_GNN_KERNEL_CACHE", raising=False)
    home = Path.home()
    for page in ("composition.md", "performance.md"):
        text = (DOCS / page).read_text()
        cpu = re.findall(r"`\$GBLAS_GNN_KERNEL_CACHE`, default `~/([^`]+)`", text)
        assert cpu, page
        assert {home / c for c in cpu} == {kernel_cache.cache_dir("cpu")}, page
    cuda = re.findall(r"cached in `~/([^`]+)`", (DOCS / "composition.md").read_text())
    assert [home / c for c in cuda] == [kernel_cache.cache_dir("cuda")]


@pytest.mark.parametrize(("text", "expected"), [
    ("2¹⁸", 1 << 18), ("2¹⁵", 1 << 15), ("16 384", 16384), ("8 192", 8192), ("eight", 8),
    ("4 MiB", 4 << 20), ("4 KiB", 4096), ("64", 64)])
def test_stated_numbers_are_read_as_written(text, expected):
    assert value(text) == expected


def test_a_drifted_statement_fails():
    """The check above fails on the drift it was written for: "below 2¹⁵" is not the code's
    threshold, and a statement the pattern cannot read is refused, not skipped."""
    assert value("2¹⁵") != SERIAL
    with pytest.raises(ValueError):
        value("a lot")


def test_the_column_tiles_rule_is_the_documented_one():
    """``docs/performance.md``, the aggregation path: a tile's rows fill at most half of the
    last-level cache, tiles are used where the missed gathers number at least
    ``TILE_MISSES_PER_PASS (T − 1)`` a row, and DGL's 40 MB stand in for an unknown cache."""
    text = " ".join((DOCS / "performance.md").read_text().split())
    assert _spmm.TILE_CACHE_SHARE == 0.5 and "fill at most half of the LLC" in text
    assert "`T = ⌈n_cols / ⌊½ LLC / row bytes⌋⌉`" in text
    assert f"`{patterns.TILE_MISSES_PER_PASS:g} (T − 1)` per row" in text
    assert _spmm._DEFAULT_LLC_BYTES == 40_000_000 and "DGL's 40 MB when absent" in text
