"""Benchmark harness: our layers against PyTorch Geometric and DGL, and kernel
micro-benchmarks.

``main(argv)`` is the command line, ``python -m bench {run,kernels,peers,...} ...`` from a
checkout (the repository root as working directory or on ``PYTHONPATH``); see
:mod:`bench.command`.
It is not part of the installed ``gblas_gnn`` package: it needs torch, PyG, matplotlib and
psutil (the ``bench`` extra) and uses the library only through its public modules. Torch and
PyG are imported only inside the functions that need them, so importing this package does
not load them.

Grouped by study (``bench/README.md`` lists the groups and the subcommands):
:mod:`bench.core` (infrastructure every study shares: cases, timing, agreement, threads,
memory readings and limits, worker plumbing, environment), :mod:`bench.layers` (``run``: our
layers against PyG's), :mod:`bench.peers` (PyG's and DGL's weight maps, DGL in an environment
and worker process of its own), :mod:`bench.distributed` (``dist``, ``comm``, ``scale``: MPI jobs),
:mod:`bench.kernels` (``kernels``, ``cuda-kernels``), :mod:`bench.revisions` (``revisions``)
and :mod:`bench.accuracy` (Planetoid accuracy through the command). Results are written to
``bench/results/current/`` (``bench/results/README.md`` lists them).
"""

from __future__ import annotations

from .command import main

__all__ = ["main"]
