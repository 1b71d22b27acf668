"""Exact constants in :mod:`decimal`, shared by the frequency plan and the reference.

Standard library only.  Everything here is computed, not transcribed: pi comes from
Machin's formula, evaluated with guard digits, so there is no long literal to mistype.
"""

from __future__ import annotations

import functools
from decimal import Decimal, localcontext

__all__ = ["decimal_pi"]


def _arctan_inv(x: int, prec: int) -> Decimal:
    """arctan(1/x) by its Taylor series, to ``prec`` digits (x >= 2)."""
    with localcontext() as ctx:
        ctx.prec = prec
        x_d = Decimal(x)
        x2 = x_d * x_d
        term = 1 / x_d
        total = term
        k = 1
        eps = Decimal(10) ** (-prec)
        while True:
            term /= x2
            delta = term / (2 * k + 1)
            if delta < eps:
                break
            total += -delta if k % 2 else delta
            k += 1
        return total


@functools.lru_cache(maxsize=None)
def decimal_pi(prec: int) -> Decimal:
    """pi correctly to (at least) ``prec`` significant digits."""
    guard = prec + 10
    with localcontext() as ctx:
        ctx.prec = guard
        pi = 4 * (4 * _arctan_inv(5, guard) - _arctan_inv(239, guard))
        ctx.prec = prec
        return +pi
