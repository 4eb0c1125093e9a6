"""Reading a gzip-compressed CSV of numbers in chunks of lines (OGB's ``*.csv.gz``).

A chunk is parsed by ``numpy.loadtxt``, which is strict: a line with another number of
columns, or a field that is not a number, is an error that names the file and the line.
Memory is one chunk of text and its array, whatever the size of the file.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

__all__ = ["csv_gz_chunks", "first_line", "CHUNK_BYTES"]

#: uncompressed text parsed per chunk
CHUNK_BYTES = 1 << 25


def _corrupt(path: Path, exc: Exception) -> ValueError:
    return ValueError(f"{path} is not a readable gzip file ({type(exc).__name__}: {exc})")


def first_line(path: Path) -> bytes:
    """The first line of a gzip file (without the newline)."""
    try:
        with gzip.open(path, "rb") as f:
            return f.readline().rstrip(b"\r\n")
    except (OSError, EOFError, zlib.error) as exc:
        raise _corrupt(path, exc) from exc


def csv_gz_chunks(path: Path, dtype, columns: int | None = None,
                  chunk_bytes: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
    """``(first line, rows)`` for consecutive chunks of the comma-separated file ``path``:
    ``rows`` is a ``(lines, columns)`` array of ``dtype``, ``first line`` the 0-based
    number of its first line.

    Raises ``ValueError`` naming the file and the line for a corrupt gzip stream, a
    malformed line or a line with another number of columns than ``columns`` (or than the
    first line).
    """
    size = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
    line = 0
    carry = b""
    try:
        with gzip.open(path, "rb") as f:
            while True:
                block = f.read(size)
                text = carry + block
                if not block:
                    if text.strip():
                        text += b"\n"            # a last line without its newline
                    else:
                        return
                cut = text.rfind(b"\n") + 1
                carry, text = text[cut:], text[:cut]
                if not text:
                    continue
                rows = _parse(path, text, dtype, line)
                if columns is None:
                    columns = rows.shape[1]
                if rows.shape[1] != columns:
                    raise ValueError(f"{path}, line {line + 1}: {rows.shape[1]} columns, "
                                     f"expected {columns}")
                yield line, rows
                line += rows.shape[0]
                if not block:
                    return
    except (OSError, EOFError, zlib.error) as exc:
        raise _corrupt(path, exc) from exc


def _parse(path: Path, text: bytes, dtype, line: int) -> np.ndarray:
    try:
        return np.loadtxt(io.BytesIO(text), delimiter=",", dtype=dtype, ndmin=2,
                          comments=None)
    except ValueError as exc:
        # numpy counts rows from 0 in conversion errors and from 1 in column-count errors
        base = line + ("could not convert" in str(exc))
        message = re.sub(r"\brow (\d+)", lambda m: f"line {base + int(m.group(1))}",
                         str(exc))
        raise ValueError(f"{path}: {message}") from None
