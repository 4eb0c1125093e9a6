"""The DGL side of a benchmark: a worker process in DGL's own environment (:mod:`.env`).

    <dgl venv>/bin/python -m bench.peers.dgl_worker                 # serve requests (below)
    <dgl venv>/bin/python -m bench.peers.dgl_worker --memory --data CASE.npz --row gat
        --impl dgl --params W.npz --k-in 32 --k-out 32 [--threads 2] [--iters 2]

It never imports our library (its environment has none): the graph, the features, the
upstream gradient and the weights come in ``.npz`` files, and answers go out as
``BENCH_RESULT {json}`` lines on stdout (:mod:`bench.core.worker`), arrays again as ``.npz``.

Serving: the parent (:class:`~.client.PeerWorker`) writes one JSON request per line on
stdin, answered by the loop of :mod:`.serving`; besides its requests, this worker answers

* ``aggregate`` — ``reduce`` (``sum`` | ``mean`` | ``max`` | ``min``), ``transposed``
  (bool), ``out`` (optional): one ``update_all(copy_u, reduce)`` over the graph (or its
  reverse: ``Aᵀ X``) under ``no_grad``, timed like ``time``; with ``out`` the result is
  written there instead (:mod:`bench.kernels.aggregation`);

and ``check`` runs the layer in its ``checking`` mode (see ``gcn`` in :mod:`.dgl_layers`).

``--memory`` is the DGL counterpart of :mod:`bench.layers.memory` (fresh process, warm-up on a tiny
graph, ``VmHWM`` reset, then ``--iters`` forward+backward passes).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time

import numpy as np

from ..core.cases import load_case_data
from ..core.rss import peak_rss_bytes, release_free_memory, reset_hwm, rss_bytes
from ..core.worker import worker_main
from .serving import Side, read_weights, serve

__all__ = ["DGLSide", "main"]


def _versions() -> dict:
    import dgl
    import torch

    return {"dgl": dgl.__version__, "torch": torch.__version__, "numpy": np.__version__,
            "python": sys.version.split()[0], "torch_threads": torch.get_num_threads()}


class DGLSide(Side):
    """The DGL layers of one case: one graph, its features and upstream gradient, and the
    layers built on them by implementation name."""

    def __init__(self, data_path: str, threads: int):
        import dgl
        import torch

        super().__init__()
        torch.set_num_threads(threads)
        self.torch = torch
        data = load_case_data(data_path, ("edge_index", "edge_type", "H", "dZ"))
        self.edge_type = data.edge_type
        src, dst = (torch.from_numpy(np.ascontiguousarray(a)) for a in data.edge_index)
        self.graph = dgl.graph((src, dst), num_nodes=data.n)
        self.H, self.dZ = torch.from_numpy(data.H), torch.from_numpy(data.dZ)
        self.Hleaf = self.H.clone().requires_grad_(True)
        self._reverse = None

    def build(self, row: str, impl: str, params: str, k_in: int, k_out: int, heads: int,
              config: dict) -> dict:
        """Build ``impl`` of ``row`` with the weights in file ``params``."""
        from .dgl_layers import build

        module = build(row, impl, self.graph, k_in, k_out, heads, config,
                       read_weights(params), self.edge_type)
        self.layers[impl] = (row, module, self.dZ[:, :k_out].contiguous())
        return {"built": impl, "row": row}

    def forward(self, impl: str):
        """Inference: ``eval()`` under ``torch.no_grad()``."""
        _, module, _ = self.layers[impl]
        module.eval()
        with self.torch.no_grad():
            return module(self.H)

    def fwd_bwd(self, impl: str):
        """Training forward and backward: ``(Z, dH)``; fills the parameters' gradients."""
        _, module, dZ = self.layers[impl]
        module.train()
        module.zero_grad(set_to_none=True)
        self.Hleaf.grad = None
        Z = module(self.Hleaf)
        Z.backward(dZ)
        return Z, self.Hleaf.grad

    def check(self, impl: str, out: str) -> dict:
        """Outputs and gradients in our layout, written to ``out`` (``.npz``)."""
        from .mapping import DGL, read_params

        row, module, _ = self.layers[impl]
        module.checking = True          # GraphConv: PyG's normalisation (dgl_layers)
        try:
            Z, dH = self.fwd_bwd(impl)
            arrays = {"Z": Z.detach().numpy(), "dH": dH.numpy(),
                      **{f"grad_{k}": v for k, v in
                         read_params(module, DGL[row, impl], grads=True).items()}}
            arrays["Z_eval"] = self.forward(impl).numpy()
        finally:
            module.checking = False
        np.savez(out, **arrays)
        return {"out": out, "names": sorted(arrays)}

    def aggregate(self, reduce: str, transposed: bool, out: str | None = None) -> dict:
        """``Z_i = ⊕_{j → i} X_j`` by ``update_all(copy_u, reduce)`` (DGL's unweighted
        kernel), over the reversed graph when ``transposed``: timed, or written to ``out``."""
        import dgl
        import dgl.function as fn

        if reduce not in ("sum", "mean", "max", "min"):
            raise ValueError(f"unknown reduce {reduce!r}")
        if transposed and self._reverse is None:
            self._reverse = dgl.reverse(self.graph)
        graph = self._reverse if transposed else self.graph
        gc.collect()
        t = time.perf_counter()
        with self.torch.no_grad(), graph.local_scope():
            graph.srcdata["h"] = self.H
            graph.update_all(fn.copy_u("h", "m"), getattr(fn, reduce)("m", "z"))
            Z = graph.dstdata["z"]
        seconds = time.perf_counter() - t
        if out is None:
            return {"seconds": seconds}
        np.save(out, Z.numpy())
        return {"out": out}


def _tiny_case(path: str, k: int) -> str:
    """A 64-vertex case file for the memory run's warm-up."""
    from ..core.cases import save_case_data
    from ..layers.memory import tiny_data

    return str(save_case_data(tiny_data(k, k), path))


def measure(data: str, row: str, impl: str, params: str, k_in: int, k_out: int, heads: int,
            config: dict, threads: int, iters: int) -> dict:
    """Peak RSS of ``iters`` forward+backward passes of one DGL layer (see the docstring)."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:     # warm-up on 64 vertices, same weights
        warm = DGLSide(_tiny_case(str(Path(tmp) / "tiny.npz"), k_in), threads)
        warm.build(row, impl, params, k_in, k_out, heads, config)
        warm.fwd_bwd(impl)
        del warm
    release_free_memory()
    baseline = rss_bytes()
    side = DGLSide(data, threads)
    side.build(row, impl, params, k_in, k_out, heads, config)
    before = peak_rss_bytes()
    has_hwm = reset_hwm()           # the build's freed memory handed back first
    setup = rss_bytes()
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        side.fwd_bwd(impl)
        times.append(time.perf_counter() - t)
    run_peak = peak_rss_bytes()
    return {"impl": impl, "layer": row, "threads": threads, "iters": iters,
            "peak_rss_bytes": max(before, run_peak) if has_hwm else run_peak,
            "baseline_rss_bytes": baseline, "setup_rss_bytes": setup,
            "run_peak_bytes": run_peak, "run_increment_bytes": run_peak - setup,
            "hwm_reset": has_hwm, "iter_seconds": times, "versions": _versions()}


def main(argv: list[str] | None = None) -> int:
    """Command-line entry (serve, or ``--memory``)."""
    p = argparse.ArgumentParser(prog="python -m bench.peers.dgl_worker",
                                description=__doc__.splitlines()[0])
    p.add_argument("--memory", action="store_true")
    p.add_argument("--data")
    p.add_argument("--row")
    p.add_argument("--impl", default="dgl")
    p.add_argument("--params")
    p.add_argument("--k-in", type=int)
    p.add_argument("--k-out", type=int)
    p.add_argument("--heads", type=int, default=1)
    p.add_argument("--config", type=json.loads, default={})
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iters", type=int, default=2)
    a = p.parse_args(argv)
    if not a.memory:
        return serve(DGLSide, _versions)
    return worker_main(lambda: measure(a.data, a.row, a.impl, a.params, a.k_in, a.k_out,
                                       a.heads, a.config, a.threads, a.iters))


if __name__ == "__main__":
    raise SystemExit(main())
