r"""The communication the grid scheme promises: the paper's bound per layer,
:math:`nk/\sqrt{P} + k^2` words per rank for one layer's forward and backward (SC'23 §7,
constant 1; ``docs/design.md``, "Distribution").

``python -m bench comm`` sets the exact count of every collective beside it;
``gblas-gnn train`` prints it beside the bytes each rank sent per epoch.
"""

from __future__ import annotations

import math

__all__ = ["bound_words", "graph_layer_widths", "model_bound_words"]


def bound_words(n: int, k: int, p: int) -> float:
    r"""The paper's per-layer bound :math:`nk/\sqrt{P} + k^2` (words per rank, forward and
    backward of one layer of width k on P processes)."""
    return n * k / math.sqrt(p) + k * k


def graph_layer_widths(model) -> list[int] | None:
    """The width k of every graph layer of ``model`` (the widest feature matrix it moves:
    its input or its output, heads included), found by walking ``children()``; a composed
    module's are the widths of the messages its last forward aggregated; ``None`` when
    the model has no graph layer."""
    from ..nn import AGNNConv, GATConv, GCNConv, GINConv, SGConv, VAConv
    from ..train.checkpoint import named_modules

    widths = []
    for _, m in named_modules(model):
        if isinstance(m, (GATConv, AGNNConv, VAConv, GCNConv, SGConv, GINConv)):
            out = m.out_dim * getattr(m, "heads", 1)
            widths.append(max(int(m.in_dim), int(out)))
        elif m.composed:                 # what its last forward aggregated (after one)
            widths.extend(getattr(m, "graph_widths", ()))
    return widths or None


def model_bound_words(model, n: int, p: int) -> float | None:
    """The bound summed over the graph layers of ``model`` (``None``: no known layers)."""
    widths = graph_layer_widths(model)
    return None if widths is None else sum(bound_words(n, k, p) for k in widths)
