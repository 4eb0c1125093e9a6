"""Host arrays whose data starts on a cache line, shared by the executors that hand numpy
buffers to kernels or to MPI (``cpu``, ``dist``).

A feature row of 32 float32 is 128 bytes: aligned, every gather of a row reads exactly two
cache lines; with numpy's 16-byte guarantee it usually straddles three.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import DTypeLike

__all__ = ["ALIGNMENT", "aligned_empty"]

ALIGNMENT = 64          # bytes: one x86-64 cache line


def aligned_empty(shape: int | Sequence[int], dtype: DTypeLike) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a 64-byte boundary.

    A view into a slightly larger byte buffer (the view keeps it alive). numpy's allocator
    only guarantees 16 bytes, so a 128-byte feature row (32 float32) usually straddles three
    cache lines; aligned, every gather of a row reads exactly two.
    """
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    offset = -raw.ctypes.data % ALIGNMENT
    return raw[offset:offset + nbytes].view(dtype).reshape(shape)
