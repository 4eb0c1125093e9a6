"""Heterogeneous graphs (``gg.HeteroGraph``): vertex types, typed relations as blocks of one
typed graph, per-type arrays, files, PyG's ``HeteroData``, bad input."""

from __future__ import annotations

import numpy as np
import pytest

import gblas_gnn as gg

NODES = {"author": 3, "paper": 4, "venue": 2}
EDGES = {("author", "writes", "paper"): np.array([[0, 1, 2, 2], [0, 0, 1, 3]]),
         ("paper", "cites", "paper"): np.array([[1, 2], [0, 0]]),
         ("author", "reviews", "paper"): np.array([[0], [0]]),          # a shared pair
         ("paper", "in", "venue"): np.zeros((2, 0), np.int64)}          # no edges


def _hg(dtype=np.float64):
    return gg.HeteroGraph.from_edge_index_dict(EDGES, NODES, dtype=dtype)


WRITES, CITES, REVIEWS, IN = EDGES


def test_types_source_blocks_offsets_and_metadata():
    hg = _hg()
    assert hg.node_types == ("author", "paper", "venue")
    assert hg.blocks == (WRITES, CITES, REVIEWS)          # "in" has no edges: no block
    assert hg.regions == (*hg.node_types, *hg.blocks)
    assert hg.offsets == {"author": 0, "paper": 3, "venue": 7, WRITES: 9, CITES: 12,
                          REVIEWS: 16}
    assert hg.n == hg.n_local == 19
    assert hg.metadata() == (list(NODES), list(EDGES))
    np.testing.assert_array_equal(hg.region_of, [0] * 3 + [1] * 4 + [2] * 2 + [3] * 3 +
                                  [4] * 4 + [5] * 3)
    assert hg.type_rows("paper") == slice(3, 7) and hg.type_rows(CITES) == slice(12, 16)
    assert hg.graph.num_relations == 4
    assert hg.dtype == np.float64
    for k, v in hg.edge_index_dict.items():
        np.testing.assert_array_equal(v, EDGES[k])
    assert "author=3" in repr(hg) and "('paper', 'in', 'venue')=0" in repr(hg)


def test_a_relation_is_its_block_of_the_stacked_vertex_set():
    """Rows of the target type, columns of the relation's own source block: a pair two
    relations share is two entries of the typed graph."""
    hg = _hg()
    for key, ei in EDGES.items():
        A = hg.relation(key).to_scipy().toarray()
        want = np.zeros((19, 19))
        if key in hg.blocks:
            want[ei[1] + hg.offsets[key[2]], ei[0] + hg.offsets[key]] = 1
        np.testing.assert_array_equal(A, want, err_msg=str(key))
    union = hg.graph.to_scipy().toarray()
    assert union[3, 9] == 1 and union[3, 16] == 1       # author 0 writes and reviews paper 0
    assert hg.graph.nnz == 7


def test_stack_copies_the_sources_and_the_gradient_adds_them_back():
    hg = _hg()
    rng = np.random.default_rng(0)
    widths = {"author": 2, "paper": 5, "venue": 1}
    x = {t: rng.standard_normal((n, widths[t])) for t, n in NODES.items()}
    X = hg.stack(x, widths, np.float64)
    assert X.shape == (19, 5)
    np.testing.assert_array_equal(X[0:3, 2:], 0)
    back = hg.split(X, hg.regions, widths)
    for region in hg.regions:
        np.testing.assert_array_equal(back[region], x[region if isinstance(region, str)
                                                      else region[0]])
    grad = hg.input_gradient(X, widths)                  # each source copy adds its rows
    np.testing.assert_array_equal(grad["author"], 3 * x["author"])     # writes, reviews
    np.testing.assert_array_equal(grad["paper"], 2 * x["paper"])       # cites
    np.testing.assert_array_equal(grad["venue"], x["venue"])
    np.testing.assert_array_equal(X, hg.stack(x, widths, np.float64))   # dX left as it was
    only = hg.stack({"paper": x["paper"]}, widths, np.float64, types=["paper"], copies=False)
    assert np.count_nonzero(only[:3]) == 0 and np.count_nonzero(only[7:]) == 0
    # one width for every type: each row is some region's, the array written whole
    same = {t: 3 for t in NODES}
    x3 = {t: rng.standard_normal((n, 3)) for t, n in NODES.items()}
    want = np.concatenate([x3[r if isinstance(r, str) else r[0]] for r in hg.regions])
    np.testing.assert_array_equal(hg.stack(x3, same, np.float64), want)
    np.testing.assert_array_equal(hg.stack(x3, same, np.float64, copies=False)[9:], 0)


def test_astype_widens_and_keeps_the_structure():
    hg = _hg(np.float32)
    h64 = hg.astype(np.float64)
    assert h64.dtype == np.float64 and hg.dtype == np.float32
    assert hg.astype(np.float32) is hg
    assert h64.relation(("paper", "cites", "paper")).dtype == np.float64
    assert h64.edge_types == hg.edge_types
    with pytest.raises(TypeError, match="float64 graph to float32"):
        h64.astype(np.float32)


def test_npz_round_trip(tmp_path):
    hg = _hg()
    hg.save_npz(tmp_path / "h.npz")
    back = gg.HeteroGraph.from_npz(tmp_path / "h.npz", dtype=np.float64)
    assert back.metadata() == hg.metadata() and back.num_nodes_dict == hg.num_nodes_dict
    for k in EDGES:
        np.testing.assert_array_equal(np.sort(back.edge_index_dict[k], axis=1),
                                      np.sort(EDGES[k], axis=1))


def test_npz_errors(tmp_path):
    gg.Graph.from_edges([0], [1], 2).save_npz(tmp_path / "plain.npz")
    with pytest.raises(ValueError, match="not a heterogeneous graph file"):
        gg.HeteroGraph.from_npz(tmp_path / "plain.npz")
    with pytest.raises(FileNotFoundError):
        gg.HeteroGraph.from_npz(tmp_path / "missing.npz")
    np.savez(tmp_path / "bad.npz", node_types=np.array(["a"]), num_nodes=np.array([2]),
             edge_types=np.array([["a", "r", "a"]]), src=np.array([0]), dst=np.array([1]),
             edge_type=np.array([3]))
    with pytest.raises(ValueError, match="relation ids"):
        gg.HeteroGraph.from_npz(tmp_path / "bad.npz")


def _heterodata():
    """PyG's ``HeteroData`` of the same graph (skips without torch-geometric)."""
    torch = pytest.importorskip("torch")
    data = pytest.importorskip("torch_geometric.data").HeteroData()
    for t, n in NODES.items():
        data[t].num_nodes = n
    for k, ei in EDGES.items():
        data[k].edge_index = torch.tensor(ei)
    return data


def test_from_pyg_heterodata():
    data = _heterodata()
    hg = gg.HeteroGraph.from_pyg(data)
    assert hg.metadata() == data.metadata()
    assert hg.num_nodes_dict == NODES
    with pytest.raises(TypeError, match="HeteroData"):
        gg.HeteroGraph.from_pyg(object())


@pytest.mark.parametrize("edges,nodes,error,match", [
    ({("author", "writes", "paper"): np.array([[0, 0], [1, 1]])}, NODES, ValueError,
     "duplicate edge 0 -> 1"),
    ({("author", "writes", "paper"): np.array([[3], [0]])}, NODES, ValueError,
     "vertex id 3 is out of range for type 'author'"),
    ({("author", "writes", "paper"): np.array([[0], [-1]])}, NODES, ValueError,
     "vertex id -1"),
    ({("author", "writes", "book"): np.array([[0], [0]])}, NODES, ValueError,
     "target type 'book'"),
    ({("author", "paper"): np.array([[0], [0]])}, NODES, TypeError, "triple"),
    ({("author", "writes", "paper"): np.array([0, 0])}, NODES, ValueError, r"shape \(2, m\)"),
    ({("author", "writes", "paper"): np.array([[0.5], [0]])}, NODES, TypeError, "integer"),
    ([np.array([[0], [0]])], NODES, TypeError, "edge_index_dict"),
    ({}, {}, TypeError, "num_nodes_dict"),
    ({}, {"author": -1}, ValueError, "non-negative"),
    ({}, {1: 3}, TypeError, "vertex type"),
])
def test_bad_input(edges, nodes, error, match):
    with pytest.raises(error, match=match):
        gg.HeteroGraph.from_edge_index_dict(edges, nodes)


def test_bad_lookups():
    hg = _hg()
    with pytest.raises(ValueError, match="no edge type"):
        hg.relation(("venue", "in", "paper"))
    with pytest.raises(ValueError, match="no vertex type 'book'"):
        hg.type_rows("book")
    with pytest.raises(ValueError, match="no relation with edges"):
        hg.type_rows(IN)
    with pytest.raises(TypeError, match="dict"):
        hg.stack(np.zeros((9, 2)), {t: 2 for t in NODES}, np.float64)


def test_to_homogeneous_is_pygs():
    """One vertex set in the order of the types, relation r = edge type r, no blocks; the
    same edges and types as PyG's ``HeteroData.to_homogeneous()``."""
    hg = _hg()
    g, node_type = hg.to_homogeneous()
    assert g.n == 9 and g.num_relations == 4 and g.dtype == np.float64
    np.testing.assert_array_equal(node_type, [0, 0, 0, 1, 1, 1, 1, 2, 2])
    for r, (key, ei) in enumerate(EDGES.items()):
        want = np.zeros((9, 9))
        want[ei[1] + hg.offsets[key[2]], ei[0] + hg.offsets[key[0]]] = 1
        np.testing.assert_array_equal(g.relation(r).to_scipy().toarray(), want)
    homo = _heterodata().to_homogeneous()
    np.testing.assert_array_equal(homo.node_type.numpy(), node_type)
    theirs = sorted(zip(homo.edge_index[0].tolist(), homo.edge_index[1].tolist(),
                        homo.edge_type.tolist(), strict=True))
    ours = []
    for r in range(4):
        coo = g.relation(r).to_scipy().tocoo()           # row: target, column: source
        ours += [(int(s), int(d), r) for s, d in zip(coo.col, coo.row, strict=True)]
    ours.sort()
    assert theirs == ours


def test_to_homogeneous_is_built_once_per_dtype():
    hg = _hg(np.float32)
    assert hg.to_homogeneous()[0] is hg.to_homogeneous()[0]
    wide = hg.astype(np.float64)
    assert wide.to_homogeneous()[0].dtype == np.float64
    assert hg.to_homogeneous()[0].dtype == np.float32
