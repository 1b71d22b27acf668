"""Property-based fuzzing of xPos (fastpe.rope._xpos), hypothesis.

* **good input**: drawn head sizes, layouts, centres, scale bases and positions up to the top
  of the u32 range, in every equivalent form (dtypes and byte orders of the positions, the
  (batch, seq) grid): every compiled backend writes the same bits, the kept-table path the
  full path's, and each value is within 1 ULP of the exact reference away from cancellation;
  NaN in q stays in its own pair;
* **bad input**: scale bases 0, negative, NaN, inf and non-numbers, bad centres, float64,
  big-endian or non-contiguous arrays, q aliasing k: a TypeError / ValueError naming the
  argument, nothing modified.

Reproducible: a fixed seed, no example database (``support.strategies.fuzz``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastpe._exact import rope as exact
from fastpe.rope import Rotary

from conftest import AVAILABLE
from support.oracle import ulp_distance
from support.strategies import fuzz

COMPILED = [b for b in AVAILABLE if b != "python"]
LIMIT = 1 << 32


@st.composite
def xpos_call(draw):
    half = draw(st.integers(1, 4))
    d = 2 * half + draw(st.sampled_from([0, 0, 2]))
    layout = draw(st.sampled_from(["neox", "gptj"]))
    center = draw(st.one_of(st.sampled_from(["torchscale", "flash_attn"]), st.integers(0, LIMIT)))
    sb = draw(st.sampled_from([512.0, 1.0, 3.5, 2.0**20, 1e9, 2.0**32]))
    rotary = Rotary(d, rotary_dim=2 * half, base=draw(st.sampled_from([10000.0, 500000.0])), layout=layout,
                    xpos_scale_base=sb, xpos_center=center)
    n = draw(st.integers(1, 4))
    edge = st.sampled_from([0, 1, 511, 512, LIMIT // 2, LIMIT - 2, LIMIT - 1])
    positions = np.array(draw(st.lists(st.one_of(edge, st.integers(0, LIMIT - 1)), min_size=n, max_size=n)),
                         dtype=np.int64)
    return rotary, positions


def _forms(draw, positions):
    dtype = draw(st.sampled_from(["<i8", ">i8", "<u4", ">u4", "<u8"]))
    return positions.astype(dtype)


@fuzz(40)
@given(data=st.data())
def test_backends_paths_and_the_reference_agree(data):
    rotary, positions = data.draw(xpos_call())
    d = rotary.head_dim
    n = positions.shape[0]
    rng = np.random.default_rng(n)
    q = (rng.standard_normal((n, 2, d)) * 2.0 ** rng.integers(-3, 4, (n, 2, d))).astype(np.float32)
    k = rng.standard_normal((n, 1, d)).astype(np.float32)
    results = []
    for backend in COMPILED or ["python"]:
        a, b = q.copy(), k.copy()
        rotary.apply_qk_(a, b, _forms(data.draw, positions), backend=backend)
        results.append((a, b))
    for a, b in results[1:]:
        assert np.array_equal(a, results[0][0]) and np.array_equal(b, results[0][1])
    a, b = results[0]
    # the full path (a list of positions) gives the kept-table path's bits
    c, e = q.copy(), k.copy()
    rotary.apply_qk_(c, e, positions.tolist() if n > 1 else positions)
    assert np.array_equal(c, a) and np.array_equal(e, b)
    # one pair per row against the reference
    length = int(positions.max()) + 1
    center = {"torchscale": (length + 1) // 2, "flash_attn": length // 2}.get(rotary.xpos_center,
                                                                                  rotary.xpos_center)
    zeta = exact.xpos_zeta(rotary.rotary_dim)
    n_freq = rotary.rotary_dim // 2
    for t in range(n):
        i = t % n_freq
        j1, j2 = (i, i + n_freq) if rotary.layout == "neox" else (2 * i, 2 * i + 1)
        for x, got, down in ((q[t, 0], a[t, 0], False), (k[t, 0], b[t, 0], True)):
            x1, x2 = float(x[j1]), float(x[j2])
            want = exact.xpos_rotate_f32(x1, x2, int(positions[t]), rotary.inv_freq[i], 1.0, zeta[i],
                                         rotary.xpos_scale_base, center, down)
            m = int(positions[t]) - center
            log_s = (-m if down else m) / rotary.xpos_scale_base * math.log(zeta[i])
            for g, w in zip((got[j1], got[j2]), want):
                if math.isinf(w) or w == 0:
                    assert g == w or (w == 0 and abs(g) < 2.0**-140)
                    continue
                big = abs(x1) + abs(x2)
                if abs(log_s) < 300 and abs(w) >= 2.0**-18.5 * big * math.exp(log_s):
                    assert ulp_distance(np.float32(g), np.float32(w)) <= 1


@fuzz(20)
@given(data=st.data())
def test_nan_stays_in_its_pair(data):
    rotary, positions = data.draw(xpos_call())
    d, n = rotary.head_dim, positions.shape[0]
    q = np.ones((n, 1, d), dtype=np.float32)
    q[0, 0, 0] = np.nan
    rotary.apply_(q, positions, seq_len=int(positions.max()) + 1)
    j2 = rotary.rotary_dim // 2 if rotary.layout == "neox" else 1
    nan = np.isnan(q)
    assert nan[0, 0, 0] and nan[0, 0, j2]
    nan[0, 0, [0, j2]] = False
    assert not nan.any()


BAD_SCALE_BASES = [0, 0.0, -0.0, -1, -512.0, math.nan, math.inf, -math.inf, 10**400, True, "512", None, [512.0],
                   1j]


@fuzz(20)
@given(bad=st.sampled_from(BAD_SCALE_BASES))
def test_bad_scale_bases_refused(bad):
    if bad is None:  # None is no xPos
        assert Rotary(8, xpos_scale_base=bad).xpos_scale_base is None
        return
    with pytest.raises((TypeError, ValueError), match="xpos_scale_base"):
        Rotary(8, xpos_scale_base=bad)


@fuzz(20)
@given(bad=st.sampled_from(["", "centre", -1, LIMIT + 1, 2.5, math.nan, True, None, b"torchscale", [0]]))
def test_bad_centers_refused(bad):
    with pytest.raises((TypeError, ValueError), match="xpos_center"):
        Rotary(8, xpos_scale_base=512, xpos_center=bad)


def _bad_arrays(q):
    yield "x", q.astype(np.float64)
    yield "x", q.astype(">f4")
    yield "x", np.asfortranarray(np.repeat(q, 2, axis=1))[:, ::2]
    ro = q.copy()
    ro.flags.writeable = False
    yield "x", ro


@fuzz(10)
@given(data=st.data())
def test_bad_arrays_and_aliasing_refused_untouched(data):
    rotary = Rotary(8, xpos_scale_base=512)
    q = np.random.default_rng(1).standard_normal((3, 2, 8)).astype(np.float32)
    cases = list(_bad_arrays(q))
    name, x = cases[data.draw(st.integers(0, len(cases) - 1))]
    before = x.copy()
    with pytest.raises((TypeError, ValueError), match=name):
        rotary.apply_(x, np.arange(3))
    assert np.array_equal(x, before)
    same = q.copy()
    with pytest.raises(ValueError, match="k must not share memory with q"):
        rotary.apply_qk_(same, same, np.arange(3))
    with pytest.raises(ValueError, match="k must not share memory with q"):
        rotary.apply_qk_(same, same.view(), np.arange(3))
    assert np.array_equal(same, q)
    pos = np.arange(3)
    with pytest.raises(ValueError, match="positions"):
        rotary.apply_(q.copy(), np.array([0, 1, LIMIT]))
    with pytest.raises((TypeError, ValueError), match="positions"):
        rotary.apply_(q.copy(), pos.astype(np.float64) + 0.5)
