"""check_timestamps: every accepted form becomes the exact integer ticks; the rest is refused by name."""

import datetime as dt

import numpy as np
import pytest

from fastpe.time._timestamps import TICK_SECONDS, UNITS, check_timestamps, ticks_to

#: the timestamp reader calls no backend
pytestmark = pytest.mark.any_backend


@pytest.mark.parametrize("unit", [u for u in UNITS if u != "W"] + ["W"])
def test_datetime64_of_every_unit_keeps_its_integer(unit):
    ticks = np.array([-(2**62), -1, 0, 1, 2**62], dtype=np.int64)
    got, u = check_timestamps(ticks.view(f"datetime64[{unit}]"))
    assert u == unit and got.dtype == np.int64 and got.tolist() == ticks.tolist()


def test_a_multiple_unit_is_folded_into_the_ticks_and_months_become_days():
    assert check_timestamps(np.array([5, -3], "datetime64[15m]"))[0].tolist() == [75, -45]
    got, u = check_timestamps(np.array(["2024-03", "1969-12"], "datetime64[M]"))
    days = [(dt.date(2024, 3, 1) - dt.date(1970, 1, 1)).days, (dt.date(1969, 12, 1) - dt.date(1970, 1, 1)).days]
    assert (got.tolist(), u) == (days, "D")
    assert check_timestamps(np.array(["2000"], "datetime64[Y]"))[0].tolist() == [10957]


def test_python_dates_and_numpy_scalars_take_the_finest_unit():
    got, u = check_timestamps([dt.datetime(2024, 1, 1, 12, 0, 0, 7), dt.date(2024, 1, 2)])
    assert u == "us" and got.tolist() == [1704110400000007, 1704153600000000]
    got, u = check_timestamps([np.datetime64("2024-01-01", "D"), np.datetime64(1, "ns")])
    assert u == "ns" and got.tolist() == [1704067200 * 10**9, 1]
    got, u = check_timestamps(np.datetime64("1969-12-31T23:59:59.999999999"))
    assert got.shape == () and int(got) == -1 and u == "ns"
    got, u = check_timestamps([[dt.timedelta(days=1)], [np.timedelta64(3, "ns")]])
    assert got.shape == (2, 1) and got.ravel().tolist() == [86400 * 10**9, 3]


def test_integers_are_counts_of_the_unit_given_and_the_input_is_not_touched():
    a = np.array(["2024-01-01"], "datetime64[s]")
    got, _ = check_timestamps(a)
    got[0] = 0
    assert a[0] == np.datetime64("2024-01-01")
    assert check_timestamps([1.0, -2.0], unit="s") == (pytest.approx([1, -2]), "s")
    got, u = check_timestamps(np.arange(3, dtype=">i2"), unit="\u03bcs")
    assert u == "us" and got.tolist() == [0, 1, 2] and got.dtype == np.int64


@pytest.mark.parametrize("bad, kw, error, words", [
    ([1, 2], {}, TypeError, "give unit="),
    (np.array(["NaT", "2020-01-01"], "datetime64[s]"), {}, ValueError, "NaT, found at index 0"),
    ([dt.datetime(2020, 1, 1), np.datetime64("NaT", "s")], {}, ValueError, "NaT, found at index 1"),
    ([True, False], {"unit": "s"}, TypeError, "booleans"),
    ([1, True], {"unit": "s"}, TypeError, "bool"),
    ([1.5], {"unit": "s"}, ValueError, "whole numbers"),
    ([float("nan")], {"unit": "s"}, ValueError, "finite"),
    ([dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)], {}, ValueError, "timezone-naive"),
    ([dt.datetime(2024, 1, 1), dt.timedelta(1)], {}, TypeError, "mixes dates and durations"),
    ([dt.datetime(2024, 1, 1), 3], {}, TypeError, "one kind"),
    (np.array([1], "timedelta64[M]"), {}, ValueError, "no fixed length"),
    ([1], {"unit": "M"}, ValueError, "no fixed length"),
    ([1], {"unit": 7}, TypeError, "unit must be a unit name"),
    ("2024-01-01", {}, TypeError, "got str"),
    (np.array([2**63], dtype=np.uint64), {"unit": "s"}, ValueError, "fit int64"),
    ([2**70], {"unit": "s"}, ValueError, "fit int64"),
    ([[1], [2, 3]], {"unit": "s"}, ValueError, "array of dates or integers"),
    ([np.datetime64("2300-01-01", "D"), np.datetime64(1, "ns")], {}, ValueError, "do not fit int64"),
    (np.array(["a"]), {"unit": "s"}, TypeError, "dtype <U1"),
])
def test_bad_timestamps_are_refused_by_name(bad, kw, error, words):
    with pytest.raises(error, match="timestamps|unit") as info:
        check_timestamps(bad, **kw)
    assert words in str(info.value)


def test_a_pandas_like_object_is_read_through_to_numpy_and_tz_aware_is_refused():
    class Naive:
        dtype = np.dtype("datetime64[ns]")

        def to_numpy(self):
            return np.array([7], "datetime64[ns]")

    class Aware(Naive):
        class dtype:  # noqa: N801 - pandas' DatetimeTZDtype carries .tz
            tz = "UTC"

    assert check_timestamps(Naive()) [0].tolist() == [7]
    with pytest.raises(ValueError, match="timezone-naive"):
        check_timestamps(Aware())


def test_ticks_to_floors_to_coarser_units_and_refuses_overflow_to_finer():
    assert ticks_to(np.array([-1, 0, 86399, 86400]), "s", "D").tolist() == [-1, 0, 0, 1]
    assert ticks_to(np.array([3]), "D", "ns").tolist() == [3 * 86400 * 10**9]
    with pytest.raises(ValueError, match="do not fit int64"):
        ticks_to(np.array([2**62]), "s", "ns")
    for a in UNITS:
        for b in UNITS:
            r = TICK_SECONDS[a] / TICK_SECONDS[b]
            assert r.numerator == 1 or r.denominator == 1


def test_a_scalar_keeps_its_shape_whatever_it_is():
    for value, kw in [(7, {"unit": "s"}), (np.int16(7), {"unit": "s"}), (7.0, {"unit": "s"}),
                      (np.datetime64(7, "s"), {}), (dt.timedelta(seconds=7), {})]:
        got, _ = check_timestamps(value, **kw)
        assert got.shape == () and got.dtype == np.int64, value
        assert int(got) == (7 if not isinstance(value, dt.timedelta) else 7 * 10**6)
