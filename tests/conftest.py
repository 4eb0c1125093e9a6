"""Test-suite configuration: run the suite on any registered executor.

``python -m pytest --executor NAME`` makes ``NAME`` the default executor for every test
(``gblas_gnn.executors.default``), so each layer, model, trainer and ``gg.ops`` call that does
not name an executor runs on it; tests that hold an executor to the cpu one name both. The
``executor`` fixture is the executor under test. Tests marked ``cpu_only`` check the cpu
executor's own kernels or lowerings and run only when it is the one under test. On the
``dist`` executor (``mpiexec -n P python -m mpi4py -m pytest --executor dist``) the suite
written for grids, ``tests/dist``, runs; the rest passes whole-graph inputs and is skipped.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# the benchmark harness (``bench/``, top level) is importable from the tests
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

settings.register_profile("default", suppress_health_check=[HealthCheck.too_slow])
# every process of an MPI job must draw the same examples in the same order
settings.register_profile("collective", derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("collective" if os.environ.get("GBLAS_GNN_TEST_COLLECTIVE")
                      else "default")


def pytest_addoption(parser):
    parser.addoption("--executor", default="cpu",
                     help="the executor the suite runs on (default cpu; see "
                          "gblas_gnn.executors.names())")


def pytest_configure(config):
    # (the markers, slow, cpu_only and gpu, and the timeouts are in pyproject.toml)
    if os.environ.get("GBLAS_GNN_TEST_COLLECTIVE") and config.option.basetemp is None:
        # every rank of an MPI job is its own pytest process: give each its own base
        # directory, or they delete each other's temporary directories
        import tempfile

        config.option.basetemp = str(Path(tempfile.gettempdir()) /
                                     f"gblas-gnn-pytest-{os.getpid()}")


def _real_gpu() -> bool:
    """Whether a CUDA GPU (not the simulator) is there."""
    try:
        from numba import config, cuda
    except ImportError:
        return False
    return not config.ENABLE_CUDASIM and cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if not _real_gpu():
        no_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if item.get_closest_marker("gpu") is not None:
                item.add_marker(no_gpu)
    name = config.getoption("--executor")
    if name == "cpu":
        return
    skip = pytest.mark.skip(reason=f"checks the cpu executor itself, not {name!r}")
    # on a grid, layers take a DistGraph and row shares: tests/dist is the suite written so
    grid_only = pytest.mark.skip(reason="passes whole-graph inputs; the grid suite is "
                                        "tests/dist")
    for item in items:
        if "cpu_only" in item.keywords:
            item.add_marker(skip)
        elif name == "dist" and item.path.parent.name != "dist":
            item.add_marker(grid_only)


@pytest.fixture(scope="session")
def executor_name(request) -> str:
    return request.config.getoption("--executor")


@pytest.fixture(autouse=True)
def _default_executor(executor_name):
    """Every test runs with the executor under test as the default."""
    from gblas_gnn import executors

    with executors.default(executor_name) as ex:
        yield ex


@pytest.fixture
def executor(_default_executor):
    """The executor under test (an instance)."""
    return _default_executor
