r"""CUDA kernels of the edge algebra and the random masks: one thread per entry.

Edge tensors hold one value per stored edge in CSR order (``rows[e]``, ``cols[e]`` its
coordinates), so every edge-wise operation of the executor interface is a map over that array,
reading the vertex vectors it needs through the coordinates: ``apply`` (:func:`edge_unary`),
``ewise`` (:func:`edge_binary`), ``row_scale`` / ``col_scale`` (:func:`edge_gathered`),
``outer_add`` and ``scale_edges`` (:func:`edge_outer`), the LeakyReLU backward
(:func:`leaky_relu_backward`) and the counter-based dropout masks (:func:`dropout_edges`,
:func:`keep_mask`; :func:`keep` is the device function of one draw, which the kernels generated
from edge programs call too). A grid-stride loop
covers any size; consecutive threads touch consecutive entries (coalesced).
"""

from __future__ import annotations

import math
from typing import get_args

import numpy as np
from numba import cuda

from ..executors import base
from ..executors._random import uniform_entry
from ..ir import functions
from ._device import SIMULATOR, inline_device

__all__ = ["UNARY", "BINARY", "edge_unary", "edge_binary", "edge_gathered", "edge_outer",
           "leaky_relu_backward", "keep", "dropout_edges", "keep_mask"]

#: op codes of :func:`edge_unary`: :meth:`~gblas_gnn.executors.Executor.apply`'s functions in
#: the order of their type
UNARY = {name: code for code, name in enumerate(get_args(base.Unary))}
#: op codes of :func:`edge_binary` and :func:`edge_gathered`: the executors' edge-wise names
BINARY = {name: code for code, name in enumerate(functions.BY_GRAPHBLAS_NAME)}

if SIMULATOR:
    def _uniform_wrapping(key, a, b, c):
        # the interpreter computes with numpy scalars, which warn on the intended
        # wrap-around modulo 2**64
        with np.errstate(over="ignore"):
            return uniform_entry(key, a, b, c)

    _uniform = cuda.jit(device=True)(_uniform_wrapping)
else:
    _uniform = inline_device(uniform_entry)


def _branches(codes: dict[str, int], template, result: str, indent: str) -> list[str]:
    """One ``if`` branch per op code (the last one the ``else``), each assigning (or with
    ``result = "return"`` returning) the expression ``template(name)``."""
    lines = []
    for i, (name, code) in enumerate(codes.items()):
        head = "else:" if i == len(codes) - 1 else f"{'if' if i == 0 else 'elif'} op == {code}:"
        lines += [indent + head, f"{indent}    {result} {template(name)}"]
    return lines


def _binary_expression(name: str) -> str:
    return functions.BINARY[functions.BY_GRAPHBLAS_NAME[name]].code.format(a="a", b="b")


def _unary_expression(name: str) -> str:
    """The scalar form of ``apply``'s function ``name`` of ``v`` with the constant ``alpha``:
    the template of its :mod:`~gblas_gnn.ir.functions` row (a ``{pick}`` of max for
    ``alpha ≤ 1``, min above, as the cpu executor's LeakyReLU) or of an affine map."""
    template = base.EDGE_AFFINE[name].code if name in base.EDGE_AFFINE \
        else functions.UNARY[name].code
    fill = {"x": "v", "a": "alpha", "zero": "zero", "one": "one"}
    if "{pick}" not in template:
        return template.format(**fill)
    return (f"({template.format(pick='max', **fill)} if alpha <= one "
            f"else {template.format(pick='min', **fill)})")


def _compiled(name: str, lines: list[str], decorate):
    """``decorate`` applied to the function ``name`` defined by the generated ``lines``."""
    scope = {"cuda": cuda, "math": math}
    exec(compile("\n".join(lines) + "\n", f"<{__name__}.{name}>", "exec"), scope)  # noqa: S102
    return decorate(scope[name])


#: ``a op b`` by :data:`BINARY` code, each branch the scalar template of its
#: :mod:`~gblas_gnn.ir.functions` row
_binary = _compiled("_binary", ["def _binary(op, a, b):",
                                *_branches(BINARY, _binary_expression, "return", "    ")],
                    inline_device)

edge_unary = _compiled("edge_unary", [
    "def edge_unary(x, op, alpha, out):",
    "    zero = x.dtype.type(0)",
    "    one = x.dtype.type(1)",
    "    for e in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):",
    "        v = x[e]",
    *_branches(UNARY, _unary_expression, "r =", "        "),
    "        out[e] = r"], cuda.jit)
edge_unary.__doc__ = (
    "``out[e] = f(x[e])`` with ``f`` by :data:`UNARY` code: exp, relu, LeakyReLU (slope "
    "``alpha``), ``alpha·x``, ``−x``, ``x + alpha``, ``alpha / x``; each branch the scalar "
    "template of its function (generated from the tables, so no operation is spelled here).")


@cuda.jit
def edge_binary(x, y, op, out):
    """``out[e] = x[e] op y[e]`` with op by :data:`BINARY` code (+, −, ×, ÷)."""
    for e in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        out[e] = _binary(op, x[e], y[e])


@cuda.jit
def edge_gathered(x, v, index, op, out):
    """``out[e] = x[e] op v[index[e]]`` (``index`` = the rows: ``row_scale``; the columns:
    ``col_scale``)."""
    for e in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        out[e] = _binary(op, x[e], v[index[e]])


@cuda.jit
def edge_outer(x, use_x, u, v, rows, cols, out):
    """``out[e] = u[rows[e]] + v[cols[e]]`` (masked outer sum), or with ``use_x``
    ``x[e] · u[rows[e]] · v[cols[e]]`` (two-sided diagonal scaling)."""
    for e in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        if use_x:
            out[e] = x[e] * u[rows[e]] * v[cols[e]]
        else:
            out[e] = u[rows[e]] + v[cols[e]]


leaky_relu_backward = _compiled("leaky_relu_backward", [
    "def leaky_relu_backward(c, de, alpha, out):",
    "    zero = c.dtype.type(0)",
    "    one = c.dtype.type(1)",
    "    for e in range(cuda.grid(1), c.shape[0], cuda.gridsize(1)):",
    "        out[e] = de[e] * " + functions.UNARY["leaky_relu"].code_derivative.format(
        x="c[e]", a="alpha", zero="zero", one="one")], cuda.jit)
leaky_relu_backward.__doc__ = (
    "``out[e] = de[e] · f'(c[e])`` with ``f`` the LeakyReLU of slope ``alpha`` (its "
    "derivative's template: ``de[e]`` where ``c[e] > 0``, else ``alpha · de[e]``).")


@inline_device
def keep(key, h, gi, gj, p):
    """Whether the draw ``u(key; h, gi, gj)`` keeps its entry (``u ≥ p``): head ``h`` of the
    edge from global vertex ``gj`` to ``gi`` (:mod:`gblas_gnn.executors._random`)."""
    return _uniform(key, np.uint64(h), np.uint64(gi), np.uint64(gj)) >= p


@cuda.jit
def dropout_edges(rows, cols, key, p, scale, out):
    """``out[h, e] = scale`` where ``u(key; h, rows[e], cols[e]) ≥ p``, else 0 (attention
    dropout of head ``h`` on the edge ``cols[e] → rows[e]``; :mod:`gblas_gnn.executors._random`)."""
    nnz = rows.shape[0]
    for t in range(cuda.grid(1), out.shape[0] * nnz, cuda.gridsize(1)):
        h = t // nnz
        e = t - h * nnz
        out[h, e] = scale if keep(key, h, rows[e], cols[e], p) else out.dtype.type(0)


@cuda.jit
def keep_mask(rows, key, p, out):
    """``out[r, c] = u(key; 0, rows[r], c) ≥ p`` (feature dropout of vertex ``rows[r]``)."""
    k = out.shape[1]
    for t in range(cuda.grid(1), out.shape[0] * k, cuda.gridsize(1)):
        r = t // k
        c = t - r * k
        out[r, c] = _uniform(key, np.uint64(0), np.uint64(rows[r]), np.uint64(c)) >= p
