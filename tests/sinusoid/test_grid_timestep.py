"""2-D/3-D sin-cos grids (MAE, timm) and continuous timesteps (diffusers), every backend."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

import fastpe
from fastpe import _dtypes, grid
from conftest import AVAILABLE
from support.inputs import check_out_contract, quarter_turn_reals
from support.oracle import sin_cos, timestep_frequency, ulp_distance

# ------------------------------------------------------------------ peers' formulas


def mae_2d(dim, height, width, cls_token=False):
    """MAE's get_2d_sincos_pos_embed (float64 NumPy), generalised to height != width."""
    gh = np.arange(height, dtype=np.float32)
    gw = np.arange(width, dtype=np.float32)
    g = np.stack(np.meshgrid(gw, gh), axis=0).reshape(2, 1, height, width)

    def one(d, pos):
        omega = np.arange(d // 2, dtype=np.float64) / (d / 2.0)
        omega = 1.0 / 10000**omega
        out = np.einsum("m,d->md", pos.reshape(-1), omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)

    emb = np.concatenate([one(dim // 2, g[0]), one(dim // 2, g[1])], axis=1)
    if cls_token:
        emb = np.concatenate([np.zeros([1, dim]), emb], axis=0)
    return emb


def timm_2d(dim, height, width, temperature=10000.0):
    """timm's build_sincos2d_pos_embed default (ndgrid over (H, W); [sin y|sin x|cos y|cos x])."""
    pos_dim = dim // 4
    bands = 1.0 / (temperature ** (np.arange(pos_dim) / pos_dim))
    yy, xx = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    grid_ = np.stack([yy.reshape(-1), xx.reshape(-1)], axis=1)  # (HW, 2)
    pos2 = grid_[:, :, None] * bands[None, None, :]  # (HW, 2, pos_dim)
    return np.stack([np.sin(pos2), np.cos(pos2)], axis=1).reshape(height * width, -1)


def diffusers_timestep(t, dim, flip=False, shift=1.0, scale=1.0, max_period=10000):
    """diffusers' get_timestep_embedding, in float64."""
    half = dim // 2
    exponent = -math.log(max_period) * np.arange(half) / (half - shift)
    emb = t[:, None] * np.exp(exponent)[None, :] * scale
    emb = np.concatenate([np.sin(emb), np.cos(emb)], axis=-1)
    if flip:
        emb = np.concatenate([emb[:, half:], emb[:, :half]], axis=-1)
    if dim % 2:
        emb = np.pad(emb, ((0, 0), (0, 1)))
    return emb


# ------------------------------------------------------------------ grids


@pytest.mark.any_backend
@pytest.mark.parametrize("hw", [(1, 1), (3, 5), (14, 14), (7, 2)])
@pytest.mark.parametrize("cls_token", [False, True])
def test_mae_order(backend, hw, cls_token):
    got = grid.sincos_2d(*hw, 16, cls_token=cls_token, backend=backend)
    np.testing.assert_allclose(got, mae_2d(16, *hw, cls_token), atol=1e-7)
    assert got.shape == (hw[0] * hw[1] + cls_token, 16) and got.dtype == np.float32


@pytest.mark.any_backend
@pytest.mark.parametrize("hw", [(3, 5), (8, 8)])
def test_timm_order(backend, hw):
    got = grid.sincos_2d(*hw, 24, order="timm", backend=backend)
    np.testing.assert_allclose(got, timm_2d(24, *hw), atol=1e-7)


@pytest.mark.any_backend
def test_values_are_the_exact_1d_values(backend):
    """Each block of a token is the exact table row of its coordinate."""
    h, w, dim = 5, 9, 32
    row = fastpe.table(dim // 2, max(h, w), layout="halves", denominator="d", backend=backend)
    # the axis frequencies are base**(-k/(dim/4)): the spec's for d_model = dim/2, halves
    g = grid.sincos_2d(h, w, dim, backend=backend).reshape(h, w, dim)
    assert np.array_equal(g[:, :, :16], np.broadcast_to(row[None, :w], (h, w, 16)))
    assert np.array_equal(g[:, :, 16:], np.broadcast_to(row[:h, None], (h, w, 16)))


@pytest.mark.any_backend
@pytest.mark.parametrize("order", ["mae", "timm"])
def test_3d(backend, order):
    t, h, w, dim = 2, 3, 4, 12
    g = grid.sincos_3d(t, h, w, dim, order=order, backend=backend).reshape(t, h, w, dim)
    row = fastpe.table(4, 4, layout="halves", backend=backend)  # [sin|cos] of 2 freqs
    q = 2
    coords = np.stack(np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij"), -1)
    for a in range(3):  # axes t, y, x
        vals = row[coords[..., a]]
        if order == "mae":
            off = (2 - a) * 2 * q
            assert np.array_equal(g[..., off:off + 2 * q], vals)
        else:
            assert np.array_equal(g[..., a * q:(a + 1) * q], vals[..., :q])
            assert np.array_equal(g[..., (3 + a) * q:(4 + a) * q], vals[..., q:])


@pytest.mark.any_backend
def test_grid_backends_identical_and_parallel_sized():
    a = grid.sincos_2d(96, 80, 256, backend="numba", cls_token=True)
    for b in AVAILABLE:
        if b != "python":
            assert np.array_equal(a, grid.sincos_2d(96, 80, 256, backend=b, cls_token=True))


@pytest.mark.any_backend
@pytest.mark.parametrize("dt", ["float64", "float16", "bfloat16"])
def test_grid_dtypes(backend, dt):
    pytest.importorskip("ml_dtypes")
    g = grid.sincos_2d(4, 6, 8, dtype=dt, backend=backend)
    assert g.dtype == _dtypes.resolve(dt)
    row = fastpe.table(4, 6, layout="halves", dtype=dt, backend=backend)
    assert np.array_equal(g.reshape(4, 6, 8)[:, :, :4], np.broadcast_to(row[None, :6], (4, 6, 4)))


@pytest.mark.any_backend
@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: grid.sincos_2d(4, 4, 10), ValueError, "d_model must be divisible by 4 for a 2-D grid, got 10"),
        (lambda: grid.sincos_3d(2, 4, 4, 16), ValueError, "d_model must be divisible by 6 for a 3-D grid, got 16"),
        (lambda: grid.sincos_3d(0, 4, 4, 12), ValueError, "frames must be >= 1"),
        (lambda: grid.sincos_2d(0, 4, 8), ValueError, "height must be >= 1"),
        (lambda: grid.sincos_2d(4, 2.5, 8), TypeError, "width must be an integer"),
        (lambda: grid.sincos_2d(4, 4, 8, order="vit"), ValueError, "order must be one of 'mae', 'timm'"),
        (lambda: grid.sincos_2d(4, 4, 8, base=1.0), ValueError, "base must be greater than 1"),
        (lambda: grid.sincos_2d(4, 4, 8, cls_token=1), TypeError, "cls_token must be a bool"),
        (lambda: grid.sincos_2d(2**16, 2**16, 8), ValueError, "more than"),
        (lambda: grid.sincos_2d(4, 4, 8, dtype="int16"), TypeError, "dtype must be one of"),
    ],
)
def test_grid_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


# ------------------------------------------------------------------ timesteps


@pytest.mark.any_backend
@pytest.mark.parametrize("dim", [8, 9, 320])
@pytest.mark.parametrize("flip, shift", [(False, 1.0), (True, 0.0), (True, 1.0)])
def test_timestep_matches_diffusers(backend, dim, flip, shift):
    t = np.array([0.0, 1.0, 0.5, 17.25, 999.0, 500.123])
    got = fastpe.timestep(t, dim, flip_sin_to_cos=flip, shift=shift, backend=backend)
    np.testing.assert_allclose(got, diffusers_timestep(t, dim, flip, shift), atol=1e-6)
    assert got.dtype == np.float32 and got.shape == (6, dim)


def test_timestep_matches_diffusers_itself():
    pytest.importorskip("diffusers")
    torch = pytest.importorskip("torch")
    from diffusers.models.embeddings import get_timestep_embedding

    t = torch.arange(0, 1000, 37, dtype=torch.float32)
    want = get_timestep_embedding(t, 64, flip_sin_to_cos=True, downscale_freq_shift=0).numpy()
    np.testing.assert_allclose(fastpe.timestep(t.numpy(), 64, flip_sin_to_cos=True, shift=0), want, atol=2e-4)


def _mp_sin_cos(t, d_model, k, shift=1.0, scale=1.0, base=10000.0):
    """The oracle's sine and cosine of ``t`` times timestep frequency ``k``, at 60 digits."""
    with mpmath.workdps(60):
        return sin_cos(t, timestep_frequency(k, d_model, base, shift, scale))


@pytest.mark.any_backend
def test_timestep_exact_for_large_and_fractional_t(fast_backend):
    """float64 t taken exactly: exact against mpmath where the float32-cast or float64
    product of the usual implementations has lost digits."""
    t = np.array([1e9 + 0.375, -2.0**31 + 0.5, 123456.789, 2.0**-30, 4e9])
    got = fastpe.timestep(t, 6, scale=3.0, backend=fast_backend)
    for r, tv in enumerate(t):
        for k in range(3):
            s, c = _mp_sin_cos(tv, 6, k, scale=3.0)
            assert ulp_distance(got[r, k], np.float32(float(s))).max() <= 1
            assert ulp_distance(got[r, 3 + k], np.float32(float(c))).max() <= 1
    ref = fastpe.timestep(t, 6, scale=3.0, backend="python")
    assert ulp_distance(got, ref).max() <= 1
    got64 = fastpe.timestep(t, 6, scale=3.0, dtype="float64", backend=fast_backend)
    ref64 = fastpe.timestep(t, 6, scale=3.0, dtype="float64", backend="python")
    assert np.abs(got64 - ref64).max() <= 2.0**-45


@pytest.mark.any_backend
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_timestep_tiny_negative_t_keeps_its_sign(backend, dt):
    """A negative product's fraction was once taken as ``a - floor(a)``, which rounds to 1.0
    for ``|a| < 2**-53``: -1e-20 came out as +8.66e-29 and -1e-40 as 0.  sin is odd and
    cos even, so the values are ``-|t| w`` (and 1)."""
    t = np.array([-1e-20, -1e-40, -1e-12, -3e-300, 1e-20])
    got = fastpe.timestep(t, 4, dtype=dt, backend=backend)  # w = 1, 1e-4
    # float64's documented bound is absolute (2**-45), which says nothing at 1e-20: ask for
    # a relative 2**-50 here, and the float32 values within 1 ULP of the correctly rounded
    rel = 2.0**-50 if dt == "float64" else 2.0**-23
    for r, tv in enumerate(t):
        for k in range(2):
            s, c = (float(v) for v in _mp_sin_cos(tv, 4, k))
            want = float(np.float32(s)) if dt == "float32" else s
            assert math.copysign(1, got[r, k]) == math.copysign(1, s), (tv, k)
            assert abs(got[r, k] - want) <= rel * abs(want), (tv, k)
            assert got[r, 2 + k] == np.array(c).astype(dt)
    assert np.array_equal(got[0, :2], -got[4, :2])


@pytest.mark.any_backend
@pytest.mark.parametrize("dt", ["float16", "float32", "float64"])
def test_timestep_underflowing_sines_keep_their_sign(backend, dt):
    """The sine of a negative angle that underflows is -0.0 (the compiled backends once gave
    +0.0), and frequencies of 1e-600 (base=1e300, shift 7.5) are settled by the
    reference (it once raised 'undecided') as 0 and 1."""
    got = fastpe.timestep([-5e-324, 5e-324], 2, shift=0.0, dtype=dt, backend=backend)
    assert [math.copysign(1.0, v) for v in got[:, 0]] == [-1.0, 1.0]
    assert (np.abs(got[:, 0]) <= 5e-324).all()  # float64: within the documented 2**-45
    big = fastpe.timestep([1.0, -1.0], 16, shift=7.5, base=1e300, dtype=dt, backend=backend)
    assert big[0, 0] == np.array(math.sin(1.0)).astype(dt) and big[1, 0] == -big[0, 0]
    assert (big[:, 1:8] == 0).all() and (big[:, 9:] == 1).all()
    assert [math.copysign(1.0, v) for v in big[:, 1]] == [1.0, -1.0]


@pytest.mark.any_backend
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_timestep_exact_near_zeros_of_sin_and_cos(backend, sign):
    """Fractional t whose angle is near a multiple of pi/2 (the real-position path once lost
    a negative Veltkamp half's low bits there: 2,746 ULP off at t = 1712515.142194659)."""
    t = sign * np.concatenate([[1712515.142194659], quarter_turn_reals(300, 11)])
    got = fastpe.timestep(t, 2, shift=0.0, backend=backend)  # one frequency, w = 1
    with mpmath.workdps(60):
        want = np.array([[float(v) for v in sin_cos(x, 1)] for x in t], dtype=np.float32)
    assert ulp_distance(got, want).max() <= 1
    if sign > 0:
        assert got[0, 1] == np.float32(3.616179e-12)


@pytest.mark.any_backend
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_timestep_low_precision_matches_reference(fast_backend, dt):
    pytest.importorskip("ml_dtypes")
    t = np.linspace(0, 1000, 77)
    got = fastpe.timestep(t, 16, dtype=dt, backend=fast_backend)
    want = fastpe.timestep(t, 16, dtype=dt, backend="python")
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.any_backend
def test_timestep_scalar_and_out(backend):
    one = fastpe.timestep(5.0, 8, backend=backend)
    assert one.shape == (1, 8)
    out = np.empty((1, 8), np.float64)
    assert fastpe.timestep([5.0], 8, out=out, backend=backend) is out
    np.testing.assert_allclose(out, one, atol=1e-7)


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: fastpe.timestep([1.0], 1), ValueError, "d_model must be >= 2"),
        (lambda: fastpe.timestep([1.0], 2, shift=1.0), ValueError, r"d_model // 2 - shift must be > 0"),
        (lambda: fastpe.timestep([math.nan], 8), ValueError, "t must be finite"),
        (lambda: fastpe.timestep([2.0**32], 8), ValueError, r"t must be in \(-2\*\*32, 2\*\*32\)"),
        (lambda: fastpe.timestep([[1.0]], 8), ValueError, "t must be 1-D"),
        (lambda: fastpe.timestep(["a"], 8), TypeError, "t must hold real numbers"),
        (lambda: fastpe.timestep([1.0], 8, base=0.5), ValueError, "base must be >= 1"),
        (lambda: fastpe.timestep([1.0], 8, scale=0), ValueError, "scale must be > 0"),
        (lambda: fastpe.timestep([1.0], 8, scale=5000.0), ValueError, "scale must be <= 1024"),
        (lambda: fastpe.timestep([1.0], 8, flip_sin_to_cos="yes"), TypeError, "flip_sin_to_cos must be a bool"),
        (lambda: fastpe.timestep([1.0], 8, out=np.empty((2, 8), np.float32)), ValueError, "out must have shape"),
        (lambda: fastpe.timestep([1.0], 2**20), ValueError, "d_model must be <= 65536"),
        (lambda: fastpe.timestep([1.0], 8, dtype="int8", out=np.empty((1, 8), np.float32)), TypeError,
         "dtype must be one of"),
        (lambda: fastpe.timestep([1.0], 8, dtype="float64", out=np.empty((1, 8), np.float32)), ValueError,
         "dtype is float64 but out has dtype float32"),
        (lambda: fastpe.timestep([1.0, True], 8), TypeError, "t must hold numbers, got a bool"),
        (lambda: fastpe.timestep([1.0], 8, base=10**400), ValueError, "base must be finite"),
        (lambda: grid.sincos_2d(1, 1, 4 * 10**8), ValueError, "d_model must be <= 65536"),
        (lambda: grid.sincos_3d(1, 1, 1, 6 * 10**8), ValueError, "d_model must be <= 65536"),
    ],
)
def test_timestep_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_timestep_refuses_t_inside_out():
    buf = np.zeros((4, 8))
    buf[:, 0] = [0.5, 1.5, 2.5, 3.5]
    before = buf.copy()
    with pytest.raises(ValueError, match="out must not share memory with t"):
        fastpe.timestep(buf[:, 0], 8, out=buf)
    assert np.array_equal(buf, before)


@pytest.mark.any_backend
def test_timestep_dtype_follows_out(backend):
    out = np.empty((2, 8), np.float64)
    assert fastpe.timestep([0.5, 2.0], 8, out=out, backend=backend).dtype == np.float64
    assert np.array_equal(out, fastpe.timestep([0.5, 2.0], 8, dtype="float64", backend=backend))


@pytest.mark.any_backend
def test_timestep_base_is_diffusers_max_period(backend):
    t = np.array([0.0, 3.0, 17.25, 999.0])
    got = fastpe.timestep(t, 10, base=50.0, flip_sin_to_cos=True, shift=0.0, backend=backend)
    np.testing.assert_allclose(got, diffusers_timestep(t, 10, True, 0.0, max_period=50.0), atol=1e-6)


# ------------------------------------------------------------------ out= and the shared keywords


@pytest.mark.any_backend
@pytest.mark.parametrize("cls_token", [False, True])
@pytest.mark.parametrize("order", grid.ORDERS)
def test_grid_out(backend, order, cls_token):
    for build, sizes, d in ((grid.sincos_2d, (3, 5), 16), (grid.sincos_3d, (2, 3, 4), 12)):
        want = check_out_contract(
            lambda **kw: build(*sizes, d, order=order, cls_token=cls_token, backend=backend, **kw),
            other_dtype="float64",
            bad_input=lambda out: build(*sizes, d + 1, order=order, cls_token=cls_token, out=out),
        )
        assert want.shape == (math.prod(sizes) + cls_token, d) and want.dtype == np.float32


@pytest.mark.any_backend
@pytest.mark.parametrize("dt", ["float16", "bfloat16", "float64"])
def test_grid_out_of_every_dtype(backend, dt):
    pytest.importorskip("ml_dtypes")
    want = grid.sincos_2d(4, 6, 8, dtype=dt, backend=backend)
    out = np.empty(want.shape, _dtypes.resolve(dt))
    assert grid.sincos_2d(4, 6, 8, out=out, backend=backend) is out
    assert out.tobytes() == want.tobytes()


def test_timestep_out(backend):
    t = np.array([0.0, 0.5, 17.25, -3.0, 999.0])
    check_out_contract(
        lambda **kw: fastpe.timestep(t, 9, flip_sin_to_cos=True, shift=0.0, backend=backend, **kw),
        other_dtype="float64",
        alias=lambda out: fastpe.timestep(out.reshape(-1)[: t.size], 9, out=out),
        bad_input=lambda out: fastpe.timestep(t, 9, shift=4.5, out=out),
    )


@pytest.mark.any_backend
def test_grid_and_timestep_signatures():
    """The shared keywords, in one order: width d_model, then base, ..., dtype, out, backend."""
    import inspect

    for fn, first in ((grid.sincos_2d, ["height", "width", "d_model"]),
                      (grid.sincos_3d, ["frames", "height", "width", "d_model"]),
                      (fastpe.timestep, ["t", "d_model"])):
        params = inspect.signature(fn).parameters
        assert [p for p in params if params[p].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD] == first
        assert list(params)[-3:] == ["dtype", "out", "backend"]
        assert params["dtype"].default is None and params["out"].default is None and params["base"].default == 10000.0


@pytest.mark.any_backend
@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: fastpe.timestep([1.0], 8, max_period=100.0), "max_period"),
        (lambda: fastpe.timestep([1.0], dim=8), "dim"),
        (lambda: grid.sincos_2d(4, 4, dim=8), "dim"),
        (lambda: grid.sincos_3d(t=2, h=2, w=2, d_model=12), "t"),
    ],
)
def test_old_keywords_are_gone(call, name):
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{name}'"):
        call()


# ------------------------------------------------------------------ fairseq positions


def test_fairseq_positions():
    tok = np.array([[1, 1, 5, 6, 7], [5, 6, 1, 7, 8]])
    assert fastpe.fairseq_positions(tok, 1).tolist() == [[1, 1, 2, 3, 4], [2, 3, 1, 4, 5]]
    emb = fastpe.fairseq_embedding(tok, 6, 1)
    assert emb.shape == (2, 5, 6) and (emb[0, :2] == 0).all() and (emb[1, 2] == 0).all()
    table = fastpe.table(6, 6, layout="halves", denominator="half-1")
    assert np.array_equal(emb[1, 3], table[4])
    with pytest.raises(TypeError, match="tokens must be an integer array"):
        fastpe.fairseq_positions(np.zeros(3), 1)
    with pytest.raises(ValueError, match="padding_idx must be >= 0"):
        fastpe.fairseq_positions(tok, -1)
