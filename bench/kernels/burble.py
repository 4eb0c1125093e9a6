"""Which SuiteSparse kernels a call runs, read from ``gb.ss.burble``.

SuiteSparse prints its burble from C straight to file descriptor 1, past ``sys.stdout``;
:func:`capture_burble` points fd 1 at a temporary file for the duration of the call (a pipe
could fill up and block the writer).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Callable

__all__ = ["capture_burble", "parse_burble", "kernels_used"]

# one burble record: "[ GrB_mxm <description> <seconds> sec ]"
_RECORD = re.compile(r"\[\s*(G[rx]B_\w+)(.*?)([0-9.eE+-]+)\s+sec\s*\]", re.S)
# the kernel names SuiteSparse prints inside a record
_KERNEL = re.compile(r"\b(dot[234]|saxpy\d?|saxbit|colscale|rowscale|emult\w*|eWiseAdd|"
                     r"transpose|bitmap|Method \d+|shallow-op|iso \w+|in place|"
                     r"masked_dot_product|dot_product|builder|wait|to GrB_Scalar)\b")
_TRIVIAL = {"GrB_Matrix_nvals", "GrB_Vector_nvals", "GrB_Vector_extractTuples",
            "GrB_Matrix_extractTuples", "GrB_Matrix_diag", "GxB_Matrix_unpack_FullR",
            "GxB_Matrix_pack_FullR", "GrB_Matrix_new", "GrB_Vector_new", "GrB_Matrix_dup",
            "GrB_Matrix_free", "GrB_Vector_free", "GxB_Matrix_Option_get",
            "GrB_Matrix_wait", "GxB_Matrix_import_CSR",
            "GxB_Matrix_pack_CSR", "GrB_Matrix_exportHint"}


def capture_burble(fn: Callable[[], object]) -> str:
    """Run ``fn`` with burble on; return what SuiteSparse printed."""
    import graphblas as gb

    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            with gb.ss.burble:
                fn()
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        tmp.seek(0)
        return tmp.read().decode(errors="replace")


def parse_burble(text: str) -> list[dict]:
    """The non-trivial records of a burble: ``{"op", "kernels", "generic", "seconds"}``.

    ``kernels`` lists the kernel names found in the record (``dot3``, ``saxpy5``,
    ``colscale``, ...), ``generic`` is True when SuiteSparse fell back to a generic
    (non-factory) kernel.
    """
    out = []
    for op, body, secs in _RECORD.findall(text):
        if op in _TRIVIAL:
            continue
        if op in ("GxB_Matrix_unpack_CSR", "GxB_Matrix_export_CSR"):  # → numba kernel
            out.append({"op": "numba kernel over the CSR buffers", "kernels": [],
                        "generic": False, "seconds": float(secs)})
            continue
        kernels = list(dict.fromkeys(k for k in _KERNEL.findall(body)))
        out.append({"op": op, "kernels": kernels, "generic": "generic" in body,
                    "seconds": float(secs)})
    return out


def kernels_used(fn: Callable[[], object]) -> tuple[str, list[dict]]:
    """A one-line summary (``"mxm:dot3; apply:shallow-op"``) and the parsed records."""
    records = parse_burble(capture_burble(fn))
    parts = []
    for r in records:
        if not r["op"].startswith("G"):
            parts.append(r["op"])
            continue
        name = r["op"].split("_", 1)[-1].removeprefix("Matrix_").removeprefix("Vector_")
        desc = ",".join(k.replace("to GrB_Scalar", "to-scalar") for k in r["kernels"]) or "-"
        parts.append(f"{name}:{desc}" + (" (generic)" if r["generic"] else ""))
    summary = "; ".join(dict.fromkeys(parts)) or "none (numba / numpy)"
    return summary, records
