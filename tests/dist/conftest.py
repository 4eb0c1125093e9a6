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
    """Which layouts of dense tensors a test runs on; the grid jobs run every test on every
    rank, and their time is the suite's longest.

    * A test marked ``any_layout`` (blocks and files that no dense tensor's layout enters)
      runs once, on the replicated layout.
    * On a grid wider than 2×2 every other test runs on the sharded layout alone: the
      replicated layout keeps every dense tensor whole on every rank, so what the grid's
      shape changes for it (the blocks of A, their files, the reductions along process rows
      and columns) is already there on 2×2 and in the ``any_layout`` tests; the sharded
      layout's vertex shares change with the shape (uneven splits on 3×3). On 1×1 and 2×2
      every fault and bad-input test runs on both layouts.
    """
    wide = config.getoption("--executor", default=None) == "dist" and _world_size() > 4

    def dropped(item) -> bool:
        layout = getattr(item, "callspec", None) and item.callspec.params.get("dex")
        if layout is None:
            return False
        if item.get_closest_marker("any_layout") is not None:
            return layout == "sharded"
        return wide and layout == "replicated"

    gone = [item for item in items if dropped(item)]
    if gone:
        config.hook.pytest_deselected(items=gone)
        items[:] = [item for item in items if not dropped(item)]


def _world_size() -> int:
    from mpi4py import MPI

    return MPI.COMM_WORLD.Get_size()


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
