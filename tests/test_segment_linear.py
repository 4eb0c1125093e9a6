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


# ---------------------------------------------------------------- several inputs
class TwoInputs(gg.nn.Module):
    """``[H | H²]`` through per-segment weight pairs, one segment reading only the second
    array, and H read again afterwards (its cotangent sums several readers: the products add
    into the sum the backward holds)."""

    def __init__(self, executor=None):
        super().__init__(np.float64, executor)
        rng = np.random.default_rng(4)
        self.add_param("A0", rng.standard_normal((4, 3)))
        self.add_param("B0", rng.standard_normal((2, 3)))
        self.add_param("b0", rng.standard_normal(3))
        self.add_param("B1", rng.standard_normal((4, 3)))

    def forward(self, g, H):
        p = self.params
        Q = H * H
        Y = ops.segment_linear([H, Q], [(SEGMENTS[0], [p["A0"], p["B0"]], p["b0"]),
                                        (SEGMENTS[1], [None, p["B1"]], None)], 3)
        Y2 = ops.segment_linear(H, [(SEGMENTS[1], p["B1"], None)], 3)
        return ops.aggregate(ops.structure(g), Y * Y + Y2, "sum") + H[:, :3]


def _typed_reference(A, H, p):
    Y = np.zeros((N, 2))
    Y[0:4] = H[0:4, :3] @ p["W0"] + p["b0"]
    Y[[5, 7, 8]] = H[[5, 7, 8]] @ p["W1"]
    return A @ (Y * Y)


def _two_inputs_reference(A, H, p):
    Q = H * H
    Y, Y2 = np.zeros((N, 3)), np.zeros((N, 3))
    Y[0:4] = H[0:4] @ p["A0"] + Q[0:4, :2] @ p["B0"] + p["b0"]
    Y[[5, 7, 8]] = Q[[5, 7, 8]] @ p["B1"]
    Y2[[5, 7, 8]] = H[[5, 7, 8]] @ p["B1"]
    return A @ (Y * Y + Y2) + H[:, :3]


class Whole(gg.nn.Module):
    """One segment over every row reading two arrays whole (SAGE's ``[AGG(H) | H] [W_l;
    W_r] + b``): each input's cotangent is the segment's own product."""

    def __init__(self, executor=None):
        super().__init__(np.float64, executor)
        rng = np.random.default_rng(7)
        self.add_param("W", rng.standard_normal((4, 3)))
        self.add_param("V", rng.standard_normal((4, 3)))
        self.add_param("b", rng.standard_normal(3))

    def forward(self, g, H):
        p = self.params
        M = ops.aggregate(ops.structure(g), H, "mean")
        return ops.segment_linear([M, H], [(slice(0, N), [p["W"], p["V"]], p["b"])], 3)


def _whole_reference(A, H, p):
    pattern = (A.toarray() != 0).astype(float)
    M = pattern @ H / np.maximum(pattern.sum(axis=1, keepdims=True), 1)
    return M @ p["W"] + H @ p["V"] + p["b"]


class Reversed(gg.nn.Module):
    """One segment over every row, given in reverse order: row ``i`` of the output is row
    ``i``'s product all the same (not the reversed product written as the output)."""

    def __init__(self, executor=None):
        super().__init__(np.float64, executor)
        self.add_param("W", np.random.default_rng(8).standard_normal((4, 3)))

    def forward(self, g, H):
        return ops.segment_linear(H * H, [(slice(None, None, -1), self.params["W"], None)], 3)


def _reversed_reference(A, H, p):
    return (H * H) @ p["W"]


class Unread(gg.nn.Module):
    """A second input no segment reads (HGT without a gated skip): no cotangent from it."""

    def __init__(self, executor=None):
        super().__init__(np.float64, executor)
        self.add_param("W", np.random.default_rng(9).standard_normal((4, 2)))

    def forward(self, g, H):
        return ops.segment_linear([H * H, H], [(SEGMENTS[0], [self.params["W"], None], None)],
                                  2)


def _unread_reference(A, H, p):
    Y = np.zeros((N, 2))
    Y[0:4] = (H * H)[0:4] @ p["W"]
    return Y


MODULES = [(Typed, _typed_reference), (TwoInputs, _two_inputs_reference),
           (Whole, _whole_reference), (Reversed, _reversed_reference),
           (Unread, _unread_reference)]
IDS = ["one-input", "two-inputs", "whole-rows", "reversed-rows", "unread-input"]


@pytest.mark.parametrize("module,reference", MODULES, ids=IDS)
def test_equals_numpy(executor, module, reference):
    g = _graph()
    H = np.random.default_rng(2).standard_normal((N, 4))
    layer = module(executor)
    p = {k: gg.to_numpy(v) for k, v in layer.params.items()}
    got = gg.to_numpy(layer(g, executor.asarray(H)))
    np.testing.assert_allclose(got, reference(g.to_scipy(), H, p), rtol=1e-12, atol=1e-12)


@pytest.mark.cpu_only
@pytest.mark.parametrize("module", [m for m, _ in MODULES], ids=IDS)
def test_central_differences(module):
    check_module_grads(module(), _graph(), np.random.default_rng(3).standard_normal((N, 4)))


class BadSegments(gg.nn.Module):
    def __init__(self, segments, inputs):
        super().__init__(np.float64)
        self.add_param("W", np.ones((4, 2)))
        self.segments, self.inputs = segments, inputs

    def forward(self, g, H):
        W = self.params["W"]
        xs = {"one": H, "two": [H, H], "param": [H, W], "none": []}[self.inputs]
        segs = [(rows, {"W": W, "pair": [W, W], "none": [None, None], "one": [W]}[w], None)
                for rows, w in self.segments]
        return ops.segment_linear(xs, segs, 2)


@pytest.mark.parametrize("segments,inputs,match", [
    ([(slice(0, 4), "W"), (slice(3, 6), "W")], "one", "overlap"),
    ([(slice(0, 4), "W"), (np.array([1, 7]), "W")], "one", "overlap"),
    ([(slice(0, 4), "one")], "two", "2 inputs"),
    ([(slice(0, 4), "none")], "two", "at least one weight"),
    ([(slice(0, 4), "pair")], "param", "2-D vertex-indexed"),
    ([], "none", "at least one input"),
])
def test_bad_segments(segments, inputs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        BadSegments(segments, inputs)(_graph(), np.zeros((N, 4)))
