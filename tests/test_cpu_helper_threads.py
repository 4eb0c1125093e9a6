"""The cpu executor's helper threads: reused between calls, every task run once, errors in
task order raised in the caller, a second caller served, a forked child given its own."""

from __future__ import annotations

import multiprocessing
import signal
import threading
import time

import numpy as np
import pytest

from gblas_gnn.executors.cpu import _helper_threads
from gblas_gnn.executors.cpu._helper_threads import run_all

pytestmark = pytest.mark.cpu_only


def _record(where: list):
    return lambda: where.append(threading.get_ident())


def test_tasks_run_once_each_the_first_on_the_caller_and_the_helpers_are_reused():
    seen: list[list[int]] = [[] for _ in range(3)]
    run_all([_record(s) for s in seen])
    first = [s[0] for s in seen]
    run_all([_record(s) for s in seen])
    assert all(len(s) == 2 for s in seen)
    assert seen[0] == [threading.get_ident()] * 2
    assert len(set(first)) == 3 and [s[1] for s in seen] == first      # the same helpers
    before = threading.active_count()
    for _ in range(20):
        run_all([_record([]) for _ in range(3)])
    assert threading.active_count() == before


def test_the_first_failure_in_task_order_is_raised_and_the_helpers_go_on():
    def fail(message):
        def task():
            raise ValueError(message)
        return task

    with pytest.raises(ValueError, match="helper 1"):
        run_all([lambda: None, fail("helper 1"), fail("helper 2")])
    with pytest.raises(ValueError, match="caller"):
        run_all([fail("caller"), fail("helper 1")])
    done = []
    run_all([_record(done), _record(done)])
    assert len(done) == 2


def test_ctrl_c_while_a_helper_works_is_raised_once_the_helper_is_done():
    """SIGINT reaching the caller while it waits for a helper: ``KeyboardInterrupt`` comes
    after the helper's task has ended (a caller unwinding with a helper inside a BLAS call
    could leave the process to abort at exit), and the helpers serve the next call."""
    caller = threading.get_ident()
    finished = []

    def helper():
        time.sleep(0.2)                                  # the caller is waiting by now
        signal.pthread_kill(caller, signal.SIGINT)
        time.sleep(0.3)
        finished.append(time.monotonic())

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_all([lambda: None, helper])
        raised = time.monotonic()
    finally:
        signal.signal(signal.SIGINT, before)
    assert finished and finished[0] <= raised
    done = []
    run_all([_record(done), _record(done)])
    assert len(done) == 2


def test_a_second_caller_at_once_gets_threads_of_its_own():
    """While one caller's tasks hold the helpers, another caller's tasks still run (on
    threads started for that call), and both finish."""
    release, started = threading.Event(), threading.Event()
    done = []

    def holding():
        started.set()
        release.wait(10)
        done.append("held")

    first = threading.Thread(target=lambda: run_all([lambda: None, holding]))
    first.start()
    assert started.wait(10)
    run_all([lambda: done.append("caller"), lambda: done.append("second")])
    release.set()
    first.join(10)
    assert sorted(done) == ["caller", "held", "second"]


def _child_sums(out):
    parts = [0, 0]

    def part(k):
        def task():
            parts[k] = int(np.arange(k * 50, (k + 1) * 50).sum())
        return task

    run_all([part(0), part(1)])
    out.put(sum(parts))


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                    reason="no fork here")
def test_a_forked_child_makes_helpers_of_its_own():
    run_all([lambda: None, lambda: None])                  # the parent's helper exists
    assert _helper_threads._HELPERS.helpers
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_child_sums, args=(out,))
    child.start()
    assert out.get(timeout=60) == sum(range(100))
    child.join(60)
    assert child.exitcode == 0


@pytest.mark.parametrize("threads", [1, 2])
def test_the_finite_check_of_a_large_array_in_parts(threads):
    """Above the split size the check sums one part per thread: a NaN or an infinity in
    any part is found, finite values whose part sums overflow are still finite."""
    import numba

    import gblas_gnn as gg

    ex = gg.executors.get_executor("cpu")
    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        a = np.ones((40_000, 8), np.float32)
        assert ex.all_finite(a)
        for where, bad in [((3, 1), np.nan), ((39_000, 7), np.inf), ((20_000, 0), -np.inf)]:
            b = a.copy()
            b[where] = bad
            assert not ex.all_finite(b)
        big = np.full((40_000, 8), 3e38, np.float32)       # every part's sum overflows
        assert ex.all_finite(big) and ex.all_finite(-big)
        assert ex.all_finite(np.asfortranarray(a)) and not ex.all_finite(
            np.asfortranarray(np.where(a > 0, np.nan, a)))
    finally:
        numba.set_num_threads(before)
