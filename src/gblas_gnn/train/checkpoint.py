"""Crash-safe training checkpoints: one ``.npz`` (no pickles) holding everything a run needs
to continue bit-identically.

Contents of the archive (all plain numpy arrays; text is stored as a 0-d unicode array):

* ``param/<name>`` — every model parameter, ``<name>`` as in ``model.named_parameters()``;
* ``optim/<key>`` — the optimiser's :meth:`~gblas_gnn.train.optim.Optimizer.state_dict`;
* ``best/<name>`` — optional extra parameter set: the trainer's best-so-far weights, the
  ones it selects and reports on (``load_checkpoint(..., weights="selected")``);
* ``meta`` — JSON text: format tag, epoch, the state of every random generator of the model,
  and a free JSON dict of trainer bookkeeping (history, best validation value, patience
  counter, ...).

**RNG convention.** A module that draws random numbers keeps its ``numpy.random.Generator``
as a plain attribute of the module — by convention named ``rng`` (``Dropout``), any name works
(``GATConv.dropout_rng``). :func:`named_rngs` walks the model through ``Module.children()``
and collects every attribute whose value is a ``Generator``, keyed like parameters:
``"<module path>.<attribute>"`` (``"0.rng"``, ``"1.dropout_rng"``, ``"2.0.rng"`` in nested
containers). Their bit-generator states are saved and restored by that key. Generators hidden
inside lists / dicts are not found (a ``RandomState`` attribute is refused): keep each stream
in its own attribute, or expose sub-modules through ``children()``.

The file is written with :func:`gblas_gnn._io.atomic_write` (temporary file, fsync, rename),
so a crash or an error while writing leaves the previous checkpoint untouched.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .._io import atomic_write, read_npz
from ..executors import to_numpy
from ..nn.module import Module

__all__ = ["CheckpointError", "Checkpoint", "named_modules", "named_rngs", "rng_states",
           "set_rng_states", "save_checkpoint", "read_checkpoint", "load_checkpoint"]

FORMAT = "gblas_gnn.checkpoint/1"


class CheckpointError(ValueError):
    """A checkpoint file is corrupt, foreign, or does not match the model / optimiser."""


@dataclass
class Checkpoint:
    """What a checkpoint file holds (arrays are copies owned by this object)."""

    epoch: int
    params: dict[str, np.ndarray]
    optimizer: dict[str, np.ndarray] | None
    rng: dict[str, dict]
    trainer: dict = field(default_factory=dict)
    best_params: dict[str, np.ndarray] | None = None

    @property
    def selected_params(self) -> dict[str, np.ndarray]:
        """The weights the trainer selected (``best_params``) when saved, else ``params``."""
        return self.params if self.best_params is None else self.best_params


# ---------------------------------------------------------------------------- module walking
def named_modules(model: Module, prefix: str = "") -> Iterator[tuple[str, Module]]:
    """``(path, module)`` for ``model`` and every descendant (via ``children()``); the root's
    path is ``prefix`` (default ``""``), children are ``"<i>"``, grandchildren ``"<i>.<j>"``."""
    yield prefix, model
    for i, child in enumerate(model.children()):
        yield from named_modules(child, f"{prefix}.{i}" if prefix else str(i))


def named_rngs(model: Module) -> dict[str, np.random.Generator]:
    """Every ``numpy.random.Generator`` held directly as an attribute of ``model`` or of one of
    its descendants, keyed ``"<module path>.<attribute>"`` (``"<attribute>"`` for the root),
    e.g. ``"0.rng"`` for a leading :class:`~gblas_gnn.nn.Dropout`, ``"1.dropout_rng"`` for a
    GAT layer's attention-dropout generator. See the module docstring for the convention."""
    out: dict[str, np.random.Generator] = {}
    for path, m in named_modules(model):
        for attr, value in vars(m).items():
            if isinstance(value, np.random.Generator):
                out[f"{path}.{attr}" if path else attr] = value
            elif isinstance(value, (np.random.RandomState, np.random.BitGenerator)):
                raise TypeError(
                    f"module {path or '<root>'!r} ({type(m).__name__}) keeps a "
                    f"{type(value).__name__} in {attr!r}; use a numpy.random.Generator "
                    "(np.random.default_rng) so that checkpoints can capture it")
    return out


def rng_states(model: Module) -> dict[str, dict]:
    """JSON-able bit-generator state of every ``rng`` in the model."""
    return {path: rng.bit_generator.state for path, rng in named_rngs(model).items()}


def _checked_rng_states(model: Module, states: Mapping[str, dict]) -> dict[str, dict]:
    rngs = named_rngs(model)
    if set(rngs) != set(states):
        raise CheckpointError(
            "random generators differ between the checkpoint and the model: "
            f"checkpoint has {sorted(states)}, model has {sorted(rngs)}")
    for path, rng in rngs.items():
        st = states[path]
        kind = type(rng.bit_generator).__name__
        if not isinstance(st, dict) or st.get("bit_generator") != kind:
            raise CheckpointError(f"generator {path!r}: checkpoint holds a "
                                  f"{st.get('bit_generator') if isinstance(st, dict) else st!r}"
                                  f" state, the model uses {kind}")
        try:  # validate on a scratch generator first: nothing changes on failure
            type(rng.bit_generator)().state = st
        except (TypeError, ValueError, KeyError) as exc:
            raise CheckpointError(f"generator {path!r}: invalid state "
                                  f"({exc})") from exc
    return dict(states)


def set_rng_states(model: Module, states: Mapping[str, dict]) -> None:
    """Restore the states returned by :func:`rng_states` (all checked before any is set)."""
    states = _checked_rng_states(model, states)
    for path, rng in named_rngs(model).items():
        rng.bit_generator.state = states[path]


# ---------------------------------------------------------------------------- writing
def save_checkpoint(path, model: Module, optimizer=None, *, epoch: int = 0,
                    trainer: Mapping | None = None,
                    best_params: Mapping[str, np.ndarray] | None = None) -> None:
    """Write model parameters, optimiser state, ``epoch``, RNG states, the JSON-able
    ``trainer`` bookkeeping and optional ``best_params`` to ``path`` atomically.

    Raises:
        TypeError: ``trainer`` is not JSON-serialisable.
    """
    path = Path(path)
    arrays: dict[str, np.ndarray] = {}
    names = []
    for name, p in model.named_parameters():
        arrays[f"param/{name}"] = to_numpy(p)
        names.append(name)
    if best_params is not None:
        for name, p in best_params.items():
            arrays[f"best/{name}"] = to_numpy(p)
    if optimizer is not None:
        for key, arr in optimizer.state_dict().items():
            arrays[f"optim/{key}"] = arr
    meta = {
        "format": FORMAT,
        "epoch": int(epoch),
        "params": names,
        "has_optimizer": optimizer is not None,
        "has_best": best_params is not None,
        "rng": rng_states(model),
        "trainer": dict(trainer or {}),
    }
    try:
        meta_text = json.dumps(meta, allow_nan=True)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"checkpoint bookkeeping is not JSON-serialisable: {exc}") from exc
    arrays["meta"] = np.array(meta_text)

    atomic_write(path, lambda f: np.savez(f, **arrays))


# ---------------------------------------------------------------------------- reading
def read_checkpoint(path) -> Checkpoint:
    """Read and validate the structure of a checkpoint file, without a model.

    Raises:
        FileNotFoundError: no file at ``path``.
        CheckpointError: the file is not a readable checkpoint of this format.
    """
    path = Path(path)
    data = read_npz(path, "checkpoint", CheckpointError)
    if "meta" not in data or data["meta"].dtype.kind != "U" or data["meta"].ndim != 0:
        raise CheckpointError(f"{str(path)!r} is not a gblas_gnn checkpoint (no metadata)")
    try:
        meta = json.loads(str(data["meta"]))
        fmt = meta["format"]
        epoch = int(meta["epoch"])
        names = list(meta["params"])
        rng = dict(meta["rng"])
        trainer = dict(meta["trainer"])
        has_opt, has_best = bool(meta["has_optimizer"]), bool(meta["has_best"])
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"checkpoint {str(path)!r} has corrupt metadata ({exc!r})") from exc
    if fmt != FORMAT:
        raise CheckpointError(f"checkpoint {str(path)!r} has format {fmt!r}, expected {FORMAT!r}")
    if epoch < 0:
        raise CheckpointError(f"checkpoint {str(path)!r} has a negative epoch ({epoch})")
    params, best, optim = {}, {}, {}
    for key, arr in data.items():
        kind, _, name = key.partition("/")
        if key == "meta":
            continue
        if kind == "param":
            params[name] = arr
        elif kind == "best":
            best[name] = arr
        elif kind == "optim":
            optim[name] = arr
        else:
            raise CheckpointError(f"checkpoint {str(path)!r} has an unexpected entry {key!r}")
    if set(params) != set(names):
        raise CheckpointError(f"checkpoint {str(path)!r} is incomplete: parameters "
                              f"{sorted(set(names) ^ set(params))} are missing or extra")
    for group, arrs in (("parameter", params), ("best parameter", best)):
        for name, arr in arrs.items():
            if arr.dtype.kind != "f" or not np.isfinite(arr).all():
                raise CheckpointError(f"checkpoint {str(path)!r}: {group} {name!r} is not a "
                                      "finite float array")
    if has_opt and not optim:
        raise CheckpointError(f"checkpoint {str(path)!r} lost its optimiser state")
    return Checkpoint(epoch=epoch, params={n: params[n] for n in names},
                      optimizer=optim if has_opt else None, rng=rng, trainer=trainer,
                      best_params=best if has_best else None)


def _match_params(model_params: dict[str, np.ndarray], saved: Mapping[str, np.ndarray],
                  what: str, path) -> None:
    missing = [n for n in model_params if n not in saved]
    extra = [n for n in saved if n not in model_params]
    if missing or extra:
        raise CheckpointError(
            f"checkpoint {str(path)!r} does not match the model: {what} missing from the "
            f"checkpoint {missing}, not in the model {extra}")
    for name, p in model_params.items():
        s = saved[name]
        if s.shape != p.shape or s.dtype != p.dtype:
            raise CheckpointError(
                f"checkpoint {str(path)!r} does not match the model: {what} {name!r} is "
                f"{s.dtype}{s.shape} in the checkpoint, {p.dtype}{p.shape} in the model")


def load_checkpoint(path, model: Module, optimizer=None, *, restore_rng: bool = True,
                    weights: str = "last") -> Checkpoint:
    """Load a checkpoint into ``model`` (in place, same arrays) and, when given, ``optimizer``;
    restore every generator's state (``restore_rng``). Everything is validated before anything
    changes, so a failed load leaves model and optimiser as they were.

    Args:
        weights: which parameters go into ``model``: ``"last"`` (``param/*``, the state of the
            last epoch, what resuming needs) or ``"selected"`` (``best/*``, the weights the
            trainer selected and reported on, when the checkpoint holds them; otherwise the
            last ones, which are then the selected ones too).

    Returns:
        the :class:`Checkpoint` (epoch, trainer bookkeeping, best parameters, ...).

    Raises:
        FileNotFoundError: no file at ``path``.
        CheckpointError: corrupt file, or parameter names / shapes / dtypes, generators or
            optimiser state that do not match.
        ValueError: ``weights`` is neither ``"last"`` nor ``"selected"``.
    """
    if weights not in ("last", "selected"):
        raise ValueError(f"weights must be 'last' or 'selected', got {weights!r}")
    ck = read_checkpoint(path)
    model_params = dict(model.named_parameters())
    _match_params(model_params, ck.params, "parameters", path)
    if ck.best_params is not None:
        _match_params(model_params, ck.best_params, "best parameters", path)
    if restore_rng:
        _checked_rng_states(model, ck.rng)
    if optimizer is not None:
        if ck.optimizer is None:
            raise CheckpointError(f"checkpoint {str(path)!r} holds no optimiser state")
        try:
            optimizer.load_state_dict(ck.optimizer)
        except ValueError as exc:
            raise CheckpointError(f"checkpoint {str(path)!r}: {exc}") from exc
    source = ck.selected_params if weights == "selected" else ck.params
    for name, p in model_params.items():
        p[...] = model.executor.asarray(source[name])
    if restore_rng:
        set_rng_states(model, ck.rng)
    return ck
