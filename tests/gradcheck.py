"""Central finite differences in float64, shared by every gradient test."""

from __future__ import annotations

import numpy as np


def numerical_grad(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """``∂f/∂x`` by central differences; ``f`` is a scalar function of the array ``x`` (mutated
    in place and restored)."""
    grad = np.zeros_like(x, dtype=np.float64)
    flat = x.reshape(-1)
    g = grad.reshape(-1)
    for idx in range(flat.size):
        orig = flat[idx]
        flat[idx] = orig + eps
        fp = f()
        flat[idx] = orig - eps
        fm = f()
        flat[idx] = orig
        g[idx] = (fp - fm) / (2 * eps)
    return grad


def check_module_grads(module, g, H: np.ndarray, seed: int = 0, rtol: float = 1e-5,
                       atol: float = 1e-7) -> None:
    """Compare ``module.backward`` with finite differences of ``L = Σ R ⊙ module(g, H)``
    for every parameter and for the input ``H`` (all float64)."""
    rng = np.random.default_rng(seed)
    module.train()
    out = module(g, H)
    R = rng.standard_normal(out.shape)

    def loss():
        return float(np.sum(R * module(g, H)))

    module(g, H)
    dH = module.backward(R)
    grads = {k: v.copy() for k, v in module.grads.items()}
    for name, p in module.params.items():
        num = numerical_grad(loss, p)
        np.testing.assert_allclose(grads[name], num, rtol=rtol, atol=atol,
                                   err_msg=f"gradient of parameter {name!r}")
    num = numerical_grad(loss, H)
    np.testing.assert_allclose(dH, num, rtol=rtol, atol=atol, err_msg="gradient of the input")
