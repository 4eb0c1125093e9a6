r"""The functional form: differentiate a function of arrays without writing a Module.

.. code-block:: python

    from gblas_gnn import compose, ops
    from gblas_gnn.ops import rep, leaky_relu

    def gat(A, X, a_dst, a_src):
        E = A * leaky_relu(rep(X @ a_dst) + rep(X @ a_src).T, 0.2)
        return ops.aggregate(ops.softmax(E), X)

    Z, pullback = compose.vjp(gat, g.A, X, a_dst, a_src)
    _, dX, da_dst, da_src = pullback(dZ)            # None for the adjacency

    loss, grads = compose.value_and_grad(lambda X, w: (ops.relu(X @ w) ** 2).sum())(X, w)

Every array argument (an array of the executor's array module, or a dict, list or tuple of
them) is traced; anything else (a graph, an edge tensor, a number) is passed through as it is
and gets ``None`` as its gradient. The first traced argument with as many rows as the others
is vertex-indexed when its rows are the graph's vertices: arrays passed in ``vertex`` (by
position, default: every 2-D array argument with more than one row) are treated as
vertex-indexed, the rest as parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..executors import get_executor
from .tape import Tape, scope
from .traced import Traced

__all__ = ["vjp", "value_and_grad", "evaluate"]


def _is_array(x, xp) -> bool:
    return isinstance(x, (np.ndarray, xp.ndarray))


def _trace(x, tape: Tape, ex, path: tuple, vertex: bool):
    """``x`` with every array replaced by a traced leaf keyed by its path."""
    if _is_array(x, ex.xp):
        value = ex.asarray(x)
        return Traced(value, tape.leaf(path) if tape is not None else None,
                      vertex and value.ndim >= 1)
    if isinstance(x, dict):
        return {k: _trace(v, tape, ex, (*path, k), vertex) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_trace(v, tape, ex, (*path, k), vertex) for k, v in enumerate(x))
    return x


def _gather(x, leaves: dict, ex, path: tuple):
    """The gradients in the structure of ``x`` (zeros for an array nothing reached)."""
    if _is_array(x, ex.xp):
        g = leaves.get(path)
        return ex.xp.zeros(x.shape, x.dtype) if g is None else g
    if isinstance(x, dict):
        return {k: _gather(v, leaves, ex, (*path, k)) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_gather(v, leaves, ex, (*path, k)) for k, v in enumerate(x))
    return None


def _vertex_positions(args: Sequence[Any], vertex) -> set[int]:
    if vertex is not None:
        return set(vertex)
    return {k for k, a in enumerate(args)
            if hasattr(a, "ndim") and a.ndim == 2 and a.shape[0] > 1}


def vjp(fn: Callable, *args, executor=None, vertex: Sequence[int] | None = None):
    r"""``(out, pullback)``: ``out = fn(*args)`` and ``pullback(dout)``, the gradients
    :math:`\bar{a}_k = (\partial\, \mathrm{out} / \partial a_k)^\top \bar{\mathrm{out}}`
    of every argument (same structure; None for arguments that are not arrays).

    Parameters
    ----------
    fn : callable
        A function of arrays written with ``gg.ops``, traced arrays and virtual tensors; it
        returns one array.
    *args
        Its arguments.
    executor : executor or name, optional
        Where it runs (default: the default executor).
    vertex : sequence of int, optional
        Positions of the arguments whose axis 0 runs over vertices (default: every 2-D array
        with more than one row). On an MPI grid this decides which reductions are
        collectives.
    """
    ex = get_executor(executor)
    tape = Tape()
    positions = _vertex_positions(args, vertex)
    with scope(ex, tape) as s:
        traced = [_trace(a, tape, ex, (k,), k in positions) for k, a in enumerate(args)]
        out = fn(*traced)
    if not isinstance(out, Traced):
        raise TypeError(f"fn must return an array computed from its arguments, got "
                        f"{type(out).__name__}")
    used = [False]
    # the pullback keeps the output's node, shape and dtype, not its value (the caller holds
    # that as long as it wants)
    node, shape, dtype = out.node, tuple(out.shape), out.dtype

    def pullback(dout):
        if used[0]:
            raise RuntimeError("pullback runs once per vjp: call vjp again for another")
        used[0] = True
        dout = ex.asarray(dout)
        if tuple(dout.shape) != shape:
            raise ValueError(f"dout must have shape {shape}, got {tuple(dout.shape)}")
        leaves = tape.backward(node, dout.astype(dtype, copy=False)) if node is not None \
            else {}
        return tuple(_gather(a, leaves, ex, (k,)) for k, a in enumerate(args))

    return s.released(out.value), pullback


def evaluate(fn: Callable, *args, executor=None, vertex: Sequence[int] | None = None):
    """``fn(*args)`` as a composed forward in evaluation mode: lazy sparse expressions,
    vertex-aware reductions, nothing recorded (the value :func:`vjp` returns, without the
    tape)."""
    ex = get_executor(executor)
    positions = _vertex_positions(args, vertex)
    with scope(ex, None):
        traced = [_trace(a, None, ex, (k,), k in positions) for k, a in enumerate(args)]
        out = fn(*traced)
    if not isinstance(out, Traced):
        raise TypeError(f"fn must return an array computed from its arguments, got "
                        f"{type(out).__name__}")
    return out.value


def value_and_grad(fn: Callable, argnums: int | Sequence[int] = 0, executor=None,
                   vertex: Sequence[int] | None = None) -> Callable:
    """A function returning ``(fn(*args), gradients)`` for a scalar-valued ``fn``: the
    gradient of the argument ``argnums`` (a tuple of them for a sequence)."""
    def wrapped(*args):
        out, pullback = vjp(fn, *args, executor=executor, vertex=vertex)
        if np.size(out) != 1:
            raise ValueError(f"value_and_grad needs a scalar-valued function, got shape "
                             f"{np.shape(out)}; use vjp for array outputs")
        grads = pullback(get_executor(executor).xp.ones_like(out))
        if isinstance(argnums, int):
            return out, grads[argnums]
        return out, tuple(grads[k] for k in argnums)

    return wrapped
