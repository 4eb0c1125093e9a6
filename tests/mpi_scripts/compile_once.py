"""Two ranks start the same composed program at the same moment on an empty kernel cache
(``GBLAS_GNN_KERNEL_CACHE`` points at a fresh folder): run with ``python -m mpi4py``.

Rank 0 prints, once, how many ranks compiled each generated kernel (numba's compile events;
a rank that found the kernel in the cache loads it and compiles nothing) and whether both
ranks computed the same result: the kernels' locks must let exactly one rank compile each.
"""

import json

import numpy as np
from mpi4py import MPI
from numba.core import event

import gblas_gnn as gg
from gblas_gnn import compose, ops

comm = MPI.COMM_WORLD
compiled: list[str] = []


class _Compiles(event.Listener):
    def on_start(self, ev):
        py_func = getattr(ev.data.get("dispatcher"), "py_func", None)
        if py_func is not None and py_func.__module__.startswith("gblas_gnn_kernels."):
            compiled.append(f"{py_func.__module__}.{py_func.__name__}")

    def on_end(self, ev):
        pass


event.register("numba:compile", _Compiles())
g = gg.Graph.from_edges(np.array([0, 1, 2, 3, 4]), np.array([1, 2, 3, 4, 0]), 5,
                        dtype=np.float64)
H = np.random.default_rng(0).standard_normal((5, 3))
comm.Barrier()                          # both ranks reach the first call together
out, pullback = compose.vjp(lambda X: ops.aggregate(ops.structure(g), X * X, "max"), H)
(dH,) = pullback(np.ones_like(out))
results = comm.gather((sorted(set(compiled)), out.tolist(), dH.tolist()), root=0)
if comm.rank == 0:
    counts: dict[str, int] = {}
    for names, _, _ in results:
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    same = all(r[1:] == results[0][1:] for r in results)
    print("compiled by ranks: " + json.dumps(counts, sort_keys=True))
    print(f"same results: {same}")
