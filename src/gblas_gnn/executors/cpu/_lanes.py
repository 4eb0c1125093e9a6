r"""Vector registers in numba kernels: a row's sum held in registers across its edges.

numba has no vector type: a kernel that adds gathered rows into an output row,
``o[c] += w · x[c]`` for every edge, keeps the sum in memory, and every edge loads and stores
the whole output row again (LLVM vectorises the loop over ``c`` but cannot keep ``o`` in
registers: the loop's trip count and the output's aliasing with the gathered rows are known at
run time only). These intrinsics give kernels a value of ``LANES`` floats (32 bytes: 8
float32 or 4 float64, one AVX register; LLVM splits it where registers are narrower), so that
a block of a row's sum

.. math:: a \leftarrow \mathrm{fma}(w_p, X_{j_p, c:c+L}, a) \quad (p \in \mathrm{row}\ i)

stays in registers and is stored once. Each lane does the very operations of the scalar
loop (a fused multiply-add per term, in storage order), so the result is bitwise the same.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, overload, register_model

__all__ = ["Lanes", "lane_count", "lanes_load", "lanes_store", "lanes_splat", "lanes_fma",
           "lanes_div"]

#: bytes of one vector value
VECTOR_BYTES = 32


class Lanes(types.Type):
    """``VECTOR_BYTES // itemsize`` values of the float type ``dtype`` in one register."""

    def __init__(self, dtype: types.Float):
        self.dtype = dtype
        self.count = VECTOR_BYTES // (dtype.bitwidth // 8)
        super().__init__(name=f"lanes{self.count}x{dtype}")


@register_model(Lanes)
class _LanesModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        element = ir.FloatType() if fe_type.dtype.bitwidth == 32 else ir.DoubleType()
        super().__init__(dmm, fe_type, ir.VectorType(element, fe_type.count))


def lane_count(array):
    """Values of ``array``'s float type in one vector (a compile-time constant in a kernel)."""
    return VECTOR_BYTES // array.itemsize


@overload(lane_count, inline="always")
def _lane_count_overload(array):
    count = VECTOR_BYTES // (array.dtype.bitwidth // 8)
    return lambda array: count


def _float_array(array) -> bool:
    return (isinstance(array, types.Array) and array.ndim == 1 and array.layout == "C"
            and isinstance(array.dtype, types.Float))


def _pointer(context, builder, array_type, array, offset, offset_type, vector):
    view = context.make_array(array_type)(context, builder, array)
    index = context.cast(builder, offset, offset_type, types.intp)
    return builder.bitcast(builder.gep(view.data, [index]), vector.as_pointer())


@intrinsic
def lanes_load(typingctx, array, offset):
    """The vector ``array[offset : offset + L]`` (1-D C-contiguous float array; no bounds
    check, alignment of one element)."""
    if not (_float_array(array) and isinstance(offset, types.Integer)):
        return None
    lanes = Lanes(array.dtype)

    def codegen(context, builder, signature, args):
        vector = context.get_value_type(lanes)
        return builder.load(_pointer(context, builder, signature.args[0], args[0], args[1],
                                     signature.args[1], vector),
                            align=array.dtype.bitwidth // 8)

    return lanes(array, offset), codegen


@intrinsic
def lanes_store(typingctx, array, offset, value):
    """``array[offset : offset + L] = value``."""
    if not (_float_array(array) and isinstance(offset, types.Integer)
            and isinstance(value, Lanes) and value.dtype == array.dtype):
        return None

    def codegen(context, builder, signature, args):
        vector = context.get_value_type(value)
        builder.store(args[2], _pointer(context, builder, signature.args[0], args[0], args[1],
                                        signature.args[1], vector),
                      align=array.dtype.bitwidth // 8)
        return context.get_dummy_value()

    return types.void(array, offset, value), codegen


@intrinsic
def lanes_splat(typingctx, like, x):
    """A vector of ``like``'s type (an array or a vector of the float type) with every lane
    ``x`` (cast to the float type)."""
    dtype = like.dtype if isinstance(like, (types.Array, Lanes)) else None
    if not (isinstance(dtype, types.Float) and isinstance(x, types.Number)):
        return None
    lanes = Lanes(dtype)

    def codegen(context, builder, signature, args):
        vector = context.get_value_type(lanes)
        scalar = context.cast(builder, args[1], signature.args[1], dtype)
        one = builder.insert_element(ir.Constant(vector, ir.Undefined), scalar,
                                     ir.Constant(ir.IntType(32), 0))
        mask = ir.Constant(ir.VectorType(ir.IntType(32), lanes.count), [0] * lanes.count)
        return builder.shuffle_vector(one, ir.Constant(vector, ir.Undefined), mask)

    return lanes(like, x), codegen


@intrinsic
def lanes_fma(typingctx, a, b, c):
    """``a · b + c`` lane by lane, one rounding (``llvm.fma``: the fused multiply-add the
    scalar loops contract to)."""
    if not (isinstance(a, Lanes) and a == b == c):
        return None

    def codegen(context, builder, signature, args):
        vector = context.get_value_type(a)
        name = f"llvm.fma.v{a.count}f{a.dtype.bitwidth}"
        fn = cgutils.get_or_insert_function(builder.module,
                                            ir.FunctionType(vector, [vector] * 3), name)
        return builder.call(fn, args)

    return a(a, b, c), codegen


@intrinsic
def lanes_div(typingctx, a, b):
    """``a / b`` lane by lane (correctly rounded)."""
    if not (isinstance(a, Lanes) and a == b):
        return None

    def codegen(context, builder, signature, args):
        return builder.fdiv(args[0], args[1])

    return a(a, b), codegen
