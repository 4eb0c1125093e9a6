"""The generated kernels of a representative set of formulations, with the argument types
the executor launches them with: what :mod:`.compile` and ``python -m bench cuda-kernels``
check beside the hand-written kernels.

The formulations are the built-in attention layers as compositions (:data:`FORMULATIONS`):
GAT with one and four heads (and with attention dropout, as it trains), AGNN, GATv2 and the
graph Transformer with four heads, GAT aggregating by ``max`` (the plan's ``"row"``
strategy) and HGT with two heads on a typed graph, each in float32 and float64. Their edge
programs are recorded from one forward on a tiny graph on the ``primitives`` executor (the
reference lowering: no program is generated for the cpu, though its aggregation kernels run and
are compiled the first time), and the kernels generated for them (:mod:`._program_kernels`)
are typed from their argument names (:func:`argument_type`). Nothing is recorded on import:
a test collection that lists the formulations stays cheap.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache

import numpy as np
from numba import float32, float64, int64, uint64

from .. import nn
from ..executors.primitives import PrimitivesExecutor
from ..graph import Graph
from ..hetero import HeteroGraph
from ..ir.plan import fusable, plan
from ..ir.program import Structure
from ._catalogue import KERNELS, KernelSpec, contiguous
from ._program_kernels import kernels
from ._program_source import kernel_arguments

__all__ = ["FORMULATIONS", "structures", "argument_type", "formulation_specs", "program_specs",
           "all_kernels"]


#: the formulations whose kernels are catalogued: name -> layer(dtype, executor)
FORMULATIONS: dict[str, Callable] = {
    "gat": lambda dt, ex: nn.GATConv(6, 4, heads=1, dtype=dt, executor=ex),
    "gat4": lambda dt, ex: nn.GATConv(6, 4, heads=4, dtype=dt, executor=ex),
    "gat4-dropout": lambda dt, ex: nn.GATConv(6, 4, heads=4, dropout=0.5, dtype=dt,
                                              executor=ex),
    "agnn": lambda dt, ex: nn.AGNNConv(6, dtype=dt, executor=ex),
    "gatv2-4": lambda dt, ex: nn.GATv2Conv(6, 4, heads=4, dtype=dt, executor=ex),
    "transformer4": lambda dt, ex: nn.TransformerConv(6, 4, heads=4, dtype=dt, executor=ex),
    "gat4-max": lambda dt, ex: nn.GATConv(6, 4, heads=4, aggr="max", dtype=dt, executor=ex),
    "hgt2": lambda dt, ex: nn.HGTConv({"a": 6, "b": 4}, 4, _TYPED.metadata(), heads=2,
                                      dtype=dt, executor=ex),
}

#: the typed graph the HGT formulation runs on: two vertex types, three relations
_TYPED = HeteroGraph.from_edge_index_dict(
    {("a", "r", "b"): np.array([[0, 1, 2], [1, 2, 0]]), ("b", "s", "a"): np.array([[0, 2], [0, 1]]),
     ("b", "t", "b"): np.array([[0, 1], [1, 0]])}, {"a": 3, "b": 3})


@cache
def structures(name: str, dtype: str) -> tuple[Structure, ...]:
    """The fusable edge programs of one forward of formulation ``name`` in ``dtype``."""
    found: list[Structure] = []

    class Recording(PrimitivesExecutor):
        def program_forward(self, program, keep):
            if fusable(program.structure) and program.structure not in found:
                found.append(program.structure)
            return super().program_forward(program, keep)

    layer = FORMULATIONS[name](np.dtype(dtype), Recording())
    g = Graph.from_edges(np.array([0, 1, 2, 3, 4, 4]), np.array([1, 2, 3, 4, 0, 2]), 5,
                         dtype=np.dtype(dtype))
    rng = np.random.default_rng(0)
    if isinstance(layer, nn.HGTConv):
        layer(_TYPED.astype(dtype), {t: rng.standard_normal((3, w)).astype(dtype)
                                     for t, w in layer.in_channels.items()})
    else:
        layer(g, rng.standard_normal((5, 6)).astype(dtype))
    return tuple(found)


def argument_type(name: str, structure: Structure, F, I):
    """The numba type a launch gives the kernel argument ``name`` (see
    :mod:`gblas_gnn.codegen.kernel_args` for the names), for float type ``F`` and index
    type ``I``: C-contiguous arrays, ``phase`` an integer."""
    stem, slot = re.fullmatch(r"([A-Za-z]+?)(\d*)", name).groups()
    roles = structure.roles
    if stem in ("indptr", "colptr", "rid", "cid", "clo", "chi", "cof", "rlo", "rhi", "rof"):
        return int64[::1]
    if stem == "split":
        return int64
    if stem in ("pdX", "pdC", "pdR", "pdP"):    # a long item's chunks' partials
        stem = stem[1:]
    if stem in ("indices", "perm", "crow"):
        return I[::1]
    if stem == "phase":
        return int64
    if stem in ("AV", "E"):
        return F[::1]
    if stem == "K":
        return uint64[::1]
    if stem == "NEG":
        return int64[::1]
    if stem in ("R", "C", "dR", "dC"):
        return contiguous(F, 1 + len(roles[int(slot)][1]))
    if stem in ("P", "dP"):
        return contiguous(F, max(1, len(roles[int(slot)][1])) + (stem == "dP"))
    if stem == "ARG":
        return contiguous(int64, 3)
    if stem in ("X", "Z", "dX", "dXr") or (stem == "dZ" and
                                         structure.sink[0] in ("aggregate", "spmm_t")):
        return contiguous(F, 3)
    return contiguous(F, 2)                # per-edge buffers (heads, nnz), per-row (heads, n), dZ


def _typer(structure: Structure, names: tuple[str, ...]) -> Callable:
    return lambda F, I: tuple(argument_type(n, structure, F, I) for n in names)


def formulation_specs(name: str, F) -> tuple[KernelSpec, ...]:
    """A :class:`~._catalogue.KernelSpec` per generated kernel of formulation ``name`` in
    float type ``F`` (named ``formulation:kernel``)."""
    specs = []
    for s in structures(name, str(np.dtype(F.name))):
        p = plan(s)
        mod = kernels(p)
        for kernel, names in kernel_arguments(p).items():
            specs.append(KernelSpec(f"{name}:{kernel}", getattr(mod, kernel), "group",
                                    _typer(s, names), float_types=(F,)))
    return tuple(specs)


@cache
def program_specs() -> tuple:
    """:func:`formulation_specs` of every formulation and float type."""
    return tuple(spec for name in FORMULATIONS for F in (float32, float64)
                 for spec in formulation_specs(name, F))


def all_kernels() -> list[KernelSpec]:
    """The hand-written kernels and the generated kernels of the representative
    formulations (:func:`program_specs`)."""
    return [*KERNELS, *program_specs()]
