"""Exact constants, shared by the frequency plans and the references.

Standard library only.  Everything here is computed, not transcribed: pi comes from
Machin's formula ``16 atan(1/5) - 4 atan(1/239)``, once, in binary fixed point
(:func:`pi_fixed`); the decimal pi the plans and the decimal reference read is converted
from it (:func:`decimal_pi`), so there is no long literal to mistype and one series to trust.
"""

from __future__ import annotations

import functools
from decimal import Decimal, localcontext

__all__ = ["pi_fixed", "decimal_pi"]

#: guard bits of the fixed-point series: its ~``w/2`` floored terms cost far fewer than
#: ``2**31`` units
_PI_GUARD = 32


def _atan_inv(x: int, w: int) -> int:
    """``atan(1/x) * 2**w`` by its series, each term floored: error below 2 units a term."""
    total = 0
    power = (1 << w) // x  # 2**w / x**(2k+1)
    x2 = x * x
    k = 0
    while power:
        term = power // (2 * k + 1)
        total = total - term if k & 1 else total + term
        power //= x2
        k += 1
    return total


@functools.cache
def pi_fixed(w: int) -> int:
    """``pi * 2**w`` to within one unit: Machin's formula with :data:`_PI_GUARD` guard bits."""
    g = w + _PI_GUARD
    value = 16 * _atan_inv(5, g) - 4 * _atan_inv(239, g)
    return (value + (1 << (_PI_GUARD - 1))) >> _PI_GUARD


@functools.lru_cache(maxsize=None)
def decimal_pi(prec: int) -> Decimal:
    """pi correctly to (at least) ``prec`` significant digits: :func:`pi_fixed` at ``prec``
    digits and 40 bits more (within ``2**-40`` of a unit in the last digit), divided
    exactly enough and rounded once to ``prec`` digits."""
    bits = int(prec * 3.3219280948873626) + 40
    with localcontext() as ctx:
        ctx.prec = prec + 20
        value = Decimal(pi_fixed(bits)) / Decimal(1 << bits)
        ctx.prec = prec
        return +value
