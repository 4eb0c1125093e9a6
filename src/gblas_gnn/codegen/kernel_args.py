r"""The arrays of generated edge-program kernels and how scalar code reads them: shared by
the kernel generators (the ``cpu`` executor's numba kernels, the ``cuda`` executor's
numba-cuda kernels).

A generated kernel takes the pattern's buffers (``indptr, indices``, the CSC view ``colptr,
perm, crow``, global ids ``rid, cid``, A's values ``AV``), then one array per operand slot
(:class:`Layout`), the softmax buffers ``S<k>`` and the sink's arrays. At an edge ``(i, j)``
at CSR position ``p`` the scalar code of :mod:`.scalar` reads them through
:class:`ArrayLeaves`; cotangents go to ``dR<s>[i, …]`` (read by target), ``dC<s>[j, …]``
(read by source), ``dP<s>[i, …]`` (a parameter's partial of row ``i``), ``dEA<s>[p, …]``
(the edge's features) and ``GS<k>`` (the cotangent of an earlier softmax at the edge).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.plan import Plan
from .scalar import Leaves, SourceBlock, literal

__all__ = ["Layout", "ArrayLeaves"]


@dataclass(frozen=True)
class Layout:
    """The argument names of the generated kernels, from a plan: the pattern's buffers, then
    one array per operand slot (``R<s>`` by target, ``C<s>`` by source, ``P<s>`` parameters,
    ``E<s>`` edge values, ``EA<s>`` edge features, ``K<s>`` dropout keys, ``X`` the
    messages), the softmax buffers ``S<k>`` and the sink's arrays."""

    operands: tuple[str, ...]

    @staticmethod
    def of(p: Plan) -> Layout:
        names = []
        for slot, (role, _) in enumerate(p.structure.roles):
            prefix = {"row": "R", "col": "C", "param": "P", "edges": "E", "eattr": "EA",
                      "key": "K"}
            names.append("X" if role == "x" else f"{prefix[role]}{slot}")
        return Layout(tuple(names))


class ArrayLeaves(Leaves):
    """Operand reads at an edge ``(i, j)`` at CSR position ``p`` and where cotangents go.

    Per-edge buffers (``S<k>``, ``GS<k>``) are edge-major, ``[p, head]``, unless
    :attr:`head_major` (``[head, p]``); a channel loop reads (and accumulates) row and column
    operands through 1-D row views (:meth:`view`); a dropout scale calls the kernel module's
    ``_keep(key, head, row id, column id, p)``.
    """

    #: per-edge buffers indexed ``[head, p]`` instead of ``[p, head]``
    head_major = False
    #: the index of a parameter's partial: its row's (``i``), or a generator's other
    param_row = "i"

    def __init__(self, p: Plan, accumulate: set[str]):
        self.p = p
        self.dtype = np.dtype(p.structure.dtype)
        #: which cotangents this pass writes: "row", "col", "param", "softmax"
        self.accumulate = accumulate

    @staticmethod
    def _index(base: str, idx: tuple) -> str:
        return ", ".join((base, *idx)) if base else ", ".join(idx)

    def edge(self, name: str, head: str) -> str:
        """Element ``(edge p, head)`` of the per-edge buffer ``name``."""
        return f"{name}[{head}, p]" if self.head_major else f"{name}[p, {head}]"

    def row(self, slot, idx):
        return f"R{slot}[{self._index('i', idx)}]"

    def col(self, slot, idx):
        return f"C{slot}[{self._index('j', idx)}]"

    def param(self, slot, idx):
        return f"P{slot}[{', '.join(idx) if idx else '0'}]"

    def avals(self):
        return "AV[p]"

    def edges(self, slot):
        return f"E{slot}[p]"

    def eattr(self, slot, idx):
        return f"EA{slot}[{self._index('p', idx)}]"

    def dropout(self, op, idx, p, scale):
        slot = self.p.structure.ops[op].args[0]
        zero = literal(0.0, self.dtype)
        h = idx[0] if idx else "0"
        # a written-out head as a typed constant: a bare literal types the call as
        # ``Literal[int](h)``, and numba compiled ``_keep`` once per head (an 8-head GAT's
        # module with dropout: 8 compiles of ~0.1 s where 1 does; its passes share them)
        h = f"np.uint64({h})" if h.isdigit() else h
        return f"({scale} if _keep(K{slot}[0], {h}, rid[i], cid[j], {p}) else {zero})"

    def softmax(self, op, idx):
        return self.edge(f"S{op}", idx[0] if idx else "0")

    #: per kind of leaf read through views: its arrays' stem and the index of its row
    _VIEWED = {"row": ("R", "i"), "col": ("C", "j"), "eattr": ("EA", "p")}

    def view(self, kind, slot, prefix):
        stem, at = self._VIEWED[kind]
        return f"{stem}{slot}[{self._index(at, prefix)}]"

    def grad_view(self, kind, slot, prefix):
        if kind not in self.accumulate or (kind == "eattr" and slot not in self.p.eattrs):
            return None
        if kind == "param":
            return f"dP{slot}[{self._index(self.param_row, prefix)}]"
        stem, at = self._VIEWED[kind]
        return f"d{stem}{slot}[{self._index(at, prefix)}]"

    #: per kind of leaf: the extent of its trailing axis ``a`` in the kernel's arguments
    #: (a vertex or edge operand's first axis is the items', a dropout's heads are its key's
    #: second entry); any other kind is a softmax's buffer
    _SIZES = {"row": "R{ref}.shape[{a1}]", "col": "C{ref}.shape[{a1}]",
              "param": "P{ref}.shape[{a}]", "eattr": "EA{ref}.shape[{a1}]",
              "dropout": "int(K{ref}[1])"}

    def size(self, kind, ref, axis):
        template = self._SIZES.get(kind)
        if template is None:
            return f"S{ref}.shape[{0 if self.head_major else 1}]"
        return template.format(ref=ref, a=axis, a1=1 + axis)

    def receives(self, kind, ref):
        if kind == "eattr":
            return "eattr" in self.accumulate and ref in self.p.eattrs
        return kind in self.accumulate

    def add_to(self, block: SourceBlock, target: str, idx: tuple, g: str) -> None:
        """Emit ``target += g`` (a generator may guard the update)."""
        block.emit(f"{target} += {g}")

    def grad_row(self, block, slot, idx, g):
        if "row" in self.accumulate:
            self.add_to(block, f"dR{slot}[{self._index('i', idx)}]", idx, g)

    def grad_col(self, block, slot, idx, g):
        if "col" in self.accumulate:
            self.add_to(block, f"dC{slot}[{self._index('j', idx)}]", idx, g)

    def grad_param(self, block, slot, idx, g):
        if "param" in self.accumulate:          # per-row partials; a 0-d parameter is (1,)
            self.add_to(block, f"dP{slot}[{self._index(self.param_row, idx or ('0',))}]",
                        idx, g)

    def grad_eattr(self, block, slot, idx, g):
        # one writer per edge: each pass owns its edges; none for features read as data
        if "eattr" in self.accumulate and slot in self.p.eattrs:
            self.add_to(block, f"dEA{slot}[{self._index('p', idx)}]", idx, g)

    def grad_softmax(self, block, op, idx, g):
        if "softmax" in self.accumulate:
            self.add_to(block, self.edge(f"GS{op}", idx[0] if idx else "0"), idx, g)
