"""``gblas-gnn train --model FILE.py:NAME`` and ``infer --model``: a user's model (a Module
subclass or a factory) trains and predicts; the checkpoint records the file and its hash;
infer refuses a changed file, and no file runs unless named on the command line."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from gblas_gnn.cli import main
from gblas_gnn.train import read_checkpoint

MODELS = Path(__file__).parent / "model_files" / "my_models.py"
SMALL = "csbm:n=300,classes=3,train_per_class=10,val=60,test=100,features=16"
#: a model file that leaves a mark beside itself whenever it runs
MARKING = '''
from pathlib import Path
Path(__file__).with_suffix(".ran").write_text("ran")
from my_models import small_gcn  # noqa: E402
'''


@pytest.fixture
def models(tmp_path, monkeypatch):
    """A copy of the model file in a folder of its own (on the path, as for a user)."""
    shutil.copy(MODELS, tmp_path / "my_models.py")
    (tmp_path / "marking.py").write_text(MARKING)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def train(*argv) -> int:
    return main(["train", "--dataset", SMALL, "--no-progress", *argv])


@pytest.mark.parametrize("name", ["SkipGAT", "TropicalGATv2", "small_gcn"])
@pytest.mark.parametrize("executor", ["cpu", "primitives"])
def test_a_model_file_trains_and_infers(name, executor, models, tmp_path, capsys):
    spec = f"{models / 'my_models.py'}:{name}"
    ck, mj = tmp_path / "ck.npz", tmp_path / "m.json"
    assert train("--model", spec, "--epochs", "4", "--executor", executor, "--checkpoint",
                 str(ck), "--metrics-json", str(mj)) == 0
    out = capsys.readouterr().out
    m = json.loads(mj.read_text())
    assert out.startswith(f"CSBM: {spec} test accuracy {m['test_acc'] * 100:.2f}%")
    assert m["config"]["lr"] == 0.01 and m["epochs_run"] == 4
    recorded = read_checkpoint(ck).trainer["metadata"]["model_file"]
    source = (models / "my_models.py").read_bytes()
    assert recorded == {"path": str(models / "my_models.py"), "name": name,
                        "sha256": hashlib.sha256(source).hexdigest()}
    assert main(["infer", "--checkpoint", str(ck), "--model", spec, "--executor", executor,
                 "--output", str(tmp_path / "p.npy")]) == 0
    assert f"test accuracy {m['test_acc'] * 100:.2f}%" in capsys.readouterr().out
    assert np.load(tmp_path / "p.npy").shape == (300,)


def test_a_checkpoint_alone_never_runs_a_file(models, tmp_path, capsys):
    spec = f"{models / 'marking.py'}:small_gcn"
    ck, mark = tmp_path / "ck.npz", models / "marking.ran"
    assert train("--model", spec, "--epochs", "2", "--checkpoint", str(ck)) == 0
    assert mark.exists()
    mark.unlink()
    capsys.readouterr()
    assert main(["infer", "--checkpoint", str(ck)]) == 2
    err = capsys.readouterr().err
    assert (f"holds a model defined by your code, small_gcn in {models / 'marking.py'}; infer "
            f"runs that code only when you name the file: --model {spec}") in err
    assert not mark.exists()
    # --show-config reads (hashes) the file without running it
    assert train("--model", spec, "--show-config") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["model_file"]["sha256"] == hashlib.sha256(
        (models / "marking.py").read_bytes()).hexdigest()
    assert not mark.exists()


def test_infer_refuses_a_changed_file_before_running_it(models, tmp_path, capsys):
    spec = f"{models / 'marking.py'}:small_gcn"
    ck, mark = tmp_path / "ck.npz", models / "marking.ran"
    assert train("--model", spec, "--epochs", "2", "--checkpoint", str(ck)) == 0
    mark.unlink()
    with open(models / "marking.py", "a") as f:
        f.write("# edited\n")
    capsys.readouterr()
    for command in (["infer", "--checkpoint", str(ck), "--model", spec],
                    ["train", "--dataset", SMALL, "--model", spec, "--epochs", "3",
                     "--checkpoint", str(ck), "--resume"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert (f"--model {spec}: {models / 'marking.py'} changed since the checkpoint was "
                "written: its SHA-256 is") in err
        assert "the weights belong to the old code" in err
    assert not mark.exists()


def test_infer_refuses_another_model_and_a_built_in_checkpoint(models, tmp_path, capsys):
    spec = f"{models / 'my_models.py'}"
    assert train("--model", f"{spec}:small_gcn", "--epochs", "1", "--checkpoint",
                 str(tmp_path / "user.npz")) == 0
    assert train("--model", "sgc", "--epochs", "1", "--checkpoint",
                 str(tmp_path / "sgc.npz")) == 0
    capsys.readouterr()
    assert main(["infer", "--checkpoint", str(tmp_path / "user.npz"), "--model",
                 f"{spec}:SkipGAT"]) == 2
    assert "the checkpoint's model is 'small_gcn'" in capsys.readouterr().err
    assert main(["infer", "--checkpoint", str(tmp_path / "sgc.npz"), "--model",
                 f"{spec}:small_gcn"]) == 2
    assert "holds the built-in sgc model, not one from a file" in capsys.readouterr().err
    assert main(["infer", "--checkpoint", str(tmp_path / "sgc.npz"), "--model", "gcn"]) == 2
    assert "--model takes FILE.py:NAME, got 'gcn'" in capsys.readouterr().err


BROKEN = {
    "raises": ("import numpy as np\n\nraise RuntimeError('no GPU here')\n",
               "running {path} failed: RuntimeError: no GPU here (bad.py, line 3)"),
    "syntax": ("def model(:\n", "running {path} failed: SyntaxError: invalid syntax"),
    "missing": ("def other(*a, **k):\n    pass\n",
                "{path} defines no 'model' (it defines other)"),
    "not callable": ("model = 3\n", "model is a int, not a class or function"),
    "not a module": ("def model(in_dim, num_classes, **kw):\n    return [in_dim]\n",
                     "model(...) returned a list; it must return a gblas_gnn.nn.Module"),
    "no parameters": ("import gblas_gnn as gg\n\ndef model(i, c, seed, dtype, executor):\n"
                      "    return gg.nn.ReLU(dtype=dtype)\n", "has no parameters to train"),
    "factory raises": ("def model(in_dim, num_classes, seed, dtype, executor):\n"
                       "    raise ValueError(f'cannot take {in_dim} features')\n",
                       "model(16, 3, seed=0, dtype=..., executor=...) failed: ValueError: "
                       "cannot take 16 features (bad.py, line 2)"),
    "forward raises": ("import gblas_gnn as gg\n\nclass model(gg.nn.Module):\n"
                       "    def __init__(self, i, c, seed, dtype, executor):\n"
                       "        super().__init__(dtype, executor)\n"
                       "        self.lin = gg.nn.Linear(i, c, dtype=dtype, executor=executor)\n"
                       "    def children(self):\n        return [self.lin]\n"
                       "    def forward(self, g, H):\n"
                       "        return self.lin(g, H[:, :3])\n"
                       "    def backward(self, dout):\n        return self.lin.backward(dout)\n",
                       "your model failed: ValueError: H must have 16 columns, got shape "
                       "(300, 3) (bad.py, line 10)"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_model_file_is_one_clear_line(case, tmp_path, capsys):
    source, message = BROKEN[case]
    (tmp_path / "bad.py").write_text(source)
    assert train("--model", f"{tmp_path / 'bad.py'}:model", "--epochs", "1") == 2
    err = capsys.readouterr().err
    assert message.format(path=tmp_path / "bad.py") in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("argv,message", [
    (["--model", "/no/such/model.py:Net"], "--model /no/such/model.py:Net: cannot read "
                                           "/no/such/model.py"),
    (["--model", "{models}/my_models.py:not-a-name"], "name a file and the model in it, as "
                                                      "FILE.py:NAME"),
    (["--model", "{models}/my_models.py:small_gcn", "--hidden", "4"],
     "--hidden does not apply to --model {models}/my_models.py:small_gcn: the file decides "
     "its model's architecture"),
    (["--model", "{models}/my_models.py:small_gcn", "--aggr", "max"],
     "--aggr applies to attention models and sage only"),
])
def test_bad_model_arguments(argv, message, models, capsys):
    assert train(*[a.format(models=models) for a in argv]) == 2
    assert message.format(models=models) in capsys.readouterr().err


def test_the_help_says_how_a_model_file_runs(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for phrase in ("FILE.py:NAME, your own model: FILE.py runs as Python code",
                   "NAME(in_dim, num_classes, seed=..., dtype=..., executor=...)",
                   "only the file named on the command line is ever run, never one read "
                   "from a checkpoint", "refuses a file that changed since"):
        assert phrase in text, phrase
    with pytest.raises(SystemExit):
        main(["infer", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "infer never runs it unless named here" in text


def test_an_error_of_the_model_while_predicting_names_its_line(models, tmp_path, capsys,
                                                               monkeypatch):
    (tmp_path / "fragile.py").write_text(
        "import os\n\nfrom my_models import SkipGAT\n\n\nclass Fragile(SkipGAT):\n"
        "    def forward(self, g, H):\n"
        "        if os.environ.get('FRAGILE_BREAK'):\n"
        "            raise RuntimeError('broken on purpose')\n"
        "        return super().forward(g, H)\n")
    spec = f"{tmp_path / 'fragile.py'}:Fragile"
    assert train("--model", spec, "--epochs", "1", "--checkpoint", str(tmp_path / "ck.npz")) == 0
    capsys.readouterr()
    monkeypatch.setenv("FRAGILE_BREAK", "1")
    assert main(["infer", "--checkpoint", str(tmp_path / "ck.npz"), "--model", spec]) == 2
    err = capsys.readouterr().err
    assert (f"--model {spec}: your model failed: RuntimeError: broken on purpose (fragile.py, "
            "line 9)") in err and err.count("\n") == 1
