"""SGD and Adam with PyTorch semantics, updating a model's parameter arrays in place.

An optimiser is bound to a model: at every :meth:`Optimizer.step` it walks
``model.named_parameters()`` / ``model.named_grads()`` (names such as ``"1.W"``) and updates
each parameter array in place, so the model always sees its own arrays. ``weight_decay`` is a
float for every parameter, or a ``{name_prefix: value}`` dict (the longest matching prefix
wins, parameters matching none get 0) — e.g. ``{"1.": 5e-4}`` decays only the first GCN
layer, as the GCN paper does.

Optimiser state (step count, moment / momentum buffers) and hyper-parameters round-trip
through :meth:`Optimizer.state_dict` / :meth:`Optimizer.load_state_dict` as a flat
``{str: ndarray}`` dict, which :mod:`gblas_gnn.train.checkpoint` stores without pickling.
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping

import numpy as np

from ..executors import to_numpy
from ..nn.module import Module

__all__ = ["Optimizer", "SGD", "Adam"]


def _real(value, name: str, lo: float = 0.0, lo_open: bool = False,
          hi: float | None = None, hi_open: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or (v <= lo if lo_open else v < lo) \
            or (hi is not None and (v >= hi if hi_open else v > hi)):
        lo_b = "(" if lo_open else "["
        hi_b = (")" if hi_open else "]") if hi is not None else ")"
        raise ValueError(f"{name} must be in {lo_b}{lo}, {hi if hi is not None else 'inf'}{hi_b}, "
                         f"got {value!r}")
    return v


class Optimizer(ABC):
    """Base class: binds to a model, resolves per-parameter weight decay, owns the state."""

    #: names of the per-parameter state buffers (subclasses set it)
    buffers: tuple[str, ...] = ()

    def __init__(self, model: Module, lr: float, weight_decay: float | Mapping[str, float]):
        if not isinstance(model, Module):
            raise TypeError(f"the optimiser needs a gblas_gnn.nn.Module, got "
                            f"{type(model).__name__}")
        self.model = model
        self.lr = _real(lr, "lr", lo_open=True)
        names = [n for n, _ in model.named_parameters()]
        if len(set(names)) != len(names):
            raise ValueError("the model has duplicate parameter names")
        if not names:
            raise ValueError("the model has no parameters to optimise")
        self._shapes = {n: (p.shape, p.dtype) for n, p in model.named_parameters()}
        if isinstance(weight_decay, Mapping):
            wd = {}
            for k, v in weight_decay.items():
                if not isinstance(k, str):
                    raise TypeError(f"weight_decay keys must be parameter-name prefixes, got {k!r}")
                wd[k] = _real(v, f"weight_decay[{k!r}]")
                if not any(n.startswith(k) for n in names):
                    raise ValueError(f"weight_decay prefix {k!r} matches no parameter; "
                                     f"parameters: {', '.join(names)}")
            self.weight_decay: float | dict[str, float] = wd
        else:
            self.weight_decay = _real(weight_decay, "weight_decay")
        self.step_count = 0
        self.state: dict[str, dict[str, np.ndarray]] = {n: {} for n in names}

    def decay_of(self, name: str) -> float:
        """The weight decay that applies to parameter ``name``."""
        if not isinstance(self.weight_decay, dict):
            return self.weight_decay
        best, value = -1, 0.0
        for prefix, v in self.weight_decay.items():
            if name.startswith(prefix) and len(prefix) > best:
                best, value = len(prefix), v
        return value

    def _pairs(self):
        params = dict(self.model.named_parameters())
        if set(params) != set(self._shapes):
            raise RuntimeError("the model's parameters changed since the optimiser was built")
        for name, grad in self.model.named_grads():
            p = params[name]
            if grad.shape != p.shape:
                raise ValueError(f"gradient of {name!r} has shape {grad.shape}, "
                                 f"parameter has {p.shape}")
            yield name, p, grad

    def zero_grad(self) -> None:
        """Zero every gradient of the model."""
        self.model.zero_grad()

    def step(self) -> None:
        """Apply one update to every parameter, in place."""
        self.step_count += 1
        for name, p, g in self._pairs():
            self._update(name, p, g.astype(p.dtype, copy=False))

    @abstractmethod
    def _update(self, name: str, p: np.ndarray, g: np.ndarray) -> None:
        """Update parameter ``p`` in place from its gradient ``g`` (SGD / Adam rule)."""

    # ------------------------------------------------------------------ state
    def hyperparameters(self) -> dict:
        """The JSON-able hyper-parameters (restored by :meth:`load_state_dict`)."""
        return {"lr": self.lr, "weight_decay": self.weight_decay}

    def state_dict(self) -> dict[str, np.ndarray]:
        """Flat ``{key: ndarray}``: ``"type"``, ``"hyper"`` (JSON text), ``"step"`` and
        ``"<buffer>/<param name>"`` for every state buffer (host copies)."""
        out: dict[str, np.ndarray] = {
            "type": np.array(type(self).__name__),
            "hyper": np.array(json.dumps(self.hyperparameters())),
            "step": np.array(self.step_count, dtype=np.int64),
        }
        for name, bufs in self.state.items():
            for b, arr in bufs.items():
                out[f"{b}/{name}"] = np.array(to_numpy(arr))      # a host copy
        return out

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore what :meth:`state_dict` returned; every key, name and shape is checked
        before anything changes."""
        try:
            kind = str(np.asarray(state["type"]))
            hyper = json.loads(str(np.asarray(state["hyper"])))
            step = int(np.asarray(state["step"]))
        except (KeyError, ValueError, TypeError) as exc:
            raise ValueError(f"optimiser state is incomplete or corrupt: {exc}") from exc
        if kind != type(self).__name__:
            raise ValueError(f"optimiser state was saved by {kind}, cannot load into "
                             f"{type(self).__name__}")
        if step < 0:
            raise ValueError(f"optimiser step count must be ≥ 0, got {step}")
        new: dict[str, dict[str, np.ndarray]] = {n: {} for n in self._shapes}
        for key, arr in state.items():
            if key in ("type", "hyper", "step"):
                continue
            buf, _, name = key.partition("/")
            if buf not in self.buffers or name not in self._shapes:
                raise ValueError(f"optimiser state has an unexpected entry {key!r}")
            shape, dtype = self._shapes[name]
            arr = np.asarray(arr)
            if arr.shape != shape or arr.dtype != dtype:
                raise ValueError(f"optimiser state {key!r} is {arr.dtype}{arr.shape}, the "
                                 f"parameter is {dtype}{shape}")
            new[name][buf] = self.model.executor.asarray(arr.copy())
        self._check_loaded(new, step)
        snapshot = dict(self.__dict__)
        try:
            self._load_hyper(hyper)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            self.__dict__.update(snapshot)
            raise ValueError(f"optimiser hyper-parameters are incomplete or invalid: "
                             f"{exc!r}") from exc
        self.state = new
        self.step_count = step

    def _check_loaded(self, new: dict, step: int) -> None:  # noqa: B027 - optional hook
        """Hook for a subclass to validate a loaded state (nothing to check by default)."""

    def _load_hyper(self, hyper: dict) -> None:
        self.lr = _real(hyper["lr"], "lr", lo_open=True)
        wd = hyper["weight_decay"]
        self.weight_decay = ({k: _real(v, "weight_decay") for k, v in wd.items()}
                             if isinstance(wd, dict) else _real(wd, "weight_decay"))


class SGD(Optimizer):
    r"""Stochastic gradient descent with optional momentum and L2 weight decay
    (``torch.optim.SGD``).

    .. math::
        g \leftarrow \nabla + \lambda\,\theta, \qquad
        b \leftarrow \mu b + (1 - \tau) g \;(b = g \text{ at the first step}), \qquad
        \theta \leftarrow \theta - \eta\,(g + \mu b \text{ if nesterov else } b)

    without momentum (:math:`\mu = 0`) simply :math:`\theta \leftarrow \theta - \eta g`.

    Args:
        model: the module whose parameters are updated in place.
        lr: learning rate η > 0.
        momentum: μ ≥ 0. dampening: τ ≥ 0. nesterov: Nesterov momentum (needs μ > 0, τ = 0).
        weight_decay: λ ≥ 0, or a ``{name_prefix: λ}`` dict.
    """

    buffers = ("momentum_buffer",)

    def __init__(self, model: Module, lr: float, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float | Mapping[str, float] = 0.0, nesterov: bool = False):
        super().__init__(model, lr, weight_decay)
        self.momentum = _real(momentum, "momentum")
        self.dampening = _real(dampening, "dampening")
        self.nesterov = bool(nesterov)
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise ValueError("Nesterov momentum requires momentum > 0 and dampening = 0")

    def _update(self, name, p, g):
        wd = self.decay_of(name)
        if wd:
            g = g + p.dtype.type(wd) * p
        if self.momentum:
            st = self.state[name]
            if "momentum_buffer" not in st:
                buf = st["momentum_buffer"] = g.copy()
            else:
                buf = st["momentum_buffer"]
                buf *= p.dtype.type(self.momentum)
                buf += p.dtype.type(1 - self.dampening) * g
            g = g + p.dtype.type(self.momentum) * buf if self.nesterov else buf
        p -= p.dtype.type(self.lr) * g

    def hyperparameters(self) -> dict:
        return {**super().hyperparameters(), "momentum": self.momentum,
                "dampening": self.dampening, "nesterov": self.nesterov}

    def _load_hyper(self, hyper: dict) -> None:
        super()._load_hyper(hyper)
        self.momentum = _real(hyper["momentum"], "momentum")
        self.dampening = _real(hyper["dampening"], "dampening")
        self.nesterov = bool(hyper["nesterov"])


class Adam(Optimizer):
    r"""Adam (Kingma & Ba) with ``torch.optim.Adam`` semantics: L2 weight decay is added to
    the gradient (not decoupled as in AdamW), bias corrections as in PyTorch.

    .. math::
        g \leftarrow \nabla + \lambda\theta, \quad
        m \leftarrow \beta_1 m + (1-\beta_1) g, \quad
        v \leftarrow \beta_2 v + (1-\beta_2) g^2, \\
        \theta \leftarrow \theta - \frac{\eta}{1-\beta_1^t}\,
            \frac{m}{\sqrt{v}/\sqrt{1-\beta_2^t} + \epsilon}

    Args:
        model: the module whose parameters are updated in place.
        lr: learning rate η > 0 (default 0.005, the GAT paper's).
        betas: (β₁, β₂), each in [0, 1).
        eps: ε ≥ 0.
        weight_decay: λ ≥ 0, or a ``{name_prefix: λ}`` dict.
    """

    buffers = ("exp_avg", "exp_avg_sq")

    def __init__(self, model: Module, lr: float = 0.005, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float | Mapping[str, float] = 0.0):
        super().__init__(model, lr, weight_decay)
        self.betas = self._betas(betas)
        self.eps = _real(eps, "eps")
        xp = model.xp
        for name, p in model.named_parameters():
            self.state[name] = {"exp_avg": xp.zeros_like(p), "exp_avg_sq": xp.zeros_like(p)}

    @staticmethod
    def _betas(betas) -> tuple[float, float]:
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"betas must be a pair (beta1, beta2), got {betas!r}")
        return (_real(betas[0], "beta1", hi=1.0), _real(betas[1], "beta2", hi=1.0))

    def _update(self, name, p, g):
        t = p.dtype.type
        b1, b2 = self.betas
        wd = self.decay_of(name)
        if wd:
            g = g + t(wd) * p
        st = self.state[name]
        m, v = st["exp_avg"], st["exp_avg_sq"]
        m *= t(b1)
        m += t(1 - b1) * g
        v *= t(b2)
        v += t(1 - b2) * (g * g)
        bc1 = 1 - b1 ** self.step_count
        bc2 = 1 - b2 ** self.step_count
        denom = self.model.xp.sqrt(v) / t(math.sqrt(bc2))
        denom += t(self.eps)
        p -= t(self.lr / bc1) * (m / denom)

    def _check_loaded(self, new, step):
        for name, bufs in new.items():
            if set(bufs) != {"exp_avg", "exp_avg_sq"}:
                raise ValueError(f"optimiser state lacks the Adam moments of {name!r}")

    def hyperparameters(self) -> dict:
        return {**super().hyperparameters(), "betas": list(self.betas), "eps": self.eps}

    def _load_hyper(self, hyper: dict) -> None:
        super()._load_hyper(hyper)
        self.betas = self._betas(tuple(hyper["betas"]))
        self.eps = _real(hyper["eps"], "eps")
