"""Numba kernels: plain loops over a scalar core.

Layers: :func:`sincos_turns` (one angle, exact reduction + polynomials) -> array kernels that
``prange`` over independent output rows.  Kernels assume validated input and never raise.
The algorithm is described in :mod:`fastpe._plan` (the split frequency words) and
:mod:`fastpe._poly` (the polynomials); ``csrc/fastpe_kernels.h`` is its C twin.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from .._poly import COS_COEFFS, SIN_COEFFS
from ._jit import inline, kernel

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
    n = np.floor(4.0 * t + 0.5)  # nearest quarter turn, 0..4
    r = (t - 0.25 * n) + ((e1 + e2) + d)  # t - n/4 is exact (Sterbenz)
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
# Rows.  Every value is defined the same way whichever kernel writes it (see _plan.py,
# "anchored products"): with a = p - p % STEPS and m = p % STEPS,
#     sin(p w) = sin(a w) cos(m w) + cos(a w) sin(m w),  cos likewise,
# from the exact-path doubles of the anchor and of the cached step, rounded to float32 --
# unless that float32 is below TINY in magnitude, where the product's absolute error
# (< 2**-46) would be too large a relative error, and the exact path is used directly.
# One definition for `forward` and for tables: a table row is bit-identical to `forward`
# of its position, and a table streams at memory speed because one anchor serves STEPS rows.

STEPS = 64
TINY = np.float32(2.0**-14)
_TINY_BITS = np.int32(0x38800000)  # bit pattern of float32 2**-14


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


def _sinusoid_forward(positions, turns, steps, out):
    n_freq = turns.shape[1]
    bits = out.view(np.int32)
    for row in prange(out.shape[0]):
        sa = np.empty(n_freq)
        ca = np.empty(n_freq)
        p = np.int64(positions[row])
        m = p % STEPS
        _anchor(np.float64(p - m), turns, sa, ca)
        _product_row(sa, ca, steps[m, 0], steps[m, 1], out[row])
        _fix_tiny(np.float64(p), turns, out[row], bits[row])


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
