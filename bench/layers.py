"""Our layers and their PyTorch Geometric twins with the weights copied across.

* ``gat``: ours ``GATConv(k_in, k_out, heads=1)``; PyG ``GATConv(k_in, k_out, heads=1)``;
* ``agnn``: ours ``AGNNConv(k_in)`` (no ``W``, learnable β); PyG
  ``AGNNConv(requires_grad=True)``;
* ``gcn``: ours ``GCNConv(k_in, k_out)``; PyG ``GCNConv(k_in, k_out, cached=True)``.

Every PyG layer gets ``add_self_loops=False``: its edge list already holds our self loops.

PyG's ``GCNConv`` gets ``cached=True`` because our :class:`~gblas_gnn.graph.Graph` caches its
normalised adjacency too: neither side recomputes the normalisation inside the timed loop.

Weight layouts (ours ← PyG): GAT ``W = lin.weight.T``, ``att_src = att_src[0]``,
``att_dst = att_dst[0]``, ``bias = bias``; GCN ``W = lin.weight.T``, ``bias = bias``;
AGNN ``beta = beta``. Torch is imported inside the functions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["LAYERS", "make_ours", "make_pyg", "copy_weights", "pyg_grads", "pyg_params"]

LAYERS = ("gat", "agnn", "gcn")


def _check(name: str) -> None:
    if name not in LAYERS:
        raise ValueError(f"unknown layer {name!r}; choose from {LAYERS}")


def make_ours(name: str, k_in: int, k_out: int, seed: int = 0, executor: str = "cpu"):
    """Our layer ``name`` (float32) on ``executor``, seeded initialisation (the same weights
    on every executor).

    ``agnn`` has no projection (PyG's ``AGNNConv`` has none), so it needs ``k_in == k_out``.
    """
    _check(name)
    from gblas_gnn import nn

    if name == "gat":
        return nn.GATConv(k_in, k_out, heads=1, seed=seed, executor=executor)
    if name == "agnn":
        if k_in != k_out:
            raise ValueError(f"agnn keeps the feature size: k_in ({k_in}) must equal "
                             f"k_out ({k_out})")
        return nn.AGNNConv(k_in, seed=seed, executor=executor)
    return nn.GCNConv(k_in, k_out, seed=seed, executor=executor)


def make_pyg(name: str, ours) -> Any:
    """The PyG layer matching ``ours`` (built by :func:`make_ours`), weights copied."""
    _check(name)
    from torch_geometric import nn as pnn

    if name == "gat":
        layer = pnn.GATConv(ours.in_dim, ours.out_dim, heads=ours.heads, concat=ours.concat,
                            negative_slope=ours.negative_slope, dropout=0.0,
                            add_self_loops=False, bias="bias" in ours.params)
    elif name == "agnn":
        layer = pnn.AGNNConv(requires_grad=ours.learn_beta, add_self_loops=False)
    else:
        layer = pnn.GCNConv(ours.in_dim, ours.out_dim, add_self_loops=False, normalize=True,
                            cached=True, bias="bias" in ours.params)
    copy_weights(name, ours, layer)
    return layer


def _pyg_tensors(name: str, layer) -> dict:
    """Our parameter name → (PyG tensor, function turning our array into its layout)."""
    if name == "gat":
        out = {"W": (layer.lin.weight, lambda a: a.T),
               "att_src": (layer.att_src, lambda a: a[None]),
               "att_dst": (layer.att_dst, lambda a: a[None])}
    elif name == "agnn":
        out = {"beta": (layer.beta, lambda a: a)}
    else:
        out = {"W": (layer.lin.weight, lambda a: a.T)}
    if getattr(layer, "bias", None) is not None:
        out["bias"] = (layer.bias, lambda a: a)
    return out


def copy_weights(name: str, ours, layer) -> None:
    """Copy every parameter of ``ours`` into the PyG ``layer`` (float32, exact)."""
    import torch

    from gblas_gnn.executors import to_numpy

    tensors = _pyg_tensors(name, layer)
    if set(tensors) != set(ours.params):
        raise ValueError(f"parameter sets differ: ours {sorted(ours.params)}, "
                         f"PyG {sorted(tensors)}")
    with torch.no_grad():
        for key, (t, to_pyg) in tensors.items():
            value = torch.from_numpy(np.ascontiguousarray(to_pyg(to_numpy(ours.params[key]))))
            if tuple(value.shape) != tuple(t.shape):
                raise ValueError(f"{key}: our shape {tuple(value.shape)} does not map onto "
                                 f"PyG's {tuple(t.shape)}")
            t.copy_(value)


def pyg_grads(name: str, layer) -> dict[str, np.ndarray]:
    """The PyG layer's parameter gradients in our layout (missing ones as zeros)."""
    return _in_our_layout(name, layer, grads=True)


def pyg_params(name: str, layer) -> dict[str, np.ndarray]:
    """The PyG layer's parameters in our layout."""
    return _in_our_layout(name, layer, grads=False)


def _in_our_layout(name: str, layer, grads: bool) -> dict[str, np.ndarray]:
    out = {}
    for key, (t, to_pyg) in _pyg_tensors(name, layer).items():
        src = t.grad if grads else t
        if src is None:
            arr = np.zeros(tuple(t.shape), np.float32)
        else:
            arr = src.detach().cpu().numpy().copy()
        # W and bias maps are their own inverses; attention vectors lose the leading axis
        out[key] = arr[0] if key in ("att_src", "att_dst") else to_pyg(arr)
    return out
