r"""The skeleton of a plan's kernel module, shared by the kernel generators (the ``cpu``
executor's numba kernels, :mod:`gblas_gnn.executors.cpu._program_kernels`; the ``cuda``
executor's numba-cuda kernels, :mod:`gblas_gnn.gpu._program_source`).

Both write the same passes of :mod:`.plan` with the same arguments (:mod:`.kernel_args`):

* ``forward``: the row pass, per softmax ``k`` (the ``m``-th) the phases ``3m`` (scores and
  row maximum), ``3m + 1`` (exponentials and row sum), ``3m + 2`` (normalisation), then the
  root and the sink (phase ``3·stages``); ``phase`` ``-1`` runs all of them, a grid one at a
  time with a collective in between;
* strategy ``"column"``: ``column_pass`` and ``column_rows`` (each generator's own);
* strategy ``"row"``: ``row_pass`` (phase 0 the root and the last stage, then per softmax, in
  reverse, ``1 + 2r`` its row term ``T`` and ``2 + 2r`` its backward) and ``row_columns``
  (per column: the messages' gradient, the cotangents of what is read by source). A
  generator may leave the messages' gradient to its runtime
  (:meth:`ProgramSource._scatter_messages`): the row pass then stores the root at every
  edge in ``WP`` for it.

:class:`ProgramSource` writes that skeleton; a generator subclasses it with how its loops run
(a ``prange`` over rows on the cpu; a lane group per row or column on a GPU), how a per-edge
buffer is laid out (edge-major ``[p, head]`` on the cpu, head-major ``[head, p]`` on a GPU,
:attr:`ProgramSource.head_major`) and the pieces in between (scores, softmax, sink,
cotangents).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from ..ir.plan import BY_ROW, Plan, head_index, leaf_kinds
from ..ir.sinks import edge_messages
from .kernel_args import ArrayLeaves, Layout
from .scalar import EdgeCode, SourceBlock, ValueScope, literal

__all__ = ["ProgramSource", "column_edge"]


class ProgramSource(ABC):
    """Writes the kernels of one plan into a :class:`~.scalar.SourceBlock` (see the module
    docstring); subclasses supply its abstract methods.

    Parameters
    ----------
    p : Plan
        The plan whose kernels are written.
    """

    #: per-edge buffers (``S<k>``, ``GS<k>``, ``EB<k>``, ``GB``) indexed ``[head, p]``
    #: (True) or ``[p, head]`` (False), as the generator's :class:`ArrayLeaves` reads them
    head_major: bool = False
    #: the loop of one thread over its share of row ``i``'s edges (all of them on the cpu)
    own_edges: str = "for p in range(lo, hi):"
    #: the literal one added to an index (the cpu's indices are unsigned: a signed 1 would
    #: make their sum a float64)
    index_one: str = "1"
    #: the exponential of a non-positive argument in the generated module
    exp: str = "math.exp"
    #: the literal −∞ of the plan's dtype in the generated module (set by a subclass)
    neg_inf: str

    def __init__(self, p: Plan):
        self.p = p
        self.s = p.structure
        self.ops = self.s.ops
        self.layout = Layout.of(p)
        self.dtype = np.dtype(self.s.dtype)
        self.zero = literal(0.0, self.dtype)
        self.one = literal(1.0, self.dtype)
        self.H = "H"                 # the root's heads, read from an array in each kernel
        self.sink, self.aggr, self.algebra = p.sink, p.aggr, p.algebra
        self.rule = p.sink_rule
        #: the edge-feature slot an aggregation appends to its messages, or None
        self.appended = edge_messages(p.sink)

    # ------------------------------------------------------------------ the module
    def write(self, out: SourceBlock) -> None:
        """The forward and, unless the sink keeps the root's values only, the backward of
        the plan's strategy."""
        self.forward(out)
        if self.rule.has_backward:
            (self.column_strategy if self.p.strategy == "column" else self.row_strategy)(out)

    # ------------------------------------------------------------------ layout
    def at(self, buffer: str, head: str, edge: str = "p") -> str:
        """The element of a per-edge ``buffer`` at ``head`` and CSR position ``edge``."""
        return f"{buffer}[{head}, {edge}]" if self.head_major else f"{buffer}[{edge}, {head}]"

    def heads(self, buffer: str) -> str:
        """The number of heads of a per-edge ``buffer``."""
        return f"{buffer}.shape[{0 if self.head_major else 1}]"

    # ------------------------------------------------------------------ scalar code
    @abstractmethod
    def leaves(self, accumulate: set[str], together: bool) -> ArrayLeaves:
        """How the scalar code reads operands and where its cotangents go; ``together``:
        every thread of the item runs the code on the same edge (the reverse mode)."""

    def code(self, accumulate: set[str] = frozenset(), together: bool = False,
             leaves: ArrayLeaves | None = None) -> EdgeCode:
        """The scalar code of the plan's expressions (softmax outputs read from ``S<k>``),
        accumulating the cotangents of ``accumulate`` (through ``leaves`` when given)."""
        code = EdgeCode(self.s, leaves or self.leaves(set(accumulate), together))
        code.cut = set(self.p.softmaxes)
        return code

    def _root(self, e: SourceBlock, together: bool = False) -> str:
        """The root's value at the edge (head ``hh``)."""
        r = self.s.root
        return self.code(together=together).value(e, ValueScope(), r, head_index(self.p, r, "hh"))

    def _seeds(self, e: SourceBlock, seeds: dict, kinds: set[str],
               leaves: ArrayLeaves | None = None) -> None:
        """The reverse mode at one edge from ``seeds``, accumulating ``kinds`` (through
        ``leaves`` when given)."""
        self.code(kinds, together=True, leaves=leaves).reverse(e, ValueScope(), seeds)

    def _stage_input(self, k: int) -> int:
        """The operation softmax ``k`` normalises."""
        return self.ops[k].inputs[0]

    def _grads(self, kinds: set[str]) -> tuple[str, ...]:
        """The gradient arguments of ``kinds`` ("row", "col", "param", "eattr"), in
        order."""
        p, out = self.p, []
        for kind, prefix, slots in (("row", "dR", p.rows), ("col", "dC", p.cols),
                                    ("param", "dP", p.params), ("eattr", "dEA", p.eattrs)):
            if kind in kinds:
                out += [f"{prefix}{s}" for s in slots]
        return tuple(out)

    # ------------------------------------------------------------------ loops
    @abstractmethod
    def _def(self, out: SourceBlock, name: str, *extra: str) -> SourceBlock:
        """The kernel ``name`` with the common arguments and ``extra``; its body."""

    @abstractmethod
    def _rows(self, body: SourceBlock) -> SourceBlock:
        """The loop over rows ``i`` (with ``lo``, ``hi``: the row's CSR range)."""

    @abstractmethod
    def _cols(self, body: SourceBlock) -> SourceBlock:
        """The loop over columns ``j``."""

    @abstractmethod
    def _edges(self, row: SourceBlock, lanes: bool = False) -> SourceBlock:
        """The loop over the edges ``(i, j)`` of row ``i`` at CSR position ``p``: each
        thread over its own share (``lanes``), or every thread of the row over each edge."""

    def _col_edges(self, col: SourceBlock) -> SourceBlock:
        """The loop over the edges ``(i, j)`` of column ``j`` (``p``: the CSR position)."""
        col.emit(f"for q in range(colptr[j], colptr[j + {self.index_one}]):")
        e = col.loop_body()
        e.emit("i = crow[q]")
        e.emit("p = perm[q]")
        return e

    def _heads(self, block: SourceBlock, buffer: str, var: str = "hk") -> SourceBlock:
        """The loop over the heads ``var`` of a per-edge ``buffer``; its body."""
        block.emit(f"for {var} in range({self.heads(buffer)}):")
        return block.nested()

    def _combine(self, block: SourceBlock, var: str, op: str) -> None:
        """Completes the partial ``var`` of every thread of the item by ``op`` ("sum",
        "max", "min"): nothing where one thread runs the item."""
        return

    def _once(self, block: SourceBlock, line: str) -> None:
        """``line``, a write every thread of the item would make with the same values, run
        by one of them."""
        block.emit(line)

    def _sync(self, block: SourceBlock) -> None:
        """A barrier between the threads of an item: nothing where one thread runs it."""
        return

    def _phase(self, row: SourceBlock, number: int) -> SourceBlock:
        """The code of one phase of a row pass: all of them in order (``phase < 0``) on one
        process; one at a time on a grid, which completes a row between them."""
        row.emit(f"if phase < 0 or phase == {number}:")
        return row.nested()

    # ------------------------------------------------------------------ forward
    def forward(self, out: SourceBlock) -> None:
        """The row pass (see the module docstring)."""
        stats = tuple(f"{n}{k}" for k in self.p.softmaxes for n in ("RM", "RS"))
        body = self._def(out, "forward", *self._sink_args(), *stats, "phase")
        self._forward_setup(body)
        row = self._rows(body)
        for m, k in enumerate(self.p.softmaxes):
            self._scores(self._phase(row, 3 * m), k)
            self._exp(self._phase(row, 3 * m + 1), k)
            self._norm(self._phase(row, 3 * m + 2), k)
        self._final(self._phase(row, 3 * len(self.p.softmaxes)))
        out.emit("")

    def _forward_setup(self, body: SourceBlock) -> None:
        """What the forward computes once before its rows (nothing unless overridden)."""
        return

    @abstractmethod
    def _sink_args(self) -> tuple[str, ...]:
        """The sink's arrays (the aggregate's first, then what its backward reads)."""

    def _prefetch(self, e: SourceBlock, k: int) -> None:
        """What an edge of stage ``k``'s scores asks the memory for ahead (nothing unless
        overridden)."""
        return

    def _scores(self, row: SourceBlock, k: int) -> None:
        """Stage ``k``'s input at every edge of the row into ``S<k>``, its row maximum into
        ``RM<k>``."""
        s = f"S{k}"
        head = self._heads(row, s)
        head.emit(f"m = {self.neg_inf}")
        e = self._edges(head, lanes=True)
        self._prefetch(e, k)
        v = self.code().value(e, ValueScope(), self._stage_input(k), head_index(self.p, k, "hk"))
        e.emit(f"{self.at(s, 'hk')} = {v}")
        self._running_max(e, "m", v)
        self._combine(head, "m", "max")
        self._once(head, f"RM{k}[hk, i] = m")

    def _running_max(self, e: SourceBlock, m: str, v: str) -> None:
        """``m ← max(m, v)`` at an edge (a NaN ``v`` leaves ``m``); a guarded update unless
        overridden."""
        e.emit(f"if {v} > {m}:")
        e.nested().emit(f"{m} = {v}")

    def _exp(self, row: SourceBlock, k: int) -> None:
        """``S<k> = exp(S<k> − max)``, its row sum into ``RS<k>``."""
        s = f"S{k}"
        head = self._heads(row, s)
        head.emit(f"m = RM{k}[hk, i]")
        head.emit(f"tot = {self.zero}")
        head.emit(self.own_edges)
        e = head.nested()
        e.emit(f"v = {self.exp}({self.at(s, 'hk')} - m)")
        e.emit(f"{self.at(s, 'hk')} = v")
        e.emit("tot += v")
        self._combine(head, "tot", "sum")
        self._once(head, f"RS{k}[hk, i] = tot")

    def _norm(self, row: SourceBlock, k: int) -> None:
        """``S<k> /= RS<k>`` over a non-empty row."""
        s = f"S{k}"
        head = self._heads(row, s)
        head.emit("if hi > lo:")
        body = head.nested()
        body.emit(f"inv = {self.one} / RS{k}[hk, i]")
        body.emit(self.own_edges)
        body.nested().emit(f"{self.at(s, 'hk')} *= inv")

    @abstractmethod
    def _final(self, row: SourceBlock) -> None:
        """The root at every edge of the row and the sink."""

    # ------------------------------------------------------------------ backward
    def _scatter_messages(self) -> bool:
        """Whether the runtime computes the messages' gradient after the row strategy's
        passes (the cpu's max/min: a scatter from the winners) instead of ``row_columns``;
        the row pass then stores the root at every edge and head in ``WP`` (one more
        argument after the sink's). False unless overridden."""
        return False

    @abstractmethod
    def column_strategy(self, out: SourceBlock) -> None:
        """Strategy ``"column"``: the column pass and the light row pass."""

    def _factor_kinds(self) -> set[str]:
        """The kinds of leaves the messages' factor reads (none without one)."""
        return leaf_kinds(self.p, self.p.factor) if self.p.factor is not None else set()

    def _column_pass_edges(self, out: SourceBlock) -> SourceBlock:
        """The column pass of strategy ``"column"`` down to the loop over the edges of
        column ``j``, ``dX[j]`` zeroed first."""
        appended = ("dZE",) if self.appended is not None else ()
        body = self._def(out, "column_pass", "dZ", *appended, "T", "dX", "EB", "GF",
                         *self._grads({"col"}))
        self._column_setup(body)
        col = self._cols(body)
        self._zero_messages(col)
        return self._col_edges(col)

    def _column_setup(self, body: SourceBlock) -> None:
        """What the column pass computes once before its columns (nothing unless
        overridden)."""
        return

    def _column_seeds(self, h: SourceBlock, x: int, hv: tuple, factor: str | None,
                      leaves: ArrayLeaves | None = None) -> None:
        """The column pass's reverse mode at the edge: what the scores ``x`` (and the
        factor) read by source, from their cotangents ``eb`` (and ``gf``); ``leaves`` may
        send a row's cotangent somewhere too."""
        seeds = {(x, hv): "eb"}
        if factor is not None:
            seeds[(self.p.factor, hv)] = "gf"
        self._seeds(h, seeds, {"col"}, leaves)

    def row_strategy(self, out: SourceBlock) -> None:
        """Strategy ``"row"``: the row pass through every stage — phase 0 the root and the
        last stage, then per softmax (in reverse) ``1 + 2r`` its row term ``T`` and
        ``2 + 2r`` its backward — and the column pass."""
        p = self.p
        stage = tuple(f"{n}{k}" for k in p.softmaxes for n in ("GS", "EB"))
        extra = self._sink_args()[1:] if self.rule.keeps_outputs else ()
        if self._scatter_messages():
            extra = (*extra, "WP")
        if self._row_pass_runs():
            ts = tuple(f"T{k}" for k in p.softmaxes)
            row = self._rows(self._def(out, "row_pass", "dZ", "GB", "Z", *stage, *extra, *ts,
                                       "dXr", *self._grads(BY_ROW), "phase"))
            self._row_root(self._phase(row, 0))
            for r, k in enumerate(reversed(p.softmaxes)):
                self._row_t(self._phase(row, 1 + 2 * r), k)
                self._row_stage(self._phase(row, 2 + 2 * r), k)
            out.emit("")
        self._row_columns(out, stage, extra)

    def _row_pass_runs(self) -> bool:
        """Whether the row strategy has a row pass (a generator whose column pass can do
        all of a backward's work says when it has none)."""
        return True

    def _row_root(self, row: SourceBlock) -> None:
        """Zero the softmax cotangents ``GS``, the root's cotangent ``GB`` at every edge of
        the row from the sink's ``dZ``, and the reverse mode of the last stage (every
        thread of the row on each edge) into what is read by target, the parameters and
        ``GS``. A root that reads nothing differentiable (a constant edge tensor) has no
        use for ``GB``: it is neither computed nor read. With
        :meth:`_scatter_messages` the root at every edge goes to ``WP``."""
        p, r = self.p, self.s.root
        for k in p.softmaxes:
            head = self._heads(row, f"GS{k}")
            head.emit(self.own_edges)
            head.nested().emit(f"{self.at(f'GS{k}', 'hk')} = {self.zero}")
        if not self.rule.edge_cotangent:         # messages: seeds per channel
            self._sync(row)
            self._message_seeds(self._edges(row, lanes=False), BY_ROW | {"softmax"})
            return
        needed = bool(leaf_kinds(p, r))
        if needed:
            row.emit(f"for hh in range({self.H}):")
            self._root_cotangent(row.nested())
        self._sync(row)
        spmm_t, keep = self.rule.transposed, self._scatter_messages()
        if not (needed or spmm_t or keep):
            row.emit("pass")
            return
        e = self._edges(row, lanes=False)
        e.emit(f"for hh in range({self.H}):")
        h = e.nested()
        if spmm_t:
            self._transposed_messages(h)
        if keep:
            self._once(h, f"{self.at('WP', 'hh')} = {self._root(h, together=True)}")
        if needed:
            self._seeds(h, {(r, head_index(p, r, "hh")): self.at("GB", "hh")},
                        BY_ROW | {"softmax"})

    def _message_seeds(self, e: SourceBlock, kinds: set[str]) -> None:
        """The reverse mode of a messages root at the edge ``(i, j)``, from the cotangent
        ``dZ[i, hh, c]`` of every head and channel (max/min: of those the edge won,
        ``ARG[i, hh, c] == p``); nothing is stored per edge for it."""
        e.emit(f"for hh in range({self.H}):")
        g = "dZ[i, hh, c]" if self.sink[1] == "sum" else \
            f"(dZ[i, hh, c] if ARG[i, hh, c] == p else {self.zero})"
        self._channel_seeds(e.nested(), {(self.s.root, ("hh", "c")): g}, kinds)

    def _channel_seeds(self, h: SourceBlock, seeds: dict, kinds: set[str]) -> None:
        """The reverse mode from ``seeds`` given at every channel ``c`` of ``dZ``: a loop
        over the channels, each running the whole reverse mode."""
        h.emit("for c in range(dZ.shape[2]):")
        self._seeds(h.nested(), seeds, kinds)

    @abstractmethod
    def _root_cotangent(self, head: SourceBlock) -> None:
        """``GB`` at every edge of row ``i`` (head ``hh``) from the sink's cotangent
        ``dZ``."""

    @abstractmethod
    def _transposed_messages(self, h: SourceBlock) -> None:
        """``dXr[i] += w_ij dZ[j]`` at the edge (head ``hh``): the transposed product's
        gradient of its messages."""

    def _row_t(self, row: SourceBlock, k: int) -> None:
        """``T<k>[hk, i] = Σ_p Ψ ⊙ GS`` over the row (a grid completes it by rows)."""
        hk = self._heads(row, f"S{k}")
        hk.emit(f"t = {self.zero}")
        hk.emit(self.own_edges)
        hk.nested().emit(f"t += {self.at(f'S{k}', 'hk')} * {self.at(f'GS{k}', 'hk')}")
        self._combine(hk, "t", "sum")
        self._once(hk, f"T{k}[hk, i] = t")

    def _row_stage(self, row: SourceBlock, k: int) -> None:
        """The softmax backward of stage ``k`` (``EB = Ψ ⊙ (GS − rep(T))``) and the reverse
        mode of its input (every thread of the row on each edge)."""
        p, x = self.p, self._stage_input(k)
        s, gs, eb = (self.at(f"{n}{k}", "hk") for n in ("S", "GS", "EB"))
        hk = self._heads(row, f"S{k}")
        hk.emit(f"t = T{k}[hk, i]")
        hk.emit(self.own_edges)
        hk.nested().emit(f"{eb} = {s} * ({gs} - t)")
        if leaf_kinds(p, x) & (BY_ROW | {"softmax"}):
            self._sync(row)
            e = self._edges(row, lanes=False)
            self._seeds(self._heads(e, f"S{k}"), {(x, head_index(p, k, "hk")): eb},
                        BY_ROW | {"softmax"})

    def _row_columns(self, out: SourceBlock, stage: tuple[str, ...],
                     extra: tuple[str, ...]) -> None:
        """Per column ``j``: the messages' gradient ``dX[j]`` from the kept weights (zeros
        only, with :meth:`_scatter_messages`: the runtime adds it after), and the
        cotangents of what the root and the stages read by source (from ``GB`` and
        ``EB<k>``)."""
        p, r = self.p, self.s.root
        col = self._cols(self._def(out, "row_columns", "dZ", "GB", "Z", *stage, *extra,
                                   "dX", *self._grads({"col"})))
        messages = self.rule.gathers_messages
        if messages:
            self._zero_messages(col)
        e = self._col_edges(col)
        if not self.rule.edge_cotangent:
            e.emit("pass")
            if "col" in leaf_kinds(p, r):
                self._message_seeds(e, {"col"})
        else:
            e.emit(f"for hh in range({self.H}):")
            h = e.nested()
            h.emit("pass")
            if messages and not self._scatter_messages():
                self._message_gradient(h)
            if "col" in leaf_kinds(p, r):
                self._seeds(h, {(r, head_index(p, r, "hh")): self.at("GB", "hh")}, {"col"})
        for k in p.softmaxes:
            x = self._stage_input(k)
            if "col" in leaf_kinds(p, x):
                self._seeds(self._heads(e, f"S{k}"),
                            {(x, head_index(p, k, "hk")): self.at(f"EB{k}", "hk")}, {"col"})
        out.emit("")

    @abstractmethod
    def _zero_messages(self, col: SourceBlock) -> None:
        """``dX[j] = 0`` (every head and feature) before column ``j``'s edges add to it."""

    @abstractmethod
    def _message_gradient(self, h: SourceBlock) -> None:
        """``dX[j]`` from the edge ``(i, j)`` in a column pass (head ``hh``)."""


def column_edge(factor: str | None, op: str) -> tuple[str, list[str]]:
    """The column strategy at one edge: the weight ``w`` (``Ψ`` times or over the factor),
    and from ``g = ⟨dZ_i, X_j⟩`` the cotangents ``gpsi`` of ``Ψ`` and ``gf`` of the factor.

    Parameters
    ----------
    factor : str or None
        The factor's value at the edge (an expression of the generated code), if any.
    op : str
        How the factor applies to ``Ψ``: ``"mul"`` or ``"div"``.

    Returns
    -------
    tuple of str and list of str
        The line that sets ``w`` and the lines that set ``gpsi`` (and ``gf``).
    """
    if factor is None:
        return "w = psi", ["gpsi = g"]
    if op == "mul":
        return f"w = psi * {factor}", [f"gpsi = g * {factor}", "gf = g * psi"]
    return f"w = psi / {factor}", [f"gpsi = g / {factor}", f"gf = -g * w / {factor}"]
