"""``python -m gblas_gnn.bench``."""

from . import main

raise SystemExit(main(prog="python -m gblas_gnn.bench", reexec=True))
