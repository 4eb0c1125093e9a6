"""Test-suite configuration: the executors the suite runs on.

The default run (``python -m pytest``) runs the *executor-neutral* suites
(:data:`EVERY_EXECUTOR`: the conformance, composition, operation, layer and training tests,
which take the executor under test as the default and hold it to the cpu executor or to a
reference) once on each executor of ``--executors`` (default ``cpu,primitives``), in this one
session: their test ids end in ``[cpu]`` and ``[primitives]``. Every other test runs once, on
the first executor of the list. ``primitives`` is the cpu executor's core and process tier with
every other operation the interface's default, so its run proves that an executor implementing
only the core (and the one-process tier) runs every layer and trains.

``python -m pytest --executor NAME`` runs the whole session on ``NAME`` alone (as the default
executor, ``gblas_gnn.executors.default``): how the suite runs on a real GPU (``cuda``), in
Numba's CUDA simulator (launched from ``test_suite_on_executors.py``, which says why it needs a
process of its own) and on a grid (``mpiexec -n P python -m mpi4py -m pytest --executor dist``:
there the suite written for grids, ``tests/dist``, runs; the rest passes whole-graph inputs and
is skipped).

The ``executor`` fixture is the executor under test (an instance). Tests marked ``cpu_only``
check the cpu executor's own kernels or lowerings: they run once, on ``cpu``, and are skipped
when it is not in the session.

The session sets ``OMP_WAIT_POLICY=passive`` (unless the environment says otherwise) before
any OpenMP runtime loads. One process holds two: SuiteSparse:GraphBLAS brings its own
libgomp and numba's parallel kernels run on the system's. Spinning, the idle threads of one
burn the cores the other needs; once the cpu executor's kernels have started numba's pool, the
primitives executor's GraphBLAS calls in the same session ran up to 10× slower on this 2-core
machine with another job running (``test_nn_gin.py`` and ``test_nn_gcn.py`` on both executors:
35 s spinning, 6 s passive). The benchmark harness sets the same policy for the same reason.
"""

from __future__ import annotations

import os
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# before graphblas, numba or torch load their OpenMP runtimes (see the module docstring)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

TESTS = Path(__file__).resolve().parent
# the benchmark harness (``bench/``, top level) is importable from the tests
sys.path.insert(0, str(TESTS.parent))

from executor_suites import EVERY_EXECUTOR  # noqa: E402  (the suites of every executor)

#: the executors of a default session
DEFAULT_EXECUTORS = ("cpu", "primitives")

# Random inputs are seeded: every property test draws the same examples in every run (and
# every process of an MPI job the same ones in the same order). So a run is reproducible, and
# a test parametrized by executor draws the same formulations for each: the generated
# kernels the cpu executor compiled for one are the ones the other's reference loads
# (test_compose_kernels.py's primitives runs compiled as much again before).
settings.register_profile("default", derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("collective", derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("collective" if os.environ.get("GBLAS_GNN_TEST_COLLECTIVE")
                      else "default")


def pytest_addoption(parser):
    parser.addoption("--executor", default=None,
                     help="run the whole session on this one executor (e.g. dist under "
                          "mpiexec, cuda on a GPU or in the simulator); see "
                          "gblas_gnn.executors.names()")
    parser.addoption("--executors", default=None,
                     help="comma list of the executors the executor-neutral suites run on "
                          f"in this session (default {','.join(DEFAULT_EXECUTORS)}); every "
                          "other test runs on the first")


def session_executors(config) -> tuple[str, ...]:
    """The executors of this session, the first one the default of every test that is not
    executor-neutral (``--executor NAME``: that one alone)."""
    one, many = config.getoption("--executor"), config.getoption("--executors")
    if one is not None:
        return (one,)
    if many is None:
        return DEFAULT_EXECUTORS
    return tuple(dict.fromkeys(name.strip() for name in many.split(",") if name.strip()))


def runs_on_every_executor(path: Path) -> bool:
    """Whether the test file ``path`` is one of the executor-neutral suites."""
    return path.parent == TESTS and any(fnmatch(path.name, p) for p in EVERY_EXECUTOR)


def executors_for(config, node) -> tuple[str, ...]:
    """The executors the test ``node`` runs on in this session."""
    names = session_executors(config)
    if node.get_closest_marker("cpu_only") is not None:
        return ("cpu",) if "cpu" in names else names[:1]          # (then skipped)
    return names if runs_on_every_executor(node.path) else names[:1]


def pytest_configure(config):
    # (the markers, slow, cpu_only and gpu, and the timeouts are in pyproject.toml)
    if config.getoption("--executor") is not None and \
            config.getoption("--executors") is not None:
        raise pytest.UsageError("--executor NAME runs the session on NAME alone; give it or "
                                "--executors, not both")
    names = session_executors(config)
    if not names:
        raise pytest.UsageError("--executors names no executor")
    from gblas_gnn import executors

    unknown = [n for n in names if n not in executors.names()]
    if unknown:
        raise pytest.UsageError(f"unknown executor(s) {unknown}: use "
                                f"{', '.join(executors.names())}")
    if os.environ.get("GBLAS_GNN_TEST_COLLECTIVE") and config.option.basetemp is None:
        # every rank of an MPI job is its own pytest process: give each its own base
        # directory, or they delete each other's temporary directories
        import tempfile

        config.option.basetemp = str(Path(tempfile.gettempdir()) /
                                     f"gblas-gnn-pytest-{os.getpid()}")


def pytest_generate_tests(metafunc):
    # an executor-neutral test once per executor of the session ([cpu], [primitives])
    if "executor_name" not in metafunc.fixturenames:
        return
    names = executors_for(metafunc.config, metafunc.definition)
    if runs_on_every_executor(metafunc.definition.path) and \
            len(session_executors(metafunc.config)) > 1:
        metafunc.parametrize("executor_name", names, indirect=True, ids=list(names))


def _real_gpu() -> bool:
    """Whether a CUDA GPU (not the simulator) is there."""
    try:
        from numba import config, cuda
    except ImportError:
        return False
    return not config.ENABLE_CUDASIM and cuda.is_available()


def _executor_of(item) -> str:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "executor_name" in callspec.params:
        return callspec.params["executor_name"]
    return executors_for(item.config, item)[0]


#: files whose tests launch processes that run the cpu executor's generated kernels (MPI
#: jobs, notebooks, the command line, the benchmark harness, sub-sessions)
LAUNCHERS = ("test_mpi.py", "test_notebooks.py", "test_suite_on_executors.py", "test_bench.py",
             "test_cli_run.py")


#: the files of the longest launches (sub-suites and notebooks, one to two minutes each, cold)
LONGEST_FIRST = ("test_suite_on_executors.py", "test_mpi.py", "test_notebooks.py")


def launches(item) -> bool:
    """Whether a test starts processes of its own (:data:`LAUNCHERS`, or marked slow)."""
    return item.path.name in LAUNCHERS or item.get_closest_marker("slow") is not None


def run_order(item) -> tuple[bool, int]:
    """Where a test runs in the session: the tests that launch processes last (by then the
    in-process tests have compiled the kernels those processes share with them, and they load
    them from the cache instead of compiling them again in every process: cold, a grid's
    ranks compiled each kernel once per rank, and the 4-rank grid suite ran out of time at
    600 s), and of those the longest (:data:`LONGEST_FIRST`) first. Workers steal queued
    tests from the end of each other's queues, never a running one, so a queue that ends in
    short tests lets both workers end together (cold: 7 s apart; with a simulator suite last,
    136 s, though that suite's own two workers then used both cores)."""
    if not launches(item):
        return (False, 0)
    name = item.path.name
    return (True, LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST))


def pytest_collection_modifyitems(config, items):
    items.sort(key=run_order)
    needs_gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    if needs_gpu and not _real_gpu():   # asked only then: numba.cuda's import is 0.2 s a rank
        no_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in needs_gpu:
            item.add_marker(no_gpu)
    # on a grid, layers take a DistGraph and row shares: tests/dist is the suite written so
    grid_only = pytest.mark.skip(reason="passes whole-graph inputs; the grid suite is "
                                        "tests/dist")
    for item in items:
        name = _executor_of(item)
        if name != "cpu" and item.get_closest_marker("cpu_only") is not None:
            item.add_marker(pytest.mark.skip(
                reason=f"checks the cpu executor itself, not {name!r}"))
        elif name == "dist" and item.path.parent.name != "dist":
            item.add_marker(grid_only)


@pytest.fixture
def executor_name(request) -> str:
    """The name of the executor under test (the parameter of an executor-neutral test)."""
    return getattr(request, "param", None) or executors_for(request.config, request.node)[0]


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
