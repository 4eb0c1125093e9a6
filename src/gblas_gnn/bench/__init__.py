"""Benchmark harness: our layers against PyTorch Geometric, and kernel micro-benchmarks.

``main(argv)`` is the command line (``python -m bench`` from the repository root,
``python -m gblas_gnn.bench`` anywhere); see :mod:`gblas_gnn.bench.command`. Torch and PyG
are imported only inside the functions that need them, so importing this package (or
``gblas_gnn``) does not load them.

Modules, one job each: :mod:`.cases` (cases and their data), :mod:`.layers` (our layers and
PyG's with weights copied), :mod:`.pair` (the callables timed), :mod:`.agreement`,
:mod:`.timing`, :mod:`.baselines` (plain SpMM), :mod:`.threads`, :mod:`.rss` and
:mod:`.guard` (memory readings and limits), :mod:`.memory` and :mod:`.epoch` (fresh-process
workers), :mod:`.run` (one case end to end), :mod:`.report` (JSON, markdown, PNG),
:mod:`.kernels` and :mod:`.burble` (micro-benchmarks), :mod:`.environment`.
"""

from __future__ import annotations

from .command import main

__all__ = ["main"]
