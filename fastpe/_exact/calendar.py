"""The reference calendar: fields of an integer timestamp in exact integer arithmetic.

A timestamp is ``t`` ticks of a unit (:data:`fastpe.time._timestamps.TICK_SECONDS`) since
1970-01-01T00:00 in the proleptic Gregorian calendar, no leap seconds (numpy's and pandas'
convention).  The whole second is ``floor(t * tick_seconds)``, a rational floor; the day is
its floor by 86400.  The date of a day is found the way Python's :mod:`datetime` finds the
date of an ordinal (whole 400-, 100- and 4-year cycles, then the year, then the month by
cumulative month lengths), written out here with Python integers so that it holds for any
int64 count, years far beyond datetime's 1..9999 included.  The compiled kernels use
another algorithm (days from March 1, see :mod:`fastpe._backends.numba.calendar`); the
contract test compares the two.

The fields, by code (:data:`FIELDS`): second of minute, minute of hour, hour of day (0-based),
weekday (Monday 0, as ``datetime.weekday`` and pandas' ``dayofweek``), day of month
(1-based), day of year (1-based), month (1-based), ISO 8601 week number (1..53; the week
with the year's first Thursday is week 1, and the days before it belong to the previous
year's last week).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

__all__ = ["FIELDS", "FIELD_CODES", "FIELD_RANGES", "fields_of_seconds", "fields_of_ticks", "calendar_fields",
           "embedding_sum"]

#: the fields, in code order
FIELDS: tuple[str, ...] = ("second", "minute", "hour", "weekday", "day", "day_of_year", "month", "iso_week")
FIELD_CODES: dict[str, int] = {name: code for code, name in enumerate(FIELDS)}
#: ``(lowest, highest)`` value of each field
FIELD_RANGES: dict[str, tuple[int, int]] = {
    "second": (0, 59), "minute": (0, 59), "hour": (0, 23), "weekday": (0, 6), "day": (1, 31),
    "day_of_year": (1, 366), "month": (1, 12), "iso_week": (1, 53),
}

_MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
#: days from 0001-01-01 (day 0 here) to 1970-01-01
_EPOCH_ORDINAL = 719162
_DAYS_400Y = 146097
_DAYS_100Y = 36524
_DAYS_4Y = 1461


def _leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _days_in_year(year: int) -> int:
    return 366 if _leap(year) else 365


def _date(days: int) -> tuple[int, int, int, int]:
    """``(year, month, day, day_of_year)`` of ``days`` since 1970-01-01."""
    n = days + _EPOCH_ORDINAL  # days since 0001-01-01, any sign
    n400, n = divmod(n, _DAYS_400Y)
    year = 1 + 400 * n400
    n100, n = divmod(n, _DAYS_100Y)
    if n100 == 4:  # the last day of a 400-year cycle
        n100, n = 3, _DAYS_100Y
    n4, n = divmod(n, _DAYS_4Y)
    n1, n = divmod(n, 365)
    if n1 == 4:  # the last day of a 4-year cycle
        n1, n = 3, 365
    year += 100 * n100 + 4 * n4 + n1
    day_of_year = n + 1
    month = 1
    for length in _MONTH_DAYS:
        length += month == 2 and _leap(year)
        if n < length:
            break
        n -= length
        month += 1
    return year, month, n + 1, day_of_year


def _iso_week(year: int, day_of_year: int, weekday: int) -> int:
    thursday = day_of_year - weekday + 3  # the day of year of this week's Thursday
    if thursday < 1:
        thursday += _days_in_year(year - 1)
    elif thursday > _days_in_year(year):
        thursday -= _days_in_year(year)
    return (thursday - 1) // 7 + 1


def fields_of_seconds(seconds: int) -> dict[str, int]:
    """Every field of the whole second ``seconds`` since 1970-01-01T00:00."""
    days, second_of_day = divmod(seconds, 86400)
    year, month, day, day_of_year = _date(days)
    weekday = (days + 3) % 7  # 1970-01-01 was a Thursday
    return {
        "second": second_of_day % 60, "minute": second_of_day // 60 % 60, "hour": second_of_day // 3600,
        "weekday": weekday, "day": day, "day_of_year": day_of_year, "month": month,
        "iso_week": _iso_week(year, day_of_year, weekday),
    }


def fields_of_ticks(tick: int, tick_seconds: Fraction) -> dict[str, int]:
    """Every field of ``tick`` ticks of ``tick_seconds`` seconds each."""
    value = Fraction(tick) * tick_seconds
    return fields_of_seconds(value.numerator // value.denominator)


def calendar_fields(ticks, per_second, tick_seconds, fields, offsets, out) -> None:
    """The registry operation (:meth:`fastpe._backends.registry.Backend.calendar_fields`)."""
    step = Fraction(tick_seconds, per_second)
    names = [FIELDS[int(c)] for c in fields.tolist()]
    add = [int(o) for o in offsets.tolist()]
    for row, t in enumerate(ticks.tolist()):
        values = fields_of_ticks(t, step)
        for k, name in enumerate(names):
            out[row, k] = values[name] + add[k]


def embedding_sum(table, indices, out) -> None:
    """The registry operation :meth:`fastpe._backends.registry.Backend.embedding_sum`, row by
    row and one addition at a time, each rounded to ``out``'s dtype by NumPy's scalars (the
    sums of the embeddings a calendar's marks select: nothing to compute exactly but the
    order of the additions)."""
    t = out.dtype.type
    rows = indices.tolist()
    with np.errstate(all="ignore"):  # IEEE results (inf - inf is NaN) without warnings
        for r, picks in enumerate(rows):
            acc = table[picks[0]].copy()
            for j in picks[1:]:
                acc = (acc + table[j]).astype(t)
            out[r] = acc
