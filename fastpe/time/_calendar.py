"""GluonTS' calendar features, exact from the integer timestamp.

:func:`calendar_features` gives what GluonTS' ``time_features_from_frequency_str(freq)``
(``gluonts/time_feature/_base.py``) gives for a frequency, in its order, one column per
feature: each feature is a calendar field ``f`` of ``num`` values (``a = f - first``),
normalised as ``a / (num - 1) - 0.5``, in ``[-0.5, 0.5]``.  Here every field comes from the
int64 ticks in integer arithmetic (the registry's ``calendar_fields``) and every value is the
rational ``(2a - b) / (2b)`` (``b = num - 1``) rounded once to the output's dtype -- a table
of at most 366 correctly rounded values per feature, gathered.

GluonTS divides in float64 and then subtracts 0.5: in float64 that is two roundings, and
for many values (e.g. ``HourOfDay`` at 1 o'clock: ``1/23 - 0.5``) the result is 1 ULP from the
correctly rounded one; in float32, where GluonTS' ``AddTimeFeatures`` casts them (its
``dtype`` defaults to ``np.float32``), every value of every feature equals GluonTS' (the
tests check all of them).
"""

from __future__ import annotations

import re
from fractions import Fraction

import numpy as np

from .. import _backends, _dtypes
from .._exact.calendar import FIELD_CODES
from .._exact.rounding import round_fraction
from ._timestamps import check_timestamps

__all__ = ["calendar_features", "FEATURES", "features_for_freq", "FREQ_FAMILIES"]

#: GluonTS feature name -> (calendar field, first value of the field, number of values)
FEATURES: dict[str, tuple[str, int, int]] = {
    "SecondOfMinute": ("second", 0, 60),
    "MinuteOfHour": ("minute", 0, 60),
    "HourOfDay": ("hour", 0, 24),
    "DayOfWeek": ("weekday", 0, 7),
    "DayOfMonth": ("day", 1, 31),
    "DayOfYear": ("day_of_year", 1, 366),
    "MonthOfYear": ("month", 1, 12),
    "WeekOfYear": ("iso_week", 1, 53),
}
#: GluonTS' function names (``second_of_minute`` ..) of the same features
_SNAKE = {re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower(): name for name in FEATURES}

_S, _MI, _H, _DW, _DM, _DY, _MY, _WY = FEATURES
#: pandas offset family -> GluonTS' feature list (time_features_from_frequency_str)
FREQ_FAMILIES: dict[str, tuple[str, ...]] = {
    "year": (),
    "quarter": (_MY,),
    "month": (_MY,),
    "week": (_DM, _WY),
    "day": (_DW, _DM, _DY),
    "business_day": (_DW, _DM, _DY),
    "hour": (_H, _DW, _DM, _DY),
    "minute": (_MI, _H, _DW, _DM, _DY),
    "second": (_S, _MI, _H, _DW, _DM, _DY),
}
#: pandas' offset aliases (old and new spellings) -> family
_ALIASES = {
    "A": "year", "Y": "year", "YE": "year", "AS": "year", "YS": "year",
    "Q": "quarter", "QE": "quarter", "QS": "quarter",
    "M": "month", "ME": "month", "MS": "month",
    "W": "week",
    "D": "day", "d": "day",
    "B": "business_day", "C": "business_day",
    "H": "hour", "h": "hour",
    "T": "minute", "min": "minute",
    "S": "second", "s": "second",
}
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_WEEKDAYS = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")
_FREQ = re.compile(r"^\s*(\d*)\s*([A-Za-z]+)(?:-([A-Za-z]+))?\s*$")

#: unit -> (ticks a second, seconds a tick) as the calendar_fields operation takes them
_UNIT_ARGS = {"W": (1, 604800), "D": (1, 86400), "h": (1, 3600), "m": (1, 60), "s": (1, 1),
              "ms": (10**3, 1), "us": (10**6, 1), "ns": (10**9, 1), "ps": (10**12, 1),
              "fs": (10**15, 1), "as": (10**18, 1)}
_WEEK_LIMIT = (2**63 - 1) // 7

_FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")
#: timestamps whose fields are computed, then gathered into the features, at a time: the
#: fields (int32) stay in cache between the two passes instead of a fresh array of them all
CHUNK = 1 << 16
_INDEX_DTYPES = ("int32", "int64")


def features_for_freq(freq) -> tuple[str, ...]:
    """GluonTS' feature names for a pandas frequency string (``"H"``, ``"15min"``, ``"W-SUN"``,
    ``"ME"``, ...), in its order; a :class:`ValueError` for one GluonTS does not support
    (``"ms"``, ``"BH"``, ``"BA"`` ...: pandas offsets that are not subclasses of its list)."""
    if not isinstance(freq, str):
        raise TypeError(f"freq must be a pandas frequency string such as 'H' or '15min', got {type(freq).__name__}")
    m = _FREQ.match(freq)
    family = _ALIASES.get(m.group(2)) if m else None
    anchor = m.group(3) if m else None
    if family is not None and anchor is not None:
        ok = anchor.upper() in (_WEEKDAYS if family == "week" else _MONTHS) and family in (
            "week", "quarter", "year")
        family = family if ok else None
    if family is None:
        raise ValueError(f"freq {freq!r} is not a frequency GluonTS has time features for: give one of "
                         f"Y/A, Q, M/ME/MS, W, D, B, H/h, T/min, S/s (with a multiple such as '15min' and an "
                         f"anchor such as 'W-SUN' where pandas allows one)")
    return FREQ_FAMILIES[family]


def _feature_names(freq, features, index: bool) -> list[str]:
    if features is None:
        if freq is None:
            raise TypeError("calendar_features needs freq (or features=)")
        names = list(features_for_freq(freq))
        return [n + "Index" for n in names] if index else names
    if freq is not None:
        raise TypeError("give freq or features=, not both")
    if isinstance(features, str) or not hasattr(features, "__iter__"):
        raise TypeError(f"features must be a list of GluonTS feature names, got {type(features).__name__}")
    names = []
    for f in list(features):
        if not isinstance(f, str):
            raise TypeError(f"features must be GluonTS feature names, got {type(f).__name__} {f!r}")
        base, idx = (f[:-5], True) if f.endswith("Index") else (f, False)
        if f.endswith("_index"):
            base, idx = f[:-6], True
        base = _SNAKE.get(base, base)
        if base not in FEATURES:
            raise ValueError(f"features: unknown feature {f!r}; known: {', '.join(FEATURES)} and their *Index variants")
        names.append(base + ("Index" if idx or index else ""))
    return names


def _lut(name: str, dtype: np.dtype) -> np.ndarray:
    """The values of feature ``name`` at ``a = 0 .. num - 1``, each rounded once to ``dtype``."""
    base = name[:-5] if name.endswith("Index") else name
    _, _, num = FEATURES[base]
    if name.endswith("Index") or dtype.kind in "iu":
        return np.arange(num).astype(dtype)
    fmt = _dtypes.format_of(dtype)
    b = num - 1
    return np.array([round_fraction(Fraction(2 * a - b, 2 * b), fmt) for a in range(num)], dtype=np.float64).astype(dtype)


_LUTS: dict[tuple[str, str], np.ndarray] = {}


def _cached_lut(name: str, dtype: np.dtype) -> np.ndarray:
    key = (name, dtype.name)
    lut = _LUTS.get(key)
    if lut is None:
        lut = _LUTS[key] = _lut(name, dtype)
        lut.setflags(write=False)
    return lut


def field_rows(ticks: np.ndarray, unit: str, fields, *, offsets=None, dtype=np.int32,
                    backend=None) -> np.ndarray:
    """The calendar fields (names of :data:`fastpe._exact.calendar.FIELDS`) of checked int64
    ``ticks`` of ``unit``, each plus its ``offsets`` value (none by default): an
    ``(ticks.size, len(fields))`` integer array."""
    flat = np.ascontiguousarray(ticks, dtype=np.int64).reshape(-1)
    if unit == "W" and flat.size and (int(flat.max()) > _WEEK_LIMIT or int(flat.min()) < -_WEEK_LIMIT):
        raise ValueError("timestamps in weeks must be within +-(2**63 - 1) // 7 weeks (their days must fit int64)")
    per_second, tick_seconds = _UNIT_ARGS[unit]
    codes = np.array([FIELD_CODES[f] for f in fields], dtype=np.int64)
    add = np.zeros(codes.size, np.int64) if offsets is None else np.asarray(offsets, dtype=np.int64)
    out = np.empty((flat.size, codes.size), dtype=dtype)
    _, module = _backends.resolve(backend)
    if flat.size and codes.size:
        module.calendar_fields(ticks=flat, per_second=per_second, tick_seconds=tick_seconds, fields=codes,
                               offsets=add, out=out)
    return out


def _resolve_dtype(dtype, allowed: tuple[str, ...]) -> np.dtype:
    try:
        as_int = np.dtype(dtype) if not (isinstance(dtype, str) and dtype.strip().lower() == "bfloat16") else None
    except (TypeError, ValueError):
        as_int = None
    if as_int is not None and as_int.kind in "iub":
        if as_int.name not in allowed:
            raise ValueError(f"dtype must be one of {', '.join(allowed)}, got {as_int.name}"
                             + (" (integer dtypes hold the *Index features only)" if as_int.name in _INDEX_DTYPES
                                else ""))
        return as_int
    dt = _dtypes.resolve(dtype)
    if dt.name not in allowed:  # pragma: no cover - resolve gives only float formats
        raise ValueError(f"dtype must be one of {', '.join(allowed)}, got {dt.name}")
    return dt


def calendar_features(timestamps, freq=None, *, index: bool = False, features=None, unit=None, dtype=None,
                      out: np.ndarray | None = None, backend: str | None = None) -> np.ndarray:
    """GluonTS' time features of ``freq`` at every timestamp, exactly.

    ``timestamps``: anything :func:`fastpe.time._timestamps.check_timestamps` reads
    (``datetime64`` of any unit, Python dates, a pandas index, or integers with ``unit=``).
    ``freq``: a pandas frequency string; the features are GluonTS'
    ``time_features_from_frequency_str(freq)``, in its order (``"H"``: ``HourOfDay,
    DayOfWeek, DayOfMonth, DayOfYear``).  ``index=True`` gives their ``*Index`` variants (the
    0-based raw values: GluonTS' ``hour_of_day_index`` ...).  ``features=`` picks a list by
    GluonTS' names instead of ``freq`` (``["HourOfDay", "WeekOfYearIndex"]``; the snake-case
    function names work too).

    Returns ``timestamps.shape + (n_features,)``; ``dtype`` ``"float32"`` (default: what
    GluonTS' ``AddTimeFeatures`` casts to), ``"float64"``, ``"float16"``, ``"bfloat16"``, or
    ``"int32"``/``"int64"`` when every feature is an ``*Index`` one.  Each normalised value is
    ``(2a - b) / (2b)`` rounded once to the dtype.  ``out``, if given, is filled and returned.
    Note GluonTS' own layout is ``(n_features, time)`` (``np.vstack`` of the features): this
    is its transpose.
    """
    if not isinstance(index, (bool, np.bool_)):
        raise TypeError(f"index must be a bool, got {type(index).__name__}")
    names = _feature_names(freq, features, bool(index))
    all_index = all(n.endswith("Index") for n in names)
    allowed = _FLOAT_DTYPES + (_INDEX_DTYPES if all_index else ())
    if dtype is not None:
        dt = _resolve_dtype(dtype, allowed)
    ticks, u = check_timestamps(timestamps, "timestamps", unit)
    shape = ticks.shape + (len(names),)
    if out is not None:
        if not isinstance(out, np.ndarray):
            raise TypeError(f"out must be a numpy array, got {type(out).__name__}")
        if out.dtype.name not in allowed:
            raise ValueError(f"out must have dtype one of {', '.join(allowed)}, got {out.dtype.name}")
        if out.shape != shape:
            raise ValueError(f"out must have shape {shape}, got {out.shape}")
        if not (out.flags.c_contiguous and out.flags.writeable):
            raise ValueError("out must be C-contiguous and writable")
        if dtype is not None and out.dtype != dt:
            raise ValueError(f"dtype is {dt.name} but out has dtype {out.dtype.name}: give one of them")
        result = out
    else:
        result = np.empty(shape, dtype=np.float32 if dtype is None else dt)
    if not names or not ticks.size:
        return result
    fields = [FEATURES[n[:-5] if n.endswith("Index") else n][0] for n in names]
    firsts = np.array([FEATURES[n[:-5] if n.endswith("Index") else n][1] for n in names], dtype=np.int64)
    # one table of every feature's values, feature after feature; the kernel writes each
    # field as its row in that table: the 0-based value a = field - first, plus the start
    luts = [_cached_lut(n, result.dtype) for n in names]
    starts = np.cumsum([0] + [len(t) for t in luts[:-1]]).astype(np.int64)
    table, offsets = np.concatenate(luts), starts - firsts
    flat, target = ticks.reshape(-1), result.reshape(-1, len(names))
    for lo in range(0, flat.size, CHUNK):  # the rows of a chunk stay in cache for the gather
        rows = field_rows(flat[lo:lo + CHUNK], u, fields, offsets=offsets, backend=backend)
        np.take(table, rows, out=target[lo:lo + CHUNK], mode="clip")
    return result
