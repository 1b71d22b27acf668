"""Exact rounding to binary formats: integer arithmetic only, standard library only.

The one rounding every reference, plan and tie decision uses: ``num / den`` (or a
:class:`~fractions.Fraction`, or an interval of them) to the nearest number of a
:class:`Format`, ties to even, with subnormals, overflow and signed zeros as IEEE 754 has
them; and the one Ziv loop (:func:`ziv`) that widens an evaluation until its rounding is
decided.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

__all__ = ["Format", "FORMATS", "F32", "round_ratio", "round_fraction", "round_interval", "settled", "ziv"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class Format:
    """A binary floating-point format: significand bits (with the implicit one) and the
    exponent range of its normal numbers."""

    name: str
    mant_bits: int
    emin: int
    emax: int


FORMATS: dict[str, Format] = {
    "float32": Format("float32", 24, -126, 127),
    "float64": Format("float64", 53, -1022, 1023),
    "float16": Format("float16", 11, -14, 15),
    "bfloat16": Format("bfloat16", 8, -126, 127),
}

#: the spec's format
F32 = FORMATS["float32"]


def round_ratio(num: int, den: int, fmt: Format) -> float:
    """``num / den`` (``den > 0``) rounded to the nearest number of ``fmt``, ties to even.

    Exact integer arithmetic; returns a Python float holding that number (exact: every
    format here fits a double), ``±inf`` on overflow, a signed zero on underflow.
    """
    negative = num < 0
    a = -num if negative else num
    if a == 0:
        return -0.0 if negative else 0.0
    e = a.bit_length() - den.bit_length()  # floor(log2(a / den)), or one more
    if (a < den << e) if e >= 0 else (a << -e < den):
        e -= 1
    if e > fmt.emax:
        return -math.inf if negative else math.inf
    q = max(e, fmt.emin) - (fmt.mant_bits - 1)  # log2 of the quantum
    if q >= 0:
        unit = den << q
        m, rem = divmod(a, unit)
    else:
        unit = den
        m, rem = divmod(a << -q, den)
    twice = rem << 1
    if twice > unit or (twice == unit and m & 1):
        m += 1
    if m.bit_length() - 1 + q > fmt.emax:  # rounded up past the largest finite number
        return -math.inf if negative else math.inf
    value = math.ldexp(m, q)
    return -value if negative else value


def round_fraction(x: Fraction, fmt: Format) -> float:
    """The number of ``fmt`` nearest to the exact rational ``x`` (ties to even)."""
    x = Fraction(x)
    return round_ratio(x.numerator, x.denominator, fmt)


def settled(lo: float, hi: float) -> bool:
    """Both ends of an interval rounded to the same number, zeros of the same sign."""
    return lo == hi and math.copysign(1.0, lo) == math.copysign(1.0, hi)


def round_interval(lo: Fraction, hi: Fraction, fmt: Format) -> float | None:
    """The rounding of every point of ``[lo, hi]`` if they all round alike, else ``None``
    (Ziv's test: rounding is monotonic, so checking both ends suffices)."""
    a, b = round_fraction(lo, fmt), round_fraction(hi, fmt)
    return a if settled(a, b) else None


def ziv(attempt: Callable[[int], _T | None], first: int, last: int, what: str, unit: str = "bits") -> _T:
    """Ziv's loop: ``attempt(first)``, ``attempt(2 * first)``, ... while the precision is at
    most ``last``; the first answer that is not ``None``.

    ``attempt(precision)`` evaluates at that precision (bits or decimal digits, ``unit``),
    bounds the true value and returns its rounding once every point of the bound rounds
    alike (:func:`round_interval`), else ``None``.  The callers' values are transcendental,
    never a rounding boundary, so some precision decides them; passing ``last`` means a bug,
    reported as a :class:`RuntimeError` naming ``what``.
    """
    precision = first
    while precision <= last:
        got = attempt(precision)
        if got is not None:
            return got
        precision *= 2
    raise RuntimeError(f"{what}: undecided at {last} {unit}")
