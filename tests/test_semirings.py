"""SpMM over every shipped semiring vs a dense reference loop; the cpu executor's fast
lowering == its GraphBLAS general form.

The reference applies the semiring's own scalar ``add`` / ``mul`` literally, row by row,
over the stored entries only (an empty row gives 0).  The test that proves each fast
lowering is ``test_fast_lowering_equals_general_form``: min/max semirings must agree
bitwise, sum-like ones (``plus_times``, ``avg``) up to summation-order rounding.
"""

from __future__ import annotations

import graphblas as gb
import numpy as np
import pytest
import scipy.sparse as sp

import gblas_gnn.semirings as sr
from gblas_gnn._graphblas_adapter import is_user_defined_type
from gblas_gnn.executors.cpu import _gbio
from gblas_gnn.executors.cpu import semiring_lowering as cpu_sr
from gblas_gnn.semirings import registry


def general(s, S, H):
    """``S ⊕ H`` through the cpu executor's GraphBLAS general form."""
    return cpu_sr.spmm_general(s, S, H)


def general_t(s, S, H):
    """``Sᵀ ⊕ H`` through the general form."""
    return cpu_sr.spmm_general(s, S, H, transpose=True)


def run(s, method: str, S, H):
    """``spmm`` / ``spmm_t`` of the semiring, or the general form (``*_general``)."""
    if method.endswith("_general"):
        return (general_t if method.startswith("spmm_t") else general)(s, S, H)
    return getattr(s, method)(S, H)

SHIPPED = ["plus_times", "min_plus", "max_plus", "max_times", "min_times", "avg"]
EXACT = {"min_plus", "max_plus", "max_times", "min_times"}  # order-independent ⊕: bitwise
DTYPES = [np.float32, np.float64]


# -- helpers ----------------------------------------------------------------------------
def make_graph(
    seed: int,
    m: int,
    n: int,
    density: float = 0.25,
    dtype=np.float32,
    *,
    nonnegative: bool = False,
    n_empty: int = 2,
    stored_zeros: int = 2,
) -> gb.Matrix:
    """Random m×n graph: self loops (where square), ``n_empty`` empty rows, a few stored 0s."""
    rng = np.random.default_rng(seed)
    mask = rng.random((m, n)) < density
    for i in range(min(m, n)):
        mask[i, i] = True
    empty = rng.choice(m, size=min(n_empty, m), replace=False)
    mask[empty] = False
    rows, cols = np.nonzero(mask)
    if nonnegative:
        vals = rng.uniform(0.0, 2.0, rows.size)
    else:
        vals = rng.standard_normal(rows.size) * 2
    if rows.size:
        vals[rng.choice(rows.size, size=min(stored_zeros, rows.size), replace=False)] = 0.0
    return gb.Matrix.from_coo(rows, cols, vals.astype(dtype), nrows=m, ncols=n)


def features(seed: int, n: int, k: int, dtype) -> np.ndarray:
    return (np.random.default_rng(seed + 1000).standard_normal((n, k)) * 3).astype(dtype)


def reference(semiring: sr.Semiring, S: gb.Matrix, H: np.ndarray, *, transpose=False):
    """Dense loop with the semiring's scalar ops over stored entries; empty row -> 0."""
    rows, cols, vals = S.to_coo()
    if transpose:
        rows, cols = cols, rows
    m = S.ncols if transpose else S.nrows
    vals = vals.astype(H.dtype)
    out = np.zeros((m, H.shape[1]), dtype=H.dtype)
    for i in range(m):
        acc = None
        for p in np.flatnonzero(rows == i):
            term = semiring.mul(vals[p], H[cols[p]])
            acc = term if acc is None else semiring.add(acc, term)
        if acc is None:
            continue
        if semiring.name == "avg":  # read the value out of the (value, weight) pairs
            acc = np.where(acc[..., 1] > 0, acc[..., 0], 0)
        out[i] = acc
    return out


def assert_same(name: str, got: np.ndarray, want: np.ndarray, dtype) -> None:
    assert got.dtype == np.dtype(dtype)
    assert got.shape == want.shape
    if name in EXACT:
        np.testing.assert_array_equal(got, want)
    else:
        tol = 2e-5 if np.dtype(dtype) == np.float32 else 1e-12
        scale = max(1.0, float(np.abs(want).max(initial=0)))
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def graph_for(name: str, seed: int, m: int, n: int, dtype, **kw) -> gb.Matrix:
    return make_graph(seed, m, n, dtype=dtype, nonnegative=(name == "avg"), **kw)


# -- correctness against the reference ------------------------------------------------
@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [1, 5])
@pytest.mark.parametrize("seed", [0, 1])
def test_spmm_and_general_match_reference(name, dtype, k, seed):
    s = sr.get(name)
    S = graph_for(name, seed, 13, 13, dtype)
    H = features(seed, 13, k, dtype)
    want = reference(s, S, H)
    assert_same(name, s.spmm(S, H), want, dtype)
    assert_same(name, general(s, S, H), want, dtype)


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [1, 4])
def test_spmm_t_matches_reference_rectangular(name, dtype, k):
    s = sr.get(name)
    S = graph_for(name, 7, 9, 12, dtype, density=0.3)  # S is 9x12, Sᵀ ⊕ H is 12xk
    H = features(7, 9, k, dtype)
    want = reference(s, S, H, transpose=True)
    assert_same(name, s.spmm_t(S, H), want, dtype)
    assert_same(name, general_t(s, S, H), want, dtype)


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("dtype", DTYPES)
def test_spmm_rectangular(name, dtype):
    s = sr.get(name)
    S = graph_for(name, 3, 8, 11, dtype, density=0.3)
    H = features(3, 11, 3, dtype)
    assert_same(name, s.spmm(S, H), reference(s, S, H), dtype)


# -- the proof of each lowering -------------------------------------------------------
@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [1, 8, 33])
def test_fast_lowering_equals_general_form(name, dtype, k):
    s = sr.get(name)
    S = graph_for(name, 11, 400, 400, dtype, density=0.02, n_empty=15, stored_zeros=20)
    H = features(11, 400, k, dtype)
    assert_same(name, s.spmm(S, H), general(s, S, H), dtype)
    assert_same(name, s.spmm_t(S, H), general_t(s, S, H), dtype)


@pytest.mark.parametrize("name", SHIPPED)
def test_mixed_operand_dtypes_compute_in_h_dtype(name):
    s = sr.get(name)
    S64 = graph_for(name, 5, 10, 10, np.float64)
    S32 = S64.dup(dtype=gb.dtypes.FP32)
    for S in (S64, S32):
        for dtype in DTYPES:
            H = features(5, 10, 3, dtype)
            Sd = S.dup(dtype=gb.dtypes.lookup_dtype(dtype))
            assert_same(name, s.spmm(S, H), reference(s, Sd, H), dtype)


@pytest.mark.parametrize("name", SHIPPED)
def test_pattern_iso_and_bool_matrices(name):
    s = sr.get(name)
    rng = np.random.default_rng(4)
    rows, cols = np.nonzero(rng.random((10, 10)) < 0.3)
    iso = gb.Matrix.from_coo(rows, cols, 1.0, nrows=10, ncols=10, dtype=gb.dtypes.FP32)
    assert iso.ss.is_iso
    pattern = gb.Matrix.from_coo(rows, cols, True, nrows=10, ncols=10, dtype=gb.dtypes.BOOL)
    H = features(4, 10, 3, np.float32)
    want = reference(s, iso, H)
    assert_same(name, s.spmm(iso, H), want, np.float32)
    assert_same(name, s.spmm(pattern, H), want, np.float32)
    assert_same(name, s.spmm_t(pattern, H), reference(s, iso, H, transpose=True), np.float32)


@pytest.mark.parametrize("name", SHIPPED)
def test_s_is_left_intact(name):
    s = sr.get(name)
    S = graph_for(name, 9, 20, 20, np.float32)
    before = S.dup()
    s.spmm(S, features(9, 20, 2, np.float32))
    s.spmm_t(S, features(9, 20, 2, np.float32))
    assert S.isequal(before)
    assert S.ss.format == before.ss.format


@pytest.mark.parametrize("name", SHIPPED)
def test_scipy_input_is_accepted(name):
    s = sr.get(name)
    S = graph_for(name, 2, 12, 12, np.float64)
    H = features(2, 12, 3, np.float64)
    csr = gb.io.to_scipy_sparse(S, format="csr")
    assert sp.issparse(csr)
    assert_same(name, s.spmm(csr, H), s.spmm(S, H), np.float64)
    assert_same(name, s.spmm(S.T, H), s.spmm_t(S, H), np.float64)


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("dtype", DTYPES)
def test_degenerate_shapes(name, dtype):
    s = sr.get(name)
    empty = gb.Matrix(gb.dtypes.FP32, 4, 3)
    np.testing.assert_array_equal(s.spmm(empty, np.ones((3, 2), dtype)), np.zeros((4, 2), dtype))
    np.testing.assert_array_equal(s.spmm_t(empty, np.ones((4, 2), dtype)), np.zeros((3, 2)))
    S = graph_for(name, 1, 4, 3, np.float32, density=0.9, n_empty=0)
    out = s.spmm(S, np.ones((3, 0), dtype))
    assert out.shape == (4, 0) and out.dtype == np.dtype(dtype)


# -- avg specifics ----------------------------------------------------------------------
def test_avg_hand_example_and_zero_weight_rows():
    S = gb.Matrix.from_coo(
        [0, 0, 1, 2, 2], [0, 1, 1, 0, 1], [1.0, 3.0, 2.0, 0.0, 0.0], nrows=4, ncols=2
    )
    H = np.array([[1.0, 10.0], [2.0, 20.0]])
    want = np.array([[1.75, 17.5], [2.0, 20.0], [0.0, 0.0], [0.0, 0.0]])
    for fn in (sr.avg.spmm, lambda S, H: general(sr.avg, S, H)):
        np.testing.assert_allclose(fn(S, H), want, rtol=1e-15)


def test_avg_general_form_is_a_graphblas_udt_semiring():
    typed = cpu_sr.gb_semiring(sr.avg)[gb.dtypes.FP32]
    pair = typed.return_type
    assert is_user_defined_type(pair)
    assert pair.np_type.names == ("v", "w")
    assert pair.np_type["v"] == np.float32
    assert cpu_sr.gb_semiring(sr.avg)[gb.dtypes.FP64].return_type.np_type["w"] == np.float64


@pytest.mark.parametrize("method", ["spmm", "spmm_general", "spmm_t", "spmm_t_general"])
def test_avg_rejects_negative_weights(method):
    S = gb.Matrix.from_coo([0, 0], [0, 1], [1.0, -1.0], nrows=2, ncols=2)
    with pytest.raises(ValueError, match="nonnegative"):
        run(sr.avg, method, S, np.ones((2, 1)))


# -- user semirings ---------------------------------------------------------------------
@pytest.fixture
def user_names():
    made = []
    yield made
    for name in made:
        registry._unregister(name)


@pytest.mark.parametrize("dtype", DTYPES)
def test_user_semiring_from_python_functions(user_names, dtype):
    user_names.append("test_max_halfplus")
    u = sr.register(
        "test_max_halfplus",
        lambda x, y: max(x, y),
        lambda x, y: x + 0.5 * y,
        add_identity=-np.inf,
        mul_identity=None,
    )
    assert sr.get("test_max_halfplus") is u
    assert "test_max_halfplus" in sr.names()
    S = make_graph(21, 15, 15, dtype=dtype)
    H = features(21, 15, 4, dtype)
    want = reference(u, S, H)
    for got in (u.spmm(S, H), general(u, S, H)):
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(u.spmm_t(S, H), reference(u, S, H, transpose=True), rtol=1e-6)
    np.testing.assert_allclose(u.spmm_t(S, H), general_t(u, S, H), rtol=1e-6)


def test_user_semiring_hand_example(user_names):
    user_names.append("test_hand")
    u = sr.register("test_hand", lambda x, y: max(x, y), lambda x, y: x + 0.5 * y,
                    add_identity=-np.inf)
    S = gb.Matrix.from_coo([0, 0], [0, 1], [1.0, 3.0], nrows=2, ncols=2)
    H = np.array([[1.0, 10.0], [2.0, 20.0]])
    want = np.array([[4.0, 13.0], [0.0, 0.0]])  # max(1 + 0.5, 3 + 1), max(1 + 5, 3 + 10)
    np.testing.assert_array_equal(u.spmm(S, H), want)
    np.testing.assert_array_equal(general(u, S, H), want)


def test_user_semiring_from_graphblas_objects_matches_shipped(user_names):
    user_names += ["test_maxplus_gb", "test_maxplus_names"]
    a = sr.register("test_maxplus_gb", gb.monoid.max, gb.binary.plus)
    b = sr.register("test_maxplus_names", "max", "plus")
    assert a.add_identity == -np.inf
    S = make_graph(8, 30, 30, dtype=np.float64)
    H = features(8, 30, 3, np.float64)
    want = sr.max_plus.spmm(S, H)
    for u in (a, b):
        np.testing.assert_array_equal(u.spmm(S, H), want)
        np.testing.assert_array_equal(general(u, S, H), want)


def test_user_semiring_mixing_udf_monoid_and_builtin_op(user_names):
    user_names.append("test_udfmin_times")
    u = sr.register("test_udfmin_times", lambda x, y: min(x, y), gb.binary.times,
                    add_identity=np.inf)
    S = make_graph(12, 20, 20, dtype=np.float32)
    H = features(12, 20, 3, np.float32)
    np.testing.assert_array_equal(u.spmm(S, H), sr.min_times.spmm(S, H))


def test_register_errors(user_names):
    with pytest.raises(ValueError, match="already registered"):
        sr.register("max_plus", gb.monoid.max, gb.binary.plus)
    with pytest.raises(ValueError, match="add_identity"):
        sr.register("test_no_identity", lambda x, y: x + y, gb.binary.times)
    with pytest.raises(ValueError, match="differs"):
        sr.register("test_bad_identity", gb.monoid.max, gb.binary.plus, add_identity=0.0)
    with pytest.raises(ValueError, match="non-empty"):
        sr.register("", gb.monoid.max, gb.binary.plus)
    with pytest.raises(TypeError):
        sr.register(3, gb.monoid.max, gb.binary.plus)
    with pytest.raises(ValueError, match="not a graphblas"):
        sr.register("test_bad_name", "no_such_monoid", gb.binary.plus)
    with pytest.raises(TypeError, match="cannot compile"):
        sr.register("test_uncompilable", gb.monoid.plus, lambda x, y: {x: y})
    with pytest.raises(TypeError, match="mul_op"):
        sr.register("test_bad_kind", gb.monoid.plus, 42)
    assert not any(n.startswith("test_") for n in sr.names())


# -- errors -----------------------------------------------------------------------------
def test_get_unknown_name_lists_known_names():
    for exc in (KeyError, ValueError):
        with pytest.raises(exc) as info:
            sr.get("nope")
        for name in SHIPPED:
            assert name in str(info.value)
    with pytest.raises(TypeError):
        sr.get(3)
    assert sr.get(sr.max_plus) is sr.max_plus
    assert sr.names()[: len(SHIPPED)] == SHIPPED


@pytest.fixture
def no_work(monkeypatch):
    """Make every compute entry point fail loudly: errors must come before any work."""

    def boom(*args, **kwargs):
        raise AssertionError("work started before validation finished")

    for mod, attr in [(_gbio, "dense_in"), (cpu_sr, "run_spmm_minmax")]:
        monkeypatch.setattr(mod, attr, boom)


METHODS = ["spmm", "spmm_general", "spmm_t", "spmm_t_general"]


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("method", METHODS)
def test_input_errors_raised_before_any_work(no_work, name, method):
    def fn(S, H):
        return run(sr.get(name), method, S, H)
    S = make_graph(0, 5, 4, nonnegative=True)  # 5x4: S ⊕ H needs 4 rows, Sᵀ ⊕ H needs 5
    good = 5 if method.startswith("spmm_t") else 4
    bad = 9
    H = np.ones((good, 2), np.float32)
    with pytest.raises(ValueError, match="shape mismatch"):
        fn(S, np.ones((bad, 2), np.float32))
    with pytest.raises(ValueError, match="2-D"):
        fn(S, np.ones(good, np.float32))
    with pytest.raises(ValueError, match="2-D"):
        fn(S, np.ones((good, 2, 1), np.float32))
    for bad_value in (np.nan, np.inf, -np.inf):
        Hb = H.copy()
        Hb[1, 1] = bad_value
        with pytest.raises(ValueError, match="NaN or Inf"):
            fn(S, Hb)
    for dtype in (np.int64, np.int32, np.float16, np.complex128, bool):
        with pytest.raises(TypeError, match="float32 or float64"):
            fn(S, H.astype(dtype))
    with pytest.raises(TypeError, match="numpy.ndarray"):
        fn(S, H.tolist())
    with pytest.raises(TypeError, match="graphblas.Matrix"):
        fn(np.ones((5, 4)), H)
    Sbad = S.dup()
    r, c, _ = S.to_coo()
    Sbad[int(r[0]), int(c[0])] = np.nan
    rows0, cols0, vals0 = Sbad.to_coo()
    with pytest.raises(ValueError, match="S contains NaN or Inf"):
        fn(Sbad, H)
    rows1, cols1, vals1 = Sbad.to_coo()  # S survives the unpack/pack used by the check
    np.testing.assert_array_equal(rows1, rows0)
    np.testing.assert_array_equal(cols1, cols0)
    np.testing.assert_array_equal(vals1, vals0)  # NaNs compare equal here


def test_huge_finite_values_are_not_mistaken_for_inf():
    H = np.full((3, 2), np.finfo(np.float32).max, np.float32)  # the sum overflows, values don't
    S = gb.Matrix.from_coo([0], [0], [0.0], nrows=1, ncols=3, dtype=gb.dtypes.FP32)
    np.testing.assert_array_equal(sr.plus_times.spmm(S, H), np.zeros((1, 2), np.float32))


def test_semiring_repr_and_metadata():
    for name in SHIPPED:
        s = sr.get(name)
        assert s.name == name and name in repr(s)
        assert s.formula
        assert cpu_sr.gb_semiring(s) is cpu_sr.gb_semiring(s)  # built once


# -- the algebra: what ⊕ and ⊗ are decides the kernels, never the name -----------------------
def test_each_shipped_semiring_has_the_algebra_of_its_operators():
    from gblas_gnn.semirings import algebra as al

    assert {name: sr.get(name).algebra for name in SHIPPED} == {
        "plus_times": al.PLUS_TIMES, "min_plus": al.MIN_PLUS, "max_plus": al.MAX_PLUS,
        "max_times": al.MAX_TIMES, "min_times": al.MIN_TIMES, "avg": al.WEIGHTED_MEAN}


def test_a_user_semiring_runs_on_the_kernels_of_its_algebra(user_names):
    """A renamed ``max_times`` takes the shipped kernels (the cpu executor's hand-written
    lowering, the generated attention kernels) and gives the same numbers; a ⊗ the kernels do
    not know takes the generic path."""
    from gblas_gnn.executors import get_executor
    from gblas_gnn.executors.cpu.semiring_lowering import LOWERINGS
    from gblas_gnn.ir.plan import fusable
    from gblas_gnn.ir.program import Op, Structure

    user_names += ["test_renamed_max_times", "test_max_halfplus_algebra"]
    renamed = sr.register("test_renamed_max_times", "max", "times")
    odd = sr.register("test_max_halfplus_algebra", lambda x, y: max(x, y),
                      lambda x, y: x + 0.5 * y, add_identity=-np.inf)
    assert renamed.algebra == sr.max_times.algebra and renamed.algebra.fused
    assert odd.algebra.mul is None and not odd.algebra.fused
    cpu = get_executor("cpu")
    assert cpu.semiring_lowering(renamed).spmm.__qualname__ == \
        cpu.semiring_lowering(sr.max_times).spmm.__qualname__
    assert odd.algebra not in LOWERINGS
    S = make_graph(8, 30, 30, dtype=np.float64)
    H = features(8, 30, 3, np.float64)
    np.testing.assert_array_equal(renamed.spmm(S, H), sr.max_times.spmm(S, H))
    structure = Structure((Op("avals", (), (), ()),), 0, ("aggregate", renamed.name),
                          (("x", (3,)),), "float64")
    assert fusable(structure)
    assert not fusable(Structure(structure.ops, 0, ("aggregate", odd.name), structure.roles,
                                 "float64"))


def test_a_lowering_is_registered_against_a_known_algebra_only():
    from gblas_gnn.executors.cpu import CPUExecutor
    from gblas_gnn.semirings.algebra import Algebra

    class Mine(CPUExecutor):
        pass

    with pytest.raises(TypeError, match="known algebra"):
        Mine.lowers("plus_times")
    with pytest.raises(TypeError, match="known algebra"):
        Mine.lowers(Algebra(None, "times"))
