"""Prophet's Fourier seasonality features, exact from the integer timestamp.

Prophet (``Prophet.fourier_series`` in prophet/forecaster.py) takes ``t`` = days since
1970-01-01 as a float64 and writes column ``2(k-1)`` = ``sin(2 pi k t / P)`` and column
``2(k-1)+1`` = ``cos(2 pi k t / P)`` for ``k = 1 .. order``.  Here the phase is exact: with
the tick ``tau`` (seconds), the unit ``u`` of the period (seconds) and the period's binary
value ``P``, harmonic ``k`` of a timestamp of ``t`` ticks is ``frac(k t tau / (u P))``
turns, a rational computed without rounding (:mod:`fastpe._plans.time`: exact residues
``k t N mod D`` when the frequency's denominator ``D`` is below ``2**62`` -- every period
that is a short binary fraction of days with any tick down to a nanosecond, e.g. 365.25,
30.5, 7, 1 --, else split words within ``2**-81`` of a turn), then one ``sin`` and one
``cos``: float32 within 1 ULP of the correctly rounded value (in practice correctly rounded
but for a few in a million), float64 within ``2**-45`` (typically ``2**-52``), float16 and
bfloat16 correctly rounded.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from .. import _backends
from .._exact import time as _reference
from .._validate import check_int, check_positive
from .._plans.time import MAX_ORDER
from ._timestamps import TICK_SECONDS, check_timestamps, check_unit

__all__ = ["fourier_features", "fourier_frequency"]


def fourier_frequency(tick_unit: str, unit: str, period: float) -> Fraction:
    """The exact frequency in turns per tick: ``TICK_SECONDS[tick_unit] / (TICK_SECONDS[unit]
    * period)``, ``period`` taken at its double's value."""
    return TICK_SECONDS[tick_unit] / (TICK_SECONDS[unit] * Fraction(period))


def _out_array(out, shape, dtype, timestamps):
    from ..sinusoid import output_array

    inputs = (("timestamps", timestamps),) if isinstance(timestamps, np.ndarray) else ()
    return output_array(out, shape, dtype, inputs, default=np.float64)


def fill_fourier(module, ticks: np.ndarray, v: Fraction, order: int, out: np.ndarray) -> None:
    """Rows of ``out`` (``(n, 2 order)``, any table dtype) for the int64 ``ticks`` and the
    frequency ``v`` (turns per tick) on the backend ``module``; unchecked."""
    n, width = out.shape
    if n == 0:
        return
    num, den = v.numerator, v.denominator
    if out.dtype in (np.float32, np.float64):
        module.fourier_ticks(ticks=ticks, numerator=num, denominator=den, order=order, out=out)
        return
    from ..sinusoid import narrow_into

    def fill32(r0, r1, part):
        module.fourier_ticks(ticks=np.ascontiguousarray(ticks[r0:r1]), numerator=num, denominator=den,
                             order=order, out=part)

    def fill64(rows):
        values = np.empty((rows.size, width), dtype=np.float64)
        module.fourier_ticks(ticks=np.ascontiguousarray(ticks[rows]), numerator=num, denominator=den,
                             order=order, out=values)
        return values

    def exact(r, j, fmt):
        k = j // 2 + 1
        q = Fraction(k * int(ticks[r]) * num % den, den)
        return _reference.sin_cos_turn(q, fmt)[j % 2]

    narrow_into(out, fill32, exact, fill64, module)


def fourier_features(timestamps, period, order, *, unit="D", timestamp_unit=None, dtype=None, out=None,
                     backend=None) -> np.ndarray:
    """Prophet's Fourier seasonality features of ``timestamps``, exact.

    ``timestamps``: anything :func:`fastpe.time._timestamps.check_timestamps` reads
    (``datetime64`` of any unit, Python dates, a pandas ``Series``/``DatetimeIndex``, or
    integer counts of ``unit`` since 1970-01-01).  ``period``: a positive finite real in
    units of ``unit`` (``365.25``, ``7``, ``30.5``, ``1 / 24``...), taken exactly as its
    double.  ``order``: the number of harmonics, ``1 .. 16384``.  ``unit``: the unit of
    ``period`` and of integer timestamps (``'D'``, days, by default, as Prophet);
    ``timestamp_unit``: the unit of integer timestamps when it is another (``'ns'`` for
    pandas' ``asi8``, say).

    Returns ``timestamps.shape + (2 * order,)``: column ``2(k-1)`` is
    ``sin(2 pi k t / period)``, column ``2(k-1)+1`` its cosine, ``k = 1 .. order`` (Prophet's
    order), for ``t`` the exact time since 1970 in ``unit`` -- not rounded to a float, nor
    floored to whole seconds as Prophet's ``dates // 10**9`` does.  ``dtype``: float64 by
    default (Prophet's), float32, float16 or bfloat16 (each correctly rounded from the exact
    value but for float32's 1 ULP and float64's ``2**-45``); ``out``: a C-contiguous array of
    that shape to fill instead.
    """
    unit = check_unit(unit)
    ts_unit = unit if timestamp_unit is None else check_unit(timestamp_unit, "timestamp_unit")
    ticks, tick_unit = check_timestamps(timestamps, "timestamps", unit=ts_unit)
    if isinstance(timestamps, (int, np.integer)) and not isinstance(timestamps, (bool, np.bool_)):
        ticks = ticks.reshape(())  # a plain number: check_timestamps gives it a shape of (1,)
    period = check_positive("period", period)
    order = check_int("order", order, low=1, high=MAX_ORDER)
    shape = ticks.shape + (2 * order,)
    result = _out_array(out, shape, dtype, timestamps)
    _, module = _backends.resolve(backend)
    v = fourier_frequency(tick_unit, unit, period)
    flat = np.ascontiguousarray(ticks.reshape(-1))
    fill_fourier(module, flat, v, order, result.reshape(flat.size, 2 * order))
    return result
