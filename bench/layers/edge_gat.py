r"""DGL's ``EdgeGATConv`` composed with ``gg.ops``, and its PyG twin: the ``edgegat`` row.

DGL's graph attention with edge features is another model than PyG's ``GATConv(edge_dim=…)``:
the projected edge features :math:`e'_{ji} = W_e e_{ji}` enter the messages as well as the
scores, and a residual projection is added. Per head ``h`` (columns of width ``f``), with
:math:`X = H W`:

.. math::
    c_{ij,h} &= \mathrm{LeakyReLU}_{0.2}\big(X_{j,h} \cdot a^{l}_h + X_{i,h} \cdot a^{r}_h
               + e'_{ji,h} \cdot a^{e}_h\big), \qquad
    \alpha_{ij,h} = \mathrm{softmax}_{j \to i}(c_{ij,h}) \\
    Z_{i,h} &= \textstyle\sum_{j \to i} \alpha_{ij,h} \big(X_{j,h} + e'_{ji,h}\big)
               + (H W_{res})_{i,h} + b_h

No library but DGL ships it, and no PyG layer computes it, so the row's PyG side is the model
written the way a PyG user writes one (:class:`torch_geometric.nn.MessagePassing`, PyG's
``softmax`` over each target's in-edges): :func:`edge_gat_pyg`. Ours is :func:`EdgeGAT`, a
user's composition of a few lines whose backward is derived. Its edge term in the scores is
one number per edge and head (:math:`e_{ji} \cdot M_{:,h}`, ``M`` a product of the
parameters); in the messages it leaves the edges, :math:`\sum_j \alpha_{ij,h} e'_{ji,h} =
W_{e,h}^\top \sum_j \alpha_{ij,h} e_{ji}`, the features aggregated at their own width, as
``TransformerConv`` does (written at the edges, ``rep(X).T + g.edge_attr @ W_e``, the same
model took twice as long at case M: 757 against 369 ms forward + backward, Intel Xeon). DGL's
layer runs as it is (:mod:`bench.peers.dgl_layers`).

Parameters (our layout; PyG's twin and DGL's layer hold the same under DGL's names,
:mod:`bench.peers.mapping`): ``W`` (k_in, h·f), ``att_src``, ``att_dst``, ``att_edge`` (h, f),
``W_e`` (edge_dim, h·f), ``W_res`` (k_in, h·f), ``bias`` (h·f).
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["EdgeGAT", "edge_gat_init", "edge_gat_ours", "edge_gat_pyg"]

#: DGL's default LeakyReLU slope
NEGATIVE_SLOPE = 0.2


def edge_gat_init(heads: int, edge_dim: int):
    """``(k_in, k_out, rng) -> params``: the row's seeded weights in our layout (nonzero
    biases, so that a swapped bias shows in the agreement)."""
    def init(k_in, k_out, rng):
        from .rows import _random

        f = k_out // heads
        return {"W": _random(rng, (k_in, k_out)), "att_src": _random(rng, (heads, f)),
                "att_dst": _random(rng, (heads, f)), "att_edge": _random(rng, (heads, f)),
                "W_e": _random(rng, (edge_dim, k_out)), "W_res": _random(rng, (k_in, k_out)),
                "bias": _random(rng, (k_out,), 0.1)}
    return init


@functools.cache
def _module_class():
    import gblas_gnn as gg
    from gblas_gnn import ops
    from gblas_gnn.ops import leaky_relu, rep

    class EdgeGATModule(gg.nn.Module):
        """DGL's ``EdgeGATConv`` (the module docstring), composed; the graph's edges as given
        (no loops added) and their features ``g.edge_attr``."""

        def __init__(self, k_in: int, f: int, heads: int, edge_dim: int, seed: int = 0,
                     dtype=np.float32, executor=None):
            super().__init__(dtype, executor)
            self.f, self.heads, self.edge_dim = f, heads, edge_dim
            rng = np.random.default_rng(seed)
            for name, value in edge_gat_init(heads, edge_dim)(k_in, heads * f, rng).items():
                self.add_param(name, value.astype(self.dtype))

        def forward(self, g, H):
            p, n, h, f = self.params, H.shape[0], self.heads, self.f
            X = (H @ p["W"]).reshape(n, h, f)
            s, d = (X * p["att_src"]).sum(-1), (X * p["att_dst"]).sum(-1)     # (n, h)
            # e'_ji · a^e_h = e_ji · M[:, h]: one number per edge and head at the edge
            M = (p["W_e"].reshape(self.edge_dim, h, f) * p["att_edge"]).sum(-1)
            scores = rep(d) + rep(s).T + g.edge_attr @ M
            alpha = ops.softmax(ops.structure(g) * leaky_relu(scores, NEGATIVE_SLOPE))
            # Σ_j α X_j, and the edge term out of the edges: per head, the features' own
            # aggregation Σ_j α e_ji (width edge_dim) times that head's W_e, all heads in
            # one product with W_e's heads on a block diagonal (h·edge_dim, h·f); both sums
            # in one pass, the attention computed once (ops.aggregate_with_edges)
            Zc = ops.aggregate_with_edges(alpha, X, g.edge_attr)
            Z = Zc[..., :f].reshape(n, h * f)
            Ze = Zc[..., f:].reshape(n, h * self.edge_dim)
            return Z + Ze @ (ops.concat([p["W_e"]] * h, axis=0) * self._heads_mask()) \
                + H @ p["W_res"] + p["bias"]

        def _heads_mask(self):
            """1 where row block ``h'`` (edge_dim rows) meets column block ``h`` (f
            columns) with ``h' = h``, else 0: a constant of the executor's arrays."""
            xp, e, f, h = self.xp, self.edge_dim, self.f, self.heads
            return (xp.arange(h * e)[:, None] // e
                    == xp.arange(h * f)[None, :] // f).astype(self.dtype)

    return EdgeGATModule


def EdgeGAT(k_in: int, f: int, heads: int, edge_dim: int, seed: int = 0, dtype=np.float32,
            executor=None):
    """Our composed ``EdgeGATConv`` module (:func:`_module_class`)."""
    return _module_class()(k_in, f, heads, edge_dim, seed, dtype, executor)


def edge_gat_ours(heads: int, edge_dim: int):
    """The row's factory ``(k_in, k_out, seed, executor) -> module``."""
    def make(k_in, k_out, seed, executor):
        return EdgeGAT(k_in, k_out // heads, heads, edge_dim, seed=seed, executor=executor)
    return make


def edge_gat_pyg(heads: int, edge_dim: int):
    """The row's PyG factory ``(k_in, k_out) -> module``: the model as a
    :class:`~torch_geometric.nn.MessagePassing`, called as ``(x, edge_index, edge_attr)``."""
    def make(k_in, k_out):
        import torch
        from torch_geometric.nn import MessagePassing
        from torch_geometric.utils import softmax

        f = k_out // heads

        class EdgeGATPyG(MessagePassing):
            def __init__(self):
                super().__init__(aggr="add", node_dim=0)
                self.fc = torch.nn.Linear(k_in, k_out, bias=False)
                self.fc_edge = torch.nn.Linear(edge_dim, k_out, bias=False)
                self.res_fc = torch.nn.Linear(k_in, k_out, bias=False)
                for name in ("attn_l", "attn_r", "attn_edge"):
                    setattr(self, name, torch.nn.Parameter(torch.zeros(1, heads, f)))
                self.bias = torch.nn.Parameter(torch.zeros(k_out))

            def forward(self, x, edge_index, edge_attr):
                feat = self.fc(x).view(-1, heads, f)
                fe = self.fc_edge(edge_attr).view(-1, heads, f)
                out = self.propagate(edge_index, x=feat, el=(feat * self.attn_l).sum(-1),
                                     er=(feat * self.attn_r).sum(-1), fe=fe,
                                     ee=(fe * self.attn_edge).sum(-1))
                return out.reshape(-1, k_out) + self.res_fc(x) + self.bias

            def message(self, x_j, el_j, er_i, fe, ee, index, ptr, size_i):
                c = torch.nn.functional.leaky_relu(el_j + er_i + ee, NEGATIVE_SLOPE)
                return (x_j + fe) * softmax(c, index, ptr, size_i).unsqueeze(-1)

        return EdgeGATPyG()
    return make
