r"""Propagation shared by the linear convolutions :class:`~gblas_gnn.nn.GCNConv` (``K = 1``)
and :class:`~gblas_gnn.nn.SGConv`: :math:`Z = \hat{A}^K H W` in either order and its backward.

Projection and propagation commute, :math:`(\hat{A}^K H) W = \hat{A}^K (H W)`, so a layer
picks the order whose SpMMs run on fewer columns. Backward (without the bias):

.. math::
    \partial W = (\hat{A}^K H)^\top \partial Z = H^\top (\hat{A}^\top)^K \partial Z, \qquad
    \partial H = (\hat{A}^\top)^K \partial Z\, W^\top = (\hat{A}^\top)^K (\partial Z W^\top).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["PropagateCache", "propagate", "project_propagate", "project_propagate_backward"]


@dataclass
class PropagateCache:
    """What :func:`project_propagate_backward` needs: the propagation matrix ``S``, the rows
    of the output, and ``H`` (projected first) or ``P = S^K H`` (propagated first)."""

    S: Any
    rows: int
    H: Any = None
    P: Any = None


def propagate(ex, S, X, K: int = 1, transpose: bool = False, bias=None):
    r""":math:`S^K X` (:math:`(S^\top)^K X` with ``transpose``): ``K`` SpMMs, the last one
    adding the row bias ``bias`` when given (in its pass, on executors that fuse it)."""
    for step in range(K):
        X = ex.spmm_affine(S, X, bias=bias if step == K - 1 else None, transpose=transpose)
    return X


def project_propagate(ex, S, H, W, bias, K: int, project_first: bool, P=None
                      ) -> tuple[Any, PropagateCache]:
    r"""``(Z, saved)`` with :math:`Z = S^K H W + b` (no ``b`` when ``bias`` is None) and what
    the backward needs.

    ``project_first``: :math:`S^K (H W)`, saves ``H``; otherwise :math:`(S^K H) W`, saves
    ``P = S^K H`` (pass ``P`` when it is known already).
    """
    if project_first:
        Z = propagate(ex, S, ex.gemm(H, W), K, bias=bias)
        return Z, PropagateCache(S, Z.shape[0], H=H)
    if P is None:
        P = propagate(ex, S, H, K)
    Z = ex.linear(P, W, bias)          # the bias added to each block of rows as it is written
    return Z, PropagateCache(S, Z.shape[0], P=P)


def project_propagate_backward(ex, saved: PropagateCache, dout, W, K: int, project_first: bool,
                               propagate_dout_first: bool = False) -> tuple[object, object]:
    r"""``(dW, dH)`` of :func:`project_propagate` for the upstream gradient ``dout``
    (:math:`\partial b = \partial Z^\top \mathbf{1}` is left to the layer).

    ``project_first``: :math:`G = (S^\top)^K \partial Z`, :math:`\partial W = H^\top G`,
    :math:`\partial H = G W^\top`. Otherwise :math:`\partial W = P^\top \partial Z` and
    :math:`\partial H = ((S^\top)^K \partial Z) W^\top` with ``propagate_dout_first`` (the
    cheaper order when ``out_dim ≤ in_dim``), else :math:`(S^\top)^K (\partial Z W^\top)`.
    The products with :math:`S^\top` are the executor's (the cpu executor stores the
    transpose once per matrix).
    """
    S = saved.S
    if project_first:
        G = propagate(ex, S, dout, K, True)                    # (Sᵀ)ᴷ dZ, out_dim columns
        dH, dW = ex.matmul_vjp(G, W, saved.H)
        return dW, dH
    if propagate_dout_first:
        dW = ex.inner(saved.P, dout)
        dH = ex.gemm(propagate(ex, S, dout, K, True), W.T)
    else:
        dOut, dW = ex.matmul_vjp(dout, W, saved.P)
        dH = propagate(ex, S, dOut, K, True)
    return dW, dH
