"""Numba kernels of the calendar fields (:meth:`fastpe._backends.registry.Backend.calendar_fields`).

Integer arithmetic only, every division a floor division of int64 values that cannot
overflow for any int64 tick the public API passes:

* the whole day and the second of the day (:func:`_split`): units finer than a second first
  floor to whole seconds (``per_second`` ticks each, at most ``10**18``); units of a second
  or coarser that divide a day (s, m, h, D) floor by the ticks per day; a week is 7 days
  (the API refuses weeks whose days overflow int64).  Each unit has its own branch, so
  every divisor is a constant the compiler turns into a multiplication;
* the date from days since 1970-01-01 (:func:`_date`) by counting from March 1 of 400-year
  eras (the leap day then ends a year): era, day of era, year of era, day from March 1,
  month from it; the era is split off before the shift to 0000-03-01 so that no sum
  overflows; the day of year from the day counted from March 1; the weekday from
  1970-01-01 a Thursday; the ISO week from the day of year of the week's Thursday.  A run
  of timestamps on one day (hourly data: 24 in a row) computes the date once.

``csrc/fastpe_calendar.h`` is the C twin, line for line; :mod:`fastpe._exact.calendar` the
reference, by another algorithm.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ._jit import inline, kernel

__all__ = ["calendar_fields_parallel", "calendar_fields_serial", "embedding_sum_parallel", "embedding_sum_serial",
           "BLOCK", "SUM_ROWS"]

#: timestamps per work item
BLOCK = 4096


@inline
def _days_in_year(y):
    if y % 4 == 0 and (y % 100 != 0 or y % 400 == 0):
        return 366
    return 365


@inline
def _split(t, per_second, tick_seconds):
    """``(day, second of day)`` of tick ``t`` (numba's ``//`` on int64 floors, as Python's)."""
    if per_second > 1:
        if per_second == 1000:
            secs = t // 1000
        elif per_second == 1000000:
            secs = t // 1000000
        elif per_second == 1000000000:
            secs = t // 1000000000
        else:
            secs = t // per_second
        day = secs // 86400
        return day, secs - day * 86400
    if tick_seconds == 1:
        day = t // 86400
        return day, t - day * 86400
    if tick_seconds == 60:
        day = t // 1440
        return day, (t - day * 1440) * 60
    if tick_seconds == 3600:
        day = t // 24
        return day, (t - day * 24) * 3600
    if tick_seconds == 86400:
        return t, t - t
    return t * 7, t - t


@inline
def _date(day, v):
    """The date fields of ``day`` (days since 1970-01-01) into ``v[3:8]``."""
    era = day // 146097
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
        doy = doy_mar + 60 + (1 if _days_in_year(year) == 366 else 0)
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
    v[3] = wd
    v[4] = mday
    v[5] = doy
    v[6] = month
    v[7] = (thursday - 1) // 7 + 1


def _calendar_fields(ticks, per_second, tick_seconds, fields, offsets, out):
    n = ticks.shape[0]
    n_fields = fields.shape[0]
    n_blocks = (n + BLOCK - 1) // BLOCK
    for b in prange(n_blocks):
        v = np.zeros(8, dtype=np.int64)
        last = np.int64(0)
        have = False
        for k in range(b * BLOCK, min(n, (b + 1) * BLOCK)):
            day, sod = _split(ticks[k], per_second, tick_seconds)
            if not have or day != last:
                _date(day, v)
                last = day
                have = True
            v[0] = sod % 60
            v[1] = sod // 60 % 60
            v[2] = sod // 3600
            for j in range(n_fields):
                out[k, j] = v[fields[j]] + offsets[j]


calendar_fields_parallel, calendar_fields_serial = kernel(_calendar_fields)


#: output rows per work item of the embedding sum
SUM_ROWS = 64


@inline
def _sum_row(table, picks, row):
    """``row = ((table[picks[0]] + table[picks[1]]) + ...)``: up to four rows added per pass
    over ``row`` (one store per value and pass), in the order of ``picks``."""
    d = row.shape[0]
    k = picks.shape[0]
    a = table[picks[0]]
    if k == 1:
        for c in range(d):
            row[c] = a[c]
        return
    b = table[picks[1]]
    if k == 2:
        for c in range(d):
            row[c] = a[c] + b[c]
        return
    e = table[picks[2]]
    if k == 3:
        for c in range(d):
            row[c] = (a[c] + b[c]) + e[c]
        return
    f = table[picks[3]]
    for c in range(d):
        row[c] = ((a[c] + b[c]) + e[c]) + f[c]
    j = 4
    while j < k:
        x = table[picks[j]]
        if k - j == 1:
            for c in range(d):
                row[c] = row[c] + x[c]
            j += 1
        elif k - j == 2:
            y = table[picks[j + 1]]
            for c in range(d):
                row[c] = (row[c] + x[c]) + y[c]
            j += 2
        else:
            y = table[picks[j + 1]]
            z = table[picks[j + 2]]
            for c in range(d):
                row[c] = ((row[c] + x[c]) + y[c]) + z[c]
            j += 3


def _embedding_sum(table, indices, out):
    """``out[r] = ((table[indices[r, 0]] + table[indices[r, 1]]) + ...)``, each addition in
    ``out``'s dtype (no fastmath: the order of the additions is kept)."""
    n = out.shape[0]
    n_blocks = (n + SUM_ROWS - 1) // SUM_ROWS
    for b in prange(n_blocks):
        for r in range(b * SUM_ROWS, min(n, (b + 1) * SUM_ROWS)):
            _sum_row(table, indices[r], out[r])


embedding_sum_parallel, embedding_sum_serial = kernel(_embedding_sum)
