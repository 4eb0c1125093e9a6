"""How a graph stores its edge features: the given graph holds its int32 pattern and the
features in its CSR order, with no map back for edges given in that order and no view of the
caller's array; a graph with self loops keeps them as its base's and the loops' apart
(:class:`gblas_gnn.edge_attr.LoopedValues`): no copy of the base's features, the kernels'
``feature_row`` reading every edge's row of them (hypothesis, random graphs with and without
given loops and rows without edges), and a layer on the cpu executor equal to the reference
lowering, which reads the interleaved array, without making that array."""

from __future__ import annotations

import numba as nb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gblas_gnn as gg
from gblas_gnn.edge_attr import IN_CSR_ORDER, LoopedValues
from gblas_gnn.executors.cpu._kernel_primitives import feature_row
from gblas_gnn.executors.cpu.programs import feature_args
from gblas_gnn.executors.patterns import AdjacencyPattern, csr_of

pytestmark = pytest.mark.cpu_only  # the cpu executor's own reading of the features


def _graph(seed: int, n: int, m: int, f: int = 3) -> gg.Graph:
    """``m`` random pairs (given loops among them) with seeded features, in no order."""
    rng = np.random.default_rng(seed)
    pairs = sorted({(int(s), int(t)) for s, t in rng.integers(0, n, size=(m, 2))})
    edges = np.array(pairs, np.int64).reshape(-1, 2).T[:, rng.permutation(len(pairs))]
    return gg.Graph.from_edges(edges[0], edges[1], n, dtype=np.float64,
                               edge_attr=rng.standard_normal((edges.shape[1], f)))


def test_the_given_graph_holds_its_pattern_and_its_own_features():
    """Edges with features and no values: the int32 pattern (``A`` built when read, equal to
    GraphBLAS's), the features a copy of the caller's, the map back kept only for edges
    given out of CSR order."""
    src, dst = np.array([2, 0, 1, 0]), np.array([0, 1, 1, 2])      # CSR order: by target
    attr = np.arange(8.0).reshape(4, 2)
    g = gg.Graph.from_edges(src, dst, 3, dtype=np.float64, edge_attr=attr)
    assert isinstance(g.edge_tensor, AdjacencyPattern)
    assert g.edge_attr.order is IN_CSR_ORDER
    attr[0] = -1.0                                   # the caller's array is not the graph's
    np.testing.assert_array_equal(g.edge_attr.values[0], [0.0, 1.0])
    given = g.edge_attr.given()
    given[:] = 0.0                                   # nor is what given() hands out
    np.testing.assert_array_equal(g.edge_attr.given(), np.arange(8.0).reshape(4, 2))
    pairs = {(0, 2), (1, 0), (1, 1), (2, 0)}            # (target, source)
    rows, cols, vals = g.A.to_coo()
    assert set(zip(rows.tolist(), cols.tolist(), strict=True)) == pairs and (vals == 1).all()
    # the same edges in another order: features in CSR order, the map back kept
    k = np.array([3, 1, 0, 2])
    h = gg.Graph.from_edges(src[k], dst[k], 3, dtype=np.float64,
                            edge_attr=np.arange(8.0).reshape(4, 2)[k])
    assert isinstance(h.edge_attr.order, np.ndarray)
    np.testing.assert_array_equal(h.edge_attr.values, g.edge_attr.values)
    np.testing.assert_array_equal(h.edge_attr.given(), np.arange(8.0).reshape(4, 2)[k])
    assert set(zip(*map(list, h.A.to_coo()[:2]), strict=True)) == pairs


def test_a_duplicate_pair_given_in_csr_order_is_refused():
    with pytest.raises(ValueError, match="duplicate edge 0 -> 1"):
        gg.Graph.from_edges([0, 0, 1], [1, 1, 2], 3, edge_attr=np.ones((3, 2)))


@nb.njit
def _every_row(indptr, indices, EA, EL, ED):
    """``feature_row`` at every edge, as the row passes call it (unsigned ``p``, ``i``,
    ``j``)."""
    out = np.empty((indices.shape[0], EA.shape[1]), EA.dtype)
    for i in range(np.uint64(indptr.shape[0] - 1)):
        for p in range(indptr[i], indptr[i + np.uint64(1)]):
            out[p] = feature_row(EA, EL, ED, p, i, indices[p])
    return out


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**20), n=st.integers(1, 12), m=st.integers(0, 40),
       fill=st.sampled_from(["mean", "add", "max", "min", 0.5]))
def test_feature_row_reads_every_edge_of_a_graph_with_loops(seed, n, m, fill):
    g = _graph(seed, n, m)
    looped = g.with_self_loops(fill)
    split = looped.edge_attr.split
    assert isinstance(split, LoopedValues) and split.base is g.edge_attr.values
    csr = csr_of(looped.edge_tensor)
    indptr, indices = csr.indptr.astype(np.uint64), csr.indices.astype(np.uint64)
    got = _every_row(indptr, indices, *feature_args(split))
    np.testing.assert_array_equal(got, looped.edge_attr.values)
    # a graph without loops apart reads its own rows
    plain = g.edge_attr.values
    base = csr_of(g.edge_tensor)
    np.testing.assert_array_equal(
        _every_row(base.indptr.astype(np.uint64), base.indices.astype(np.uint64),
                   *feature_args(plain)), plain)


def test_the_interleaved_features_are_pygs_order_of_the_loops():
    """The array made from the parts holds the given edges' features where they sit in the
    pattern of ``A + I`` and the fill at every loop (given loops replaced)."""
    g = gg.Graph.from_edges([0, 1, 2, 2, 1], [1, 2, 0, 2, 1], 3, dtype=np.float64,
                            edge_attr=np.arange(10.0).reshape(5, 2))
    looped = g.with_self_loops("add")
    rows, cols, _ = looped.A.to_coo()
    by_pair = {(1, 0): [0, 1], (2, 1): [2, 3], (0, 2): [4, 5]}   # (target, source)
    loops = {0: [4, 5], 1: [0, 1], 2: [2, 3]}     # each row's in-edges but its loop, summed
    want = [loops[int(i)] if i == j else by_pair[int(i), int(j)]
            for i, j in zip(rows, cols, strict=True)]
    np.testing.assert_array_equal(looped.edge_attr.values, want)


@pytest.mark.parametrize("layer", ["gat", "gatv2", "transformer-max"])
def test_a_layer_on_the_cpu_reads_the_parts_and_equals_the_reference(layer):
    """Forward and backward (the features' gradient included) on the cpu executor equal the
    primitives executor's, which reads the interleaved array; the cpu never makes it."""
    make = {"gat": lambda ex: gg.nn.GATConv(4, 3, heads=2, edge_dim=3, dtype=np.float64,
                                            executor=ex),
            "gatv2": lambda ex: gg.nn.GATv2Conv(4, 3, heads=2, edge_dim=3,
                                                dtype=np.float64, executor=ex),
            "transformer-max": lambda ex: gg.nn.TransformerConv(
                4, 3, heads=2, edge_dim=3, aggr="max", dtype=np.float64, executor=ex)}[layer]
    H = np.random.default_rng(1).standard_normal((30, 4))
    outs = {}
    for ex in ("cpu", "primitives"):
        g = _graph(3, 30, 120)
        g.edge_attr.requires_grad_()
        model = make(ex)
        model.train()
        Z = model(g, H)
        dH = model.backward(np.cos(np.asarray(Z)))
        outs[ex] = (np.asarray(Z), dH, model.edge_attr_grad,
                    {k: v.copy() for k, v in model.grads.items()})
        looped = g.with_self_loops()
        assert looped.edge_attr.split is not None
        if ex == "cpu":                          # the interleaved array was never made
            assert looped.edge_attr.split._array is None
    (Zc, dHc, dEc, gc), (Zp, dHp, dEp, gp) = outs["cpu"], outs["primitives"]
    np.testing.assert_allclose(Zc, Zp, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dHc, dHp, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dEc, dEp, rtol=1e-10, atol=1e-12)
    for k in gc:
        np.testing.assert_allclose(gc[k], gp[k], rtol=1e-10, atol=1e-12)


def test_a_program_the_kernels_do_not_run_reads_the_features_made_once():
    """A user semiring's aggregation runs the reference lowering: it reads the interleaved
    array, made from the parts at the first call and kept, and equals the sum's kernels."""
    from gblas_gnn import compose, ops, semirings

    name = "test_looped_user_times"
    semirings.register(name, "plus", lambda s, h: s * h, add_identity=0.0,
                       mul_grad=(lambda s, h: h, lambda s, h: s))
    try:
        looped = _graph(4, 20, 60).with_self_loops()
        rng = np.random.default_rng(2)
        w, X = rng.standard_normal(3), rng.standard_normal((20, 2))

        def aggregate(semiring):
            return compose.evaluate(lambda w, X: ops.aggregate(
                ops.structure(looped) * (looped.edge_attr @ w), X, semiring), w, X,
                executor="cpu")

        assert looped.edge_attr.split._array is None
        want = aggregate("sum")                       # the generated kernels: no array made
        assert looped.edge_attr.split._array is None
        np.testing.assert_allclose(aggregate(name), want, rtol=1e-12)
        made = looped.edge_attr.split._array
        np.testing.assert_array_equal(made, looped.edge_attr.values)
        aggregate(name)
        assert looped.edge_attr.split._array is made   # kept, not made again
    finally:
        semirings.registry._unregister(name)
