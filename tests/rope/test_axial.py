"""Axial (N-axis) RoPE caches: ``fastpe.rope._axial``.

* every value against mpmath (float32 within 1 ULP, float16/bfloat16 correctly rounded,
  float64 within 2**-45) on fractional, huge, tiny and negative coordinates, every layout,
  per-axis bases, the diffusers factors and Pixtral's half-step offset;
* the backends: compiled ones bit-identical, the reference within the design's bound; a
  meshgrid (broadcast) and the same tokens shuffled (gathered) give the same bits;
* the peers, each within its own float32/float64 error of the exact values: diffusers'
  ``get_1d/2d/3d_rotary_pos_embed``, FLUX, Wan, HunyuanVideo, Qwen-Image; HF Qwen2-VL's
  vision rotary and Pixtral's; timm's ``build_rotary_pos_embed`` (EVA);
* the grid builders against the peers' coordinates;
* bad input named, nothing written.
"""

from __future__ import annotations

import importlib
import itertools
import math
import sys
import types

import mpmath
import numpy as np
import pytest

from conftest import AVAILABLE, FAST
from fastpe._dtypes import resolve as resolve_dtype
from fastpe.rope import _axial as ax
from support.oracle import mp_exact, mp_round, ulp_distance
from support.strategies import assert_near, assert_same_bits

torch = pytest.importorskip("torch")

F32_EPS = 2.0**-24


# ----------------------------------------------------------------------------- the oracle

def exact_frequency(dim, k, base=10000.0, ntk=1.0, linear=1.0, offset=0.0):
    """``(1 / linear) * (base * ntk) ** (-2 (k + offset) / dim)``, every parameter exact."""
    b = mp_exact(base) * mp_exact(ntk)
    return b ** (-2 * (k + mpmath.mpf(offset)) / dim) / mp_exact(linear)


def column_map(dims, layout):
    """Per column: ``(axis, k)``."""
    owner = [None] * sum(dims)
    col, col_h, half = 0, 0, sum(dims) // 2
    for a, d in enumerate(dims):
        for k in range(d // 2):
            if layout == "gptj":
                cols = (col + 2 * k, col + 2 * k + 1)
            elif layout == "neox":
                cols = (col + k, col + d // 2 + k)
            else:
                cols = (col_h + k, half + col_h + k)
            for j in cols:
                owner[j] = (a, k)
        col += d
        col_h += d // 2
    return owner


def _per(v, a):
    return v[a] if isinstance(v, (tuple, list)) else v


def exact_caches(coords, dims, layout="gptj", *, base=10000.0, ntk_factor=1.0, linear_factor=1.0,
                 offset=0.0, rows=None, fmt="float64"):
    """mpmath cos/sin of ``rows`` (all by default), rounded to ``fmt`` (mpf when None)."""
    owner = column_map(dims, layout)
    rows = range(coords.shape[0]) if rows is None else rows
    cos = np.empty((len(rows), sum(dims)), dtype=object)
    sin = np.empty_like(cos)
    with mpmath.workdps(60):
        freqs = {(a, k): exact_frequency(d, k, _per(base, a), _per(ntk_factor, a), _per(linear_factor, a),
                                         _per(offset, a))
                 for a, d in enumerate(dims) for k in range(d // 2)}
        for i, r in enumerate(rows):
            for j, (a, k) in enumerate(owner):
                theta = mp_exact(float(coords[r, a])) * freqs[a, k]
                c, s = mpmath.cos(theta), mpmath.sin(theta)
                cos[i, j] = c if fmt is None else mp_round(c, fmt)
                sin[i, j] = s if fmt is None else mp_round(s, fmt)
    return cos, sin


def assert_exact(got, want_mp, dtype, what):
    """``got`` against mpf values: float32 within 1 ULP of the correctly rounded value,
    float16/bfloat16 correctly rounded, float64 within 2**-45."""
    name = np.dtype(dtype).name
    if name == "float64":
        err = np.abs(got - np.vectorize(lambda v: float(v))(want_mp).astype(np.float64))
        assert err.max(initial=0) <= 2.0**-45, f"{what}: float64 off by {err.max()}"
        return
    want = np.vectorize(lambda v: mp_round(v, name))(want_mp).astype(np.float64)
    if name == "float32":
        ulps = ulp_distance(got, want.astype(np.float32))
        assert ulps.max(initial=0) <= 1, f"{what}: {ulps.max()} ULP at {np.unravel_index(ulps.argmax(), ulps.shape)}"
    else:
        bad = got.astype(np.float64) != want
        assert not bad.any(), f"{what}: {int(bad.sum())} {name} values not correctly rounded"


def hard_coords(n_axes, rng, n=24):
    """Fractional, negative, huge (near 2**32), tiny and zero coordinates, and integers."""
    edges = np.array([0.0, -0.0, 5e-324, -1e-300, 1e-7, 0.5, -0.5, 2.0**32 - 1, -(2.0**32 - 0.5),
                      3e9 + 0.125, 1712515.142194659, 12345.678, -999.9, 2.0**31, 63.0, 1.0])
    vals = np.concatenate([edges, rng.uniform(-1e4, 1e4, n), rng.integers(0, 100, n).astype(np.float64)])
    return np.stack([rng.permutation(vals) for _ in range(n_axes)], axis=1)


KWARGS = [
    pytest.param({}, id="plain"),
    pytest.param({"base": (10000.0, 256.0, 100.5)}, id="per-axis-base"),
    pytest.param({"ntk_factor": 2.0, "linear_factor": 3.0}, id="ntk-linear"),
    pytest.param({"ntk_factor": (1.0, 1.5, 4.0), "linear_factor": 0.25}, id="per-axis-ntk"),
    pytest.param({"offset": (0.0, 0.5, 0.5), "base": 1e6}, id="half-step"),
]


# ----------------------------------------------------------------------------- exactness

@pytest.mark.parametrize("kw", KWARGS)
@pytest.mark.parametrize("layout", ax.AXIAL_LAYOUTS)
def test_against_mpmath(kw, layout):
    rng = np.random.default_rng(7)
    coords = hard_coords(3, rng)
    dims = (4, 6, 8)
    want_cos, want_sin = exact_caches(coords, dims, layout, fmt=None, **kw)
    for dtype in ("float32", "float64", "float16", "bfloat16"):
        cos, sin = ax.axial_cos_sin(coords, dims, layout=layout, dtype=dtype, **kw)
        assert cos.shape == sin.shape == (coords.shape[0], 18)
        assert cos.dtype == sin.dtype == resolve_dtype(dtype)
        assert_exact(cos, want_cos, cos.dtype, f"cos {dtype} {layout} {kw}")
        assert_exact(sin, want_sin, sin.dtype, f"sin {dtype} {layout} {kw}")


def test_flux_dims_large_fractional_against_mpmath():
    """FLUX's widths at fractional and huge coordinates, sampled rows."""
    rng = np.random.default_rng(3)
    coords = hard_coords(3, rng, n=40)
    rows = list(range(0, coords.shape[0], 5))
    cos, sin = ax.axial_cos_sin(coords, (16, 56, 56))
    want_cos, want_sin = exact_caches(coords, (16, 56, 56), rows=rows, fmt=None)
    assert_exact(cos[rows], want_cos, np.float32, "flux cos")
    assert_exact(sin[rows], want_sin, np.float32, "flux sin")


def test_rounded_product_fallback_is_documented_rule():
    """``linear_factor`` 1.7: ``base * linear_factor`` is no double, so it is rounded once
    (the documented rule); the values are exact for that frequency set."""
    coords = np.array([[0.3], [1e6 + 0.5], [3e9]])
    cos, sin = ax.axial_cos_sin(coords, (8,), linear_factor=1.7, dtype="float64")
    hi = 10000.0 * 1.7
    with mpmath.workdps(60):
        for r in range(3):
            for k in range(4):
                w = (mp_exact(hi) / mp_exact(1.7)) ** (-mpmath.mpf(2 * k) / 8) / mp_exact(1.7)
                t = mp_exact(coords[r, 0]) * w
                assert abs(cos[r, 2 * k] - float(mpmath.cos(t))) <= 2.0**-45
                assert abs(sin[r, 2 * k + 1] - float(mpmath.sin(t))) <= 2.0**-45


@pytest.mark.any_backend
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_backends_agree(dtype):
    rng = np.random.default_rng(11)
    coords = np.concatenate([hard_coords(3, rng), ax.index_grid((2, 3, 4))])
    results = {b: ax.axial_cos_sin(coords, (4, 6, 8), layout="neox", dtype=dtype, backend=b) for b in AVAILABLE}
    if len(FAST) > 1:
        assert_same_bits({b: np.concatenate(results[b], 1) for b in FAST}, "cos|sin")
    for b in FAST:
        for i in range(2):
            assert_near(results[b][i], results["python"][i], f"{b} vs python")


@pytest.mark.any_backend
@pytest.mark.parametrize("linear", [1e300, 1.79e304, 2.0**1000], ids=["1e300", "1.79e304", "2**1000"])
def test_huge_linear_factors_underflow_with_the_coordinates_sign(linear):
    """A linear factor that leaves ``base * linear_factor`` a double makes frequencies of
    1e-300 and below (subnormal ones among them): every sine then rounds to a zero, of the
    coordinate's sign, and every cosine to 1, in every dtype and on every backend."""
    coords = np.array([[-3.0, 2.5], [-0.5, 0.0], [1.0, -7.0], [4.0e9, -4.0e9]])
    for dtype in ("float32", "float64", "float16"):
        results = {b: ax.axial_cos_sin(coords, (4, 6), linear_factor=linear, dtype=dtype, backend=b)
                   for b in AVAILABLE}
        per_column = coords[:, [0, 0, 0, 0, 1, 1, 1, 1, 1, 1]]
        negative = np.signbit(per_column) & (per_column != 0)
        for b, (cos, sin) in results.items():
            if dtype == "float64":  # products near 1e-300 * 4e9: tiny, not yet zero
                assert (np.abs(sin) < 1e-280).all() and (cos == 1).all(), b
            else:
                assert (sin == 0).all() and (cos == 1).all(), b
            assert (np.signbit(sin) == negative).all(), (b, dtype)
        if len(FAST) > 1:
            assert_same_bits({b: np.concatenate(results[b], 1) for b in FAST}, "cos|sin")


def test_linear_factor_overflowing_the_ratio_is_refused():
    """``base * ntk_factor * linear_factor`` past the largest double would make the
    frequency set's ratio infinite: refused, naming the argument (and the axis)."""
    coords = np.array([[0.5, 1.0]])
    with pytest.raises(ValueError, match=r"^linear_factor must keep base \* ntk_factor \* linear_factor finite"):
        ax.axial_cos_sin(coords, (4, 4), linear_factor=1e307)
    with pytest.raises(ValueError, match=r"^linear_factor\[1\] must keep"):
        ax.axial_cos_sin(coords, (4, 4), linear_factor=[1.0, 1e307])
    with pytest.raises(ValueError, match=r"^linear_factor must keep .* \(base 1e\+300"):
        ax.axial_frequencies((4, 4), base=1e300, linear_factor=1e10)


@pytest.mark.parametrize("layout", ax.AXIAL_LAYOUTS)
def test_grid_and_gather_paths_same_bits(layout):
    """A meshgrid and the same tokens shuffled (or their axes in another order) give the
    same rows."""
    coords = ax.index_grid((3, 5, 7), centered=(False, True, True))
    perm = np.random.default_rng(0).permutation(coords.shape[0])
    dims = (8, 12, 12)
    cos, sin = ax.axial_cos_sin(coords, dims, layout=layout)
    cos_p, sin_p = ax.axial_cos_sin(coords[perm], dims, layout=layout)
    np.testing.assert_array_equal(cos[perm], cos_p)
    np.testing.assert_array_equal(sin[perm], sin_p)
    # axes in another nesting order (diffusers' 2-D helper puts the fastest axis first)
    cos_r, sin_r = ax.axial_cos_sin(coords[:, ::-1], dims[::-1], layout="gptj")
    assert cos_r.shape == cos.shape
    ref = ax.axial_cos_sin(np.ascontiguousarray(coords[:, ::-1])[perm], dims[::-1], layout="gptj")
    np.testing.assert_array_equal(cos_r[perm], ref[0])


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("sizes, dims, start", [
    ((7,), (4,), 0), ((5, 6), (4, 6), (-1, 0)), ((2, 3, 4, 5), (4, 6, 8, 10), (-1, 0, 1, 2)),
    ((1, 4, 6), (4, 6, 8), (-1, 0, 1)),
    ((1, 6, 6), (4, 8, 8), 0),         # two axes of one width and the same values (FLUX's square)
    ((6, 6), (8, 8), (0, 1)),          # one width, as many values, other values
    ((2, 5, 5), (6, 6, 6), (0, 0, 0)),  # one width everywhere, the last two axes alike
])
def test_each_axis_block_is_its_one_axis_cache(dtype, sizes, dims, start):
    """A meshgrid, the same tokens shuffled, and each axis's columns (both halves with
    neox_head) the one-axis cache of that axis's coordinates: the columns each layout
    places, for any number of axes (and axes sharing a table), bit for bit."""
    coords = ax.index_grid(sizes, start=start)
    perm = np.random.default_rng(1).permutation(coords.shape[0])
    half = sum(dims) // 2
    for layout in ax.AXIAL_LAYOUTS:
        grid = ax.axial_cos_sin(coords, dims, layout=layout, dtype=dtype)
        gathered = ax.axial_cos_sin(coords[perm], dims, layout=layout, dtype=dtype)
        for g, h in zip(grid, gathered):
            assert g[perm].tobytes() == h.tobytes()
        start = 0
        for a, d in enumerate(dims):
            one = ax.axial_cos_sin(coords[:, a:a + 1], (d,), layout=layout, dtype=dtype)
            for g, o in zip(grid, one):
                if layout == "neox_head":
                    h0 = start // 2
                    parts = (g[:, h0:h0 + d // 2], g[:, half + h0:half + h0 + d // 2])
                    assert np.concatenate(parts, axis=1).tobytes() == o.tobytes()
                else:
                    assert np.ascontiguousarray(g[:, start:start + d]).tobytes() == o.tobytes()
            start += d


@pytest.mark.parametrize("backend", AVAILABLE)
def test_the_coordinate_zero_has_the_kernels_bits(backend):
    """An axis whose only value is 0 takes cos 1 and sin +0.0 without the kernels: their bits
    at 0, for every dtype, layout and width."""
    from fastpe import _backends
    from fastpe.sinusoid import fill_real

    module = _backends.load(backend)
    for dtype in ("float32", "float64", "float16", "bfloat16"):
        for dim, offset in ((2, 0.0), (16, 0.0), (56, 0.0), (10, 0.5)):
            freqs, cols = ax._axis_plan(dim, 10000.0, 1.0, 1.0, offset)
            sc = np.empty((1, 2 * freqs.count), dtype=ax.axial_cos_sin(np.zeros((1, 1)), (2,), dtype=dtype)[0].dtype)
            fill_real(module, freqs, "halves_cos", np.array([0.0]), sc)
            want = sc.reshape(1, 2, freqs.count)[:, :, cols]
            for layout in ax.AXIAL_LAYOUTS:
                cos, sin = ax.axial_cos_sin(np.zeros((3, 1)), (dim,), offset=offset, layout=layout, dtype=dtype,
                                            backend=backend)
                h = dim // 2
                got_cos = cos[:, :dim:2] if layout == "gptj" else cos[:, :h]
                got_sin = sin[:, :dim:2] if layout == "gptj" else sin[:, :h]
                assert got_cos.tobytes() == np.repeat(want[:, 0], 3, axis=0).tobytes()
                assert got_sin.tobytes() == np.repeat(want[:, 1], 3, axis=0).tobytes()


def test_text_plus_image_tokens_same_bits_as_row_by_row():
    """FLUX's text ids (zeros) before the image grid, and a real coordinate among them:
    the same bits as each row computed alone."""
    flux = np.concatenate([np.zeros((40, 3)), ax.index_grid((1, 6, 5))])  # axis 0 constant
    for coords, layout in itertools.product((flux, np.concatenate([flux, [[0.5, -2.0, 3.0]]])),
                                            ax.AXIAL_LAYOUTS):
        for dtype in ("float32", "bfloat16"):
            cos, sin = ax.axial_cos_sin(coords, (4, 6, 6), layout=layout, dtype=dtype)
            for r in range(coords.shape[0]):
                c1, s1 = ax.axial_cos_sin(coords[r:r + 1], (4, 6, 6), layout=layout, dtype=dtype)
                assert cos[r].tobytes() == c1[0].tobytes() and sin[r].tobytes() == s1[0].tobytes()


def test_threads_give_serial_bits():
    """Concurrent calls (new frequency plans being built meanwhile) give the serial bits."""
    from concurrent.futures import ThreadPoolExecutor

    jobs = [(ax.index_grid((2, 9, 11)), (8 + 2 * i, 12, 10), 10000.0 + i) for i in range(8)]
    jobs += [(np.random.default_rng(i).uniform(-1e5, 1e5, (50, 3)), (6, 6, 4 + 2 * i), 500.0 + i)
             for i in range(8)]

    def run(job):
        coords, dims, base = job
        return ax.axial_cos_sin(coords, dims, base=base, layout="neox_head")

    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(run, jobs * 3))
    for job, got in zip(jobs * 3, together):
        want = run(job)
        assert got[0].tobytes() == want[0].tobytes() and got[1].tobytes() == want[1].tobytes()


def test_out_filled_and_returned():
    coords = ax.index_grid((4, 4))
    cos = np.full((16, 8), np.nan, np.float64)
    sin = np.full((16, 8), np.nan, np.float64)
    got = ax.axial_cos_sin(coords, (4, 4), out=(cos, sin))
    assert got[0] is cos and got[1] is sin
    want = ax.axial_cos_sin(coords, (4, 4), dtype="float64")
    np.testing.assert_array_equal(cos, want[0])
    np.testing.assert_array_equal(sin, want[1])


def test_zero_width_axis_and_empty():
    cos, sin = ax.axial_cos_sin(np.ones((3, 2)), (0, 4))
    assert cos.shape == (3, 4)
    cos, sin = ax.axial_cos_sin(np.empty((0, 2)), (2, 4))
    assert cos.shape == (0, 6) and sin.shape == (0, 6)


def test_negative_zero_is_zero():
    """``-0.0`` is the coordinate 0 on every path: ``sin`` is ``+0.0``."""
    grid = ax.index_grid((2, 3)) * -1.0  # a meshgrid holding -0.0
    shuffled = grid[[4, 0, 3, 1, 5, 2]]
    for coords in (grid, shuffled, np.array([[-0.0, 0.0], [0.0, -0.0], [0.5, -0.0]])):
        sin = ax.axial_cos_sin(coords, (4, 4))[1]
        zero = np.asarray(coords)[:, [0, 0, 0, 0, 1, 1, 1, 1]] == 0
        assert (sin[zero] == 0).all() and not np.signbit(sin[zero]).any()


def test_cls_token_is_identity():
    coords = ax.prepend_cls(ax.index_grid((3, 3)), 2)
    cos, sin = ax.axial_cos_sin(coords, (8, 8))
    assert (cos[:2] == 1).all() and (sin[:2] == 0).all() and not np.signbit(sin[:2]).any()
    np.testing.assert_array_equal(cos[2:], ax.axial_cos_sin(ax.index_grid((3, 3)), (8, 8))[0])


# ----------------------------------------------------------------------------- peers

def peer_bound(coords, dims, layout, *, f32_freqs, **kw):
    """Elementwise bound on a peer's error: the float32 rounding of its output, plus, for a
    peer computing in float32 (frequency, product and cos/sin in float32), a few float32
    ulps of the angle (the rounded frequency and product each err by <= 2**-24 relative,
    torch's float32 pow by a few ulps) and of the result."""
    owner = column_map(dims, layout)
    freqs = ax.axial_frequencies(dims, **kw)
    angle = np.stack([np.abs(coords[:, a]) * freqs[a][k] for a, k in owner], axis=1)
    if f32_freqs:
        return angle * 8 * F32_EPS + 4 * F32_EPS
    return angle * 2.0**-50 + F32_EPS


def check_peer(name, peer_cos, peer_sin, coords, dims, layout="gptj", *, f32_freqs, **kw):
    """The peer within its bound of the exact values, fastpe's float32 within 1 ULP of
    them (fastpe's float64 stands for exact: within 2**-45); returns the peer's max error."""
    exact = ax.axial_cos_sin(coords, dims, layout=layout, dtype="float64", **kw)
    mine = ax.axial_cos_sin(coords, dims, layout=layout, **kw)
    bound = peer_bound(coords, dims, layout, f32_freqs=f32_freqs, **kw)
    worst = 0.0
    for p, e, m in zip((peer_cos, peer_sin), exact, mine):
        p = np.asarray(p, dtype=np.float64).reshape(e.shape)
        err = np.abs(p - e)
        assert (err <= bound + 2.0**-45).all(), f"{name}: peer off the exact value by {err.max()}"
        assert (np.abs(m - e) <= np.spacing(np.abs(e).astype(np.float32)).astype(np.float64) + 2.0**-45).all()
        worst = max(worst, float(err.max(initial=0)))
    return worst


@pytest.fixture(scope="module")
def embeddings():
    return pytest.importorskip("diffusers.models.embeddings")


@pytest.mark.parametrize("interleave", [True, False])
@pytest.mark.parametrize("freqs_dtype", ["float64", "float32"])
@pytest.mark.parametrize("factors", [(1.0, 1.0), (2.0, 1.0), (1.0, 4.0), (0.5, 3.0)], ids=str)
def test_diffusers_get_1d(embeddings, interleave, freqs_dtype, factors):
    linear, ntk = factors
    pos = np.concatenate([np.arange(50.0), [0.37, 1234.5, 4000.25, -17.75]])
    dt = getattr(torch, freqs_dtype)
    cos, sin = embeddings.get_1d_rotary_pos_embed(32, torch.from_numpy(pos), theta=10000.0, use_real=True,
                                                  linear_factor=linear, ntk_factor=ntk,
                                                  repeat_interleave_real=interleave, freqs_dtype=dt)
    check_peer("get_1d_rotary_pos_embed", cos.numpy(), sin.numpy(), pos[:, None], (32,),
               "gptj" if interleave else "neox", f32_freqs=freqs_dtype == "float32",
               linear_factor=linear, ntk_factor=ntk)


def test_diffusers_get_2d(embeddings):
    crops = ((0, 0), (24, 40))
    cos, sin = embeddings.get_2d_rotary_pos_embed(64, crops, (24, 40), use_real=True)
    coords = ax.crop_grid(crops, (24, 40))[:, ::-1]  # the helper's first block is the width
    check_peer("get_2d_rotary_pos_embed", cos.numpy(), sin.numpy(), coords, (32, 32), f32_freqs=True)


@pytest.mark.parametrize("grid_type", ["linspace", "slice"])
def test_diffusers_get_3d(embeddings, grid_type):
    crops, size, t = ((1, 2), (30, 45)), (30, 45), 5
    cos, sin = embeddings.get_3d_rotary_pos_embed(64, crops, size, t, grid_type=grid_type, max_size=(40, 50))
    coords = ax.crop_grid(crops, size, t, grid_type=grid_type, max_size=(40, 50))
    check_peer("get_3d_rotary_pos_embed", cos.numpy(), sin.numpy(), coords, (16, 24, 24), f32_freqs=True)


def test_crop_grid_matches_diffusers_linspace():
    crops, (gh, gw) = ((1.5, 2), (30, 45)), (30, 45)
    grid = ax.crop_grid(crops, (gh, gw))
    h = torch.linspace(1.5, 30 * (gh - 1) / gh, gh, dtype=torch.float64).numpy()
    w = torch.linspace(2, 45 * (gw - 1) / gw, gw, dtype=torch.float64).numpy()
    np.testing.assert_allclose(grid[:, 0], np.repeat(h, gw), rtol=0, atol=1e-12)
    np.testing.assert_allclose(grid[:, 1], np.tile(w, gh), rtol=0, atol=1e-12)


def test_flux(embeddings):
    from diffusers.models.transformers.transformer_flux import FluxPosEmbed
    coords = ax.index_grid((1, 64, 64))
    cos, sin = FluxPosEmbed(theta=10000, axes_dim=(16, 56, 56))(torch.from_numpy(coords))
    check_peer("FluxPosEmbed", cos.numpy(), sin.numpy(), coords, (16, 56, 56), f32_freqs=False)
    # float64 frequencies and angles, rounded once: the same float32 values at these sizes
    mine = ax.axial_cos_sin(coords, (16, 56, 56))
    assert ulp_distance(mine[0], cos.numpy()).max() <= 1 and ulp_distance(mine[1], sin.numpy()).max() <= 1


def test_wan():
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed
    rope = WanRotaryPosEmbed(128, (1, 2, 2), 1024)
    f, h, w = 5, 12, 20
    cos, sin = rope(torch.zeros(1, 1, f, 2 * h, 2 * w))
    dims = (rope.t_dim, rope.h_dim, rope.w_dim)
    check_peer("WanRotaryPosEmbed", cos.numpy(), sin.numpy(), ax.index_grid((f, h, w)), dims, f32_freqs=False)


def test_hunyuan_video():
    from diffusers.models.transformers.transformer_hunyuan_video import HunyuanVideoRotaryPosEmbed
    rope = HunyuanVideoRotaryPosEmbed(2, 1, [16, 56, 56], theta=256.0)
    f, h, w = 4, 10, 14
    cos, sin = rope(torch.zeros(1, 1, f, 2 * h, 2 * w))
    check_peer("HunyuanVideoRotaryPosEmbed", cos.numpy(), sin.numpy(), ax.index_grid((f, h, w)), (16, 56, 56),
               f32_freqs=True, base=256.0)


def test_qwen_image_centred():
    mod = pytest.importorskip("diffusers.models.transformers.transformer_qwenimage")
    rope = mod.QwenEmbedRope(theta=10000, axes_dim=[16, 56, 56], scale_rope=True)
    f, h, w = 1, 6, 9
    freqs = rope._compute_video_freqs(f, h, w)
    coords = ax.index_grid((f, h, w), centered=(False, True, True))
    # complex cis per frequency: expand to the gptj pairs
    cos = np.repeat(freqs.real.numpy(), 2, axis=1)
    sin = np.repeat(freqs.imag.numpy(), 2, axis=1)
    check_peer("QwenEmbedRope", cos, sin, coords, (16, 56, 56), f32_freqs=True)


def test_qwen2_vl_vision():
    qv = pytest.importorskip("transformers.models.qwen2_vl.modeling_qwen2_vl")
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
    from transformers.vision_utils import get_vision_position_ids
    head_dim = 80
    rope = qv.Qwen2VLVisionRotaryEmbedding(Qwen2VLVisionConfig(embed_dim=2 * head_dim, num_heads=2))
    thw = np.array([[1, 8, 12], [2, 4, 6]])
    ids = get_vision_position_ids(torch.from_numpy(thw), 2)
    coords = ax.merge_window_grid(thw, 2)
    np.testing.assert_array_equal(coords, ids.numpy().astype(np.float64))
    cos, sin = rope(torch.zeros(1), ids)
    check_peer("Qwen2VLVisionRotaryEmbedding", cos.numpy(), sin.numpy(), coords, (head_dim // 2, head_dim // 2),
               "neox_head", f32_freqs=True)


def test_pixtral():
    px = pytest.importorskip("transformers.models.pixtral.modeling_pixtral")
    from transformers.models.pixtral.configuration_pixtral import PixtralVisionConfig
    head_dim = 64
    rope = px.PixtralVisionRotaryEmbedding(PixtralVisionConfig(hidden_size=128, num_attention_heads=2,
                                                                head_dim=head_dim))
    coords = ax.index_grid((16, 24))
    cos, sin = rope(torch.zeros(1), torch.from_numpy(coords.astype(np.int64)))
    check_peer("PixtralVisionRotaryEmbedding", cos.numpy(), sin.numpy(), coords, (head_dim // 2, head_dim // 2),
               "neox_head", f32_freqs=True, offset=(0.0, 0.5))


def _timm_sincos():
    """timm's ``pos_embed_sincos`` module: through ``timm.layers`` when it imports (it needs
    torchvision), else loaded on its own under a bare ``timm.layers`` package, then the
    stand-ins removed from ``sys.modules``."""
    try:
        return importlib.import_module("timm.layers.pos_embed_sincos")
    except ImportError:
        pass
    spec = importlib.util.find_spec("timm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("timm is not installed")
    root = list(spec.submodule_search_locations)[0]
    saved = {k: v for k, v in sys.modules.items() if k == "timm" or k.startswith("timm.")}
    try:
        for k in saved:
            del sys.modules[k]
        pkg = types.ModuleType("timm")
        pkg.__path__ = [root]
        layers = types.ModuleType("timm.layers")
        layers.__path__ = [root + "/layers"]
        sys.modules["timm"], sys.modules["timm.layers"] = pkg, layers
        try:
            return importlib.import_module("timm.layers.pos_embed_sincos")
        except ImportError as exc:
            pytest.skip(f"timm's pos_embed_sincos does not import here: {exc}")
    finally:
        for k in [k for k in sys.modules if k == "timm" or k.startswith("timm.")]:
            del sys.modules[k]
        sys.modules.update(saved)


@pytest.mark.parametrize("case", [
    dict(grid_type="index"), dict(grid_type="index", ref_feat_shape=(16, 16)),
    dict(grid_type="index", grid_offset=0.5), dict(grid_type="pixel"),
    dict(grid_type="centered", normalize_coords="max"), dict(grid_type="index", grid_indexing="xy"),
], ids=str)
@pytest.mark.parametrize("rotate_half", [False, True])
def test_timm_eva(case, rotate_half):
    sincos = _timm_sincos()
    feat, dim = (12, 20), 64
    sin, cos = sincos.build_rotary_pos_embed(list(feat), dim=dim, in_pixels=False, temperature=10000.0,
                                             rotate_half=rotate_half, **{k: (list(v) if isinstance(v, tuple) else v)
                                                                          for k, v in case.items()})
    coords = ax.timm_grid(feat, **case)
    grid = sincos._build_grid(list(feat), **{k: (list(v) if isinstance(v, tuple) else v) for k, v in case.items()})
    np.testing.assert_allclose(coords, grid.reshape(-1, 2).double().numpy(), rtol=4 * F32_EPS, atol=F32_EPS)
    check_peer("timm build_rotary_pos_embed", cos.numpy(), sin.numpy(), coords, (dim // 2, dim // 2),
               "neox_head" if rotate_half else "gptj", f32_freqs=True)


# ----------------------------------------------------------------------------- grids

@pytest.mark.any_backend
def test_index_grid():
    g = ax.index_grid((2, 3), start=(5, -1))
    np.testing.assert_array_equal(g, [[5, -1], [5, 0], [5, 1], [6, -1], [6, 0], [6, 1]])
    np.testing.assert_array_equal(ax.index_grid((5,), centered=True)[:, 0], [-3, -2, -1, 0, 1])
    assert ax.index_grid((1, 4, 4)).dtype == np.float64


@pytest.mark.any_backend
def test_linspace_grid_exact():
    g = ax.linspace_grid((3,), 0.0, 0.3)
    assert g[1, 0] == 0.15 and g[2, 0] == 0.3
    g = ax.linspace_grid((4, 2), (0, -1), (1, 1), endpoint=False)
    np.testing.assert_array_equal(np.unique(g[:, 0]), [0, 0.25, 0.5, 0.75])


@pytest.mark.any_backend
def test_timm_grid_ref_shape_exact():
    g = ax.timm_grid((3,), ref_feat_shape=(7,))
    assert list(g[:, 0]) == [0.0, 7 / 3, 14 / 3]


@pytest.mark.any_backend
def test_merge_window_order():
    g = ax.merge_window_grid((1, 4, 4), 2)
    np.testing.assert_array_equal(g[:8], [[0, 0], [0, 1], [1, 0], [1, 1], [0, 2], [0, 3], [1, 2], [1, 3]])
    assert ax.merge_window_grid((3, 2, 2), 2, temporal=True).shape == (12, 3)


# ----------------------------------------------------------------------------- bad input

BAD = [
    (dict(axes_dim=(3, 4)), ValueError, "axes_dim[0]"),
    (dict(axes_dim=(4,)), ValueError, "axes_dim"),
    (dict(axes_dim=()), ValueError, "axes_dim"),
    (dict(axes_dim=4), TypeError, "axes_dim"),
    (dict(axes_dim=(4.0, 4)), TypeError, "axes_dim[0]"),
    (dict(axes_dim=(-2, 4)), ValueError, "axes_dim[0]"),
    (dict(coords=np.ones(4)), ValueError, "coords"),
    (dict(coords=np.ones((2, 2, 2))), ValueError, "coords"),
    (dict(coords=np.array([[np.nan, 1.0]])), ValueError, "coords"),
    (dict(coords=np.array([[np.inf, 1.0]])), ValueError, "coords"),
    (dict(coords=np.array([[2.0**32, 1.0]])), ValueError, "coords"),
    (dict(coords=np.array([[2**40, 1]])), ValueError, "coords"),
    (dict(coords=np.array([["a", "b"]])), TypeError, "coords"),
    (dict(coords=np.ones((2, 2), bool)), TypeError, "coords"),
    (dict(coords=[[1, True]]), TypeError, "coords"),
    (dict(coords=np.ones((2, 2), complex)), TypeError, "coords"),
    (dict(layout="halves"), ValueError, "layout"),
    (dict(layout=1), TypeError, "layout"),
    (dict(dtype="int32"), TypeError, "dtype"),
    (dict(dtype=">f4"), TypeError, "dtype"),
    (dict(base=0.5), ValueError, "base"),
    (dict(base=(1e4, 1e4, 1e4)), ValueError, "base"),
    (dict(base=math.nan), ValueError, "base"),
    (dict(base="1e4"), TypeError, "base"),
    (dict(ntk_factor=0.0), ValueError, "ntk_factor"),
    (dict(linear_factor=1e-4), ValueError, "linear_factor"),
    (dict(linear_factor=-1.0), ValueError, "linear_factor"),
    (dict(linear_factor=1e307), ValueError, "linear_factor"),
    (dict(offset=0.25), ValueError, "offset"),
    (dict(backend="torch"), ValueError, "backend"),
    (dict(out=np.empty((3, 8), np.float32)), TypeError, "out"),
    (dict(out=(np.empty((3, 8), np.float32), np.empty((3, 6), np.float32))), ValueError, "out"),
    (dict(out=(np.empty((3, 8), np.float32), np.empty((3, 8), np.float64))), ValueError, "out"),
    (dict(out=(np.empty((3, 8), np.int32), np.empty((3, 8), np.int32))), TypeError, "out"),
    (dict(out=(np.empty((3, 8), np.float32), np.empty((3, 8), np.float32)), dtype="float64"), ValueError, "dtype"),
]


def _bad_id(i: int, case) -> str:
    """A stable id: the changed keys and values, arrays by shape and dtype (their contents are
    uninitialised memory, which differs between collections)."""
    def show(v):
        if isinstance(v, np.ndarray):
            return f"array{v.shape}{v.dtype}"
        if isinstance(v, tuple):
            return "(" + ",".join(show(x) for x in v) + ")"
        return repr(v)
    return f"{i}-{case[2]}:" + ",".join(f"{k}={show(v)}" for k, v in sorted(case[0].items()))[:60]


@pytest.mark.any_backend
@pytest.mark.parametrize("change,exc,name", BAD, ids=[_bad_id(i, b) for i, b in enumerate(BAD)])
def test_bad_input(change, exc, name):
    kwargs = dict(coords=np.array([[0.5, 1.0], [2.0, 3.0], [4.0, 5.0]]), axes_dim=(4, 4))
    kwargs.update(change)
    coords = kwargs.pop("coords")
    before = np.array(coords, copy=True) if isinstance(coords, np.ndarray) else None
    with pytest.raises(exc, match=name.replace("[", r"\[").replace("]", r"\]")):
        ax.axial_cos_sin(coords, **kwargs)
    if before is not None:
        np.testing.assert_array_equal(coords, before)


@pytest.mark.any_backend
def test_out_overlap_refused_and_untouched():
    buf = np.full((3, 8), 7.0, np.float32)
    coords = np.array([[0.5, 1.0], [2.0, 3.0], [4.0, 5.0]])
    with pytest.raises(ValueError, match=r"out\[1\]"):
        ax.axial_cos_sin(coords, (4, 4), out=(buf, buf))
    assert (buf == 7).all()
    flat = np.zeros(64, np.float32)
    coords32 = flat[:6].reshape(3, 2)
    with pytest.raises(ValueError, match="coords"):
        ax.axial_cos_sin(coords32, (4, 4), out=(flat[:24].reshape(3, 8), np.empty((3, 8), np.float32)))
    assert (flat == 0).all()


@pytest.mark.any_backend
def test_grid_builders_refuse():
    with pytest.raises(ValueError, match="spatial_merge_size"):
        ax.merge_window_grid((1, 5, 4), 2)
    with pytest.raises(TypeError, match="grid_thw"):
        ax.merge_window_grid((1.0, 4.0, 4.0), 2)
    with pytest.raises(ValueError, match="max_size"):
        ax.crop_grid(None, (4, 4), grid_type="slice")
    with pytest.raises(ValueError, match="crops_coords"):
        ax.crop_grid((1, 2), (4, 4))
    with pytest.raises(ValueError, match="grid_type"):
        ax.timm_grid((4, 4), grid_type="random")
    with pytest.raises(TypeError, match="sizes"):
        ax.index_grid(4)
    with pytest.raises(TypeError, match="centered"):
        ax.index_grid((4,), centered=1)
