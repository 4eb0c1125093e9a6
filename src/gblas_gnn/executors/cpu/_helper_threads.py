r"""Python threads that live as long as the process, for the dense products' work on both
cores (:mod:`._chunked_gemm`, the executor's ``matmul_vjp``).

:func:`run_all` runs ``tasks[0]`` on the calling thread and each other task on a helper
thread, and returns when every task is done, raising the first exception (the caller's own
before a helper's). The helpers wait on a queue between calls, so a call hands its tasks
over instead of starting and joining threads: a thread's start and join took about 115 µs
here, a hand-over about 40 µs (AMD EPYC), and the products of a training step ask several
times.

Two callers at once (threads of the user's own) do not share the helpers: the one that
finds them busy starts threads of its own for that call. A forked child never inherits
threads, so the helpers are forgotten in it (``os.register_at_fork``) and made again at its
first call.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Sequence

__all__ = ["run_all"]

Task = Callable[[], None]


class _Helper:
    """One daemon thread that runs the tasks put into its inbox (with their index and a
    queue), each followed by its index and outcome (None or the exception it raised) in
    that queue."""

    def __init__(self, index: int):
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=f"gblas_gnn-helper-{index}",
                                       daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            k, task, outcomes = self.inbox.get()
            outcomes.put((k, _outcome(task)))


class _Helpers:
    """The process's helpers, used by one caller at a time."""

    def __init__(self):
        self.busy = threading.Lock()
        self.helpers: list[_Helper] = []

    def run(self, tasks: Sequence[Task]) -> bool:
        """``tasks`` as :func:`run_all` does; False, with nothing run, where another caller
        holds the helpers."""
        if not self.busy.acquire(blocking=False):
            return False
        try:
            while len(self.helpers) < len(tasks) - 1:
                self.helpers.append(_Helper(len(self.helpers)))
            done: queue.SimpleQueue = queue.SimpleQueue()
            for k, (helper, task) in enumerate(zip(self.helpers, tasks[1:], strict=False), 1):
                helper.inbox.put((k, task, done))
            outcomes = [_outcome(tasks[0])] + [None] * (len(tasks) - 1)
            _collect(done, outcomes, len(tasks) - 1)
        finally:
            self.busy.release()
        _raise_first(outcomes)
        return True


def _collect(done: queue.SimpleQueue, outcomes: list, pending: int) -> None:
    """The helpers' outcomes into ``outcomes``, waiting for every one of them even when the
    wait is interrupted (Ctrl-C raises ``KeyboardInterrupt`` in the waiting thread): the
    interruption is raised once no helper is left inside a task. A caller that unwinds while
    a helper still runs a BLAS product can end the process with the helper inside it, and
    the interpreter's shutdown may then abort (a loaded test run once saw the command line
    end by SIGABRT instead of its exit status 130 for Ctrl-C; this is the race found that
    fits it)."""
    interrupted: BaseException | None = None
    while pending:
        try:
            k, outcome = done.get()
        except BaseException as exc:           # KeyboardInterrupt: wait for the helpers
            interrupted = interrupted or exc
            continue
        outcomes[k] = outcome
        pending -= 1
    if interrupted is not None:
        raise interrupted


def _outcome(task: Task) -> BaseException | None:
    """``task()``'s exception (re-raised by the caller's thread), or None."""
    try:
        task()
    except BaseException as exc:
        return exc
    return None


def _raise_first(outcomes: Sequence[BaseException | None]) -> None:
    for exc in outcomes:
        if exc is not None:
            raise exc


def _fresh_threads(tasks: Sequence[Task]) -> None:
    """``tasks`` as :func:`run_all` does, each but the first on a thread started for it."""
    outcomes: list[BaseException | None] = [None] * len(tasks)

    def run(k: int) -> None:
        outcomes[k] = _outcome(tasks[k])

    threads = [threading.Thread(target=run, args=(k,), name="gblas_gnn-helper-call")
               for k in range(1, len(tasks))]
    for t in threads:
        t.start()
    try:
        run(0)
    finally:
        for t in threads:
            t.join()
    _raise_first(outcomes)


_HELPERS = _Helpers()


def _forget_helpers() -> None:
    global _HELPERS
    _HELPERS = _Helpers()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helpers)


def run_all(tasks: Sequence[Task]) -> None:
    """Run ``tasks`` (callables of no arguments) at once: ``tasks[0]`` on the calling thread,
    each other on a helper thread of the process; return when all are done, raising the
    first exception in task order."""
    if len(tasks) == 1:
        tasks[0]()
    elif not _HELPERS.run(tasks):
        _fresh_threads(tasks)
