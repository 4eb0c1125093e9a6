"""Graph convolution (Kipf & Welling): ``Z = Â H W + b``."""

from __future__ import annotations

import numpy as np

from .._validate import positive_ints
from ._interop import PyGInterop
from ._propagate import project_propagate, project_propagate_backward
from .init import glorot, zeros
from .module import Module


class GCNConv(PyGInterop, Module):
    r"""Graph convolutional layer, PyTorch Geometric's ``GCNConv``.

    .. math::
        Z = \hat{A} H W + \mathbf{1} b^\top, \qquad
        \hat{A} = D^{-1/2} (A + I) D^{-1/2}, \quad D_{ii} = \textstyle\sum_j (A + I)_{ij}

    ``A[i, j]`` is the weight of the edge ``j → i``; ``D`` holds the *weighted in-degrees*
    (row sums), as in PyG's ``gcn_norm``. ``I`` adds only the *missing* self loops (an
    existing loop keeps its weight); a vertex of degree 0 gets a zero row. With
    ``normalize=False`` the layer computes :math:`Z = A H W + b` with the stored edge
    weights and no self loops (``add_self_loops`` is then ignored, as in PyG).

    The projection and the aggregation commute, so the layer picks the cheaper order:
    :math:`\hat{A} (H W)` when ``out_dim ≤ in_dim`` and :math:`(\hat{A} H) W` otherwise; the
    SpMM then always runs on ``min(in_dim, out_dim)`` columns, in the backward too:

    .. math::
        \partial W = (\hat{A} H)^\top \partial Z = H^\top (\hat{A}^\top \partial Z), \qquad
        \partial H = \hat{A}^\top \partial Z\, W^\top, \qquad
        \partial b = \partial Z^\top \mathbf{1}.

    Args:
        in_dim: input feature size.
        out_dim: output feature size.
        bias: add a learnable bias.
        add_self_loops: add the remaining self loops before normalising.
        normalize: use :math:`\hat{A}`; otherwise the raw weighted ``A``.
        cached: keep the (normalised) adjacency of the last graph and reuse it while the
            *same graph object* is passed again (skips conversion and normalisation; a graph
            mutated in place is not noticed). Unlike PyG a different graph is never answered
            from the cache. This cache survives ``eval()``; it is not a backward cache.
        seed: seed of the Glorot initialisation of ``W`` (``bias`` starts at zero).
        dtype: ``np.float32`` (default) or ``np.float64``.
        executor: executor name or instance (default ``cpu``).

    Shapes:
        - **input:** graph with n vertices, H (n, in_dim)
        - **output:** Z (n, out_dim)
        - **params:** ``W`` (in_dim, out_dim), ``bias`` (out_dim,)
    """

    def __init__(self, in_dim: int, out_dim: int, bias: bool = True,
                 add_self_loops: bool = True, normalize: bool = True, cached: bool = False,
                 seed: int = 0, dtype=np.float32, executor=None):
        super().__init__(dtype, executor)
        positive_ints(in_dim=in_dim, out_dim=out_dim)
        self.in_dim, self.out_dim = int(in_dim), int(out_dim)
        self.add_self_loops = bool(add_self_loops)
        self.normalize = bool(normalize)
        self.cached = bool(cached)
        # Φ∘⊕ order: project first when that narrows the SpMM operand
        self._project_first = self.out_dim <= self.in_dim
        self._adj_cache: tuple | None = None
        rng = np.random.default_rng(seed)
        self.params["W"] = self._param(glorot((self.in_dim, self.out_dim), rng, self.dtype))
        if bias:
            self.params["bias"] = self._param(zeros((self.out_dim,), self.dtype))
        self.zero_grad()

    def __repr__(self) -> str:
        return (f"GCNConv({self.in_dim}, {self.out_dim}, normalize={self.normalize}, "
                f"add_self_loops={self.add_self_loops})")

    def _adjacency(self, g, H: np.ndarray):
        """``(S, H)``: the propagation matrix of graph ``g`` and the validated features."""
        if self.cached and self._adj_cache is not None and self._adj_cache[0] is g:
            _, S, rows = self._adj_cache
            return S, self._dense(H, "H", rows=rows, cols=self.in_dim, dtype=self.dtype)
        graph, H = self._prepare(g, H, self.in_dim)
        S = graph.gcn_norm(self.add_self_loops) if self.normalize else graph.A
        if self.cached:
            self._adj_cache = (g, S, graph.n_local)
        return S, H

    def forward(self, g, H: np.ndarray) -> np.ndarray:
        S, H = self._adjacency(g, H)
        # Â (H W) when projecting first, else (Â H) W
        Z, saved = project_propagate(self.executor, S, H, self.params["W"],
                                     self.params.get("bias"), 1, self._project_first)
        self._cache = saved if self.training else None
        return Z

    def backward(self, dout: np.ndarray) -> np.ndarray:
        saved = self._need_cache()
        dout, dbias = self._check_dout_biased(dout, (saved.rows, self.out_dim))
        # project first: Âᵀ dZ on out_dim columns; else Âᵀ (dZ Wᵀ) on in_dim columns
        self.grads["W"], dH = project_propagate_backward(
            self.executor, saved, dout, self.params["W"], 1, self._project_first)
        if dbias is not None:
            self.grads["bias"] = dbias
        return dH
