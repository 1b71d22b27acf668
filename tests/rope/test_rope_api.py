"""``fastpe.rope``'s public API: the scaling rules composed with the exact cos/sin core.

* ``cos_sin`` / ``apply_`` / ``apply_qk_`` are ``fastpe.rope._core`` fed with
  ``fastpe.rope.inv_freq`` (bit for bit), including the sequence length a length-dependent
  rule sees when ``seq_len`` is None (HF's ``max(position_ids) + 1``);
* end to end against HF transformers' rotary module (cos/sin at small positions, where
  HF's float32 angles are still accurate), for every rope_type;
* rotations against a plain NumPy rotation built from the caches, in both layouts;
* ``permute_qk_weight``: round trips, and equal attention scores across layouts;
* bad input leaves every array untouched.
"""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from fastpe import rope
from conftest import fastpe_env
from support.cli import same_bits
from support.inputs import check_out_contract, LLAMA3, YARN, longrope


@pytest.fixture(scope="module")
def core():
    from fastpe.rope import _core

    return _core


def numpy_rotate(x, cos, sin, layout):
    """Plain float64 rotation of the last axis by ``(n, rotary_dim)`` caches broadcast over
    the position axis; dimensions past ``rotary_dim`` pass through."""
    x = np.asarray(x, dtype=np.float64)
    r = cos.shape[-1]
    out = x.copy()
    c, s = cos.astype(np.float64), sin.astype(np.float64)
    if layout == "neox":
        h = r // 2
        x1, x2 = x[..., :h], x[..., h:r]
        out[..., :h] = x1 * c[..., :h] - x2 * s[..., :h]
        out[..., h:r] = x2 * c[..., h:] + x1 * s[..., h:]
    else:
        x1, x2 = x[..., 0:r:2], x[..., 1:r:2]
        out[..., 0:r:2] = x1 * c[..., 0::2] - x2 * s[..., 0::2]
        out[..., 1:r:2] = x2 * c[..., 1::2] + x1 * s[..., 1::2]
    return out


SCALINGS = [
    pytest.param({}, {}, id="default"),
    pytest.param({"scaling": {"rope_type": "linear", "factor": 2.0}}, {}, id="linear"),
    pytest.param({"scaling": {"rope_type": "dynamic", "factor": 2.0}, "max_position_embeddings": 16}, {},
                 id="dynamic"),
    pytest.param({"scaling": YARN, "base": 1e4}, {}, id="yarn"),
    pytest.param({"scaling": LLAMA3, "base": 5e5}, {}, id="llama3"),
    pytest.param({"scaling": longrope(16)}, {"max_position_embeddings": 64}, id="longrope"),
]


# ================================================================================ cos_sin


@pytest.mark.any_backend
@pytest.mark.parametrize("kwargs, extra", SCALINGS)
@pytest.mark.parametrize("layout", ["neox", "gptj"])
def test_cos_sin_is_the_core_fed_with_inv_freq(core, backend, kwargs, extra, layout):
    kwargs = {**kwargs, **extra}
    positions = np.array([0, 1, 5, 17, 40, 3_000_000_000], dtype=np.uint32)
    cos, sin = rope.cos_sin(positions, 32, layout=layout, backend=backend, **kwargs)
    inv, attention = rope.inv_freq(32, seq_len=3_000_000_001, **kwargs)
    want = core.cos_sin_from_inv_freq(positions, inv, attention, layout=layout, backend=backend)
    assert same_bits(cos, want[0]) and same_bits(sin, want[1])
    assert cos.shape == (6, 32) and cos.dtype == np.float32
    # values: attention * cos(p * inv_freq), in float64 for the small positions
    angles = positions[:5, None].astype(np.float64) * inv
    expect = np.repeat(angles, 2, axis=1) if layout == "gptj" else np.concatenate([angles, angles], axis=1)
    np.testing.assert_allclose(cos[:5], attention * np.cos(expect), rtol=0, atol=2**-23)
    np.testing.assert_allclose(sin[:5], attention * np.sin(expect), rtol=0, atol=2**-23)


def test_cos_sin_seq_len_none_is_the_largest_position_plus_one(core):
    scaling = longrope(16)
    short_positions, long_positions = np.arange(16), np.arange(17)
    for positions, seq_len in ((short_positions, 16), (long_positions, 17), ([3, 40, 2], 41)):
        got = rope.cos_sin(positions, 32, scaling=scaling, max_position_embeddings=64)
        want = rope.cos_sin(positions, 32, scaling=scaling, max_position_embeddings=64, seq_len=seq_len)
        assert same_bits(got[0], want[0]) and same_bits(got[1], want[1])
    short = rope.cos_sin([1], 32, scaling=scaling, max_position_embeddings=64)
    forced_long = rope.cos_sin([1], 32, scaling=scaling, max_position_embeddings=64, seq_len=100)
    assert not np.array_equal(short[0], forced_long[0])
    dyn = {"rope_type": "dynamic", "factor": 2.0}
    a = rope.cos_sin([1, 100], 32, scaling=dyn, max_position_embeddings=16)
    b = rope.cos_sin([1, 100], 32, scaling=dyn, max_position_embeddings=16, seq_len=101)
    assert same_bits(a[0], b[0])
    assert rope.cos_sin([], 32, scaling=scaling, max_position_embeddings=64)[0].shape == (0, 32)


def test_cos_sin_float64_is_the_kernels_doubles(core):
    positions = np.array([0, 7, 4_000_000_000], dtype=np.uint32)
    c64, s64 = rope.cos_sin(positions, 16, scaling=YARN, dtype=np.float64)
    c32, s32 = rope.cos_sin(positions, 16, scaling=YARN)
    assert c64.dtype == np.float64 and c64.shape == (3, 16)
    inv, attention = rope.inv_freq(16, scaling=YARN)
    np.testing.assert_allclose(c64[:2, :8], attention * np.cos(positions[:2, None] * inv), rtol=0, atol=2**-44)
    np.testing.assert_allclose(s64[:2, 8:], attention * np.sin(positions[:2, None] * inv), rtol=0, atol=2**-44)
    # float32 caches are those doubles rounded, up to the 1-ULP tiny-value rule
    assert np.max(np.abs(c64.astype(np.float32).astype(np.float64) - c32)) <= np.max(np.spacing(np.abs(c32)))


@pytest.mark.any_backend
@pytest.mark.parametrize(
    "args, kwargs, exc, message",
    [
        pytest.param(([0, -1], 16), {}, ValueError, "positions must be >= 0", id="negative"),
        pytest.param(([[0, 1]], 16), {}, ValueError, "positions must be 1-D", id="2d"),
        pytest.param(([0.5], 16), {"scaling": longrope(8), "max_position_embeddings": 64}, ValueError,
                     "positions must be whole", id="fraction-longrope"),
        pytest.param(([0, 1], 16), {"dtype": np.int16}, TypeError, "dtype must be one of float32, float64, float16, bfloat16",
                     id="dtype-int"),
        pytest.param(([0, 1], 16), {"dtype": "nope"}, TypeError, "dtype", id="dtype-bad"),
        # byte-swapped: refused as dtype (it used to surface as "out_cos must be in native byte order")
        pytest.param(([0, 1], 16), {"dtype": ">f4"}, TypeError, "^dtype must be in native byte order", id="dtype->f4"),
        pytest.param(([0, 1], 16), {"dtype": np.dtype(">f8")}, TypeError, "^dtype must be in native byte order",
                     id="dtype->f8"),
        # a result the kernels cannot take is named by the key that caused it, not as inv_freq
        pytest.param(([0, 1], 16), {"scaling": {**longrope(8), "short_factor": [1e-4] + [1.0] * 7}}, ValueError,
                     r"^scaling\['short_factor'\]\[0\] = 0.0001 is too small", id="longrope-tiny-factor"),
        pytest.param(([0, 1], 16), {"scaling": {**YARN, "mscale": 1e308, "mscale_all_dim": 1e-308}}, ValueError,
                     r"^scaling\['mscale'\] = 1e\+308 and scaling\['mscale_all_dim'\]", id="yarn-mscale"),
        pytest.param(([0, 1], np.array([16, 16])), {}, TypeError, "^head_dim must be an integer", id="head-dim-array"),
        pytest.param(([0, 1], 16), {"layout": "hf"}, ValueError, "layout", id="layout"),
        pytest.param(([0, 1], 16), {"scaling": {"rope_type": "su"}}, ValueError, "short_factor", id="scaling"),
    ],
)
def test_cos_sin_bad_input(core, args, kwargs, exc, message):
    with pytest.raises(exc, match=message):
        rope.cos_sin(*args, **kwargs)


def test_cos_sin_partial_rotary(core):
    cos, sin = rope.cos_sin(np.arange(4), 64, scaling={"rope_type": "default", "partial_rotary_factor": 0.25})
    assert cos.shape == (4, 16)
    want = rope.cos_sin(np.arange(4), 64, rotary_dim=16)
    assert same_bits(cos, want[0]) and same_bits(sin, want[1])


# ================================================================================ against HF


@pytest.fixture(scope="module")
def hf_rotary():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    def cos_sin(head_dim, rope_parameters, max_position_embeddings, positions):
        config = LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                             max_position_embeddings=max_position_embeddings, num_hidden_layers=1, vocab_size=8,
                             intermediate_size=8, rope_parameters=copy.deepcopy(rope_parameters))
        module = LlamaRotaryEmbedding(config)
        pos = torch.as_tensor(np.asarray(positions, dtype=np.int64))[None]
        cos, sin = module(torch.zeros(1, pos.shape[1], head_dim), pos)
        return cos[0].double().numpy(), sin[0].double().numpy()

    return cos_sin


HF_MODULE_CASES = [
    pytest.param({"rope_type": "default", "rope_theta": 1e4}, 64, np.arange(40), id="default"),
    pytest.param({"rope_type": "linear", "rope_theta": 1e4, "factor": 4.0}, 64, np.arange(40), id="linear"),
    pytest.param({"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}, 16, np.arange(40), id="dynamic-grown"),
    pytest.param({"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}, 64, np.arange(40), id="dynamic-within"),
    pytest.param({"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 16},
                 64, np.arange(40), id="yarn"),
    pytest.param({**LLAMA3, "rope_theta": 5e5}, 131072, np.arange(40), id="llama3"),
    pytest.param({**longrope(32), "rope_theta": 1e4}, 64, np.arange(16), id="longrope-short"),
    pytest.param({**longrope(32), "rope_theta": 1e4}, 64, np.arange(40), id="longrope-long"),
]


@pytest.mark.parametrize("rope_parameters, mpe, positions", HF_MODULE_CASES)
def test_cos_sin_match_hf_rotary_embedding(core, hf_rotary, rope_parameters, mpe, positions):
    """HF's own module, forward pass included (its dynamic/longrope update from the
    positions): same caches to within HF's float32 error, which grows with the angle."""
    theirs = hf_rotary(64, rope_parameters, mpe, positions)
    ours = rope.cos_sin(positions, 64, scaling=rope_parameters, max_position_embeddings=mpe)
    inv, attention = rope.inv_freq(64, scaling=rope_parameters, max_position_embeddings=mpe,
                                   seq_len=int(positions.max()) + 1)
    max_angle = float(positions.max() * inv.max())
    # HF's float32 angle p * inv_freq is off by its inv_freq error (at most ~13 float32 ULP
    # for these configs, see test_rope_scaling.hf_bound_ulps) plus the product's rounding,
    # relative to the angle; then float32 cos/sin and the attention product add a few ULP
    tol = attention * 2**-24 * (4 + 16 * max_angle)
    for o, t in zip(ours, theirs):
        assert np.max(np.abs(o - t)) <= tol


# ================================================================================ apply_


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("kwargs, extra", SCALINGS)
def test_apply_rotates_like_the_caches(core, backend, layout, kwargs, extra):
    kwargs = {**kwargs, **extra}
    x = rand(7, 3, 32)  # (tokens, heads, head_dim)
    positions = np.array([0, 3, 9, 10, 11, 30, 2], dtype=np.int64)
    cos, sin = rope.cos_sin(positions, 32, layout=layout, **kwargs)
    want = numpy_rotate(x, cos[:, None, :], sin[:, None, :], layout)
    out = rope.apply_(x, positions, layout=layout, backend=backend, **kwargs)
    assert out is x
    np.testing.assert_allclose(x, want, rtol=0, atol=4e-6 * np.abs(want).max())


def test_apply_is_the_core_fed_with_inv_freq(core):
    x = rand(2, 4, 5, 16)  # (batch, heads, seq, head_dim)
    positions = np.array([[0, 1, 2, 3, 4], [20, 21, 22, 23, 24]])
    y = x.copy()
    rope.apply_(x, positions, scaling=longrope(8), max_position_embeddings=64)
    inv, attention = rope.inv_freq(16, scaling=longrope(8), max_position_embeddings=64, seq_len=25)
    core.apply_from_inv_freq(y, positions, inv, attention)
    assert same_bits(x, y)


def test_apply_partial_rotary_leaves_the_tail_alone(core):
    x = rand(5, 2, 48)
    tail = x[..., 16:].copy()
    rope.apply_(x, np.arange(5), rotary_dim=16)
    assert same_bits(x[..., 16:], tail)
    y = rand(5, 2, 48)
    rope.apply_(y, np.arange(5), scaling={"partial_rotary_factor": 1 / 3})  # int(48 / 3) = 16
    assert same_bits(x, y)


def test_apply_implicit_positions_and_offset(core):
    x, y = rand(2, 3, 6, 16), rand(2, 3, 6, 16)  # (batch, heads, seq, head_dim)
    rope.apply_(x, offset=10)
    rope.apply_(y, np.arange(10, 16))
    assert same_bits(x, y)
    # a length-dependent rule sees offset + seq as the length
    s = longrope(8)
    x, y = rand(4, 2, 16, seed=1), rand(4, 2, 16, seed=1)
    rope.apply_(x, offset=14, scaling=s, max_position_embeddings=64)  # positions 14..17: long
    rope.apply_(y, np.arange(14, 18), scaling=s, max_position_embeddings=64, seq_len=18)
    assert same_bits(x, y)


@pytest.mark.any_backend
def test_apply_qk_equals_two_applies(core, backend):
    q, k = rand(6, 8, 32, seed=1), rand(6, 2, 32, seed=2)  # grouped-query: 8 q heads, 2 k heads
    q2, k2 = q.copy(), k.copy()
    positions = np.arange(100, 106)
    out = rope.apply_qk_(q, k, positions, scaling=LLAMA3, base=5e5, backend=backend)
    assert out[0] is q and out[1] is k
    rope.apply_(q2, positions, scaling=LLAMA3, base=5e5, backend=backend)
    rope.apply_(k2, positions, scaling=LLAMA3, base=5e5, backend=backend)
    assert same_bits(q, q2) and same_bits(k, k2)


def test_apply_works_on_a_torch_tensor_through_numpy(core):
    torch = pytest.importorskip("torch")
    t = torch.randn(4, 2, 16)
    before = t.clone()
    rope.apply_(t.numpy(), np.arange(4))  # a view: the tensor rotates in place
    assert not torch.equal(t, before)
    assert torch.allclose(t.norm(dim=-1), before.norm(dim=-1), rtol=1e-5)


BAD_APPLY = [
    pytest.param({"scaling": {"rope_type": "ntk"}}, ValueError, "rope_type", id="scaling"),
    pytest.param({"scaling": {"rope_type": "yarn"}}, ValueError, "factor", id="missing-factor"),
    pytest.param({"rotary_dim": 7}, ValueError, "rotary_dim", id="odd-rotary"),
    pytest.param({"rotary_dim": 64}, ValueError, "rotary_dim", id="rotary-too-big"),
    pytest.param({"base": 0.5}, ValueError, "base", id="base"),
    pytest.param({"head_dim": 32}, ValueError, "head_dim", id="head-dim-mismatch"),
    pytest.param({"layout": "llama"}, ValueError, "layout", id="layout"),
    pytest.param({"positions": [1, 2, 3]}, ValueError, "positions", id="positions-length"),
    pytest.param({"positions": [-1, 0, 1, 2]}, ValueError, "positions", id="positions-negative"),
    pytest.param({"positions": [0, 1, 2, 3], "scaling": longrope(8, 2), "max_position_embeddings": 64,
                  "seq_len": -1}, ValueError, "seq_len", id="seq-len"),
    pytest.param({"positions": [0.5, 1, 2, 3], "scaling": longrope(8), "max_position_embeddings": 64},
                 ValueError, "positions", id="positions-fraction-longrope"),
    # integer arguments of every form: numpy arrays (numpy's "truth value is ambiguous"
    # before), bools, floats, huge ints
    pytest.param({"head_dim": np.array([16, 16])}, TypeError, "^head_dim must be an integer, got ndarray",
                 id="head-dim-array"),
    pytest.param({"head_dim": True}, TypeError, "^head_dim must be an integer, got bool", id="head-dim-bool"),
    pytest.param({"head_dim": 16.0}, TypeError, "^head_dim must be an integer, got float", id="head-dim-float"),
    pytest.param({"rotary_dim": np.array(8)}, TypeError, "^rotary_dim must be an integer", id="rotary-dim-0d"),
    pytest.param({"rotary_dim": 10**400}, ValueError, "^rotary_dim must be <= head_dim", id="rotary-dim-huge"),
    pytest.param({"positions": None, "offset": np.array([1])}, TypeError, "^offset must be an integer", id="offset-array"),
    pytest.param({"positions": None, "offset": 10**400}, ValueError, r"^offset \+ seq must be <= 2\*\*32",
                 id="offset-huge"),
    pytest.param({"positions": None, "offset": None}, TypeError, "^offset must be an integer, got NoneType",
                 id="offset-none"),
    pytest.param({"offset": 3}, ValueError, r"^give positions or offset, not both \(got positions and offset=3\)",
                 id="offset-and-positions"),
    pytest.param({"offset": -1}, ValueError, "^offset must be >= 0", id="offset-negative-beside-positions"),
    pytest.param({"offset": 1.0}, TypeError, "^offset must be an integer", id="offset-float-beside-positions"),
    pytest.param({"seq_len": np.array([5])}, TypeError, "^seq_len must be an integer", id="seq-len-array"),
    pytest.param({"seq_len": 10**400}, ValueError, "^seq_len must be <=", id="seq-len-huge"),
    pytest.param({"scaling": {**longrope(8), "long_factor": [1e-5] + [1.0] * 7}, "seq_len": 100}, ValueError,
                 r"^scaling\['long_factor'\]\[0\] = 1e-05 is too small", id="longrope-tiny-factor"),
    pytest.param({"scaling": {**YARN, "mscale": 1e300, "mscale_all_dim": 1e-300}}, ValueError,
                 r"^scaling\['mscale'\] = 1e\+300", id="yarn-mscale"),
    # inputs that are views into the arrays written
    pytest.param({"positions": "view of q"}, ValueError, "^q must not share memory with positions|^x must not share",
                 id="positions-in-q"),
]


@pytest.mark.any_backend
@pytest.mark.parametrize("kwargs, exc, message", BAD_APPLY)
def test_bad_input_leaves_x_untouched(core, kwargs, exc, message):
    kwargs = dict(kwargs)
    positions = kwargs.pop("positions", np.arange(4))
    q, k = rand(4, 2, 16), rand(4, 1, 16)
    if isinstance(positions, str):  # the first four floats of q, whole numbers
        q.reshape(-1)[:4] = np.arange(4)
        positions = q.reshape(-1)[:4]
    q0, k0 = q.copy(), k.copy()
    with pytest.raises(exc, match=message):
        rope.apply_(q, positions, **kwargs)
    with pytest.raises(exc, match=message):
        rope.apply_qk_(q, k, positions, **kwargs)
    assert same_bits(q, q0) and same_bits(k, k0)


@pytest.mark.any_backend
def test_bad_k_leaves_q_untouched(core):
    q = rand(4, 2, 16)
    q0 = q.copy()
    with pytest.raises((TypeError, ValueError)):
        rope.apply_qk_(q, rand(4, 2, 16).astype(np.float64), np.arange(4))
    assert same_bits(q, q0)


@pytest.mark.any_backend
def test_apply_rejects_non_arrays():
    with pytest.raises(TypeError, match="x must be"):
        rope.apply_([[1.0, 2.0]], [0])


@pytest.mark.any_backend
@pytest.mark.parametrize("x, exc, message", [
    # a 0-d array has an empty shape: it was "x must be a numpy.ndarray, got ndarray"
    pytest.param(np.array(1.0, np.float32), ValueError, r"^x must have shape .* got a 0-D array of shape \(\)",
                 id="0-d"),
    pytest.param(np.zeros(4, np.float32), ValueError, r"^x must have shape .* got a 1-D array", id="1-d"),
    pytest.param(np.zeros((4, 1, 8), ">f4"), TypeError, "^x must have dtype float32 in native byte order, got '>f4'",
                 id="big-endian"),
    pytest.param(np.zeros((4, 1, 8), np.float16), TypeError, "^x must have dtype float32, got float16", id="float16"),
    pytest.param(np.zeros((4, 1, 16), np.float32)[..., ::2], ValueError, "^x must be C-contiguous", id="strided"),
])
def test_apply_says_what_is_wrong_with_x(x, exc, message):
    with pytest.raises(exc, match=message):
        rope.apply_(x, np.arange(x.shape[0] if x.ndim else 1))
    with pytest.raises(exc, match=message.replace("^x", "^k")):
        rope.apply_qk_(np.zeros((x.shape[0] if x.ndim else 1, 1, 8), np.float32), x, np.arange(4))


def test_apply_qk_refuses_inputs_sharing_memory_with_what_it_writes():
    buf = np.zeros((8, 1, 16), np.float32)
    q, k = buf[:4], buf[4:]
    rope.apply_qk_(q, k, np.arange(4))  # halves of one buffer: apart, fine
    with pytest.raises(ValueError, match="^k must not share memory with q"):
        rope.apply_qk_(buf[:5], buf[3:], np.arange(5))
    k.reshape(-1)[:4] = np.arange(4)
    before = buf.copy()
    with pytest.raises(ValueError, match="^k must not share memory with positions"):
        rope.apply_qk_(q, k, k.reshape(-1)[:4])  # float positions: converted by a copy, refused all the same
    with pytest.raises(ValueError, match="^x must not share memory with positions"):
        rope.apply_(q, q.reshape(-1).view(np.uint32)[:4])
    assert same_bits(buf, before)


# ================================================================================ permutation


@pytest.mark.any_backend
def test_permutation_round_trips_numpy_and_torch():
    w = rand(3 * 8, 5)
    g = rope.permute_qk_weight(w, 3, to="gptj")
    assert g.shape == w.shape and not np.shares_memory(g, w)
    assert same_bits(rope.permute_qk_weight(g, 3, to="neox"), w)
    # per head: gptj rows (0, 1, 2, 3, 4, 5, 6, 7) come from neox rows (0, 4, 1, 5, 2, 6, 3, 7)
    assert same_bits(g[8:16], w[8:16][[0, 4, 1, 5, 2, 6, 3, 7]])
    bias = np.arange(24.0)
    assert same_bits(rope.permute_qk_weight(rope.permute_qk_weight(bias, 3, to="neox"), 3, to="gptj"), bias)
    partial = rope.permute_qk_weight(w, 3, rotary_dim=4, to="gptj")
    assert same_bits(partial[:8], w[[0, 2, 1, 3, 4, 5, 6, 7]])
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(w.copy())
    tg = rope.permute_qk_weight(t, 3, to="gptj")
    assert isinstance(tg, torch.Tensor) and np.array_equal(tg.numpy(), g)
    assert torch.equal(rope.permute_qk_weight(tg, 3, to="neox"), t)
    assert np.array_equal(t.numpy(), w)  # input untouched


@pytest.mark.parametrize("rotary_dim", [None, 8])
def test_permuted_weights_give_the_same_attention_scores(core, rotary_dim):
    """NeoX weights rotated in NeoX layout == permuted weights rotated in GPT-J layout."""
    heads, kv_heads, head_dim, d_model, tokens = 4, 2, 16, 40, 9
    x = rand(tokens, d_model, seed=3)
    wq, wk = rand(heads * head_dim, d_model, seed=4), rand(kv_heads * head_dim, d_model, seed=5)
    positions = np.arange(50, 50 + tokens)
    kwargs = {"rotary_dim": rotary_dim, "scaling": LLAMA3, "base": 5e5}

    def scores(wq, wk, layout):
        q = np.ascontiguousarray((x @ wq.T).reshape(tokens, heads, head_dim))
        k = np.ascontiguousarray((x @ wk.T).reshape(tokens, kv_heads, head_dim))
        rope.apply_qk_(q, k, positions, layout=layout, **kwargs)
        k = np.repeat(k, heads // kv_heads, axis=1)
        return np.einsum("thd,shd->hts", q.astype(np.float64), k.astype(np.float64))

    neox = scores(wq, wk, "neox")
    perm = {"head_dim": head_dim, "rotary_dim": rotary_dim, "to": "gptj"}
    gptj = scores(rope.permute_qk_weight(wq, heads, **perm), rope.permute_qk_weight(wk, kv_heads, **perm), "gptj")
    np.testing.assert_allclose(gptj, neox, rtol=0, atol=2e-5 * np.abs(neox).max())
    # and the unpermuted weights in the wrong layout do not
    assert not np.allclose(scores(wq, wk, "gptj"), neox, rtol=0, atol=1e-3 * np.abs(neox).max())


@pytest.mark.any_backend
@pytest.mark.parametrize(
    "args, kwargs, exc, message",
    [
        pytest.param((rand(24, 5), 3), {"to": "llama"}, ValueError, "to must be", id="to"),
        pytest.param((rand(24, 5), 3), {}, TypeError, "to", id="to-missing"),
        pytest.param((rand(24, 5), 5), {"to": "gptj"}, ValueError, "multiple of n_heads", id="heads"),
        pytest.param((rand(24, 5), 3), {"head_dim": 6, "to": "gptj"}, ValueError, "n_heads \\* head_dim",
                     id="head-dim"),
        pytest.param((rand(24, 5), 3), {"rotary_dim": 5, "to": "gptj"}, ValueError, "rotary_dim", id="rotary-odd"),
        pytest.param((rand(24, 5), 3), {"rotary_dim": 10, "to": "gptj"}, ValueError, "rotary_dim", id="rotary-big"),
        pytest.param((rand(2, 24, 5), 3), {"to": "gptj"}, ValueError, "1-D .* or 2-D", id="3d"),
        pytest.param(([[1.0]], 1), {"to": "gptj"}, TypeError, "w must be", id="list"),
        pytest.param((rand(24, 5), 0), {"to": "gptj"}, ValueError, "n_heads", id="zero-heads"),
        # head_dim is derived from w here: name what was passed
        pytest.param((rand(0, 5), 1), {"to": "gptj"}, ValueError, r"^w.shape\[0\] = 0 gives head_dim = 0",
                     id="empty-w"),
        pytest.param((rand(3), 3), {"to": "neox"}, ValueError, r"^w.shape\[0\] = 3 gives head_dim = 1", id="1-row-heads"),
        pytest.param((rand(24, 5), np.array([3])), {"to": "gptj"}, TypeError, "^n_heads must be an integer", id="heads-array"),
        pytest.param((rand(24, 5), True), {"to": "gptj"}, TypeError, "^n_heads must be an integer", id="heads-bool"),
        pytest.param((rand(24, 5), 3), {"head_dim": np.array(8), "to": "gptj"}, TypeError, "^head_dim must be an integer",
                     id="head-dim-0d"),
        pytest.param((rand(24, 5), 3), {"rotary_dim": 8.0, "to": "gptj"}, TypeError, "^rotary_dim must be an integer",
                     id="rotary-float"),
        pytest.param((np.array(1.0), 1), {"to": "gptj"}, ValueError, "^w must be 1-D", id="0-d"),
        # an odd head and no rotary_dim: it said "rotary_dim must be even", an argument not passed
        pytest.param((rand(6, 2), 2), {"to": "gptj"}, ValueError,
                     r"^head_dim = w.shape\[0\] // n_heads = 3 is odd, and rotary_dim defaults to it", id="odd-head"),
        pytest.param((rand(6, 2), 2), {"head_dim": 3, "to": "neox"}, ValueError, "^head_dim = 3 is odd",
                     id="odd-head-dim"),
    ],
)
def test_permute_bad_input(args, kwargs, exc, message):
    with pytest.raises(exc, match=message):
        rope.permute_qk_weight(*args, **kwargs)


# ================================================================================ out= and the keywords


def test_cos_sin_out_is_a_pair_filled_and_returned(core, backend):
    positions = np.array([0, 3, 17, 4_000_000_000], dtype=np.uint32)
    for dtype in ("float32", "float64", "float16", "bfloat16"):
        if dtype == "bfloat16":
            pytest.importorskip("ml_dtypes")
        want = rope.cos_sin(positions, 16, scaling=YARN, dtype=dtype, layout="gptj", backend=backend)
        out = (np.full_like(want[0], 7), np.full_like(want[1], 7))
        got = rope.cos_sin(positions, 16, scaling=YARN, layout="gptj", out=out, backend=backend)
        assert got is out
        assert same_bits(out[0], want[0]) and same_bits(out[1], want[1])
        listed = [np.empty_like(want[0]), np.empty_like(want[1])]
        assert rope.cos_sin(positions, 16, scaling=YARN, layout="gptj", dtype=dtype, out=listed,
                            backend=backend) is listed
        assert same_bits(listed[0], want[0]) and same_bits(listed[1], want[1])
    assert rope.cos_sin(positions, 16)[0].dtype == np.float32  # dtype=None without out: float32


def _pair(shape=(3, 16), dtype=np.float32):
    return np.full(shape, 7, dtype), np.full(shape, 7, dtype)


def _strided():
    return np.full((3, 32), 7, np.float32)[:, ::2]


def _read_only():
    a = np.full((3, 16), 7, np.float32)
    a.setflags(write=False)
    return a


BAD_COS_SIN_OUT = [
    pytest.param(lambda: np.empty((3, 16), np.float32), {}, TypeError, r"^out must be a pair \(cos, sin\)",
                 id="one-array"),
    pytest.param(lambda: (np.empty((3, 16), np.float32),), {}, TypeError, "^out must be a pair", id="one-item"),
    pytest.param(lambda: (_pair()[0], _pair((3, 8))[1]), {}, ValueError, r"^out\[1\] must have shape \(3, 16\)",
                 id="shape"),
    pytest.param(lambda: _pair(dtype=np.int32), {}, TypeError, r"^out\[0\] must have dtype float32", id="dtype"),
    pytest.param(lambda: (_pair()[0], _pair(dtype=np.float64)[1]), {}, ValueError,
                 r"^out\[0\] and out\[1\] must have one dtype, got float32 and float64", id="two-dtypes"),
    pytest.param(lambda: _pair(), {"dtype": "float64"}, ValueError,
                 r"^dtype is float64 but out\[0\] has dtype float32", id="dtype-conflict"),
    pytest.param(lambda: (_strided(), _pair()[1]), {}, ValueError, r"^out\[0\] must be C-contiguous", id="strided"),
    pytest.param(lambda: (_pair()[0], _read_only()), {}, ValueError, r"^out\[1\] is read-only", id="read-only"),
    pytest.param(lambda: [_pair()[0].tolist(), _pair()[1]], {}, TypeError, r"^out\[0\] must be a numpy.ndarray",
                 id="list-item"),
    pytest.param(lambda: (lambda a: (a, a))(_pair()[0]), {}, ValueError,
                 r"^out\[0\] must not share memory with out\[1\]", id="same-array"),
    pytest.param(lambda: _pair(), {"layout": "hf"}, ValueError, "^layout", id="bad-layout"),
    pytest.param(lambda: _pair(), {"positions": [0, -1, 2]}, ValueError, "^positions must be >= 0", id="bad-positions"),
]


@pytest.mark.any_backend
@pytest.mark.parametrize("make, kwargs, exc, message", BAD_COS_SIN_OUT)
def test_cos_sin_bad_out_writes_nothing(core, make, kwargs, exc, message):
    out = make()
    before = [np.array(a, copy=True) for a in out] if isinstance(out, (tuple, list)) else None
    kwargs = dict(kwargs)
    positions = kwargs.pop("positions", [0, 1, 2])
    with pytest.raises(exc, match=message):
        rope.cos_sin(positions, 16, out=out, **kwargs)
    if before is not None:
        assert all(np.array_equal(np.asarray(a), b) for a, b in zip(out, before))


@pytest.mark.any_backend
def test_cos_sin_out_must_not_hold_the_positions(core):
    cos, sin = _pair((4, 16), np.float64)
    cos.reshape(-1)[:4] = [0, 1, 2, 3]
    before = cos.copy()
    with pytest.raises(ValueError, match=r"^out\[0\] must not share memory with positions"):
        rope.cos_sin(cos.reshape(-1)[:4], 16, out=(cos, sin))
    assert same_bits(cos, before)


@pytest.mark.any_backend
def test_inv_freq_out(core):
    check_out_contract(lambda **kw: rope.inv_freq(32, scaling=LLAMA3, base=5e5, **kw)[0], bad_dtype=np.float32,
                       bad_input=lambda out: rope.inv_freq(32, scaling={"rope_type": "ntk"}, out=out))
    out = np.empty(8)
    got, attention = rope.inv_freq(16, scaling=YARN, out=out)
    want, want_attention = rope.inv_freq(16, scaling=YARN)
    assert got is out and same_bits(out, want) and attention == want_attention
    with pytest.raises(ValueError, match=r"^out must have shape \(4,\)"):
        rope.inv_freq(16, rotary_dim=8, out=np.empty(8))  # rotary_dim / 2 frequencies


@pytest.mark.any_backend
def test_permute_qk_weight_out(core):
    w = rand(24, 5)
    check_out_contract(lambda **kw: rope.permute_qk_weight(w, 3, to="gptj", **kw), bad_dtype=np.float64,
                       alias=lambda out: rope.permute_qk_weight(out, 3, to="gptj", out=out),
                       bad_input=lambda out: rope.permute_qk_weight(w, 5, to="gptj", out=out))
    bias = rand(24).astype(np.float16)
    out = np.empty_like(bias)
    assert rope.permute_qk_weight(bias, 3, rotary_dim=4, to="neox", out=out) is out
    assert same_bits(out, rope.permute_qk_weight(bias, 3, rotary_dim=4, to="neox"))


@pytest.mark.any_backend
def test_permute_qk_weight_out_of_a_tensor(core):
    torch = pytest.importorskip("torch")
    w = torch.randn(24, 5)
    out = torch.full((24, 5), 7.0)
    assert rope.permute_qk_weight(w, 3, to="gptj", out=out) is out
    assert torch.equal(out, rope.permute_qk_weight(w, 3, to="gptj"))
    for bad, exc, message in ((np.empty((24, 5), np.float32), TypeError, "^out must be a torch tensor"),
                              (torch.full((24, 5), 7.0, dtype=torch.float64), TypeError, "^out must have dtype"),
                              (torch.full((24, 6), 7.0), ValueError, r"^out must have shape \(24, 5\)"),
                              (torch.full((5, 24), 7.0).t(), ValueError, "^out must be C-contiguous"),
                              (torch.full((24, 5), 7.0, requires_grad=True), ValueError, "^out requires grad"),
                              (w, ValueError, "^out must not share memory with w")):
        before = torch.as_tensor(bad).clone() if isinstance(bad, torch.Tensor) else None
        with pytest.raises(exc, match=message):
            rope.permute_qk_weight(w, 3, to="gptj", out=bad)
        if before is not None:
            assert torch.equal(bad.detach(), before.detach())


@pytest.mark.any_backend
def test_one_vocabulary():
    """dtype=None, out=None, backend last; offset an int 0; no backend where no kernel runs."""
    import inspect

    params = inspect.signature(rope.cos_sin).parameters
    assert list(params)[-3:] == ["dtype", "out", "backend"]
    assert params["dtype"].default is None and params["out"].default is None
    for fn in (rope.apply_, rope.apply_qk_):
        assert inspect.signature(fn).parameters["offset"].default == 0
    for fn in (rope.inv_freq, rope.permute_qk_weight):
        params = inspect.signature(fn).parameters
        assert params["out"].default is None and "backend" not in params and "dtype" not in params


# ================================================================================ imports


@pytest.mark.any_backend
def test_import_fastpe_rope_loads_no_kernels(tmp_path):
    code = textwrap.dedent(
        """
        import sys
        import fastpe.rope as r
        r.inv_freq(128, scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "llvmlite", "torch"))
        assert not heavy, heavy
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=fastpe_env(), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


# ==================================================================== letter case


@pytest.mark.parametrize("written, name", [("NEOX", "neox"), ("NeoX", "neox"), (" neox ", "neox"), ("GPTJ", "gptj"),
                                           ("GptJ", "gptj")])
def test_layout_names_are_read_in_any_case(written, name):
    """rope's layout names take any letter case, as backend and dtype names do: every entry
    point gives the bits of the lower-case name, and a Rotary records that name."""
    from fastpe.rope._core import apply_qk_from_inv_freq, cos_sin_from_inv_freq

    rotary = rope.Rotary(32, layout=written)
    assert rotary.layout == name and rotary == rope.Rotary(32, layout=name)
    positions = np.array([0, 5, 2**32 - 1])
    want = rope.cos_sin(positions, 32, layout=name)
    for got in (rope.cos_sin(positions, 32, layout=written), rotary.cos_sin(positions),
                cos_sin_from_inv_freq(positions, rope.inv_freq(32)[0], layout=written)):
        assert same_bits(got[0], want[0]) and same_bits(got[1], want[1])
    rng = np.random.default_rng(0)
    q0 = rng.standard_normal((3, 2, 32)).astype(np.float32)
    k0 = rng.standard_normal((3, 1, 32)).astype(np.float32)
    wq, wk = rope.apply_qk_(q0.copy(), k0.copy(), positions, layout=name)
    for fn in (lambda q, k: rope.apply_qk_(q, k, positions, layout=written),
               lambda q, k: apply_qk_from_inv_freq(q, k, positions, rope.inv_freq(32)[0], layout=written)):
        q, k = fn(q0.copy(), k0.copy())
        assert same_bits(q, wq) and same_bits(k, wk)
    w = rng.standard_normal((64, 8))
    assert same_bits(rope.permute_qk_weight(w, 2, to=written), rope.permute_qk_weight(w, 2, to=name))


def test_layout_names_in_any_case_through_torch():
    torch = pytest.importorskip("torch")
    from fastpe.torch import RotaryEmbedding

    assert RotaryEmbedding(32, layout="GPTJ").layout == "gptj"
    cos, _ = RotaryEmbedding(32, layout="GptJ").cos_sin(torch.arange(4))
    want, _ = rope.cos_sin(np.arange(4), 32, layout="gptj")
    assert same_bits(cos.numpy(), want)


@pytest.mark.parametrize("written, name", [("Llama3", "llama3"), ("LLAMA3", "llama3"), ("YaRN", "yarn"),
                                           ("Linear", "linear"), ("Dynamic", "dynamic"), ("Default", "default"),
                                           ("LongRoPE", "longrope"), ("SU", "longrope"), ("Proportional", "proportional")])
def test_rope_type_names_are_read_in_any_case(written, name):
    """A rope dict's ``rope_type`` (or legacy ``type``) in any letter case, passed verbatim
    and never modified, is the lower-case rule: the same spec, the same values."""
    params = {"llama3": LLAMA3, "yarn": YARN, "linear": {"factor": 2.0}, "dynamic": {"factor": 2.0},
              "default": {}, "longrope": longrope(16), "proportional": {"partial_rotary_factor": 0.5, "factor": 1.0}}
    base = {k: v for k, v in params[name].items() if k != "rope_type"}
    kw = dict(base=5e5, max_position_embeddings=131072 if name == "llama3" else 64)
    want = rope.resolve(32, scaling={**base, "rope_type": name if written != "SU" else "su"}, **kw)
    for key in ("rope_type", "type"):
        scaling = {**base, key: written}
        before = copy.deepcopy(scaling)
        assert rope.resolve(32, scaling=scaling, **kw) == want
        assert rope.Rotary(32, scaling=scaling, **kw).spec == want
        got = rope.cos_sin(np.array([0, 100]), 32, scaling=scaling, **kw)
        ref = rope.cos_sin(np.array([0, 100]), 32, scaling={**base, "rope_type": want.rope_type}, **kw)
        assert same_bits(got[0], ref[0]) and same_bits(got[1], ref[1])
        assert scaling == before


def test_rope_type_in_any_case_inside_a_model_config():
    """from_config reads the config's rope dict as given: 'Llama3' is llama3, Phi-3's legacy
    'SU' is longrope."""
    cfg = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 2, "rope_theta": 5e5,
           "max_position_embeddings": 131072, "rope_scaling": {**LLAMA3, "rope_type": "Llama3"}}
    want = {**cfg, "rope_scaling": LLAMA3}
    assert rope.Rotary.from_config(cfg) == rope.Rotary.from_config(want)
    n = 64
    phi = {"model_type": "phi3", "hidden_size": 256, "num_attention_heads": 2, "max_position_embeddings": 131072,
           "original_max_position_embeddings": 4096,
           "rope_scaling": {"type": "SU", "short_factor": [1.0] * n, "long_factor": [2.0] * n, "factor": 32.0}}
    assert rope.Rotary.from_config(phi).rope_type == "longrope"
    assert rope.Rotary.from_config(phi) == rope.Rotary.from_config(
        {**phi, "rope_scaling": {**phi["rope_scaling"], "type": "su"}})


def test_unknown_names_are_refused_as_before():
    with pytest.raises(ValueError, match=r"layout must be one of 'neox', 'gptj', got 'Halves'"):
        rope.Rotary(32, layout="Halves")
    with pytest.raises(ValueError, match=r"layout must be one of 'neox', 'gptj', got 'ne ox'"):
        rope.cos_sin([0], 32, layout="ne ox")
    with pytest.raises(TypeError, match="layout must be a string"):
        rope.Rotary(32, layout=1)
    with pytest.raises(ValueError, match=r"scaling\['rope_type'\] 'Llama-3' is not supported; choose one of"):
        rope.resolve(32, scaling={"rope_type": "Llama-3"})
    with pytest.raises(ValueError, match=r"to must be one of 'neox', 'gptj', got 'GPT-J'"):
        rope.permute_qk_weight(np.zeros((4, 2)), 1, to="GPT-J")
