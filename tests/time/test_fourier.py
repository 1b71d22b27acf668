"""fastpe.time.fourier_features: Prophet's seasonality features, exact from the integer.

Prophet's formula is written out here in numpy float64 as ``Prophet.fourier_series`` has it
(prophet/forecaster.py: ``t = dates.to_numpy(dtype=np.int64) // NANOSECONDS_TO_SECONDS /
(3600 * 24.)``, ``x_T = t * pi * 2``, column ``2i`` ``sin(x_T (i + 1) / period)``, column
``2i + 1`` its cosine); the true values come from mpmath at 200 bits.
"""

from __future__ import annotations

import datetime as dt
import time
from fractions import Fraction

import mpmath
import numpy as np
import pytest

import fastpe.time as ft
from conftest import AVAILABLE
from support.oracle import mp_round, ulp_distance

mpmath.mp.prec = 200
NS = 10**9


def prophet_fourier(dates_ns: np.ndarray, period: float, order: int) -> np.ndarray:
    """Prophet's ``fourier_series``, in numpy float64, from int64 nanoseconds."""
    t = dates_ns.astype(np.int64) // NS / (3600 * 24.0)
    x_t = t * np.pi * 2
    out = np.empty((dates_ns.shape[0], 2 * order))
    for i in range(order):
        c = x_t * (i + 1) / period
        out[:, 2 * i] = np.sin(c)
        out[:, 2 * i + 1] = np.cos(c)
    return out


def mp_fourier(ticks, tick_seconds, unit_seconds, period: float, order: int, fmt: str) -> np.ndarray:
    """The true values rounded to ``fmt``: ``2 pi k t tick / (unit period)`` in mpmath."""
    out = np.empty((len(ticks), 2 * order), dtype=np.float64)
    for r, t in enumerate(ticks):
        # the rational turn reduced exactly first: mpmath's sin of a 2**63-sized angle would
        # need its working precision to cover the integer part
        q = Fraction(int(t)) * Fraction(tick_seconds) / (Fraction(unit_seconds) * Fraction(period))
        for k in range(1, order + 1):
            turn = (k * q) % 1
            x = 2 * mpmath.pi * mpmath.mpf(turn.numerator) / turn.denominator
            out[r, 2 * k - 2] = mp_round(mpmath.sin(x), fmt)
            out[r, 2 * k - 1] = mp_round(mpmath.cos(x), fmt)
    return out


def _hourly_2024(step: int = 1) -> np.ndarray:
    return np.arange("2024-01-01T00", "2025-01-01T00", step, dtype="datetime64[h]").astype("datetime64[ns]")


# ----------------------------------------------------------------------------- Prophet


def test_parity_with_prophets_formula_on_whole_seconds():
    rng = np.random.default_rng(1)
    ts = _hourly_2024(7)
    ts = ts + rng.integers(0, 3600, ts.size).astype("timedelta64[s]")
    for period, order in ((365.25, 10), (7.0, 3), (30.5, 5)):
        got = ft.fourier_features(ts, period, order)
        want = prophet_fourier(ts.view(np.int64), period, order)
        assert got.dtype == np.float64 and got.shape == want.shape
        # Prophet's float64 phase is off by up to ~2e-11 at 2024's magnitudes (the more, the
        # higher k / period); the columns match
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)


def test_prophets_float64_error_and_fastpes_against_mpmath():
    """Prophet's float64 features of 2024 timestamps (yearly, order 10) are ~1e-12 off the
    true values of its own (floored-to-seconds) times; fastpe's are within 2**-45."""
    rng = np.random.default_rng(2)
    ts = _hourly_2024(61)
    ts = ts + rng.integers(0, 3600, ts.size).astype("timedelta64[s]")
    ticks = ts.view(np.int64)
    truth = mp_fourier(ticks // NS, 1, 86400, 365.25, 10, "float64")
    prophet_err = np.abs(prophet_fourier(ticks, 365.25, 10) - truth).max()
    ours = ft.fourier_features(ts, 365.25, 10)
    ours_err = np.abs(ours - truth).max()
    assert 1e-14 < prophet_err < 1e-10
    assert ours_err <= 2.0**-45
    assert ours_err * 100 < prophet_err


def test_float32_from_float32_unix_seconds_is_off_by_a_hundredth_radian():
    """The motivating failure: a daily feature from a float32 Unix time in seconds (spacing
    128 s in 2024) is ~0.01 rad off; fastpe's float32 is within 1 ULP of the true value."""
    ts = _hourly_2024(13) + np.timedelta64(1234, "s")
    secs = ts.astype("datetime64[s]").view(np.int64)
    t32 = secs.astype(np.float32)
    naive = np.float32(2 * np.pi) * t32 / np.float32(86400)
    true_angle = 2 * np.pi * (secs % 86400) / 86400
    err = np.abs((naive.astype(np.float64) - true_angle + np.pi) % (2 * np.pi) - np.pi)
    assert err.max() > 0.005
    got = ft.fourier_features(ts, 1.0, 2, dtype="float32")
    truth = mp_fourier(secs, 1, 86400, 1.0, 2, "float32")
    assert ulp_distance(got, truth.astype(np.float32)).max() <= 1


@pytest.mark.any_backend
@pytest.mark.parametrize("backend", AVAILABLE)
@pytest.mark.parametrize("period, unit, tick", [(365.25, "D", "ns"), (30.5, "D", "s"), (1 / 24, "D", "ns"),
                                                (0.1, "h", "ms"), (7.0, "D", "us")])
def test_within_one_ulp_of_mpmath_everywhere(backend, period, unit, tick):
    """Pre-1970, around now, near the int64 limits of the tick, both kernel routes."""
    rng = np.random.default_rng(3)
    top = 2**63 - 1
    ticks = np.concatenate([
        np.array([0, 1, -1, top, -top, top - 12345, -(2**62), 2**40 + 3], dtype=np.int64),
        (rng.uniform(-1, 1, 12) * 2.0 ** rng.uniform(0, 62.9, 12)).astype(np.int64)])
    ts = ticks.view(f"datetime64[{tick}]")
    secs = {"ns": "1/1000000000", "us": "1/1000000", "ms": "1/1000", "s": "1"}[tick]
    unit_s = {"D": 86400, "h": 3600}[unit]
    t32 = ft.fourier_features(ts, period, 3, unit=unit, dtype="float32", backend=backend)
    truth32 = mp_fourier(ticks, Fraction(secs), unit_s, period, 3, "float32")
    assert ulp_distance(t32, truth32.astype(np.float32)).max() <= 1
    t64 = ft.fourier_features(ts, period, 3, unit=unit, backend=backend)
    truth64 = mp_fourier(ticks, Fraction(secs), unit_s, period, 3, "float64")
    assert np.abs(t64 - truth64).max() <= 2.0**-45


# ---------------------------------------------------------------------------- exactness


def test_quarter_turns_are_exact_zeros_and_ones():
    """Daily seasonality at hourly timestamps: 6 h is a quarter turn, the cosine exactly 0."""
    ts = np.arange("2024-03-01T00", "2024-03-02T01", dtype="datetime64[h]")
    for dtype in ("float32", "float64"):
        f = ft.fourier_features(ts.astype("datetime64[ns]"), 1.0, 4, dtype=dtype)
        assert f[6, 1] == 0.0 and not np.signbit(f[6, 1]) and f[6, 0] == 1.0
        assert f[12, 0] == 0.0 and not np.signbit(f[12, 0]) and f[12, 1] == -1.0
        assert f[18, 0] == -1.0 and f[18, 1] == 0.0
        assert f[3, 3] == 0.0 and f[3, 2] == 1.0  # k = 2 at 3 h
        assert (f[0, 1::2] == 1.0).all() and (f[0, 0::2] == 0.0).all()


def test_units_and_timestamp_kinds_agree():
    days = np.array([-800000, -1, 0, 1, 19723, 2932896], dtype=np.int64)
    by_day = ft.fourier_features(days, 365.25, 4)
    assert np.array_equal(by_day, ft.fourier_features(days.view("datetime64[D]"), 365.25, 4))
    assert np.array_equal(by_day, ft.fourier_features(days.view("datetime64[D]").astype("datetime64[s]"), 365.25, 4))
    assert np.array_equal(by_day, ft.fourier_features(days * 24, 365.25 * 24, 4, unit="h"))
    ns = days[1:5] * 86400 * 10**9  # the days int64 nanoseconds reach
    assert np.array_equal(by_day[1:5], ft.fourier_features(ns, 365.25, 4, timestamp_unit="ns"))
    dates = [dt.date(1970, 1, 1) + dt.timedelta(days=int(d)) for d in days[1:5]]
    assert np.array_equal(by_day[1:5], ft.fourier_features(dates, 365.25, 4))
    # a weekly period and whole weeks: every phase is a whole turn
    w = ft.fourier_features(np.arange(-5, 5) * 7, 7, 3)
    assert (w[:, 0::2] == 0).all() and (w[:, 1::2] == 1).all()


def test_shapes_out_and_narrow_dtypes():
    ts = np.arange("2024-01-01", "2024-01-13", dtype="datetime64[D]").reshape(3, 4)
    f = ft.fourier_features(ts, 7, 2)
    assert f.shape == (3, 4, 4)
    assert np.array_equal(f.reshape(12, 4), ft.fourier_features(ts.reshape(-1), 7, 2))
    assert ft.fourier_features(np.datetime64("2024-05-01"), 7, 1).shape == (2,)
    assert ft.fourier_features(19723, 7, 1).shape == (2,)
    out = np.full((12, 4), np.nan, dtype=np.float32)
    assert ft.fourier_features(ts.reshape(-1), 7, 2, out=out) is out
    assert np.array_equal(out, ft.fourier_features(ts.reshape(-1), 7, 2, dtype="float32"))
    truth = mp_fourier(ts.reshape(-1).view(np.int64), 86400, 86400, 7.0, 2, "float16")
    h = ft.fourier_features(ts.reshape(-1), 7, 2, dtype="float16")
    assert h.dtype == np.float16 and np.array_equal(h.astype(np.float64), truth)
    pytest.importorskip("ml_dtypes")
    b = ft.fourier_features(ts.reshape(-1), 30.5, 2, dtype="bfloat16")
    truth = mp_fourier(ts.reshape(-1).view(np.int64), 86400, 86400, 30.5, 2, "bfloat16")
    assert np.array_equal(b.astype(np.float64), truth)


# ----------------------------------------------------------------------------- refusals


@pytest.mark.any_backend
@pytest.mark.parametrize("kwargs, exc, word", [
    (dict(period=0), ValueError, "period"), (dict(period=-7), ValueError, "period"),
    (dict(period=float("nan")), ValueError, "period"), (dict(period=True), TypeError, "period"),
    (dict(period="7"), TypeError, "period"), (dict(order=0), ValueError, "order"),
    (dict(order=2.0), TypeError, "order"), (dict(order=1 << 20), ValueError, "order"),
    (dict(unit="M"), ValueError, "unit"), (dict(unit=3), TypeError, "unit"),
    (dict(dtype="int8"), (TypeError, ValueError), "dtype"),
])
def test_bad_arguments_are_refused(kwargs, exc, word):
    args = dict(timestamps=np.arange(5), period=7.0, order=2)
    args.update(kwargs)
    with pytest.raises(exc, match=word):
        ft.fourier_features(**args)


@pytest.mark.any_backend
def test_bad_timestamps_and_out_leave_out_untouched():
    out = np.full((3, 4), 7.0)
    with pytest.raises(ValueError, match="timestamps"):
        ft.fourier_features(np.array([1.5, 2.0, 3.0]), 7, 2, out=out)
    with pytest.raises(TypeError, match="timestamps"):
        ft.fourier_features(np.array([True, False, True]), 7, 2, out=out)
    with pytest.raises(ValueError, match="timestamps"):
        ft.fourier_features(np.array(["2024-01-01", "NaT", "2024-01-02"], dtype="datetime64[D]"), 7, 2, out=out)
    with pytest.raises(ValueError, match="out"):
        ft.fourier_features(np.arange(3), 7, 3, out=out)
    with pytest.raises(ValueError, match="dtype"):
        ft.fourier_features(np.arange(3), 7, 2, out=out, dtype="float32")
    assert (out == 7.0).all()


# ------------------------------------------------------------------------- threads and fork


@pytest.mark.any_backend
@pytest.mark.parametrize("backend", [b for b in AVAILABLE if b != "python"])
def test_threads_at_once_and_a_forked_child_get_the_same_bits(backend):
    """Large calls (the parallel paths: the worker pool, numba's threads) from eight threads
    at once, then in an ``os.fork`` child of this used process: the serial bits, no hang."""
    import os

    from support.threads import failures_at_once

    ts = (np.datetime64("2024-01-01T00", "h") + np.arange(40_000)).astype("datetime64[ns]")
    secs = np.arange(-20_000, 20_000, dtype=np.int64) * 977
    want_f = ft.fourier_features(ts, 365.25, 6, backend=backend)
    want_t = ft.time_encoding(secs, 16, backend=backend)
    jobs = [k % 2 for k in range(8)]

    def right(job):
        if job == 0:
            return np.array_equal(ft.fourier_features(ts, 365.25, 6, backend=backend), want_f)
        return np.array_equal(ft.time_encoding(secs, 16, backend=backend), want_t)

    assert failures_at_once(jobs, right, rounds=3) == []
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        ok = right(0) and right(1)
        os._exit(0 if ok else 3)
    deadline = time.monotonic() + 120
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.05)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
