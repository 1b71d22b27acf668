"""The reference for the sinusoid families: exact, standard library only, any output format.

The oracle behind layouts, denominators, timescales, grids and timesteps (the frequency
sets of :mod:`fastpe._plans.frequencies`), in every output dtype.  Its route differs from the kernels'
(split words from a power chain, polynomials, anchored products):

1. each frequency on its own, ``w_k = exp(first - k * step)`` in :mod:`decimal`, read as a
   binary fixed-point integer ``F`` with ``|w_k 2**W - F| <= 1``;
2. the angle ``theta = x * w_k`` for the *exact* rational ``x`` (an integer position, or a
   double timestep), ``T = floor(x F)``, off by at most ``|x| + 1`` units;
3. reduction by the nearest multiple of pi/2 and the two Taylor series in fixed point, as in
   :mod:`fastpe._exact.rope` (whose pi and series it reuses), every error counted;
4. Ziv's loop: when both ends of ``[v - e, v + e]`` round to the same number of the target
   format, that is the correctly rounded value; otherwise twice the bits.

The loop ends because ``sin`` and ``cos`` of a non-zero algebraic number are transcendental
(Lindemann), and every ``x * w_k`` here is algebraic (all parameters are doubles, ``n``
rational); ``x = 0`` is answered directly.

Tiny angles (``|x w_k| <= 2**-20``: a tiny timestep, or frequencies of ``1e-600`` that a huge
``max_period`` gives) leave the fixed point, whose absolute error cannot settle a sine that
underflows: ``w_k`` is bracketed in relative terms instead, and the series' alternating
partial sums bound the sine and cosine (:func:`fastpe._exact.rope.tiny_cos_sin`).
Below half the format's smallest subnormal the answer is a zero of ``x``'s sign and 1.
"""

from __future__ import annotations

import functools
import math
from decimal import MAX_EMAX, MIN_EMIN, Decimal, localcontext
from fractions import Fraction

from . import rounding
from .._plans.frequencies import Geometric, log_terms
from .._plans.layouts import columns
from .rope import FIRST_BITS, MAX_BITS, TINY_ANGLE, cos_sin_of_fixed_angle, tiny_cos_sin

__all__ = ["sin_cos", "rows"]

#: headroom for the reduction: multiples of pi/2 stay below 2**43 (|x| < 2**32, w <= 1024)
_GUARD = 48


@functools.lru_cache(maxsize=1 << 14)
def _frequency_fixed(freqs: Geometric, k: int, w: int) -> int:
    """``F`` with ``|w_k * 2**w - F| <= 1``: ``w_k`` by its own exponential, to
    ``w * log10(2) + 15`` digits (``w_k <= 1024``, so that is ample)."""
    digits = int(w * 0.30103) + 15
    with localcontext() as ctx:
        ctx.prec = digits
        first, step = log_terms(freqs)
        value = (first - k * step).exp()
        return int((value * (Decimal(2) ** w)).to_integral_value(rounding="ROUND_FLOOR"))


@functools.lru_cache(maxsize=1 << 16)
def _cos_sin_fixed(x: Fraction, freqs: Geometric, k: int, bits: int) -> tuple[int, int, int, int]:
    """``(C, S, E, W)``: ``|cos(x w_k) - C / 2**W| <= E / 2**W``, and the same for ``S``."""
    w = bits + _GUARD
    f = _frequency_fixed(freqs, k, w)
    t = (x.numerator * f) // x.denominator  # x * w_k * 2**w, within |x| + 1 units
    return cos_sin_of_fixed_angle(t, abs(x) + 2, w)


def _log_angle(x: Fraction, freqs: Geometric, k: int) -> float:
    """``ln |x w_k|``, roughly (to decide which route an angle takes)."""
    with localcontext() as ctx:
        ctx.prec = 20
        first, step = log_terms(freqs)
        return math.log(abs(x.numerator)) - math.log(x.denominator) + float(first - k * step)


def _tiny_sin_cos(x: Fraction, freqs: Geometric, k: int, fmt: rounding.Format) -> tuple[float, float]:
    """The correctly rounded pair of a tiny angle ``x w_k`` (see the module docstring)."""

    def attempt(digits: int) -> tuple[float, float] | None:
        with localcontext() as ctx:
            ctx.prec, ctx.Emin, ctx.Emax = digits, MIN_EMIN, MAX_EMAX
            first, step = log_terms(freqs)
            arg = first - k * step
            w = Fraction(arg.exp())
        # the exponent's argument is off by |arg| 10**(1 - digits), the exponential by half a
        # unit of its last digit: a relative bracket of both
        eps = Fraction(int(abs(arg)) + 2, 10 ** (digits - 1))
        ends = sorted((x * w * (1 - eps), x * w * (1 + eps)))
        c_lo, c_hi, s_lo, s_hi = tiny_cos_sin(ends[0], ends[1], max(1, digits // 20))
        rs = [rounding.round_fraction(v, fmt) for v in (s_lo, s_hi)]
        rc = [rounding.round_fraction(v, fmt) for v in (c_lo, c_hi)]
        return (rs[0], rc[0]) if rounding.settled(*rs) and rounding.settled(*rc) else None

    return rounding.ziv(attempt, 40, MAX_BITS, "reference sincos (tiny angle)", "digits")


def sin_cos(x, freqs: Geometric, k: int, fmt: rounding.Format) -> tuple[float, float]:
    """Correctly rounded ``sin(x w_k)`` and ``cos(x w_k)`` in ``fmt`` (as Python floats), for
    an integer or a finite float ``x`` taken at its exact value."""
    x = Fraction(x)
    if x == 0:
        return 0.0, 1.0
    log_angle = _log_angle(x, freqs, k)
    if log_angle < (fmt.emin - fmt.mant_bits - 1) * math.log(2) - 1:  # below half the least subnormal
        return (-0.0 if x < 0 else 0.0), 1.0
    if log_angle < math.log(TINY_ANGLE) - 1:
        return _tiny_sin_cos(x, freqs, k, fmt)

    def attempt(bits: int) -> tuple[float, float] | None:
        c, s, e, w = _cos_sin_fixed(x, freqs, k, bits)
        scale = Fraction(1, 1 << w)
        rs = rounding.round_interval((s - e) * scale, (s + e) * scale, fmt)
        rc = rounding.round_interval((c - e) * scale, (c + e) * scale, fmt)
        return None if rs is None or rc is None else (rs, rc)

    return rounding.ziv(attempt, FIRST_BITS, MAX_BITS, "reference sincos")


def rows(xs, freqs: Geometric, layout: str, d: int, fmt: rounding.Format) -> list[list[float]]:
    """One row of ``d`` correctly rounded values per position (zeros past ``2 * count``)."""
    cols = columns(freqs.count, d, layout)
    out = []
    for x in xs:
        row = [0.0] * d
        for k, (js, jc) in enumerate(cols):
            s, c = sin_cos(x, freqs, k, fmt)
            if js is not None:
                row[js] = s
            if jc is not None:
                row[jc] = c
        out.append(row)
    return out
