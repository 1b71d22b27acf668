"""The RoPE reference: exact rational arithmetic, standard library only.

The oracle the fast RoPE kernels are checked against, so it takes a different and obvious
route from theirs (split frequency words, polynomials, anchored products in doubles) and
from the sinusoid reference's (:mod:`fastpe._exact.sinusoid_decimal`, decimal Taylor series):

1. the angle ``theta = p * f`` is an exact rational (``f`` is the double's exact value);
2. pi comes from Machin's formula in binary fixed point (integers scaled by ``2**W``,
   :func:`fastpe._exact.constants.pi_fixed`), known to one unit; ``theta`` is reduced by
   the nearest multiple of pi/2, keeping track of the error, which grows with the multiple;
3. ``sin r`` and ``cos r`` each by its own Taylor series in the same fixed point, every
   truncation counted in the error bound ``E`` (units of ``2**-W``);
4. the wanted value -- ``af * cos theta``, or the rotated pair
   ``af * (x1 cos theta - x2 sin theta)`` and ``af * (x2 cos theta + x1 sin theta)`` -- is
   formed exactly (``fractions.Fraction``) from the fixed-point numbers, giving an interval
   ``[v - e, v + e]`` that contains the true value;
5. if both ends round to the same float32 (or float64), that is the correctly rounded
   result; otherwise everything is redone with twice the bits (Ziv's strategy).

The loop ends: for ``p * f != 0`` the cosine and sine are transcendental (Lindemann), so no
value is ever exactly a rounding midpoint, except the exact cases answered directly
(``theta = 0``; ``af = 0`` or ``x1 = x2 = 0``, which give 0).

Tiny angles (``|theta| <= 2**-20``) skip the fixed point, whose absolute error would leave
the sign of a sine that underflows undecided: their sine and cosine come from alternating
partial sums of the series, rational bounds whose relative width shrinks with every term
(:func:`tiny_cos_sin`).  An interval settles only when both ends round to the same number
*with the same sign*, so a zero's sign is decided by the true value as well.

Cost: ~50 us a (position, frequency); results are cached per ``(p, f, bits)``, so the heads
of one position share them.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

from .constants import pi_fixed
from .rounding import F32, round_fraction, round_ratio, settled, ziv

__all__ = ["cos_sin_f32", "cos_sin_f64", "cos_sin_rounded", "rotate_f32", "FIRST_BITS", "xpos_zeta",
           "xpos_scale_bounds", "xpos_table_f64", "xpos_rotate_f32", "XPOS_CLAMP"]

#: fixed-point bits of the first pass; each retry doubles them
FIRST_BITS = 96
#: a retry past this many bits would mean a bug, not bad luck (see the module docstring)
MAX_BITS = 1 << 14

#: extra bits for the reduction: the multiple of pi/2 stays below 2**43 (p < 2**32,
#: f <= 1024), and each unit of error in pi/2 is multiplied by it
_REDUCTION_GUARD = 48


# ----------------------------------------------------------------------- fixed point


def _series(r: int, w: int, odd: bool) -> tuple[int, int]:
    """``(sin r or cos r) * 2**w`` for ``|r| * 2**-w <= 0.8``, and the number of terms.

    Each term comes from the previous one, ``t * r**2 / ((n+1)(n+2))``, floored: an error
    below 2 units a term; the series alternates with falling terms, so stopping at a zero
    term leaves less than one unit.
    """
    one = 1 << w
    r2 = (r * r) >> w
    term = r if odd else one
    n = 1 if odd else 0
    total = term
    count = 1
    while term:
        term = -((term * r2) >> w) // ((n + 1) * (n + 2))
        total += term
        n += 2
        count += 1
    return total, count


@functools.lru_cache(maxsize=1 << 16)
def _cos_sin_fixed(p: int, f: float, bits: int) -> tuple[int, int, int, int]:
    """``(C, S, E, W)``: ``|cos(p f) - C / 2**W| <= E / 2**W`` and the same for ``S``.

    ``W = bits + _REDUCTION_GUARD``.  ``theta = p * f`` is exact; ``T = floor(theta 2**W)``
    (error < 1 unit), ``k`` the nearest multiple of ``H ~ (pi/2) 2**W`` (error < 1.01 units,
    so ``r = T - k H`` is off by less than ``2k + 2`` units), then the two series.
    """
    w = bits + _REDUCTION_GUARD
    theta = p * Fraction(f)
    if theta == 0:
        return 1 << w, 0, 0, w
    t = (theta.numerator << w) // theta.denominator
    return cos_sin_of_fixed_angle(t, 0, w)


def cos_sin_of_fixed_angle(t: int, err_t, w: int) -> tuple[int, int, int, int]:
    """``(C, S, E, W)`` for an angle ``t / 2**w`` radians (``t`` a floor, beyond that within
    ``err_t`` units of the truth): ``k`` the nearest multiple of ``H ~ (pi/2) 2**w`` (error
    < 1.01 units a multiple), so ``r = t - k H`` is off by less than ``err_t + 2|k| + 2``
    units; then the two series at ``r`` and the quadrant's signs.  Shared by the RoPE and
    the sinusoid-family references."""
    half_pi = pi_fixed(w + 8) >> 9  # (pi/2) 2**w, within 1 + 2**-8 units
    k = (2 * t + half_pi) // (2 * half_pi)
    r = t - k * half_pi
    err_r = err_t + 2 * abs(k) + 2
    s, n_s = _series(r, w, odd=True)
    c, n_c = _series(r, w, odd=False)
    # |d sin / dr|, |d cos / dr| <= 1, and the error of r shrinks along the series
    err = math.ceil(2 * err_r) + 3 * max(n_s, n_c) + 2
    quadrant = k & 3
    if quadrant == 0:
        return c, s, err, w
    if quadrant == 1:
        return -s, c, err, w
    if quadrant == 2:
        return -c, -s, err, w
    return s, -c, err, w


#: angles at most this large (in magnitude) take the series bounds of :func:`tiny_cos_sin`
TINY_ANGLE = Fraction(1, 1 << 20)


def tiny_cos_sin(lo: Fraction, hi: Fraction, terms: int) -> tuple[Fraction, Fraction, Fraction, Fraction]:
    """``(c_lo, c_hi, s_lo, s_hi)`` bounding ``cos`` and ``sin`` over the angles
    ``[lo, hi]``, all of one sign and at most :data:`TINY_ANGLE` in magnitude.

    For ``0 <= t < 1`` the series of ``sin t`` and ``cos t`` alternate with falling terms, so
    a partial sum ending on a subtracted term is a lower bound and one ending on an added
    term an upper bound; ``sin`` rises and ``cos`` falls with ``|t|``, which bounds them
    over the interval; a negative interval follows by symmetry.  ``terms`` partial-sum
    terms leave a relative width of about ``t**(2 terms)``.
    """
    negative = hi <= 0
    a, b = (-hi, -lo) if negative else (lo, hi)  # 0 <= a <= b

    def partial(t: Fraction, odd: bool, n_terms: int) -> Fraction:
        term = t if odd else Fraction(1)
        total, n = term, (1 if odd else 0)
        t2 = t * t
        for _ in range(n_terms - 1):
            term = -term * t2 / ((n + 1) * (n + 2))
            total += term
            n += 2
        return total

    even, odd = 2 * terms, 2 * terms + 1  # an even count ends on a subtracted term
    s_lo, s_hi = partial(a, True, even), partial(b, True, odd)
    c_lo, c_hi = partial(b, False, even), partial(a, False, odd)
    if negative:
        s_lo, s_hi = -s_hi, -s_lo
    return c_lo, min(c_hi, Fraction(1)), s_lo, s_hi


def cos_sin_bounds(p: int, f: float, bits: int) -> tuple[Fraction, Fraction, Fraction, Fraction]:
    """``(c_lo, c_hi, s_lo, s_hi)``: exact bounds of ``cos(p f)`` and ``sin(p f)``, tighter as
    ``bits`` grows (the fixed point of :func:`_cos_sin_fixed`, or the series bounds of a
    tiny angle)."""
    theta = p * Fraction(f)
    if theta != 0 and abs(theta) <= TINY_ANGLE:
        return tiny_cos_sin(theta, theta, max(1, bits // 32))
    c, s, e, w = _cos_sin_fixed(p, f, bits)
    unit = Fraction(1, 1 << w)
    return (c - e) * unit, (c + e) * unit, (s - e) * unit, (s + e) * unit


def scaled(k: Fraction, lo: Fraction, hi: Fraction) -> tuple[Fraction, Fraction]:
    """The interval ``k * [lo, hi]``."""
    return (k * lo, k * hi) if k >= 0 else (k * hi, k * lo)


# ----------------------------------------------------------------------- values


def _settle(values, rounder):
    """Ziv's loop (:func:`fastpe._exact.rounding.ziv`): ``values(bits)`` gives
    ``[(lo, hi), ...]`` as exact Fractions bounding each wanted value; return the rounded
    values once every interval rounds to one number."""

    def attempt(bits: int) -> tuple[float, ...] | None:
        out = []
        for lo, hi in values(bits):
            a, b = rounder(lo), rounder(hi)
            if not settled(a, b):
                return None
            out.append(a)
        return tuple(out)

    return ziv(attempt, FIRST_BITS, MAX_BITS, "reference RoPE")


def _f32(x: Fraction) -> float:
    return round_ratio(x.numerator, x.denominator, F32)


def _f64(x: Fraction) -> float:
    return float(x)  # int / int: correctly rounded in CPython


def _scaled_cos_sin(p: int, f: float, af: float):
    a = Fraction(af)

    def values(bits):
        c_lo, c_hi, s_lo, s_hi = cos_sin_bounds(p, f, bits)
        if a == 0:  # exactly zero, whatever the sign of the cosine or sine
            return ((Fraction(0), Fraction(0)),) * 2
        return (scaled(a, c_lo, c_hi), scaled(a, s_lo, s_hi))

    return values


def cos_sin_f32(p: int, f: float, af: float = 1.0) -> tuple[float, float]:
    """Correctly rounded float32 ``af * cos(p f)`` and ``af * sin(p f)`` (as Python floats)."""
    return _settle(_scaled_cos_sin(int(p), float(f), float(af)), _f32)


def cos_sin_f64(p: int, f: float, af: float = 1.0) -> tuple[float, float]:
    """Correctly rounded float64 ``af * cos(p f)`` and ``af * sin(p f)``."""
    return _settle(_scaled_cos_sin(int(p), float(f), float(af)), _f64)


def cos_sin_rounded(p: int, f: float, af: float, fmt) -> tuple[float, float]:
    """``af * cos(p f)`` and ``af * sin(p f)`` correctly rounded to ``fmt`` (a
    :class:`fastpe._exact.rounding.Format`: float16 and bfloat16 caches decide their ties by it)."""
    return _settle(_scaled_cos_sin(int(p), float(f), float(af)), lambda x: round_fraction(x, fmt))


def rotate_f32(x1: float, x2: float, p: int, f: float, af: float = 1.0) -> tuple[float, float]:
    """Correctly rounded float32 of ``af (x1 cos t - x2 sin t)`` and ``af (x2 cos t + x1 sin t)``,
    ``t = p f``, for finite ``x1, x2`` (the exact values of the given floats)."""
    a, u, v = Fraction(float(af)), Fraction(float(x1)), Fraction(float(x2))
    p, f = int(p), float(f)

    def values(bits):
        c_lo, c_hi, s_lo, s_hi = cos_sin_bounds(p, f, bits)
        uc, vs = scaled(u, c_lo, c_hi), scaled(v, s_lo, s_hi)
        vc, us = scaled(v, c_lo, c_hi), scaled(u, s_lo, s_hi)
        first = (uc[0] - vs[1], uc[1] - vs[0])
        second = (vc[0] + us[0], vc[1] + us[1])
        return (scaled(a, *first), scaled(a, *second))

    return _settle(values, _f32)


# ----------------------------------------------------------------------------- xPos
# xPos (Sun et al. 2022) multiplies the rotation of frequency i by zeta_i ** (n / scale_base)
# (queries) or its inverse (keys), n a centred position (fastpe.rope._xpos).  The power is
# computed here in decimal arithmetic with its own error bound; the cosine and sine are the
# bounds above; Ziv's loop settles the product.

#: the scale is clamped to [2**-XPOS_CLAMP, 2**XPOS_CLAMP] (see fastpe.rope._xpos: no float32
#: output of an attention factor of at least 2**-300 depends on values beyond it)
XPOS_CLAMP = 600
_CLAMP_HI = Fraction(1 << XPOS_CLAMP)
_CLAMP_LO = Fraction(1, 1 << XPOS_CLAMP)
#: |ln scale| beyond this is past the clamp whatever the rounding (600 ln 2 = 415.9)
_CLAMPED_LOG = 420


def xpos_zeta(rotary_dim: int) -> tuple[float, ...]:
    """xPos's ``zeta_i = (2i + 0.4 d) / (1.4 d)`` for ``d = rotary_dim``, ``i < d / 2``, each
    the correctly rounded double of that rational, ``(10 i + 2 d) / (7 d)``."""
    d = int(rotary_dim)
    return tuple(float(Fraction(10 * i + 2 * d, 7 * d)) for i in range(d // 2))


@functools.lru_cache(maxsize=1 << 14)
def xpos_scale_bounds(zeta: float, n: int, scale_base: float, bits: int) -> tuple[Fraction, Fraction]:
    """Exact bounds ``(lo, hi)`` of ``clamp(zeta ** (n / scale_base))`` (the double ``zeta``,
    the exact rational exponent; clamped to ``[2**-600, 2**600]``), tighter as ``bits`` grows.

    In :mod:`decimal` at ``P`` digits: ``L = ln zeta`` (correctly rounded), ``X = L * n /
    scale_base`` (two more roundings), ``v = exp(X)`` (correctly rounded).  Each rounding is
    within ``10**(1 - P)`` relative, so ``|X - X*| <= 3 |X| 10**(1 - P)`` and ``v`` is within
    ``(4 |X| + 2) 10**(1 - P)`` of the true power, relative (``|X| <= 420`` here, where that
    bound is far below 1)."""
    from decimal import Decimal, localcontext

    if n == 0:
        return Fraction(1), Fraction(1)
    exponent = Fraction(n) / Fraction(scale_base)
    # the log roughly, to decide whether the clamp settles it (exponents may be huge)
    rough = math.log(zeta) * (exponent.numerator / exponent.denominator if abs(exponent) < 1e300 else
                              math.copysign(1e300, exponent))
    if rough > _CLAMPED_LOG:
        return _CLAMP_HI, _CLAMP_HI
    if rough < -_CLAMPED_LOG:
        return _CLAMP_LO, _CLAMP_LO
    digits = int(bits * 0.30103) + 20
    with localcontext() as ctx:
        ctx.prec = digits
        x = Decimal(zeta).ln() * Decimal(exponent.numerator) / Decimal(exponent.denominator)
        v = Fraction(x.exp())
        width = (4 * abs(Fraction(x)) + 2) / Fraction(10) ** (digits - 1)
    lo, hi = v * (1 - width), v * (1 + width)
    return min(max(lo, _CLAMP_LO), _CLAMP_HI), min(max(hi, _CLAMP_LO), _CLAMP_HI)


def xpos_table_f64(p: int, f: float, af: float, zeta: float, scale_base: float,
                   center: int) -> tuple[float, float, float, float]:
    """The correctly rounded doubles ``af cos(p f) s``, ``af sin(p f) s`` (queries, ``s =
    clamp(zeta ** ((p - center) / scale_base))``) and the same with ``1 / s`` (keys: the
    power of ``-(p - center) / scale_base``)."""
    p, f, a = int(p), float(f), Fraction(float(af))
    n = p - int(center)

    def values(bits):
        c_lo, c_hi, s_lo, s_hi = cos_sin_bounds(p, f, bits)
        if a == 0:
            return ((Fraction(0), Fraction(0)),) * 4
        out = []
        for m in (n, -n):
            g_lo, g_hi = xpos_scale_bounds(float(zeta), m, float(scale_base), bits)
            for lo, hi in ((c_lo, c_hi), (s_lo, s_hi)):
                out.append(scaled(a, *_times_positive(lo, hi, g_lo, g_hi)))
        return out

    return _settle(values, _f64)


def _times_positive(lo: Fraction, hi: Fraction, g_lo: Fraction, g_hi: Fraction) -> tuple[Fraction, Fraction]:
    """The interval ``[lo, hi] * [g_lo, g_hi]`` for ``0 < g_lo <= g_hi``."""
    return (lo * (g_lo if lo >= 0 else g_hi), hi * (g_hi if hi >= 0 else g_lo))


def xpos_rotate_f32(x1: float, x2: float, p: int, f: float, af: float, zeta: float, scale_base: float,
                    center: int, down: bool = False) -> tuple[float, float]:
    """Correctly rounded float32 of ``af s (x1 cos t - x2 sin t)`` and ``af s (x2 cos t + x1
    sin t)``, ``t = p f``, ``s = clamp(zeta ** (+-(p - center) / scale_base))`` (``-`` for
    keys, ``down``), for finite ``x1, x2``."""
    a, u, v = Fraction(float(af)), Fraction(float(x1)), Fraction(float(x2))
    p, f = int(p), float(f)
    n = p - int(center)
    m = -n if down else n

    def values(bits):
        c_lo, c_hi, s_lo, s_hi = cos_sin_bounds(p, f, bits)
        g_lo, g_hi = xpos_scale_bounds(float(zeta), m, float(scale_base), bits)
        uc, vs = scaled(u, c_lo, c_hi), scaled(v, s_lo, s_hi)
        vc, us = scaled(v, c_lo, c_hi), scaled(u, s_lo, s_hi)
        first = _times_positive(uc[0] - vs[1], uc[1] - vs[0], g_lo, g_hi)
        second = _times_positive(vc[0] + us[0], vc[1] + us[1], g_lo, g_hi)
        return (scaled(a, *first), scaled(a, *second))

    return _settle(values, _f32)
