"""Plans of the time kernels: per-column constants cut from exact rationals.

Every value of :mod:`fastpe.time`'s Fourier and time-encoding kernels is
``sin``/``cos`` of ``2 pi t v`` for an int64 tick count ``t`` and a frequency ``v`` in
turns per tick; only ``frac(t v)`` matters, and it must be known to far better than a
double holds it (``t`` has 63 bits).  Two routes, both exact where it matters:

**Exact residues** (Fourier features whose period is a rational ``D / N`` ticks with
``D < 2**62``).  The phase of harmonic ``k`` is ``m_k / D`` with the integer
``m_k = k t N mod D``.  ``m_1`` comes from ``x = t mod D`` (``0 <= x < 2**62``) as a sum of
16 table entries ``T[j, d] = d 16**j N mod D`` (the hex digits ``d`` of ``x``), each added
modulo ``D`` (every partial sum stays below ``2**63``); then ``m_k = m_(k-1) + m_1 mod D``.
The fraction ``m / D`` (centred: ``m - D`` when ``2m > D``) becomes a double-double
``qh + ql``: ``qh = mh / dh`` from the doubles ``mh, dh`` nearest ``m, D`` (``ml, dl`` the
exact integer remainders, ``|ml|, |dl| <= 2**9``), ``ql = r / dh`` with
``r = (mh - p) - pe + ml - qh dl`` where ``p + pe = qh dh`` exactly (Dekker's product).
``mh - p`` is exact (Sterbenz), the other terms are below ``2**10`` and are rounded once,
so ``r`` is within ``2**-42`` of ``m - qh D`` and the turn within ``2**-95`` of
``m / D`` (exact when ``D < 2**53``).  A phase that is exactly a multiple of a quarter
turn comes out exact (``qh`` = 0, ±1/4 or ±1/2, ``ql = 0``): the zeros of daily
seasonality at hourly timestamps are zeros, not ``1e-17``.

**Split words** (any other frequency: periods whose denominator is ``2**62`` or more, and
every time-encoding frequency ``w s / (2 pi)``).  ``t = th 2**32 + tl`` with
``th = t >> 32`` in ``[-2**31, 2**31)`` and ``tl`` in ``[0, 2**32)``, so
``frac(t v) = frac(th A + tl B)`` with ``A = frac(2**32 v)`` and ``B = frac(v)``.  Each is
cut, below its own leading bit, into three 21-bit words and a 53-bit tail (its top 116
significant bits: a relative truncation below ``2**-115``, so a tiny ``v`` -- a period of
``1e30`` days in nanoseconds -- keeps its sines' relative accuracy); every product of a
word with ``th`` (31 bits) or ``tl`` (32 bits) is exact in a double, so are their centred
fractions, summed by error-free two-sums; only the two tail products round.  The turn is
then within ``2**31 2**-115 + 2**32 2**-115 + 2**-84 < 2**-81`` of ``frac(t v)`` (and
within ``2**-50`` of it relatively when ``t v`` is tiny).

Either way ``_sincos_of_turn`` (the exact path's polynomials, :mod:`fastpe._plans.poly`)
turns the double-double into ``sin, cos`` with ~2**-52 relative accuracy (the turn's
error of at most ``2**-81`` adds ``2**-78`` radians): a float32 within 1 ULP of the
correctly rounded value, a float64 within ``2**-45`` absolute (the contract of
:class:`fastpe._backends.registry.Operation`).  The one value the word route cannot give
exactly is a cosine of a phase exactly a quarter turn, which needs ``D`` to divide
``4 k t`` with ``D >= 2**62``: ``|t| >= 2**60 / k``; it comes out below ``2**-79``.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from .._exact.constants import pi_fixed

__all__ = ["EXACT_BELOW", "MAX_ORDER", "MAX_TIME_FREQS", "fourier_plan", "words_of_fractions",
           "time_cos_words"]

#: the exact-residue route takes denominators below this
EXACT_BELOW = 1 << 62
#: Fourier orders accepted (columns 2 * order)
MAX_ORDER = 1 << 14
#: time-encoding dimensions accepted
MAX_TIME_FREQS = 1 << 16

_W = 116  # bits of each fraction the words keep
_M21 = (1 << 21) - 1
_M53 = (1 << 53) - 1


def _words(f: int, bits: int) -> tuple[float, float, float, float]:
    """The words of the fraction ``f / 2**bits`` (``0 <= f < 2**bits``) truncated to its top
    116 significant bits: three 21-bit doubles on descending bit ranges of the fraction's own
    exponent, and the remaining 53 bits as a fourth (``split_turns``' cut; relative, so a tiny
    frequency keeps its 116 bits)."""
    if f == 0:
        return (0.0, 0.0, 0.0, 0.0)
    shift = f.bit_length() - _W  # f = b 2**shift, 2**115 <= b < 2**116
    b = f >> shift if shift >= 0 else f << -shift
    e = shift - bits
    return (
        math.ldexp(float(b >> 95), e + 95),
        math.ldexp(float((b >> 74) & _M21), e + 74),
        math.ldexp(float((b >> 53) & _M21), e + 53),
        math.ldexp(float(b & _M53), e),
    )


def _bits_for(num: int, den: int) -> int:
    """Fixed-point bits that give ``num / den`` (< 1) at least 116 significant bits, and 160
    at the least."""
    return max(160, _W + 8 + max(0, den.bit_length() - num.bit_length()))


def words_of_fractions(pairs) -> np.ndarray:
    """``(8, n)`` words: rows 0-3 of ``A = frac(2**32 v)``, rows 4-7 of ``B = frac(v)`` for
    each ``v`` given as ``(a, b, bits)``: the fixed-point fractions ``a / 2**bits`` of ``A``
    and ``b / 2**bits`` of ``B`` (each to 116 significant bits at least)."""
    pairs = list(pairs)
    out = np.empty((8, len(pairs)), dtype=np.float64)
    for j, (a, b, bits) in enumerate(pairs):
        out[:4, j] = _words(a, bits)
        out[4:, j] = _words(b, bits)
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=64)
def fourier_plan(numerator: int, denominator: int, order: int):
    """The plan of harmonics ``k = 1 .. order`` of ``v = numerator / denominator`` turns per
    tick: ``("exact", D, table, dh, dl)`` (the residue route; ``table`` int64 ``(16, 16)``)
    or ``("words", words)`` (``(8, order)``, :func:`words_of_fractions`).  Read-only."""
    n, d = int(numerator), int(denominator)
    g = math.gcd(n, d)
    n, d = (n // g) % (d // g), d // g
    if d < EXACT_BELOW:
        table = np.empty((16, 16), dtype=np.int64)
        for j in range(16):
            for digit in range(16):
                table[j, digit] = digit * (16**j) * n % d
        table.setflags(write=False)
        dh = float(d)
        dl = float(d - int(dh))
        return ("exact", d, table, dh, dl)
    pairs = []
    for k in range(1, order + 1):
        r = k * n % d
        a = (r << 32) % d
        bits = max(_bits_for(r, d), _bits_for(a, d)) if r else 160
        pairs.append(((a << bits) // d, (r << bits) // d, bits))
    return ("words", words_of_fractions(pairs))


@functools.lru_cache(maxsize=64)
def time_cos_words(frequencies: tuple[float, ...], scale: Fraction) -> np.ndarray:
    """``(8, n)`` words of ``v_j = w_j * scale / (2 pi)`` turns per tick (``w_j`` the exact
    doubles, ``scale`` the tick's exact length in the time unit).  ``v_j 2**bits`` is formed
    from Machin's pi (:func:`fastpe._exact.constants.pi_fixed`, within a unit of ``2**-P``)
    with ``P`` 64 bits beyond what ``v``'s integer part and the bits kept need (192, more for a
    tiny ``v``: 116 significant), so each fraction is off by a few units of its last bit."""
    pairs = []
    for w in frequencies:
        v = Fraction(abs(w)) * scale
        if w < 0:
            v = -v
        if v == 0:
            pairs.append((0, 0, 192))
            continue
        # 192 bits, and as many more as a tiny v / (2 pi) needs for 116 significant ones
        bits = max(192, _W + 40 + abs(v.denominator.bit_length() - abs(v.numerator).bit_length()))
        whole = max(1, (v.numerator // v.denominator).bit_length())
        p = bits + whole + 64
        pi2 = 2 * pi_fixed(p)  # 2 pi 2**p, within 2 units
        big = (v.numerator << (bits + p)) // (v.denominator * pi2)  # v / (2 pi) * 2**bits
        frac = big & ((1 << bits) - 1)
        a = (frac << 32) & ((1 << bits) - 1)
        pairs.append((a, frac, bits))
    return words_of_fractions(pairs)
