"""ALiBi's kernel constants: the forms and their codes, the slopes as split words, and the
narrowing of a head's float32 line to float16 / bfloat16 with every tie decided by the exact
product.  What the compiled backends and :mod:`fastpe.alibi` share (see that module for the
definition of every value).
"""

from __future__ import annotations

import functools
import math
from decimal import Decimal, localcontext

import numpy as np

from .. import _dtypes
from .words import PLAN_PREC, significand_chain, significand, words_of

__all__ = ["FORMS", "FORM_CODES", "NEG_INF16", "dd_product"]

FORMS = ("symmetric", "causal", "bloom", "mpt")
#: form name -> the kernels' code
FORM_CODES = {name: code for code, name in enumerate(FORMS)}


@functools.lru_cache(maxsize=64)
def slope_chain(n_heads: int, max_bias: float) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """``(exact, sigs, exps)`` per head: ``exact[h]`` is ``e`` when the slope is exactly
    ``2**-e`` (an integer exponent), else ``-1``; otherwise the slope is ``sigs[h] *
    2**exps[h]`` (``2**255 <= sigs[h] < 2**256``) to a relative ``2**-220``.

    Every slope is a power of one number: with ``m`` as in the module docstring, head ``h``'s
    exponent is ``max_bias * k / (2m)`` with ``k = 2(h + 1)`` (first ``m`` heads) or ``2(h -
    m) + 1``, so the slope is ``b**k`` with ``b = 2**(-max_bias / (2m))``.  ``b`` comes from
    :mod:`decimal` once; the powers by repeated multiplication of 256-bit significands, as
    :func:`fastpe._plans.words.chain_turns` does for frequencies (``2m <= 2**17`` steps, each
    truncation ``2**-255``).  The reference backend takes each slope's own exponential.
    """
    m = 1 << (n_heads.bit_length() - 1)
    num, den = max_bias.as_integer_ratio()  # den a power of two
    denominator = den * 2 * m  # exponent of head h: num * k / denominator
    ks = [2 * (h + 1) if h < m else 2 * (h - m) + 1 for h in range(n_heads)]
    with localcontext() as ctx:
        ctx.prec = PLAN_PREC + 40
        base = (-(Decimal(num) / Decimal(denominator)) * Decimal(2).ln()).exp()
    r, er = significand(base)
    sigs, exps = significand_chain(r, er, r, er, 2 * m)  # base**1 .. base**(2m)
    powers_sig, powers_exp = [0, *sigs], [0, *exps]
    exact = []
    for k in ks:
        q, rem = divmod(num * k, denominator)
        exact.append(q if rem == 0 else -1)
    return tuple(exact), tuple(powers_sig[k] for k in ks), tuple(powers_exp[k] for k in ks)


@functools.lru_cache(maxsize=64)
def slope_words(n_heads: int, max_bias: float) -> np.ndarray:
    """The split slopes every compiled kernel reads, shape ``(4, n_heads)``, read-only.

    Column ``h`` holds ``(w1, w2, w3, w4)``: three 21-bit doubles and a remainder whose sum is
    head ``h``'s slope to a relative ``2**-115`` (exactly, when the slope is a power of two),
    so ``n * w1``, ``n * w2``, ``n * w3`` are exact for every integer ``n < 2**32``: the top
    116 bits of the slope chain (:func:`slope_chain`), cut as :func:`fastpe._plans.words.split_turns`
    cuts.
    """
    exact, sigs, exps = slope_chain(n_heads, max_bias)
    words = words_of(list(sigs), list(exps))
    for h, e in enumerate(exact):
        if e >= 0:
            words[:, h] = (math.ldexp(1.0, -e), 0.0, 0.0, 0.0)
    words.setflags(write=False)
    return words


#: the bits of -inf in the 16-bit formats (the causal mask)
NEG_INF16 = {"float16": 0xFC00, "bfloat16": 0xFF80}
#: a float32 tie in a 16-bit format is decided by the double-double (error ``2**-104``
#: relative) when it lies farther than this (relative) from the tie
_TIE_MARGIN = 2.0**-96


def dd_product(d, w1, w2, w3, w4):
    """``(hi, lo)``: ``d * (w1 + w2 + w3 + w4)`` as a double-double, for an integer
    ``|d| < 2**32`` and a head's split slope words.  The first three products are exact
    (21-bit words); the words sit on descending bit ranges, so each fast two-sum's error term
    is exact, and the total is off by ~2**-104 relative.

    Plain arithmetic, so the one definition serves scalars and arrays: the numba line
    kernels compile it (:mod:`fastpe._backends.numba.bias`; their disk cache does not see an
    edit here: clear it), :func:`narrow_line` runs it on NumPy arrays for the ties, and
    ``csrc/fastpe_bias.h``'s ``fastpe_dd_product`` is its C twin.
    """
    a = d * w1
    b = d * w2
    c = d * w3
    t = d * w4
    s = a + b
    e1 = b - (s - a)
    u = s + c
    e2 = c - (u - s)
    low = (e1 + e2) + t
    hi = u + low
    lo = low - (hi - u)
    return hi, lo


def narrow_line(narrow16, exact_value, n_heads: int, max_bias: float, line: np.ndarray,
                 dtype: np.dtype, first: int = 0) -> np.ndarray:
    """The compiled backends' float16 / bfloat16 line: ``line`` (float32, ``(n_heads,
    length)``, ``line[h, n]`` the correctly rounded ``slope_h * (first + n)``, as the line
    kernels write it) narrowed to the bit patterns of ``dtype`` (uint16, same shape), each
    the correctly rounded value of the exact product.

    ``exact_value`` is the reference's ``alibi_value`` (:mod:`fastpe._exact.bias`), given by
    the caller.  ``narrow16`` (the backend's operation) rounds each float32 to nearest-even and flags the
    ties, float32 values exactly halfway between two ``dtype`` numbers.  Round-half-even is
    right at a tie only if the exact value *is* the tie (an exact slope); otherwise the side
    of the tie the exact value lies on decides, and then the float32 just above (or below)
    the tie rounds the right way.  The side comes from the kernels' double-double product
    (the same operations, in NumPy, for the few ties), and from the exact reference when that
    lies within ``2**-96`` of the tie (never seen: the tests take the distances whose
    products come nearest a tie, and none is that near).  No float32 scratch as large as
    the output, and no Python loop over the ties.
    """
    fmt = _dtypes.format_of(dtype)
    bf16 = fmt.name == "bfloat16"
    flat = line.reshape(-1)
    bits32 = flat.view(np.uint32)
    bits = np.empty(flat.size, dtype=np.uint16)
    ties = np.empty(flat.size, dtype=np.bool_)
    narrow16(bits32=bits32, bf16=bf16, out=bits, ties=ties)
    idx = np.flatnonzero(ties)
    if idx.size:
        words = slope_words(n_heads, max_bias)
        h, n = np.divmod(idx, line.shape[1])
        w1, w2, w3, w4 = words[:, h]
        n += first
        hi, lo = dd_product(n.astype(np.float64), w1, w2, w3, w4)  # the kernels' product
        tie = flat[idx].astype(np.float64)  # > 0: a tie is never zero
        gap = (hi - tie) + lo  # the sign of exact - tie (hi - tie is exact)
        exact = (w2 == 0) & (w3 == 0) & (w4 == 0)  # hi + lo is the exact product
        margin = np.where(exact, 0.0, tie * _TIE_MARGIN)
        for side, step in ((gap > margin, 1), (gap < -margin, -1)):
            if side.any():
                near = (bits32[idx[side]] + np.uint32(1) if step > 0 else bits32[idx[side]] - np.uint32(1))
                fixed = np.empty(near.size, dtype=np.uint16)
                narrow16(bits32=np.ascontiguousarray(near), bf16=bf16, out=fixed,
                         ties=np.empty(near.size, dtype=np.bool_))
                bits[idx[side]] = fixed
        unsure = np.flatnonzero(~exact & (np.abs(gap) <= margin))
        if unsure.size:
            values = [exact_value(n_heads, max_bias, int(h[k]), int(n[k]), fmt) for k in unsure.tolist()]
            bits[idx[unsure]] = np.array(values, dtype=np.float64).astype(dtype).view(np.uint16)
    return bits.reshape(line.shape)
