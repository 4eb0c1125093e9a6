"""A record of what numba compiles, to find where a cold start's time goes.

With ``GBLAS_GNN_COMPILE_LOG`` set to a file, every process that imports ``gblas_gnn`` (test
workers, the ranks of an MPI job, notebook kernels) appends one JSON line per function
signature numba compiles (a load from numba's cache is not a compile and is not recorded):

``{"pid", "function", "module", "types", "seconds", "test"}``

``seconds`` is the outermost compile's wall time (a helper compiled inside a kernel's compile
is part of the kernel's), ``module`` the generated module's file name or the library
module, and ``test`` the pytest test that asked (``PYTEST_CURRENT_TEST``, which a test's
subprocesses inherit), else None. Lines are appended whole (one ``write`` of each line to a
file opened for appending), so concurrent processes do not interleave them.
:func:`summarise` reads them back (``python -m gblas_gnn.codegen.compile_report LOG [N]`` prints
the totals and the N tests and functions that compiled longest).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict
from pathlib import Path

__all__ = ["ENV", "install", "read", "summarise"]

#: the variable naming the log file
ENV = "GBLAS_GNN_COMPILE_LOG"

_installed = False


class _Recorder:
    """What a listener of numba's ``numba:compile`` events does: write the outermost ones
    (:func:`install` makes it a :class:`numba.core.event.Listener`)."""

    def __init__(self, path: str):
        self.path = path
        self.local = threading.local()

    def on_start(self, event) -> None:
        stack = self.local.__dict__.setdefault("stack", [])
        stack.append(time.perf_counter())

    def on_end(self, event) -> None:
        stack = self.local.stack
        started = stack.pop()
        if stack:                                   # a helper compiled inside a kernel
            return
        data = event.data or {}
        dispatcher = data.get("dispatcher")
        fn = getattr(dispatcher, "py_func", None)
        line = json.dumps({
            "pid": os.getpid(),
            "function": getattr(fn, "__qualname__", repr(dispatcher)),
            "module": Path(getattr(getattr(fn, "__code__", None), "co_filename", "?")).name,
            "types": [str(t) for t in data.get("args", ())],
            "seconds": round(time.perf_counter() - started, 4),
            "test": os.environ.get("PYTEST_CURRENT_TEST"),
        }) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def install() -> bool:
    """Record this process's compiles when ``$GBLAS_GNN_COMPILE_LOG`` names a file (once per
    process); whether it records."""
    global _installed
    path = os.environ.get(ENV)
    if not path or _installed:
        return _installed
    from numba.core import event

    # a numba listener only now: numba is imported when a log is asked for
    listener = type("CompileRecorder", (_Recorder, event.Listener), {})
    event.register("numba:compile", listener(path))
    _installed = True
    return True


def read(path: str | Path) -> list[dict]:
    """The records of a log (a line cut short by a killed process is skipped)."""
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _test_name(test: str | None) -> str:
    """``path::name[param] (call)`` without pytest's phase suffix."""
    return "(outside a test)" if not test else test.rsplit(" (", 1)[0]


def summarise(records: list[dict]) -> dict:
    """Totals of a log: ``compiles`` and ``seconds`` overall; ``by_test`` and
    ``by_function`` ({name: (compiles, seconds)}, most seconds first); ``functions`` (the
    distinct functions compiled) and ``processes``."""
    by_test: dict[str, list] = defaultdict(lambda: [0, 0.0])
    by_function: dict[str, list] = defaultdict(lambda: [0, 0.0])
    for r in records:
        for table, key in ((by_test, _test_name(r["test"])),
                           (by_function, f"{r['module']}:{r['function']}")):
            table[key][0] += 1
            table[key][1] += r["seconds"]

    def ranked(table):
        return {k: (n, round(s, 2)) for k, (n, s) in
                sorted(table.items(), key=lambda kv: -kv[1][1])}

    return {"compiles": len(records), "seconds": round(sum(r["seconds"] for r in records), 2),
            "functions": len(by_function), "processes": len({r["pid"] for r in records}),
            "by_test": ranked(by_test), "by_function": ranked(by_function)}

