"""The generated kernels' threads: shares of equal cost, every item once, the same bits for
any thread count, errors raised in the caller."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gblas_gnn as gg
from gblas_gnn.codegen.kernel_cache import LockedKernel
from gblas_gnn.executors.cpu import _program_kernels, _shares
from gblas_gnn.executors.cpu._shares import ThreadedKernel, shares

pytestmark = pytest.mark.cpu_only
TWO_THREADS = pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2,
                                 reason="numba runs one thread here")


def _cost(ptr, t, b):
    r = min(t * b, ptr.shape[0] - 1)
    return int(ptr[r]) + r


@settings(max_examples=200, deadline=None)
@given(degrees=st.lists(st.integers(0, 50), max_size=200), block=st.sampled_from([1, 3, 64]),
       parts=st.integers(1, 6))
def test_shares_cover_the_items_in_order_at_about_equal_cost(degrees, block, parts):
    ptr = np.r_[0, np.cumsum(degrees, dtype=np.int64)]
    items = -(-len(degrees) // block)
    s = shares(ptr, items, block, parts)
    assert s.dtype == np.int64 and len(s) == parts + 1 and s[0] == 0 and s[-1] == items
    assert all(a <= b for a, b in zip(s, s[1:], strict=False))
    total = _cost(ptr, items, block)
    heaviest = max((_cost(ptr, t + 1, block) - _cost(ptr, t, block) for t in range(items)),
                   default=0)
    for a, b in zip(s, s[1:], strict=False):      # within one item of the equal share
        assert _cost(ptr, b, block) - _cost(ptr, a, block) <= total / parts + heaviest


def test_a_power_law_graphs_dense_rows_are_not_one_threads_share():
    degrees = np.r_[np.full(10, 1000), np.ones(990, np.int64)]
    ptr = np.r_[0, np.cumsum(degrees)]
    s = shares(ptr, 1000, 1, 2)
    assert s[1] < 10            # the first share ends inside the dense rows (half the edges)


class _Recording:
    """A stand-in for a compiled kernel or driver: records the arguments of each call (as a
    driver, runs every share and fails none), and is at address 1234."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)

    def call_keyed(self, key, *args):
        self.calls.append(args)
        return True

    def address(self, key, *args):
        return 1234


@pytest.fixture
def two_threads():
    """numba's threads at two for the test (whatever an earlier test left), then back."""
    before = numba.get_num_threads()
    numba.set_num_threads(2)
    yield
    numba.set_num_threads(before)


@TWO_THREADS
@pytest.mark.parametrize("columns", [False, True])
def test_the_driver_gets_one_share_per_thread_and_the_kernel_all_items(columns, two_threads):
    ptr = np.arange(0, 2 * 101, 2)            # 100 rows (or columns) of two edges
    args = (np.zeros(1), None, ptr) if columns else (ptr, None, np.zeros(1))
    kernel, driver = _Recording(), _Recording()
    ThreadedKernel(kernel, columns, 1, True, driver)(*args)
    assert not kernel.calls and len(driver.calls) == 1
    address, bounds, failed, rest = driver.calls[0]
    assert address == 1234 and bounds.tolist() == [0, 50, 100] and rest == args
    assert failed.shape == (2,)
    ThreadedKernel(kernel, columns, 1, False, driver)(*args)   # below the size: one thread
    assert kernel.calls == [(*args, 0, 100)] and len(driver.calls) == 1


def test_blocks_of_rows_are_the_items():
    ptr = np.arange(131)                      # 130 rows of one edge: 3 blocks of 64
    kernel, driver = _Recording(), _Recording()
    ThreadedKernel(kernel, False, 64, False, driver)(ptr, None, ptr)
    assert kernel.calls[0][-2:] == (0, 3)


@TWO_THREADS
@pytest.mark.parametrize("layer_name", ["gatv2", "gine"])
def test_threaded_kernels_give_the_same_bits_as_one_thread(monkeypatch, layer_name):
    """GATv2 with edge features (a forward and a row pass whose items are blocks of rows,
    a column pass over columns; the features get a cotangent) and GINE (its backward one
    pass whose items are blocks of columns, each with its partials of the parameters)
    forward and every gradient on a power-law graph: on one thread and on two, the same
    bits. (Rows as items are the same shares with ``rows_per_item`` 1; the drivers' results
    without edge features are checked against the reference in ``test_compose_kernels``.)"""
    edge_dim = 3
    rng = np.random.default_rng(5)
    n = 300
    pairs = np.unique(np.c_[np.minimum(rng.zipf(1.6, 3000) - 1, n - 1),
                            rng.integers(0, n, 3000)], axis=0)
    attr = rng.standard_normal((len(pairs), edge_dim))
    x = rng.standard_normal((n, 8)).astype(np.float32)
    dout = rng.standard_normal((n, 2 * 4)).astype(np.float32)

    monkeypatch.setattr(_program_kernels, "SERIAL_WORK_BELOW", 0)      # as a large graph
    split = []
    monkeypatch.setattr(_shares, "shares", lambda *a: split.append(a[3]) or shares(*a))

    def run(threads):
        numba.set_num_threads(threads)
        g = gg.Graph.from_edges(pairs[:, 0], pairs[:, 1], n, edge_attr=attr,
                                dtype=np.float32)
        g.edge_attr.requires_grad_()
        layer = gg.nn.GATv2Conv(8, 4, heads=2, edge_dim=edge_dim, seed=1, executor="cpu") \
            if layer_name == "gatv2" else \
            gg.nn.GINEConv([8, 8, 8], edge_dim=edge_dim, train_eps=True, seed=1, executor="cpu")
        out = layer(g, x)
        dx = layer.backward(dout)
        return [out, dx, layer.edge_attr_grad, *(v for _, v in sorted(layer.grads.items()))]

    before = numba.get_num_threads()
    try:
        one, two = run(1), run(2)
    finally:
        numba.set_num_threads(before)
    assert split and set(split) == {2}          # two threads ran shares, one ran none
    for i, (a, b) in enumerate(zip(one, two, strict=True)):
        np.testing.assert_array_equal(a, b, err_msg=str(i))


@numba.njit(_nrt=False)
def _reciprocals(indptr, out, x, r0, r1):
    for i in range(r0, r1):
        out[i] = 1.0 / x[i]


@TWO_THREADS
def test_the_driver_runs_the_compiled_kernel_and_its_errors_reach_the_caller(two_threads):
    """The one driver calls a real compiled kernel by its address: each share's items are
    written, the same as on one thread; a share whose call raises (a division by zero under
    numba's Python error model) makes the caller raise the kernel's own error."""
    kernel = LockedKernel(_reciprocals, Path(tempfile.mkdtemp()) / "reciprocals.lock")
    x = np.arange(1.0, 101.0)
    ptr = np.arange(101, dtype=np.uint64)               # 100 rows of one edge
    one, two = np.zeros(100), np.zeros(100)
    ThreadedKernel(kernel, False, 1, False)(ptr, one, x)
    ThreadedKernel(kernel, False, 1, True)(ptr, two, x)
    np.testing.assert_array_equal(two, 1.0 / x)
    np.testing.assert_array_equal(one, two)
    x[70] = 0.0                                         # in the second thread's share
    with pytest.raises(ZeroDivisionError):
        ThreadedKernel(kernel, False, 1, True)(ptr, two, x)



def test_the_words_of_arguments_are_numbas_flattened_arrays_and_integers():
    """An array's words: null meminfo and parent, its size, item size, data address, shape
    and strides (in bytes); an integer: itself (two's complement); ``None``: one word.
    A too short buffer gets nothing and minus the count."""
    from gblas_gnn.executors.cpu._share_driver import pack_words

    a = np.zeros((3, 5), np.float32)[:, 1:]                 # rows 20 bytes apart
    b = np.arange(4, dtype=np.uint32)
    words = np.full(32, 7, np.uint64)
    count = pack_words((a, -2, b, None), words)
    expected = [0, 0, 12, 4, a.ctypes.data, 3, 4, 20, 4,
                (-2) % 2**64,
                0, 0, 4, 4, b.ctypes.data, 4, 4]
    assert count == len(expected) + 1
    np.testing.assert_array_equal(words[:len(expected)], np.array(expected, np.uint64))
    short = np.full(5, 7, np.uint64)
    assert pack_words((a, -2, b, None), short) == -count
    assert (short == 7).all()


@numba.njit(_nrt=False)
def _scaled(indptr, out, x, scale, r0, r1):
    for i in range(r0, r1):
        out[i] = scale * x[i]


@numba.njit(_nrt=False)
def _sum_of_columns(indptr, out, blocks, r0, r1):
    for i in range(r0, r1):
        acc = 0.0
        for b in blocks:
            acc += b[i, 0, 0]
        out[i] = acc


@TWO_THREADS
def test_arguments_that_are_not_words_run_on_one_thread(two_threads):
    """A float scalar travels in another register file than the driver's words: such a
    kernel runs correctly, on the calling thread, and the driver says it did not run it."""
    from gblas_gnn.executors.cpu import _share_driver

    kernel = LockedKernel(_scaled, Path(tempfile.mkdtemp()) / "scaled.lock")
    ptr = np.arange(101, dtype=np.uint64)
    x, out = np.arange(100.0), np.zeros(100)
    ran = []

    class Recorded(_share_driver.ShareDriver):
        def call_keyed(self, *args):
            ran.append(super().call_keyed(*args))
            return ran[-1]

    driver = Recorded()
    ThreadedKernel(kernel, False, 1, True, driver)(ptr, out, x, 2.5)
    np.testing.assert_array_equal(out, 2.5 * x)
    assert ran == [False]
    assert not _share_driver.word_arguments((x, 2.5)) and _share_driver.word_arguments((x, 3))


@TWO_THREADS
def test_a_kernel_of_many_words_runs_through_the_wide_driver(two_threads):
    """A kernel whose arguments are more words than the driver's call takes (a tuple of 24
    3-D arrays: 24 × 11 words) runs through the wide driver on two threads, every share's
    items written."""
    from gblas_gnn.executors.cpu import _share_driver

    kernel = LockedKernel(_sum_of_columns, Path(tempfile.mkdtemp()) / "columns.lock")
    rng = np.random.default_rng(3)
    blocks = tuple(rng.standard_normal((100, 1, 1)) for _ in range(24))
    ptr = np.arange(101, dtype=np.uint64)
    out = np.zeros(100)
    driver = _share_driver.ShareDriver()
    ThreadedKernel(kernel, False, 1, True, driver)(ptr, out, blocks)
    assert _share_driver.run_wide_shares.signatures       # the wide driver ran it
    np.testing.assert_allclose(out, sum(b[:, 0, 0] for b in blocks))


@TWO_THREADS
def test_random_masks_on_the_threads_equal_the_masks_on_one(two_threads, monkeypatch):
    """The edge and feature masks of a graph above the one-thread size run in shares on the
    threads: the same bits as on the calling thread."""
    g = gg.data.erdos_renyi(400, 0.05, seed=2, dtype=np.float32)
    ex = gg.executors.get_executor("cpu")
    ran = []
    real = _shares._on_shares
    monkeypatch.setattr(_shares, "_on_shares", lambda *a: ran.append(a[2]) or real(*a))
    ids = np.random.default_rng(1).permutation(1000)[:400]
    one = (ex.dropout_edges(g.A, 7, 0.3, 2, np.float32), ex.keep_mask(7, 0.3, (400, 5), ids))
    with _program_kernels.sized_like(1e9):
        two = (ex.dropout_edges(g.A, 7, 0.3, 2, np.float32),
               ex.keep_mask(7, 0.3, (400, 5), ids))
    assert len(ran) == 2 and all(len(bounds) == 3 for bounds in ran)    # two shares each
    for a, b in zip(one, two, strict=True):
        np.testing.assert_array_equal(a, b)
    assert 0.5 < one[1].mean() < 0.9
