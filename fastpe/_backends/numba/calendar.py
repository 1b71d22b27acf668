"""Numba kernels of the calendar fields (:meth:`fastpe._backends.registry.Backend.calendar_fields`).

Integer arithmetic only, every division a floor division of int64 values that cannot
overflow for any int64 tick the public API passes:

* the whole day and the second of the day: units finer than a second first floor to whole
  seconds (``per_second`` ticks each, at most ``10**18``); units of a second or coarser that
  divide a day (s, m, h, D) floor by the ticks per day; a week is 7 days (the API refuses
  weeks whose days overflow int64);
* the date from days since 1970-01-01 by counting from March 1 of 400-year eras (the leap
  day then ends a year): era, day of era, year of era, day from March 1, month from it; the
  era is split off before the shift to 0000-03-01 so that no sum overflows;
* the day of year from the day counted from March 1; the weekday from 1970-01-01 a
  Thursday; the ISO week from the day of year of the week's Thursday.

``csrc/fastpe_calendar.h`` is the C twin, line for line; :mod:`fastpe._exact.calendar` the
reference, by another algorithm.
"""

from __future__ import annotations

from numba import prange

from ._jit import inline, kernel

__all__ = ["calendar_fields_parallel", "calendar_fields_serial", "BLOCK"]

#: timestamps per work item
BLOCK = 4096


@inline
def _fdiv(a, b):
    q = a // b  # numba's // on int64 floors, as Python's
    return q


@inline
def _days_in_year(y):
    if y % 4 == 0 and (y % 100 != 0 or y % 400 == 0):
        return 366
    return 365


@inline
def _row(t, per_second, tick_seconds, fields, out, k):
    if per_second > 1:
        secs = _fdiv(t, per_second)
        day = _fdiv(secs, 86400)
        sod = secs - day * 86400
    elif tick_seconds == 604800:
        day = t * 7
        sod = 0
    else:
        per_day = 86400 // tick_seconds
        day = _fdiv(t, per_day)
        sod = (t - day * per_day) * tick_seconds
    # days -> civil date, counted from 0000-03-01 in eras of 400 years
    era = _fdiv(day, 146097)
    doe = day - era * 146097 + 719468  # 1970-01-01 is day 719468 from 0000-03-01
    era += doe // 146097
    doe = doe % 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy_mar = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy_mar + 2) // 153
    mday = doy_mar - (153 * mp + 2) // 5 + 1
    if mp < 10:
        month = mp + 3
        year = yoe + era * 400
        leap = 1 if _days_in_year(year) == 366 else 0
        doy = doy_mar + 60 + leap
    else:
        month = mp - 9
        year = yoe + era * 400 + 1
        doy = doy_mar - 305
    wd = day % 7 + 3
    if wd >= 7:
        wd -= 7
    thursday = doy - wd + 3
    if thursday < 1:
        thursday += _days_in_year(year - 1)
    else:
        diy = _days_in_year(year)
        if thursday > diy:
            thursday -= diy
    week = (thursday - 1) // 7 + 1
    for j in range(fields.shape[0]):
        f = fields[j]
        if f == 0:
            v = sod % 60
        elif f == 1:
            v = sod // 60 % 60
        elif f == 2:
            v = sod // 3600
        elif f == 3:
            v = wd
        elif f == 4:
            v = mday
        elif f == 5:
            v = doy
        elif f == 6:
            v = month
        else:
            v = week
        out[k, j] = v


def _calendar_fields(ticks, per_second, tick_seconds, fields, out):
    n = ticks.shape[0]
    n_blocks = (n + BLOCK - 1) // BLOCK
    for b in prange(n_blocks):
        for k in range(b * BLOCK, min(n, (b + 1) * BLOCK)):
            _row(ticks[k], per_second, tick_seconds, fields, out, k)


calendar_fields_parallel, calendar_fields_serial = kernel(_calendar_fields)
