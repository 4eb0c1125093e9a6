"""Every kernel of the ``cuda`` executor with the argument types it is launched with: the
hand-written ones (:data:`KERNELS`) and those generated for a representative set of
formulations (:func:`gblas_gnn.gpu._program_catalogue.all_kernels`).

The executor launches each kernel with C-contiguous device arrays of one float type ``F``
(float32 or float64) and one index type ``I`` (int32, or int64 for patterns with 2³¹ or
more entries; :func:`~._pattern.index_dtype`), Python booleans and integers (numba types them
``boolean`` and ``int64``) and scalars of ``F``. :func:`variants` lists every combination, so
that :mod:`.compile` can build each one for a GPU architecture, without a GPU, exactly as a
launch would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from numba import boolean, float32, float64, int32, int64, uint64, void

from . import _edge_kernels as edge
from . import _semiring_kernels as srk
from . import _sparse_kernels as sparse

__all__ = ["KernelSpec", "KERNELS", "spec_id", "variants", "contiguous"]


@dataclass(frozen=True)
class KernelSpec:
    """A kernel, how it is launched (``"group"``: a lane group per item; ``"element"``: a
    thread per entry) and its argument types as a function of ``(F, I)``."""

    name: str
    kernel: object
    launch: str
    args: Callable[[object, object], tuple]
    float_types: tuple = (float32, float64)


def contiguous(t, dims: int = 1):
    """A C-contiguous array type of ``dims`` dimensions."""
    return t[(slice(None),) * (dims - 1) + (slice(None, None, 1),)]


_c = contiguous


def _spmm_args(F, I):
    return (_c(int64), _c(int64), _c(I), _c(I), boolean, _c(F), _c(F, 2), F, int64,
            _c(F, 2))


def _spmm_avg_args(F, I):
    return (_c(int64), _c(I), _c(I), boolean, _c(F), _c(F, 2), _c(F, 2))


def _spmm_combine_args(F, I):
    return (_c(int64), _c(int64), _c(F, 2), _c(F, 2))


def _spmm_specs() -> list[KernelSpec]:
    """The two kernels of every shipped semiring's SpMM (:class:`~._sparse_kernels.SpMM`)."""
    specs = []
    for algebra, (kernels, _) in srk.SHIPPED.items():
        name = f"spmm_{algebra.label}"
        specs += [KernelSpec(name, kernels.fold, "group", _spmm_args),
                  KernelSpec(f"{name}_combine", kernels.combine, "group", _spmm_combine_args)]
    return specs


def _specs() -> list[KernelSpec]:
    p64, f1, f2, i1 = _c(int64), (lambda F: _c(F)), (lambda F: _c(F, 2)), (lambda I: _c(I))
    specs = [
        KernelSpec("segment_reduce", sparse.segment_reduce, "group",
                   lambda F, I: (p64, i1(I), boolean, f2(F), int64, f2(F))),
        KernelSpec("edge_dots", sparse.edge_dots, "group",
                   lambda F, I: (p64, i1(I), f2(F), f2(F), _c(int64, 2), boolean, f1(F))),
        KernelSpec("head_dots", sparse.head_dots, "group",
                   lambda F, I: (f2(F), f2(F), int64, f2(F))),
        KernelSpec("softmax_rows", sparse.softmax_rows, "group",
                   lambda F, I: (p64, f1(F), f1(F))),
        KernelSpec("softmax_backward_rows", sparse.softmax_backward_rows, "group",
                   lambda F, I: (p64, f1(F), f1(F), f1(F))),
        *_spmm_specs(),
        KernelSpec("spmm_avg", sparse.spmm_avg, "group", _spmm_avg_args),
        KernelSpec("argext_forward", sparse.argext_forward, "group",
                   lambda F, I: (p64, i1(I), f1(F), f2(F), boolean, f2(F), _c(int64, 2))),
        KernelSpec("argext_features", sparse.argext_features, "group",
                   lambda F, I: (p64, i1(I), i1(I), f1(F), _c(int64, 2), f2(F), f2(F))),
        KernelSpec("edge_unary", edge.edge_unary, "element",
                   lambda F, I: (f1(F), int64, F, f1(F))),
        KernelSpec("edge_binary", edge.edge_binary, "element",
                   lambda F, I: (f1(F), f1(F), int64, f1(F))),
        KernelSpec("edge_gathered", edge.edge_gathered, "element",
                   lambda F, I: (f1(F), f1(F), i1(I), int64, f1(F))),
        KernelSpec("edge_outer", edge.edge_outer, "element",
                   lambda F, I: (f1(F), boolean, f1(F), f1(F), i1(I), i1(I), f1(F))),
        KernelSpec("leaky_relu_backward", edge.leaky_relu_backward, "element",
                   lambda F, I: (f1(F), f1(F), F, f1(F))),
        KernelSpec("dropout_edges", edge.dropout_edges, "element",
                   lambda F, I: (i1(I), i1(I), uint64, float64, F, f2(F))),
        KernelSpec("keep_mask", edge.keep_mask, "element",
                   lambda F, I: (p64, uint64, float64, _c(boolean, 2)), float_types=(None,)),
    ]
    return specs


#: every hand-written kernel of the executor
KERNELS: list[KernelSpec] = _specs()


def spec_id(spec: KernelSpec) -> str:
    """A unique name of a catalogue entry (a generated kernel's name with its float type)."""
    return spec.name if ":" not in spec.name else f"{spec.name}/{spec.float_types[0]}"


def variants(spec: KernelSpec) -> Iterator[tuple[str, object]]:
    """``(label, signature)`` of every type combination ``spec`` is launched with (e.g.
    ``"float32/int32"``; a kernel without index arguments has one variant per float type)."""
    for F in spec.float_types:
        indexed = spec.args(F, int32) != spec.args(F, int64)
        for I in (int32, int64) if indexed else (None,):
            label = "/".join(str(t) for t in (F, I) if t is not None) or "bool"
            yield label, void(*spec.args(F, int64 if I is None else I))
