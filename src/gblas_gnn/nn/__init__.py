"""Layers and models written against the executor interface."""

from . import (
           models,
           pyg,  # noqa: F401  (installs every layer's from_pyg / to_pyg)
)
from .activation import ELU, Identity, ReLU
from .agnn import AGNNConv
from .dropout import Dropout
from .gat import GATConv
from .gatv2 import GATv2Conv
from .gcn import GCNConv
from .gin import GINConv
from .gine import GINEConv
from .hgt import HGTConv
from .linear import Linear
from .module import Module
from .rgcn import RGCNConv
from .sage import SAGEConv
from .sequential import Sequential
from .sgc import SGConv
from .transformer import TransformerConv
from .va import VAConv

__all__ = ["Module", "Linear", "VAConv", "AGNNConv", "GATConv", "GATv2Conv", "TransformerConv",
           "GCNConv", "SGConv", "GINConv", "GINEConv", "SAGEConv", "RGCNConv", "HGTConv",
           "ReLU", "ELU",
           "Identity", "Dropout", "Sequential", "models"]
