"""Ready-made node-classification models mirroring the PyTorch Geometric examples.

Every builder returns a :class:`~gblas_gnn.nn.Sequential` whose layers are seeded from one
``seed``: each layer (and each :class:`~gblas_gnn.nn.Dropout`) gets its own seed derived from it
with ``numpy.random.SeedSequence(seed).spawn``, so two models built with the same seed are
identical and layers never share a random stream.

=========  ==============================================================================
name       architecture (``F`` = in_dim, ``C`` = num_classes)
=========  ==============================================================================
``gat``    Dropout → GATConv(F, hidden, heads) → ELU → Dropout →
           GATConv(hidden·heads, C, heads=1, concat=False)  (PyG ``examples/gat.py``)
``gcn``    Dropout → GCNConv(F, hidden) → ReLU → Dropout → GCNConv(hidden, C)
           (PyG ``examples/gcn.py``)
``agnn``   Dropout → Linear(F, hidden) → ReLU → AGNNConv(learn_beta=False) →
           AGNNConv(learn_beta=True) … → Dropout → Linear(hidden, C)  (PyG ``examples/agnn.py``)
``va``     Dropout → VAConv(F, hidden, softmax) → ReLU → Dropout → VAConv(hidden, C, softmax)
``sgc``    SGConv(F, C, K)  (PyG ``examples/sgc.py``; optional input dropout)
``gin``    [GINConv([d, hidden, hidden]) → ReLU] × layers → Linear(hidden, hidden) → ReLU →
           Dropout → Linear(hidden, C)  (PyG ``examples/gin.py``, node-level head)
``sage``   Dropout → SAGEConv(F, hidden, aggr) → ReLU → Dropout → SAGEConv(hidden, C, aggr)
           (DGL ``examples/pytorch/graphsage/train_full.py``)
=========  ==============================================================================

The layer classes are imported inside the builders, so this module imports even where a
layer is unavailable.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .activation import ELU, ReLU
from .dropout import Dropout
from .sequential import Sequential

__all__ = ["gat", "gcn", "agnn", "va", "sgc", "gin", "sage", "MODELS", "build",
           "derive_seeds"]


def derive_seeds(seed: int, count: int) -> list[int]:
    """``count`` distinct, reproducible 32-bit seeds derived from ``seed``."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    out: list[int] = []
    for child in np.random.SeedSequence(int(seed)).spawn(count):
        s = int(child.generate_state(1, dtype=np.uint32)[0])
        while s in out:  # astronomically unlikely; keeps the promise "distinct"
            s = (s + 1) % 2**32
        out.append(s)
    return out


def _check_common(in_dim, num_classes, dropout) -> None:
    for name, v in (("in_dim", in_dim), ("num_classes", num_classes)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float, np.number)) \
            or not 0.0 <= float(dropout) < 1.0:
        raise ValueError(f"dropout must be a probability in [0, 1), got {dropout!r}")


def gat(in_dim: int, num_classes: int, hidden: int = 8, heads: int = 8, dropout: float = 0.6,
        seed: int = 0, dtype=np.float32, executor=None, aggr="sum") -> Sequential:
    """Two-layer GAT of Veličković et al. (PyG ``examples/gat.py``).

    ``dropout`` is used both on the features (before each layer) and on the attention
    coefficients inside each :class:`~gblas_gnn.nn.GATConv`; ``aggr`` is every layer's ⊕.
    """
    from .gat import GATConv

    _check_common(in_dim, num_classes, dropout)
    s = derive_seeds(seed, 4)
    kw = {"dtype": dtype, "executor": executor, "aggr": aggr}
    return Sequential(
        Dropout(dropout, seed=s[0], dtype=dtype, executor=executor),
        GATConv(in_dim, hidden, heads=heads, dropout=dropout, seed=s[1], **kw),
        ELU(dtype=dtype),
        Dropout(dropout, seed=s[2], dtype=dtype, executor=executor),
        GATConv(hidden * heads, num_classes, heads=1, concat=False, dropout=dropout,
                seed=s[3], **kw),
    )


def gcn(in_dim: int, num_classes: int, hidden: int = 16, dropout: float = 0.5, seed: int = 0,
        dtype=np.float32, executor=None) -> Sequential:
    """Two-layer GCN of Kipf & Welling (PyG ``examples/gcn.py``, cached normalisation).

    The paper (and the PyG example) apply weight decay 5e-4 to the first layer only: pass
    ``weight_decay={"1.": 5e-4}`` to the optimiser for that.
    """
    from .gcn import GCNConv

    _check_common(in_dim, num_classes, dropout)
    s = derive_seeds(seed, 4)
    kw = {"dtype": dtype, "executor": executor}
    return Sequential(
        Dropout(dropout, seed=s[0], dtype=dtype, executor=executor),
        GCNConv(in_dim, hidden, cached=True, seed=s[1], **kw),
        ReLU(dtype=dtype),
        Dropout(dropout, seed=s[2], dtype=dtype, executor=executor),
        GCNConv(hidden, num_classes, cached=True, seed=s[3], **kw),
    )


def agnn(in_dim: int, num_classes: int, hidden: int = 16, dropout: float = 0.5,
         layers: int = 2, seed: int = 0, dtype=np.float32, executor=None,
         aggr="sum") -> Sequential:
    """AGNN of Thekumparampil et al. (PyG ``examples/agnn.py``): ``layers`` propagation
    layers, the first with a fixed β = 1, the others with a learnable β; ``aggr`` is their ⊕."""
    from .agnn import AGNNConv
    from .linear import Linear

    _check_common(in_dim, num_classes, dropout)
    if isinstance(layers, bool) or not isinstance(layers, (int, np.integer)) or layers < 1:
        raise ValueError(f"layers must be a positive integer, got {layers!r}")
    s = derive_seeds(seed, 4)
    kw = {"dtype": dtype, "executor": executor}
    props = [AGNNConv(hidden, learn_beta=(i > 0), aggr=aggr, **kw) for i in range(layers)]
    return Sequential(
        Dropout(dropout, seed=s[0], dtype=dtype, executor=executor),
        Linear(in_dim, hidden, seed=s[1], **kw),
        ReLU(dtype=dtype),
        *props,
        Dropout(dropout, seed=s[2], dtype=dtype, executor=executor),
        Linear(hidden, num_classes, seed=s[3], **kw),
    )


def va(in_dim: int, num_classes: int, hidden: int = 16, dropout: float = 0.5,
       softmax: bool = True, seed: int = 0, dtype=np.float32, executor=None,
       aggr="sum") -> Sequential:
    """Two-layer vanilla-attention model, shaped like the GCN example with
    :class:`~gblas_gnn.nn.VAConv` in place of GCNConv (softmax-normalised scores by default)."""
    from .va import VAConv

    _check_common(in_dim, num_classes, dropout)
    s = derive_seeds(seed, 4)
    kw = {"dtype": dtype, "executor": executor, "aggr": aggr}
    return Sequential(
        Dropout(dropout, seed=s[0], dtype=dtype, executor=executor),
        VAConv(in_dim, hidden, softmax=softmax, seed=s[1], **kw),
        ReLU(dtype=dtype),
        Dropout(dropout, seed=s[2], dtype=dtype, executor=executor),
        VAConv(hidden, num_classes, softmax=softmax, seed=s[3], **kw),
    )


def sgc(in_dim: int, num_classes: int, K: int = 2, dropout: float = 0.0, seed: int = 0,
        dtype=np.float32, executor=None) -> Sequential:
    """Simplified graph convolution of Wu et al. (PyG ``examples/sgc.py``): one
    ``SGConv(K)``, preceded by feature dropout when ``dropout > 0``."""
    from .sgc import SGConv

    _check_common(in_dim, num_classes, dropout)
    s = derive_seeds(seed, 2)
    layers = [SGConv(in_dim, num_classes, K=K, seed=s[1], dtype=dtype, executor=executor)]
    if dropout > 0:
        layers.insert(0, Dropout(dropout, seed=s[0], dtype=dtype, executor=executor))
    return Sequential(*layers)


def gin(in_dim: int, num_classes: int, hidden: int = 64, layers: int = 2, dropout: float = 0.5,
        eps: float = 0.0, train_eps: bool = False, seed: int = 0, dtype=np.float32,
        executor=None) -> Sequential:
    """GIN of Xu et al. for node classification, after PyG ``examples/gin.py``: ``layers``
    GINConv blocks with a two-layer MLP each, then an MLP head with dropout."""
    from .gin import GINConv
    from .linear import Linear

    _check_common(in_dim, num_classes, dropout)
    if isinstance(layers, bool) or not isinstance(layers, (int, np.integer)) or layers < 1:
        raise ValueError(f"layers must be a positive integer, got {layers!r}")
    s = derive_seeds(seed, layers + 3)
    kw = {"dtype": dtype, "executor": executor}
    mods: list = []
    d = in_dim
    for i in range(layers):
        mods += [GINConv([d, hidden, hidden], eps=eps, train_eps=train_eps, seed=s[i], **kw),
                 ReLU(dtype=dtype)]
        d = hidden
    mods += [Linear(hidden, hidden, seed=s[layers], **kw), ReLU(dtype=dtype),
             Dropout(dropout, seed=s[layers + 1], dtype=dtype, executor=executor),
             Linear(hidden, num_classes, seed=s[layers + 2], **kw)]
    return Sequential(*mods)


def sage(in_dim: int, num_classes: int, hidden: int = 16, dropout: float = 0.5,
         aggr: str = "mean", seed: int = 0, dtype=np.float32, executor=None) -> Sequential:
    """Two-layer GraphSAGE for full-graph node classification (DGL's
    ``examples/pytorch/graphsage/train_full.py``: hidden 16, dropout 0.5 on each layer's
    input); ``aggr`` is each layer's neighbourhood aggregation (mean, max or sum)."""
    from .sage import SAGEConv

    _check_common(in_dim, num_classes, dropout)
    s = derive_seeds(seed, 4)
    kw = {"dtype": dtype, "executor": executor, "aggr": aggr}
    return Sequential(
        Dropout(dropout, seed=s[0], dtype=dtype, executor=executor),
        SAGEConv(in_dim, hidden, seed=s[1], **kw),
        ReLU(dtype=dtype),
        Dropout(dropout, seed=s[2], dtype=dtype, executor=executor),
        SAGEConv(hidden, num_classes, seed=s[3], **kw),
    )


MODELS: dict[str, Callable[..., Sequential]] = {
    "gat": gat, "gcn": gcn, "agnn": agnn, "va": va, "sgc": sgc, "gin": gin, "sage": sage,
}


def build(name: str, in_dim: int, num_classes: int, **kw) -> Sequential:
    """Build the model registered under ``name`` (see :data:`MODELS`) with the builder's
    keyword arguments ``kw``."""
    if not isinstance(name, str) or name.lower() not in MODELS:
        raise ValueError(f"unknown model {name!r}; available: {', '.join(sorted(MODELS))}")
    return MODELS[name.lower()](in_dim, num_classes, **kw)
