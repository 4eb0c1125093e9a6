r"""One driver for every generated kernel: a ``prange`` over shares that calls the kernel's
compiled machine code by its address.

A generated kernel (:mod:`._program_kernels`) is a serial function over the items
``[r0, r1)``; to run it on numba's threads, :func:`run_shares` calls it once per share

.. math::  \mathrm{kernel}(a_1, \dots, a_m, b_s, b_{s+1}), \qquad s = 0, \dots, T - 1

in a ``prange`` over the ``T`` shares of ``bounds`` (:func:`._shares.shares`). It calls the
kernel through a pointer (:func:`call_native`, in numba's own calling convention), so the
driver holds none of the kernel's code: it compiles once per argument-type signature (about
0.6 s) and serves every kernel of that signature. A driver that called its kernel by name
(one ``<name>_threads`` per kernel, before) had numba link the kernel's code into it, and
LLVM optimised and emitted the kernel a second time inside the parallel loop: 1.5 s or more
a kernel. That second optimisation made the kernel up to 8 % faster on small graphs (equal
at 10⁵ vertices); getting it back by compiling every kernel at a higher level cost the test
suite a quarter more compile time, so the kernels run as compiled
(``docs/performance.md``, compilation, has the measurements).

A kernel that raises (numba's status of an error, e.g. a division by zero under numba's
Python error model) marks its share in ``failed``, and the caller
(:class:`._shares.ThreadedKernel`) runs the kernel on its own thread, which raises the
kernel's own exception.
"""

from __future__ import annotations

import sys

import numba as nb
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ...codegen.kernel_cache import LockedKernel, cache_dir, locked_kernel

__all__ = ["call_native", "run_shares", "locked_driver"]


@intrinsic
def call_native(typingctx, address, args, r0, r1):
    """``kernel(*args, r0, r1)`` for the numba-compiled function at ``address`` (an integer,
    :meth:`~gblas_gnn.codegen.kernel_cache.LockedKernel.address`), compiled for exactly the
    types of ``args``, ``r0`` and ``r1`` and returning nothing; 1 where it raised, else 0."""
    argtypes = (*args.types, r0, r1)

    def codegen(context, builder, signature, llargs):
        at, packed, lo, hi = llargs
        values = [builder.extract_value(packed, i) for i in range(len(args.types))]
        fnty = context.call_conv.get_function_type(types.none, argtypes)
        fn = builder.inttoptr(at, fnty.as_pointer())
        status, _ = context.call_conv.call_function(builder, fn, types.none, argtypes,
                                                    [*values, lo, hi])
        return builder.zext(status.is_error, ir.IntType(64))

    return types.int64(address, args, r0, r1), codegen


@nb.njit(parallel=True, cache=True)
def run_shares(address, bounds, failed, args):
    """The kernel at ``address`` over each share ``[bounds[s], bounds[s + 1])`` on its own
    thread (``bounds`` unsigned, as every index of the kernels), with the other arguments
    ``args`` (a tuple); ``failed[s]`` set to 1 where share ``s``'s call raised, else 0. (The
    caller allocates ``failed``: an array made and summed here doubled the driver's compile
    time; and ``args`` come as one tuple: numba dispatched ``*args`` 4–5 times as slowly.)"""
    for s in nb.prange(bounds.shape[0] - 1):
        failed[s] = call_native(address, args, bounds[s], bounds[s + 1])

def locked_driver() -> LockedKernel:
    """:func:`run_shares` under the kernel cache's lock (compiled for a new signature by one
    process of those that share the cache, the others load it from numba's cache)."""
    return locked_kernel(cache_dir("cpu"), sys.modules[__name__], "run_shares")
