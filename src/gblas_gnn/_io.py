"""Crash-safe file writing, and ``.npz`` reading that never unpickles."""

from __future__ import annotations

import os
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) back while the block runs; one that arrived meanwhile is
    delivered when the block ends (as ``KeyboardInterrupt`` under Python's default handler).

    Only the main thread receives signals, and only there can a handler be installed;
    elsewhere, or when SIGINT is ignored or has no Python handler, the block runs as is.
    """
    previous = signal.getsignal(signal.SIGINT) \
        if threading.current_thread() is threading.main_thread() else None
    if not callable(previous):
        yield
        return
    received: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        previous(signal.SIGINT, None)


def atomic_write(path, write) -> None:
    """Write through ``write(fileobj)`` to a temporary file, fsync, then rename over ``path``.

    A crash, an error or SIGKILL at any point leaves the previous file (or none) and never a
    partial one. Ctrl-C waits for the write to finish (:func:`interrupts_deferred`), so an
    interrupted run keeps the file it was writing.
    """
    path = Path(path)
    with interrupts_deferred():
        fd, tmp = tempfile.mkstemp(dir=path.parent if str(path.parent) else ".",
                                   prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")     # a zip's first local header / an empty zip
_NPY_MAGIC = b"\x93NUMPY"


def read_npz(path, what: str, error: type[Exception] = ValueError) -> dict:
    """All arrays of a ``.npz`` file, loaded without pickles.

    A ``.npz`` is a zip archive of ``.npy`` arrays (what ``numpy.savez`` writes). Object
    arrays are pickled Python objects, and unpickling runs code chosen by whoever wrote the
    file: they are refused, and no message ever suggests loading them another way.

    Raises ``FileNotFoundError`` for a missing file and ``error`` (naming ``what``) for a file
    that is not a zip archive of ``.npy`` arrays, is corrupt, or holds object arrays.
    """
    import zipfile

    import numpy as np

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such {what}: {path} (the file does not exist)")
    with open(path, "rb") as f:
        magic = f.read(len(_NPY_MAGIC))
    if not magic.startswith(_ZIP_MAGIC):
        kind = ("a single .npy array" if magic == _NPY_MAGIC
                else "pickled Python data, which gblas_gnn never loads" if magic[:1] == b"\x80"
                else "empty" if not magic else "not a zip archive")
        raise error(f"{path} is not a .npz {what}: the file is {kind} (a .npz is a zip "
                    "archive of .npy arrays, as numpy.savez writes it)")
    out = {}
    try:
        with np.load(path, allow_pickle=False) as z:
            for key in z.files:
                try:
                    value = z[key]
                except ValueError as exc:
                    if "pickle" not in str(exc):
                        raise
                    raise error(f"{path} holds an object array ({key!r}): pickled Python "
                                "objects, which gblas_gnn refuses to load; a .npz "
                                f"{what} holds plain numeric, boolean or text arrays only"
                                ) from None
                if not isinstance(value, np.ndarray):
                    raise error(f"{path} is a corrupt .npz {what}: member {key!r} is not a "
                                ".npy array")
                out[key] = value
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as exc:
        if isinstance(exc, error):
            raise
        raise error(f"{path} is a corrupt .npz {what} ({type(exc).__name__}: {exc})") from exc
    return out


def map_npz(path, what: str, error: type[Exception] = ValueError) -> dict:
    """The arrays of an *uncompressed* ``.npz`` (what ``numpy.savez`` writes) as read-only
    memory maps: nothing is read until sliced, so a process reads only the parts it needs.

    A member stored in the zip without compression is a ``.npy`` file at a known offset; its
    header gives dtype and shape, and the data is mapped in place. Raises ``error`` for a
    compressed member (``numpy.savez_compressed``; ``gblas-gnn convert`` rewrites it), an
    object array, a truncated or otherwise corrupt file (:func:`read_npz`'s rules), and
    ``FileNotFoundError`` for a missing file.
    """
    import struct
    import zipfile

    import numpy as np

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such {what}: {path} (the file does not exist)")
    size = path.stat().st_size
    out = {}
    try:
        with zipfile.ZipFile(path) as z, open(path, "rb") as f:
            for info in z.infolist():
                key = info.filename.removesuffix(".npy")
                if info.compress_type != zipfile.ZIP_STORED:
                    raise error(f"{path}: member {key!r} is compressed, so it cannot be read "
                                "in parts; rewrite the file uncompressed with gblas-gnn "
                                "convert")
                f.seek(info.header_offset)
                local = f.read(30)
                if len(local) < 30 or local[:4] != b"PK\x03\x04":
                    raise error(f"{path} is a corrupt .npz {what}: bad header of {key!r}")
                name_len, extra_len = struct.unpack("<HH", local[26:30])
                f.seek(info.header_offset + 30 + name_len + extra_len)
                version = np.lib.format.read_magic(f)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                shape, fortran, dtype = read_header(f)
                if dtype.hasobject:
                    raise error(f"{path} holds an object array ({key!r}): pickled Python "
                                "objects, which gblas_gnn refuses to load")
                offset = f.tell()
                nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                if offset + nbytes > size or info.file_size < offset - (
                        info.header_offset + 30 + name_len + extra_len) + nbytes:
                    raise error(f"{path} is a corrupt .npz {what}: member {key!r} is "
                                "truncated")
                out[key] = (np.memmap(path, dtype=dtype, mode="r", offset=offset,
                                      shape=shape, order="F" if fortran else "C")
                            if nbytes else np.zeros(shape, dtype))
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, struct.error) as exc:
        if isinstance(exc, error):
            raise
        raise error(f"{path} is a corrupt .npz {what} ({type(exc).__name__}: {exc})") from exc
    return out


class NpyStream:
    """One ``.npy`` member of a ``.npz`` (compressed or not) read front to back in pieces:
    ``shape``, ``dtype``, ``fortran`` from its header, then :meth:`read` and :meth:`skip`.
    Memory is the piece asked for, whatever the size of the member."""

    def __init__(self, path: Path, key: str, what: str, error: type[Exception] = ValueError):
        import zipfile

        import numpy as np

        self.path, self.key, self._error = path, key, error
        if not path.is_file():
            raise FileNotFoundError(f"no such {what}: {path} (the file does not exist)")
        try:
            self._zip = zipfile.ZipFile(path)
            self._f = self._zip.open(key + ".npy")
            version = np.lib.format.read_magic(self._f)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            self.shape, self.fortran, self.dtype = read_header(self._f)
        except KeyError:
            self.close()
            raise error(f"{path} has no array {key!r}") from None
        except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
            self.close()
            raise error(f"{path} is a corrupt .npz {what} ({type(exc).__name__}: {exc})"
                        ) from exc
        if self.dtype.hasobject:
            self.close()
            raise error(f"{path} holds an object array ({key!r}): pickled Python objects, "
                        "which gblas_gnn refuses to load")

    def read(self, count: int):
        """The next ``count`` items (in file order) as a 1-D array."""
        import numpy as np

        nbytes = count * self.dtype.itemsize
        try:
            data = self._f.read(nbytes)
        except (EOFError, OSError, ValueError) as exc:
            raise self._error(f"{self.path} is corrupt: member {self.key!r} cannot be read "
                              f"({type(exc).__name__}: {exc})") from exc
        if len(data) != nbytes:
            raise self._error(f"{self.path} is corrupt: member {self.key!r} is truncated")
        return np.frombuffer(data, self.dtype)

    def skip(self, count: int, piece: int = 1 << 22) -> None:
        """Pass over the next ``count`` items."""
        while count > 0:
            step = min(count, piece)
            self.read(step)
            count -= step

    def close(self) -> None:
        for f in (getattr(self, "_f", None), getattr(self, "_zip", None)):
            if f is not None:
                f.close()

    def __enter__(self) -> NpyStream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
