r"""Planning a run on the q×q grid: the words a rank moves and the memory it needs, for the
two layouts of the dense vertex arrays, beside CAGNET's 1.5D and 3D algorithms.

Pure arithmetic (no MPI): :func:`layer_words` is the exact count of one layer on one rank
and :func:`rank_memory_terms` the memory of one rank at its own sizes (an inventory,
:data:`MEMORY_TERMS`, held to measured peaks), :func:`epoch_words` and :func:`peak_bytes` are
the large-n approximations a run is planned with, :func:`choose_layout` is what ``--dense
auto`` asks. ``docs/planning.md`` has the table they give for three graphs, the formulas
written out and the memory plan against the measurements.

Layouts (rank (x, y) of the q×q grid, p = q², block ``A[R_x, C_y]`` with ``C_y = R_y``):

* **replicated** — rank (x, y) holds the rows ``R_x`` of every dense array (w·n/q words each);
* **sharded** — rank (x, y) holds shard y of ``R_x``: rows ``R_x[r·y//q : r·(y+1)//q]``
  (≈ w·n/p words); an operation gathers what it reads and frees it after.

Notation of one rank: ``r = |R_x|``, ``c = |C_y| = |R_y|``, ``s`` = size of shard y of
``R_x``, ``s'`` (``s_col``) = size of shard x of ``R_y``; "diagonal" is x = y, where the
partner exchange moves nothing; on q = 1 no collective moves anything. Counting (what the
grid records, :meth:`gblas_gnn.dist.Grid.comm_stats`): an allreduce of b words sends and
receives b; the partner exchange sends what it sends and receives what it gets; an allgather
sends the own piece and receives the others'; a reduce-scatter sends the others' pieces
(b minus the own) and receives the own piece q − 1 times.

The rules (per rank, for an operand of w words per vertex):

====  ==============================  ===========================  ==============================
rule  what                            replicated (sent / recv)     sharded (sent / recv)
====  ==============================  ===========================  ==============================
1     column copy (read by source)    exchange w·r / w·c           exchange w·s / w·s', then
                                                                   allgather (col) w·s' / w(c−s')
2     row operand (read by target)    nothing                      allgather (row) w·s / w(r−s)
3     row sum completed               allreduce (row) w·r / w·r    reduce-scatter (row)
                                                                   w(r−s) / w·s(q−1)
4     softmax row max, row sum        allreduce (row) h·r each     the same
5     column sum back to the rows     allreduce (col) w·c / w·c,   reduce-scatter (col)
                                      exchange w·c / w·r           w(c−s') / w·s'(q−1), exchange
                                                                   w·s' / w·s
6     sharded backward of a program   —                            the forward's gathers again,
                                                                   dZ and the softmax term
                                                                   t = ⟨dZ_i, Z_i⟩ (heads words
                                                                   a row) by rule 2
7     parameter gradients, biases     allreduce (all) P / P        the same
====  ==============================  ===========================  ==============================

(exchanges: nothing on the diagonal.) The replicated GAT table of
``tests/dist/test_comm_counts.py`` is rules 1, 3, 4, 5, 7 with the widths of :func:`layer_words`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .cost import bound_words

__all__ = ["KINDS", "LAYOUTS", "CAGNET_ALGORITHMS", "Term", "UNITS", "MEMORY_TERMS",
           "INDEX_BYTES", "GRAPHBLAS_INDEX_BYTES", "ROW_POINTER_BYTES", "VERTEX_ID_BYTES",
           "LABEL_BYTES", "PARAMETER_COPIES", "COLUMN_RANGE_BYTES", "RUNTIME_SLACK_BYTES",
           "layer_steps", "layer_words", "epoch_words", "rank_memory_terms", "memory_terms",
           "peak_bytes", "choose_layout",
           "cagnet_words", "cagnet_memory", "cagnet_replication", "bound_for_widths",
           "parameter_words"]

#: the layer kinds planned here
KINDS = ("gat", "gcn")
#: the layouts of the dense vertex arrays
LAYOUTS = ("replicated", "sharded")
#: CAGNET's algorithms compared here (§IV-B and §IV-D of the paper)
CAGNET_ALGORITHMS = ("1.5d", "3d")


# ---------------------------------------------------------------------------- checks
def _kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown layer kind {kind!r}: planning knows {', '.join(KINDS)}")
    return kind


def _layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}: the dense arrays are "
                         f"{' or '.join(LAYOUTS)}")
    return layout


def _side(p: int) -> int:
    """q with p = q² (the grid is square)."""
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise ValueError(f"p must be a positive integer, got {p!r}")
    q = math.isqrt(p)
    if q * q != p:
        raise ValueError(f"p = {p} is not a square: the grid is q×q ranks "
                         f"(p = 1, 4, 9, 16, ...; {q * q} or {(q + 1) ** 2} are near)")
    return q


def _widths(widths: Sequence[int], heads: int, kind: str) -> list[int]:
    ws = [int(w) for w in widths]
    if len(ws) < 2 or any(w < 1 for w in ws) or list(widths) != ws:
        raise ValueError(f"widths must list at least two positive integers [f0, k1, ...], "
                         f"got {list(widths)!r}")
    _heads(heads, ws[1:], kind)
    return ws


def _heads(heads: int, outs: Sequence[int], kind: str) -> None:
    if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
        raise ValueError(f"heads must be a positive integer, got {heads!r}")
    if kind == "gcn" and heads != 1:
        raise ValueError("a GCN layer has no heads (heads=1)")
    bad = [k for k in outs if k % heads]
    if bad:
        raise ValueError(f"an output width k = heads·d must be a multiple of heads = {heads}: "
                         f"{bad}")


# ---------------------------------------------------------------------------- one layer
def _steps(kind: str, layout: str, r: float, c: float, s: float, s_col: float, q: int,
           diagonal: bool, f: float, k: float, h: int, backward: bool
           ) -> list[tuple[str, float, float]]:
    """``(step, sent, received)`` words of one layer on one rank (the rules of the module
    docstring); steps that move nothing are left out."""
    sharded = layout == "sharded"
    grid = q > 1                      # a 1-rank communicator moves nothing
    swap = grid and not diagonal      # the partner exchange moves nothing on x = y
    out: list[tuple[str, float, float]] = []

    def column_copy(w: float, what: str) -> None:                               # rule 1
        if not sharded:
            if swap:
                out.append((f"{what}: exchange (rule 1)", w * r, w * c))
            return
        if swap:
            out.append((f"{what}: exchange of the shard (rule 1)", w * s, w * s_col))
        if grid:
            out.append((f"{what}: allgather, column (rule 1)", w * s_col, w * (c - s_col)))

    def row_operand(w: float, what: str) -> None:                               # rule 2
        if sharded and grid:
            out.append((f"{what}: allgather, row (rule 2)", w * s, w * (r - s)))

    def row_sum(w: float, what: str) -> None:                                   # rule 3
        if not grid:
            return
        if sharded:
            out.append((f"{what}: reduce-scatter, row (rule 3)", w * (r - s),
                        w * s * (q - 1)))
        else:
            out.append((f"{what}: allreduce, row (rule 3)", w * r, w * r))

    def column_sum(w: float, what: str) -> None:                                # rule 5
        if sharded:
            if grid:
                out.append((f"{what}: reduce-scatter, column (rule 5)", w * (c - s_col),
                            w * s_col * (q - 1)))
            if swap:
                out.append((f"{what}: exchange to the rows (rule 5)", w * s_col, w * s))
            return
        if grid:
            out.append((f"{what}: allreduce, column (rule 5)", w * c, w * c))
        if swap:
            out.append((f"{what}: exchange to the rows (rule 5)", w * c, w * r))

    def parameters(size: float, what: str) -> None:                            # rule 7
        if grid:
            out.append((f"{what}: allreduce, all ranks (rule 7)", size, size))

    if kind == "gat":
        column_copy(h + k, "[s H'] read by source")
        row_operand(h, "d read by target")
        if grid:                                                                # rule 4
            out.append(("row max: allreduce, row (rule 4)", h * r, h * r))
            out.append(("row sum: allreduce, row (rule 4)", h * r, h * r))
        row_sum(k, "aggregate Z")
        if backward:
            if sharded:                                                         # rule 6
                column_copy(h + k, "[s H'] again")
                row_operand(h, "d again")
                row_operand(k, "dZ")
                row_operand(h, "t = <dZ_i, Z_i>, formed on the kept rows")
            column_sum(h + k, "column partials [ds dH']")
            row_sum(h, "row partials dd")
            parameters(k, "bias gradient")
            parameters(2 * h * k + f * k, "dB = H'ᵀ[ds dd], dW = Hᵀ dH'")
    else:
        w = min(f, k)                  # GCN runs its SpMMs on min(f, k) columns
        column_copy(w, "spmm operand read by source")
        row_sum(w, "spmm row sums")
        if backward:
            row_operand(w, "spmm_t operand read by target")
            column_sum(w, "spmm_t column partials")
            parameters(f * k, "dW")
            parameters(k, "bias gradient")
    return out


def layer_steps(kind: str, layout: str, *, r: int, c: int, s: int | None = None,
                s_col: int | None = None, q: int, diagonal: bool, f: int, k: int,
                heads: int = 1, backward: bool = True) -> list[tuple[str, int, int]]:
    """The steps of :func:`layer_words`: ``(step, words sent, words received)``, in order,
    the steps that move nothing left out (same arguments)."""
    _kind(kind)
    _layout(layout)
    ints = {"r": r, "c": c, "q": q, "f": f, "k": k}
    if layout == "sharded":
        if s is None or s_col is None:
            raise ValueError("the sharded layout needs s (the size of shard y of R_x) and "
                             "s_col (the size of shard x of R_y)")
        ints.update(s=s, s_col=s_col)
    for name, v in ints.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {v!r}")
    if q < 1 or f < 1 or k < 1:
        raise ValueError(f"q, f and k must be positive, got q={q}, f={f}, k={k}")
    if q == 1 and not diagonal:
        raise ValueError("a 1×1 grid has only its diagonal rank (diagonal=True)")
    if layout == "sharded" and (s > r or s_col > c):
        raise ValueError(f"a shard is part of its row block: s={s} ≤ r={r} and "
                         f"s_col={s_col} ≤ c={c}")
    _heads(heads, [k], kind)
    if layout == "replicated":
        s = s_col = 0
    return [(what, int(a), int(b)) for what, a, b in
            _steps(kind, layout, r, c, s, s_col, q, bool(diagonal), f, k, heads, backward)]


def layer_words(kind: str, layout: str, *, r: int, c: int, s: int | None = None,
                s_col: int | None = None, q: int, diagonal: bool, f: int, k: int,
                heads: int = 1, backward: bool = True) -> dict[str, int]:
    r"""Exact words one rank sends and receives in one training step of one layer.

    Parameters
    ----------
    kind : {"gat", "gcn"}
        ``GATConv`` (one edge program: the attention, and dense projections) or ``GCNConv``
        (``spmm_affine`` → the executor's ``spmm`` / ``spmm_t``).
    layout : {"replicated", "sharded"}
        Where the dense vertex arrays live (module docstring).
    r, c : int
        The rank's rows ``|R_x|`` and its block's columns ``|C_y| = |R_y|``.
    s, s_col : int, optional
        The sizes of shard y of ``R_x`` and of shard x of ``R_y`` (sharded only).
    q : int
        The grid side (p = q² ranks).
    diagonal : bool
        Whether the rank is on the diagonal (x = y: the partner exchange moves nothing).
    f, k : int
        Input width and output width (GAT: ``k = heads·d``, heads concatenated).
    heads : int
        GAT's heads h (GCN: 1).
    backward : bool
        Count the backward too (default) or the forward only.

    Returns
    -------
    dict
        ``{"sent": words, "received": words}``.

    Notes
    -----
    GAT (h heads, w₁ = h + k, rules of the module docstring; ``Δ`` = 0 on the diagonal,
    1 off it; every collective term is 0 on q = 1):

    * forward, replicated: ``[s H']`` by source ``Δ·w₁r / Δ·w₁c``; row max and row sum
      ``hr`` each both ways; aggregate ``kr`` both ways.
    * forward, sharded: ``[s H']`` ``Δ·w₁s / Δ·w₁s'`` then ``w₁s' / w₁(c − s')``; ``d`` by
      target ``hs / h(r − s)``; row max, row sum ``hr`` each; aggregate
      ``k(r − s) / ks(q − 1)``.
    * backward, replicated: column partials ``[ds dH']`` ``w₁c`` both ways then
      ``Δ·w₁c / Δ·w₁r``; row partials ``dd`` ``hr`` both ways; bias ``k``; ``dB, dW``
      ``2hk + fk`` both ways.
    * backward, sharded: the forward's gathers again (``[s H']`` and ``d``), ``dZ`` and the
      softmax term ``t`` by rule 2 (``(k + h)s / (k + h)(r − s)``); column partials
      ``w₁(c − s') / w₁s'(q − 1)`` then ``Δ·w₁s' / Δ·w₁s``; row partials
      ``h(r − s) / hs(q − 1)``; parameters as replicated.

    GCN (``w = min(f, k)``: the layer projects first when ``k ≤ f`` and propagates first
    otherwise, so both SpMMs run on w columns):

    * forward: ``spmm``: the column copy (rule 1, width w) and the row sum (rule 3).
    * backward: ``spmm_t``: the row operand (rule 2, sharded only) and the column sum
      (rule 5); ``dW`` ``fk`` and the bias ``k`` over all ranks.
    """
    steps = layer_steps(kind, layout, r=r, c=c, s=s, s_col=s_col, q=q, diagonal=diagonal,
                        f=f, k=k, heads=heads, backward=backward)
    return {"sent": sum(a for _, a, _ in steps), "received": sum(b for _, _, b in steps)}


# ---------------------------------------------------------------------------- a model
def epoch_words(kind: str, layout: str, n: float, p: int, widths: Sequence[int],
                heads: int = 1, backward: bool = True) -> dict[str, float]:
    r"""Words per rank of one full-batch epoch (every layer forward and backward), planned
    for large n.

    Parameters
    ----------
    kind, layout : str
        As :func:`layer_words`.
    n : float
        Vertices.
    p : int
        Ranks, a square q².
    widths : sequence of int
        ``[f0, k1, k2, ...]``: layer l maps width ``widths[l-1]`` to ``widths[l]``.
    heads : int
        GAT's heads (every layer).
    backward : bool
        Count the backward too (default).

    Returns
    -------
    dict
        ``{"sent": words, "received": words}``: :func:`layer_words` summed over the layers
        with ``r = c = n/q``, ``s = s' = n/p``, averaged over the ranks (q of the p are on the
        diagonal: ``(1/q)·diagonal + (1 − 1/q)·off-diagonal``). Every layer's backward is
        counted whole (the first layer's input gradient included, as ``layer.backward``
        computes it).
    """
    _kind(kind)
    _layout(layout)
    q = _side(p)
    ws = _widths(widths, heads, kind)
    r = c = n / q
    s = n / p
    total = {"sent": 0.0, "received": 0.0}
    for f, k in zip(ws[:-1], ws[1:], strict=True):
        for diagonal, share in ((True, 1 / q), (False, 1 - 1 / q)):
            if share == 0:
                continue
            for _, a, b in _steps(kind, layout, r, c, s, s, q, diagonal, f, k, heads,
                                  backward):
                total["sent"] += share * a
                total["received"] += share * b
    return total


def parameter_words(kind: str, f: int, k: int, heads: int = 1) -> int:
    """Words of one layer's parameters as their gradients travel (rule 7): GAT ``fk`` (W),
    ``2hk`` (the attention vectors as the k × 2h matrix B) and ``k`` (bias); GCN ``fk + k``."""
    return f * k + (2 * heads * k if _kind(kind) == "gat" else 0) + k


def bound_for_widths(n: float, p: int, widths: Sequence[int], heads: int = 1) -> float:
    r"""The paper's bound :math:`nk/\sqrt{P} + k^2` (:func:`gblas_gnn.dist.cost.bound_words`)
    summed over the layers, each with its widest matrix ``k = max(in, out)``."""
    _side(p)
    ws = _widths(widths, heads, "gat")
    return sum(bound_words(n, max(f, k), p) for f, k in zip(ws[:-1], ws[1:], strict=True))


# ---------------------------------------------------------------------------- memory
@dataclass(frozen=True)
class Term:
    """One item of the memory inventory: ``words + f·f + k·k + h·h + w·min(f, k)`` values of
    ``itemsize`` bytes plus ``nbytes`` bytes, per ``unit`` (:data:`UNITS`), for the layer's
    input width f, output width k (GAT: heads·d) and heads h; ``off``: only a rank off the
    diagonal holds it (on the diagonal the block's rows are its columns and the partner
    exchange returns the array itself)."""

    what: str
    unit: str
    words: float = 0.0
    f: float = 0.0
    k: float = 0.0
    h: float = 0.0
    w: float = 0.0
    nbytes: float = 0.0
    off: bool = False

    def bytes_per_unit(self, f: float, k: float, h: float, itemsize: int) -> float:
        values = self.words + self.f * f + self.k * k + self.h * h + self.w * min(f, k)
        return itemsize * values + self.nbytes


#: what a :class:`Term` is counted per, on rank (x, y):
#: ``A entry`` — a stored entry of the block of A (the user's graph, no self loops);
#: ``entry`` — one of the block of A + I (the layers add the self loops: those of ``R_x`` on
#: the diagonal blocks); ``row`` — a row of ``R_x`` (r); ``column`` — one of ``C_y`` (c);
#: ``own row`` — a row the layout keeps (r replicated, s sharded); ``partner row`` — a row
#: of the partner's slice (s'); ``range row`` — a row of one range of the block's columns
#: of a sharded backward (:data:`COLUMN_RANGE_BYTES`); ``process`` — once.
UNITS = ("A entry", "entry", "row", "column", "own row", "partner row", "range row",
         "process")

#: bytes of an index of the block's pattern of A + I and of its CSC view (int32)
INDEX_BYTES = 4
#: bytes of a column index of a GraphBLAS matrix (int64)
GRAPHBLAS_INDEX_BYTES = 8
#: bytes of a row or column pointer (int64)
ROW_POINTER_BYTES = 8
#: bytes of a global vertex id (int64)
VERTEX_ID_BYTES = 8
#: bytes of a label (int64)
LABEL_BYTES = 8
#: copies of every parameter a training step holds: the parameter, its gradient and Adam's
#: two moments
PARAMETER_COPIES = 4
#: a sharded backward gathers the messages of at most this many bytes of the block's columns
#: at a time (and at most a slice, ⌈c/q⌉ rows): ``gblas_gnn.dist.layout.COLUMN_CHUNK_BYTES``
COLUMN_RANGE_BYTES = 4 << 20
#: What a process's resident memory grows by beyond the traced peak of its arrays: freed
#: blocks the allocator keeps resident (arrays below glibc's mmap threshold, at most 32 MiB,
#: come from the heap), MPI's own buffers (Open MPI's allreduce holds about half the array in
#: temporaries), untraced small objects. Measured on the six scale-18 grid jobs of
#: ``bench/results/current/memory-grid-p.json`` (p = 4, 9, 16, both layouts): the largest
#: rank's growth (peak RSS minus the process's baseline) minus its traced peak (the same job
#: under ``--breakdown``, ``memory-grid-p-traced.json``) is 8.8, 13.8, 10.7, 5.1, 6.2 and 7.5
#: MiB; their median, 8.15 MiB, rounded to whole MiB.
RUNTIME_SLACK_BYTES = 8 << 20

_GRAPH = (
    Term("A, the user's graph: GraphBLAS, an int64 column index an entry, iso values",
         "A entry", nbytes=GRAPHBLAS_INDEX_BYTES),
    Term("A's row pointers", "row", nbytes=ROW_POINTER_BYTES),
    Term("the pattern of A + I the layers run on (CSR: int32 column indices)", "entry",
         nbytes=INDEX_BYTES),
    Term("its row pointers", "row", nbytes=ROW_POINTER_BYTES),
)
_GRID_IDS = (
    Term("the block's global row ids", "row", nbytes=VERTEX_ID_BYTES),
    Term("the block's global column ids (the row ids on the diagonal)", "column",
         nbytes=VERTEX_ID_BYTES, off=True),
)
_DATA = (
    Term("input features (width f0)", "own row", f=1),
    Term("labels", "own row", nbytes=LABEL_BYTES),
    Term("logits (the last layer's Z + b, width k_L) and their gradient", "own row", k=2),
)
_GAT_CSC = (
    Term("CSC view of A + I (int32 permutation and rows), built by the first backward and "
         "kept", "entry", nbytes=2 * INDEX_BYTES),
    Term("its column pointers", "column", nbytes=ROW_POINTER_BYTES),
)
_GAT_BETWEEN = (
    Term("aggregate Z, kept for the softmax term t = ⟨dZ_i, Z_i⟩", "own row", k=1),
    Term("the activation's output (ELU), the next layer's input, kept for dW", "own row", k=1),
)
_GAT_SOFTMAX = (Term("softmax values Ψ, one per head (the backward writes the edge "
                     "cotangents over them)", "entry", h=1),)
_GCN_GRAPH = (
    Term("A + I as a GraphBLAS matrix (built by gcn_norm)", "entry",
         nbytes=GRAPHBLAS_INDEX_BYTES),
    Term("its row pointers", "row", nbytes=ROW_POINTER_BYTES),
    Term("Â = D^-1/2 (A + I) D^-1/2: GraphBLAS, an int64 index and a value an entry", "entry",
         words=1, nbytes=GRAPHBLAS_INDEX_BYTES),
    Term("its row pointers", "row", nbytes=ROW_POINTER_BYTES),
    Term("the kernels' CSR pattern of Â (int32)", "entry", nbytes=INDEX_BYTES),
    Term("its row pointers", "row", nbytes=ROW_POINTER_BYTES),
    Term("Âᵀ for spmm_t (CSC: int32 rows and the values)", "entry", words=1,
         nbytes=INDEX_BYTES),
    Term("its column pointers", "column", nbytes=ROW_POINTER_BYTES),
)
_GCN_SAVED = (Term("ÂH saved for dW (propagating first, k > f), or HW (projecting first, "
                   "let go after the SpMM: an upper bound)", "own row", w=1),)
_GCN_BETWEEN = (Term("the activation's output, the next layer's input, kept for dW",
                     "own row", k=1),)

#: The inventory of one rank's memory at the peak of a training step, per layer kind and case
#: ("one process": p = 1, the ``cpu`` executor, where the two layouts coincide; otherwise the
#: layout): each category a tuple of :class:`Term` s, counted
#:
#: * ``graph`` — once: the block of A, the pattern of A + I, the views the kernels build;
#: * ``data`` — once, with f = f0 and k = k_L: the features, labels, logits and their gradient;
#: * ``edge arrays`` and ``saved`` — for every layer (f, k of the layer): kept from the
#:   forward to the backward;
#: * ``between layers`` — for every layer but the last (k of the layer): the arrays a layer
#:   hands the next that the backward reads again;
#: * ``transient`` — once, with the last layer's f and k: the last layer's backward, where the
#:   step peaks (every forward cache is alive; the last layer's Z is let go once t is formed):
#:   the column pass of its last range of columns (sharded), the completion of its column
#:   partials (replicated), the column pass (one process).
#:
#: GAT is the implementation's as measured (``docs/planning.md``: each rank's traced peak
#: within 2%); GCN is derived from its code and not measured. Besides: the parameters
#: (:data:`PARAMETER_COPIES` each) and :data:`RUNTIME_SLACK_BYTES`, per process.
MEMORY_TERMS: dict[str, dict[str, dict[str, tuple[Term, ...]]]] = {
    "gat": {
        "one process": {
            "graph": _GRAPH + _GAT_CSC,
            "data": _DATA,
            "edge arrays": _GAT_SOFTMAX,
            "saved": (Term("messages H' = H W", "own row", k=1),
                      Term("scores d, a contiguous copy read by target", "own row", h=1),
                      Term("scores s, a contiguous copy read by source", "column", h=1)),
            "between layers": _GAT_BETWEEN,
            "transient": (Term("dX, the messages' cotangent", "column", k=1),
                          Term("ds, the column partials of the scores", "column", h=1),
                          Term("t", "row", h=1),
                          Term("dd, the row partials of the scores", "row", h=1)),
        },
        "replicated": {
            "graph": _GRAPH + _GRID_IDS + _GAT_CSC,
            "data": _DATA,
            "edge arrays": _GAT_SOFTMAX,
            "saved": (Term("messages H' = H W", "own row", k=1),
                      Term("scores d, a contiguous copy read by target", "own row", h=1),
                      Term("scores s as the columns read them (the diagonal's own copy, the "
                           "partner's off it)", "column", h=1),
                      Term("H' of the partner's rows, the column copy kept for the "
                           "backward", "column", k=1, off=True)),
            "between layers": _GAT_BETWEEN,
            "transient": (Term("[ds dX], the column partials", "column", h=1, k=1),
                          Term("the same, concatenated for the column allreduce", "column",
                               h=1, k=1),
                          Term("the completed partials, back from the partner", "row", h=1,
                               k=1, off=True),
                          Term("the completed partials split into ds and dX", "row", h=1,
                               k=1),
                          Term("dd, the row partials", "row", h=1),
                          Term("the last layer's softmax values, let go before the "
                               "completion", "entry", h=-1)),
        },
        "sharded": {
            "graph": _GRAPH + _GRID_IDS + _GAT_CSC,
            "data": _DATA,
            "edge arrays": _GAT_SOFTMAX,
            "saved": (Term("messages H' = H W", "own row", k=1),
                      Term("scores [s d]", "own row", h=2)),
            "between layers": _GAT_BETWEEN,
            "transient": (Term("dZ, d and t gathered by the rows", "row", k=1, h=2),
                          Term("s gathered by the columns", "column", h=1),
                          Term("ds, the column partials of s", "column", h=1),
                          Term("H' of the partner's slice, received once, then its summed "
                               "cotangent", "partner row", k=1),
                          Term("the messages of one range of columns and their cotangent",
                               "range row", k=2)),
        },
    },
    "gcn": {
        "one process": {
            "graph": _GRAPH + _GCN_GRAPH,
            "data": _DATA,
            "edge arrays": (),
            "saved": _GCN_SAVED,
            "between layers": _GCN_BETWEEN,
            "transient": (Term("G = Âᵀ dZ or Âᵀ (dZ Wᵀ)", "column", w=1),
                          Term("dH", "own row", f=1)),
        },
        "replicated": {
            "graph": _GRAPH + _GRID_IDS + _GCN_GRAPH,
            "data": _DATA,
            "edge arrays": (),
            "saved": _GCN_SAVED,
            "between layers": _GCN_BETWEEN,
            "transient": (Term("G, the column partials", "column", w=1),
                          Term("G completed, back from the partner", "row", w=1, off=True),
                          Term("dH", "own row", f=1)),
        },
        "sharded": {
            "graph": _GRAPH + _GRID_IDS + _GCN_GRAPH,
            "data": _DATA,
            "edge arrays": (),
            "saved": _GCN_SAVED,
            "between layers": _GCN_BETWEEN,
            "transient": (Term("the operand read by target, gathered by the rows", "row",
                               w=1),
                          Term("G, the column partials", "column", w=1),
                          Term("G reduce-scattered, then exchanged", "partner row", w=1),
                          Term("dH", "own row", f=1)),
        },
    },
}


def _range_rows(c: float, q: int, k: float, itemsize: int) -> float:
    """Rows of one range of columns of a sharded backward (``layout.ColumnChunks``)."""
    cap = COLUMN_RANGE_BYTES // max(int(k * itemsize), 1)
    return max(min(cap, math.ceil(c / q)), 1)


def rank_memory_terms(kind: str, layout: str, *, r: float, c: float, s: float | None = None,
                      s_col: float | None = None, q: int, diagonal: bool, entries: float,
                      widths: Sequence[int], heads: int = 1, itemsize: int = 4
                      ) -> dict[str, float]:
    r"""The planned peak memory of one rank in a training step, by item (bytes): what
    :data:`MEMORY_TERMS` gives for its sizes, the parameters and the runtime slack.

    Parameters
    ----------
    kind, layout : str
        As :func:`layer_words`.
    r, c, s, s_col, q, diagonal :
        As :func:`layer_words` (``s``, ``s_col`` for the sharded layout).
    entries : float
        Stored entries of the rank's block of A + I (the self loops of ``R_x`` lie in the
        diagonal blocks: the block of A has ``entries − r`` there, ``entries`` elsewhere).
    widths, heads, itemsize :
        As :func:`peak_bytes`.

    Returns
    -------
    dict
        ``graph``, ``data``, ``edge arrays``, ``dense saved`` (own rows: ``saved`` and
        ``between layers``), ``kept columns`` (``saved`` by column: the replicated GAT's
        column copies), ``transient``, ``parameters``, ``runtime slack``. On q = 1 the
        inventory is the one process's (the ``cpu`` executor's), whatever ``layout``.
    """
    _kind(kind)
    _layout(layout)
    ws = _widths(widths, heads, kind)
    if q == 1:
        case, diagonal, c = "one process", True, r
        s = s_col = r
    else:
        case = layout
        if layout == "sharded" and (s is None or s_col is None):
            raise ValueError("the sharded layout needs s (the size of shard y of R_x) and "
                             "s_col (the size of shard x of R_y)")
    own = s if case == "sharded" else r
    h = heads if kind == "gat" else 0
    units = {"A entry": entries - r if diagonal else entries, "entry": entries, "row": r,
             "column": c, "own row": own, "partner row": s_col if case == "sharded" else 0,
             "process": 1}
    inventory = MEMORY_TERMS[kind][case]

    def total(terms: tuple[Term, ...], f: float, k: float, by: str | None = None) -> float:
        """Bytes of ``terms`` for a layer f → k (``by``: only those counted by "column", or
        only the others, "rows")."""
        out = 0.0
        for t in terms:
            if (t.off and diagonal) or (by is not None and (t.unit == "column") != (
                    by == "column")):
                continue
            n = _range_rows(c, q, k, itemsize) if t.unit == "range row" else units[t.unit]
            out += n * t.bytes_per_unit(f, k, h, itemsize)
        return out

    layers = list(zip(ws[:-1], ws[1:], strict=True))
    f_last, k_last = layers[-1]
    return {
        "graph": total(inventory["graph"], 0, 0),
        "data": total(inventory["data"], ws[0], ws[-1]),
        "edge arrays": sum(total(inventory["edge arrays"], f, k) for f, k in layers),
        "dense saved": sum(total(inventory["saved"], f, k, "rows") for f, k in layers)
        + sum(total(inventory["between layers"], f, k) for f, k in layers[:-1]),
        "kept columns": sum(total(inventory["saved"], f, k, "column") for f, k in layers),
        "transient": total(inventory["transient"], f_last, k_last),
        "parameters": itemsize * PARAMETER_COPIES * sum(
            parameter_words(kind, f, k, heads) for f, k in layers),
        "runtime slack": float(RUNTIME_SLACK_BYTES),
    }


def memory_terms(kind: str, layout: str, n: float, m: float, p: int, widths: Sequence[int],
                 heads: int = 1, itemsize: int = 4) -> dict[str, float]:
    r"""The planned peak memory of the larger rank in a training step, by item (bytes; see
    :func:`peak_bytes`)."""
    _kind(kind)
    _layout(layout)
    q = _side(p)
    _widths(widths, heads, kind)
    if n <= 0 or m < 0:
        raise ValueError(f"n must be positive and m non-negative, got n={n}, m={m}")
    r = n / q
    ranks = [rank_memory_terms(kind, layout, r=r, c=r, s=n / p, s_col=n / p, q=q,
                               diagonal=diagonal, entries=m / p + (r if diagonal else 0),
                               widths=widths, heads=heads, itemsize=itemsize)
             for diagonal in ((True,) if q == 1 else (True, False))]
    return max(ranks, key=lambda terms: sum(terms.values()))


def peak_bytes(kind: str, layout: str, n: float, m: float, p: int, widths: Sequence[int],
               heads: int = 1, itemsize: int = 4) -> float:
    r"""The planned peak memory of one rank in a training step (bytes): how far its resident
    memory grows beyond the process's baseline (interpreter, imports, compiled kernels).

    Parameters
    ----------
    kind, layout : str
        As :func:`layer_words`.
    n, m : float
        Vertices and stored edges of the graph A (without self loops: the layers add n).
    p : int
        Ranks, a square q².
    widths : sequence of int
        ``[f0, k1, k2, ...]`` (:func:`epoch_words`).
    heads : int
        GAT's heads.
    itemsize : int
        Bytes of one value (4: float32).

    Returns
    -------
    float
        The sum of :func:`memory_terms`: :func:`rank_memory_terms` of a diagonal rank
        (``m/p + n/q`` entries of A + I) and of an off-diagonal one (``m/p``), with
        ``r = c = n/q``, ``s = s' = n/p``, whichever is larger. For the sizes ρ (own rows:
        r replicated, s sharded), e (entries), L layers and the inventory
        :data:`MEMORY_TERMS` (b = itemsize):

        .. math::
            \text{graph}(e, r, c) + \rho\,(b f_0 + 8 + 2 b k_L)
            + \sum_l \big(b e E_l + \rho\, S_l + c\, K_l\big) + \rho \sum_{l<L} B_l
            + T_L + 4 b \sum_l P_l + \text{slack}

        (E edge arrays, S and K saved by own row and by column, B between layers, T the last
        layer's backward, P parameter words, slack :data:`RUNTIME_SLACK_BYTES`). Validated
        against measured peaks in ``docs/planning.md``; on q = 1 both layouts are the one
        process's step.
    """
    return sum(memory_terms(kind, layout, n, m, p, widths, heads, itemsize).values())


def choose_layout(kind: str, n: float, m: float, p: int, widths: Sequence[int],
                  heads: int = 1, itemsize: int = 4) -> str:
    """The layout ``--dense auto`` picks: the one with the lower :func:`peak_bytes`, the
    replicated one on a tie (p = 1, where the two coincide). The sharded layout has the
    lower peak in every case of ``docs/planning.md`` (p = 16 … 1024) and at p = 4 for the
    measured Kronecker graphs (scales 18 and 20, widths [16, 16, 16, 16]); the replicated
    one receives fewer words for GAT (about 2/3: rule 6) and about as many for GCN."""
    rep = peak_bytes(kind, "replicated", n, m, p, widths, heads, itemsize)
    shard = peak_bytes(kind, "sharded", n, m, p, widths, heads, itemsize)
    return "sharded" if shard < rep else "replicated"


# ---------------------------------------------------------------------------- CAGNET
def _cagnet(algorithm: str, n: float, m: float, f: float, p: int, layers: int) -> str:
    if algorithm not in CAGNET_ALGORITHMS:
        raise ValueError(f"unknown CAGNET algorithm {algorithm!r}: "
                         f"{' or '.join(CAGNET_ALGORITHMS)}")
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise ValueError(f"p must be a positive integer, got {p!r}")
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise ValueError(f"layers must be a positive integer, got {layers!r}")
    if n <= 0 or m < 0 or f <= 0:
        raise ValueError(f"n and f must be positive and m non-negative, got n={n}, m={m}, "
                         f"f={f}")
    return algorithm


def cagnet_replication(p: int, c: int | None = None) -> int:
    """1.5D's replication factor c: the given one (a divisor of p with c² ≤ p: a P/c × c grid
    with p/c² ≥ 1 stages, Algorithm 2), by default the largest such divisor — √p for a
    square p, which minimises the 1.5D words ``2nf/c + 2nfc/P`` (at ``4nf/√P``) and costs
    the most memory (c = 1, the 1D algorithm, costs the least)."""
    if c is None:
        return max(d for d in range(1, math.isqrt(p) + 1) if p % d == 0)
    if isinstance(c, bool) or not isinstance(c, int) or c < 1 or p % c or c * c > p:
        raise ValueError(f"c = {c!r} must be a positive divisor of p = {p} with c² ≤ p "
                         "(a P/c × c grid, at least one stage)")
    return c


def cagnet_words(algorithm: str, n: float, m: float, f: float, p: int, layers: int,
                 c: int | None = None) -> float:
    r"""CAGNET's per-process words of one epoch (Tripathy, Yelick, Buluç, SC'20,
    ``papers/cagnet-reducing-communication.txt``, §IV), the bandwidth terms as the paper
    totals them.

    Parameters
    ----------
    algorithm : {"1.5d", "3d"}
        Block 1.5D row (§IV-B) or Split-3D-SpMM (§IV-D).
    n, m : float
        Vertices and nnz(A).
    f : float
        The "average" feature length of the paper's simplified totals.
    p : int
        Processes.
    layers : int
        L.
    c : int, optional
        1.5D's replication factor (:func:`cagnet_replication`; default √p).

    Returns
    -------
    float
        1.5D, §IV-B5 ("ignoring lg P latency terms and f² bandwidth terms"):
        :math:`L\,(2nf/c + 2nfc/P)`. 3D, §IV-D5:
        :math:`L\,(2\,\mathrm{nnz}(A)/P^{2/3} + 12\,nf/P^{2/3})`. (The 3D mesh needs a cube
        p; the formula is evaluated at any p as the paper's model.)
    """
    _cagnet(algorithm, n, m, f, p, layers)
    if algorithm == "1.5d":
        c = cagnet_replication(p, c)
        return layers * (2 * n * f / c + 2 * n * f * c / p)
    return layers * (2 * m / p ** (2 / 3) + 12 * n * f / p ** (2 / 3))


def cagnet_memory(algorithm: str, n: float, m: float, f: float, p: int, layers: int,
                  c: int | None = None, itemsize: int = 4) -> float:
    r"""CAGNET's per-process memory (bytes: the paper's words × ``itemsize``; the paper
    counts one word per nonzero of A and no index).

    Returns
    -------
    float
        1.5D, §IV-B ("the per-process memory"):
        :math:`M^{1.5D}_{proc} = L\,(\mathrm{nnz}(A)/(p/c) + nf/(p/c))`. 3D, §IV-D: the paper
        gives the total :math:`M^{3D}_{total} = \mathrm{nnz}(A) + nf(L - 1) + \sqrt[3]{p}\,
        nf^{max}` (with :math:`f^{max} = f` here); per process it is that over p, since the
        inputs are split evenly ("each process only holds (1/P)th of the input matrices").
    """
    _cagnet(algorithm, n, m, f, p, layers)
    if algorithm == "1.5d":
        c = cagnet_replication(p, c)
        words = layers * (m / (p / c) + n * f / (p / c))
    else:
        words = (m + n * f * (layers - 1) + p ** (1 / 3) * n * f) / p
    return itemsize * words
