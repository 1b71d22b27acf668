"""The RoPE compute core (``fastpe.rope._core``): exact cos/sin caches, in-place rotation.

What is checked, and against what:

* the reference (:mod:`fastpe._exact.rope`, exact rationals) against mpmath, independently;
* every backend's cos/sin against the reference: within 1 float32 ULP (all u32 positions,
  including positions where ``p * f`` comes within ~1e-10 of a multiple of pi/2, large and
  small attention factors);
* every backend's rotation against the reference: within 1 ULP, except where ``x1 cos - x2
  sin`` cancels (``|y| < 2**-20 af (|x1| + |x2|)``), where the documented absolute bound
  ``ulp(y) + 2**-44 af (|x1| + |x2|)`` holds instead;
* the compiled backends against their own definition (float32 of the double table, and the
  rotation recomputed in numpy from that table), and against each other bit for bit (with
  the baseline C copy, the serial numba twin, thread splits and sequence chunks);
* layouts, partial rotary, GQA, positions ``(seq,)`` / ``(batch, seq)`` / tokens, offset;
* bad input: a clear error naming the argument, and nothing written;
* 16 threads at once, and ``fork()`` after use;
* HF's float32 computation (torch): fastpe agrees to float32 accuracy and is closer to exact.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import threading
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from conftest import FAST, fastpe_env
from support.cli import same_bits
from support.inputs import POSITION_LIMIT, edge_positions, hard_positions_for_frequency, octave_positions
from support.oracle import mp_round, rotate, sin_cos, ulp_distance
from fastpe import _backends
from fastpe._exact import rope as _reference_rope
from fastpe._backends import _walk as _rope_plan
from fastpe.rope._core import apply_from_inv_freq, apply_qk_from_inv_freq, cos_sin_from_inv_freq

#: every backend it calls is named, or it calls none: the first run of make test decides it
#: (tests/conftest.py deselects it in the default-only runs)
pytestmark = pytest.mark.any_backend

# --------------------------------------------------------------------------- inputs


def hf_inv_freq(dim: int, base: float, dtype=np.float64) -> np.ndarray:
    """HF's default rule, ``1 / base**(arange(0, dim, 2) / dim)``, in ``dtype`` (HF: float32)."""
    exps = np.arange(0, dim, 2, dtype=dtype) / dtype(dim)
    return (dtype(1.0) / (dtype(base) ** exps)).astype(dtype)


#: frequency sets: HF's default (float64 and float32 as HF computes it), and the edges
FREQS = {
    "hf128": hf_inv_freq(128, 10000.0),
    "hf128-500k-f32": hf_inv_freq(128, 500000.0, np.float32).astype(np.float64),
    "edges": np.array([1024.0, 3.0, 1.0, 0.7853981633974483, 2.0**-30, 1e-12, 0.0]),
}


def hard_rows(freqs, n_freq_sampled: int = 6, per_freq: int = 12) -> list[int]:
    """Positions where ``p * f`` nearly hits a multiple of pi/2 for a spread of the frequencies
    (the last ``per_freq`` of each: the closest, near the top of the u32 range)."""
    nonzero = [f for f in freqs if f > 0]
    picks = sorted({round(k * (len(nonzero) - 1) / max(1, n_freq_sampled - 1)) for k in range(n_freq_sampled)})
    rows = set()
    for k in picks:
        rows.update(hard_positions_for_frequency(float(nonzero[k]))[-per_freq:])
    return sorted(rows)


def rope_positions(freqs, seed: int) -> np.ndarray:
    pos = set(edge_positions()) | set(octave_positions(1, seed)) | set(hard_rows(freqs))
    return np.array(sorted(pos), dtype=np.uint64).astype(np.uint32)


_EXACT_CACHE: dict = {}


def exact_cos_sin(name: str, af: float, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The correctly rounded float32 caches, from the reference (cached across backends)."""
    key = (name, af, positions.tobytes())
    if key not in _EXACT_CACHE:
        _EXACT_CACHE[key] = cos_sin_from_inv_freq(positions, FREQS[name], af, backend="python")
    return _EXACT_CACHE[key]


def ulp32(y: np.ndarray) -> np.ndarray:
    """The float32 spacing at ``|y|`` (2**-149 in the subnormal range)."""
    y = np.abs(np.asarray(y, dtype=np.float32))
    return np.spacing(y).astype(np.float64)


def pair_columns(n_freq: int, layout: str) -> tuple[np.ndarray, np.ndarray]:
    i = np.arange(n_freq)
    return (i, i + n_freq) if layout == "neox" else (2 * i, 2 * i + 1)


def check_rotation(got, want, x_before, n_freq, layout, af) -> float:
    """``got`` within 1 ULP of the exact ``want``, or -- where the pair cancels -- within the
    documented absolute bound.  Returns the fraction correctly rounded."""
    c1, c2 = pair_columns(n_freq, layout)
    mag = np.abs(af) * (np.abs(x_before[..., c1].astype(np.float64)) + np.abs(x_before[..., c2].astype(np.float64)))
    total, exact = 0, 0
    for cols in (c1, c2):
        g, w = got[..., cols], want[..., cols]
        ulps = ulp_distance(g, w)
        err = np.abs(g.astype(np.float64) - w.astype(np.float64))
        cancel = np.abs(w.astype(np.float64)) < 2.0**-20 * mag
        bound = ulp32(w) + 2.0**-44 * mag
        assert (ulps[~cancel] <= 1).all(), f"{int(ulps[~cancel].max())} ULP where nothing cancels"
        assert (err <= bound).all(), f"error {float((err / bound).max()):.3g} x the bound"
        total += g.size
        exact += int((ulps == 0).sum())
    return exact / max(total, 1)


# --------------------------------------------------------------------------- the reference


def _mp_pair(p, f, af, x1=1.0, x2=0.0):
    """The oracle's rotation of ``(x1, x2)`` at 80 digits (``(af cos, af sin)`` by default)."""
    with mpmath.workdps(80):
        return rotate(p, f, af, x1, x2)


def test_reference_matches_mpmath():
    """The oracle itself, against mpmath at 80 digits, on random and hard inputs."""
    rng = np.random.default_rng(11)
    cases = []
    for f in (1.0, 1e-4, 0.123456789, 1024.0, 2.0**-30):
        hard = hard_positions_for_frequency(f)[-4:]
        rand = rng.integers(0, POSITION_LIMIT, 6, dtype=np.uint64).tolist()
        for p in list(hard) + rand + [0, 1, POSITION_LIMIT - 1]:
            cases.append((int(p), f, float(rng.choice([1.0, 1.2, 1e6, 0.1]))))
    for p, f, af in cases:
        mc, ms = _mp_pair(p, f, af)
        assert _reference_rope.cos_sin_f32(p, f, af) == (mp_round(mc, "float32"), mp_round(ms, "float32")), (p, f, af)
        c64, s64 = _reference_rope.cos_sin_f64(p, f, af)
        with mpmath.workdps(80):
            assert (c64, s64) == (mp_round(mc, "float64"), mp_round(ms, "float64")), (p, f, af)
        # a random pair, and one built to cancel: x1 cos - x2 sin ~ 0
        x1, x2 = (float(np.float32(v)) for v in rng.standard_normal(2))
        _, sn = _reference_rope.cos_sin_f64(p, f, 1.0)
        cs, _ = _reference_rope.cos_sin_f64(p, f, 1.0)
        for u, v in ((x1, x2), (float(np.float32(sn)), float(np.float32(cs)))):
            y1, y2 = _mp_pair(p, f, af, u, v)
            assert _reference_rope.rotate_f32(u, v, p, f, af) == (mp_round(y1, "float32"), mp_round(y2, "float32"))


def test_reference_exact_cases():
    assert _reference_rope.cos_sin_f32(0, 1.0, 1.5) == (1.5, 0.0)
    assert _reference_rope.rotate_f32(1.0, 2.0, 0, 0.5, 1 + 2.0**-24) == (1.0, 2.0)  # tie to even
    assert _reference_rope.rotate_f32(0.0, 0.0, 123, 0.5, 3.0) == (0.0, 0.0)
    assert _reference_rope.cos_sin_f32(12345, 0.0, 2.0) == (2.0, 0.0)


def _bits_and_sign(x: float) -> tuple[float, float]:
    return x, math.copysign(1.0, x)


def test_reference_tiny_angles_keep_their_sign():
    """A tiny angle's sine underflows float32: the fixed point once left its sign undecided
    and settled on -0.0 (its interval straddled 0); the series bounds give +0.0, or -0.0
    for a negative attention factor, and the rounding of tiny values that do not underflow."""
    f = 1e-150  # base 1e300, head_dim 4: the second frequency
    assert [_bits_and_sign(v) for v in _reference_rope.cos_sin_f32(1, f)] == [(1.0, 1.0), (0.0, 1.0)]
    assert [_bits_and_sign(v) for v in _reference_rope.cos_sin_f32(1, f, -2.0)] == [(-2.0, -1.0), (0.0, -1.0)]
    assert _reference_rope.cos_sin_f64(3, 1e-300) == (1.0, 3e-300)
    assert _reference_rope.cos_sin_f32(7, 2.0**-30) == (1.0, mp_round(sin_cos(7, 2.0**-30)[0], "float32"))
    assert _bits_and_sign(_reference_rope.rotate_f32(0.0, 1.0, 1, f)[0]) == (-0.0, -1.0)


@pytest.mark.parametrize("af", [-0.5, 0.0, 2.0])
def test_exact_zeros_are_positive_on_every_backend(backend, af):
    """sin 0 times a negative attention factor, or anything times af = 0, is the exact value
    0: +0.0 on every backend (the compiled ones once wrote -0.0)."""
    for dt in (np.float32, np.float16):
        oc, os_ = np.empty((2, 2), dt), np.empty((2, 2), dt)
        cos_sin_from_inv_freq([0, 3], [1.0], af, out_cos=oc, out_sin=os_, backend=backend)
        ref_c, ref_s = np.empty_like(oc), np.empty_like(os_)
        cos_sin_from_inv_freq([0, 3], [1.0], af, out_cos=ref_c, out_sin=ref_s, backend="python")
        assert oc.tobytes() == ref_c.tobytes() and os_.tobytes() == ref_s.tobytes()
        assert os_.view(np.uint16 if dt == np.float16 else np.uint32)[0, 0] == 0  # +0.0


# --------------------------------------------------------------------------- cos / sin


@pytest.mark.parametrize(
    "name, af",
    [("hf128", 1.0), ("hf128", 1.2247448713915889), ("hf128-500k-f32", 1e6), ("edges", 0.0625)],
)
def test_cos_sin_within_one_ulp(fast_backend, name, af):
    """All u32 positions (octaves, edges, near-quarter-turn hard cases), large and small af.

    ``af = 1e6`` is why the tiny-value test is on the unscaled product: a test on
    ``af * c`` would let values of ~1e-6 (relative error ~2**-26) through."""
    if fast_backend == "python":
        pytest.skip("the python backend is the reference itself")
    positions = rope_positions(FREQS[name], seed=len(name))
    want_c, want_s = exact_cos_sin(name, af, positions)
    for layout in ("neox", "gptj"):
        got_c, got_s = cos_sin_from_inv_freq(positions, FREQS[name], af, layout=layout, backend=fast_backend)
        n = len(FREQS[name])
        a, b = pair_columns(n, layout)
        assert same_bits(got_c[:, a], got_c[:, b]) and same_bits(got_s[:, a], got_s[:, b])
        worst = max(int(ulp_distance(got_c[:, a], want_c[:, :n]).max()),
                    int(ulp_distance(got_s[:, a], want_s[:, :n]).max()))
        assert worst <= 1
        rounded = np.mean(np.concatenate([(got_c[:, a] == want_c[:, :n]).ravel(), (got_s[:, a] == want_s[:, :n]).ravel()]))
        assert rounded > 0.9999


def test_cos_sin_every_backend_small(backend):
    inv = hf_inv_freq(16, 10000.0)
    positions = np.array([0, 1, 7, 2**31, POSITION_LIMIT - 1, 123456789], dtype=np.uint32)
    for layout in ("neox", "gptj"):
        want = cos_sin_from_inv_freq(positions, inv, 1.5, layout=layout, backend="python")
        got = cos_sin_from_inv_freq(positions, inv, 1.5, layout=layout, backend=backend)
        for g, w in zip(got, want):
            assert g.dtype == np.float32 and g.shape == (6, 16)
            assert ulp_distance(g, w).max() <= 1
    # position 0: exactly af and 0
    c, s = cos_sin_from_inv_freq([0], inv, 1.5, backend=backend)
    assert (c == 1.5).all() and (s == 0).all()


def test_float64_outputs_are_the_kernel_doubles(backend):
    """float64 outputs: the doubles C, S (compiled), or the correctly rounded doubles (python),
    within ``2**-45.9 af`` absolute of the exact values; float32 outputs round them once."""
    inv = hf_inv_freq(32, 10000.0)
    positions = np.array([0, 5, 77, 4096, 2**31 + 5, POSITION_LIMIT - 1], dtype=np.uint32)
    af = 1.3
    out = (np.empty((6, 32)), np.empty((6, 32)))
    for layout in ("neox", "gptj"):
        c64, s64 = cos_sin_from_inv_freq(positions, inv, af, layout=layout, out_cos=out[0], out_sin=out[1], backend=backend)
        assert c64 is out[0] and s64 is out[1]
        c32, s32 = cos_sin_from_inv_freq(positions, inv, af, layout=layout, backend=backend)
        if backend != "python":
            assert same_bits(c32, c64.astype(np.float32)) and same_bits(s32, s64.astype(np.float32))
        a, _ = pair_columns(16, layout)
        for r, p in enumerate(positions.tolist()):
            for i, f in enumerate(inv):
                ec, es = _reference_rope.cos_sin_f64(p, f, af)
                assert abs(c64[r, a[i]] - ec) <= 2.0**-45.9 * af
                assert abs(s64[r, a[i]] - es) <= 2.0**-45.9 * af


# --------------------------------------------------------------------------- apply


def _x(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


#: (q shape, k shape, positions shape or "offset", number of frequencies)
APPLY_CASES = [
    ((2, 3, 5, 20), (2, 1, 5, 20), (2, 5), 8),  # partial rotary, GQA, per-batch positions
    ((2, 3, 5, 16), (2, 3, 5, 16), (5,), 8),  # full rotary, shared positions
    ((7, 2, 12), (7, 1, 12), (7,), 4),  # tokens layout, partial
    ((1, 2, 3, 8), None, "offset", 4),
]


@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("q_shape, k_shape, pos_shape, n_freq", APPLY_CASES)
def test_apply_matches_reference(backend, q_shape, k_shape, pos_shape, n_freq, layout):
    rng = np.random.default_rng(5)
    inv = hf_inv_freq(2 * n_freq, 10000.0)
    af = 1.1
    n_seq = q_shape[0] if len(q_shape) == 3 else q_shape[2]
    if pos_shape == "offset":
        kw = dict(offset=POSITION_LIMIT - n_seq)
        positions = None
    else:
        kw = {}
        positions = rng.integers(0, POSITION_LIMIT, pos_shape, dtype=np.uint64)
        positions[..., 0] = 0
        positions = positions.astype(np.uint32)
    q0 = _x(q_shape, 1)
    k0 = None if k_shape is None else _x(k_shape, 2)
    # the exact values: the python backend
    wq, wk = q0.copy(), None if k0 is None else k0.copy()
    if wk is None:
        apply_from_inv_freq(wq, positions, inv, af, layout=layout, backend="python", **kw)
    else:
        apply_qk_from_inv_freq(wq, wk, positions, inv, af, layout=layout, backend="python", **kw)
    q, k = q0.copy(), None if k0 is None else k0.copy()
    if k is None:
        assert apply_from_inv_freq(q, positions, inv, af, layout=layout, backend=backend, **kw) is q
    else:
        rq, rk = apply_qk_from_inv_freq(q, k, positions, inv, af, layout=layout, backend=backend, **kw)
        assert rq is q and rk is k
    for got, want, before in ((q, wq, q0), (k, wk, k0)):
        if got is None:
            continue
        assert same_bits(got[..., 2 * n_freq:], before[..., 2 * n_freq:]), "partial rotary: rest untouched"
        if backend == "python":
            continue  # it is the reference
        check_rotation(got, want, before, n_freq, layout, af)


def test_apply_cancellation_bound(fast_backend):
    """Pairs built so that ``x1 cos - x2 sin`` cancels to a few float32 ULPs of the inputs:
    the result may be many ULPs off its own (tiny) value, but stays within the bound."""
    n_freq, af = 8, 1.0
    inv = hf_inv_freq(2 * n_freq, 10000.0)
    positions = np.array([3, 1000, 77777, 2**31 + 1], dtype=np.uint32)
    c, s = cos_sin_from_inv_freq(positions, inv, backend="python", out_cos=np.empty((4, 16)), out_sin=np.empty((4, 16)))
    x = np.empty((1, 1, 4, 16), np.float32)
    x[0, 0, :, :n_freq] = s[:, :n_freq]  # x1 = sin, x2 = cos: x1 cos - x2 sin ~ 0
    x[0, 0, :, n_freq:] = c[:, :n_freq]
    want = x.copy()
    apply_from_inv_freq(want, positions, inv, af, backend="python")
    got = x.copy()
    apply_from_inv_freq(got, positions, inv, af, backend=fast_backend)
    check_rotation(got, want, x, n_freq, "neox", af)
    assert np.abs(want[..., :n_freq]).max() < 1e-6  # it did cancel


@pytest.mark.parametrize("layout", ["neox", "gptj"])
def test_compiled_apply_is_its_definition(fast_backend, layout):
    """``float32(x1*C - x2*S)``, ``float32(x2*C + x1*S)`` in double from the table of doubles,
    recomputed here in numpy, bit for bit; and cos_sin is float32 of the same table."""
    if fast_backend == "python":
        pytest.skip("the python backend computes the exact value instead")
    rng = np.random.default_rng(8)
    n_freq, af = 16, 0.9
    inv = hf_inv_freq(2 * n_freq, 500000.0)
    positions = rng.integers(0, POSITION_LIMIT, (3, 40), dtype=np.uint64).astype(np.uint32)
    x = _x((3, 4, 40, 40), 3)
    table = np.empty((3, 40, 2, n_freq))
    _backends.load(fast_backend).rope_table(positions.reshape(-1), tuple(inv), af, table.reshape(-1, 2, n_freq))
    c1, c2 = pair_columns(n_freq, layout)
    x1 = x[..., c1].astype(np.float64)
    x2 = x[..., c2].astype(np.float64)
    C, S = table[:, None, :, 0, :], table[:, None, :, 1, :]
    want = x.copy()
    want[..., c1] = (x1 * C - x2 * S).astype(np.float32)
    want[..., c2] = (x2 * C + x1 * S).astype(np.float32)
    got = x.copy()
    apply_from_inv_freq(got, positions, inv, af, layout=layout, backend=fast_backend)
    assert same_bits(got, want)
    cos, sin = cos_sin_from_inv_freq(positions[1], inv, af, layout=layout, backend=fast_backend)
    assert same_bits(cos[:, c1], table[1, :, 0].astype(np.float32))
    assert same_bits(sin[:, c2], table[1, :, 1].astype(np.float32))


def test_forms_of_the_same_rotation_agree(fast_backend):
    """Fused q/k = two calls; (seq,) positions = the same row per batch; tokens layout =
    (1, heads, seq, dim); offset = arange; any integer dtype of positions."""
    inv = hf_inv_freq(24, 10000.0)
    q0, k0 = _x((2, 4, 33, 32), 1), _x((2, 2, 33, 32), 2)
    pos = np.arange(1000, 1033)
    fused_q, fused_k = q0.copy(), k0.copy()
    apply_qk_from_inv_freq(fused_q, fused_k, pos, inv, 1.2, backend=fast_backend)
    sep_q, sep_k = q0.copy(), k0.copy()
    apply_from_inv_freq(sep_q, pos, inv, 1.2, backend=fast_backend)
    apply_from_inv_freq(sep_k, pos, inv, 1.2, backend=fast_backend)
    assert same_bits(fused_q, sep_q) and same_bits(fused_k, sep_k)
    grid_q = q0.copy()
    apply_from_inv_freq(grid_q, np.stack([pos, pos]).astype(np.float64), inv, 1.2, backend=fast_backend)
    assert same_bits(grid_q, fused_q)
    off_q = q0.copy()
    apply_from_inv_freq(off_q, None, inv, 1.2, offset=1000, backend=fast_backend)
    assert same_bits(off_q, fused_q)
    tokens = np.ascontiguousarray(q0[1].transpose(1, 0, 2))  # (seq, heads, dim)
    apply_from_inv_freq(tokens, pos.tolist(), inv, 1.2, backend=fast_backend)
    assert same_bits(tokens.transpose(1, 0, 2), fused_q[1])


# ------------------------------------------------------------- compiled backends: same bits


def _both_compiled():
    if not {"numba", "cython"} <= set(FAST):
        pytest.skip("needs both compiled backends")
    return _backends.load("numba"), _backends.load("cython")


@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize(
    "q_shape, k_shape, pos_kind, n_freq, af",
    [
        ((1, 8, 300, 128), (1, 2, 300, 128), "seq", 64, 1.0),
        ((3, 2, 70, 96), (3, 2, 70, 96), "grid", 40, 1.25),
        ((500, 3, 64), (500, 1, 64), "seq", 16, 1e6),
        ((1, 1, 1, 2), None, "seq", 1, 0.5),
    ],
)
def test_numba_and_cython_write_the_same_bits(q_shape, k_shape, pos_kind, n_freq, af, layout):
    numba_mod, cython_mod = _both_compiled()
    from fastpe._backends.cython import _ext

    rng = np.random.default_rng(9)
    inv = tuple(hf_inv_freq(2 * n_freq, 10000.0))
    n_seq = q_shape[0] if len(q_shape) == 3 else q_shape[2]
    shape = (n_seq,) if pos_kind == "seq" else (q_shape[0], n_seq)
    positions = rng.integers(0, POSITION_LIMIT, shape, dtype=np.uint64).astype(np.uint32)
    hard = hard_positions_for_frequency(inv[0])[-min(5, positions.size):]
    positions.reshape(-1)[: len(hard)] = hard
    results = []
    for mod in (numba_mod, cython_mod):
        q = _x(q_shape, 4)
        k = None if k_shape is None else _x(k_shape, 5)
        mod.rope_apply(q, k, positions, inv, af, layout)
        c = np.empty((positions.size, 2 * n_freq), np.float32)
        s = np.empty_like(c)
        mod.rope_cos_sin(positions.reshape(-1), inv, af, layout, c, s)
        t = np.empty((positions.size, 2, n_freq))
        mod.rope_table(positions.reshape(-1), inv, af, t)
        results.append((q, k, c, s, t))
    for a, b in zip(*results):
        assert (a is None and b is None) or same_bits(a, b)
    # the baseline (wide=0) and AVX2 (wide=2) copies of the C kernels give the same bits too,
    # whichever copy this CPU picks by default
    from fastpe._backends import cython as _cython

    for wide in (0, 2):
        q = _x(q_shape, 4)
        table = np.empty_like(results[1][4])
        planned = _cython._planned(_cython.frequency_turns, inv)
        _ext.rope_table(positions.reshape(-1), *planned, af, table, wide=wide)
        assert same_bits(table, results[0][4])
        nb_, hq, ns, _, bq, shq, ssq = _rope_plan.geometry(q)
        stride = 0 if pos_kind == "seq" else ns
        _ext.rope_apply(q.reshape(-1), hq, bq, shq, ssq, np.empty(0, np.float32), 0, 0, 0, 0, nb_, 0,
                        ns, table, stride, layout == "neox", wide=wide)
        assert same_bits(q, results[0][0])
        c = np.empty_like(results[1][2])
        s = np.empty_like(c)
        _ext.rope_cos_sin(positions.reshape(-1), *planned, af, layout == "neox", c, s, wide=wide)
        assert same_bits(c, results[0][2]) and same_bits(s, results[0][3])


def test_splits_chunks_and_serial_twins_give_the_same_bits(monkeypatch):
    """Sequence chunks (small table budget), cython thread splits, numba's serial twin."""
    inv = hf_inv_freq(64, 10000.0)
    rng = np.random.default_rng(12)
    positions = rng.integers(0, POSITION_LIMIT, (2, 150), dtype=np.uint64).astype(np.uint32)
    q0, k0 = _x((2, 4, 150, 64), 6), _x((2, 1, 150, 64), 7)

    def run(backend):
        q, k = q0.copy(), k0.copy()
        apply_qk_from_inv_freq(q, k, positions, inv, 1.1, layout="gptj", backend=backend)
        c, s = cos_sin_from_inv_freq(positions[0], inv, 1.1, backend=backend)
        return q, k, c, s

    for backend in FAST:
        want = run(backend)
        with monkeypatch.context() as m:
            m.setattr(_rope_plan, "TABLE_BYTES", 7 * 32 * 16)  # 7 sequence indices a chunk
            if backend == "cython":
                from fastpe._backends import cython as _cython

                m.setattr(_cython, "PARALLEL_FROM", 1)
                m.setattr(_cython, "MIN_BLOCK", 1)
                m.setattr(_cython, "threads", lambda: 5)
            else:
                import fastpe._backends.numba.backend as nb

                m.setattr(nb, "SERIAL_BELOW", 0)  # parallel twin even for small work
            got = run(backend)
        for a, b in zip(got, want):
            assert same_bits(a, b), backend
        if backend == "numba":
            import fastpe._backends.numba.backend as nb

            with monkeypatch.context() as m:
                m.setattr(nb, "SERIAL_BELOW", 1 << 62)  # serial twin throughout
                for a, b in zip(run(backend), want):
                    assert same_bits(a, b)


def test_empty_inputs(backend):
    inv = [1.0, 0.5]
    c, s = cos_sin_from_inv_freq([], inv, backend=backend)
    assert c.shape == s.shape == (0, 4) and c.dtype == np.float32
    x = np.empty((2, 3, 0, 4), np.float32)
    assert apply_from_inv_freq(x, np.empty(0, np.int64), inv, backend=backend) is x
    x = np.empty((0, 3, 4), np.float32)
    assert apply_from_inv_freq(x, None, inv, offset=POSITION_LIMIT, backend=backend) is x


def test_inputs_other_than_x_are_untouched(backend):
    inv = np.array([1.0, 0.25], dtype=np.float32)
    positions = np.array([[3, 4], [5, 6]], dtype=np.int64)
    inv0, pos0 = inv.copy(), positions.copy()
    x = _x((2, 1, 2, 4), 1)
    apply_from_inv_freq(x, positions, inv, 2.0, backend=backend)
    assert same_bits(inv, inv0) and same_bits(positions, pos0)


# --------------------------------------------------------------------------- bad input


def _ro(a):
    a.setflags(write=False)
    return a


def _share_q(q, k):
    return q, q  # the same array twice: it would be rotated twice


def _positions_inside(shape, dtype):
    """A float32 array of ``shape`` and valid positions 0..4 read (as ``dtype``) from its
    first bytes: a conversion to uint32 copies them, yet they share memory with it."""
    x = np.zeros(shape, np.float32)
    positions = x.reshape(-1).view(dtype)[:5]
    positions[:] = np.arange(5)
    return x, positions


def _inv_freq_inside(shape, start=0):
    """A float32 array of ``shape`` and 8 valid frequencies read from it (a view)."""
    x = np.zeros(shape, np.float32)
    inv = x.reshape(-1)[start:start + 8]
    inv[:] = INV8
    return x, inv


def _overlapping_qk():
    """q (2, 3, 5, 16) and k (2, 1, 5, 16) in one buffer, k's first half on q's last rows."""
    buf = np.zeros(480 + 80, np.float32)
    return buf[:480].reshape(2, 3, 5, 16), buf[400:].reshape(2, 1, 5, 16)


#: (name, call(q, k) -> None, exception, message); q (2, 3, 5, 16) and k (2, 1, 5, 16)
INV8 = list(hf_inv_freq(16, 10000.0))
BAD_APPLY = [
    ("odd rotary_dim", lambda q, k: apply_from_inv_freq(q, np.arange(5), INV8, rotary_dim=15), ValueError, "rotary_dim must be even"),
    ("rotary_dim vs inv_freq", lambda q, k: apply_from_inv_freq(q, np.arange(5), INV8, rotary_dim=12), ValueError, r"rotary_dim must be 2 \* len\(inv_freq\) = 16"),
    ("rotary_dim > head_dim", lambda q, k: apply_from_inv_freq(q, np.arange(5), INV8 + [0.1]), ValueError, "rotary_dim 18 .* exceeds head_dim 16"),
    ("head_dim mismatch", lambda q, k: apply_qk_from_inv_freq(q, np.zeros((2, 1, 5, 8), np.float32), np.arange(5), INV8), ValueError, "k must have the head_dim of q"),
    ("batch mismatch", lambda q, k: apply_qk_from_inv_freq(q, np.zeros((1, 1, 5, 16), np.float32), np.arange(5), INV8), ValueError, "k must have the batch of q"),
    ("seq mismatch", lambda q, k: apply_qk_from_inv_freq(q, np.zeros((2, 1, 4, 16), np.float32), np.arange(5), INV8), ValueError, "k must have the seq of q"),
    ("layout mismatch", lambda q, k: apply_qk_from_inv_freq(q, np.zeros((5, 1, 16), np.float32), np.arange(5), INV8), ValueError, "k must have the layout of q"),
    ("q, k overlap", lambda q, k: apply_qk_from_inv_freq(*_share_q(q, k), np.arange(5), INV8), ValueError, "k must not share memory with q"),
    ("positions too short", lambda q, k: apply_from_inv_freq(q, np.arange(4), INV8), ValueError, r"positions must have shape \(5,\) or \(2, 5\), got \(4,\)"),
    ("positions wrong batch", lambda q, k: apply_from_inv_freq(q, np.zeros((3, 5), int), INV8), ValueError, "positions must have shape"),
    ("positions 3-D", lambda q, k: apply_from_inv_freq(q, np.zeros((1, 2, 5), int), INV8), ValueError, "positions must have shape"),
    ("positions >= 2**32", lambda q, k: apply_from_inv_freq(q, [0, 1, 2, 3, 2**32], INV8), ValueError, r"positions must be < 2\*\*32"),
    ("positions < 0", lambda q, k: apply_from_inv_freq(q, [0, 1, -2, 3, 4], INV8), ValueError, "positions must be >= 0"),
    ("positions fractional", lambda q, k: apply_from_inv_freq(q, [0, 1, 2.5, 3, 4], INV8), ValueError, "positions must be whole"),
    ("positions strings", lambda q, k: apply_from_inv_freq(q, list("abcde"), INV8), TypeError, "positions must hold integers"),
    ("x float64", lambda q, k: apply_from_inv_freq(q.astype(np.float64), np.arange(5), INV8), TypeError, "x must have dtype float32, got float64"),
    ("k float16", lambda q, k: apply_qk_from_inv_freq(q, k.astype(np.float16), np.arange(5), INV8), TypeError, "k must have dtype float32"),
    ("x non-contiguous", lambda q, k: apply_from_inv_freq(np.zeros((2, 3, 5, 32), np.float32)[..., ::2], np.arange(5), INV8), ValueError, "x must be C-contiguous"),
    ("q transposed", lambda q, k: apply_qk_from_inv_freq(q.transpose(1, 0, 2, 3), k, np.arange(5), INV8), ValueError, "q must be C-contiguous"),
    ("x read-only", lambda q, k: apply_from_inv_freq(_ro(q), np.arange(5), INV8), ValueError, "x is read-only"),
    ("k read-only", lambda q, k: apply_qk_from_inv_freq(q, _ro(k), np.arange(5), INV8), ValueError, "k is read-only"),
    ("x a list", lambda q, k: apply_from_inv_freq(q.tolist(), np.arange(5), INV8), TypeError, "x must be a numpy.ndarray, got list"),
    ("x 2-D", lambda q, k: apply_from_inv_freq(q[0, 0], np.arange(5), INV8), ValueError, "x must have shape"),
    ("x big-endian", lambda q, k: apply_from_inv_freq(q.astype(">f4"), np.arange(5), INV8), TypeError, "x must have dtype float32 in native byte order, got '>f4'"),
    ("x 0-d", lambda q, k: apply_from_inv_freq(q[0, 0, 0, 0, ...], np.arange(5), INV8), ValueError, r"x must have shape .* got a 0-D array of shape \(\)"),
    ("attention_factor beyond 2**64", lambda q, k: apply_qk_from_inv_freq(q, k, np.arange(5), INV8, -2.0**65), ValueError, r"attention_factor must be at most 2\*\*64 in magnitude"),
    ("attention_factor huge int", lambda q, k: apply_from_inv_freq(q, np.arange(5), INV8, 10**400), ValueError, "attention_factor must be finite"),
    ("attention_factor huge Fraction", lambda q, k: apply_from_inv_freq(q, np.arange(5), INV8, Fraction(-10**400, 3)), ValueError, "attention_factor must be finite"),
    # inputs sharing memory with what is written: refused even where their conversion copies
    ("positions int64 view of x", lambda q, k: apply_from_inv_freq(*_positions_inside((2, 3, 5, 16), np.int64), INV8), ValueError, "x must not share memory with positions"),
    ("positions float view of k", lambda q, k: apply_qk_from_inv_freq(q, *_positions_inside((2, 1, 5, 16), np.float32), INV8), ValueError, "k must not share memory with positions"),
    ("inv_freq view of x", lambda q, k: (lambda x, inv: apply_from_inv_freq(x, np.arange(5), inv))(*_inv_freq_inside((2, 3, 5, 16))), ValueError, "x must not share memory with inv_freq"),
    ("inv_freq view of k", lambda q, k: (lambda k2, inv: apply_qk_from_inv_freq(q, k2, np.arange(5), inv))(*_inv_freq_inside((2, 1, 5, 16), 8)), ValueError, "k must not share memory with inv_freq"),
    ("q, k partly overlapping", lambda q, k: apply_qk_from_inv_freq(*_overlapping_qk(), np.arange(5), INV8), ValueError, "k must not share memory with q"),
    ("both positions and offset", lambda q, k: apply_from_inv_freq(q, np.arange(5), INV8, offset=0), TypeError, "exactly one of positions and offset"),
    ("neither positions nor offset", lambda q, k: apply_qk_from_inv_freq(q, k, None, INV8), TypeError, "exactly one of positions and offset"),
    ("offset + seq > 2**32", lambda q, k: apply_from_inv_freq(q, None, INV8, offset=2**32 - 4), ValueError, r"offset \+ seq must be <= 2\*\*32"),
    ("offset < 0", lambda q, k: apply_from_inv_freq(q, None, INV8, offset=-1), ValueError, "offset must be >= 0"),
    ("offset float", lambda q, k: apply_from_inv_freq(q, None, INV8, offset=1.0), TypeError, "offset must be an integer"),
    ("offset bool", lambda q, k: apply_from_inv_freq(q, None, INV8, offset=True), TypeError, "offset must be an integer"),
    ("layout unknown", lambda q, k: apply_from_inv_freq(q, np.arange(5), INV8, layout="gpt-neox"), ValueError, "layout must be one of 'neox', 'gptj'"),
    ("layout not a string", lambda q, k: apply_from_inv_freq(q, np.arange(5), INV8, layout=0), TypeError, "layout must be a string"),
    ("inv_freq 2-D", lambda q, k: apply_from_inv_freq(q, np.arange(5), np.ones((2, 4))), ValueError, "inv_freq must be 1-D"),
    ("inv_freq NaN", lambda q, k: apply_from_inv_freq(q, np.arange(5), INV8[:7] + [math.nan]), ValueError, "inv_freq must be finite"),
    ("inv_freq inf", lambda q, k: apply_from_inv_freq(q, np.arange(5), [math.inf] + INV8[1:]), ValueError, "inv_freq must be finite"),
    ("inv_freq negative", lambda q, k: apply_from_inv_freq(q, np.arange(5), [-0.5] + INV8[1:]), ValueError, "inv_freq must be >= 0"),
    ("inv_freq too large", lambda q, k: apply_from_inv_freq(q, np.arange(5), [2048.0] + INV8[1:]), ValueError, "inv_freq must be <= 1024"),
    ("inv_freq empty", lambda q, k: apply_from_inv_freq(q, np.arange(5), []), ValueError, "inv_freq must hold at least one"),
    ("inv_freq strings", lambda q, k: apply_from_inv_freq(q, np.arange(5), ["1"] * 8), TypeError, "inv_freq must hold real numbers"),
    ("inv_freq complex", lambda q, k: apply_from_inv_freq(q, np.arange(5), np.ones(8, complex)), TypeError, "inv_freq must hold real numbers"),
    ("inv_freq booleans", lambda q, k: apply_from_inv_freq(q, np.arange(5), [True] * 8), TypeError, "inv_freq must hold real numbers"),
    ("attention_factor NaN", lambda q, k: apply_from_inv_freq(q, np.arange(5), INV8, math.nan), ValueError, "attention_factor must be finite"),
    ("attention_factor inf", lambda q, k: apply_qk_from_inv_freq(q, k, np.arange(5), INV8, -math.inf), ValueError, "attention_factor must be finite"),
    ("attention_factor string", lambda q, k: apply_from_inv_freq(q, np.arange(5), INV8, "1.0"), TypeError, "attention_factor must be a real number"),
    ("backend unknown", lambda q, k: apply_qk_from_inv_freq(q, k, np.arange(5), INV8, backend="cuda"), ValueError, "backend 'cuda' is not a fastpe backend"),
]


@pytest.mark.parametrize("call, exc, match", [c[1:] for c in BAD_APPLY], ids=[c[0] for c in BAD_APPLY])
def test_bad_apply_input_is_refused_before_anything_is_written(call, exc, match):
    q, k = _x((2, 3, 5, 16), 1), _x((2, 1, 5, 16), 2)
    q0, k0 = q.copy(), k.copy()
    with pytest.raises(exc, match=match):
        call(q, k)
    assert same_bits(q, q0) and same_bits(k, k0), "something was written before validation passed"


def test_positions_aliasing_x_are_refused():
    q = np.zeros((2, 1, 5, 16), np.float32)
    positions = q.reshape(-1).view(np.uint32)[:5]
    with pytest.raises(ValueError, match="x must not share memory with positions"):
        apply_from_inv_freq(q, positions, INV8)


def test_the_largest_attention_factor_overflows_alike_on_every_backend(backend):
    """At |af| = 2**64 the rotation's doubles stay finite (the float32 result is the
    correctly rounded overflow, +-inf); near 2**900 ``x1 C - x2 S`` was ``inf - inf``, a
    NaN where the reference gives -inf."""
    x = np.full((2, 1, 4), 3e38, np.float32)
    want = np.array([_reference_rope.rotate_f32(3e38, 3e38, p, f, -2.0**64) for p in (1, 7) for f in (1.0, 0.25)])
    got = apply_from_inv_freq(x, [1, 7], [1.0, 0.25], -2.0**64, backend=backend)
    y1, y2 = got[:, 0, :2].reshape(-1), got[:, 0, 2:].reshape(-1)
    assert np.isinf(y1).all() and np.isinf(y2).all()
    assert same_bits(y1, want[:, 0].astype(np.float32)) and same_bits(y2, want[:, 1].astype(np.float32))


BAD_COS_SIN = [
    ("positions 2-D", dict(positions=np.zeros((2, 2), int)), ValueError, "positions must be 1-D"),
    ("positions >= 2**32", dict(positions=[2**32]), ValueError, r"positions must be < 2\*\*32"),
    ("odd rotary_dim", dict(rotary_dim=3), ValueError, "rotary_dim must be even"),
    ("only out_cos", dict(out_cos=np.zeros((3, 4), np.float32)), TypeError, "out_cos and out_sin must be given together"),
    ("out wrong shape", dict(out_cos=np.zeros((3, 5), np.float32), out_sin=np.zeros((3, 4), np.float32)), ValueError, r"out_cos must have shape \(3, 4\)"),
    ("out int", dict(out_cos=np.zeros((3, 4), int), out_sin=np.zeros((3, 4), int)), TypeError, "out_cos must be one of float32, float64, float16, bfloat16"),
    ("out dtypes differ", dict(out_cos=np.zeros((3, 4), np.float32), out_sin=np.zeros((3, 4))), TypeError, "out_sin must have dtype float32"),
    ("out read-only", dict(out_cos=np.zeros((3, 4), np.float32), out_sin=_ro(np.zeros((3, 4), np.float32))), ValueError, "out_sin is read-only"),
    ("out the same", dict(out_cos="same", out_sin="same"), ValueError, "out_cos must not share memory with out_sin"),
    ("layout", dict(layout="ne ox"), ValueError, "layout must be one of"),
    ("attention_factor", dict(attention_factor=math.inf), ValueError, "attention_factor must be finite"),
    ("attention_factor beyond 2**64", dict(attention_factor=1e300), ValueError, r"attention_factor must be at most 2\*\*64"),
    ("inv_freq", dict(inv_freq=[1.0, -1.0]), ValueError, "inv_freq must be >= 0"),
    ("out big-endian", dict(out_cos=np.zeros((3, 4), ">f4"), out_sin=np.zeros((3, 4), ">f4")), TypeError, "out_cos must be in native byte order"),
    ("out_sin big-endian", dict(out_cos=np.zeros((3, 4), np.float32), out_sin=np.zeros((3, 4), ">f4")), TypeError, "out_sin must have dtype float32, got >f4"),
    ("out_cos overlapping out_sin", dict(out_cos="halves", out_sin="halves"), ValueError, "out_cos must not share memory with out_sin"),
    ("out_cos holding inv_freq", dict(out_cos="inv", out_sin=np.zeros((3, 4), np.float32)), ValueError, "out_cos must not share memory with inv_freq"),
    ("out_sin holding positions", dict(out_cos=np.zeros((3, 4), np.float32), out_sin="pos"), ValueError, "out_sin must not share memory with positions"),
]


@pytest.mark.parametrize("kwargs, exc, match", [c[1:] for c in BAD_COS_SIN], ids=[c[0] for c in BAD_COS_SIN])
def test_bad_cos_sin_input(kwargs, exc, match):
    args = dict(positions=[1, 2, 3], inv_freq=[1.0, 0.5], attention_factor=1.0)
    args.update(kwargs)
    setup = next((v for v in (args.get("out_cos"), args.get("out_sin")) if isinstance(v, str)), None)
    if setup == "same":
        args["out_cos"] = args["out_sin"] = np.full((3, 4), 7, np.float32)
    elif setup == "halves":  # one buffer, the second cache starting a row early
        buf = np.full((5, 4), 7, np.float32)
        args["out_cos"], args["out_sin"] = buf[:3], buf[2:]
    elif setup == "inv":  # inv_freq read from the first row of out_cos
        args["out_cos"] = np.full((3, 4), 0.5, np.float32)
        args["inv_freq"] = args["out_cos"][0, :2]
    elif setup == "pos":  # positions read from the first row of out_sin
        args["out_sin"] = np.full((3, 4), 2, np.float32)
        args["positions"] = args["out_sin"].reshape(-1).view(np.uint32)[:3]
    outs = [args.get(n) for n in ("out_cos", "out_sin") if isinstance(args.get(n), np.ndarray)]
    before = [o.copy() for o in outs]
    with pytest.raises(exc, match=match):
        cos_sin_from_inv_freq(args.pop("positions"), args.pop("inv_freq"), args.pop("attention_factor"), **args)
    assert all(same_bits(o, b) for o, b in zip(outs, before))


# --------------------------------------------------------------------------- threads, fork


def test_sixteen_threads_at_once(backend, monkeypatch):
    if backend == "cython":  # split each call across helper threads too
        from fastpe._backends import cython as _cython

        monkeypatch.setattr(_cython, "PARALLEL_FROM", 1)
        monkeypatch.setattr(_cython, "MIN_BLOCK", 1)
    small = backend == "python"
    q_shape, k_shape = ((1, 2, 2, 8), (1, 1, 2, 8)) if small else ((1, 8, 256, 64), (1, 2, 256, 64))
    calls = 2 if small else 20
    inv = hf_inv_freq(q_shape[-1], 10000.0)
    rng = np.random.default_rng(21)
    jobs = []
    for t in range(16):
        pos = rng.integers(0, POSITION_LIMIT, q_shape[2], dtype=np.uint64).astype(np.uint32)
        q0, k0 = _x(q_shape, 100 + t), _x(k_shape, 200 + t)
        q, k = q0.copy(), k0.copy()
        apply_qk_from_inv_freq(q, k, pos, inv, 1.1, backend=backend)
        jobs.append((pos, q0, k0, q, k))
    barrier = threading.Barrier(16)
    failures: list[str] = []

    def worker(t):
        pos, q0, k0, want_q, want_k = jobs[t]
        try:
            barrier.wait()
            q, k = np.empty_like(q0), np.empty_like(k0)
            for _ in range(calls):
                np.copyto(q, q0)
                np.copyto(k, k0)
                apply_qk_from_inv_freq(q, k, pos, inv, 1.1, backend=backend)
                if not (same_bits(q, want_q) and same_bits(k, want_k)):
                    failures.append(f"thread {t}: result differs")
                    return
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(f"thread {t}: {exc!r}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not failures, failures


FORK_SCRIPT = r"""
import os, sys, multiprocessing as mp
import numpy as np
from fastpe.rope._core import apply_qk_from_inv_freq, cos_sin_from_inv_freq

BACKEND = sys.argv[1]
SHAPE = (1, 2, 3, 8) if BACKEND == "python" else (2, 8, 512, 64)
INV = 1.0 / 10000.0 ** (np.arange(0, SHAPE[-1], 2) / SHAPE[-1])
Q0 = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)

def run(_=None):
    q, k = Q0.copy(), Q0[:, :1].copy()
    apply_qk_from_inv_freq(q, k, None, INV, 1.1, offset=2**31, backend=BACKEND)
    c, s = cos_sin_from_inv_freq(np.arange(SHAPE[2]), INV, backend=BACKEND)
    return q.tobytes() + k.tobytes() + c.tobytes() + s.tobytes()

WANT = run()                             # the parent uses the parallel path first
pid = os.fork()
if pid == 0:
    os._exit(0 if run() == WANT else 3)
_, status = os.waitpid(pid, 0)
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"os.fork child: status {status}"
with mp.get_context("fork").Pool(2) as pool:
    assert all(r == WANT for r in pool.map(run, range(3)))
assert run() == WANT
print("fork-ok", BACKEND)
"""


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_fork_after_use(backend, tmp_path):
    script = tmp_path / "rope_fork.py"
    script.write_text(textwrap.dedent(FORK_SCRIPT))
    try:
        proc = subprocess.run([sys.executable, str(script), backend], capture_output=True, text=True,
                              timeout=240, env=fastpe_env(), cwd=tmp_path)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"fork case hung: {exc}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fork-ok" in proc.stdout


# --------------------------------------------------------------------------- HF (torch)


def _hf(q, k, positions, inv_freq32, af):
    """HF transformers' computation, float32: LlamaRotaryEmbedding.forward (cos/sin caches,
    ``attention_scaling``) then apply_rotary_pos_emb with rotate_half."""
    import torch

    inv = torch.from_numpy(inv_freq32)
    pos = torch.from_numpy(positions.astype(np.int64))[None]  # position_ids (1, seq)
    inv_freq_expanded = inv[None, :, None].float().expand(1, -1, 1)
    freqs = (inv_freq_expanded.float() @ pos[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos() * af, emb.sin() * af

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    c, s = cos.unsqueeze(1), sin.unsqueeze(1)
    tq, tk = torch.from_numpy(q), torch.from_numpy(k)
    return (tq * c + rotate_half(tq) * s).numpy(), (tk * c + rotate_half(tk) * s).numpy(), cos[0].numpy(), sin[0].numpy()


def test_against_hf_float32(fast_backend):
    """fastpe within float32 accuracy of HF's float32 result, and closer to the exact values."""
    pytest.importorskip("torch", reason="torch is an optional peer")
    af = 1.0 + 0.1 * math.log(4.0)  # YaRN's attention factor at factor 4
    inv32 = hf_inv_freq(32, 10000.0, np.float32)  # what HF computes (float32)
    positions = np.arange(96, dtype=np.uint32) * 61 + 1000  # up to ~6800
    q, k = _x((1, 2, 96, 32), 1), _x((1, 1, 96, 32), 2)
    hq, hk, hcos, hsin = _hf(q, k, positions, inv32, af)
    exact_q, exact_k = q.copy(), k.copy()
    apply_qk_from_inv_freq(exact_q, exact_k, positions, inv32, af, backend="python")
    fq, fk = q.copy(), k.copy()
    apply_qk_from_inv_freq(fq, fk, positions, inv32, af, backend=fast_backend)
    theta = positions[:, None].astype(np.float64) * inv32.astype(np.float64)
    for x, h, f, e in ((q, hq, fq, exact_q), (k, hk, fk, exact_k)):
        mag = af * (np.abs(x[..., :16]) + np.abs(x[..., 16:])).astype(np.float64)
        mag = np.concatenate([mag, mag], axis=-1)
        # HF's angle is p * inv_freq rounded to float32: off by up to theta * 2**-24
        tol = mag * (np.concatenate([theta, theta], axis=-1)[None, None] * 2.0**-23 + 2.0**-20)
        assert (np.abs(f.astype(np.float64) - h) <= tol).all()
        err_fastpe = np.abs(f.astype(np.float64) - e)
        err_hf = np.abs(h.astype(np.float64) - e)
        assert err_fastpe.sum() < err_hf.sum() / 100
        assert ulp_distance(f, e).max() <= 1 or (err_fastpe <= ulp32(e) + 2.0**-44 * mag).all()
    cos, sin = cos_sin_from_inv_freq(positions, inv32, af, backend=fast_backend)
    ecos, esin = cos_sin_from_inv_freq(positions, inv32, af, backend="python")
    assert np.abs(cos - hcos).max() < 2.0**-10  # HF's float32 angles drift ~theta * 2**-24
    assert np.abs(cos.astype(np.float64) - ecos).sum() < np.abs(hcos.astype(np.float64) - ecos).sum() / 100
    assert np.abs(sin.astype(np.float64) - esin).sum() < np.abs(hsin.astype(np.float64) - esin).sum() / 100


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["neox", "gptj"])
def test_low_precision_caches_are_correctly_rounded(backend, dt, layout):
    """float16/bfloat16 caches: every value the correctly rounded one of the exact value
    (the reference's own rounding into that format), not float32 rounded again."""

    from fastpe import _dtypes
    from fastpe._exact import rope as _reference_rope

    pytest.importorskip("ml_dtypes")
    dtype = _dtypes.resolve(dt)
    fmt = _dtypes.format_of(dtype)
    n = 40 if backend == "python" else 6000
    pos = np.arange(n)
    inv = INV8
    af = 1.25
    shape = (n, 2 * len(inv))
    cos, sin = cos_sin_from_inv_freq(pos, inv, af, layout=layout, backend=backend,
                                     out_cos=np.empty(shape, dtype), out_sin=np.empty(shape, dtype))
    c32, s32 = cos_sin_from_inv_freq(pos, inv, af, layout=layout, backend=backend)
    naive = (c32.astype(dtype) != cos) | (s32.astype(dtype) != sin)
    rows = set(np.flatnonzero(naive.any(axis=1)).tolist()) | {0, 1, n - 1}
    for r in sorted(rows):
        for i, f in enumerate(inv):
            exact = _reference_rope.cos_sin_rounded(int(r), float(f), af, fmt)
            j = i if layout == "neox" else 2 * i
            assert (float(cos[r, j]), float(sin[r, j])) == exact, (r, i)
    if dt == "float16" and backend != "python":
        assert naive.any(), "expected some float32 values that are float16 ties"


def test_kept_table_buffer_reuse_nesting_and_overflow(monkeypatch):
    """The per-thread table buffer of the compiled walk: a call after a larger or smaller one,
    a chunk larger than the buffer (allocated apart), and a walk started while another holds
    the buffer (its own tables) all give the bits of the reference."""
    rng = np.random.default_rng(41)
    inv = hf_inv_freq(32, 10000.0)
    cases = []
    for seq in (97, 5, 300, 1):
        positions = rng.integers(0, POSITION_LIMIT, seq, dtype=np.uint64).astype(np.uint32)
        cases.append((positions, _x((1, 3, seq, 32), seq)))

    def reference(positions, x):
        y = x.copy()
        apply_from_inv_freq(y, positions, inv, 1.0, backend="python")
        return y

    wants = [reference(p, x) for p, x in cases]
    with monkeypatch.context() as m:
        m.setattr(_rope_plan, "SCRATCH_DOUBLES", 100 * 2 * 16)  # 100 positions fit, 300 do not
        m.setattr(_rope_plan, "_local", threading.local())
        for backend in FAST:
            for (positions, x), want in zip(cases, wants):
                y = x.copy()
                apply_from_inv_freq(y, positions, inv, 1.0, backend=backend)
                assert same_bits(y, want), (backend, positions.size)
            # a walk in progress holds the buffer: a second one gets fresh tables
            positions, x = cases[0]
            outer = _rope_plan.apply_chunks(x.copy(), None, positions, inv.size)
            _, held, _, _ = next(outer)
            held[...] = 7.0
            y = x.copy()
            apply_from_inv_freq(y, positions, inv, 1.0, backend=backend)
            assert same_bits(y, wants[0]) and np.all(held == 7.0), backend
            outer.close()
            assert not _rope_plan._local.busy


@pytest.mark.parametrize("backend", FAST)
def test_subnormal_frequencies_keep_the_signs_of_their_zeros(backend):
    """A subnormal inverse frequency (an extreme scaling factor's) underflows the kernels'
    words; such calls are computed exactly, so a negative attention factor's -0.0 sines and
    the rotations built on them are the reference's bits."""
    inv = [5e-324, 2.0**-1030, 0.0, 0.5]
    positions = [0, 1, 3, 4096]
    for dtype in (np.float32, np.float16, np.float64):
        got = [np.empty((4, 8), dtype) for _ in range(2)]
        want = [np.empty((4, 8), dtype) for _ in range(2)]
        cos_sin_from_inv_freq(positions, inv, -0.5, out_cos=got[0], out_sin=got[1], backend=backend)
        cos_sin_from_inv_freq(positions, inv, -0.5, out_cos=want[0], out_sin=want[1], backend="python")
        assert all(same_bits(g, w) for g, w in zip(got, want)), dtype
        assert np.signbit(got[1][1:, 0]).all() and not np.signbit(got[1][0, 0])
    x = _x((1, 2, 4, 8), 3)
    x[..., 0] = 0.0  # x1 = 0: the rotated value is -x2 * S, whose zero carries S's sign
    a, b = x.copy(), x.copy()
    apply_from_inv_freq(a, np.array(positions), inv, -0.5, backend=backend)
    apply_from_inv_freq(b, np.array(positions), inv, -0.5, backend="python")
    assert same_bits(a, b)
