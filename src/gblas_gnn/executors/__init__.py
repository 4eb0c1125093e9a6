"""Executors: one interface (:class:`Executor`), one implementation per machine kind, found by
name in a registry.

================  =====================================================  ==================
name              what                                                   where
================  =====================================================  ==================
``cpu``           python-graphblas + numba on one process (the default)  ``.cpu``
``primitives``    cpu tiers (a), (b) and the base defaults (reference)   ``.primitives``
``cuda``          Numba CUDA kernels on one GPU                           ``gblas_gnn.gpu``
``dist``          a √p×√p MPI grid over ``COMM_WORLD``                    ``gblas_gnn.dist``
================  =====================================================  ==================

``get_executor(name)`` builds an executor once per name (each imports its package on first
use); ``register(name, factory)`` adds one. Every layer, model, trainer and
``gg.ops`` function takes ``executor=`` as a name, an instance or ``None``: the default
executor, ``cpu`` unless :func:`set_default` (or the :func:`default` context) names another —
``python -m pytest --executor NAME`` runs the test suite that way.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from ..semirings.core import install_executor_resolver
from .base import AGGREGATIONS, AggregateContext, Executor

__all__ = ["AGGREGATIONS", "AggregateContext", "Executor", "default", "get_executor", "names",
           "register", "set_default", "to_numpy"]

#: executor classes also reachable here (``executors.CPUExecutor``), imported on first use like
#: their executors: the registry itself loads no implementation
_LAZY_CLASSES = {"CPUExecutor": "gblas_gnn.executors.cpu",
                 "PrimitivesExecutor": "gblas_gnn.executors.primitives"}

_FACTORIES: dict[str, Callable[[], Executor]] = {}
_INSTANCES: dict[str, Executor] = {}
_DEFAULT = ["cpu"]


def register(name: str, factory: Callable[[], Executor]) -> None:
    """Make ``factory()`` (called once, on first use) the executor named ``name``.

    Raises ``ValueError`` for an empty or already registered name and ``TypeError`` for a
    factory that is not callable.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"an executor name must be a non-empty string, got {name!r}")
    if name in _FACTORIES:
        raise ValueError(f"an executor named {name!r} is already registered")
    if not callable(factory):
        raise TypeError(f"factory must be callable, got {type(factory).__name__}")
    _FACTORIES[name] = factory


def _lazy(module: str, attr: str) -> Callable[[], Executor]:
    def factory() -> Executor:
        return getattr(importlib.import_module(module), attr)()
    return factory


def names() -> list[str]:
    """Names of the registered executors."""
    return list(_FACTORIES)


def set_default(executor: Executor | str) -> None:
    """Make ``executor`` (a registered name or an instance) what ``executor=None`` means."""
    if not isinstance(executor, Executor):
        get_executor(executor)              # a clear error for an unknown name, now
    _DEFAULT[0] = executor


@contextmanager
def default(executor: Executor | str) -> Iterator[Executor]:
    """``with default("primitives"): ...`` — :func:`set_default` for the block only."""
    before = _DEFAULT[0]
    set_default(executor)
    try:
        yield get_executor(None)
    finally:
        _DEFAULT[0] = before


def get_executor(executor: Executor | str | None = None) -> Executor:
    """Resolve ``None`` (the default, ``"cpu"`` unless :func:`set_default` changed it), a
    registered name or an :class:`Executor` instance."""
    if executor is None:
        executor = _DEFAULT[0]
    if isinstance(executor, Executor):
        return executor
    name = executor
    if not isinstance(name, str) or name not in _FACTORIES:
        raise ValueError(f"unknown executor {executor!r}; available: {', '.join(names())}")
    if name not in _INSTANCES:
        _INSTANCES[name] = _FACTORIES[name]()
    return _INSTANCES[name]


def to_numpy(x) -> np.ndarray:
    """A host ``numpy.ndarray`` from any executor's dense result (a CuPy or Numba device
    array is copied to the host; a numpy array is returned as it is)."""
    if hasattr(x, "get") and (hasattr(x, "__cuda_array_interface__")     # CuPy, and the
                              or isinstance(x, np.ndarray)):            # CUDA simulator's
        return x.get()
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "copy_to_host"):                                      # Numba device array
        return x.copy_to_host()
    return np.asarray(x)


def __getattr__(name: str):
    module = _LAZY_CLASSES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


register("cpu", _lazy("gblas_gnn.executors.cpu", "CPUExecutor"))
register("primitives", _lazy("gblas_gnn.executors.primitives", "PrimitivesExecutor"))
register("cuda", _lazy("gblas_gnn.gpu", "default_executor"))
register("dist", _lazy("gblas_gnn.dist", "default_executor"))
install_executor_resolver(get_executor)
