"""Numba kernel of the axial RoPE caches' copy (``fastpe.rope._axial``).

The compiled twin of :func:`fastpe._backends.python.axial_gather` (see the registry for the
arguments) and of ``csrc/fastpe_axial.h``: token ``t`` gets, for each piece ``(axis, src, col,
width)``, the cos and sin blocks of its table row ``index[axis, t]`` copied into its rows of
``out_cos`` and ``out_sin``.  A pure copy on the values' bit patterns (uint16/32/64 views), so
it serves every dtype and writes the reference's bits; both outputs are written in one pass
over the tokens, each token's rows once, and the parallel twin splits the tokens.

Each block is copied by :func:`copy_values`, LLVM's ``memcpy``: numba's element loop (a
negative-index check on every access) ran ~10x slower than C's ``memcpy`` of the same
blocks, and its slice assignment (an overlap check and a temporary) ~4x.
"""

from __future__ import annotations

import numba
from llvmlite import ir
from numba import prange
from numba.core import cgutils
from numba.extending import intrinsic

from ._jit import kernel

__all__ = ["axial_gather_parallel", "axial_gather_serial", "copy_values"]


@intrinsic
def copy_values(typingctx, dst, dst_index, src, src_index, count):
    """``copy_values(dst, i, src, j, count)``: ``dst[i:i + count] = src[j:j + count]`` for 1-D
    contiguous arrays of one dtype that do not overlap, as one ``memcpy`` (the caller keeps
    the ranges in bounds: nothing is checked)."""
    if not (isinstance(dst, numba.types.Array) and isinstance(src, numba.types.Array)
            and dst.ndim == 1 and src.ndim == 1 and dst.dtype == src.dtype
            and all(isinstance(i, numba.types.Integer) for i in (dst_index, src_index, count))):
        return None

    def codegen(context, builder, signature, args):
        target = context.make_array(signature.args[0])(context, builder, args[0])
        source = context.make_array(signature.args[2])(context, builder, args[2])
        i64 = ir.IntType(64)
        first = builder.gep(target.data, [builder.sext(args[1], i64) if args[1].type.width < 64 else args[1]])
        origin = builder.gep(source.data, [builder.sext(args[3], i64) if args[3].type.width < 64 else args[3]])
        item = context.get_abi_sizeof(context.get_data_type(signature.args[0].dtype))
        count = builder.sext(args[4], i64) if args[4].type.width < 64 else args[4]
        cgutils.raw_memcpy(builder, first, origin, builder.mul(count, ir.Constant(i64, item)), 1)
        return context.get_dummy_value()

    return numba.types.void(dst, dst_index, src, src_index, count), codegen


def _axial_gather(table, index, pieces, out_cos, out_sin):
    n_pieces = pieces.shape[0]
    d = out_cos.shape[1]
    k = table.shape[2]
    flat_cos = out_cos.reshape(-1)
    flat_sin = out_sin.reshape(-1)
    flat_table = table.reshape(-1)
    for t in prange(out_cos.shape[0]):
        row = t * d
        for p in range(n_pieces):
            src = 2 * k * index[pieces[p, 0], t] + pieces[p, 1]  # the row's cos block, then + k its sin
            col = row + pieces[p, 2]
            copy_values(flat_cos, col, flat_table, src, pieces[p, 3])
            copy_values(flat_sin, col, flat_table, src + k, pieces[p, 3])


axial_gather_parallel, axial_gather_serial = kernel(_axial_gather)
