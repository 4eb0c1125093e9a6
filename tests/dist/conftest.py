"""Fixtures of the grid tests: the distributed executor under test.

Under ``mpiexec -n P python -m mpi4py -m pytest --executor dist tests/dist`` every rank runs
these tests on the √P×√P grid; in the ordinary run they use a 1×1 grid over this process.
Every rank runs the same tests in the same order (their collectives must match), and every
assertion compares arrays that the collectives made equal on all ranks.
"""

from __future__ import annotations

import pytest

pytest.importorskip("mpi4py")           # what the machine may lack (pip install ".[dist]")

from gblas_gnn import dist  # noqa: E402  (ours: an import error fails, never skips)


def pytest_collection_modifyitems(config, items):
    """A test marked ``any_layout`` (blocks and files that no dense tensor's layout enters)
    runs once, on the replicated layout: the grid jobs run every test on every rank, and
    their time is the suite's longest. Every fault and bad-input test runs on both."""
    once = [item for item in items if item.get_closest_marker("any_layout") is not None and
            getattr(item, "callspec", None) is not None and
            item.callspec.params.get("dex") == "sharded"]
    if once:
        config.hook.pytest_deselected(items=once)
        items[:] = [item for item in items if item not in once]


@pytest.fixture(params=dist.DENSE_LAYOUTS)
def dex(executor, request):
    """The distributed executor, once per layout of dense tensors: the one under test, or a
    1×1 grid over this process."""
    base = executor if isinstance(executor, dist.DistExecutor) else _single()
    key = (id(base), request.param)
    if key not in _LAID_OUT:
        _LAID_OUT[key] = dist.DistExecutor(base.grid, dense=request.param)
    return _LAID_OUT[key]


_SINGLE: list = []
_LAID_OUT: dict = {}


def _single():
    if not _SINGLE:
        _SINGLE.append(dist.DistExecutor(dist.Grid()))
    return _SINGLE[0]


@pytest.fixture
def shared_tmp(tmp_path, dex):
    """A directory every rank sees (rank 0's temporary directory)."""
    from pathlib import Path

    return Path(dex.grid.bcast(str(tmp_path), "test.tmp"))
