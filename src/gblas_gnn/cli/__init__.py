"""The ``gblas-gnn`` command (also ``python -m gblas_gnn``), one module per job.

- :mod:`gblas_gnn.cli.command`: argument parsing, checks and dispatch (``train``, ``infer``,
  ``convert``); the per-model defaults ``DEFAULTS``.
- :mod:`gblas_gnn.cli.facts`: the facts of a run its summary states (executor, grid, memory,
  bytes sent).
- :mod:`gblas_gnn.cli.report`: what the command prints (help epilogs, summary, Ctrl-C line).

The data set specs it reads (``csbm``, ``planetoid:DIR/cora``, ``npz:PATH``, ``ogb:DIR``,
``kronecker:...``) are :mod:`gblas_gnn.data.specs`, which the grid's loaders use too.

:func:`main` is the console script's entry point.
"""

from __future__ import annotations

from .command import main

__all__ = ["main"]
