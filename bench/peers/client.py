"""Our end of a peer's worker (:mod:`.dgl_worker`, :mod:`.pyg_worker`): start it, send
requests, read answers.

A :class:`PeerWorker` is one long-lived process of the peer's environment (PyG's is ours)
for a whole case,
so that its calls can be interleaved round-robin with ours and PyG's (:func:`~bench.core.timing.
interleaved`) like any other callable: :class:`PeerLayer`'s ``forward`` and ``fwd_bwd``
return :class:`~bench.core.timing.Measured`, the seconds the worker timed around the work itself.
Between calls both processes wait on a pipe; ``OMP_WAIT_POLICY`` (passive by default,
:mod:`.command`) keeps their idle OpenMP threads from spinning.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..core.timing import Measured
from ..core.worker import RESULT_PREFIX, launch, with_root_on_path
from ..layers.rows import get_row
from .env import require

__all__ = ["PeerError", "PeerWorker", "PeerLayer", "PeerAggregation", "peer_env",
           "peer_memory", "peer_python"]

#: the worker module of each peer
MODULES = {"dgl": "bench.peers.dgl_worker", "pyg": "bench.peers.pyg_worker"}


class PeerError(RuntimeError):
    """The peer's worker failed a request or died; the message carries its traceback."""


def peer_env(threads: int, env: dict[str, str] | None = None) -> dict[str, str]:
    """The worker's environment: ``env`` (default ours) with only the harness on
    ``PYTHONPATH`` — nothing of our environment may shadow the peer's torch and numpy, and
    our library is not importable there — and ``OMP_NUM_THREADS`` = ``threads`` for DGL's
    own OpenMP kernels (torch's threads are set in the worker)."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = ""
    env["OMP_NUM_THREADS"] = str(threads)
    return with_root_on_path(env)


def peer_python(peer: str) -> str:
    """The interpreter of ``peer``'s worker: ours for PyG, DGL's own environment's
    (:class:`~.env.PeerMissing` if it is not set up)."""
    if peer not in MODULES:
        raise ValueError(f"unknown peer {peer!r}; choose from {sorted(MODULES)}")
    return sys.executable if peer == "pyg" else str(require(peer))


class PeerWorker:
    """A running peer worker for one case (a context manager).

    Parameters
    ----------
    data_path : Path
        The case's arrays (:func:`~bench.core.cases.save_case_data`).
    threads : int
        Threads of torch and DGL in the worker.
    workdir : Path
        Where weights and answers are exchanged (``.npz`` files, removed at close).
    env : dict, optional
        Base environment (default ours; see :func:`peer_env`).
    peer : str
        The peer: ``dgl`` (:class:`~.env.PeerMissing` if it is not set up) or ``pyg``.
    keep_freed : bool
        The worker keeps its freed memory (:func:`~bench.core.rss.keep_freed_memory`).
    """

    def __init__(self, data_path: Path, threads: int, workdir: Path,
                 env: dict[str, str] | None = None, peer: str = "dgl",
                 keep_freed: bool = False):
        python = peer_python(peer)
        self.peer = peer
        self.files = Path(tempfile.mkdtemp(prefix=f"{peer}-", dir=workdir))
        self._stderr = open(self.files / "stderr.txt", "w+")     # noqa: SIM115 (closed in close)
        self.proc = subprocess.Popen([python, "-m", MODULES[peer]], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._stderr, text=True,
                                     env=peer_env(threads, env))
        try:
            self.versions = self._read()["versions"]
            self.setup = self.call("setup", data=str(data_path), threads=threads,
                                   keep_freed=keep_freed)
        except BaseException:
            self.close()
            raise

    def _read(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith(RESULT_PREFIX):
                reply = json.loads(line[len(RESULT_PREFIX):])
                if "error" in reply:
                    raise PeerError(f"the {self.peer} worker failed: {reply['error']}\n"
                                    f"{reply.get('traceback', '')}")
                return reply
        self._stderr.seek(0)
        raise PeerError(f"the {self.peer} worker ended (exit {self.proc.wait()}): "
                        f"{self._stderr.read()[-3000:]}")

    def call(self, op: str, **request) -> dict:
        """Send one request (see :mod:`.dgl_worker`) and return its answer."""
        self.proc.stdin.write(json.dumps({"op": op, **request}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        """Stop the worker and remove the exchange files."""
        import shutil

        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        if not self._stderr.closed:
            self._stderr.close()
        shutil.rmtree(self.files, ignore_errors=True)

    def __enter__(self) -> PeerWorker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_params(params: dict[str, np.ndarray], path: Path) -> Path:
    """The shared weights as an ``.npz`` the worker reads."""
    np.savez(path, **{k: np.ascontiguousarray(v, dtype=np.float32) for k, v in params.items()})
    return path


class PeerLayer:
    """Implementation ``impl`` of layer row ``row`` in the worker, with ``params`` (our
    layout) copied in: the callables the harness times and checks."""

    def __init__(self, worker: PeerWorker, row: str, impl: str,
                 params: dict[str, np.ndarray], k_in: int, k_out: int):
        self.worker, self.row, self.impl = worker, row, impl
        spec = get_row(row)
        path = write_params(params, worker.files / f"{row}-{impl}-params.npz")
        worker.call("build", row=row, impl=impl, params=str(path), k_in=k_in, k_out=k_out,
                    heads=spec.heads, config=spec.config)

    def forward(self) -> Measured:
        """Inference forward in the worker (``eval()``, ``no_grad``)."""
        return Measured(self.worker.call("time", impl=self.impl, what="fwd")["seconds"])

    def fwd_bwd(self) -> Measured:
        """Training forward and backward in the worker."""
        return Measured(self.worker.call("time", impl=self.impl, what="fwd+bwd")["seconds"])

    def outputs(self) -> dict[str, np.ndarray]:
        """``Z``, ``dH``, ``grad_<name>`` (our layout) and ``Z_eval`` of one checked run."""
        out = self.worker.files / f"{self.row}-{self.impl}-check.npz"
        self.worker.call("check", impl=self.impl, out=str(out))
        with np.load(out) as z:
            arrays = {k: z[k] for k in z.files}
        out.unlink()
        return arrays

    def close(self) -> None:
        """Free the layer in the worker (nothing to do once the worker has ended: the error
        that ended it is the one to report)."""
        if self.worker.proc.poll() is None:
            self.worker.call("drop", impl=self.impl)


class PeerAggregation:
    """The worker's unweighted aggregation ``⊕_{j → i} X_j`` (``update_all(copy_u, reduce)``)
    over the case's graph, or its reverse when ``transposed``: a callable the harness times,
    and the result to check."""

    def __init__(self, worker: PeerWorker, reduce: str, transposed: bool = False):
        self.worker, self.reduce, self.transposed = worker, reduce, bool(transposed)

    def __call__(self) -> Measured:
        return Measured(self.worker.call("aggregate", reduce=self.reduce,
                                         transposed=self.transposed)["seconds"])

    def result(self) -> np.ndarray:
        """The aggregated features ``(n, k)``."""
        out = self.worker.files / f"aggregate-{self.reduce}-{int(self.transposed)}.npy"
        self.worker.call("aggregate", reduce=self.reduce, transposed=self.transposed,
                         out=str(out))
        Z = np.load(out)
        out.unlink()
        return Z


def peer_memory(data_path: Path, row: str, impl: str, params: dict[str, np.ndarray],
                k_in: int, k_out: int, threads: int, limit: int, timeout: float | None,
                env: dict[str, str] | None, workdir: Path, peer: str = "dgl"):
    """Peak RSS of one peer layer's forward+backward in a fresh guarded process of the
    peer's environment (``python -m bench.peers.dgl_worker --memory``); returns
    :func:`~bench.core.worker.launch`'s ``(result, answer)``."""
    python = require(peer)
    spec = get_row(row)
    path = write_params(params, Path(workdir) / f"{row}-{impl}-params.npz")
    try:
        return launch(MODULES[peer], ["--memory", "--data", str(data_path), "--row", row,
                                      "--impl", impl, "--params", str(path), "--k-in",
                                      str(k_in), "--k-out", str(k_out), "--heads",
                                      str(spec.heads), "--config", json.dumps(spec.config),
                                      "--threads", str(threads)],
                      limit, timeout, peer_env(threads, env), python=str(python))
    finally:
        path.unlink(missing_ok=True)
