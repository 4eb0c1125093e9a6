"""The DGL peer of the benchmark harness: its environment, weight maps and worker.

Most tests need no DGL: the setup command's plan, the error when the environment is missing,
the weight maps of every row (against our layers and PyG's), the GCN edge weights handed to
DGL, and the self-timed calls of the interleaving. The last tests run DGL for real, in its
own environment (``python -m bench peers --setup`` creates it: torch 2.2.1 and DGL 2.1.0,
~2.5 GB from PyPI); they are skipped where it does not exist, which is expected in CI — the
project never installs DGL.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

from bench import main  # noqa: E402
from bench.core.timing import Measured, interleaved  # noqa: E402
from bench.layers.rows import ROWS, make_ours, make_pyg, pyg_params, shared_params  # noqa: E402
from bench.peers.env import PEERS, PeerMissing, peers_dir, require, setup_plan  # noqa: E402
from bench.peers.mapping import DGL, PYG, to_module_layout, to_our_layout  # noqa: E402


@pytest.fixture
def no_peers(tmp_path, monkeypatch):
    """An empty peers folder: no environment is set up there."""
    monkeypatch.setenv("GBLAS_GNN_PEERS_DIR", str(tmp_path / "peers"))
    return tmp_path / "peers"


def test_setup_plan_pins_dgl_and_its_torch(tmp_path):
    plan = setup_plan("dgl", root=tmp_path, python="/usr/bin/python3")
    venv = tmp_path / "dgl-2.1.0"
    assert plan[0] == ["/usr/bin/python3", "-m", "venv", str(venv)]
    assert plan[1][:4] == [str(venv / "bin" / "python"), "-m", "pip", "install"]
    assert {"torch==2.2.1", "dgl==2.1.0", "torchdata==0.7.1", "numpy<2", "pandas",
            "pyyaml", "pydantic"} <= set(plan[1])
    assert plan[2][:2] == [str(venv / "bin" / "python"), "-c"] and "import dgl" in plan[2][2]
    with pytest.raises(ValueError, match="unknown peer"):
        setup_plan("jraph")


def test_peers_folder_is_outside_the_tree(monkeypatch, tmp_path):
    monkeypatch.delenv("GBLAS_GNN_PEERS_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert peers_dir() == tmp_path / "gblas_gnn" / "bench-peers"


def test_setup_dry_run_prints_the_commands_and_creates_nothing(no_peers, capsys):
    assert main(["peers", "--setup", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "-m venv" in out and "'numpy<2'" in out and "dgl==2.1.0" in out
    assert not no_peers.exists()


def test_missing_environment_says_how_to_make_it(no_peers, tmp_path, capsys):
    with pytest.raises(PeerMissing, match="run `python -m bench peers --setup` first"):
        require("dgl")
    assert main(["peers"]) == 1
    assert "python -m bench peers --setup" in capsys.readouterr().err
    out = tmp_path / "out"
    assert main(["run", "--case", "tiny", "--peers", "dgl", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--peers dgl" in err and "python -m bench peers --setup" in err
    assert not out.exists()                                   # nothing ran
    assert main(["hgt", "--n", "300", "--peers", "dgl", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--peers dgl" in err and "python -m bench peers --setup" in err
    assert not out.exists()


def test_unknown_peer_and_layer_are_usage_errors(capsys):
    assert main(["run", "--case", "tiny", "--peers", "jraph"]) == 2
    assert "peers must be a comma list of ['dgl']" in capsys.readouterr().err
    assert main(["run", "--case", "tiny", "--layers", "gatv3"]) == 2
    assert "'all' or a comma list" in capsys.readouterr().err


def _row_params(name: str, k: int = 8) -> dict[str, np.ndarray]:
    ours = make_ours(name, k, k) if ROWS[name].ours is not None else None
    return shared_params(name, k, k, ours)


@pytest.mark.parametrize("name", list(ROWS))
def test_every_map_names_exactly_the_rows_weights(name):
    """PyG's and DGL's maps cover the row's shared weights, name for name, and PyG's layer
    takes them and gives them back unchanged."""
    params = _row_params(name)
    assert set(PYG[name]) == set(params)
    for impl in ROWS[name].dgl:
        assert set(DGL[name, impl]) == set(params), impl
    pyg = make_pyg(name, params, 8, 8)
    back = pyg_params(name, pyg)
    assert set(back) == set(params)
    for key in params:
        np.testing.assert_array_equal(back[key], params[key], err_msg=key)


def test_rows_with_an_init_get_seeded_weights_with_nonzero_biases_on_every_side():
    a, b = _row_params("gatv2-h4"), _row_params("gatv2-h4")
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert a["att"].shape == (4, 2) and a["W_l"].shape == (8, 8)
    assert all(np.abs(a[k]).min() > 0 for k in ("b_l", "b_r", "bias"))
    ours = make_ours("transformer", 8, 8)
    params = shared_params("transformer", 8, 8, ours)          # copied into ours as well
    assert all(np.array_equal(ours.params[k], v) for k, v in params.items())
    with pytest.raises(ValueError, match="multiple of its 4 heads"):
        shared_params("gatv2-h4", 8, 6)


@pytest.mark.parametrize("layout", ["id", "T", "heads"])
def test_layouts_round_trip(layout):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(to_our_layout(to_module_layout(a, layout), layout), a)
    with pytest.raises(ValueError, match="unknown layout"):
        to_module_layout(a, "flip")


def test_gcn_check_weights_turn_dgls_normalisation_into_pygs():
    """DGL's ``GraphConv(norm="both")`` scales a source by its out-degree; the edge weights
    of its agreement run make that PyG's in-degree normalisation."""
    import torch
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    from bench.peers.dgl_layers import both_to_pyg_weight, gcn_edge_weight

    rng = np.random.default_rng(0)
    n = 40
    src, dst = rng.integers(0, n, 200), rng.integers(0, n, 200)
    src, dst = np.r_[src[src != dst], np.arange(n)], np.r_[dst[src != dst], np.arange(n)]
    ei, w = gcn_norm(torch.from_numpy(np.stack([src, dst])), None, n, add_self_loops=False)
    np.testing.assert_allclose(gcn_edge_weight(src, dst, n), w.numpy(), rtol=1e-6)
    assert torch.equal(ei, torch.from_numpy(np.stack([src, dst])))
    d_out = np.maximum(np.bincount(src, minlength=n), 1)       # DGL clamps at 1
    d_in = np.bincount(dst, minlength=n)
    dgl_both = d_out[src] ** -0.5 * d_in[dst] ** -0.5
    np.testing.assert_allclose(dgl_both * both_to_pyg_weight(src, dst, n), w.numpy(),
                               rtol=1e-6)
    assert not np.allclose(dgl_both, w.numpy())               # a directed graph: they differ


def test_self_timed_calls_are_billed_their_own_seconds():
    calls = {"local": lambda: None, "remote": lambda: Measured(0.25)}
    t = interleaved(calls, reps=3, warmup=1)
    assert t["remote"]["all_ms"] == [250.0, 250.0, 250.0]
    assert t["local"]["max_ms"] < 250


# ---------------------------------------------------------------- DGL for real
def _dgl_ready() -> bool:
    try:
        require("dgl")
    except PeerMissing:
        return False
    return True


needs_dgl = pytest.mark.skipif(not _dgl_ready(), reason="DGL's own environment is not set "
                               "up (python -m bench peers --setup); expected in CI, which "
                               "never installs DGL")


@needs_dgl
def test_every_dgl_layer_agrees_with_ours_or_pyg(tmp_path):
    """All rows on the tiny case: each DGL implementation matches ours (PyG for a row we had
    no layer for; every row has ours now) in outputs and every gradient, and is timed
    interleaved."""
    assert main(["run", "--threads", "1", "--out", str(tmp_path), "--quiet", "--case",
                 "tiny", "--layers", "all", "--peers", "dgl", "--reps", "2", "--no-memory",
                 "--no-plot"]) == 0
    r = json.loads((tmp_path / "tiny.json").read_text())
    assert r["environment"]["peers"]["dgl"]["dgl"] == "2.1.0"
    assert r["environment"]["peers"]["dgl"]["worker"]["torch"].startswith("2.2.1")
    for name, e in r["layers"].items():
        impls = ROWS[name].dgl
        pa = e.get("peer_agreement", {})
        assert set(pa) == (set(impls) | {"reference"} if impls else set()), name
        for impl in impls:
            assert all(v["ok"] for v in pa[impl].values()), (name, impl)
            assert {"Z", "Z_eval", "dH"} | {f"grad_{k}" for k in PYG[name]} == set(pa[impl])
            assert e["times"][f"{impl} fwd+bwd"]["runs"] == 2
        assert pa.get("reference", "pyg" if ROWS[name].ours is None else "ours") == (
            "pyg" if ROWS[name].ours is None else "ours")
    assert r["layers"]["gat"]["speedup_peers"]["dgl.sparse"]["fwd+bwd"] > 0
    md = (tmp_path / "tiny.md").read_text()
    assert "| gat | DGL sparse GAT |" in md and "| gat | **DGL / ours** |" in md
    assert "| gatv2 | **DGL / ours** |" in md and "DGL 2.1.0 with torch 2.2.1" in md


@needs_dgl
def test_dgl_hgt_is_timed_beside_ours_as_a_reference(tmp_path):
    """``bench hgt --peers dgl``: DGL's ``HGTConv`` on the same typed graph, its vertex and
    edge types given, timed in the same interleaving; the report names it another model."""
    assert main(["hgt", "--n", "300", "--degree", "4", "--reps", "2", "--threads", "1",
                 "--no-memory", "--peers", "dgl", "--name", "t", "--out", str(tmp_path)]) == 0
    r = json.loads((tmp_path / "t.json").read_text())
    assert r["times"]["dgl fwd+bwd"]["runs"] == 2 and r["times"]["dgl fwd"]["median_ms"] > 0
    assert r["environment"]["peers"]["dgl"]["dgl"] == "2.1.0"
    md = (tmp_path / "t.md").read_text()
    assert "| DGL (another model) |" in md and "not compared for equality" in md


@needs_dgl
def test_dgl_worker_memory_run_and_wrong_weights(tmp_path):
    """A wrong weight is caught by the agreement; a bad request comes back as an error
    with the worker's traceback; the memory run measures a fresh process."""
    from peer_helpers import swapped_attention_is_caught

    from bench.core.cases import CASES, build_case_data, save_case_data
    from bench.layers.pair import LayerPair
    from bench.peers.client import PeerError, PeerLayer, PeerWorker, peer_memory

    g, data = build_case_data(CASES["tiny"])
    path = save_case_data(data, tmp_path / "tiny.npz")
    with PeerWorker(path, 1, tmp_path) as worker:
        pair = LayerPair("gat", g, data, 16, with_pyg=False, peers=worker)
        swapped_attention_is_caught(worker, pair, "dgl", "dgl")
        with pytest.raises(PeerError, match="no DGL implementation"):
            PeerLayer(worker, "transformer", "dgl", _row_params("transformer", 16), 16, 16)
        assert worker.call("time", impl="dgl", what="fwd")["seconds"] > 0   # still serving
    res, answer = peer_memory(path, "gcn", "dgl", _row_params("gcn", 16), 16, 16, 1,
                              4 << 30, 300, None, tmp_path)
    assert res.status == "ok", res.stderr
    assert answer["peak_rss_bytes"] >= answer["setup_rss_bytes"] > 0
    assert answer["versions"]["dgl"] == "2.1.0"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.npz"]    # files cleaned up
    assert "dgl" in PEERS


def test_the_aggregation_bench_times_ours_and_writes_its_tables(tmp_path):
    """``python -m bench aggregation --no-peers``: every product of ours, interleaved, its
    bytes and rate, the table written beside the JSON."""
    import numba

    from bench.kernels.aggregation import OPS, aggregation_markdown

    before = numba.get_num_threads()
    assert main(["aggregation", "--cases", "tiny", "--reps", "2", "--threads", "1",
                 "--no-peers", "--out", str(tmp_path)]) == 0
    assert numba.get_num_threads() == before      # the caller's threads, as it left them
    r = json.loads((tmp_path / "aggregation.json").read_text())
    (case,) = r["cases"]
    assert set(case["ops"]) == set(OPS) and case["entries"] > case["n"] == 300
    for e in case["ops"].values():
        assert e["ours"]["runs"] == 2 and "dgl" not in e
        assert e["bytes"] == (case["entries"] + case["n"]) * case["k"] * 4
    # a tiny X fits the cache: no column tiles, and the sums and the mean say so
    assert [case["ops"][op].get("tiles") for op in OPS] == [1, 1, 1, None]
    assert r["copy_bytes_per_s"] > 0
    assert aggregation_markdown(r) + "\n" == (tmp_path / "aggregation.md").read_text()


def test_the_aggregation_bench_refuses_a_case_that_is_not_a_layer_case(capsys):
    assert main(["aggregation", "--cases", "XL", "--no-peers"]) == 2
    assert "not layer cases" in capsys.readouterr().err


@needs_dgl
def test_dgls_aggregations_agree_with_ours(tmp_path):
    """DGL's ``update_all(copy_u, ⊕)`` (and on the reversed graph) equals our products."""
    assert main(["aggregation", "--cases", "tiny", "--reps", "2", "--threads", "1",
                 "--out", str(tmp_path)]) == 0
    (case,) = json.loads((tmp_path / "aggregation.json").read_text())["cases"]
    for op, e in case["ops"].items():
        assert e["agreement"]["agree"], (op, e["agreement"])
        assert e["dgl"]["runs"] == 2 and e["dgl_over_ours"] > 0
