"""``python -m bench gpu``, the study a lent GPU machine runs: its dry run in Numba's CUDA
simulator launched as the machine launches it (``bash bench/gpu/run.sh``, here with a wheel
folder holding one small wheel made by the test, so that the install line runs), and the
parts that need no device: the suite's outcome counter, the targets, the kernel profile's
bookkeeping and the command's refusals."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from bench import main
from bench.gpu.report import gpu_targets
from bench.gpu.suite import EXECUTOR_SUITES, SUITES, count_outcomes
from bench.gpu.versions import card_name

ROOT = Path(__file__).resolve().parent.parent
PROBE = "gpu_study_probe"


def _wheel(folder: Path) -> Path:
    """A pure-Python wheel of one module, :data:`PROBE`."""
    folder.mkdir(parents=True)
    path = folder / f"{PROBE}-0.1-py3-none-any.whl"
    info = f"{PROBE}-0.1.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{PROBE}.py", "VALUE = 42\n")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {PROBE}\nVersion: 0.1\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: "
                                    "true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", f"{PROBE}.py,,\n{info}/METADATA,,\n{info}/WHEEL,,\n"
                                     f"{info}/RECORD,,\n")
    return path


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_gpu_study_dry_run_through_its_shell_entry_point(tmp_path):
    pytest.importorskip("torch_geometric")
    pytest.importorskip("numba.cuda")
    _wheel(tmp_path / "wheels")
    out, site = tmp_path / "out", tmp_path / "site"
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "OUT": str(out),
           "GPU_STUDY_WHEELS": str(tmp_path / "wheels"), "GPU_STUDY_SITE": str(site)}
    done = subprocess.run(["bash", "bench/gpu/run.sh", "--dry-run"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=840)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert (site / f"{PROBE}.py").read_text() == "VALUE = 42\n"       # the install line ran
    assert "installed 1 wheels" in done.stdout
    r = json.loads((out / "gpu-simulator.json").read_text())
    assert r["dry_run"] and r["device"] == "simulator"
    assert r["ceilings"] == {"measured": False, "why": "Numba's CUDA simulator has no device"}
    case = r["cases"]["dry"]
    assert list(case["layers"]) == ["gat", "gcn"] and not case["failed_rows"]
    for entry in case["layers"].values():
        assert entry["agreement"] and all(v["ok"] for v in entry["agreement"].values())
        assert entry["times"]["ours fwd+bwd"]["runs"] == 1
        assert entry["kernels"] and all(k["launches"] > 0 and k["bytes"] > 0
                                        for k in entry["kernels"].values())
    assert any(k.startswith("spmm_plus_times") for k in case["layers"]["gcn"]["kernels"])
    where = r["where"]                  # the whole step profiled, blocking launches
    assert where["case"] == "dry" and (out / where["file"]).read_text() == where["text"]
    assert "## gat:" in where["text"] and "## gcn:" in where["text"]
    assert "by inclusive time" in where["text"] and "gblas_gnn/nn/" in where["text"]
    suite = r["suites"]["gpu"]
    assert suite["complete"] and suite["passed"] >= 1 and suite["failed"] == 0
    md = (out / "gpu-simulator.md").read_text()
    assert "dry run: simulator, not a measurement" in md and "## Targets" in md
    assert "## Where a step's time goes (dry, blocking launches)" in md
    assert done.stdout.endswith((out / "gpu-study.log").read_text())   # the study's own log
    last = done.stdout.strip().splitlines()
    assert any(line.startswith("GPU study on simulator (dry run):") for line in last[-12:])


def test_outcomes_are_counted_from_the_lines_of_a_stopped_session():
    lines = ["[gw0] [ 10%] PASSED tests/test_a.py::test_x[cpu] ",
             "[gw1] [ 20%] FAILED tests/test_a.py::test_y ",
             "tests/test_b.py::test_z SKIPPED (needs a CUDA GPU) [ 30%]",
             "tests/test_b.py::test_w ERROR [ 40%]",
             "collecting ... PASSED without an id", "FAILED"]
    c = count_outcomes(lines)
    assert (c["passed"], c["failed"], c["skipped"], c["error"]) == (1, 1, 1, 1)
    assert c["failed_ids"] == ["tests/test_a.py::test_y", "tests/test_b.py::test_w"]


def test_the_executor_session_runs_what_the_simulator_runs():
    from executor_suites import ON_A_DEVICE
    from test_suite_on_executors import GPU_SUITE

    assert EXECUTOR_SUITES == ON_A_DEVICE
    assert ["tests/gpu", *SUITES["executor"]] == GPU_SUITE
    assert "tests/test_compose_kernels.py" in SUITES["executor"]
    # the layer files hand host arrays to parameters: their cuda coverage is tests/gpu
    assert not any("test_nn_" in f or "test_train_" in f for f in SUITES["executor"])


def _result(share_bytes_per_s: float | None, speedups: dict, memory: tuple) -> dict:
    kernels = ({"spmm_plus_times_f32": {"launches": 2, "seconds": 1e-3, "bytes": 10,
                                        "bytes_per_second": share_bytes_per_s}}
               if share_bytes_per_s else {})
    layers = {row: {"speedup": {"fwd+bwd": s}, "kernels": kernels if row == "gcn" else {},
                    "device_memory": {"ours": {"peak_device_bytes": memory[0]},
                                      "pyg": {"peak_device_bytes": memory[1]}}}
              for row, s in speedups.items()}
    return {"ceilings": {"measured": True, "copy": {"bytes_per_second": 1000.0}},
            "cases": {"M": {"layers": {}}, "L": {"layers": layers}},
            "suites": {"gpu": {"complete": True, "passed": 3, "failed": 0, "error": 0},
                       "executor": {"complete": False, "passed": 9, "failed": 0,
                                    "error": 0}}}


def test_targets_are_read_at_l_else_at_the_last_case():
    r = _result(600.0, {"gat": 2.5, "gatv2": 2.9, "transformer": 4.0, "gcn": 1.0}, (10, 100))
    r["cases"]["ER1M"] = {"layers": {}}         # a case after L: the targets stay at L
    got = {t["name"]: (t["value"], t["met"]) for t in gpu_targets(r)}
    assert got["GAT fwd+bwd speedup over PyG (L)"] == (2.5, True)
    assert got["GAT peak device memory ours / PyG (L)"] == (0.1, True)
    assert got["GATV2 fwd+bwd speedup over PyG (L)"] == (2.9, False)
    assert got["TRANSFORMER fwd+bwd speedup over PyG (L)"] == (4.0, True)
    assert got["spmm_plus_times (gcn) bandwidth / copy bandwidth (L)"] == (0.6, True)
    suites = [t for t in gpu_targets(r) if t["name"].startswith("suite")]
    assert [t["met"] for t in suites] == [True, False]          # a stopped session fails
    missing = {t["name"]: t["met"] for t in gpu_targets(_result(None, {"gat": 1.0}, (10, 0)))}
    assert missing.pop("GAT fwd+bwd speedup over PyG (L)") is False      # measured, not met
    assert all(met is None for name, met in missing.items()          # unmeasured: unknown
               if not name.startswith("suite"))
    del r["cases"]["L"]
    assert all("(ER1M)" in t["name"] for t in gpu_targets(r) if "suite" not in t["name"])


def test_card_names_for_file_names():
    assert card_name({"card": {"name": "NVIDIA H100 80GB HBM3"}}) == "h100"
    assert card_name({"card": {"name": "NVIDIA H200"}}) == "h200"
    assert card_name({"card": {"name": "simulator"}}) == "simulator"
    assert card_name({"card": {"name": "Some Card X/9"}}) == "some-card-x-9"


def test_the_command_refuses_a_case_that_is_not_a_layer_case(capsys):
    assert main(["gpu", "--cases", "XL", "--dry-run"]) == 2
    assert "not layer cases" in capsys.readouterr().err


def test_a_profile_of_an_executor_already_profiled_is_refused():
    from bench.gpu.profile import KernelProfile

    class Executor:
        def launch(self, kernel, grid, *args, shared=0):
            pass

    ex = Executor()
    with KernelProfile(ex):
        with pytest.raises(RuntimeError, match="already being profiled"):
            KernelProfile(ex).__enter__()
    assert "launch" not in vars(ex)
