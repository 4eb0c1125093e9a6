"""Full training epochs (forward + loss + backward + Adam step) of a multi-layer GAT.

    python -m bench.layers.epoch --data CASE.npz --impl ours|pyg --layers 3
                          --k-out 16 [--epochs 5] [--warmup 1]
                          [--threads 2] [--blas-threads N] [--executor cpu]

Model (both sides, same weights): ``GATConv(k_in, k_in) → ELU → … → GATConv(k_in, k_out)``,
one head, no dropout (so the two runs can be compared), bias; loss = mean cross-entropy over
all vertices with the case's labels; Adam (lr 0.005, PyTorch defaults otherwise). PyG's input
features do not require a gradient (as in real training); ours compute ``dH`` of the first
layer anyway (the layer API always returns it).

The worker runs in a fresh process under the parent's memory guard and prints
``BENCH_RESULT {json}`` with the epoch times, the losses, the peak RSS and the material the
parent compares between implementations: epoch 0's loss, every parameter gradient, the
parameters after the first Adam step and the logits of a fixed sample of rows.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ..core.cases import CaseData, graph_from_csr, load_case_data
from ..core.rss import peak_rss_bytes, rss_bytes
from ..core.threads import set_threads
from ..core.worker import worker_main
from .rows import make_pyg, pyg_grads, pyg_params, shared_params

__all__ = ["ours_model", "train_epochs", "main"]

LR = 0.005


def ours_model(num_layers: int, k_in: int, k_out: int, seed: int = 0,
               executor: str = "cpu", conv: str = "gat", edge_dim: int = 0):
    """Our ``num_layers``-layer GAT (``Sequential``; the convolutions at even indices) on
    ``executor`` (the same weights on every executor): ``conv`` ``"gat"`` (``GATConv``) or
    ``"gatv2"`` (``GATv2Conv``), one head, reading ``edge_dim`` features an edge (0: none)."""
    from gblas_gnn.nn import ELU, GATConv, GATv2Conv, Sequential
    from gblas_gnn.nn.models import derive_seeds

    if num_layers < 1:
        raise ValueError(f"num_layers must be ≥ 1, got {num_layers}")
    layer = {"gat": GATConv, "gatv2": GATv2Conv}[conv]
    edges = {"edge_dim": edge_dim} if edge_dim else {}
    mods = []
    for i, s in enumerate(derive_seeds(seed, num_layers)):
        if i:
            mods.append(ELU())
        mods.append(layer(k_in, k_out if i == num_layers - 1 else k_in, heads=1, seed=s,
                          executor=executor, **edges))
    return Sequential(*mods)


def _pyg_model(ours):
    import torch
    import torch.nn.functional as F

    class GAT(torch.nn.Module):
        def __init__(self, convs):
            super().__init__()
            self.convs = torch.nn.ModuleList(convs)

        def forward(self, x, edge_index):
            for i, conv in enumerate(self.convs):
                if i:
                    x = F.elu(x)
                x = conv(x, edge_index)
            return x

    return GAT([make_pyg("gat", shared_params("gat", m.in_dim, m.out_dim, m), m.in_dim,
                         m.out_dim) for m in list(ours)[::2]])


def _named(per_layer: list[dict[str, np.ndarray]]) -> dict[str, list]:
    return {f"{2 * i}.{k}": np.asarray(v).tolist()
            for i, d in enumerate(per_layer) for k, v in d.items()}


def train_epochs(impl: str, data: CaseData, num_layers: int, k_out: int, epochs: int,
                 warmup: int = 1, g=None, sample_rows: int = 4096, seed: int = 0,
                 executor: str = "cpu") -> dict:
    """Run ``warmup + epochs`` training epochs of ``impl`` (``"ours"`` or ``"pyg"``).

    Parameters
    ----------
    impl : str
        ``"ours"`` or ``"pyg"``.
    data : CaseData
        Needs ``H`` and ``y``, plus ``indptr``/``indices`` (ours, unless ``g`` is given) or
        ``edge_index`` (PyG).
    num_layers, k_out : int
        Depth and output classes of the model; the hidden size is ``k_in``.
    epochs, warmup : int
        Timed and untimed epochs (warm-up first; epoch 0 provides the comparison data).
    g : gblas_gnn.Graph, optional
        Our graph; built from ``data`` (taking its CSR arrays over) when omitted.
    sample_rows : int
        Rows of the logits kept for the comparison.
    seed : int
        Seed of the weights (both implementations get the same).
    executor : str
        The executor our model runs on (PyG copies the weights of a cpu twin).

    Returns
    -------
    dict
        ``epoch_seconds`` (timed epochs), ``warmup_seconds``, ``losses`` and ``check``
        (epoch 0's ``loss``, ``grads``, ``params_after``, ``logits_sample``).
    """
    if impl not in ("ours", "pyg"):
        raise ValueError(f"impl must be 'ours' or 'pyg', got {impl!r}")
    n, k_in = data.H.shape
    ours = ours_model(num_layers, k_in, k_out, seed, executor if impl == "ours" else "cpu")
    rows = np.sort(np.random.default_rng(seed).choice(n, min(sample_rows, n), replace=False))
    times, losses, check = [], [], {}
    if impl == "ours":
        from gblas_gnn.executors import to_numpy
        from gblas_gnn.train.losses import cross_entropy
        from gblas_gnn.train.optim import Adam

        if g is None:
            g = graph_from_csr(n, data.indptr, data.indices)
        ex = ours.executor
        H, y, mask = ex.asarray(data.H), ex.asarray(data.y), ex.asarray(np.ones(n, dtype=bool))
        opt = Adam(ours, lr=LR)
        ours.train()
        for e in range(warmup + epochs):
            t = time.perf_counter()
            logits = ours(g, H)
            loss, dlogits = cross_entropy(logits, y, mask, executor=ex)
            ours.backward(dlogits)
            if e == 0:
                check = {"loss": float(loss),
                         "grads": {k: to_numpy(v).tolist() for k, v in ours.named_grads()},
                         "logits_sample": to_numpy(logits)[rows].tolist()}
            opt.step()
            times.append(time.perf_counter() - t)
            losses.append(float(loss))
            if e == 0:
                check["params_after"] = {k: to_numpy(v).tolist()
                                         for k, v in ours.named_parameters()}
            del logits, dlogits
    else:
        import torch
        import torch.nn.functional as F

        model = _pyg_model(ours)
        del ours
        opt = torch.optim.Adam(model.parameters(), lr=LR)
        x, ei = torch.from_numpy(data.H), torch.from_numpy(data.edge_index)
        yt = torch.from_numpy(data.y)
        model.train()
        for e in range(warmup + epochs):
            t = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            logits = model(x, ei)
            loss = F.cross_entropy(logits, yt)
            loss.backward()
            if e == 0:
                check = {"loss": loss.item(),
                         "grads": _named([pyg_grads("gat", c) for c in model.convs]),
                         "logits_sample": logits.detach().numpy()[rows].tolist()}
            opt.step()
            times.append(time.perf_counter() - t)
            losses.append(loss.item())
            if e == 0:
                check["params_after"] = _named([pyg_params("gat", c) for c in model.convs])
            del logits, loss
    return {"impl": impl, "epoch_seconds": times[warmup:], "warmup_seconds": times[:warmup],
            "losses": losses, "check": check}


def check_arrays(result: dict) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The comparison material of a :func:`train_epochs` result as flat named arrays.

    Returns ``(strict, info)``: ``strict`` (loss, logits sample, every gradient) must agree;
    ``info`` (parameters after the first Adam step) is reported only — Adam's first step is
    ``≈ lr·sign(grad)``, so a gradient that is zero up to rounding may legitimately step
    either way.
    """
    c = result["check"]
    strict = {"loss": np.array([c["loss"]]), "logits_sample": np.array(c["logits_sample"])}
    strict.update({f"grad {k}": np.array(v) for k, v in c["grads"].items()})
    info = {f"param after step {k}": np.array(v) for k, v in c["params_after"].items()}
    return strict, info


def run_worker(data_path: str, impl: str, num_layers: int, k_out: int, epochs: int,
               warmup: int, threads: int, blas_threads: int | None = None,
               executor: str = "cpu") -> dict:
    """The worker: load the data, train (ours on ``executor``), add memory readings."""
    executor = executor if impl == "ours" else "cpu"    # PyG's process loads no other one
    set_threads(threads, torch=impl == "pyg", blas=blas_threads, executor=executor)
    if impl == "pyg":
        import torch_geometric.nn  # noqa: F401  (import cost in the baseline, not the setup)
    else:
        from gblas_gnn import nn, train  # noqa: F401
    baseline = rss_bytes()
    parts = ("indptr", "indices", "H", "y") if impl == "ours" else ("edge_index", "H", "y")
    data = load_case_data(data_path, parts)
    setup = rss_bytes()
    res = train_epochs(impl, data, num_layers, k_out, epochs, warmup, executor=executor)
    res.update({"threads": threads, "executor": executor if impl == "ours" else None,
                "peak_rss_bytes": peak_rss_bytes(), "baseline_rss_bytes": baseline,
                "setup_rss_bytes": setup})
    return res


def main(argv: list[str] | None = None) -> int:
    """Command-line entry of the worker."""
    p = argparse.ArgumentParser(prog="python -m bench.layers.epoch",
                                description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--impl", required=True, choices=("ours", "pyg"))
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--k-out", type=int, required=True)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--blas-threads", type=int, default=None)
    p.add_argument("--executor", default="cpu")
    a = p.parse_args(argv)
    return worker_main(lambda: run_worker(a.data, a.impl, a.layers, a.k_out, a.epochs,
                                          a.warmup, a.threads, a.blas_threads, a.executor))


if __name__ == "__main__":
    raise SystemExit(main())
