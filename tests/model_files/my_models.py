"""Models of a user's own file, for ``gblas-gnn train --model FILE.py:NAME``: a
:class:`gblas_gnn.nn.Module` subclass (its forward and backward written with built-in
layers), a composed one (forward only: its backward is derived) and a factory function."""

import numpy as np

import gblas_gnn as gg
from gblas_gnn import ops
from gblas_gnn.nn.init import glorot
from gblas_gnn.nn.models import derive_seeds
from gblas_gnn.ops import leaky_relu, rep


class SkipGAT(gg.nn.Module):
    """GAT → ELU → GAT, plus a linear skip from the input to the output."""

    def __init__(self, in_dim, num_classes, seed=0, dtype=np.float32, executor=None):
        super().__init__(dtype, executor)
        s = derive_seeds(seed, 3)
        kw = {"dtype": dtype, "executor": executor}
        self.body = gg.nn.Sequential(
            gg.nn.GATConv(in_dim, 4, heads=2, seed=s[0], **kw), gg.nn.ELU(dtype=dtype),
            gg.nn.GATConv(8, num_classes, heads=1, concat=False, seed=s[1], **kw))
        self.skip = gg.nn.Linear(in_dim, num_classes, seed=s[2], **kw)

    def children(self):
        return [self.body, self.skip]

    def forward(self, g, H):
        return self.body(g, H) + self.skip(g, H)

    def backward(self, dout):
        return self.body.backward(dout) + self.skip.backward(dout)


def small_gcn(in_dim, num_classes, seed=0, dtype=np.float32, executor=None):
    """A factory: the built-in GCN with 8 hidden features and no dropout."""
    return gg.nn.models.gcn(in_dim, num_classes, hidden=8, dropout=0.0, seed=seed,
                            dtype=dtype, executor=executor)


class TropicalGATv2(gg.nn.Module):
    """Composed, forward only: GATv2 scores aggregated by max, then by sum."""

    def __init__(self, in_dim, num_classes, seed=0, dtype=np.float32, executor=None):
        super().__init__(dtype, executor)
        rng = np.random.default_rng(seed)
        for name, shape in [("W1", (in_dim, 8)), ("a1", (1, 8)), ("W2", (8, num_classes)),
                            ("a2", (1, num_classes))]:
            self.add_param(name, glorot(shape, rng, self.dtype))

    def _attend(self, A, X, a, aggr):
        E = A.S * (leaky_relu(rep(X) + rep(X).T, 0.2) @ a[0])
        return ops.aggregate(ops.softmax(E), X, aggr)

    def forward(self, g, H):
        A, p = g.with_self_loops().A, self.params
        Z = ops.elu(self._attend(A, H @ p["W1"], p["a1"], "max"))
        return self._attend(A, Z @ p["W2"], p["a2"], "sum")
