"""Graph construction, validation, derived forms and file formats."""

import graphblas as gb
import numpy as np
import pytest
import scipy.sparse as sp

import gblas_gnn as gg
from gblas_gnn.executors import CPUExecutor
from gblas_gnn.executors.patterns import AdjacencyPattern, CSRPattern, csr_of


def dense(g: gg.Graph) -> np.ndarray:
    return g.to_scipy().toarray()


@pytest.fixture
def edges():
    src = np.array([0, 1, 1, 2, 3, 3])
    dst = np.array([1, 2, 2, 2, 0, 1])
    return src, dst


def test_from_edges_layout_and_duplicates(edges):
    src, dst = edges
    g = gg.Graph.from_edges(src, dst, 5)
    assert (g.n, g.nnz, g.dtype) == (5, 5, np.float32)
    expected = np.zeros((5, 5))
    expected[dst, src] = 1              # row = target, duplicates merged to one 1
    np.testing.assert_array_equal(dense(g), expected)


def test_weighted_duplicates_are_summed(edges):
    src, dst = edges
    w = np.arange(1, 7, dtype=np.float64)
    g = gg.Graph.from_edges(src, dst, 4, values=w, dtype=np.float64)
    assert g.dtype == np.float64
    assert dense(g)[2, 1] == 2 + 3


def test_constructors_agree(edges):
    src, dst = edges
    g = gg.Graph.from_edges(src, dst, 4)
    csr = sp.csr_matrix((np.ones(len(src)), (dst, src)), shape=(4, 4))
    csr.sum_duplicates()
    csr.data[:] = 1
    for other in (gg.Graph.from_scipy(csr), gg.Graph.from_graphblas(g.A),
                  gg.as_graph(csr), gg.as_graph(g.A), gg.as_graph(g)):
        np.testing.assert_array_equal(dense(other), dense(g))


def test_degrees_self_loops_transpose(edges):
    src, dst = edges
    g = gg.Graph.from_edges(src, dst, 5)
    np.testing.assert_array_equal(g.in_degree, [1, 2, 2, 0, 0])
    np.testing.assert_array_equal(g.out_degree, [1, 1, 1, 2, 0])
    assert g.has_self_loops
    np.testing.assert_array_equal(gb.io.to_scipy_sparse(g.AT).toarray(), dense(g).T)
    s = g.with_self_loops()
    assert s is g.with_self_loops()
    assert s.nnz == g.nnz + 4          # vertex 2 already had its loop
    np.testing.assert_array_equal(np.diag(dense(s)), np.ones(5))


def test_with_self_loops_keeps_existing_loop_value():
    g = gg.Graph.from_edges([0, 1], [0, 0], 2, values=[5.0, 1.0])
    assert dense(g.with_self_loops())[0, 0] == 5.0


@pytest.mark.parametrize("n, m, seed", [(0, 0, 0), (1, 0, 1), (1, 1, 2), (7, 0, 3),
                                         (9, 30, 4), (40, 300, 5)])
def test_pattern_with_diagonal_is_that_of_a_plus_i(n, m, seed):
    """``CSRPattern.with_diagonal`` (written from A's buffers) stores what the matrix of
    ``A + I`` stores, in its order: loops already there, empty rows, and the first and last
    rows and columns included."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, max(n, 1), m), rng.integers(0, max(n, 1), m)
    g = gg.Graph.from_edges(src, dst, n)
    P = CSRPattern.with_diagonal(g.A)
    M = (g.to_scipy() + sp.identity(n, format="csr")).tocsr()
    M.sort_indices()
    assert P.indices.dtype == np.int32 and (P.nrows, P.ncols, P.nnz) == (n, n, M.nnz)
    np.testing.assert_array_equal(P.indptr, M.indptr)
    np.testing.assert_array_equal(P.indices, M.indices)
    np.testing.assert_array_equal(dense(g), g.to_scipy().toarray())    # A handed back whole


def test_pattern_with_diagonal_needs_a_square_matrix():
    with pytest.raises(ValueError, match="square matrix, got 2×3"):
        CSRPattern.with_diagonal(gb.Matrix(float, 2, 3))


def test_self_looped_graph_builds_its_matrix_only_when_asked(edges):
    """``with_self_loops()`` holds the int32 pattern of ``A + I``; its ``A`` is built at the
    first access, the same matrix as before, and the executors find the one pattern for
    both."""
    src, dst = edges
    g = gg.Graph.from_edges(src, dst, 5, values=np.arange(1.0, 7.0))
    s = g.with_self_loops()
    P = s.edge_tensor
    assert isinstance(P, AdjacencyPattern) and not P.built
    assert (s.n, s.nnz, s.dtype, s.has_self_loops) == (5, g.nnz + 4, np.float32, True)
    assert not P.built
    A = s.A
    assert P.built and s.A is A and P.matrix is A
    eye = sp.diags(np.where(np.diag(dense(g)) == 0, 1.0, 0.0))
    np.testing.assert_array_equal(dense(s), dense(g) + eye)
    assert csr_of(A) is P.pattern and csr_of(P) is P.pattern
    cpu = CPUExecutor()
    assert cpu.csr_pattern(A) is P.pattern and cpu.csr_pattern(P) is P.pattern
    np.testing.assert_array_equal(cpu.edge_values(P), cpu.edge_values(A))


def test_adjacency_pattern_refuses_a_matrix_of_another_pattern():
    g = gg.Graph.from_edges([0, 1], [1, 0], 2)
    P = AdjacencyPattern(CSRPattern.with_diagonal(g.A), np.float32, lambda: g.A)
    with pytest.raises(RuntimeError, match="matrix has 2 entries, its pattern 4"):
        _ = P.matrix


def test_symmetrize(edges):
    src, dst = edges
    d = dense(gg.Graph.from_edges(src, dst, 4).symmetrize())
    np.testing.assert_array_equal(d, d.T)
    assert d[1, 0] == d[0, 1] == 1


def test_gcn_norm_matches_dense():
    rng = np.random.default_rng(0)
    n = 8
    src, dst = rng.integers(0, n, 20), rng.integers(0, n, 20)
    w = rng.uniform(0.5, 2, 20)
    g = gg.Graph.from_edges(src, dst, n, values=w, dtype=np.float64)
    M = dense(g.with_self_loops())
    dinv = 1 / np.sqrt(M.sum(axis=1))
    ref = dinv[:, None] * M * dinv[None, :]
    np.testing.assert_allclose(gb.io.to_scipy_sparse(g.gcn_norm()).toarray(), ref, rtol=1e-12)
    assert g.gcn_norm() is g.gcn_norm()


def test_gcn_norm_without_self_loops_isolated_vertex_is_zero():
    g = gg.Graph.from_edges([0, 1, 1], [1, 0, 2], 4)
    N = gb.io.to_scipy_sparse(g.gcn_norm(add_self_loops=False)).toarray()
    # deg = in-degree (row sums): vertex 1 has 1; vertex 3 has none and stays zero, no NaN
    assert np.isfinite(N).all() and N[1, 0] == 1.0 and N[3].sum() == 0
    assert N[0, 1] == 1.0 and N[2, 1] == 1.0 / np.sqrt(1.0)


def test_astype():
    g = gg.Graph.from_edges([0], [1], 2)
    assert g.astype(np.float64).dtype == np.float64
    assert g.astype(np.float32) is g
    with pytest.raises(TypeError, match="float64 graph to float32"):
        g.astype(np.float64).astype(np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_npz_round_trip(tmp_path, edges, dtype):
    src, dst = edges
    g = gg.Graph.from_edges(src, dst, 6, values=np.linspace(1, 2, 6), dtype=dtype)
    path = tmp_path / "g.npz"
    g.save_npz(path)
    h = gg.Graph.from_npz(path, dtype=dtype)
    np.testing.assert_array_equal(dense(h), dense(g))
    assert h.n == 6


def test_mtx_round_trip(tmp_path, edges):
    src, dst = edges
    g = gg.Graph.from_edges(src, dst, 4, values=np.arange(1.0, 7.0), dtype=np.float64)
    path = tmp_path / "g.mtx"
    g.save_mtx(path)
    np.testing.assert_array_equal(dense(gg.Graph.from_mtx(path, dtype=np.float64)), dense(g))


def test_mtx_pattern_file(tmp_path):
    path = tmp_path / "p.mtx"
    path.write_text("%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n3 1\n")
    g = gg.Graph.from_mtx(path)
    assert dense(g)[0, 1] == 1 and dense(g)[2, 0] == 1 and g.nnz == 2


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize("src,dst,n,exc,msg", [
    ([0, -1], [1, 1], 3, ValueError, "negative"),
    ([0, 3], [1, 1], 3, ValueError, "out of range"),
    ([0, 1], [1, 5], 3, ValueError, "out of range"),
    ([0.0, 1.0], [1, 1], 3, TypeError, "integer"),
    ([0, 1], [1], 3, ValueError, "differ in length"),
    ([[0, 1]], [[1, 1]], 3, ValueError, "1-D"),
    ([0], [1], -2, ValueError, "non-negative"),
])
def test_bad_edges(src, dst, n, exc, msg):
    with pytest.raises(exc, match=msg):
        gg.Graph.from_edges(src, dst, n)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values(bad):
    with pytest.raises(ValueError, match="NaN or Inf"):
        gg.Graph.from_edges([0, 1], [1, 0], 2, values=[1.0, bad])


def test_bad_value_dtype_and_graph_dtype():
    with pytest.raises(TypeError, match="real numbers"):
        gg.Graph.from_edges([0], [1], 2, values=np.array(["a"]))
    with pytest.raises(TypeError, match="float32 or float64"):
        gg.Graph.from_edges([0], [1], 2, dtype=np.int32)
    with pytest.raises(ValueError, match="shape"):
        gg.Graph.from_edges([0, 1], [1, 0], 2, values=[1.0])


def test_non_square():
    with pytest.raises(ValueError, match="square"):
        gg.Graph.from_scipy(sp.random(3, 4, 0.5, format="csr", random_state=0))
    with pytest.raises(ValueError, match="square"):
        gg.Graph(gb.Matrix(float, 2, 3))
    with pytest.raises(TypeError, match="scipy.sparse"):
        gg.Graph.from_scipy(np.eye(3))
    with pytest.raises(TypeError):
        gg.as_graph(np.eye(3))


def test_bad_npz_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        gg.Graph.from_npz(tmp_path / "missing.npz")
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="not a .npz graph file"):
        gg.Graph.from_npz(junk)
    partial = tmp_path / "partial.npz"
    np.savez(partial, row=np.array([0]))
    with pytest.raises(ValueError, match="lacks"):
        gg.Graph.from_npz(partial)
    rect = tmp_path / "rect.npz"
    np.savez(rect, row=np.array([0]), col=np.array([0]), shape=np.array([2, 3]))
    with pytest.raises(ValueError, match="square"):
        gg.Graph.from_npz(rect)
    hostile = tmp_path / "hostile.npz"
    np.savez(hostile, row=np.array([object()], dtype=object), col=np.array([0]),
             shape=np.array([2, 2]))
    with pytest.raises(ValueError, match="object array .* refuses to load"):
        gg.Graph.from_npz(hostile)
    out_of_range = tmp_path / "oor.npz"
    np.savez(out_of_range, row=np.array([0]), col=np.array([7]), shape=np.array([2, 2]))
    with pytest.raises(ValueError, match="out of range"):
        gg.Graph.from_npz(out_of_range)


def test_bad_mtx_file(tmp_path):
    bad = tmp_path / "bad.mtx"
    bad.write_text("this is not matrix market\n")
    with pytest.raises(ValueError, match="Matrix Market"):
        gg.Graph.from_mtx(bad)
    with pytest.raises(FileNotFoundError):
        gg.Graph.from_mtx(tmp_path / "none.mtx")


def test_save_is_atomic(tmp_path, edges, monkeypatch):
    src, dst = edges
    g = gg.Graph.from_edges(src, dst, 4)
    path = tmp_path / "g.npz"
    g.save_npz(path)
    before = path.read_bytes()

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(np, "savez", boom)
    with pytest.raises(RuntimeError):
        g.save_npz(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["g.npz"]
