"""Timestamps as exact integers: what every :mod:`fastpe.time` function reads.

A timestamp is taken as an integer count of ticks of one unit -- never as a float: a Unix
time in seconds (~1.7e9) has a float32 spacing of 128 s, and a float64 count of
nanoseconds since 1970 (~1.7e18) a spacing of 256 ns.  :func:`check_timestamps` turns what
users hold into ``(ticks, unit)``, losing nothing:

* numpy ``datetime64`` / ``timedelta64`` arrays of any linear unit (``'W'`` .. ``'as'``,
  multiples such as ``datetime64[15m]`` included: the multiple is folded into the ticks);
  ``datetime64[M]`` and ``[Y]`` are converted to days exactly (the first day of the month
  or year, as numpy defines them); a ``timedelta64`` in months or years has no fixed length
  and is refused;
* lists and tuples of ``datetime.datetime``, ``datetime.date``, ``datetime.timedelta`` and
  ``np.datetime64`` / ``np.timedelta64`` values (one kind: dates or durations), in the
  finest unit among them;
* objects with ``.to_numpy()`` (a pandas ``Series`` or ``DatetimeIndex``), timezone-naive;
* integer arrays (and floats holding whole numbers), as counts of ``unit``, which must then
  be given.

Refused, with a :class:`ValueError` or :class:`TypeError` naming the argument: ``NaT``,
timezone-aware values (a UTC offset is not a unit of time: convert to naive UTC first),
bools, strings, floats with a fraction, integers outside int64, a mix of dates, durations
and numbers, a unit conversion that overflows int64.
"""

from __future__ import annotations

import datetime as _dt
import numbers
from fractions import Fraction

import numpy as np

__all__ = ["check_timestamps", "check_unit", "TICK_SECONDS", "UNITS", "ticks_to"]

#: the length of one tick of each linear numpy unit, in seconds, exactly
TICK_SECONDS: dict[str, Fraction] = {
    "W": Fraction(604800),
    "D": Fraction(86400),
    "h": Fraction(3600),
    "m": Fraction(60),
    "s": Fraction(1),
    "ms": Fraction(1, 10**3),
    "us": Fraction(1, 10**6),
    "ns": Fraction(1, 10**9),
    "ps": Fraction(1, 10**12),
    "fs": Fraction(1, 10**15),
    "as": Fraction(1, 10**18),
}
#: the linear units, coarsest first
UNITS: tuple[str, ...] = tuple(TICK_SECONDS)

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def check_unit(unit, name: str = "unit") -> str:
    """``unit`` as one of :data:`UNITS` (``'μs'`` is read as ``'us'``)."""
    if not isinstance(unit, str):
        raise TypeError(f"{name} must be a unit name such as 'D', 's' or 'ns', got {type(unit).__name__} {unit!r}")
    u = "us" if unit == "\u03bcs" else unit
    if u not in TICK_SECONDS:
        hint = " (months and years have no fixed length)" if u in ("M", "Y") else ""
        raise ValueError(f"{name} must be one of {', '.join(UNITS)}, got {unit!r}{hint}")
    return u


def _factor(unit: str, to: str) -> Fraction:
    return TICK_SECONDS[unit] / TICK_SECONDS[to]


def ticks_to(ticks: np.ndarray, unit: str, to: str, name: str = "timestamps") -> np.ndarray:
    """``ticks`` of ``unit`` as whole ticks of ``to``, exactly: rounded towards -inf when
    ``to`` is coarser; a :class:`ValueError` when a finer ``to`` overflows int64."""
    f = _factor(unit, to)
    ticks = np.asarray(ticks, dtype=np.int64)
    if f.denominator != 1:  # coarser: every ratio of two units is an integer or its inverse
        return np.floor_divide(ticks, np.int64(f.denominator))
    a = f.numerator
    if a == 1:
        return ticks.copy()
    if ticks.size:
        lo, hi = int(ticks.min()), int(ticks.max())
        if hi > _INT64_MAX // a or lo < _INT64_MIN // a:
            raise ValueError(f"{name} do not fit int64 in unit {to!r}: the largest magnitude is "
                             f"{max(abs(lo), abs(hi))} {unit}")
    return ticks * np.int64(a)


def _first_nat(arr: np.ndarray, name: str) -> None:
    bad = np.isnat(arr)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name} must not hold NaT, found at index {where if arr.ndim != 1 else where[0]}")


def _from_datetime64(arr: np.ndarray, name: str) -> tuple[np.ndarray, str]:
    """A ``datetime64``/``timedelta64`` array as ``(int64 ticks, unit)``."""
    _first_nat(arr, name)
    unit, count = np.datetime_data(arr.dtype)
    if unit == "generic":
        if arr.size:
            raise TypeError(f"{name} must have a unit, got {arr.dtype}")
        return np.zeros(arr.shape, dtype=np.int64), "s"
    if unit in ("M", "Y"):
        if arr.dtype.kind == "m":
            raise ValueError(f"{name}: a duration in {'months' if unit == 'M' else 'years'} has no fixed "
                             f"length; give it in days or finer")
        arr = arr.astype("datetime64[D]")  # exact: the first day of the month or year
        unit, count = "D", 1
    if unit not in TICK_SECONDS:  # pragma: no cover - numpy has no other linear unit
        raise TypeError(f"{name} has an unsupported unit {unit!r}")
    ticks = np.array(arr.view(np.int64), order="C")  # a copy: never a view of the caller's array
    if count != 1:
        ticks = _scaled(ticks, count, unit, name)
    return ticks, unit


def _scaled(ticks: np.ndarray, count: int, unit: str, name: str) -> np.ndarray:
    if ticks.size:
        lo, hi = int(ticks.min()), int(ticks.max())
        if hi > _INT64_MAX // count or lo < _INT64_MIN // count:
            raise ValueError(f"{name} do not fit int64 as ticks of one {unit}")
    return ticks * np.int64(count)


def _scalar_unit(v) -> tuple[str, str]:
    """``(kind, unit)`` of one object element: kind ``'M'`` a date, ``'m'`` a duration."""
    if isinstance(v, (np.datetime64, np.timedelta64)):
        unit = np.datetime_data(v.dtype)[0]
        kind = "M" if isinstance(v, np.datetime64) else "m"
        return kind, unit
    if isinstance(v, _dt.datetime):
        return "M", "us"
    if isinstance(v, _dt.date):
        return "M", "D"
    if isinstance(v, _dt.timedelta):
        return "m", "us"
    return "", ""


def _from_objects(arr: np.ndarray, name: str) -> tuple[np.ndarray, str]:
    """An object array of dates or durations as ``(ticks, unit)`` in the finest unit."""
    kinds, units = set(), set()
    for v in arr.reshape(-1):
        if isinstance(v, _dt.datetime) and v.tzinfo is not None:
            raise ValueError(f"{name} must be timezone-naive, got {v!r}: convert to naive UTC first")
        kind, unit = _scalar_unit(v)
        if not kind:
            raise TypeError(f"{name} must hold dates or durations of one kind, got {type(v).__name__} {v!r}")
        kinds.add(kind)
        units.add(unit)
    if len(kinds) > 1:
        raise TypeError(f"{name} mixes dates and durations")
    linear = [u for u in units if u in TICK_SECONDS] or ["D"]
    finest = max(linear, key=UNITS.index)
    dtype = np.dtype(f"{'datetime64' if 'M' in kinds else 'timedelta64'}[{finest}]")
    items = arr.reshape(-1)
    out = np.empty(items.shape, dtype=dtype)
    for i, v in enumerate(items):
        if isinstance(v, (np.datetime64, np.timedelta64)):
            if np.isnat(v):
                raise ValueError(f"{name} must not hold NaT, found at index {i}")
            t, u = _from_datetime64(np.array(v), name)
            out[i] = ticks_to(t.reshape(1), u, finest, name).view(dtype)[0]
        else:
            out[i] = np.array(v, dtype=dtype)
    return _from_datetime64(out.reshape(arr.shape), name)


def _from_numbers(arr: np.ndarray, name: str, unit, original) -> tuple[np.ndarray, str]:
    if unit is None:
        raise TypeError(f"{name} holds numbers, not dates: give unit= (the length of one tick, e.g. 'D' or 's')")
    unit = check_unit(unit)
    kind = arr.dtype.kind
    if not isinstance(original, np.ndarray) and arr.size and kind in "iuf":
        items = np.asarray(original, dtype=object).reshape(-1)
        if any(isinstance(v, (bool, np.bool_)) for v in items):
            raise TypeError(f"{name} must hold integers, got a bool among them")
    if kind in "iu":
        if kind == "u" and arr.size and int(arr.max()) > _INT64_MAX:
            raise ValueError(f"{name} must fit int64, got {int(arr.max())}")
        return np.array(arr, dtype=np.int64, order="C"), unit
    if kind == "f":
        if not np.isfinite(arr).all():
            raise ValueError(f"{name} must be finite, got NaN or inf")
        whole = arr == np.floor(arr)
        if not whole.all():
            raise ValueError(f"{name} must be whole numbers of {unit!r}, got {float(arr[~whole][0])!r}")
        if arr.size and not (-(2.0**63) <= float(arr.min()) and float(arr.max()) < 2.0**63):
            raise ValueError(f"{name} must fit int64, got {float(np.abs(arr).max())!r}")
        return np.array(arr, dtype=np.int64, order="C"), unit
    if kind == "O":
        for v in arr.reshape(-1):
            if not isinstance(v, (numbers.Integral, np.integer)) or isinstance(v, (bool, np.bool_)):
                raise TypeError(f"{name} must hold integers or dates, got {type(v).__name__} {v!r}")
            if not _INT64_MIN <= int(v) <= _INT64_MAX:
                raise ValueError(f"{name} must fit int64, got {int(v)}")
        return np.array([int(v) for v in arr.reshape(-1)], dtype=np.int64).reshape(arr.shape), unit
    raise TypeError(f"{name} must hold dates or integers, got dtype {arr.dtype}")


def _as_array(value, name: str, dtype) -> np.ndarray:
    try:
        return np.asarray(value, dtype=dtype)
    except (ValueError, TypeError) as exc:  # ragged nested lists and the like
        raise ValueError(f"{name} must be an array of dates or integers: {exc}") from None


def check_timestamps(timestamps, name: str = "timestamps", unit=None) -> tuple[np.ndarray, str]:
    """``timestamps`` as ``(ticks, unit)``: C-contiguous int64 ticks of the input's shape and
    the numpy unit of one tick.  ``unit`` is the unit of integer input (required then) and is
    checked but not used for dates, which bring their own.  The input is never modified."""
    if unit is not None:
        unit = check_unit(unit)
    if isinstance(timestamps, (str, bytes)):
        raise TypeError(f"{name} must be an array of dates or integers, got {type(timestamps).__name__}")
    if isinstance(timestamps, (_dt.date, _dt.timedelta, np.datetime64, np.timedelta64)):
        timestamps = [timestamps]
        scalar = True
    else:
        scalar = False
    dtype = getattr(timestamps, "dtype", None)
    if getattr(dtype, "tz", None) is not None:
        raise ValueError(f"{name} must be timezone-naive, got {dtype}: convert to naive UTC first")
    if not isinstance(timestamps, np.ndarray) and hasattr(timestamps, "to_numpy"):
        timestamps = timestamps.to_numpy()
    if not isinstance(timestamps, np.ndarray):
        # a sequence of dates goes element by element: numpy's own conversion of mixed
        # units to the finest one wraps around silently where it overflows
        objects = _as_array(timestamps, name, object)
        if any(_scalar_unit(v)[0] for v in objects.reshape(-1)):
            ticks, u = _from_objects(objects, name)
            return (ticks.reshape(()) if scalar else ticks), u
    arr = _as_array(timestamps, name, None)
    kind = arr.dtype.kind
    if kind == "b":
        raise TypeError(f"{name} must hold dates or integers, got booleans")
    if kind in "Mm":
        ticks, u = _from_datetime64(arr, name)
    elif kind == "O" and arr.size and _scalar_unit(arr.reshape(-1)[0])[0]:
        ticks, u = _from_objects(arr, name)
    elif kind in "iufO":
        ticks, u = _from_numbers(arr, name, unit, timestamps)
    else:
        raise TypeError(f"{name} must hold dates or integers, got dtype {arr.dtype}")
    if scalar:
        ticks = ticks.reshape(())
    return np.require(ticks, requirements="C"), u
