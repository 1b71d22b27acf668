"""The reference Sandwich bias (Chi et al. 2023, NeMo's ``SandwichRelativePositionEmbedding``):
standard library only, correctly rounded in every output format.

NeMo's value for head ``h`` (0-based) of ``n_heads`` and distance ``d = |i - j|`` is
``(sum_k cos(d w_k) - H/2) / ((h + 1) * 8 / n_heads)`` with ``w_k = 10000 ** (-2k/H)``,
``k = 1 .. H/2`` (``H`` the even ``hidden_size``).  As ``cos x - 1 = -2 sin(x/2)**2``, that is

    value = -(n_heads / (4 (h + 1))) * D(d),    D(d) = sum_k sin(d w_k / 2) ** 2,

a sum of terms of one sign: nothing cancels however close the cosines' sum comes to ``H/2``
(``D(0) = 0`` exactly, the value ``+0.0``).  ``D(d)`` is computed in :mod:`decimal` from the
reduced-angle sines of :mod:`fastpe._exact.sinusoid_decimal` (each within ``1e(11 - digits)``),
the bound carried through the sum and the head's exact rational factor, and rounded by Ziv's
test (:func:`fastpe._exact.rounding.round_interval`), redone at twice the digits when the
interval straddles a rounding boundary.
"""

from __future__ import annotations

import functools
from decimal import Decimal, localcontext
from fractions import Fraction

from . import rounding
from .sinusoid_decimal import _FREQ_GUARD, _sin_cos, _tools

__all__ = ["distance_sum", "sandwich_value", "BASE"]

#: NeMo's base, fixed in its formula
BASE = 10000

_FIRST_DIGITS = 40
_MAX_DIGITS = 1280


@functools.lru_cache(maxsize=64)
def _half_frequencies(hidden_size: int, digits: int) -> tuple[Decimal, ...]:
    """``w_k / 2 = exp(-(2k/H) ln 10000) / 2`` for ``k = 1 .. H/2``, to ``digits + 5`` digits."""
    with localcontext() as ctx:
        ctx.prec = digits + _FREQ_GUARD
        ln_base = Decimal(BASE).ln()
        return tuple((ln_base * (-2 * k) / hidden_size).exp() / 2 for k in range(1, hidden_size // 2 + 1))


@functools.lru_cache(maxsize=1 << 14)
def distance_sum(d: int, hidden_size: int, digits: int = _FIRST_DIGITS) -> tuple[Fraction, Fraction]:
    """``(D, E)``: ``|D(d) - D| <= E``, both exact rationals, at ``digits`` working digits."""
    if d == 0:
        return Fraction(0), Fraction(0)
    half_pi, sin_top, sin_rest = _tools(digits)
    freqs = _half_frequencies(hidden_size, digits)
    with localcontext() as ctx:
        ctx.prec = digits
        total = Decimal(0)
        for w in freqs:
            s, _, _ = _sin_cos(d * w, half_pi, sin_top, sin_rest)
            total += s * s
    n = hidden_size // 2
    # each sine within eps = 1e(11 - digits) (|s| <= 1): its square within 3 eps; every
    # product and sum rounds once more, relative 10**(1 - digits) of at most n: below eps
    eps = Fraction(10) ** (11 - digits)
    return Fraction(total), n * 4 * eps


def sandwich_value(d: int, head: int, n_heads: int, hidden_size: int, fmt: rounding.Format) -> float:
    """The correctly rounded value of head ``head`` at distance ``d`` in ``fmt``."""
    if d == 0:
        return 0.0
    factor = Fraction(-n_heads, 4 * (head + 1))

    def attempt(digits: int) -> float | None:
        total, err = distance_sum(d, hidden_size, digits)
        ends = sorted(((total - err) * factor, (total + err) * factor))
        return rounding.round_interval(ends[0], ends[1], fmt)

    return rounding.ziv(attempt, _FIRST_DIGITS, _MAX_DIGITS, f"reference sandwich(d={d}, H={hidden_size})", "digits")
