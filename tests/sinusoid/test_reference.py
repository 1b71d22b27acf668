"""The reference backend (:mod:`fastpe._exact.sinusoid_decimal`) against mpmath: 0 ULP, everywhere.

The reference is the oracle the fast backends are judged by, so it is held to the strict
standard: every value equals the correctly rounded float32, on octave samples, at the
format edges and on the hard inputs at the top of the u32 range.
"""

from __future__ import annotations

import math
import random
from decimal import Decimal, localcontext

import mpmath
import numpy as np
import pytest
from support.inputs import POSITION_LIMIT, edge_positions, hard_positions, octave_positions
from support.oracle import exact_value, exact_values, mp_round

from fastpe._exact import sinusoid_decimal as _reference
from fastpe._exact.sinusoid_decimal import round_to_float32, sinusoid

#: every backend it calls is named, or it calls none: the first run of make test decides it
#: (tests/conftest.py deselects it in the default-only runs)
pytestmark = pytest.mark.any_backend

FLT_MAX = float.fromhex("0x1.fffffep+127")
TINY = 2.0**-149  # smallest subnormal float32


def D(x) -> Decimal:
    """An exact Decimal: from a float (exact by construction) or a string."""
    return Decimal(x)


def fine(expr: str) -> Decimal:
    """Evaluate a Decimal expression with enough digits to be exact (midpoint +- 1e-60)."""
    with localcontext() as ctx:
        ctx.prec = 200
        return eval(expr, {"D": Decimal})


def same_float(a: float, b: float) -> bool:
    """Equal, including the sign of zero and NaN matching NaN."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


# --------------------------------------------------------------------------- rounding


ONE_MID = 1 + 2.0**-24  # the midpoint between 1 and the next float32, 1 + 2**-23

ROUNDING_CASES = [
    # zeros and signs
    (D(0), 0.0),
    (D("-0"), -0.0),
    (D("-0E-30"), -0.0),
    (D(1), 1.0),
    (D(-1), -1.0),
    (D("0.1"), float.fromhex("0x1.99999ap-4")),
    (D("-0.1"), -float.fromhex("0x1.99999ap-4")),
    # ties to even around 1
    (D(ONE_MID), 1.0),
    (D(-ONE_MID), -1.0),
    (D(1 + 3 * 2.0**-24), 1 + 2.0**-22),
    (fine("D(1 + 2.0**-24) + D('1e-60')"), 1 + 2.0**-23),
    (fine("D(1 + 2.0**-24) - D('1e-60')"), 1.0),
    # more digits than the default decimal context (28) must not be rounded on the way in
    (D("1.000000059604644775390625000000000000001"), 1 + 2.0**-23),
    (D("1.000000059604644775390624999999999999999"), 1.0),
    # just below 1: finer binade, midpoint 1 - 2**-25
    (D(1 - 2.0**-25), 1.0),
    (fine("D(1 - 2.0**-25) - D('1e-60')"), 1 - 2.0**-24),
    # subnormals: quantum 2**-149 all the way down
    (D(TINY), TINY),
    (D(2.0**-150), 0.0),  # tie between 0 and TINY: 0 is even
    (D(-(2.0**-150)), -0.0),
    (fine("D(2.0**-150) + D('1e-80')"), TINY),
    (D(3 * 2.0**-150), 2.0**-148),  # tie: 2 * TINY is even
    (D(5 * 2.0**-150), 2.0**-148),  # tie: 2 * TINY is even, not 3 * TINY
    (D(1e-50), 0.0),
    (D(-1e-50), -0.0),
    # the subnormal / normal boundary
    (D(2.0**-126 - 2.0**-150), 2.0**-126),  # tie: 2**23 * TINY is even
    (D(2.0**-126 - 3 * 2.0**-150), 2.0**-126 - 2 * TINY),
    (D(2.0**-126), 2.0**-126),
    # overflow: at or past the midpoint FLT_MAX + 2**103 goes to infinity
    (D(FLT_MAX), FLT_MAX),
    (fine("D(2.0**128) - D(2.0**103) - 1"), FLT_MAX),
    (D(2.0**128 - 2.0**103), math.inf),
    (D(-(2.0**128)), -math.inf),
    (D("1e400"), math.inf),
    (D("Infinity"), math.inf),
    (D("-Infinity"), -math.inf),
    (D("NaN"), math.nan),
]


@pytest.mark.parametrize(
    "x, expected", ROUNDING_CASES, ids=[str(c[0])[:30] for c in ROUNDING_CASES]
)
def test_round_to_float32_tricky(x, expected):
    assert same_float(round_to_float32(x), expected)


# mpmath has no negative zero
MP_ROUNDING_CASES = [c for c in ROUNDING_CASES if not (c[0].is_zero() and c[0].is_signed())]


@pytest.mark.parametrize(
    "x, expected", MP_ROUNDING_CASES, ids=[str(c[0])[:30] for c in MP_ROUNDING_CASES]
)
def test_mpmath_rounding_helper_tricky(x, expected):
    """The tests' own rounding (support.oracle.mp_round, binary) passes the same cases."""
    with mpmath.workdps(400):  # every case is exact, or 1e-60 off a midpoint, at 400 digits
        y = mpmath.mpf(str(x)) if x.is_finite() else mpmath.mpf(float(x))
        assert same_float(mp_round(y, "float32"), expected)


def _random_doubles(n: int, seed: int) -> list[float]:
    """Doubles spread over float32's whole range and beyond, plus exact float32 midpoints."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        x = math.ldexp(1 + rng.random(), rng.randint(-155, 129)) * rng.choice((1, -1))
        out.append(x)
        # the midpoint above float32(x) is a double too: the hardest case
        with np.errstate(over="ignore"):
            f = np.float32(x)
        if math.isfinite(f):
            up = np.nextafter(f, np.float32(np.inf) if f >= 0 else np.float32(-np.inf))
            if math.isfinite(up):
                out.append((float(f) + float(up)) / 2)
    return out


def test_round_to_float32_matches_numpy_on_doubles():
    # numpy's double -> float32 cast is one IEEE rounding (ties to even): a trusted yardstick
    xs = _random_doubles(20000, seed=1)
    with np.errstate(over="ignore"):
        expected = np.array(xs, dtype=np.float64).astype(np.float32)
    for name, helper in (
        ("reference", lambda x: round_to_float32(Decimal(x))),
        ("mp", lambda x: mp_round(x, "float32")),
    ):
        got = np.array([helper(x) for x in xs], dtype=np.float64)
        mismatch = np.flatnonzero(got != expected.astype(np.float64))
        assert mismatch.size == 0, (
            name,
            [(xs[k].hex(), got[k], expected[k]) for k in mismatch[:10]],
        )
        # ...and the sign of zero
        assert (np.signbit(got) == np.signbit(expected)).all(), name


def test_round_to_float32_just_off_midpoints():
    """Decimals a hair (1e-45 relative) either side of random float32 midpoints."""
    rng = random.Random(2)
    for _ in range(2000):
        f = np.float32(math.ldexp(1 + rng.random(), rng.randint(-125, 126)))
        up = np.nextafter(f, np.float32(np.inf))
        with localcontext() as ctx:
            ctx.prec = 200  # float32 values near 2**-125 have ~90 significant digits
            mid = (Decimal(float(f)) + Decimal(float(up))) / 2
            nudge = mid * Decimal("1e-45")
            assert round_to_float32(mid - nudge) == float(f)
            assert round_to_float32(mid + nudge) == float(up)
            assert round_to_float32(-(mid + nudge)) == -float(up)
        # the exact midpoint: ties to even
        even = f if (np.float32(f).view(np.uint32) & 1) == 0 else up
        assert round_to_float32(mid) == float(even)


# --------------------------------------------------------------------------- values


def _assert_rows_exact(rows, positions, d_model, base):
    assert len(rows) == len(positions)
    bad = []
    for p, row in zip(positions, rows, strict=True):
        assert len(row) == d_model
        for j, v in enumerate(row):
            assert type(v) is float
            exact = exact_value(p, j, d_model, base)
            if not same_float(v, exact):
                bad.append((p, j, v, exact))
    assert not bad, f"{len(bad)} values differ from mpmath, e.g. (p, j, got, exact): {bad[:10]}"


OCTAVE_CASES = [(1, 10000.0), (2, 2.0), (7, 10.5), (8, 10000.0), (63, 1e6), (64, 500000.0)]


@pytest.mark.parametrize("d_model, base", OCTAVE_CASES)
def test_reference_exact_on_octaves_and_edges(d_model, base):
    positions = sorted(set(octave_positions(2, seed=d_model)) | set(edge_positions()))
    _assert_rows_exact(sinusoid(positions, d_model, base), positions, d_model, base)


HARD_CASES = [(7, 10.5), (8, 10000.0), (63, 1e6), (64, 2.0), (64, 500000.0), (512, 10000.0)]


@pytest.mark.parametrize("d_model, base", HARD_CASES)
def test_reference_exact_on_hard_inputs_at_the_top(d_model, base):
    """p * w within ~1e-10 of a multiple of pi/2, p >= 2**31: outputs of 1e-11..1e-9."""
    pairs = [(p, j) for p, j in hard_positions(d_model, base) if p >= 1 << 31]
    assert len(pairs) >= 5
    positions = sorted({p for p, _ in pairs})
    rows = dict(zip(positions, sinusoid(positions, d_model, base), strict=True))
    got = [rows[p][j] for p, j in pairs]
    exact = exact_values(pairs, d_model, base)
    assert min(abs(v) for v in exact) < 1e-8  # they are hard
    bad = [
        (p, j, g, e) for (p, j), g, e in zip(pairs, got, exact, strict=True) if not same_float(g, e)
    ]
    assert not bad, f"(p, j, got, exact): {bad[:10]}"


def test_reference_exact_on_all_hard_inputs_small_table():
    pairs = hard_positions(8, 10000.0)
    positions = sorted({p for p, _ in pairs})
    rows = dict(zip(positions, sinusoid(positions, 8, 10000.0), strict=True))
    for (p, j), e in zip(pairs, exact_values(pairs, 8, 10000.0), strict=True):
        assert same_float(rows[p][j], e), (p, j, rows[p][j], e)


def test_reference_retry_path(monkeypatch):
    """Force every value through the Ziv retries (first pass at 12 digits decides nothing)."""
    monkeypatch.setattr(_reference, "FIRST_DIGITS", 12)
    pairs = [(p, j) for p, j in hard_positions(8, 10000.0) if p >= 1 << 28][:6]
    positions = sorted({p for p, _ in pairs} | {1, 3, POSITION_LIMIT - 1})
    _assert_rows_exact(sinusoid(positions, 8, 10000.0), positions, 8, 10000.0)


def test_settle_refuses_what_it_cannot_decide():
    settle = _reference._settle
    with localcontext() as ctx:
        ctx.prec = 40
        # exactly the midpoint between 1 and 1 + 2**-23: no error interval decides it
        assert settle(Decimal(ONE_MID), 40, relative=False) is None
        assert settle(Decimal(-ONE_MID), 40, relative=True) is None
        # within the absolute error of 0: the sign is unknown
        assert settle(Decimal("1e-35"), 40, relative=False) is None
        # ...but a relative error decides it, down to values that round to zero
        assert settle(Decimal("1e-35"), 40, relative=True) == float(np.float32(1e-35))
        assert same_float(settle(Decimal("-1e-300"), 40, relative=True), -0.0)
        assert settle(Decimal("0.5"), 40, relative=False) == 0.5


def test_reference_huge_base_tiny_angles():
    """A huge base makes w_i tiny: sin(p * w_i) ~ 1e-250 underflows to 0, decided at once."""
    d_model, base = 16, 1e300
    positions = [1, 3185950873, POSITION_LIMIT - 1]
    _assert_rows_exact(sinusoid(positions, d_model, base), positions, d_model, base)


def test_reference_shapes_and_zero_position():
    assert sinusoid([], 8, 10000.0) == []
    assert sinusoid([0], 8, 10000.0) == [[0.0, 1.0] * 4]
    assert sinusoid([0], 7, 10000.0) == [[0.0, 1.0] * 3 + [0.0]]
    assert sinusoid([0], 1, 10000.0) == [[0.0]]
    # any iterable of integers, numpy ones included
    a = sinusoid((p for p in (5, 6)), 3, 10000.0)
    b = sinusoid(np.array([5, 6], dtype=np.uint32), 3, 10000.0)
    assert a == b and all(len(r) == 3 for r in a)
    # the lone last column of an odd table is a sine
    w = 10000.0 ** (-2 / 3)
    assert abs(a[0][2] - math.sin(5 * w)) < 1e-7


def test_one_pi_in_both_forms():
    """The decimal pi is converted from the fixed-point Machin series: both agree with
    mpmath (the decimal one correctly rounded, the fixed one within a unit)."""
    from fastpe._exact.constants import decimal_pi, pi_fixed

    with mpmath.workdps(1100):
        for prec in (20, 90, 1000):
            assert str(decimal_pi(prec)) == mpmath.nstr(mpmath.pi, prec, strip_zeros=False)
        for w in (64, 200, 3000):
            assert abs(pi_fixed(w) - mpmath.pi * mpmath.mpf(2) ** w) <= 1
