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

__all__ = ["propagate", "project_propagate", "project_propagate_backward", "TransposeCache"]


def propagate(ex, S, X: np.ndarray, K: int = 1, transpose: bool = False,
              ST=None) -> np.ndarray:
    r""":math:`S^K X` (:math:`(S^\top)^K X` with ``transpose``): ``K`` SpMMs.

    With ``transpose`` and ``ST`` (:math:`S^\top` already built) the SpMMs use ``ST``.
    """
    if transpose and ST is not None:
        S, transpose = ST, False
    step = ex.spmm_t if transpose else ex.spmm
    for _ in range(K):
        X = step(S, X)
    return X


class TransposeCache:
    r"""One-slot cache of :math:`\hat{A}^\top` for a layer's backward.

    The backward multiplies by :math:`\hat{A}^\top` every step; without an explicit
    transpose SuiteSparse transposes :math:`\hat{A}` inside every such product (measured at
    n = 10⁵, 1.7 M edges, k = 32: 77 ms against 20 ms for the product with a stored
    transpose). Built on the first backward only, so inference never pays for it.
    """

    def __init__(self):
        self._pair = None

    def __call__(self, ex, S):
        if self._pair is None or self._pair[0] is not S:
            self._pair = (S, ex.transpose(S))
        return self._pair[1]


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
    (``saved["ST"]``, when present, is :math:`S^\top`)
    (:math:`\partial b = \partial Z^\top \mathbf{1}` is left to the layer).

    ``project_first``: :math:`G = (S^\top)^K \partial Z`, :math:`\partial W = H^\top G`,
    :math:`\partial H = G W^\top`. Otherwise :math:`\partial W = P^\top \partial Z` and
    :math:`\partial H = ((S^\top)^K \partial Z) W^\top` with ``propagate_dout_first`` (the
    cheaper order when ``out_dim ≤ in_dim``), else :math:`(S^\top)^K (\partial Z W^\top)`.
    """
    S, ST = saved["S"], saved.get("ST")
    if project_first:
        G = propagate(ex, S, dout, K, True, ST)                # (Sᵀ)ᴷ dZ, out_dim columns
        return ex.gemm(saved["H"], G, trans_a=True), ex.gemm(G, W, trans_b=True)
    dW = ex.gemm(saved["P"], dout, trans_a=True)
    if propagate_dout_first:
        dH = ex.gemm(propagate(ex, S, dout, K, True, ST), W, trans_b=True)
    else:
        dH = propagate(ex, S, ex.gemm(dout, W, trans_b=True), K, True, ST)
    return dW, dH
