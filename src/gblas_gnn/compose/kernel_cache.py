"""Generated kernel modules on disk, keyed by the structure they were generated from.

A generator turns a :class:`~.plan.Plan` into the source of a Python module of kernels; the
module is written to a cache folder under a name that hashes the structure's
:attr:`~.program.Structure.kernel_signature` (every extent above one erased: the kernels read
their sizes from their arrays), the generator's version and whatever else of the plan a
generator writes into the source (the cpu's head counts), and imported from there, so a
formulation is generated (and its kernels compiled, with the compiler's own cache beside
the source) once per machine. Two formulations never share a module; one formulation at
several feature widths does.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from .plan import Plan

__all__ = ["cache_dir", "signature_key", "load_module"]


def cache_dir(executor: str = "cpu") -> Path:
    """Where ``executor``'s generated modules are written: ``$GBLAS_GNN_KERNEL_CACHE``
    (default ``~/.cache/gblas_gnn/kernels``) for the cpu executor's, and a sibling folder
    ``<executor>_kernels`` of it for another's (the cuda executor's:
    ``~/.cache/gblas_gnn/cuda_kernels``), which moves with the variable."""
    env = os.environ.get("GBLAS_GNN_KERNEL_CACHE")
    cpu = Path(env) if env else Path.home() / ".cache" / "gblas_gnn" / "kernels"
    return cpu if executor == "cpu" else cpu.parent / f"{executor}_kernels"


def signature_key(p: Plan, version: int, prefix: str = "prog_", extra: tuple = ()) -> str:
    """A file name for the kernels of ``p``'s structure made by a generator of ``version``;
    ``extra``: what else of the plan the generator writes into the source (the cpu's head
    counts)."""
    key = (version, p.structure.kernel_signature)
    text = repr((*key, extra) if extra else key)
    return prefix + hashlib.sha256(text.encode()).hexdigest()[:24]


def load_module(directory: Path, key: str, source: Callable[[], str], package: str,
                loaded: dict[str, ModuleType]) -> ModuleType:
    """The module ``key`` of ``directory`` (memoised in ``loaded``): its source from
    ``source()`` is written there first unless the file already holds exactly that text
    (written atomically: concurrent processes never read half a file), then imported as
    ``<package>.<key>``."""
    mod = loaded.get(key)
    if mod is not None:
        return mod
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{key}.py"
    text = source()
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(f"{package}.{key}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    loaded[key] = mod
    return mod
