r"""The heterogeneous graph transformer (Hu et al., 2020), composed: the backward derived."""

from __future__ import annotations

import numpy as np

from .. import ops
from .._validate import positive_ints
from ..hetero import TypedVertexSet
from ..ops import factor
from ._interop import PyGInterop
from .init import glorot, zeros
from .module import Module

__all__ = ["HGTConv"]


def _check_metadata(metadata) -> tuple[tuple[str, ...], tuple[tuple[str, str, str], ...]]:
    if not (isinstance(metadata, (tuple, list)) and len(metadata) == 2):
        raise TypeError("metadata is (node types, edge types), as HeteroData.metadata() gives "
                        f"it; got {metadata!r}")
    node_types, edge_types = tuple(metadata[0]), tuple(tuple(k) for k in metadata[1])
    if not node_types or not all(isinstance(t, str) and t and "." not in t
                                 for t in node_types):
        raise ValueError("metadata's node types must be non-empty strings without '.', got "
                         f"{list(node_types)}")
    if len(set(node_types)) != len(node_types) or len(set(edge_types)) != len(edge_types):
        raise ValueError("metadata names a node type or an edge type twice")
    for key in edge_types:
        if len(key) != 3 or key[0] not in node_types or key[2] not in node_types:
            raise ValueError(f"metadata's edge type {key} must be (source, relation, target) "
                             f"with both types among the node types {list(node_types)}")
    return node_types, edge_types


class HGTConv(PyGInterop, Module):
    r"""Heterogeneous graph transformer attention, exactly PyTorch Geometric's ``HGTConv``
    (≥ 2.4: one softmax over all in-edges of a vertex, across relations).

    For vertex types :math:`\tau`, relations :math:`r` (``metadata[1]``), heads :math:`h` of
    width :math:`d` (``out_dim = heads · d``):

    .. math::
        [K \,|\, Q \,|\, V]_i = x_i W_{\tau(i)} + b_{\tau(i)}, \qquad
        K^r_{j,h} = K_{j,h} W^{k}_{h,r}, \quad V^r_{j,h} = V_{j,h} W^{v}_{h,r}

        \alpha_{ij,h} = \mathrm{softmax}_{(j, r) \to i}\Big(
            \frac{\langle Q_{i,h}, K^r_{j,h} \rangle \, p_{r,h}}{\sqrt d}\Big), \qquad
        m_{i,h} = \sum_{(j, r) \to i} \alpha_{ij,h} V^r_{j,h}

        a_i = \mathrm{GELU}(m_i)\, W^{o}_{\tau(i)} + b^{o}_{\tau(i)}, \qquad
        z_i = \sigma(s_{\tau(i)})\, a_i + (1 - \sigma(s_{\tau(i)}))\, x_i
        \ \text{(when } x_i \text{ is } \texttt{out\_dim} \text{ wide, else } a_i)

    The softmax runs over every in-edge of :math:`i` in every relation. In the global form
    (:class:`~gblas_gnn.HeteroGraph`) each relation's sources are a block of one stacked
    vertex set, so the relations' edges are entries of one typed graph and the layer is one
    Transformer attention on it: the queries on the targets' rows, the keys and values on the
    blocks' rows (:func:`gblas_gnn.ops.segment_linear`, with :math:`W^k_{h,r}`, :math:`p_r`
    and :math:`1/\sqrt d` folded into each block's key weight), one fused softmax and
    aggregation; no array has a row per edge. The output projection and the gated skip are
    one product per type, :math:`[\mathrm{GELU}(m) \,|\, x] [\sigma(s) W^o ; (1 -
    \sigma(s)) I]` (two products summed, without the concatenation). The backward is
    derived.

    Types that are never a target in ``metadata`` are absent from the output, as in PyG; a
    target vertex without in-edges gets :math:`a_i = b^{o}_{\tau(i)}`. (PyG adds
    :math:`10^{-16}` to the softmax's denominators, which are at least 1: the results differ
    by that relative amount at most.)

    Args:
        in_dim: input width, one int for every type or a dict ``{type: width}``.
        out_dim: output width ``heads · d``.
        metadata: ``(node types, edge types)`` (``HeteroData.metadata()``,
            :meth:`HeteroGraph.metadata`).
        heads: attention heads (dividing ``out_dim``).
        seed, dtype, executor: as every layer.

    Shapes:
        - call: ``layer(hg, x_dict)`` with a :class:`~gblas_gnn.HeteroGraph` and
          ``{type: (n_t, in_t)}`` for every type of the graph; returns ``{type: (n_t,
          out_dim)}`` for the target types. ``layer.backward({type: dout_t})`` (a type left
          out has a zero cotangent) returns ``{type: dx_t}``.
        - params: ``W_kqv_<t>`` (in_t, 3·out_dim), ``b_kqv_<t>`` (k, q, v in PyG's order),
          ``W_out_<t>`` (out_dim, out_dim), ``b_out_<t>``, ``skip_<t>`` (1,); ``k_rel``,
          ``v_rel`` (heads·R, d, d): entry ``h·R + r``; ``p_rel`` (R, heads)
    """

    def __init__(self, in_dim, out_dim: int, metadata, heads: int = 1, seed: int = 0,
                 dtype=np.float32, executor=None):
        super().__init__(dtype, executor)
        self.node_types, self.edge_types = _check_metadata(metadata)
        positive_ints(out_dim=out_dim, heads=heads)
        if out_dim % heads:
            raise ValueError(f"out_dim={out_dim} must be divisible by heads={heads}")
        if isinstance(in_dim, dict):
            missing = set(self.node_types) - set(in_dim)
            if missing or set(in_dim) - set(self.node_types):
                raise ValueError(f"in_dim must give a width for every node type "
                                 f"{list(self.node_types)}, got {sorted(in_dim)}")
            widths = {t: in_dim[t] for t in self.node_types}
        else:
            widths = {t: in_dim for t in self.node_types}
        positive_ints(**{f"in_dim[{t!r}]": w for t, w in widths.items()})
        self.in_channels = {t: int(w) for t, w in widths.items()}
        self.out_dim, self.heads = int(out_dim), int(heads)
        #: the types that are a target of some relation: the output's types
        self.dst_types = tuple(t for t in self.node_types
                               if any(k[2] == t for k in self.edge_types))
        rng = np.random.default_rng(seed)
        F, R, d = self.out_dim, len(self.edge_types), self.out_dim // self.heads
        for t in self.node_types:
            self.add_param(f"W_kqv_{t}", glorot((self.in_channels[t], 3 * F), rng, self.dtype))
            self.add_param(f"b_kqv_{t}", zeros((3 * F,), self.dtype))
        for t in self.node_types:
            self.add_param(f"W_out_{t}", glorot((F, F), rng, self.dtype))
            self.add_param(f"b_out_{t}", zeros((F,), self.dtype))
        for name in ("k_rel", "v_rel"):
            self.add_param(name, glorot((self.heads * R, d, d), rng, self.dtype))
        for t in self.node_types:
            self.add_param(f"skip_{t}", np.ones(1, self.dtype))
        self.add_param("p_rel", np.ones((R, self.heads), self.dtype))
        self._graph: TypedVertexSet | None = None

    #: the forward is traced and the backward derived, though :meth:`backward` is wrapped
    #: (dicts of types in and out)
    composed = True

    # ------------------------------------------------------------------ dict interface
    def _check_graph(self, hg) -> TypedVertexSet:
        if not isinstance(hg, TypedVertexSet):
            raise TypeError("HGTConv takes a gblas_gnn.HeteroGraph (a dist.DistHeteroGraph on "
                            f"a grid), got {type(hg).__name__}")
        unknown = [t for t in hg.node_types if t not in self.node_types]
        if unknown:
            raise ValueError(f"the graph's vertex type(s) {unknown} are not in the layer's "
                             f"metadata {list(self.node_types)}")
        unknown = [k for k in hg.edge_types if k not in self.edge_types]
        if unknown:
            raise ValueError(f"the graph's edge type(s) {unknown} are not in the layer's "
                             "metadata")
        return hg.astype(self.dtype)

    def __call__(self, hg, x_dict: dict) -> dict:
        hg = self._check_graph(hg)
        with self.executor.validation():
            X = hg.stack(x_dict, self.in_channels, self.dtype, self.xp)
        Z = super().__call__(hg, X)
        self._graph = hg
        return hg.split(Z, [t for t in hg.node_types if t in self.dst_types])

    def backward(self, dout: dict) -> dict:
        """The input gradients ``{type: dx_t}`` for the output cotangents ``dout`` (a dict of
        ``(n_t, out_dim)`` arrays over the output's types; a type left out counts 0). On a
        grid, this rank's rows of every type and source block
        (:meth:`~gblas_gnn.dist.DistHeteroGraph.gather` sums them)."""
        hg = self._graph
        if hg is None or self._cache is None:
            raise RuntimeError("backward needs a forward in training mode first "
                               "(module.train() and call it on the input)")
        if not isinstance(dout, dict):
            raise TypeError(f"HGTConv.backward takes a dict {{type: dout}}, got "
                            f"{type(dout).__name__}")
        out_types = [t for t in hg.node_types if t in self.dst_types]
        unknown = set(dout) - set(out_types)
        if unknown:
            raise ValueError(f"dout has the type(s) {sorted(unknown)} the output has not "
                             f"(output types: {out_types})")
        widths = {t: self.out_dim for t in hg.node_types}
        with self.executor.validation():
            dZ = hg.stack(dout, widths, self.dtype, self.xp, name="dout", types=list(dout),
                          copies=False)
        return hg.input_gradient(super().backward(dZ), self.in_channels)

    # ------------------------------------------------------------------ forward
    def _relation_map(self, W, b, rel, r: int, scale=None):
        r"""A source type's projection followed by relation ``r``'s per-head map, as one
        weight and bias: :math:`(x W + b) \,\mathrm{diag}_h(M_{hR+r})` (times ``scale`` per
        head), products of parameters only."""
        R, d = len(self.edge_types), self.out_dim // self.heads
        cols = [slice(h * d, (h + 1) * d) for h in range(self.heads)]
        W = ops.concat([W[:, c] @ rel[h * R + r] for h, c in enumerate(cols)], axis=1)
        b = ops.concat([b.reshape(1, -1)[:, c] @ rel[h * R + r] for h, c in enumerate(cols)],
                       axis=1)
        if scale is not None:
            per_column = ops.concat([scale[h:h + 1].reshape(1, 1) * np.ones((1, d), self.dtype)
                                     for h in range(self.heads)], axis=1)
            W, b = W * per_column, b * per_column
        return W, b

    def forward(self, hg: TypedVertexSet, H):
        p, F, heads = self.params, self.out_dim, self.heads
        d, n = F // heads, H.shape[0]
        targets = [t for t in self.dst_types if t in hg.num_nodes_dict]
        # the queries on the targets' rows and the keys on each relation's source block (its
        # matrices, prior and 1/√d folded into its weight) share one array QK: the target rows
        # and the blocks' are disjoint, and the scores read row i as a query, row j as a key.
        # The values are an array of their own (each contiguous: the edge program reads them
        # without a copy).
        queries, keys, values = [], [], []
        for t in targets:
            queries.append((hg.type_rows(t), p[f"W_kqv_{t}"][:, F:2 * F],
                            p[f"b_kqv_{t}"][F:2 * F]))
        for key in hg.blocks:
            r, s = self.edge_types.index(key), key[0]
            W, b = p[f"W_kqv_{s}"], p[f"b_kqv_{s}"]
            keys.append((hg.type_rows(key), *self._relation_map(
                W[:, :F], b[:F], p["k_rel"], r, p["p_rel"][r] * (1.0 / np.sqrt(d)))))
            values.append((hg.type_rows(key), *self._relation_map(W[:, 2 * F:], b[2 * F:],
                                                                  p["v_rel"], r)))
        QK = ops.segment_linear(H, queries + keys, F).reshape(n, heads, d)
        if hg.blocks:
            V = ops.segment_linear(H, values, F).reshape(n, heads, d)
            # one row softmax over a vertex's in-edges of every relation
            alpha = ops.softmax(ops.structure(hg.graph) * (factor(QK) @ factor(QK).T))
            M = ops.aggregate(alpha, V).reshape(n, F)
        else:
            M = QK.reshape(n, F) * 0.0
        A = ops.gelu(M)
        # the output projection and the gated skip z = σ(s) a + (1 − σ(s)) x in one product
        # pair per type, [gelu(m) | x] [σ(s) W_out ; (1 − σ(s)) I] + σ(s) b_out, without
        # the concatenation
        out = []
        for t in targets:
            W, b = p[f"W_out_{t}"], p[f"b_out_{t}"]
            if self.in_channels[t] == F:
                gate = ops.sigmoid(p[f"skip_{t}"]).reshape(1, 1)
                weights = [W * gate, (1.0 - gate) * np.eye(F, dtype=self.dtype)]
                b = b * gate.reshape(1)
            else:
                weights = [W, None]
            out.append((hg.type_rows(t), weights, b))
        return ops.segment_linear([A, H], out, F)

    def __repr__(self) -> str:
        return (f"HGTConv({self.in_channels}, {self.out_dim}, heads={self.heads}, "
                f"relations={len(self.edge_types)})")
