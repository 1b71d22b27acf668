"""Property-based fuzzing of every public function (hypothesis).

Two families of properties, each over drawn dtypes (byte order included), shapes, memory
layouts (views, aliasing, negative strides, read-only), values (signs, zeros, tiny and huge,
NaN, inf, near multiples of pi/2) and RoPE scaling dicts:

* **bad input**: a ``TypeError`` or ``ValueError`` whose message names the argument, with
  every argument as it was before the call (arrays bit for bit, dicts key for key) -- never
  another exception, never a number computed from it;
* **good input**: the same bits from every compiled backend, and agreement with the
  ``python`` reference within the README's accuracy (float32 within 1 ULP, float16 and
  bfloat16 bit for bit, float64 within ``2**-45``; ALiBi and T5 bit for bit), and with
  mpmath at a few sampled elements.

Reproducible: a fixed seed, no example database.  ``FASTPE_FUZZ_EXAMPLES=N`` runs N examples
per property (the defaults keep the file near a minute).  The cross-backend properties are
marked ``any_backend``: ``make test``'s default-only runs (``FASTPE_TEST_BACKENDS=default``)
leave them out, the first run having crossed every backend already; the bad-input properties
run on the default backend.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fastpe
from conftest import AVAILABLE, BACKEND_PARAMS, FAST
from fastpe import alibi, grid, relative, rope
from support.cli import run
from support.inputs import POSITION_LIMIT, quarter_turns_of, real_near_quarter_turn
from support.oracle import (
    alibi_value_fn,
    check_against_mpmath,
    geometric,
    grid_value_fn,
    mp_exact,
    rope_value_fn,
    table_value_fn,
    timestep_value_fn,
)
from support.strategies import (
    ANY,
    BAD_BACKENDS,
    BAD_BOOLS,
    BAD_CHOICES,
    BAD_DTYPES,
    BAD_INTS,
    BAD_POSITIONS,
    BAD_SIGNED_POSITIONS,
    BAD_REALS,
    HUGE,
    REJECT,
    SAME,
    SCALING_BAD,
    SCALING_EDGE,
    SCALING_KEYS,
    SCALING_READS,
    SWAPPED_DTYPES,
    assert_near,
    assert_same_bits,
    bits,
    call_text,
    fuzz,
    int_array_form,
    judge,
    names_one_of,
    real_array_form,
    model_config,
    rope_config,
    rope_warnings_named,
    short,
    st_dtype_arg,
    st_position,
    st_real_t,
)

#: the cross-backend properties (every compiled backend against the reference, by name):
#: decided by the first run of ``make test``, deselected in its default-only runs
crossing = pytest.mark.any_backend

HAS_BF16 = True
try:
    import ml_dtypes  # noqa: F401
except ImportError:  # pragma: no cover - an optional extra
    HAS_BF16 = False

DTYPE_NAMES = ("float32", "float64", "float16") + (("bfloat16",) if HAS_BF16 else ())
st_out_dtype = st.sampled_from(DTYPE_NAMES)


def np_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def over_backends(compute, what: str, *, scale=1.0, slack=None):
    """``compute(backend)`` on every compiled backend and on the reference: the compiled
    ones must give the same bits, each near the reference.  Returns
    ``(compiled result, reference result)``."""
    fast = {b: compute(b) for b in FAST}
    ref = compute("python")
    if not fast:  # only the reference loads here: it is still checked against mpmath
        return ref, ref
    assert_same_bits(fast, what)
    for b, value in fast.items():
        assert_near(value, ref, f"{what} [{b}]", scale=scale,
                    slack=slack(value) if callable(slack) else slack)
    return next(iter(fast.values())), ref


def sample_cells(data, shape, n: int = 3):
    """A few (row, column) cells of a 2-D result, the ends included now and then."""
    rows, cols = shape
    if rows == 0 or cols == 0:
        return []
    cells = {(0, 0), (rows - 1, cols - 1)}
    for _ in range(n):
        cells.add((data.draw(st.integers(0, rows - 1)), data.draw(st.integers(0, cols - 1))))
    return sorted(cells)


def mp_check_cells(data, fast, ref, value_fn, fmt: str, what: str, *, scale=1.0):
    """The reference correctly rounded and the compiled result within the design's bound,
    against mpmath, at a few cells."""
    for r, j in sample_cells(data, fast.shape):
        fn = value_fn(r, j)
        check_against_mpmath(ref[r, j], fn, fmt, f"{what}: reference at ({r}, {j})", scale=scale,
                             exact=True)
        check_against_mpmath(fast[r, j], fn, fmt, f"{what}: compiled at ({r}, {j})", scale=scale)


# =========================================================================== sinusoid tables


@st.composite
def table_kwargs(draw, max_d: int = 64):
    """Valid keywords of :func:`fastpe.table` beyond the sizes: a convention and its numbers."""
    denominator = draw(st.sampled_from(("d", "half-1")))
    d_model = draw(st.integers(2 if denominator == "half-1" else 1, max_d))
    kw = {"d_model": d_model, "layout": draw(st.sampled_from(("interleaved", "halves"))),
          "denominator": denominator}
    base = draw(st.sampled_from((10000.0, 500000.0, 1e6, 2.0, 10.5, 1.0 + 2.0**-20, 1e300,
                                 10000, np.float32(2.5), np.int64(7))))
    min_ts = draw(st.sampled_from((1.0, 1.0, 0.5, 1 / 1024, 3.7)))
    max_ts = draw(st.sampled_from((None, None, None, 1e4, 50.0)))
    if max_ts is not None:
        base = 10000.0
    if (max_ts if max_ts is not None else float(base)) <= min_ts:
        min_ts = 1.0
    if min_ts != 1.0 or draw(st.booleans()):
        kw["min_timescale"] = min_ts
    if max_ts is not None:
        kw["max_timescale"] = max_ts
    if base != 10000.0 or draw(st.booleans()):
        kw["base"] = base
    return kw


def table_fn(kw):
    """The true value of (position, column) for the convention ``kw``."""
    return lambda p, j: table_value_fn(
        p, j, kw["d_model"], float(kw.get("base", 10000.0)), kw.get("layout", "interleaved"),
        kw.get("denominator", "d"), float(kw.get("min_timescale", 1.0)), kw.get("max_timescale"))


def table_frequency_fn(kw, k):
    d = kw["d_model"]
    n = d / 2 if kw.get("denominator", "d") == "d" else float(max(d // 2 - 1, 1))
    hi = kw.get("max_timescale") or float(kw.get("base", 10000.0))
    return lambda: geometric(k, n, hi, float(kw.get("min_timescale", 1.0)))


@crossing
@fuzz(150)
@given(kw=table_kwargs(), max_len=st.integers(1, 64), dtype=st_out_dtype, data=st.data())
def test_table_agrees_across_backends_and_with_mpmath(kw, max_len, dtype, data):
    fast, ref = over_backends(lambda b: fastpe.table(max_len=max_len, dtype=dtype, backend=b, **kw),
                              f"table({kw}, max_len={max_len}, dtype={dtype})")
    as64 = (lambda a: a.astype(np.float64)) if dtype == "bfloat16" else (lambda a: a)
    mp_check_cells(data, as64(fast), as64(ref), table_fn(kw), dtype, f"table {kw} {dtype}")


@st.composite
def positions_for(draw, kw, max_size: int = 16):
    """Positions for the convention ``kw``: edges, random, and the quarter turns of a few
    of its frequencies (where a sine or cosine is tiny)."""
    d = kw["d_model"]
    count = (d + 1) // 2 if kw.get("denominator", "d") == "d" else d // 2
    hard = set()
    for k in {0, count - 1, draw(st.integers(0, max(count - 1, 0)))}:
        key = ("table", d, kw.get("denominator", "d"), float(kw.get("base", 10000.0)),
               float(kw.get("min_timescale", 1.0)), kw.get("max_timescale"), k)
        hard.update(quarter_turns_of(key, table_frequency_fn(kw, k)))
    return draw(st.lists(st_position(hard), min_size=0, max_size=max_size))


@crossing
@fuzz(150)
@given(kw=table_kwargs(), dtype=st_out_dtype, data=st.data())
def test_forward_agrees_across_backends_and_with_mpmath(kw, dtype, data):
    values = data.draw(positions_for(kw))
    positions, form = data.draw(int_array_form(values))
    config = fastpe.PosEncConfig(**kw)
    dt = np_dtype(dtype)

    def compute(b):
        out = np.empty((len(values), kw["d_model"]), dtype=dt)
        ok, result = judge(fastpe.forward, {"positions": positions, "config": config, "out": out,
                                            "backend": b}, blame={"positions"}, expect=SAME,
                           inplace=("out",))
        assert ok, f"forward refused positions in the {form} form: {result}"
        assert result is out
        return result

    fast, ref = over_backends(compute, f"forward({short(values)} as {form}, {kw}, {dtype})")
    value = table_fn(kw)
    as64 = (lambda a: a.astype(np.float64)) if dtype == "bfloat16" else (lambda a: a)
    mp_check_cells(data, as64(fast), as64(ref), lambda r, j: value(values[r], j), dtype,
                   f"forward {kw} {dtype}")
    # forward equals the table's rows at the same positions (the README's bit-identity)
    if values and max(values) < 64:
        tab = fastpe.table(max_len=64, dtype=dtype, **kw)
        assert_same_bits({"forward": fast, "table rows": tab[np.array(values, dtype=np.int64)]},
                         f"forward vs table {kw}")


def bad_outs(shape, dtype_name: str = "float32"):
    """``out`` arrays every function with an ``out`` must refuse, for a result of ``shape``:
    wrong dtype, byte order or shape, not an array, not C-contiguous, read-only."""
    n, d = shape
    dt = np_dtype(dtype_name)
    outs = [np.empty(shape, dtype=np.int32), np.empty(shape, dtype=np.complex64),
            np.empty(shape, dtype=np.dtype(np.float16).newbyteorder("S")),
            np.empty((n + 1, d), dtype=dt), np.empty((n, d + 1), dtype=dt), np.empty((n, d, 1), dtype=dt),
            np.empty(n * d, dtype=dt), [[0.0] * d] * n]
    if dt.kind == "f":
        outs.append(np.empty(shape, dtype=dt.newbyteorder("S")))
    strided = np.empty((n, d, 2), dtype=dt)[..., 0]
    if not strided.flags.c_contiguous:
        outs.append(strided)
    fortran = np.empty(shape, dtype=dt, order="F")
    if not fortran.flags.c_contiguous:
        outs.append(fortran)
    readonly = np.empty(shape, dtype=dt)
    readonly.setflags(write=False)
    outs.append(readonly)
    return outs


def _read_only(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@fuzz(200)
@given(kw=table_kwargs(max_d=8), max_len=st.integers(1, 4), data=st.data())
def test_table_refuses_bad_arguments(kw, max_len, data):
    kw = dict(kw, max_len=max_len)
    shape = (max_len, kw["d_model"])
    pools = {
        "d_model": BAD_INTS + (0, -1, 65537, 2**64),
        "max_len": BAD_INTS + (0, -1, POSITION_LIMIT + 1, 2**64),
        "base": BAD_REALS + (1.0, 0.5, 0, -10.0, 1, np.float64(1.0)),
        "layout": BAD_CHOICES + ("inter leaved", "neox"),
        "denominator": BAD_CHOICES + ("half", "dd"),
        "min_timescale": BAD_REALS + (0, -1.0, 1 / 2048, 2.0**-11, 1e6),
        "max_timescale": BAD_REALS + (0.0, -1.0, float(kw.get("min_timescale", 1.0)) / 2),
        "dtype": BAD_DTYPES,
        "backend": BAD_BACKENDS,
        "out": bad_outs(shape),
    }
    name = data.draw(st.sampled_from(sorted(pools)))
    value = data.draw(st.sampled_from(pools[name]))
    if name == "max_timescale" and "base" in kw:
        del kw["base"]
    judge(fastpe.table, {**kw, name: value}, blame={name}, expect=REJECT)


@fuzz(120)
@given(kw=table_kwargs(max_d=8), max_len=st.integers(1, 4), dtype=st_dtype_arg(),
       backend=st.sampled_from(BACKEND_PARAMS))
def test_table_dtype_argument(kw, max_len, dtype, backend):
    """Every spelling of a dtype: a name (any case, spaces), a NumPy dtype or type; a
    byte-swapped dtype is refused or gives the native values; anything else is refused."""
    value, native = dtype
    call = dict(kw, max_len=max_len, dtype=value, backend=backend)
    if native is None:
        judge(fastpe.table, call, blame={"dtype"}, expect=REJECT)
        return
    ok, result = judge(fastpe.table, call, blame={"dtype"}, expect=SAME)
    want = fastpe.table(**dict(call, dtype=native))
    if ok:
        assert result.dtype.name == want.dtype.name, (call_text(fastpe.table, call), result.dtype)
        if not result.dtype.isnative:  # accepted a byte-swapped dtype: its values must be right
            result = result.astype(result.dtype.newbyteorder("="))
        assert_same_bits({"given": result, "native": want}, call_text(fastpe.table, call))


@fuzz(200)
@given(kw=table_kwargs(max_d=8), data=st.data())
def test_forward_refuses_bad_positions_and_out(kw, data):
    config = fastpe.PosEncConfig(**kw)
    d = kw["d_model"]
    which = data.draw(st.sampled_from(("positions", "out", "config", "alias", "backend")))
    n = 3
    positions = np.array([0, 1, 2], dtype=np.uint32)
    out = np.zeros((n, d), dtype=np.float32)
    if which == "positions":
        positions = data.draw(st.sampled_from(BAD_SIGNED_POSITIONS))
        out = np.zeros((len(positions) if isinstance(positions, list) and positions and
                        not isinstance(positions[0], list) else 1, d), dtype=np.float32)
        judge(fastpe.forward, {"positions": positions, "config": config, "out": out},
              blame={"positions"}, expect=REJECT, inplace=("out",))
    elif which == "out":
        out = data.draw(st.sampled_from(bad_outs((n, d))))
        judge(fastpe.forward, {"positions": positions, "config": config, "out": out},
              blame={"out"}, expect=REJECT)
    elif which == "config":
        config = data.draw(st.sampled_from(({"d_model": d}, None, d, "spec", fastpe.table)))
        judge(fastpe.forward, {"positions": positions, "config": config, "out": out},
              blame={"config"}, expect=REJECT)
    elif which == "backend":
        judge(fastpe.forward, {"positions": positions, "config": config, "out": out,
                               "backend": data.draw(st.sampled_from(BAD_BACKENDS))},
              blame={"backend"}, expect=REJECT)
    else:  # positions read from out's own memory: refused, or the values of a copy
        out = np.zeros((n, max(d, 2)), dtype=np.float32)
        config = fastpe.PosEncConfig(**dict(kw, d_model=max(d, 2)))
        view = out.reshape(-1).view(np.uint32)[:n]
        view[:] = [0, 7, 4_000_000_000]
        want = fastpe.forward(view.copy(), config, np.empty_like(out))
        ok, result = judge(fastpe.forward, {"positions": view, "config": config, "out": out},
                           blame={"positions", "out"}, expect=SAME, inplace=("out", "positions"))
        if ok:
            assert_same_bits({"aliased": result, "copied": want}, "forward with positions inside out")


# =========================================================================== timestep


@st.composite
def timestep_kwargs(draw, max_d: int = 64):
    d_model = draw(st.integers(2, max_d))
    half = d_model // 2
    kw = {"d_model": d_model}
    shift = draw(st.sampled_from((1.0, 0.0, 0.5, -1.0, 1, half - 0.5, -3.25)))
    if half - shift > 0:
        kw["shift"] = shift
    else:
        kw["shift"] = 0.0
    for key, pool in (("base", (10000.0, 1.0, 1.5, 1e6, 10000, 1e300)),
                      ("scale", (1.0, 1000.0, 1e-3, 2.0**-20, 1024.0, 3))):
        if draw(st.booleans()):
            kw[key] = draw(st.sampled_from(pool))
    if draw(st.booleans()):
        kw["flip_sin_to_cos"] = draw(st.sampled_from((True, False, np.bool_(True))))
    return kw


def timestep_frequency_fn(kw, k):
    half = kw["d_model"] // 2

    def fn():
        return mp_exact(kw.get("scale", 1.0)) * geometric(
            k, half - float(kw.get("shift", 1.0)), float(kw.get("base", 10000.0)))

    return fn


@st.composite
def timesteps_for(draw, kw, max_size: int = 12):
    """Real timesteps: edges, random reals of every size and sign, and reals whose angle
    lies next to a zero of sin or cos for one of the frequencies."""
    half = kw["d_model"] // 2
    values = draw(st.lists(st_real_t(), min_size=0, max_size=max_size))
    for _ in range(draw(st.integers(0, 4))):
        k = draw(st.integers(0, half - 1))
        w = timestep_frequency_fn(kw, k)
        n = draw(st.one_of(st.integers(-2000, 2000), st.integers(-(2**31), 2**31)))
        t = real_near_quarter_turn(n, w)
        if abs(t) < 2.0**32:
            values.append(t)
    return values


@crossing
@fuzz(200)
@given(kw=timestep_kwargs(), dtype=st_out_dtype, data=st.data())
def test_timestep_agrees_across_backends_and_with_mpmath(kw, dtype, data):
    values = data.draw(timesteps_for(kw))
    t, form = data.draw(real_array_form(values))

    def compute(b):
        ok, result = judge(fastpe.timestep, dict(kw, t=t, dtype=dtype, backend=b), blame={"t"},
                           expect=SAME)
        assert ok, f"timestep refused t in the {form} form: {result}"
        return result

    fast, ref = over_backends(compute, f"timestep(t={values!r} as {form}, {kw}, dtype={dtype})")
    as64 = (lambda a: a.astype(np.float64)) if dtype == "bfloat16" else (lambda a: a)
    flip = bool(kw.get("flip_sin_to_cos", False))
    mp_check_cells(
        data, as64(fast), as64(ref),
        lambda r, j: timestep_value_fn(values[r], j, kw["d_model"], float(kw.get("base", 10000.0)),
                                       float(kw.get("shift", 1.0)), float(kw.get("scale", 1.0)), flip),
        dtype, f"timestep {kw} {dtype}")


@fuzz(200)
@given(kw=timestep_kwargs(max_d=8), data=st.data())
def test_timestep_refuses_bad_arguments(kw, data):
    kw = dict(kw, t=[0.0, 0.5, -3.0])
    half = kw["d_model"] // 2
    pools = {
        "t": ([math.nan], [math.inf], [2.0**32], [-(2.0**32)], "1", [[1.0]], [1j], [True],
              np.array([1.0], dtype=object), [HUGE], np.array([2**63], dtype=np.uint64),
              np.array(["1"]), [None], np.zeros((2, 2))),
        "d_model": BAD_INTS + (1, 0, -2, 65537),
        "base": BAD_REALS + (0.5, 0.0, -1.0),
        "shift": BAD_REALS + (float(half), half + 1.0),
        "scale": BAD_REALS + (0.0, -1.0, 1025.0, 1e300),
        "flip_sin_to_cos": BAD_BOOLS,
        "dtype": BAD_DTYPES,
        "backend": BAD_BACKENDS,
        "out": bad_outs((3, kw["d_model"])),
    }
    name = data.draw(st.sampled_from(sorted(pools)))
    judge(fastpe.timestep, {**kw, name: data.draw(st.sampled_from(pools[name]))},
          blame={name}, expect=REJECT)


@fuzz(120)
@given(kw=timestep_kwargs(max_d=16), data=st.data(), backend=st.sampled_from(BACKEND_PARAMS))
def test_timestep_out_sharing_memory_with_t(kw, data, backend):
    """``t`` read from ``out``'s own memory: refused, or the values ``t``'s copy gives."""
    n = data.draw(st.integers(1, 6))
    values = [data.draw(st_real_t(1e6)) for _ in range(n)]
    out = np.zeros((n, kw["d_model"]), dtype=np.float64)
    where = data.draw(st.sampled_from(("start", "end", "column")))
    flat = out.reshape(-1)
    t = flat[:n] if where == "start" else flat[flat.size - n:] if where == "end" else out[:, 0]
    t[:] = values
    want = fastpe.timestep(np.array(values), backend=backend, dtype="float64", **kw)
    ok, result = judge(fastpe.timestep, dict(kw, t=t, out=out, backend=backend),
                       blame={"t", "out"}, expect=SAME, inplace=("out", "t"))
    if ok:
        assert_same_bits({"aliased": result, "copied": want},
                         f"timestep(t=view of out at the {where}, {kw}, backend={backend!r}), t={values}")


# =========================================================================== add_


@st.composite
def add_case(draw, max_d: int = 32):
    kw = draw(table_kwargs(max_d=max_d))
    d = kw.pop("d_model")
    seq = draw(st.integers(1, 12))
    lead = draw(st.sampled_from(((), (1,), (2,), (2, 3))))
    dtype = draw(st.sampled_from((np.float32, np.float64)))
    shape = lead + (seq, d)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = (rng.standard_normal(shape) * draw(st.sampled_from((1.0, 1e-30, 1e30)))).astype(dtype)
    if draw(st.booleans()):  # specials propagate as IEEE arithmetic does
        flat = x.reshape(-1)
        flat[rng.integers(0, flat.size, 2)] = draw(st.sampled_from((np.inf, -np.inf, np.nan, 0.0, -0.0)))
    call = {"x": x}
    mode = draw(st.sampled_from(("offset", "seq", "rows")))
    if mode == "offset":
        call["offset"] = draw(st.sampled_from((0, 1, 100, POSITION_LIMIT - seq)))
        positions = np.arange(call["offset"], call["offset"] + seq, dtype=np.int64)
    else:
        pshape = (seq,) if mode == "seq" else shape[:-1]
        values = draw(st.lists(st_position(), min_size=math.prod(pshape), max_size=math.prod(pshape)))
        positions = np.array(values, dtype=np.int64).reshape(pshape)
        form_values, _ = draw(int_array_form(values))
        call["positions"] = np.asarray(form_values).reshape(pshape) if pshape != (seq,) else form_values
    if draw(st.booleans()):
        call["scale"] = draw(st.sampled_from((math.sqrt(d), 2.0, -1.0, 0.0, 1e-3, 3)))
    if draw(st.booleans()):
        call["config"] = fastpe.PosEncConfig(d, **kw)
    else:
        call.update(kw)
    return call, positions, fastpe.PosEncConfig(d, **kw)


@crossing
@fuzz(150)
@given(case=add_case())
def test_add_is_x_times_scale_plus_the_table(case):
    """``add_`` equals NumPy's ``x * scale + table[positions]`` in ``x``'s dtype on every
    backend (the table of that backend), the compiled ones bit for bit alike."""
    call, positions, config = case
    x0 = call["x"].copy()
    results = {}
    for b in FAST + ["python"]:
        x = x0.copy()
        ok, result = judge(fastpe.add_, dict(call, x=x, backend=b), blame={"positions"},
                           expect=SAME, inplace=("x",))
        assert ok and result is x, result
        pe = np.empty((positions.size, config.d_model), dtype=x.dtype)
        fastpe.forward(positions.reshape(-1), config, pe, backend=b)
        pe = pe.reshape(positions.shape + (config.d_model,))
        if positions.ndim == 1:
            pe = np.broadcast_to(pe, x0.shape)
        scale = call.get("scale")
        with np.errstate(all="ignore"):
            want = (x0 * scale if scale is not None else x0) + pe
        assert np.array_equal(x, want.astype(x.dtype), equal_nan=True), (
            f"{b}: add_ differs from x * scale + table[positions] ({call_text(fastpe.add_, call)})")
        results[b] = x
    if FAST:
        assert_same_bits({b: results[b] for b in FAST}, f"add_ {call_text(fastpe.add_, call)}")


@pytest.mark.any_backend
@fuzz(200)
@given(case=add_case(max_d=8), data=st.data())
def test_add_refuses_bad_arguments(case, data):
    call, _, _ = case
    x = call["x"]
    seq = x.shape[-2]
    with np.errstate(all="ignore"):
        narrow = (x.astype(np.float16), x.astype(np.int32))
    readonly = x.copy()
    readonly.setflags(write=False)
    bad_x = [x.tolist(), *narrow, x.reshape(-1), x.astype(x.dtype.newbyteorder("S")), readonly,
             x.astype(np.complex64), None]
    bad_x += [v for v in (x[..., ::-1], np.asfortranarray(x), np.stack([x, x], axis=-1)[..., 0])
              if not v.flags.c_contiguous]
    pools = {
        "x": tuple(bad_x),
        "offset": BAD_INTS + (-1, POSITION_LIMIT) if "positions" not in call else (1, 5),
        "positions": BAD_POSITIONS + (list(range(seq + 1)), np.zeros((seq, 2), dtype=np.int64)),
        "scale": BAD_REALS,
        "backend": BAD_BACKENDS,
    }
    if "config" in call:
        pools["config"] = ({"d_model": x.shape[-1]}, fastpe.PosEncConfig(x.shape[-1] + 1), x.shape[-1], "spec")
        pools["base"] = (5000.0, 2.0)  # a keyword beside a config contradicts it
    else:
        pools.update(base=BAD_REALS + (1.0, 0.0), layout=BAD_CHOICES, denominator=BAD_CHOICES,
                     min_timescale=BAD_REALS + (0.0, -1.0))
    name = data.draw(st.sampled_from(sorted(pools)))
    value = data.draw(st.sampled_from(pools[name]))
    if name == "positions" and "offset" in call:
        call = {k: v for k, v in call.items() if k != "offset"}
    blame = {name, "config"} if name == "base" and "config" in call else {name}
    if name == "offset" and "positions" in call:
        blame = {"offset", "positions"}
    judge(fastpe.add_, {**call, name: value}, blame=blame, expect=REJECT)


@fuzz(120)
@given(data=st.data(), backend=st.sampled_from(BACKEND_PARAMS))
def test_add_positions_inside_x(data, backend):
    """``positions`` read from ``x``'s own memory (its bit patterns as uint32): refused, or
    the sums a copy of them gives."""
    d = data.draw(st.integers(1, 16))
    seq = data.draw(st.integers(1, 8))
    lead = data.draw(st.sampled_from(((), (2,))))
    if backend != "python" and data.draw(st.booleans()):
        # more rows than add_ computes at a time: a later block would read positions an
        # earlier one has already overwritten
        d, seq, lead = 64, (1 << 20) // 64 + data.draw(st.integers(1, 5)), ()
    x = np.zeros(lead + (seq, d), dtype=np.float32)
    flat = x.reshape(-1).view(np.uint32)
    where = data.draw(st.sampled_from(("start", "end")))
    p = flat[:seq] if where == "start" else flat[flat.size - seq:]
    few = data.draw(st.lists(st.integers(0, 300), min_size=min(seq, 8), max_size=min(seq, 8)))
    p[:] = np.resize(np.array(few, dtype=np.uint32), seq)  # the drawn positions, repeated
    x_copy, p_copy = x.copy(), p.copy()
    fastpe.add_(x_copy, positions=p_copy, backend=backend)
    ok, result = judge(fastpe.add_, {"x": x, "positions": p, "backend": backend},
                       blame={"x", "positions"}, expect=SAME, inplace=("x", "positions"))
    if ok:
        assert np.array_equal(result, x_copy, equal_nan=True), (
            f"add_(x, positions=view of x at the {where}, backend={backend!r}) with positions "
            f"{p_copy.tolist()}: differs from the same call on copies")


# =========================================================================== fairseq


@crossing
@fuzz(120)
@given(d_model=st.integers(2, 32), data=st.data())
def test_fairseq_embedding_agrees(d_model, data):
    padding_idx = data.draw(st.sampled_from((0, 1, 2, 100)))
    shape = data.draw(st.sampled_from(((5,), (2, 4), (1, 1), (3, 0))))
    size = math.prod(shape)
    tokens = np.array(data.draw(st.lists(st.sampled_from((padding_idx, 3, 4, 9, 2**31 - 1)),
                                         min_size=size, max_size=size)), dtype=np.int64).reshape(shape)
    mask = tokens != padding_idx
    offset = data.draw(st.sampled_from((0, 3)))
    shifted = fastpe.fairseq_positions(tokens, padding_idx, offset=offset)
    assert np.array_equal(shifted, (np.cumsum(mask, axis=-1) + offset) * mask + padding_idx)
    pos = fastpe.fairseq_positions(tokens, padding_idx)
    positions_out = np.full(shape, -7, dtype=np.int64)
    ok, got = judge(fastpe.fairseq_positions, {"tokens": tokens, "padding_idx": padding_idx, "offset": offset,
                                                "out": positions_out}, blame={"out"}, expect=SAME, inplace=("out",))
    assert ok and got is positions_out and np.array_equal(positions_out, shifted), "fairseq_positions with out"
    dtype = data.draw(st_out_dtype)
    use_out = data.draw(st.booleans())

    def compute(b):
        if not use_out:
            return fastpe.fairseq_embedding(tokens, d_model, padding_idx, dtype=dtype, backend=b)
        out = np.empty(shape + (d_model,), dtype=np_dtype(dtype))
        ok, result = judge(fastpe.fairseq_embedding, {"tokens": tokens, "d_model": d_model, "padding_idx": padding_idx,
                                                      "out": out, "backend": b},
                           blame={"out"}, expect=SAME, inplace=("out",))
        assert ok and result is out, f"fairseq_embedding refused out: {result}"
        return result

    fast, ref = over_backends(compute, f"fairseq_embedding({tokens.tolist()}, {d_model}, {padding_idx}, {dtype}, "
                                       f"out={use_out})")
    config = fastpe.PosEncConfig(d_model, 1, layout="halves", denominator="half-1")
    want = np.empty((pos.size, d_model), dtype=np_dtype(dtype))
    fastpe.forward(pos.reshape(-1), config, want, backend="python")
    want[~mask.reshape(-1)] = 0
    assert_same_bits({"fairseq_embedding": ref.reshape(-1, d_model), "forward": want},
                     "fairseq_embedding vs the half-1 table's rows")


@pytest.mark.any_backend
@fuzz(200)
@given(data=st.data())
def test_fairseq_refuses_bad_arguments(data):
    fn = data.draw(st.sampled_from((fastpe.fairseq_positions, fastpe.fairseq_embedding)))
    call = {"tokens": np.array([[1, 5, 6]]), "padding_idx": 1}
    if fn is fastpe.fairseq_embedding:
        call["d_model"] = 8
    pools = {
        "tokens": ([[1.5]], np.array([True]), "abc", np.array(3), np.array([1 + 2j]), [[1], [1, 2]],
                   np.array(["1"])),
        "padding_idx": BAD_INTS + (-1, 2**63),
    }
    if fn is fastpe.fairseq_positions:
        pools["offset"] = BAD_INTS + (-1, 2**63)
        shape, good = (1, 3), np.int64
        wrong = (np.float64, np.int32, np.uint64, ">i8")
    else:
        pools.update(d_model=BAD_INTS + (0, 1, 65537), dtype=BAD_DTYPES, backend=BAD_BACKENDS)
        shape, good = (1, 3, 8), np.float32
        wrong = (np.int64, np.complex64, ">f4")
    pools["out"] = tuple(np.empty(shape, dtype=d) for d in wrong) + (
        np.empty(shape[:-1] + (shape[-1] + 1,), good), np.empty(shape + (2,), good)[..., 0],
        np.empty(shape, good).tolist(), _read_only(np.empty(shape, good)))
    name = data.draw(st.sampled_from(sorted(pools)))
    judge(fn, {**call, name: data.draw(st.sampled_from(pools[name]))}, blame={name},
          expect=REJECT)


# =========================================================================== RoPE


def rope_seq_len(kwargs, positions, seq_len):
    """The length a length-dependent rule sees in the array functions."""
    if seq_len is not None:
        return seq_len
    return int(max(positions)) + 1 if len(positions) else 0


@st.composite
def rope_positions(draw, inv, max_size: int = 8):
    hard = set()
    for i in {0, len(inv) - 1}:
        f = float(inv[i])
        hard.update(quarter_turns_of(("rope", f), lambda f=f: mp_exact(f)))
    return draw(st.lists(st_position(hard), min_size=0, max_size=max_size))


def rope_reference_twin(kwargs, seq_len):
    """``(inv_freq, attention)`` of the decimal twin (``fastpe/_exact/rope_scaling.py``)."""
    from fastpe._exact import rope_scaling as _reference_scaling

    spec = rope.resolve(**kwargs)
    values, attention = _reference_scaling.inv_freq(spec, seq_len)
    return np.array(values, dtype=np.float64), attention


#: every rope type, for the properties of values
ROPE_TYPES_DRAWN = (None, "default", "linear", "dynamic", "yarn", "llama3", "longrope", "su", "proportional")


@crossing
@fuzz(200)
@pytest.mark.filterwarnings("ignore::fastpe.rope.RopeConfigWarning")  # values here; warnings: below
@given(cfg=rope_config(types=ROPE_TYPES_DRAWN), data=st.data())
def test_rope_cos_sin_agrees_across_backends_and_with_mpmath(cfg, data):
    seq_len = data.draw(st.one_of(st.none(), st.integers(0, POSITION_LIMIT)))
    layout = data.draw(st.sampled_from(("neox", "gptj")))
    dtype = data.draw(st_out_dtype)
    spec = rope.resolve(**cfg)
    from fastpe.rope import _scaling

    # the hard positions are those of the frequencies the call will use
    inv0, _ = rope.inv_freq(**cfg, seq_len=seq_len)
    values = data.draw(rope_positions(inv0))
    positions, form = data.draw(int_array_form(values))
    s = rope_seq_len(cfg, values, seq_len) if _scaling.uses_seq_len(spec) else None
    inv, af = rope.inv_freq(**cfg, seq_len=s)
    twin_inv, twin_af = rope_reference_twin(cfg, s)
    assert np.array_equal(inv, twin_inv) and af == twin_af, (
        f"inv_freq({cfg}, seq_len={s}) = {inv.tolist()}, {af!r}; the decimal twin gives "
        f"{twin_inv.tolist()}, {twin_af!r}")
    assert np.isfinite(inv).all() and (inv >= 0).all() and math.isfinite(af)

    def compute(b):
        ok, result = judge(rope.cos_sin, dict(cfg, positions=positions, seq_len=seq_len, layout=layout,
                                             dtype=dtype, backend=b), blame={"positions"}, expect=SAME)
        assert ok, f"cos_sin refused positions in the {form} form: {result}"
        return np.stack(result)

    what = f"rope.cos_sin({short(values)} as {form}, {cfg}, seq_len={seq_len}, {layout}, {dtype})"
    fast, ref = over_backends(compute, what, scale=max(1.0, abs(af)))
    n = len(inv)
    as64 = (lambda a: a.astype(np.float64)) if dtype == "bfloat16" else (lambda a: a)
    for which in (0, 1):
        def value(r, j, which=which):
            i = j % n if layout == "neox" else j // 2
            return rope_value_fn(values[r], float(inv[i]), af, which == 0)

        mp_check_cells(data, as64(fast[which]), as64(ref[which]), value, dtype,
                       f"{what} {'cos' if which == 0 else 'sin'}", scale=max(1.0, abs(af)))


@st.composite
def rope_apply_case(draw):
    cfg = draw(rope_config(max_head_dim=32, types=ROPE_TYPES_DRAWN))
    head_dim = cfg["head_dim"]
    ndim = draw(st.sampled_from((3, 4)))
    heads = draw(st.integers(1, 3))
    k_heads = draw(st.integers(1, 3))
    if ndim == 3:
        tokens = draw(st.integers(0, 6))
        shape, k_shape, seq = (tokens, heads, head_dim), (tokens, k_heads, head_dim), tokens
    else:
        batch, seq = draw(st.integers(1, 2)), draw(st.integers(0, 5))
        shape, k_shape = (batch, heads, seq, head_dim), (batch, k_heads, seq, head_dim)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    q = (rng.standard_normal(shape) * draw(st.sampled_from((1.0, 1e-20, 1e20)))).astype(np.float32)
    k = rng.standard_normal(k_shape).astype(np.float32)
    if q.size and draw(st.booleans()):
        q.reshape(-1)[rng.integers(0, q.size)] = draw(st.sampled_from((np.inf, np.nan, 0.0, -0.0, 3e38)))
    call = dict(cfg)
    mode = draw(st.sampled_from(("offset", "seq", "batch") if ndim == 4 else ("offset", "seq")))
    if mode == "offset" and draw(st.booleans()):
        call["offset"] = draw(st.sampled_from((0, 5, POSITION_LIMIT - max(seq, 1))))
    elif mode == "seq":
        call["positions"] = draw(st.lists(st_position(), min_size=seq, max_size=seq))
    elif mode == "batch":
        call["positions"] = np.array(draw(st.lists(st_position(), min_size=shape[0] * seq,
                                                   max_size=shape[0] * seq)),
                                     dtype=np.int64).reshape(shape[0], seq)
    call["layout"] = draw(st.sampled_from(("neox", "gptj")))
    if draw(st.booleans()):
        call["seq_len"] = draw(st.integers(0, POSITION_LIMIT))
    return call, q, k


def rotation_slack(x0, rotary_dim, layout, af):
    """The absolute bound the design allows a rotated float32 where ``x1 cos - x2 sin``
    cancels: ``2**-44 * |af| * (|x1| + |x2|)`` of each pair (beyond 1 ULP)."""
    a = np.abs(x0.astype(np.float64))
    slack = np.zeros_like(a)
    n = rotary_dim // 2
    if layout == "neox":
        pair = a[..., :n] + a[..., n:2 * n]
        slack[..., :n] = pair
        slack[..., n:2 * n] = pair
    else:
        pair = a[..., 0:2 * n:2] + a[..., 1:2 * n:2]
        slack[..., 0:2 * n:2] = pair
        slack[..., 1:2 * n:2] = pair
    return slack * 2.0**-44 * max(abs(af), 1e-300)


@crossing
@fuzz(150)
@pytest.mark.filterwarnings("ignore::fastpe.rope.RopeConfigWarning")  # values here; warnings: below
@given(case=rope_apply_case(), qk=st.booleans())
def test_rope_apply_agrees_across_backends(case, qk):
    call, q0, k0 = case
    spec = rope.resolve(**{k: call[k] for k in ("head_dim", "base", "rotary_dim", "scaling",
                                                "max_position_embeddings") if k in call})
    from fastpe.rope import _scaling

    pos = call.get("positions")
    if pos is None:
        off = call.get("offset", 0)
        n_seq = q0.shape[0] if q0.ndim == 3 else q0.shape[2]
        flat_pos = list(range(off, off + n_seq))
    else:
        flat_pos = np.asarray(pos).reshape(-1).tolist()
    s = call.get("seq_len")
    if s is None and _scaling.uses_seq_len(spec):
        s = max(flat_pos) + 1 if flat_pos else 0
    _, af = rope.inv_freq(**{k: call[k] for k in ("head_dim", "base", "rotary_dim", "scaling",
                                                  "max_position_embeddings") if k in call}, seq_len=s)

    def compute(b):
        q, k = q0.copy(), k0.copy()
        if qk:
            ok, result = judge(rope.apply_qk_, dict(call, q=q, k=k, backend=b), blame={"positions"},
                               expect=SAME, inplace=("q", "k"))
            assert ok and result[0] is q and result[1] is k, result
        else:
            ok, result = judge(rope.apply_, dict(call, x=q, backend=b), blame={"positions"},
                               expect=SAME, inplace=("x",))
            assert ok and result is q, result
        return np.concatenate([q.reshape(-1), k.reshape(-1) if qk else k0.reshape(-1)])

    slack_q = rotation_slack(q0, spec.rotary_dim, call["layout"], af).reshape(-1)
    slack_k = rotation_slack(k0, spec.rotary_dim, call["layout"], af).reshape(-1)
    slack = np.concatenate([slack_q, slack_k if qk else np.zeros(k0.size)])
    fast, ref = over_backends(compute, f"rope.apply{'_qk' if qk else ''}_ {short(call)} q{q0.shape} k{k0.shape}",
                              slack=slack)
    # the columns past rotary_dim are left alone, bit for bit
    for got in (fast, ref):
        tail = got[:q0.size].reshape(q0.shape)[..., spec.rotary_dim:]
        assert tail.tobytes() == q0[..., spec.rotary_dim:].tobytes(), "apply_ touched columns past rotary_dim"


def scaling_reads(scaling) -> tuple[str, ...]:
    """The keys of ``scaling`` its rope type reads (HF ignores the rest, as fastpe does)."""
    rope_type = scaling.get("rope_type", scaling.get("type")) or "default"
    rope_type = "longrope" if rope_type == "su" else rope_type
    read = SCALING_READS.get(rope_type, ()) + ("rope_theta", "partial_rotary_factor", "rope_type")
    return read if "rope_type" in scaling else read + ("type",)


def scaling_values(key, scaling):
    """``(value, expect)`` pairs for ``scaling[key]``: values to refuse (REJECT when the type
    reads the key) and edge values, valid or not (ANY)."""
    read = scaling_reads(scaling)
    pairs = [(v, REJECT if key in read and v is not None and not (key == "truncate" and v is True)
              else ANY) for v in SCALING_BAD]
    pairs += [(v, ANY) for v in SCALING_EDGE]
    if key in ("short_factor", "long_factor"):
        current = scaling.get(key)
        n = len(current) if isinstance(current, list) else 2
        pairs += [(v, ANY) for v in ([1.0] * (n + 1), [1.0] * max(n - 1, 0), [0.0] * n, [-1.0] * n,
                                     [math.nan] * n, [HUGE] * n, [1e-300] * n, [1e-5] * n, "1.0",
                                     {"a": 1.0}, [[1.0]] * n, [True] * n, np.ones(n), [1e300] * n)]
    if key in ("rope_type", "type"):
        pairs += [(v, ANY) for v in ("su", "default", "", "Linear", "llama2", "proportional")]
    return pairs


def mutate_scaling(data, cfg):
    """``cfg`` with one or two scaling keys (mostly ones its type reads) set to a value to
    refuse or an edge value, or removed.  Returns ``(cfg, keys, expect)``."""
    cfg = dict(cfg)
    scaling = dict(cfg.get("scaling") or {})
    keys, hows = [], []
    for _ in range(data.draw(st.sampled_from((1, 1, 2)))):
        read = [k for k in scaling_reads(scaling) if k not in ("type",)]
        if scaling and data.draw(st.integers(0, 9)) == 0:
            key = data.draw(st.sampled_from(sorted(scaling)))
            del scaling[key]  # a required key's absence is refused, an optional one's is fine
            keys.append(key)
            hows.append(ANY)
            continue
        key = data.draw(st.sampled_from(read if data.draw(st.integers(0, 3)) else SCALING_KEYS))
        value, how = data.draw(st.sampled_from(scaling_values(key, scaling)))
        scaling[key] = value
        keys.append(key)
        hows.append(how)
    cfg["scaling"] = scaling
    # one mutation to a value that key must refuse: refused by name; anything else may pass
    return cfg, keys, REJECT if hows == [REJECT] else ANY


@fuzz(200)
@pytest.mark.filterwarnings("ignore::fastpe.rope.RopeConfigWarning")  # the setup's; the calls' are checked
@given(cfg=rope_config(max_head_dim=16, types=("linear", "dynamic", "yarn", "llama3", "longrope", "su", "proportional",
                                               None)),
       data=st.data())
def test_rope_scaling_dicts_are_refused_by_name_or_computed(cfg, data):
    """A scaling dict with one key set to a bad or an edge value: either a clean result
    (finite frequencies, equal to the decimal twin's; caches and rotation computed) or a
    TypeError/ValueError naming that key -- never a decimal, overflow or zero-division
    error, never an error about an argument the caller did not pass."""
    mutated, keys, expect = mutate_scaling(data, cfg)
    fn_name = data.draw(st.sampled_from(("inv_freq", "resolve", "cos_sin", "apply_", "apply_qk_")))
    passed = set(mutated) | {"scaling"} | set(keys)
    blame = set(keys) | ({"scaling"} if expect == ANY else set())
    head_dim = mutated["head_dim"]
    positions = [0, 1, 5, POSITION_LIMIT - 1]
    if fn_name == "inv_freq":
        call, fn = dict(mutated, seq_len=data.draw(st.sampled_from((None, 1, POSITION_LIMIT)))), rope.inv_freq
    elif fn_name == "resolve":
        call, fn = mutated, rope.resolve
    elif fn_name == "cos_sin":
        call, fn = dict(mutated, positions=positions), rope.cos_sin
    elif fn_name == "apply_":
        call, fn = dict(mutated, x=np.ones((4, 2, head_dim), dtype=np.float32), positions=positions), rope.apply_
    else:
        call, fn = dict(mutated, q=np.ones((4, 2, head_dim), dtype=np.float32),
                        k=np.ones((4, 1, head_dim), dtype=np.float32), positions=positions), rope.apply_qk_
    # besides the key, an error may name any argument the caller passed (a contradiction
    # between the dict and an argument names both); what HF only warns of is a warning
    with rope_warnings_named(call_text(fn, call)):
        ok, result = judge(fn, call, blame=blame | (passed if expect == ANY else set()), expect=expect,
                           inplace=("x", "q", "k"))
    if ok and fn_name == "inv_freq":
        inv, af = result
        assert np.isfinite(inv).all() and (inv >= 0).all() and math.isfinite(af), (
            f"{call_text(fn, call)} gave {inv.tolist()}, {af!r}")
        with rope_warnings_named(call_text(fn, call)):
            spec = rope.resolve(**mutated)
            twin = rope_reference_twin(mutated, call["seq_len"] if spec.rope_type in ("dynamic", "longrope") else None)
        assert np.array_equal(inv, twin[0]) and af == twin[1], (call_text(fn, call), result, twin)


#: one representative dict of each rope type (head_dim 8: four frequencies)
SWEEP_CONFIGS = (
    ({}, {}),
    ({"type": "linear", "factor": 4.0}, {}),
    ({"rope_type": "linear", "factor": 4.0}, {}),
    ({"rope_type": "dynamic", "factor": 2.0}, {"max_position_embeddings": 2048}),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
      "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.5, "truncate": True}, {}),
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}, {}),
    ({"rope_type": "longrope", "short_factor": [1.0, 1.5, 2.0, 4.0], "long_factor": [1.0, 2.0, 4.0, 8.0],
      "original_max_position_embeddings": 4096, "factor": 4.0}, {"max_position_embeddings": 16384}),
    ({"rope_type": "longrope", "short_factor": [1.0, 1.5, 2.0, 4.0], "long_factor": [1.0, 2.0, 4.0, 8.0],
      "original_max_position_embeddings": 4096, "short_mscale": 1.25, "long_mscale": 1.5},
     {"max_position_embeddings": 131072}),
    ({"rope_type": "proportional", "partial_rotary_factor": 0.5, "factor": 2.0}, {}),
)


def test_rope_scaling_sweep():
    """Every key each rope type reads, set in turn to every value of the bad and edge pools
    (the fuzz above draws these sparsely): ``inv_freq`` at initialisation and at a long
    sequence, then the caches of the result -- refused naming the key, or computed (finite
    frequencies equal to the decimal twin's, caches that do not fail)."""
    failures = {}  # the first failure of each kind per (dict, key): one bug shows under many values
    for index, (base_scaling, extra) in enumerate(SWEEP_CONFIGS):
        for key in scaling_reads(base_scaling):
            for value, expect in scaling_values(key, base_scaling):
                scaling = dict(base_scaling, **{key: value})
                for seq_len in (None, 1 << 20):
                    call = dict(extra, head_dim=8, scaling=scaling, seq_len=seq_len)
                    try:
                        with rope_warnings_named(call_text(rope.inv_freq, call)):
                            ok, result = judge(rope.inv_freq, call, blame={key} | ({"scaling"} if expect == ANY else
                                                                                   set()), expect=expect)
                        if not ok:
                            continue
                        inv, af = result
                        assert np.isfinite(inv).all() and (inv >= 0).all() and math.isfinite(af), (
                            f"{call_text(rope.inv_freq, call)} gave {inv.tolist()}, {af!r}")
                        with rope_warnings_named(call_text(rope.inv_freq, call)):
                            spec = rope.resolve(**{k: v for k, v in call.items() if k != "seq_len"})
                            twin = rope_reference_twin({k: v for k, v in call.items() if k != "seq_len"},
                                                       seq_len if spec.rope_type in ("dynamic", "longrope") else None)
                        assert np.array_equal(inv, twin[0]) and af == twin[1], (
                            f"{call_text(rope.inv_freq, call)} = {inv.tolist()}, {af!r}; twin {twin}")
                        with rope_warnings_named(call_text(rope.cos_sin, call)):
                            judge(rope.cos_sin, dict(call, positions=[0, 3, POSITION_LIMIT - 1]),
                                  blame={key, "scaling"}, expect=ANY)
                    except AssertionError as exc:
                        first = str(exc).splitlines()[0]
                        kind = re.search(r"raised (\w+)|accepted|names none|twin|gave", first)
                        failures.setdefault((index, key, kind and kind.group(0)), first[:400])
    assert not failures, f"{len(failures)} scaling keys handled badly (the first value of each):\n" + "\n".join(
        failures.values())


@pytest.mark.any_backend
@fuzz(200)
@pytest.mark.filterwarnings("ignore::fastpe.rope.RopeConfigWarning")  # the setup's; the call's are checked
@given(cfg=rope_config(max_head_dim=16), data=st.data())
def test_rope_refuses_bad_arguments(cfg, data):
    fn_name = data.draw(st.sampled_from(("inv_freq", "cos_sin", "apply_", "apply_qk_")))
    head_dim = cfg["head_dim"]
    call = dict(cfg)
    inplace = ()
    if fn_name == "inv_freq":
        fn = rope.inv_freq
    elif fn_name == "cos_sin":
        fn = rope.cos_sin
        call["positions"] = [0, 1, 2]
    elif fn_name == "apply_":
        fn = rope.apply_
        call["x"] = np.ones((3, 2, head_dim), dtype=np.float32)
        call["positions"] = [0, 1, 2]
        inplace = ("x",)
    else:
        fn = rope.apply_qk_
        call["q"] = np.ones((3, 2, head_dim), dtype=np.float32)
        call["k"] = np.ones((3, 1, head_dim), dtype=np.float32)
        call["positions"] = [0, 1, 2]
        inplace = ("q", "k")
    pools = {
        "head_dim": BAD_INTS + (0, 1, -2, 65538),
        "base": BAD_REALS + (1.0, 0.5, -1.0),
        "rotary_dim": BAD_INTS + (0, 3, head_dim + 2, -2),
        "scaling": ("linear", [("rope_type", "linear")], 1.0, {"rope_type": "nope"},
                    {"rope_type": 3}, {"rope_type": "linear"}, {"layer": {"rope_type": "default"}}),
        "seq_len": BAD_INTS + (-1, POSITION_LIMIT + 1),
        "max_position_embeddings": BAD_INTS + (0, -1),
    }
    if fn_name != "inv_freq":
        pools["positions"] = BAD_POSITIONS + (() if fn_name == "cos_sin" else ([0, 1], [0, 1, 2, 3]))
        pools["layout"] = BAD_CHOICES + ("interleaved", "ne ox")
        pools["backend"] = BAD_BACKENDS
    if fn_name == "cos_sin":
        pools["dtype"] = BAD_DTYPES + tuple(d for d, _ in SWAPPED_DTYPES)
        narrow = np.empty((3, 1), np.float32)
        pools["out"] = (np.empty((3, head_dim), np.float32), (narrow,), (narrow, narrow, narrow), (narrow, narrow),
                        (np.empty((3, head_dim), np.int32),) * 2, [narrow.tolist(), narrow], "cos, sin")
    if fn_name == "inv_freq":
        n_freq = rope.resolve(**{k: cfg[k] for k in ("head_dim", "base", "rotary_dim", "scaling",
                                                     "max_position_embeddings") if k in cfg}).rotary_dim // 2
        pools["out"] = (np.empty(0, np.float64), np.empty(n_freq + 1, np.float64), np.empty(n_freq, np.float32),
                        [0.0] * n_freq, _read_only(np.empty(n_freq, np.float64)),
                        np.empty(n_freq, ">f8"))
    if fn_name == "apply_":
        x = call["x"]
        pools["x"] = (x.tolist(), x.astype(np.float64), x.astype(np.float16), x[..., ::-1], x.reshape(3, -1),
                      x.astype(">f4"), np.broadcast_to(x, x.shape), x[None, None], x.reshape(-1))
        pools["offset"] = (1, 5, -1, 1.0, None)  # beside positions: only 0 agrees with them
        pools["head_dim"] = pools["head_dim"] + (head_dim + 1,)
    if fn_name == "apply_qk_":
        q = call["q"]
        pools["k"] = (q, q[:, :1], np.ones((4, 1, head_dim), np.float32), np.ones((3, 1, head_dim + 2), np.float32),
                      np.ones((3, 1, head_dim), np.float64), np.ones((1, 3, 1, head_dim), np.float32))
    name = data.draw(st.sampled_from(sorted(pools)))
    value = data.draw(st.sampled_from(pools[name]))
    blame = {name}
    if name == "scaling":  # the whole dict replaced: it may lack what the head needs
        blame = {"scaling", "rope_type", "factor", "head_dim", "rotary_dim"}
    if name == "k" and value is call.get("q"):
        blame = {"k", "q"}
    if name == "offset":
        blame = {"offset", "positions"}
    if name == "rotary_dim" and "partial_rotary_factor" in (cfg.get("scaling") or {}):
        blame = {"rotary_dim", "partial_rotary_factor"}
    if name == "base" and "rope_theta" in (cfg.get("scaling") or {}):
        blame = {"base", "rope_theta"}
    with rope_warnings_named(name):
        judge(fn, {**call, name: value}, blame=blame, expect=REJECT, inplace=inplace)


@fuzz(120)
@given(data=st.data(), backend=st.sampled_from(BACKEND_PARAMS))
def test_rope_positions_inside_x(data, backend):
    """Positions read from the rotated array's memory: refused, or the rotation of a copy."""
    head_dim = 2 * data.draw(st.integers(1, 8))
    tokens = data.draw(st.integers(1, 6))
    x = np.random.default_rng(0).standard_normal((tokens, 2, head_dim)).astype(np.float32)
    p = x.reshape(-1).view(np.uint32)[:tokens]
    p[:] = data.draw(st.lists(st.integers(0, 1000), min_size=tokens, max_size=tokens))
    x_copy, p_copy = x.copy(), p.copy()
    rope.apply_(x_copy, p_copy, backend=backend)
    ok, result = judge(rope.apply_, {"x": x, "positions": p, "backend": backend},
                       blame={"x", "positions"}, expect=SAME, inplace=("x", "positions"))
    if ok:
        assert np.array_equal(result, x_copy, equal_nan=True), "apply_ with positions inside x"


# ---------------------------------------------------------------- Rotary and from_config

#: the backend the Rotary properties run on: the values are the module functions' on every
#: backend (the properties above cross them)
ROTARY_BACKEND = FAST[0] if FAST else "python"


@pytest.mark.any_backend
@fuzz(150)
@pytest.mark.filterwarnings("ignore::fastpe.rope.RopeConfigWarning")  # values here; warnings: test_warnings.py
@given(cfg=rope_config(max_head_dim=24, types=ROPE_TYPES_DRAWN), data=st.data())
def test_rotary_is_the_module_functions(cfg, data):
    """A Rotary gives the module functions' bits for the same arguments -- frequencies at any
    length, caches of (seq,) and (batch, seq) positions, rotations -- and compares equal to
    one built again."""
    layout = data.draw(st.sampled_from(("neox", "gptj")))
    rotary = rope.Rotary(**cfg, layout=layout)
    assert rotary == rope.Rotary(**cfg, layout=layout) and rotary.rope_type in repr(rotary)
    seq_len = data.draw(st.one_of(st.none(), st.integers(0, POSITION_LIMIT)))
    inv, af = rope.inv_freq(**cfg, seq_len=seq_len)
    assert np.array_equal(rotary.inv_freq_at(seq_len), inv) and rotary.attention_factor_at(seq_len) == af
    values = data.draw(st.lists(st_position(), min_size=0, max_size=6))
    dtype = data.draw(st_out_dtype)
    got = rotary.cos_sin(values, dtype=dtype, seq_len=seq_len, backend=ROTARY_BACKEND)
    want = rope.cos_sin(values, layout=layout, dtype=dtype, seq_len=seq_len, backend=ROTARY_BACKEND, **cfg)
    assert bits(got[0]) == bits(want[0]) and bits(got[1]) == bits(want[1]), f"Rotary({cfg}).cos_sin({values})"
    batch = data.draw(st.integers(1, 3))
    grid_pos = np.array(values * batch, dtype=np.int64).reshape(batch, len(values))
    c2, s2 = rotary.cos_sin(grid_pos, dtype=dtype, seq_len=seq_len, backend=ROTARY_BACKEND)
    assert c2.shape == (batch, len(values), rotary.rotary_dim)
    if seq_len is not None or not rotary.length_dependent:
        assert all(bits(c2[b]) == bits(got[0]) and bits(s2[b]) == bits(got[1]) for b in range(batch))
    rng = np.random.default_rng(len(values))
    q0 = rng.standard_normal((batch, 2, len(values), cfg["head_dim"])).astype(np.float32)
    k0 = rng.standard_normal((batch, 1, len(values), cfg["head_dim"])).astype(np.float32)
    q, k, wq, wk = q0.copy(), k0.copy(), q0.copy(), k0.copy()
    rotary.apply_qk_(q, k, grid_pos, seq_len=seq_len, backend=ROTARY_BACKEND)
    rope.apply_qk_(wq, wk, grid_pos, layout=layout, seq_len=seq_len, backend=ROTARY_BACKEND, **cfg)
    assert bits(q) == bits(wq) and bits(k) == bits(wk), f"Rotary({cfg}).apply_qk_"


@pytest.mark.any_backend
@fuzz(200)
@given(cfg=rope_config(max_head_dim=16, types=ROPE_TYPES_DRAWN), data=st.data())
def test_rotary_refuses_bad_arguments(cfg, data):
    """The constructor refuses what resolve refuses (and a bad layout), naming it; each call
    refuses its bad positions and arrays by name and touches nothing."""
    with rope_warnings_named("Rotary"):
        rotary = rope.Rotary(**cfg)
    head_dim = cfg["head_dim"]
    where = data.draw(st.sampled_from(("constructor", "cos_sin", "apply_", "apply_qk_")))
    if where == "constructor":
        pools = {"head_dim": BAD_INTS + (0, 1, 65538), "base": BAD_REALS + (1.0, 0.5),
                 "rotary_dim": BAD_INTS + (0, 3, head_dim + 2), "layout": BAD_CHOICES + ("halves",),
                 "scaling": ("linear", 1.0, {"rope_type": "nope"}, {"rope_type": "linear"},
                             {"layer": {"rope_type": "default"}}, {"rope_scaling": {}, "hidden_size": 64}),
                 "max_position_embeddings": BAD_INTS + (0, -1)}
        name = data.draw(st.sampled_from(sorted(pools)))
        blame = {name} | ({"scaling", "rope_type", "factor", "head_dim", "rotary_dim"} if name == "scaling" else set())
        if name in ("rotary_dim", "base"):
            blame |= {"partial_rotary_factor", "rope_theta", "proportional"}
        with rope_warnings_named(name):
            judge(rope.Rotary, {**cfg, name: data.draw(st.sampled_from(pools[name]))}, blame=blame, expect=REJECT)
        return
    positions = [0, 1, 2]
    if where == "cos_sin":
        call = {"positions": positions}
        pools = {"positions": BAD_POSITIONS[:8] + ([[0, 1], [2]], [[[0]]]), "dtype": BAD_DTYPES,
                 "seq_len": BAD_INTS + (-1, POSITION_LIMIT + 1), "backend": BAD_BACKENDS,
                 "out": (np.empty((3, 1), np.float32), (np.empty((3, 1), np.float32),) * 2, "cos, sin")}
        fn, inplace = rotary.cos_sin, ()
    else:
        x = np.ones((3, 2, head_dim), np.float32)
        call = {"x": x, "positions": positions} if where == "apply_" else {
            "q": x, "k": np.ones((3, 1, head_dim), np.float32), "positions": positions}
        pools = {"positions": BAD_POSITIONS[:8] + ([0, 1],), "seq_len": BAD_INTS + (-1,), "backend": BAD_BACKENDS,
                 "offset": (1, -1, 1.0, None), "x" if where == "apply_" else "q": (
                     x.astype(np.float64), x[..., ::-1], np.ones((3, 2, head_dim + 2), np.float32), x.tolist())}
        fn = rotary.apply_ if where == "apply_" else rotary.apply_qk_
        inplace = ("x",) if where == "apply_" else ("q", "k")
    name = data.draw(st.sampled_from(sorted(pools)))
    blame = {name} | ({"positions"} if name == "offset" else set()) | ({"head_dim"} if name in "xq" else set())
    judge(fn, {**call, name: data.draw(st.sampled_from(pools[name]))}, blame=blame, expect=REJECT, inplace=inplace)


#: what an error about a model config may name: its fields, the arguments, the head size
CONFIG_NAMES = ("config", "layer_type", "head_dim", "rotary_dim", "max_position_embeddings",
                "original_max_position_embeddings", "the config", "longrope needs", "Phi-3", "base")


@pytest.mark.any_backend
@fuzz(250)
@given(case=model_config(), data=st.data())
def test_from_config_reads_or_refuses_by_name(case, data):
    """A model config dict with its fields valid or not: either a Rotary whose values are the
    exact twin's of its spec (and whose caches compute), the same read from a file, or a
    TypeError/ValueError naming the field -- never another error, a hang or the config
    modified.  Warnings are RopeConfigWarnings naming the key."""
    from fastpe._exact import rope_scaling as _reference_scaling
    from fastpe._validate import check_inv_freq

    cfg, layer_type, mutated = case
    what = f"Rotary.from_config({short(cfg, 300)}, layer_type={layer_type!r}) [{mutated}]"
    with rope_warnings_named(what):
        try:
            ok, rotary = judge(rope.Rotary.from_config, {"config": cfg, "layer_type": layer_type},
                               blame=set(CONFIG_NAMES) | set(mutated), expect=ANY)
        except AssertionError as exc:
            raise AssertionError(f"{what}: {exc}") from None
    if not ok:
        message = str(rotary)
        assert message.startswith(CONFIG_NAMES) or "config[" in message or any(name in message for name in mutated), (
            f"{what}: {message}")
        return
    spec = rotary.spec
    for seq_len in (None, min(spec.max_position_embeddings or 1, POSITION_LIMIT), POSITION_LIMIT):
        inv, af = rotary.inv_freq_at(seq_len), rotary.attention_factor_at(seq_len)
        check_inv_freq(inv)
        assert math.isfinite(af), what
        twin, twin_af = _reference_scaling.inv_freq(spec, seq_len)
        assert np.array_equal(inv, np.array(twin)) and af == twin_af, f"{what}: not the twin's values at {seq_len}"
    c, s = rotary.cos_sin([0, 5, POSITION_LIMIT - 1], backend=ROTARY_BACKEND)
    assert np.isfinite(c).all() and np.isfinite(s).all(), what
    try:
        text = json.dumps(cfg)
    except (TypeError, ValueError):  # a value JSON cannot hold (NaN is fine; a set is not)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "config.json")
        with open(path, "w") as f:
            f.write(text)
        with rope_warnings_named(what):
            assert rope.Rotary.from_config(path, layer_type=layer_type) == rotary, f"{what}: from its file"


@pytest.mark.any_backend
@fuzz(60)
@given(case=model_config())
def test_from_config_agrees_with_hf_where_both_read_it(case):
    """Where HF transformers builds the config and its model's rotary module, fastpe reads the
    same configuration: frequencies within HF's float32 error, the attention factor to the
    double.  (Where either refuses, nothing is compared.)"""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.utils import logging as hf_logging

    from support import hf_rope

    cfg, layer_type, mutated = case
    if mutated or cfg.get("model_type") not in ("llama", "phi3", "gpt_neox", "qwen3", "stablelm", "deepseek_v3",
                                                 "gemma3_text", "modernbert", "gemma4_text", "llama4_text"):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            rotary = rope.Rotary.from_config(cfg, layer_type=layer_type)
        except (TypeError, ValueError):
            return
        hf_logging.set_verbosity_error()
        try:
            config, _ = hf_rope.hf_model_config(cfg)
            module = hf_rope.hf_rotary(config)
        except Exception:  # noqa: BLE001 - HF refusing a drawn config is not what is tested here
            return
    inv, attention, _, _ = hf_rope.hf_values(module, config, 1, layer_type)
    if inv is None or inv.shape != rotary.inv_freq.shape:
        raise AssertionError(f"{short(cfg, 300)}: HF has {None if inv is None else inv.shape} frequencies, "
                             f"fastpe {rotary.inv_freq.shape}")
    worst = hf_rope.inv_freq_ulps(inv, rotary.inv_freq)
    assert worst <= hf_rope.hf_bound_ulps(rotary.spec, None), (short(cfg, 300), layer_type, worst)
    assert rotary.attention_factor == pytest.approx(float(attention), rel=4e-16, abs=0), short(cfg, 300)


@pytest.mark.any_backend
@fuzz(150)
@given(data=st.data())
def test_permute_qk_weight(data):
    n_heads = data.draw(st.integers(1, 4))
    head_dim = 2 * data.draw(st.integers(1, 8)) + data.draw(st.sampled_from((0, 0, 1)))
    rotary_dim = data.draw(st.one_of(st.none(), st.integers(1, head_dim // 2).map(lambda v: 2 * v)))
    if rotary_dim is None and head_dim % 2:
        rotary_dim = head_dim - 1
    bias = data.draw(st.booleans())
    shape = (n_heads * head_dim,) if bias else (n_heads * head_dim, data.draw(st.integers(1, 3)))
    w = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    to = data.draw(st.sampled_from(("gptj", "neox")))
    kw = {"rotary_dim": rotary_dim} if rotary_dim is not None else {}
    if data.draw(st.booleans()):
        kw["head_dim"] = head_dim
    ok, out = judge(rope.permute_qk_weight, {**kw, "w": w, "n_heads": n_heads, "to": to}, blame={"w"}, expect=SAME)
    assert ok, out
    r = rotary_dim if rotary_dim is not None else head_dim
    half = r // 2
    gptj_from_neox = np.empty(r, dtype=np.int64)
    gptj_from_neox[0::2] = np.arange(half)
    gptj_from_neox[1::2] = np.arange(half) + half
    perm = gptj_from_neox if to == "gptj" else np.argsort(gptj_from_neox)
    rows = np.concatenate([h * head_dim + np.concatenate([perm, np.arange(r, head_dim)]) for h in range(n_heads)])
    assert np.array_equal(out, w[rows]), f"permute_qk_weight(to={to!r}) is not the documented row order"
    back = rope.permute_qk_weight(out, n_heads, to="neox" if to == "gptj" else "gptj", **kw)
    assert np.array_equal(back, w)
    # bad arguments
    name = data.draw(st.sampled_from(("w", "n_heads", "head_dim", "rotary_dim", "to", "odd head")))
    if name == "odd head":  # w's rows give an odd head and nothing says how much rotates
        odd = np.ones((n_heads * (2 * data.draw(st.integers(0, 4)) + 1), 2), dtype=np.float32)
        judge(rope.permute_qk_weight, {"w": odd, "n_heads": n_heads, "to": to},
              blame={"w", "n_heads"}, expect=REJECT)
        return
    uneven = (np.ones((n_heads * head_dim + 1, 2)),) if n_heads > 1 else ()
    pools = {"w": (w.tolist(), w[None], "w", None) + uneven,
             "n_heads": BAD_INTS + (0, -1, n_heads * head_dim + 1),
             "head_dim": BAD_INTS + (0, head_dim + 1),
             "rotary_dim": BAD_INTS + (0, 1, head_dim + 1, head_dim + 2),
             "to": BAD_CHOICES + ("gp tj", "interleaved")}
    value = data.draw(st.sampled_from(pools[name]))
    if name == "head_dim" and value == head_dim + 1 and (n_heads * head_dim) % (head_dim + 1) == 0 and n_heads == 1:
        return
    judge(rope.permute_qk_weight, {**kw, "w": w, "n_heads": n_heads, "to": to, name: value},
          blame={name, "w", "n_heads"} if name in ("head_dim", "n_heads") else {name}, expect=REJECT)


@st.composite
def inv_freq_values(draw):
    """Frequencies for the array-level API: any finite value in [0, 1024], the ends, tiny
    and subnormal ones, and the exact doubles of the usual rules."""
    n = draw(st.integers(1, 8))
    return draw(st.lists(st.one_of(
        st.sampled_from((0.0, 1.0, 1024.0, 0.5, 1e-4, 5e-324, 2.0**-1022, 1.0 - 2.0**-53, 3.14159, 1e-300)),
        st.floats(0.0, 1024.0, allow_nan=False),
        st.integers(0, 40).map(lambda k: 10000.0 ** (-k / 40))), min_size=n, max_size=n))


@crossing
@fuzz(150)
@given(inv=inv_freq_values(), data=st.data())
def test_rope_cos_sin_from_inv_freq_agrees(inv, data):
    from fastpe.rope._core import cos_sin_from_inv_freq

    af = data.draw(st.sampled_from((1.0, 1.25, -0.5, 0.0, 3, 1e-3, 1e19)))
    layout = data.draw(st.sampled_from(("neox", "gptj")))
    dtype = data.draw(st_out_dtype)
    hard = set()
    for f in {inv[0], inv[-1]}:
        hard.update(quarter_turns_of(("rope", f), lambda f=f: mp_exact(f)))
    values = data.draw(st.lists(st_position(hard), max_size=8))
    inv_arg, _ = data.draw(real_array_form(inv, scalar=False)) if data.draw(st.booleans()) else (inv, "list")
    shape = (len(values), 2 * len(inv))

    def compute(b):
        out_cos = np.empty(shape, dtype=np_dtype(dtype))
        out_sin = np.empty(shape, dtype=np_dtype(dtype))
        with np.errstate(over="ignore"):
            ok, result = judge(cos_sin_from_inv_freq,
                               {"positions": values, "inv_freq": inv_arg, "attention_factor": af, "layout": layout,
                                "out_cos": out_cos, "out_sin": out_sin, "backend": b},
                               blame={"inv_freq"}, expect=SAME, inplace=("out_cos", "out_sin"))
        assert ok, result
        return np.stack(result)

    what = f"cos_sin_from_inv_freq({values}, {inv}, {af!r}, {layout}, {dtype})"
    fast, ref = over_backends(compute, what, scale=max(1.0, abs(af)))
    as64 = (lambda a: a.astype(np.float64)) if dtype == "bfloat16" else (lambda a: a)
    n = len(inv)
    for which in (0, 1):
        def value(r, j, which=which):
            i = j % n if layout == "neox" else j // 2
            return rope_value_fn(values[r], float(inv[i]), float(af), which == 0)

        mp_check_cells(data, as64(fast[which]), as64(ref[which]), value, dtype, f"{what} {which}",
                       scale=max(1.0, abs(af)))


@pytest.mark.any_backend
@fuzz(200)
@given(data=st.data())
def test_rope_array_level_refuses_bad_arguments(data):
    from fastpe.rope._core import apply_from_inv_freq, cos_sin_from_inv_freq

    positions = np.array([0, 1, 2], dtype=np.uint32)
    out_cos, out_sin = np.zeros((3, 4), np.float32), np.zeros((3, 4), np.float32)
    call = {"positions": positions, "inv_freq": [1.0, 0.01], "attention_factor": 1.0,
            "out_cos": out_cos, "out_sin": out_sin}
    joint = np.zeros((3, 8), np.float32)
    pools = {
        "inv_freq": ([], [[1.0, 0.5]], [math.nan, 1.0], [-1.0, 1.0], [1025.0, 1.0], [1.0, math.inf],
                     "1.0", [True, False], np.array([1 + 0j, 1]), [HUGE, 1.0], {"a": 1.0}),
        "attention_factor": BAD_REALS,
        "rotary_dim": BAD_INTS + (2, 6, 3),
        "layout": BAD_CHOICES + ("halves",),
        "positions": BAD_POSITIONS,
        "out_cos": tuple(bad_outs((3, 4))) + (joint[:, :4], out_sin, None),
        "backend": BAD_BACKENDS,
    }
    name = data.draw(st.sampled_from(sorted(pools)))
    value = data.draw(st.sampled_from(pools[name]))
    blame = {name}
    if name == "out_cos":  # a bad out_cos, or one that is (or overlaps) out_sin
        blame = {"out_cos", "out_sin"}
    if name == "positions":
        blame = {"positions", "out_cos", "out_sin"}
    fn = cos_sin_from_inv_freq
    if name == "rotary_dim" or data.draw(st.booleans()) and name in ("inv_freq", "attention_factor", "layout",
                                                                      "positions", "backend"):
        fn = apply_from_inv_freq
        call = {"x": np.ones((3, 1, 4), np.float32), "positions": positions, "inv_freq": [1.0, 0.01],
                "attention_factor": 1.0}
        if name == "positions" and isinstance(value, list) and len(value) != 3:
            blame = {"positions"}
    judge(fn, {**call, name: value}, blame=blame, expect=REJECT, inplace=("x",))


# =========================================================================== ALiBi


@crossing
@fuzz(150)
@given(n_heads=st.integers(1, 16), q_len=st.integers(1, 12), extra=st.integers(0, 6),
       form=st.sampled_from(alibi.FORMS), max_bias=st.sampled_from((8.0, 1.0, 0.5, 64.0, 3, 2.0**-16, 7.25)),
       dtype=st_out_dtype, data=st.data())
def test_alibi_agrees_across_backends_and_with_mpmath(n_heads, q_len, extra, form, max_bias, dtype, data):
    k_len = q_len + extra if form in ("symmetric", "causal") else data.draw(st.integers(1, 12))
    what = f"alibi.bias({n_heads}, {q_len}, {k_len}, form={form!r}, max_bias={max_bias!r}, dtype={dtype})"
    use_out = data.draw(st.booleans())
    given_dtype = data.draw(st.sampled_from((dtype, None)))  # beside out, None means out's dtype

    def compute(b):
        if use_out:
            out = np.empty((n_heads, q_len, k_len), dtype=np_dtype(dtype))
            r = alibi.bias(n_heads, q_len, k_len, form=form, max_bias=max_bias, dtype=given_dtype, out=out,
                           backend=b)
            assert r is out
            return r
        return alibi.bias(n_heads, q_len, k_len, form=form, max_bias=max_bias, dtype=dtype, backend=b)

    fast = {b: compute(b) for b in FAST}
    ref = compute("python")
    # every finite value is correctly rounded: the same bits everywhere
    assert_same_bits(dict(fast, python=ref), what)
    for _ in range(4):
        h, i, j = (data.draw(st.integers(0, n_heads - 1)), data.draw(st.integers(0, q_len - 1)),
                   data.draw(st.integers(0, k_len - 1)))
        fn = alibi_value_fn(n_heads, float(max_bias), h, i, j, q_len, k_len, form)
        got = float(ref[h, i, j])
        check_against_mpmath(got, fn, dtype, f"{what} at ({h}, {i}, {j})", exact=True)
    slopes = alibi.slopes(n_heads, max_bias, dtype=dtype)
    out = np.empty(n_heads, dtype=np_dtype(dtype))
    assert alibi.slopes(n_heads, max_bias, dtype=given_dtype, out=out) is out
    assert_same_bits({"slopes": slopes, "slopes into out": out}, f"alibi.slopes({n_heads}, {max_bias!r}, out=)")
    for h in range(n_heads):
        fn = alibi_value_fn(n_heads, float(max_bias), h, 0, 1, 1, 2, "bloom")
        check_against_mpmath(float(slopes[h]), fn, dtype, f"alibi.slopes({n_heads}, {max_bias!r})[{h}]",
                             exact=True)


@pytest.mark.any_backend
@fuzz(200)
@given(data=st.data())
def test_alibi_refuses_bad_arguments(data):
    fn = data.draw(st.sampled_from((alibi.bias, alibi.slopes)))
    if fn is alibi.slopes:
        call = {"n_heads": 4, "max_bias": 8.0}
        pools = {"n_heads": BAD_INTS + (0, -1, (1 << 16) + 1), "max_bias": BAD_REALS + (0.0, -1.0, 64.5),
                 "dtype": BAD_DTYPES + tuple(d for d, _ in SWAPPED_DTYPES),
                 "out": tuple(np.empty(4, dtype=d) for d in (np.int32, ">f4", np.complex64)) + (
                     np.empty(5, np.float32), np.empty(8, np.float32)[::2], np.empty((4, 1), np.float32),
                     [0.0] * 4, _read_only(np.empty(4, np.float32)))}
    else:
        call = {"n_heads": 2, "q_len": 3, "k_len": 4, "form": data.draw(st.sampled_from(alibi.FORMS))}
        pools = {"n_heads": BAD_INTS + (0, -1, (1 << 16) + 1), "q_len": BAD_INTS + (0, -1, 2**32 + 1),
                 "k_len": BAD_INTS + (0, -1, 2**32 + 1), "form": BAD_CHOICES + ("cau sal", "alibi"),
                 "max_bias": BAD_REALS + (0.0, -1.0, 64.5), "backend": BAD_BACKENDS,
                 "dtype": BAD_DTYPES + tuple(d for d, _ in SWAPPED_DTYPES),
                 "out": tuple(np.empty((2, 3, 4), dtype=d) for d in (np.int32, ">f4", np.complex64)) + (
                     np.empty((2, 3, 5), np.float32), np.empty((2, 4, 3), np.float32)[:, ::1, :].transpose(0, 2, 1),
                     np.empty((2, 3, 4), np.float32).tolist())}
        if call["form"] in ("symmetric", "causal"):
            pools["k_len"] = pools["k_len"] + (2,)
    name = data.draw(st.sampled_from(sorted(pools)))
    judge(fn, {**call, name: data.draw(st.sampled_from(pools[name]))},
          blame={name, "q_len"} if name == "k_len" else {name}, expect=REJECT)


# =========================================================================== T5 buckets


@st.composite
def t5_config(draw):
    bidirectional = draw(st.booleans())
    least = 4 if bidirectional else 2
    num_buckets = draw(st.one_of(st.sampled_from((32, least, least + 1, 36, 4096)), st.integers(least, 300)))
    n = num_buckets // 2 if bidirectional else num_buckets
    exact = n // 2
    max_distance = draw(st.one_of(st.sampled_from((128, exact + 1, 1 << 32, 50)), st.integers(exact + 1, 1 << 20)))
    if max_distance <= exact:
        max_distance = exact + 1
    return {"bidirectional": bidirectional, "num_buckets": num_buckets, "max_distance": max_distance}


REL_EDGES = (0, 1, -1, 7, -8, 127, -128, 2**31, -(2**31), 2**32, 2**62, -(2**62), 2**63 - 1, -(2**63 - 1))


@crossing
@fuzz(200)
@given(cfg=t5_config(), data=st.data())
def test_t5_buckets_agree_across_backends(cfg, data):
    values = data.draw(st.lists(st.one_of(st.sampled_from(REL_EDGES), st.integers(-300, 300),
                                          st.integers(-(2**63 - 1), 2**63 - 1)), min_size=1, max_size=24))
    shape = data.draw(st.sampled_from(((len(values),), (1, len(values)))))
    rel, form = data.draw(int_array_form(values, allow_float=False))
    if shape != (len(values),):
        rel = np.asarray(rel).reshape(shape)
    dtype = data.draw(st.sampled_from((np.int64, np.int32, "int64")))
    fast, ref = over_backends(lambda b: relative.t5_bucket(rel, dtype=dtype, backend=b, **cfg),
                              f"t5_bucket({short(values)} as {form}, {cfg})")
    assert ref.shape == shape and ((ref >= 0) & (ref < cfg["num_buckets"])).all()
    q_len, k_len = data.draw(st.integers(1, 8)), data.draw(st.integers(1, 8))
    offset = data.draw(st.sampled_from((0, 1, 100, 2**40, 1 << 62)))
    mat_fast, mat_ref = over_backends(
        lambda b: relative.t5_bucket_matrix(q_len, k_len, offset=offset, backend=b, **cfg),
        f"t5_bucket_matrix({q_len}, {k_len}, offset={offset}, {cfg})")
    rel_m = np.arange(k_len)[None, :] - np.arange(q_len)[:, None] - offset
    assert np.array_equal(mat_ref, relative.t5_bucket(rel_m, backend="python", **cfg)), (
        "t5_bucket_matrix differs from t5_bucket of j - (i + offset)")
    # out= (of either bucket dtype) holds the same values, and is what is returned
    out_dtype = data.draw(st.sampled_from((np.int64, np.int32)))
    for fn, call, want in ((relative.t5_bucket, {"relative_position": rel}, ref),
                           (relative.t5_bucket_matrix, {"q_len": q_len, "k_len": k_len, "offset": offset}, mat_ref)):
        out = np.full(want.shape, -7, dtype=out_dtype)
        ok, got = judge(fn, dict(call, out=out, **cfg), blame={"out"}, expect=SAME, inplace=("out",))
        assert ok and got is out and np.array_equal(out, want), f"{fn.__name__} with out {out_dtype.__name__}"


@pytest.mark.any_backend
@fuzz(200)
@given(cfg=t5_config(), data=st.data())
def test_t5_refuses_bad_arguments(cfg, data):
    fn = data.draw(st.sampled_from((relative.t5_bucket, relative.t5_bucket_matrix)))
    call = dict(cfg)
    pools = {"bidirectional": BAD_BOOLS, "num_buckets": BAD_INTS + (0, 1, 4097),
             "max_distance": BAD_INTS + (0, -1, 2**32 + 1),
             "dtype": ("float32", np.float64, np.uint64, np.dtype(">i8"), np.dtype(">i4"), np.int16,
                       "i8 ", 3, object, "bfloat16", None if False else "int128", [np.int64]),
             "backend": BAD_BACKENDS}
    if fn is relative.t5_bucket:
        call["relative_position"] = [0, -3, 9]
        pools["relative_position"] = ([1.5], [True], "12", np.array([-(2**63)], dtype=np.int64),
                                      np.array([2**63], dtype=np.uint64), [HUGE], [[1], [1, 2]],
                                      np.array([1.0]), [None], np.array([1 + 1j]))
    else:
        call.update(q_len=3, k_len=4)
        pools.update(q_len=BAD_INTS + (0, -1, 2**32 + 1), k_len=BAD_INTS + (0, -1, 2**32 + 1),
                     offset=BAD_INTS + (-1, 2**62 + 1))
    shape = (3,) if fn is relative.t5_bucket else (3, 4)
    pools["out"] = tuple(np.empty(shape, dtype=d) for d in (np.float32, np.int16, np.uint64, ">i8")) + (
        np.empty(shape[:-1] + (shape[-1] + 1,), np.int64), np.empty(shape + (2,), np.int64)[..., 0],
        np.empty(shape, np.int64).tolist(), _read_only(np.empty(shape, np.int64)))
    name = data.draw(st.sampled_from(sorted(pools)))
    value = data.draw(st.sampled_from(pools[name]))
    blame = {name}
    if name in ("num_buckets", "bidirectional"):
        blame = {name, "max_distance"}
    judge(fn, {**call, name: value}, blame=blame, expect=REJECT)


@fuzz(100)
@given(data=st.data(), backend=st.sampled_from(BACKEND_PARAMS))
def test_t5_bucket_takes_any_integer_form(data, backend):
    values = data.draw(st.lists(st.one_of(st.sampled_from(REL_EDGES), st.integers(-300, 300)), max_size=10))
    rel, form = data.draw(int_array_form(values, allow_float=False))
    if data.draw(st.integers(0, 4)) == 0:  # the docstring's "a CPU tensor"
        torch = pytest.importorskip("torch")
        rel, form = torch.tensor(values, dtype=torch.int64), "tensor"
    want = relative.t5_bucket(np.array(values, dtype=np.int64), backend=backend)
    ok, got = judge(relative.t5_bucket, {"relative_position": rel, "backend": backend},
                    blame={"relative_position"}, expect=SAME)
    assert ok, f"t5_bucket refused relative positions in the {form} form: {got}"
    assert np.array_equal(got, want), f"t5_bucket of {values} as {form}"


# =========================================================================== grids


@st.composite
def grid_case(draw):
    three = draw(st.booleans())
    unit = 6 if three else 4
    d_model = unit * draw(st.integers(1, 64 // unit))
    sizes = tuple(draw(st.integers(1, 4 if three else 6)) for _ in range(3 if three else 2))
    kw = {"d_model": d_model, "order": draw(st.sampled_from(("mae", "timm"))),
          "cls_token": draw(st.sampled_from((False, True, np.bool_(True)))),
          "base": draw(st.sampled_from((10000.0, 2.0, 1e6, 10000, 1.0 + 2.0**-30)))}
    return three, sizes, kw


@crossing
@fuzz(150)
@given(case=grid_case(), dtype=st_out_dtype, data=st.data())
def test_grids_agree_across_backends_and_with_mpmath(case, dtype, data):
    three, sizes, kw = case
    fn = grid.sincos_3d if three else grid.sincos_2d
    names = ("frames", "height", "width") if three else ("height", "width")
    call = dict(kw, **dict(zip(names, sizes)), dtype=dtype)
    use_out = data.draw(st.booleans())

    def compute(b):
        if not use_out:
            return fn(backend=b, **call)
        out = np.empty((math.prod(sizes) + bool(kw["cls_token"]), kw["d_model"]), dtype=np_dtype(dtype))
        ok, result = judge(fn, dict(call, dtype=None, out=out, backend=b), blame={"out"}, expect=SAME,
                           inplace=("out",))
        assert ok and result is out, f"{fn.__name__} refused out: {result}"
        return result

    fast, ref = over_backends(compute, f"{fn.__name__}({call}, out={use_out})")
    assert ref.shape == (math.prod(sizes) + bool(kw["cls_token"]), kw["d_model"])
    as64 = (lambda a: a.astype(np.float64)) if dtype == "bfloat16" else (lambda a: a)
    mp_check_cells(data, as64(fast), as64(ref),
                   lambda r, j: grid_value_fn(r, j, sizes, kw["d_model"], float(kw["base"]), kw["order"],
                                              bool(kw["cls_token"])),
                   dtype, f"{fn.__name__} {call}")


@pytest.mark.any_backend
@fuzz(200)
@given(case=grid_case(), data=st.data())
def test_grids_refuse_bad_arguments(case, data):
    three, sizes, kw = case
    fn = grid.sincos_3d if three else grid.sincos_2d
    names = ("frames", "height", "width") if three else ("height", "width")
    call = dict(kw, **dict(zip(names, sizes)))
    pools = {name: BAD_INTS + (0, -1, POSITION_LIMIT + 1) for name in names}
    rows = math.prod(sizes) + bool(kw["cls_token"])
    pools.update(d_model=BAD_INTS + (0, -4, kw["d_model"] + 2, 65536 + 4), base=BAD_REALS + (1.0, 0.0),
                 order=BAD_CHOICES + ("MAE", "vit"), cls_token=BAD_BOOLS,
                 dtype=BAD_DTYPES + tuple(d for d, _ in SWAPPED_DTYPES), backend=BAD_BACKENDS,
                 out=bad_outs((rows, kw["d_model"])))
    name = data.draw(st.sampled_from(sorted(pools)))
    judge(fn, {**call, name: data.draw(st.sampled_from(pools[name]))}, blame={name}, expect=REJECT)


# =========================================================================== save_table


@st.composite
def table_run(draw, max_len: int):
    """``{}`` (positions 0, 1, 2, ...) or a valid ``start``/``step`` for ``max_len`` rows:
    forward or backward, strided, below 0, through 0 and at both ends of (-2**32, 2**32)."""
    if draw(st.booleans()):
        return {}
    step = draw(st.sampled_from((1, -1, -1, 2, -3, 7, -(2**20))) | st.integers(-9, 9).filter(bool))
    if max_len == 1 and draw(st.booleans()):
        step = draw(st.sampled_from((2**40, -(10**30))))  # one row: only start is a position
    reach = step * (max_len - 1)
    lo, hi = -POSITION_LIMIT + 1 - min(0, reach), POSITION_LIMIT - 1 - max(0, reach)
    if lo > hi:
        step, reach = 1, max_len - 1
        lo, hi = -POSITION_LIMIT + 1, POSITION_LIMIT - max_len
    start = draw(st.sampled_from(tuple(sorted({lo, hi, min(max(0, lo), hi), min(max(-1, lo), hi),
                                               min(max(-reach // 2, lo), hi)})))
                 | st.integers(lo, hi))
    run = {"start": start, "step": step}
    return run if draw(st.booleans()) else {k: v for k, v in run.items() if v != {"start": 0, "step": 1}[k]}


@fuzz(40)
@given(kw=table_kwargs(max_d=16), max_len=st.integers(1, 20), dtype=st_out_dtype,
       ext=st.sampled_from((".npy", ".npz", ".safetensors")), chunk=st.sampled_from((None, 64, 1000, 1 << 20)),
       data=st.data())
def test_save_table_writes_the_table(kw, max_len, dtype, ext, chunk, data):
    from fastpe._io.save import load_spec, output_size

    if ext == ".safetensors":
        pytest.importorskip("safetensors")
    run = data.draw(table_run(max_len))
    kw = {**kw, **run}
    extra = {} if chunk is None else {"chunk_bytes": chunk}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "pe" + ext)
        try:
            saved = fastpe.save_table(path, max_len=max_len, dtype=dtype, **kw, **extra)
        except ValueError as exc:  # a budget below one row is refused by name
            assert chunk is not None and names_one_of(str(exc), {"chunk_bytes"}), exc
            assert os.listdir(tmp) == []
            return
        want = fastpe.table(max_len=max_len, dtype=dtype, **kw)
        if ext == ".npy":
            got = np.load(path)
        elif ext == ".npz":
            with np.load(path) as z:
                got = z["table"]
        else:
            from safetensors.numpy import load_file

            got = load_file(path)["table"]
        if dtype == "bfloat16" and got.dtype != want.dtype:
            got = got.view(want.dtype)
        assert_same_bits({"file": got, "table": want}, f"save_table({kw}, {max_len}, {dtype}, {ext})")
        total = sum(os.path.getsize(os.path.join(tmp, f)) for f in os.listdir(tmp))
        assert total == output_size(path, max_len=max_len, dtype=dtype, **kw)
        spec = load_spec(path)
        assert fastpe.table(**spec["params"]).tobytes() == want.tobytes()
        assert spec == saved.spec and {k: spec["params"][k] for k in run if k in spec["params"]} == {
            k: v for k, v in run.items() if v != {"start": 0, "step": 1}[k]}  # a run's spec names it
        assert saved.shape == want.shape


@pytest.mark.any_backend
@fuzz(200)
@given(kw=table_kwargs(max_d=8), data=st.data())
def test_save_table_refuses_bad_arguments_and_leaves_nothing(kw, data):
    with tempfile.TemporaryDirectory() as tmp:
        call = dict(kw, path=os.path.join(tmp, "pe.npy"), max_len=3)
        pools = {
            "path": ("", 3, None, b"pe.npy", os.path.join(tmp, "pe.txt"), os.path.join(tmp, ".npy"),
                     os.path.join(tmp, "pe"), ["pe.npy"]),
            "d_model": BAD_INTS + (0, 65537),
            "max_len": BAD_INTS + (0, POSITION_LIMIT + 1),
            "base": BAD_REALS + (1.0,),
            "layout": BAD_CHOICES,
            "dtype": BAD_DTYPES + tuple(d for d, _ in SWAPPED_DTYPES),
            "chunk_bytes": tuple(v for v in BAD_INTS if v is not HUGE) + (0, -1, 1),  # 10**400 is a fine budget
            "backend": BAD_BACKENDS,
            "progress": (3, "print", [print]),
        }
        name = data.draw(st.sampled_from(sorted(pools)))
        judge(fastpe.save_table, {**call, name: data.draw(st.sampled_from(pools[name]))},
              blame={name}, expect=REJECT)
        assert os.listdir(tmp) == [], f"save_table left {os.listdir(tmp)} after refusing {name}"


@pytest.mark.any_backend
@fuzz(150)
@given(data=st.data())
def test_load_spec_refuses_what_is_not_a_spec(data):
    """``fastpe.load_spec`` of any bytes, of a spec with one field damaged, or of a spec
    beside a file it does not describe: a ValueError (a TypeError for a param of the wrong
    type, as the library gives) naming the file, never another error, and never a spec that
    is not ``table``'s with valid params.  A spec's run (``start``/``step``) is accepted
    exactly when ``fastpe.table`` accepts it, and refused with table's reason."""
    good = {"fastpe": fastpe.__version__, "function": "table",
            "params": {"d_model": 8, "max_len": 4, "base": 10000.0, "layout": "interleaved",
                       "denominator": "d", "min_timescale": 1.0, "max_timescale": None,
                       "dtype": "float32"}}
    good["params"].update(data.draw(table_run(4)))
    kind = data.draw(st.sampled_from(("bytes", "field", "param", "run", "stale")))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "spec.json")
        if kind == "bytes":
            blob = data.draw(st.binary(max_size=64) | st.text(max_size=64).map(str.encode))
        elif kind == "field":
            spec = dict(good)
            key = data.draw(st.sampled_from(("fastpe", "function", "params", "extra")))
            spec[key] = data.draw(st.sampled_from((None, 1, "x", [], {}, "9.0.0", "rope")))
            blob = json.dumps(spec).encode()
        elif kind == "param":
            params = dict(good["params"])
            key = data.draw(st.sampled_from(sorted(params) + ["nope", "start", "step"]))
            params[key] = data.draw(st.sampled_from((None, -1, 0, 1.5, "x", [], 2**40, float("nan"))))
            blob = json.dumps(dict(good, params=params)).encode()
        elif kind == "run":  # start and step, valid or not, against fastpe.table's own verdict
            params = dict(good["params"])
            edges = (0, 1, -1, 3, -3, POSITION_LIMIT - 1, POSITION_LIMIT, -POSITION_LIMIT + 1, -POSITION_LIMIT,
                     POSITION_LIMIT - 4, -POSITION_LIMIT + 3, 2**63, True, None, 2.0, "1", [1])
            for key in data.draw(st.sampled_from((("start",), ("step",), ("start", "step")))):
                params[key] = data.draw(st.sampled_from(edges) | st.integers(-POSITION_LIMIT - 9, POSITION_LIMIT + 9))
            blob = json.dumps(dict(good, params=params)).encode()
            run = {k: params[k] for k in ("start", "step") if k in params}
            try:
                fastpe.table(8, 4, **run, backend="python")
                verdict = None
            except (TypeError, ValueError) as exc:
                verdict = exc
        else:  # a sidecar beside a .npy that holds another array
            path = os.path.join(tmp, "pe.npy")
            np.save(path, np.zeros(data.draw(st.sampled_from(((4, 9), (5, 8), (4,)))), np.float32))
            with open(path + ".json", "w") as f:
                json.dump(good, f)
            blob = None
        if blob is not None:
            with open(path, "wb") as f:
                f.write(blob)
        try:
            spec = fastpe.load_spec(path)
        except (TypeError, ValueError) as e:
            assert os.path.basename(path) in str(e), f"{kind}: the error names no file: {e}"
            if kind == "run":
                assert verdict is not None, f"load_spec refused the run {run} that table() takes: {e}"
                assert type(e) is type(verdict) and str(e) == f"{path}: params: {verdict}", (e, verdict)
            return
        assert kind in ("field", "param", "run"), f"{kind}: load_spec accepted {blob!r}"
        if kind == "run":
            assert verdict is None, f"load_spec accepted the run {run} that table() refuses: {verdict}"
        assert spec["function"] == "table"
        fastpe.table(**{**spec["params"], "max_len": 1})  # params the library takes
        if abs(spec["params"].get("step", 1)) < 2**63:  # (a one-row table's step may not fit table's int64)
            fastpe.table(**spec["params"], backend="python")  # the run too, at the spec's own max_len


@pytest.mark.any_backend
@fuzz(200)
@given(kw=table_kwargs(max_d=8), data=st.data())
def test_spec_parsing_refuses_malformed_specs(kw, data):
    """A spec with one part broken: a ValueError/TypeError naming the source, never
    another exception; a well-formed one re-creates the table's parameters."""
    from fastpe._io import save as _save

    config = fastpe.PosEncConfig(max_len=3, **kw)
    spec = {"fastpe": fastpe.__version__, "function": "table",
            "params": {f: getattr(config, f) for f in ("d_model", "max_len", "base", "layout", "denominator",
                                                       "min_timescale", "max_timescale")} | {"dtype": "float32"}}
    spec["params"].update(data.draw(table_run(3)))
    assert _save.parse_spec(json.dumps(spec), "the spec")["params"]["d_model"] == kw["d_model"]
    what = data.draw(st.sampled_from(("text", "top", "param", "drop")))
    bad = json.loads(json.dumps(spec))
    if what == "text":
        bad = data.draw(st.sampled_from(("", "{", "[]", "null", "3", '"spec"', "[" * 3000, b"\xff\xfe",
                                         json.dumps(spec)[:-1], json.dumps(spec).replace("table", "forward"))))
    elif what == "top":
        key = data.draw(st.sampled_from(("fastpe", "function", "params", "extra")))
        bad[key] = data.draw(st.sampled_from((None, 3, "9.0.0", "", [], {}, "x", HUGE, math.nan)))
    elif what == "param":
        key = data.draw(st.sampled_from(sorted(bad["params"]) + ["extra"]))
        bad["params"][key] = data.draw(st.sampled_from((None, "x", -1, 0, HUGE, 1e400, math.nan, [], {}, True, 65537)))
    else:
        key = data.draw(st.sampled_from(sorted(bad["params"])))
        del bad["params"][key]
    text = bad if isinstance(bad, (str, bytes)) else json.dumps(bad)
    ok, result = judge(_save.parse_spec, {"spec": text, "source": "the spec"}, blame={"the spec", "spec"},
                       expect=ANY)
    if ok:  # a change the spec allows (an optional field set to a valid value)
        params = result["params"]
        fastpe.PosEncConfig(**{k: v for k, v in params.items() if k not in ("dtype", "start", "step")})
        fastpe.table(**{**params, "max_len": 1})  # the library takes the run too
        if params["max_len"] <= 65537 and abs(params.get("step", 1)) < 2**63:
            fastpe.table(**params, backend="python" if params["max_len"] < 100 else None)


# =========================================================================== dask


@fuzz(40)
@given(kw=table_kwargs(max_d=16), max_len=st.integers(1, 40), dtype=st_out_dtype, data=st.data())
def test_dask_table_and_forward(kw, max_len, dtype, data):
    fdask = pytest.importorskip("fastpe.dask")
    chunks = data.draw(st.sampled_from(("auto", 7, (5, -1), ((max_len,), (kw["d_model"],)), {0: 3})))
    run = data.draw(table_run(max_len))
    lazy = fdask.table(max_len=max_len, chunks=chunks, dtype=dtype, **kw, **run)
    got = lazy.compute(scheduler="synchronous")
    assert_same_bits({"dask": got, "table": fastpe.table(max_len=max_len, dtype=dtype, **kw, **run)},
                     f"fastpe.dask.table({kw}, {max_len}, chunks={chunks!r}, {dtype}, {run})")
    config = fastpe.PosEncConfig(**kw)
    values = data.draw(st.lists(st_position(), min_size=1, max_size=10))
    lazy_f = fdask.forward(np.array(values, dtype=np.int64), config, dtype=dtype)
    want = np.empty((len(values), kw["d_model"]), dtype=np_dtype(dtype))
    fastpe.forward(values, config, want)
    assert_same_bits({"dask": lazy_f.compute(scheduler="synchronous"), "forward": want}, "fastpe.dask.forward")
    # bad arguments are refused at once, by name
    pools = {"d_model": BAD_INTS + (0,), "max_len": BAD_INTS + (0,), "chunks": (0, -2, True, None, "x", (1, 2, 3)),
             "dtype": BAD_DTYPES + tuple(d for d, _ in SWAPPED_DTYPES), "backend": BAD_BACKENDS,
             "base": BAD_REALS + (1.0,),
             "start": BAD_INTS + (-POSITION_LIMIT, POSITION_LIMIT), "step": BAD_INTS + (0,)}
    if max_len > 1:  # one row: any step is that row (only start is a position)
        pools["step"] += (POSITION_LIMIT, -POSITION_LIMIT)
    name = data.draw(st.sampled_from(sorted(pools)))
    judge(fdask.table, {**kw, "max_len": max_len, name: data.draw(st.sampled_from(pools[name]))},
          blame={name}, expect=REJECT)


# =========================================================================== torch modules


@fuzz(40)
@pytest.mark.filterwarnings("ignore::fastpe.rope.RopeConfigWarning")  # values of drawn rope dicts HF may warn of
@given(data=st.data())
def test_torch_modules(data):
    torch = pytest.importorskip("torch")
    fastpe_torch = pytest.importorskip("fastpe.torch")
    d_model = data.draw(st.integers(1, 16))
    max_len = data.draw(st.integers(1, 20))
    seq = data.draw(st.integers(1, 30))
    offset = data.draw(st.integers(0, 5))
    batch_first = data.draw(st.booleans())
    module = fastpe_torch.SinusoidalPositionalEncoding(d_model, 0.0, max_len, batch_first=batch_first)
    x = torch.randn((2, seq, d_model) if batch_first else (seq, 2, d_model))
    y = module(x, offset=offset)
    pe = torch.from_numpy(fastpe.table(d_model, offset + seq))[offset:]
    want = x + (pe[None] if batch_first else pe[:, None])
    assert torch.equal(y, want), "SinusoidalPositionalEncoding differs from x + table"
    cfg = data.draw(rope_config(max_head_dim=16))
    kw = {k: cfg[k] for k in ("base", "scaling", "rotary_dim", "max_position_embeddings") if k in cfg}
    rotary = fastpe_torch.RotaryEmbedding(cfg["head_dim"], **({"base": None} | kw))
    q = torch.randn(1, 2, 3, cfg["head_dim"])
    k = torch.randn(1, 1, 3, cfg["head_dim"])
    q0, k0 = q.clone(), k.clone()
    pos = [0, 7, 4_000_000_000]
    qn, kn = q.numpy().copy(), k.numpy().copy()
    rope.apply_qk_(qn, kn, pos, **cfg)
    rq, rk = rotary(q, k, torch.tensor(pos))
    assert np.array_equal(rq.numpy(), qn) and np.array_equal(rk.numpy(), kn), "RotaryEmbedding differs from apply_qk_"
    # the torch path in float64 uses the caches' doubles: rounded to float32 it is the in-place result
    q64, k64 = q0.double(), k0.double()
    rq64, rk64 = rotary(q64, k64, torch.tensor(pos))
    assert torch.equal(q64, q0.double()) and torch.equal(k64, k0.double()), "the torch path modified its inputs"
    assert np.array_equal(rq64.float().numpy(), qn) and np.array_equal(rk64.float().numpy(), kn), (
        f"RotaryEmbedding in float64, rounded to float32, differs from apply_qk_ ({cfg})")
    # xPos: the same two checks (q scaled up, k down), and its bad arguments as Rotary's
    xkw = {"xpos_scale_base": data.draw(st.sampled_from((512, 64.0, 2.5, 0.75))),
           "xpos_center": data.draw(st.sampled_from(("torchscale", "flash_attn", 0, 7, POSITION_LIMIT)))}
    xrotary = fastpe_torch.RotaryEmbedding(cfg["head_dim"], **({"base": None} | kw | xkw))
    xpos_len = data.draw(st.sampled_from((None, 4_000_000_001, POSITION_LIMIT)))
    qn, kn = q0.numpy().copy(), k0.numpy().copy()
    rope.apply_qk_(qn, kn, pos, seq_len=xpos_len, **cfg, **xkw)
    rq, rk = xrotary(q0.clone(), k0.clone(), torch.tensor(pos), seq_len=xpos_len)
    rq64, rk64 = xrotary(q0.double(), k0.double(), torch.tensor(pos), seq_len=xpos_len)
    for got in ((rq, rk), (rq64.float(), rk64.float())):
        assert np.array_equal(got[0].numpy(), qn) and np.array_equal(got[1].numpy(), kn), (
            f"xPos RotaryEmbedding ({got[0].dtype} path) differs from apply_qk_ ({cfg}, {xkw}, seq_len={xpos_len})")
    bad = data.draw(st.sampled_from((("xpos_scale_base", BAD_REALS + (0, -1.0)),
                                     ("xpos_center", BAD_INTS + ("middle", -1, POSITION_LIMIT + 1)))))
    judge(fastpe_torch.RotaryEmbedding, {"head_dim": cfg["head_dim"], "base": None, **kw, **xkw,
                                         bad[0]: data.draw(st.sampled_from(bad[1]))}, blame={bad[0]}, expect=REJECT)
    # bad arguments name themselves
    which = data.draw(st.sampled_from(("d_model", "max_len", "dropout", "batch_first", "x", "offset")))
    values = {"d_model": BAD_INTS + (0, 65537), "max_len": BAD_INTS + (0,), "dropout": BAD_REALS + (-0.1, 1.5),
              "batch_first": BAD_BOOLS, "x": (x.numpy(), torch.randn(2, seq, d_model + 1), "x"),
              "offset": BAD_INTS + (-1, POSITION_LIMIT)}[which]
    value = data.draw(st.sampled_from(values))
    if which in ("x", "offset"):
        call = {"x": x, "offset": offset, which: value}
        judge(module.forward, call, blame={which}, expect=REJECT)
    else:
        call = {"d_model": d_model, "max_len": max_len, "dropout": 0.0, "batch_first": True, which: value}
        judge(fastpe_torch.SinusoidalPositionalEncoding, call, blame={which}, expect=REJECT)


# =========================================================================== the rest of the API


def test_info_and_available_backends():
    info = fastpe.info()
    assert set(info["available"]) == set(fastpe.available_backends()) == set(AVAILABLE)
    assert "python" in fastpe.available_backends()
    assert info["default"] in info["available"]
    json.dumps(info)  # plain data, printable by `fastpe info`


@pytest.mark.any_backend
@fuzz(200)
@given(data=st.data())
def test_posencconfig_refuses_bad_fields(data):
    pools = {"d_model": BAD_INTS + (0, 65537), "max_len": BAD_INTS + (0, POSITION_LIMIT + 1),
             "base": BAD_REALS + (1.0,), "layout": BAD_CHOICES, "denominator": BAD_CHOICES,
             "min_timescale": BAD_REALS + (0.0, 1 / 2048), "max_timescale": BAD_REALS + (0.0, 0.5)}
    name = data.draw(st.sampled_from(sorted(pools)))
    judge(fastpe.PosEncConfig, {"d_model": 8, name: data.draw(st.sampled_from(pools[name]))},
          blame={name}, expect=REJECT)


# =========================================================================== the command line

CLI_GARBAGE = ("", "abc", "-1", "0", "1.5", "nan", "inf", "-inf", "1e400", "9" * 400,
               "18446744073709551617", "0x10", "1,2", " 4", "None", "{}", "[]", "true", "-0",
               "2**32", "\x00", "é")
SCALING_JSON = ("{", "[]", "null", "3", '{"rope_type": "yarn"}', '{"rope_type": "linear", "factor": 1e400}',
                '{"rope_type": "linear", "factor": NaN}', '{"rope_type": "linear", "factor": Infinity}',
                '{"rope_type": "linear", "factor": 1' + "0" * 400 + "}",
                '{"rope_type": "longrope", "short_factor": [1, 1, 1, 1], "long_factor": [1, 1, 1, 1], '
                '"original_max_position_embeddings": 1, "factor": 2}',
                '{"rope_type": "yarn", "factor": 2, "beta_fast": -1, "beta_slow": -2, '
                '"original_max_position_embeddings": 10}',
                '{"rope_type": "dynamic", "factor": 2}', "[" * 5000, '{"a": ' * 3000 + "1" + "}" * 3000,
                "missing.json", '{"rope_scaling": 3, "hidden_size": 8}',
                '{"hidden_size": 8, "num_attention_heads": 0}')

CLI_COMMANDS = {
    "table": (["table", "--d-model", "4", "--max-len", "3"], "t.npy",
              ("--d-model", "--max-len", "--base", "--layout", "--denominator", "--min-timescale",
               "--max-timescale", "--dtype", "--chunk-mb", "--backend")),
    "rope": (["rope", "--head-dim", "8", "--max-len", "4"], "r.npz",
             ("--head-dim", "--max-len", "--base", "--rotary-dim", "--layout", "--scaling", "--layer-type",
              "--max-position-embeddings", "--seq-len", "--dtype", "--backend")),
    "rope-axial": (["rope-axial", "--axes-dim", "4,6", "--grid", "2,3"], "x.npz",
                   ("--axes-dim", "--grid", "--base", "--layout", "--linear-factor", "--ntk-factor", "--dtype",
                    "--backend")),
    "alibi": (["alibi", "--heads", "2", "--q-len", "3"], "a.npy",
              ("--heads", "--q-len", "--k-len", "--form", "--max-bias", "--dtype", "--backend")),
    "t5-buckets": (["t5-buckets", "--q-len", "3"], "b.npy",
                   ("--q-len", "--k-len", "--num-buckets", "--max-distance", "--offset", "--backend")),
    "grid": (["grid", "--height", "2", "--width", "2", "--d-model", "8"], "g.npy",
             ("--height", "--width", "--d-model", "--frames", "--order", "--base", "--dtype", "--backend")),
    "timestep": (["timestep", "--d-model", "4", "--steps", "3"], "s.npy",
                 ("--d-model", "--steps", "--t", "--base", "--shift", "--scale", "--dtype", "--backend")),
    "plot": (["plot", "--d-model", "4", "--max-len", "3"], "p.png",
             ("--kind", "--d-model", "--max-len", "--base", "--head-dim", "--part", "--heads", "--head",
              "--form", "--max-bias", "--index", "--cmap", "--dpi")),
}
#: the values a plot option may take and still draw (each drawing costs matplotlib time)
PLOT_GARBAGE = tuple(v for v in CLI_GARBAGE if v not in (" 4", "0", "-0", "1.5"))


def run_cli(args, tmp):
    """``fastpe ARGS`` in-process with ``tmp`` as the working directory."""
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        return run(*args)
    finally:
        os.chdir(cwd)


def cli_verdict(args, result, tmp, out_path) -> str | None:
    """What is wrong with one run of a command given a garbage value, or None: exit 0 with
    the file written, or exit 2 with one ``Error:`` line naming an option and no file."""
    text = f"fastpe {' '.join(short(a, 60) for a in args)}"
    if result.exit_code == 0:
        return None if out_path is None or os.path.exists(out_path) else f"{text}: exit 0 but no {out_path}"
    if result.exit_code != 2:
        return f"{text}: exit status {result.exit_code} (bad input must exit 2): {result.stderr.strip()[-300:]!r}"
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    if len(lines) != 1 or not lines[0].startswith("Error: ") or "Traceback" in result.stderr:
        return f"{text}: stderr {result.stderr[-300:]!r} is not one Error: line"
    named = {o for o in args if o.startswith("-")}
    named |= {o.lstrip("-") for o in named} | {o.lstrip("-").replace("-", "_") for o in named}
    # the library's own names, and the config keys `--scaling` reads from a file
    named |= {"output", "OUTPUT", "PATH", "INPUT", "scaling", "rope_type", "factor", "config", "spec"}
    named |= {os.path.basename(a) for a in args if os.sep in a}  # a file named by its path
    if not (names_one_of(lines[0], named) or "exactly one of" in lines[0]):
        return f"{text}: {lines[0]!r} names no option"
    left = sorted(set(os.listdir(tmp)) - {"inputs"})
    if left:
        return f"{text}: left {left}"
    return None


def test_cli_bad_option_values(tmp_path):
    """Every option of every array-writing command, set in turn to every garbage value: a
    one-line ``Error:`` naming an option, exit status 2 and no file -- or, where the value
    happens to be valid, the file.  Never exit 1 (an unexpected failure) or a traceback."""
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "deep.json").write_text("[" * 5000)
    (inputs / "deep_object.json").write_text('{"a": ' * 3000 + "1" + "}" * 3000)
    (inputs / "broken.json").write_text("{")
    (inputs / "t.npy").write_bytes(b"not an npy file")
    np.save(inputs / "t2.npy", np.zeros((2, 2)))
    np.save(inputs / "nan.npy", np.array([0.0, math.nan]))
    files = [str(inputs / n) for n in ("deep.json", "deep_object.json", "broken.json", "t.npy", "t2.npy",
                                       "nan.npy", "missing.json")]
    extra = {"table": {"--from-spec": files}, "rope": {"--scaling": list(SCALING_JSON) + files},
             "timestep": {"--from": files}, "plot": {"INPUT": files}}
    failures = []
    case = 0
    for command, (base_args, out_name, options) in sorted(CLI_COMMANDS.items()):
        for option in options + tuple(o for o in extra.get(command, {}) if o not in options) + ("-o",):
            pool = extra.get(command, {}).get(option, PLOT_GARBAGE if command == "plot" else CLI_GARBAGE)
            if option == "-o":
                pool = ("", "{tmp}", "{tmp}/no/" + out_name, "{tmp}/x.txt", "{tmp}/." + out_name.split(".")[1],
                        "/dev/null", "{tmp}/" + out_name + "/")
            for value in pool:
                case += 1
                tmp = tmp_path / f"run{case}"
                tmp.mkdir()
                out_path = str(tmp / out_name)
                if option == "-o":
                    args = base_args + ["-o", value.replace("{tmp}", str(tmp))]
                    out_path = None
                else:
                    args = list(base_args)
                    if option in ("--t", "--from"):  # each replaces --steps
                        args = [a for a in args if a not in ("--steps", "3")]
                    if option == "INPUT":  # plot's positional input file replaces the sizes
                        args = ["plot", value]
                    elif option in args:
                        args[args.index(option) + 1] = value
                    else:
                        args += [option, value]
                    args += ["-o", out_path]
                problem = cli_verdict(args, run_cli(args, tmp), tmp, out_path)
                if problem:
                    failures.append(problem)
    for args in (["info"], ["info", "--json"], ["--version"]):
        result = run_cli(args, tmp_path)
        if result.exit_code != 0 or not result.stdout.strip():
            failures.append(f"fastpe {' '.join(args)}: exit {result.exit_code}, {result.stderr[-300:]!r}")
    assert not failures, f"{len(failures)} of {case} command lines handled badly:\n" + "\n".join(failures[:30])
