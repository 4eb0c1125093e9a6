r"""Weights across to and from PyTorch Geometric (``torch_geometric.nn``).

Each of our layers mirrors a PyG convolution, with these parameter layouts:

===========  ======================================  =======================================
layer        ours                                    PyG
===========  ======================================  =======================================
GATConv      ``W`` (in, heads·out)                   ``lin.weight`` (heads·out, in) = Wᵀ
             ``att_src``, ``att_dst`` (heads, out)   ``att_src``, ``att_dst`` (1, heads, out)
             ``bias`` (heads·out,) or (out,)         ``bias``
             ``W_e``, ``att_edge`` (edge_dim)        ``lin_edge.weight`` = W_eᵀ, ``att_edge``
GCNConv      ``W`` (in, out), ``bias`` (out,)        ``lin.weight`` = Wᵀ, ``bias``
SGConv       ``W`` (in, out), ``bias`` (out,)        ``lin.weight`` = Wᵀ, ``lin.bias``
AGNNConv     ``beta`` (1,) (no ``W``)                ``beta`` (parameter or buffer)
GINConv      ``lin{l}.W``, ``lin{l}.bias``           ``nn.lins[l].weight`` = Wᵀ, ``.bias``
             ``eps`` (1,) when ``train_eps``         ``eps`` (parameter or buffer)
GINEConv     ``lin{l}_W``, ``lin{l}_bias``, ``eps``;   as GINConv, and ``lin.weight`` = W_eᵀ,
             ``W_e``, ``b_e`` with ``edge_dim``      ``lin.bias``
GATv2Conv    ``W_l``, ``W_r`` (in, heads·out)        ``lin_l.weight``, ``lin_r.weight`` = Wᵀ
             ``b_l``, ``b_r``, ``bias``              ``lin_l.bias``, ``lin_r.bias``, ``bias``
             ``att`` (heads, out)                    ``att`` (1, heads, out)
             ``W_e`` (edge_dim, heads·out)           ``lin_edge.weight`` = W_eᵀ
Transformer  ``W_q``, ``W_k``, ``W_v``, ``W_skip``    ``lin_query``, ``lin_key``,
Conv         and their ``b_*``; ``W_e``               ``lin_value``, ``lin_skip`` (weight = Wᵀ),
                                                     ``lin_edge``
SAGEConv     ``W_l``, ``b_l``; ``W_r``; ``W_p``,     ``lin_l.weight`` = Wᵀ, ``lin_l.bias``;
             ``b_p``                                 ``lin_r.weight``; ``lin.weight``,
                                                     ``lin.bias``
RGCNConv     ``weight``, ``comp``, ``root``,         the same names and shapes
             ``bias``
HGTConv      ``W_kqv_<t>`` (in_t, 3·out), ``b_kqv_<t>``  ``kqv_lin.lins.<t>.weight`` = Wᵀ,
             ``W_out_<t>``, ``b_out_<t>``            ``.bias``; ``out_lin.lins.<t>``
             ``k_rel``, ``v_rel`` (heads·R, d, d)    ``k_rel.weight``, ``v_rel.weight``
             ``skip_<t>`` (1,), ``p_rel`` (R, heads)  ``skip.<t>``, ``p_rel.<s>__<r>__<t>``
===========  ======================================  =======================================

:func:`from_pyg` builds our layer from a PyG module (configuration and weights, in the
module's floating-point type: float32 or float64), :func:`to_pyg` the PyG module from our
layer (in our layer's dtype). Both refuse what has no counterpart, naming it: GAT's
residual connection, TransformerConv's ``beta``, GCN's ``improved``, an AGNN
layer with a projection ``W`` (PyG's ``AGNNConv`` has none: put a ``Linear`` before it), a
semiring aggregation, a GIN network other than a plain ReLU MLP with biases.

The aggregation names map ``"add"`` ↔ ``"sum"``; ``"mean"``, ``"max"``, ``"min"`` are the same
in both (attention layers only).

torch and torch-geometric are imported here only, when a function is called: the core
library does not need them (``pip install "gblas_gnn[pyg]"`` installs them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..executors import to_numpy
from ._interop import install_conversions
from .agnn import AGNNConv
from .gat import GATConv
from .gatv2 import GATv2Conv
from .gcn import GCNConv
from .gin import GINConv
from .gine import GINEConv
from .hgt import HGTConv
from .module import Module
from .rgcn import RGCN_AGGREGATIONS, RGCNConv
from .sage import SAGE_AGGREGATIONS, SAGEConv
from .sgc import SGConv
from .transformer import TransformerConv

__all__ = ["from_pyg", "to_pyg", "layer_from_pyg", "PYG_EXTRA"]

#: how to install what this module needs
PYG_EXTRA = 'pip install "gblas_gnn[pyg]" (torch and torch-geometric)'

_AGGR_FROM_PYG = {"add": "sum", "sum": "sum", "mean": "mean", "max": "max", "min": "min"}
_AGGR_TO_PYG = {"sum": "add", "mean": "mean", "max": "max", "min": "min"}


def _torch():
    """``(torch, torch_geometric.nn)``, or one ImportError that names the extra."""
    try:
        import torch
        import torch_geometric.nn as pyg_nn
    except ImportError as exc:
        raise ImportError(f"PyTorch Geometric interop needs torch and torch-geometric, which "
                          f"the core install leaves out: {PYG_EXTRA}") from exc
    return torch, pyg_nn


def _array(tensor) -> np.ndarray:
    """A tensor's values as a new ndarray (same dtype)."""
    return tensor.detach().cpu().numpy().copy()


def _dtype(tensor) -> np.dtype:
    dtype = np.dtype(str(tensor.dtype).removeprefix("torch."))
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"the PyG module's parameters are {dtype}; gblas_gnn computes in "
                        "float32 or float64 (convert the module with .float() or .double())")
    return dtype


def _refuse(condition: bool, what: str) -> None:
    if condition:
        raise ValueError(f"no gblas_gnn counterpart: {what}")


def _aggr_from(conv, attention: bool) -> str:
    aggr = _AGGR_FROM_PYG.get(conv.aggr) if isinstance(conv.aggr, str) else None
    _refuse(aggr is None or (aggr != "sum" and not attention),
            f"{type(conv).__name__} with aggr={conv.aggr!r}"
            + ("" if attention else " (only 'add' maps)"))
    return aggr


def _aggr_to(layer) -> str:
    _refuse(not isinstance(layer.aggr, str) or layer.aggr not in _AGGR_TO_PYG,
            f"PyG has no aggregation for the semiring {layer.aggr!r}")
    return _AGGR_TO_PYG[layer.aggr]


def _load(layer: Module, values: dict[str, Any]) -> Module:
    """Copy tensors (or arrays) into ``layer.params`` in place, checking every shape."""
    for name, value in values.items():
        array = _array(value) if hasattr(value, "detach") else np.asarray(value)
        target = layer.params[name]
        if array.shape != target.shape:
            raise ValueError(f"{type(layer).__name__}.{name}: PyG holds {array.shape}, ours "
                             f"is {target.shape}")
        target[...] = layer.executor.asarray(array)
    return layer


def _store(torch, module, layer: Module, values: dict[str, np.ndarray]):
    """Move ``module`` to ``layer``'s dtype and copy ``values`` into its named tensors."""
    module = module.to(getattr(torch, layer.dtype.name))
    tensors = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    with torch.no_grad():
        for name, array in values.items():
            tensors[name].copy_(torch.from_numpy(np.ascontiguousarray(to_numpy(array))).reshape(
                tensors[name].shape))
    return module.eval()


# ---------------------------------------------------------------------------- GAT
def _gat_from(conv) -> GATConv:
    _refuse(conv.lin is None, "GATConv with separate source / target projections "
                              "(in_channels given as a pair)")
    _refuse(bool(getattr(conv, "residual", False)), "GATConv with residual=True")
    layer = GATConv(conv.in_channels, conv.out_channels, heads=conv.heads, concat=conv.concat,
                    negative_slope=conv.negative_slope, dropout=conv.dropout,
                    bias=conv.bias is not None, add_self_loops=conv.add_self_loops,
                    aggr=_aggr_from(conv, attention=True), edge_dim=conv.edge_dim,
                    fill_value=_fill_from(conv), dtype=_dtype(conv.lin.weight))
    values = {"W": conv.lin.weight.T, "att_src": conv.att_src[0], "att_dst": conv.att_dst[0]}
    if conv.bias is not None:
        values["bias"] = conv.bias
    if conv.edge_dim is not None:
        values["W_e"], values["att_edge"] = conv.lin_edge.weight.T, conv.att_edge[0]
    return _load(layer, values)


def _fill_from(conv):
    """PyG's ``fill_value`` as ours: a string or number as it is, a tensor as an array."""
    fill = conv.fill_value
    return _array(fill) if hasattr(fill, "detach") else fill


def _gat_to(layer: GATConv):
    torch, pyg = _torch()
    conv = pyg.GATConv(layer.in_dim, layer.out_dim, heads=layer.heads, concat=layer.concat,
                       negative_slope=layer.negative_slope, dropout=layer.dropout,
                       add_self_loops=layer.add_self_loops, bias="bias" in layer.params,
                       aggr=_aggr_to(layer), edge_dim=layer.edge_dim,
                       fill_value=_fill_to(torch, layer.fill_value))
    p = layer.params
    values = {"lin.weight": p["W"].T, "att_src": p["att_src"], "att_dst": p["att_dst"]}
    if "bias" in p:
        values["bias"] = p["bias"]
    if layer.edge_dim is not None:
        values["lin_edge.weight"], values["att_edge"] = p["W_e"].T, p["att_edge"]
    return _store(torch, conv, layer, values)


def _fill_to(torch, fill):
    """Our ``fill_value`` as PyG's: a vector as a tensor."""
    return torch.from_numpy(np.asarray(fill)) if isinstance(fill, np.ndarray) else fill


# ---------------------------------------------------------------------------- GATv2
def _gatv2_from(conv) -> GATv2Conv:
    _refuse(bool(getattr(conv, "residual", False)), "GATv2Conv with residual=True")
    bias = conv.lin_l.bias is not None
    layer = GATv2Conv(conv.in_channels, conv.out_channels, heads=conv.heads,
                      concat=conv.concat, negative_slope=conv.negative_slope,
                      dropout=conv.dropout, add_self_loops=conv.add_self_loops, bias=bias,
                      share_weights=conv.share_weights, aggr=_aggr_from(conv, attention=True),
                      edge_dim=conv.edge_dim, fill_value=_fill_from(conv),
                      dtype=_dtype(conv.lin_l.weight))
    values = {ours: _named(conv, theirs) for ours, theirs in _gatv2_names(layer).items()}
    values = {k: v.T if k.startswith("W_") else v[0] if k == "att" else v
              for k, v in values.items()}
    return _load(layer, values)


def _gatv2_names(layer) -> dict[str, str]:
    """Our parameter name -> PyG's, for the parameters ``layer`` has."""
    names = {"W_l": "lin_l.weight", "b_l": "lin_l.bias", "W_r": "lin_r.weight",
             "b_r": "lin_r.bias", "att": "att", "bias": "bias", "W_e": "lin_edge.weight"}
    return {k: v for k, v in names.items() if k in layer.params}


def _named(module, name: str):
    return dict(module.named_parameters())[name]


def _gatv2_to(layer: GATv2Conv):
    torch, pyg = _torch()
    conv = pyg.GATv2Conv(layer.in_dim, layer.out_dim, heads=layer.heads, concat=layer.concat,
                         negative_slope=layer.negative_slope, dropout=layer.dropout,
                         add_self_loops=layer.add_self_loops, bias="b_l" in layer.params,
                         share_weights=layer.share_weights, aggr=_aggr_to(layer),
                         edge_dim=layer.edge_dim,
                         fill_value=_fill_to(torch, layer.fill_value))
    p = layer.params
    return _store(torch, conv, layer, {theirs: p[ours].T if ours.startswith("W_") else p[ours]
                                       for ours, theirs in _gatv2_names(layer).items()})


# ---------------------------------------------------------------------------- Transformer
_TRANSFORMER = {"q": "lin_query", "k": "lin_key", "v": "lin_value", "skip": "lin_skip",
                "e": "lin_edge"}


def _transformer_from(conv) -> TransformerConv:
    _refuse(bool(conv.beta), "TransformerConv with beta=True")
    bias = conv.lin_key.bias is not None
    layer = TransformerConv(conv.in_channels, conv.out_channels, heads=conv.heads,
                            concat=conv.concat, dropout=conv.dropout,
                            root_weight=conv.root_weight, bias=bias,
                            aggr=_aggr_from(conv, attention=True), edge_dim=conv.edge_dim,
                            dtype=_dtype(conv.lin_key.weight))
    values = {}
    for ours, theirs in _TRANSFORMER.items():
        if f"W_{ours}" in layer.params:
            lin = getattr(conv, theirs)
            values[f"W_{ours}"] = lin.weight.T
            if f"b_{ours}" in layer.params:
                values[f"b_{ours}"] = lin.bias
    return _load(layer, values)


def _transformer_to(layer: TransformerConv):
    torch, pyg = _torch()
    conv = pyg.TransformerConv(layer.in_dim, layer.out_dim, heads=layer.heads,
                               concat=layer.concat, dropout=layer.dropout,
                               root_weight=layer.root_weight, bias=layer.bias,
                               aggr=_aggr_to(layer), edge_dim=layer.edge_dim)
    values = {}
    for ours, theirs in _TRANSFORMER.items():
        if f"W_{ours}" in layer.params:
            values[f"{theirs}.weight"] = layer.params[f"W_{ours}"].T
            if f"b_{ours}" in layer.params:
                values[f"{theirs}.bias"] = layer.params[f"b_{ours}"]
    return _store(torch, conv, layer, values)


# ---------------------------------------------------------------------------- GCN / SGC
def _gcn_from(conv) -> GCNConv:
    _refuse(conv.improved, "GCNConv with improved=True (self loops of weight 2)")
    _aggr_from(conv, attention=False)
    layer = GCNConv(conv.in_channels, conv.out_channels, bias=conv.bias is not None,
                    add_self_loops=conv.add_self_loops, normalize=conv.normalize,
                    cached=conv.cached, dtype=_dtype(conv.lin.weight))
    values = {"W": conv.lin.weight.T}
    if conv.bias is not None:
        values["bias"] = conv.bias
    return _load(layer, values)


def _gcn_to(layer: GCNConv):
    torch, pyg = _torch()
    conv = pyg.GCNConv(layer.in_dim, layer.out_dim, cached=layer.cached,
                       add_self_loops=layer.add_self_loops, normalize=layer.normalize,
                       bias="bias" in layer.params)
    values = {"lin.weight": layer.params["W"].T}
    if "bias" in layer.params:
        values["bias"] = layer.params["bias"]
    return _store(torch, conv, layer, values)


def _sgc_from(conv) -> SGConv:
    _aggr_from(conv, attention=False)
    bias = conv.lin.bias is not None
    layer = SGConv(conv.in_channels, conv.out_channels, K=conv.K, bias=bias,
                   add_self_loops=conv.add_self_loops, cached=conv.cached,
                   dtype=_dtype(conv.lin.weight))
    return _load(layer, {"W": conv.lin.weight.T, **({"bias": conv.lin.bias} if bias else {})})


def _sgc_to(layer: SGConv):
    torch, pyg = _torch()
    conv = pyg.SGConv(layer.in_dim, layer.out_dim, K=layer.K, cached=layer.cached,
                      add_self_loops=layer.add_self_loops, bias="bias" in layer.params)
    values = {"lin.weight": layer.params["W"].T}
    if "bias" in layer.params:
        values["lin.bias"] = layer.params["bias"]
    return _store(torch, conv, layer, values)


# ---------------------------------------------------------------------------- AGNN
def _agnn_from(conv, in_dim: int) -> AGNNConv:
    torch, _ = _torch()
    learn = isinstance(conv.beta, torch.nn.Parameter)
    return AGNNConv(in_dim, None, beta=float(conv.beta.item()), learn_beta=learn,
                    add_self_loops=conv.add_self_loops,
                    aggr=_aggr_from(conv, attention=True), dtype=_dtype(conv.beta))


def _agnn_to(layer: AGNNConv):
    _refuse(layer.has_weight, "an AGNNConv with a projection W (out_dim given): PyG's "
                              "AGNNConv has none; only out_dim=None layers map (put a Linear "
                              "before the layer instead)")
    torch, pyg = _torch()
    conv = pyg.AGNNConv(requires_grad=layer.learn_beta, add_self_loops=layer.add_self_loops,
                        aggr=_aggr_to(layer))
    return _store(torch, conv, layer, {"beta": layer.beta})


# ---------------------------------------------------------------------------- GIN
def _gin_linears(torch, pyg, net) -> list:
    """The Linear layers of a GIN network that our ``mlp_dims`` can express: a PyG ``MLP``
    with ReLU, no norm, no dropout, a plain last layer and biases; or a ``torch.nn.Sequential``
    alternating Linear and ReLU, starting and ending with a Linear, with biases."""
    expected = ("torch_geometric.nn.MLP(channels, act='relu', norm=None, dropout=0.0) or "
                "torch.nn.Sequential(Linear, ReLU, ..., Linear) with biases")
    if isinstance(net, pyg.MLP):
        _refuse(not isinstance(net.act, torch.nn.ReLU) and len(net.lins) > 1,
                f"a GIN MLP with activation {net.act!r}; expected {expected}")
        _refuse(not all(isinstance(n, torch.nn.Identity) for n in net.norms),
                f"a GIN MLP with normalisation layers ({net.norms[0]!r}); expected {expected}")
        _refuse(any(p > 0 for p in net.dropout), f"a GIN MLP with dropout {net.dropout}; "
                                                  f"expected {expected}")
        _refuse(not net.plain_last, f"a GIN MLP with plain_last=False; expected {expected}")
        lins = list(net.lins)
    elif isinstance(net, torch.nn.Sequential):
        mods = list(net)
        shape_ok = len(mods) % 2 == 1 and all(
            isinstance(m, torch.nn.ReLU) if i % 2 else isinstance(m, (torch.nn.Linear,
                                                                      pyg.Linear))
            for i, m in enumerate(mods))
        _refuse(not shape_ok, f"a GIN network {net!r}; expected {expected}")
        lins = mods[::2]
    else:
        raise ValueError(f"no gblas_gnn counterpart: a GIN network of type "
                         f"{type(net).__name__}; expected {expected}")
    _refuse(any(lin.bias is None for lin in lins), f"a GIN network without biases; expected "
                                                   f"{expected}")
    return lins


def _gin_from(conv) -> GINConv:
    torch, pyg = _torch()
    _aggr_from(conv, attention=False)
    lins = _gin_linears(torch, pyg, conv.nn)
    dims = [lins[0].weight.shape[1]] + [lin.weight.shape[0] for lin in lins]
    layer = GINConv(dims, eps=float(conv.eps.item()),
                    train_eps=isinstance(conv.eps, torch.nn.Parameter),
                    dtype=_dtype(lins[0].weight))
    values = {}
    for i, lin in enumerate(lins):
        values[f"lin{i}.W"], values[f"lin{i}.bias"] = lin.weight.T, lin.bias
    return _load(layer, values)


def _gin_to(layer: GINConv):
    torch, pyg = _torch()
    conv = pyg.GINConv(pyg.MLP(layer.mlp_dims, act="relu", norm=None, dropout=0.0),
                       eps=layer.eps, train_eps=layer.train_eps)
    values = {}
    for i in range(len(layer.mlp_dims) - 1):
        values[f"nn.lins.{i}.weight"] = layer.params[f"lin{i}.W"].T
        values[f"nn.lins.{i}.bias"] = layer.params[f"lin{i}.bias"]
    return _store(torch, conv, layer, {**values, "eps": [layer.eps]})


def _gine_from(conv) -> GINEConv:
    torch, pyg = _torch()
    _aggr_from(conv, attention=False)
    lins = _gin_linears(torch, pyg, conv.nn)
    dims = [lins[0].weight.shape[1]] + [lin.weight.shape[0] for lin in lins]
    edge_dim = conv.lin.weight.shape[1] if conv.lin is not None else None
    layer = GINEConv(dims, eps=float(conv.eps.item()),
                     train_eps=isinstance(conv.eps, torch.nn.Parameter), edge_dim=edge_dim,
                     dtype=_dtype(lins[0].weight))
    values = {}
    for i, lin in enumerate(lins):
        values[f"lin{i}_W"], values[f"lin{i}_bias"] = lin.weight.T, lin.bias
    if conv.lin is not None:
        values["W_e"], values["b_e"] = conv.lin.weight.T, conv.lin.bias
    if layer.train_eps:
        values["eps"] = conv.eps.reshape(1)
    return _load(layer, values)


def _gine_to(layer: GINEConv):
    torch, pyg = _torch()
    conv = pyg.GINEConv(pyg.MLP(layer.mlp_dims, act="relu", norm=None, dropout=0.0),
                        eps=layer.eps, train_eps=layer.train_eps, edge_dim=layer.edge_dim)
    values = {}
    for i in range(len(layer.mlp_dims) - 1):
        values[f"nn.lins.{i}.weight"] = layer.params[f"lin{i}_W"].T
        values[f"nn.lins.{i}.bias"] = layer.params[f"lin{i}_bias"]
    if layer.edge_dim is not None:
        values["lin.weight"], values["lin.bias"] = layer.params["W_e"].T, layer.params["b_e"]
    return _store(torch, conv, layer, {**values, "eps": [layer.eps]})


# ---------------------------------------------------------------------------- SAGE
_SAGE = {"W_l": "lin_l.weight", "b_l": "lin_l.bias", "W_r": "lin_r.weight",
         "W_p": "lin.weight", "b_p": "lin.bias"}


def _one_vertex_set_aggr(conv, allowed: tuple[str, ...]) -> str:
    """``conv``'s aggregation in our names, for a layer over one vertex set; what has no
    counterpart (a bipartite layer, an aggregation outside ``allowed``) is refused."""
    kind = type(conv).__name__
    _refuse(not isinstance(conv.in_channels, int), f"{kind} on a bipartite graph "
                                                   f"(in_channels={conv.in_channels})")
    aggr = _AGGR_FROM_PYG.get(conv.aggr) if isinstance(conv.aggr, str) else None
    _refuse(aggr not in allowed, f"{kind} with aggr={conv.aggr!r} (of PyG's, "
            f"{', '.join(_AGGR_TO_PYG[a] for a in allowed)} map)")
    return aggr


def _sage_from(conv) -> SAGEConv:
    aggr = _one_vertex_set_aggr(conv, SAGE_AGGREGATIONS)
    layer = SAGEConv(conv.in_channels, conv.out_channels, aggr=aggr,
                     normalize=conv.normalize, root_weight=conv.root_weight,
                     project=conv.project, bias=conv.lin_l.bias is not None,
                     dtype=_dtype(conv.lin_l.weight))
    return _load(layer, {ours: _named(conv, theirs).T if ours.startswith("W_") else
                         _named(conv, theirs) for ours, theirs in _SAGE.items()
                         if ours in layer.params})


def _sage_to(layer: SAGEConv):
    torch, pyg = _torch()
    conv = pyg.SAGEConv(layer.in_dim, layer.out_dim, aggr=_AGGR_TO_PYG[layer.aggr],
                        normalize=layer.normalize, root_weight=layer.root_weight,
                        project=layer.project, bias="b_l" in layer.params)
    p = layer.params
    return _store(torch, conv, layer, {theirs: p[ours].T if ours.startswith("W_") else p[ours]
                                       for ours, theirs in _SAGE.items() if ours in p})


# ---------------------------------------------------------------------------- R-GCN
def _rgcn_from(conv) -> RGCNConv:
    aggr = _one_vertex_set_aggr(conv, RGCN_AGGREGATIONS)
    layer = RGCNConv(conv.in_channels, conv.out_channels, conv.num_relations,
                     num_bases=conv.num_bases, num_blocks=conv.num_blocks, aggr=aggr,
                     root_weight=conv.root is not None, bias=conv.bias is not None,
                     dtype=_dtype(conv.weight))
    return _load(layer, {name: _named(conv, name) for name in layer.params})


def _rgcn_to(layer: RGCNConv):
    torch, pyg = _torch()
    conv = pyg.RGCNConv(layer.in_dim, layer.out_dim, layer.num_relations,
                        num_bases=layer.num_bases, num_blocks=layer.num_blocks,
                        aggr=_AGGR_TO_PYG[layer.aggr], root_weight=layer.root_weight,
                        bias="bias" in layer.params)
    return _store(torch, conv, layer, dict(layer.params))


# ---------------------------------------------------------------------------- HGT
def _hgt_names(layer: HGTConv) -> dict[str, tuple[str, bool]]:
    """Our parameter name → (PyG's, whether PyG holds the transpose)."""
    names = {"k_rel": ("k_rel.weight", False), "v_rel": ("v_rel.weight", False)}
    for t in layer.node_types:
        for ours, lin in (("kqv", "kqv_lin"), ("out", "out_lin")):
            names[f"W_{ours}_{t}"] = (f"{lin}.lins.{t}.weight", True)
            names[f"b_{ours}_{t}"] = (f"{lin}.lins.{t}.bias", False)
        names[f"skip_{t}"] = (f"skip.{t}", False)
    return names


def _hgt_from(conv) -> HGTConv:
    _refuse(any(w is None or w < 0 for w in conv.in_channels.values()),
            "HGTConv with lazily sized inputs (in_channels -1): run it once first")
    layer = HGTConv(dict(conv.in_channels), conv.out_channels,
                    (list(conv.node_types), list(conv.edge_types)), heads=conv.heads,
                    dtype=_dtype(conv.k_rel.weight))
    values = {}
    for ours, (theirs, transposed) in _hgt_names(layer).items():
        array = _array(_named(conv, theirs))
        values[ours] = array.T if transposed else array
    values["p_rel"] = np.concatenate([_array(conv.p_rel["__".join(k)]) for k in
                                      layer.edge_types])
    return _load(layer, values)


def _hgt_to(layer: HGTConv):
    torch, pyg = _torch()
    conv = pyg.HGTConv(dict(layer.in_channels), layer.out_dim,
                       (list(layer.node_types), list(layer.edge_types)), heads=layer.heads)
    p = layer.params
    values = {theirs: p[ours].T if transposed else p[ours]
              for ours, (theirs, transposed) in _hgt_names(layer).items()}
    values.update({f"p_rel.{'__'.join(k)}": p["p_rel"][r]
                   for r, k in enumerate(layer.edge_types)})
    return _store(torch, conv, layer, values)


# ---------------------------------------------------------------------------- dispatch
_FROM = {"GATConv": _gat_from, "GATv2Conv": _gatv2_from, "TransformerConv": _transformer_from,
         "GCNConv": _gcn_from, "SGConv": _sgc_from, "GINConv": _gin_from,
         "SAGEConv": _sage_from, "GINEConv": _gine_from, "RGCNConv": _rgcn_from,
         "HGTConv": _hgt_from}
_TO = {GATConv: _gat_to, GATv2Conv: _gatv2_to, TransformerConv: _transformer_to,
       GCNConv: _gcn_to, SGConv: _sgc_to, AGNNConv: _agnn_to, GINConv: _gin_to,
       SAGEConv: _sage_to, GINEConv: _gine_to, RGCNConv: _rgcn_to,
       HGTConv: _hgt_to}


def from_pyg(conv, in_dim: int | None = None) -> Module:
    """Our layer equal to the PyG convolution ``conv``: same configuration, weights copied
    (in ``conv``'s dtype, float32 or float64).

    Args:
        conv: a ``torch_geometric.nn`` ``GATConv``, ``GATv2Conv``, ``TransformerConv``,
            ``GCNConv``, ``SGConv``, ``AGNNConv``, ``GINConv``, ``GINEConv``, ``SAGEConv`` or
            ``RGCNConv`` (``FastRGCNConv`` too: the same layer) or ``HGTConv`` (≥ 2.4).
        in_dim: the feature size, for ``AGNNConv`` only (PyG's layer works on any width).

    Raises:
        ImportError: torch or torch-geometric is not installed (the message names the
            ``pyg`` extra).
        TypeError: ``conv`` is not one of the classes above, or its dtype is not float32 /
            float64.
        ValueError: ``conv`` uses a feature with no counterpart here (named in the message).
    """
    return layer_from_pyg(None, conv, in_dim)


def layer_from_pyg(cls: type | None, conv, in_dim: int | None = None) -> Module:
    """:func:`from_pyg`, insisting that ``conv`` is PyG's layer of the same name as ``cls``
    (``None``: any of them)."""
    _, pyg = _torch()
    kind = next((name for name in (*_FROM, "AGNNConv") if isinstance(conv, getattr(pyg, name))),
                None)
    if kind is None or (cls is not None and kind != cls.__name__):
        wanted = cls.__name__ if cls is not None else \
            "GATConv, GATv2Conv, TransformerConv, GCNConv, SGConv, AGNNConv, GINConv, " \
            "GINEConv, SAGEConv, RGCNConv or HGTConv"
        raise TypeError(f"from_pyg takes a torch_geometric.nn {wanted}, got "
                        f"{type(conv).__module__}.{type(conv).__name__}")
    if kind == "AGNNConv":
        if in_dim is None:
            raise ValueError("AGNNConv.from_pyg needs in_dim: PyG's AGNNConv works on any "
                             "feature size")
        return _agnn_from(conv, in_dim)
    if in_dim is not None and kind != "HGTConv" and in_dim != conv.in_channels:
        raise ValueError(f"in_dim={in_dim} but the PyG {kind} takes {conv.in_channels} "
                         "features")
    return _FROM[kind](conv)


def to_pyg(layer: Module) -> Any:
    """The PyG convolution equal to our ``layer`` (configuration and weights, in the layer's
    dtype), in evaluation mode.

    Raises:
        ImportError: torch or torch-geometric is not installed (the message names the
            ``pyg`` extra).
        TypeError: ``layer`` is not a GATConv, GATv2Conv, TransformerConv, GCNConv, SGConv,
            AGNNConv, GINConv, GINEConv, SAGEConv, RGCNConv or HGTConv.
        ValueError: ``layer`` uses a feature PyG lacks (named in the message).
    """
    convert = _TO.get(type(layer))
    if convert is None:
        raise TypeError(f"to_pyg takes a gblas_gnn GATConv, GATv2Conv, TransformerConv, "
                        f"GCNConv, SGConv, AGNNConv, GINConv, GINEConv, SAGEConv, RGCNConv or "
                        f"HGTConv, got {type(layer).__name__}")
    return convert(layer)


install_conversions(layer_from_pyg, to_pyg)
