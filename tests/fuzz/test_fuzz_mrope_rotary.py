"""Property-based fuzzing of M-RoPE inside Rotary, the inverse rotation and rerotate_, hypothesis.

* **good input**: M-RoPE positions of every integer dtype, byte order and view, drawn
  sections (chunked and interleaved), deltas up to ``+-(2**32 - 1)``: every form gives the
  bits of the canonical int64 call, each axis's pairs are that axis's own 1-D caches, the
  backends agree, and ``rerotate_`` is the rotation (or, negative, the inverse rotation) by
  ``|delta|``; NaN in the rotated arrays stays in its own pairs;
* **bad input**: one argument replaced by a bad value (positions, sections, inverse, delta,
  seq_len): a ``TypeError`` or ``ValueError`` naming it, every argument as it was.

Reproducible: a fixed seed, no example database (``support.strategies.fuzz``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastpe.rope import Rotary
from conftest import AVAILABLE
from support.strategies import REJECT, fuzz, judge

COMPILED = [b for b in ("numba", "cython") if b in AVAILABLE]
DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", ">i4", ">u8", "<i8"]
LIMIT = 2**32


@st.composite
def sections(draw, n_max=12):
    n = draw(st.integers(1, n_max))
    a = draw(st.integers(0, n))
    b = draw(st.integers(0, n - a))
    return [a, b, n - a - b]


@st.composite
def mrope_positions(draw, shape):
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    hi = min(int(np.iinfo(dtype).max), LIMIT - 1)
    values = draw(st.lists(st.one_of(st.integers(0, min(hi, 1000)), st.integers(0, hi)),
                           min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    canonical = np.array(values, dtype=np.int64).reshape(shape)
    form = draw(st.sampled_from(["array", "view", "list", "fortran"]))
    if form == "view":  # every other column of a wider array
        wide = np.zeros((*shape[:-1], 2 * shape[-1]), dtype=dtype)
        wide[..., ::2] = canonical
        given_ = wide[..., ::2]
    elif form == "list":
        given_ = canonical.tolist()
    elif form == "fortran":
        given_ = np.asfortranarray(canonical.astype(dtype))
    else:
        given_ = canonical.astype(dtype)
    return canonical, given_


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.dtype.str, a.shape, a.tobytes()


def _axes_of(section, interleaved):
    n = sum(section)
    if not interleaved:
        return np.repeat(np.arange(3), section)
    return np.array([j % 3 if j % 3 and j < 3 * section[j % 3] else 0 for j in range(n)])


@fuzz(60)
@given(data=st.data())
def test_positions_forms_sections_and_columns(data):
    section = data.draw(sections())
    interleaved = data.draw(st.booleans())
    layout = data.draw(st.sampled_from(["neox", "gptj"]))
    n = sum(section)
    scaling = {"rope_type": "default", "mrope_section": section, "mrope_interleaved": interleaved}
    axes = _axes_of(section, interleaved)
    fits = np.bincount(axes, minlength=3).tolist() == section
    if not fits:
        with pytest.raises(ValueError, match="mrope_section"):
            Rotary(2 * n, scaling=scaling)
        return
    rotary = Rotary(2 * n, scaling=scaling, layout=layout)
    plain = Rotary(2 * n, layout=layout)
    batched = data.draw(st.booleans())
    seq = data.draw(st.integers(1, 5))
    shape = (3, 2, seq) if batched else (3, seq)
    canonical, given_ = data.draw(mrope_positions(shape))
    dtype = data.draw(st.sampled_from(["float32", "float64", "bfloat16"]))
    cos, sin = rotary.cos_sin(given_, dtype=dtype)
    want_cos, want_sin = rotary.cos_sin(canonical, dtype=dtype)
    assert _bits(cos) == _bits(want_cos) and _bits(sin) == _bits(want_sin)
    for a in range(3):
        c1, _ = plain.cos_sin(canonical[a], dtype=dtype)
        for j in np.flatnonzero(axes == a):
            cols = [j, j + n] if layout == "neox" else [2 * j, 2 * j + 1]
            assert _bits(cos[..., cols]) == _bits(c1[..., cols])
    # the rotation: the same bits on every backend and for every form of the positions
    x = np.random.default_rng(seq).standard_normal((2, 2, seq, 2 * n)).astype(np.float32)
    inverse = data.draw(st.booleans())
    ref = x.copy()
    rotary.apply_(ref, canonical, inverse=inverse)
    for backend in COMPILED + ["python"]:
        y = x.copy()
        rotary.apply_(y, given_, inverse=inverse, backend=backend)
        assert np.array_equal(y, ref), backend


@fuzz(60)
@given(data=st.data())
def test_deltas_are_rotations_by_their_magnitude(data):
    mrope = data.draw(st.booleans())
    rotary = Rotary(16, scaling={"type": "mrope", "mrope_section": [2, 3, 3]} if mrope else None)
    k = np.random.default_rng(0).standard_normal((2, 2, 3, 16)).astype(np.float32)
    edge = st.sampled_from([0, 1, -1, LIMIT - 1, -(LIMIT - 1), 2**31, -(2**31)])
    value = st.one_of(edge, st.integers(-(LIMIT - 1), LIMIT - 1))
    form = data.draw(st.sampled_from(["scalar", "batch", "token"]))
    lead = (3,) if mrope else ()
    shape = {"scalar": lead, "batch": (*lead, 2), "token": (*lead, 2, 3)}[form]
    if form == "scalar" and not mrope:
        delta = data.draw(value)
        full = np.full((2, 3), delta, dtype=np.int64)
    else:
        vals = data.draw(st.lists(value, min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
        delta = np.array(vals, dtype=np.int64).reshape(shape)
        if form == "scalar":
            full = np.broadcast_to(delta[:, None, None], (3, 2, 3))
        elif form == "batch":
            full = np.broadcast_to(delta[..., None], (*lead, 2, 3))
        else:
            full = delta
        if data.draw(st.booleans()):
            delta = delta.astype(">i8")
    backend = data.draw(st.sampled_from(COMPILED)) if COMPILED else "python"
    got = k.copy()
    rotary.rerotate_(got, delta, backend=backend)
    # the rotation by |delta| where delta >= 0, its inverse where delta < 0, pair by pair
    mag = np.abs(full)
    fwd, inv = k.copy(), k.copy()
    rotary.apply_(fwd, mag, backend=backend)
    rotary.apply_(inv, mag, inverse=True, backend=backend)
    n = 8
    if mrope:
        which = np.repeat(np.arange(3), [2, 3, 3])
        neg = np.stack([full[a] < 0 for a in which], axis=-1)  # (2, 3, n): each pair's axis's sign
    else:
        neg = np.repeat((full < 0)[..., None], n, axis=-1)
    neg = np.concatenate((neg, neg), axis=-1)[:, None]  # both columns of each pair, every head
    assert np.array_equal(got, np.where(neg, inv, fwd))


@fuzz(40)
@given(data=st.data())
def test_nan_stays_in_its_pairs(data):
    rotary = Rotary(16, scaling={"type": "mrope", "mrope_section": [2, 3, 3]})
    x = np.random.default_rng(1).standard_normal((3, 2, 16)).astype(np.float32)
    t, h, j = data.draw(st.integers(0, 2)), data.draw(st.integers(0, 1)), data.draw(st.integers(0, 15))
    x[t, h, j] = data.draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    pos = np.array(data.draw(st.lists(st.integers(0, LIMIT - 1), min_size=9, max_size=9))).reshape(3, 3)
    what = data.draw(st.sampled_from(["apply", "inverse", "rerotate"]))
    y = x.copy()
    if what == "rerotate":
        rotary.rerotate_(y, pos)
    else:
        rotary.apply_(y, pos, inverse=what == "inverse")
    pair = {j % 8, j % 8 + 8}
    for col in range(16):
        if col in pair:
            continue
        assert np.isfinite(y[t, h, col])
    others = np.ones(x.shape, bool)
    others[t, h, sorted(pair)] = False
    assert np.isfinite(y[others]).all()


# ------------------------------------------------------------------------------ bad input

X_SHAPE = (1, 2, 4, 16)
BAD_POSITIONS = [np.zeros((2, 4), np.int64), np.zeros((4, 1, 4), np.int64), np.zeros((3, 1, 5), np.int64),
                 np.zeros(4, np.int64), np.full((3, 4), -1), np.full((3, 4), LIMIT), np.full((3, 4), 0.5),
                 np.full((3, 4), np.nan), np.zeros((3, 4), bool), "positions", [[0, 1, 2, 3]] * 2,
                 np.zeros((3, 2, 4), np.int64)]
BAD = {
    "positions": BAD_POSITIONS,
    "inverse": [1, 0, "yes", None, np.array([True]), 1.0],
    "seq_len": [-1, 2**32 + 1, 1.5, "8", True],
    "offset": [1, -1],
}
BAD_DELTAS = [LIMIT, -LIMIT, 1.0, True, np.array([1.5, 2.0]), "1", np.zeros(5, np.int64),
              np.array([LIMIT] * 3), np.zeros((3, 4), np.int64), np.zeros((2, 2), bool), [1.5], float("nan"),
              np.zeros((3, 1, 3), np.int64)]
BAD_SECTIONS = [[16, 24, 23], [1, 2], [8.0, 0, 0], [-1, 5, 4], "8", [8, None, 0], {"t": 8}, [True, 7, 0],
                np.array([[8, 0, 0]])]


def _apply(**kw):
    rotary = kw.pop("rotary")
    x = kw.pop("x")
    return rotary.apply_(x, kw.pop("positions"), **kw)


@fuzz(80)
@given(data=st.data())
def test_bad_argument_refused(data):
    kwargs = dict(rotary=Rotary(16, scaling={"type": "mrope", "mrope_section": [2, 3, 3]}),
                  x=np.ones(X_SHAPE, np.float32), positions=np.zeros((3, 4), np.int64), inverse=False,
                  seq_len=None, offset=0)
    name = data.draw(st.sampled_from(sorted(BAD)))
    kwargs[name] = data.draw(st.sampled_from(BAD[name]))
    blame = {name} | ({"positions", "offset"} if name == "offset" else set())
    accepted, _ = judge(_apply, kwargs, blame=blame, expect=REJECT, inplace=("x",))
    assert not accepted


@fuzz(60)
@given(delta=st.sampled_from(BAD_DELTAS), mrope=st.booleans())
def test_bad_delta_refused(delta, mrope):
    rotary = Rotary(16, scaling={"type": "mrope", "mrope_section": [2, 3, 3]} if mrope else None)
    k = np.ones(X_SHAPE, np.float32)
    accepted, _ = judge(lambda k, delta: rotary.rerotate_(k, delta), dict(k=k, delta=delta), blame={"delta"},
                        expect=REJECT, inplace=("k",))
    assert not accepted


@fuzz(40)
@given(section=st.sampled_from(BAD_SECTIONS), interleaved=st.sampled_from([False, True, 1, "no"]))
def test_bad_sections_refused(section, interleaved):
    scaling = {"type": "mrope", "mrope_section": section, "mrope_interleaved": interleaved}
    accepted, _ = judge(lambda scaling: Rotary(16, scaling=scaling), dict(scaling=scaling),
                        blame={"mrope_section", "mrope_interleaved"}, expect=REJECT)
    assert not accepted
