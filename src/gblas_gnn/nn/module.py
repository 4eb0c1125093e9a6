"""Base class of every layer and model: parameters, gradients, caches, train/eval mode.

A module is called as ``out = module(g, H)``. In training mode the forward keeps exactly
what :meth:`Module.backward` needs; in evaluation mode (``module.eval()``) it keeps nothing.
``backward(dout)`` returns ``dL/dH`` and fills ``module.grads`` (same keys and shapes as
``module.params``).

Every dense tensor a module touches is an array of its executor's array module
(``module.executor.xp``: numpy for ``cpu`` and ``dist``, CuPy on a GPU), parameters and
gradients included; a module computes with :attr:`Module.executor` only, so it runs
unchanged on any executor.

A module that defines only ``forward`` is *composed*: declare its parameters with
:meth:`Module.add_param`, write the forward with ``gg.ops``, and its ``backward`` is derived
from what the training-mode forward recorded (:mod:`gblas_gnn.nn.composed`). Inside such a
forward, ``H`` and ``self.params[name]`` are traced arrays.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator

import numpy as np

from .._validate import dense_matrix, float_dtype
from ..compose.traced import Traced
from ..executors import Executor, get_executor
from ..graph import Graph, as_graph
from ..hetero import TypedVertexSet
from . import composed


def _checked_later(_) -> bool:
    """A finiteness test that leaves the test to the caller (:meth:`Module._check_dout_summed`
    reads it off the sums it needs anyway)."""
    return True


class Module(ABC):
    """Parameters in ``params`` (dict of ndarrays), gradients in ``grads``."""

    def __init__(self, dtype=np.float32, executor: Executor | str | None = None):
        self.dtype = float_dtype(dtype)
        self.executor = get_executor(executor)
        self.params: dict[str, np.ndarray] = {}
        self.grads: dict[str, np.ndarray] = {}
        self._edge_attr_grad: np.ndarray | str | None = None
        self._declared: dict[str, tuple] = {}
        self.training = True
        self._cache = None

    @property
    def edge_attr_grad(self) -> np.ndarray | None:
        """After a backward: the gradient of the edge features the forward read, one row per
        edge as the graph was given them (summed through the self loops' fill rule), for
        features that require it (``g.edge_attr.requires_grad_()`` before the forward);
        None when the forward read no edge features.

        Raises
        ------
        RuntimeError
            When the forward read edge features none of which required their gradient
            (it was not derived: the backward skips that work, as torch does).
        """
        if self._edge_attr_grad is composed.NOT_REQUESTED:
            raise RuntimeError("the edge features' gradient was not derived: the features did "
                               "not require it; call g.edge_attr.requires_grad_() before the "
                               "forward")
        return self._edge_attr_grad

    @property
    def xp(self):
        """The array module of this module's executor."""
        return self.executor.xp

    def _param(self, value: np.ndarray):
        """A parameter array (built on the host by an initialiser) on the executor."""
        return self.executor.asarray(value)

    def add_param(self, name: str, value) -> None:
        """Declare the parameter ``name`` with the initial ``value`` (a host array of the
        module's dtype, finite); it moves to the executor and its gradient appears in
        ``grads[name]`` after a backward."""
        from .._validate import FLOAT_DTYPES

        if not isinstance(name, str) or not name or "." in name:
            raise ValueError(f"a parameter name is a non-empty string without '.', got "
                             f"{name!r}")
        if name in self.params:
            raise ValueError(f"parameter {name!r} is declared twice")
        value = np.asarray(value) if isinstance(value, (list, tuple, float, int)) else value
        if not hasattr(value, "dtype") or np.dtype(value.dtype) not in FLOAT_DTYPES:
            raise TypeError(f"parameter {name!r} must be a float array, got "
                            f"{getattr(value, 'dtype', type(value).__name__)}")
        if np.dtype(value.dtype) != self.dtype:
            raise TypeError(f"parameter {name!r} has dtype {value.dtype} but the module is "
                            f"{self.dtype}")
        value = self._param(value)
        if not bool(self.xp.isfinite(value).all()):
            raise ValueError(f"parameter {name!r} contains NaN or Inf")
        self.params[name] = value
        self.grads[name] = self.xp.zeros_like(value)
        self._declared[name] = tuple(value.shape)

    @property
    def composed(self) -> bool:
        """Whether the backward is derived (the class defines ``forward`` only)."""
        return type(self).backward is Module.backward

    # ------------------------------------------------------------------ mode
    def train(self, mode: bool = True) -> Module:
        """Switch training mode (caches for backward) on or off; returns ``self``."""
        self.training = mode
        if not mode:
            self._cache = None
        for child in self.children():
            child.train(mode)
        return self

    def eval(self) -> Module:
        """Inference mode: forward keeps no caches."""
        return self.train(False)

    def children(self) -> list[Module]:
        """Sub-modules: a container overrides this; a composed module's are the modules held
        in its attributes, in the order they were set."""
        if not self.composed:
            return []
        return [v for v in vars(self).values() if isinstance(v, Module)]

    # ------------------------------------------------------------------ parameters
    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, np.ndarray]]:
        """``(name, array)`` for every parameter, children prefixed by their index."""
        for name, value in self.params.items():
            yield prefix + name, value
        for i, child in enumerate(self.children()):
            yield from child.named_parameters(f"{prefix}{i}.")

    def named_grads(self, prefix: str = "") -> Iterator[tuple[str, np.ndarray]]:
        """``(name, gradient)`` in the order of :meth:`named_parameters`."""
        for name in self.params:
            yield prefix + name, self.grads[name]
        for i, child in enumerate(self.children()):
            yield from child.named_grads(f"{prefix}{i}.")

    def zero_grad(self) -> None:
        """Set every gradient to zeros."""
        self.grads = {k: self.xp.zeros_like(v) for k, v in self.params.items()}
        for child in self.children():
            child.zero_grad()

    # ------------------------------------------------------------------ calling
    def __call__(self, g, H: np.ndarray) -> np.ndarray:
        """The output for graph ``g`` and features ``H``. A composed module validates its
        input and parameters, then traces its forward (:func:`gblas_gnn.nn.composed.trace`):
        afterwards ``graph_widths`` lists the widths of what it aggregated over the graph (the
        grid's cost model reads them) and, in training mode, the module keeps the recording
        :meth:`backward` replays."""
        if not self.composed:
            if isinstance(H, Traced):
                return composed.call_opaque(self, g, H)
            return composed.run_forward(self, g, H)
        if isinstance(H, Traced):
            return composed.call_inline(self, g, H)
        if H is None and self.featureless:
            g = self._prepare_graph(g)
        else:
            g, H = self._prepare(g, H, getattr(self, "in_dim", None))
        self._check_params()
        out, self.graph_widths, self._cache = composed.trace(self, g, H)
        return out

    def _check_params(self) -> None:
        """A parameter keeps the shape and dtype it was declared with and stays finite
        (optimisers and users write in place): a clear error before the forward, not a wrong
        gradient after it."""
        ex = self.executor
        xp = ex.xp
        with ex.validation():
            for name, value in self.params.items():
                shape = self._declared.get(name)
                if not isinstance(value, xp.ndarray) or (shape is not None and
                                                         tuple(value.shape) != shape) \
                        or value.dtype != self.dtype:
                    got = (tuple(value.shape), value.dtype) if isinstance(value, xp.ndarray) \
                        else type(value).__name__
                    raise ValueError(f"parameter {name!r} must be an array of shape {shape} "
                                     f"and dtype {self.dtype}, got {got}")
            # one reduction and one counted read (a device sync on a GPU)
            if not ex.all_finite(*self.params.values()):
                bad = [n for n, v in self.params.items() if not ex.all_finite(v)]
                raise ValueError(f"parameter {bad[0]!r} contains NaN or Inf")

    #: whether :meth:`forward` only passes values between its children (``Sequential``):
    #: what they keep for their backward is then handed on to this module's caller
    #: (:func:`gblas_gnn.compose.tape.hand_out`)
    container: bool = False

    def kept_outputs(self) -> tuple:
        """The arrays this module's cache keeps that its last output may share (ELU keeps
        its output for the slope): a caller that may write into the output gets a copy
        (:func:`gblas_gnn.compose.tape.hand_out`). None by default."""
        return ()

    @abstractmethod
    def forward(self, g, H: np.ndarray) -> np.ndarray:
        """Output for graph ``g`` (Graph, scipy.sparse or graphblas.Matrix) and features ``H``."""

    def backward(self, dout: np.ndarray) -> np.ndarray:
        """Gradient w.r.t. the input features; fills ``self.grads``. A composed module's is
        derived from its recorded forward (:func:`gblas_gnn.nn.composed.derive`): it fills
        the ``grads`` of every composed module traced inside that forward too."""
        rec = self._cache
        if not isinstance(rec, composed.Recording):
            raise RuntimeError("backward needs a forward in training mode first (module.train() "
                               "and call it on the input); each forward allows one backward")
        sums = None
        if len(rec.out_shape) == 2 and getattr(self.executor, "processes", 1) == 1:
            # the check's sums are an output bias's gradient: the tape hands them to it (on
            # a grid they are an allreduce, which a layer without that bias would not pay)
            dout, sums = self._check_dout_summed(dout, rec.out_shape)
        else:
            dout = self._check_dout(dout, rec.out_shape)
        self._cache = None
        dH, self._edge_attr_grad = composed.derive(rec, dout, self.executor, self.dtype, sums)
        return dH

    # ------------------------------------------------------------------ helpers for layers
    def _dense(self, x, name: str, finite=None, **checks):
        """``x`` validated as a finite 2-D array of the executor (a host array is moved to it
        first; ``finite(x)`` says whether it is finite, by default the executor's
        :meth:`~gblas_gnn.executors.Executor.all_finite`); an error in any process is raised
        in every process."""
        ex = self.executor
        with ex.validation():
            if isinstance(x, np.ndarray) and self.xp is not np:
                x = ex.asarray(x)
            x = dense_matrix(x, name, xp=self.xp, finite=finite or ex.all_finite, **checks)
        return x

    #: whether the module may be called without input features (``H=None``: PyG's
    #: featureless vertices; the backward then returns None)
    featureless: bool = False

    def _prepare_graph(self, g) -> Graph:
        """The graph ``g`` resolved (any accepted form) in the module's dtype; a graph with
        vertex types (:class:`~gblas_gnn.HeteroGraph`, a grid's share of one) as it is, its
        typed graph in the module's dtype."""
        with self.executor.validation():
            if isinstance(g, TypedVertexSet):
                return g.astype(self.dtype)
            return as_graph(g, dtype=self.dtype).astype(self.dtype)

    def _prepare(self, g, H: np.ndarray, in_dim: int | None) -> tuple[Graph, np.ndarray]:
        """Validate ``H`` (dtype = module dtype, ``in_dim`` columns) and resolve the graph."""
        H = self._dense(H, "H", cols=in_dim, dtype=self.dtype)
        g = self._prepare_graph(g)
        with self.executor.validation():
            if H.shape[0] != g.n_local:
                raise ValueError(f"H has {H.shape[0]} rows but the graph has {g.n_local} "
                                 "vertices" + ("" if g.n_local == g.n else " in this process"))
        return g, H

    def _need_cache(self) -> dict:
        if self._cache is None:
            raise RuntimeError("backward needs a forward in training mode first "
                               "(module.train() and call it on the input)")
        return self._cache

    def _check_dout_summed(self, dout: np.ndarray, shape: tuple[int, int]
                           ) -> tuple[np.ndarray, np.ndarray]:
        r"""``(dout, Σ_i dout_i)``: ``dout`` checked as :meth:`_check_dout` checks it, and its
        sum over vertices (the gradient of an output bias), one pass over ``dout`` for both.
        Its finiteness is read off the sums, as a NaN or an infinity in a column makes that
        column's sum one; only sums that are not finite (finite values can overflow) get
        the exact test."""
        dout = self._dense(dout, "dout", finite=_checked_later, rows=shape[0], cols=shape[1],
                           dtype=self.dtype)
        ex = self.executor
        sums = ex.vertex_sum(dout)             # every process's, after every one's checks
        if not ex.all_finite(sums):            # the same sums, so the same branch, everywhere
            with ex.validation():              # the exact test is each process's own rows'
                if not ex.all_finite(dout):
                    raise ValueError("dout contains NaN or Inf")
        return dout, sums

    def _check_dout_biased(self, dout: np.ndarray, shape: tuple[int, int]
                           ) -> tuple[np.ndarray, np.ndarray | None]:
        """``(dout, its sums)`` by :meth:`_check_dout_summed` for a module with a parameter
        ``bias`` (the sums are its gradient), else ``(dout, None)`` by :meth:`_check_dout`:
        no sum over vertices, a collective on a grid, that nothing reads."""
        if "bias" in self.params:
            return self._check_dout_summed(dout, shape)
        return self._check_dout(dout, shape), None

    def _check_dout(self, dout: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """``dout`` as an array of the executor with the output's ``shape`` and the module's
        dtype, finite."""
        if len(shape) == 2:
            return self._dense(dout, "dout", rows=shape[0], cols=shape[1], dtype=self.dtype)
        ex = self.executor
        with ex.validation():
            dout = ex.asarray(dout)
            if tuple(dout.shape) != tuple(shape):
                raise ValueError(f"dout must have shape {tuple(shape)}, got {tuple(dout.shape)}")
            if dout.dtype != self.dtype:
                raise TypeError(f"dout has dtype {dout.dtype} but {self.dtype} is required")
            if not ex.all_finite(dout):
                raise ValueError("dout contains NaN or Inf")
        return dout
