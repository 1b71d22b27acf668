"""The reference sinusoidal encoding: pure Python, standard library only, correctly rounded.

This is the oracle the fast backends are checked against, so it takes a deliberately
different and obvious route (the fast path splits ``w / (2*pi)`` into machine words built
from a power chain, see :mod:`fastpe._plans.words`):

1. each frequency on its own, ``w_i = exp(-(2i/d) * ln(base))`` in :mod:`decimal` (``ln``
   and ``exp`` are correctly rounded there, and ``Decimal(base)`` is the double's exact
   value);
2. ``theta = p * w_i`` reduced to ``r = theta - k*pi/2`` with ``|r| <= pi/4``, using the
   decimal pi of :func:`fastpe._exact.constants.decimal_pi`;
3. ``sin r`` by its Taylor series and ``cos r = sqrt(1 - sin r**2)``, both from one
   reduced angle; the quadrant ``k mod 4`` picks and signs them;
4. rounding to float32 decided exactly, in integers, Ziv style: the value is known to within
   ``eps`` (absolute, or relative for the sine of an unreduced ``theta < pi/4``, so that
   tiny angles from a huge base stay cheap); if both ends of ``[value - eps, value + eps]`` round to the same float32, that
   float is the correctly rounded result, otherwise everything is redone with twice the
   digits.  The loop ends: for ``p > 0`` the true values are transcendental
   (Lindemann-Weierstrass: ``p * w_i`` is a non-zero algebraic number, since ``base`` is
   rational), so they are never exactly a float32 or a midpoint between two.  ``p = 0``
   gives exactly 0 and 1 and is answered directly.

Why 40 digits first.  At ``p < 2**32`` the angle has 10 integer digits, so 40 digits leave
about 29 decimals after reduction (see :func:`_tools` for the error budget): at least 17
significant digits even for outputs as small as 1e-12 (``p * w`` within 1e-12 of a multiple
of pi/2 near the top of the range), where float32 needs about 9.  Cases the first pass
cannot decide are rarer than one in 10**10 and simply take the next pass (80 digits, ...).

Speed: ~20 us per (sine, cosine) pair, mostly the series and the square root.  Frequencies
are cached per ``(d_model, base)`` (a d_model of 65,536 takes ~1 s to set up).
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Iterable
from decimal import Decimal, localcontext

from .constants import decimal_pi
from .rounding import F32, round_ratio, ziv

__all__ = ["sinusoid", "round_to_float32"]

#: working digits of the first pass; each retry doubles them
FIRST_DIGITS = 40
#: a retry past this many digits would mean a bug, not bad luck (see the module docstring)
MAX_DIGITS = 2560

_FREQ_GUARD = 5  # extra digits for w_i and pi/2, which every angle reuses
_SCALE_GUARD = 5  # a value is read as an integer with this many digits to spare


# --------------------------------------------------------------------------- rounding


def round_to_float32(x: Decimal) -> float:
    """The float32 nearest to ``x`` exactly (ties to even), as a Python float.

    No double rounding: ``x`` is taken as the exact rational it is, never through a double.
    Keeps the sign of zero (``Decimal('-0')`` and negative values that round to zero give
    ``-0.0``), produces subnormals, and overflows to ``±inf`` past the largest float32 (the
    usual rule: at or beyond the midpoint between ``FLT_MAX`` and ``2**128``).  Infinities
    map to themselves and quiet NaN to NaN.
    """
    x = Decimal(x)
    if not x.is_finite():
        return float(x)
    if x.is_zero():
        return -0.0 if x.is_signed() else 0.0
    num, den = x.as_integer_ratio()
    return round_ratio(num, den, F32)


# --------------------------------------------------------------------------- constants


def _frequency(ln_base: Decimal, i: int, d_model: int) -> Decimal:
    """``w_i = exp(-(2i/d_model) * ln(base))`` in the current decimal context.

    Error: ``ln``, ``*`` and ``/`` each round once (relative ``u``, the unit roundoff), and
    ``|2i/d_model * ln(base)| < 710`` for any finite double base, so the exponent is off by
    less than ``2200 u``; ``exp`` rounds once more.  Hence ``w_i`` is within a relative
    ``2300 u`` of the truth; at ``digits + 5`` digits that is below ``2e-(digits+1)``.
    """
    return (ln_base * (-2 * i) / d_model).exp()


@functools.lru_cache(maxsize=64)
def _frequencies(d_model: int, base: float, digits: int) -> tuple[Decimal, ...]:
    """Every ``w_i`` of one table, to ``digits + 5`` digits (see :func:`_frequency`)."""
    with localcontext() as ctx:
        ctx.prec = digits + _FREQ_GUARD
        ln_base = Decimal(base).ln()  # exact input: Decimal(float) is the double's value
        return tuple(_frequency(ln_base, i, d_model) for i in range((d_model + 1) // 2))


@functools.cache
def _tools(digits: int) -> tuple[Decimal, Decimal, tuple[Decimal, ...]]:
    """``(half_pi, sin_top, sin_rest)`` for a pass at ``digits`` working digits: pi/2 and the
    sine's Taylor coefficients for Horner's rule, highest degree first.

    Error budget on the final value for ``theta = p * w_i < 2**32`` (``u = 5e-digits`` is
    the unit roundoff), absolute:

    * ``w_i`` (relative ``2e-(digits+1)``, see :func:`_frequency`): ``< 1e(9-digits)``;
    * rounding ``p * w_i`` and ``k * pi/2`` (each ``<= theta * u``), pi/2 itself (relative
      ``1e-(digits+4)``) and the subtraction: ``< 5e(10-digits)``;
    * the sine's Taylor series at ``|r| <= pi/4 + tiny``: truncation below ``1e(10-digits)``
      (the series alternates with decreasing terms, so the first omitted term bounds it),
      coefficient and Horner rounding below ``10u``;
    * the cosine, ``sqrt(1 - sin**2)``: as ``cos r >= 0.7`` there, an error in ``sin r``
      passes on at most ``tan r <= 1`` times, and the three roundings add ``< 3u``.

    Total below ``7e(10-digits)``: :func:`_settle` uses ``1e(11-digits)``.

    Relative, for the sine when ``k = 0`` (``theta < pi/4``: no reduction, ``r = theta``):
    every error above scales with ``theta``, hence with ``sin theta >= 0.89 theta`` --
    ``w_i`` and ``p * w_i`` add ``1.2 (2e-(digits+1) + u)``, Horner ``10u``, and the
    truncation ``r**(n-1) / n! < 1.25 tol``, all relative.  Total below ``2e(10-digits)``
    relative: :func:`_settle` uses ``1e(11-digits)`` of the value.  This keeps values far
    below the absolute bound (tiny ``w_i`` of a huge base, e.g. ``sin(1e-300)``) decidable
    in one pass.
    """
    with localcontext() as ctx:
        ctx.prec = digits + _FREQ_GUARD
        half_pi = decimal_pi(digits + _FREQ_GUARD + 2) / 2
        ctx.prec = digits
        tol = Decimal(10) ** (10 - digits)
        bound = Decimal("0.8")  # > pi/4 plus the reduction's slack
        # (-1)**k / (2k+1)! until the next term, bound**n / n!, is below tol
        coeffs = []
        n, fact = 1, 1
        while True:
            coeffs.append(Decimal((-1) ** len(coeffs)) / fact)
            n += 2
            fact *= (n - 1) * n
            if bound**n / fact < tol:
                break
    coeffs.reverse()  # highest degree first, for Horner
    return half_pi, coeffs[0], tuple(coeffs[1:])


_POW10 = tuple(10**n for n in range(200))  # covers the first two passes


def _pow10(n: int) -> int:
    return _POW10[n] if n < 200 else 10**n


# --------------------------------------------------------------------------- one pass


def _sin_cos(
    theta: Decimal, half_pi: Decimal, sin_top: Decimal, sin_rest: tuple[Decimal, ...]
) -> tuple[Decimal, Decimal, bool]:
    """``(sin theta, cos theta, unreduced)`` at the current context precision, ``theta >= 0``.

    One reduction serves both.  Only the sine of the reduced angle takes a series; its
    cosine follows from ``cos r = sqrt(1 - sin r**2)`` (``cos r > 0.7`` for ``|r| <= pi/4``,
    so no cancellation), which halves the work.  Tiny outputs -- ``theta`` close to a
    multiple of pi/2 -- are always ``±sin r`` with ``r`` tiny, so keep full relative accuracy.
    ``unreduced`` (``theta < pi/4``) tells :func:`_settle` the sine's error is relative.
    """
    k = (theta / half_pi).to_integral_value()  # nearest quarter turn, ties to even
    r = theta - k * half_pi
    r2 = r * r
    s = sin_top
    for coeff in sin_rest:
        s = s * r2 + coeff
    s *= r
    c = (1 - s * s).sqrt()
    quadrant = int(k) & 3
    if quadrant == 0:
        return s, c, not k
    if quadrant == 1:
        return c, -s, False
    if quadrant == 2:
        return -s, -c, False
    return -c, s, False


def _settle(value: Decimal, digits: int, relative: bool) -> float | None:
    """The correctly rounded float32 of the true value, or ``None`` if not yet decidable.

    ``value`` (at most ``digits`` significant digits) is within ``eps = 1e(11-digits)`` of the
    true value, or within ``eps * |value|`` if ``relative`` (see :func:`_tools`).  Rounding is
    monotonic, so when both ends of that interval round to the same float32 (and share a
    sign), so does every point inside it, the true value included.  The common case is
    checked with one division: no rounding midpoint in the interval, which stays inside the
    binade.
    """
    # exactly value = x / unit: the coefficient has at most `digits` digits
    adjusted = value.adjusted()  # floor(log10 |value|)
    shift = digits + _SCALE_GUARD - adjusted
    x = int(value.scaleb(shift))
    unit = _pow10(shift)
    a = -x if x < 0 else x
    if relative:
        eps_units = a // _pow10(digits - 11) + 1
    else:
        eps_units = _pow10(shift + 11 - digits)
    if a <= eps_units:
        return None  # the sign is not known yet
    e = a.bit_length() - unit.bit_length()  # floor(log2 |value|), or one more
    if (a < unit << e) if e >= 0 else (a << -e < unit):
        e -= 1
    q = max(e, F32.emin) - (F32.mant_bits - 1)  # log2 of the float32 quantum
    if q < 0:  # always, for |value| <= 1
        m, rem = divmod(a << -q, unit)  # |value| / quantum = m + rem / unit
        err = eps_units << -q  # the error in the same units as rem
        off = (rem << 1) - unit  # 2 * (distance past the midpoint m + 1/2)
        # no midpoint within err, and no dip below m * quantum (into a finer binade)
        if rem > err and (off if off > 0 else -off) > err << 1:
            f = math.ldexp(m + 1 if off > 0 else m, q)
            return -f if x < 0 else f
    # near a midpoint or a binade edge: round both ends of the interval exactly
    f = round_ratio(x - eps_units, unit, F32)
    if f == round_ratio(x + eps_units, unit, F32):
        return f
    return None


def _retry(p: int, i: int, d_model: int, base: float, want_cos: bool) -> float:
    """One value (sine, or cosine if ``want_cos``) the first pass could not decide: Ziv's
    loop (:func:`fastpe._exact.rounding.ziv`) from twice the first pass's digits."""

    def attempt(digits: int) -> float | None:
        half_pi, sin_top, sin_rest = _tools(digits)
        with localcontext() as ctx:
            ctx.prec = digits + _FREQ_GUARD
            w = _frequency(Decimal(base).ln(), i, d_model)
            ctx.prec = digits
            s, c, unreduced = _sin_cos(p * w, half_pi, sin_top, sin_rest)
            if want_cos:
                return _settle(c, digits, relative=False)
            return _settle(s, digits, relative=unreduced)

    # unreachable failure for p > 0, see the module docstring
    what = f"reference: sinusoid(p={p}, i={i}, d_model={d_model}, base={base!r})"
    return ziv(attempt, 2 * FIRST_DIGITS, MAX_DIGITS, what, "digits")


def sinusoid(positions: Iterable[int], d_model: int, base: float) -> list[list[float]]:
    """Correctly rounded sinusoidal encoding, one row of ``d_model`` floats per position.

    Column ``2i`` is ``sin(p * w_i)``, column ``2i + 1`` is ``cos(p * w_i)``, with
    ``w_i = base ** (-2i / d_model)``; an odd ``d_model`` ends with a lone sine.  Every
    entry is a Python float equal to the float32 nearest (ties to even) to the true real
    value.  ``positions`` are integers in ``(-2**32, 2**32)``; arguments are assumed
    validated.  A negative position's row is its magnitude's with every sine negated: sine is
    odd and cosine even, and rounding to nearest is symmetric, so that is the correctly
    rounded row of the negative position itself.
    """
    d_model = operator.index(d_model)
    base = float(base)
    digits = FIRST_DIGITS
    freqs = _frequencies(d_model, base, digits)
    half_pi, sin_top, sin_rest = _tools(digits)
    n_pairs = d_model // 2
    zero_row = [0.0, 1.0] * n_pairs + [0.0] * (d_model & 1)  # p = 0: sin 0 and cos 0
    rows = []
    with localcontext() as ctx:
        ctx.prec = digits
        for p in positions:
            p = operator.index(p)
            if p == 0:
                rows.append(list(zero_row))
                continue
            negative = p < 0
            p = -p if negative else p
            row = []
            for i, w in enumerate(freqs):
                s, c, unreduced = _sin_cos(p * w, half_pi, sin_top, sin_rest)
                fs = _settle(s, digits, unreduced)
                if fs is None:
                    fs = _retry(p, i, d_model, base, want_cos=False)
                row.append(fs)
                if i < n_pairs:
                    fc = _settle(c, digits, False)
                    if fc is None:
                        fc = _retry(p, i, d_model, base, want_cos=True)
                    row.append(fc)
            if negative:
                row[0::2] = [-v for v in row[0::2]]  # the sines: columns 2i (and a lone last one)
            rows.append(row)
    return rows
