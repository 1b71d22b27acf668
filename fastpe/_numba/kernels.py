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


@inline
def _sinusoid_row(p, turns, o):
    """One output row: pairs (sin, cos) for every frequency, a lone sine for odd d_model."""
    d_model = o.shape[0]
    n_pairs = d_model // 2
    v1 = turns[0]
    v2 = turns[1]
    v3 = turns[2]
    v4 = turns[3]
    for i in range(n_pairs):
        s, c = sincos_turns(p, v1[i], v2[i], v3[i], v4[i])
        o[2 * i] = np.float32(s)
        o[2 * i + 1] = np.float32(c)
    if d_model & 1:
        s, c = sincos_turns(p, v1[n_pairs], v2[n_pairs], v3[n_pairs], v4[n_pairs])
        o[d_model - 1] = np.float32(s)


def _sinusoid_forward(positions, turns, out):
    for row in prange(out.shape[0]):
        _sinusoid_row(np.float64(positions[row]), turns, out[row])


def _sinusoid_range(start, turns, out):
    for row in prange(out.shape[0]):
        _sinusoid_row(np.float64(start + row), turns, out[row])


sinusoid_forward_parallel, sinusoid_forward_serial = kernel(_sinusoid_forward)
sinusoid_range_parallel, sinusoid_range_serial = kernel(_sinusoid_range)
