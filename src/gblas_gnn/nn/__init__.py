"""Layers and models written against the executor interface."""

from .gcn import GCNConv
from .gin import GINConv
from .linear import Linear
from .module import Module
from .sgc import SGConv

__all__ = ["Module", "Linear", "GCNConv", "SGConv", "GINConv"]
