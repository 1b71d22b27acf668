"""The public API: argument handling, bad input, and the table/forward identity."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fastpe
from fastpe import PosEncConfig


def small(backend):
    """Sizes the reference can afford."""
    return (16, 12) if backend == "python" else (257, 130)


# ---------------------------------------------------------------- PosEncConfig


@pytest.mark.any_backend
def test_config_defaults_follow_the_spec():
    cfg = PosEncConfig(512)
    assert (cfg.d_model, cfg.max_len, cfg.base) == (512, 2048, 10000.0)
    assert fastpe.DEFAULT_MAX_LEN == 2048


@pytest.mark.any_backend
def test_config_is_frozen_and_normalised():
    cfg = PosEncConfig(np.int64(8), np.uint16(4), np.float32(2.5))
    assert type(cfg.d_model) is int and type(cfg.max_len) is int and type(cfg.base) is float
    with pytest.raises(AttributeError):
        cfg.d_model = 4  # type: ignore[misc]
    assert cfg == PosEncConfig(8, 4, 2.5) and hash(cfg) == hash(PosEncConfig(8, 4, 2.5))


@pytest.mark.any_backend
@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(d_model=0), ValueError, "d_model must be >= 1"),
        (dict(d_model=-3), ValueError, "d_model must be >= 1"),
        (dict(d_model=65537), ValueError, "d_model must be <= 65536"),
        (dict(d_model=8.0), TypeError, "d_model must be an integer"),
        (dict(d_model="8"), TypeError, "d_model must be an integer"),
        (dict(d_model=True), TypeError, "d_model must be an integer"),
        (dict(d_model=8, max_len=0), ValueError, "max_len must be >= 1"),
        (dict(d_model=8, max_len=-1), ValueError, "max_len must be >= 1"),
        (dict(d_model=8, max_len=2**32 + 1), ValueError, "max_len must be <= 4294967296"),
        (dict(d_model=8, max_len=2.5), TypeError, "max_len must be an integer"),
        (dict(d_model=8, base=0.0), ValueError, "base must be greater than 1"),
        (dict(d_model=8, base=-10.0), ValueError, "base must be greater than 1"),
        (dict(d_model=8, base=1.0), ValueError, "base must be greater than 1"),
        (dict(d_model=8, base=0.5), ValueError, "base must be greater than 1"),
        (dict(d_model=8, base=math.nan), ValueError, "base must be finite"),
        (dict(d_model=8, base=math.inf), ValueError, "base must be finite"),
        (dict(d_model=8, base="1e4"), TypeError, "base must be a real number"),
        (dict(d_model=8, base=None), TypeError, "base must be a real number"),
        (dict(d_model=8, base=False), TypeError, "base must be a real number"),
    ],
)
def test_bad_config(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        PosEncConfig(**kwargs)
    # table() validates the same way, before allocating anything
    with pytest.raises(exc, match=match):
        fastpe.table(**kwargs)


# ---------------------------------------------------------------- forward: bad input

CFG = PosEncConfig(6, 16)


def _out(n, d=6, dtype=np.float32):
    return np.zeros((n, d), dtype=dtype)


@pytest.mark.any_backend
@pytest.mark.parametrize(
    "positions, exc, match",
    [
        ([-(2**32), 2], ValueError, r"positions must be > -2\*\*32, got -4294967296"),
        (np.array([0, 2**32], dtype=np.int64), ValueError, r"positions must be < 2\*\*32"),
        ([0, 2**70], ValueError, r"positions must be < 2\*\*32"),
        ([0.5, 1.0], ValueError, "positions must be whole numbers, got 0.5"),
        ([1.0, math.nan], ValueError, "positions must be finite"),
        ([1.0, math.inf], ValueError, "positions must be finite"),
        (np.zeros((2, 2), dtype=np.int64), ValueError, r"positions must be 1-D, got an array of shape \(2, 2\)"),
        (np.int64(3), ValueError, "positions must be 1-D"),
        ("0123", TypeError, "positions must be an array of integers"),
        (["a", "b"], TypeError, "positions must hold integers"),
        ([True, False], TypeError, "positions must hold integers, got booleans"),
        ([1 + 2j, 3], TypeError, "positions must hold integers"),
        ([[1, 2], [3]], ValueError, "positions must be a 1-D array of integers"),
        ([1, None], TypeError, "positions must hold integers"),
    ],
)
def test_bad_positions(positions, exc, match, backend):
    n = 2
    out = _out(n)
    with pytest.raises(exc, match=match):
        fastpe.forward(positions, CFG, out, backend=backend)
    assert not out.any(), "nothing may be written before validation passes"


@pytest.mark.any_backend
@pytest.mark.parametrize(
    "make_out, exc, match",
    [
        (lambda: np.zeros((3, 7), np.float32), ValueError, r"out must have shape \(3, 6\), got \(3, 7\)"),
        (lambda: np.zeros((4, 6), np.float32), ValueError, r"out must have shape \(3, 6\)"),
        (lambda: np.zeros(18, np.float32), ValueError, "out must have shape"),
        (lambda: np.zeros((3, 6), np.int32), TypeError, "out must have dtype float32, float64, float16.*got int32"),
        (lambda: np.zeros((3, 6), np.complex64), TypeError, "out must have dtype float32"),
        (lambda: np.zeros((6, 3), np.float32).T, ValueError, "out must be C-contiguous"),
        (lambda: np.zeros((3, 12), np.float32)[:, ::2], ValueError, "out must be C-contiguous"),
        (lambda: _readonly(np.zeros((3, 6), np.float32)), ValueError, "out is read-only"),
        (lambda: np.zeros((3, 6), np.dtype(">f4")), (TypeError, ValueError), "out must"),
        (lambda: [[0.0] * 6] * 3, TypeError, "out must be a numpy.ndarray, got list"),
    ],
)
def test_bad_out(make_out, exc, match, backend):
    with pytest.raises(exc, match=match):
        fastpe.forward([1, 2, 3], CFG, make_out(), backend=backend)


def _readonly(a):
    a.setflags(write=False)
    return a


@pytest.mark.any_backend
def test_bad_config_object():
    with pytest.raises(TypeError, match="config must be a fastpe.PosEncConfig, got dict"):
        fastpe.forward([1], {"d_model": 6}, _out(1))


@pytest.mark.any_backend
@pytest.mark.parametrize("name, exc", [("cuda", ValueError), ("", ValueError), (3, TypeError)])
def test_bad_backend(name, exc):
    out = _out(2)
    with pytest.raises(exc, match="backend"):
        fastpe.forward([1, 2], CFG, out, backend=name)
    assert not out.any()


@pytest.mark.any_backend
def test_out_sharing_memory_with_positions_is_refused():
    buf = np.zeros((2, 6), dtype=np.float32)
    positions = buf.view(np.uint32)[0, :2]
    with pytest.raises(ValueError, match="out must not share memory with positions"):
        fastpe.forward(positions, CFG, buf)


@pytest.mark.parametrize("dt", [np.dtype(">f4"), np.dtype(">f8"), np.dtype(">f2"), ">f4", ">f2"])
def test_byte_swapped_dtype_is_refused(dt):
    """``'>f2'`` once passed as float16 and gave garbage (the kernels write native words)."""
    with pytest.raises(TypeError, match="dtype must be in native byte order"):
        fastpe.table(4, 3, dtype=dt)
    with pytest.raises(TypeError, match="dtype must be in native byte order"):
        fastpe.timestep([1.0], 4, dtype=dt)
    with pytest.raises(TypeError, match="dtype must be in native byte order"):
        fastpe.fairseq_embedding(np.array([[3, 4]]), 4, 1, dtype=dt)
    from fastpe import grid

    with pytest.raises(TypeError, match="dtype must be in native byte order"):
        grid.sincos_2d(2, 2, 8, dtype=dt)


@pytest.mark.parametrize("dt", ["f4", "<f8", "=f2", np.dtype("<f4")])
def test_native_numpy_spellings_of_dtypes(dt):
    assert fastpe.table(4, 3, dtype=dt).dtype == np.dtype(dt)


@pytest.mark.any_backend
def test_positions_mixing_bools_are_refused():
    with pytest.raises(TypeError, match="positions must hold numbers, got a bool"):
        fastpe.forward([1, True], CFG, np.empty((2, 6), np.float32))


@pytest.mark.any_backend
def test_huge_integers_are_named():
    with pytest.raises(ValueError, match="base must be finite"):
        fastpe.table(4, 3, base=10**400)
    with pytest.raises(ValueError, match="padding_idx \\+ offset \\+ seq must fit in int64"):
        fastpe.fairseq_positions(np.array([[2, 3]]), 2**63 - 1)
    with pytest.raises(ValueError, match="padding_idx must be <= "):
        fastpe.fairseq_positions(np.array([[2, 3]]), 2**64)


def test_table_dtype_beside_out():
    with pytest.raises(ValueError, match="dtype is float32 but out has dtype float64"):
        fastpe.table(4, 3, dtype="float32", out=np.empty((3, 4)))
    assert fastpe.table(4, 3, out=np.empty((3, 4))).dtype == np.float64


@pytest.mark.any_backend
def test_bad_table_out(backend):
    with pytest.raises(ValueError, match=r"out must have shape \(4, 6\)"):
        fastpe.table(6, 4, out=np.zeros((4, 5), np.float32), backend=backend)
    with pytest.raises(TypeError, match="out must have dtype float32"):
        fastpe.table(6, 4, out=np.zeros((4, 6), np.int64), backend=backend)


# ---------------------------------------------------------------- forward: accepted input


@pytest.mark.any_backend
@pytest.mark.parametrize(
    "positions",
    [
        [0, 1, 2, 2**32 - 1],
        np.array([0, 1, 2, 2**32 - 1], dtype=np.uint32),
        np.array([0, 1, 2, 2**32 - 1], dtype=np.uint64),
        np.array([0, 1, 2, 2**32 - 1], dtype=np.int64),
        np.array([0.0, 1.0, 2.0, 2.0**32 - 1], dtype=np.float64),
        (0, 1, 2, 2**32 - 1),
        np.array([0, 1, 2, 2**32 - 1], dtype=np.uint64)[::-1][::-1],
    ],
    ids=["list", "u32", "u64", "i64", "whole-floats", "tuple", "strided"],
)
def test_accepted_position_forms_agree(positions, backend):
    cfg = PosEncConfig(5)
    want = fastpe.forward(np.array([0, 1, 2, 2**32 - 1], np.uint32), cfg, _out(4, 5), backend=backend)
    got = fastpe.forward(positions, cfg, _out(4, 5), backend=backend)
    np.testing.assert_array_equal(got, want)


@pytest.mark.any_backend
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.float32])
def test_small_dtypes(dtype, backend):
    positions = np.array([0, 3, 100], dtype=dtype)
    got = fastpe.forward(positions, CFG, _out(3), backend=backend)
    want = fastpe.forward([0, 3, 100], CFG, _out(3), backend=backend)
    np.testing.assert_array_equal(got, want)


@pytest.mark.any_backend
def test_empty_positions(backend):
    out = np.empty((0, 6), np.float32)
    assert fastpe.forward([], CFG, out, backend=backend) is out
    assert fastpe.forward(np.array([], dtype=np.uint64), CFG, out, backend=backend) is out


@pytest.mark.any_backend
def test_forward_returns_out_and_leaves_inputs_untouched(backend):
    positions = np.array([5, 2**31, 7], dtype=np.int64)
    before = positions.copy()
    out = _out(3)
    assert fastpe.forward(positions, CFG, out, backend=backend) is out
    np.testing.assert_array_equal(positions, before)
    assert out.any()


@pytest.mark.any_backend
def test_table_is_forward_on_arange(backend):
    n, d = small(backend)
    for dm in (d, d + 1):
        t = fastpe.table(dm, n, base=500.0, backend=backend)
        assert t.dtype == np.float32 and t.shape == (n, dm) and t.flags.c_contiguous
        f = fastpe.forward(np.arange(n), PosEncConfig(dm, n, 500.0), np.empty((n, dm), np.float32), backend=backend)
        np.testing.assert_array_equal(t.view(np.uint32), f.view(np.uint32))


@pytest.mark.any_backend
def test_table_fills_given_out(backend):
    out = np.full((3, 4), np.nan, np.float32)
    assert fastpe.table(4, 3, out=out, backend=backend) is out
    np.testing.assert_array_equal(out, fastpe.table(4, 3, backend=backend))


@pytest.mark.any_backend
def test_table_row_zero_is_exact(backend):
    t = fastpe.table(9, 1, backend=backend)
    np.testing.assert_array_equal(t[0], [0, 1, 0, 1, 0, 1, 0, 1, 0])


@pytest.mark.any_backend
def test_huge_numbers_are_named_in_short():
    """An int of more than 4300 digits cannot even be printed; a huge Fraction has no
    bit_length: both are reported by the argument's name."""
    from fractions import Fraction

    with pytest.raises(ValueError, match=r"d_model must be <= 65536, got 1\.000e\+5000"):
        fastpe.table(10**5000, 3)
    with pytest.raises(ValueError, match=r"base must be finite, got 3\.333e\+399"):
        fastpe.table(4, 3, base=Fraction(10**400, 3))


# ---------------------------------------------------------------- names in any case


#: every enumerated string argument of the sinusoid families, spelled as a person might
SPELLINGS = {"layout": ("Halves", " HALVES ", "halves"), "denominator": ("HALF-1", " Half-1", "half-1"),
             "dtype": ("BFloat16", " FLOAT16 ", "float64")}


@pytest.mark.any_backend
def test_config_names_in_any_case_are_recorded_canonically():
    cfg = PosEncConfig(8, layout=" Halves ", denominator="HALF-1")
    assert (cfg.layout, cfg.denominator) == ("halves", "half-1")
    assert cfg == PosEncConfig(8, layout="halves", denominator="half-1")
    assert hash(cfg) == hash(PosEncConfig(8, layout="halves", denominator="half-1"))
    for bad, kind in (("half s", ValueError), ("", ValueError), (b"halves", TypeError)):
        with pytest.raises(kind, match="layout must be"):
            PosEncConfig(8, layout=bad)


@pytest.mark.any_backend
def test_tables_of_names_in_any_case_are_the_canonical_bits(backend):
    from support.cli import same_bits

    canonical = dict(layout="halves", denominator="half-1")
    for spelled in (dict(layout="Halves", denominator=" HALF-1 "), dict(layout=" HALVES", denominator="Half-1")):
        for dtype in ("float32", "bfloat16", "Float16", " FLOAT64 "):
            got = fastpe.table(10, 9, **spelled, dtype=dtype, backend=backend.upper())
            assert same_bits(got, fastpe.table(10, 9, **canonical, dtype=dtype.strip().lower(), backend=backend))
        x = np.linspace(-1, 1, 30, dtype=np.float32).reshape(3, 10)
        y = x.copy()
        fastpe.add_(x, **spelled, backend=f" {backend.title()} ")
        fastpe.add_(y, **canonical, backend=backend)
        assert same_bits(x, y)
    # a config given beside a keyword that only spells its default differently: not both given
    x = np.zeros((2, 6), np.float32)
    fastpe.add_(x, config=PosEncConfig(6), layout="Interleaved", denominator="D", backend=backend)
    assert same_bits(x, fastpe.table(6, 2, backend=backend))


@pytest.mark.any_backend
def test_grids_of_orders_in_any_case_are_the_canonical_bits(backend):
    from fastpe import grid
    from support.cli import same_bits

    for order in ("mae", "timm"):
        want2 = grid.sincos_2d(2, 3, 8, order=order, backend=backend)
        want3 = grid.sincos_3d(2, 1, 2, 12, order=order, backend=backend)
        for spelled in (order.upper(), f" {order.title()} "):
            assert same_bits(grid.sincos_2d(2, 3, 8, order=spelled, dtype="Float32", backend=backend), want2)
            assert same_bits(grid.sincos_3d(2, 1, 2, 12, order=spelled, backend=backend), want3)
    with pytest.raises(ValueError, match="order must be one of 'mae', 'timm', got 'vi t'"):
        grid.sincos_2d(2, 2, 8, order="vi t")


@pytest.mark.any_backend
def test_save_table_records_names_in_any_case_canonically(tmp_path):
    from fastpe._io.save import load_spec

    saved = fastpe.save_table(tmp_path / "t.npy", 6, 5, layout="HALVES", denominator="Half-1", dtype=" Float16",
                              backend="python")
    params = load_spec(tmp_path / "t.npy")["params"]
    assert (params["layout"], params["denominator"], params["dtype"]) == ("halves", "half-1", "float16")
    assert saved.spec["params"] == params
