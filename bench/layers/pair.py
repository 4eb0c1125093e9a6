"""One layer row, ours, PyG's and DGL's, on the same graph, input, weights and upstream
gradient."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..core.agreement import DEFAULT_TOL, compare
from ..core.cases import CaseData
from ..core.device import BenchDevice
from .rows import get_row, make_ours, make_pyg, ours_graph, pyg_grads, pyg_inputs, shared_params

__all__ = ["LayerPair"]


class LayerPair:
    """Our layer of row ``name``, its PyG twin and its DGL ones, with callables to time.

    Parameters
    ----------
    name : str
        A row of :mod:`.rows` (``"gat"``, ``"agnn"``, ``"gcn"``, ``"gatv2"``, ...).
    g : gblas_gnn.Graph
        Our graph (no self loops added; the layer adds them, or gets the looped graph).
    data : CaseData
        ``H``, ``dZ`` and PyG's ``edge_index`` (with the self loops).
    k_out : int
        Output size of the layer.
    with_pyg : bool
        Build the PyG side (imports torch).
    seed : int
        Seed of the row's weights (our layer's initialisation, or the row's ``init``); PyG
        and DGL get the same values.
    executor : str
        The executor our layer runs on; ``H`` and ``dZ`` are moved to it once, here.
    device : BenchDevice, optional
        Where PyG runs (default the host; on a GPU its layer and tensors move there once).
    peers : PeerWorker, optional
        A running DGL worker (:mod:`bench.peers.client`): the row's DGL implementations are built
        there with the same weights.
    pyg_worker : PeerWorker, optional
        A running PyG worker (:mod:`bench.peers.pyg_worker`): PyG's layer is built and run
        there, in a process of its own, rather than in this one (``with_pyg`` must be set).

    Notes
    -----
    *forward* is inference: our layer in ``eval()`` mode (no backward cache), PyG's and
    DGL's in ``eval()`` under ``torch.no_grad()``. *forward+backward* is training mode on
    every side with the input requiring its gradient (our layers always return ``dH``).
    A row without a layer of ours (``gatv2`` today) runs PyG and DGL, and PyG is the
    reference of DGL's agreement.
    """

    def __init__(self, name: str, g, data: CaseData, k_out: int, with_pyg: bool = True,
                 seed: int = 0, executor: str = "cpu", device: BenchDevice | None = None,
                 peers=None, pyg_worker=None):
        self.name = name
        self.row = row = get_row(name)
        k_in = data.H.shape[1]
        self.H, self.dZ = data.H, data.dZ[:, :k_out]
        self.ours = (make_ours(name, k_in, k_out, seed=seed, executor=executor)
                     if row.ours is not None else None)
        self.params = shared_params(name, k_in, k_out, self.ours, seed)
        if self.ours is not None:
            ex = self.ours.executor
            self.g = ours_graph(name, g, data.edge_index, data.edge_type)
            self.Hx, self.dZx = ex.asarray(self.H), ex.asarray(self.dZ)   # no copy on cpu
        self.pyg = self.pyg_remote = None
        self._ours_checked = None
        if with_pyg and pyg_worker is not None:
            from ..peers.client import PeerLayer

            self.pyg_remote = PeerLayer(pyg_worker, name, "pyg", self.params, k_in, k_out)
        elif with_pyg:
            import torch

            device = device or BenchDevice("host")
            self._torch = torch
            self.pyg = make_pyg(name, self.params, k_in, k_out).to(device.torch_device)
            # edge_index[, attr or relation ids]
            self.inputs = pyg_inputs(name, data.edge_index, device, data.edge_type)
            self.Ht = device.tensor(self.H)
            self.Hleaf = device.tensor(self.H.copy(), requires_grad=True)
            self.dZt = device.tensor(self.dZ)
        self.peers = {}
        if peers is not None:
            from ..peers.client import PeerLayer

            self.peers = {impl: PeerLayer(peers, name, impl, self.params, k_in, k_out)
                          for impl in row.dgl}

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
            return self.pyg(self.Ht, *self.inputs)

    def pyg_fwd_bwd(self):
        """Training forward and backward of the PyG layer: ``(Z, dH)``; fills its grads."""
        self.pyg.train()
        self.pyg.zero_grad(set_to_none=True)
        self.Hleaf.grad = None
        Z = self.pyg(self.Hleaf, *self.inputs)
        Z.backward(self.dZt)
        return Z, self.Hleaf.grad

    # ------------------------------------------------------------------ what is timed
    def calls(self) -> dict[str, Callable[[], object]]:
        """``{"<impl> fwd" | "<impl> fwd+bwd": callable}`` for every side built, in the
        order of one interleaved round: all forwards, then all forwards+backwards."""
        sides = {}
        if self.ours is not None:
            sides["ours"] = (self.ours_forward, self.ours_fwd_bwd)
        if self.pyg_remote is not None:
            sides["pyg"] = (self.pyg_remote.forward, self.pyg_remote.fwd_bwd)
        elif self.pyg is not None:
            sides["pyg"] = (self.pyg_forward, self.pyg_fwd_bwd)
        for impl, layer in self.peers.items():
            sides[impl] = (layer.forward, layer.fwd_bwd)
        return {f"{impl} {kind}": fns[i] for i, kind in enumerate(("fwd", "fwd+bwd"))
                for impl, fns in sides.items()}

    # ------------------------------------------------------------------ agreement
    def _ours_outputs(self) -> dict[str, np.ndarray]:
        from gblas_gnn.executors import to_numpy

        Z, dH = self.ours_fwd_bwd()
        out = {"Z": Z, "dH": dH, **{f"grad_{k}": v for k, v in self.ours.grads.items()}}
        out["Z_eval"] = self.ours_forward()
        return {k: to_numpy(v) for k, v in out.items()}

    def _pyg_outputs(self) -> dict[str, np.ndarray]:
        if self.pyg_remote is not None:
            return self.pyg_remote.outputs()
        Z, dH = self.pyg_fwd_bwd()
        out = {"Z": Z.detach().cpu().numpy(), "dH": dH.cpu().numpy(),
               **{f"grad_{k}": v for k, v in pyg_grads(self.name, self.pyg).items()}}
        out["Z_eval"] = self.pyg_forward().cpu().numpy()
        return out

    def check(self, tol: float = DEFAULT_TOL) -> dict[str, dict]:
        """Run ours and PyG once (training mode) and compare ``Z``, ``dH``, every parameter
        gradient and the inference ``Z``; raises :class:`~bench.core.agreement.
        DisagreementError`."""
        self._ours_checked = self._ours_outputs()           # DGL's reference, if any
        return compare(self._ours_checked, self._pyg_outputs(), tol, what=self.name,
                       zero=self.row.zero)

    def check_peers(self, tol: float = DEFAULT_TOL) -> dict[str, dict]:
        """Compare every DGL implementation with ours (with PyG for a row without ours) the
        same way; ``{"reference": "ours" | "pyg", impl: report, ...}``."""
        if not self.peers:
            return {}
        reference = "ours" if self.ours is not None else "pyg"
        if reference == "pyg":
            ref = self._pyg_outputs()
        else:
            ref = self._ours_checked or self._ours_outputs()
        out: dict = {"reference": reference}
        for impl, layer in self.peers.items():
            out[impl] = compare(layer.outputs(), ref, tol, what=f"{self.name} ({impl})",
                                names=(impl, "ours" if reference == "ours" else "PyG"),
                                zero=self.row.zero)
        return out

    @property
    def has_pyg(self) -> bool:
        """PyG's side was built (here or in its worker)."""
        return self.pyg is not None or self.pyg_remote is not None

    def close(self) -> None:
        """Free the peers' layers in their workers."""
        for layer in [*self.peers.values(), *filter(None, [self.pyg_remote])]:
            layer.close()
        self.peers, self.pyg_remote = {}, None
