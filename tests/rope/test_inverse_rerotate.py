"""The inverse rotation (``apply_(..., inverse=True)``) and ``rerotate_`` of cached keys:
against the exact rotation (mpmath), the float64 caches, and each other."""

import mpmath
import numpy as np
import pytest

from fastpe import rope
from fastpe.rope import Rotary

BACKENDS = ("python", "numba", "cython")
MROPE = {"type": "mrope", "mrope_section": [2, 3, 3]}
EPS = np.finfo(np.float32).eps


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _exact_rotation(x1, x2, angle):
    mpmath.mp.prec = 200
    c, s = mpmath.cos(angle), mpmath.sin(angle)
    return float(x1 * c - x2 * s), float(x2 * c + x1 * s)


@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("scaling", [None, MROPE])
def test_apply_then_inverse_returns_the_input(layout, scaling):
    rotary = Rotary(16, scaling=scaling, layout=layout)
    x = _x((2, 3, 5, 16))
    pos = np.random.default_rng(1).integers(0, 2**32, size=(2, 5) if scaling is None else (3, 2, 5))
    y = x.copy()
    rotary.apply_(y, pos)
    rotary.apply_(y, pos, inverse=True)
    # each rotation is within 1 ULP of the exact one: twice, of the pair's norm
    norm = np.sqrt(x[..., :8] ** 2 + x[..., 8:] ** 2) if layout == "neox" else \
        np.sqrt(x[..., 0::2] ** 2 + x[..., 1::2] ** 2)
    bound = 4 * EPS * np.concatenate((norm, norm), -1) if layout == "neox" else 4 * EPS * np.repeat(norm, 2, -1)
    assert (np.abs(y - x) <= bound).all()


@pytest.mark.any_backend
@pytest.mark.parametrize("backend", BACKENDS)
def test_inverse_is_the_negated_angle(backend):
    rotary = Rotary(8)
    x = _x((4, 2, 8))
    pos = np.array([0, 3, 2**31, 2**32 - 1])
    y = x.copy()
    rotary.apply_(y, pos, inverse=True, backend=backend)
    for t in range(4):
        for h in range(2):
            for i in range(4):
                want = _exact_rotation(mpmath.mpf(float(x[t, h, i])), mpmath.mpf(float(x[t, h, i + 4])),
                                       -int(pos[t]) * mpmath.mpf(float(rotary.inv_freq[i])))
                got = (y[t, h, i], y[t, h, i + 4])
                for g, w in zip(got, want):
                    assert abs(float(g) - w) <= np.spacing(np.float32(abs(w))) + 2**-140


def test_inverse_same_bits_everywhere_and_the_float64_caches():
    rotary = Rotary(16, scaling=MROPE)
    q, k = _x((2, 4, 6, 16)), _x((2, 2, 6, 16), 1)
    pos = np.random.default_rng(2).integers(0, 10**6, size=(3, 2, 6))
    ref_q, ref_k = q.copy(), k.copy()
    rotary.apply_qk_(ref_q, ref_k, pos, inverse=True, backend="numba")
    for backend in BACKENDS:
        a, b = q.copy(), k.copy()
        rotary.apply_qk_(a, b, pos, inverse=True, backend=backend)
        assert np.array_equal(a, ref_q) and np.array_equal(b, ref_k)
    c, s = rotary.cos_sin(pos, dtype="float64")
    c, s = c[:, None, :, :8], s[:, None, :, :8]
    x1, x2 = q[..., :8].astype(np.float64), q[..., 8:].astype(np.float64)
    assert np.array_equal(ref_q[..., :8], (x1 * c + x2 * s).astype(np.float32))
    assert np.array_equal(ref_q[..., 8:], (x2 * c - x1 * s).astype(np.float32))
    # the module functions
    a = q.copy()
    rope.apply_(a, pos, scaling=MROPE, inverse=True)
    assert np.array_equal(a, ref_q)


def test_inverse_keeps_the_attention_factor():
    sc = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    rotary = Rotary(16, scaling=sc)
    af = rotary.attention_factor
    x = _x((1, 2, 5, 16))
    y = x.copy()
    rotary.apply_(y, np.arange(5))
    rotary.apply_(y, np.arange(5), inverse=True)  # the transpose: af**2 times the input
    np.testing.assert_allclose(y, x * af * af, rtol=1e-6, atol=1e-6)


@pytest.mark.any_backend
def test_inverse_refuses_a_non_bool_untouched():
    x = np.ones((2, 1, 8), np.float32)
    with pytest.raises(TypeError, match="inverse"):
        Rotary(8).apply_(x, inverse=1)
    with pytest.raises(TypeError, match="inverse"):
        Rotary(8).apply_qk_(x, x.copy(), inverse="yes")
    assert (x == 1).all()


# ------------------------------------------------------------------------- rerotate_


@pytest.mark.any_backend
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("delta", [1, 7, -5, 2**32 - 1, -(2**32 - 1)])
def test_rerotate_is_the_rotation_by_delta(backend, delta):
    rotary = Rotary(8)
    k = _x((3, 2, 8))
    y = k.copy()
    rotary.rerotate_(y, delta, backend=backend)
    for t in range(3):
        for i in range(4):
            want = _exact_rotation(mpmath.mpf(float(k[t, 0, i])), mpmath.mpf(float(k[t, 0, i + 4])),
                                   delta * mpmath.mpf(float(rotary.inv_freq[i])))
            for g, w in zip((y[t, 0, i], y[t, 0, i + 4]), want):
                assert abs(float(g) - w) <= np.spacing(np.float32(abs(w))) + 2**-140


def test_rerotate_composes_and_negative_is_the_inverse():
    rotary = Rotary(16, base=1e4)
    raw = _x((1, 2, 6, 16))
    pos = np.arange(6) + 100
    k = raw.copy()
    rotary.apply_(k, pos)
    shifted = k.copy()
    rotary.rerotate_(shifted, -37)
    direct = raw.copy()
    rotary.apply_(direct, pos - 37)
    np.testing.assert_allclose(shifted, direct, atol=8 * EPS * np.abs(raw).max(), rtol=0)
    back = k.copy()
    rotary.rerotate_(back, -37)
    inv = k.copy()
    rotary.apply_(inv, np.full(6, 37), inverse=True)
    assert np.array_equal(back, inv)


def test_rerotate_arrays_per_token_and_per_batch():
    rotary = Rotary(16)
    k = _x((2, 2, 4, 16))
    per_batch = k.copy()
    rotary.rerotate_(per_batch, np.array([3, -2]))
    per_token = k.copy()
    rotary.rerotate_(per_token, np.array([[3] * 4, [-2] * 4]))
    assert np.array_equal(per_batch, per_token)
    one = k[1:].copy()
    rotary.rerotate_(one, -2)
    assert np.array_equal(per_batch[1:], one)
    tokens = _x((4, 2, 16))
    a = tokens.copy()
    rotary.rerotate_(a, np.array([0, 1, -1, 5], dtype=np.int8))
    b = tokens[3:].copy()
    rotary.rerotate_(b, 5)
    assert np.array_equal(a[3:], b) and np.array_equal(a[0], tokens[0])


def test_rerotate_mrope_and_no_attention_factor_again():
    rotary = Rotary(16, scaling=MROPE)
    k = _x((1, 2, 3, 16))
    a = k.copy()
    rotary.rerotate_(a, np.array([4, -1, 2]))
    b = k.copy()
    rotary.rerotate_(b, np.array([[[4] * 3], [[-1] * 3], [[2] * 3]]))
    assert np.array_equal(a, b)
    # the rotation of each pair by its axis's delta
    plain = Rotary(16)
    for axis, delta in enumerate((4, -1, 2)):
        c = k.copy()
        plain.rerotate_(c, delta)
        cols = np.flatnonzero(np.repeat(np.arange(3), [2, 3, 3]) == axis)
        assert np.array_equal(a[..., cols], c[..., cols]) and np.array_equal(a[..., cols + 8], c[..., cols + 8])
    yarn = Rotary(16, scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64})
    assert yarn.attention_factor != 1
    z = k.copy()
    yarn.rerotate_(z, 0)
    assert np.array_equal(z, k)


def test_rerotate_refusals_name_the_argument_untouched():
    k = np.ones((1, 2, 3, 16), np.float32)
    dyn = Rotary(16, scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=64)
    with pytest.raises(ValueError, match="dynamic"):
        dyn.rerotate_(k, 1)
    longrope = Rotary(16, scaling={"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8,
                                   "original_max_position_embeddings": 64, "factor": 4.0},
                        max_position_embeddings=256)
    longrope.rerotate_(k.copy(), 1, seq_len=64)
    with pytest.raises(ValueError, match="longrope"):
        longrope.rerotate_(k, 1, seq_len=65)
    rotary = Rotary(16)
    for bad, err in ((2**32, ValueError), (-(2**32), ValueError), (1.0, TypeError), (True, TypeError),
                     (np.array([1.5]), TypeError), (np.zeros(5, int), ValueError), ("1", TypeError),
                     (np.array([2**32]), ValueError), (np.zeros((3,), int), ValueError)):
        with pytest.raises(err, match="delta"):
            rotary.rerotate_(k, bad)
    with pytest.raises(ValueError, match="delta"):
        Rotary(16, scaling=MROPE).rerotate_(k, np.array([1, 2]))
    assert (k == 1).all()
    rope.rerotate_(k, 0)
    assert (k == 1).all()
