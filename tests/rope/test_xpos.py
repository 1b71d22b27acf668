"""xPos (fastpe.rope._xpos): exact against the reference, the published formulas in torch
float64, the relative-distance property of q . k, the caches, the refusals.

The formulas of torchscale (``torchscale/component/xpos_relative_position.py``: ``XPOS``,
``fixed_pos_embedding``, ``apply_rotary_pos_emb`` with ``duplicate_interleave``) and of
flash-attention (``flash_attn/layers/rotary.py``: ``RotaryEmbedding(scale_base=...)``'s
``_update_cos_sin_cache`` and ``apply_rotary_emb_torch``) are written out here in torch
float64 (neither library installs here), with fastpe's float64 ``inv_freq`` so that only
the arithmetic differs.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from fastpe import rope
from fastpe._exact import rope as exact
from fastpe.rope import Rotary, XposCosSin

from conftest import AVAILABLE, FAST
from support.oracle import ulp_distance

torch = pytest.importorskip("torch")

from support.torchscale import torchscale_xpos  # noqa: E402

BACKENDS = [b for b in AVAILABLE if b != "python"] or ["python"]


def _rng(seed=0):
    return np.random.default_rng(seed)


def _x(shape, seed=0):
    return _rng(seed).standard_normal(shape).astype(np.float32)


def _pairs(d, rotary_dim, layout):
    n = rotary_dim // 2
    return [(i, i + n) if layout == "neox" else (2 * i, 2 * i + 1) for i in range(n)]


def _exact_rows(x, positions, rotary, center, down):
    """The reference's float32 of every rotated pair of ``x`` (tokens, heads, d) and whether
    the pair cancels (``|y| < 2**-18.5 (|x1| + |x2|) |af| s``: outside the ULP claim)."""
    zeta = exact.xpos_zeta(rotary.rotary_dim)
    freqs, af = rotary.inv_freq, rotary.attention_factor
    out = x.copy()
    cancel = np.zeros(x.shape, dtype=bool)
    for t, p in enumerate(positions):
        for h in range(x.shape[1]):
            for i, (j1, j2) in enumerate(_pairs(x.shape[-1], rotary.rotary_dim, rotary.layout)):
                x1, x2 = float(x[t, h, j1]), float(x[t, h, j2])
                y1, y2 = exact.xpos_rotate_f32(x1, x2, int(p), freqs[i], af, zeta[i], rotary.xpos_scale_base,
                                               center, down)
                out[t, h, j1], out[t, h, j2] = y1, y2
                n = int(p) - center
                s = zeta[i] ** ((-n if down else n) / rotary.xpos_scale_base)
                bound = 2.0**-18.5 * (abs(x1) + abs(x2)) * abs(af) * s
                cancel[t, h, j1] = abs(y1) < bound
                cancel[t, h, j2] = abs(y2) < bound
    return out, cancel


@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("center", ["torchscale", "flash_attn", 3])
def test_rotation_within_one_ulp_of_the_exact_value(layout, center):
    rotary = Rotary(12, rotary_dim=8, base=100.0, layout=layout, xpos_scale_base=8.0, xpos_center=center,
                    scaling={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 4})
    positions = np.array([0, 1, 5, 9, 40, 77])
    length = 78
    c = {"torchscale": (length + 1) // 2, "flash_attn": length // 2}.get(center, center)
    q, k = _x((6, 2, 12), 1), _x((6, 1, 12), 2)
    results = {}
    for backend in BACKENDS:
        a, b = q.copy(), k.copy()
        rotary.apply_qk_(a, b, positions, backend=backend)
        results[backend] = (a, b)
    first = results[BACKENDS[0]]
    for got in results.values():  # the compiled backends: the same bits
        assert all(np.array_equal(g, f) for g, f in zip(got, first))
    for got, x, down in ((first[0], q, False), (first[1], k, True)):
        want, cancel = _exact_rows(x, positions, rotary, c, down)
        assert np.array_equal(got[..., 8:], x[..., 8:])  # partial rotary: the rest untouched
        dist = ulp_distance(got, want)
        assert dist[~cancel].max() <= 1
        assert not cancel.all()
        # apply_ with downscale is the same rotation as apply_qk_'s of that array
        y = x.copy()
        rotary.apply_(y, positions, downscale=down)
        assert np.array_equal(y, got)


@pytest.mark.any_backend
def test_python_backend_within_one_ulp_of_the_compiled_ones():
    rotary = Rotary(8, xpos_scale_base=512)
    q, k = _x((5, 2, 8), 3), _x((5, 2, 8), 4)
    ref = [a.copy() for a in (q, k)]
    rotary.apply_qk_(*ref, np.arange(300, 305), backend="python")
    for backend in FAST:
        got = [a.copy() for a in (q, k)]
        rotary.apply_qk_(*got, np.arange(300, 305), backend=backend)
        for g, r in zip(got, ref):
            assert ulp_distance(g, r).max() <= 1


# ------------------------------------------------------------- the published formulas




def flash_xpos(q, k, inv_freq, scale_base, seqlen):
    """flash-attention's RotaryEmbedding with scale_base, in float64, NeoX halves: caches of
    ``seqlen`` positions, ``power = (arange(seqlen) - seqlen // 2) / scale_base``, q by
    ``cos * scale``, k by ``cos / scale``; q, k (batch, seq, heads, dim) at ``0 .. seq - 1``."""
    dim = q.shape[-1]
    t = torch.arange(seqlen, dtype=torch.float64)
    freqs = torch.outer(t, torch.tensor(np.array(inv_freq)))
    zeta = (torch.arange(0, dim, 2, dtype=torch.float64) + 0.4 * dim) / (1.4 * dim)
    power = (torch.arange(seqlen, dtype=torch.float64) - seqlen // 2) / scale_base
    scale = zeta ** power[:, None]
    cos, sin = torch.cos(freqs), torch.sin(freqs)

    def apply(x, c, s):
        c = torch.cat((c, c), -1)[: x.shape[1], None, :]
        s = torch.cat((s, s), -1)[: x.shape[1], None, :]
        x1, x2 = x.chunk(2, dim=-1)
        return x * c + torch.cat((-x2, x1), dim=-1) * s

    return apply(q, cos * scale, sin * scale), apply(k, cos / scale, sin / scale)


def _near(got, want64, x):
    """fastpe within 1 ULP of the float64 formula's float32 rounding, where the pair does not
    cancel (the formula's own float64 error is far below that)."""
    want = want64.astype(np.float32)
    ok = np.abs(want64) >= 2.0**-16 * np.abs(x).max()
    assert ok.mean() > 0.9
    assert ulp_distance(got[ok], want[ok]).max() <= 1


@pytest.mark.parametrize("length, offset", [(9, 0), (8, 0), (1, 12), (1, 13), (4, 60)])
def test_torchscale_prefill_and_decoding_steps(length, offset):
    d = 16
    rotary = Rotary(d, layout="gptj", xpos_scale_base=512)
    x = _x((length, 3, d), length + offset)
    positions = np.arange(offset, offset + length)
    for down in (False, True):
        got = x.copy()
        rotary.apply_(got, positions, downscale=down)
        want = torchscale_xpos(torch.from_numpy(x.astype(np.float64)).transpose(0, 1), 512, offset=offset,
                               downscale=down, inv_freq=rotary.inv_freq)[0].transpose(0, 1).numpy()
        _near(got, want, x)


def test_torchscale_decoding_step_equals_the_prefill_row():
    """A query at position T - 1 alone (the decoding step) gets the prefill's last row, and the
    keys the prefill of T gives: the centre is the total length's in both."""
    d, T = 16, 21
    rotary = Rotary(d, layout="gptj", xpos_scale_base=512)
    q = _x((T, 2, d), 5)
    full = q.copy()
    rotary.apply_(full, np.arange(T))
    step = q[-1:].copy()
    rotary.apply_(step, np.array([T - 1]))
    assert np.array_equal(step, full[-1:])
    step = q[-1:].copy()
    rotary.apply_(step, offset=T - 1)
    assert np.array_equal(step, full[-1:])


@pytest.mark.parametrize("seq, seqlen", [(10, 10), (7, 7), (5, 12)])
def test_flash_attention_formula(seq, seqlen):
    d = 16
    rotary = Rotary(d, xpos_scale_base=512, xpos_center="flash_attn")
    q, k = _x((1, 4, seq, d), 1), _x((1, 2, seq, d), 2)
    a, b = q.copy(), k.copy()
    rotary.apply_qk_(a, b, np.arange(seq), seq_len=seqlen)
    tq, tk = (torch.from_numpy(x.astype(np.float64)).transpose(1, 2) for x in (q, k))
    wq, wk = (t.transpose(1, 2).numpy() for t in flash_xpos(tq, tk, rotary.inv_freq, 512, seqlen))
    _near(a, wq, q)
    _near(b, wk, k)


def test_rotary_embedding_torch_centre_is_flash_attention_s():
    """lucidrains' rotary-embedding-torch: ``power = (t - seq_len // 2) / scale_base``, the
    same centre as flash-attention's: "flash_attn" is an integer centre of seq_len // 2."""
    q = _x((9, 2, 8), 7)
    a, b = q.copy(), q.copy()
    Rotary(8, xpos_scale_base=64, xpos_center="flash_attn").apply_(a, np.arange(9))
    Rotary(8, xpos_scale_base=64, xpos_center=4).apply_(b, np.arange(9))
    assert np.array_equal(a, b)


# --------------------------------------------------------------- the relative property


@pytest.mark.parametrize("center", ["torchscale", 0, 1000])
def test_scores_depend_on_the_distance_only(center):
    """q_m . k_n = sum_i zeta_i ** ((m - n) / sb) (RoPE terms of m - n): shifting both positions
    changes nothing (the float64 caches, in float64)."""
    d, sb = 8, 32.0
    rotary = Rotary(d, xpos_scale_base=sb, xpos_center=center)
    qv, kv = _rng(3).standard_normal(d), _rng(4).standard_normal(d)
    positions = np.arange(0, 60)
    c = rotary.cos_sin(positions, dtype="float64", seq_len=100)

    def rot(v, cos, sin):
        half = d // 2
        return v * cos + np.concatenate((-v[half:], v[:half])) * sin

    def score(m, n):
        return rot(qv, c.cos_q[m], c.sin_q[m]) @ rot(kv, c.cos_k[n], c.sin_k[n])

    zeta = np.array(exact.xpos_zeta(d))
    for m, n, shift in ((10, 3, 20), (5, 5, 40), (2, 30, 25)):
        assert math.isclose(score(m, n), score(m + shift, n + shift), rel_tol=1e-12, abs_tol=1e-12)
    # and the distance's powers: the scores of RoPE with each pair scaled by zeta ** ((m - n) / sb)
    m, n = 17, 4
    plain = Rotary(d).cos_sin(np.array([m, n]), dtype="float64")
    half = d // 2
    w = np.concatenate((zeta, zeta)) ** ((m - n) / sb)
    q_m = rot(qv, plain[0][0], plain[1][0])
    k_n = rot(kv, plain[0][1], plain[1][1])
    pairs = q_m * k_n
    want = sum(w[i] * (pairs[i] + pairs[i + half]) for i in range(half))
    assert math.isclose(score(m, n), want, rel_tol=1e-12)


# ------------------------------------------------------------------------ the caches


def test_cos_sin_four_caches_exact_and_consistent():
    rotary = Rotary(8, xpos_scale_base=512, layout="gptj")
    positions = np.array([0, 3, 700, 1023])
    c64 = rotary.cos_sin(positions, dtype="float64")
    c32 = rotary.cos_sin(positions)
    assert isinstance(c32, XposCosSin) and c32.cos_q.dtype == np.float32 and c32.cos_q.shape == (4, 8)
    for a, b in zip(c32, c64):
        assert np.array_equal(a, b.astype(np.float32))
    zeta, center = exact.xpos_zeta(8), (1024 + 1) // 2
    for r, p in enumerate(positions):
        for i in range(4):
            want = exact.xpos_table_f64(int(p), rotary.inv_freq[i], 1.0, zeta[i], 512.0, center)
            got = (c64.cos_q[r, 2 * i], c64.sin_q[r, 2 * i], c64.cos_k[r, 2 * i + 1], c64.sin_k[r, 2 * i + 1])
            for g, w in zip(got, want):
                assert abs(g - w) <= 2.0**-44 * max(abs(w), 1.0)
    # the module function and out=: the same bits; a batch of rows the rows of the flat call
    outs = tuple(np.full((4, 8), np.nan, np.float32) for _ in range(4))
    got = rope.cos_sin(positions, 8, layout="gptj", xpos_scale_base=512, out=outs)
    assert got is outs and all(np.array_equal(a, b) for a, b in zip(outs, c32))
    grid = rotary.cos_sin(positions.reshape(2, 2), seq_len=1024)
    assert all(np.array_equal(a.reshape(4, 8), b) for a, b in zip(grid, c32))


def test_cos_sin_rotation_agrees_with_apply():
    rotary = Rotary(8, xpos_scale_base=100)
    x = _x((3, 1, 8), 9)
    pos = np.array([4, 50, 99])
    c = rotary.cos_sin(pos, dtype="float64")
    got_q, got_k = x.copy(), x.copy()
    rotary.apply_qk_(got_q, got_k, pos)
    x64 = x[:, 0].astype(np.float64)
    rot = np.concatenate((-x64[:, 4:], x64[:, :4]), axis=1)
    assert np.array_equal(got_q[:, 0], (x64 * c.cos_q + rot * c.sin_q).astype(np.float32)) or \
        ulp_distance(got_q[:, 0], (x64 * c.cos_q + rot * c.sin_q).astype(np.float32)).max() <= 1
    assert ulp_distance(got_k[:, 0], (x64 * c.cos_k + rot * c.sin_k).astype(np.float32)).max() <= 1


# ------------------------------------------------------------------- paths and sizes


def test_long_and_batched_calls_take_the_bits_of_small_ones():
    """A call past the kept tables and past a table chunk (4096 rows) rotates each row as a
    one-position call at the same length does; (batch, seq) positions row by row."""
    rotary = Rotary(4, xpos_scale_base=2048)
    n = 5000
    q = _x((1, 1, n, 4), 11)
    big = q.copy()
    rotary.apply_(big, np.arange(n))
    for s in (0, 4095, 4096, 4999):
        one = q[:, :, s:s + 1].copy()
        rotary.apply_(one, np.array([s]), seq_len=n)
        assert np.array_equal(one, big[:, :, s:s + 1])
    pos = np.array([[0, 1, 2], [7, 8, 9]])
    x = _x((2, 2, 3, 4), 12)
    y = x.copy()
    rotary.apply_(y, pos)
    for b in range(2):
        row = x[b:b + 1].copy()
        rotary.apply_(row, pos[b], seq_len=10)
        assert np.array_equal(row, y[b:b + 1])


def test_decoding_steps_keep_their_tables_and_bits():
    rotary = Rotary(8, xpos_scale_base=512)
    x = _x((1, 4, 1, 8), 13)
    first = x.copy()
    rotary.apply_(first, offset=100)
    again = x.copy()
    rotary.apply_(again, offset=100)
    assert np.array_equal(first, again)
    fresh = x.copy()
    Rotary(8, xpos_scale_base=512).apply_(fresh, np.array([100]))
    assert np.array_equal(first, fresh)


def test_inverse_is_the_transpose():
    """<R x, y> = <x, R^T y> for the scaled rotation (the backward pass), in float64 caches."""
    rotary = Rotary(8, xpos_scale_base=16)
    x, y = _x((3, 1, 8), 14), _x((3, 1, 8), 15)
    pos = np.array([2, 9, 30])
    rx = x.copy()
    rotary.apply_(rx, pos)
    ty = y.copy()
    rotary.apply_(ty, pos, inverse=True)
    left = np.sum(rx.astype(np.float64) * y, axis=-1)
    right = np.sum(x.astype(np.float64) * ty, axis=-1)
    assert np.allclose(left, right, rtol=1e-5, atol=1e-5)


def test_clamped_powers_overflow_and_underflow_cleanly():
    """A tiny scale base: powers far past the doubles' range are clamped to 2**+-600, so past
    the centre (zeta < 1) q rounds to zero and k overflows to inf, with no NaN (0 * inf) where
    x is zero."""
    rotary = Rotary(4, xpos_scale_base=1e-3, xpos_center=0)
    q = np.array([[[1.0, 0.0, 0.0, -2.0]], [[0.0, 0.0, 0.0, 0.0]]], dtype=np.float32)
    for backend in AVAILABLE:
        a, b = q.copy(), q.copy()
        rotary.apply_qk_(a, b, np.array([0, 10**6]), backend=backend)
        assert np.array_equal(a[0], q[0]) and np.array_equal(b[0], q[0])  # n' = 0: scale 1
        assert not np.isnan(a).any() and not np.isnan(b).any()
        assert np.array_equal(b[1], np.zeros((1, 4), np.float32))
        assert np.array_equal(a[1], np.zeros((1, 4), np.float32))
    x = np.array([[[1.0, 1.0, 1.0, 1.0]]], dtype=np.float32)
    a, b = x.copy(), x.copy()
    rotary.apply_qk_(a, b, np.array([10**6]))
    assert np.isinf(b).all() and not np.any(a)
    c = rotary.cos_sin(np.array([10**6]), dtype="float64")
    assert np.all(np.abs(c.cos_k) <= 2.0**600) and np.all(np.abs(c.cos_q) <= 2.0**-599)


def test_nan_propagates():
    rotary = Rotary(4, xpos_scale_base=512)
    q = np.array([[[np.nan, 1.0, 2.0, 3.0]]], dtype=np.float32)
    rotary.apply_(q, np.array([5]))
    assert np.isnan(q[0, 0, 0]) and np.isnan(q[0, 0, 2]) and np.isfinite(q[0, 0, [1, 3]]).all()


# ------------------------------------------------------------------- the Rotary itself


def test_equality_hash_pickle_repr():
    a = Rotary(8, xpos_scale_base=512)
    b = Rotary(8, xpos_scale_base=512.0, xpos_center="torchscale")
    assert a == b and hash(a) == hash(b)
    assert a != Rotary(8) and a != Rotary(8, xpos_scale_base=256) and a != Rotary(8, xpos_scale_base=512,
                                                                               xpos_center="flash_attn")
    c = pickle.loads(pickle.dumps(Rotary(8, xpos_scale_base=64, xpos_center=7)))
    assert c == Rotary(8, xpos_scale_base=64, xpos_center=7) and c.xpos_center == 7 and c.xpos_scale_base == 64.0
    assert "xpos_scale_base=512.0" in repr(a) and "xpos" not in repr(Rotary(8))
    assert Rotary(8).xpos_scale_base is None and Rotary(8).xpos_center is None
    assert Rotary(8, xpos_scale_base=1, xpos_center="Flash-Attn").xpos_center == "flash_attn"


def test_module_functions_give_the_rotary_s_bits():
    q, k = _x((4, 2, 8), 20), _x((4, 1, 8), 21)
    pos = np.arange(10, 14)
    rotary = Rotary(8, xpos_scale_base=512, xpos_center="flash_attn")
    a, b = q.copy(), k.copy()
    rotary.apply_qk_(a, b, pos)
    c, d = q.copy(), k.copy()
    rope.apply_qk_(c, d, pos, xpos_scale_base=512, xpos_center="flash_attn")
    assert np.array_equal(a, c) and np.array_equal(b, d)
    e = k.copy()
    rope.apply_(e, pos, xpos_scale_base=512, xpos_center="flash_attn", downscale=True)
    assert np.array_equal(e, b)


@pytest.mark.any_backend
@pytest.mark.parametrize("bad, error", [(0, ValueError), (-1.0, ValueError), (math.nan, ValueError),
                                        (math.inf, ValueError), (-math.inf, ValueError), (True, TypeError),
                                        ("512", TypeError), (10**400, ValueError), ([512], TypeError)])
def test_bad_scale_base_refused(bad, error):
    with pytest.raises(error, match="xpos_scale_base"):
        Rotary(8, xpos_scale_base=bad)
    x = _x((2, 1, 8))
    before = x.copy()
    with pytest.raises(error, match="xpos_scale_base"):
        rope.apply_(x, np.arange(2), xpos_scale_base=bad)
    assert np.array_equal(x, before)


@pytest.mark.any_backend
@pytest.mark.parametrize("bad, error", [("middle", ValueError), (-1, ValueError), (2**32 + 1, ValueError),
                                        (1.5, TypeError), (True, TypeError), (None, TypeError)])
def test_bad_center_refused(bad, error):
    with pytest.raises(error, match="xpos_center"):
        Rotary(8, xpos_scale_base=512, xpos_center=bad)


def test_what_xpos_refuses():
    with pytest.raises(ValueError, match="xpos_center.*needs xpos_scale_base"):
        Rotary(8, xpos_center="flash_attn")
    with pytest.raises(ValueError, match="M-RoPE"):
        Rotary(16, scaling={"rope_type": "default", "mrope_section": [2, 3, 3]}, xpos_scale_base=512)
    rotary = Rotary(8, xpos_scale_base=512)
    k = _x((2, 1, 8))
    before = k.copy()
    with pytest.raises(ValueError, match="rerotate_ cannot move xPos keys"):
        rotary.rerotate_(k, 3)
    for dtype in ("float16", "bfloat16"):
        with pytest.raises(ValueError, match="float32 or float64"):
            rotary.cos_sin(np.arange(3), dtype=dtype)
    with pytest.raises(TypeError, match="four arrays"):
        rotary.cos_sin(np.arange(3), out=(np.empty((3, 8), np.float32),) * 2)
    with pytest.raises(TypeError, match="downscale"):
        rotary.apply_(k, np.arange(2), downscale=1)
    with pytest.raises(TypeError, match="downscale"):
        Rotary(8).apply_(k, np.arange(2), downscale="yes")
    with pytest.raises(ValueError, match="M-RoPE"):
        rotary.apply_(k, np.zeros((3, 1, 2), np.int64))
    assert np.array_equal(k, before)
    # without xPos, downscale changes nothing
    a, b = k.copy(), k.copy()
    Rotary(8).apply_(a, np.arange(2))
    Rotary(8).apply_(b, np.arange(2), downscale=True)
    assert np.array_equal(a, b)


def test_length_dependent_rules_keep_a_table_per_length():
    """Dynamic NTK with a fixed centre: a decoding step's kept table is its length's."""
    scaling = {"rope_type": "dynamic", "factor": 2.0}
    rotary = Rotary(8, scaling=scaling, max_position_embeddings=16, xpos_scale_base=64, xpos_center=2)
    x = _x((1, 2, 8), 30)
    short, long_ = x.copy(), x.copy()
    rotary.apply_(short, np.array([5]), seq_len=10)
    rotary.apply_(long_, np.array([5]), seq_len=5000)
    assert not np.array_equal(short, long_)
    fresh = x.copy()
    Rotary(8, scaling=scaling, max_position_embeddings=16, xpos_scale_base=64, xpos_center=2).apply_(
        fresh, np.array([5]), seq_len=5000)
    assert np.array_equal(fresh, long_)


@pytest.mark.any_backend
@pytest.mark.parametrize("sb, center", [(64.0, 0), (3.0, 2**31), (1.25, 0)])
def test_tables_relative_to_the_exact_doubles_at_large_powers(sb, center):
    """Powers far from 1 (up to the clamp), the anchored product (scale bases >= 2) and pow at
    every value (below 2): every double within 2**-44 of the exact one, relative."""
    rotary = Rotary(8, xpos_scale_base=sb, xpos_center=center)
    base = 0 if center == 0 else center - 200
    positions = np.array([base + v for v in (0, 1, 63, 64, 65, 127, 200, 317, 400)])
    zeta = exact.xpos_zeta(8)
    for backend in BACKENDS:
        c = rotary.cos_sin(positions, dtype="float64", backend=backend)
        for r, p in enumerate(positions):
            for i in range(4):
                want = exact.xpos_table_f64(int(p), rotary.inv_freq[i], 1.0, zeta[i], sb, center)
                got = (c.cos_q[r, i], c.sin_q[r, i], c.cos_k[r, i], c.sin_k[r, i])
                for g, w in zip(got, want):
                    assert abs(g - w) <= 2.0**-44 * abs(w) or abs(w) < 2.0**-900, (backend, p, i, g, w)


def test_threads_sharing_a_rotary_get_the_serial_bits():
    import threading

    rotary = Rotary(16, xpos_scale_base=512)
    q, k = _x((1, 4, 1, 16), 40), _x((1, 2, 1, 16), 41)
    want = {}
    for p in range(24):
        a, b = q.copy(), k.copy()
        Rotary(16, xpos_scale_base=512).apply_qk_(a, b, offset=p)
        want[p] = (a, b)
    bad = []

    def work(t):
        for rep in range(30):
            p = (t * 7 + rep) % 24
            a, b = q.copy(), k.copy()
            rotary.apply_qk_(a, b, offset=p)
            if not (np.array_equal(a, want[p][0]) and np.array_equal(b, want[p][1])):
                bad.append(p)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not bad and not any(t.is_alive() for t in threads)


FORK_SCRIPT = """
import multiprocessing as mp, os, sys
import numpy as np
from fastpe.rope import Rotary

BACKEND = sys.argv[1]
ROTARY = Rotary(128, xpos_scale_base=512)
RNG = np.random.default_rng(7)
Q = RNG.standard_normal((1, 16, 3000, 128)).astype(np.float32)
K = RNG.standard_normal((1, 4, 3000, 128)).astype(np.float32)

def run(_=None):
    q, k = Q.copy(), K.copy()
    ROTARY.apply_qk_(q, k, backend=BACKEND)    # large: the backend's threads
    return q.tobytes() + k.tobytes()

WANT = run()
pid = os.fork()
if pid == 0:
    os._exit(0 if run() == WANT else 3)
_, status = os.waitpid(pid, 0)
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
with mp.get_context("fork").Pool(2) as pool:
    assert all(r == WANT for r in pool.map(run, range(3)))
print("fork-ok")
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", [b for b in ("numba", "cython") if b in FAST])
def test_fork_after_threaded_xpos_rotation(backend, tmp_path):
    import subprocess
    import sys

    from conftest import fastpe_env

    script = tmp_path / "fork_xpos.py"
    script.write_text(FORK_SCRIPT)
    try:
        proc = subprocess.run([sys.executable, str(script), backend], capture_output=True, text=True, timeout=240,
                              env=fastpe_env(), cwd=tmp_path)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"fork case hung: {exc}")
    assert proc.returncode == 0 and "fork-ok" in proc.stdout, proc.stdout + proc.stderr
