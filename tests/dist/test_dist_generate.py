"""Graphs generated in place on a grid equal the single-process generators' graphs (and so
are the same for every grid), with and without relabelling, symmetric or not, with and
without the empty-row fill."""

from __future__ import annotations

import numpy as np
import pytest

from gblas_gnn import dist
from gblas_gnn.data import erdos_renyi, kronecker


def assembled(dex, dg) -> set[tuple[int, int]]:
    """Every rank's block, as one set of (dst, src) edges (on every rank)."""
    dst, src = dg.block_edges()
    edges = set()
    for d, s in dex.grid.allgather((dst, src), "test.edges"):
        edges.update(zip(d.tolist(), s.tolist(), strict=True))
    return edges


def edges_of(g) -> set[tuple[int, int]]:
    coo = g.to_scipy().tocoo()
    return set(zip(coo.row.tolist(), coo.col.tolist(), strict=True))


CASES = [
    (dist.DistGraph.kronecker, kronecker, dict(scale=9, edge_factor=8)),
    (dist.DistGraph.kronecker, kronecker, dict(scale=8, edge_factor=4, symmetric=True)),
    (dist.DistGraph.kronecker, kronecker, dict(scale=7, edge_factor=3, fill_empty_rows=False)),
    (dist.DistGraph.erdos_renyi, erdos_renyi, dict(n=701, density=0.01)),
    (dist.DistGraph.erdos_renyi, erdos_renyi, dict(n=501, density=0.004, symmetric=True)),
    (dist.DistGraph.erdos_renyi, erdos_renyi, dict(n=2, density=0.0)),
]


@pytest.mark.any_layout
@pytest.mark.parametrize("relabel", [False, True])
@pytest.mark.parametrize("make, single, kw", CASES,
                         ids=[f"{s.__name__}-{i}" for i, (_, s, _) in enumerate(CASES)])
def test_generated_blocks_assemble_to_the_single_process_graph(dex, make, single, kw,
                                                               relabel):
    dg = make(dex.grid, **kw, seed=5, relabel=relabel, relabel_seed=2)
    g = single(**kw, seed=5)
    assert dg.n == g.n and dg.nnz == g.nnz
    assert assembled(dex, dg) == edges_of(g)
    # each rank holds its block only
    dst, src = dg.block_edges()
    assert np.isin(dst, dg.parts[dex.grid.x]).all() and np.isin(src, dg.parts[dex.grid.y]).all()


def test_generated_graph_trains_a_layer(dex):
    import gblas_gnn as gg

    dg = dist.DistGraph.kronecker(dex.grid, 7, 4, seed=1)
    layer = gg.nn.GATConv(3, 2, executor=dex)
    H = dg.scatter(np.random.default_rng(0).standard_normal((dg.n, 3)).astype(np.float32))
    out = layer(dg, H)
    assert out.shape == (dg.n_local, 2) and np.isfinite(out).all()


def test_bad_generator_arguments_fail_on_every_rank(dex):
    with pytest.raises(ValueError, match="scale"):
        dist.DistGraph.kronecker(dex.grid, 40)
    with pytest.raises(ValueError, match="density"):
        dist.DistGraph.erdos_renyi(dex.grid, 10, 2.0)


@pytest.mark.parametrize("q", [2, 3])
def test_relabelling_balances_a_kronecker_graph(q):
    """With the default seeds the relabelled blocks of a Kronecker graph hold about the same
    number of edges (the relabelling draws its own permutation, not the generator's: with the
    generator's, the blocks took R-MAT's quadrant shares a : b : c : d)."""
    from gblas_gnn.data.partition import partition

    g = kronecker(12, 16, seed=0)
    coo = g.to_scipy().tocoo()
    part_of = np.empty(g.n, np.int64)
    for x, part in enumerate(partition(g.n, q, relabel=True, seed=0)):
        part_of[part] = x
    sizes = np.bincount(part_of[coo.row] * q + part_of[coo.col], minlength=q * q)
    assert sizes.max() / sizes.mean() < 1.15, sizes
