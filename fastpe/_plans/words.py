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
``m = p % 64`` (64 is :data:`STEPS`), ``sin(pw) = sin(aw)cos(mw) + cos(aw)sin(mw)`` (cosine likewise) from exact-path
doubles for the anchor ``a`` and the cached step ``m``, rounded once to float32; where that
float32 is below ``2**-14`` (:data:`TINY`) in magnitude the product's absolute error
(< 2**-46) could be a whole ULP, so such values come from the exact path at ``p`` directly.  That keeps every value
within 1 ULP of the correctly rounded result (in practice correctly rounded, but for about
two in a million), makes tables cost one complex product per value, and makes a table row
bit-identical to ``forward`` of the same position whatever its neighbours.

The words are cut from ``v`` known to far more than the 116 bits kept: the first frequency and
the ratio ``r = base**(-2/d)`` come from :mod:`decimal` once, then ``w_i = w_0 * r**i`` by
repeated multiplication of 256-bit integer significands (:func:`chain_turns`; truncation
costs under ``2**-238`` relative after 65,536 steps), and the words of every column are cut
out of those integers by vectorised bit operations.  That keeps the set-up of a 65,536-wide
table near 30 ms (a per-column :mod:`decimal` loop took 0.14-0.45 s).  The reference backend
uses a different route (a separate exponential per column) so the two check each other.
"""

from __future__ import annotations

import functools
import math
from decimal import Decimal, localcontext

import numpy as np

from .._exact.constants import decimal_pi

__all__ = ["sinusoid_turns", "frequency_turns", "PLAN_PREC", "split_turns", "chain_turns", "STEPS", "TINY"]

#: decimal digits used to build plans; 60 digits is ~199 bits, far beyond the 116 kept.
PLAN_PREC = 60

#: the anchors' spacing: ``a = p - p % STEPS``, and the step table of a frequency set holds
#: the exact-path ``cos(m w), sin(m w)`` for ``m < STEPS``.  The numba kernels freeze it when
#: they compile (their disk cache does not see a change here: clear it); the C kernels have it
#: as ``FASTPE_STEPS``, which the cython backend and ``tests/backends/test_one_home.py`` check.
STEPS = 64
#: below this magnitude an anchored product (a float32 table value, or RoPE's double before
#: the attention factor) is replaced by the exact path at ``p``; ``FASTPE_TINY`` and
#: ``FASTPE_TINY64`` in C, checked likewise.
TINY = 2.0**-14

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
    # exponent guess from the double, fixed up if rounding crossed a power of two
    big, e = _top_bits(v, _TOTAL_BITS, PLAN_PREC + 20, math.frexp(float(v))[1])
    e2 = e + _TOTAL_BITS
    v1 = math.ldexp(float(big >> 95), e2 - 21)
    v2 = math.ldexp(float((big >> 74) & _MASK21), e2 - 42)
    v3 = math.ldexp(float((big >> 53) & _MASK21), e2 - 63)
    v4 = math.ldexp(float(big & _MASK53), e2 - _TOTAL_BITS)
    return (v1, v2, v3, v4)


#: bits of the integer significands the chain carries (the words keep 116)
SIG = 256
_MASK64 = (1 << 64) - 1


def _top_bits(v: Decimal, bits: int, prec: int, e2: int) -> tuple[int, int]:
    """``(m, e)`` with ``2**(bits-1) <= m < 2**bits`` and ``m * 2**e <= v``: the truncation
    of a positive ``v`` to ``bits`` bits, ``floor(v * 2**(bits - e2))`` in a context of
    ``prec`` digits, the guess ``e2`` of ``log2(v)`` moved by one until ``m`` has ``bits``
    bits."""
    with localcontext() as ctx:
        ctx.prec = prec
        two = Decimal(2)
        while True:
            m = int((v * two ** (bits - e2)).to_integral_value(rounding="ROUND_FLOOR"))
            if m >= 1 << bits:
                e2 += 1
            elif m < 1 << (bits - 1):
                e2 -= 1
            else:
                return m, e2 - bits


def significand(v: Decimal) -> tuple[int, int]:
    """``(m, e)`` with ``2**255 <= m < 2**256`` and ``m * 2**e <= v`` the truncation of a
    positive ``v`` (known to the current context's precision) to 256 bits."""
    e2 = int(math.floor((v.adjusted() + 1) * 3.321928094887362))  # ~log2(v)
    return _top_bits(v, SIG, PLAN_PREC + 40, e2)


def words_of(sigs: list[int], exps: list[int]) -> np.ndarray:
    """The words :func:`split_turns` cuts, shape ``(4, n)``, for ``v_k = sigs[k] *
    2**exps[k]`` (256-bit significands), by vectorised bit operations: the top 116 bits of
    each significand, split into three 21-bit words and a 53-bit remainder."""
    n = len(sigs)
    shift = SIG - _TOTAL_BITS
    hi = np.fromiter(((m >> shift) >> 64 for m in sigs), dtype=np.uint64, count=n)  # 52 bits
    lo = np.fromiter(((m >> shift) & _MASK64 for m in sigs), dtype=np.uint64, count=n)
    e2 = np.fromiter(exps, dtype=np.int64, count=n) + SIG  # v = f * 2**e2, f in [1/2, 1)
    mask21 = np.uint64(_MASK21)
    w1 = hi >> np.uint64(31)  # bits 95..115 of the 116
    w2 = (hi >> np.uint64(10)) & mask21  # bits 74..94
    w3 = ((hi & np.uint64(0x3FF)) << np.uint64(11)) | (lo >> np.uint64(53))  # bits 53..73
    w4 = lo & np.uint64(_MASK53)  # bits 0..52
    out = np.empty((4, n), dtype=np.float64)
    out[0] = np.ldexp(w1.astype(np.float64), e2 - 21)
    out[1] = np.ldexp(w2.astype(np.float64), e2 - 42)
    out[2] = np.ldexp(w3.astype(np.float64), e2 - 63)
    out[3] = np.ldexp(w4.astype(np.float64), e2 - _TOTAL_BITS)
    return out


def chain_turns(v0: Decimal, ratio: Decimal, count: int) -> np.ndarray:
    """Split words, shape ``(4, count)``, of ``v_k = v0 * ratio**k`` (both positive, known to
    the current context's precision; ``ratio <= 1`` in practice).  The chain runs on 256-bit
    integer significands: each step one integer product, truncated back to 256 bits."""
    if count == 0:
        return np.empty((4, 0), dtype=np.float64)
    return words_of(*significand_chain(*significand(v0), *significand(ratio), count))


def significand_chain(m: int, e: int, r: int, er: int, count: int) -> tuple[list[int], list[int]]:
    """``(sigs, exps)``: the 256-bit significands and exponents of ``(m 2**e) (r 2**er)**k``,
    ``k < count`` (both factors as :func:`significand` gives them); each step one integer
    product, truncated back to 256 bits."""
    sigs, exps = [m], [e]
    for _ in range(count - 1):
        prod = m * r  # in [2**510, 2**512)
        cut = prod.bit_length() - SIG
        m = prod >> cut
        e += er + cut
        sigs.append(m)
        exps.append(e)
    return sigs, exps


@functools.lru_cache(maxsize=64)
def sinusoid_turns(d_model: int, base: float) -> np.ndarray:
    """Split frequencies of the sinusoidal table, shape ``(4, (d_model + 1) // 2)``.

    Row ``k`` holds word ``k`` of ``v_i = base**(-2i/d_model) / (2*pi)`` for column pair ``i``
    (an odd ``d_model`` has one extra, sine-only, pair).  Read-only; cached per arguments.
    """
    with localcontext() as ctx:
        ctx.prec = PLAN_PREC + 20
        inv_two_pi = 1 / (2 * decimal_pi(PLAN_PREC + 30))
        ratio = (-2 * Decimal(base).ln() / d_model).exp()
        out = chain_turns(inv_two_pi, ratio, (d_model + 1) // 2)
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
