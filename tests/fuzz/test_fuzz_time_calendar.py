"""Property-based fuzzing of fastpe.time's calendar features and temporal embedding, hypothesis.

* **good input**: drawn int64 ticks of every unit (edges of days, years and the int64 range,
  sorted runs and random ones), drawn feature lists and dtypes: every backend writes the
  fields of the exact reference (:mod:`fastpe._exact.calendar`), and Python's ``datetime``
  where it reaches; the features are the reference's rationals rounded once; the temporal
  embedding is the module's sum of fastpe's table rows;
* **bad input**: frequencies, feature names, dtypes, ``d_model``, ``freq`` and ``minute_size``
  outside the contract: a TypeError / ValueError naming the argument, ``out`` untouched.

Reproducible: a fixed seed, no example database (``support.strategies.fuzz``).
"""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fastpe
import fastpe.time as ft
from fastpe._exact.calendar import FIELDS, fields_of_ticks
from fastpe._exact.rounding import FORMATS, round_fraction
from fastpe.time._calendar import FEATURES
from fastpe.time._timestamps import TICK_SECONDS

from conftest import AVAILABLE
from support.strategies import fuzz

INT64 = (1 << 63) - 1
_FIRST = {"day": 1, "day_of_year": 1, "month": 1, "iso_week": 1}
_NAMES = list(FEATURES)
_FIELD_OF = {name: f for name, (f, _, _) in FEATURES.items()}


@st.composite
def ticks_of_a_unit(draw):
    unit = draw(st.sampled_from(list(TICK_SECONDS)))
    top = INT64 // 7 if unit == "W" else INT64
    step = TICK_SECONDS[unit]
    per_day = Fraction(86400) / step
    edge_days = st.sampled_from([0, -1, 59, 60, -719163, 10957, 11016, 16436, 2932896, -25568, 146096])

    def around_day(d):  # the first and last tick of a drawn day, where the unit has them
        first = -(-d * per_day // 1)
        return st.sampled_from([int(first), int(first + max(per_day, 1) - 1), int(first) - 1])

    one = st.one_of(st.integers(-top, top), st.sampled_from([top, -top, 0, -1, 1]), edge_days.flatmap(around_day))
    n = draw(st.integers(1, 12))
    values = draw(st.lists(one, min_size=n, max_size=n))
    if draw(st.booleans()):  # a sorted run: consecutive ticks, as a series has them
        start = values[0]
        stride = draw(st.sampled_from([1, 7, int(max(per_day // 24, 1)), int(max(per_day, 1))]))
        values = [start + k * stride for k in range(n)]
    values = [min(max(v, -top - (unit != "W")), top) for v in values]
    return np.array(values, dtype=np.int64), unit


def _want_index(t: int, unit: str, names) -> list[int]:
    f = fields_of_ticks(t, TICK_SECONDS[unit])
    return [f[_FIELD_OF[n]] - _FIRST.get(_FIELD_OF[n], 0) for n in names]


@pytest.mark.any_backend
@fuzz(150)
@given(ticks_of_a_unit(), st.lists(st.sampled_from(_NAMES), min_size=1, max_size=9))
def test_fields_are_the_references_on_every_backend(drawn, names):
    ticks, unit = drawn
    want = np.array([_want_index(t, unit, names) for t in ticks.tolist()])
    for backend in AVAILABLE:
        got = ft.calendar_features(ticks, features=[n + "Index" for n in names], unit=unit, dtype="int64",
                                   backend=backend)
        np.testing.assert_array_equal(got, want, err_msg=f"{backend} {unit}")
    # and Python's datetime, within its years
    seconds = [Fraction(t) * TICK_SECONDS[unit] for t in ticks.tolist()]
    for s, row in zip(seconds, want):
        whole = s.numerator // s.denominator
        if -62135596800 <= whole < 253402300800:
            d = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=whole)
            by_dt = {"second": d.second, "minute": d.minute, "hour": d.hour, "weekday": d.weekday(),
                     "day": d.day, "day_of_year": d.timetuple().tm_yday, "month": d.month,
                     "iso_week": d.isocalendar()[1]}
            assert row.tolist() == [by_dt[_FIELD_OF[n]] - _FIRST.get(_FIELD_OF[n], 0) for n in names]


@fuzz(60)
@given(ticks_of_a_unit(), st.lists(st.sampled_from(_NAMES), min_size=1, max_size=4),
       st.sampled_from(["float32", "float64", "float16"]))
def test_features_are_the_rationals_rounded_once(drawn, names, dtype):
    ticks, unit = drawn
    got = ft.calendar_features(ticks, features=names, unit=unit, dtype=dtype)
    fmt = FORMATS[dtype]
    for t, row in zip(ticks.tolist(), got):
        for a, name, value in zip(_want_index(t, unit, names), names, row.tolist()):
            b = FEATURES[name][2] - 1
            assert value == round_fraction(Fraction(2 * a - b, 2 * b), fmt)


@pytest.mark.any_backend
@fuzz(40)
@given(st.integers(-(10**10), 10**10).map(lambda s: s * 10**8), st.integers(1, 40),
       st.sampled_from(["h", "t", "H", "T"]), st.sampled_from([2, 4, 10, 64]), st.sampled_from([4, 60]))
def test_temporal_embedding_is_the_modules_sum_of_table_rows(start, n, freq, d_model, minute_size):
    stamps = (np.int64(start) + np.arange(n, dtype=np.int64) * 7 * 60 * 10**9).astype("datetime64[ns]")
    marks = ft.temporal_marks(stamps, freq, minute_size=minute_size)
    table = fastpe.table(d_model, 60)
    want = ((table[marks[:, 3]] + table[marks[:, 2]]) + table[marks[:, 1]]) + table[marks[:, 0]]
    if freq.lower() == "t":
        want = want + table[marks[:, 4]]
    for backend in AVAILABLE:
        got = ft.temporal_embedding(stamps, d_model, freq, minute_size=minute_size, backend=backend)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.any_backend
@fuzz(80)
@given(st.one_of(
    st.fixed_dictionaries({"freq": st.sampled_from(["ms", "L", "BH", "x", "", "W-JAN", "M-SUN", "3", "1.5H"])}),
    st.fixed_dictionaries({"freq": st.sampled_from([None, 7, 1.0, b"H"])}),
    st.fixed_dictionaries({"features": st.lists(st.sampled_from(["Hour", "hour", "DayOfWeekIdx", ""]), min_size=1,
                                                max_size=2)}),
    st.fixed_dictionaries({"freq": st.just("H"), "dtype": st.sampled_from(["int32", "int64", "int8", "uint8",
                                                                           "complex64", "object", "float128"])}),
    st.fixed_dictionaries({"freq": st.just("H"), "index": st.sampled_from([1, "yes", None])}),
))
def test_bad_calendar_arguments_name_themselves_and_write_nothing(kwargs):
    out = np.full((3, 4), 7.0, np.float32)
    stamps = np.array(["2020-01-01", "1969-12-31", "2400-02-29"], dtype="datetime64[D]")
    with pytest.raises((TypeError, ValueError)) as err:
        ft.calendar_features(stamps, out=out, **kwargs)
    assert any(word in str(err.value) for word in ("freq", "features", "dtype", "index")), str(err.value)
    assert (out == 7).all()


@pytest.mark.any_backend
@fuzz(60)
@given(st.one_of(
    st.fixed_dictionaries({"d_model": st.one_of(st.integers(-3, 0), st.sampled_from([1, 3, 511, 65537, 2.0, "8"]))}),
    st.fixed_dictionaries({"d_model": st.just(8), "freq": st.sampled_from(["d", "b", "m", "w", "y", "s", 5])}),
    st.fixed_dictionaries({"d_model": st.just(8), "minute_size": st.sampled_from([0, 15, 24, 4.0, True])}),
    st.fixed_dictionaries({"d_model": st.just(8), "embed": st.sampled_from(["learned", "timeF", None, "FIXED"])}),
    st.fixed_dictionaries({"d_model": st.just(8), "dtype": st.sampled_from(["float16", "int32", None, "bfloat16"])}),
))
def test_bad_temporal_arguments_name_themselves_and_write_nothing(kwargs):
    out = np.full((2, 8), 3.0, np.float32)
    stamps = np.array(["2020-01-01T10:17", "1969-12-31T23:59"], dtype="datetime64[m]")
    with pytest.raises((TypeError, ValueError)) as err:
        ft.temporal_embedding(stamps, out=out, **kwargs)
    assert any(word in str(err.value) for word in ("d_model", "freq", "minute_size", "embed", "dtype")), str(err.value)
    assert (out == 3).all()


@pytest.mark.any_backend
def test_field_codes_are_the_references():
    assert FIELDS == ("second", "minute", "hour", "weekday", "day", "day_of_year", "month", "iso_week")
