"""Crash-safe file writing."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path, write) -> None:
    """Write through ``write(fileobj)`` to a temporary file, fsync, then rename over ``path``."""
    path = Path(path)
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


def read_npz(path, what: str, error: type[Exception] = ValueError) -> dict:
    """All arrays of a ``.npz`` file, loaded without pickles.

    Raises ``FileNotFoundError`` for a missing file and ``error`` (naming ``what``) for a file
    that is not a readable ``.npz`` archive or holds object arrays.
    """
    import zipfile

    import numpy as np

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such {what}: {path} (the file does not exist)")
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as exc:
        raise error(f"{path} is not a readable .npz {what} "
                    f"({type(exc).__name__}: {exc})") from exc
