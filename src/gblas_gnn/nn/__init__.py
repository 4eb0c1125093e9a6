"""Layers and models written against the executor interface."""

from .agnn import AGNNConv
from .gat import GATConv
from .gcn import GCNConv
from .gin import GINConv
from .linear import Linear
from .module import Module
from .sgc import SGConv
from .va import VAConv

__all__ = ["Module", "Linear", "VAConv", "AGNNConv", "GATConv", "GCNConv", "SGConv", "GINConv"]
