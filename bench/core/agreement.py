"""Do two implementations agree? Max abs difference per output, judged against its scale."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["DisagreementError", "compare", "DEFAULT_TOL"]

#: allowed ``max|ours − ref| / max|ref|`` (float32 sums over thousands of edges and the
#: different summation orders of the two libraries stay orders of magnitude below it)
DEFAULT_TOL = 1e-4


class DisagreementError(RuntimeError):
    """Two implementations' outputs differ by more than the tolerance: the case is
    aborted."""

    def __init__(self, message: str, report: dict):
        super().__init__(message)
        self.report = report


def compare(ours: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray],
            tol: float = DEFAULT_TOL, what: str = "",
            names: tuple[str, str] = ("ours", "PyG"),
            zero: tuple[str, ...] = ()) -> dict[str, dict]:
    """Compare arrays of the same names; raise :class:`DisagreementError` if any differs.

    Parameters
    ----------
    ours, ref : mapping of name → ndarray
        Our results and the reference's (PyG's; or a peer's and ours), same names and
        shapes.
    tol : float
        Largest allowed ``max|ours − ref| / max(max|ref|, tiny)``.
    what : str
        Label for the error message (the layer or case).
    names : (str, str)
        What the two sides are called in the error message.
    zero : tuple of str
        Names that are zero in exact arithmetic (the gradient of a Transformer's key bias:
        a softmax ignores a per-row shift): their difference is measured against the
        largest reference value of the same kind (the other gradients), not their own.

    Returns
    -------
    dict
        ``{name: {"max_abs_diff", "max_abs_ref", "rel_diff", "ok"}}`` for every name.
    """
    if set(ours) != set(ref):
        raise DisagreementError(f"{what}: outputs differ in names: ours {sorted(ours)}, "
                                f"reference {sorted(ref)}", {})
    report = {}
    for key in sorted(ref):
        a = np.asarray(ours[key], dtype=np.float64)
        b = np.asarray(ref[key], dtype=np.float64)
        if a.shape != b.shape:
            raise DisagreementError(f"{what}: {key} has shape {a.shape}, reference "
                                    f"{b.shape}", report)
        finite = bool(np.isfinite(a).all() and np.isfinite(b).all())
        diff = float(np.max(np.abs(a - b))) if a.size else 0.0
        scale = float(np.max(np.abs(b))) if b.size else 0.0
        if key in zero:
            kind = key.split("_")[0]
            scale = max(float(np.max(np.abs(v))) for k, v in ref.items()
                        if k.split("_")[0] == kind and np.size(v))
        rel = diff / max(scale, np.finfo(np.float32).tiny)
        report[key] = {"max_abs_diff": diff, "max_abs_ref": scale, "rel_diff": rel,
                       "ok": finite and rel <= tol}
    bad = [k for k, r in report.items() if not r["ok"]]
    if bad:
        lines = ", ".join(f"{k}: max|Δ| = {report[k]['max_abs_diff']:.3g} "
                          f"(scale {report[k]['max_abs_ref']:.3g})" for k in bad)
        raise DisagreementError(f"{what}: {names[0]} and {names[1]} disagree beyond "
                                f"tol={tol:g} — {lines}", report)
    return report
