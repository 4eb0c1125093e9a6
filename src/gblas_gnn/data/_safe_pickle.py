"""Restricted unpickling of the legacy Planetoid data files.

The Planetoid files (``ind.<name>.{x,y,tx,ty,allx,ally,graph}``) are Python 2
pickles.  ``pickle.load`` on an untrusted file executes arbitrary code, so this
module loads them with an :class:`pickle.Unpickler` whose ``find_class`` admits
only an explicit allow-list of ``(module, name)`` pairs — exactly the globals those
files reference — and maps each one to a fixed object chosen here (never imported by
name from the stream).  Anything else (``os.system``, ``builtins.eval``, ...) raises
:class:`UnsafePickleError` *before* it is called.

scipy CSR matrices are not rebuilt through scipy's (version dependent) pickled
state: the allow-listed ``csr_matrix`` name resolves to an inert stub that only
records the state dictionary, and :func:`safe_load` turns the stub into a fresh,
validated :class:`scipy.sparse.csr_matrix` afterwards.
"""

from __future__ import annotations

import collections
import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

try:  # numpy >= 2
    from numpy._core.multiarray import _reconstruct as _np_reconstruct
except ImportError:  # pragma: no cover - numpy 1.x
    from numpy.core.multiarray import _reconstruct as _np_reconstruct

__all__ = ["UnsafePickleError", "safe_load", "safe_loads", "ALLOWED_GLOBALS"]


class UnsafePickleError(ValueError):
    """A pickle referenced a global that is not on the allow-list."""


class _CSRStub:
    """Inert stand-in for ``scipy.sparse.csr_matrix`` during unpickling.

    ``NEWOBJ`` creates it with ``object.__new__`` and ``BUILD`` hands it the pickled
    state dictionary; nothing of scipy runs until :func:`_finalize` validates the
    arrays and calls the public ``csr_matrix`` constructor.
    """

    __slots__ = ("state",)

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and state[1] is None:
            state = state[0]  # (dict_state, slot_state) form
        if not isinstance(state, dict):
            raise pickle.UnpicklingError("csr_matrix state is not a dict")
        self.state = state


def _latin1_encode(obj: Any, encoding: str = "utf-8") -> bytes:
    """``_codecs.encode`` as Python 3 protocol-2 pickles use it for ``bytes``
    (``encode(str, "latin1")``), restricted to that one codec."""
    if not isinstance(obj, str) or encoding not in ("latin1", "latin-1"):
        raise UnsafePickleError(
            f"_codecs.encode only admitted for str with latin1, got {encoding!r}"
        )
    return obj.encode("latin1")


# (module, name) as written in the pickle -> the object it resolves to.
# Python 2 pickles say ``__builtin__``; numpy < 2 wrote ``numpy.core``, numpy >= 2
# writes ``numpy._core``; scipy has used ``scipy.sparse.csr`` and ``scipy.sparse._csr``.
ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _np_reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _np_reconstruct,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("scipy.sparse.csr", "csr_matrix"): _CSRStub,
    ("scipy.sparse._csr", "csr_matrix"): _CSRStub,
    ("scipy.sparse", "csr_matrix"): _CSRStub,
    ("collections", "defaultdict"): collections.defaultdict,
    ("__builtin__", "list"): list,
    ("builtins", "list"): list,
    # bytes inside Python 3 protocol-2 pickles (files re-saved by Python 3)
    ("_codecs", "encode"): _latin1_encode,
}


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:  # noqa: D401
        try:
            return ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise UnsafePickleError(
                f"forbidden global {module}.{name} referenced by the pickle"
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError("persistent ids are not allowed")


def _finalize(obj: Any) -> Any:
    """Replace CSR stubs by validated csr matrices and reject object arrays."""
    if isinstance(obj, _CSRStub):
        st = getattr(obj, "state", None)
        if st is None:
            raise pickle.UnpicklingError("csr_matrix without state")
        shape = st.get("_shape", st.get("shape"))
        arrays = [st.get(k) for k in ("data", "indices", "indptr")]
        if shape is None or any(not isinstance(a, np.ndarray) for a in arrays):
            raise pickle.UnpicklingError("csr_matrix state lacks data/indices/indptr/shape")
        if any(a.dtype.hasobject for a in arrays):
            raise pickle.UnpicklingError("csr_matrix arrays of dtype object")
        shape = tuple(int(s) for s in shape)
        if len(shape) != 2 or min(shape) < 0:
            raise pickle.UnpicklingError(f"bad csr_matrix shape {shape}")
        data, indices, indptr = arrays
        mat = sp.csr_matrix((data, indices, indptr), shape=shape, copy=False)
        mat.check_format(full_check=True)
        return mat
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise pickle.UnpicklingError("arrays of dtype object are not allowed")
        return obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            obj[k] = _finalize(v)
        return obj
    if isinstance(obj, list):
        return [_finalize(v) for v in obj]
    return obj


def safe_loads(data: bytes, *, source: str = "<bytes>") -> Any:
    """Unpickle ``data`` with the allow-list; see :func:`safe_load`."""
    try:
        obj = _RestrictedUnpickler(io.BytesIO(data), encoding="latin1").load()
        return _finalize(obj)
    except UnsafePickleError as exc:
        raise UnsafePickleError(f"{source}: refusing to unpickle: {exc}") from None
    except Exception as exc:  # truncated / corrupt stream, bad reconstruct args ...
        raise ValueError(
            f"{source}: corrupt or truncated pickle ({type(exc).__name__}: {exc})"
        ) from exc


def safe_load(path: str | Path) -> Any:
    """Load one legacy (latin-1) pickle through the restricted unpickler.

    Parameters
    ----------
    path : str or Path
        File to read.

    Returns
    -------
    object
        numpy arrays, :class:`scipy.sparse.csr_matrix`, ``defaultdict``/lists —
        nothing else can be produced.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist (the message names it).
    UnsafePickleError
        (a ``ValueError``) the pickle references a global outside
        :data:`ALLOWED_GLOBALS`; the message names the file and the global.  The
        global is never imported or called.
    ValueError
        The file is truncated or otherwise corrupt.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    return safe_loads(path.read_bytes(), source=str(path))
