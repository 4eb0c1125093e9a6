"""Calling modules inside and outside a composition.

A module that defines only ``forward`` is *composed*: calling it runs the forward in a
:class:`~.tape.Scope` with ``H`` and its parameters as traced arrays, and in training mode
keeps the tape, from which :meth:`gblas_gnn.nn.Module.backward` derives the gradients. A
composed module called inside another composition (with a traced input) is traced inline, its
parameters leaves of the outer tape. A module with a hand-written backward called with a traced
input runs as one node whose vector-Jacobian product is its own ``backward``.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from .tape import Holder, Node, Tape, current, frame, hand_out, scope
from .traced import Traced, record

__all__ = ["INPUT", "NOT_REQUESTED", "Recording", "call_composed", "call_opaque",
           "derived_backward", "run_forward"]

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
def _traced_params(module, s):
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


def _output(out, module) -> Traced:
    if isinstance(out, Traced):
        return out
    raise TypeError(f"{type(module).__name__}.forward must return an array computed from its "
                    f"input and parameters with gg.ops (a traced array), got "
                    f"{type(out).__name__}")


def call_composed(module, g, H):
    """``module(g, H)`` for a composed module."""
    s = current()
    if isinstance(H, Traced):
        if s is None:
            raise RuntimeError("a traced array outside its composed forward")
        with _traced_params(module, s):
            return _output(module.forward(g, H), module)
    if H is None and getattr(module, "featureless", False):
        g = module._prepare_graph(g)
    else:
        g, H = module._prepare(g, H, getattr(module, "in_dim", None))
    _check_params(module)
    tape = Tape() if module.training else None
    with scope(module.executor, tape) as s:
        Ht = None if H is None else \
            Traced(H, tape.leaf(INPUT) if tape is not None else None, True)
        with _traced_params(module, s):
            out = _output(module.forward(g, Ht), module)
    module.graph_widths = list(s.widths)
    if tape is None:
        module._cache = None
    else:
        module._cache = Recording(tape, out.node, list(s.modules),
                                  None if H is None else tuple(H.shape), tuple(out.shape),
                                  dict(s.features))
    return s.released(out.value)


def _check_params(module) -> None:
    """A parameter keeps the shape and dtype it was declared with and stays finite
    (optimisers and users write in place): a clear error before the forward, not a wrong
    gradient after it."""
    ex = module.executor
    xp = ex.xp
    with ex.validation():
        for name, value in module.params.items():
            shape = module._declared.get(name)
            if not isinstance(value, xp.ndarray) or (shape is not None and
                                                     tuple(value.shape) != shape) \
                    or value.dtype != module.dtype:
                got = (tuple(value.shape), value.dtype) if isinstance(value, xp.ndarray) \
                    else type(value).__name__
                raise ValueError(f"parameter {name!r} must be an array of shape {shape} and "
                                 f"dtype {module.dtype}, got {got}")
        # one reduction and one counted read (a device sync on a GPU)
        if not ex.all_finite(*module.params.values()):
            bad = [n for n, v in module.params.items() if not ex.all_finite(v)]
            raise ValueError(f"parameter {bad[0]!r} contains NaN or Inf")


def run_forward(module, g: Any, H: Any) -> Any:
    """``module.forward(g, H)`` for a module with its own backward, as its caller gets it:
    a container's children hand their outputs to it, and an output the module's cache keeps
    is copied only for a caller whose code may write into it (:func:`.tape.hand_out`)."""
    holder = Holder(module.xp) if module.container else None
    with frame(holder):
        out = module.forward(g, H)
    kept = holder.held if holder is not None else module.kept_outputs()
    return hand_out(out, kept, module.xp)


def call_opaque(module, g, H: Traced):
    """A module with its own backward, called with a traced input inside a composition."""
    out = run_forward(module, g, H.value)
    s = current()
    if s is None or s.tape is None or not module.training:
        return Traced(out, None, True)
    xp = module.executor.xp

    def vjp(gout):
        return (module.backward(gout),)

    return record(out, [H], vjp, True, zero=lambda: xp.zeros_like(out))


def derived_backward(module, dout) -> Any:
    """The backward of a composed module: ``dL/dH`` for ``dout``; fills the ``grads`` of the
    module and of every composed module traced inside its forward."""
    rec = module._cache
    if not isinstance(rec, Recording):
        raise RuntimeError("backward needs a forward in training mode first (module.train() "
                           "and call it on the input); each forward allows one backward")
    dout = _check_dout(module, dout, rec.out_shape)
    module._cache = None
    xp = module.executor.xp
    leaves = rec.tape.backward(rec.output, dout) if rec.output is not None else {}
    for m in rec.modules:
        m.grads = {name: _grad(leaves.get((id(m), name)), value, xp)
                   for name, value in m.params.items()}
    module._edge_attr_grad = _feature_grad(rec.features, leaves, module.executor)
    if rec.in_shape is None:                     # a featureless forward: no input
        return None
    dH = leaves.get(INPUT)
    return xp.zeros(rec.in_shape, module.dtype) if dH is None else dH


def _feature_grad(features: dict, leaves: dict, ex):
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
        g = np.zeros_like(feats.values) if g is None else ex.to_numpy(g, "edge_attr gradient")
        base, d = feats.pullback(g)
        total = d if total is None else total + d
        given = base
    if total is None:
        return NOT_REQUESTED
    return total[given.order] if given.order is not None else total


def _grad(g, value, xp):
    if g is None:
        return xp.zeros_like(value)
    return g.astype(value.dtype, copy=False)


def _check_dout(module, dout, shape: tuple):
    """``dout`` as an array of the executor with the output's shape and dtype (finite)."""
    if len(shape) == 2:
        return module._dense(dout, "dout", rows=shape[0], cols=shape[1], dtype=module.dtype)
    ex = module.executor
    with ex.validation():
        dout = ex.asarray(dout)
        if tuple(dout.shape) != tuple(shape):
            raise ValueError(f"dout must have shape {tuple(shape)}, got {tuple(dout.shape)}")
        if dout.dtype != module.dtype:
            raise TypeError(f"dout has dtype {dout.dtype} but {module.dtype} is required")
        if not ex.all_finite(dout):
            raise ValueError("dout contains NaN or Inf")
    return dout
