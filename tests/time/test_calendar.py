"""fastpe.time.calendar_features: GluonTS' time features, each field from the integer.

The peer is GluonTS' formula, written out here (gluonts/time_feature/_base.py:
``_normalize(xs, num) = np.asarray(xs) / (num - 1) - 0.5`` of the 0-based field, the lists
of ``time_features_from_frequency_str``), with the fields from Python's :mod:`datetime`.
"""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

import numpy as np
import pytest

import fastpe.time as ft
from fastpe._exact.calendar import fields_of_seconds
from fastpe._exact.rounding import FORMATS, round_fraction
from fastpe.time._calendar import FEATURES, features_for_freq

from conftest import AVAILABLE

ALL_INDEX = [name + "Index" for name in FEATURES]


def _datetime_fields(d: dt.datetime) -> list[int]:
    """Every feature's 0-based raw value, from Python's datetime."""
    return [d.second, d.minute, d.hour, d.weekday(), d.day - 1, d.timetuple().tm_yday - 1, d.month - 1,
            d.isocalendar()[1] - 1]


def _gluonts(a: np.ndarray, num: int) -> np.ndarray:
    """GluonTS' normalisation of the 0-based field ``a`` of ``num`` values, in float64."""
    return np.asarray(a) / (num - 1) - 0.5


def test_every_day_from_1600_to_2400_matches_datetime():
    first, last = dt.date(1600, 1, 1).toordinal(), dt.date(2400, 12, 31).toordinal()
    days = np.arange(first, last + 1) - dt.date(1970, 1, 1).toordinal()
    got = ft.calendar_features(days.astype("datetime64[D]"), features=ALL_INDEX, dtype="int64")
    want = np.array([_datetime_fields(dt.datetime.fromordinal(int(o))) for o in range(first, last + 1)])
    assert got.shape == (days.size, 8)
    np.testing.assert_array_equal(got, want)
    # the years of the boundaries: 1900 not leap, 2000 and 2400 leap, ISO week 53 where it is
    assert got[days == (dt.date(2000, 2, 29) - dt.date(1970, 1, 1)).days, 5] == 59
    assert dt.date(2020, 12, 31).isocalendar()[1] == 53
    assert got[days == (dt.date(2020, 12, 31) - dt.date(1970, 1, 1)).days, 7] == 52


@pytest.mark.any_backend
@pytest.mark.parametrize("backend", AVAILABLE)
def test_times_of_day_in_nanoseconds_before_and_after_1970(backend):
    r = np.random.default_rng(0)
    seconds = r.integers(-9 * 10**9, 9 * 10**9, 3000)  # 1684 .. 2255
    ns = seconds * 10**9 + r.integers(0, 10**9, seconds.size)
    got = ft.calendar_features(ns.astype("datetime64[ns]"), features=ALL_INDEX, dtype="int32", backend=backend)
    epoch = dt.datetime(1970, 1, 1)
    want = [_datetime_fields(epoch + dt.timedelta(seconds=int(s))) for s in seconds]
    np.testing.assert_array_equal(got, np.array(want))


@pytest.mark.any_backend
@pytest.mark.parametrize("backend", AVAILABLE)
def test_int64_extremes_of_every_unit_match_the_reference(backend):
    from fastpe.time._timestamps import TICK_SECONDS

    for unit, step in TICK_SECONDS.items():
        top = (2**63 - 1) // 7 if unit == "W" else 2**63 - 1
        ticks = np.array([top, -top, 0, -1, 1, top // 3, -top // 5], dtype=np.int64)
        got = ft.calendar_features(ticks, features=ALL_INDEX, unit=unit, dtype="int64", backend=backend)
        for t, row in zip(ticks.tolist(), got):
            v = Fraction(t) * step
            f = fields_of_seconds(v.numerator // v.denominator)
            first = {"day": 1, "day_of_year": 1, "month": 1, "iso_week": 1}
            assert row.tolist() == [f[k] - first.get(k, 0) for k in
                                    ("second", "minute", "hour", "weekday", "day", "day_of_year", "month",
                                     "iso_week")], (unit, t)


@pytest.mark.any_backend
def test_weeks_whose_days_overflow_are_refused():
    with pytest.raises(ValueError, match="weeks"):
        ft.calendar_features(np.array([(2**63 - 1) // 7 + 1]), "H", unit="W")


def test_the_same_instant_in_every_unit_gives_the_same_features():
    base = np.array(["1969-12-31T23:59:59", "1900-02-28T12:30:15", "2000-02-29T00:00:00", "2024-12-30T07:08:09"],
                    dtype="datetime64[s]")
    want = ft.calendar_features(base, "S", dtype="float64")
    for unit in ("ms", "us", "ns"):
        np.testing.assert_array_equal(ft.calendar_features(base.astype(f"datetime64[{unit}]"), "S", dtype="float64"),
                                      want)
    days = base.astype("datetime64[D]")
    want_d = ft.calendar_features(days, "D")
    for unit in ("h", "m", "s", "ms", "us", "ns"):  # (ps and finer hold +-106 days of 1970 only)
        np.testing.assert_array_equal(ft.calendar_features(days.astype(f"datetime64[{unit}]"), "D"), want_d)


def test_femto_and_atto_seconds_around_1970():
    ticks = np.array([-1, 0, 10**15 * 3599, -(10**18) * 5], dtype=np.int64)
    got = ft.calendar_features(ticks, "S", unit="fs", index=True, dtype="int64")
    assert got[0].tolist() == [59, 59, 23, 2, 30, 364]  # 1969-12-31T23:59:59, a Wednesday
    assert got[2].tolist() == [59, 59, 0, 3, 0, 0]
    got = ft.calendar_features(ticks, "S", unit="as", index=True, dtype="int64")
    assert got[3].tolist() == [55, 59, 23, 2, 30, 364]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_value_is_the_rational_rounded_once(dtype):
    fmt = FORMATS[dtype]
    for name, (field, first, num) in FEATURES.items():
        a = np.arange(num)
        stamps = _stamps_for(field, a)
        got = ft.calendar_features(stamps, features=[name], dtype=dtype)[:, 0]
        want = [round_fraction(Fraction(2 * int(k) - (num - 1), 2 * (num - 1)), fmt) for k in a]
        np.testing.assert_array_equal(got.astype(np.float64), np.array(want), err_msg=name)


def _stamps_for(field: str, a: np.ndarray) -> np.ndarray:
    """Timestamps whose ``field`` takes the 0-based values ``a`` (in order)."""
    base = np.datetime64("2020-01-01T00:00:00", "s")  # a leap year starting on a Wednesday
    if field == "second":
        return base + a.astype("timedelta64[s]")
    if field == "minute":
        return base + (a * 60).astype("timedelta64[s]")
    if field == "hour":
        return base + (a * 3600).astype("timedelta64[s]")
    if field == "weekday":
        return np.datetime64("2024-01-01T00", "s") + (a * 86400).astype("timedelta64[s]")  # a Monday
    if field in ("day", "day_of_year"):
        return base + (a * 86400).astype("timedelta64[s]")
    if field == "month":
        return np.array([f"2020-{m + 1:02d}-15" for m in a], dtype="datetime64[s]")
    # iso_week: the Thursdays of 2020 (53 ISO weeks; 2020-01-02 is week 1's Thursday)
    return np.datetime64("2020-01-02T00", "s") + (a * 7 * 86400).astype("timedelta64[s]")


def test_gluonts_float32_equals_ours_and_float64_differs_by_its_second_rounding():
    differ64 = 0
    for name, (field, first, num) in FEATURES.items():
        a = np.arange(num)
        stamps = _stamps_for(field, a)
        ours32 = ft.calendar_features(stamps, features=[name])[:, 0]
        ours64 = ft.calendar_features(stamps, features=[name], dtype="float64")[:, 0]
        theirs = _gluonts(a, num)
        np.testing.assert_array_equal(ours32, theirs.astype(np.float32), err_msg=name)  # AddTimeFeatures' cast
        diff = ours64 != theirs
        differ64 += int(diff.sum())
        assert np.all(np.abs(ours64 - theirs) <= 2.0**-54), name  # a / b's rounding, kept by the exact - 0.5
    # e.g. HourOfDay at 1 o'clock: 1/23 rounds, then - 0.5 keeps that rounding's error
    assert ft.calendar_features(np.array(["2020-01-01T01"], "datetime64[h]"), features=["HourOfDay"],
                                dtype="float64")[0, 0] != 1 / 23 - 0.5
    assert differ64 == 335  # of the 613 values of the eight features (docs/time.md says so)


def test_frequency_lists_are_gluonts_in_its_order():
    assert features_for_freq("H") == ("HourOfDay", "DayOfWeek", "DayOfMonth", "DayOfYear")
    assert features_for_freq("h") == features_for_freq("1H") == features_for_freq("12H")
    assert features_for_freq("T") == features_for_freq("15min") == ("MinuteOfHour",) + features_for_freq("H")
    assert features_for_freq("S") == features_for_freq("s") == ("SecondOfMinute",) + features_for_freq("T")
    for f in ("D", "B", "C", "d"):
        assert features_for_freq(f) == ("DayOfWeek", "DayOfMonth", "DayOfYear")
    assert features_for_freq("W") == features_for_freq("W-SUN") == ("DayOfMonth", "WeekOfYear")
    for f in ("M", "ME", "MS", "Q", "QE", "QS", "Q-DEC"):
        assert features_for_freq(f) == ("MonthOfYear",)
    for f in ("A", "Y", "YE", "YS", "AS", "A-DEC"):
        assert features_for_freq(f) == ()
    for bad in ("ms", "L", "BH", "BA", "W-JAN", "M-SUN", "x", "", "H-MON"):
        with pytest.raises(ValueError, match="freq"):
            features_for_freq(bad)
    with pytest.raises(TypeError, match="freq"):
        features_for_freq(3600)


def test_shapes_dtypes_index_and_out():
    ts = np.arange("2023-03-01", "2023-03-07", dtype="datetime64[D]").reshape(2, 3)
    got = ft.calendar_features(ts, "H")
    assert got.shape == (2, 3, 4) and got.dtype == np.float32
    idx = ft.calendar_features(ts, "H", index=True)
    assert idx.dtype == np.float32 and idx[0, 0].tolist() == [0, 2, 0, 59]  # 2023-03-01: a Wednesday
    assert ft.calendar_features(ts, "H", index=True, dtype="int32").dtype == np.int32
    assert ft.calendar_features(ts, "Y").shape == (2, 3, 0)
    out = np.full((2, 3, 4), -9.0, np.float64)
    assert ft.calendar_features(ts, "H", out=out) is out
    np.testing.assert_array_equal(out, got.astype(np.float64) if False else ft.calendar_features(ts, "H",
                                                                                                 dtype="float64"))
    for dtype in ("float16", "bfloat16"):
        try:
            narrow = ft.calendar_features(ts, "H", dtype=dtype)
        except TypeError:  # bfloat16 needs ml_dtypes
            continue
        assert narrow.dtype.name == dtype
    # integer ticks need their unit; datetime lists work as they are
    assert ft.calendar_features(np.array([0, 1]), "H", unit="h").shape == (2, 4)
    assert ft.calendar_features([dt.datetime(2021, 1, 1, 5)], "H", index=True)[0, 0] == 5


@pytest.mark.any_backend
def test_bad_input_is_refused_before_anything_is_written():
    ts = np.array(["2020-01-01"], dtype="datetime64[D]")
    out = np.full((1, 4), 7.0, np.float32)
    cases = [
        (dict(freq="ms"), ValueError, "freq"),
        (dict(freq="H", dtype="int32"), ValueError, "dtype"),
        (dict(freq="H", dtype="int8"), ValueError, "dtype"),
        (dict(freq="H", dtype="complex64"), TypeError, "dtype"),
        (dict(freq="H", index="yes"), TypeError, "index"),
        (dict(freq="H", features=["HourOfDay"]), TypeError, "freq"),
        (dict(features=["Hour"]), ValueError, "features"),
        (dict(features="HourOfDay"), TypeError, "features"),
        (dict(), TypeError, "freq"),
    ]
    for kwargs, exc, word in cases:
        with pytest.raises(exc, match=word):
            ft.calendar_features(ts, out=out, **kwargs)
        assert (out == 7).all()
    for bad_out, word in ((np.zeros((1, 3), np.float32), "shape"), (np.zeros((1, 4), np.int32), "dtype"),
                          (np.zeros((1, 8), np.float32)[:, ::2], "contiguous")):
        with pytest.raises(ValueError, match=word):
            ft.calendar_features(ts, "H", out=bad_out)
    with pytest.raises(ValueError, match="timestamps"):
        ft.calendar_features(np.array(["NaT"], dtype="datetime64[s]"), "H")
    with pytest.raises(TypeError, match="unit"):
        ft.calendar_features(np.array([1, 2]), "H")
    with pytest.raises(ValueError, match="dtype"):
        ft.calendar_features(ts, "H", out=np.zeros((1, 4), np.float64), dtype="float32")


def test_against_pandas_where_installed():
    pd = pytest.importorskip("pandas")
    index = pd.date_range("1899-12-25", periods=5000, freq="37h")
    got = ft.calendar_features(index, features=ALL_INDEX, dtype="int64")
    iso = index.isocalendar().week.to_numpy()
    want = np.stack([index.second, index.minute, index.hour, index.day_of_week, index.day - 1, index.day_of_year - 1,
                     index.month - 1, iso - 1], axis=1)
    np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------------- threads and fork


def _wait_for(pid: int, seconds: float = 120.0) -> int:
    """The exit status of the forked child ``pid``; fails (and kills it) if it hangs."""
    import os
    import time

    deadline = time.monotonic() + seconds
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.05)


@pytest.mark.any_backend
@pytest.mark.parametrize("backend", [b for b in AVAILABLE if b != "python"])
def test_many_threads_and_a_forked_child_write_the_same_bits(backend):
    """Calls large enough for the parallel paths (the worker pool, numba's threads), eight at
    once, then in an ``os.fork`` child of this process that has run them: the bits of a call
    made alone, no hang.  The alone call's fields are the reference's on a sample."""
    import os

    from support.threads import failures_at_once

    stamps = (np.datetime64("1968-03-01T00", "m") + np.arange(300_000) * 37).astype("datetime64[s]")
    hours = np.datetime64("2016-07-01T00", "h") + np.arange(32 * 96).reshape(32, 96)
    want_c = ft.calendar_features(stamps, "T", backend=backend)
    want_t = ft.temporal_embedding(hours, 512, backend=backend)
    sample = np.arange(0, stamps.size, 9973)
    np.testing.assert_array_equal(want_c[sample], ft.calendar_features(stamps[sample], "T", backend="python"))

    def right(job):
        if job == 0:
            return np.array_equal(ft.calendar_features(stamps, "T", backend=backend), want_c)
        return np.array_equal(ft.temporal_embedding(hours, 512, backend=backend).view(np.uint32),
                              want_t.view(np.uint32))

    assert failures_at_once([k % 2 for k in range(8)], right, rounds=3) == []
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child answers through its exit status
        os._exit(0 if right(0) and right(1) else 3)
    status = _wait_for(pid)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
