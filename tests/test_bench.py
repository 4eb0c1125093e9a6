"""Smoke tests of the benchmark harness (``bench/``, top level): the tiny cases end to end.

Full runs (M, L, XL) are not part of the suite; these check that the harness measures what it
claims — agreement with PyG before timing, interleaved timings, peak memory in a fresh
subprocess, the memory guard, the JSON / markdown / PNG outputs — on a few hundred vertices.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("torch_geometric")
pytest.importorskip("matplotlib")
pytest.importorskip("psutil")

from bench import main  # noqa: E402
from bench.core.agreement import DisagreementError, compare  # noqa: E402
from bench.core.guard import run_guarded  # noqa: E402
from bench.core.rss import MIB  # noqa: E402
from bench.kernels.burble import kernels_used, parse_burble  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run(tmp_path, *args: str) -> tuple[int, dict]:
    code = main(["run", "--threads", "1", "--out", str(tmp_path), "--quiet", *args])
    case = args[args.index("--case") + 1]
    return code, json.loads((tmp_path / f"{case}.json").read_text())


def test_tiny_case_end_to_end(tmp_path, capsys):
    code, r = _run(tmp_path, "--case", "tiny", "--layers", "gat", "--reps", "5")
    assert code == 0 and r["status"] == "ok"
    assert r["threads"] == 1 and r["threads_set"]["graphblas"] == 1
    assert r["threads_set"]["torch"] == 1
    assert r["graph"]["n"] == 300
    assert r["graph"]["nnz_with_self_loops"] == r["graph"]["nnz"] + 300   # ER has no loops
    e = r["layers"]["gat"]
    # agreement checked before timing, on outputs, input gradient and every parameter gradient
    assert set(e["agreement"]) == {"Z", "Z_eval", "dH", "grad_W", "grad_att_src",
                                   "grad_att_dst", "grad_bias"}
    assert all(v["ok"] and v["rel_diff"] <= r["tolerance"] for v in e["agreement"].values())
    # interleaved timings: ≥ 5 runs each, median within the spread
    assert set(e["times"]) == {"ours fwd", "pyg fwd", "ours fwd+bwd", "pyg fwd+bwd"}
    for t in e["times"].values():
        assert t["runs"] == 5 and len(t["all_ms"]) == 5
        assert 0 < t["min_ms"] <= t["median_ms"] <= t["max_ms"]
    assert e["speedup"]["fwd"] > 0 and e["speedup"]["fwd+bwd"] > 0
    # peak memory of each implementation in its own fresh process
    for impl in ("ours", "pyg"):
        m = e["memory"][impl]
        assert m["status"] == "ok", m
        assert m["peak_rss_bytes"] >= m["setup_rss_bytes"] >= m["baseline_rss_bytes"] > 10 * MIB
        assert m["observed_peak_bytes"] > 0
        # the passes' own peak: positive, and at most 2 000 bytes an entry of A + I (ours
        # holds about 45, PyG's about 400 on this graph)
        assert 0 < m["run_increment_bytes"] <= 2000 * r["graph"]["nnz_with_self_loops"], m
    # a fresh process: our worker never imports torch, so it is far below PyG's
    assert e["memory"]["ours"]["peak_rss_bytes"] < e["memory"]["pyg"]["peak_rss_bytes"]
    assert set(r["spmm"]) == {"scipy csr @ H", "torch.sparse.mm (CSR)", "GraphBLAS plus_times",
                              "gblas_gnn plus_times"}
    assert r["gat_fwd_over_spmm"]["ratio"] > 0
    versions = r["environment"]["versions"]
    assert versions["torch"].startswith("2.13.0") and versions["torch_geometric"]
    # PyG was timed in a worker process of its own, with the same torch
    assert r["environment"]["pyg_worker"]["torch"] == versions["torch"]
    assert "PyG in a worker process" in r["protocol"]["processes"]
    assert r["protocol"]["freed_memory"].startswith("kept in every timing process")
    assert r["environment"]["load_average_end"] is not None
    md = (tmp_path / "tiny.md").read_text()
    assert "| gat | ours |" in md and "| gat | PyG |" in md and "scipy csr @ H" in md
    assert md in capsys.readouterr().out
    assert (tmp_path / "tiny.png").read_bytes()[:8] == PNG_MAGIC
    assert not list(tmp_path.glob("tmp/*.npz"))                    # data file cleaned up


def test_tiny_all_layers_agree_without_memory_runs(tmp_path, monkeypatch):
    from bench.layers import run

    monkeypatch.setattr(run, "KEEP_FREED_MAX_ENTRIES", 1000)       # tiny has more entries
    # PyG beside ours (the worker's path: test_tiny_case_end_to_end and the worker's test)
    code, r = _run(tmp_path, "--case", "tiny", "--reps", "5", "--no-memory", "--no-plot",
                   "--pyg-in-process")
    assert code == 0
    assert r["protocol"]["freed_memory"].startswith("glibc's defaults: ")
    assert list(r["layers"]) == ["gat", "agnn", "gcn"]
    assert set(r["layers"]["agnn"]["agreement"]) == {"Z", "Z_eval", "dH", "grad_beta"}
    assert set(r["layers"]["gcn"]["agreement"]) == {"Z", "Z_eval", "dH", "grad_W", "grad_bias"}
    assert all(e["memory"] == {} for e in r["layers"].values())
    assert not (tmp_path / "tiny.png").exists()


def test_sage_the_edge_feature_and_relation_rows_agree_with_pyg(tmp_path):
    # one attention row and GINE carry the features to both sides (the other rows' maps are
    # loaded by test_bench_peers.py, their layers held to PyG by test_nn_edge_features.py);
    # the composed EdgeGAT matches its PyG twin in every parameter's gradient
    rows = ["sage", "gat-e", "gine", "rgcn-b4", "edgegat"]
    code, r = _run(tmp_path, "--case", "tiny", "--reps", "1", "--no-memory", "--no-plot",
                   "--pyg-in-process", "--layers", ",".join(rows))
    assert code == 0 and list(r["layers"]) == rows
    for row in rows[1:3]:                        # the edge features' projection, compared
        assert "grad_W_e" in r["layers"][row]["agreement"]
    # the typed graph's relation ids reach both sides: the bases' coefficients agree
    assert {"grad_comp", "grad_weight", "grad_root"} <= set(r["layers"]["rgcn-b4"]["agreement"])
    assert "grad_att_edge" in r["layers"]["gat-e"]["agreement"]
    assert {"grad_b_e", "grad_eps"} <= set(r["layers"]["gine"]["agreement"])
    assert {f"grad_{k}" for k in ("W", "att_src", "att_dst", "att_edge", "W_e", "W_res",
                                  "bias")} <= set(r["layers"]["edgegat"]["agreement"])


def test_tiny_case_on_the_primitives_executor(tmp_path):
    """``--executor primitives`` (the cpu executor's core, the interface's defaults) reaches our
    layers here and in the memory workers, and is recorded in the JSON and the markdown
    header."""
    code, r = _run(tmp_path, "--case", "tiny", "--layers", "gat", "--reps", "2",
                   "--executor", "primitives", "--no-plot")
    assert code == 0 and r["status"] == "ok" and r["executor"] == "primitives"
    e = r["layers"]["gat"]
    assert all(v["ok"] for v in e["agreement"].values()) and e["times"]["ours fwd"]["runs"] == 2
    assert e["memory"]["ours"]["status"] == "ok" and e["memory"]["pyg"]["status"] == "ok"
    assert e["memory"]["ours"]["executor"] == "primitives"
    assert e["memory"]["pyg"]["executor"] is None         # PyG's worker runs none of ours
    assert r["threads_set"]["graphblas"] == 1 and r["threads_set"]["gemm_blas"] == 1
    assert "executor = primitives, threads = 1" in (tmp_path / "tiny.md").read_text()


@pytest.mark.parametrize("command", ["run", "kernels"])
def test_dist_executor_is_refused(tmp_path, capsys, command):
    args = ["--case", "tiny"] if command == "run" else []
    assert main([command, "--executor", "dist", "--out", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert "argument --executor: 'dist' is not benchmarked here" in err
    assert "the distributed study is a separate command" in err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("argv", [
    ["run", "--case", "M"], ["kernels"], ["aggregation"], ["cuda-kernels"], ["gpu"],
    ["dist", "--case", "M"], ["scale", "--scale", "20"], ["memory"], ["comm"],
    ["revisions", "--before", "HEAD", "--case", "M"], ["hgt"]])
def test_every_study_writes_to_the_current_results_by_default(argv):
    """A study run without ``--out`` writes beside the files the README and the docs link
    (``bench/results/current/``), never into the folder above them."""
    from pathlib import Path

    from bench.command import build_parser

    assert build_parser().parse_args(argv).out == Path("bench/results/current")


def test_the_r_gcn_step_writes_to_the_current_results_by_default(monkeypatch):
    """``python -m bench.layers.mag_step`` without ``--out`` writes to ``bench/results/current``
    (the step itself is not run: the folder it would create is caught)."""
    from pathlib import Path

    from bench.layers import mag_step

    seen = []

    def caught(self, **kwargs):
        seen.append(self)
        raise SystemExit

    monkeypatch.setattr(sys, "argv", ["mag_step"])
    monkeypatch.setattr(mag_step, "run", lambda threads: {})
    monkeypatch.setattr(Path, "mkdir", caught)
    with pytest.raises(SystemExit):
        mag_step.main()
    assert seen == [Path("bench/results/current")]


def test_recorded_results_regenerate_byte_for_byte():
    """The markdown of every recorded result comes back unchanged from its JSON (results
    recorded before ``--executor`` existed lack the field and ran on cpu)."""
    from pathlib import Path

    from bench.kernels.micro import kernels_table
    from bench.layers.report import markdown

    results = Path(__file__).resolve().parents[1] / "bench" / "results" / "current"
    for name in ("XL", "M-conv-attention", "M-attention", "L-attention", "L-attention-pyg",
                 "L-conv", "L-conv-gin", "M-edges", "M-relations"):
        r = json.loads((results / f"{name}.json").read_text())
        assert markdown(r) == (results / f"{name}.md").read_text(), name
    r = json.loads((results / "kernels.json").read_text())
    assert kernels_table(r) + "\n" == (results / "kernels.md").read_text()


def test_weight_mismatch_aborts_the_case(tmp_path, monkeypatch, capsys):
    import torch

    from bench.layers import rows

    copy = rows.copy_weights

    def off_by_a_bit(name, ours, layer):
        copy(name, ours, layer)
        with torch.no_grad():
            if hasattr(layer, "att_src"):
                layer.att_src.mul_(1.01)       # a 1 % error in one attention vector

    monkeypatch.setattr(rows, "copy_weights", off_by_a_bit)      # PyG in this process
    code, r = _run(tmp_path, "--case", "tiny", "--layers", "gat,gcn", "--no-memory",
                   "--pyg-in-process")
    assert code == 1
    assert r["status"] == "aborted" and "disagree" in r["message"]
    e = r["layers"]["gat"]
    assert not e["agreement"]["Z"]["ok"] and e["agreement"]["Z"]["max_abs_diff"] > 0
    assert "times" not in e                    # nothing was timed
    assert "gcn" not in r["layers"]            # the case stopped at the first disagreement
    assert "aborted" in (tmp_path / "tiny.md").read_text()
    assert not (tmp_path / "tiny.png").exists()
    assert "aborted" in capsys.readouterr().err
    assert r["protocol"]["processes"] == "ours and PyG in this process"


def test_the_pyg_worker_agrees_catches_a_wrong_weight_and_reports_errors(tmp_path):
    """PyG's layers in a process of their own: the agreement holds for a row with edge
    features and one with relations, a wrong weight is caught, a bad request comes back as
    an error with the worker's traceback, and the worker keeps serving."""
    from peer_helpers import swapped_attention_is_caught

    from bench.core.cases import CASES, build_case_data, save_case_data
    from bench.core.timing import Measured
    from bench.layers.pair import LayerPair
    from bench.peers.client import PeerError, PeerLayer, PeerWorker

    g, data = build_case_data(CASES["tiny"])
    path = save_case_data(data, tmp_path / "tiny.npz")
    with PeerWorker(path, 1, tmp_path, peer="pyg", keep_freed=True) as worker:
        assert worker.versions["torch"].startswith("2.13.0") and worker.setup["kept"]
        for row in ("gine", "rgcn"):
            pair = LayerPair(row, g, data, 16, pyg_worker=worker)
            assert pair.pyg is None and pair.has_pyg            # nothing of PyG here
            report = pair.check()
            assert ("grad_eps" if row == "gine" else "grad_root") in report
            calls = pair.calls()
            assert list(calls) == ["ours fwd", "pyg fwd", "ours fwd+bwd", "pyg fwd+bwd"]
            assert isinstance(calls["pyg fwd+bwd"](), Measured)
            pair.close()
        pair = LayerPair("gat", g, data, 16, pyg_worker=worker)
        wrong = swapped_attention_is_caught(worker, pair, "wrong", "pyg")
        with pytest.raises(PeerError, match="must be a multiple of its 4 heads"):
            PeerLayer(worker, "gat-h4", "pyg", wrong, 16, 6)
        assert worker.call("time", impl="wrong", what="fwd")["seconds"] > 0   # still serving
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.npz"]    # files cleaned up


def test_a_typed_case_carries_its_relations(tmp_path):
    """A typed case's edges are every relation's edges with their ids: our graph built from
    them has the typed graph's relations, the ids survive the case file, PyG's inputs carry
    them, the relation rows agree with PyG on them, and a row without relations is refused."""
    from bench.core.cases import CASES, build_case_data, load_case_data, save_case_data
    from bench.core.device import BenchDevice
    from bench.layers.pair import LayerPair
    from bench.layers.rows import ours_graph, pyg_inputs

    g, data = build_case_data(CASES["tinyT"])
    assert data.typed and data.edge_type.size == data.edge_index.shape[1] > g.nnz
    ours = ours_graph("rgcn", g, data.edge_index, data.edge_type)
    assert ours.num_relations == g.num_relations == 6
    for r in range(6):
        assert ours.relation(r).A.isequal(g.relation(r).A)
    back = load_case_data(save_case_data(data, tmp_path / "t.npz"))
    np.testing.assert_array_equal(back.edge_type, data.edge_type)
    assert not load_case_data(save_case_data(build_case_data(CASES["tiny"])[1],
                                             tmp_path / "u.npz")).typed
    _, t = pyg_inputs("rgcn", data.edge_index, BenchDevice("host"), data.edge_type)
    np.testing.assert_array_equal(t.numpy(), data.edge_type)
    for row in ("rgcn", "rgcn-b4"):
        assert "grad_root" in LayerPair(row, g, data, 16).check()
    with pytest.raises(ValueError, match="a typed case's edges carry relations"):
        ours_graph("gat", g, data.edge_index, data.edge_type)
    with pytest.raises(ValueError, match="do not fit"):
        pyg_inputs("rgcn", data.edge_index[:, :5], BenchDevice("host"), data.edge_type)


def test_compare_judges_against_the_reference_scale():
    ref = {"Z": np.array([100.0, -50.0])}
    assert compare({"Z": np.array([100.001, -50.0])}, ref, tol=1e-4)["Z"]["ok"]
    with pytest.raises(DisagreementError, match="Z: max"):
        compare({"Z": np.array([100.1, -50.0])}, ref, tol=1e-4)
    with pytest.raises(DisagreementError):
        compare({"Z": np.array([np.nan, -50.0])}, ref)


def test_guard_kills_a_process_over_its_memory_limit():
    grow = ("import time, numpy as np\n"
            "a = np.ones(600 * 2**20 // 8)\n"
            "time.sleep(30)\n")
    res = run_guarded([sys.executable, "-c", grow], limit_bytes=200 * MIB)
    assert res.status == "out_of_memory"
    assert "out of memory" in res.message and res.seconds < 25
    assert res.observed_peak_bytes > 200 * MIB
    ok = run_guarded([sys.executable, "-c", "print('fine')"], limit_bytes=2000 * MIB)
    assert ok.status == "ok" and ok.stdout.strip() == "fine"


def test_epoch_case_records_pyg_out_of_memory(tmp_path):
    """The XL recipe on 512 vertices; PyG's worker gets less memory than torch needs."""
    code, r = _run(tmp_path, "--case", "tinyXL", "--reps", "2", "--mem-limit-gib", "0.3",
                   "--self-limit-gib", "16")
    assert code == 0 and r["status"] == "ok"
    assert max(v["rel_diff"] for v in r["precheck"].values()) <= r["tolerance"]
    ours, pyg = r["epochs"]["ours"], r["epochs"]["pyg"]
    assert ours["status"] == "ok" and ours["epoch"]["runs"] == 2
    assert len(ours["losses"]) == 3                                   # warm-up + 2
    assert ours["peak_rss_bytes"] >= ours["setup_rss_bytes"] >= ours["baseline_rss_bytes"] \
        > 10 * MIB                                          # a fresh process's own peak
    assert ours["peak_rss_bytes"] < 1 << 30, ours                # not its parent's (pytest's)
    assert pyg["status"] == "out_of_memory" and "out of memory" in pyg["message"]
    assert r["speedup"]["epoch"] is None
    assert "out of memory" in (tmp_path / "tinyXL.md").read_text()
    assert (tmp_path / "tinyXL.png").read_bytes()[:8] == PNG_MAGIC


def test_kernel_names_come_from_burble():
    import gblas_gnn as gg

    g = gg.data.erdos_renyi(200, 0.05, seed=0)
    H = np.ones((200, 4), np.float32)
    # the SpMM and the attention passes are numba kernels; a softmax of a graphblas.Matrix
    # still runs GraphBLAS (a row reduction and a diagonal scaling by mxm)
    summary, records = kernels_used(lambda: gg.ops.softmax(g.A))
    assert "colscale" in summary and "GrB_mxm" in [r["op"] for r in records]
    summary, _ = kernels_used(lambda: gg.ops.spmm(g.A, H))
    assert summary == "numba kernel over the CSR buffers"
    text = " [ GrB_mxm C=A*B, saxpy (saxpy5: F += F*S) (C in place) \n   0.0001 sec ]\n"
    assert parse_burble(text)[0]["kernels"][:2] == ["saxpy", "saxpy5"]


def test_harness_imports_without_torch_and_runs_from_the_repo_root():
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = ("import sys, importlib.util, gblas_gnn, bench, bench.layers.run, bench.kernels.micro\n"
            "assert 'torch' not in sys.modules and 'matplotlib' not in sys.modules\n"
            "assert importlib.util.find_spec('gblas_gnn.bench') is None\n")
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True)
    out = subprocess.run([sys.executable, "-m", "bench", "run", "--help"], cwd=root,
                         capture_output=True, text=True, check=True).stdout
    assert "--case" in out and "--mem-limit-gib" in out


def test_kernels_subcommand_writes_its_table(tmp_path, capsys):
    assert main(["kernels", "--n", "400", "--degree", "6", "--k", "8", "--reps", "5",
                 "--threads", "1", "--out", str(tmp_path)]) == 0
    r = json.loads((tmp_path / "kernels.json").read_text())
    ops = {row["op"]: row for row in r["results"]}
    assert {"sddmm", "softmax", "spmm plus_times", "spmm avg", "scipy csr @ H",
            "torch.sparse.mm (CSR)"} <= set(ops)
    assert "numba" in ops["sddmm"]["kernels"]                      # a generated kernel
    assert "numba" in ops["spmm plus_times"]["kernels"]           # no GraphBLAS kernel
    assert all(row["runs"] == 5 for row in r["results"])
    assert r["meta"]["executor"] == "cpu"
    assert "executor=cpu, threads=1" in (tmp_path / "kernels.md").read_text()
    assert "| sddmm |" in (tmp_path / "kernels.md").read_text()
    assert "| sddmm |" in capsys.readouterr().out


def test_k_sets_the_width_of_a_layer_case(tmp_path):
    assert main(["run", "--threads", "1", "--out", str(tmp_path), "--quiet", "--case", "tiny",
                 "--k", "8", "--layers", "gcn", "--reps", "1", "--no-memory",
                 "--no-plot"]) == 0
    r = json.loads((tmp_path / "tiny-k8.json").read_text())
    assert r["case"]["name"] == "tiny-k8"
    assert (r["case"]["k_in"], r["case"]["k_out"]) == (8, 8)
    assert r["case"]["description"].endswith("k_in=k_out=8")


def test_cuda_kernel_byte_model_covers_every_kernel():
    pytest.importorskip("numba.cuda")
    from bench.kernels.cuda import BY_DEGREES, BYTES, _sizes
    from gblas_gnn.gpu._catalogue import KERNELS

    assert set(BYTES) | BY_DEGREES == {spec.name for spec in KERNELS}
    assert not set(BYTES) & BY_DEGREES
    sizes = _sizes(10, 40, 4)
    assert all(set(a) | set(b) <= set(sizes) for a, b in BYTES.values())


def test_recorded_cuda_kernel_table_regenerates_byte_for_byte():
    from pathlib import Path

    from bench.kernels.cuda import cuda_kernels_markdown

    results = Path(__file__).resolve().parents[1] / "bench" / "results" / "current"
    r = json.loads((results / "cuda-kernels.json").read_text())
    assert cuda_kernels_markdown(r) == (results / "cuda-kernels.md").read_text()
    assert all(row["resources"][cc]["spill_stores"] == 0 for row in r["kernels"]
               for cc in ("sm_80", "sm_90"))


def test_revisions_times_two_revisions_interleaved(tmp_path, capsys):
    """``bench revisions``: HEAD against the working tree on the tiny case, one row per
    layer with both sides' runs (rows with edge features and with relations too, and HGT on
    a typed graph); an unknown revision is refused before any work."""
    assert main(["revisions", "--before", "HEAD", "--case", "tiny", "--layers",
                 "gat,gine,rgcn,hgt", "--reps", "2", "--threads", "1",
                 "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "revisions-tiny.json").read_text())
    for name in ("gat", "gine", "rgcn", "hgt"):
        row = result["rows"][name]
        assert len(row["before"]["total"]["runs_ms"]) == 2
        assert len(row["after"]["total"]["runs_ms"]) == 2
    assert result["revisions"]["after"] == "working tree"
    assert "| gat |" in (tmp_path / "revisions-tiny.md").read_text()
    capsys.readouterr()
    assert main(["revisions", "--before", "no-such-revision", "--case", "tiny",
                 "--out", str(tmp_path)]) == 2
    assert "unknown revision 'no-such-revision'" in capsys.readouterr().err


def test_memory_subcommand_measures_and_attributes_one_step(tmp_path, capsys):
    """``bench memory`` at a small scale: the growth per entry, the traced breakdown with the
    components of the step's peak, and a markdown that regenerates from the JSON (as the
    recorded ones do)."""
    from pathlib import Path

    from bench.memory.study import memory_markdown

    assert main(["memory", "--scales", "12", "--threads", "1", "--out", str(tmp_path)]) == 0
    r = json.loads((tmp_path / "memory.json").read_text())
    run, traced = r["runs"][0], r["traced"][0]
    assert run["scale"] == 12 and run["nnz"] > run["nnz_graph"] > 0
    assert run["bytes_per_entry"] > 0 and not run["breakdown_run"] and traced["breakdown_run"]
    # the step's own growth is plausible: at least 80 % of what the traced run saw its numpy
    # arrays add over the graph (a lower bound: tracemalloc sees numpy's buffers only), at
    # least the softmax caches (a float32 an entry and layer), at most 1 000 bytes an entry.
    # Measured after a warm-up step of the same size, without the allocator's free memory
    # handed back first, it read 0.14 bytes an entry here: the step reused the warm-up's.
    trace = traced["trace"]
    after_graph = trace["snapshots"][0]
    assert after_graph["name"] == "after graph and features"
    step_peak = max([p["peak"] for p in trace["phase_peaks"][1:]] + [trace["last_peak"]])
    traced_step = (step_peak - after_graph["traced_now"]) / run["nnz"]
    assert max(0.8 * traced_step, 4 * run["layers"]) <= run["step_bytes_per_entry"] <= 1000, \
        (run["step_bytes_per_entry"], traced_step)
    assert run["bytes_per_entry"] >= run["step_bytes_per_entry"]
    names = [s["name"] for s in traced["trace"]["snapshots"]]
    assert "after forward" in names and any(n.startswith("column pass 1") for n in names)
    peak = max(traced["trace"]["snapshots"], key=lambda s: s["traced"])
    assert {"softmax caches S (one per layer)",
            "CSR pattern of A+I (indptr, indices)"} <= set(peak["components"])
    # the layers run on the int32 pattern of A + I: no GraphBLAS matrix of it is built
    assert "A with self loops (GraphBLAS)" not in peak["components"]
    assert traced["graphblas"]["A_self_loops"] is None
    assert (tmp_path / "memory.md").read_text() == memory_markdown(r)
    assert "| 12 |" in capsys.readouterr().out
    results = Path(__file__).resolve().parents[1] / "bench" / "results" / "current"
    for name in ("memory", "memory-baseline", "memory-k24", "memory-k23-grid", "memory-gatv2",
                 "memory-gatv2-e", "memory-k20-grid", "memory-grid-p", "memory-k23-sharded"):
        recorded = json.loads((results / f"{name}.json").read_text())
        assert memory_markdown(recorded) == (results / f"{name}.md").read_text(), name


def test_freed_memory_is_kept_in_the_block_and_handed_back_after_it():
    """Inside ``freed_memory_kept`` a freed 64 MiB array stays resident (no ``munmap``);
    after it, glibc's defaults are back and the same array's memory leaves the process."""
    from bench.core.rss import freed_memory_kept, release_free_memory, rss_bytes

    def resident_after_free() -> int:
        release_free_memory()
        before = rss_bytes()
        a = np.ones(16 << 20, np.float32)           # 64 MiB, touched
        del a
        return rss_bytes() - before

    with freed_memory_kept() as kept:
        assert kept
        assert resident_after_free() > 48 * MIB
    assert resident_after_free() < 16 * MIB
    with freed_memory_kept(keep=False) as kept:
        assert not kept and resident_after_free() < 16 * MIB


def test_reset_hwm_counts_a_step_that_reuses_freed_memory():
    """``bench.core.rss``: a 32 MiB step after a 96 MiB build that was freed but kept by the
    allocator (glibc's thresholds set so that it keeps it): the high-water mark reset alone
    reads nothing; :func:`~bench.core.rss.reset_hwm` hands the free memory back first, and
    the RSS read after it gives the step's 32 MiB."""
    import os
    import subprocess
    from pathlib import Path

    script = """if True:
        import json
        import numpy as np
        from bench.core.rss import MIB, hwm_bytes, reset_hwm, rss_bytes
        build = [np.ones(16 * MIB // 8) for _ in range(6)]     # 96 MiB, then freed
        del build
        def step():                                            # 32 MiB, touched
            parts = [np.ones(16 * MIB // 8) for _ in range(2)]
            return sum(p.sum() for p in parts)
        with open("/proc/self/clear_refs", "w") as f:          # the mark reset alone
            f.write("5")
        base = rss_bytes()
        step()
        reset_only = hwm_bytes() - base
        assert reset_hwm()
        base = rss_bytes()
        step()
        print(json.dumps({"reset_only": reset_only, "growth": hwm_bytes() - base}))
    """
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
               MALLOC_MMAP_THRESHOLD_=str(32 * MIB), MALLOC_TRIM_THRESHOLD_=str(1 << 30))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["reset_only"] < 4 * MIB, got                             # the trap is set
    assert 30 * MIB <= got["growth"] <= 40 * MIB, got


def test_hgt_memory_figures_are_plausible(tmp_path):
    """``bench hgt`` on 2 000 vertices (about 32 000 edges): each side's peak growth over a
    forward + backward, in a fresh process, is plausible per edge (ours about 420 bytes,
    PyG's about 1 200)."""
    assert main(["hgt", "--n", "2000", "--degree", "16", "--reps", "1", "--threads", "1",
                 "--name", "tiny-hetero", "--out", str(tmp_path)]) == 0
    r = json.loads((tmp_path / "tiny-hetero.json").read_text())
    per_edge = {side: m["peak_growth_mib"] * MIB / r["edges"] for side, m in r["memory"].items()}
    assert 8 <= per_edge["ours"] <= 2000 and 100 <= per_edge["pyg"] <= 20000, per_edge
    assert per_edge["ours"] < per_edge["pyg"], per_edge


def test_mag_step_memory_is_plausible_at_a_thousandth():
    """``bench.layers.mag_step`` at a thousandth of ogbn-mag (about 2 000 vertices and
    20 000 entries): the step's peak growth holds at least its output and the input's
    gradient (n × (k_in + k_out) float32), and at most 4 000 bytes an entry."""
    from bench.layers.mag_step import markdown, run

    r = run(threads=1, fraction=1e-3)
    growth = r["peak_growth_mib"] * MIB
    assert r["n"] * (r["k_in"] + r["k_out"]) * 4 <= growth <= 4000 * r["entries"], r
    assert f"| {r['peak_growth_mib']:.0f} |" in markdown(r)


def test_memory_models_with_edge_features_run_in_one_process(tmp_path):
    """``bench memory --model gatv2-e``: the same Kronecker graph carrying 8 seeded features
    per stored edge; a grid job measures the GAT only, refused before any work."""
    from bench.memory.step import EDGE_DIM, _data

    plain, x, _ = _data(8, 4, 4)
    g, x_e, _ = _data(8, 4, 4, EDGE_DIM)
    assert g.edge_attr.f == EDGE_DIM and g.edge_attr.nvals == g.nnz == plain.nnz
    assert not g.edge_attr.requires_grad               # data, as the layers' inputs are
    np.testing.assert_array_equal(x_e, x)
    with pytest.raises(ValueError, match="grid jobs .* measure the GAT only"):
        main(["memory", "--scales", "8", "--procs", "1,4", "--model", "gatv2-e",
              "--out", str(tmp_path)])
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_memory_subcommand_runs_a_grid_job_against_one_process(tmp_path):
    """``bench memory --procs 1,4``: one MPI job of 4 ranks per scale beside the one
    process, on the same graph (the ranks' blocks of A+I partition its entries), its growth
    and peak RSS summed over the ranks, and the comparison in the markdown."""
    from bench.memory.study import memory_markdown

    assert main(["memory", "--scales", "12", "--procs", "1,4", "--no-breakdown",
                 "--threads", "1", "--out", str(tmp_path)]) == 0
    r = json.loads((tmp_path / "memory.json").read_text())
    job = r["grid_runs"][0]
    assert job["procs"] == 4 and [q["rank"] for q in job["ranks"]] == [0, 1, 2, 3]
    assert sum(q["block_entries"] for q in job["ranks"]) == job["nnz"] == r["runs"][0]["nnz"]
    assert 0 < job["bytes_per_entry"] < job["rss_bytes_per_entry"]
    md = (tmp_path / "memory.md").read_text()
    assert md == memory_markdown(r) and "| 12 | 4 | " in md


def test_comm_with_one_process_writes_its_tables_and_says_why_there_is_no_plot(tmp_path, capsys):
    """``bench comm --procs 1``: one process sends nothing, so there is nothing to draw on
    log axes; the tables are written, the plot is skipped with a message, and an older plot
    in the folder is removed (it would pass for this study's)."""
    from mpi_helpers import mpiexec

    mpiexec()                                     # skips where there is none
    (tmp_path / "comm.png").write_bytes(PNG_MAGIC)
    assert main(["comm", "--procs", "1", "--graphs", "er:n=200,density=0.03", "--models",
                 "gcn", "--ks", "4", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "no plot: every run had one process" in out
    r = json.loads((tmp_path / "comm.json").read_text())
    assert r["plot"] is None and [x["p"] for x in r["rows"]] == [1]
    assert r["rows"][0]["fwd"] == r["rows"][0]["bwd"] == 0
    assert "| gcn | 4 | 1 |" in (tmp_path / "comm.md").read_text()
    assert not (tmp_path / "comm.png").exists()


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_dist_and_scale_report_plausible_peaks_per_rank(tmp_path):
    """``bench dist`` (the tiny case) and ``bench scale`` (Kronecker scale 10) on one MPI
    process: each rank's peak RSS, the figure their tables show, is its own process's
    (``VmHWM``: an interpreter with numba, GraphBLAS and MPI, a few hundred MiB), and the
    mark after the graph's generation is at most the run's."""
    from mpi_helpers import mpiexec

    mpiexec()                                         # skips where there is no MPI
    assert main(["dist", "--case", "tiny", "--procs", "1", "--layers", "gat", "--reps", "1",
                 "--out", str(tmp_path)]) == 0
    d = json.loads((tmp_path / "dist-tiny.json").read_text())
    assert main(["scale", "--scale", "10", "--procs", "1", "--epochs", "1",
                 "--out", str(tmp_path)]) == 0
    s = json.loads((tmp_path / "scale-10-p1.json").read_text())
    (gat,) = d["layers"]
    peaks = [rank["peak_rss"] for run in (gat["cpu"], *gat["dist"].values())
             for rank in run["ranks"]]
    assert len(peaks) == 2 and all(32 * MIB < p < 1 << 30 for p in peaks), peaks
    for rank in s["ranks"]:
        assert 32 * MIB < rank["generation_rss"] <= rank["peak_rss"] < 1 << 30, rank
