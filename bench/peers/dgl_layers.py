r"""DGL's layers for the rows of :mod:`bench.layers.rows`, bound to one graph; runs in DGL's
environment.

Imported only by :mod:`.dgl_worker`, in the peer environment of :mod:`.env` (torch
2.2.1, DGL 2.1.0); torch and DGL are imported inside the functions, so that the tables can be
read (and tested) without them.

Every layer is wrapped in a :class:`torch.nn.Module` whose ``forward(x)`` runs it on the
bound graph and returns an ``(n, heads·f)`` tensor like ours (DGL's attention layers return
``(n, heads, f)``). The graph is the edge list of our self-looped pattern,
``dgl.graph((edge_index[0], edge_index[1]))``: source → target, our ``A[i, j]`` stored is the
edge ``j → i``; no layer adds a loop. Conventions, each checked by the agreement:

* ``dgl`` ``gat``/``gat-h4``: ``GATConv(k_in, k_out/h, h)``; ``attn_l`` scores the source
  (our ``att_src``), ``attn_r`` the target (``att_dst``); ``fc.weight`` = ``W``\ᵀ.
* ``dgl.sparse`` ``gat``/``gat-h4``: :class:`SparseGAT`, written with ``dgl.sparse``.
* ``agnn``: ``AGNNConv(learn_beta=True)``.
* ``gcn``: ``GraphConv(norm="both")``, DGL's default and its fast path (``copy_u`` and two
  row scalings). It scales a source by its *out*-degree, PyG and we by its in-degree, which
  differ on a directed graph; so the agreement calls the very same module with
  ``edge_weight = sqrt(d_out(src) / d_in(src))`` (:func:`both_to_pyg_weight`), which turns
  its normalisation into PyG's, and the timed calls run it without. (Passing PyG's whole
  normalisation as ``edge_weight`` with ``norm="none"`` gives equal outputs too, but takes
  DGL's ``u_mul_e`` path: 164 ms against 45 ms for a forward+backward at M, measured.)
* ``sgc``: ``SGConv(k=K)`` without edge weights: it scales by the in-degree on both sides,
  as PyG does (no cache: see :mod:`bench.layers.rows`).
* ``gin``: ``GINConv(Sequential(Linear, ReLU, Linear), "sum", learn_eps=True)``.
* ``gatv2``/``gatv2-h4``: ``GATv2Conv(share_weights=False)``; ``fc_src`` is PyG's ``lin_l``
  (sources), ``fc_dst`` its ``lin_r``. DGL's layer has no output bias (only the two linear
  maps have one), so the wrapper adds PyG's ``bias`` after it.
* ``sage``: ``SAGEConv(k_in, k_out, "mean")``; ``fc_neigh`` is PyG's ``lin_l``, ``fc_self``
  its ``lin_r``, with the bias.
* ``rgcn``/``rgcn-b4``: ``RelGraphConv(k_in, k_out, 6, self_loop=True)`` (``regularizer=
  "basis", num_bases=4``), called with the rows' relation ids and PyG's per-relation mean as
  its edge ``norm`` (:func:`relation_arguments`); it applies each edge's ``W_r`` to the
  source before summing (``TypedLinear``), PyG and we aggregate first.
* ``gine``: ``GINEConv(Sequential(Linear, ReLU, Linear), learn_eps=True)``, the very model
  of PyG's ``GINEConv(edge_dim=8)``: DGL's layer adds the edge features as they are, so the
  wrapper (:class:`EdgeProjected`) applies PyG's ``lin`` (our ``W_e``, ``b_e``) to the
  row's seeded features (:func:`bench.layers.rows.edge_features`, in edge order) first, one
  ``(|E|, 8) × (8, k)`` product a call.
* ``edgegat``: ``EdgeGATConv(k_in, 8, k_out/4, 4)`` (residual and bias, DGL's defaults)
  with the row's seeded edge features: the model the row's other sides compose
  (:mod:`bench.layers.edge_gat`).
* ``hgt`` (``python -m bench hgt --peers dgl``, not a row of ``bench run``): ``HGTConv(k_in,
  k_out/h, h, types, relations, dropout=0)`` on the homogeneous typed graph with its
  vertex and edge types (:func:`type_arguments`). Another model than PyG's (no biases, no
  GELU, its own residual), so a reference time with DGL's own seeded weights, never
  compared for equality.

``GATConv``, ``GATv2Conv``, ``AGNNConv``, ``GraphConv`` and ``SGConv`` check for a vertex
without in-edges on every forward (DGL's default, kept: it is part of what their users run).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .mapping import DGL

__all__ = ["IMPLS", "build", "gcn_edge_weight", "both_to_pyg_weight", "SparseGAT",
           "EdgeProjected", "edge_feature_arguments", "type_arguments"]

#: DGL implementations a row can have
IMPLS = ("dgl", "dgl.sparse")


def gcn_edge_weight(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """PyG's (and our) GCN edge normalisation ``d_src^{-1/2} d_dst^{-1/2}``, ``d`` the
    in-degree (self loops included), float32, in edge order."""
    deg = np.bincount(dst, minlength=n).astype(np.float64)
    inv = np.zeros(n)
    np.divide(1.0, np.sqrt(deg), out=inv, where=deg > 0)
    return (inv[src] * inv[dst]).astype(np.float32)


def both_to_pyg_weight(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """Edge weights that turn ``GraphConv(norm="both")``'s ``d_out(src)^{-1/2}
    d_in(dst)^{-1/2}`` (degrees clamped at 1, as DGL does) into PyG's
    :func:`gcn_edge_weight`: ``sqrt(d_out(src) / d_in(src))``, float32, in edge order."""
    d_out = np.maximum(np.bincount(src, minlength=n), 1).astype(np.float64)
    d_in = np.maximum(np.bincount(dst, minlength=n), 1).astype(np.float64)
    return np.sqrt(d_out / d_in)[src].astype(np.float32)


def _module_classes():
    """The wrapper classes (defined here so that torch is imported only when needed)."""
    import torch

    class Bound(torch.nn.Module):
        """A DGL layer on a fixed graph, output ``(n, heads·f)``, plus an optional output
        bias of our own (DGL's GATv2Conv has none). ``check_weight``: edge weights passed
        only while ``checking`` (the agreement run), to match PyG's normalisation."""

        def __init__(self, conv, graph, check_weight=None, bias_size: int | None = None,
                     extra: tuple = ()):
            super().__init__()
            self.conv, self.graph, self.check_weight = conv, graph, check_weight
            self.extra = extra                  # further arguments of every call
            self.checking = False
            self.bias = (None if bias_size is None else
                         torch.nn.Parameter(torch.zeros(bias_size)))

        def forward(self, x):
            if self.checking and self.check_weight is not None:
                out = self.conv(self.graph, x, edge_weight=self.check_weight)
            else:
                out = self.conv(self.graph, x, *self.extra)
            out = out.reshape(out.shape[0], -1)
            return out if self.bias is None else out + self.bias

    class SparseGATModule(torch.nn.Module):
        r"""GAT with DGL's sparse-matrix API (``dgl.sparse``), our parameter layout.

        .. math::
            H' = X W, \quad E = A \odot (d 1^\top + 1 s^\top) \text{ (one } \texttt{bsddmm}
            \text{ of } [d, 1] \text{ and } [1, s]^\top), \quad
            \Psi = \mathrm{softmax}_{\text{row}}(\mathrm{LeakyReLU}(E)), \quad
            Z = \Psi H' + b

        per head, with ``s = H' a_src`` (sources, columns) and ``d = H' a_dst`` (targets,
        rows); ``A`` is ``dglsp.spmatrix`` of the edges with row = target.
        """

        def __init__(self, A, k_in: int, f: int, heads: int, negative_slope: float = 0.2):
            super().__init__()
            self.A, self.f, self.heads, self.slope = A, f, heads, negative_slope
            self.W = torch.nn.Parameter(torch.zeros(k_in, heads * f))
            self.att_src = torch.nn.Parameter(torch.zeros(heads, f))
            self.att_dst = torch.nn.Parameter(torch.zeros(heads, f))
            self.bias = torch.nn.Parameter(torch.zeros(heads * f))

        def forward(self, x):
            import dgl.sparse as dglsp

            n, h, f = x.shape[0], self.heads, self.f
            Hp = (x @ self.W).view(n, h, f)
            s = (Hp * self.att_src).sum(-1)                    # (n, h) source scores
            d = (Hp * self.att_dst).sum(-1)                    # (n, h) target scores
            ones = torch.ones_like(s)
            left = torch.stack([d, ones], dim=1)               # (n, 2, h)
            right = torch.stack([ones, s], dim=0)              # (2, n, h)
            E = dglsp.bsddmm(self.A, left, right)              # values d_i + s_j, (nnz, h)
            E = dglsp.val_like(E, torch.nn.functional.leaky_relu(E.val, self.slope))
            P = E.softmax()                                    # row-wise: over in-edges
            Z = dglsp.bspmm(P, Hp.transpose(1, 2).contiguous())    # (n, f, h)
            return Z.transpose(1, 2).reshape(n, h * f) + self.bias

    class EdgeProjected(torch.nn.Module):
        """``conv(graph, x, lin(e))``: a layer that adds edge features of the vertices' width
        as they are, after the edge features' own linear map (PyG's ``lin`` of
        ``GINEConv(edge_dim=…)``)."""

        def __init__(self, conv, lin):
            super().__init__()
            self.conv, self.lin = conv, lin

        def forward(self, graph, x, e):
            return self.conv(graph, x, self.lin(e))

    return Bound, SparseGATModule, EdgeProjected


def SparseGAT(A, k_in: int, f: int, heads: int):
    """The ``dgl.sparse`` GAT module on sparse matrix ``A`` (see :func:`build`)."""
    return _module_classes()[1](A, k_in, f, heads)


def EdgeProjected(conv, lin):
    """``conv`` reading ``lin(e)`` as its edge features (see :func:`build`)."""
    return _module_classes()[2](conv, lin)


def _conv(row: str, k_in: int, k_out: int, heads: int, config: dict):
    """``(DGL layer, needs the GCN check weights, own output bias size)`` for ``row``."""
    import torch
    from dgl import nn as dnn

    f = k_out // heads
    if row in ("gat", "gat-h4"):
        return dnn.GATConv(k_in, f, heads), False, None
    if row in ("gatv2", "gatv2-h4"):
        return dnn.GATv2Conv(k_in, f, heads, share_weights=False), False, k_out
    if row == "agnn":
        return dnn.AGNNConv(learn_beta=True), False, None
    if row == "gcn":
        return dnn.GraphConv(k_in, k_out, norm="both"), True, None
    if row == "sgc":
        return dnn.SGConv(k_in, k_out, k=config["K"]), False, None
    if row == "gin":
        mlp = torch.nn.Sequential(torch.nn.Linear(k_in, k_out), torch.nn.ReLU(),
                                  torch.nn.Linear(k_out, k_out))
        return dnn.GINConv(mlp, "sum", init_eps=0.0, learn_eps=True), False, None
    if row == "gine":
        mlp = torch.nn.Sequential(torch.nn.Linear(k_in, k_out), torch.nn.ReLU(),
                                  torch.nn.Linear(k_out, k_out))
        return EdgeProjected(dnn.GINEConv(mlp, init_eps=0.0, learn_eps=True),
                             torch.nn.Linear(config["edge_dim"], k_in)), False, None
    if row == "sage":
        return dnn.SAGEConv(k_in, k_out, "mean"), False, None
    if row == "edgegat":
        return dnn.EdgeGATConv(k_in, config["edge_dim"], f, heads), False, None
    if row == "hgt":
        torch.manual_seed(0)                # its own weights, the same in every run
        return dnn.HGTConv(k_in, f, heads, len(config["ntypes"]), config["relations"],
                           dropout=0.0), False, None
    if row in ("rgcn", "rgcn-b4"):
        basis = row == "rgcn-b4"
        return dnn.RelGraphConv(k_in, k_out, config["relations"],
                                regularizer="basis" if basis else None,
                                num_bases=config["bases"] if basis else None,
                                self_loop=True), False, None
    raise ValueError(f"DGL has no layer for row {row!r}")


def relation_arguments(graph, relations: int, edge_type: np.ndarray | None = None) -> tuple:
    """``(etypes, norm)`` of ``RelGraphConv`` on ``graph``: the rows' relation ids in edge
    order (:func:`bench.layers.rows.edge_types`: a typed case's ``edge_type``, else seeded)
    and PyG's per-relation mean, ``1/|N_r(dst)|`` per edge, as the (m, 1) norm."""
    import torch

    from ..layers.rows import edge_types

    dst = graph.edges()[1].numpy().astype(np.int64)
    t = edge_types(dst.size, relations, edge_type)
    counts = np.bincount(dst * relations + t, minlength=graph.num_nodes() * relations)
    norm = (1.0 / counts[dst * relations + t]).astype(np.float32)[:, None]
    return torch.from_numpy(t), torch.from_numpy(norm)


def type_arguments(graph, ntypes: list[int], edge_type: np.ndarray | None) -> tuple:
    """``(ntype, etype)`` of ``HGTConv`` on a typed case's graph: each vertex's type (the
    homogeneous numbering holds the types one after the other, ``ntypes`` vertices each)
    and each edge's relation, in ``graph``'s edge order."""
    import torch

    if edge_type is None or edge_type.size != graph.num_edges() or sum(ntypes) != \
            graph.num_nodes():
        raise ValueError("hgt runs on a typed case: a relation id per edge and the vertex "
                         "types' counts summing to the vertices")
    ntype = np.repeat(np.arange(len(ntypes)), ntypes)
    return torch.from_numpy(ntype), torch.from_numpy(np.asarray(edge_type, np.int64))


def edge_feature_arguments(graph, edge_dim: int) -> tuple:
    """``(e,)``: the rows' seeded features of every edge of ``graph``, ``(|E|, edge_dim)``
    in its edge order (the order of the case's ``edge_index``, which PyG and we read too)."""
    import torch

    from ..layers.rows import edge_features

    return (torch.from_numpy(edge_features(graph.num_edges(), edge_dim)),)


def build(row: str, impl: str, graph, k_in: int, k_out: int, heads: int, config: dict,
          params: dict[str, np.ndarray], edge_type: np.ndarray | None = None) -> Any:
    """DGL implementation ``impl`` of ``row`` on ``graph`` with our ``params`` copied in.

    Parameters
    ----------
    row, impl : str
        A row of :mod:`bench.layers.rows` and one of :data:`IMPLS` (a key of :data:`.mapping.DGL`).
    graph : dgl.DGLGraph
        The self-looped graph, source → target.
    k_in, k_out, heads : int
        Sizes (``k_out = heads·f``).
    config : dict
        The row's extra settings (``K`` for ``sgc``).
    params : dict of ndarray
        The row's shared weights in our layout.
    edge_type : ndarray, optional
        A typed case's relation ids in ``graph``'s edge order.

    Returns
    -------
    torch.nn.Module
        ``forward(x) -> (n, k_out)``.
    """
    import torch

    from .mapping import load_params

    if (row, impl) not in DGL:
        raise ValueError(f"no DGL implementation {impl!r} of row {row!r}; there are "
                         f"{sorted(DGL)}")
    Bound = _module_classes()[0]
    if impl == "dgl.sparse":
        import dgl.sparse as dglsp

        src, dst = graph.edges()
        A = dglsp.spmatrix(torch.stack([dst, src]), shape=(graph.num_nodes(),) * 2)
        module = SparseGAT(A, k_in, k_out // heads, heads)
    else:
        conv, weighted, bias = _conv(row, k_in, k_out, heads, config)
        weight = None
        if weighted:
            src, dst = (t.numpy() for t in graph.edges())
            weight = torch.from_numpy(both_to_pyg_weight(src, dst, graph.num_nodes()))
        extra = (type_arguments(graph, config["ntypes"], edge_type) if "ntypes" in config
                 else relation_arguments(graph, config["relations"], edge_type)
                 if "relations" in config else
                 edge_feature_arguments(graph, config["edge_dim"]) if "edge_dim" in config
                 else ())
        module = Bound(conv, graph, weight, bias, extra)
    load_params(module, DGL[row, impl], params)
    return module
