"""Fixtures of the cuda executor's tests: they hold it to the cpu executor.

They run wherever the executor can: on a GPU, or in Numba's CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1 python -m pytest --executor cuda tests/gpu``, which the ordinary
run launches from ``tests/test_suite_on_executors.py``); elsewhere they are skipped. Graphs
are tiny (tens of vertices): the simulator is thousands of times slower than a GPU.
"""

from __future__ import annotations

import pytest

pytest.importorskip("numba.cuda")


def _cuda():
    from gblas_gnn.executors import get_executor
    from gblas_gnn.gpu import CUDAUnavailableError

    try:
        return get_executor("cuda")
    except CUDAUnavailableError as exc:
        pytest.skip(str(exc), allow_module_level=True)


@pytest.fixture(scope="session")
def cuda():
    """The cuda executor (skips the test where neither a GPU nor the simulator is there)."""
    return _cuda()


@pytest.fixture(scope="session")
def cpu():
    from gblas_gnn.executors import CPUExecutor

    return CPUExecutor()
