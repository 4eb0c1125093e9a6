"""A chain of modules: the models of :mod:`gblas_gnn.nn.models` are built from it."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..graph import Graph, as_graph
from .module import Module

__all__ = ["Sequential"]


class Sequential(Module):
    r"""Apply modules one after the other; backward runs them in reverse.

    .. math:: Z = f_L(g, f_{L-1}(g, \dots f_1(g, H)))

    Every module receives the same graph. The container owns no parameters itself: they are
    exposed through :meth:`Module.named_parameters` / :meth:`Module.named_grads` with the
    child's index as prefix (``"1.W"`` is parameter ``W`` of the second module; nested
    containers give ``"2.0.W"``), which is the naming that optimisers and checkpoints use.

    Args:
        *modules: at least one :class:`Module`.

    Shapes:
        H (n, in) → the last module's output.
    """

    #: the children's outputs pass from one to the next untouched: the outputs a child's
    #: cache keeps are copied, if at all, where the container's output leaves it
    container = True

    def __init__(self, *modules: Module):
        if not modules:
            raise ValueError("Sequential needs at least one module")
        for i, m in enumerate(modules):
            if not isinstance(m, Module):
                raise TypeError(f"Sequential element {i} must be a gblas_gnn.nn.Module, "
                                f"got {type(m).__name__}")
        if len({id(m) for m in modules}) != len(modules):
            raise ValueError("the same module instance appears twice in Sequential "
                             "(its backward cache would be overwritten)")
        # the container's dtype is that of its first module with parameters (activations and
        # dropout accept either float dtype), else of its first module
        typed = next((m for m in modules if any(True for _ in m.named_parameters())),
                     modules[0])
        super().__init__(typed.dtype, typed.executor)
        for m in modules:           # activations and dropout compute on the model's executor
            if not m.children() and not any(True for _ in m.named_parameters()):
                m.executor = typed.executor
        self._modules = list(modules)
        self.training = all(m.training for m in modules)

    def children(self) -> list[Module]:
        return list(self._modules)

    def __len__(self) -> int:
        return len(self._modules)

    def __getitem__(self, i: int) -> Module:
        return self._modules[i]

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules)

    def forward(self, g, H: np.ndarray) -> np.ndarray:
        if g is not None and not isinstance(g, Graph):
            # Resolve a scipy / graphblas input once, so that every layer shares one Graph
            # (and its cached self-looped / normalised forms) instead of converting again.
            g = as_graph(g, dtype=self.dtype)
        out = H
        for m in self._modules:
            out = m(g, out)
        return out

    def backward(self, dout: np.ndarray) -> np.ndarray:
        for m in reversed(self._modules):
            dout = m.backward(dout)
        return dout

    def __repr__(self) -> str:
        lines = [f"  ({i}): {m!r}" for i, m in enumerate(self._modules)]
        return "Sequential(\n" + "\n".join(lines) + "\n)"
