"""``python -m gblas_gnn``: the ``gblas-gnn`` command without the console script."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
