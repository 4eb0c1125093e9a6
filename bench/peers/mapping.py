"""Where each of our parameters sits in a torch module (PyG's and DGL's), as data.

A map is ``{our name: (tensor path, layout)}``: the path is the module's own parameter (or
buffer) name, e.g. ``lin.weight`` or ``apply_func.0.weight``; the layout says how our array
becomes the tensor:

* ``"id"`` — the same array (biases, β, ε, DGL's ``GraphConv.weight`` which is ``(in, out)``
  like ours);
* ``"T"`` — transposed: a ``torch.nn.Linear`` holds ``(out, in)``, we hold ``W`` as
  ``(in, out)``;
* ``"heads"`` — a leading axis: our attention vectors are ``(heads, f)``, PyG's and DGL's
  ``(1, heads, f)``.

Every layout is its own inverse up to that axis, so the same table reads the module's
gradients back in our layout. This module needs only numpy at import time and torch when a
function is called: it runs in our environment (PyG) and in the DGL peer's
(:mod:`.dgl_worker`), and its tables are checked without either library
(``tests/test_bench_peers.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["PYG", "DGL", "to_module_layout", "to_our_layout", "load_params", "read_params"]

Map = dict[str, tuple[str, str]]

_GAT_PYG: Map = {"W": ("lin.weight", "T"), "att_src": ("att_src", "heads"),
                 "att_dst": ("att_dst", "heads"), "bias": ("bias", "id")}
_LIN_PYG: Map = {"W": ("lin.weight", "T"), "bias": ("bias", "id")}
_GATV2_PYG: Map = {"W_l": ("lin_l.weight", "T"), "b_l": ("lin_l.bias", "id"),
                   "W_r": ("lin_r.weight", "T"), "b_r": ("lin_r.bias", "id"),
                   "att": ("att", "heads"), "bias": ("bias", "id")}
_TRANSFORMER_PYG: Map = {"W_q": ("lin_query.weight", "T"), "b_q": ("lin_query.bias", "id"),
                    "W_k": ("lin_key.weight", "T"), "b_k": ("lin_key.bias", "id"),
                    "W_v": ("lin_value.weight", "T"), "b_v": ("lin_value.bias", "id"),
                    "W_skip": ("lin_skip.weight", "T"), "b_skip": ("lin_skip.bias", "id")}


def _gin(prefix: str, stride: int, layers: int = 2, sep: str = ".") -> Map:
    """GIN's MLP of ``layers`` linear layers, layer ``l`` at ``prefix.{stride·l}``, and ε;
    ours are called ``lin<l><sep>W`` and ``lin<l><sep>bias`` (GINE's with ``_``)."""
    out: Map = {}
    for i in range(layers):
        out[f"lin{i}{sep}W"] = (f"{prefix}.{stride * i}.weight", "T")
        out[f"lin{i}{sep}bias"] = (f"{prefix}.{stride * i}.bias", "id")
    return {**out, "eps": ("eps", "id")}


#: DGL's EdgeGATConv (and the PyG twin of it, which keeps its names)
_EDGE_GAT: Map = {"W": ("fc.weight", "T"), "att_src": ("attn_l", "heads"),
                  "att_dst": ("attn_r", "heads"), "att_edge": ("attn_edge", "heads"),
                  "W_e": ("fc_edge.weight", "T"), "W_res": ("res_fc.weight", "T"),
                  "bias": ("bias", "id")}

#: PyG: row name → map (see :mod:`bench.layers.rows` for the rows)
PYG: dict[str, Map] = {
    "gat": _GAT_PYG, "gat-h4": _GAT_PYG, "gcn": _LIN_PYG, "agnn": {"beta": ("beta", "id")},
    "sgc": {"W": ("lin.weight", "T"), "bias": ("lin.bias", "id")},
    "gin": _gin("nn.lins", 1),                       # torch_geometric.nn.MLP
    "gatv2": _GATV2_PYG, "gatv2-h4": _GATV2_PYG,
    "transformer": _TRANSFORMER_PYG, "transformer-h4": _TRANSFORMER_PYG,
    "sage": {"W_l": ("lin_l.weight", "T"), "b_l": ("lin_l.bias", "id"),
             "W_r": ("lin_r.weight", "T")},
    # edge features: their projection W_e is PyG's lin_edge (GINE's lin, with a bias)
    "gat-e": {**_GAT_PYG, "W_e": ("lin_edge.weight", "T"),
              "att_edge": ("att_edge", "heads")},
    "gatv2-e": {**_GATV2_PYG, "W_e": ("lin_edge.weight", "T")},
    "transformer-e": {**_TRANSFORMER_PYG, "W_e": ("lin_edge.weight", "T")},
    "gine": {**_gin("nn.lins", 1, sep="_"), "W_e": ("lin.weight", "T"), "b_e": ("lin.bias", "id")},
    # DGL's EdgeGATConv, its twin written with PyG under DGL's names (bench.layers.edge_gat)
    "edgegat": _EDGE_GAT,
    # R-GCN: PyG's names and shapes are ours
    "rgcn": {k: (k, "id") for k in ("weight", "root", "bias")},
    "rgcn-b4": {k: (k, "id") for k in ("weight", "comp", "root", "bias")},
}

def _in(prefix: str, mapping: Map) -> Map:
    """``mapping`` with every path below the sub-module ``prefix``."""
    return {k: (f"{prefix}.{path}", layout) for k, (path, layout) in mapping.items()}


# DGL's layers sit in a wrapper as its ``conv`` (:mod:`.dgl_layers`): paths start there
_GAT_DGL: Map = _in("conv", {"W": ("fc.weight", "T"), "att_src": ("attn_l", "heads"),
                             "att_dst": ("attn_r", "heads"), "bias": ("bias", "id")})
#: DGL's GATv2Conv has no output bias: the wrapper adds PyG's (its own ``bias``)
_GATV2_DGL: Map = {**_in("conv", {"W_l": ("fc_src.weight", "T"), "b_l": ("fc_src.bias", "id"),
                                  "W_r": ("fc_dst.weight", "T"), "b_r": ("fc_dst.bias", "id"),
                                  "att": ("attn", "heads")}),
                   "bias": ("bias", "id")}
#: DGL's RelGraphConv without a regularizer (the basis one adds ``comp``)
_RGCN_DGL: Map = {"weight": ("linear_r.W", "id"), "root": ("loop_weight", "id"),
                  "bias": ("h_bias", "id")}
#: our layout, names and all: the GAT written with ``dgl.sparse`` (:mod:`.dgl_layers`)
_SAME_AS_OURS_GAT: Map = {k: (k, "id") for k in ("W", "att_src", "att_dst", "bias")}

#: DGL: (row name, implementation) → map; ``dgl`` is ``dgl.nn``, ``dgl.sparse`` the GAT
#: written with DGL's sparse-matrix API
DGL: dict[tuple[str, str], Map] = {
    ("gat", "dgl"): _GAT_DGL, ("gat-h4", "dgl"): _GAT_DGL,
    ("gat", "dgl.sparse"): _SAME_AS_OURS_GAT, ("gat-h4", "dgl.sparse"): _SAME_AS_OURS_GAT,
    ("agnn", "dgl"): _in("conv", {"beta": ("beta", "id")}),
    ("gcn", "dgl"): _in("conv", {"W": ("weight", "id"), "bias": ("bias", "id")}),
    ("sgc", "dgl"): _in("conv", {"W": ("fc.weight", "T"), "bias": ("fc.bias", "id")}),
    ("gin", "dgl"): _in("conv", _gin("apply_func", 2)),  # Sequential(Linear, ReLU, Linear)
    # GINEConv inside the wrapper that projects the edge features first (PyG's lin)
    ("gine", "dgl"): _in("conv", {**_in("conv", _gin("apply_func", 2, sep="_")),
                                  "W_e": ("lin.weight", "T"), "b_e": ("lin.bias", "id")}),
    # EdgeGATConv as it ships (its names are the row's PyG twin's)
    ("edgegat", "dgl"): _in("conv", _EDGE_GAT),
    # HGTConv: another model than PyG's, timed with its own seeded weights (bench hgt)
    ("hgt", "dgl"): {},
    ("gatv2", "dgl"): _GATV2_DGL, ("gatv2-h4", "dgl"): _GATV2_DGL,
    # SAGEConv('mean'): fc_neigh the neighbours' map (PyG's lin_l), fc_self the root's with
    # the bias (PyG's lin_r, whose bias is lin_l's)
    ("sage", "dgl"): _in("conv", {"W_l": ("fc_neigh.weight", "T"), "b_l": ("fc_self.bias", "id"),
                                  "W_r": ("fc_self.weight", "T")}),
    # RelGraphConv: linear_r.W is PyG's weight (R or B, in, out), coeff its comp, loop_weight
    # its root, h_bias its bias
    ("rgcn", "dgl"): _in("conv", _RGCN_DGL),
    ("rgcn-b4", "dgl"): _in("conv", {**_RGCN_DGL, "comp": ("linear_r.coeff", "id")}),
}


def to_module_layout(array: np.ndarray, layout: str) -> np.ndarray:
    """Our array in the module's layout (``layout`` as in the module docstring)."""
    if layout == "T":
        return np.ascontiguousarray(array.T)
    if layout == "heads":
        return array[None]
    if layout == "id":
        return array
    raise ValueError(f"unknown layout {layout!r}")


def to_our_layout(array: np.ndarray, layout: str) -> np.ndarray:
    """The inverse of :func:`to_module_layout`."""
    return array[0] if layout == "heads" else to_module_layout(array, layout)


def _tensor(module, path: str):
    """The parameter or buffer called ``path`` in ``module``."""
    tensors = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    if path not in tensors:
        raise ValueError(f"{type(module).__name__} has no tensor {path!r}; it has "
                         f"{sorted(tensors)}")
    return tensors[path]


def load_params(module, mapping: Map, params: Mapping[str, np.ndarray]) -> None:
    """Copy our ``params`` into ``module``'s tensors (exact, float32; every shape checked).

    Raises ``ValueError`` when the map and ``params`` do not name the same parameters.
    """
    import torch

    if set(mapping) != set(params):
        raise ValueError(f"parameter sets differ: ours {sorted(params)}, the "
                         f"{type(module).__name__} map {sorted(mapping)}")
    with torch.no_grad():
        for key, (path, layout) in mapping.items():
            t = _tensor(module, path)
            value = torch.from_numpy(np.ascontiguousarray(
                to_module_layout(np.asarray(params[key]), layout)))
            if tuple(value.shape) != tuple(t.shape):
                raise ValueError(f"{key}: our shape {tuple(value.shape)} does not map onto "
                                 f"{type(module).__name__}.{path} {tuple(t.shape)}")
            t.copy_(value)


def read_params(module, mapping: Map, grads: bool = False) -> dict[str, np.ndarray]:
    """``module``'s parameters (or their gradients, zeros where there is none) in our
    layout and names."""
    out = {}
    for key, (path, layout) in mapping.items():
        t = _tensor(module, path)
        src = t.grad if grads else t
        arr = (np.zeros(tuple(t.shape), np.float32) if src is None else
               src.detach().cpu().numpy().copy())
        out[key] = to_our_layout(arr, layout)
    return out
