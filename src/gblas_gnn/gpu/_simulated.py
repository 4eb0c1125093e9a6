"""Device memory in Numba's CUDA simulator: a host-array sentinel.

In the simulator the array module is numpy, so without help a host array and a "device" array
are the same thing: a kernel given a host array runs, an operation mixing the two runs, and a
value read back to the host (``float(x)``) costs nothing, where on a GPU the first two are
errors (numba-cuda would copy implicitly, CuPy refuses) and the last is a synchronising copy.
Tests of residency and of copies could not fail.

Here the executor's device arrays are :class:`DeviceArray`, an ``ndarray`` subclass that
behaves as CuPy's arrays do where it matters:

* arithmetic, ufuncs and numpy functions on device arrays give device arrays (reductions give
  0-d arrays, as CuPy's do); an ``ndarray`` that is not one among their operands, or among
  the values written into one, is a host array and raises ``TypeError``, as CuPy does (0-d
  arrays and scalars are allowed);
* :data:`xp` (the simulator's stand-in for ``cupy``) creates device arrays, refuses host
  arrays in its functions, and its ``ndarray`` is :class:`DeviceArray`, so
  ``isinstance(x, executor.xp.ndarray)`` tells a device array from a host one;
* every implicit read of device values on the host (``float``, ``int``, ``bool``, ``item``,
  ``tolist``, ``format``) and every implicit copy to the device (``xp.asarray`` of host data)
  is counted in each live executor's :class:`~._device.Transfers` under the reason
  ``"implicit"``, so a test can require that a step makes none.

The executor refuses host arrays at every kernel launch (:meth:`CUDAExecutor._launch`), in the
simulator as on a GPU.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

__all__ = ["DeviceArray", "xp", "watch", "is_host_array"]

_COUNTERS: list[weakref.ref] = []


def watch(transfers: Any) -> None:
    """Count this simulator's implicit copies in ``transfers`` (a
    :class:`~._device.Transfers`) while it lives."""
    _COUNTERS.append(weakref.ref(transfers))


def _implicit(direction: str, nbytes: int) -> None:
    alive = []
    for ref in _COUNTERS:
        counter = ref()
        if counter is not None:
            counter.add(direction, nbytes, "implicit")
            alive.append(ref)
    _COUNTERS[:] = alive


def is_host_array(x: Any) -> bool:
    """Whether ``x`` is a host ``ndarray`` with at least one axis (what CuPy refuses)."""
    return isinstance(x, np.ndarray) and not isinstance(x, DeviceArray) and x.ndim > 0


def _refuse_host(what: str, values) -> None:
    for v in values:
        if isinstance(v, (list, tuple)):
            _refuse_host(what, v)
        elif is_host_array(v):
            raise TypeError(f"{what}: a host numpy.ndarray among device arrays (CuPy refuses "
                            "implicit copies; move it with the executor's asarray)")


def _foreign(x) -> bool:
    """Whether ``x`` brings its own numpy override (a lazy expression, a traced array)."""
    return not isinstance(x, (np.ndarray, np.generic, int, float, complex)) and \
        getattr(type(x), "__array_ufunc__", None) is not None


def _plain(x):
    """``x`` with device arrays as plain ndarray views (lists and tuples walked)."""
    if isinstance(x, DeviceArray):
        return x.view(np.ndarray)
    if isinstance(x, (list, tuple)):
        return type(x)(_plain(v) for v in x)
    return x


def _device(x):
    """A result as device arrays: ndarrays viewed as :class:`DeviceArray`, numpy scalars as
    0-d device arrays (CuPy never returns a numpy scalar)."""
    if isinstance(x, np.ndarray):
        return x if isinstance(x, DeviceArray) else x.view(DeviceArray)
    if isinstance(x, np.generic):
        return np.asarray(x).view(DeviceArray)
    if isinstance(x, tuple):
        return tuple(_device(v) for v in x)
    if isinstance(x, list):
        return [_device(v) for v in x]
    return x


class DeviceArray(np.ndarray):
    """An array in (simulated) device memory; see the module docstring."""

    #: what a host executor looks for before it takes an array (it refuses this one)
    in_device_memory = True

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        if any(_foreign(x) for x in inputs):
            return NotImplemented            # the other operand's own override decides
        _refuse_host(ufunc.__name__, inputs + (out or ()))
        if out is not None:
            kwargs["out"] = tuple(_plain(o) for o in out)
        result = getattr(ufunc, method)(*_plain(inputs), **kwargs)
        if out is not None and method != "at":
            return out[0] if len(out) == 1 else out
        return _device(result)

    def __array_function__(self, func, types, args, kwargs):
        if not all(issubclass(t, np.ndarray) for t in types):
            return NotImplemented
        _refuse_host(func.__name__, args)
        _refuse_host(func.__name__, tuple(kwargs.values()))
        return _device(func(*_plain(args), **{k: _plain(v) for k, v in kwargs.items()}))

    # indexing stays on the device: an element is a 0-d device array, and a device index or
    # value is used there (no read on the host), as with CuPy
    def __getitem__(self, key):
        return _device(self.view(np.ndarray)[_plain(key)])

    def __setitem__(self, key, value) -> None:
        _refuse_host("__setitem__", (value,))      # CuPy: "cannot be used for fill"
        self.view(np.ndarray)[_plain(key)] = _plain(value)

    # implicit reads on the host: a synchronising copy each on a GPU
    def _read(self):
        _implicit("to_host", self.nbytes)
        return self.view(np.ndarray)

    def __float__(self):
        return float(self._read())

    def __int__(self):
        return int(self._read())

    def __index__(self):
        return self._read().__index__()

    def __bool__(self):
        return bool(self._read())

    def __format__(self, spec):
        return self._read().__format__(spec)

    def item(self, *args):
        return self._read().item(*args)

    def tolist(self):
        return self._read().tolist()

    def get(self) -> np.ndarray:
        """A host copy (CuPy's ``get``)."""
        return np.array(self.view(np.ndarray))


_CREATE = ("empty", "zeros", "ones", "full", "arange", "eye", "identity", "linspace")
_LIKE = ("empty_like", "zeros_like", "ones_like", "full_like")
_FROM_DATA = ("asarray", "array", "ascontiguousarray")


class _SimulatedCuPy:
    """numpy as the simulator's ``cupy``: see the module docstring."""

    ndarray = DeviceArray
    __name__ = "cupy"                   # (error messages name the array type as on a GPU)

    def __getattr__(self, name: str):
        found = getattr(np, name)
        if name in _CREATE or name in _LIKE:
            return lambda *a, **k: _device(found(*_plain(a), **k))
        if name in _FROM_DATA:
            return lambda x, *a, **k: _from_data(found, x, *a, **k)
        if callable(found) and not isinstance(found, type):
            def refusing(*a, **k):
                _refuse_host(name, a)
                _refuse_host(name, tuple(k.values()))
                return _device(found(*_plain(a), **{key: _plain(v) for key, v in k.items()}))
            return refusing
        return found

    def erf(self, x):
        """``cupyx.scipy.special.erf``, which this module stands for too."""
        from scipy.special import erf

        return _device(erf(_plain(x)))

    def __repr__(self) -> str:
        return "<the CUDA simulator's array module (numpy with device arrays)>"


def _from_data(fn, x, *args, **kwargs):
    """``xp.asarray(x)``: a device array; host data is an implicit copy to the device."""
    if not isinstance(x, DeviceArray):
        out = fn(x, *args, **kwargs)
        _implicit("to_device", np.asarray(out).nbytes)
        return np.array(out).view(DeviceArray) if out is x else _device(np.asarray(out))
    return _device(fn(x.view(np.ndarray), *args, **kwargs))


#: the simulator's array module (``CUDAExecutor.xp`` there)
xp = _SimulatedCuPy()
