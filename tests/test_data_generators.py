"""Kronecker, Erdős–Rényi and CSBM generators, the Dataset container."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from gblas_gnn.data import (
    Dataset,
    csbm,
    edges_to_csr,
    erdos_renyi,
    erdos_renyi_edges,
    kronecker,
    kronecker_edges,
)
from gblas_gnn.data.erdos_renyi import bernoulli_positions
from gblas_gnn.data.kronecker import rmat_indices, threshold_u32, uniform_u32


def _keys(src, dst, n):
    return dst.astype(np.int64) * n + src.astype(np.int64)


def _check_simple(src, dst, n):
    """CSR-sorted, no duplicates, no self loops, ids in range."""
    assert src.shape == dst.shape and src.ndim == 1
    assert src.size == 0 or (src.min() >= 0 and dst.min() >= 0 and max(src.max(), dst.max()) < n)
    assert not np.any(src == dst), "self loop"
    k = _keys(src, dst, n)
    assert np.all(np.diff(k) > 0), "not strictly increasing (duplicate or unsorted)"


def _is_symmetric(src, dst, n):
    return np.array_equal(np.sort(_keys(src, dst, n)), np.sort(_keys(dst, src, n)))


# --------------------------------------------------------------------------- Kronecker
def test_kronecker_deterministic_by_seed():
    s1, d1, n1 = kronecker_edges(10, seed=3)
    s2, d2, n2 = kronecker_edges(10, seed=3)
    s3, d3, _ = kronecker_edges(10, seed=4)
    assert n1 == n2 == 1024
    assert np.array_equal(s1, s2) and np.array_equal(d1, d2)
    assert s1.size != s3.size or not (np.array_equal(s1, s3) and np.array_equal(d1, d3))


@pytest.mark.parametrize("symmetric", [False, True])
def test_kronecker_simple_graph_no_empty_rows(symmetric):
    src, dst, n = kronecker_edges(12, 8, seed=1, symmetric=symmetric)
    _check_simple(src, dst, n)
    assert np.bincount(dst, minlength=n).min() >= 1, "empty row"
    assert _is_symmetric(src, dst, n) == symmetric


def test_kronecker_edge_count_band():
    ef, scale = 16, 12
    n = 1 << scale
    src, dst, _ = kronecker_edges(scale, ef, seed=0, fill_empty_rows=False)
    _check_simple(src, dst, n)
    # dedup / self-loop removal only removes; Graph500 keeps ~80 % at scale 12
    assert 0.6 * ef * n < src.size <= ef * n
    ss, ds, _ = kronecker_edges(scale, ef, seed=0, symmetric=True, fill_empty_rows=False)
    assert src.size < ss.size <= 2 * ef * n and ss.size % 2 == 0


@pytest.mark.parametrize("symmetric", [False, True])
def test_kronecker_fill_rule(symmetric):
    """Filling adds exactly one edge (two if symmetric) per empty row, never a loop."""
    n = 1 << 11
    s0, d0, _ = kronecker_edges(11, 4, seed=5, symmetric=symmetric, fill_empty_rows=False)
    s1, d1, _ = kronecker_edges(11, 4, seed=5, symmetric=symmetric)
    empty = np.flatnonzero(np.bincount(d0, minlength=n) == 0)
    assert empty.size > 0.1 * n  # Kronecker graphs have many isolated vertices
    k0, k1 = _keys(s0, d0, n), _keys(s1, d1, n)
    assert np.isin(k0, k1).all()
    added = ~np.isin(k1, k0)
    if not symmetric:
        assert added.sum() == empty.size
        assert np.array_equal(np.sort(d1[added]), empty)
    else:
        # one undirected edge per isolated vertex, mutual picks merged
        assert empty.size <= added.sum() <= 2 * empty.size
        assert np.isin(empty, d1[added]).all()
    assert not np.any(s1 == d1)


def test_kronecker_degree_skew_vs_er():
    src, dst, n = kronecker_edges(12, 16, seed=0)
    deg = np.bincount(dst, minlength=n)
    assert deg.max() > 10 * deg.mean()
    es, ed, _ = erdos_renyi_edges(n, 16 / n, seed=0)
    edeg = np.bincount(ed, minlength=n)
    assert edeg.max() < 3 * edeg.mean()


def test_kronecker_vertices_are_permuted():
    """Graph500 relabels vertices randomly: without it the low ids (quadrant a+b =
    76 % of the top-level mass) would hold most edges and vertex 0 would be the hub."""
    src, dst, n = kronecker_edges(12, 16, seed=0, fill_empty_rows=False)
    assert 0.4 < np.mean(dst < n // 2) < 0.6
    assert 0.4 < np.mean(src < n // 2) < 0.6
    assert np.bincount(dst, minlength=n).argmax() != 0


def test_rmat_quadrant_law():
    """Each level picks quadrant (0,0),(0,1),(1,0),(1,1) w.p. a, b, c, d."""
    a, b, c = 0.5, 0.2, 0.1  # d = 0.2; asymmetric so row/col mix-ups show
    rng = np.random.default_rng(0)
    cnt = 200_000
    u = uniform_u32(rng, 3 * cnt).reshape(3, cnt)
    ii, jj = rmat_indices(u, threshold_u32(a), threshold_u32(a + b), threshold_u32(a + b + c))
    for level in range(3):
        rb, cb = (ii >> level) & 1, (jj >> level) & 1
        freq = np.array([np.mean((rb == r) & (cb == q)) for r in (0, 1) for q in (0, 1)])
        sd = np.sqrt(np.array([a, b, c, 0.2]) * (1 - np.array([a, b, c, 0.2])) / cnt)
        assert np.all(np.abs(freq - [a, b, c, 0.2]) < 5 * sd), (level, freq)


def test_kronecker_initiator_direction():
    """With b = 0 no level picks quadrant (row 0, col 1): column bits imply row bits,
    so the unpermuted R-MAT matrix is lower-triangular (rows, not columns, from the
    row bit)."""
    a, b, c = 0.6, 0.0, 0.3
    rng = np.random.default_rng(1)
    u = uniform_u32(rng, 4 * 10_000).reshape(4, 10_000)
    ii, jj = rmat_indices(u, threshold_u32(a), threshold_u32(a + b), threshold_u32(a + b + c))
    # b = 0: no level has (row bit 0, col bit 1), hence jj's bits are a subset of ii's
    assert np.all((jj & ~ii) == 0)


def test_kronecker_validation():
    with pytest.raises(ValueError):
        kronecker_edges(-1)
    with pytest.raises(ValueError):
        kronecker_edges(40)
    with pytest.raises(ValueError):
        kronecker_edges(4, a=0.6, b=0.3, c=0.3)
    with pytest.raises(ValueError):
        kronecker_edges(4, a=-0.1)
    with pytest.raises(TypeError):
        kronecker_edges(4.0)
    with pytest.raises(TypeError):
        kronecker_edges(4, dtype_index=np.int16)
    with pytest.raises(TypeError):
        kronecker_edges(4, seed=-1)
    s, d, n = kronecker_edges(6, dtype_index=np.int32)
    assert s.dtype == np.int32 and d.dtype == np.int32


def test_kronecker_tiny_and_empty():
    s, d, n = kronecker_edges(0)
    assert n == 1 and s.size == 0
    s, d, n = kronecker_edges(5, 0)  # no raw edges: only the fill edges
    assert s.size == n and np.array_equal(d, np.arange(n))
    s, d, n = kronecker_edges(5, 0, fill_empty_rows=False)
    assert s.size == 0


# ------------------------------------------------------------------------ Erdős–Rényi
def test_er_deterministic_by_seed():
    a = erdos_renyi_edges(5000, 1e-3, seed=7)
    b = erdos_renyi_edges(5000, 1e-3, seed=7)
    c = erdos_renyi_edges(5000, 1e-3, seed=8)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert a[0].size != c[0].size or not np.array_equal(_keys(*a), _keys(*c))


@pytest.mark.parametrize("symmetric", [False, True])
def test_er_edge_count_and_structure(symmetric):
    n, avg = 20_000, 8.0
    rho = avg / n
    src, dst, _ = erdos_renyi_edges(n, rho, seed=2, symmetric=symmetric, fill_empty_rows=False)
    _check_simple(src, dst, n)
    p = rho * n / (n - 1)
    var = n * (n - 1) * p * (1 - p) * (2 if symmetric else 1)
    assert abs(src.size - rho * n * n) < 5 * math.sqrt(var)
    assert _is_symmetric(src, dst, n) == symmetric
    # no positional bias: first and second half of the columns equally used
    half = np.mean(src < n // 2)
    assert abs(half - 0.5) < 0.01


def test_er_complete_and_empty():
    n = 7
    src, dst, _ = erdos_renyi_edges(n, (n - 1) / n, seed=0)
    assert src.size == n * (n - 1)
    _check_simple(src, dst, n)
    src, dst, _ = erdos_renyi_edges(n, 0.0, seed=0, fill_empty_rows=False)
    assert src.size == 0
    src, dst, _ = erdos_renyi_edges(n, 0.0, seed=0)  # fill: one edge per row
    assert np.array_equal(dst, np.arange(n)) and not np.any(src == dst)
    src, dst, _ = erdos_renyi_edges(n, 0.0, seed=0, symmetric=True)
    assert _is_symmetric(src, dst, n) and np.bincount(dst, minlength=n).min() >= 1


def test_er_no_empty_rows_when_sparse():
    n = 2000
    src, dst, _ = erdos_renyi_edges(n, 1.0 / n, seed=3)  # avg degree 1: ~e^-1 empty
    _check_simple(src, dst, n)
    assert np.bincount(dst, minlength=n).min() >= 1


def test_er_validation():
    with pytest.raises(ValueError):
        erdos_renyi_edges(10, 0.95)
    with pytest.raises(ValueError):
        erdos_renyi_edges(10, -0.1)
    with pytest.raises(ValueError):
        erdos_renyi_edges(10, float("nan"))
    with pytest.raises(TypeError):
        erdos_renyi_edges(10, "0.1")
    with pytest.raises(ValueError):
        erdos_renyi_edges(-3, 0.1)


def test_bernoulli_positions():
    rng = np.random.default_rng(0)
    total, p = 3_000_000, 1e-3
    pos = bernoulli_positions(total, p, rng)
    assert np.all(np.diff(pos) > 0) and pos.min() >= 0 and pos.max() < total
    assert abs(pos.size - total * p) < 5 * math.sqrt(total * p * (1 - p))
    # uniform over the range (the skipping must not drift)
    assert abs(np.mean(pos < total // 2) - 0.5) < 0.03
    assert bernoulli_positions(10, 1.0, rng).tolist() == list(range(10))
    assert bernoulli_positions(10, 0.0, rng).size == 0


# ------------------------------------------------------------------------------ CSR
def test_edges_to_csr_orientation_and_orders():
    src = np.array([0, 2, 1])
    dst = np.array([1, 0, 2])
    m = edges_to_csr(src, dst, 3)
    assert m.dtype == np.float32
    dense = m.toarray()
    assert dense[1, 0] == 1 and dense[0, 2] == 1 and dense[2, 1] == 1 and dense.sum() == 3
    s, d, n = kronecker_edges(8, seed=0)  # sorted fast path == general path
    fast = edges_to_csr(s, d, n)
    perm = np.random.default_rng(0).permutation(s.size)
    slow = edges_to_csr(s[perm], d[perm], n)
    assert (fast != slow).nnz == 0 and fast.has_sorted_indices
    with pytest.raises(ValueError):
        edges_to_csr(np.array([0, 5]), np.array([1, 1]), 3)


# ----------------------------------------------------------------------------- CSBM
def _peak_bytes(fn):
    """``(fn(), the peak of the memory it allocated)`` (tracemalloc: numpy's buffers too;
    deterministic for a seeded generator)."""
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _nbytes(ds) -> int:
    A = ds.adjacency
    return ds.x.nbytes + A.data.nbytes + A.indices.nbytes + A.indptr.nbytes


def test_csbm_memory_is_linear_in_the_output():
    """O(n + |E|) work, checked by what it allocates rather than by a clock: the peak is a
    small multiple of the data set (one n×n float64 would be 32 MB, 10× the bound), and four
    times the vertices at the same degree take about four times the memory, not sixteen."""
    small, peak_small = _peak_bytes(lambda: csbm(seed=0))
    assert peak_small < 8 * _nbytes(small) < 8e6
    big, peak_big = _peak_bytes(lambda: csbm(8000, p_in=0.015 / 4, p_out=0.0025 / 4, seed=0))
    assert 3.5 < big.adjacency.nnz / small.adjacency.nnz < 4.5
    assert peak_big < 5 * peak_small


def test_csbm_defaults_valid():
    ds = csbm(seed=0)
    n = 2000
    assert ds.num_nodes == n and ds.num_classes == 5 and ds.x.shape == (n, 64)
    assert ds.x.dtype == np.float32 and ds.y.dtype == np.int64
    assert np.bincount(ds.y).tolist() == [400] * 5
    A = ds.adjacency
    assert (A != A.T).nnz == 0 and A.diagonal().sum() == 0
    assert A.has_canonical_format and np.all(A.data == 1)
    assert 9.0 < A.nnz / n < 11.0
    # split sizes, disjointness, 20 per class
    assert ds.train_mask.sum() == 100 and ds.val_mask.sum() == 500 and ds.test_mask.sum() == 1000
    assert not (ds.train_mask & ds.val_mask).any()
    assert not (ds.train_mask & ds.test_mask).any()
    assert not (ds.val_mask & ds.test_mask).any()
    assert np.bincount(ds.y[ds.train_mask], minlength=5).tolist() == [20] * 5


def test_csbm_homophily_matches_expectation():
    n, k, p_in, p_out = 3000, 3, 0.01, 0.002
    ds = csbm(n, k, p_in, p_out, seed=4)
    r, c = ds.adjacency.nonzero()
    h = np.mean(ds.y[r] == ds.y[c])
    s = n / k
    expected = p_in * (s - 1) / (p_in * (s - 1) + p_out * (n - s))
    m = r.size / 2
    assert abs(h - expected) < 5 * math.sqrt(expected * (1 - expected) / m)
    exp_deg = p_in * (s - 1) + p_out * (n - s)
    assert abs(r.size / n - exp_deg) < 0.1 * exp_deg


def test_csbm_features_class_means():
    ds = csbm(seed=1, feature_std=0.8)
    cent = np.stack([ds.x[ds.y == c].mean(0) for c in range(ds.num_classes)])
    norms = np.linalg.norm(cent, axis=1)
    assert np.all((norms > 0.85) & (norms < 1.2))  # unit means + noise/sqrt(400)
    resid = ds.x - cent[ds.y]
    assert abs(resid.std() - 0.8) < 0.02


def _ridge_accuracy(feats, ds, lam=1e-2):
    Y = np.eye(ds.num_classes)[ds.y]
    X = np.hstack([feats, np.ones((feats.shape[0], 1))])
    tr = ds.train_mask
    W = np.linalg.solve(X[tr].T @ X[tr] + lam * np.eye(X.shape[1]), X[tr].T @ Y[tr])
    return np.mean((X @ W).argmax(1)[ds.test_mask] == ds.y[ds.test_mask])


def test_csbm_task_is_learnable_but_not_trivial():
    ds = csbm(seed=0)
    A = ds.adjacency + sp.eye(ds.num_nodes)
    d = np.asarray(A.sum(1)).ravel() ** -0.5
    An = sp.diags(d) @ A @ sp.diags(d)
    x = ds.x.astype(np.float64)
    acc_x = _ridge_accuracy(x, ds)
    acc_graph = _ridge_accuracy(An @ (An @ x), ds)
    assert 0.22 < acc_x < 0.5  # features alone: weak
    assert 0.55 < acc_graph < 0.9  # graph helps a lot, still not solved
    assert acc_graph > acc_x + 0.2


def test_csbm_deterministic_and_validation():
    a, b, c = csbm(seed=3), csbm(seed=3), csbm(seed=4)
    assert np.array_equal(a.x, b.x) and (a.adjacency != b.adjacency).nnz == 0
    assert np.array_equal(a.test_mask, b.test_mask)
    assert not np.array_equal(a.x, c.x)
    with pytest.raises(ValueError):
        csbm(n=10, classes=20)
    with pytest.raises(ValueError):
        csbm(n=100, classes=5, train_per_class=30)
    with pytest.raises(ValueError):
        csbm(n=600, val=500, test=1000)
    with pytest.raises(ValueError):
        csbm(p_in=1.5)
    with pytest.raises(ValueError):
        csbm(feature_std=-1.0)
    assert csbm(dtype=np.float64, n=300, val=50, test=50).x.dtype == np.float64


# -------------------------------------------------------------------------- Dataset
def _tiny(**over):
    n = 4
    kw = dict(
        name="t",
        adjacency=sp.csr_matrix(np.array([[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]])),
        x=np.zeros((n, 2), np.float32),
        y=np.array([0, 1, 0, 1]),
        train_mask=np.array([1, 0, 0, 0], bool),
        val_mask=np.array([0, 1, 0, 0], bool),
        test_mask=np.array([0, 0, 1, 1], bool),
        num_classes=2,
    )
    kw.update(over)
    return Dataset(**kw)


def test_dataset_validation():
    ds = _tiny()
    assert ds.num_nodes == 4 and ds.num_edges == 4 and ds.num_features == 2
    assert "num_nodes=4" in repr(ds)
    with pytest.raises(TypeError, match="bool"):
        _tiny(train_mask=np.array([1, 0, 0, 0]))
    with pytest.raises(ValueError, match="shape"):
        _tiny(val_mask=np.zeros(3, bool))
    with pytest.raises(ValueError, match="labels"):
        _tiny(y=np.array([0, 1, 2, 0]))
    with pytest.raises(TypeError, match="integer"):
        _tiny(y=np.array([0.0, 1, 0, 1]))
    with pytest.raises(ValueError, match="square"):
        _tiny(adjacency=sp.csr_matrix((4, 3)))
    with pytest.raises(TypeError, match="scipy"):
        _tiny(adjacency=np.eye(4))
    with pytest.raises(ValueError, match="x has shape"):
        _tiny(x=np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match="NaN"):
        _tiny(x=np.full((4, 2), np.nan, np.float32))
    with pytest.raises(TypeError, match="float32"):
        _tiny(x=np.zeros((4, 2), np.int64))
    with pytest.raises(ValueError, match="disjoint"):
        _tiny(val_mask=np.array([1, 0, 0, 0], bool))
    dup = sp.coo_matrix((np.ones(2), ([0, 0], [1, 1])), shape=(4, 4))
    with pytest.raises(ValueError, match="duplicate"):
        _tiny(adjacency=dup)


# ------------------------------------------------------------- Graph wrappers (lazy)
def test_graph_wrappers_match_arrays():
    from gblas_gnn.graph import Graph

    g = kronecker(8, seed=2)
    s, d, n = kronecker_edges(8, seed=2)
    assert isinstance(g, Graph) and g.n == n and g.nnz == s.size
    assert (g.to_scipy() != edges_to_csr(s, d, n)).nnz == 0
    g = erdos_renyi(500, 0.02, seed=1, symmetric=True, dtype=np.float64)
    s, d, n = erdos_renyi_edges(500, 0.02, seed=1, symmetric=True)
    assert g.nnz == s.size and g.dtype == np.float64
    ds = csbm(n=300, val=50, test=50)
    assert ds.graph is ds.graph and ds.graph.nnz == ds.num_edges
    assert (ds.graph.to_scipy() != ds.adjacency).nnz == 0


def test_generated_graphs_hold_an_int32_pattern_and_build_a_only_when_asked():
    """A generator's graph keeps the int32 CSR pattern of its edges; a layer that adds self
    loops trains on it without building ``A``, and ``A``, once read, is the matrix
    ``Graph.from_edges`` makes of the same edges."""
    from gblas_gnn import nn
    from gblas_gnn.executors.patterns import AdjacencyPattern, CSRPattern
    from gblas_gnn.graph import Graph

    g = kronecker(9, seed=3)
    s, d, n = kronecker_edges(9, seed=3)
    assert isinstance(g.edge_tensor, AdjacencyPattern) and not g.edge_tensor.built
    assert g.edge_tensor.pattern.indices.dtype == np.int32
    assert g.n == n and g.nnz == s.size and g.dtype == np.float32
    assert not g.has_self_loops                           # Kronecker draws no loops here
    looped = g.with_self_loops()
    assert looped.has_self_loops and looped.nnz == g.nnz + n
    reference = Graph.from_edges(s, d, n)
    same = CSRPattern.with_diagonal(reference.A)
    np.testing.assert_array_equal(looped.edge_tensor.pattern.indptr, same.indptr)
    np.testing.assert_array_equal(looped.edge_tensor.pattern.indices, same.indices)
    layer = nn.GATConv(8, 4, heads=2)
    layer.train()
    H = np.random.default_rng(0).standard_normal((n, 8)).astype(np.float32)
    out = layer(g, H)
    layer.backward(np.ones_like(out))
    assert not g.edge_tensor.built                        # the layer never asked for A
    assert g.A.isequal(reference.A) and g.edge_tensor.built
    assert g.A.ss.is_iso


def test_generated_graphs_know_their_loops_and_fall_back_out_of_order():
    """``has_self_loops`` reads a pattern-held graph's diagonal; edges that are not in CSR
    order (or not a simple graph's) go through ``from_edges`` and its rules."""
    from gblas_gnn.data._graph import graph_from_sorted_edges
    from gblas_gnn.executors.patterns import AdjacencyPattern

    g = graph_from_sorted_edges(np.array([1, 0, 2]), np.array([0, 1, 1]), 3)
    assert isinstance(g.edge_tensor, AdjacencyPattern) and not g.has_self_loops
    g = graph_from_sorted_edges(np.array([1, 1, 2]), np.array([0, 1, 1]), 3)
    assert g.has_self_loops and not g.edge_tensor.built
    unsorted = graph_from_sorted_edges(np.array([0, 1]), np.array([1, 0]), 2)
    assert not isinstance(unsorted.edge_tensor, AdjacencyPattern)
    assert unsorted.to_scipy().toarray().tolist() == [[0, 1], [1, 0]]
    twice = graph_from_sorted_edges(np.array([1, 1]), np.array([0, 0]), 2)
    assert not isinstance(twice.edge_tensor, AdjacencyPattern) and twice.nnz == 1
    with pytest.raises(ValueError):
        graph_from_sorted_edges(np.array([0, 5]), np.array([1, 1]), 2)
    empty = graph_from_sorted_edges(np.zeros(0, np.int64), np.zeros(0, np.int64), 4)
    assert empty.n == 4 and empty.nnz == 0 and empty.with_self_loops().nnz == 4
    floats = graph_from_sorted_edges(np.zeros(0), np.zeros(0), 4)     # from_edges' rules
    assert not isinstance(floats.edge_tensor, AdjacencyPattern) and floats.nnz == 0
