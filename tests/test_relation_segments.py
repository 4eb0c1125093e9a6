"""The vertices of a typed graph grouped by the relations they have edges of, and the relations
stacked group by group (``gblas_gnn.relation_segments``): the grouping's rule, the stack's
rows against every relation's dense adjacency, the plain stacking where grouping would not
pay, and R-GCN's products over the groups against the plain stacking's, forward and every
gradient."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gblas_gnn as gg
from gblas_gnn import relation_segments
from gblas_gnn.compose import vjp
from gblas_gnn.data import typed_random


def _hetero(seed: int, sizes=(7, 5, 3), degree: float = 2.0):
    """A small typed graph: three vertex types, three relations and their reverses, some
    vertices without edges of a relation they could have."""
    nodes = dict(zip("abc", sizes, strict=True))
    rels = {("a", "x", "b"): int(degree * sizes[1]), ("b", "y", "c"): int(degree * sizes[2]),
            ("a", "z", "a"): int(degree * sizes[0])}
    return typed_random(nodes, rels, seed=seed, reverse=True, dtype=np.float64)


def _typed(seed: int, sizes=(7, 5, 3), degree: float = 2.0):
    """:func:`_hetero`'s homogeneous form (R-GCN's graph)."""
    return _hetero(seed, sizes, degree).to_homogeneous()[0]


def _dense(g, side: str, mean: bool) -> list[np.ndarray]:
    """Every relation's dense ``A_r`` (``"targets"``) or ``A_rᵀ`` (``"sources"``), with the
    mean's ``1/|N_r(i)|`` values."""
    out = []
    for r in range(g.num_relations):
        A = g.relation(r).A.to_dense(fill_value=0).astype(np.float64)
        if mean:
            deg = A.sum(axis=1, keepdims=True)
            A = np.divide(A, deg, out=np.zeros_like(A), where=deg > 0)
        out.append(A if side == "targets" else A.T)
    return out


def _check_stack(g, side: str, mean: bool, loops: bool) -> None:
    stack = g.segmented_relations(side, mean, loops)
    M = stack.matrix.to_dense(fill_value=0)
    dense = _dense(g, side, mean)
    R, n = g.num_relations, g.n
    seen = np.zeros(n, np.int64)
    covered = np.zeros(M.shape[0], bool)
    for s in stack.segments:
        rows = np.arange(n)[s.rows]
        assert rows.size == s.size and np.all(np.diff(rows) > 0)
        assert s.offset % relation_segments.ROW_ALIGN == 0
        seen[rows] += 1
        B = len(s.blocks)
        assert list(s.blocks) == sorted(s.blocks) and (not loops or s.blocks[-1] == R)
        block = M[s.offset:s.stop].reshape(s.size, B, n)
        covered[s.offset:s.stop] = True
        for b, r in enumerate(s.blocks):
            want = np.eye(n)[rows] if r == R else dense[r][rows]
            np.testing.assert_array_equal(block[:, b], want)
        for r in set(range(R)) - set(s.blocks.tolist()):    # a relation left out: no edge
            assert not dense[r][rows].any()
    assert np.all(seen == 1)
    assert not M[~covered].any()                             # the alignment's rows are empty
    plain = g.stacked_relations(side, mean, loops)
    assert stack.matrix.nvals == plain.nvals


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**16), sizes=st.tuples(*[st.integers(1, 9)] * 3),
       degree=st.sampled_from([0.5, 1.0, 3.0]))
def test_a_segmented_stack_holds_every_relations_rows(seed, sizes, degree):
    """Each segment's block of vertex ``v`` and relation ``r`` is row ``v`` of ``A_r``
    (``"targets"``) or of ``A_rᵀ`` (``"sources"``), the identity's last with ``loops``; every
    vertex is in one segment; a relation a segment leaves out has no edge at its vertices;
    the rows that align the segments are empty; the mean's values are ``1/|N_r(i)|``."""
    g = _typed(seed, sizes, degree)
    for side in ("targets", "sources"):
        for mean in (False, True):
            for loops in (False, True):
                _check_stack(g, side, mean, loops)


def test_the_grouping_rule():
    """Signatures held by at least n/64 vertices are groups; a rarer one joins the group with
    the fewest blocks that contains it (the larger on a tie), or else the last group, whose
    signature is the union of what joins it."""
    n = 615                                           # groups from 615 // 64 = 9 vertices on
    sig = ([(0, 1)] * 300 + [(2,)] * 150 + [(1,)] * 145 + [(0,)] * 5 + [(3,)] * 5 + [()] * 5
           + [(0, 3)] * 5)
    joins = {(0, 1): (0, 1), (2,): (2,), (1,): (1,), (0,): (0, 1), (): (2,), (3,): (0, 3),
             (0, 3): (0, 3)}
    order = np.random.default_rng(0).permutation(n)   # the vertices in no particular order
    vertex = np.array([order[v] for v, rs in enumerate(sig) for _ in rs], np.int64)
    rel = np.array([r for rs in sig for r in rs], np.int64)
    assign, relations = relation_segments.segment_vertices(vertex, rel, n, 4, loops=False)
    groups = [tuple(int(r) for r in rs) for rs in relations]
    assert sorted(groups) == [(0, 1), (0, 3), (1,), (2,)]
    for v, s in enumerate(sig):
        assert groups[assign[order[v]]] == joins[s], s


def test_a_graph_whose_vertices_have_most_relations_is_stacked_plainly():
    """Where grouping saves less than a quarter of the block rows (random relation ids: most
    vertices have most relations) the stack is the plain one as a single segment; more than
    64 relations are always stacked plainly."""
    rng = np.random.default_rng(1)
    n, m = 60, 900
    ei = np.unique(np.stack([rng.integers(0, n, m), rng.integers(0, n, m)]), axis=1)
    g = gg.Graph.from_edge_index(ei, n, edge_type=rng.integers(0, 3, ei.shape[1]))
    for side in ("targets", "sources"):
        stack = g.segmented_relations(side, True, loops=True)
        assert len(stack.segments) == 1 and stack.segments[0].rows == slice(0, n)
        assert stack.matrix is g.stacked_relations(side, True, loops=True)
        assert list(stack.segments[0].blocks) == [0, 1, 2, 3]
    many = gg.Graph.from_edge_index(np.array([[0, 1], [1, 2]]), 3,
                                    edge_type=np.array([0, 70]))
    assert len(many.segmented_relations().segments) == 1
    assert g.segmented_relations("sources") is g.segmented_relations("sources")   # built once
    with pytest.raises(ValueError, match="side must be 'targets' or 'sources'"):
        g.segmented_relations("rows")
    with pytest.raises(ValueError, match="no relations"):
        gg.Graph.from_edges(np.array([0]), np.array([1]), 2).segmented_relations()


def test_a_typed_graph_stacks_each_type_with_its_own_relations():
    """In a typed graph's homogeneous form each vertex type is one segment of consecutive
    vertices with the relations that reach it: about half the plain stacking's block rows in
    this citation-like graph."""
    hg = _hetero(3, sizes=(400, 300, 200), degree=8.0)
    g = hg.to_homogeneous()[0]
    R = g.num_relations
    for side, end in (("targets", 2), ("sources", 0)):
        stack = g.segmented_relations(side, loops=True)
        assert [s.rows for s in stack.segments] == [slice(0, 400), slice(400, 700),
                                                    slice(700, 900)]
        reach = [[r for r, key in enumerate(hg.edge_types) if key[end] == t] + [R]
                 for t in "abc"]
        assert [list(s.blocks) for s in stack.segments] == reach
        assert stack.matrix.nrows < 0.6 * g.n * (R + 1)


def _products(g, X, W, root, bias, aggr, G):
    args = [X, W] + [a for a in (root, bias) if a is not None]

    def f(X, W, *rest):
        rest = list(rest)
        r = rest.pop(0) if root is not None else None
        b = rest.pop(0) if bias is not None else None
        return gg.ops.relational_linear(g, X, W, aggr, root=r, bias=b)
    out, pull = vjp(f, *args, vertex=(0,))
    return [out, *pull(G)]


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), aggr=st.sampled_from(["sum", "mean"]),
       dims=st.sampled_from([(4, 4), (3, 5), (5, 3)]), extras=st.booleans())
def test_products_over_the_groups_equal_the_plain_stacking(seed, aggr, dims, extras):
    """R-GCN's sum over a typed graph, forward and the cotangents of ``H``, ``W``, the root
    and the bias, every way round (``o = k``: aggregated first, the sources' stack back;
    ``o > k``: the targets' back; ``o < k``: projected first over the sources' stack),
    equals the plain stacking's (the grouping switched off) to rounding."""
    k, o = dims
    rng = np.random.default_rng(seed)
    grouped = _typed(seed, sizes=(9, 6, 4))
    R, n = grouped.num_relations, grouped.n
    X, W, G = rng.standard_normal((n, k)), rng.standard_normal((R, k, o)), \
        rng.standard_normal((n, o))
    root, bias = (rng.standard_normal((k, o)), rng.standard_normal(o)) if extras else \
        (None, None)
    got = _products(grouped, X, W, root, bias, aggr, G)
    side = "targets" if k <= o else "sources"
    assert len(grouped.segmented_relations(side, loops=extras).segments) > 1
    with pytest.MonkeyPatch.context() as m:
        m.setattr(relation_segments, "SAVING", 1.0)      # nothing saves all: stacked plainly
        plain = _typed(seed, sizes=(9, 6, 4))
        assert len(plain.segmented_relations(side, loops=extras).segments) == 1
        want = _products(plain, X, W, root, bias, aggr, G)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(gg.to_numpy(a), gg.to_numpy(b), rtol=1e-12, atol=1e-12)


def test_a_graph_of_many_relations_takes_the_loop_over_relations(monkeypatch):
    """A stack of more than 16 blocks a vertex (20 relations on random ids: little to group
    by) is not built into the stacked form's arrays: the loop over relations runs, with the
    values of a per-relation reference; a typed graph still takes the stacked form."""
    rng = np.random.default_rng(4)
    n, R = 60, 20
    ei = np.unique(np.stack([rng.integers(0, n, 3000), rng.integers(0, n, 3000)]), axis=1)
    g = gg.Graph.from_edge_index(ei, n, edge_type=rng.integers(0, R, ei.shape[1]),
                                 num_relations=R, dtype=np.float64)
    assert g.segmented_relations().matrix.nrows > 16 * n
    X, W = rng.standard_normal((n, 3)), rng.standard_normal((R, 3, 4))

    def refuse(*args, **kwargs):
        raise AssertionError("the stacked form ran")
    monkeypatch.setattr(gg.ops, "stacked_relational_linear", refuse)
    want = sum(A @ X @ W[r] for r, A in enumerate(_dense(g, "targets", True)))
    np.testing.assert_allclose(gg.to_numpy(gg.ops.relational_linear(g, X, W, "mean")), want,
                               rtol=1e-12, atol=1e-12)
    typed = _typed(1)
    with pytest.raises(AssertionError, match="the stacked form ran"):
        gg.ops.relational_linear(typed, np.zeros((typed.n, 3)),
                                 np.zeros((typed.num_relations, 3, 4)), "mean")
