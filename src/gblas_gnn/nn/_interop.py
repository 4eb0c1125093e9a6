"""``from_pyg`` / ``to_pyg`` on the layers that have a PyTorch Geometric twin of the same name.

The conversions live in :mod:`gblas_gnn.nn.pyg` (imported on call, so that torch stays
optional); this mixin only gives each layer class the two entry points of DESIGN.md.
"""

from __future__ import annotations

from typing import Any


class PyGInterop:
    """``Layer.from_pyg(conv)`` and ``layer.to_pyg()`` (see :mod:`gblas_gnn.nn.pyg`)."""

    @classmethod
    def from_pyg(cls, conv, in_dim: int | None = None) -> Any:
        """The layer equal to ``conv``, PyG's layer of the same name: configuration and
        weights copied, in ``conv``'s dtype. ``in_dim`` is needed for ``AGNNConv`` only.
        Needs torch and torch-geometric (``pip install "gblas_gnn[pyg]"``)."""
        from .pyg import layer_from_pyg

        return layer_from_pyg(cls, conv, in_dim)

    def to_pyg(self) -> Any:
        """PyG's layer of the same name with this layer's configuration and weights, in its
        dtype, in evaluation mode. Needs torch and torch-geometric."""
        from .pyg import to_pyg

        return to_pyg(self)
