"""The layer rows of ``python -m bench run``: our layer, PyG's twin, DGL's, one set of weights.

A row (:class:`Row`) names how to build each side for ``k_in → k_out``:

===============  ====================================  ======================================
row              ours                                  PyG (``add_self_loops=False``)
===============  ====================================  ======================================
``gat``          ``GATConv(k_in, k_out, heads=1)``     ``GATConv(k_in, k_out, heads=1)``
``gat-h4``       ``GATConv(k_in, k_out/4, heads=4)``   ``GATConv(k_in, k_out/4, heads=4)``
``agnn``         ``AGNNConv(k_in)`` (learnable β)      ``AGNNConv(requires_grad=True)``
``gcn``          ``GCNConv(k_in, k_out)``              ``GCNConv(k_in, k_out, cached=True)``
``sgc``          ``SGConv(k_in, k_out, K=2,            ``SGConv(k_in, k_out, K=2)``
                 cached=False)``
``gin``          ``GINConv([k_in, k_out, k_out],       ``GINConv(MLP([k_in, k_out, k_out]),
                 train_eps=True)``                     train_eps=True)``
``gatv2``,       ``GATv2Conv(k_in, k_out/h,            ``GATv2Conv(k_in, k_out/h, heads=h,
``gatv2-h4``     heads=h)`` (composed)                 share_weights=False)``
``transformer``, ``TransformerConv(k_in, k_out/h,      ``TransformerConv(k_in, k_out/h,
``-h4``          heads=h)`` (composed)                 heads=h, root_weight=True)``
``sage``         ``SAGEConv(k_in, k_out)`` (mean)      ``SAGEConv(k_in, k_out, aggr="mean")``
``gat-e``,       the ``-h4`` rows with ``edge_dim=8``  the same with ``edge_dim=8`` (PyG
``gatv2-e``,     (no loops added: the looped graph     GATv2's and Transformer's ``lin_edge``
``transformer-e`` carries every edge's features)      without bias)
``gine``         ``GINEConv([k_in, k_out, k_out],      ``GINEConv(MLP, train_eps=True,
                 train_eps=True, edge_dim=8)``         edge_dim=8)``
``edgegat``      DGL's ``EdgeGATConv`` (4 heads,       the same model as a
                 ``edge_dim=8``) composed              ``MessagePassing``
                 (:mod:`.edge_gat`)                    (:mod:`.edge_gat`)
``rgcn``,        ``RGCNConv(k_in, k_out, 6)`` (mean;   ``RGCNConv(k_in, k_out, 6)`` (its loop
``rgcn-b4``      ``num_bases=4``)                      path: per-relation mean)
===============  ====================================  ======================================

Our side of a row is a factory ``ours(k_in, k_out, seed, executor) -> Module``; ``None``
leaves the row to PyG and DGL (then PyG is the reference of the agreement). The ``gatv2`` and
``transformer`` rows time our composed layers (forward written with ``gg.ops``, backward
derived); their ``params`` use the names and layouts of :func:`_gatv2_init` and
:func:`_transformer_init` (:mod:`bench.peers.mapping` holds where each sits in PyG and DGL).

**One set of weights.** :func:`shared_params` gives the row's arrays in our layout: our
layer's seeded initialisation when it has one, else the row's ``init``. PyG's and DGL's
layers get exactly these values (:mod:`bench.peers.mapping`), and their gradients come back
in the same layout, so every side is compared name by name.

**Edge features.** The rows with ``edge_dim`` get :data:`EDGE_DIM` seeded features per stored
edge of the self-looped pattern (:func:`edge_features`, in ``edge_index``'s order): PyG as
``edge_attr``, ours in the graph (``Graph.from_edge_index(..., edge_attr=...)``), the same
numbers, and no layer adds a loop.

**Relations.** The ``rgcn`` rows give every stored edge of the self-looped pattern one of
:data:`RELATIONS` relation ids, seeded (:func:`edge_types`): PyG as ``edge_type``, ours in the
graph (``Graph.from_edge_index(..., edge_type=...)``). PyG's segment-matmul path, which
means over all in-edges rather than per relation, is switched off.

**One graph.** PyG and DGL get the edge list of our self-looped pattern and add no loop
(``add_self_loops=False``); the attention and convolution layers of ours add the missing
loops themselves; ``gin``, ``transformer`` and ``sage`` add none in PyG, so ours is handed the
self-looped graph there (``Row.looped``). PyG's ``GCNConv`` gets ``cached=True`` because our
:class:`~gblas_gnn.graph.Graph` caches its normalised adjacency too; ``SGConv`` is uncached on
every side (PyG's and our cache would keep ``Â^K H`` itself, which a backward to ``H``
cannot use). Torch is imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..peers.mapping import PYG, load_params, read_params
from .edge_gat import edge_gat_init, edge_gat_ours, edge_gat_pyg

__all__ = ["Row", "ROWS", "LAYERS", "DEFAULT_LAYERS", "EDGE_DIM", "RELATIONS", "make_ours",
           "make_pyg", "shared_params", "ours_graph", "pyg_inputs", "edge_features",
           "edge_types", "copy_weights",
           "pyg_grads", "pyg_params"]

#: features per edge of the edge-feature rows
EDGE_DIM = 8
#: relations of the ``rgcn`` rows
RELATIONS = 6


@dataclass(frozen=True)
class Row:
    """One layer row: how to build each side (see the module docstring).

    Attributes
    ----------
    name : str
        Command-line name.
    pyg : callable
        ``(k_in, k_out) -> torch.nn.Module``, weights not yet copied.
    ours : callable or None
        ``(k_in, k_out, seed, executor) -> Module``; None while we have no such layer.
    init : callable or None
        ``(k_in, k_out, rng) -> {name: float32 array}`` in our layout, the weights when
        ``ours`` is None.
    heads : int
        Attention heads (``k_out`` must be a multiple).
    looped : bool
        Hand ours the self-looped graph (PyG's layer adds no loop of its own either).
    config : dict
        What the DGL side needs besides the weights (:mod:`bench.peers.dgl_layers`).
    dgl : tuple of str
        DGL implementations of the row: ``dgl`` (``dgl.nn``), ``dgl.sparse``.
    zero : tuple of str
        Outputs that are zero in exact arithmetic, compared on the scale of their kind
        (:func:`~bench.core.agreement.compare`).
    edge_dim : int
        Features per edge the row's layers read (0: none).
    relations : int
        Relations of the row's typed graph (0: untyped).
    tol : float
        The row's own floor on the agreement tolerance (0: the case's). The rows whose kink
        reads an edge term need one. GATv2's LeakyReLU reads ``W_l h_j + W_r h_i + W_e e_ji``
        and GINE's ReLU ``h_j + W_e e_ji + b_e``; each side rounds the edge term its own way
        in float32 (PyG by a dense product, ours inside the edge pass). So at case M a few of
        the millions of pre-activations fall on the other side of the kink, and their slope
        (1 or 0.2, 1 or 0) differs: a handful of vertices' input gradients move by a few
        percent of the largest. In float64 GATv2's two layers differ at two vertices of 10⁵
        by 5e-4 and elsewhere by 4e-8 (one model's weights rounded through float32): what a
        kink flip looks like. The forward agrees to 1e-6 either way. GATv2 without edge
        features flips the same way on an AMD EPYC box (4 heads × 8 at M: 0.8 % of the input
        gradient's scale at one vertex, the same at the commit before any of this work; PyG
        rounds ``W_l h_j + W_r h_i`` through another BLAS there), while on the Intel box it
        agreed to 5e-6: its rows carry the floor too. So do GAT's, whose LeakyReLU reads
        ``a_dst·x_i + a_src·x_j``: at ER1M (17 M pre-activations) one in-edge of vertex
        80 922 has the input 2.0e-8 (float64), and the two libraries' float32 rounding
        takes it to either side, moving 58 input-gradient entries of two vertices by up to
        1.4e-3 of the largest (GAT 4×8: 3.2e-3, and ``att_dst``'s gradient by 1.1e-4), on
        the cpu executor and on an H200 alike; at M and L they agree to 4e-6. Their floor,
        5e-3, stays under what a 1 % error in ``att_src`` moves (7.5e-3 in the output, 3e-2
        to 9e-2 in the gradients: ``test_weight_mismatch_aborts_the_case``).
    """

    name: str
    pyg: Callable[[int, int], Any]
    ours: Callable[[int, int, int, str], Any] | None = None
    init: Callable[[int, int, np.random.Generator], dict] | None = None
    heads: int = 1
    looped: bool = False
    config: dict = field(default_factory=dict)
    dgl: tuple[str, ...] = ()
    zero: tuple[str, ...] = ()
    edge_dim: int = 0
    tol: float = 0.0
    relations: int = 0


def _pyg_nn():
    from torch_geometric import nn as pnn

    return pnn


def _edge_kw(edge_dim: int) -> dict:
    """Our layer's keywords for ``edge_dim`` features: the looped graph carries the loops."""
    return {"edge_dim": edge_dim, "add_self_loops": False} if edge_dim else {}


def _gat_ours(heads: int, edge_dim: int = 0):
    def make(k_in, k_out, seed, executor):
        from gblas_gnn import nn

        return nn.GATConv(k_in, k_out // heads, heads=heads, seed=seed, executor=executor,
                          **_edge_kw(edge_dim))
    return make


def _gat_pyg(heads: int, edge_dim: int = 0):
    return lambda k_in, k_out: _pyg_nn().GATConv(k_in, k_out // heads, heads=heads,
                                                 dropout=0.0, add_self_loops=False,
                                                 edge_dim=edge_dim or None)


def _agnn_ours(k_in, k_out, seed, executor):
    from gblas_gnn import nn

    if k_in != k_out:
        raise ValueError(f"agnn keeps the feature size: k_in ({k_in}) must equal "
                         f"k_out ({k_out})")
    return nn.AGNNConv(k_in, seed=seed, executor=executor)


def _gcn_ours(k_in, k_out, seed, executor):
    from gblas_gnn import nn

    return nn.GCNConv(k_in, k_out, seed=seed, executor=executor)


#: propagation steps of the ``sgc`` row on every side
SGC_K = 2


def _sgc_ours(k_in, k_out, seed, executor):
    from gblas_gnn import nn

    return nn.SGConv(k_in, k_out, K=SGC_K, cached=False, seed=seed, executor=executor)


def _gin_ours(k_in, k_out, seed, executor):
    from gblas_gnn import nn

    return nn.GINConv([k_in, k_out, k_out], eps=0.0, train_eps=True, seed=seed,
                      executor=executor)


def _gin_pyg(k_in, k_out):
    pnn = _pyg_nn()
    return pnn.GINConv(pnn.MLP([k_in, k_out, k_out], act="relu", norm=None, dropout=0.0),
                       eps=0.0, train_eps=True)


def _random(rng: np.random.Generator, shape: tuple[int, ...], scale: float | None = None):
    """Glorot-uniform weights, or small normal values for biases (``scale``): biases are
    not zero, so that a swapped bias shows in the agreement."""
    from gblas_gnn.nn.init import glorot

    if scale is not None:
        return (rng.standard_normal(shape) * scale).astype(np.float32)
    return glorot(shape, rng, np.float32)


def _with_edge_weight(edge_dim: int, init):
    """``init`` plus ``W_e`` (edge_dim, h·f), the edge features' projection, when
    ``edge_dim``."""
    if not edge_dim:
        return init

    def with_edges(k_in, k_out, rng):
        return {**init(k_in, k_out, rng), "W_e": _random(rng, (edge_dim, k_out))}
    return with_edges


def _gatv2_init(heads: int, edge_dim: int = 0):
    """GATv2 (PyG ``share_weights=False``) in our layout: ``W_l``, ``W_r`` (k_in, h·f) for
    the sources and targets with biases ``b_l``, ``b_r``; ``att`` (h, f); ``bias`` (h·f);
    ``W_e`` with ``edge_dim``."""
    def init(k_in, k_out, rng):
        f = k_out // heads
        return {"W_l": _random(rng, (k_in, k_out)), "b_l": _random(rng, (k_out,), 0.1),
                "W_r": _random(rng, (k_in, k_out)), "b_r": _random(rng, (k_out,), 0.1),
                "att": _random(rng, (heads, f)), "bias": _random(rng, (k_out,), 0.1)}
    return _with_edge_weight(edge_dim, init)


def _transformer_init(edge_dim: int = 0):
    """TransformerConv (``root_weight=True``, ``beta=False``) in our layout: ``W_q``,
    ``W_k``, ``W_v``, ``W_skip`` (k_in, h·f) and their biases ``b_q``, ``b_k``, ``b_v``,
    ``b_skip`` (h·f); ``W_e`` with ``edge_dim``. The head split is in the layer, not in the
    arrays."""
    def init(k_in, k_out, rng):
        out = {}
        for p in ("q", "k", "v", "skip"):
            out[f"W_{p}"] = _random(rng, (k_in, k_out))
            out[f"b_{p}"] = _random(rng, (k_out,), 0.1)
        return out
    return _with_edge_weight(edge_dim, init)


def _gatv2_ours(heads: int, edge_dim: int = 0):
    def make(k_in, k_out, seed, executor):
        from gblas_gnn import nn

        return nn.GATv2Conv(k_in, k_out // heads, heads=heads, seed=seed, executor=executor,
                            **_edge_kw(edge_dim))
    return make


def _transformer_ours(heads: int, edge_dim: int = 0):
    def make(k_in, k_out, seed, executor):
        from gblas_gnn import nn

        return nn.TransformerConv(k_in, k_out // heads, heads=heads, seed=seed,
                                  executor=executor, edge_dim=edge_dim or None)
    return make


def _gine_ours(k_in, k_out, seed, executor):
    from gblas_gnn import nn

    return nn.GINEConv([k_in, k_out, k_out], eps=0.0, train_eps=True, edge_dim=EDGE_DIM,
                       seed=seed, executor=executor)


def _gine_pyg(k_in, k_out):
    pnn = _pyg_nn()
    return pnn.GINEConv(pnn.MLP([k_in, k_out, k_out], act="relu", norm=None, dropout=0.0),
                        eps=0.0, train_eps=True, edge_dim=EDGE_DIM)


def _sage_ours(k_in, k_out, seed, executor):
    from gblas_gnn import nn

    return nn.SAGEConv(k_in, k_out, aggr="mean", seed=seed, executor=executor)


def _rgcn_ours(num_bases: int | None):
    def make(k_in, k_out, seed, executor):
        from gblas_gnn import nn

        return nn.RGCNConv(k_in, k_out, RELATIONS, num_bases=num_bases, seed=seed,
                           executor=executor)
    return make


def _rgcn_pyg(num_bases: int | None):
    def make(k_in, k_out):
        from torch_geometric import backend

        backend.use_segment_matmul = False       # the per-relation mean (see above)
        return _pyg_nn().RGCNConv(k_in, k_out, RELATIONS, num_bases=num_bases)
    return make


def _gatv2_pyg(heads: int, edge_dim: int = 0):
    return lambda k_in, k_out: _pyg_nn().GATv2Conv(k_in, k_out // heads, heads=heads,
                                                   dropout=0.0, add_self_loops=False,
                                                   share_weights=False,
                                                   edge_dim=edge_dim or None)


def _transformer_pyg(heads: int, edge_dim: int = 0):
    return lambda k_in, k_out: _pyg_nn().TransformerConv(k_in, k_out // heads, heads=heads,
                                                         root_weight=True,
                                                         edge_dim=edge_dim or None)


ROWS: dict[str, Row] = {
    "gat": Row("gat", _gat_pyg(1), _gat_ours(1), dgl=("dgl", "dgl.sparse"), tol=5e-3),
    "gat-h4": Row("gat-h4", _gat_pyg(4), _gat_ours(4), heads=4, dgl=("dgl", "dgl.sparse"),
                  tol=5e-3),
    "agnn": Row("agnn", lambda k_in, k_out: _pyg_nn().AGNNConv(requires_grad=True,
                                                               add_self_loops=False),
                _agnn_ours, dgl=("dgl",)),
    "gcn": Row("gcn", lambda k_in, k_out: _pyg_nn().GCNConv(
        k_in, k_out, add_self_loops=False, normalize=True, cached=True), _gcn_ours,
        dgl=("dgl",)),
    "sgc": Row("sgc", lambda k_in, k_out: _pyg_nn().SGConv(k_in, k_out, K=SGC_K,
                                                           add_self_loops=False),
               _sgc_ours, config={"K": SGC_K}, dgl=("dgl",)),
    "gin": Row("gin", _gin_pyg, _gin_ours, looped=True, dgl=("dgl",)),
    "gatv2": Row("gatv2", _gatv2_pyg(1), _gatv2_ours(1), init=_gatv2_init(1),
                 dgl=("dgl",), tol=2e-2),
    "gatv2-h4": Row("gatv2-h4", _gatv2_pyg(4), _gatv2_ours(4), init=_gatv2_init(4), heads=4,
                    dgl=("dgl",), tol=2e-2),
    "transformer": Row("transformer", _transformer_pyg(1), _transformer_ours(1),
                       init=_transformer_init(), looped=True, zero=("grad_b_k",)),
    "transformer-h4": Row("transformer-h4", _transformer_pyg(4), _transformer_ours(4),
                          init=_transformer_init(), heads=4, looped=True,
                          zero=("grad_b_k",)),
    "sage": Row("sage", lambda k_in, k_out: _pyg_nn().SAGEConv(k_in, k_out, aggr="mean"),
                _sage_ours, looped=True, dgl=("dgl",)),
    "gat-e": Row("gat-e", _gat_pyg(4, EDGE_DIM), _gat_ours(4, EDGE_DIM), heads=4,
                 edge_dim=EDGE_DIM, tol=1e-2),
    "gatv2-e": Row("gatv2-e", _gatv2_pyg(4, EDGE_DIM), _gatv2_ours(4, EDGE_DIM),
                   init=_gatv2_init(4, EDGE_DIM), heads=4, edge_dim=EDGE_DIM, tol=2e-2),
    "transformer-e": Row("transformer-e", _transformer_pyg(4, EDGE_DIM),
                         _transformer_ours(4, EDGE_DIM), init=_transformer_init(EDGE_DIM),
                         heads=4, zero=("grad_b_k",), edge_dim=EDGE_DIM),
    "gine": Row("gine", _gine_pyg, _gine_ours, edge_dim=EDGE_DIM, tol=1e-1,
                config={"edge_dim": EDGE_DIM}, dgl=("dgl",)),
    "edgegat": Row("edgegat", edge_gat_pyg(4, EDGE_DIM), edge_gat_ours(4, EDGE_DIM),
                   init=edge_gat_init(4, EDGE_DIM), heads=4, edge_dim=EDGE_DIM,
                   config={"edge_dim": EDGE_DIM}, dgl=("dgl",)),
    "rgcn": Row("rgcn", _rgcn_pyg(None), _rgcn_ours(None), relations=RELATIONS,
                config={"relations": RELATIONS}, dgl=("dgl",)),
    "rgcn-b4": Row("rgcn-b4", _rgcn_pyg(4), _rgcn_ours(4), relations=RELATIONS,
                   config={"relations": RELATIONS, "bases": 4}, dgl=("dgl",)),
}

#: every row, in report order
LAYERS = tuple(ROWS)
#: the rows ``python -m bench run`` runs unless ``--layers`` says otherwise
DEFAULT_LAYERS = ("gat", "agnn", "gcn")


def get_row(name: str) -> Row:
    """The row called ``name``; ``ValueError`` with the valid names otherwise."""
    if name not in ROWS:
        raise ValueError(f"unknown layer {name!r}; choose from {LAYERS}")
    return ROWS[name]


def _check_width(row: Row, k_out: int) -> None:
    if k_out % row.heads:
        raise ValueError(f"{row.name}: k_out ({k_out}) must be a multiple of its "
                         f"{row.heads} heads")


def make_ours(name: str, k_in: int, k_out: int, seed: int = 0, executor: str = "cpu"):
    """Our layer of row ``name`` (float32) on ``executor``, seeded initialisation (the same
    weights on every executor); ``ValueError`` when the row has no layer of ours yet."""
    row = get_row(name)
    if row.ours is None:
        raise ValueError(f"{name}: we have no such layer yet (the row runs PyG and DGL only)")
    _check_width(row, k_out)
    return row.ours(k_in, k_out, seed, executor)


def shared_params(name: str, k_in: int, k_out: int, ours=None,
                  seed: int = 0) -> dict[str, np.ndarray]:
    """The row's one set of weights (float32 host arrays, our layout): the row's seeded
    ``init`` when it has one (nonzero biases, so that a swapped bias shows in the agreement;
    copied into ``ours`` when given), else ``ours``'s own parameters."""
    row = get_row(name)
    if row.init is not None:
        _check_width(row, k_out)
        params = row.init(k_in, k_out, np.random.default_rng(seed))
        if ours is not None:
            for k, v in params.items():
                ours.params[k][...] = ours.executor.asarray(v)
        return params
    if ours is None:
        raise ValueError(f"{name}: its weights come from our layer; pass it as ours=")
    from gblas_gnn.executors import to_numpy

    return {k: np.ascontiguousarray(to_numpy(v)) for k, v in ours.params.items()}


def edge_features(m: int, f: int) -> np.ndarray:
    """Seeded standard-normal features ``(m, f)`` (float32) of a case's ``m`` stored edges
    (its self-looped pattern, in ``edge_index``'s order): the same numbers on every side."""
    return np.random.default_rng(2024).standard_normal((m, f), dtype=np.float32)


def edge_types(m: int, relations: int, given: np.ndarray | None = None) -> np.ndarray:
    """The relation ids of a case's ``m`` edges (in ``edge_index``'s order): a typed case's
    own (``given``, :attr:`~bench.core.cases.CaseData.edge_type`), else seeded ids in
    ``[0, relations)`` of its self-looped pattern; the same on every side."""
    if given is not None and given.size:
        if given.size != m or given.max() >= relations:
            raise ValueError(f"the case's {given.size} relation ids in [0, {given.max() + 1}) "
                             f"do not fit {m} edges of {relations} relations")
        return given
    return np.random.default_rng(2025).integers(0, relations, m)


def _check_typed(row: Row, edge_type: np.ndarray | None) -> None:
    if edge_type is not None and edge_type.size and not row.relations:
        raise ValueError(f"{row.name}: a typed case's edges carry relations (a pair may appear "
                         "once per relation); run its rows with relations (rgcn, rgcn-b4)")


def ours_graph(name: str, g, edge_index: np.ndarray | None = None,
               edge_type: np.ndarray | None = None):
    """The graph our layer of row ``name`` is called on: ``g``, its self-looped form, or for
    a row with ``edge_dim`` (``relations``) the self-looped ``edge_index`` (PyG's) carrying
    :func:`edge_features` (:func:`edge_types`; a typed case's ``edge_index`` and its own
    ``edge_type``)."""
    row = get_row(name)
    _check_typed(row, edge_type)
    if row.edge_dim or row.relations:
        if edge_index is None:
            raise ValueError(f"{name}: reads edge features or relations; pass the case's "
                             "edge_index")
        import gblas_gnn as gg

        m = edge_index.shape[1]
        if row.relations:
            return gg.Graph.from_edge_index(edge_index, g.n, edge_type=edge_types(
                m, row.relations, edge_type), num_relations=row.relations, dtype=np.float32)
        feats = edge_features(m, row.edge_dim)
        return gg.Graph.from_edge_index(edge_index, g.n, edge_attr=feats, dtype=np.float32)
    return g.with_self_loops() if row.looped else g


def pyg_inputs(name: str, edge_index: np.ndarray, device,
               edge_type: np.ndarray | None = None) -> tuple:
    """What PyG's layer of row ``name`` takes after ``x``, on ``device`` (a
    :class:`~bench.core.device.BenchDevice`): ``(edge_index,)``, plus the
    :func:`edge_features` for a row with ``edge_dim`` or the relation ids
    (:func:`edge_types`, a typed case's ``edge_type``) for a row with relations."""
    row = get_row(name)
    _check_typed(row, edge_type)
    ei = device.tensor(edge_index)
    if row.relations:
        return ei, device.tensor(edge_types(edge_index.shape[1], row.relations, edge_type))
    if not row.edge_dim:
        return (ei,)
    return ei, device.tensor(edge_features(edge_index.shape[1], row.edge_dim))


def make_pyg(name: str, params: dict[str, np.ndarray], k_in: int, k_out: int) -> Any:
    """The PyG layer of row ``name`` with ``params`` (our layout) copied in."""
    row = get_row(name)
    _check_width(row, k_out)
    layer = row.pyg(k_in, k_out)
    copy_weights(name, params, layer)
    return layer


def copy_weights(name: str, params: dict[str, np.ndarray], layer) -> None:
    """Copy ``params`` (our layout) into the PyG ``layer`` (float32, exact)."""
    load_params(layer, PYG[name], params)


def pyg_grads(name: str, layer) -> dict[str, np.ndarray]:
    """The PyG layer's parameter gradients in our layout (missing ones as zeros)."""
    return read_params(layer, PYG[name], grads=True)


def pyg_params(name: str, layer) -> dict[str, np.ndarray]:
    """The PyG layer's parameters in our layout."""
    return read_params(layer, PYG[name])
