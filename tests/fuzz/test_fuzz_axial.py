"""Property-based fuzzing of the axial RoPE caches (``fastpe.rope._axial.axial_cos_sin``).

* **good input**: coordinates in every form that means the same reals (lists, float64 of
  either byte order, float32 and integers where exact, strided, reversed, transposed and
  read-only views), every layout and output dtype, scalar or per-axis bases and factors:
  the same bits from every compiled backend, the reference within the design's bound, and
  mpmath at a few sampled cells (float32 within 1 ULP, float16/bfloat16 correctly rounded,
  float64 within 2**-45); the coordinates are never modified;
* **bad input**: a ``TypeError`` or ``ValueError`` naming the argument, nothing modified;
* ``out`` sharing memory with ``coords``: refused, nothing written.

Reproducible (fixed seed, no example database); ``FASTPE_FUZZ_EXAMPLES=N`` runs N examples.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import FAST
from fastpe.rope import _axial as ax
from support.oracle import mp_exact, mp_round, ulp_distance
from support.strategies import (
    BAD_BACKENDS,
    BAD_CHOICES,
    BAD_DTYPES,
    BAD_INTS,
    HUGE,
    REJECT,
    SAME,
    assert_near,
    assert_same_bits,
    fuzz,
    judge,
    st_real_t,
)

try:
    import ml_dtypes  # noqa: F401
    DTYPES = ("float32", "float64", "float16", "bfloat16")
except ImportError:  # pragma: no cover - an optional extra
    DTYPES = ("float32", "float64", "float16")


@st.composite
def axial_kwargs(draw, max_axes: int = 3, max_dim: int = 12):
    n_axes = draw(st.integers(1, max_axes))
    dims = draw(st.lists(st.integers(0, max_dim // 2).map(lambda v: 2 * v), min_size=n_axes, max_size=n_axes)
                .filter(lambda d: sum(d) >= 2))
    kw = {"axes_dim": draw(st.sampled_from((tuple(dims), list(dims), np.array(dims))))}
    base_one = st.sampled_from((10000.0, 256.0, 1e6, 2.0, 1.0, 10.5, 1e300, 10000, np.float32(2.5)))
    if draw(st.booleans()):
        kw["base"] = draw(st.one_of(base_one, st.lists(base_one, min_size=n_axes, max_size=n_axes)))
    if draw(st.booleans()):
        kw["ntk_factor"] = draw(st.sampled_from((1.0, 2.0, 4.0, 0.5)))
        if kw.get("base", 10000.0) in (1.0,) or (isinstance(kw.get("base"), list) and 1.0 in kw["base"]):
            kw["ntk_factor"] = max(kw["ntk_factor"], 1.0)
    if draw(st.booleans()):
        kw["linear_factor"] = draw(st.sampled_from((1.0, 2.0, 3.0, 0.25, 1 / 1024)))
    if draw(st.booleans()):
        kw["offset"] = draw(st.one_of(st.sampled_from((0.0, 0.5)),
                                      st.lists(st.sampled_from((0.0, 0.5)), min_size=n_axes, max_size=n_axes)))
    if draw(st.booleans()):
        kw["layout"] = draw(st.sampled_from(ax.AXIAL_LAYOUTS + ("GPTJ", " neox ")))
    return kw


@st.composite
def coords_form(draw, values, n_axes):
    """``values`` (n, A) floats in a form meaning the same reals; ``(obj, form)``."""
    arr = np.array(values, dtype=np.float64).reshape(len(values), n_axes)
    form = draw(st.sampled_from(("list", "array", "swapped", "float32", "int", "reversed", "strided",
                                 "transposed", "readonly")))
    if form == "list" and arr.size:  # ([] has no axes: an empty input is an (0, A) array)
        return arr.tolist(), form
    if form == "swapped":
        return arr.astype(">f8" if np.little_endian else "<f8"), form
    if form == "float32" and np.array_equal(arr.astype(np.float32).astype(np.float64), arr):
        return arr.astype(np.float32), form
    if form == "int" and np.array_equal(np.trunc(arr), arr) and not np.signbit(arr[arr == 0]).any():
        return arr.astype(np.int64), form
    if form == "reversed":
        return arr[::-1].copy()[::-1], form
    if form == "strided":
        big = np.zeros((arr.shape[0], 2 * arr.shape[1]))
        big[:, ::2] = arr
        return big[:, ::2], form
    if form == "transposed":
        return np.asfortranarray(arr), form
    if form == "readonly":
        arr.setflags(write=False)
        return arr, form
    return arr, "array"


def snapshot(obj):
    return np.array(obj, copy=True) if isinstance(obj, np.ndarray) else obj


def _per(v, a):
    return v[a] if isinstance(v, (list, tuple)) else v


def exact_value(coords, kw, r, j, is_cos):
    """mpmath's cos or sin at cell ``(r, j)``."""
    dims = [int(d) for d in kw["axes_dim"]]
    layout = kw.get("layout", "gptj").strip().lower()
    col, col_h, half = 0, 0, sum(dims) // 2
    for a, d in enumerate(dims):
        h = d // 2
        if layout == "gptj" and col <= j < col + d:
            k = (j - col) // 2
            break
        if layout == "neox" and col <= j < col + d:
            k = (j - col) % h
            break
        if layout == "neox_head" and (col_h <= j < col_h + h or half + col_h <= j < half + col_h + h):
            k = (j - col_h) if j < half else (j - half - col_h)
            break
        col += d
        col_h += h
    base = float(_per(kw.get("base", 10000.0), a))
    ntk = float(_per(kw.get("ntk_factor", 1.0), a))
    lin = float(_per(kw.get("linear_factor", 1.0), a))
    off = float(_per(kw.get("offset", 0.0), a))
    # the module's rule: base * ntk_factor is a double here (ntk_factor a power of two);
    # base * ntk_factor * linear_factor is taken exactly when it is a double or when
    # 1 / linear_factor is, else rounded once
    b = base * ntk
    assert Fraction(b) == Fraction(base) * Fraction(ntk)
    hi = b * lin
    if Fraction(hi) == Fraction(b) * Fraction(lin) or Fraction(1 / lin) * Fraction(lin) == 1:
        ratio = mp_exact(b)
    else:
        ratio = mp_exact(hi) / mp_exact(lin)
    w = ratio ** (-2 * (k + mpmath.mpf(off)) / d) / mp_exact(lin)
    t = mp_exact(float(coords[r, a])) * w
    return mpmath.cos(t) if is_cos else mpmath.sin(t)


@pytest.mark.any_backend
@fuzz(150)
@given(kw=axial_kwargs(), dtype=st.sampled_from(DTYPES), data=st.data())
def test_axial_agrees_across_backends_and_with_mpmath(kw, dtype, data):
    n_axes = len(kw["axes_dim"])
    n = data.draw(st.integers(0, 6))
    values = [[data.draw(st_real_t()) for _ in range(n_axes)] for _ in range(n)]
    if data.draw(st.booleans()) and n:  # a meshgrid-like block of whole numbers
        values += ax.index_grid((2,) * n_axes).tolist()
    if not values:
        values = np.empty((0, n_axes))
    coords, form = data.draw(coords_form(values, n_axes))
    before = snapshot(coords)

    def compute(b):
        ok, result = judge(ax.axial_cos_sin, dict(kw, coords=coords, dtype=dtype, backend=b),
                           blame={"coords"}, expect=SAME)
        assert ok, f"axial_cos_sin refused coords as {form}: {result}"
        return result

    results = {b: compute(b) for b in FAST + ["python"]}
    if isinstance(before, np.ndarray):
        np.testing.assert_array_equal(coords, before)
    what = f"axial_cos_sin({values!r} as {form}, {kw}, {dtype})"
    if len(FAST) > 1:
        assert_same_bits({b: np.concatenate(results[b], 1) for b in FAST}, what)
    for b in FAST:
        for i in range(2):
            assert_near(results[b][i], results["python"][i], f"{what} [{b}]")
    arr = np.array(values, dtype=np.float64).reshape(-1, n_axes)
    rows, cols = results["python"][0].shape
    if rows == 0:
        return
    fmt = np.dtype(results["python"][0].dtype).name
    with mpmath.workdps(50):
        for _ in range(3):
            r, j = data.draw(st.integers(0, rows - 1)), data.draw(st.integers(0, cols - 1))
            for i, is_cos in ((0, True), (1, False)):
                want = exact_value(arr, kw, r, j, is_cos)
                for got in (results["python"][i][r, j], results[(FAST or ["python"])[0]][i][r, j]):
                    if fmt == "float64":
                        assert abs(float(got) - float(want)) <= 2.0**-45, what
                    elif fmt == "float32":
                        assert ulp_distance(np.float32(got), np.float32(mp_round(want, "float32"))) <= 1, what
                    else:
                        assert float(got) == mp_round(want, fmt), what


BAD_COORDS = (np.array([[math.nan, 0.0]]), np.array([[0.0, math.inf]]), np.array([[2.0**32, 0.0]]),
              np.array([[-(2.0**32), 0.0]]), [[HUGE, 0]], [[1, True]], np.ones((2, 2), bool),
              np.ones((2, 2), complex), np.array([["1", "2"]]), np.ones(2), np.ones((1, 2, 2)),
              np.ones((2, 3)), "coords", np.array([[2**40, 0]]), np.array([[1.0, None]], dtype=object),
              [[1.0], [1.0, 2.0]], np.array([[np.float32("nan"), 0.0]], dtype=np.float32))


def bad_outs(shape):
    n, d = shape
    one = np.empty(shape, np.float32)
    readonly = np.empty(shape, np.float32)
    readonly.setflags(write=False)
    return ([one], one, (one, one), (one,), (one, np.empty((n, d), np.float64)),
            (np.empty(shape, np.int32), one), (np.empty((n + 1, d), np.float32), one),
            (one, np.empty(shape, np.dtype(np.float32).newbyteorder("S"))), (one, readonly),
            (one, np.empty(shape, np.float32, order="F") if n > 1 else readonly),
            (one, np.empty((n, d, 2), np.float32)[..., 0]), (one, [[0.0] * d] * n))


@fuzz(200)
@given(data=st.data())
def test_axial_refuses_bad_arguments(data):
    kw = {"coords": np.array([[0.5, 1.0], [2.0, -3.0], [4.0, 5.0]]), "axes_dim": (4, 6)}
    pools = {
        "coords": BAD_COORDS,
        "axes_dim": tuple((v, 4) for v in BAD_INTS) + ((3, 4), (4,), (4, 4, 4), (), 4, "46", None,
                                                       (-2, 4), (0, 0), (65536, 2)),
        "base": (math.nan, math.inf, -1.0, 0.5, 0.0, "1e4", True, 1j, [1e4], [1e4, 1e4, 1e4], HUGE,
                 [1e4, math.nan], [1e4, 0.5], None),
        "ntk_factor": (0.0, -1.0, math.nan, 1e-5, "2", [1.0], HUGE, [1.0, 0.0]),
        "linear_factor": (0.0, -2.0, 1e-4, math.inf, "2", [1.0, 1.0, 1.0], [1.0, 0.0], 1e307, [1e307, 1.0],
                          HUGE),
        "offset": (0.25, 1.0, -0.5, math.nan, "0", [0.0], [0.0, 0.3]),
        "layout": BAD_CHOICES + ("halves", "interleaved"),
        "dtype": BAD_DTYPES + (np.dtype(">f4"), np.dtype(">f8")),
        "backend": BAD_BACKENDS,
        "out": bad_outs((3, 10)),
    }
    name = data.draw(st.sampled_from(sorted(pools)))
    bad = data.draw(st.sampled_from(pools[name]))
    blame = {name}
    if name == "out":
        blame |= {"out[0]", "out[1]"}
    judge(ax.axial_cos_sin, {**kw, name: bad}, blame=blame, expect=REJECT,
          inplace=("out",) if name != "out" else ())


@fuzz(60)
@given(data=st.data())
def test_axial_out_sharing_memory_with_coords(data):
    n = data.draw(st.integers(1, 4))
    buf = np.zeros(n * 8 * 2 + 8, dtype=np.float64)
    start = data.draw(st.integers(0, 8 * n - 1))  # coords overlap out[0]
    coords = buf[start:start + 2 * n].reshape(n, 2)
    coords[:] = np.arange(2 * n).reshape(n, 2) * 0.5
    out_cos = buf[:n * 8].reshape(n, 8)
    out_sin = np.empty((n, 8))
    before = buf.copy()
    with pytest.raises(ValueError, match="coords"):
        ax.axial_cos_sin(coords, (4, 4), out=(out_cos, out_sin))
    np.testing.assert_array_equal(buf, before)
