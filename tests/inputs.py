"""The one generator of test inputs, and the exact values they are checked against.

Every test that needs positions, columns, table sizes or bases takes them from here, so
"hard" means the same thing everywhere.  All choices are seeded and reproducible.

Exact values come from mpmath at :data:`EXACT_DPS` digits and are rounded to float32 from
mpmath's own binary representation -- independently of :mod:`fastpe._exact.sinusoid_decimal`, which
works in :mod:`decimal`, so the two check each other.

Import as ``from inputs import ...`` (pytest puts ``tests/`` on ``sys.path``).
"""

from __future__ import annotations

import functools
import math
import random

import mpmath
import numpy as np

__all__ = [
    "POSITION_LIMIT",
    "D_MODELS",
    "BASES",
    "EXACT_DPS",
    "octave_positions",
    "edge_positions",
    "sample_columns",
    "default_columns",
    "hard_positions",
    "mp_frequency",
    "mp_round_f32",
    "exact_value",
    "exact_values",
    "f32_ulp_diff",
    "hard_positions_for_frequency",
    "check_out_contract",
]

#: positions are unsigned 32-bit integers
POSITION_LIMIT = 1 << 32

#: table widths: tiny, odd (last column a lone sine), powers of two and the maximum
D_MODELS = (1, 2, 3, 7, 8, 63, 64, 255, 512, 1023, 65536)

#: the classic base, the long-context ones (RoPE-style 5e5, 1e6), and two awkward ones
BASES = (10000.0, 500000.0, 1e6, 2.0, 10.5)

#: mpmath digits for exact values: ~200 bits, against ~100 bits the hardest inputs need
EXACT_DPS = 60

# --------------------------------------------------------------------------- positions


def octave_positions(n_per_octave: int, seed: int) -> list[int]:
    """0, 1, ``2**32 - 1`` and ``n_per_octave`` random positions in each ``[2**k, 2**(k+1))``.

    Covers every magnitude of ``p`` equally, up to the top of the u32 range where the
    argument ``p * w`` has the most integer bits.  Sorted, duplicates removed.
    """
    rng = random.Random(seed)
    out = {0, 1, POSITION_LIMIT - 1}
    for k in range(32):
        out.update(rng.randrange(1 << k, 1 << (k + 1)) for _ in range(n_per_octave))
    return sorted(out)


def edge_positions() -> list[int]:
    """Positions at the edges of the formats involved: small ones, float32's exact-integer
    limit ``2**24`` and its neighbours, the signed/unsigned 32-bit limits, and the top."""
    return sorted(
        {
            0,
            1,
            2,
            3,
            (1 << 16) - 1,
            1 << 16,
            (1 << 24) - 1,
            1 << 24,
            (1 << 24) + 1,
            (1 << 31) - 1,
            1 << 31,
            (1 << 31) + 1,
            POSITION_LIMIT - 2,
            POSITION_LIMIT - 1,
        }
    )


# --------------------------------------------------------------------------- columns


def sample_columns(d_model: int, n: int, seed: int) -> list[int]:
    """All columns if ``d_model <= n``; else the first and last four and random others.

    The ends matter most: column 0/1 have ``w = 1`` (the largest angles), the last columns
    the smallest frequencies, and an odd ``d_model`` ends with a lone sine.
    """
    if d_model <= n:
        return list(range(d_model))
    rng = random.Random(seed)
    out = {0, 1, 2, 3, d_model - 4, d_model - 3, d_model - 2, d_model - 1}
    while len(out) < n:
        out.add(rng.randrange(d_model))
    return sorted(out)


def default_columns(d_model: int, n_freq: int = 16) -> list[int]:
    """Sine columns of up to ``n_freq`` frequencies spread evenly, first and last included."""
    total = (d_model + 1) // 2
    if total <= n_freq:
        freqs = range(total)
    else:
        freqs = sorted({round(k * (total - 1) / (n_freq - 1)) for k in range(n_freq)})
    return [2 * i for i in freqs]


# --------------------------------------------------------------------------- exact values


@functools.cache
def mp_frequency(i: int, d_model: int, base: float) -> mpmath.mpf:
    """``w_i = base ** (-2i / d_model)`` at :data:`EXACT_DPS` digits (``base`` exact)."""
    with mpmath.workdps(EXACT_DPS + 5):
        w = mpmath.power(mpmath.mpf(base), mpmath.mpf(-2 * i) / d_model)
    with mpmath.workdps(EXACT_DPS):
        return +w


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


def mp_round_f32(x) -> float:
    """The float32 nearest to the mpf ``x`` exactly (ties to even), as a Python float.

    Works on mpmath's exact binary form ``(-1)**sign * man * 2**exp`` -- a different route
    from the reference's decimal one.
    """
    x = mpmath.mpf(x)
    if mpmath.isnan(x):
        return math.nan
    sign, man, exp, _ = x._mpf_
    if mpmath.isinf(x):
        value = math.inf
    else:
        value = round_bits(man, exp)
    return -value if sign else value


def _checked_round(x, theta, what: str) -> float:
    """``mp_round_f32(x)`` after making sure ``x``'s own error cannot change it.

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
        theta = p * mp_frequency(i, d_model, base)
        c, s = mpmath.cos_sin(theta)
        what = f"value at p={p}, i={i}, d_model={d_model}, base={base!r}"
        return _checked_round(s, theta, "sine " + what), _checked_round(c, theta, "cosine " + what)


def exact_value(p: int, j: int, d_model: int, base: float) -> float:
    """The correctly rounded float32 of column ``j`` at position ``p``, via mpmath.

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


# --------------------------------------------------------------------------- hard inputs


@functools.cache
def _near_quarter_turns(
    i: int, d_model: int, base: float, limit: int, max_angle: float
) -> tuple[tuple[int, int], ...]:
    """``(p, n)`` with ``0 < p < limit`` and ``|p * w_i - n * pi/2| <= max_angle``.

    Candidates are the best rational approximations ``p / n`` of ``x = (pi/2) / w_i``:
    the convergents of its continued fraction, the largest semiconvergents of each level
    (``(p' + t p) / (n' + t n)`` for the top few ``t``), the largest that still fit below
    ``limit``, and the top multiples of the last convergent, which land near the top of
    the range with a small multiple of its (already tiny) error.
    """
    return _quarter_turn_candidates(mp_frequency(i, d_model, base), limit, max_angle)


def _quarter_turn_candidates(w, limit: int, max_angle: float) -> tuple[tuple[int, int], ...]:
    """The search of :func:`_near_quarter_turns` for the frequency ``w`` (an mpf)."""
    with mpmath.workdps(EXACT_DPS):
        half_pi = mpmath.pi / 2
        x = half_pi / w
        candidates = set()
        p_prev, n_prev = 1, 0  # convergent -1
        a = int(mpmath.floor(x))
        p_cur, n_cur = a, 1  # convergent 0
        rest = x - a
        if p_cur < limit:
            candidates.add(p_cur)
        # convergents need x to ~2 * log10(limit) digits; 60 are ample for limit <= 2**32
        while p_cur < limit and rest != 0:
            y = 1 / rest
            a = int(mpmath.floor(y))
            rest = y - a
            # largest t with p_prev + t * p_cur < limit (p_cur = 0 only when w > pi/2)
            t_fit = (limit - 1 - p_prev) // p_cur if p_cur else 0
            t_top = min(a, t_fit)
            for t in range(max(1, t_top - 2), t_top + 1):
                candidates.add(p_prev + t * p_cur)
            p_prev, n_prev, p_cur, n_cur = p_cur, n_cur, p_prev + a * p_cur, n_prev + a * n_cur
        # the last convergent below the limit, and its top multiples
        best = p_cur if p_cur < limit else p_prev
        m_top = (limit - 1) // best
        for m in range(max(1, m_top - 1), m_top + 1):
            candidates.add(m * best)
        out = []
        for p in sorted(candidates):
            if not 0 < p < limit:
                continue
            theta = p * w
            n = int(mpmath.nint(theta / half_pi))
            if abs(theta - n * half_pi) <= max_angle:
                out.append((p, n))
        return tuple(out)


def hard_positions(
    d_model: int,
    base: float,
    columns=None,
    limit: int = POSITION_LIMIT,
    max_angle: float = 2.0**-10,
) -> list[tuple[int, int]]:
    """``(position, column)`` pairs whose value is tiny: ``p * w_i`` within ``max_angle`` of a
    multiple ``n`` of pi/2, found from the continued fraction of ``(pi/2) / w_i``.

    The column is the one that nearly vanishes: the sine (``2i``) when ``n`` is even, the
    cosine (``2i + 1``) when ``n`` is odd (skipped if that column does not exist, the lone
    sine of an odd ``d_model``).  Near ``p = 2**32`` the values reach ~1e-10, where
    computing ``p * w`` in float64 leaves no correct digit.

    ``columns`` selects frequencies (each column ``j`` stands for frequency ``j // 2``);
    default :func:`default_columns`.  Sorted by position, then column.
    """
    if columns is None:
        columns = default_columns(d_model)
    freqs = sorted({j // 2 for j in columns})
    out = set()
    for i in freqs:
        for p, n in _near_quarter_turns(i, d_model, float(base), int(limit), float(max_angle)):
            j = 2 * i + (n & 1)
            if j < d_model:
                out.add((p, j))
    return sorted(out)


# --------------------------------------------------------------------------- comparing


def f32_ulp_diff(a, b) -> np.ndarray:
    """Elementwise distance in float32 steps between two float32 arrays (or array-likes of
    values already representable in float32); ``-0.0`` and ``0.0`` are 0 apart.

    Written here rather than taken from fastpe, so the tests do not trust code they test.
    """
    a32 = np.asarray(a, dtype=np.float32)
    b32 = np.asarray(b, dtype=np.float32)
    for name, orig, conv in (("a", a, a32), ("b", b, b32)):
        if not np.array_equal(np.asarray(orig, dtype=np.float64), conv.astype(np.float64)):
            raise ValueError(f"f32_ulp_diff: {name} holds values that are not float32")
    if np.isnan(a32).any() or np.isnan(b32).any():
        raise ValueError("f32_ulp_diff: NaN has no distance")

    def ordinal(x):
        bits = x.view(np.int32).astype(np.int64)
        return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)

    return np.abs(ordinal(a32) - ordinal(b32))


@functools.cache
def hard_positions_for_frequency(f: float, limit: int = POSITION_LIMIT, max_angle: float = 2.0**-10) -> tuple[int, ...]:
    """Positions ``0 < p < limit`` where ``p * f`` (``f`` the exact value of the double, e.g. a
    RoPE ``inv_freq``) lies within ``max_angle`` of a multiple of pi/2 -- where the sine or
    cosine is tiny -- by the continued fraction of ``(pi/2) / f``, as :func:`hard_positions`."""
    if f <= 0:
        return ()
    with mpmath.workdps(EXACT_DPS):
        w = mpmath.mpf(f)
    return tuple(sorted({p for p, _ in _quarter_turn_candidates(w, int(limit), float(max_angle))}))


def _scribbled(shape, dtype) -> np.ndarray:
    """A new C-contiguous array whose every byte is 0xA5 (no value a function writes by chance)."""
    out = np.empty(shape, dtype=dtype)
    out.reshape(-1).view(np.uint8)[:] = 0xA5
    return out


def check_out_contract(call, *, other_dtype=None, bad_dtype=np.int8, alias=None, bad_input=None) -> np.ndarray:
    """The contract of every ``out=``, for ``call(**kw)`` (a function with every other argument
    bound) -- returns the array ``call()`` gives.

    * ``call(out=out)`` fills ``out``, returns it, and is bit for bit ``call()``;
    * an ``out`` of the wrong shape or of ``bad_dtype``, a non-contiguous or read-only one, or
      not an array at all is refused (ValueError or TypeError naming ``out``);
    * ``other_dtype`` (another dtype the function takes; ``None``: it has no ``dtype``) given
      beside ``out`` is a ValueError naming both, and beside an ``out`` of its own dtype works;
    * ``alias(out)`` (a call passing an input that shares memory with ``out``) and
      ``bad_input(out)`` (a call with a bad argument besides ``out``) are refused;
    * whatever is refused, ``out`` keeps every byte.
    """
    import pytest

    want = call()
    shape, dtype = want.shape, want.dtype
    out = _scribbled(shape, dtype)
    assert call(out=out) is out
    assert out.dtype == dtype and out.tobytes() == want.tobytes()

    def refused(exc, match, **kw):
        target = kw["out"]
        before = target.tobytes() if isinstance(target, np.ndarray) else None
        with pytest.raises(exc, match=match):
            call(**kw)
        if before is not None:
            assert target.tobytes() == before, "a refused call wrote to out"

    wrong = shape[:-1] + (shape[-1] + 1,) if shape else (1,)
    refused(ValueError, r"^out must have shape", out=_scribbled(wrong, dtype))
    refused(TypeError, r"^out must have dtype", out=_scribbled(shape, bad_dtype))
    refused(TypeError, r"^out must be a numpy.ndarray", out=want.tolist())
    if want.size and shape and shape[-1] > 1:  # a view of one element, or none, is contiguous
        strided = _scribbled(shape[:-1] + (2 * shape[-1],), dtype)[..., ::2]
        refused(ValueError, r"^out must be C-contiguous", out=strided)
    read_only = _scribbled(shape, dtype)
    read_only.setflags(write=False)
    refused(ValueError, r"^out is read-only", out=read_only)
    if other_dtype is not None:
        other = np.dtype(other_dtype)
        assert other != dtype
        refused(ValueError, rf"^dtype is {other.name} but out has dtype {dtype.name}", out=_scribbled(shape, dtype),
                dtype=other)
        mine = _scribbled(shape, dtype)
        assert call(out=mine, dtype=dtype.name) is mine and mine.tobytes() == want.tobytes()
        theirs = _scribbled(shape, other)
        assert call(out=theirs) is theirs and theirs.tobytes() == call(dtype=other).tobytes()
    if alias is not None and want.size:  # (no array of no elements shares memory)
        target = _scribbled(shape, dtype)
        before = target.tobytes()
        with pytest.raises(ValueError, match=r"^out must not share memory with "):
            alias(target)
        assert target.tobytes() == before, "a refused call wrote to out"
    if bad_input is not None:
        target = _scribbled(shape, dtype)
        before = target.tobytes()
        with pytest.raises((TypeError, ValueError)):
            bad_input(target)
        assert target.tobytes() == before, "a refused call wrote to out"
    return want
