"""What every peer worker shares: the layers of one case by implementation name, the timed
call, and the request loop on stdin (:mod:`.dgl_worker`, :mod:`.pyg_worker`).

Requests (``op``), one JSON object per line; each gets one ``BENCH_RESULT`` line back
(``{"error": ..., "traceback": ...}`` when it failed), and the worker starts with
``{"versions": ...}``:

* ``setup`` — ``data``: the case's ``.npz`` (:func:`~bench.core.cases.save_case_data`),
  ``threads``, ``keep_freed`` (optional: :func:`~bench.core.rss.keep_freed_memory` in the
  worker, as the harness does in its own process);
* ``build`` — ``row``, ``impl``, ``params`` (``.npz`` of the shared weights), ``k_in``,
  ``k_out``, ``heads``, ``config``: a layer, kept under ``impl``;
* ``check`` — ``impl``, ``out``: one training forward+backward and an inference forward,
  ``Z``, ``dH``, ``grad_<name>`` (our layout) and ``Z_eval`` written to ``out``;
* ``time`` — ``impl``, ``what`` (``fwd`` | ``fwd+bwd``): one call, timed here after an
  untimed ``gc.collect()``; answers ``{"seconds": s}``;
* ``aggregate`` — only where the side has it (DGL's unweighted kernel, :mod:`.dgl_worker`);
* ``drop`` — ``impl``: forget the layer; ``quit``.
"""

from __future__ import annotations

import gc
import json
import sys
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np

from ..core.rss import keep_freed_memory
from ..core.worker import emit

__all__ = ["Side", "serve", "read_weights"]


def read_weights(path: str) -> dict[str, np.ndarray]:
    """The shared weights of a ``build`` request (our layout)."""
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


class Side(ABC):
    """One peer library's layers of a case: ``layers[impl] = (row, module, dZ)``.

    A subclass builds the modules (``build``), runs them (``forward``, ``fwd_bwd``) and
    writes their outputs in our layout (``check``); timing and dropping are shared.
    """

    def __init__(self) -> None:
        self.layers: dict[str, tuple] = {}

    @abstractmethod
    def build(self, row: str, impl: str, params: str, k_in: int, k_out: int, heads: int,
              config: dict) -> dict:
        """Build ``impl`` of ``row`` with the weights in file ``params``."""

    @abstractmethod
    def forward(self, impl: str):
        """Inference: ``eval()`` under ``torch.no_grad()``."""

    @abstractmethod
    def fwd_bwd(self, impl: str):
        """Training forward and backward: ``(Z, dH)``; fills the parameters' gradients."""

    @abstractmethod
    def check(self, impl: str, out: str) -> dict:
        """Outputs and gradients in our layout, written to ``out`` (``.npz``)."""

    def time(self, impl: str, what: str) -> dict:
        """One call of ``what`` (``fwd`` or ``fwd+bwd``), timed after an untimed collection."""
        fn = {"fwd": self.forward, "fwd+bwd": self.fwd_bwd}[what]
        gc.collect()
        t = time.perf_counter()
        out = fn(impl)
        seconds = time.perf_counter() - t
        del out
        return {"seconds": seconds}

    def drop(self, impl: str) -> dict:
        """Forget layer ``impl``."""
        self.layers.pop(impl, None)
        gc.collect()
        return {"dropped": impl}


def _handle(make_side: Callable[[str, int], Side], side: Side | None,
            req: dict) -> tuple[Side | None, dict]:
    op = req["op"]
    if op == "setup":
        kept = bool(req.get("keep_freed")) and keep_freed_memory()
        return make_side(req["data"], int(req["threads"])), {"setup": True, "kept": kept}
    if side is None:
        raise RuntimeError(f"request {op!r} before 'setup'")
    if op == "build":
        return side, side.build(req["row"], req["impl"], req["params"], req["k_in"],
                                req["k_out"], req["heads"], req.get("config", {}))
    if op == "check":
        return side, side.check(req["impl"], req["out"])
    if op == "time":
        return side, side.time(req["impl"], req["what"])
    if op == "aggregate" and hasattr(side, "aggregate"):
        return side, side.aggregate(req["reduce"], bool(req["transposed"]), req.get("out"))
    if op == "drop":
        return side, side.drop(req["impl"])
    raise ValueError(f"unknown request {op!r}")


def serve(make_side: Callable[[str, int], Side], versions: Callable[[], dict],
          stdin=None) -> int:
    """Answer requests from ``stdin`` until ``quit`` or end of input; ``make_side(data,
    threads)`` answers ``setup``."""
    emit({"versions": versions()})
    side = None
    for line in stdin or sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        if req.get("op") == "quit":
            break
        try:
            side, reply = _handle(make_side, side, req)
        except Exception as exc:        # the parent raises it, with this traceback
            reply = {"error": f"{type(exc).__name__}: {exc}",
                     "traceback": traceback.format_exc()}
        emit(reply)
    return 0
