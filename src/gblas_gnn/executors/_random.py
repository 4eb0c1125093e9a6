r"""Counter-based uniform numbers: the same random masks on every executor and every grid.

A dropout mask drawn from a generator stream depends on how many numbers were drawn before
it and in which order the entries are visited, so it would change with the executor, the
number of MPI ranks and the storage order of a block. Here every entry gets its own number,
a hash of a per-call key and the entry's *global* coordinates:

.. math::
    u(\kappa; a, b, c) = 2^{-53}\,\big\lfloor m(m(m(\kappa + \gamma a) + \gamma b) +
    \gamma c) / 2^{11} \big\rfloor \in [0, 1)

with :math:`m` the SplitMix64 finaliser (Steele, Lea & Flood 2014), :math:`\gamma` the 64-bit
golden ratio and all arithmetic modulo :math:`2^{64}`. An attention-dropout entry of head
``h`` on the edge ``j → i`` uses ``(a, b, c) = (h, i, j)``; a feature-dropout entry of vertex
``i``, column ``c`` uses ``(0, i, c)``; ``i`` and ``j`` are vertex ids of the whole graph.
An entry is kept when :math:`u \ge p`. The key is drawn from the layer's seeded
``numpy.random.Generator`` once per call, so runs are reproducible and checkpoints capture
the stream.

:func:`uniform` is written against an array module ``xp`` (numpy, or CuPy on a GPU);
:func:`uniform_entry` is the same arithmetic for one entry, a plain function that the cpu
executor compiles with numba and the cuda executor with numba-cuda; tests hold them equal bit
for bit.
"""

from __future__ import annotations

import numpy as np

__all__ = ["GOLDEN", "MIX1", "MIX2", "draw_key", "uniform", "uniform_entry"]

GOLDEN = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB
_SCALE = 2.0 ** -53
_G, _M1, _M2 = np.uint64(GOLDEN), np.uint64(MIX1), np.uint64(MIX2)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)


def draw_key(rng: np.random.Generator) -> int:
    """One 64-bit key from ``rng`` (advances it by one draw)."""
    return int(rng.integers(0, 2**64, dtype=np.uint64))


def _mix(xp, z):
    z = z ^ (z >> xp.uint64(30))
    z = z * xp.uint64(MIX1)
    z = z ^ (z >> xp.uint64(27))
    z = z * xp.uint64(MIX2)
    return z ^ (z >> xp.uint64(31))


def uniform(xp, key: int, a, b, c):
    """``u(key; a, b, c)`` elementwise over broadcastable integer arrays ``a``, ``b``, ``c``
    (float64 in [0, 1))."""
    g = xp.uint64(GOLDEN)
    with np.errstate(over="ignore"):        # modulo 2**64 is the point (numpy scalars warn)
        z = _mix(xp, xp.asarray(a).astype(xp.uint64) * g + xp.uint64(key))
        z = _mix(xp, z + xp.asarray(b).astype(xp.uint64) * g)
        z = _mix(xp, z + xp.asarray(c).astype(xp.uint64) * g)
    return (z >> xp.uint64(11)).astype(xp.float64) * _SCALE


def uniform_entry(key, a, b, c):
    """``u(key; a, b, c)`` for one entry, all four ``numpy.uint64`` (written for numba's cpu
    and CUDA compilers: no call, uint64 arithmetic only)."""
    z = key
    for v in (a, b, c):
        z = z + v * _G
        z = z ^ (z >> _S30)
        z = z * _M1
        z = z ^ (z >> _S27)
        z = z * _M2
        z = z ^ (z >> _S31)
    return np.float64(z >> _S11) * _SCALE
