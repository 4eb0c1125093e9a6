"""Simplified graph convolution (Wu et al.): ``Z = Âᴷ H W + b``."""

from __future__ import annotations

import numpy as np

from .._validate import positive_ints
from ._interop import PyGInterop
from ._propagate import project_propagate, project_propagate_backward, propagate
from .init import glorot, zeros
from .module import Module


class SGConv(PyGInterop, Module):
    r"""Simple graph convolution, PyTorch Geometric's ``SGConv``.

    .. math::
        Z = \hat{A}^K H W + \mathbf{1} b^\top, \qquad
        \hat{A} = D^{-1/2} (A + I) D^{-1/2}, \quad D_{ii} = \textstyle\sum_j (A + I)_{ij}

    ``Â`` is the GCN normalisation of :class:`~gblas_gnn.nn.GCNConv` (weighted in-degrees,
    remaining self loops only; without them when ``add_self_loops=False``). The features
    are propagated ``K`` times, then projected (PyG order). Backward:

    .. math::
        \partial W = (\hat{A}^K H)^\top \partial Z, \qquad
        \partial H = (\hat{A}^\top)^K \partial Z\, W^\top, \qquad
        \partial b = \partial Z^\top \mathbf{1};

    the SpMM chain of the backward runs on ``min(in_dim, out_dim)`` columns. Without the
    cache and with ``out_dim < in_dim`` the forward computes :math:`\hat{A}^K (H W)`
    instead (same result, narrower SpMMs) and
    :math:`\partial W = H^\top (\hat{A}^\top)^K \partial Z`.

    Args:
        in_dim: input feature size.
        out_dim: output feature size.
        K: number of propagation steps (≥ 1).
        bias: add a learnable bias.
        add_self_loops: add the remaining self loops before normalising.
        cached: keep :math:`\hat{A}^K H` and reuse it while the *same graph object* and
            equal features are passed again (PyG computes it once; here new features or
            another graph recompute it, so the cache never answers stale results; a graph
            mutated in place is not noticed). Gradients w.r.t. ``H`` are still exact. The
            cache holds two n×in_dim arrays and survives ``eval()``; it is not a backward
            cache.
        seed: seed of the Glorot initialisation of ``W`` (``bias`` starts at zero).
        dtype: ``np.float32`` (default) or ``np.float64``.
        executor: executor name or instance (default ``cpu``).

    Shapes:
        - **input:** graph with n vertices, H (n, in_dim)
        - **output:** Z (n, out_dim)
        - **params:** ``W`` (in_dim, out_dim), ``bias`` (out_dim,)
    """

    def __init__(self, in_dim: int, out_dim: int, K: int = 2, bias: bool = True,
                 add_self_loops: bool = True, cached: bool = True, seed: int = 0,
                 dtype=np.float32, executor=None):
        super().__init__(dtype, executor)
        positive_ints(in_dim=in_dim, out_dim=out_dim)
        if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 1:
            raise ValueError(f"K must be an integer ≥ 1, got {K!r}")
        self.in_dim, self.out_dim, self.K = int(in_dim), int(out_dim), int(K)
        self.add_self_loops = bool(add_self_loops)
        self.cached = bool(cached)
        # propagate first (PyG order, and what the cache stores) unless projecting first
        # narrows every SpMM of the forward
        self._project_first = not self.cached and self.out_dim < self.in_dim
        self._prop_cache: tuple | None = None
        rng = np.random.default_rng(seed)
        self.params["W"] = self._param(glorot((self.in_dim, self.out_dim), rng, self.dtype))
        if bias:
            self.params["bias"] = self._param(zeros((self.out_dim,), self.dtype))
        self.zero_grad()

    def __repr__(self) -> str:
        return f"SGConv({self.in_dim}, {self.out_dim}, K={self.K})"

    def _cached_propagation(self, g, H: np.ndarray):
        """``(S, P)`` from the cache when ``g`` is the cached graph object and ``H`` equals
        the cached features in every process, else ``None``.

        Each process compares its own rows, and a miss anywhere is a miss everywhere
        (:meth:`~gblas_gnn.executors.Executor.all_agree`): a process that recomputes runs
        the propagation's collectives, which a process answering from its cache would skip.
        """
        c = self._prop_cache
        if not self.cached or c is None:       # the same in every process
            return None
        H = self._dense(H, "H", cols=self.in_dim, dtype=self.dtype)
        ex = self.executor
        hit = c[0] is g and H.shape == c[1].shape and \
            bool(ex.to_numpy(self.xp.array_equal(H, c[1]), "cache"))
        return (c[2], c[3]) if ex.all_agree(hit) else None

    def forward(self, g, H: np.ndarray) -> np.ndarray:
        ex, W = self.executor, self.params["W"]
        hit = self._cached_propagation(g, H)
        if hit is not None:
            S, P = hit
        else:
            graph, H = self._prepare(g, H, self.in_dim)
            S = graph.gcn_norm(self.add_self_loops)
            P = None
        if not self._project_first and P is None:
            P = propagate(ex, S, H, self.K)                  # Âᴷ H
            if self.cached:
                self._prop_cache = (g, H.copy(), S, P)
        # Âᴷ (H W) when projecting first, else (Âᴷ H) W
        Z, saved = project_propagate(ex, S, H, W, self.params.get("bias"), self.K,
                                     self._project_first, P)
        self._cache = saved if self.training else None
        return Z

    def backward(self, dout: np.ndarray) -> np.ndarray:
        saved = self._need_cache()
        dout, dbias = self._check_dout_biased(dout, (saved.rows, self.out_dim))
        # the SpMM chain of dH runs on the narrower of in_dim, out_dim
        self.grads["W"], dH = project_propagate_backward(
            self.executor, saved, dout, self.params["W"], self.K, self._project_first,
            propagate_dout_first=self.out_dim <= self.in_dim)
        if dbias is not None:
            self.grads["bias"] = dbias
        return dH
