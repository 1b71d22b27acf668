"""ALiBi (attention with linear biases): exact slopes and bias tensors.

::

    from fastpe import alibi

    alibi.slopes(12)                      # 2**-1 .. 2**-8, then 2**-0.5, 2**-1.5, ...
    b = alibi.bias(12, 1024, form="causal")   # (12, 1024, 1024) float32, -inf above the diagonal
    scores += b                           # (batch, 12, q, k) attention logits

Slopes follow the ALiBi paper, including head counts that are not powers of two: with
``m = 2**floor(log2(n_heads))`` the first ``m`` heads get ``2**(-max_bias * k / m)``,
``k = 1 .. m``, and the rest every other slope of ``2m`` heads,
``2**(-max_bias * k / (2m))`` for odd ``k``.  ``max_bias=8`` is the paper's (and BLOOM's,
MPT's) choice.

Forms (query ``i`` sits at absolute position ``p = i + k_len - q_len``, so the last query
lines up with the last key, as in decoding with a cache):

``symmetric``  ``-slope * |p - j|``
``causal``     the same for ``j <= p``, ``-inf`` for ``j > p`` (the mask included)
``bloom``      ``slope * j``, the same for every query (BLOOM's ``build_alibi_tensor``;
               softmax is invariant to a per-row shift, so it equals ``causal`` after masking)
``mpt``        ``slope * (j - (k_len - 1))`` (MPT's ``build_mpt_alibi_tensor``)

``symmetric`` and ``causal`` need ``k_len >= q_len`` (a query before the first key has no
meaning there); ``bloom`` and ``mpt`` do not depend on the query and take any ``k_len``.

Exactness.  A slope ``2**-e`` whose exponent is not an integer is irrational, and
``float32(slope) * j`` is off by up to half an ULP of the slope times ``j``: far from the
true value for long distances.  Every finite value here is the correctly rounded float32 of
the *exact* product (slope times integer distance), zero distance gives ``+0.0``.  The
kernels split the slope into three 21-bit words and a remainder (as
:func:`fastpe._plans.words.split_turns`), form the products exactly, sum them without error into a
double-double and round that once, resolving a float32 midpoint by the low part -- so the
result is correctly rounded unless the exact value lies within ``2**-100`` (relative) of a
midpoint.  For float32 they first round one double product of the distance with the words'
sum, within about 3 units in its last place of the exact product: where no float32
midpoint lies within 8 units of it (all but about one distance in 2**25) that rounding is
the same value, and the rest take the double-double (see ``csrc/fastpe_bias.h``); a power of
two slope times a distance below 2**24 is exact in float32 and multiplied there.  For each
slope the tests take the distances below ``2**32`` whose products come nearest a midpoint
(the convergents of its continued fraction) and compare them with mpmath.
float64 output is the double-double's leading double: correctly rounded under the same
proviso, checked the same way.  float16 and bfloat16: a head's line of float32 values
narrowed (:func:`fastpe._plans.alibi.narrow_line`), where a float32 halfway between two 16-bit numbers goes
the side the exact product lies on (the double-double says which, the exact reference
where it cannot), then spread over the rows as the bit patterns.  Slopes come from one
:mod:`decimal` exponential and a chain of 256-bit products
(:func:`fastpe._plans.alibi.slope_chain`).
"""

from __future__ import annotations

import functools
import math
import numbers

import numpy as np

from . import _backends, _dtypes
from ._plans.alibi import FORMS, slope_chain
from ._plans.words import SIG
from ._validate import _short, check_choice, check_int
from .sinusoid import output_array

__all__ = ["slopes", "bias", "FORMS", "MAX_HEADS", "MIN_BIAS", "MAX_BIAS", "MAX_LEN", "MAX_ELEMENTS"]

MAX_HEADS = 1 << 16
#: slopes stay >= 2**-64, so every non-zero value is a normal float32 (and the products of
#: the split words with a distance stay far from double underflow)
MAX_BIAS = 64.0
#: distances stay below 2**32, where the split words' products are exact
MAX_LEN = 1 << 32
#: a bound on ``n_heads * q_len * k_len`` that keeps index arithmetic far from overflow
MAX_ELEMENTS = 1 << 40


#: the slopes' exponents have at most ``52 - log2(max_bias) + 17`` fraction bits; from
#: ``2**-16`` up, every slope that is not a power of two is more than ``2**-86`` (relative)
#: from one, so no product with a distance lies nearer a rounding midpoint than that for
#: that reason, far outside the double-double's ``2**-104``.  (With ``max_bias=1e-300`` every
#: slope is within ``1e-300`` of 1, and an odd distance above ``2**24`` -- a float32
#: midpoint -- times it rounded the wrong way.)
MIN_BIAS = 2.0**-16

#: a slope's chain significand is within this many units (relative ``2**-220``, against a
#: chain error below ``2**-17 * 2**-253``) of the exact value
_RADIUS_SHIFT = 220


def _round_slopes(n_heads: int, max_bias: float, fmt: _dtypes.Format) -> np.ndarray:
    """Every slope correctly rounded to ``fmt``, as float64.

    From the chain significand ``C`` (within ``2**-220`` of the slope, so within ``2**37``
    of its last unit): its first ``p`` bits, plus one when the dropped bits are at least
    half a unit, which their top 64 bits tell unless they read ``0111...1`` or ``1000...0``
    (the slope could lie on either side of the midpoint: a chance of ``2**-63`` a head).
    Those, the values subnormal in ``fmt`` (float16 below ``2**-14``) and the exact powers
    of two take integer rounding of the bracket ``C -+ 2**-220``, then the reference if
    its ends round apart.
    """
    from ._exact.bias import slope

    exact, sigs, exps = slope_chain(n_heads, max_bias)
    p = fmt.mant_bits
    shift = SIG - p  # bits below the kept p
    keep = np.fromiter((s >> shift for s in sigs), dtype=np.int64, count=n_heads)
    low_cut = shift - 64  # the top 64 of the dropped bits (2**(low_cut) >> the chain's error)
    top = np.fromiter(((s >> low_cut) & ((1 << 64) - 1) for s in sigs), dtype=np.uint64, count=n_heads)
    mid = np.uint64(1 << 63)  # half a unit
    up = top >= mid
    unsure = (top == mid) | (top == mid - np.uint64(1))
    e2 = np.fromiter(exps, dtype=np.int64, count=n_heads) + SIG  # slope in [2**(e2-1), 2**e2)
    unsure |= e2 - 1 < fmt.emin
    unsure |= np.fromiter(exact, dtype=np.int64, count=n_heads) >= 0
    values = np.ldexp((keep + up).astype(np.float64), e2 - p)
    for h in np.flatnonzero(unsure).tolist():
        e = exact[h]
        if e >= 0:
            values[h] = _dtypes.round_ratio(1, 1 << e, fmt)
            continue
        radius = (sigs[h] >> _RADIUS_SHIFT) + 2
        den = 1 << -exps[h]
        lo = _dtypes.round_ratio(sigs[h] - radius, den, fmt)
        hi = _dtypes.round_ratio(sigs[h] + radius, den, fmt)
        values[h] = lo if lo == hi else slope(n_heads, max_bias, h, fmt)
    return values


# ------------------------------------------------------------------------------ validation


def _check_heads(n_heads) -> int:
    return check_int("n_heads", n_heads, low=1, high=MAX_HEADS)


def check_max_bias(max_bias) -> float:
    """A real number in ``[MIN_BIAS, MAX_BIAS]``, as the nearest Python float.  The bounds are
    compared before anything is converted: a Python int or fraction too large for a float
    (``10**400``) is out of range, not an OverflowError, as is a long double beyond it."""
    name = "max_bias"
    if isinstance(max_bias, (bool, np.bool_)) or not isinstance(max_bias, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, got {type(max_bias).__name__} {max_bias!r}")
    if max_bias != max_bias or max_bias in (math.inf, -math.inf):  # NaN, inf (any type)
        raise ValueError(f"{name} must be finite, got {float(max_bias)!r}")
    if max_bias <= 0:
        raise ValueError(f"{name} must be > 0, got {_short(max_bias)}")
    if max_bias > MAX_BIAS:
        raise ValueError(f"{name} must be <= {MAX_BIAS:g}, got {_short(max_bias)}")
    if max_bias < MIN_BIAS:
        raise ValueError(
            f"{name} must be >= 2**-16 (slopes nearer 1 are not resolved exactly), got {_short(max_bias)}"
        )
    return float(max_bias)


def _check_lengths(q_len, k_len, form: str) -> tuple[int, int]:
    q_len = check_int("q_len", q_len, low=1, high=MAX_LEN)
    k_len = q_len if k_len is None else check_int("k_len", k_len, low=1, high=MAX_LEN)
    if form in ("symmetric", "causal") and k_len < q_len:
        raise ValueError(
            f"k_len must be >= q_len for form {form!r} (query i sits at key position "
            f"i + k_len - q_len), got k_len={k_len} < q_len={q_len}"
        )
    return q_len, k_len


def _check_call(n_heads, q_len, k_len, form, max_bias):
    """``(n_heads, form, shape, max_bias)`` of :func:`bias`'s arguments, checked in order."""
    n_heads = _check_heads(n_heads)
    form = check_choice("form", form, FORMS)
    q_len, k_len = _check_lengths(q_len, k_len, form)
    max_bias = check_max_bias(max_bias)
    if n_heads * q_len * k_len > MAX_ELEMENTS:
        raise ValueError(
            f"n_heads * q_len * k_len must be <= 2**40, got {n_heads} * {q_len} * {k_len}"
        )
    return n_heads, form, (n_heads, q_len, k_len), max_bias


#: the types of max_bias the remembered checks take (bool is neither: its type is bool)
_PLAIN_REALS = (int, float)


@functools.lru_cache(maxsize=256)
def _checked_plain(n_heads, q_len, k_len, form, max_bias, dtype):
    """:func:`_check_call` and the dtype without ``out``, remembered for plain arguments
    (ints, a float or int ``max_bias``, strings, ``None``: hashable, and equal keys give equal
    results -- ``8`` and ``8.0`` are the same ``max_bias``).  A call repeated with one
    configuration skips ~5 us of checks; a bad argument raises, and nothing is remembered."""
    checked = _check_call(n_heads, q_len, k_len, form, max_bias)
    return (*checked, _dtypes.resolve(dtype))


# ---------------------------------------------------------------------------------- public


def slopes(n_heads, max_bias=8.0, *, dtype=None, out=None) -> np.ndarray:
    """The ``n_heads`` ALiBi slopes, each the correctly rounded ``dtype`` of the exact real
    slope (see the module docstring for the rule): ``slopes(4)`` is
    ``[0.25, 0.0625, 0.015625, 0.00390625]``.  ``dtype`` and ``out`` (shape ``(n_heads,)``)
    as in :func:`bias`; no ``backend``, as no kernel runs.
    """
    n_heads = _check_heads(n_heads)
    max_bias = check_max_bias(max_bias)
    out = output_array(out, (n_heads,), dtype)
    out[...] = _round_slopes(n_heads, max_bias, _dtypes.format_of(out.dtype)).astype(out.dtype)
    return out


def bias(
    n_heads,
    q_len,
    k_len=None,
    *,
    form="symmetric",
    max_bias=8.0,
    dtype=None,
    out=None,
    backend=None,
) -> np.ndarray:
    """The ALiBi bias, an array ``(n_heads, q_len, k_len)`` to add to attention logits.

    ``k_len`` defaults to ``q_len``.  ``form``: ``"symmetric"`` (default), ``"causal"``,
    ``"bloom"`` or ``"mpt"`` (see the module docstring).  ``dtype``: float32 (the default
    without ``out``), float64, float16 or bfloat16, every value correctly rounded from the
    exact one.  ``out``, if given, must be a writable C-contiguous array of that shape and a
    dtype of those (``dtype=None`` means ``out``'s; another ``dtype`` beside it is refused);
    it is filled in place and returned.  ``backend``: ``"numba"``, ``"cython"``, ``"python"`` or
    ``None`` (``$FASTPE_BACKEND``, else the fastest available); large outputs are filled in
    parallel.

    Raises :class:`TypeError` / :class:`ValueError` naming the argument, before anything is
    written.
    """
    if (out is None and type(n_heads) is int and type(q_len) is int and type(form) is str
            and (k_len is None or type(k_len) is int) and type(max_bias) in _PLAIN_REALS
            and (dtype is None or type(dtype) is str)):
        # plain arguments: checked once per configuration (as below, in the same order)
        n_heads, form, shape, max_bias, dt = _checked_plain(n_heads, q_len, k_len, form, max_bias, dtype)
        _, module = _backends.resolve(backend)
        out = np.empty(shape, dtype=dt)
        module.alibi_bias(n_heads=n_heads, max_bias=max_bias, form=form, out=out)
        return out
    n_heads, form, shape, max_bias = _check_call(n_heads, q_len, k_len, form, max_bias)
    if out is None:
        _dtypes.resolve(dtype)  # a bad dtype first, before a bad backend and the allocation
        _, module = _backends.resolve(backend)
        out = output_array(None, shape, dtype)
    else:
        out = output_array(out, shape, dtype)
        _, module = _backends.resolve(backend)
    module.alibi_bias(n_heads=n_heads, max_bias=max_bias, form=form, out=out)
    return out
