"""Every kernel of the cuda executor compiles for real GPUs without one: numba-cuda's PTX for
sm_80 (A100) and sm_90 (H100), assembled by ptxas, in every float and index type it is
launched with; no register may spill. That holds the hand-written kernels and the kernels
generated from the edge programs of GAT (1 and 4 heads, with attention dropout, and
aggregating by max), AGNN, GATv2, the Transformer (4 heads) and HGT (2 heads), float32
and float64: a test per formulation and float type, which records its edge programs.
Also: the compile check rejects what the simulator would run, reports a spill when there is
one, and the occupancy arithmetic; and asking for the executor where neither a GPU nor the
simulator is there says how to get either.

Runs in the ordinary session (the simulator cannot compile); needs numba-cuda with its
``cu12`` extra (in the ``test`` extra).
"""

from __future__ import annotations

import pytest

pytest.importorskip("numba.cuda")
from numba import config  # noqa: E402

if config.ENABLE_CUDASIM:
    pytest.skip("the CUDA simulator cannot compile kernels", allow_module_level=True)

from numba import cuda, float32, float64, void  # noqa: E402
from numba.core.errors import TypingError  # noqa: E402

from gblas_gnn.gpu import _edge_kernels, _sparse_kernels  # noqa: E402
from gblas_gnn.gpu import compile as gc  # noqa: E402
from gblas_gnn.gpu._catalogue import (  # noqa: E402
    KERNELS,
    KernelSpec,
    spec_id,
    variants,
)
from gblas_gnn.gpu._program_catalogue import FORMULATIONS, formulation_specs  # noqa: E402
from gblas_gnn.gpu._semiring_kernels import SHIPPED  # noqa: E402

pytestmark = pytest.mark.cpu_only
try:
    gc.ptxas_path()
except FileNotFoundError as exc:                     # numba-cuda without the toolkit wheels
    pytest.skip(str(exc), allow_module_level=True)

ARCHS = [(8, 0), (9, 0)]


def _compiles_without_spills(spec, index_types: int = 2):
    """``spec``'s variants compile for both architectures without spills (``index_types``
    1: the variants with int32 indices alone)."""
    for label, signature in variants(spec):
        if label.endswith("int64") and index_types < 2:
            continue
        for cc, ptx in gc.compile_kernels(spec, signature, ARCHS).items():
            assert f".target sm_{cc[0]}{cc[1]}" in ptx
            r = gc.assemble(ptx, cc)
            assert r["spill_stores"] == 0 and r["spill_loads"] == 0, (spec.name, label, cc, r)
            assert 0 < r["registers"] <= 255


@pytest.mark.parametrize("spec", KERNELS, ids=spec_id)
def test_every_hand_written_kernel_compiles_without_spills(spec):
    _compiles_without_spills(spec)


# a test per formulation, not per kernel: its edge programs are recorded when the test runs,
# by the worker that runs it (recorded at collection, every worker did it, all at once)
@pytest.mark.parametrize("F", [float32, float64], ids=str)
@pytest.mark.parametrize("name", list(FORMULATIONS))
def test_every_generated_kernel_compiles_without_spills(name, F):
    specs = formulation_specs(name, F)
    assert specs, f"{name} recorded no fusable edge program"
    for spec in specs:
        # a pass's twin for long items (*_chunks) is the same code over a chunk: checked
        # with int32 indices, what every graph of fewer than 2**31 entries runs, while its
        # pass is checked with both (a cold suite's compile time; the twins' resources are
        # in bench/results/current/cuda-kernels.md)
        _compiles_without_spills(spec, 1 if spec.name.endswith("_chunks") else 2)


def _generated(name: str, F, kernel: str):
    return next(s for s in formulation_specs(name, F) if s.name == f"{name}:{kernel}")


@pytest.mark.parametrize("spec", [lambda: KERNELS[0],
                                  lambda: _generated("gat4-dropout", float32, "column_rows")],
                         ids=["hand-written", "generated"])
def test_lowering_once_for_both_architectures_changes_no_resource(spec):
    """``compile_kernels`` types and lowers once for sm_80 and sm_90; ``ptxas`` reports the
    same resources as for a kernel lowered for each architecture on its own."""
    spec = spec()
    label, signature = next(variants(spec))
    for cc, ptx in gc.compile_kernels(spec, signature, ARCHS).items():
        assert gc.assemble(ptx, cc) == gc.assemble(gc.compile_kernel(spec, signature, cc), cc)


def test_the_catalogue_lists_every_kernel_the_executor_launches():
    from numba.cuda.dispatcher import CUDADispatcher

    launched = {id(k) for kernels, _ in SHIPPED.values() for k in kernels}
    for module in (_sparse_kernels, _edge_kernels):
        launched |= {id(v) for v in vars(module).values()
                     if isinstance(v, CUDADispatcher) and not v.targetoptions.get("device")}
    assert launched == {id(spec.kernel) for spec in KERNELS}


def _ill_typed(out):
    out[0] = "not a number"          # the simulator would just store it


def test_a_kernel_with_a_type_error_is_rejected():
    spec = KernelSpec("ill_typed", cuda.jit(_ill_typed), "element", lambda F, I: (F[::1],))
    with pytest.raises(TypingError):
        gc.compile_kernel(spec, void(float32[::1]), (9, 0))


def test_a_register_cap_that_spills_is_reported():
    spec = next(s for s in KERNELS if s.name == "edge_dots")
    _, signature = next(variants(spec))
    ptx = gc.compile_kernel(spec, signature, (9, 0))
    assert gc.assemble(ptx, (9, 0))["spill_stores"] == 0
    capped = gc.assemble(ptx, (9, 0), max_registers=24)
    assert capped["registers"] <= 24 and capped["spill_stores"] > 0


@pytest.mark.parametrize("registers, shared, threads, cc, want", [
    (32, 0, 128, (9, 0), 1.0),          # 16 blocks of 4 warps fill the 64 warp slots
    (64, 0, 128, (9, 0), 0.5),          # 65536 / (64·32) = 32 warps
    (255, 0, 128, (8, 0), 0.125),       # 8192 registers a warp: 8 warps, 2 blocks
    (16, 48 * 1024, 256, (8, 0), 0.375),  # shared memory: 3 blocks of 8 warps
    (16, 0, 32, (9, 0), 0.5),           # 32 blocks of one warp at most
])
def test_occupancy(registers, shared, threads, cc, want):
    assert gc.occupancy(registers, shared, threads, cc) == pytest.approx(want)


def test_the_executor_says_how_to_get_a_gpu_or_the_simulator():
    if cuda.is_available():
        pytest.skip("a GPU is there")
    from gblas_gnn.executors import get_executor
    from gblas_gnn.gpu import CUDAUnavailableError

    with pytest.raises(CUDAUnavailableError, match="NUMBA_ENABLE_CUDASIM=1") as err:
        get_executor("cuda")
    assert "pip install '.[gpu]'" in str(err.value)
