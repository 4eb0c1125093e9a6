"""Executors: one interface (:class:`Executor`), one implementation per machine kind."""

from .base import AggregateContext, Executor
from .cpu import CPUExecutor

__all__ = ["AggregateContext", "Executor", "CPUExecutor", "get_executor"]

_DEFAULT = CPUExecutor()


def get_executor(executor: "Executor | str | None" = None) -> Executor:
    """Resolve ``None`` / ``"cpu"`` / an :class:`Executor` instance to an executor."""
    if executor is None or executor == "cpu":
        return _DEFAULT
    if isinstance(executor, Executor):
        return executor
    raise ValueError(f"unknown executor {executor!r}; available: 'cpu'")
