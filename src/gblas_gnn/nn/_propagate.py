r"""Propagation shared by the linear convolutions :class:`~gblas_gnn.nn.GCNConv` (``K = 1``)
and :class:`~gblas_gnn.nn.SGConv`: :math:`Z = \hat{A}^K H W` in either order and its backward.

Projection and propagation commute, :math:`(\hat{A}^K H) W = \hat{A}^K (H W)`, so a layer
picks the order whose SpMMs run on fewer columns. Backward (without the bias):

.. math::
    \partial W = (\hat{A}^K H)^\top \partial Z = H^\top (\hat{A}^\top)^K \partial Z, \qquad
    \partial H = (\hat{A}^\top)^K \partial Z\, W^\top = (\hat{A}^\top)^K (\partial Z W^\top).
"""

from __future__ import annotations

import numpy as np

__all__ = ["propagate", "project_propagate", "project_propagate_backward"]


def propagate(ex, S, X: np.ndarray, K: int = 1, transpose: bool = False) -> np.ndarray:
    r""":math:`S^K X` (:math:`(S^\top)^K X` with ``transpose``): ``K`` SpMMs."""
    step = ex.spmm_t if transpose else ex.spmm
    for _ in range(K):
        X = step(S, X)
    return X


def project_propagate(ex, S, H: np.ndarray, W: np.ndarray, bias: np.ndarray | None, K: int,
                      project_first: bool, P: np.ndarray | None = None
                      ) -> tuple[np.ndarray, dict]:
    r"""``(Z, saved)`` with :math:`Z = S^K H W + b` (no ``b`` when ``bias`` is None) and what
    the backward needs.

    ``project_first``: :math:`S^K (H W)`, saves ``S`` and ``H``; otherwise
    :math:`(S^K H) W`, saves ``S`` and ``P = S^K H`` (pass ``P`` when it is known already).
    """
    if project_first:
        Z, saved = propagate(ex, S, ex.gemm(H, W), K), {"S": S, "H": H}
    else:
        if P is None:
            P = propagate(ex, S, H, K)
        Z, saved = ex.gemm(P, W), {"S": S, "P": P}
    if bias is not None:
        Z += bias
    return Z, saved


def project_propagate_backward(ex, saved: dict, dout: np.ndarray, W: np.ndarray, K: int,
                               project_first: bool, propagate_dout_first: bool = False
                               ) -> tuple[np.ndarray, np.ndarray]:
    r"""``(dW, dH)`` of :func:`project_propagate` for the upstream gradient ``dout``
    (:math:`\partial b = \partial Z^\top \mathbf{1}` is left to the layer).

    ``project_first``: :math:`G = (S^\top)^K \partial Z`, :math:`\partial W = H^\top G`,
    :math:`\partial H = G W^\top`. Otherwise :math:`\partial W = P^\top \partial Z` and
    :math:`\partial H = ((S^\top)^K \partial Z) W^\top` with ``propagate_dout_first`` (the
    cheaper order when ``out_dim ≤ in_dim``), else :math:`(S^\top)^K (\partial Z W^\top)`.
    """
    S = saved["S"]
    if project_first:
        G = propagate(ex, S, dout, K, transpose=True)          # (Sᵀ)ᴷ dZ, out_dim columns
        return ex.gemm(saved["H"], G, trans_a=True), ex.gemm(G, W, trans_b=True)
    dW = ex.gemm(saved["P"], dout, trans_a=True)
    if propagate_dout_first:
        dH = ex.gemm(propagate(ex, S, dout, K, transpose=True), W, trans_b=True)
    else:
        dH = propagate(ex, S, ex.gemm(dout, W, trans_b=True), K, transpose=True)
    return dW, dH
