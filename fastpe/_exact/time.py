"""The reference of :mod:`fastpe.time`'s Fourier features and time encodings: exact
rationals, standard library only.

A route apart from the kernels' (residue tables, split words, polynomials):

* a Fourier value is ``sin`` or ``cos`` of ``2 pi q`` for the exact rational turn
  ``q = frac(k t N / D)`` (:class:`fractions.Fraction`); a multiple of a quarter turn is
  answered exactly (0 or ±1: the one place where a zero's sign would be undecidable);
  otherwise the angle ``2 pi q`` is formed in binary fixed point from Machin's pi
  (:func:`fastpe._exact.constants.pi_fixed`) and the series of :mod:`fastpe._exact.rope`
  bound the values, with tiny angles bounded by the series' alternating partial sums;
* a time-encoding value is ``cos(theta)`` of the exact rational angle
  ``theta = t * scale * w`` (every factor exact: the ticks, the tick's length, the double
  ``w``), reduced by pi/2 in fixed point with as many guard bits as ``theta`` has integer bits.

Ziv's loop (:func:`fastpe._exact.rounding.ziv`) widens each evaluation until both ends of its
bound round alike.  It ends: for a rational ``q`` not a multiple of 1/4, ``sin(2 pi q)`` and
``cos(2 pi q)`` are algebraic numbers that are irrational or ±1/2 (Niven), never a dyadic
rounding midpoint; ``cos`` of a non-zero rational is transcendental (Lindemann).
"""

from __future__ import annotations

import functools
from fractions import Fraction

from . import rounding
from .constants import pi_fixed
from .rope import FIRST_BITS, MAX_BITS, TINY_ANGLE, cos_sin_of_fixed_angle, tiny_cos_sin

__all__ = ["sin_cos_turn", "cos_angle", "fourier_rows", "time_cos_rows"]

_EXACT_QUARTERS = {0: (0.0, 1.0), 1: (1.0, 0.0), -1: (-1.0, 0.0), 2: (0.0, -1.0), -2: (0.0, -1.0)}


def _centre(q: Fraction) -> Fraction:
    return q - ((2 * q.numerator + q.denominator) // (2 * q.denominator))  # q - floor(q + 1/2)


@functools.lru_cache(maxsize=1 << 16)
def sin_cos_turn(q: Fraction, fmt: rounding.Format) -> tuple[float, float]:
    """Correctly rounded ``sin(2 pi q)`` and ``cos(2 pi q)`` in ``fmt`` for a rational ``q``."""
    q = _centre(Fraction(q))
    quarters = 4 * q
    if quarters.denominator == 1:
        return _EXACT_QUARTERS[int(quarters)]

    def attempt(bits: int):
        w = bits + 16
        pf = pi_fixed(w + 8)  # pi 2**(w + 8), within one unit
        if abs(q) <= Fraction(1, 1 << 24):  # |2 pi q| < 2**-21.3: the tiny-angle bounds
            lo = 2 * q * Fraction(pf - 1, 1 << (w + 8))
            hi = 2 * q * Fraction(pf + 1, 1 << (w + 8))
            lo, hi = min(lo, hi), max(lo, hi)
            assert abs(hi) <= TINY_ANGLE and abs(lo) <= TINY_ANGLE
            c_lo, c_hi, s_lo, s_hi = tiny_cos_sin(lo, hi, max(1, bits // 32))
        else:
            # 2 pi q 2**w: the floor of q * 2 pf / 2**8, within 2|q|/2**8 + 1 < 2 units
            t = (q.numerator * 2 * pf) // (q.denominator << 8)
            c, s, e, w = cos_sin_of_fixed_angle(t, 2, w)
            unit = Fraction(1, 1 << w)
            c_lo, c_hi, s_lo, s_hi = (c - e) * unit, (c + e) * unit, (s - e) * unit, (s + e) * unit
        rs = rounding.round_interval(s_lo, s_hi, fmt)
        rc = rounding.round_interval(c_lo, c_hi, fmt)
        return None if rs is None or rc is None else (rs, rc)

    return rounding.ziv(attempt, FIRST_BITS, MAX_BITS, "reference Fourier feature")


@functools.lru_cache(maxsize=1 << 16)
def cos_angle(theta: Fraction, fmt: rounding.Format) -> float:
    """Correctly rounded ``cos(theta)`` in ``fmt`` for a rational ``theta`` (radians)."""
    theta = Fraction(theta)
    if theta == 0:
        return 1.0
    if abs(theta) <= TINY_ANGLE:

        def tiny(bits: int):
            c_lo, c_hi, _, _ = tiny_cos_sin(theta, theta, max(1, bits // 32))
            return rounding.round_interval(c_lo, c_hi, fmt)

        return rounding.ziv(tiny, FIRST_BITS, MAX_BITS, "reference time encoding (tiny angle)")
    whole = (abs(theta.numerator) // theta.denominator).bit_length()

    def attempt(bits: int):
        w = bits + whole + 16
        t = (theta.numerator << w) // theta.denominator
        c, _, e, w = cos_sin_of_fixed_angle(t, 0, w)
        unit = Fraction(1, 1 << w)
        return rounding.round_interval((c - e) * unit, (c + e) * unit, fmt)

    return rounding.ziv(attempt, FIRST_BITS, MAX_BITS, "reference time encoding")


def fourier_rows(ticks, numerator: int, denominator: int, order: int, fmt: rounding.Format) -> list[list[float]]:
    """Rows ``[sin(2 pi q_1), cos(2 pi q_1), ..., cos(2 pi q_order)]``,
    ``q_k = k t numerator / denominator``, one per tick, correctly rounded to ``fmt``."""
    out = []
    for t in ticks:
        row = []
        for k in range(1, order + 1):
            q = Fraction(k * int(t) * numerator % denominator, denominator)
            row.extend(sin_cos_turn(q, fmt))
        out.append(row)
    return out


def time_cos_rows(ticks, frequencies, scale: Fraction, fmt: rounding.Format) -> list[list[float]]:
    """Rows ``[cos(t scale w_j) for j]``, one per tick, correctly rounded to ``fmt``."""
    ws = [Fraction(w) * scale for w in frequencies]
    return [[cos_angle(int(t) * w, fmt) for w in ws] for t in ticks]
