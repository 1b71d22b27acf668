"""Frequency plans: the per-column constants every fast kernel reads.

Why four words.  A kernel needs ``frac(p * v)`` where ``v = w / (2*pi)`` is the frequency in
turns per position and ``p < 2**32``.  Near ``p = 2**32`` the product carries 30 integer bits,
and the hardest outputs (``p * w`` within ~1e-10 of a multiple of pi/2) need the fraction to
about 2**-85.  No double, nor a pair of doubles formed naively, holds that.  So ``v`` is
stored as ``v1 + v2 + v3 + v4``: three 21-bit words and a full double.  With ``p`` below
2**32 (32 bits) every product ``p * v1``, ``p * v2``, ``p * v3`` fits in 53 bits and is
*exact*; only ``p * v4`` (below ``2**-63 * v``) is rounded.  Taking the fractional part of an
exact product is exact too, so the kernels lose nothing before the final, error-free sum.

How kernels use them: the *exact path* (``sincos_turns`` in the kernels) turns one ``(p, v)``
into double-precision ``sin``/``cos`` of ``2*pi*p*v`` with ~2**-49 absolute accuracy.  Every
value fastpe writes is then defined by *anchored products*: with ``a = p - p % 64`` and
``m = p % 64``, ``sin(pw) = sin(aw)cos(mw) + cos(aw)sin(mw)`` (cosine likewise) from exact-path
doubles for the anchor ``a`` and the cached step ``m``, rounded once to float32; where that
float32 is below ``2**-14`` in magnitude the product's absolute error (< 2**-46) could be a
whole ULP, so such values come from the exact path at ``p`` directly.  That keeps every value
within 1 ULP of the correctly rounded result (in practice correctly rounded, but for about
two in a million), makes tables cost one complex product per value, and makes a table row
bit-identical to ``forward`` of the same position whatever its neighbours.

The words are cut from ``v`` known to ~60 significant digits, computed here with
:mod:`decimal` (``w_i = r**i`` with ``r = base**(-2/d)``, one exact exponential then repeated
multiplication, which keeps a d_model of 65,536 fast).  The reference backend uses a different
route (a separate exponential per column) so the two check each other.
"""

from __future__ import annotations

import functools
import math
from decimal import Decimal, localcontext

import numpy as np

from ._exact import decimal_pi

__all__ = ["sinusoid_turns", "frequency_turns", "PLAN_PREC", "split_turns"]

#: decimal digits used to build plans; 60 digits is ~199 bits, far beyond the 116 kept.
PLAN_PREC = 60

_TOTAL_BITS = 116
_MASK21 = (1 << 21) - 1
_MASK53 = (1 << 53) - 1


def split_turns(v: Decimal) -> tuple[float, float, float, float]:
    """Cut a positive ``v`` into ``(v1, v2, v3, v4)``: three 21-bit doubles and a remainder.

    ``v1 + v2 + v3 + v4`` equals ``v`` to a relative 2**-116; each of ``v1..v3`` has at most
    21 significant bits and they sit on descending bit ranges of one exponent, so the
    products with any ``p < 2**32`` are exact in double precision.
    """
    if v <= 0:
        return (0.0, 0.0, 0.0, 0.0)
    with localcontext() as ctx:
        ctx.prec = PLAN_PREC + 20
        # exponent guess from the double; fixed up below if rounding crossed a power of two
        _, e2 = math.frexp(float(v))
        two = Decimal(2)
        while True:
            big = int((v * two ** (_TOTAL_BITS - e2)).to_integral_value(rounding="ROUND_FLOOR"))
            if big >= 1 << _TOTAL_BITS:
                e2 += 1
            elif big < 1 << (_TOTAL_BITS - 1):
                e2 -= 1
            else:
                break
    v1 = math.ldexp(float(big >> 95), e2 - 21)
    v2 = math.ldexp(float((big >> 74) & _MASK21), e2 - 42)
    v3 = math.ldexp(float((big >> 53) & _MASK21), e2 - 63)
    v4 = math.ldexp(float(big & _MASK53), e2 - _TOTAL_BITS)
    return (v1, v2, v3, v4)


@functools.lru_cache(maxsize=64)
def sinusoid_turns(d_model: int, base: float) -> np.ndarray:
    """Split frequencies of the sinusoidal table, shape ``(4, (d_model + 1) // 2)``.

    Row ``k`` holds word ``k`` of ``v_i = base**(-2i/d_model) / (2*pi)`` for column pair ``i``
    (an odd ``d_model`` has one extra, sine-only, pair).  Read-only; cached per arguments.
    """
    n_freq = (d_model + 1) // 2
    out = np.empty((4, n_freq), dtype=np.float64)
    with localcontext() as ctx:
        ctx.prec = PLAN_PREC
        inv_two_pi = 1 / (2 * decimal_pi(PLAN_PREC + 10))
        ratio = (-2 * Decimal(base).ln() / d_model).exp()
        w = Decimal(1)
        for i in range(n_freq):
            out[:, i] = split_turns(w * inv_two_pi)
            w *= ratio
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=64)
def frequency_turns(frequencies: tuple[float, ...]) -> np.ndarray:
    """Split words, shape ``(4, n)``, for arbitrary angular frequencies (radians/position).

    Each frequency is taken as the exact value of its double (RoPE's ``inv_freq``, say), so
    ``sin(p * f)`` is defined for the double ``f`` itself, whatever formula produced it.
    Frequencies must be finite and ``>= 0``.  Read-only; cached per tuple.
    """
    out = np.empty((4, len(frequencies)), dtype=np.float64)
    with localcontext() as ctx:
        ctx.prec = PLAN_PREC
        inv_two_pi = 1 / (2 * decimal_pi(PLAN_PREC + 10))
        for i, f in enumerate(frequencies):
            out[:, i] = split_turns(Decimal(f) * inv_two_pi)
    out.setflags(write=False)
    return out
