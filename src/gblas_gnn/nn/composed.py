"""Calling modules inside and outside a composition.

A module that defines only ``forward`` is *composed*: calling it runs the forward in a
:class:`~gblas_gnn.compose.tape.Scope` with ``H`` and its parameters as traced arrays
(:func:`trace`), and in training mode keeps the tape (a :class:`Recording`), from which
:meth:`gblas_gnn.nn.Module.backward` derives the gradients (:func:`derive`). A composed module
called inside another composition (with a traced input) is traced inline (:func:`call_inline`),
its parameters leaves of the outer tape. A module with a hand-written backward called with a
traced input runs as one node whose vector-Jacobian product is its own ``backward``
(:func:`call_opaque`).

These functions read and write only public members of the modules they are given
(``params``, ``grads``, ``forward``, ``backward``, ``training``, ``executor``, ``dtype``,
``container``, ``kept_outputs``): :class:`~gblas_gnn.nn.Module` validates its input and keeps
the recording itself (``tests/test_layering.py`` holds this file to it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..compose.tape import Holder, Node, Scope, Tape, current, frame, hand_out, scope
from ..compose.traced import Traced, record
from ..executors import Executor

if TYPE_CHECKING:
    from .module import Module

__all__ = ["INPUT", "NOT_REQUESTED", "Recording", "call_inline", "call_opaque", "derive",
           "run_forward", "trace"]

#: the key of the module input among the tape's leaves
INPUT = "input"

#: a backward's edge-feature gradient when the forward read features none of which require it
NOT_REQUESTED = "not requested"


@dataclass
class Recording:
    """What a training-mode forward of a composed module keeps: its tape, the output node,
    the modules whose parameters are leaves, the shapes of input and output, and the edge
    features the forward read (by id)."""

    tape: Tape
    output: Node | None
    modules: list
    in_shape: tuple | None
    out_shape: tuple
    features: dict


@contextmanager
def _traced_params(module: Module, s: Scope) -> Iterator[None]:
    """``module.params`` as traced leaves for the duration of a forward."""
    real = module.params
    traced = {}
    for name, value in real.items():
        leaf = s.tape.leaf((id(module), name)) if s.tape is not None else None
        traced[name] = Traced(value, leaf, False)
    s.modules.append(module)
    module.params = traced
    try:
        yield
    finally:
        module.params = real


def _output(out: Any, module: Module) -> Traced:
    if isinstance(out, Traced):
        return out
    raise TypeError(f"{type(module).__name__}.forward must return an array computed from its "
                    f"input and parameters with gg.ops (a traced array), got "
                    f"{type(out).__name__}")


def call_inline(module: Module, g: Any, H: Traced) -> Traced:
    """``module(g, H)`` for a composed module called with a traced input: its forward traced
    into the enclosing composition, its parameters leaves of that composition's tape."""
    s = current()
    if s is None:
        raise RuntimeError("a traced array outside its composed forward")
    with _traced_params(module, s):
        return _output(module.forward(g, H), module)


def trace(module: Module, g: Any, H: Any) -> tuple[Any, list, Recording | None]:
    """Run a composed module's forward on the prepared graph ``g`` and input ``H`` (None for a
    featureless forward) in a scope of its own.

    Returns
    -------
    out
        The output, as its caller gets it (:meth:`~gblas_gnn.compose.tape.Holder.released`).
    widths
        The widths of what the forward aggregated over the graph, in order.
    recording
        What :func:`derive` needs for the backward; None in evaluation mode.
    """
    tape = Tape() if module.training else None
    with scope(module.executor, tape) as s:
        Ht = None if H is None else \
            Traced(H, tape.leaf(INPUT) if tape is not None else None, True)
        with _traced_params(module, s):
            out = _output(module.forward(g, Ht), module)
    recording = None if tape is None else \
        Recording(tape, out.node, list(s.modules), None if H is None else tuple(H.shape),
                  tuple(out.shape), dict(s.features))
    return s.released(out.value), list(s.widths), recording


def run_forward(module: Module, g: Any, H: Any) -> Any:
    """``module.forward(g, H)`` for a module with its own backward, as its caller gets it:
    a container's children hand their outputs to it, and an output the module's cache keeps
    is copied only for a caller whose code may write into it
    (:func:`~gblas_gnn.compose.tape.hand_out`)."""
    holder = Holder(module.xp) if module.container else None
    with frame(holder):
        out = module.forward(g, H)
    kept = holder.held if holder is not None else module.kept_outputs()
    return hand_out(out, kept, module.xp)


def call_opaque(module: Module, g: Any, H: Traced) -> Traced:
    """A module with its own backward, called with a traced input inside a composition."""
    out = run_forward(module, g, H.value)
    s = current()
    if s is None or s.tape is None or not module.training:
        return Traced(out, None, True)
    xp = module.executor.xp

    def vjp(gout):
        return (module.backward(gout),)

    return record(out, [H], vjp, True, zero=lambda: xp.zeros_like(out))


def derive(recording: Recording, dout: Any, executor: Executor, dtype: np.dtype,
           dout_sums: Any = None) -> tuple[Any, Any]:
    r"""Replay ``recording`` backwards from the output cotangent ``dout`` (checked by the
    caller): fills the ``grads`` of every composed module traced in the forward.
    ``dout_sums``: :math:`\sum_i dout_i` when the caller has it (its check read them), for
    the operations that would sum ``dout`` itself over vertices (an output bias's gradient).

    Returns
    -------
    dH
        ``dL/dH`` (zeros when the output does not depend on ``H``); None for a featureless
        forward.
    edge_attr_grad
        The gradient of the edge features the forward read, as
        :attr:`gblas_gnn.nn.Module.edge_attr_grad` gives it (:data:`NOT_REQUESTED` when none
        of them requires it).
    """
    xp = executor.xp
    rec = recording
    leaves = rec.tape.backward(rec.output, dout, dout_sums) if rec.output is not None else {}
    for m in rec.modules:
        m.grads = {name: _grad(leaves.get((id(m), name)), value, xp)
                   for name, value in m.params.items()}
    edge_attr_grad = _feature_grad(rec.features, leaves, executor)
    if rec.in_shape is None:                     # a featureless forward: no input
        return None, edge_attr_grad
    dH = leaves.get(INPUT)
    return (xp.zeros(rec.in_shape, dtype) if dH is None else dH), edge_attr_grad


def _feature_grad(features: dict, leaves: dict, ex: Executor) -> Any:
    """The gradient of the edge features the forward read that require it, one row per edge
    as the graph was given them (through the self loops' fill rule for a graph with loops);
    None when it read none, :data:`NOT_REQUESTED` when none it read requires it. On a grid:
    this rank's block's edges, in its CSR order."""
    if not features:
        return None
    total = None
    for key, (feats, traced) in features.items():
        if traced.node is None:                  # read as data: no gradient was derived
            continue
        g = leaves.get(("edge_attr", key))
        # on a grid the pullback through the loops' fill is collective: every rank runs it
        g = (np.zeros((feats.nvals, feats.f), feats.dtype) if g is None
             else ex.to_numpy(g, "edge_attr gradient"))
        base, d = feats.pullback(g)
        total = d if total is None else total + d
        given = base
    if total is None:
        return NOT_REQUESTED
    return total[given.order] if given.order is not None else total


def _grad(g: Any, value: Any, xp: Any) -> Any:
    if g is None:
        return xp.zeros_like(value)
    return g.astype(value.dtype, copy=False)
