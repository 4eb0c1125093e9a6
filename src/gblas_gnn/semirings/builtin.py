"""The real and tropical semirings the library ships, with their fast lowerings.

==========  ========================  ==========================  ==========================
name        ``Z[i,c]`` (stored j)     ``spmm`` runs               ``spmm_general`` runs
==========  ========================  ==========================  ==========================
plus_times  ``Σ_j S[i,j]·H[j,c]``     factory saxpy5, in place    factory saxpy→dot
min_plus    ``min_j S[i,j]+H[j,c]``   numba CSR row kernel        factory saxpy→dot
max_plus    ``max_j S[i,j]+H[j,c]``   numba CSR row kernel        generic
max_times   ``max_j S[i,j]·H[j,c]``   numba CSR row kernel        generic
min_times   ``min_j S[i,j]·H[j,c]``   numba CSR row kernel        generic
==========  ========================  ==========================  ==========================

(Kernels as reported by ``graphblas.ss.burble``.)  Why numba for ``min_plus``
although SuiteSparse has a factory kernel for it: into a dense result the factory
``min_plus`` saxpy5 measured 6-10x slower than the ``plus_times`` one (n = 100k,
1.6M edges, k = 32, 2 threads: ~300 ms vs ~30-50 ms); the numba kernel is within
~1.3x of ``plus_times``.  ``max_plus = −min_plus(−S, −H)`` would only move
``max_plus`` onto that same slow factory kernel, so every min/max semiring uses the
one kernel of :mod:`._kernels`.  The transpose products (``spmm_t``) transpose ``S``
with GraphBLAS (``S.T.new()``, the parallel bucket transpose GraphBLAS also runs
inside ``S.T.mxm``) and run the same row kernel.

Semiring laws (checked by ``tests/test_semirings_laws.py``):

* ``plus_times`` on ℝ: the usual ring laws; annihilator 0.
* ``min_plus`` on ℝ ∪ {+∞} and ``max_plus`` on ℝ ∪ {−∞}: all laws, ⊗ identity 0,
  annihilator = the ⊕ identity (±∞).
* ``max_times`` / ``min_times``: ⊗ distributes over ⊕ only for a **nonnegative**
  left/right factor (``a·max(b,c) = min(ab, ac)`` for ``a < 0``).  Their ⊕
  identities ``∓∞`` are not annihilated by ``×`` (``0·∞`` is NaN), so
  ``annihilator`` is None; on ℝ≥0 ``max_times`` is the semiring ``(max, ×, 0, 1)``
  with annihilator 0.  As SpMM operators they are still well defined for any
  finite weights (no ``∞`` is ever multiplied).
"""

from __future__ import annotations

import graphblas as gb
import numpy as np
from graphblas import Matrix

from . import _gbio
from ._kernels import run_spmm_minmax
from .core import Semiring

__all__ = ["BUILTIN", "make_builtin"]


def _plus_times_fast(S: Matrix, H: np.ndarray) -> np.ndarray:
    # factory saxpy5 in place: Z << 0; Z(accum=plus) << S plus_times H
    T = _gbio.gb_dtype(H.dtype)
    return _gbio.inplace_mxm(S, H, gb.semiring.plus_times[T], gb.binary.plus[T], 0)


def _plus_times_fast_t(S: Matrix, H: np.ndarray) -> np.ndarray:
    # GraphBLAS transposes S (bucket transpose) then runs saxpy5 in place
    T = _gbio.gb_dtype(H.dtype)
    return _gbio.inplace_mxm(
        S, H, gb.semiring.plus_times[T], gb.binary.plus[T], 0, transpose=True
    )


def _minmax_lowering(is_max: bool, is_times: bool):
    """Fast ``spmm`` / ``spmm_t`` for ``(min|max, +|×)`` via the numba CSR kernel."""

    def fast(S: Matrix, H: np.ndarray) -> np.ndarray:
        with _gbio.csr_buffers(S, H.dtype) as (indptr, indices, values):
            return run_spmm_minmax(indptr, indices, values, H, is_max=is_max, is_times=is_times)

    def fast_t(S: Matrix, H: np.ndarray) -> np.ndarray:
        St = S.T.new(name="S_T")  # CSR of Sᵀ, ours
        with _gbio.csr_buffers(St, H.dtype) as (indptr, indices, values):
            return run_spmm_minmax(indptr, indices, values, H, is_max=is_max, is_times=is_times)

    return fast, fast_t


def make_builtin() -> dict[str, Semiring]:
    """Build the shipped real and tropical semirings (name → Semiring)."""
    inf = float("inf")
    kernel = "numba CSR row kernel (_kernels.spmm_minmax)"
    out = {
        "plus_times": Semiring(
            name="plus_times",
            add=np.add,
            mul=np.multiply,
            add_identity=0.0,
            mul_identity=1.0,
            annihilator=0.0,
            formula="Z[i,c] = sum_j S[i,j] * H[j,c]",
            lowering="SuiteSparse factory plus_times saxpy5, in place into a full Z",
            build_gb=lambda: gb.semiring.plus_times,
            fast=_plus_times_fast,
            fast_t=_plus_times_fast_t,
        ),
    }
    specs = [
        # name, add, mul, add_identity, mul_identity, annihilator, is_max, is_times, formula
        ("min_plus", np.minimum, np.add, inf, 0.0, inf, False, False,
         "Z[i,c] = min_j S[i,j] + H[j,c]"),
        ("max_plus", np.maximum, np.add, -inf, 0.0, -inf, True, False,
         "Z[i,c] = max_j S[i,j] + H[j,c]"),
        ("max_times", np.maximum, np.multiply, -inf, 1.0, None, True, True,
         "Z[i,c] = max_j S[i,j] * H[j,c]"),
        ("min_times", np.minimum, np.multiply, inf, 1.0, None, False, True,
         "Z[i,c] = min_j S[i,j] * H[j,c]"),
    ]
    for name, add, mul, e_add, e_mul, zero, is_max, is_times, formula in specs:
        fast, fast_t = _minmax_lowering(is_max, is_times)
        out[name] = Semiring(
            name=name,
            add=add,
            mul=mul,
            add_identity=e_add,
            mul_identity=e_mul,
            annihilator=zero,
            formula=formula,
            lowering=kernel,
            build_gb=(lambda n=name: getattr(gb.semiring, n)),
            fast=fast,
            fast_t=fast_t,
        )
    return out


BUILTIN = make_builtin()
