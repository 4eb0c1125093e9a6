"""Virtual tensors: lazy n×n expressions evaluated only under a sparse mask."""

import graphblas as gb
import numpy as np
import pytest

import gblas_gnn as gg
from gblas_gnn.ops import exp, factor, leaky_relu, relu, rep
from gblas_gnn.virtual import MATERIALIZE_LIMIT


@pytest.fixture(params=[np.float32, np.float64])
def setup(request):
    dtype = request.param
    rng = np.random.default_rng(0)
    n = 8
    g = gg.Graph.from_edges(rng.integers(0, n, 25), rng.integers(0, n, 25), n, dtype=dtype)
    d, s = (rng.standard_normal(n).astype(dtype) for _ in range(2))
    X = rng.standard_normal((n, 3)).astype(dtype)
    return g, d, s, X, dtype


def dense(M):
    return gb.io.to_scipy_sparse(gg.ops.to_graphblas(M)).toarray()


def pattern(g):
    return dense(g.A) != 0


def close(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


def test_gat_scores_equal_outer_add_then_leaky_relu(setup):
    g, d, s, _, dtype = setup
    virtual = g.A * leaky_relu(rep(d) + rep(s).T)
    explicit = gg.ops.leaky_relu(gg.ops.outer_add(g.A, d, s))
    assert gg.ops.to_graphblas(virtual).isequal(gg.ops.to_graphblas(explicit))
    C = d[:, None] + s[None, :]
    np.testing.assert_allclose(dense(virtual), pattern(g) * np.where(C > 0, C, 0.2 * C),
                               **close(dtype))


def test_expression_matches_its_materialisation(setup):
    g, d, s, X, dtype = setup
    exprs = [
        rep(d), rep(s).T, factor(X) @ factor(X).T,
        2.0 * (factor(X) @ factor(X).T) / rep(np.abs(d) + 1).T - 1.0,
        exp(rep(d) - rep(s).T) * rep(s),
        relu(rep(d) * rep(s).T) + 3.0,
        1.0 / (rep(np.abs(d) + 1) + rep(np.abs(s) + 1).T),
        -(rep(d) + rep(s).T) + factor(X) @ factor(X).T,
        rep(d) / rep(np.abs(s) + 1).T,
    ]
    for expr in exprs:
        got = dense(g.A * expr)
        np.testing.assert_allclose(got, pattern(g) * np.asarray(expr), **close(dtype))


def test_weighted_mask_multiplies_values():
    rng = np.random.default_rng(1)
    g = gg.Graph.from_edges([0, 1, 2], [1, 2, 0], 3, values=[2.0, 3.0, 4.0], dtype=np.float64)
    d = rng.standard_normal(3)
    np.testing.assert_allclose(dense(g.A * rep(d)), dense(g.A) * d[:, None])
    np.testing.assert_allclose(dense(gg.ops.masked(g.A, rep(d))), dense(g.A) * d[:, None])


def test_sddmm_equals_virtual_outer(setup):
    g, _, _, X, _ = setup
    # entries compared as arrays: Matrix.isclose compiles a numba function per GraphBLAS type
    got = gg.ops.to_graphblas(gg.ops.sddmm(g.A, X, X)).to_coo()
    want = gg.ops.to_graphblas(g.A * (factor(X) @ factor(X).T)).to_coo()
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(got[2], want[2], rtol=1e-6)


def test_materialising_large_virtual_is_refused():
    big = rep(np.ones(MATERIALIZE_LIMIT // 100 + 200, dtype=np.float32))
    with pytest.raises(ValueError, match="refusing to materialise"):
        np.asarray(big)
    small = np.asarray(rep(np.arange(3.0), 2))
    np.testing.assert_array_equal(small, [[0, 0], [1, 1], [2, 2]])


def test_virtual_errors(setup):
    g, d, s, X, _ = setup
    with pytest.raises(ValueError, match="shape"):
        g.A * rep(d[:-1].copy())
    with pytest.raises(ValueError, match="shapes differ"):
        rep(d) + rep(d[:-1].copy())
    with pytest.raises(TypeError, match="only factor"):
        factor(X) @ factor(X)
    with pytest.raises(ValueError, match="inner dimensions"):
        factor(X) @ factor(X[:, :2].copy()).T
    with pytest.raises(TypeError, match="virtual tensor"):
        gg.ops.masked(g.A, d)
    other = (np.float64 if d.dtype == np.float32 else np.float32)
    with pytest.raises(TypeError, match="dtype mismatch"):
        g.A * rep(d.astype(other))
    with pytest.raises(ValueError, match="NaN or Inf"):
        rep(np.array([np.nan]))
