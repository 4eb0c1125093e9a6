"""``python -m bench ...`` from the repository root: the harness in :mod:`gblas_gnn.bench`."""

from gblas_gnn.bench import main

raise SystemExit(main(reexec=True))
