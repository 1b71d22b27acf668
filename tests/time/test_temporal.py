"""fastpe.time.temporal_embedding: Informer / Autoformer's fixed TemporalEmbedding.

The peer is the module's formula, written out here in torch float32
(zhouhaoyi/Informer2020 models/embed.py, thuml/Autoformer layers/Embed.py: FixedEmbedding's
``sin / cos(position * exp(arange(0, d, 2) * -(ln 10000 / d)))`` table, TemporalEmbedding's
``hour_x + weekday_x + day_x + month_x + minute_x``), fed the marks of Informer's
``time_features(dates, timeenc=0, freq)`` (utils/timefeatures.py) computed from Python's
:mod:`datetime`.
"""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pytest

import fastpe
import fastpe.time as ft

from conftest import AVAILABLE

torch = pytest.importorskip("torch")

_SIZES = {"minute": 4, "hour": 24, "weekday": 7, "day": 32, "month": 13}


def _module_table(c_in: int, d_model: int):
    """FixedEmbedding's own float32 table."""
    w = torch.zeros(c_in, d_model).float()
    position = torch.arange(0, c_in).float().unsqueeze(1)
    div_term = (torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model)).exp()
    w[:, 0::2] = torch.sin(position * div_term)
    w[:, 1::2] = torch.cos(position * div_term)
    return w


def _informer_marks(stamps, freq: str) -> np.ndarray:
    """time_features(dates, timeenc=0, freq): month, day, weekday, hour (, minute // 15)."""
    rows = []
    for s in np.asarray(stamps).reshape(-1):
        d = s.astype("datetime64[us]").item()
        row = [d.month, d.day, d.weekday(), d.hour] + ([d.minute // 15] if freq == "t" else [])
        rows.append(row)
    return np.array(rows, dtype=np.int64).reshape(np.shape(stamps) + (len(rows[0]),))


def _module_forward(tables: dict, x) -> "torch.Tensor":
    """TemporalEmbedding.forward: nn.Embedding lookups summed in the module's order."""
    emb = torch.nn.functional.embedding
    minute_x = emb(x[..., 4], tables["minute"]) if x.shape[-1] == 5 else 0.0
    hour_x = emb(x[..., 3], tables["hour"])
    weekday_x = emb(x[..., 2], tables["weekday"])
    day_x = emb(x[..., 1], tables["day"])
    month_x = emb(x[..., 0], tables["month"])
    return hour_x + weekday_x + day_x + month_x + minute_x


def _stamps(shape, step_minutes: int, start="1969-11-28T05:07") -> np.ndarray:
    n = int(np.prod(shape))
    return (np.datetime64(start, "m") + np.arange(n) * np.timedelta64(step_minutes, "m")).reshape(shape)


@pytest.mark.parametrize("backend", AVAILABLE)
@pytest.mark.parametrize("freq, d_model", [("h", 512), ("t", 64), ("h", 2), ("t", 6)])
def test_bits_of_the_module_with_fastpes_tables(backend, freq, d_model):
    stamps = _stamps((3, 50), 367)
    marks = _informer_marks(stamps, freq)
    np.testing.assert_array_equal(ft.temporal_marks(stamps, freq, backend=backend), marks)
    table = torch.from_numpy(fastpe.table(d_model, 32))
    tables = {k: table[:n] for k, n in _SIZES.items()}
    with torch.no_grad():
        want = _module_forward(tables, torch.from_numpy(marks)).numpy()
    got = ft.temporal_embedding(stamps, d_model, freq, backend=backend)
    assert got.shape == (3, 50, d_model) and got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_against_the_modules_own_float32_tables():
    d_model = 512
    stamps = _stamps((32, 96), 60, "2016-07-01T00:00")  # ETTh1's start, hourly
    marks = torch.from_numpy(_informer_marks(stamps, "h"))
    own = {k: _module_table(n, d_model) for k, n in _SIZES.items()}
    with torch.no_grad():
        theirs = _module_forward(own, marks).numpy().astype(np.float64)
    ours = ft.temporal_embedding(stamps, d_model, "h")
    # the module's float32 exp, product and sin put its tables up to ~1.6e-6 from the
    # correctly rounded values; the sum of four rows carries that
    table_err = max(float((own[k] - torch.from_numpy(fastpe.table(d_model, n))).abs().max()) for k, n in
                    _SIZES.items())
    assert 2**-22 < table_err < 4e-6
    assert np.abs(theirs - ours).max() < 4 * table_err + 4 * 2.0**-21
    # in ULPs of the values of magnitude >= 0.5: up to ~24 in the tables, ~49 in the sums
    table = fastpe.table(d_model, 32)
    ulps = np.abs(own["day"].numpy().view(np.int32).astype(np.int64) - table.view(np.int32).astype(np.int64))
    assert 8 < ulps[np.abs(table) >= 0.5].max() <= 32
    sums = np.abs(theirs.astype(np.float32).view(np.int32).astype(np.int64) - ours.view(np.int32).astype(np.int64))
    assert 16 < sums[np.abs(ours) >= 0.5].max() <= 64
    assert 0.3 < np.mean(theirs == ours) < 0.7  # about half the values are identical


def test_minute_size_60_and_float64():
    stamps = _stamps((40,), 7)
    marks = _informer_marks(stamps, "t")
    minutes = np.array([s.astype("datetime64[us]").item().minute for s in stamps])
    got_marks = ft.temporal_marks(stamps, "t", minute_size=60)
    np.testing.assert_array_equal(got_marks[:, :4], marks[:, :4])
    np.testing.assert_array_equal(got_marks[:, 4], minutes)
    t64 = fastpe.table(8, 60, dtype="float64")
    got = ft.temporal_embedding(stamps, 8, "t", minute_size=60, dtype="float64")
    want = t64[got_marks[:, 3]] + t64[got_marks[:, 2]] + t64[got_marks[:, 1]] + t64[got_marks[:, 0]] + t64[minutes]
    np.testing.assert_array_equal(got, want)


def test_out_and_timestamp_kinds():
    stamps = _stamps((2, 5), 61)
    out = np.full((2, 5, 16), np.nan, np.float32)
    assert ft.temporal_embedding(stamps, 16, out=out) is out
    np.testing.assert_array_equal(out, ft.temporal_embedding(stamps, 16))
    days = [dt.datetime(2020, 2, 29, 23, 59), dt.datetime(1900, 3, 1, 0, 0)]
    np.testing.assert_array_equal(ft.temporal_marks(days), [[2, 29, 5, 23], [3, 1, 3, 0]])
    secs = np.array([0, 86399], dtype=np.int64)
    np.testing.assert_array_equal(ft.temporal_marks(secs, "t", unit="s"), [[1, 1, 3, 0, 0], [1, 1, 3, 23, 3]])


@pytest.mark.any_backend
def test_bad_input_is_refused():
    stamps = _stamps((4,), 60)
    out = np.full((4, 8), 3.0, np.float32)
    for kwargs, exc, word in [
        (dict(d_model=7), ValueError, "even"),
        (dict(d_model=0), ValueError, "d_model"),
        (dict(d_model=8.0), TypeError, "d_model"),
        (dict(d_model=8, freq="d"), ValueError, "freq"),
        (dict(d_model=8, freq=None), TypeError, "freq"),
        (dict(d_model=8, embed="learned"), ValueError, "embed"),
        (dict(d_model=8, minute_size=5), ValueError, "minute_size"),
        (dict(d_model=8, dtype="float16"), ValueError, "dtype"),
        (dict(d_model=8, dtype="float64"), ValueError, "out"),
    ]:
        with pytest.raises(exc, match=word):
            ft.temporal_embedding(stamps, out=out, **kwargs)
        assert (out == 3).all()
    with pytest.raises(ValueError, match="out"):
        ft.temporal_embedding(stamps, 8, out=np.zeros((4, 16), np.float32)[:, ::2])
    with pytest.raises(ValueError, match="timestamps"):
        ft.temporal_embedding(np.array(["NaT"], "datetime64[s]"), 8)
