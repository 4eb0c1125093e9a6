"""``ops.segment_linear``: rows by segment through their own parameters (PyG's
``HeteroLinear``), against numpy and central differences, on every executor."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_module_grads

import gblas_gnn as gg
from gblas_gnn import ops

N = 9
# rows 0..3 (a slice), rows {5, 7, 8} (an index array), rows 4 and 6 in no segment
SEGMENTS = (slice(0, 4), np.array([5, 7, 8]))


class Typed(gg.nn.Module):
    """Two segments: the first reads 3 of the 4 columns, with a bias; the second all 4."""

    def __init__(self, executor=None):
        super().__init__(np.float64, executor)
        rng = np.random.default_rng(0)
        self.add_param("W0", rng.standard_normal((3, 2)))
        self.add_param("b0", rng.standard_normal(2))
        self.add_param("W1", rng.standard_normal((4, 2)))

    def forward(self, g, H):
        p = self.params
        Y = ops.segment_linear(H, [(SEGMENTS[0], p["W0"], p["b0"]),
                                   (SEGMENTS[1], p["W1"], None)], 2)
        return ops.aggregate(ops.structure(g), Y * Y, "sum")   # something after it


def _graph():
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, N, 30), rng.integers(0, N, 30)
    return gg.Graph.from_edges(src, dst, N, dtype=np.float64)


def test_equals_numpy(executor):
    g = _graph()
    H = np.random.default_rng(2).standard_normal((N, 4))
    layer = Typed(executor)
    p = {k: gg.to_numpy(v) for k, v in layer.params.items()}
    Y = np.zeros((N, 2))
    Y[0:4] = H[0:4, :3] @ p["W0"] + p["b0"]
    Y[[5, 7, 8]] = H[[5, 7, 8]] @ p["W1"]
    want = g.to_scipy() @ (Y * Y)
    got = gg.to_numpy(layer(g, executor.asarray(H)))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.cpu_only
def test_central_differences():
    check_module_grads(Typed(), _graph(), np.random.default_rng(3).standard_normal((N, 4)))


class Bad(gg.nn.Module):
    def __init__(self, shape, vertex=True):
        super().__init__(np.float64)
        self.add_param("W", np.ones(shape))
        self.vertex = vertex

    def forward(self, g, H):
        X = H if self.vertex else self.params["W"]
        return ops.segment_linear(X, [(slice(0, 2), self.params["W"], None)], 2)


@pytest.mark.parametrize("shape,vertex,error,match", [
    ((5, 2), True, ValueError, "a weight of shape"),        # reads more columns than H has
    ((4, 3), True, ValueError, "a weight of shape"),        # not the width asked for
    ((4, 2), False, TypeError, "vertex-indexed"),
])
def test_bad_input(shape, vertex, error, match):
    with pytest.raises(error, match=match):
        Bad(shape, vertex)(_graph(), np.zeros((N, 4)))
