"""Generated kernel modules on disk, keyed by the structure they were generated from.

A generator turns a :class:`~.plan.Plan` into the source of a Python module of kernels; the
module is written to a cache folder under a name that hashes that source, and imported from
there, so a formulation is generated (and its kernels compiled, with the compiler's own cache
beside the source) once per machine. In a process the module is found again by a key that
hashes the structure's :attr:`~.program.Structure.kernel_signature` (every extent above one
erased: the kernels read their sizes from their arrays; and its numbers erased, which the
cpu's kernels read at run time), the generator's version and whatever else of the plan a
generator writes into the source (the cpu's head counts, the cuda generator's numbers). One
formulation at several feature widths, or at several values of a slope, shares a module,
and so do two structures whose kernels are the same text (the test suite's 302 modules were
257 sources): each is compiled once.

Processes that share the cache (the ranks of an MPI job, test workers, notebook kernels)
compile each kernel once between them: :class:`LockedKernel` takes an exclusive lock per
kernel for a call with argument types its process has not called it with yet, so the first
process compiles and writes numba's cache while the others wait, then load the machine code
from it.

A module that says so (``REMAINDER_LANES`` above 0) has its kernels compiled with the
remainders of LLVM's vector loops vectorised (:func:`vectorised_remainders`): a loop over
one head's channels is shorter than a vector loop's step and would otherwise run scalar.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import ModuleType

import llvmlite.binding as llvm
import numba

from ..ir.plan import Plan

try:                                    # POSIX; elsewhere processes compile independently
    import fcntl
except ImportError:                     # pragma: no cover
    fcntl = None

__all__ = ["cache_dir", "signature_key", "load_module", "exclusive", "LockedKernel",
           "locked_kernel", "type_key", "vectorised_remainders", "REMAINDER_LANES"]

#: the lanes of the vector loop LLVM gives a vectorised loop's remainder in the kernels
#: (one 256-bit vector of float32)
REMAINDER_LANES = 8
_EPILOGUE_OPTION = "-epilogue-vectorization-force-VF"
_COMPILING = threading.RLock()


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
    """The module of the structure ``key`` (memoised in ``loaded``): its source from
    ``source()``, written to ``directory`` under a name hashing the text (the prefix of
    ``key`` before its first ``_``, then 24 hex digits) unless the file is there (written
    atomically: concurrent processes never read half a file), imported as
    ``<package>.<name>``; structures with the same source share it."""
    mod = loaded.get(key)
    if mod is not None:
        return mod
    text = source()
    name = key.split("_", 1)[0] + "_" + hashlib.sha256(text.encode()).hexdigest()[:24]
    mod = loaded.get(name)
    if mod is None:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{name}.py"
        if not path.exists() or path.read_text() != text:
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(text)
            os.replace(tmp, path)
        spec = importlib.util.spec_from_file_location(f"{package}.{name}", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        loaded[name] = mod
    loaded[key] = mod
    return mod


@contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on the file ``path`` (created if missing) for the
    duration: one process of the machine at a time runs the body."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        if fcntl is None:               # pragma: no cover
            yield
            return
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def type_key(a) -> tuple:
    """What of an argument decides the machine code numba compiles for it (of a tuple: of
    each of its items)."""
    if isinstance(a, tuple):
        return tuple(map(type_key, a))
    dtype = getattr(a, "dtype", None)
    if dtype is None:
        return (type(a),)
    flags = getattr(a, "flags", None)
    layout = (flags.c_contiguous, flags.f_contiguous) if flags is not None else ()
    return (dtype.str, getattr(a, "ndim", 0), *layout)


@contextmanager
def vectorised_remainders(lanes: int = REMAINDER_LANES) -> Iterator[None]:
    r"""Compile in the body with LLVM's *epilogue vectorisation* at ``lanes`` lanes, then set
    LLVM back to its default (no other code of the process is compiled so).

    LLVM vectorises a loop whose trip count ``N`` is known only at run time in steps of
    ``VF · IC`` lanes (8 float32 in a 256-bit vector, interleaved 4 times: 32) and runs
    the remainder, :math:`N \bmod (VF \cdot IC)`, as a scalar loop. A loop over one head's
    channels (``f = 8`` of GATv2 4 × 8, whose root reads ``R[i, h, c]``, ``C[j, h, c]`` and
    ``a[h, c]``) never reaches the vector body, and ran scalar in every pass. With the
    remainder given a vector loop of ``lanes`` lanes, such a loop is one vector step
    (``docs/performance.md``, multi-head attention, has the measurements). The option is
    LLVM's ``-epilogue-vectorization-force-VF``, a process-wide setting: it is set for the
    duration of the body only, under a lock, so that two threads compiling at once do not
    reset it under each other. The result of a loop is the same bits either way unless the
    loop reduces in ``fastmath`` (a vectorised remainder then adds its terms in another
    order)."""
    with _COMPILING:
        llvm.set_option("", f"{_EPILOGUE_OPTION}={int(lanes)}")
        try:
            yield
        finally:
            llvm.set_option("", f"{_EPILOGUE_OPTION}=1")


class LockedKernel:
    """A generated kernel whose calls with argument types new to this process run under the
    kernel's lock (:func:`exclusive`): the first process to get it compiles and fills
    numba's cache, and every process after it loads the compiled code from there instead
    of compiling the same kernel again at the same time on the same cores. With
    ``remainder_lanes`` above 0 it is compiled with its loops' remainders vectorised at
    that many lanes (:func:`vectorised_remainders`)."""

    __slots__ = ("fn", "lock", "remainder_lanes", "_seen", "_addresses")

    def __init__(self, fn: Callable, lock: Path, remainder_lanes: int = 0):
        self.fn, self.lock, self.remainder_lanes = fn, lock, int(remainder_lanes)
        self._seen, self._addresses = set(), {}

    def _compiling(self):
        """The context of a compile: the kernel's lock, and the remainders' vector loops
        where asked for."""
        stack = ExitStack()
        stack.enter_context(exclusive(self.lock))
        if self.remainder_lanes:
            stack.enter_context(vectorised_remainders(self.remainder_lanes))
        return stack

    def __call__(self, *args):
        return self.call_keyed(type_key(args), *args)

    def call_keyed(self, key: tuple, *args):
        """The kernel's call with ``key``, :func:`type_key` of ``args`` or of what decides
        their types, computed by the caller (once for several kernels' calls)."""
        if key in self._seen:
            return self.fn(*args)
        with self._compiling():
            out = self.fn(*args)
        self._seen.add(key)
        return out

    def address(self, key: tuple, *args) -> int:
        """The address of the machine code of a numba CPU kernel compiled for the types of
        ``args`` (compiled now, under the lock, where this process has not yet), for a
        caller that calls it through a pointer (:mod:`gblas_gnn.executors.cpu._share_driver`);
        ``key`` as for :meth:`call_keyed`. The code stays loaded as long as the kernel's
        dispatcher."""
        found = self._addresses.get(key)
        if found is None:
            signature = tuple(map(numba.typeof, args))
            with self._compiling():
                self.fn.compile(signature)
            compiled = self.fn.overloads[signature]
            found = self._addresses[key] = compiled.library.get_pointer_to_function(
                compiled.fndesc.llvm_func_name)
        return found


_KERNELS: dict[tuple[str, str], LockedKernel] = {}


def locked_kernel(directory: Path, mod: ModuleType, name: str) -> LockedKernel:
    """The kernel ``name`` of the generated module ``mod`` (loaded from ``directory``) as a
    :class:`LockedKernel` (one per kernel and process), its remainders vectorised where the
    module's ``REMAINDER_LANES`` asks for it."""
    key = (mod.__name__, name)
    found = _KERNELS.get(key)
    if found is None or found.fn is not getattr(mod, name):
        stem = mod.__name__.rsplit(".", 1)[-1]
        found = _KERNELS[key] = LockedKernel(getattr(mod, name),
                                             directory / ".locks" / f"{stem}.{name}.lock",
                                             getattr(mod, "REMAINDER_LANES", 0))
    return found
