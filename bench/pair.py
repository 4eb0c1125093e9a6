"""One layer, ours and PyG's, on the same graph, input and upstream gradient."""

from __future__ import annotations

import numpy as np

from .agreement import DEFAULT_TOL, compare
from .cases import CaseData
from .device import BenchDevice
from .layers import make_ours, make_pyg, pyg_grads

__all__ = ["LayerPair"]


class LayerPair:
    """Our layer ``name`` and its PyG twin (weights copied) with callables to time.

    Parameters
    ----------
    name : str
        ``"gat"``, ``"agnn"`` or ``"gcn"``.
    g : gblas_gnn.Graph
        Our graph (no self loops added; the layer adds them).
    data : CaseData
        ``H``, ``dZ`` and PyG's ``edge_index`` (with the self loops).
    k_out : int
        Output size of the layer.
    with_pyg : bool
        Build the PyG side (imports torch).
    seed : int
        Initialisation seed of our layer (PyG gets the same weights).
    executor : str
        The executor our layer runs on; ``H`` and ``dZ`` are moved to it once, here.
    device : BenchDevice, optional
        Where PyG runs (default the host; on a GPU its layer and tensors move there once).

    Notes
    -----
    *forward* is inference: our layer in ``eval()`` mode (no backward cache), PyG's in
    ``eval()`` under ``torch.no_grad()``. *forward+backward* is training mode on both sides
    with the input requiring its gradient on both (our layers always return ``dH``).
    """

    def __init__(self, name: str, g, data: CaseData, k_out: int, with_pyg: bool = True,
                 seed: int = 0, executor: str = "cpu", device: BenchDevice | None = None):
        self.name = name
        self.g, self.H, self.dZ = g, data.H, data.dZ[:, :k_out]
        self.ours = make_ours(name, data.H.shape[1], k_out, seed=seed, executor=executor)
        ex = self.ours.executor
        self.Hx, self.dZx = ex.asarray(self.H), ex.asarray(self.dZ)   # no copy on the cpu
        self.pyg = None
        if with_pyg:
            import torch

            device = device or BenchDevice("host")
            self._torch = torch
            self.pyg = make_pyg(name, self.ours).to(device.torch_device)
            self.edge_index = device.tensor(data.edge_index)
            self.Ht = device.tensor(self.H)
            self.Hleaf = device.tensor(self.H.copy(), requires_grad=True)
            self.dZt = device.tensor(self.dZ)

    # ------------------------------------------------------------------ ours
    def ours_forward(self) -> np.ndarray:
        """Inference forward of our layer (an array of its executor)."""
        self.ours.eval()
        return self.ours(self.g, self.Hx)

    def ours_fwd_bwd(self) -> tuple[np.ndarray, np.ndarray]:
        """Training forward and backward of our layer: ``(Z, dH)``; fills its grads."""
        self.ours.train()
        Z = self.ours(self.g, self.Hx)
        return Z, self.ours.backward(self.dZx)

    # ------------------------------------------------------------------ PyG
    def pyg_forward(self):
        """Inference forward of the PyG layer (``eval()``, ``no_grad``)."""
        self.pyg.eval()
        with self._torch.no_grad():
            return self.pyg(self.Ht, self.edge_index)

    def pyg_fwd_bwd(self):
        """Training forward and backward of the PyG layer: ``(Z, dH)``; fills its grads."""
        self.pyg.train()
        self.pyg.zero_grad(set_to_none=True)
        self.Hleaf.grad = None
        Z = self.pyg(self.Hleaf, self.edge_index)
        Z.backward(self.dZt)
        return Z, self.Hleaf.grad

    # ------------------------------------------------------------------ agreement
    def check(self, tol: float = DEFAULT_TOL) -> dict[str, dict]:
        """Run both sides once (training mode) and compare ``Z``, ``dH`` and every
        parameter gradient; raises :class:`~bench.agreement.DisagreementError`."""
        from gblas_gnn.executors import to_numpy

        Z, dH = self.ours_fwd_bwd()
        Zp, dHp = self.pyg_fwd_bwd()
        ours = {"Z": Z, "dH": dH, **{f"grad_{k}": v for k, v in self.ours.grads.items()}}
        ref = {"Z": Zp.detach().cpu().numpy(), "dH": dHp.cpu().numpy(),
               **{f"grad_{k}": v for k, v in pyg_grads(self.name, self.pyg).items()}}
        ours["Z_eval"] = self.ours_forward()
        ours = {k: to_numpy(v) for k, v in ours.items()}
        ref["Z_eval"] = self.pyg_forward().cpu().numpy()
        return compare(ours, ref, tol, what=self.name)
