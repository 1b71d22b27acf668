"""Numba kernels of the attention biases: ALiBi and T5 buckets.

ALiBi in two passes.  A value depends only on the head and a signed integer distance, so
the exact work is done once per ``(head, distance)``: :func:`_alibi_line` writes
``line[h, n] = round(slope_h * n)`` for ``n < k_len`` (the double-double product of the split
slope, see :mod:`fastpe.alibi`; float32 rounds one double product where it is sure of the
result, :func:`near_midpoint`), and :func:`_alibi_fill` copies each output row from its
head's line, negated and masked as the form says -- a memory-bound gather.  Negation is
exact, so ``-round(x) == round(-x)``; ``0.0 - v`` keeps a zero distance ``+0.0``.  float16
and bfloat16 take the float32 line, narrowed with every tie decided by the exact product
(:func:`fastpe._plans.alibi.narrow_line`), and :func:`_alibi_fill16` spreads its bit patterns.

T5 likewise: a bucket is ``max_exact`` plus the number of plan thresholds at or below the
distance (a binary search over a few dozen integers); the matrix fills a line of the
``q_len + k_len - 1`` relative positions it needs, then gathers.

``csrc/fastpe_bias.h`` is the C twin: the same operations in the same order, so the same bits.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.extending import intrinsic

from ..._plans import alibi as _alibi
from ._jit import inline, kernel

__all__ = [
    "alibi_line_parallel", "alibi_line_serial", "alibi_fill_parallel", "alibi_fill_serial",
    "alibi_fill16_parallel", "alibi_fill16_serial", "t5_bucket_parallel", "t5_bucket_serial",
    "t5_line_parallel", "t5_line_serial", "t5_fill_parallel", "t5_fill_serial", "LINE_BLOCK", "LINE_COST", "LINE_COST32",
]

#: distances per work item of the line pass (a head's line is split for parallelism)
LINE_BLOCK = 4096
#: the line pass costs about this many fill values per value (a dozen flops, no stores)
LINE_COST = 8
#: and the float32 line's a quarter (one product, rounded and judged by its bits, vectorised):
#: lines up to 2**17 values (~25 us on one thread; BLOOM's 32 x 2048 ~12 us) run on the
#: calling thread, where a parallel launch measured as long as the whole serial line
LINE_COST32 = 0.25

_CAUSAL = _alibi.FORM_CODES["causal"]
_BLOOM = _alibi.FORM_CODES["bloom"]
_MPT = _alibi.FORM_CODES["mpt"]


#: ``(hi, lo)``: the double-double ``d * (w1 + w2 + w3 + w4)`` (fastpe._plans.alibi.dd_product)
dd_product = inline(_alibi.dd_product)


@inline
def round_dd_f32(hi, lo):
    """The float32 nearest to ``hi + lo`` (``|lo| <= ulp(hi) / 2``, ``hi`` a normal float32 in
    magnitude or zero).  Rounding ``hi`` alone is right unless ``hi`` is exactly a float32
    midpoint, where the sign of ``lo`` says which side the true value lies on.  ``hi`` is a
    midpoint exactly when ``d = hi - t`` (``t`` its rounding) is not zero and ``t + 2d``, the
    other neighbour, is a float32 (both exact in double); no frexp in the common case."""
    f = np.float32(hi)
    if lo != 0.0:
        t = np.float64(f)
        d = hi - t
        if d != 0.0:
            o = t + 2.0 * d
            if np.float64(np.float32(o)) == o:  # a midpoint: lo picks the side
                return np.float32(o) if (lo > 0.0) == (o > t) else f
    return f


#: a float32 line value is taken from one double product unless that product lies within
#: this many units of its last place of a float32 midpoint (csrc/fastpe_bias.h's
#: FASTPE_ALIBI_NEAR, whose fastpe_alibi_fast_note proves the rule)
NEAR = 8


#: distances below this are float32 numbers: a head with an exact slope (words ``2**-e, 0,
#: 0, 0``) takes ``float32(d) * float32(2**-e)``, exact (csrc/fastpe_bias.h's
#: FASTPE_ALIBI_EXACT_FROM)
EXACT_FROM = 1 << 24


@intrinsic
def _bits(typingctx, x):
    """The bits of a float64 as an int64 (a bit cast, no conversion)."""
    if not (isinstance(x, types.Float) and x.bitwidth == 64):
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(x), codegen


@inline
def near_midpoint(p):
    """Negative when ``p >= 0`` lies within :data:`NEAR` units of its last place of a float32
    midpoint (the low 29 bits within ``NEAR`` of ``2**28``), else in ``[0, 2**29)``."""
    return ((_bits(p) + ((1 << 28) + NEAR)) & ((1 << 29) - 1)) - (2 * NEAR + 1)


def _alibi_line(words, single, first, n_blocks, line):
    """``line[h, n] = slope_h * (first + n)`` rounded (float32 if ``single``, else the leading
    double); ``0 <= first + n < 2**32``.  The bias needs ``first = 0``; tests reach the
    largest distances through ``first`` without a line of 2**32 values.

    float32: one double product ``p = d * (((w1 + w2) + w3) + w4)`` a value, rounded, where
    no float32 midpoint lies within ``NEAR`` units of ``p`` (then the rounded ``p`` is the
    correctly rounded product: csrc/fastpe_bias.h, fastpe_alibi_fast_note); a block with a
    product nearer a midpoint takes the double-double path for those."""
    n_heads, length = line.shape
    for item in prange(n_heads * n_blocks):
        h = item // n_blocks
        n0 = (item - h * n_blocks) * LINE_BLOCK
        n1 = min(length, n0 + LINE_BLOCK)
        w1 = words[0, h]
        w2 = words[1, h]
        w3 = words[2, h]
        w4 = words[3, h]
        if single:
            # a C-contiguous block indexed from 0: contiguous vector stores (indices of
            # unknown sign into line[h] compiled to scatters)
            seg = line[h, n0:n1]
            base = first + n0
            if (w2 == 0.0 and w3 == 0.0 and w4 == 0.0 and (_bits(w1) & ((1 << 52) - 1)) == 0
                    and first + n1 <= EXACT_FROM):
                # an exact slope 2**-e: float32 distance times float32 2**-e is exact
                w = np.float32(w1)
                for k in range(seg.shape[0]):
                    seg[k] = np.float32(base + k) * w
                continue
            sd = ((w1 + w2) + w3) + w4
            unsure = 0
            for k in range(seg.shape[0]):
                p = np.float64(base + k) * sd
                seg[k] = np.float32(p)
                unsure |= near_midpoint(p)
            if unsure < 0:
                for k in range(seg.shape[0]):
                    if near_midpoint(np.float64(base + k) * sd) < 0:
                        hi, lo = dd_product(np.float64(base + k), w1, w2, w3, w4)
                        seg[k] = round_dd_f32(hi, lo)
        else:
            for n in range(n0, n1):
                hi, lo = dd_product(np.float64(first + n), w1, w2, w3, w4)
                line[h, n] = hi


def _alibi_fill(line, form, out):
    """Rows of ``out`` from the lines; ``form`` a code of :data:`fastpe._plans.alibi.FORM_CODES`."""
    n_heads, q_len, k_len = out.shape
    offset = k_len - q_len
    for r in prange(n_heads * q_len):
        h = r // q_len
        i = r - h * q_len
        src = line[h]
        row = out[h, i]
        if form == _BLOOM:
            for j in range(k_len):
                row[j] = src[j]
        elif form == _MPT:
            last = k_len - 1
            for j in range(k_len):
                row[j] = 0.0 - src[last - j]
        else:
            p = i + offset  # the query's key position, 0 <= p < k_len
            for j in range(p + 1):
                row[j] = 0.0 - src[p - j]
            if form == _CAUSAL:
                for j in range(p + 1, k_len):
                    row[j] = -np.inf
            else:
                for j in range(p + 1, k_len):
                    row[j] = 0.0 - src[j - p]


def _alibi_fill16(line, form, neg_inf, out):
    """:func:`_alibi_fill` on the bit patterns of a 16-bit format (``line``, ``out``:
    uint16): negation flips the sign bit, except at distance zero, which stays ``+0.0`` (a
    non-zero distance whose value rounds to zero keeps its sign: ``-0.0``); ``neg_inf`` is
    the format's ``-inf``."""
    n_heads, q_len, k_len = out.shape
    offset = k_len - q_len
    sign = np.uint16(0x8000)
    for r in prange(n_heads * q_len):
        h = r // q_len
        i = r - h * q_len
        src = line[h]
        row = out[h, i]
        if form == _BLOOM:
            for j in range(k_len):
                row[j] = src[j]
        elif form == _MPT:
            last = k_len - 1
            for j in range(last):
                row[j] = src[last - j] ^ sign
            row[last] = src[0]
        else:
            p = i + offset
            for j in range(p):
                row[j] = src[p - j] ^ sign
            row[p] = src[0]
            if form == _CAUSAL:
                for j in range(p + 1, k_len):
                    row[j] = neg_inf
            else:
                for j in range(p + 1, k_len):
                    row[j] = src[j - p] ^ sign


@inline
def t5_one(rp, bidirectional, n, thresholds):
    """HF T5's bucket of one relative position (``rp > -2**63``), by the plan's thresholds."""
    base = 0
    if bidirectional:
        if rp > 0:
            base = n
            d = rp
        else:
            d = -rp
    else:
        d = -rp if rp < 0 else 0
    exact = n // 2
    if d < exact:
        return base + d
    lo = 0
    hi = thresholds.shape[0]
    while lo < hi:  # the number of thresholds <= d
        mid = (lo + hi) >> 1
        if thresholds[mid] <= d:
            lo = mid + 1
        else:
            hi = mid
    return base + exact + lo


def _t5_bucket(rel, bidirectional, n, thresholds, out):
    size = rel.shape[0]
    n_blocks = (size + LINE_BLOCK - 1) // LINE_BLOCK
    for b in prange(n_blocks):
        for k in range(b * LINE_BLOCK, min(size, (b + 1) * LINE_BLOCK)):
            out[k] = t5_one(rel[k], bidirectional, n, thresholds)


def _t5_line(first, bidirectional, n, thresholds, line):
    """``line[k]``: the bucket of relative position ``first + k``."""
    size = line.shape[0]
    n_blocks = (size + LINE_BLOCK - 1) // LINE_BLOCK
    for b in prange(n_blocks):
        for k in range(b * LINE_BLOCK, min(size, (b + 1) * LINE_BLOCK)):
            line[k] = t5_one(first + k, bidirectional, n, thresholds)


def _t5_fill(line, out):
    """``out[i, j] = line[j - i + q_len - 1]``: row ``i`` is a window of the line."""
    q_len, k_len = out.shape
    for i in prange(q_len):
        start = q_len - 1 - i
        row = out[i]
        for j in range(k_len):
            row[j] = line[start + j]


alibi_line_parallel, alibi_line_serial = kernel(_alibi_line)
alibi_fill_parallel, alibi_fill_serial = kernel(_alibi_fill)
alibi_fill16_parallel, alibi_fill16_serial = kernel(_alibi_fill16)
t5_bucket_parallel, t5_bucket_serial = kernel(_t5_bucket)
t5_line_parallel, t5_line_serial = kernel(_t5_line)
t5_fill_parallel, t5_fill_serial = kernel(_t5_fill)
