"""Checkpoints: round trip, atomic writes, RNG capture, clear errors for bad files."""

import json
import os
import zipfile

import numpy as np
import pytest

from gblas_gnn.nn.activation import Identity, ReLU
from gblas_gnn.nn.dropout import Dropout
from gblas_gnn.nn.linear import Linear
from gblas_gnn.nn.sequential import Sequential
from gblas_gnn.train.checkpoint import (
    CheckpointError,
    load_checkpoint,
    named_modules,
    named_rngs,
    read_checkpoint,
    rng_states,
    save_checkpoint,
    set_rng_states,
)
from gblas_gnn.train.optim import SGD, Adam


def make_model(seed=0, hidden=4, dtype=np.float32):
    return Sequential(Dropout(0.5, seed=seed + 1), Linear(3, hidden, seed=seed, dtype=dtype),
                      ReLU(), Sequential(Dropout(0.3, seed=seed + 2),
                                         Linear(hidden, 2, seed=seed + 3, dtype=dtype)))


def train_steps(model, opt, steps, seed=0):
    x = np.random.default_rng(seed).standard_normal((6, 3)).astype(model.dtype)
    model.train()
    for _ in range(steps):
        out = model(None, x)
        model.backward(np.ones_like(out))
        opt.step()


def params(model):
    return {k: v.copy() for k, v in model.named_parameters()}


def test_named_modules_and_rngs():
    m = make_model()
    assert [p for p, _ in named_modules(m)] == ["", "0", "1", "2", "3", "3.0", "3.1"]
    rngs = named_rngs(m)
    assert list(rngs) == ["0.rng", "3.0.rng"]
    assert rngs["0.rng"] is m[0].rng and rngs["3.0.rng"] is m[3][0].rng


def test_named_rngs_refuses_randomstate():
    m = make_model()
    m[2].legacy = np.random.RandomState(0)
    with pytest.raises(TypeError, match="RandomState.*default_rng"):
        named_rngs(m)


def test_named_rngs_finds_gat_attention_dropout():
    from gblas_gnn.nn import gat

    layer = gat.GATConv(3, 2, heads=2, dropout=0.5)
    m = Sequential(Dropout(0.5), layer)
    keys = list(named_rngs(m))
    assert keys[0] == "0.rng" and len(keys) == 2 and keys[1].startswith("1.")


def test_rng_states_round_trip():
    m = make_model()
    st = rng_states(m)
    json.dumps(st)                       # JSON-able
    a = m[0].rng.random(5)
    set_rng_states(m, st)
    np.testing.assert_array_equal(m[0].rng.random(5), a)
    with pytest.raises(CheckpointError, match="differ"):
        set_rng_states(m, {"0.rng": st["0.rng"]})


@pytest.mark.parametrize("opt_cls", [SGD, Adam])
def test_round_trip(tmp_path, opt_cls):
    path = tmp_path / "ck.npz"
    a = make_model()
    oa = opt_cls(a, lr=0.1, momentum=0.9) if opt_cls is SGD else opt_cls(a, lr=0.01)
    train_steps(a, oa, 3)
    best = {k: v * 2 for k, v in params(a).items()}
    save_checkpoint(path, a, oa, epoch=3, trainer={"history": [1.5, float("nan")], "x": "y"},
                    best_params=best)
    # everything is a plain array: readable without pickle
    with np.load(path, allow_pickle=False) as z:
        assert all(z[k].dtype != object for k in z.files)
        assert "meta" in z.files and "param/1.W" in z.files and "best/3.1.bias" in z.files

    b = make_model(seed=7)
    ob = opt_cls(b, lr=0.5)
    ck = load_checkpoint(path, b, ob)
    assert ck.epoch == 3 and ck.trainer["x"] == "y" and np.isnan(ck.trainer["history"][1])
    for k, v in params(a).items():
        np.testing.assert_array_equal(dict(b.named_parameters())[k], v)
        np.testing.assert_array_equal(ck.best_params[k], best[k])
    assert rng_states(b) == rng_states(a)
    sa, sb = oa.state_dict(), ob.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        np.testing.assert_array_equal(sa[k], sb[k])
    # both continue identically
    train_steps(a, oa, 2, seed=1)
    train_steps(b, ob, 2, seed=1)
    for k, v in params(a).items():
        np.testing.assert_array_equal(dict(b.named_parameters())[k], v)


def test_load_selected_weights(tmp_path):
    """``weights="selected"`` loads ``best/*`` (what the trainer reported on) when present;
    without them the last weights are the selected ones."""
    a = make_model()
    best = {k: v * 2 for k, v in params(a).items()}
    save_checkpoint(tmp_path / "best.npz", a, best_params=best)
    save_checkpoint(tmp_path / "plain.npz", a)
    for name, expected in (("best.npz", best), ("plain.npz", params(a))):
        b = make_model(seed=5)
        ck = load_checkpoint(tmp_path / name, b, weights="selected")
        for k, v in expected.items():
            np.testing.assert_array_equal(dict(b.named_parameters())[k], v)
            np.testing.assert_array_equal(ck.selected_params[k], v)
    b = make_model(seed=5)
    load_checkpoint(tmp_path / "best.npz", b)                    # default: the last weights
    for k, v in params(a).items():
        np.testing.assert_array_equal(dict(b.named_parameters())[k], v)
    with pytest.raises(ValueError, match="'last' or 'selected'"):
        load_checkpoint(tmp_path / "best.npz", b, weights="best")


def test_load_keeps_array_identity(tmp_path):
    a = make_model()
    save_checkpoint(tmp_path / "c.npz", a)
    b = make_model(seed=3)
    W = b[1].params["W"]
    load_checkpoint(tmp_path / "c.npz", b)
    assert b[1].params["W"] is W
    np.testing.assert_array_equal(W, a[1].params["W"])


def test_failed_write_leaves_old_checkpoint_intact(tmp_path, monkeypatch):
    path = tmp_path / "ck.npz"
    m = make_model()
    save_checkpoint(path, m, epoch=1)
    before = path.read_bytes()

    import gblas_gnn.train.checkpoint as ckmod

    def broken_savez(f, **arrays):
        f.write(b"PK\x03\x04 half a zip file")   # something reaches the temporary file ...
        raise OSError("disk full")                  # ... then the write fails

    monkeypatch.setattr(ckmod.np, "savez", broken_savez)
    m[1].params["W"][:] = 42
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, m, epoch=2)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["ck.npz"]          # no temporary file left behind
    fresh = make_model(seed=5)
    assert load_checkpoint(path, fresh).epoch == 1
    np.testing.assert_array_equal(fresh[1].params["W"], make_model()[1].params["W"])


def test_missing_and_corrupt_files(tmp_path):
    m = make_model()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.npz", m)
    good = tmp_path / "good.npz"
    save_checkpoint(good, m)
    data = good.read_bytes()
    trunc = tmp_path / "trunc.npz"
    trunc.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint(trunc, m)
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"this is not a zip archive at all")
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint(junk, m)
    # flip bytes inside a stored member: the zip CRC check catches it
    flipped = bytearray(data)
    i = data.index(b"param/1.W") + 200
    flipped[i:i + 8] = b"\xff" * 8
    bad = tmp_path / "flipped.npz"
    bad.write_bytes(bytes(flipped))
    with pytest.raises(CheckpointError):
        load_checkpoint(bad, m)


def test_foreign_and_hostile_files(tmp_path):
    m = make_model()
    other = tmp_path / "other.npz"
    np.savez(other, a=np.zeros(3))
    with pytest.raises(CheckpointError, match="not a gblas_gnn checkpoint"):
        load_checkpoint(other, m)
    # an object array would need pickle: refused
    hostile = tmp_path / "hostile.npz"
    np.savez(hostile, meta=np.array("{}"), **{"param/1.W": np.array([object()], dtype=object)})
    with pytest.raises(CheckpointError):
        load_checkpoint(hostile, m)
    # wrong format tag
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, meta=np.array(json.dumps({"format": "other/9", "epoch": 0, "params": [],
                                              "rng": {}, "trainer": {}, "has_optimizer": False,
                                              "has_best": False})))
    with pytest.raises(CheckpointError, match="format"):
        load_checkpoint(wrong, m)
    # non-finite weights
    nanf = tmp_path / "nan.npz"
    m2 = make_model()
    m2[1].params["W"][0, 0] = np.nan
    save_checkpoint(nanf, m2)
    with pytest.raises(CheckpointError, match="finite"):
        read_checkpoint(nanf)
    # a zip whose meta is corrupt JSON
    cj = tmp_path / "cj.npz"
    np.savez(cj, meta=np.array("{not json"))
    with pytest.raises(CheckpointError, match="metadata"):
        load_checkpoint(cj, m)
    assert zipfile.is_zipfile(cj)


def test_mismatched_models_leave_target_unchanged(tmp_path):
    path = tmp_path / "ck.npz"
    src = make_model()
    save_checkpoint(path, src, Adam(src), epoch=2)

    wider = make_model(hidden=5)
    before = params(wider)
    with pytest.raises(CheckpointError, match=r"'1.W' is float32\(3, 4\).*\(3, 5\)"):
        load_checkpoint(path, wider)
    fewer = Sequential(Dropout(0.5), Linear(3, 4), ReLU())
    with pytest.raises(CheckpointError, match=r"not in the model \['3.1.W', '3.1.bias'\]"):
        load_checkpoint(path, fewer)
    f64 = make_model(dtype=np.float64)
    with pytest.raises(CheckpointError, match="float64"):
        load_checkpoint(path, f64)
    # same parameters, but the first dropout is gone: generator "0.rng" has no home
    no_drop = Sequential(Identity(), Linear(3, 4), ReLU(),
                         Sequential(Dropout(0.1), Linear(4, 2)))
    with pytest.raises(CheckpointError, match="random generators differ"):
        load_checkpoint(path, no_drop)
    load_checkpoint(path, no_drop, restore_rng=False)   # allowed when asked for
    target = make_model(seed=4)
    tb = params(target)
    with pytest.raises(CheckpointError, match="saved by Adam"):
        load_checkpoint(path, target, SGD(target, lr=0.1))
    for k, v in tb.items():        # nothing was written into the model
        np.testing.assert_array_equal(dict(target.named_parameters())[k], v)
    for k, v in before.items():
        np.testing.assert_array_equal(dict(wider.named_parameters())[k], v)
    # no optimiser state saved but one requested
    save_checkpoint(path, src, epoch=1)
    with pytest.raises(CheckpointError, match="no optimiser state"):
        load_checkpoint(path, target, Adam(target))


def test_save_rejects_non_json_bookkeeping(tmp_path):
    with pytest.raises(TypeError, match="JSON"):
        save_checkpoint(tmp_path / "x.npz", make_model(), trainer={"a": object()})
    assert not (tmp_path / "x.npz").exists()
