"""The benchmark harness with ``--executor cuda``, in Numba's simulator (no GPU here, so PyG
runs on the CPU): our layer on the device agrees with PyG before anything is timed, the
memory worker runs it, and the cases that train in worker processes are refused."""

from __future__ import annotations

import pytest

pytest.importorskip("torch_geometric")

from bench import main  # noqa: E402
from bench.core.cases import graph_from_csr  # noqa: E402
from bench.core.device import device_for  # noqa: E402
from bench.layers.memory import measure_layer, tiny_data  # noqa: E402
from bench.layers.pair import LayerPair  # noqa: E402
from gblas_gnn.gpu import SIMULATOR  # noqa: E402


@pytest.mark.parametrize("layer", ["gat", "agnn", "gcn"])
def test_our_layer_on_the_device_agrees_with_pyg(cuda, layer):
    data = tiny_data(8, 8)
    device = device_for("cuda")
    assert device.kind == ("simulator" if SIMULATOR else "gpu")
    pair = LayerPair(layer, graph_from_csr(data.n, data.indptr, data.indices), data, 8,
                     executor="cuda", device=device)
    report = pair.check()
    assert all(r["ok"] for r in report.values())
    assert isinstance(device.timed(pair.ours_forward)(), cuda.xp.ndarray)


def test_the_memory_worker_runs_our_layer_on_the_device(cuda, tmp_path):
    from bench.core.cases import save_case_data

    path = save_case_data(tiny_data(8, 8), tmp_path / "case.npz")
    r = measure_layer(str(path), "gat", "ours", 8, 8, threads=1, iters=1, executor="cuda")
    assert r["executor"] == "cuda" and r["peak_rss_bytes"] > 0
    assert ("peak_device_bytes" in r) == (not SIMULATOR)


def test_cases_that_train_in_workers_are_refused(cuda, tmp_path, capsys):
    assert main(["run", "--case", "tinyXL", "--executor", "cuda", "--out", str(tmp_path)]) == 2
    assert "only the layer cases run" in capsys.readouterr().err
