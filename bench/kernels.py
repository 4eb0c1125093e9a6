"""Kernel micro-benchmarks; kept so that ``python bench/kernels.py`` still works.

    python bench/kernels.py [--n 100000] [--degree 16] [--k 32] [--threads 2] [--reps 7]

is ``python -m bench kernels ...`` (see :mod:`gblas_gnn.bench.kernels`).
"""

import sys

from gblas_gnn.bench import main

if __name__ == "__main__":
    raise SystemExit(main(["kernels", *sys.argv[1:]], reexec=True))
