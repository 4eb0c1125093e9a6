"""The numba-cuda kernels of edge programs, generated (:mod:`._program_source`) and cached
on disk by the structure's kernel signature, beside the cpu executor's generated modules:
``<cpu cache>/../cuda_kernels`` (``~/.cache/gblas_gnn/cuda_kernels`` by default; the cpu
folder moves with ``$GBLAS_GNN_KERNEL_CACHE``, and this one with it:
:func:`gblas_gnn.codegen.kernel_cache.cache_dir`). On a GPU numba-cuda's
own cache (``cache=True``) keeps the compiled kernels beside the source; the simulator
interprets the same source.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from ..codegen.kernel_cache import cache_dir as _cache_dir
from ..codegen.kernel_cache import load_module
from ..codegen.kernel_cache import signature_key as _signature_key
from ..ir.plan import Plan
from ._program_source import source

__all__ = ["kernels", "signature_key", "cache_dir", "GENERATOR_VERSION"]

#: bumped whenever the generated source changes shape (old cached modules are then unused)
GENERATOR_VERSION = 10


def cache_dir() -> Path:
    """Where the generated cuda modules are written: a sibling of the cpu ones."""
    return _cache_dir("cuda")


def signature_key(p: Plan) -> str:
    """The module name of ``p``'s kernels (:func:`gblas_gnn.codegen.kernel_cache.
    signature_key`), with the structure's numbers: the generator writes them into the
    source (:meth:`gblas_gnn.codegen.scalar.Leaves.number`), where the cpu's kernels read
    them at run time."""
    return _signature_key(p, GENERATOR_VERSION, prefix="cuda_", extra=p.structure.numbers)


_LOADED: dict[str, ModuleType] = {}


def kernels(p: Plan) -> ModuleType:
    """The module of ``p``'s kernels, from the disk cache or written now."""
    return load_module(cache_dir(), signature_key(p), lambda: source(p),
                       "gblas_gnn_cuda_kernels", _LOADED)
