"""Peak memory of one layer's forward+backward, in a fresh process.

    python -m bench.layers.memory --data CASE.npz --layer gat --impl ours|pyg
                           --k-in 32 --k-out 32 [--threads 2] [--blas-threads N]
                           [--iters 2] [--executor cpu]

Order of work: imports and thread settings, a warm-up of the layer on a 64-vertex graph (JIT
compilation and lazy initialisation land in the baseline, not in the layer's increment),
then the case's arrays are read and the layer built (*setup*), the kernel's high-water mark
is reset (the allocator's free memory handed back first, as before the baseline: else the
passes reuse what the loader freed, unseen), and ``--iters`` forward+backward passes run
back to back (no ``gc.collect()`` between them, as in a training loop). Prints
``BENCH_RESULT {json}`` with

* ``peak_rss_bytes`` — the process's peak RSS over its whole life (``VmHWM`` before the
  reset, and after the passes: the larger; the number compared between implementations);
* ``baseline_rss_bytes``, ``setup_rss_bytes`` — RSS after warm-up and after setup (each
  with the free memory handed back);
* ``run_peak_bytes`` — ``VmHWM`` since the reset (the peak of the passes alone), and
  ``run_increment_bytes`` = ``run_peak_bytes − setup_rss_bytes``;
* ``iter_seconds`` — wall time of each pass (not a benchmark: nothing else is interleaved);
* on a GPU (``--executor cuda``, PyG on the same GPU) also ``peak_device_bytes``: the device
  memory the passes allocate at their peak (:mod:`bench.core.device`), the number compared there.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ..core.cases import CaseData, graph_from_csr, load_case_data
from ..core.device import BenchDevice, device_for
from ..core.rss import peak_rss_bytes, release_free_memory, reset_hwm, rss_bytes
from ..core.threads import set_threads
from ..core.worker import worker_main
from .rows import LAYERS, get_row, make_ours, make_pyg, ours_graph, pyg_inputs, shared_params

__all__ = ["measure_layer", "tiny_data", "main"]


def tiny_data(k_in: int, k_out: int) -> CaseData:
    """A 64-vertex case (random pattern with every self loop) for a worker's warm-up."""
    rng = np.random.default_rng(1)
    n = 64
    dense = rng.random((n, n)) < 0.1
    np.fill_diagonal(dense, True)
    rows, cols = np.nonzero(dense)
    indptr = np.concatenate([[0], np.cumsum(dense.sum(1))]).astype(np.int64)
    return CaseData(n, indptr, cols.astype(np.int64), np.stack([cols, rows]).astype(np.int64),
                    rng.standard_normal((n, k_in), dtype=np.float32),
                    rng.standard_normal((n, k_out), dtype=np.float32), np.zeros(n, np.int64))


def _runner(impl: str, layer: str, data: CaseData, k_out: int, executor: str,
            device: BenchDevice):
    """A zero-argument forward+backward of ``impl``'s layer on ``data`` (ours on
    ``executor``; PyG gets the row's shared weights, the same on every executor, and runs
    on ``device``), synchronised on a GPU."""
    k_in = data.H.shape[1]
    ours = (make_ours(layer, k_in, k_out, executor=executor)
            if impl == "ours" or get_row(layer).init is None else None)
    H, dZ = data.H, np.ascontiguousarray(data.dZ[:, :k_out])
    if impl == "ours":
        g = ours_graph(layer, graph_from_csr(data.n, data.indptr, data.indices),
                       data.edge_index, data.edge_type)
        H, dZ = ours.executor.asarray(H), ours.executor.asarray(dZ)
        ours.train()

        def step():
            ours(g, H)
            ours.backward(dZ)
        return device.timed(step)
    pyg = make_pyg(layer, shared_params(layer, k_in, k_out, ours), k_in,
                   k_out).to(device.torch_device)
    pyg.train()
    inputs = pyg_inputs(layer, data.edge_index, device, data.edge_type)
    x = device.tensor(H, requires_grad=True)
    dZt = device.tensor(dZ)

    def step():
        pyg.zero_grad(set_to_none=True)
        x.grad = None
        pyg(x, *inputs).backward(dZt)
    return device.timed(step)


def measure_layer(data_path: str, layer: str, impl: str, k_in: int, k_out: int,
                  threads: int, iters: int = 2, blas_threads: int | None = None,
                  executor: str = "cpu") -> dict:
    """Peak memory of ``iters`` forward+backward passes; see the module docstring."""
    if impl not in ("ours", "pyg"):
        raise ValueError(f"impl must be 'ours' or 'pyg', got {impl!r}")
    device = device_for(executor)            # PyG runs where ours does (one GPU)
    executor = executor if impl == "ours" else "cpu"    # PyG's process loads no other one
    set_threads(threads, torch=impl == "pyg", blas=blas_threads, executor=executor)
    tracker = device.peak_tracker(impl)
    _runner(impl, layer, tiny_data(k_in, k_out), k_out, executor, device)()      # warm-up
    release_free_memory()
    baseline = rss_bytes()
    parts = ("edge_index", "edge_type", "H", "dZ")
    if impl == "ours":      # (the edge list only for a row with edge features or relations)
        row = get_row(layer)
        parts = ("indptr", "indices", "H", "dZ") + (("edge_index", "edge_type")
                                                    if row.edge_dim or row.relations else ())
    data = load_case_data(data_path, parts)
    step = _runner(impl, layer, data, k_out, executor, device)
    del data
    before = peak_rss_bytes()
    has_hwm = reset_hwm()           # the loader's freed memory handed back first
    setup = rss_bytes()
    if tracker is not None:
        tracker.reset()
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    run_peak = peak_rss_bytes()
    peak = max(before, run_peak) if has_hwm else run_peak
    device_peak = {} if tracker is None else {"peak_device_bytes": tracker.peak_bytes()}
    return {"impl": impl, "layer": layer, "threads": threads, "iters": iters, **device_peak,
            "executor": executor if impl == "ours" else None,
            "peak_rss_bytes": peak, "baseline_rss_bytes": baseline,
            "setup_rss_bytes": setup, "run_peak_bytes": run_peak,
            "run_increment_bytes": run_peak - setup, "hwm_reset": has_hwm,
            "iter_seconds": times}


def main(argv: list[str] | None = None) -> int:
    """Command-line entry of the worker."""
    p = argparse.ArgumentParser(prog="python -m bench.layers.memory",
                                description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--layer", required=True, choices=LAYERS)
    p.add_argument("--impl", required=True, choices=("ours", "pyg"))
    p.add_argument("--k-in", type=int, required=True)
    p.add_argument("--k-out", type=int, required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--blas-threads", type=int, default=None)
    p.add_argument("--iters", type=int, default=2)
    p.add_argument("--executor", default="cpu")
    a = p.parse_args(argv)
    return worker_main(lambda: measure_layer(a.data, a.layer, a.impl, a.k_in, a.k_out,
                                             a.threads, a.iters, a.blas_threads,
                                             a.executor))


if __name__ == "__main__":
    raise SystemExit(main())
