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

import numpy as np
from numba import cuda

from ..executors._random import uniform_entry
from ._device import SIMULATOR, inline_device

__all__ = ["UNARY", "BINARY", "edge_unary", "edge_binary", "edge_gathered", "edge_outer",
           "leaky_relu_backward", "keep", "dropout_edges", "keep_mask"]

#: op codes of :func:`edge_unary`
UNARY = {"exp": 0, "relu": 1, "leaky_relu": 2, "scale": 3, "neg": 4, "add": 5, "rdiv": 6}
#: op codes of :func:`edge_binary` and :func:`edge_gathered`
BINARY = {"plus": 0, "minus": 1, "times": 2, "div": 3}

if SIMULATOR:
    def _uniform_wrapping(key, a, b, c):
        # the interpreter computes with numpy scalars, which warn on the intended
        # wrap-around modulo 2**64
        with np.errstate(over="ignore"):
            return uniform_entry(key, a, b, c)

    _uniform = cuda.jit(device=True)(_uniform_wrapping)
else:
    _uniform = inline_device(uniform_entry)


@inline_device
def _binary(op, a, b):
    if op == 0:
        return a + b
    if op == 1:
        return a - b
    if op == 2:
        return a * b
    return a / b


@cuda.jit
def edge_unary(x, fn, alpha, out):
    """``out[e] = f(x[e])`` with ``f`` by :data:`UNARY` code: exp, relu, LeakyReLU (slope
    ``alpha``), ``alpha·x``, ``−x``, ``x + alpha``, ``alpha / x``."""
    zero = x.dtype.type(0)
    for e in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        v = x[e]
        if fn == 0:
            r = math.exp(v)
        elif fn == 1:
            r = max(v, zero)
        elif fn == 2:
            r = v if v > zero else v * alpha
        elif fn == 3:
            r = v * alpha
        elif fn == 4:
            r = -v
        elif fn == 5:
            r = v + alpha
        else:
            r = alpha / v
        out[e] = r


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


@cuda.jit
def leaky_relu_backward(c, de, alpha, out):
    """``out[e] = de[e]`` where ``c[e] > 0``, else ``alpha · de[e]``."""
    for e in range(cuda.grid(1), c.shape[0], cuda.gridsize(1)):
        out[e] = de[e] if c[e] > 0 else de[e] * alpha


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
