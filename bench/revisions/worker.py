"""One side of :mod:`.compare`: our layers from one source tree, timed on request.

Started with the tree's ``src`` first on ``PYTHONPATH`` (so ``gblas_gnn`` is that tree's) and
the harness after it. Protocol on stdin/stdout, one JSON object a line: the worker answers
``{"ready": …}`` once (the library's path and the case's size), then for every request
``{"layer": NAME}`` runs one training-mode forward and one backward of that layer and answers
``{"forward": s, "backward": s}`` (the first request of a layer also builds it and warms it up,
untimed). An empty line ends it. The layer ``hgt`` is :class:`gblas_gnn.nn.HGTConv` (2 heads)
on the seeded typed graph of ``python -m bench hgt`` (:func:`bench.layers.hetero.typed_graph`)
with the case's vertex count, degree 16 and widths.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from ..core.cases import graph_from_csr, load_case_data
from ..layers.hetero import typed_graph
from ..layers.rows import make_ours, ours_graph, shared_params

__all__ = ["main"]


def _answer(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _hgt(n: int, k_in: int, k_out: int) -> tuple:
    """``(forward, backward)`` of HGT on the typed graph (module docstring)."""
    import gblas_gnn as gg

    hg = typed_graph(n, 16)
    rng = np.random.default_rng(1)
    x = {t: rng.standard_normal((c, k_in)).astype(np.float32)
         for t, c in hg.num_nodes_dict.items()}
    layer = gg.nn.HGTConv(k_in, k_out, hg.metadata(), heads=2, seed=0)
    dout = {t: rng.standard_normal((hg.num_nodes_dict[t], k_out)).astype(np.float32)
            for t in layer.dst_types}
    layer.train()
    return (lambda: layer(hg, x)), (lambda: layer.backward(dout))


def _ours(name: str, data, g, k_in: int, k_out: int) -> tuple:
    """``(forward, backward)`` of our layer ``name``, built and warmed up."""
    if name == "hgt":
        forward, backward = _hgt(data.n, k_in, k_out)
    else:
        layer = make_ours(name, k_in, k_out, seed=0)
        shared_params(name, k_in, k_out, ours=layer, seed=0)
        layer.train()
        # rows with edge features or relations
        gl = ours_graph(name, g, data.edge_index, data.edge_type)

        dZ = np.ascontiguousarray(data.dZ[:, :layer(gl, data.H).shape[1]])

        def forward():
            return layer(gl, data.H)

        def backward():
            layer.backward(dZ)
    forward()
    backward()
    return forward, backward


def main(data_path: str, threads: int) -> None:
    import gblas_gnn as gg
    from gblas_gnn.executors import get_executor

    get_executor("cpu").set_threads(threads)
    data = load_case_data(data_path)
    g = graph_from_csr(data.n, data.indptr, data.indices)
    k_in, k_out = data.H.shape[1], data.dZ.shape[1]
    _answer({"ready": gg.__file__, "n": data.n, "nnz": data.nnz})
    built: dict[str, tuple] = {}
    for line in sys.stdin:
        if not line.strip():
            break
        name = json.loads(line)["layer"]
        if name not in built:
            built[name] = _ours(name, data, g, k_in, k_out)
        forward, backward = built[name]
        t0 = time.perf_counter()
        forward()
        t1 = time.perf_counter()
        backward()
        t2 = time.perf_counter()
        _answer({"forward": t1 - t0, "backward": t2 - t1})


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
