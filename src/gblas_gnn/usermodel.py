"""A user's model named on the command line: ``--model FILE.py:NAME``.

``NAME`` is a :class:`gblas_gnn.nn.Module` subclass or a factory function in ``FILE.py``,
called as ``NAME(in_dim, num_classes, seed=..., dtype=..., executor=...)``; it returns the
module the command trains or predicts with. The command relies on the ``Module`` contract
only (call, ``backward``, ``params`` / ``grads``, ``named_parameters``, ``train`` /
``eval``, ``children``), so a module whose backward is written by hand and one whose backward
is derived run alike, on every executor.

The file runs as the user's own Python code, with the user's rights: that is the point, and
why it never runs implicitly. Only a path given on the command line is executed, never one
read from a checkpoint; the checkpoint records the file's path and SHA-256 so that ``infer``
can refuse a file that changed since training (:func:`check_unchanged`).
"""

from __future__ import annotations

import hashlib
import sys
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ModelFile", "UserModelError", "is_model_file", "model_file", "build",
           "check_unchanged", "blame"]


class UserModelError(ValueError):
    """The model file cannot be used (missing, changed, or its code failed)."""


@dataclass(frozen=True)
class ModelFile:
    """A model file as read once: what is hashed is what runs."""

    spec: str
    path: Path
    name: str
    sha256: str
    source: bytes = field(repr=False)

    def record(self) -> dict:
        """What a checkpoint keeps of it (JSON)."""
        return {"path": str(self.path), "name": self.name, "sha256": self.sha256}


def is_model_file(spec: str) -> bool:
    """Whether ``--model`` names a file (``FILE.py:NAME``) rather than a built-in model."""
    path, colon, _ = spec.rpartition(":")
    return bool(colon) and path.endswith(".py")


def model_file(spec: str) -> ModelFile:
    """Read ``FILE.py:NAME`` (nothing runs yet).

    Raises
    ------
    UserModelError
        A malformed spec, a missing or unreadable file.
    """
    path, colon, name = spec.rpartition(":")
    if not colon or not path.endswith(".py") or not name.isidentifier():
        raise UserModelError(f"--model {spec}: name a file and the model in it, as "
                             "FILE.py:NAME (NAME a class or function defined in FILE.py)")
    file = Path(path).expanduser().resolve()
    try:
        source = file.read_bytes()
    except OSError as exc:
        raise UserModelError(f"--model {spec}: cannot read {file} ({exc.strerror or exc})"
                             ) from None
    return ModelFile(spec, file, name, hashlib.sha256(source).hexdigest(), source)


def check_unchanged(mf: ModelFile, recorded: dict) -> None:
    """Refuse ``mf`` unless it is the file (same model name, same bytes) a checkpoint
    recorded; the message says which file and why."""
    if recorded.get("name") != mf.name:
        raise UserModelError(
            f"--model {mf.spec}: the checkpoint's model is {recorded.get('name')!r} from "
            f"{recorded.get('path')}, not {mf.name!r}")
    if recorded.get("sha256") != mf.sha256:
        moved = "" if recorded.get("path") == str(mf.path) else \
            f" (the checkpoint was written with {recorded.get('path')})"
        raise UserModelError(
            f"--model {mf.spec}: {mf.path} changed since the checkpoint was written{moved}: "
            f"its SHA-256 is {mf.sha256[:16]}…, the checkpoint recorded "
            f"{str(recorded.get('sha256'))[:16]}…; the weights belong to the old code. Restore "
            "that file, or train again")


def build(mf: ModelFile, in_dim: int, num_classes: int, *, seed: int, dtype,
          executor) -> object:
    """Run the file (once per call, as a fresh module) and return
    ``NAME(in_dim, num_classes, seed=seed, dtype=dtype, executor=executor)``.

    Raises
    ------
    UserModelError
        The file's code or ``NAME`` raised (the message gives the line of the file), ``NAME``
        is missing or not callable, or it returned something other than a
        :class:`gblas_gnn.nn.Module` with parameters.
    """
    from .nn.module import Module

    module = types.ModuleType(f"gblas_gnn_user_model_{mf.sha256[:12]}")
    module.__file__ = str(mf.path)
    where = f"--model {mf.spec}"
    # registered like an imported module (dataclasses and pickling look classes up there)
    sys.modules[module.__name__] = module
    try:
        exec(compile(mf.source, str(mf.path), "exec"), module.__dict__)  # noqa: S102
    except Exception as exc:             # noqa: BLE001 - the user's code: any error
        del sys.modules[module.__name__]
        raise UserModelError(f"{where}: running {mf.path} failed: {_located(exc, mf)}"
                             ) from exc
    factory = getattr(module, mf.name, None)
    if factory is None:
        defined = sorted(k for k, v in vars(module).items()
                         if callable(v) and not k.startswith("_") and
                         getattr(v, "__module__", None) == module.__name__)
        raise UserModelError(f"{where}: {mf.path} defines no {mf.name!r} (it defines "
                             f"{', '.join(defined) or 'nothing callable'})")
    if not callable(factory):
        raise UserModelError(f"{where}: {mf.name} is a {type(factory).__name__}, not a class "
                             "or function")
    try:
        model = factory(in_dim, num_classes, seed=seed, dtype=dtype, executor=executor)
    except Exception as exc:             # noqa: BLE001 - the user's code: any error
        raise UserModelError(
            f"{where}: {mf.name}({in_dim}, {num_classes}, seed={seed}, dtype=..., "
            f"executor=...) failed: {_located(exc, mf)}") from exc
    if not isinstance(model, Module):
        raise UserModelError(f"{where}: {mf.name}(...) returned a {type(model).__name__}; it "
                             "must return a gblas_gnn.nn.Module")
    if not any(True for _ in model.named_parameters()):
        raise UserModelError(f"{where}: the {type(model).__name__} {mf.name}(...) returned "
                             "has no parameters to train")
    return model


def blame(exc: Exception, mf: ModelFile) -> UserModelError | None:
    """``exc`` (raised while training or predicting) as an error of the model file, with
    the line, when it was raised in the file's code; ``None`` otherwise."""
    if not any(f.filename == str(mf.path) for f in traceback.extract_tb(exc.__traceback__)):
        return None
    return UserModelError(f"--model {mf.spec}: your model failed: {_located(exc, mf)}")


def _located(exc: Exception, mf: ModelFile) -> str:
    """``Kind: message (FILE, line L)``: the innermost line of the user's file involved."""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__)
             if f.filename == str(mf.path)]
    at = f" ({mf.path.name}, line {lines[-1]})" if lines else ""
    return f"{type(exc).__name__}: {exc}{at}"
