"""A table of registered objects by name: the primitives' and the sinks' (one way to add one,
one error for a taken or an unknown name)."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(dict, Generic[T]):
    """``{name: object}`` of one kind (``what``: ``"operation"``, ``"sink"``)."""

    def __init__(self, what: str):
        super().__init__()
        self.what = what

    def add(self, obj: T) -> T:
        """Register ``obj`` under its ``name`` (``ValueError`` when the name is taken)."""
        name = getattr(obj, "name", "")
        if not name or name in self:
            raise ValueError(f"a {self.what} needs a new name, got {name!r}")
        self[name] = obj
        return obj

    def find(self, name: str, shown: Any = None) -> T:
        """The object registered as ``name`` (``ValueError`` naming ``shown``, default the
        name, for an unknown one)."""
        found = self.get(name)
        if found is None:
            raise ValueError(f"unknown {self.what} {(name if shown is None else shown)!r}")
        return found
