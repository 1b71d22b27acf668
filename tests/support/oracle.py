"""The tests' one oracle: true values by mpmath, rounded by this module's own arithmetic.

Nothing here comes from fastpe's exact engine (:mod:`fastpe._exact`, which works in
:mod:`decimal` and with rationals), so the two check each other; nor from fastpe's format
tables (:mod:`fastpe._dtypes`).  What it offers:

* exact numbers and frequencies: :func:`mp_exact` (the value of a double), the spec's
  ``w_i = base ** (-2i / d_model)`` (:func:`spec_frequency`), a geometric set
  (:func:`geometric`, :func:`geometric_frequency` of a ``Geometric``), diffusers' timestep
  frequencies (:func:`timestep_frequency`), a RoPE ``inv_freq`` double (:func:`rope_frequency`);
* :func:`sin_cos` of a position times a frequency, times an attention factor, and the RoPE
  rotation of a pair (:func:`rotate`);
* rounding: :func:`mp_round` (to float32, float16, bfloat16 or float64, ties to even);
  :func:`exact_value` (the spec's float32 sinusoid, checked far from every midpoint);
  :func:`mp_correct` / :func:`check_against_mpmath` (decided at two precisions);
* :func:`ulp_distance`, the distance in steps of a format;
* the families' true values: tables, timesteps, grids, RoPE, ALiBi slopes and biases, and the
  Taylor coefficients of the kernels' polynomials.

Precision: unless a function says otherwise it computes at mpmath's current precision, so a
caller picks it with ``mpmath.workdps(n)``; an mpf keeps the precision it was made at.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import mpmath
import numpy as np

__all__ = [
    "EXACT_DPS",
    "FORMATS",
    "mp_exact",
    "spec_frequency",
    "geometric",
    "geometric_frequency",
    "timestep_frequency",
    "rope_frequency",
    "sin_cos",
    "rotate",
    "round_bits",
    "mp_round",
    "exact_value",
    "exact_values",
    "mp_correct",
    "mp_value",
    "check_against_mpmath",
    "ulp_distance",
    "table_column",
    "table_value_fn",
    "timestep_value_fn",
    "grid_value_fn",
    "rope_value_fn",
    "alibi_exponent",
    "alibi_slope",
    "alibi_distance",
    "alibi_bias",
    "alibi_value_fn",
    "taylor_coefficient",
]

#: mpmath digits for the spec's exact values: ~200 bits, against ~100 bits the hardest
#: inputs need
EXACT_DPS = 60

#: formats as (significand bits with the implicit one, least normal exponent, greatest)
FORMATS = {"float32": (24, -126, 127), "float64": (53, -1022, 1023),
           "float16": (11, -14, 15), "bfloat16": (8, -126, 127)}

# --------------------------------------------------------------------------- exact numbers


def mp_exact(x):
    """The exact value of ``x`` as an mpf: a double (NumPy's included) or an integer, at the
    current precision (which holds every double, and every integer it has bits for)."""
    if isinstance(x, mpmath.mpf):
        return x
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return mpmath.mpf(int(x))
    return mpmath.mpf(float(x))


@functools.cache
def spec_frequency(i: int, d_model: int, base: float) -> mpmath.mpf:
    """The spec's ``w_i = base ** (-2i / d_model)`` at :data:`EXACT_DPS` digits (``base``
    exact), whatever the current precision."""
    with mpmath.workdps(EXACT_DPS + 5):
        w = mpmath.power(mpmath.mpf(base), mpmath.mpf(-2 * i) / d_model)
    with mpmath.workdps(EXACT_DPS):
        return +w


def geometric(k: int, n, hi, lo=1.0, scale=1.0):
    """``w_k = (scale / lo) * (hi / lo) ** (-k / n)`` of the exact doubles (the frequency
    sets of the README: tables, grids and timesteps); ``n`` may be an mpf."""
    lo_, hi_ = mp_exact(lo), mp_exact(hi)
    return mp_exact(scale) / lo_ * mpmath.power(hi_ / lo_, -mpmath.mpf(k) / mp_exact(n))


def geometric_frequency(freqs, k: int):
    """:func:`geometric` of frequency ``k`` of a ``fastpe._plans.frequencies.Geometric``
    (read from its fields ``n``, ``hi``, ``lo`` and ``scale``)."""
    return geometric(k, freqs.n, freqs.hi, freqs.lo, freqs.scale)


def timestep_frequency(k: int, d_model: int, base=10000.0, shift=1.0, scale=1.0):
    """Diffusers' ``scale * base ** (-k / (d_model // 2 - shift))`` of the exact doubles."""
    half = d_model // 2
    return mp_exact(scale) * mpmath.power(mp_exact(base), -mpmath.mpf(k) / (half - mp_exact(shift)))


def rope_frequency(f):
    """A RoPE frequency: the exact value of the ``inv_freq`` double."""
    return mp_exact(f)


def sin_cos(x, w, af=1.0):
    """``(af * sin(x w), af * cos(x w))`` for a position ``x`` (an integer, a double taken
    exactly, or an mpf), a frequency ``w`` and an attention factor ``af`` (exact)."""
    theta = mp_exact(x) * mp_exact(w)
    s, c = mpmath.sin(theta), mpmath.cos(theta)
    if af == 1:
        return s, c
    a = mp_exact(af)
    return a * s, a * c


def rotate(p, f, af=1.0, x1=1.0, x2=0.0):
    """The RoPE rotation of the pair ``(x1, x2)`` at position ``p`` by the frequency ``f``,
    times ``af``: ``(af (x1 cos - x2 sin), af (x2 cos + x1 sin))``; ``(af cos, af sin)`` for
    the unit pair."""
    s, c = sin_cos(p, rope_frequency(f))
    a = mp_exact(af)
    return a * (x1 * c - x2 * s), a * (x2 * c + x1 * s)


# --------------------------------------------------------------------------- rounding


def round_bits(man: int, exp: int, mant: int = 24, emin: int = -126, emax: int = 127) -> float:
    """``man * 2**exp`` (``man >= 0``) to the nearest number of a binary format (``mant``
    significand bits with the implicit one, normal exponents ``emin .. emax``; float32 by
    default), ties to even: keep the top ``mant`` bits (fewer below ``2**emin``, where the
    quantum stays ``2**(emin - mant + 1)``), round on those dropped."""
    if man == 0:
        return 0.0
    top = exp + man.bit_length() - 1  # floor(log2 x)
    if top > emax:
        return math.inf
    q = max(top, emin) - (mant - 1)  # log2 of the quantum at x
    shift = q - exp
    if shift <= 0:
        m = man << -shift
    else:
        m = man >> shift
        dropped = man & ((1 << shift) - 1)
        half = 1 << (shift - 1)
        if dropped > half or (dropped == half and m & 1):
            m += 1
    if m.bit_length() - 1 + q > emax:  # rounded up past the largest finite number
        return math.inf
    return math.ldexp(m, q)


def mp_round(x, fmt: str = "float32") -> float:
    """The number of ``fmt`` (float32, float16, bfloat16, float64) nearest to the mpf ``x``
    exactly (ties to even; a tiny negative value rounds to -0.0), as a Python float.

    Works on mpmath's exact binary form ``(-1)**sign * man * 2**exp`` -- a different route
    from the reference's decimal and rational ones.
    """
    x = mpmath.mpf(x)
    if mpmath.isnan(x):
        return math.nan
    if mpmath.isinf(x):
        return math.inf if x > 0 else -math.inf
    sign, man, exp, _ = x._mpf_
    value = round_bits(int(man), int(exp), *FORMATS[fmt])
    return -value if sign else value


def _checked_round(x, theta, what: str) -> float:
    """``mp_round(x, "float32")`` after making sure ``x``'s own error cannot change it.

    That error is below ~1e-49 (see :func:`exact_value`), and below ``theta * 2**-190`` when
    ``theta < 1`` (no argument reduction: mpmath is then accurate relative to ``theta``).
    Both ends of ``x -+ margin``, ``margin = 2**-150 * min(1, theta)``, must round the same
    (rounding is monotonic, so everything between does).
    """
    sign, man, exp, _ = x._mpf_
    _, _, theta_exp, theta_bc = theta._mpf_
    margin_log2 = -150 + min(0, theta_exp + theta_bc - 1)  # floor(log2 theta), theta > 0
    k = margin_log2 - exp
    if k >= 0:
        lo, hi = man - (1 << k), man + (1 << k)
    else:  # a short mantissa: bring it to the margin's scale
        man <<= -k
        exp = margin_log2
        lo, hi = man - 1, man + 1
    f = round_bits(hi, exp)
    if lo <= 0 or round_bits(lo, exp) != f:
        raise AssertionError(f"{what} is too close to a float32 midpoint or 0; raise EXACT_DPS")
    return -f if sign else f


@functools.cache
def _exact_pair(p: int, i: int, d_model: int, base: float) -> tuple[float, float]:
    """Correctly rounded float32 ``(sin(p * w_i), cos(p * w_i))``."""
    if p == 0:
        return 0.0, 1.0
    with mpmath.workdps(EXACT_DPS):
        theta = p * spec_frequency(i, d_model, base)
        s, c = sin_cos(p, spec_frequency(i, d_model, base))
        what = f"value at p={p}, i={i}, d_model={d_model}, base={base!r}"
        return _checked_round(s, theta, "sine " + what), _checked_round(c, theta, "cosine " + what)


def exact_value(p: int, j: int, d_model: int, base: float) -> float:
    """The correctly rounded float32 of the spec's column ``j`` at position ``p``.

    Error of the mpmath value: ``theta = p * w`` is carried at 200 bits (absolute error
    below ``2**32 * 2**-200``) and mpmath's sine and cosine are accurate to a few units of
    that precision, so the value is within ~1e-49 -- far inside the ``2**-150`` (7e-46)
    margin checked against every float32 midpoint before rounding (relative to ``theta``
    when ``theta < 1``, where the error is relative too).
    """
    s, c = _exact_pair(int(p), j // 2, d_model, float(base))
    return c if j & 1 else s


def exact_values(pairs, d_model: int, base: float) -> list[float]:
    """:func:`exact_value` for each ``(position, column)`` of ``pairs``."""
    return [exact_value(p, j, d_model, base) for p, j in pairs]


#: two precisions: a value is taken only when both round alike (it is then far enough from
#: a midpoint that mpmath's own error cannot decide it); angles reach 2**42 radians
DPS_PAIR = (70, 110)


def mp_correct(fn, fmt: str) -> float | None:
    """``fn()`` (an mpf computed at the current precision) correctly rounded to ``fmt``, or
    ``None`` when the two precisions of :data:`DPS_PAIR` round differently (too close to call)."""
    values = []
    for dps in DPS_PAIR:
        with mpmath.workdps(dps):
            values.append(mp_round(fn(), fmt))
    a, b = values
    if a != b or math.copysign(1, a) != math.copysign(1, b):
        return None
    return a


def mp_value(fn):
    """``fn()`` at the higher precision of :data:`DPS_PAIR`, as an mpf (for float64 checks)."""
    with mpmath.workdps(DPS_PAIR[1]):
        return +fn()


def check_against_mpmath(got, fn, fmt: str, what: str, *, scale=1.0, exact=False) -> None:
    """One value ``got`` against the true value ``fn()``.  ``exact=True`` (the reference,
    which rounds the exact value once): equal to the correctly rounded value, sign of zero
    included.  Otherwise (a compiled backend): float32 within 1 ULP of it, float16/bfloat16
    equal to it, float64 within ``2**-45 * scale`` of the true value."""
    got = float(got)
    if fmt == "float64" and not exact:
        true = mp_value(fn)
        if mpmath.isinf(true) or math.isinf(got):
            assert got == float(true), f"{what}: {got!r}, true value {true}"
            return
        with mpmath.workdps(DPS_PAIR[1]):
            err = abs(mpmath.mpf(got) - true)
        bound = 2.0**-45 * abs(scale)
        assert err <= bound, (
            f"{what}: float64 {got!r} is {mpmath.nstr(err, 5)} from the true value "
            f"{mpmath.nstr(true, 20)} (bound {bound:.3g})")
        return
    want = mp_correct(fn, fmt)
    if want is None:  # too close to a midpoint to call at these precisions
        return
    if fmt == "float32" and not exact:
        d = int(ulp_distance(np.float32(got), np.float32(want), nan="apart").reshape(-1)[0])
        assert d <= 1, f"{what}: float32 {got!r} is {d} ULP from the correctly rounded {want!r}"
        return
    same = (got == want and math.copysign(1, got) == math.copysign(1, want)) or (
        math.isnan(got) and math.isnan(want))
    assert same, f"{what}: {fmt} {got!r}, correctly rounded {want!r}"


# --------------------------------------------------------------------------- ULP distance

#: a NaN's distance to a number under ``nan="apart"``: farther than any two numbers are
NAN_DISTANCE = np.iinfo(np.int64).max


def _dtype(fmt) -> np.dtype:
    if isinstance(fmt, str) and fmt == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(fmt)


def ulp_distance(a, b, fmt="float32", *, nan: str = "refuse") -> np.ndarray:
    """Elementwise distance in steps of ``fmt`` (float32 by default; float16, bfloat16,
    float64, or a dtype) between ``a`` and ``b``: arrays of that format, or array-likes of
    values it represents; ``-0.0`` and ``0.0`` are 0 apart.

    ``nan="refuse"``: a NaN is a ValueError (it has no distance); ``nan="apart"``: two NaNs
    are 0 apart, a NaN and a number :data:`NAN_DISTANCE`.  Written here rather than taken
    from fastpe, so the tests do not trust code they test.
    """
    dt = _dtype(fmt)
    xa = np.asarray(a, dtype=dt)
    xb = np.asarray(b, dtype=dt)
    for name, orig, conv in (("a", a, xa), ("b", b, xb)):
        if not np.array_equal(np.asarray(orig, dtype=np.float64), conv.astype(np.float64), equal_nan=True):
            raise ValueError(f"ulp_distance: {name} holds values that are not {dt.name}")
    na, nb = np.isnan(xa.astype(np.float64)), np.isnan(xb.astype(np.float64))
    if nan == "refuse" and (na.any() or nb.any()):
        raise ValueError("ulp_distance: NaN has no distance")
    bits = np.dtype(f"i{dt.itemsize}")
    magnitude = (1 << (8 * dt.itemsize - 1)) - 1

    def ordinal(x):
        v = x.view(bits).astype(np.int64)
        return np.where(v < 0, -(v & magnitude), v)  # sign-magnitude to two's complement order

    d = np.abs(ordinal(xa) - ordinal(xb))
    if nan == "apart":
        d = np.where(na & nb, 0, np.where(na | nb, NAN_DISTANCE, d))
    return d


# --------------------------------------------------------------------------- family values


def table_column(j: int, d_model: int, layout: str, denominator: str):
    """``(k, is_cos)`` of column ``j`` of a table row, or ``None`` for a zero column, from the
    README's description of the layouts and denominators."""
    count = (d_model + 1) // 2 if denominator == "d" else d_model // 2
    if layout == "interleaved":
        k, is_cos = j // 2, bool(j & 1)
    elif j < count:
        k, is_cos = j, False
    else:
        k, is_cos = j - count, True
    return None if k >= count else (k, is_cos)


def _pick(x, w, is_cos: bool, af=1.0):
    s, c = sin_cos(x, w, af)
    return c if is_cos else s


def table_value_fn(p, j, d_model, base, layout, denominator, min_ts, max_ts):
    """A function giving the true value of table column ``j`` at position ``p`` (an mpf)."""
    owner = table_column(j, d_model, layout, denominator)
    if owner is None:
        return lambda: mpmath.mpf(0)
    k, is_cos = owner
    n = d_model / 2 if denominator == "d" else float(max(d_model // 2 - 1, 1))
    hi = base if max_ts is None else max_ts
    return lambda: _pick(p, geometric(k, n, hi, min_ts), is_cos)


def timestep_value_fn(t, j, d_model, base, shift, scale, flip):
    """The true value of column ``j`` of diffusers' embedding at real ``t`` (``base`` is
    diffusers' ``max_period``)."""
    half = d_model // 2
    if j >= 2 * half:
        return lambda: mpmath.mpf(0)
    first = j < half
    k = j if first else j - half
    is_cos = first == flip
    return lambda: _pick(t, timestep_frequency(k, d_model, base, shift, scale), is_cos)


def grid_value_fn(row, j, sizes, d_model, base, order, cls_token):
    """The true value of column ``j`` of row ``row`` of a 2-D/3-D grid (README's orders)."""
    n_axes = len(sizes)
    if cls_token:
        if row == 0:
            return lambda: mpmath.mpf(0)
        row -= 1
    coords, rem = [], row
    for size in reversed(sizes):
        coords.append(rem % size)
        rem //= size
    coords.reverse()  # coords[0] the slowest axis (t or y), coords[-1] x
    q = d_model // (2 * n_axes)
    block, k = divmod(j, q)
    if order == "mae":  # [sin x | cos x | sin y | cos y (| sin t | cos t)]
        axis, is_cos = n_axes - 1 - block // 2, bool(block % 2)
    else:  # timm: [sin t | sin y | sin x | cos t | cos y | cos x]
        axis, is_cos = (block, False) if block < n_axes else (block - n_axes, True)
    return lambda: _pick(coords[axis], geometric(k, q, base), is_cos)


def rope_value_fn(p, f, af, is_cos):
    """The true RoPE cos (``is_cos``) or sin cache value at position ``p``, frequency ``f``,
    attention factor ``af``."""
    return lambda: _pick(p, rope_frequency(f), is_cos, af)


def alibi_exponent(n_heads: int, max_bias: float, h: int) -> Fraction:
    """The paper's slope exponent of head ``h`` (its ``get_slopes(n)``): slope ``2 ** -e``."""
    m = 1 << (n_heads.bit_length() - 1)
    if h < m:
        return Fraction(max_bias) * (h + 1) / m
    return Fraction(max_bias) * (2 * (h - m) + 1) / (2 * m)


def alibi_slope(n_heads: int, max_bias: float, h: int):
    """The true ALiBi slope of head ``h``, ``2 ** -alibi_exponent(...)``, an mpf."""
    e = alibi_exponent(n_heads, max_bias, h)
    return mpmath.power(2, -mpmath.mpf(e.numerator) / e.denominator)


def alibi_distance(form: str, q_len: int, k_len: int, i: int, j: int) -> int | None:
    """The README's signed distance ``n`` of a form (``bias = slope * n``), or ``None`` where
    the causal form masks (``-inf``); query ``i`` sits at key position ``i + k_len - q_len``."""
    p = i + k_len - q_len
    if form == "bloom":
        return j
    if form == "mpt":
        return j - (k_len - 1)
    if form == "causal" and j > p:
        return None
    return -abs(p - j)


def alibi_bias(n_heads, q_len, k_len, form, max_bias, fmt) -> np.ndarray:
    """The whole bias, every value the true one rounded to ``fmt``, as float64."""
    out = np.empty((n_heads, q_len, k_len), dtype=np.float64)
    for h in range(n_heads):
        s = alibi_slope(n_heads, max_bias, h)
        for i in range(q_len):
            for j in range(k_len):
                n = alibi_distance(form, q_len, k_len, i, j)
                out[h, i, j] = -math.inf if n is None else mp_round(s * n, fmt)
    return out


def alibi_value_fn(n_heads, max_bias, h, i, j, q_len, k_len, form):
    """The true ALiBi value at (head, query, key) as a function (``-inf`` where masked)."""
    n = alibi_distance(form, q_len, k_len, i, j)
    if n is None:
        return lambda: mpmath.mpf("-inf")
    return lambda: alibi_slope(n_heads, max_bias, h) * n


def taylor_coefficient(n: int) -> float:
    """``(-1)**k (2 pi)**n / n!`` (``k = n // 2``), the Taylor coefficient of ``sin(2 pi r)``
    (odd ``n``) or ``cos(2 pi r)`` (even ``n``), rounded to the nearest double."""
    with mpmath.workdps(60):
        return mp_round((-1) ** (n // 2) * (2 * mpmath.pi) ** n / mpmath.factorial(n), "float64")
