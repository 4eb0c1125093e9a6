r"""The kernels of a multi-head plan with its heads written out, edge by edge.

:class:`~gblas_gnn.codegen.kernel_source.ProgramSource` writes each softmax phase as a loop
over the heads around a loop over the row's edges: with ``H`` heads the row is walked ``H``
times per phase, and an edge's heads, which sit side by side in ``S[p, :]`` and in the rows
``R[i, :]``, ``C[j, :]``, ``X[j, :, :]``, are read ``H`` strides apart. On the cpu the
generator knows the number of heads (it is part of the module's key,
:func:`head_counts`), so it writes the heads out instead: one walk over the row per phase,
every head of an edge from the lines the edge already holds, each head's running maximum,
sum and reciprocal in a scalar of its own:

.. math::

    m_h = \max_p s_{p,h},\qquad \Sigma_h = \sum_p e^{s_{p,h} - m_h},\qquad
    \psi_{p,h} = e^{s_{p,h} - m_h} / \Sigma_h,\qquad
    Z_{i,h} = \sum_p w_{p,h} X_{j,h}.

Every phase gains: the scores, the exponentials and normalisation, and the aggregation each
read a row's lines once instead of once per head (``docs/performance.md`` has the measured
row pass of GAT 4 × 8). The phases stay apart (a grid completes a row between them). A
head's maximum and scores are those of the loop form bit for bit; its sums may be associated
differently where a loop vectorises (results agree to rounding).

**Lanes.** A head's ``f`` features are fewer than LLVM's vector loop takes (8 float32 wide,
interleaved 4 times), so a loop over one head's features of a width known only at run time
runs scalar. Where the sink sums weighted messages, the forward's aggregation and the column
pass therefore walk a gathered row's ``heads · f`` lanes at once, through (rows, heads · f)
views ``Xf``, ``Zf``, ``dZf``, ``dXf``, and give lane ``c`` its head's value by selects on
``c`` against the bounds ``hb<h> = h f`` (which vectorise):

.. math::

    Z_{i,c} \mathrel{+}= w_{p,h(c)} X_{j,c},\qquad
    g_h = \sum_{c:\,h(c) = h} dZ_{i,c} X_{j,c},\qquad
    dX_{j,c} \mathrel{+}= w_{h(c)}\, dZ_{i,c}.

The width ``f`` is written into the bounds as a literal (:func:`lane_width`, part of the
module's key), and into the loops' trip count from four heads on (:meth:`_lane_count`); a
head's dot in the column pass runs over its own ``f`` lanes, a constant count, which LLVM
makes one vector product and a sum. A head's dot may then be associated differently from
the loop form's (results agree to rounding).
Together with the prefetch of the whole row
(:func:`~gblas_gnn.executors.cpu._kernel_primitives.prefetch_heads`) the lanes make both the
row pass and the column pass of GAT 4 × 8 faster than the loop form, and the width written
in makes them faster again (``docs/performance.md`` records the measurements).

**The scores' lanes.** Where the scores are a channel sum of ``(heads, f)`` values read
from ``(heads, f)`` operands (GATv2's :math:`a_h \cdot \mathrm{LeakyReLU}(R_{i,h} + C_{j,h}
+ W_e e_{ji})`, :func:`score_lanes`), every pass walks an edge's ``heads · f`` lanes in one
loop instead of one loop of ``f`` per head: lane ``c`` reads the flat rows ``R<s>l[i, c]``,
``C<s>l[j, c]`` and ``P<s>l[c]``; the forward adds it to its head's score under a select on
``c``, and the column pass and the light row pass give it its head's cotangent by selects,

.. math:: s_{p,h} = \sum_{c:\,h(c) = h} y_{p,c}, \qquad
          \bar R_{i,c} \mathrel{+}= \bar s_{p,h(c)}\, \partial y_{p,c} / \partial R_{i,c}.

The backward's lanes run the per-head loops' operations in their order (the same bits); a
forward score may be associated differently (results agree to rounding). A head's loop of
``f = 8`` ran scalar (``docs/performance.md`` has the measurement).

**Softmax entries.** With a power-of-two number of heads the exponentials and the
normalisation walk the row's ``heads · (hi − lo)`` entries of ``S`` flat, by an unsigned
index (see :meth:`HeadUnrolling._flat_entries`).
"""

from __future__ import annotations

from collections.abc import Callable

from ...codegen.scalar import SourceBlock, ValueScope, edge_contractions
from ...ir.plan import Plan, head_index
from ...ir.program import Structure

__all__ = ["UNROLLED_HEADS", "LANE", "head_counts", "lane_width", "score_lanes", "scores_sum",
           "selects", "HeadUnrolling"]

#: the most heads a forward writes out (more: the loop over heads of the skeleton)
UNROLLED_HEADS = 8


def _unrolled(heads: int) -> int:
    """``heads`` if a forward writes them out, else 0."""
    return heads if 1 < heads <= UNROLLED_HEADS else 0


def head_counts(p: Plan) -> tuple[int, ...]:
    """The head counts the generated source of ``p`` depends on (the root's and each
    softmax's, where written out): part of the module's cache key, so that plans with
    different head counts never share a module."""
    counts = (_unrolled(p.heads), *(_unrolled(p.heads_of(k)) for k in p.softmaxes))
    return counts if any(counts) else ()


def _lanes(p: Plan) -> int:
    """The root's heads when the sink of the forward and the column pass run over a
    gathered row's ``heads · f`` lanes (heads written out, a sum of weighted messages), else
    0."""
    n = _unrolled(p.heads)
    return n if n and p.sink_rule.gathers_messages and p.algebra.linear else 0


def lane_width(p: Plan) -> int:
    """The messages' width ``f`` per head where a plan's lanes are walked (:func:`_lanes`;
    the messages are (n, heads, f) there), else 0. The generator writes it into the lane
    bounds, the column pass's dots and (from four heads on) the lanes' loops as a literal
    (part of the module's key): with a constant trip count LLVM turns a head's dot into one
    vector product and a sum, where a runtime width of 8 ran in the vector loop's scalar
    remainder."""
    if not _lanes(p):
        return 0
    return next(shape[-1] for role, shape in p.structure.roles if role == "x")


#: the head index of a value read at one of a row's ``heads · f`` lanes
#: (:attr:`gblas_gnn.codegen.scalar.EdgeCode.lane_head`)
LANE = "hl"
#: the operations the scores' lanes may hold (besides edge contractions, read per lane)
_LANE_KINDS = frozenset({"row", "col", "param", "const", "avals", "map", "zip"})


def scores_sum(s: Structure, x: int) -> tuple[int, int | None]:
    r"""The channel sum the scores ``x`` are, and the constant operation that scales it:
    ``(sum, c)`` for scores ``sum · c`` (or ``c · sum``: the Transformer's
    :math:`q \cdot k / \sqrt{d}`; its value is read at run time), ``(x, None)`` for
    anything else (the caller checks that it is a sum)."""
    op = s.ops[x]
    if op.kind == "zip" and op.args[0] == "mul" and len(op.inputs) == 2:
        a, b = op.inputs
        for total, const in ((a, b), (b, a)):
            if s.ops[total].kind == "sum" and s.ops[const].kind == "const":
                return total, const
    return x, None


def score_lanes(p: Plan) -> tuple[int, int] | None:
    """``(heads, f)`` where the passes of ``p`` walk the scores' lanes at once: the column
    strategy with its heads written out, the scores (the softmax's input) a channel sum
    (times a constant, :func:`scores_sum`) of a ``(heads, f)`` value whose every operation is
    elementwise on ``(heads, f)`` (or one number an edge) and whose row, column and
    parameter reads are ``(heads, f)`` operands, or an edge contraction of that trail (read
    per lane from its scratch); None otherwise. Part of the module's key (the lanes' count
    is written in)."""
    n = _unrolled(p.heads or 0)
    if not n or p.strategy != "column" or p.softmax is None:
        return None
    s = p.structure
    x, _ = scores_sum(s, s.ops[p.softmax].inputs[0])
    if s.ops[x].kind != "sum" or len(s.ops[s.ops[x].inputs[0]].trail) != 2:
        return None
    y = s.ops[x].inputs[0]
    lanes = s.ops[y].trail
    if lanes[0] != n or lanes[1] < 2:   # one channel a head: an axis of extent one broadcasts
        return None
    contractions = edge_contractions(s)
    stack, seen = [y], set()
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        op = s.ops[i]
        if op.trail not in (lanes, ()):
            return None
        if i in contractions:
            continue
        if op.kind not in _LANE_KINDS or (op.kind in ("row", "col", "param")
                                           and s.roles[op.args[0]][1] != lanes):
            return None
        stack.extend(op.inputs)
    return n, lanes[1]


def selects(values: list[str], test: Callable[[int], str]) -> str:
    """``values[h]`` for the first ``h`` whose ``test(h)`` holds (the last value when none
    does), as a chain of conditional expressions."""
    expr = values[-1]
    for h in range(len(values) - 2, -1, -1):
        expr = f"({values[h]} if {test(h)} else {expr})"
    return expr


class HeadUnrolling:
    """Overrides of the forward's pieces of a
    :class:`~gblas_gnn.codegen.kernel_source.ProgramSource` (mixed in before it) that write
    a multi-head stage's heads out; a single-head stage keeps the skeleton's code."""

    p: Plan
    #: ``(heads, f)`` where the passes walk the scores' lanes (:func:`score_lanes`), else None
    _score_lanes: tuple[int, int] | None

    def _stage_heads(self, k: int) -> int:
        return _unrolled(self.p.heads_of(k))

    @staticmethod
    def _each_head(block: SourceBlock, n: int, *lines: str) -> None:
        """``lines`` for heads ``0 … n-1`` in turn (``{h}``: the head)."""
        for h in range(n):
            for line in lines:
                block.emit(line.format(h=h))

    def _scores(self, row: SourceBlock, k: int) -> None:
        n = self._stage_heads(k)
        if not n:
            return super()._scores(row, k)
        s = f"S{k}"
        self._each_head(row, n, f"m{{h}} = {self.neg_inf}")
        e = self._edges(row)
        if k == self.p.softmaxes[0]:
            self._prefetch_rows(e, "col", "p")
        scores = self._lane_scores(e, k)
        if scores is None:
            code, scope = self.code(), ValueScope()
            scores = [code.value(e, scope, self._stage_input(k), head_index(self.p, k, str(h)))
                      for h in range(n)]
        for h, v in enumerate(scores):
            e.emit(f"{self.at(s, str(h))} = {v}")
            self._running_max(e, f"m{h}", v)
        self._each_head(row, n, f"RM{k}[{{h}}, i] = m{{h}}")

    def _exp(self, row: SourceBlock, k: int) -> None:
        n = self._stage_heads(k)
        if not n:
            return super()._exp(row, k)
        self._each_head(row, n, f"m{{h}} = RM{k}[{{h}}, i]", f"t{{h}} = {self.zero}")
        flat = self._flat_entries(row, k)
        if flat:
            flat.emit(f"v = {self.exp}(S{k}f[e] - {self._by_head([f'm{h}' for h in range(n)])})")
            flat.emit(f"S{k}f[e] = v")
            for h in range(n):
                flat.emit(f"t{h} += v if hh == np.uint64({h}) else {self.zero}")
        else:
            row.emit(self.own_edges)
            at = self.at(f"S{k}", "{h}")
            self._each_head(row.nested(), n, f"v = {self.exp}({at} - m{{h}})", f"{at} = v",
                            "t{h} += v")
        self._each_head(row, n, f"RS{k}[{{h}}, i] = t{{h}}")

    def _norm(self, row: SourceBlock, k: int) -> None:
        n = self._stage_heads(k)
        if not n:
            return super()._norm(row, k)
        row.emit("if hi > lo:")
        body = row.nested()
        self._each_head(body, n, f"inv{{h}} = {self.one} / RS{k}[{{h}}, i]")
        flat = self._flat_entries(body, k)
        if flat:
            flat.emit(f"S{k}f[e] *= {self._by_head([f'inv{h}' for h in range(n)])}")
            return
        body.emit(self.own_edges)
        self._each_head(body.nested(), n, f"{self.at(f'S{k}', '{h}')} *= inv{{h}}")

    def _flat_stages(self) -> list[int]:
        """The softmax stages whose exponentials and normalisation walk the row's entries of
        ``S<k>`` flat: heads written out, a power of two of them."""
        return [k for k in self.p.softmaxes
                if (n := self._stage_heads(k)) and n & (n - 1) == 0]

    def _flat_entries(self, row: SourceBlock, k: int) -> SourceBlock | None:
        """For a stage of :meth:`_flat_stages`: the loop over the row's ``H (hi − lo)``
        entries of ``S<k>`` through its flat view ``S<k>f`` by an unsigned index ``e`` (its
        head ``hh = e mod H``, a mask), whose body the caller writes; else None.

        An edge's ``H`` entries are side by side, so one vector holds ``8 / H`` edges'
        heads, each lane's value chosen by selects on ``hh``; the loop over edges with the
        heads written out in its body did not vectorise, so the flat walk is the faster one
        (``docs/performance.md``)."""
        if k not in self._flat_stages():
            return None
        n = self._stage_heads(k)
        row.emit(f"for e in range(lo * np.uint64({n}), hi * np.uint64({n})):")
        body = row.nested()
        body.emit(f"hh = e & np.uint64({n - 1})")
        return body

    @staticmethod
    def _by_head(values: list[str]) -> str:
        """The value of entry ``e``'s head ``hh``: ``values[hh]``, as selects (which
        vectorise)."""
        return selects(values, lambda h: f"hh == np.uint64({h})")

    # ------------------------------------------------------------------ lanes
    def _lane_count(self, row: str) -> str:
        """The trip count of a loop over the lanes of ``row``: ``heads · f`` written in from
        four heads on, the row's length below. From four heads on the constant count lets
        LLVM vectorise the loop and the pass gets faster; with fewer heads (2 × 16, 3 × 8)
        LLVM unrolls the loop whole and leaves it scalar, which is slower than a count read
        at run time (``docs/performance.md`` records the measurements)."""
        n = _lanes(self.p)
        return str(n * lane_width(self.p)) if n >= 4 else f"{row}.shape[0]"

    def _flat_rows(self, body: SourceBlock, *names: str) -> None:
        """``<name>f``: the (rows, heads · f) view of each (rows, heads, f) array, and the
        lane bounds ``hb<h> = h · f`` of the heads (the messages' width ``f``)."""
        for name in names:
            body.emit(f"{name}f = {name}.reshape(({name}.shape[0], "
                      f"{name}.shape[1] * {name}.shape[2]))")
        for h in range(1, _lanes(self.p)):
            body.emit(f"hb{h} = {h * lane_width(self.p)}")

    @staticmethod
    def _by_lane(values: list[str]) -> str:
        """The value of lane ``c``'s head: ``values[h]`` for ``hb<h> ≤ c < hb<h+1>``, as
        selects on ``c`` (which vectorise; a loop of one head's ``f`` lanes is below the
        vector loop's width and runs scalar)."""
        return selects(values, lambda h: f"c < hb{h + 1}")

    def _forward_setup(self, body: SourceBlock) -> None:
        if _lanes(self.p):
            self._flat_rows(body, "X", "Z")
        if self._score_lanes is not None:
            self._lane_arrays(body, *self._score_lanes)
        for k in self._flat_stages():
            body.emit(f"S{k}f = S{k}.reshape(S{k}.shape[0] * S{k}.shape[1])")

    def _column_setup(self, body: SourceBlock) -> None:
        if _lanes(self.p):
            self._flat_rows(body, "X", "dZ", "dX")
            lanes = self._column_score_lanes()
            if lanes is not None:
                self._lane_arrays(body, *lanes, grads={"col"})

    def _aggregate_heads(self, row: SourceBlock) -> bool:
        r"""The sink of a multi-head sum of weighted messages over the row's lanes, edge by
        edge: :math:`Z_{i,c} \mathrel{+}= w_{p,h(c)} X_{j,c}`; False (nothing written) for
        any other sink."""
        n = _lanes(self.p)
        if not n:
            return False
        lanes = self._lane_count("zi")
        row.emit("zi = Zf[i]")
        row.emit(f"for c in range({lanes}):")
        row.nested().emit(f"zi[c] = {self.zero}")
        self._zero_appended(row, "ZE[i]")
        e = self._edges(row)
        e.emit("xj = Xf[j]")
        code, scope, r = self.code(), ValueScope(), self.s.root
        w = [code.value(e, scope, r, head_index(self.p, r, str(h))) for h in range(n)]
        e.emit(f"for c in range({lanes}):")
        e.nested().emit(f"zi[c] += {self._by_lane(w)} * xj[c]")
        for h in range(n):
            self._add_appended(e, w[h], str(h))
        return True

    def _column_lanes(self, e: SourceBlock, x: int, kinds: set[str]) -> bool:
        r"""The column pass at edge ``(i, j)`` over the lanes of its heads: the dots
        :math:`g_h = \langle dZ_{i,h}, X_{j,h}\rangle`, each over its head's ``f`` lanes
        (a constant count: one vector product and a sum), each head's cotangents, then
        :math:`dX_{j,c} \mathrel{+}= w_{h(c)}\, dZ_{i,c}`; False (nothing written) unless
        :func:`_lanes`."""
        n = _lanes(self.p)
        if not n:
            return False
        p, f = self.p, lane_width(self.p)
        e.emit("dzi = dZf[i]")
        e.emit("xj = Xf[j]")
        for h in range(n):              # head h's lanes: h f, …, h f + f − 1
            e.emit(f"g{h} = _dot_at(dzi, xj, {h * f}, {f}){self._appended_dot(str(h))}")
        lanes = self._column_score_lanes() if "col" in kinds else None
        ebs = []
        for h in range(n):
            hv = head_index(p, self.s.root, str(h))
            e.emit(f"psi = S{p.softmax}[p, {h}]")
            e.emit(f"g = g{h}")
            factor = self._column_weight(e, hv)
            e.emit(f"w{h} = w")
            if lanes is None:
                self._column_cotangents(e, x, kinds, hv, str(h), factor)
                continue
            # each head's eb, then what they give the columns' operands over the lanes
            self._column_cotangents(e, x, kinds - {"col"}, hv, str(h), factor)
            ebs.append(e.fresh("eb"))
            e.emit(f"{ebs[-1]} = eb")
        if lanes is not None:
            self._lane_reverse(e, x, ebs, {"col"}, *lanes)
        e.emit("dxj = dXf[j]")
        e.emit(f"for c in range({self._lane_count('dxj')}):")
        e.nested().emit(f"dxj[c] += {self._by_lane([f'w{h}' for h in range(n)])} * dzi[c]")
        return True
