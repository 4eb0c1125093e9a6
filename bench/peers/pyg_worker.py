"""The PyG side of a benchmark in a process of its own (our environment, :mod:`.serving`).

    python -m bench.peers.pyg_worker                 # serve requests (see :mod:`.serving`)

Our layer and PyG's run in two processes, each by itself as its users run it, and the
harness interleaves their calls in time (:mod:`bench.layers.run`). In one process the two
libraries' allocators interfere: torch hands freed memory back to the system, and on a
virtual machine whose freed pages the host may reclaim, the first touch of such pages stalls
whichever library touches them next (``docs/performance.md``, typed graphs). The worker
builds the row's layer with :func:`~bench.layers.rows.make_pyg` (the shared weights copied
in) and feeds it :func:`~bench.layers.rows.pyg_inputs` on the case's ``edge_index``, exactly
what the in-process side did.
"""

from __future__ import annotations

import sys

import numpy as np

from ..core.cases import load_case_data
from ..core.device import BenchDevice
from ..layers.rows import make_pyg, pyg_grads, pyg_inputs
from .serving import Side, read_weights, serve

__all__ = ["PyGSide", "main"]


def _versions() -> dict:
    import torch
    import torch_geometric

    return {"torch_geometric": torch_geometric.__version__, "torch": torch.__version__,
            "numpy": np.__version__, "python": sys.version.split()[0],
            "torch_threads": torch.get_num_threads()}


class PyGSide(Side):
    """The PyG layers of one case: its ``edge_index``, features and upstream gradient, and
    the layers built on them by implementation name (``pyg``)."""

    def __init__(self, data_path: str, threads: int):
        import torch

        super().__init__()
        torch.set_num_threads(threads)
        self.torch = torch
        self.host = BenchDevice("host")
        data = load_case_data(data_path, ("edge_index", "edge_type", "H", "dZ"))
        self.edge_index, self.edge_type = data.edge_index, data.edge_type
        self.H, self.dZ = torch.from_numpy(data.H), torch.from_numpy(data.dZ)
        self.Hleaf = self.H.clone().requires_grad_(True)

    def build(self, row: str, impl: str, params: str, k_in: int, k_out: int, heads: int,
              config: dict) -> dict:
        """PyG's layer of ``row`` with the weights in file ``params``."""
        module = make_pyg(row, read_weights(params), k_in, k_out)
        inputs = pyg_inputs(row, self.edge_index, self.host, self.edge_type)
        self.layers[impl] = (row, module, self.dZ[:, :k_out].contiguous(), inputs)
        return {"built": impl, "row": row}

    def forward(self, impl: str):
        """Inference: ``eval()`` under ``torch.no_grad()``."""
        _, module, _, inputs = self.layers[impl]
        module.eval()
        with self.torch.no_grad():
            return module(self.H, *inputs)

    def fwd_bwd(self, impl: str):
        """Training forward and backward: ``(Z, dH)``; fills the parameters' gradients."""
        _, module, dZ, inputs = self.layers[impl]
        module.train()
        module.zero_grad(set_to_none=True)
        self.Hleaf.grad = None
        Z = module(self.Hleaf, *inputs)
        Z.backward(dZ)
        return Z, self.Hleaf.grad

    def check(self, impl: str, out: str) -> dict:
        """Outputs and gradients in our layout, written to ``out`` (``.npz``)."""
        row, module, _, _ = self.layers[impl]
        Z, dH = self.fwd_bwd(impl)
        arrays = {"Z": Z.detach().numpy(), "dH": dH.numpy(),
                  **{f"grad_{k}": v for k, v in pyg_grads(row, module).items()}}
        arrays["Z_eval"] = self.forward(impl).numpy()
        np.savez(out, **arrays)
        return {"out": out, "names": sorted(arrays)}


def main() -> int:
    """Serve requests on stdin."""
    return serve(PyGSide, _versions)


if __name__ == "__main__":
    raise SystemExit(main())
