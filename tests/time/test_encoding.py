"""fastpe.time.time_encoding: TGAT/TGN's cos(t w_j), exact from the time value.

The peers' formula is written out here in torch float32 as their modules have it at
initialisation: TGN (twitter-research/tgn, model/time_encoding.py) ``Linear(1, dim)`` with
weight ``torch.from_numpy(1 / 10 ** np.linspace(0, 9, dim)).float()`` and a zero bias, then
``torch.cos``; TGAT (da-xu-tgat, module.py) ``cos(ts * basis_freq + phase)`` with the same
float32 ``basis_freq`` and a zero phase.  The true values come from mpmath.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest

import fastpe.time as ft
from conftest import AVAILABLE
from support.oracle import mp_round, ulp_distance

torch = pytest.importorskip("torch")
mpmath.mp.prec = 256


def tgn_forward(t: np.ndarray, dim: int) -> np.ndarray:
    """TGN's TimeEncode at initialisation, in torch float32."""
    lin = torch.nn.Linear(1, dim)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(1 / 10 ** np.linspace(0, 9, dim)).float().reshape(dim, -1))
        lin.bias.zero_()
        return torch.cos(lin(torch.as_tensor(t, dtype=torch.float32).unsqueeze(-1))).numpy()


def mp_cos(times, freqs, fmt: str) -> np.ndarray:
    """``cos(t w_j)`` of exact rational times (Fractions) and doubles ``w_j``, rounded."""
    out = np.empty((len(times), len(freqs)))
    for r, t in enumerate(times):
        for j, w in enumerate(freqs):
            theta = Fraction(t) * Fraction(float(w))
            # mpmath needs the working precision to cover theta's integer part
            with mpmath.workprec(256 + max(0, (abs(theta.numerator) // theta.denominator).bit_length())):
                x = mpmath.mpf(theta.numerator) / theta.denominator
                out[r, j] = mp_round(mpmath.cos(x), fmt)
    return out


def test_tgn_parity_for_small_times():
    t = np.array([0, 1, 2, 3, 10, 17, 60, 99], dtype=np.int64)
    got = ft.time_encoding(t, 16, frequencies="tgn")
    want = tgn_forward(t.astype(np.float32), 16)
    assert got.dtype == np.float32 and got.shape == want.shape
    # the float32 product t * w rounds (~6e-8 relative): torch is that far off, no more
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5)


def test_tgn_float32_on_unix_seconds_is_far_off_fastpe_is_not():
    """A Unix time in seconds (~1.7e9, float32 spacing 128 s) through TGN's float32 module:
    the fastest columns are noise; fastpe's float32 is within 1 ULP of the true value."""
    rng = np.random.default_rng(4)
    secs = 1_700_000_000 + rng.integers(0, 10**7, 40)
    dim = 10
    peer = tgn_forward(secs.astype(np.float32), dim)
    freqs = ft.tgn_frequencies(dim, float32=True)
    truth = mp_cos([int(s) for s in secs], freqs, "float32")
    assert np.abs(peer - truth).max() > 0.5
    got = ft.time_encoding(secs, dim, frequencies="tgn")
    assert ulp_distance(got, truth.astype(np.float32)).max() <= 1


@pytest.mark.any_backend
@pytest.mark.parametrize("backend", AVAILABLE)
def test_within_one_ulp_of_mpmath(backend):
    rng = np.random.default_rng(5)
    top = 2**63 - 1
    ticks = np.concatenate([np.array([0, 1, -1, top, -top, 2**32, -(2**31) - 7], dtype=np.int64),
                            (rng.uniform(-1, 1, 10) * 2.0 ** rng.uniform(0, 62.9, 10)).astype(np.int64)])
    deltas = ticks.view("timedelta64[ns]")
    times = [Fraction(int(t), 10**9) for t in ticks]  # in seconds
    freqs = ft.tgn_frequencies(12)
    got32 = ft.time_encoding(deltas, 12, backend=backend)
    assert ulp_distance(got32, mp_cos(times, freqs, "float32").astype(np.float32)).max() <= 1
    got64 = ft.time_encoding(deltas, 12, dtype="float64", backend=backend)
    assert np.abs(got64 - mp_cos(times, freqs, "float64")).max() <= 2.0**-45


def test_float_times_are_taken_exactly():
    t = np.array([0.0, 0.5, -1.25, 1234.5678, 1.7e9 + 0.25, 3e-7, 1e-300, -1e300, 5e-324, 0.1])
    freqs = ft.tgn_frequencies(8)
    truth = mp_cos([Fraction(float(x)) for x in t], freqs, "float32")
    got = ft.time_encoding(t, 8)
    assert ulp_distance(got, truth.astype(np.float32)).max() <= 1
    assert np.array_equal(got, ft.time_encoding(torch.tensor(t, dtype=torch.float64), 8))
    t32 = t[:6].astype(np.float32)
    assert np.array_equal(ft.time_encoding(t32, 8), ft.time_encoding(t32.astype(np.float64), 8))
    assert np.array_equal(ft.time_encoding(list(t), 8), got)


    class SeriesLike:  # what fastpe reads of a pandas Series: its dtype and .to_numpy()
        dtype = t.dtype

        def to_numpy(self):
            return t.copy()

    assert np.array_equal(ft.time_encoding(SeriesLike(), 8), got)
    pd = pytest.importorskip("pandas")
    assert np.array_equal(ft.time_encoding(pd.Series(t), 8), got)
    deltas = pd.Series(np.array([0, 1500, -250], dtype="timedelta64[ms]"))
    assert np.array_equal(ft.time_encoding(deltas, 8), ft.time_encoding([0.0, 1.5, -0.25], 8))


def test_units_and_frequency_choices():
    ms = np.array([0, 1500, -250, 86_400_000], dtype=np.int64)
    in_seconds = ft.time_encoding(ms.view("timedelta64[ms]"), 6, dtype="float64")
    assert np.array_equal(in_seconds, ft.time_encoding(ms / 1000, 6, dtype="float64"))
    in_ms = ft.time_encoding(ms.view("timedelta64[ms]"), 6, unit="ms", dtype="float64")
    assert np.array_equal(in_ms, ft.time_encoding(ms, 6, unit="ms", dtype="float64"))
    assert np.array_equal(in_ms, ft.time_encoding(ms, 6, dtype="float64"))  # integers: counts of unit
    w = ft.tgn_frequencies(6)
    assert w == tuple((1 / 10 ** np.linspace(0, 9, 6)).tolist())
    assert ft.tgn_frequencies(6, float32=True) == tuple(np.float32(w).astype(np.float64).tolist())
    tgat = ft.time_encoding(ms, 6, frequencies="tgat")
    assert np.array_equal(tgat, ft.time_encoding(ms, 6, frequencies=np.float32(w)))
    assert np.array_equal(tgat, ft.time_encoding(ms, 6, frequencies=torch.tensor(np.float32(w))))
    custom = ft.time_encoding(ms, 3, frequencies=[0.0, 2.0, -2.0])
    assert (custom[:, 0] == 1).all() and np.array_equal(custom[:, 1], custom[:, 2])


def test_shapes_out_and_narrow_dtypes():
    t = np.arange(12).reshape(3, 4) * 1000
    e = ft.time_encoding(t, 5)
    assert e.shape == (3, 4, 5)
    assert ft.time_encoding(7, 5).shape == (5,)
    out = np.full((12, 5), np.nan, dtype=np.float64)
    assert ft.time_encoding(t.reshape(-1), 5, out=out) is out
    assert np.array_equal(out, ft.time_encoding(t.reshape(-1), 5, dtype="float64"))
    freqs = ft.tgn_frequencies(5)
    times = [int(x) for x in t.reshape(-1)]
    h = ft.time_encoding(t.reshape(-1), 5, dtype="float16")
    assert np.array_equal(h.astype(np.float64), mp_cos(times, freqs, "float16"))
    pytest.importorskip("ml_dtypes")
    b = ft.time_encoding(t.reshape(-1), 5, dtype="bfloat16")
    assert np.array_equal(b.astype(np.float64), mp_cos(times, freqs, "bfloat16"))


@pytest.mark.any_backend
@pytest.mark.parametrize("args, kwargs, exc, word", [
    ((np.arange(3), 0), {}, ValueError, "dim"),
    ((np.arange(3), 2.0), {}, TypeError, "dim"),
    ((np.arange(3), 4), dict(frequencies=[1.0, 2.0]), ValueError, "frequencies"),
    ((np.arange(3), 2), dict(frequencies=[1.0, float("nan")]), ValueError, "frequencies"),
    ((np.arange(3), 2), dict(frequencies="prophet"), ValueError, "frequencies"),
    ((np.arange(3), 2), dict(frequencies=["a", "b"]), TypeError, "frequencies"),
    ((np.array([1.0, np.nan]), 2), {}, ValueError, "t"),
    ((np.array([1.0, np.inf]), 2), {}, ValueError, "t"),
    ((np.array([True, False]), 2), {}, TypeError, "t"),
    ((np.arange(3), 2), dict(unit="Y"), ValueError, "unit"),
])
def test_bad_arguments_are_refused(args, kwargs, exc, word):
    with pytest.raises(exc, match=word):
        ft.time_encoding(*args, **kwargs)


@pytest.mark.any_backend
def test_bad_out_is_refused_and_untouched():
    out = np.full((3, 4), 7.0, dtype=np.float32)
    with pytest.raises(ValueError, match="out"):
        ft.time_encoding(np.arange(3), 5, out=out)
    with pytest.raises(ValueError, match="dtype"):
        ft.time_encoding(np.arange(3), 4, out=out, dtype="float64")
    assert (out == 7.0).all()
