r"""Row norms and row normalisation of traced arrays, each one recorded operation with its
closed-form vector-Jacobian product.

Written as a chain of elementwise operations (``sqrt(maximum((H*H).sum(1), ε²))`` and a
division), a row normalisation allocates and reads several n×k temporaries forward and
backward; these rules read each array once or twice.

For :math:`H` of shape (n, k), rows :math:`H_i` and
:math:`\nu_i = \max(\lVert H_i \rVert, \epsilon)`:

.. math::
    \mathrm{row\_norm}(H)_i = \nu_i, \qquad
    \bar H_i = \bar\nu_i \, H_i / \nu_i \ \ (\lVert H_i \rVert > \epsilon, \text{ else } 0)

.. math::
    \hat H_i = H_i / \nu_i, \qquad
    \bar H_i = (\bar{\hat H}_i - \hat H_i \langle \hat H_i, \bar{\hat H}_i \rangle) / \nu_i
    \ \ (\text{a clamped row is linear: } \bar H_i = \bar{\hat H}_i / \epsilon)

(``torch.nn.functional.normalize(H, dim=1, eps=ε)`` and its gradient).
"""

from __future__ import annotations

from .traced import Traced, _scope, record

__all__ = ["row_norm", "normalize", "normalize_with_norms"]


def _norms(ex, X, eps: float):
    """``(‖X_i‖, max(‖X_i‖, eps))`` in X's dtype."""
    xp = ex.xp
    norms = xp.sqrt(ex.row_dot(X, X)).astype(X.dtype, copy=False)
    return norms, xp.maximum(norms, X.dtype.type(eps))


def _where_free(ex, norms, eps: float, values):
    """``values`` where the row is not clamped (``‖X_i‖ > eps``), else 0."""
    return ex.xp.where(norms > eps, values, values.dtype.type(0))


def _check(x: Traced, name: str) -> None:
    if x.value.ndim != 2:
        raise ValueError(f"{name} needs an (n, k) array, got shape {tuple(x.value.shape)}")


def _recorded_norms(x: Traced, ex, norms, clamped, eps: float) -> Traced:
    """The clamped norms ``clamped`` of ``x`` (``norms``: before clamping) as a recorded
    operation."""
    X = x.value

    def vjp(g):
        return (ex.combine_rows(_where_free(ex, norms, eps, g / clamped), X),)

    return record(clamped, [x], vjp, x.vertex, fresh=True)


def _recorded_normalized(x: Traced, ex, norms, clamped, eps: float) -> Traced:
    """``x``'s rows over their clamped norms as a recorded operation."""
    inv = ex.xp.reciprocal(clamped)
    Y = ex.combine_rows(inv, x.value)

    def vjp(g, owned):
        proj = _where_free(ex, norms, eps, ex.row_dot(Y, g))
        # (ḡ - Ŷ ⟨Ŷ, ḡ⟩) / ν in one pass: ḡ/ν + Ŷ (-⟨Ŷ, ḡ⟩/ν), into ḡ when the backward
        # holds it alone (the attention's cotangent of its messages, AGNN's Ĥ)
        return (ex.combine_rows(inv, g, -proj * inv, Y, overwrite=owned),)

    return record(Y, [x], vjp, x.vertex, fresh=True, donate=True)


def row_norm(x: Traced, eps: float) -> Traced:
    r"""``max(‖X_i‖₂, eps)`` per row of a traced (n, k) ``x``."""
    _check(x, "row_norm")
    ex = _scope().executor
    return _recorded_norms(x, ex, *_norms(ex, x.value, eps), eps)


def normalize(x: Traced, eps: float) -> Traced:
    """``X_i / max(‖X_i‖₂, eps)`` per row of a traced (n, k) ``x``."""
    _check(x, "normalize")
    ex = _scope().executor
    return _recorded_normalized(x, ex, *_norms(ex, x.value, eps), eps)


def normalize_with_norms(x: Traced, eps: float) -> tuple[Traced, Traced]:
    """``(normalize(x, eps), row_norm(x, eps))`` from one computation of the norms (two
    recorded operations)."""
    _check(x, "normalize")
    ex = _scope().executor
    norms = _norms(ex, x.value, eps)
    return (_recorded_normalized(x, ex, *norms, eps), _recorded_norms(x, ex, *norms, eps))
