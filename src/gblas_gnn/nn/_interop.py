"""``from_pyg`` / ``to_pyg`` on the layers that have a PyTorch Geometric twin of the same name.

The conversions live in :mod:`gblas_gnn.nn.pyg`, which sits above the layers (it names each of
them) and installs itself here when :mod:`gblas_gnn.nn` is imported; this mixin only gives each
layer class the two entry points of DESIGN.md, so a layer never imports the conversions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["PyGInterop", "install_conversions"]

#: ``(layer_from_pyg(cls, conv, in_dim), to_pyg(layer))``, installed by :mod:`gblas_gnn.nn.pyg`
_CONVERSIONS: list[tuple[Callable[..., Any], Callable[[Any], Any]]] = []


def install_conversions(layer_from_pyg: Callable[..., Any],
                        to_pyg: Callable[[Any], Any]) -> None:
    """Make ``layer_from_pyg`` and ``to_pyg`` what every layer's ``from_pyg`` / ``to_pyg``
    call."""
    _CONVERSIONS[:] = [(layer_from_pyg, to_pyg)]


def _conversions() -> tuple[Callable[..., Any], Callable[[Any], Any]]:
    if not _CONVERSIONS:
        raise RuntimeError("the PyG conversions are not installed: import gblas_gnn.nn")
    return _CONVERSIONS[0]


class PyGInterop:
    """``Layer.from_pyg(conv)`` and ``layer.to_pyg()`` (see :mod:`gblas_gnn.nn.pyg`)."""

    @classmethod
    def from_pyg(cls, conv, in_dim: int | None = None) -> Any:
        """The layer equal to ``conv``, PyG's layer of the same name: configuration and
        weights copied, in ``conv``'s dtype. ``in_dim`` is needed for ``AGNNConv`` only.
        Needs torch and torch-geometric (``pip install "gblas_gnn[pyg]"``)."""
        return _conversions()[0](cls, conv, in_dim)

    def to_pyg(self) -> Any:
        """PyG's layer of the same name with this layer's configuration and weights, in its
        dtype, in evaluation mode. Needs torch and torch-geometric."""
        return _conversions()[1](self)
