"""Planetoid loader (real Cora / CiteSeer files and synthetic ones) and the
restricted unpickler."""

from __future__ import annotations

import collections
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from gblas_gnn.data import UnsafePickleError, find_planetoid_root, load_planetoid, safe_load

_FILES = ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")


def _planetoid_root() -> Path:
    """Where the tests find the real Planetoid files: ``$GBLAS_GNN_PLANETOID``, else the
    workshop's ``<repo>/../shared/data/planetoid`` (the library itself looks nowhere: it is
    given a path or the variable)."""
    env = os.environ.get("GBLAS_GNN_PLANETOID")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1].parent / "shared" / "data" / "planetoid"


ROOT = _planetoid_root()
needs_real = pytest.mark.skipif(
    not (ROOT / "ind.cora.graph").is_file(),
    reason=f"Planetoid files not found at {ROOT} (set GBLAS_GNN_PLANETOID)",
)

EXPECTED = {
    # name: (n, stored entries, features, classes, train, label histogram)
    "Cora": (2708, 10556, 1433, 7, 140, [351, 217, 418, 818, 426, 298, 180]),
    "CiteSeer": (3327, 9104, 3703, 6, 120, [264, 590, 668, 701, 596, 508]),
}


# ------------------------------------------------------------------ real data sets
@needs_real
@pytest.mark.parametrize("name", ["Cora", "CiteSeer"])
def test_real_planetoid_matches_pyg(name):
    n, nnz, f, c, ntrain, hist = EXPECTED[name]
    ds = load_planetoid(ROOT, name.lower() if name == "Cora" else name)
    assert ds.name == name
    assert ds.num_nodes == n and ds.num_edges == nnz
    assert ds.x.shape == (n, f) and ds.x.dtype == np.float32
    assert ds.num_classes == c and ds.y.dtype == np.int64
    assert np.bincount(ds.y, minlength=c).tolist() == hist
    # public split
    assert np.array_equal(np.flatnonzero(ds.train_mask), np.arange(ntrain))
    assert np.array_equal(np.flatnonzero(ds.val_mask), np.arange(ntrain, ntrain + 500))
    test_index = np.loadtxt(ROOT / f"ind.{name.lower()}.test.index", dtype=np.int64)
    assert np.array_equal(np.flatnonzero(ds.test_mask), np.sort(test_index))
    assert ds.test_mask.sum() == 1000
    assert np.bincount(ds.y[ds.train_mask]).tolist() == [20] * c
    # graph: symmetric, 0/1, no self loops, canonical
    A = ds.adjacency
    assert (A != A.T).nnz == 0 and A.diagonal().sum() == 0 and np.all(A.data == 1)
    assert A.has_canonical_format
    # features are binary bag-of-words, unnormalised
    assert set(np.unique(ds.x).tolist()) <= {0.0, 1.0}


@needs_real
@pytest.mark.parametrize("key", ["cora", "citeseer"])
def test_real_planetoid_test_rows_follow_test_index(key):
    """PyG's reordering: vertex test_index[j] carries tx[j] and argmax(ty[j])."""
    ds = load_planetoid(ROOT, key)
    tx = safe_load(ROOT / f"ind.{key}.tx").toarray()
    ty = safe_load(ROOT / f"ind.{key}.ty")
    allx = safe_load(ROOT / f"ind.{key}.allx").toarray()
    ally = safe_load(ROOT / f"ind.{key}.ally")
    test_index = np.loadtxt(ROOT / f"ind.{key}.test.index", dtype=np.int64)
    assert np.array_equal(ds.x[test_index], tx)
    assert np.array_equal(ds.y[test_index], ty.argmax(1))
    assert np.array_equal(ds.x[: allx.shape[0]], allx)
    assert np.array_equal(ds.y[: ally.shape[0]], ally.argmax(1))
    # graph equals the symmetrised adjacency lists
    graph = safe_load(ROOT / f"ind.{key}.graph")
    pairs = {(u, v) for u, nb in graph.items() for v in nb if u != v}
    pairs |= {(v, u) for u, v in pairs}
    r, c = ds.adjacency.nonzero()
    assert set(zip(r.tolist(), c.tolist(), strict=True)) == pairs


@needs_real
def test_real_citeseer_padding_rows():
    ds = load_planetoid(ROOT, "citeseer")
    test_index = np.loadtxt(ROOT / "ind.citeseer.test.index", dtype=np.int64)
    span = np.arange(test_index.min(), test_index.max() + 1)
    missing = np.setdiff1d(span, test_index)
    assert missing.size == 15
    assert not ds.x[missing].any() and np.all(ds.y[missing] == 0)
    in_split = ds.train_mask | ds.val_mask | ds.test_mask
    assert not in_split[missing].any()


@needs_real
def test_real_normalize_features():
    raw = load_planetoid(ROOT, "cora")
    ds = load_planetoid(ROOT, "cora", normalize_features=True)
    sums = ds.x.sum(1)
    assert np.allclose(sums, 1.0, atol=1e-5)
    assert ds.x.dtype == np.float32
    assert np.allclose(ds.x * raw.x.sum(1, keepdims=True), raw.x, atol=1e-6)


# --------------------------------------------------------------- synthetic files
def _write_planetoid(
    folder: Path, key: str, *, rng_seed=0, protocol=2, n_allx=30, ntrain=6, test=None, f=5
):
    """Write a small, valid Planetoid-format data set; returns the ground truth."""
    rng = np.random.default_rng(rng_seed)
    c = 3
    if test is None:
        test = np.arange(n_allx, n_allx + 8)
    test = np.asarray(test)
    perm_test = rng.permutation(test)  # file order is not sorted
    n = int(test.max()) + 1
    feats = (rng.random((n, f)) < 0.4).astype(np.float32)
    labels = rng.integers(0, c, n)
    onehot = np.eye(c, dtype=np.int32)
    objs = {
        "x": sp.csr_matrix(feats[:ntrain]),
        "y": onehot[labels[:ntrain]],
        "allx": sp.csr_matrix(feats[:n_allx]),
        "ally": onehot[labels[:n_allx]],
        "tx": sp.csr_matrix(feats[perm_test]),
        "ty": onehot[labels[perm_test]],
    }
    graph = collections.defaultdict(list)
    for u in range(n):
        for v in rng.choice(n, size=2, replace=False).tolist():
            graph[u].append(v)  # not symmetric, may hold self loops / duplicates
    graph[0] += [0, 1, 1]
    objs["graph"] = graph
    folder.mkdir(parents=True, exist_ok=True)
    for name, obj in objs.items():
        (folder / f"ind.{key}.{name}").write_bytes(pickle.dumps(obj, protocol=protocol))
    (folder / f"ind.{key}.test.index").write_text("\n".join(map(str, perm_test.tolist())) + "\n")
    return feats, labels, graph, perm_test, n


@pytest.mark.parametrize("protocol", [2, 4])
def test_synthetic_cora_layout(tmp_path, protocol):
    # 30 allx rows, 6 train, 500 val would not fit -> use a bigger allx
    feats, labels, graph, test, n = _write_planetoid(
        tmp_path, "cora", protocol=protocol, n_allx=520, ntrain=6
    )
    ds = load_planetoid(tmp_path, "Cora")
    assert ds.num_nodes == n
    assert np.array_equal(ds.x, feats) and np.array_equal(ds.y, labels)
    assert np.array_equal(np.flatnonzero(ds.train_mask), np.arange(6))
    assert np.array_equal(np.flatnonzero(ds.val_mask), np.arange(6, 506))
    assert np.array_equal(np.flatnonzero(ds.test_mask), np.sort(test))
    dense = np.zeros((n, n))
    for u, nb in graph.items():
        for v in nb:
            if u != v:
                dense[u, v] = dense[v, u] = 1
    assert np.array_equal(ds.adjacency.toarray(), dense)


def test_synthetic_citeseer_gap_padding(tmp_path):
    test = np.array([520, 521, 523, 524, 527])  # 522, 525, 526 are missing
    feats, labels, _, _, n = _write_planetoid(tmp_path, "citeseer", n_allx=520, test=test)
    ds = load_planetoid(tmp_path, "CITESEER")
    assert ds.num_nodes == 528 == n
    assert np.array_equal(ds.x[test], feats[test]) and np.array_equal(ds.y[test], labels[test])
    gaps = np.array([522, 525, 526])
    assert not ds.x[gaps].any() and not ds.y[gaps].any()
    assert not (ds.train_mask | ds.val_mask | ds.test_mask)[gaps].any()


def test_pyg_layout_root(tmp_path):
    _write_planetoid(tmp_path / "Cora" / "raw", "cora", n_allx=520)
    assert load_planetoid(tmp_path, "cora").name == "Cora"


# ------------------------------------------------------------------------ errors
def test_unknown_name(tmp_path):
    with pytest.raises(ValueError, match="unknown Planetoid"):
        load_planetoid(tmp_path, "reddit")


def test_the_folder_is_a_path_or_the_environment_never_a_guess(tmp_path, monkeypatch):
    """No folder given (no argument, no $GBLAS_GNN_PLANETOID): ``find_planetoid_root`` says
    so with None and ``load_planetoid`` with an error naming both ways and the files; a
    folder of this workshop is never picked up behind the caller's back."""
    monkeypatch.delenv("GBLAS_GNN_PLANETOID", raising=False)
    monkeypatch.chdir(tmp_path)
    assert find_planetoid_root() is None
    with pytest.raises(FileNotFoundError, match=r"GBLAS_GNN_PLANETOID.*ind\.cora\.\{x,y,tx,"
                                                r"ty,allx,ally,graph,test\.index\}.*nothing "
                                                r"is downloaded"):
        load_planetoid(None, "cora")
    n = _write_planetoid(tmp_path / "data", "cora", n_allx=520)[-1]
    assert find_planetoid_root(tmp_path / "data") == (tmp_path / "data").resolve()
    monkeypatch.setenv("GBLAS_GNN_PLANETOID", str(tmp_path / "data"))
    assert find_planetoid_root() == (tmp_path / "data").resolve()
    assert load_planetoid(None, "cora").num_nodes == n


@pytest.mark.parametrize("by_env", [False, True])
def test_a_folder_given_but_missing_or_empty_is_an_error(tmp_path, monkeypatch, by_env):
    for folder, problem in [(tmp_path / "nope", "not found"),
                            (tmp_path, "holds no Planetoid files")]:
        if by_env:
            monkeypatch.setenv("GBLAS_GNN_PLANETOID", str(folder))
        with pytest.raises(FileNotFoundError, match=problem) as err:
            find_planetoid_root(None if by_env else folder)
        assert str(folder) in str(err.value) and "ind.<name>." in str(err.value)
        assert ("GBLAS_GNN_PLANETOID" in str(err.value)) == by_env


def test_missing_directory_and_file(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError, match="nope"):
        load_planetoid(missing, "cora")
    _write_planetoid(tmp_path, "cora", n_allx=520)
    (tmp_path / "ind.cora.ty").unlink()
    with pytest.raises(FileNotFoundError, match=r"ind\.cora\.ty"):
        load_planetoid(tmp_path, "cora")
    with pytest.raises(FileNotFoundError, match="ghost"):
        safe_load(tmp_path / "ghost")


def test_truncated_file(tmp_path):
    _write_planetoid(tmp_path, "cora", n_allx=520)
    p = tmp_path / "ind.cora.allx"
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"ind\.cora\.allx.*(corrupt|truncated)"):
        load_planetoid(tmp_path, "cora")
    p.write_bytes(b"")
    with pytest.raises(ValueError, match="corrupt or truncated"):
        safe_load(p)


def test_corrupt_test_index_and_inconsistent_files(tmp_path):
    _write_planetoid(tmp_path, "cora", n_allx=520)
    idx = tmp_path / "ind.cora.test.index"
    good = idx.read_text()
    idx.write_text("12\nabc\n")
    with pytest.raises(ValueError, match="test index"):
        load_planetoid(tmp_path, "cora")
    idx.write_text("\n".join(good.split()[:-1]))  # one test id fewer than tx rows
    with pytest.raises(ValueError, match="disagree"):
        load_planetoid(tmp_path, "cora")
    idx.write_text(good)
    (tmp_path / "ind.cora.graph").write_bytes(pickle.dumps({0: [10_000]}, protocol=2))
    with pytest.raises(ValueError, match="outside"):
        load_planetoid(tmp_path, "cora")
    (tmp_path / "ind.cora.graph").write_bytes(pickle.dumps([1, 2], protocol=2))
    with pytest.raises(ValueError, match="dict"):
        load_planetoid(tmp_path, "cora")


# -------------------------------------------------------------- hostile pickles
class _Evil:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _hostile_payloads(marker: Path) -> dict[str, bytes]:
    cmd = f"touch {marker}".encode()
    code = f"open({str(marker)!r}, 'w').close()".encode()
    return {
        "os.system": b"cos\nsystem\n(S'" + cmd + b"'\ntR.",
        "builtins.eval": b"cbuiltins\neval\n(S'" + code + b"'\ntR.",
        "__builtin__.eval": b"c__builtin__\neval\n(S'" + code + b"'\ntR.",
        "system": pickle.dumps(_Evil(marker), protocol=4),  # posix.system via STACK_GLOBAL
        # hidden inside an allowed container: the graph dict of lists
        "os.system ": b"ccollections\ndefaultdict\n(c__builtin__\nlist\ntR(I0\n(cos\nsystem\n(S'"
        + cmd
        + b"'\ntRlu.",
    }


@pytest.mark.parametrize("which", ["os.system", "builtins.eval", "__builtin__.eval", "system"])
def test_hostile_pickle_rejected_not_executed(tmp_path, which):
    marker = tmp_path / "PWNED"
    payload = _hostile_payloads(marker)[which]
    p = tmp_path / "ind.cora.x"
    p.write_bytes(payload)
    with pytest.raises(UnsafePickleError) as exc:
        safe_load(p)
    msg = str(exc.value)
    assert str(p) in msg and which.strip() in msg and "forbidden" in msg
    assert isinstance(exc.value, ValueError)
    assert not marker.exists()


def test_hostile_pickle_inside_loader(tmp_path):
    _write_planetoid(tmp_path, "cora", n_allx=520)
    marker = tmp_path / "PWNED"
    (tmp_path / "ind.cora.graph").write_bytes(_hostile_payloads(marker)["os.system "])
    with pytest.raises(ValueError, match=r"ind\.cora\.graph.*forbidden global os\.system"):
        load_planetoid(tmp_path, "cora")
    assert not marker.exists()


def test_unpickler_rejects_other_codecs_and_object_arrays(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"c_codecs\nencode\n(S'abc'\nS'rot13'\ntR.")
    with pytest.raises(UnsafePickleError, match="latin1"):
        safe_load(p)
    p.write_bytes(pickle.dumps(np.array([1, "a"], dtype=object), protocol=2))
    with pytest.raises(ValueError):
        safe_load(p)
    p.write_bytes(pickle.dumps({"a": 1.5}, protocol=2))  # plain data needs no global
    assert safe_load(p) == {"a": 1.5}


# ------------------------------------------------------- the CLI's dataset spec
def test_planetoid_spec_row_normalises_features_by_default(tmp_path):
    from gblas_gnn.data.specs import parse_dataset

    feats, *_ = _write_planetoid(tmp_path, "cora", n_allx=520)
    spec = f"planetoid:{tmp_path / 'cora'}"
    raw = parse_dataset(spec, normalize_features=False)
    ds = parse_dataset(spec)
    assert np.array_equal(raw.x, feats)  # off: the 0/1 bag of words as stored
    sums = feats.sum(axis=1, keepdims=True)
    assert (sums == 0).any() and (sums > 1).any()  # both edge cases occur
    # PyG's NormalizeFeatures: each row divided by max(row sum, 1); zero rows stay zero
    np.testing.assert_allclose(ds.x, feats / np.maximum(sums, 1), rtol=1e-6)
    assert ds.x.dtype == np.float32
    np.testing.assert_array_equal(ds.y, raw.y)
    assert (ds.adjacency != raw.adjacency).nnz == 0


def test_normalize_features_only_for_planetoid():
    from gblas_gnn.data.specs import default_normalize_features, parse_dataset

    assert default_normalize_features("planetoid:/x/cora")
    assert not default_normalize_features("csbm") and not default_normalize_features("npz:a")
    with pytest.raises(ValueError, match="planetoid data sets only"):
        parse_dataset("csbm", normalize_features=True)
    small = "csbm:n=300,classes=3,train_per_class=10,val=60,test=100,features=16"
    assert parse_dataset(small, normalize_features=False).num_nodes == 300
