"""The benchmark cases and the one data set each builds (graph, features, upstream gradient).

Both implementations see the same data: our :class:`~gblas_gnn.graph.Graph` ``g`` (as
generated, duplicates merged) and, for PyTorch Geometric, the ``edge_index`` of
``g.with_self_loops()`` — exactly the pattern our layers run on, so no layer on either side
adds or removes an edge while timed (PyG layers are built with ``add_self_loops=False``).

A *typed* case (``MT``, ``tinyT``) is the seeded typed graph of :func:`typed_graph` in its
homogeneous form, for the rows with relations alone: its ``edge_index`` is every relation's
edges (a pair that carries two relations appears twice, as in PyG) with their relation ids in
``edge_type``, no loop added.

A case's arrays can be written to one ``.npz`` (:func:`save_case_data`) that the
fresh-subprocess workers read back (:func:`load_case_data`) without regenerating the graph,
so their peak RSS is that of the layer, not of the generator.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

__all__ = ["Case", "CASES", "CaseData", "get_case", "with_width", "build_case_data",
           "save_case_data", "load_case_data", "graph_from_csr", "typed_graph", "TYPES",
           "TYPED_RELATIONS"]

#: the typed graph's vertex types (type, share of n)
TYPES = (("paper", 0.50), ("author", 0.35), ("field", 0.15))
#: its relations (edge type, share of the edges), each with its reverse (as many edges again)
TYPED_RELATIONS = ((("paper", "cites", "paper"), 0.20), (("author", "writes", "paper"), 0.15),
                   (("paper", "has_topic", "field"), 0.15))


def typed_graph(n: int, degree: int, seed: int = 0):
    """The seeded typed graph issue 36 sets (a :class:`~gblas_gnn.HeteroGraph`): three vertex
    types (papers 50 %, authors 35 %, fields 15 % of ``n``) and six relations, three and
    their reverses (PyG's ``ToUndirected``: cites, writes, has_topic), about ``n · degree``
    edges over them (cites and its reverse 20 % each, the others 15 % each), drawn by
    :func:`gblas_gnn.data.typed_random` (pairs uniform per relation, each once)."""
    from gblas_gnn.data import typed_random

    nodes = {t: max(int(share * n), 1) for t, share in TYPES}
    return typed_random(nodes, {key: int(share * n * degree) for key, share in TYPED_RELATIONS},
                        seed=seed, reverse=True)


@dataclass(frozen=True)
class Case:
    """One benchmark case.

    Attributes
    ----------
    name : str
        Command-line name (``tiny``, ``M``, ``L``, ``XL``, ...).
    graph : dict
        ``{"kind": "erdos_renyi", "n": int, "degree": float}`` or
        ``{"kind": "kronecker", "scale": int, "edge_factor": int}`` (seed 0).
    k_in, k_out : int
        Input and output feature sizes of the benchmarked layer(s).
    kind : str
        ``"layer"``: one layer, forward and forward+backward timed, interleaved with PyG in
        one process. ``"epoch"``: a full training epoch (forward + backward + Adam step) of a
        ``num_layers``-layer GAT, each implementation in its own guarded subprocess.
    num_layers : int
        Depth of the ``epoch`` model.
    description : str
        One line for reports.
    """

    name: str
    graph: dict
    k_in: int
    k_out: int
    kind: str = "layer"
    num_layers: int = 1
    description: str = ""
    targets: dict = field(default_factory=dict)


_LAYER_TARGETS = {"speedup_fwd_bwd": {"gat": 5.0, "agnn": 5.0, "gcn": 1.5},
                  "gat_fwd_over_spmm_max": 3.0}

CASES: dict[str, Case] = {
    "tiny": Case("tiny", {"kind": "erdos_renyi", "n": 300, "degree": 8}, 16, 16,
                 description="smoke test: Erdős–Rényi n=300, degree 8, k=16"),
    "dry": Case("dry", {"kind": "erdos_renyi", "n": 48, "degree": 4}, 8, 8,
                description="dry run of the GPU study in the simulator: Erdős–Rényi n=48, "
                            "degree 4, k=8"),
    "M": Case("M", {"kind": "erdos_renyi", "n": 100_000, "degree": 16}, 32, 32,
              description="random graph n=100 000, average degree 16, k_in=k_out=32",
              targets=_LAYER_TARGETS),
    "L": Case("L", {"kind": "kronecker", "scale": 20, "edge_factor": 16}, 32, 32,
              description="Kronecker scale 20, edge factor 16, k=32",
              targets={**_LAYER_TARGETS, "memory_ratio_max": 1 / 3}),
    "KM": Case("KM", {"kind": "kronecker", "scale": 17, "edge_factor": 16}, 32, 32,
               description="Kronecker scale 17, edge factor 16, k=32: the power-law graph "
                           "of M's size (n = 131 072)"),
    "ER1M": Case("ER1M", {"kind": "erdos_renyi", "n": 1_000_000, "degree": 16}, 32, 32,
                 description="random graph n=1 000 000, average degree 16 (16 M edges), "
                             "k_in=k_out=32", targets=_LAYER_TARGETS),
    "XL": Case("XL", {"kind": "kronecker", "scale": 22, "edge_factor": 16}, 16, 16,
               kind="epoch", num_layers=3,
               description="Kronecker scale 22, edge factor 16, k=16: one training epoch "
                           "(fwd + bwd + Adam) of a 3-layer GAT",
               targets={"peak_rss_max_gib": 24.0}),
    "MT": Case("MT", {"kind": "typed", "n": 100_000, "degree": 16}, 32, 32,
               description="typed graph n=100 000 (papers, authors, fields; 3 relations and "
                           "their reverses), 1.6 M edges, k=32: the relation rows"),
    "tinyT": Case("tinyT", {"kind": "typed", "n": 300, "degree": 8}, 16, 16,
                  description="smoke test of the typed case: n=300, degree 8, k=16"),
    "tinyXL": Case("tinyXL", {"kind": "kronecker", "scale": 9, "edge_factor": 16}, 16, 16,
                   kind="epoch", num_layers=3,
                   description="smoke test of the XL recipe: Kronecker scale 9, k=16, "
                               "3-layer GAT epoch"),
}


def get_case(name: str) -> Case:
    """The :class:`Case` called ``name``; ``KeyError`` with the valid names otherwise."""
    try:
        return CASES[name]
    except KeyError:
        raise KeyError(f"unknown case {name!r}; choose from {sorted(CASES)}") from None


def with_width(case: Case, k: int) -> Case:
    """``case`` with feature width ``k`` in and out, named ``<name>-k<k>``."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return replace(case, name=f"{case.name}-k{k}", k_in=k, k_out=k,
                   description=f"{case.description.rsplit(', k', 1)[0]}, k_in=k_out={k}")


def case_dict(case: Case) -> dict:
    """The case as a JSON-ready dict."""
    return asdict(case)


@dataclass
class CaseData:
    """The arrays of one case.

    Attributes
    ----------
    n : int
        Number of vertices.
    indptr, indices : ndarray of int64
        CSR of the generated adjacency ``A`` (row = target, column = source), no self loops
        added; our layers get ``Graph(A)`` and add the missing loops themselves.
    edge_index : ndarray of int64, shape (2, m)
        PyG's edge list of ``A`` *with* the self loops our layers add: ``edge_index[0]`` =
        source (column of A), ``edge_index[1]`` = target (row of A), in CSR order.
    H : ndarray of float32, shape (n, k_in)
        Input features.
    dZ : ndarray of float32, shape (n, k_out)
        Upstream gradient used for every backward.
    y : ndarray of int64, shape (n,)
        Class labels (``k_out`` classes) for the ``epoch`` cases' cross-entropy loss.
    edge_type : ndarray of int64, shape (m,) or (0,)
        A typed case's relation id of every column of ``edge_index`` (empty otherwise).
    """

    n: int
    indptr: np.ndarray
    indices: np.ndarray
    edge_index: np.ndarray
    H: np.ndarray
    dZ: np.ndarray
    y: np.ndarray
    edge_type: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def typed(self) -> bool:
        """Whether the case is typed (its ``edge_index`` carries relation ids)."""
        return self.edge_type.size > 0

    @property
    def nnz(self) -> int:
        """Stored edges of ``A`` (without added self loops)."""
        return int(self.indices.shape[0])

    @property
    def nnz_looped(self) -> int:
        """Edges the layers run on (``A`` plus the missing self loops)."""
        return int(self.edge_index.shape[1])


def graph_from_csr(n: int, indptr: np.ndarray, indices: np.ndarray):
    """Our :class:`~gblas_gnn.graph.Graph` of a 0/1 CSR pattern (arrays are taken over).

    Parameters
    ----------
    n : int
        Number of vertices.
    indptr, indices : ndarray of int64
        Sorted CSR (row = target); the arrays must own their data (they are moved into
        GraphBLAS without a copy).
    """
    import graphblas as gb

    from gblas_gnn.graph import Graph

    A = gb.Matrix.ss.import_csr(nrows=n, ncols=n, indptr=indptr, col_indices=indices,
                                values=np.ones(1, np.float32), is_iso=True, sorted_cols=True,
                                take_ownership=True)
    return Graph(A)


def _generate(spec: dict):
    from gblas_gnn import data

    if spec["kind"] == "erdos_renyi":
        return data.erdos_renyi(spec["n"], spec["degree"] / spec["n"], seed=0)
    if spec["kind"] == "kronecker":
        return data.kronecker(spec["scale"], spec["edge_factor"], seed=0)
    raise ValueError(f"unknown graph kind {spec['kind']!r}")


def _csr(M) -> tuple[np.ndarray, np.ndarray]:
    d = M.ss.export("csr", give_ownership=False, sort=True)
    return (d["indptr"].astype(np.int64, copy=True),
            d["col_indices"].astype(np.int64, copy=True))


def _typed_edges(spec: dict):
    """A typed case's graph (the union of its relations), ``edge_index`` and ``edge_type``:
    every relation's edges in the homogeneous vertex numbering, relation after relation."""
    hg = typed_graph(spec["n"], spec["degree"])
    parts = [(ei[0] + hg.type_rows(key[0]).start, ei[1] + hg.type_rows(key[2]).start,
              np.full(ei.shape[1], r, np.int64))
             for r, (key, ei) in enumerate(hg.edge_index_dict.items())]
    src, dst, t = (np.concatenate(c).astype(np.int64) for c in zip(*parts, strict=True))
    return hg.to_homogeneous()[0], np.stack([src, dst]), t


def build_case_data(case: Case, seed: int = 0):
    """Generate the case's graph and arrays.

    Returns
    -------
    (Graph, CaseData)
        Our graph (self-looped form already cached; a typed case's union of its relations)
        and the arrays of :class:`CaseData`.
    """
    edge_type = np.zeros(0, np.int64)
    if case.graph["kind"] == "typed":
        g, edge_index, edge_type = _typed_edges(case.graph)
        indptr, indices = _csr(g.A)
    else:
        g = _generate(case.graph)
        indptr, indices = _csr(g.A)
        lp_indptr, lp_indices = _csr(g.with_self_loops().A)
        targets = np.repeat(np.arange(g.n, dtype=np.int64), np.diff(lp_indptr))
        edge_index = np.stack([lp_indices, targets])
        del targets, lp_indices, lp_indptr
    rng = np.random.default_rng(seed)
    H = rng.standard_normal((g.n, case.k_in), dtype=np.float32)
    dZ = rng.standard_normal((g.n, case.k_out), dtype=np.float32)
    y = rng.integers(0, case.k_out, g.n)
    return g, CaseData(g.n, indptr, indices, edge_index, H, dZ, y, edge_type)


def save_case_data(data: CaseData, path: Path) -> Path:
    """Write ``data`` to ``path`` (uncompressed ``.npz``); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        np.savez(f, n=np.array(data.n), indptr=data.indptr, indices=data.indices,
                 edge_index=data.edge_index, H=data.H, dZ=data.dZ, y=data.y,
                 edge_type=data.edge_type)
    return path


def load_case_data(path: Path, parts: tuple[str, ...] | None = None) -> CaseData:
    """Read what :func:`save_case_data` wrote; arrays not in ``parts`` are left empty
    (a worker reads only what its implementation needs)."""
    empty = {"indptr": np.zeros(0, np.int64), "indices": np.zeros(0, np.int64),
             "edge_index": np.zeros((2, 0), np.int64), "H": np.zeros((0, 0), np.float32),
             "dZ": np.zeros((0, 0), np.float32), "y": np.zeros(0, np.int64),
             "edge_type": np.zeros(0, np.int64)}
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: (z[k] if (parts is None or k in parts) and k in z else v)
                  for k, v in empty.items()}
        n = int(z["n"])
    return CaseData(n=n, **arrays)
