"""The one generator of hard test inputs, and the ``out=`` contract every family keeps.

Every test that needs positions, columns, table sizes or bases takes them from here, so
"hard" means the same thing everywhere.  All choices are seeded and reproducible.  The
exact values they are checked against come from :mod:`support.oracle`.
"""

from __future__ import annotations

import functools
import random

import mpmath
import numpy as np

from support.oracle import EXACT_DPS, spec_frequency

__all__ = [
    "POSITION_LIMIT",
    "LLAMA3",
    "YARN",
    "longrope",
    "D_MODELS",
    "BASES",
    "octave_positions",
    "edge_positions",
    "sample_columns",
    "default_columns",
    "hard_positions",
    "hard_positions_for_frequency",
    "quarter_turn_candidates",
    "quarter_turn_positions",
    "quarter_turns_of",
    "real_near_quarter_turn",
    "quarter_turn_reals",
    "near_midpoints",
    "check_out_contract",
]

#: positions are unsigned 32-bit integers
POSITION_LIMIT = 1 << 32

#: table widths: tiny, odd (last column a lone sine), powers of two and the maximum
D_MODELS = (1, 2, 3, 7, 8, 63, 64, 255, 512, 1023, 65536)

#: the classic base, the long-context ones (RoPE-style 5e5, 1e6), and two awkward ones
BASES = (10000.0, 500000.0, 1e6, 2.0, 10.5)

#: RoPE rope dicts the tests share: Llama-3.1's llama3 rule, a YaRN with a short original
#: length (16) so small tests cross it, and LongRoPE lists of ``n`` drawn factors
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}


def longrope(n, original=16):
    rng = np.random.default_rng(n)
    return {"rope_type": "longrope", "short_factor": [float(v) for v in rng.uniform(0.9, 2, n)],
            "long_factor": [float(v) for v in rng.uniform(1, 20, n)], "original_max_position_embeddings": original,
            "factor": 4.0}


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


# --------------------------------------------------------------------------- near pi/2


@functools.cache
def _near_quarter_turns(
    i: int, d_model: int, base: float, limit: int, max_angle: float
) -> tuple[tuple[int, int], ...]:
    """``(p, n)`` with ``0 < p < limit`` and ``|p * w_i - n * pi/2| <= max_angle`` for the
    spec's frequency ``w_i`` (:func:`quarter_turn_candidates`)."""
    return quarter_turn_candidates(spec_frequency(i, d_model, base), limit, max_angle)


def quarter_turn_candidates(w, limit: int, max_angle: float) -> tuple[tuple[int, int], ...]:
    """``(p, n)`` with ``0 < p < limit`` and ``|p * w - n * pi/2| <= max_angle`` (``w`` an mpf).

    Candidates are the best rational approximations ``p / n`` of ``x = (pi/2) / w``:
    the convergents of its continued fraction, the largest semiconvergents of each level
    (``(p' + t p) / (n' + t n)`` for the top few ``t``), the largest that still fit below
    ``limit``, and the top multiples of the last convergent, which land near the top of
    the range with a small multiple of its (already tiny) error.
    """
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


@functools.cache
def hard_positions_for_frequency(f: float, limit: int = POSITION_LIMIT, max_angle: float = 2.0**-10) -> tuple[int, ...]:
    """Positions ``0 < p < limit`` where ``p * f`` (``f`` the exact value of the double, e.g. a
    RoPE ``inv_freq``) lies within ``max_angle`` of a multiple of pi/2 -- where the sine or
    cosine is tiny -- by the continued fraction of ``(pi/2) / f``, as :func:`hard_positions`."""
    if f <= 0:
        return ()
    with mpmath.workdps(EXACT_DPS):
        w = mpmath.mpf(f)
    return tuple(sorted({p for p, _ in quarter_turn_candidates(w, int(limit), float(max_angle))}))


def quarter_turn_positions(w, limit: int = POSITION_LIMIT) -> tuple[int, ...]:
    """Integer positions ``p < limit`` where ``p * w`` (``w`` an mpf) lies near a multiple of
    pi/2, so that a sine or cosine is tiny (the continued fraction of ``(pi/2) / w``)."""
    return tuple(p for p, _ in quarter_turn_candidates(w, limit, 2.0**-10))


_QUARTER_CACHE: dict = {}


def quarter_turns_of(key, w_fn, limit: int = POSITION_LIMIT) -> tuple[int, ...]:
    """:func:`quarter_turn_positions` of the frequency ``w_fn()``, cached under ``key``."""
    if key not in _QUARTER_CACHE:
        with mpmath.workdps(60):
            w = w_fn()
        _QUARTER_CACHE[key] = quarter_turn_positions(w, limit) if w > 0 else ()
    return _QUARTER_CACHE[key]


def real_near_quarter_turn(n: int, w_fn) -> float:
    """The double nearest ``n * (pi/2) / w``: an angle within half an ULP of ``t`` times ``w``
    of a zero of sin or cos."""
    with mpmath.workdps(60):
        return float(n * mpmath.pi / 2 / w_fn())


def quarter_turn_reals(n: int, seed: int) -> np.ndarray:
    """Doubles nearest ``k * pi/2`` for random ``k < 2**22``: angles within ~1e-10 of a zero
    of sin or cos, where the reduction must keep ~85 bits."""
    rng = np.random.default_rng(seed)
    with mpmath.workdps(40):
        return np.array([float(int(k) * mpmath.pi / 2) for k in rng.integers(1, 2**22, n)])


# --------------------------------------------------------------------------- near midpoints


def _convergents(x, count=60):
    p0, q0, p1, q1 = 0, 1, 1, 0
    for _ in range(count):
        a = int(mpmath.floor(x))
        p0, q0, p1, q1 = p1, q1, a * p1 + p0, a * q1 + q0
        yield p1, q1
        frac = x - a
        if frac == 0:
            return
        x = 1 / frac


def near_midpoints(s, bits: int, limit: int = 1 << 32) -> list[int]:
    """Integers ``n < limit`` with ``s * n`` (``s`` an mpf, e.g. an ALiBi slope) closest to a
    midpoint of a ``bits``-bit format: the convergents ``p/q`` (``p`` odd) of
    ``s * 2**(bits + 1 - E)`` for each binade ``E`` (at the current precision)."""
    found = set()
    for e in range(-70, 34):
        lo = max(1, int(mpmath.ceil(mpmath.ldexp(1, e - 1) / s)))
        hi = min(limit - 1, int(mpmath.floor(mpmath.ldexp(1, e) / s)))
        if lo > hi:
            continue
        for p, q in _convergents(s * mpmath.ldexp(1, bits + 1 - e)):
            if q > hi:
                break
            if q >= lo and p % 2:
                found.add(q)
    return sorted(found)


# --------------------------------------------------------------------------- out= contract


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
