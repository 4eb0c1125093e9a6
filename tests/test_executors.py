"""The executor registry, the default executor, ``to_numpy`` and the counter-based hash."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from random_reference import uniform

import gblas_gnn as gg
from gblas_gnn import executors
from gblas_gnn.executors import _random


@pytest.fixture
def scratch_registry(monkeypatch):
    """Registrations made by a test are forgotten after it."""
    monkeypatch.setattr(executors, "_FACTORIES", dict(executors._FACTORIES))
    monkeypatch.setattr(executors, "_INSTANCES", dict(executors._INSTANCES))


def test_shipped_names_and_lookup():
    assert executors.names()[:4] == ["cpu", "primitives", "cuda", "dist"]
    cpu = executors.get_executor("cpu")
    assert isinstance(cpu, executors.CPUExecutor)
    assert executors.get_executor("cpu") is cpu               # one instance per name
    assert executors.get_executor(cpu) is cpu                  # an instance is itself
    assert isinstance(executors.get_executor("primitives"), executors.PrimitivesExecutor)
    with pytest.raises(ValueError, match="unknown executor 'tpu'.*cpu, primitives"):
        executors.get_executor("tpu")
    with pytest.raises(ValueError, match="unknown executor"):
        executors.get_executor(3)


def test_register_and_errors(scratch_registry):
    made = []

    def factory():
        made.append(executors.CPUExecutor())
        return made[-1]

    executors.register("mine", factory)
    assert "mine" in executors.names() and not made             # built on first use only
    assert executors.get_executor("mine") is made[0]
    assert executors.get_executor("mine") is made[0] and len(made) == 1
    with pytest.raises(ValueError, match="already registered"):
        executors.register("mine", factory)
    with pytest.raises(ValueError, match="non-empty"):
        executors.register("", factory)
    with pytest.raises(TypeError, match="callable"):
        executors.register("other", 42)


def test_default_executor_switch():
    before = executors.get_executor()
    with executors.default("primitives") as ex:
        assert isinstance(ex, executors.PrimitivesExecutor)
        assert executors.get_executor() is ex
        assert gg.nn.Linear(2, 3).executor is ex              # layers follow the default
    assert executors.get_executor() is before
    with pytest.raises(ValueError, match="unknown executor"):
        executors.set_default("nope")
    assert executors.get_executor() is before


def test_cuda_and_dist_are_imported_lazily():
    code = ("import sys, numpy as np, gblas_gnn as gg; gg.executors.get_executor('cpu'); "
            "gg.nn.GATConv(2, 2)(gg.Graph.from_edges([0], [1], 2), np.ones((2, 2), 'f4')); "
            "print(sorted(m for m in ('mpi4py', 'numba.cuda', 'gblas_gnn.gpu', "
            "'gblas_gnn.dist', 'cupy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=300)
    assert out.stdout.strip() == "[]"


def test_to_numpy():
    x = np.arange(3.0)
    assert gg.to_numpy(x) is x
    np.testing.assert_array_equal(gg.to_numpy([1, 2]), [1, 2])

    class Device:                         # the Numba device-array protocol
        def copy_to_host(self):
            return np.ones(2)

    np.testing.assert_array_equal(gg.to_numpy(Device()), np.ones(2))


@settings(max_examples=200, deadline=None)
@given(key=st.integers(0, 2**64 - 1), a=st.integers(0, 2**20), b=st.integers(0, 2**40),
       c=st.integers(0, 2**40))
def test_hash_matches_the_python_reference(key, a, b, c):
    got = _random.uniform(np, key, np.array([a]), np.array([b]), np.array([c]))
    assert got.dtype == np.float64 and 0.0 <= got[0] < 1.0
    assert got[0] == uniform(key, a, b, c)


def test_hash_is_uniform_enough():
    u = _random.uniform(np, 12345, 0, np.arange(200_000), 0)
    assert abs(u.mean() - 0.5) < 0.005 and abs((u < 0.3).mean() - 0.3) < 0.005
    assert len(np.unique(u)) == u.size


def test_draw_key_advances_the_generator():
    rng = np.random.default_rng(1)
    k1, k2 = _random.draw_key(rng), _random.draw_key(rng)
    assert k1 != k2 and 0 <= k1 < 2**64
    assert k1 == int(np.random.default_rng(1).integers(0, 2**64, dtype=np.uint64))


def test_the_two_products_of_a_matmul_backward():
    """``matmul_vjp`` gives ``(G Wᵀ, Xᵀ G)`` on every path of the cpu executor: the two
    products on two threads (large), one after the other (small, or more than one BLAS
    thread) and the default of the interface; an error in the second thread reaches the
    caller."""
    from gblas_gnn.executors import CPUExecutor
    from gblas_gnn.executors.base import Executor
    from gblas_gnn.executors.cpu import _chunked_gemm

    rng = np.random.default_rng(3)
    ex = CPUExecutor()
    for n in (5, 20_000):                          # below and above the threads' threshold
        G = rng.standard_normal((n, 24)).astype(np.float32)
        X = rng.standard_normal((n, 16)).astype(np.float32)
        W = rng.standard_normal((16, 24)).astype(np.float32)
        for got in (ex.matmul_vjp(G, W, X), Executor.matmul_vjp(ex, G, W, X)):
            np.testing.assert_allclose(got[0], G @ W.T, rtol=1e-5, atol=1e-4)
            np.testing.assert_allclose(got[1], X.T @ G, rtol=1e-5, atol=1e-2)
    assert n * (24 + 16) >= _chunked_gemm.PAIR_WORK > 5 * (24 + 16)
    two = CPUExecutor(blas_threads=2)
    np.testing.assert_allclose(two.matmul_vjp(G, W, X)[1], X.T @ G, rtol=1e-5, atol=1e-2)
    with pytest.raises(ValueError):               # Xᵀ G with mismatched rows, in the thread
        ex.matmul_vjp(G, W, X[:-1])
