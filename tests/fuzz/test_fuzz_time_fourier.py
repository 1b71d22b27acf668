"""Property-based fuzzing of fastpe.time's Fourier features and time encoding, hypothesis.

* **good input**: drawn int64 ticks of every unit (the int64 edges, before 1970, random
  magnitudes), drawn periods (Prophet's, short binary fractions, arbitrary doubles: both
  kernel routes), orders and dtypes: every backend is within 1 ULP (float32) or ``2**-45``
  (float64) of the exact reference (:mod:`fastpe._exact.time`); a timestamp shifted by a
  whole period (in ticks) gives the same bits; ``time_encoding`` of drawn floats and ints
  against the reference's exact angle;
* **bad input**: periods, orders, units, dims and frequencies outside the contract: a
  TypeError / ValueError naming the argument, ``out`` untouched.

Reproducible: a fixed seed, no example database (``support.strategies.fuzz``).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fastpe.time as ft
from fastpe._exact import time as ref
from fastpe._exact.rounding import FORMATS
from fastpe.time._timestamps import TICK_SECONDS

from conftest import AVAILABLE
from support.oracle import ulp_distance
from support.strategies import fuzz

INT64 = (1 << 63) - 1
UNITS = [u for u in TICK_SECONDS if u != "W"]

ticks_st = st.lists(st.one_of(
    st.sampled_from([0, 1, -1, INT64, -INT64, INT64 - 1, 1 << 62, -(1 << 62), 1 << 32, (1 << 32) - 1]),
    st.integers(-INT64, INT64),
    st.integers(-(1 << 40), 1 << 40),
), min_size=1, max_size=12)

period_st = st.one_of(
    st.sampled_from([365.25, 7.0, 30.5, 1.0, 1 / 24, 0.5, 24.0, 365.2425, 3.0]),
    st.floats(1e-6, 1e6, allow_nan=False, allow_infinity=False),
    st.integers(1, 1000).map(lambda k: k / 64),
)


def _expected(ticks, tick_unit, unit, period, order, fmt):
    v = TICK_SECONDS[tick_unit] / (TICK_SECONDS[unit] * Fraction(period))
    return np.array(ref.fourier_rows(ticks, v.numerator, v.denominator, order, FORMATS[fmt]), dtype=np.float64)


@pytest.mark.any_backend
@fuzz(60)
@given(ticks_st, st.sampled_from(UNITS), st.sampled_from(["D", "h", "s"]), period_st, st.integers(1, 5),
       st.sampled_from(["float32", "float64"]))
def test_fourier_every_backend_near_the_reference(ticks, tick_unit, unit, period, order, dtype):
    ts = np.array(ticks, dtype=np.int64)
    want = _expected(ticks, tick_unit, unit, period, order, dtype)
    for backend in AVAILABLE:
        got = ft.fourier_features(ts, period, order, unit=unit, timestamp_unit=tick_unit, dtype=dtype,
                                  backend=backend)
        if dtype == "float32":
            assert ulp_distance(got, want.astype(np.float32)).max() <= 1, backend
        else:
            assert np.abs(got - want).max() <= 2.0**-45, backend


@fuzz(40)
@given(st.lists(st.integers(-(1 << 50), 1 << 50), min_size=1, max_size=8), st.integers(1, 400),
       st.integers(-1000, 1000), st.integers(1, 6))
def test_a_whole_period_later_is_the_same_bits(ticks, period_hours, shift, order):
    ts = np.array(ticks, dtype=np.int64)
    a = ft.fourier_features(ts, period_hours, order, unit="h")
    b = ft.fourier_features(ts + shift * period_hours, period_hours, order, unit="h")
    assert np.array_equal(a.view(np.uint64), b.view(np.uint64))


@pytest.mark.any_backend
@fuzz(50)
@given(st.one_of(
    st.lists(st.floats(-1e12, 1e12, allow_nan=False, allow_infinity=False), min_size=1, max_size=8),
    st.lists(st.integers(-INT64, INT64), min_size=1, max_size=8),
), st.integers(1, 12), st.sampled_from([None, "tgn"]), st.sampled_from(["float32", "float64"]))
def test_time_encoding_near_the_reference(t, dim, frequencies, dtype):
    arr = np.array(t, dtype=np.float64 if isinstance(t[0], float) else np.int64)
    freqs = ft.tgn_frequencies(dim, float32=frequencies == "tgn")
    want = np.array([[ref.cos_angle(Fraction(x) * Fraction(w), FORMATS[dtype]) for w in freqs]
                     for x in (float(v) if arr.dtype.kind == "f" else int(v) for v in arr)])
    for backend in AVAILABLE:
        got = ft.time_encoding(arr, dim, frequencies=frequencies, dtype=dtype, backend=backend)
        if dtype == "float32":
            assert ulp_distance(got, want.astype(np.float32)).max() <= 1, backend
        else:
            assert np.abs(got - want).max() <= 2.0**-45, backend


@pytest.mark.any_backend
@fuzz(60)
@given(st.one_of(
    st.fixed_dictionaries({"period": st.sampled_from([0, -1.0, float("inf"), float("nan"), True, "7", None])}),
    st.fixed_dictionaries({"order": st.sampled_from([0, -1, 1 << 20, 2.0, True, None])}),
    st.fixed_dictionaries({"unit": st.sampled_from(["M", "Y", "days", 3, None])}),
    st.fixed_dictionaries({"timestamp_unit": st.sampled_from(["M", "x", 1.5])}),
))
def test_fourier_bad_arguments_name_themselves(bad):
    args = {**dict(timestamps=np.arange(3), period=7.0, order=2), **bad}
    out = np.full((3, 2 * 2), 5.0)
    if "order" in bad:
        out = None
    with pytest.raises((TypeError, ValueError), match=next(iter(bad))):
        ft.fourier_features(**args, out=out)
    if out is not None:
        assert (out == 5.0).all()


@pytest.mark.any_backend
@fuzz(40)
@given(st.one_of(
    st.fixed_dictionaries({"dim": st.sampled_from([0, -3, 1 << 20, 2.5, True, None])}),
    st.fixed_dictionaries({"frequencies": st.sampled_from(["x", [1.0], [float("nan")] * 4, ["a"] * 4])}),
    st.fixed_dictionaries({"unit": st.sampled_from(["M", "q", 0])}),
))
def test_time_encoding_bad_arguments_name_themselves(bad):
    args = {**dict(t=np.arange(3), dim=4), **bad}
    with pytest.raises((TypeError, ValueError), match=next(iter(bad))):
        ft.time_encoding(**args)
