"""Numba kernels of :mod:`fastpe.time`: Fourier features and time encodings of int64 ticks.

The two routes of :mod:`fastpe._plans.time` (its docstring proves the bounds): exact
residues ``m_k = k t N mod D`` turned into a double-double fraction, and split words of
``frac(2**32 v)`` and ``frac(v)`` against the high and low halves of ``t``.  Both end in the
exact path's ``_sincos_of_turn``.  ``csrc/fastpe_time.h`` is the C twin, operation for
operation (same bits).  A zero is stored as ``+0.0`` (``v + 0.0``), as the reference has it.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ._jit import inline, kernel
from .kernels import _add_turns, _centred, _sincos_of_turn

__all__ = ["fourier_exact_parallel", "fourier_exact_serial", "time_cos_parallel", "time_cos_serial",
           "time_pairs_parallel", "time_pairs_serial", "COST"]

#: work units of one value against a table value (one complex product), for the serial gate
COST = 8

_SPLIT = 134217729.0  # 2**27 + 1
_LOW32 = np.int64(0xFFFFFFFF)


@inline
def _two_prod(a, b):
    """``(p, e)``: ``p = a * b`` rounded and ``e`` its exact error (Dekker, no FMA)."""
    p = a * b
    ca = _SPLIT * a
    ah = ca - (ca - a)
    al = a - ah
    cb = _SPLIT * b
    bh = cb - (cb - b)
    bl = b - bh
    e = (((ah * bh - p) + ah * bl) + al * bh) + al * bl
    return p, e


@inline
def _residue_turn(m, d, dh, dl):
    """``m / d`` (``0 <= m < d < 2**62``), centred to ``[-1/2, 1/2]``, as ``qh + ql``."""
    mm = m - d if 2 * m > d else m
    mh = np.float64(mm)
    ml = np.float64(mm - np.int64(mh))
    qh = mh / dh
    p, pe = _two_prod(qh, dh)
    r = (((mh - p) - pe) + ml) - qh * dl
    return qh, r / dh


def _fourier_exact(ticks, d, table, dh, dl, out):
    order = out.shape[1] // 2
    for i in prange(ticks.shape[0]):
        x = ticks[i] % d
        m1 = np.int64(0)
        for j in range(16):
            m1 += table[j, (x >> (4 * j)) & 15]
            if m1 >= d:
                m1 -= d
        m = np.int64(0)
        o = out[i]
        for k in range(order):
            m += m1
            if m >= d:
                m -= d
            qh, ql = _residue_turn(m, d, dh, dl)
            s, c = _sincos_of_turn(qh, ql)
            o[2 * k] = s + 0.0
            o[2 * k + 1] = c + 0.0


@inline
def _word_turn(th, tl, w, j):
    """``frac(th A_j + tl B_j)`` as a centred double and its small correction."""
    s, e = _add_turns(_centred(th * w[0, j]), _centred(tl * w[4, j]), 0.0)
    s, e = _add_turns(s, _centred(th * w[1, j]), e)
    s, e = _add_turns(s, _centred(tl * w[5, j]), e)
    s, e = _add_turns(s, _centred(th * w[2, j]), e)
    s, e = _add_turns(s, _centred(tl * w[6, j]), e)
    return s, e + (th * w[3, j] + tl * w[7, j])


@inline
def _low_turn(tl, w, j):
    """:func:`_word_turn` of a ``t`` below ``2**32`` (``th = 0``): the products with ``A``
    are exact zeros, and a two-sum adding a zero changes neither the sum nor its error, so
    this is the same double-double from half the products."""
    s, e = _add_turns(_centred(tl * w[4, j]), _centred(tl * w[5, j]), 0.0)
    s, e = _add_turns(s, _centred(tl * w[6, j]), e)
    return s, e + tl * w[7, j]


def _time_cos(ticks, words, out):
    """Cosines only (``out`` ``(n, n_freq)``); a kernel of its own, not a flag in the loop,
    so that LLVM vectorises the loop over the frequencies."""
    n_freq = words.shape[1]
    for i in prange(ticks.shape[0]):
        t = ticks[i]
        th = np.float64(t >> 32)
        tl = np.float64(t & _LOW32)
        o = out[i]
        if (t >> 32) == 0:
            for j in range(n_freq):
                s, e = _low_turn(tl, words, j)
                _, cv = _sincos_of_turn(s, e)
                o[j] = cv + 0.0
        else:
            for j in range(n_freq):
                s, e = _word_turn(th, tl, words, j)
                _, cv = _sincos_of_turn(s, e)
                o[j] = cv + 0.0


def _time_pairs(ticks, words, out):
    """Sine-cosine pairs (``out`` ``(n, 2 n_freq)``): the Fourier features' word route."""
    n_freq = words.shape[1]
    for i in prange(ticks.shape[0]):
        t = ticks[i]
        th = np.float64(t >> 32)
        tl = np.float64(t & _LOW32)
        o = out[i]
        if (t >> 32) == 0:
            for j in range(n_freq):
                s, e = _low_turn(tl, words, j)
                sv, cv = _sincos_of_turn(s, e)
                o[2 * j] = sv + 0.0
                o[2 * j + 1] = cv + 0.0
        else:
            for j in range(n_freq):
                s, e = _word_turn(th, tl, words, j)
                sv, cv = _sincos_of_turn(s, e)
                o[2 * j] = sv + 0.0
                o[2 * j + 1] = cv + 0.0


fourier_exact_parallel, fourier_exact_serial = kernel(_fourier_exact)
time_cos_parallel, time_cos_serial = kernel(_time_cos)
time_pairs_parallel, time_pairs_serial = kernel(_time_pairs)
