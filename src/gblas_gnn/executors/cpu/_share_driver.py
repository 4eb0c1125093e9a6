r"""One driver for every generated kernel: a ``prange`` over shares that calls the kernel's
compiled machine code by its address, with its arguments as machine words.

A generated kernel (:mod:`._program_kernels`) is a serial function over the items
``[r0, r1)``; to run it on numba's threads, the driver calls it once per share

.. math::  \mathrm{kernel}(a_1, \dots, a_m, b_s, b_{s+1}), \qquad s = 0, \dots, T - 1

in a ``prange`` over the ``T`` shares of ``bounds`` (:func:`._shares.shares`).

**Type-erased.** In numba's calling convention a kernel's arguments reach its machine code
flattened: an array as its meminfo, parent, size, item size, data pointer, shape and
strides, an integer as itself, ``None`` as a pointer; on a 64-bit machine each of these is
one 64-bit word. :func:`pack_words` (compiled per argument-type signature: a few lines,
0.1–0.2 s) writes the ``w`` words of the arguments ``a_1 … a_m`` into an array, the
arrays' meminfo and parent as null (the kernels, compiled without numba's reference counts,
read neither). The driver, :func:`run_shares`, takes that array and ``w`` and calls the
kernel's address as a function of :data:`WIDTH` + 2 words, the share's bounds in words
``w`` and ``w + 1``:

.. math::  \mathrm{kernel}(x_0, \dots, x_{w-1}, b_s, b_{s+1}, 0, \dots, 0).

A function reads its own parameters only: on x86-64 (System V and Windows) and AArch64 the
caller passes the words past the sixth (eighth) in 8-byte stack slots and removes them, so
the words past ``w + 1`` are passed and never read. Every parameter is one 64-bit word
(:func:`word_arguments` admits arrays, ``None``, 64-bit integers and tuples of them, nothing
of another width or a float, which travels in another register file), so the slots agree.
The driver is therefore one compiled function for every kernel, about 0.4 s once per machine
(numba's cache), where a driver typed by the kernel's arguments compiled for 0.6 s per
signature: four times in a cold ``gblas-gnn train``, 49 times in the test suite. A kernel of
more than :data:`WIDTH` words goes through :func:`run_wide_shares` (:data:`WIDE_WIDTH`
words, compiled when first needed); one of more runs on one thread.

Why by address: a driver that called its kernel by name had numba link the kernel's code
into it, and LLVM optimised and emitted the kernel a second time inside the parallel loop
(1.5 s or more a kernel), for up to 8 % of speed on small graphs and none at 10⁵ vertices
(``docs/performance.md``, compilation, has the measurements).

A kernel that raises (numba's status of an error, e.g. a division by zero under numba's
Python error model) marks its share in ``failed``, and the caller
(:class:`._shares.ThreadedKernel`) runs the kernel on its own thread, which raises the
kernel's own exception.
"""

from __future__ import annotations

import sys

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ...codegen.kernel_cache import cache_dir, locked_kernel

__all__ = ["WIDTH", "WIDE_WIDTH", "word_arguments", "pack_words", "run_shares",
           "run_wide_shares", "ShareDriver", "share_driver"]

#: the argument words of the driver's call (a kernel's arguments, then its two bounds)
WIDTH = 254
#: the argument words of the wide driver's call, for kernels of more than :data:`WIDTH`
WIDE_WIDTH = 510

_WORD = ir.IntType(64)


def _is_word_type(t: types.Type) -> bool:
    """Whether numba passes a value of type ``t`` as 64-bit words only."""
    if isinstance(t, types.BaseTuple):
        return all(map(_is_word_type, t.types))
    return (isinstance(t, (types.Array, types.NoneType))
            or (isinstance(t, types.Integer) and t.bitwidth == 64))


def word_arguments(args: tuple) -> bool:
    """Whether every argument in ``args`` reaches a kernel as 64-bit words (an array,
    ``None``, a 64-bit or Python integer, a tuple of these), so that the driver can pass
    it."""
    return all(word_arguments(a) if isinstance(a, tuple)
               else a is None or isinstance(a, (np.ndarray, int, np.int64, np.uint64))
               and not isinstance(a, bool) for a in args)


def _without_references(context, builder, t: types.Type, value):
    """``value`` of type ``t`` with the meminfo and parent of every array in it null."""
    if isinstance(t, types.BaseTuple):
        for k, item in enumerate(t.types):
            inner = _without_references(context, builder, item, builder.extract_value(value, k))
            value = builder.insert_value(value, inner, k)
        return value
    if not isinstance(t, types.Array):
        return value
    array = context.make_array(t)(context, builder, value)
    array.meminfo = cgutils.get_null_value(array.meminfo.type)
    array.parent = cgutils.get_null_value(array.parent.type)
    return array._getvalue()


@intrinsic
def _store_words(typingctx, args, words):
    """Write the words of the tuple ``args`` in numba's calling convention into ``words``
    (uint64, arrays with null meminfo and parent) and return their count, or write nothing
    and return minus the count where ``words`` is too short."""
    if not (isinstance(args, types.BaseTuple) and _is_word_type(args)):
        return None

    def codegen(context, builder, signature, llargs):
        packed, out = llargs
        flat = []
        for k, t in enumerate(args.types):
            value = _without_references(context, builder, t, builder.extract_value(packed, k))
            flat.extend(context.get_arg_packer([t]).as_arguments(builder, [value]))
        count = ir.Constant(_WORD, len(flat))
        words = context.make_array(signature.args[1])(context, builder, out)
        fits = builder.icmp_signed(">=", words.nitems, count)
        with builder.if_then(fits):
            for k, v in enumerate(flat):
                word = builder.ptrtoint(v, _WORD) if isinstance(v.type, ir.PointerType) else v
                builder.store(word, builder.gep(words.data, [ir.Constant(_WORD, k)]))
        return builder.select(fits, count, builder.neg(count))

    return types.int64(args, words), codegen


def _word_caller(width: int):
    """An intrinsic ``call(address, words, count, r0, r1)``: the function at ``address``
    called in numba's calling convention with ``width`` + 2 word arguments, the first
    ``count`` from ``words`` (at least ``width`` long), then ``r0`` and ``r1``; 1 where it
    raised, else 0."""

    @intrinsic
    def call(typingctx, address, words, count, r0, r1):
        argtypes = (types.uint64,) * (width + 2)

        def codegen(context, builder, signature, llargs):
            at, packed, n, lo, hi = llargs
            words = context.make_array(signature.args[1])(context, builder, packed)
            local = cgutils.alloca_once(builder, _WORD, size=width + 2)
            cgutils.raw_memcpy(builder, local, words.data, ir.Constant(_WORD, width), 8)
            builder.store(lo, builder.gep(local, [n]))
            builder.store(hi, builder.gep(local, [builder.add(n, ir.Constant(_WORD, 1))]))
            values = [builder.load(builder.gep(local, [ir.Constant(_WORD, k)]))
                      for k in range(width + 2)]
            fnty = context.call_conv.get_function_type(types.none, argtypes)
            fn = builder.inttoptr(at, fnty.as_pointer())
            status, _ = context.call_conv.call_function(builder, fn, types.none, argtypes,
                                                        values)
            return builder.zext(status.is_error, _WORD)

        return types.int64(address, words, count, r0, r1), codegen

    return call


_call_words = _word_caller(WIDTH)
_call_wide_words = _word_caller(WIDE_WIDTH)


@nb.njit(cache=True)
def pack_words(args, words):
    """The words of the tuple ``args`` written into ``words`` (uint64, :func:`_store_words`):
    their count, or minus it where ``words`` is too short (nothing written)."""
    return _store_words(args, words)


@nb.njit(parallel=True, cache=True)
def run_shares(address, bounds, failed, words, count):
    """The kernel at ``address`` over each share ``[bounds[s], bounds[s + 1])`` (unsigned)
    on its own thread, its other arguments the first ``count`` ≤ :data:`WIDTH` of ``words``
    (:func:`pack_words`; at least :data:`WIDTH` long); ``failed[s]`` set to 1 where share
    ``s``'s call raised, else 0. (The caller allocates ``failed``: an array made and summed
    here doubled the driver's compile time.)"""
    for s in nb.prange(bounds.shape[0] - 1):
        failed[s] = _call_words(address, words, count, bounds[s], bounds[s + 1])


@nb.njit(parallel=True, cache=True)
def run_wide_shares(address, bounds, failed, words, count):
    """:func:`run_shares` for kernels of up to :data:`WIDE_WIDTH` words."""
    for s in nb.prange(bounds.shape[0] - 1):
        failed[s] = _call_wide_words(address, words, count, bounds[s], bounds[s + 1])


class ShareDriver:
    """The drivers of this module under the kernel cache's lock (each compiled by one
    process of those that share the cache, the others load it from numba's cache), and the
    word count of each argument-type key seen."""

    __slots__ = ("_pack", "_narrow", "_wide", "_counts")

    def __init__(self):
        module = sys.modules[__name__]
        directory = cache_dir("cpu")
        self._pack, self._narrow, self._wide = (
            locked_kernel(directory, module, name)
            for name in ("pack_words", "run_shares", "run_wide_shares"))
        self._counts: dict[tuple, int] = {}

    def call_keyed(self, key: tuple, address: int, bounds: np.ndarray, failed: np.ndarray,
                   args: tuple) -> bool:
        """The kernel at ``address`` on the shares ``bounds`` with the arguments ``args``
        (``key``: their :func:`~gblas_gnn.codegen.kernel_cache.type_key`); ``failed`` as in
        :func:`run_shares`. False, with nothing run, where the arguments do not travel as
        words (:func:`word_arguments`) or are more than :data:`WIDE_WIDTH`."""
        count = self._counts.get(key)
        if count is None:
            count = self._counts[key] = self._count(key, args)
        if count < 0:
            return False
        driver, width = (self._narrow, WIDTH) if count <= WIDTH else (self._wide, WIDE_WIDTH)
        words = np.zeros(width, np.uint64)
        self._pack.call_keyed(key, args, words)
        driver.call_keyed((), address, bounds, failed, words, count)
        return True

    def _count(self, key: tuple, args: tuple) -> int:
        """The word count of ``args``, or -1 where the driver cannot pass them."""
        if not word_arguments(args):
            return -1
        count = abs(self._pack.call_keyed(key, args, np.zeros(0, np.uint64)))
        return count if count <= WIDE_WIDTH else -1


_DRIVER: list[ShareDriver] = []


def share_driver() -> ShareDriver:
    """The process's :class:`ShareDriver`."""
    if not _DRIVER:
        _DRIVER.append(ShareDriver())
    return _DRIVER[0]

