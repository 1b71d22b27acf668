"""Numba kernels: plain loops over a scalar core.

Layers: :func:`sincos_turns` (one angle, exact reduction + polynomials) -> array kernels that
``prange`` over independent output rows (sinusoid tables; RoPE cos/sin caches and tables) or
over independent blocks of rows rotated in place (RoPE ``apply``).  Kernels assume validated input and never raise.
The algorithm is described in :mod:`fastpe._plans.words` (the split frequency words) and
:mod:`fastpe._plans.poly` (the polynomials); ``csrc/fastpe_kernels.h`` is its C twin.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..._plans import words as _words
from ..._plans.layouts import LAYOUT_CODES
from ..._plans.poly import COS_COEFFS, SIN_COEFFS
from ._jit import inline, kernel, prefetch

S0, S1, S2, S3, S4, S5, S6, S7 = SIN_COEFFS
C0, C1, C2, C3, C4, C5, C6, C7 = COS_COEFFS


@inline
def sincos_turns(p, v1, v2, v3, v4):
    """``(sin, cos)`` of ``2*pi*p*(v1+v2+v3+v4)`` in double precision, for integer ``p < 2**32``.

    The products ``p*v1 .. p*v3`` are exact (21-bit words times a 32-bit integer), and so is
    taking their fractional parts.  Their sum is formed with two error-free two-sums, so the
    reduced argument keeps ~2**-85 absolute accuracy in turns however close ``p*v`` comes to
    a quarter turn.  No branches, no libm: the loop over columns vectorises.
    """
    a = p * v1
    a = a - np.floor(a)
    b = p * v2
    b = b - np.floor(b)
    c = p * v3
    c = c - np.floor(c)
    d = p * v4
    # (s, e1) = two_sum(a, b)
    s = a + b
    bb = s - a
    e1 = (a - (s - bb)) + (b - bb)
    # (s, e2) = two_sum(s, c)
    t = s + c
    cc = t - s
    e2 = (s - (t - cc)) + (c - cc)
    t = t - np.floor(t)  # exact
    return _sincos_of_turn(t, (e1 + e2) + d)


@inline
def _sincos_of_turn(t, tail):
    """``(sin, cos)`` of ``2*pi*(t + tail)``: ``t`` in ``[0, 1)`` (or the centred
    ``[-1/2, 1/2]`` of the real-position path) exactly, ``tail`` a small correction.  The
    reduction to the nearest quarter turn is exact (Sterbenz), then the polynomials and the
    quadrant's signs."""
    n = np.floor(4.0 * t + 0.5)  # nearest quarter turn, 0..4 (-2..2 for a centred t)
    r = (t - 0.25 * n) + tail  # t - n/4 is exact (Sterbenz)
    q = n - 4.0 * np.floor(0.25 * n)  # quadrant 0..3
    r2 = r * r
    sp = r * (S0 + r2 * (S1 + r2 * (S2 + r2 * (S3 + r2 * (S4 + r2 * (S5 + r2 * (S6 + r2 * S7)))))))
    cp = C0 + r2 * (C1 + r2 * (C2 + r2 * (C3 + r2 * (C4 + r2 * (C5 + r2 * (C6 + r2 * C7))))))
    odd = (q == 1.0) | (q == 3.0)
    sv = cp if odd else sp
    cv = sp if odd else cp
    ssign = -1.0 if q >= 2.0 else 1.0
    csign = -1.0 if (q == 1.0) | (q == 2.0) else 1.0
    return ssign * sv, csign * cv


# ---------------------------------------------------------------------------------------
# Rows.  Every value is defined the same way whichever kernel writes it (see
# fastpe._plans.words, "anchored products", the home of STEPS and TINY): with
# a = p - p % STEPS and m = p % STEPS,
#     sin(p w) = sin(a w) cos(m w) + cos(a w) sin(m w),  cos likewise,
# from the exact-path doubles of the anchor and of the cached step, rounded to float32 --
# unless that float32 is below TINY in magnitude, where the product's absolute error
# (< 2**-46) would be too large a relative error, and the exact path is used directly.
# One definition for `forward` and for tables: a table row is bit-identical to `forward`
# of its position, and a table streams at memory speed because one anchor serves STEPS rows.

STEPS = _words.STEPS
#: rows per parallel block of the forward kernel (an anchor is reused within a block)
FORWARD_ROWS = 64
TINY = np.float32(_words.TINY)
_TINY_BITS = TINY.view(np.int32)  # its bit pattern (0x38800000 for 2**-14)


def _sincos_steps(turns, steps):
    """``steps[m, 0, i], steps[m, 1, i] = cos(m w_i), sin(m w_i)`` by the exact path."""
    n_freq = turns.shape[1]
    for m in prange(steps.shape[0]):
        p = np.float64(m)
        for i in range(n_freq):
            s, c = sincos_turns(p, turns[0, i], turns[1, i], turns[2, i], turns[3, i])
            steps[m, 0, i] = c
            steps[m, 1, i] = s


@inline
def _anchor(a, turns, sa, ca):
    for i in range(turns.shape[1]):
        sa[i], ca[i] = sincos_turns(a, turns[0, i], turns[1, i], turns[2, i], turns[3, i])


@inline
def _move_anchor(p, anchor, turns, sa, ca):
    """``(m, a)`` of the integer position ``p``: its step ``m = p % STEPS`` and anchor
    ``a = p - m``, whose exact sines and cosines ``sa, ca`` are recomputed only when ``a`` is
    not ``anchor``, the one they hold (consecutive positions share it)."""
    m = p % STEPS
    a = p - m
    if a != anchor:
        _anchor(np.float64(a), turns, sa, ca)
    return m, a


@inline
def _product_row(sa, ca, cm, sm, o):
    d_model = o.shape[0]
    n_pairs = d_model // 2
    for i in range(n_pairs):
        o[2 * i] = np.float32(sa[i] * cm[i] + ca[i] * sm[i])
        o[2 * i + 1] = np.float32(ca[i] * cm[i] - sa[i] * sm[i])
    if d_model & 1:
        o[d_model - 1] = np.float32(sa[n_pairs] * cm[n_pairs] + ca[n_pairs] * sm[n_pairs])


@inline
def _fix_tiny(p, turns, o, bits):
    """Recompute, by the exact path, the values of row ``o`` below TINY (rare)."""
    smallest = np.int32(0x7FFFFFFF)
    for j in range(bits.shape[0]):  # integer min over |bits|: vectorises, unlike a float min
        b = bits[j] & np.int32(0x7FFFFFFF)
        smallest = b if b < smallest else smallest
    if smallest < _TINY_BITS:
        d_model = o.shape[0]
        for i in range(turns.shape[1]):
            j = 2 * i
            if abs(o[j]) < TINY or (j + 1 < d_model and abs(o[j + 1]) < TINY):
                s, c = sincos_turns(p, turns[0, i], turns[1, i], turns[2, i], turns[3, i])
                o[j] = np.float32(s)
                if j + 1 < d_model:
                    o[j + 1] = np.float32(c)


@inline
def _negate_sines(o):
    """A negative position's row: its magnitude's with the sines (even columns) negated --
    sine odd, cosine even, float32 rounding symmetric, so the same bits as the true row."""
    for j in range(0, o.shape[0], 2):
        o[j] = -o[j]


def _sinusoid_forward(positions, turns, steps, out):
    """Rows of ``positions``: ``uint32``, or ``int64`` with ``|p| < 2**32`` (a negative
    position is its magnitude's row with the sines negated, in the row just written)."""
    n = out.shape[0]
    n_freq = turns.shape[1]
    bits = out.view(np.int32)
    n_blocks = (n + FORWARD_ROWS - 1) // FORWARD_ROWS
    for blk in prange(n_blocks):
        sa = np.empty(n_freq)
        ca = np.empty(n_freq)
        anchor = np.int64(-1)
        for row in range(blk * FORWARD_ROWS, min(n, (blk + 1) * FORWARD_ROWS)):
            signed = np.int64(positions[row])
            p = abs(signed)
            m, anchor = _move_anchor(p, anchor, turns, sa, ca)  # a run (a table) shares anchors
            _product_row(sa, ca, steps[m, 0], steps[m, 1], out[row])
            _fix_tiny(np.float64(p), turns, out[row], bits[row])
            if signed < 0:
                _negate_sines(out[row])


def _sinusoid_range(start, turns, steps, out):
    """Rows ``start .. start + n - 1``; blocks are aligned to absolute multiples of STEPS so
    each anchor is computed once and every row matches ``forward`` of its position."""
    n_rows = out.shape[0]
    n_freq = turns.shape[1]
    bits = out.view(np.int32)
    first_block = start // STEPS
    n_blocks = (start + n_rows - 1) // STEPS - first_block + 1
    for b in prange(n_blocks):
        a = (first_block + b) * STEPS
        lo = max(a, start)
        hi = min(a + STEPS, start + n_rows)
        sa = np.empty(n_freq)
        ca = np.empty(n_freq)
        _anchor(np.float64(a), turns, sa, ca)
        for p in range(lo, hi):
            m = p - a
            row = p - start
            _product_row(sa, ca, steps[m, 0], steps[m, 1], out[row])
            _fix_tiny(np.float64(p), turns, out[row], bits[row])


sincos_steps_parallel, sincos_steps_serial = kernel(_sincos_steps)
sinusoid_forward_parallel, sinusoid_forward_serial = kernel(_sinusoid_forward)
sinusoid_range_parallel, sinusoid_range_serial = kernel(_sinusoid_range)


# ---------------------------------------------------------------------------------------
# RoPE.  One definition of the cos/sin doubles of position p and frequency f_i (each f_i the
# exact value of a double inv_freq, split into words by fastpe._plans.words.frequency_turns):
#     c, s = the anchored product, as above (a = p - p % STEPS, m = p % STEPS),
#     unless |c| or |s| is below TINY64: then (c, s) come from the exact path at p;
#     C = af * c,  S = af * s   (af the attention factor, one rounding each),
#     an exact zero written +0.0 (`+ 0.0`), as the exact value 0 is: sin 0 times a negative
#     af, or af = 0, would otherwise leave -0.0, a bit the reference does not give.  A product
#     of two non-zero numbers that underflows to zero keeps its sign (:func:`_scaled`): the
#     exact value is not 0 there, and its correct rounding is the signed zero.
# The tiny test is on the *unscaled* product: its absolute error (< 2**-46) is then below
# 2**-32 of |c| and |s| whatever af is, and scaling multiplies value and error alike.  (A test
# on af * c would let a large af pass values whose relative error is far above 2**-24.)
# cos_sin writes float32(C), float32(S); apply writes float32(x1*C - x2*S) and
# float32(x2*C + x1*S) from the float32 inputs widened to double -- no FMA, same order of
# operations as csrc/fastpe_kernels.h, so both backends write the same bits.

TINY64 = float(_words.TINY)
#: positions per parallel block of the table and cos_sin kernels (one anchor per STEPS)
ROPE_ROWS = 64
#: sequence positions per work item of the apply kernel where one token's heads are adjacent
#: ((tokens, heads, dim)): the item's table rows (ROPE_SEQ x 2 x n_freq doubles, 16 KiB at
#: n_freq = 64) stay in L1 while every head streams past them
ROPE_SEQ = 16
#: where one head's rows are adjacent ((batch, heads, seq, dim)) an item is ROPE_RUN rows of
#: ROPE_HEADS heads (q's heads, then k's), in memory order, each table row read once for the
#: item's heads: a thread's items are ROPE_HEADS streams through memory.  Items of every head
#: at ROPE_SEQ positions (the table rows read once for all heads) made 64 short streams 2 MiB
#: apart at 1x32x4096x128, which the prefetchers and the caches' sets serve poorly: one thread
#: took twice the time of an in-place pass over the bytes.  csrc/fastpe_kernels.h has the same
#: items (FASTPE_ROPE_RUN, FASTPE_ROPE_HEADS).
ROPE_RUN = 256
ROPE_HEADS = 4


@inline
def _scaled(af, v):
    """``af * v`` rounded once; ``+0.0`` where ``af`` or ``v`` is zero (the exact value 0),
    while a product of two non-zero numbers keeps its sign even when it underflows."""
    r = af * v
    if af == 0.0 or v == 0.0:
        r = r + 0.0
    return r


@inline
def _rope_row(p, turns, sa, ca, cm, sm, af, c_out, s_out):
    """``c_out[i], s_out[i] = C, S`` of position ``p`` (anchor ``sa, ca``, step ``cm, sm``)."""
    n_freq = c_out.shape[0]
    n_tiny = 0
    for i in range(n_freq):  # vectorises (the ifs become selects)
        c = ca[i] * cm[i] - sa[i] * sm[i]
        s = sa[i] * cm[i] + ca[i] * sm[i]
        c_out[i] = c
        s_out[i] = s
        if abs(c) < TINY64:  # two ifs, not `or`/`|`: LLVM turns these into selects
            n_tiny += 1
        if abs(s) < TINY64:
            n_tiny += 1
    if n_tiny:  # rare: about one (position, frequency) in 13,000 has |c| or |s| < 2**-14
        for i in range(n_freq):
            if abs(c_out[i]) < TINY64 or abs(s_out[i]) < TINY64:
                s, c = sincos_turns(p, turns[0, i], turns[1, i], turns[2, i], turns[3, i])
                c_out[i] = c
                s_out[i] = s
    for i in range(n_freq):
        c_out[i] = _scaled(af, c_out[i])
        s_out[i] = _scaled(af, s_out[i])


def _rope_table(positions, turns, steps, af, table):
    """``table[t, 0, i], table[t, 1, i] = C, S`` of ``positions[t]`` and frequency ``i``."""
    n = positions.shape[0]
    n_freq = turns.shape[1]
    n_blocks = (n + ROPE_ROWS - 1) // ROPE_ROWS
    for blk in prange(n_blocks):
        sa = np.empty(n_freq)
        ca = np.empty(n_freq)
        anchor = np.int64(-1)
        lo = blk * ROPE_ROWS
        hi = min(n, lo + ROPE_ROWS)
        for t in range(lo, hi):
            p = np.int64(positions[t])
            m, anchor = _move_anchor(p, anchor, turns, sa, ca)
            _rope_row(np.float64(p), turns, sa, ca, steps[m, 0], steps[m, 1], af,
                      table[t, 0], table[t, 1])


@inline
def _rope_cs_row(p, turns, sa, ca, cm, sm, af, neox, oc, os_):
    """One row of cos_sin: float32 of :func:`_rope_row`'s values, in one pass.  The products
    go straight to the output; rows with a tiny value are fixed after (the products are
    recomputed, identically, to find them)."""
    n = turns.shape[1]
    n_tiny = 0
    if neox:
        for i in range(n):
            c = ca[i] * cm[i] - sa[i] * sm[i]
            s = sa[i] * cm[i] + ca[i] * sm[i]
            if abs(c) < TINY64:  # two ifs, not `or`/`|`: LLVM turns these into selects
                n_tiny += 1
            if abs(s) < TINY64:
                n_tiny += 1
            cf = np.float32(_scaled(af, c))
            sf = np.float32(_scaled(af, s))
            oc[i] = cf
            oc[n + i] = cf
            os_[i] = sf
            os_[n + i] = sf
    else:
        for i in range(n):
            c = ca[i] * cm[i] - sa[i] * sm[i]
            s = sa[i] * cm[i] + ca[i] * sm[i]
            if abs(c) < TINY64:  # two ifs, not `or`/`|`: LLVM turns these into selects
                n_tiny += 1
            if abs(s) < TINY64:
                n_tiny += 1
            cf = np.float32(_scaled(af, c))
            sf = np.float32(_scaled(af, s))
            oc[2 * i] = cf
            oc[2 * i + 1] = cf
            os_[2 * i] = sf
            os_[2 * i + 1] = sf
    if n_tiny:
        for i in range(n):
            c = ca[i] * cm[i] - sa[i] * sm[i]
            s = sa[i] * cm[i] + ca[i] * sm[i]
            if abs(c) < TINY64 or abs(s) < TINY64:
                s, c = sincos_turns(p, turns[0, i], turns[1, i], turns[2, i], turns[3, i])
                cf = np.float32(_scaled(af, c))
                sf = np.float32(_scaled(af, s))
                j, k = (i, n + i) if neox else (2 * i, 2 * i + 1)
                oc[j] = cf
                oc[k] = cf
                os_[j] = sf
                os_[k] = sf


def _rope_cos_sin(positions, turns, steps, af, neox, out_cos, out_sin):
    """Rows of float32 ``C`` and ``S``, each frequency in two columns: ``i`` and
    ``i + n_freq`` (``neox``), or ``2i`` and ``2i + 1`` (GPT-J)."""
    n = positions.shape[0]
    n_freq = turns.shape[1]
    n_blocks = (n + ROPE_ROWS - 1) // ROPE_ROWS
    for blk in prange(n_blocks):
        sa = np.empty(n_freq)
        ca = np.empty(n_freq)
        anchor = np.int64(-1)
        lo = blk * ROPE_ROWS
        hi = min(n, lo + ROPE_ROWS)
        for t in range(lo, hi):
            p = np.int64(positions[t])
            m, anchor = _move_anchor(p, anchor, turns, sa, ca)
            _rope_cs_row(np.float64(p), turns, sa, ca, steps[m, 0], steps[m, 1], af, neox,
                         out_cos[t], out_sin[t])


@inline
def _rotate(x, o, c, s, neox):
    """Rotate the row of ``x`` starting at ``o`` by the table row ``c, s`` (in place)."""
    n = c.shape[0]
    if neox:  # pairs (i, i + n): HF's rotate_half
        a = x[o:o + n]
        b = x[o + n:o + 2 * n]
        for i in range(n):
            x1 = np.float64(a[i])
            x2 = np.float64(b[i])
            a[i] = np.float32(x1 * c[i] - x2 * s[i])
            b[i] = np.float32(x2 * c[i] + x1 * s[i])
    else:  # pairs (2i, 2i + 1): GPT-J
        r = x[o:o + 2 * n]
        for i in range(n):
            x1 = np.float64(r[2 * i])
            x2 = np.float64(r[2 * i + 1])
            r[2 * i] = np.float32(x1 * c[i] - x2 * s[i])
            r[2 * i + 1] = np.float32(x2 * c[i] + x1 * s[i])


@inline
def _rotate_rows(x, n_heads, base, s_head, s_seq, lo, hi, t0, table, neox):
    """Rows ``(h, s)`` for every head and ``s`` in ``[lo, hi)``; memory order first."""
    if s_head >= s_seq:  # (batch, heads, seq, dim): one head's rows are adjacent
        width = 2 * table.shape[2]
        for h in range(n_heads):
            for s in range(lo, hi):
                if h + 1 < n_heads:  # the next head's block is far away: ask for its row now
                    nxt = base + (h + 1) * s_head + s * s_seq
                    for j in range(0, width, 16):
                        prefetch(x, nxt + j)
                _rotate(x, base + h * s_head + s * s_seq, table[t0 + s, 0], table[t0 + s, 1], neox)
    else:  # (tokens, heads, dim): one token's heads are adjacent
        for s in range(lo, hi):
            for h in range(n_heads):
                _rotate(x, base + h * s_head + s * s_seq, table[t0 + s, 0], table[t0 + s, 1], neox)


@inline
def _rotate_heads(x, h0, h1, base, s_head, s_seq, s, c, sn, neox):
    """Row ``s`` of heads ``[h0, h1)``, all by the table row ``c, sn``."""
    for h in range(h0, h1):
        _rotate(x, base + h * s_head + s * s_seq, c, sn, neox)


def _rope_apply(xq, hq, bq, shq, ssq, xk, hk, bk, shk, ssk, n_batch, s_begin, s_end,
                table, pos_bstride, neox):
    """Rotate ``q`` and ``k`` (flat buffers; ``hk = 0`` for none) for sequence indices
    ``[s_begin, s_end)`` of every batch; row ``(b, s)`` reads table row
    ``b * pos_bstride + s - s_begin``.  Where both have a head's rows adjacent, work items
    are (batch, ROPE_HEADS heads of q's then k's, ROPE_RUN positions), in memory order;
    otherwise (batch, ROPE_SEQ positions), each rotating q's and k's rows of those
    positions for every head."""
    if shq >= ssq and (hk == 0 or shk >= ssk):
        n_run = (s_end - s_begin + ROPE_RUN - 1) // ROPE_RUN
        n_group = (hq + hk + ROPE_HEADS - 1) // ROPE_HEADS
        for item in prange(n_batch * n_group * n_run):
            b = item // (n_group * n_run)
            h0 = (item // n_run) % n_group * ROPE_HEADS
            h1 = min(hq + hk, h0 + ROPE_HEADS)
            lo = s_begin + (item % n_run) * ROPE_RUN
            hi = min(s_end, lo + ROPE_RUN)
            t0 = b * pos_bstride - s_begin
            q0, q1 = min(h0, hq), min(h1, hq)  # the item's heads of q, then of k
            k0, k1 = max(h0, hq) - hq, max(h1, hq) - hq
            for s in range(lo, hi):
                c = table[t0 + s, 0]
                sn = table[t0 + s, 1]
                _rotate_heads(xq, q0, q1, b * bq, shq, ssq, s, c, sn, neox)
                _rotate_heads(xk, k0, k1, b * bk, shk, ssk, s, c, sn, neox)
    else:
        n_sb = (s_end - s_begin + ROPE_SEQ - 1) // ROPE_SEQ
        for item in prange(n_batch * n_sb):
            b = item // n_sb
            lo = s_begin + (item % n_sb) * ROPE_SEQ
            hi = min(s_end, lo + ROPE_SEQ)
            t0 = b * pos_bstride - s_begin
            _rotate_rows(xq, hq, b * bq, shq, ssq, lo, hi, t0, table, neox)
            _rotate_rows(xk, hk, b * bk, shk, ssk, lo, hi, t0, table, neox)


rope_table_parallel, rope_table_serial = kernel(_rope_table)
rope_cos_sin_parallel, rope_cos_sin_serial = kernel(_rope_cos_sin)
rope_apply_parallel, rope_apply_serial = kernel(_rope_apply)


# ---------------------------------------------------------------------------------------
# Sinusoid families (fastpe._plans.frequencies: any geometric frequency set, any layout, float32 or
# float64 output).  Integer positions: each (position, frequency) pair is RoPE's value
# (`_rope_row` with af = 1: the anchored product, or the exact path where |c| or |s| is
# below TINY64), stored in out's dtype.  Real positions (timesteps): the exact path of
# `sincos_real_turns` for every value.  Columns: sin of frequency k goes to `2k` (layout 0,
# interleaved), `k` (1, halves) or `count + k` (2, halves with cosines first); its cosine to
# `2k + 1`, `count + k` or `k`; a column past the row's end is dropped and columns from
# 2 * count on are zero.  The codes are fastpe._plans.layouts.LAYOUT_CODES.

_INTERLEAVED = LAYOUT_CODES["interleaved"]
_HALVES = LAYOUT_CODES["halves"]


@inline
def _scatter(c, s, layout, o):
    n = c.shape[0]
    d = o.shape[0]
    if layout == _INTERLEAVED:
        for k in range(n):
            o[2 * k] = s[k]
            if 2 * k + 1 < d:
                o[2 * k + 1] = c[k]
    else:  # halves, or halves_cos (the cosines first)
        first = s if layout == _HALVES else c
        second = c if layout == _HALVES else s
        for k in range(n):
            o[k] = first[k]
        for k in range(min(n, d - n)):
            o[n + k] = second[k]
    for j in range(2 * n, d):
        o[j] = 0.0


def _sincos_rows(positions, turns, steps, layout, out):
    n = positions.shape[0]
    n_freq = turns.shape[1]
    n_blocks = (n + ROPE_ROWS - 1) // ROPE_ROWS
    for blk in prange(n_blocks):
        sa = np.empty(n_freq)
        ca = np.empty(n_freq)
        c = np.empty(n_freq)
        s = np.empty(n_freq)
        anchor = np.int64(-1)
        lo = blk * ROPE_ROWS
        hi = min(n, lo + ROPE_ROWS)
        for t in range(lo, hi):
            signed = np.int64(positions[t])  # uint32, or int64 with |p| < 2**32
            p = abs(signed)
            m, anchor = _move_anchor(p, anchor, turns, sa, ca)
            _rope_row(np.float64(p), turns, sa, ca, steps[m, 0], steps[m, 1], 1.0, c, s)
            if signed < 0:  # sine odd, cosine even: the magnitude's sines negated
                for k in range(n_freq):
                    s[k] = -s[k]
            _scatter(c, s, layout, out[t])


@inline
def _add_turns(s, b, e):
    """``s + b`` by an error-free two-sum, reduced to the nearest whole turn: the centred
    fraction (exact) and ``e`` plus the rounding error."""
    t = s + b
    bb = t - s
    e = e + ((s - (t - bb)) + (b - bb))
    return t - np.rint(t), e


@inline
def _centred(a):
    """``a`` less its nearest integer, in ``[-1/2, 1/2]``: exact for every double, unlike
    ``a - floor(a)``, which rounds when ``a`` is a small negative number (``-1e-21 + 1`` is
    1.0) and so loses the angle of negative positions."""
    return a - np.rint(a)


@inline
def sincos_real_turns(x, v1, v2, v3, v4):
    """``(sin, cos)`` of ``2*pi*x*(v1+v2+v3+v4)`` for a real ``|x| < 2**32``.

    ``x`` is cut (Veltkamp) into ``xh + xl``, 26 bits each at most, so every product with a
    21-bit word is exact.  ``x`` and ``xl`` may be negative, so each product is reduced to
    its *centred* fraction (less the nearest integer, exact whatever the sign); the six are
    summed with error-free two-sums (re-centred at each step), as in :func:`sincos_turns`.
    The quarter-turn step takes the centred turn as it takes one in ``[0, 1)``.  The angle is
    that of ``|x|``, the sine's sign flipped for a negative ``x`` (sine odd, cosine even), so
    a negative sine that underflows keeps its sign (``-0.0``, as the exact value rounds).
    """
    ax = abs(x)
    big = 134217729.0 * ax  # 2**27 + 1
    xh = big - (big - ax)
    xl = ax - xh
    s, e = _add_turns(_centred(xh * v1), _centred(xl * v1), 0.0)
    s, e = _add_turns(s, _centred(xh * v2), e)
    s, e = _add_turns(s, _centred(xl * v2), e)
    s, e = _add_turns(s, _centred(xh * v3), e)
    s, e = _add_turns(s, _centred(xl * v3), e)
    sv, cv = _sincos_of_turn(s, e + ax * v4)
    return (-sv if x < 0.0 else sv), cv


def _sincos_real(x, turns, layout, out):
    n_freq = turns.shape[1]
    for t in prange(x.shape[0]):
        c = np.empty(n_freq)
        s = np.empty(n_freq)
        for k in range(n_freq):
            s[k], c[k] = sincos_real_turns(x[t], turns[0, k], turns[1, k], turns[2, k], turns[3, k])
        _scatter(c, s, layout, out[t])


sincos_rows_parallel, sincos_rows_serial = kernel(_sincos_rows)
sincos_real_parallel, sincos_real_serial = kernel(_sincos_real)


# ---------------------------------------------------------------------------------------
# Grids (fastpe.grid): tokens in row-major order over `sizes` (slowest axis first); token t
# copies, for each axis a, the first half of row `coord_a(t)` of the 1-D table to columns
# sin_off[a] .. + q and its second half to cos_off[a] .. + q.  A pure copy, done on the
# values' bit patterns (uint16/32/64 views), so it serves every dtype.


def _grid_gather(table, sizes, sin_off, cos_off, first_row, out):
    q = table.shape[1] // 2
    n_axes = sizes.shape[0]
    strides = np.empty(n_axes, dtype=np.int64)  # tokens per step of each axis
    n_tok = 1
    for a in range(n_axes - 1, -1, -1):
        strides[a] = n_tok
        n_tok *= sizes[a]
    for t in prange(n_tok):
        row = out[first_row + t]
        for a in range(n_axes):
            src = table[(t // strides[a]) % sizes[a]]
            so = sin_off[a]
            co = cos_off[a]
            for k in range(q):
                row[so + k] = src[k]
                row[co + k] = src[q + k]


grid_gather_parallel, grid_gather_serial = kernel(_grid_gather)


# ---------------------------------------------------------------------------------------
# add_ (fastpe.add_): x[b, s, :] = x[b, s, :] * scale + pe[s, :] in x's dtype, one pass and
# two roundings, as NumPy's `x * scale + pe` does (no FMA: numba contracts nothing here).


def _add_rows(x, pe, scale, has_scale):
    n_b, n_s, d = x.shape
    s = x.dtype.type(scale)
    for r in prange(n_b * n_s):
        b = r // n_s
        i = r - b * n_s
        row = x[b, i]
        src = pe[i]
        if has_scale:
            for j in range(d):
                row[j] = row[j] * s + src[j]
        else:
            for j in range(d):
                row[j] = row[j] + src[j]


add_rows_parallel, add_rows_serial = kernel(_add_rows)


# ---------------------------------------------------------------------------------------
# Narrowing float32 to float16 / bfloat16 (fastpe._dtypes.narrow): round-to-nearest-even on
# the bit patterns, as NumPy's and ml_dtypes' casts do, and a flag on every float32 that is
# exactly halfway between two numbers of the target (the caller decides those from the
# exact value).  Numba has no float16 type, so the bits are computed directly.
#
# No data-dependent branch: every case's candidate is computed and the answer picked with
# selects, so the loops vectorise (csrc/fastpe_narrow16x.h is the C twin of the idea).  For
# float16, a float32 |x| of biased exponent e <= 113 narrows to the integer nearest x / 2**-24
# (float16 subnormals; at e = 113, x = 2**-14, that integer is already the normal encoding),
# and above to the rebiased bits (|x|'s bits - (112 << 23)) rounded by 13 bits: both are "x
# shifted right by s, rounded half to even", with s = 126 - e clamped to [13, 25].  A float32
# below 2**-25 (e <= 101, zeros and float32 subnormals included, whose implicit bit is wrong
# but below the half) shifted by 25 rounds to 0 and is no tie.  A tie is dropped bits reading
# 100...0.  65520 (0x477FF000, halfway to 2**16) and up round to inf, the one tie there being
# 65520 itself; a NaN becomes the quiet NaN 0x7E00 with its sign.
#
# The arithmetic is spelled with NumPy's ufuncs: on two uint32 they give a uint32, where
# numba's operators widen integers to 64 bits, which halves the lanes of every vector step.
# No value here needs more than 31 bits, and every shift count is below 32.

_AND, _OR, _ADD, _SUB = np.bitwise_and, np.bitwise_or, np.add, np.subtract
_SHR, _SHL, _MIN, _MAX = np.right_shift, np.left_shift, np.minimum, np.maximum
_U = np.uint32


@inline
def _to_f16(u):
    """``(bits, tie)`` of the float16 nearest (ties to even) to the float32 with bits ``u``."""
    sign = _AND(_SHR(u, _U(16)), _U(0x8000))
    a = _AND(u, _U(0x7FFFFFFF))
    e = _SHR(a, _U(23))
    normal = e >= _U(113)
    x = _SUB(a, _U(0x38000000)) if normal else _OR(_AND(a, _U(0x7FFFFF)), _U(0x800000))
    s = _U(13) if normal else _SUB(_U(126), _MAX(e, _U(101)))
    half = _SHL(_U(1), _SUB(s, _U(1)))
    h = _SHR(_ADD(_ADD(x, _SUB(half, _U(1))), _AND(_SHR(x, s), _U(1))), s)
    h = _U(0x7E00) if a > _U(0x7F800000) else _MIN(h, _U(0x7C00))
    tie = (_AND(x, _SUB(_ADD(half, half), _U(1))) == half) & (a <= _U(0x477FF000))
    return np.uint16(_OR(sign, h)), tie


@inline
def _to_bf16(u):
    """``(bits, tie)`` of the bfloat16 nearest (ties to even) to the float32 with bits ``u``."""
    a = _AND(u, _U(0x7FFFFFFF))
    hi = _SHR(u, _U(16))
    h = _SHR(_ADD(_ADD(u, _U(0x7FFF)), _AND(hi, _U(1))), _U(16))
    h = _OR(hi, _U(0x40)) if a > _U(0x7F800000) else h  # NaN: quiet
    return np.uint16(h), (_AND(u, _U(0xFFFF)) == _U(0x8000)) & (a < _U(0x7F800000))


def _narrow16(bits32, bf16, out, ties):
    # the test on bf16 hoisted out of the loops: each loop body is one straight line
    if bf16:
        for i in prange(bits32.shape[0]):
            out[i], ties[i] = _to_bf16(bits32[i])
    else:
        for i in prange(bits32.shape[0]):
            out[i], ties[i] = _to_f16(bits32[i])


narrow16_parallel, narrow16_serial = kernel(_narrow16)
