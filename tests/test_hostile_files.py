"""Corrupt and hostile ``.npz`` files get one clear message that never suggests unpickling.

numpy's own messages for these files say "allow_pickle=True" or "If you trust the file you
can load it unsafely ... pickle.load()": advice that runs the file's code. Every reader of
``.npz`` files (data sets, checkpoints, graphs) goes through ``gblas_gnn._io.read_npz``.
"""

from __future__ import annotations

import pickle
import zipfile

import numpy as np
import pytest

from gblas_gnn import Graph
from gblas_gnn.cli import main
from gblas_gnn.train import CheckpointError, read_checkpoint

FORBIDDEN = ("allow_pickle", "pickle.load", "trust", "unsafe")


def _object_array(path):
    np.savez(path, row=np.array([0]), col=np.array([0]), shape=np.array([1, 1]),
             x=np.array([{"payload": 1}, None], dtype=object))


def _npy(path):
    with open(path, "wb") as f:
        np.save(f, np.arange(3))


def _pickle(path):
    path.write_bytes(pickle.dumps({"x": np.zeros(2)}))


def _empty(path):
    path.write_bytes(b"")


def _junk(path):
    path.write_bytes(b"PK\x03\x04 and then no zip at all")


def _truncated(path):
    np.savez(path, x=np.zeros((50, 50)))
    path.write_bytes(path.read_bytes()[:300])


def _foreign_member(path):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x.npy", b"not an array header")
        z.writestr("notes.txt", b"hello")


HOSTILE = {
    "object array": (_object_array, "holds an object array ('x'): pickled Python objects, "
                                    "which gblas_gnn refuses to load"),
    ".npy": (_npy, "is a single .npy array"),
    "pickle": (_pickle, "pickled Python data, which gblas_gnn never loads"),
    "empty": (_empty, "the file is empty"),
    "junk": (_junk, "is a corrupt .npz"),
    "truncated": (_truncated, "is a corrupt .npz"),
    "foreign member": (_foreign_member, "is a corrupt .npz"),
}


@pytest.mark.parametrize("kind", HOSTILE)
def test_library_readers(kind, tmp_path):
    make, message = HOSTILE[kind]
    path = tmp_path / "f.npz"
    make(path)
    with pytest.raises(CheckpointError) as ck_err:
        read_checkpoint(path)
    with pytest.raises(ValueError) as graph_err:
        Graph.from_npz(path)
    for exc in (ck_err.value, graph_err.value):
        assert message in str(exc)
        assert not any(word in str(exc) for word in FORBIDDEN), str(exc)
        assert exc.__cause__ is None or "pickle" not in str(exc.__cause__)


@pytest.mark.parametrize("kind", HOSTILE)
@pytest.mark.parametrize("command", ["train", "infer"])
def test_command_line(kind, command, tmp_path, capsys):
    make, message = HOSTILE[kind]
    path = tmp_path / "f.npz"
    make(path)
    argv = (["train", "--dataset", f"npz:{path}", "--no-progress"] if command == "train"
            else ["infer", "--checkpoint", str(path)])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("gblas-gnn: error: ") and err.count("\n") == 1
    assert message in err and ("dataset file" if command == "train" else "checkpoint") in err
    assert not any(word in err for word in FORBIDDEN), err
