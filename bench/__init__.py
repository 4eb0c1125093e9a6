"""Benchmark harness: our layers against PyTorch Geometric and DGL, and kernel
micro-benchmarks.

``main(argv)`` is the command line, ``python -m bench {run,kernels,peers,...} ...`` from a
checkout (the repository root as working directory or on ``PYTHONPATH``); see
:mod:`bench.command`.
It is not part of the installed ``gblas_gnn`` package: it needs torch, PyG, matplotlib and
psutil (the ``bench`` extra) and uses the library only through its public modules. Torch and
PyG are imported only inside the functions that need them, so importing this package does
not load them.

Modules, one job each: :mod:`.cases` (cases and their data), :mod:`.layers` (the layer rows:
ours, PyG's, one set of weights), :mod:`.mapping` (where each weight sits in PyG's and DGL's
modules), :mod:`.pair` (the callables timed), :mod:`.agreement`, :mod:`.timing`,
:mod:`.baselines` (plain SpMM), :mod:`.threads`, :mod:`.rss` and
:mod:`.guard` (memory readings and limits), :mod:`.memory` and :mod:`.epoch` (fresh-process
workers), :mod:`.run` (one case end to end), :mod:`.report` (JSON, markdown, PNG),
:mod:`.kernels` and :mod:`.burble` (micro-benchmarks), :mod:`.environment`. DGL runs in
an environment of its own (:mod:`.peer_env`, ``python -m bench peers --setup``), in a worker
process (:mod:`.dgl_worker`, :mod:`.dgl_layers`) that :mod:`.peer_client` drives.
"""

from __future__ import annotations

from .command import main

__all__ = ["main"]
