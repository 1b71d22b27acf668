"""Informer's and Autoformer's fixed temporal embedding, from exact tables and exact marks.

``TemporalEmbedding(d_model, embed_type="fixed", freq)`` (zhouhaoyi/Informer2020
``models/embed.py``; thuml/Autoformer ``layers/Embed.py``) sums, per timestamp, one row of a
fixed sinusoid table per calendar mark: ``hour_x + weekday_x + day_x + month_x + minute_x``
(that order, in float32), the marks being ``time_features(..., timeenc=0)``'s (``utils/
timefeatures.py``, the data loaders): month (1..12, a 13-row table), day of month (1..31,
32 rows), weekday (Monday 0, 7 rows), hour (24 rows) and, for ``freq="t"``, the quarter
hour ``minute // 15`` (4 rows).  Each ``FixedEmbedding`` table is ``sin / cos(pos *
exp(arange(0, d, 2) * -(ln 10000 / d)))`` interleaved, i.e. the sinusoid spec's table
(:func:`fastpe.table`) of ``pos = 0 .. rows - 1``.

Here the marks come from the integer timestamps exactly (the registry's ``calendar_fields``),
the table is fastpe's (float32 within 1 ULP of the correctly rounded sinusoid, where the
module's own float32 ``exp`` / multiply / ``sin`` put it up to 1.6e-6 off), and the rows are summed in the
module's order in the output's dtype (the registry's ``embedding_sum``: one pass over the
output, each row's additions done in place): bit-identical to the module's own forward with
fastpe's tables as its weights.
"""

from __future__ import annotations

import numpy as np

from .. import _backends
from .._validate import MAX_D_MODEL, check_int
from ._calendar import field_rows
from ._timestamps import check_timestamps

__all__ = ["temporal_embedding", "temporal_marks", "TEMPORAL_FREQS"]

#: Informer's lower-cased ``freq`` -> the marks TemporalEmbedding reads (all: it indexes the
#: hour mark whatever the frequency, so 'd', 'b', 'w', 'm' marks break it)
TEMPORAL_FREQS: dict[str, tuple[str, ...]] = {
    "h": ("month", "day", "weekday", "hour"),
    "t": ("month", "day", "weekday", "hour", "minute"),
}
#: the module's sum, in its order (``hour_x + weekday_x + day_x + month_x + minute_x``); every
#: table is a prefix of one sinusoid table (rows 0 .. 31, or 0 .. 59 with ``minute_size=60``)
_SUM_ORDER = ("hour", "weekday", "day", "month", "minute")
_TABLES: dict[tuple[int, int, str], np.ndarray] = {}


def _table(d_model: int, rows: int, dtype: np.dtype) -> np.ndarray:
    """fastpe's sinusoid table of positions ``0 .. rows - 1`` (every FixedEmbedding's rows)."""
    key = (d_model, rows, dtype.name)
    t = _TABLES.get(key)
    if t is None:
        import fastpe

        t = fastpe.table(d_model, rows, dtype=dtype)
        t.setflags(write=False)
        if len(_TABLES) > 64:
            _TABLES.clear()
        _TABLES[key] = t
    return t


def _check_freq(freq) -> str:
    if not isinstance(freq, str):
        raise TypeError(f"freq must be 'h' or 't', got {type(freq).__name__}")
    f = freq.lower()
    if f not in TEMPORAL_FREQS:
        raise ValueError(f"freq must be 'h' (hourly marks) or 't' (with the minute mark), got {freq!r}: "
                         f"TemporalEmbedding reads the hour mark, which Informer's marks of {freq!r} do not hold")
    return f


def temporal_marks(timestamps, freq: str = "h", *, minute_size: int = 4, unit=None, backend=None) -> np.ndarray:
    """Informer's ``time_features(dates, timeenc=0, freq)`` marks, exactly: ``timestamps.shape
    + (4,)`` (``"h"``: month, day, weekday, hour) or ``+ (5,)`` (``"t"``: and ``minute // 15``,
    or the minute itself with ``minute_size=60``), int64."""
    f = _check_freq(freq)
    minute_size = _check_minute_size(minute_size)
    ticks, u = check_timestamps(timestamps, "timestamps", unit)
    marks = field_rows(ticks, u, TEMPORAL_FREQS[f], dtype=np.int64, backend=backend)
    if f == "t" and minute_size == 4:
        marks[:, 4] //= 15
    return marks.reshape(ticks.shape + (marks.shape[1],))


def _check_minute_size(minute_size) -> int:
    m = check_int("minute_size", minute_size)
    if m not in (4, 60):
        raise ValueError(f"minute_size must be 4 (quarter hours, Informer's) or 60 (minutes), got {m}")
    return m


def temporal_embedding(timestamps, d_model: int, freq: str = "h", *, embed: str = "fixed", minute_size: int = 4,
                       dtype="float32", out: np.ndarray | None = None, unit=None,
                       backend: str | None = None) -> np.ndarray:
    """Informer / Autoformer ``TemporalEmbedding`` (``embed_type="fixed"``) of ``timestamps``.

    ``timestamps``: anything :func:`fastpe.time._timestamps.check_timestamps` reads (a
    ``(batch, seq)`` ``datetime64`` array, say); ``freq`` ``"h"`` or ``"t"`` (Informer's
    lower-cased frequency: the minute mark and table only for ``"t"``); ``d_model`` even, at
    most 65536 (the module's ``w[:, 1::2] = cos(...)`` fails on an odd one: refused);
    ``minute_size`` 4 (Informer: ``minute // 15``) or 60 (a 60-row minute table of the minute
    itself).  ``dtype`` ``"float32"`` (the module's) or ``"float64"`` (fastpe's float64
    tables summed in float64).  Returns ``timestamps.shape + (d_model,)``; ``out``, if
    given (C-contiguous, that shape and dtype), is filled and returned.

    Each output row is ``T[hour] + T[weekday] + T[day] + T[month] (+ T[minute])``, summed left
    to right in ``dtype``, ``T`` fastpe's sinusoid table: bit-identical to the module with
    fastpe's tables as its weights.
    """
    if not isinstance(embed, str) or embed != "fixed":
        raise ValueError(f"embed must be 'fixed' (FixedEmbedding's sinusoid tables), got {embed!r}: "
                         f"'learned' tables are trained weights and 'timeF' is a linear layer, not a formula")
    f = _check_freq(freq)
    d = check_int("d_model", d_model, low=1, high=MAX_D_MODEL)
    if d % 2:
        raise ValueError(f"d_model must be even, got {d}: TemporalEmbedding's FixedEmbedding cannot build an "
                         f"odd width (its cosine columns are one fewer than its frequencies)")
    minute_size = _check_minute_size(minute_size)
    if isinstance(dtype, str) and dtype in ("float32", "float64"):
        dt = np.dtype(dtype)
    elif dtype in (np.float32, np.float64) or (isinstance(dtype, np.dtype) and dtype.name in ("float32", "float64")):
        dt = np.dtype(dtype)
    else:
        raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
    ticks, u = check_timestamps(timestamps, "timestamps", unit)
    shape = ticks.shape + (d,)
    if out is not None:
        if not isinstance(out, np.ndarray):
            raise TypeError(f"out must be a numpy array, got {type(out).__name__}")
        if out.shape != shape or out.dtype != dt:
            raise ValueError(f"out must have shape {shape} and dtype {dt.name}, got {out.shape} {out.dtype.name}")
        if not (out.flags.c_contiguous and out.flags.writeable):
            raise ValueError("out must be C-contiguous and writable")
        if np.shares_memory(out, ticks):  # pragma: no cover - ticks is always a fresh copy
            raise ValueError("out must not overlap timestamps")
    # the marks in the module's order of addition: hour, weekday, day, month (, minute)
    rows = field_rows(ticks, u, _SUM_ORDER[: len(TEMPORAL_FREQS[f])], dtype=np.int64, backend=backend)
    if f == "t" and minute_size == 4:
        rows[:, 4] //= 15
    table = _table(d, max(32, minute_size), dt)
    result = np.empty(shape, dtype=dt) if out is None else out
    if rows.shape[0]:
        _, module = _backends.resolve(backend)
        module.embedding_sum(table=table, indices=rows, out=result.reshape(-1, d))
    return result
