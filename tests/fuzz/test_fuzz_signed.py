"""Property-based fuzzing of signed positions (forward, table's start/step), the relative
sinusoids (Transformer-XL, Conformer) and the Sandwich bias (hypothesis).

* **good input**: signed positions up to ``±(2**32 - 1)`` in every equivalent form (integer
  dtypes of either byte order, whole floats, object arrays, reversed and strided views,
  read-only): the same bits as the int64 values, the magnitude's row with the sines negated,
  the same bits from every compiled backend, in every layout and dtype; tables with drawn
  start and step equal forward of their positions; Sandwich biases of drawn shapes equal on
  every compiled backend and within 1 ULP of the python reference;
* **bad input**: positions at or beyond ``±2**32``, NaN, inf, fractions, bools, 2-D or text,
  and bad helper and Sandwich arguments: a TypeError / ValueError naming the argument,
  nothing modified.

Reproducible: a fixed seed, no example database (``support.strategies.fuzz``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fastpe
from fastpe import PosEncConfig, _dtypes
from fastpe.relative import sandwich_bias
from conftest import AVAILABLE
from support.oracle import ulp_distance
from support.strategies import BAD_BOOLS, BAD_INTS, REJECT, fuzz, int_array_form, judge

COMPILED = [b for b in AVAILABLE if b != "python"]
TOP = 2**32 - 1
DTYPES = ["float32", "float64", "float16"] + (["bfloat16"] if "bfloat16" in _dtypes.FORMATS else [])


def _dtype(name):
    try:
        return _dtypes.resolve(name)
    except TypeError:  # bfloat16 without ml_dtypes
        return None


def _bits(a):
    return a.view(f"u{a.dtype.itemsize}")


signed = st.one_of(st.sampled_from([0, 1, -1, 63, -64, -65, TOP, -TOP, -(2**31), 2**31 - 1]),
                   st.integers(-TOP, TOP))


@pytest.mark.any_backend
@fuzz(150)
@given(values=st.lists(signed, min_size=1, max_size=6), d=st.integers(1, 9),
       layout=st.sampled_from(["interleaved", "halves"]), dtype=st.sampled_from(DTYPES), data=st.data())
def test_signed_positions_every_form(values, d, layout, dtype, data):
    dt = _dtype(dtype)
    if dt is None:
        return
    obj, form = data.draw(int_array_form(values))
    cfg = PosEncConfig(d, layout=layout)
    n = len(values)
    want = fastpe.forward(np.array(values, dtype=np.int64), cfg, np.empty((n, d), dt), backend=COMPILED[0]
                          if COMPILED else "python")
    for b in COMPILED or ["python"]:
        got = fastpe.forward(obj, cfg, np.empty((n, d), dt), backend=b)
        assert np.array_equal(_bits(got), _bits(want)), (form, b)
    mag = fastpe.forward(np.abs(np.array(values, dtype=np.int64)), cfg, np.empty((n, d), dt),
                         backend=COMPILED[0] if COMPILED else "python")
    sines = [j for j in range(d) if (j % 2 == 0 if layout == "interleaved" else j < (d + 1) // 2)]
    neg = np.array(values) < 0
    mag[np.ix_(neg, sines)] = -mag[np.ix_(neg, sines)]
    assert np.array_equal(_bits(mag), _bits(want))


BAD_SIGNED = ([-(2**32)], [2**32], [-(2**40)], [2**64], [0.5], [-1.5], [math.nan], [-math.inf], [True], [False, 1],
              [[0, -1]], "-1", np.array([-(2.0**32)]), np.array([2**63], dtype=np.uint64), np.array([None]),
              np.array([1 - 1j]), [-(10**400)])


@pytest.mark.any_backend
@fuzz(60)
@given(positions=st.sampled_from(BAD_SIGNED), d=st.integers(1, 5))
def test_signed_positions_refused(positions, d):
    out = np.zeros((1 if not isinstance(positions, list) or len(positions) != 2 else 2, d), np.float32)
    judge(fastpe.forward, {"positions": positions, "config": PosEncConfig(d), "out": out},
          blame={"positions"}, expect=REJECT, inplace=("out",))


@pytest.mark.any_backend
@fuzz(80)
@given(start=st.integers(-TOP, TOP), step=st.sampled_from([-3, -1, 1, 2]), n=st.integers(1, 40),
       d=st.integers(1, 8), layout=st.sampled_from(["interleaved", "halves"]), dtype=st.sampled_from(DTYPES))
def test_table_start_step(start, step, n, d, layout, dtype):
    dt = _dtype(dtype)
    last = start + (n - 1) * step
    if dt is None or not -TOP <= last <= TOP:
        return
    for b in COMPILED or ["python"]:
        t = fastpe.table(d, n, layout=layout, start=start, step=step, dtype=dt, backend=b)
        f = fastpe.forward(start + step * np.arange(n, dtype=np.int64), PosEncConfig(d, layout=layout),
                           np.empty((n, d), dt), backend=b)
        assert np.array_equal(_bits(t), _bits(f))


@fuzz(60)
@given(klen=st.integers(1, 300), half=st.integers(1, 16), clamp=st.one_of(st.none(), st.integers(-2, 400)))
def test_transformer_xl_rows(klen, half, clamp):
    got = fastpe.transformer_xl_embedding(klen, 2 * half, clamp_len=clamp)
    pos = np.arange(klen - 1, -1, -1)
    if clamp is not None and clamp > 0:
        pos = np.minimum(pos, clamp)
    want = fastpe.forward(pos, PosEncConfig(2 * half, layout="halves"), np.empty((klen, 2 * half), np.float32))
    assert np.array_equal(got, want)


@pytest.mark.any_backend
@fuzz(60)
@given(which=st.sampled_from(["klen", "d_model", "clamp_len", "length", "convention"]), data=st.data())
def test_helpers_refuse_bad_arguments(which, data):
    if which in ("klen", "d_model", "clamp_len"):
        kwargs = {"klen": 4, "d_model": 8}
        pool = {"klen": BAD_INTS + (0, -1, 2**32 + 1), "d_model": BAD_INTS + (0, 1, 7, 65538),
                "clamp_len": BAD_INTS[2:]}[which]
        kwargs[which] = data.draw(st.sampled_from(pool))
        if which == "clamp_len" and isinstance(kwargs[which], int) and not isinstance(kwargs[which], bool):
            return  # any integer clamps (or not)
        judge(fastpe.transformer_xl_embedding, kwargs, blame={which}, expect=REJECT)
    else:
        kwargs = {"length": 4, "d_model": 8}
        kwargs[which] = data.draw(st.sampled_from(BAD_INTS + (0, 2**31 + 1) if which == "length"
                                                  else ("nemo ", "wenet", 1, None, b"nemo")))
        if kwargs[which] == "nemo ":
            return  # choices are read as the other choices are: stripped, any case
        judge(fastpe.conformer_embedding, kwargs, blame={which}, expect=REJECT)


@pytest.mark.any_backend
@fuzz(40)
@given(heads=st.integers(1, 6), q=st.integers(1, 12), k=st.integers(1, 12), half=st.integers(1, 12),
       bidirectional=st.booleans(), dtype=st.sampled_from(DTYPES))
def test_sandwich_backends_and_reference(heads, q, k, half, bidirectional, dtype):
    dt = _dtype(dtype)
    if dt is None:
        return
    ref = sandwich_bias(heads, q, k, hidden_size=2 * half, bidirectional=bidirectional, dtype=dt, backend="python")
    outs = [sandwich_bias(heads, q, k, hidden_size=2 * half, bidirectional=bidirectional, dtype=dt, backend=b)
            for b in COMPILED]
    for o in outs[1:]:
        assert np.array_equal(_bits(o), _bits(outs[0]))
    for o in outs:
        if dt == np.float64:
            assert np.all(np.abs(o - ref) <= 2.0**-48 * np.maximum(1.0, np.abs(ref)))
        else:
            assert ulp_distance(o, ref, dt.name).max(initial=0) <= 1
    assert not np.signbit(ref[ref == 0]).any()


@pytest.mark.any_backend
@fuzz(80)
@given(which=st.sampled_from(["n_heads", "q_len", "k_len", "hidden_size", "bidirectional"]), data=st.data())
def test_sandwich_refuses_bad_arguments(which, data):
    kwargs = {"n_heads": 2, "q_len": 3, "k_len": 4, "hidden_size": 8, "bidirectional": True}
    pool = {"n_heads": BAD_INTS + (0, 65537), "q_len": BAD_INTS + (0, 2**32 + 1), "k_len": BAD_INTS + (0,),
            "hidden_size": BAD_INTS + (0, 3, 65538), "bidirectional": BAD_BOOLS}[which]
    kwargs[which] = data.draw(st.sampled_from(pool))
    judge(sandwich_bias, kwargs, blame={which}, expect=REJECT)
