"""The ``gblas-gnn`` command and its dataset specifications."""

import argparse
import json
import os

import numpy as np
import pytest

import gblas_gnn as gg
from gblas_gnn.cli import main
from gblas_gnn.cli.command import DEFAULTS, _config, _load_dataset, _parser, _weight_decay
from gblas_gnn.data.specs import parse_dataset
from gblas_gnn.nn import models
from gblas_gnn.train import Adam

SMALL = "csbm:n=300,classes=3,train_per_class=10,val=60,test=100,features=16"


def test_train_then_infer(tmp_path, capsys):
    ck, metrics, preds = tmp_path / "ck.npz", tmp_path / "m.json", tmp_path / "p.npy"
    assert main(["train", "--model", "gat", "--dataset", SMALL, "--epochs", "3",
                 "--heads", "2", "--checkpoint", str(ck), "--metrics-json", str(metrics),
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "CSBM: gat test accuracy" in out
    m = json.loads(metrics.read_text())
    assert m["epochs_run"] == 3 and 0 <= m["test_acc"] <= 1
    assert m["config"]["heads"] == 2 and len(m["history"]["epoch"]) == 3
    assert main(["infer", "--checkpoint", str(ck), "--output", str(preds)]) == 0
    pred = np.load(preds)
    assert pred.shape == (300,) and pred.max() < 3
    assert f"{m['test_acc'] * 100:.2f}%" in capsys.readouterr().out


@pytest.mark.parametrize("model", ["agnn", "va", "gcn", "sgc", "gin"])
def test_every_model_trains(model, tmp_path):
    assert main(["train", "--model", model, "--dataset", SMALL, "--epochs", "2",
                 "--no-progress", "--metrics-json", str(tmp_path / "m.json")]) == 0


def test_attention_model_with_max_aggregation(tmp_path):
    assert main(["train", "--model", "agnn", "--dataset", SMALL, "--epochs", "2",
                 "--aggr", "max", "--no-progress"]) == 0


def test_resume_continues_the_run(tmp_path):
    ck = tmp_path / "ck.npz"
    base = ["train", "--model", "gcn", "--dataset", SMALL, "--no-progress", "--checkpoint",
            str(ck), "--patience", "0"]
    assert main(base + ["--epochs", "2"]) == 0
    assert main(base + ["--epochs", "4", "--resume", "--metrics-json",
                        str(tmp_path / "m.json")]) == 0
    assert json.loads((tmp_path / "m.json").read_text())["history"]["epoch"] == [1, 2, 3, 4]


@pytest.mark.parametrize("argv,message", [
    (["train", "--epochs", "0"], "--epochs must be positive"),
    (["train", "--patience", "-1"], "--patience must be ≥ 0"),
    (["train", "--normalize-features"], "planetoid data sets only"),
    (["train", "--lr", "-1"], "--lr must be positive"),
    (["train", "--model", "gcn", "--heads", "4"], "--heads does not apply"),
    (["train", "--hidden", "0"], "--hidden must be positive"),
    (["train", "--dropout", "1.0"], "--dropout must lie in"),
    (["train", "--aggr", "median"], "--aggr must be"),
    (["train", "--model", "gcn", "--aggr", "max"], "attention models and sage only"),
    (["train", "--model", "sgc", "--aggr", "sum"], "attention models and sage only"),
    (["train", "--model", "sage", "--aggr", "min"], "--aggr must be mean, max or sum for sage"),
    (["train", "--resume"], "--resume needs --checkpoint"),
    (["train", "--dataset", "imagenet"], "unknown dataset"),
    (["train", "--dataset", "npz:/no/such/file.npz"], "no such dataset file"),
    (["train", "--dataset", "planetoid:/no/such/dir/cora"], "/no/such/dir"),
    (["train", "--dataset", "kronecker:edge_factor=4"], "kronecker needs scale"),
    (["train", "--dataset", "csbm:n"], "key=value"),
    (["train", "--dataset", "erdos_renyi:n=10"], "erdos_renyi needs n=N,degree=D"),
    (["train", "--dataset", "erdos_renyi:n=10,degree=20"], "degree must lie in [0, n - 1 = 9]"),
    (["train", "--dataset", "erdos_renyi:n=1.5,degree=1"], "n must be a positive integer"),
    (["infer", "--checkpoint", "/no/such.npz"], "no checkpoint"),
    (["train", "--dense", "sharded"], "--dense sharded lays out dense tensors on a grid"),
])
def test_bad_arguments_exit_2_with_a_clear_message(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_unknown_model_is_refused_by_argparse(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--model", "transformer"])
    assert exc.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_npz_dataset_spec(tmp_path):
    d = parse_dataset(SMALL, seed=1)
    coo = d.adjacency.tocoo()
    path = tmp_path / "d.npz"
    np.savez(path, row=coo.row, col=coo.col, shape=np.array(coo.shape), x=d.x, y=d.y,
             train_mask=d.train_mask, val_mask=d.val_mask, test_mask=d.test_mask)
    e = parse_dataset(f"npz:{path}")
    assert (e.adjacency != d.adjacency).nnz == 0
    np.testing.assert_array_equal(e.x, d.x)
    assert e.num_classes == 3
    np.savez(path, row=coo.row, col=coo.col, shape=np.array(coo.shape))
    with pytest.raises(ValueError, match="lacks"):
        parse_dataset(f"npz:{path}")


def test_erdos_renyi_spec_is_a_synthetic_task():
    d = parse_dataset("erdos_renyi:n=300,degree=6", seed=0)
    assert d.name == "ErdosRenyi-300-6" and d.x.shape == (300, 32) and d.num_classes == 4
    assert 4 < d.adjacency.nnz / 300 < 8
    assert d.train_mask.sum() + d.val_mask.sum() + d.test_mask.sum() == 300


def test_kronecker_spec_is_a_synthetic_task():
    d = parse_dataset("kronecker:scale=8,edge_factor=4", seed=0)
    assert d.x.shape == (256, 32) and d.num_classes == 4
    assert d.train_mask.sum() + d.val_mask.sum() + d.test_mask.sum() == 256
    assert d.adjacency.nnz > 0


def config_of(*argv):
    return _config(_parser().parse_args(["train", *argv]))


@pytest.mark.parametrize("model", sorted(DEFAULTS))
def test_per_model_defaults_fill_the_configuration(model):
    cfg = config_of("--model", model)
    assert {k: cfg[k] for k in DEFAULTS[model]} == DEFAULTS[model]
    assert cfg["normalize_features"] is False  # the default dataset is csbm


def test_schedule_arguments_override_the_model_defaults():
    cfg = config_of("--model", "gat", "--epochs", "7", "--patience", "0", "--monitor",
                    "val_loss", "--weight-decay-layers", "first", "--lr", "0.1")
    assert (cfg["epochs"], cfg["patience"], cfg["monitor"]) == (7, 0, "val_loss")
    assert cfg["weight_decay_layers"] == "first" and cfg["lr"] == 0.1
    assert cfg["heads"] == DEFAULTS["gat"]["heads"]


def test_gcn_decays_only_its_first_layer():
    # Kipf & Welling (and PyG's gcn.py) put the L2 penalty on the first layer only
    model = models.build("gcn", 16, 3)
    cfg = config_of("--model", "gcn")
    assert cfg["weight_decay_layers"] == "first"
    wd = _weight_decay(cfg, model)
    assert wd == {"1.": 5e-4}
    opt = Adam(model, lr=0.01, weight_decay=wd)
    decays = {name: opt.decay_of(name) for name, _ in model.named_parameters()}
    assert decays == {"1.W": 5e-4, "1.bias": 5e-4, "4.W": 0.0, "4.bias": 0.0}
    assert _weight_decay(config_of("--model", "gcn", "--weight-decay-layers", "all"),
                         model) == 5e-4
    # the first parameterised layer of AGNN is its Linear, behind the input dropout
    agnn = models.build("agnn", 16, 3)
    assert _weight_decay({"weight_decay": 1e-3, "weight_decay_layers": "first"},
                         agnn) == {"1.": 1e-3}


def test_planetoid_features_are_normalised_and_infer_reuses_the_setting(tmp_path, capsys):
    from test_data_planetoid import _write_planetoid

    feats, *_ = _write_planetoid(tmp_path, "cora", n_allx=520)
    spec = f"planetoid:{tmp_path / 'cora'}"
    ck, metrics = tmp_path / "ck.npz", tmp_path / "m.json"
    assert main(["train", "--model", "gcn", "--dataset", spec, "--epochs", "3",
                 "--checkpoint", str(ck), "--metrics-json", str(metrics),
                 "--no-progress"]) == 0
    m = json.loads(metrics.read_text())
    assert m["config"]["normalize_features"] is True
    capsys.readouterr()
    assert main(["infer", "--checkpoint", str(ck)]) == 0
    assert f"test accuracy {m['test_acc'] * 100:.2f}%" in capsys.readouterr().out
    assert main(["train", "--model", "gcn", "--dataset", spec, "--epochs", "1",
                 "--no-normalize-features", "--metrics-json", str(metrics),
                 "--no-progress"]) == 0
    assert json.loads(metrics.read_text())["config"]["normalize_features"] is False
    # a configuration from before the option existed was trained on the raw features
    old = _load_dataset(spec, {"seed": 0, "dtype": "float32"})
    np.testing.assert_array_equal(old.x, feats)
    new = _load_dataset(spec, {"seed": 0, "dtype": "float32", "normalize_features": True})
    np.testing.assert_allclose(new.x.sum(axis=1)[feats.any(axis=1)], 1.0, rtol=1e-6)


def test_bench_is_not_a_subcommand(capsys):
    """The benchmark harness is ``python -m bench`` from a checkout, not part of the package."""
    from gblas_gnn.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["bench", "run", "--case", "tiny"])
    assert exc.value.code == 2 and "invalid choice: 'bench'" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["train", "--metrics-json", "{tmp}/no/m.json"], "--metrics-json {tmp}/no/m.json: the "
                                                     "folder {tmp}/no does not exist"),
    (["train", "--checkpoint", "{tmp}/no/ck.npz"], "the folder {tmp}/no does not exist"),
    (["train", "--checkpoint", "{tmp}"], "--checkpoint {tmp} is a folder"),
    (["train", "--checkpoint", "{tmp}/a.npz", "--metrics-json", "{tmp}/./a.npz"],
     "--checkpoint and --metrics-json name the same file"),
    (["infer", "--checkpoint", "{tmp}/ck.npz", "--output", "{tmp}/no/p.npy"],
     "--output {tmp}/no/p.npy: the folder {tmp}/no does not exist"),
    (["infer", "--checkpoint", "{tmp}/ck.npz", "--output", "{tmp}/ck.npz"],
     "would overwrite the checkpoint"),
])
def test_output_paths_are_checked_before_any_work(argv, message, tmp_path, capsys, monkeypatch):
    (tmp_path / "ck.npz").write_bytes(b"")         # never read: the check comes first

    def no_work(*args, **kwargs):
        raise AssertionError("data loaded before the output paths were checked")

    monkeypatch.setattr("gblas_gnn.cli.command._load_dataset", no_work)
    monkeypatch.setattr("gblas_gnn.train.read_checkpoint", no_work)
    assert main([a.format(tmp=tmp_path) for a in argv]) == 2
    out, err = capsys.readouterr()
    assert message.format(tmp=tmp_path) in err and not out


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into read-only folders")
def test_read_only_output_folder(tmp_path, capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        assert main(["train", "--metrics-json", str(folder / "m.json")]) == 2
    finally:
        folder.chmod(0o700)
    assert "is not writable" in capsys.readouterr().err


def test_infer_output_is_written_at_exactly_the_given_path(tmp_path):
    ck = tmp_path / "ck.npz"
    assert main(["train", "--model", "sgc", "--dataset", SMALL, "--epochs", "2",
                 "--checkpoint", str(ck), "--no-progress"]) == 0
    assert main(["infer", "--checkpoint", str(ck), "--output", str(tmp_path / "preds")]) == 0
    assert np.load(tmp_path / "preds").shape == (300,)      # np.save would have added .npy


def test_infer_on_another_dataset(tmp_path, capsys):
    """A Planetoid checkpoint on a csbm spec: no word about feature normalisation (the user
    never asked for it); the features and classes must match the trained model's."""
    from test_data_planetoid import _write_planetoid

    _write_planetoid(tmp_path, "cora", n_allx=520)             # 5 features, 3 classes
    ck = tmp_path / "ck.npz"
    assert main(["train", "--model", "gcn", "--dataset", f"planetoid:{tmp_path / 'cora'}",
                 "--epochs", "2", "--checkpoint", str(ck), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["infer", "--checkpoint", str(ck), "--dataset", SMALL]) == 2
    err = capsys.readouterr().err
    assert "normalisation" not in err
    assert ("trained on Cora (5 features, 3 classes); CSBM has 16 features and 3 classes: "
            "infer needs a data set with the same features and classes") in err
    same_shape = "csbm:n=300,classes=3,train_per_class=10,val=60,test=100,features=5"
    assert main(["infer", "--checkpoint", str(ck), "--dataset", same_shape]) == 0
    assert "CSBM: predicted 300 nodes" in capsys.readouterr().out


def test_infer_a_float64_planetoid_checkpoint(tmp_path, capsys):
    # the loader returns float32 features; infer converts them like train does
    from test_data_planetoid import _write_planetoid

    _write_planetoid(tmp_path, "cora", n_allx=520)
    ck = tmp_path / "ck.npz"
    assert main(["train", "--model", "gcn", "--dataset", f"planetoid:{tmp_path / 'cora'}",
                 "--dtype", "float64", "--epochs", "2", "--checkpoint", str(ck),
                 "--no-progress"]) == 0
    reported = capsys.readouterr().out.split("test accuracy ")[1][:6]
    assert main(["infer", "--checkpoint", str(ck)]) == 0
    assert f"test accuracy {reported}" in capsys.readouterr().out


def _subparsers():
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {name: p for name, p in sub.choices.items() if name != "bench"}


@pytest.mark.parametrize("command", ["train", "infer"])
def test_every_flag_has_help(command):
    for action in _subparsers()[command]._actions:
        assert action.help and action.help.strip(), f"{command} {action.option_strings}"


def test_train_help_shows_the_per_model_defaults_and_the_data_sets(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for model, d in DEFAULTS.items():     # one row per model, values from DEFAULTS itself
        row = next(line.split() for line in text.splitlines()
                   if line.split()[:1] == [model])
        assert row[1] == f"{d['lr']:g}" and row[-1] == d["monitor"]
        assert str(d["epochs"]) in row and f"({d['weight_decay_layers']})" in row
    words = " ".join(text.split())
    for phrase in ("8/head", "for gat per head", "row, col int (m,): edge col -> row",
                   "train_mask, val_mask, test_mask (n,) bool",
                   "object arrays (pickled data) are refused",
                   "throughput workloads whose accuracy means nothing",
                   "val_loss_acc the last epoch reaching both"):
        assert phrase in words, phrase


def test_show_config_prints_the_resolved_configuration_and_loads_nothing(capsys,
                                                                         monkeypatch):
    def no_work(*args, **kwargs):
        raise AssertionError("--show-config loaded data")

    monkeypatch.setattr("gblas_gnn.cli.command._load_dataset", no_work)
    argv = ["--model", "gat", "--heads", "4", "--aggr", "mean"]
    assert main(["train", *argv, "--show-config"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown == config_of(*argv)
    assert shown["heads"] == 4 and shown["aggr"] == "mean" and shown["hidden"] == 8
    assert main(["train", "--epochs", "0", "--show-config"]) == 2     # still validated


def test_convert_writes_the_tiled_layout(tmp_path, capsys):
    """``gblas-gnn convert`` rewrites a compressed, shuffled data-set .npz (and a .mtx) as the
    layout ranks map and read in parts (tiles); the graph and the data arrays are
    unchanged."""
    from gblas_gnn._io import map_npz

    rng = np.random.default_rng(0)
    n = 40
    g = gg.Graph.from_edges(rng.integers(0, n, 150), rng.integers(0, n, 150), n)
    r, c, v = g.A.to_coo()
    perm = rng.permutation(r.size)
    src = tmp_path / "in.npz"
    x = rng.standard_normal((n, 3)).astype(np.float32)
    np.savez_compressed(src, row=r[perm], col=c[perm], data=v[perm], shape=[n, n], x=x)
    out = tmp_path / "out.npz"
    assert main(["convert", str(src), str(out)]) == 0
    assert f"{n} vertices, {g.nnz} edges in 6x6 tiles, and x" in capsys.readouterr().out
    mapped = map_npz(out, "graph file")                 # uncompressed: maps
    assert str(mapped["order"]) == "tiles" and int(mapped["tiles"]) == 6
    np.testing.assert_array_equal(np.asarray(mapped["x"]), x)
    again = gg.Graph.from_npz(out)
    assert (again.to_scipy() != g.to_scipy()).nnz == 0
    g.save_mtx(tmp_path / "g.mtx")
    assert main(["convert", str(tmp_path / "g.mtx"), str(tmp_path / "m.npz")]) == 0
    assert (gg.Graph.from_npz(tmp_path / "m.npz").to_scipy() != g.to_scipy()).nnz == 0
    assert main(["convert", str(tmp_path / "missing.npz"), str(out)]) == 2
