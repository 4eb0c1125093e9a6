"""The passes over the scores' lanes (:func:`gblas_gnn.executors.cpu._head_unrolling.
score_lanes`): which scores they take, the loops they write, and results equal to the
reference lowering's (GATv2 with several heads, with and without edge features, and the
Transformer's scaled dot)."""

from __future__ import annotations

import numpy as np
import pytest

import gblas_gnn as gg
from gblas_gnn import ops
from gblas_gnn.compose.expr import Masked, Softmax
from gblas_gnn.compose.lower import build
from gblas_gnn.executors.cpu._head_unrolling import score_lanes
from gblas_gnn.executors.cpu._program_kernels import source
from gblas_gnn.ir.plan import plan
from gblas_gnn.ops import rep

pytestmark = pytest.mark.cpu_only  # the cpu generator's own loops

_G = gg.Graph.from_edges([0, 1, 2], [1, 2, 0], 3)


def _plan(scores, heads: int, width: int):
    X = np.ones((3, heads, width), np.float32)
    return plan(build(Softmax(Masked(_G.A, scores, True)), ("aggregate", "sum"), X).structure)


def _gatv2_scores(heads: int, width: int, a_shape=None):
    R, C = (np.ones((3, heads, width), np.float32) for _ in range(2))
    a = np.ones(a_shape or (heads, width), np.float32)
    return (ops.leaky_relu(rep(R) + rep(C).T, 0.2) * a).sum(-1)


def _kernel(text: str, name: str) -> str:
    start = text.index(f"def {name}(")
    end = text.find("\n@nb.njit", start)
    return text[start:] if end < 0 else text[start:end]


@pytest.mark.parametrize("heads, width, lanes", [
    (4, 8, (4, 8)), (2, 3, (2, 3)), (8, 4, (8, 4)),
    (1, 32, None),                      # one head: its loop is all the lanes already
    (4, 1, None),                       # one channel a head: no loop to walk
    (9, 4, None),                       # more heads than a forward writes out
])
def test_the_lanes_of_gatv2s_scores(heads, width, lanes):
    assert score_lanes(_plan(_gatv2_scores(heads, width), heads, width)) == lanes


def test_a_scaled_dot_has_lanes_and_its_scale_reaches_every_pass():
    Q, K = (np.ones((3, 4, 8), np.float32) for _ in range(2))
    p = _plan((rep(Q) * rep(K).T).sum(-1) * 0.25, 4, 8)      # the Transformer's q·k/√d
    assert score_lanes(p) == (4, 8)
    assert p.structure.numbers == ((0.25, False),)          # read at run time, as nm0
    text = source(p)
    for kernel in ("forward", "column_rows"):
        code = _kernel(text, kernel)
        assert "nm0 = np.float32(NUM[0])" in code and code.count("* nm0") == 4   # per head


def test_scores_read_per_head_or_per_channel_alone_keep_the_loop_per_head():
    shared = _gatv2_scores(4, 8, a_shape=(8,))              # one vector for every head
    assert score_lanes(_plan(shared, 4, 8)) is None
    Q, K = (np.ones((3, 4, 8), np.float32) for _ in range(2))
    u = np.ones((3, 4), np.float32)
    dot_plus_bias = (rep(Q) * rep(K).T).sum(-1) + rep(u)     # not a channel sum alone
    assert score_lanes(_plan(dot_plus_bias, 4, 8)) is None


def test_every_pass_walks_the_scores_lanes_in_one_loop():
    text = source(_plan(_gatv2_scores(4, 8), 4, 8))
    forward, columns, rows = (_kernel(text, k) for k in ("forward", "column_pass",
                                                          "column_rows"))
    # the forward: each head's score summed over its lanes under a select, no loop per head
    assert "R0l[i]" in forward and "C1l[j]" in forward and "P2l[" in forward
    assert forward.count(" >= 24 else ") == 1 and "R0[i, 0]" not in forward
    # the column pass: every head's eb, then one loop giving the columns' rows their share
    assert "dC1l[j]" in columns and "C1[j, 0]" not in columns
    # the light row pass: one loop over the lanes, no loop over the heads
    assert "in range(32):" in rows and "for hh in range(" not in rows
    assert "EB[p, 3]" in rows and "R0l[i]" in rows and "dP2l[i, " in rows


@pytest.mark.parametrize("heads, width", [(2, 16), (3, 8)])
def test_below_four_heads_the_lanes_count_is_read_at_run_time(heads, width):
    """With two or three heads every loop over the scores' lanes takes its trip count from
    an operand's shape (``nl``): written in, LLVM unrolled it whole and left it scalar (HGT's
    light row pass 52 against 29 ms on one thread); from four heads on it stays a literal
    (the test above)."""
    text = source(_plan(_gatv2_scores(heads, width), heads, width))
    for name in ("forward", "column_pass", "column_rows"):
        kernel = _kernel(text, name)
        assert "nl = R0.shape[-2] * R0.shape[-1]" in kernel, name
        assert "in range(nl):" in kernel and f"in range({heads * width}):" not in kernel, name


@pytest.mark.parametrize("layer, heads, out, edge_dim", [
    ("gatv2", 4, 8, None), ("gatv2", 4, 8, 3), ("gatv2", 3, 5, 2), ("gatv2", 4, 1, 2),
    ("transformer", 4, 8, None)])
def test_attention_over_lanes_equals_the_reference(layer, heads, out, edge_dim):
    """Forward and every cotangent (the edge features' included) on the cpu executor, which
    walks the lanes, equal the primitives executor's reference lowering (float64)."""
    make = gg.nn.GATv2Conv if layer == "gatv2" else gg.nn.TransformerConv
    rng = np.random.default_rng(heads * out)
    n, m, k = 40, 200, 6
    pairs = sorted({(int(s), int(t)) for s, t in rng.integers(0, n, size=(m, 2))})
    src, dst = np.array(pairs).T
    H = rng.standard_normal((n, k))
    attr = rng.standard_normal((len(pairs), edge_dim)) if edge_dim else None
    outs = {}
    for ex in ("cpu", "primitives"):
        g = gg.Graph.from_edges(src, dst, n, dtype=np.float64, edge_attr=attr)
        if edge_dim:
            g.edge_attr.requires_grad_()
        model = make(k, out, heads=heads, edge_dim=edge_dim, dtype=np.float64, executor=ex)
        model.train()
        Z = model(g, H)
        dH = model.backward(np.sin(np.asarray(Z)))
        outs[ex] = (np.asarray(Z), dH, {k: v.copy() for k, v in model.grads.items()},
                    model.edge_attr_grad if edge_dim else None)
    (Zc, dHc, gc, ec), (Zp, dHp, gp, ep) = outs["cpu"], outs["primitives"]
    np.testing.assert_allclose(Zc, Zp, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dHc, dHp, rtol=1e-10, atol=1e-12)
    assert gc.keys() == gp.keys()
    for name in gc:
        np.testing.assert_allclose(gc[name], gp[name], rtol=1e-10, atol=1e-12, err_msg=name)
    if edge_dim:
        np.testing.assert_allclose(ec, ep, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("f", [1, 2, 8])
def test_a_composed_gatv2_of_two_heads_equals_the_reference(f):
    """A GATv2 written with ``gg.ops`` (two heads of ``f`` channels: lanes from two channels
    on, none for one) on the cpu executor equals the reference lowering, forward and
    every cotangent."""
    rng = np.random.default_rng(f)
    n = 30
    pairs = sorted({(int(s), int(t)) for s, t in rng.integers(0, n, size=(150, 2))})
    src, dst = np.array(pairs).T
    g = gg.Graph.from_edges(src, dst, n, dtype=np.float64)
    args = [rng.standard_normal(s) for s in ((n, 2, f), (n, 2, f), (2, f))]
    dZ = rng.standard_normal((n, 2, f))

    def gatv2(A, Xl, Xr, a):
        scores = (ops.leaky_relu(rep(Xr) + rep(Xl).T, 0.2) * a).sum(-1)
        return ops.aggregate(ops.softmax(ops.structure(A) * scores), Xl)

    def run(ex):
        ex = gg.executors.get_executor(ex)
        out, pull = gg.compose.vjp(gatv2, g.A, *args, executor=ex, vertex=(1, 2))
        return [np.asarray(x) for x in (out, *pull(dZ)[1:])]

    for got, want in zip(run("cpu"), run("primitives"), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
