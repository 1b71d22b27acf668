"""Reference twins of the attention-bias kernels (ALiBi, T5 buckets): exact, standard library only.

The oracle the fast kernels are checked against, and the ``python`` backend's operations.
It takes a different and obvious route from theirs:

ALiBi.  The compiled kernels multiply a distance by the slope's four split words
(:func:`fastpe._plans.alibi.slope_words`, from a chain of 256-bit products of one :mod:`decimal`
exponential) in double-double and round once.  Here each value is taken on its own: the slope ``2**-e`` (``e`` an exact dyadic
rational, see :func:`slope_exponent`) is bracketed as ``exp(-e ln 2)`` in :mod:`decimal`,
the bracket is multiplied by the integer distance as exact fractions, and the value is the
rounding both ends agree on (Ziv: :func:`fastpe._exact.rounding.round_interval`), or everything is
redone with twice the digits.  An integer ``e`` gives an exact slope, answered exactly (ties
to even); otherwise ``2**-e`` is irrational, so no product with a non-zero integer is ever a
rounding midpoint and the loop ends.

T5.  The kernels count entries of a threshold table (:func:`fastpe.relative._plan`).  Here
each relative position runs through Hugging Face's own float32 formula, each operation
emulated exactly: the float32 of the integer, the float32 quotients and product (exact
fractions rounded by :func:`fastpe._exact.rounding.round_fraction`), and a float32 logarithm --
the correctly rounded one (:func:`log_float32`), unless the plan recorded the float32 log
HF's torch returns for that argument (see :mod:`fastpe.relative`, "fragile arguments").
"""

from __future__ import annotations

import functools
import math
from decimal import Decimal, localcontext
from fractions import Fraction

from .rounding import FORMATS, Format, round_fraction, round_interval, ziv
from .._plans.alibi import FORMS
from .._plans.t5 import log_float32

__all__ = [
    "FORMS",
    "slope_exponent",
    "slope",
    "alibi_value",
    "alibi_distance",
    "log_float32",
    "t5_bucket_value",
    "alibi_bias",
    "t5_bucket",
    "t5_bucket_matrix",
]

#: the ALiBi forms, in the order of the kernels' form codes

#: decimal digits of the first pass; each retry doubles them
FIRST_DIGITS = 40
#: a retry past this many digits would mean a bug, not bad luck (see the module docstring)
MAX_DIGITS = 2560

_F32 = FORMATS["float32"]


# ------------------------------------------------------------------------------------ ALiBi


def slope_exponent(n_heads: int, max_bias: float, h: int) -> Fraction:
    """``e`` with head ``h``'s slope ``2**-e``, exactly (the ALiBi paper's rule).

    With ``m = 2**floor(log2(n_heads))``: heads ``0 .. m-1`` get ``e = max_bias * (h+1) / m``;
    the others take every other slope of ``2m`` heads, ``e = max_bias * (2(h-m)+1) / (2m)``.
    """
    m = 1 << (n_heads.bit_length() - 1)
    if h < m:
        return Fraction(max_bias) * (h + 1) / m
    return Fraction(max_bias) * (2 * (h - m) + 1) / (2 * m)


@functools.lru_cache(maxsize=4096)
def _slope_bracket(n_heads: int, max_bias: float, h: int, digits: int) -> tuple[Fraction, Fraction]:
    """``(lo, hi)`` with ``lo <= slope <= hi`` and ``hi - lo`` at most ``2 * 10**-digits``
    relative; ``lo == hi`` when the slope is exact (an integer exponent)."""
    e = slope_exponent(n_heads, max_bias, h)
    if e.denominator == 1:
        exact = Fraction(1, 1 << e.numerator)
        return exact, exact
    with localcontext() as ctx:
        # e <= 64 (see fastpe.alibi.MAX_BIAS), so -e ln 2 has at most 2 integer digits: the
        # quotient, ln 2, the product and exp each err by < 1 unit of the last of these
        # digits + 10, far below 10**-digits of the result
        ctx.prec = digits + 10
        s = Fraction((-(Decimal(e.numerator) / Decimal(e.denominator)) * Decimal(2).ln()).exp())
    radius = s / 10**digits
    return s - radius, s + radius


def slope(n_heads: int, max_bias: float, h: int, fmt: Format) -> float:
    """Head ``h``'s slope, correctly rounded to ``fmt``."""
    return alibi_value(n_heads, max_bias, h, 1, fmt)


def alibi_value(n_heads: int, max_bias: float, h: int, n: int, fmt: Format) -> float:
    """``slope_h * n`` (``n`` an integer), correctly rounded to ``fmt``; ``+0.0`` for ``n = 0``."""
    if n == 0:
        return 0.0

    def attempt(digits: int) -> float | None:
        lo, hi = _slope_bracket(n_heads, max_bias, h, digits)
        a, b = (lo * n, hi * n) if n > 0 else (hi * n, lo * n)
        if lo == hi:
            return round_fraction(a, fmt)
        return round_interval(a, b, fmt)

    return ziv(attempt, FIRST_DIGITS, MAX_DIGITS, f"alibi value h={h} n={n}", "digits")


def alibi_distance(form: str, q_len: int, k_len: int, i: int, j: int) -> int | None:
    """The signed integer ``n`` with ``bias[h, i, j] = slope_h * n``, or ``None`` where the
    causal form masks (``-inf``).  Query ``i`` sits at position ``i + k_len - q_len``."""
    p = i + k_len - q_len
    if form == "symmetric":
        return -abs(p - j)
    if form == "causal":
        return None if j > p else j - p
    if form == "bloom":
        return j
    return j - (k_len - 1)  # mpt


# --------------------------------------------------------------------------------------- T5


def _f32(x: Fraction) -> Fraction:
    """``x`` rounded to float32, kept as an exact fraction."""
    return Fraction(round_fraction(x, _F32))


def t5_bucket_value(rp: int, bidirectional: bool, num_buckets: int, max_distance: int,
                    logs: dict | None = None) -> int:
    """HF's ``T5Attention._relative_position_bucket`` of one relative position, its float32
    operations emulated exactly; ``logs`` maps a float32 argument to the float32 log to use
    instead of the correctly rounded one."""
    nb = num_buckets
    base = 0
    if bidirectional:
        nb //= 2
        if rp > 0:
            base = nb
        rp = abs(rp)
    else:
        rp = -min(rp, 0)
    exact = nb // 2
    if rp < exact:
        return base + rp
    y = float(_f32(_f32(Fraction(rp)) / exact))  # relative_position.float() / max_exact
    log = (logs or {}).get(y)
    if log is None:
        log = log_float32(y)
    c = _f32(Fraction(math.log(max_distance / exact)))  # the Python float, as torch uses it
    z = _f32(Fraction(log) / c)
    w = _f32(z * (nb - exact))
    return base + min(exact + math.trunc(w), nb - 1)


# ------------------------------------------------------------------------ backend operations
# Plain loops over every element, with the values of one call memoised: no tables, no
# strides shared with the compiled kernels' walk.


def alibi_bias(n_heads, max_bias, form, out) -> None:
    fmt = FORMATS[out.dtype.name]
    _, q_len, k_len = out.shape
    memo: dict[tuple[int, int], float] = {}
    for h in range(n_heads):
        for i in range(q_len):
            for j in range(k_len):
                n = alibi_distance(form, q_len, k_len, i, j)
                if n is None:
                    out[h, i, j] = -math.inf
                    continue
                key = (h, n)
                if key not in memo:
                    memo[key] = alibi_value(n_heads, max_bias, h, n, fmt)
                out[h, i, j] = memo[key]


def _logs(bidirectional: bool, num_buckets: int, max_distance: int) -> dict:
    # the float32 logs HF's torch returns at this configuration's fragile arguments (data
    # recorded by the plan; none for most configurations)
    from .._plans.t5 import bucket_plan

    return bucket_plan(bidirectional, num_buckets, max_distance)[2]


def t5_bucket(relative_position, bidirectional, num_buckets, max_distance, out) -> None:
    logs = _logs(bidirectional, num_buckets, max_distance)
    memo: dict[int, int] = {}
    for index, rp in enumerate(relative_position.tolist()):
        if rp not in memo:
            memo[rp] = t5_bucket_value(rp, bidirectional, num_buckets, max_distance, logs)
        out[index] = memo[rp]


def t5_bucket_matrix(query_offset, bidirectional, num_buckets, max_distance, out) -> None:
    logs = _logs(bidirectional, num_buckets, max_distance)
    memo: dict[int, int] = {}
    q_len, k_len = out.shape
    for i in range(q_len):
        for j in range(k_len):
            rp = j - (i + query_offset)  # memory position minus query position
            if rp not in memo:
                memo[rp] = t5_bucket_value(rp, bidirectional, num_buckets, max_distance, logs)
            out[i, j] = memo[rp]
