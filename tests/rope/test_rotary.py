"""``fastpe.rope.Rotary``: a resolved rotary embedding, validated once and called many times.

* every call is bit-identical to the module function of the same arguments (on every
  backend), which is built on it;
* ``(batch, seq)`` positions; the length-dependent rules' values at any length;
* repr, equality, hashing, pickling, frozenness, read-only frequencies;
* bad arguments name themselves, in the constructor and in each call.
"""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from fastpe import rope
from fastpe.rope import Rotary
from support.cli import same_bits
from support.inputs import LLAMA3, YARN, longrope


#: Rotary / module keyword arguments (head_dim 32), one per rule and shape of configuration
CONFIGS = [
    pytest.param({}, id="default"),
    pytest.param({"base": 5e5, "rotary_dim": 16}, id="partial"),
    pytest.param({"scaling": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6}}, id="linear"),
    pytest.param({"scaling": {"rope_type": "dynamic", "factor": 2.0}, "max_position_embeddings": 16}, id="dynamic"),
    pytest.param({"scaling": YARN, "base": 1e4}, id="yarn"),
    pytest.param({"scaling": LLAMA3, "base": 5e5}, id="llama3"),
    pytest.param({"scaling": longrope(16), "max_position_embeddings": 64}, id="longrope"),
]
POSITIONS = np.array([0, 1, 5, 17, 40, 4095, 3_000_000_000, 2**32 - 1], dtype=np.uint32)


# ===================================================================== same bits as the module


@pytest.mark.any_backend
@pytest.mark.parametrize("kwargs", CONFIGS)
@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_cos_sin_is_the_module_function(backend, kwargs, layout, dtype):
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
    rotary = Rotary(32, layout=layout, **kwargs)
    for seq_len in (None, 10, 100):
        got = rotary.cos_sin(POSITIONS, dtype=dtype, seq_len=seq_len, backend=backend)
        want = rope.cos_sin(POSITIONS, 32, layout=layout, dtype=dtype, seq_len=seq_len, backend=backend, **kwargs)
        assert same_bits(got[0], want[0]) and same_bits(got[1], want[1])


@pytest.mark.parametrize("kwargs", CONFIGS)
def test_inv_freq_and_attention_factor_are_the_module_function(kwargs):
    rotary = Rotary(32, **kwargs)
    for seq_len in (None, 0, 1, 16, 17, 64, 65, 2**32):
        inv, attention = rope.inv_freq(32, seq_len=seq_len, **kwargs)
        assert same_bits(rotary.inv_freq_at(seq_len), inv)
        assert rotary.attention_factor_at(seq_len) == attention
    inv, attention = rope.inv_freq(32, **kwargs)
    assert same_bits(rotary.inv_freq, inv) and rotary.attention_factor == attention
    assert rotary.spec == rope.resolve(32, **kwargs)


@pytest.mark.any_backend
@pytest.mark.parametrize("kwargs", CONFIGS)
@pytest.mark.parametrize("layout", ["neox", "gptj"])
def test_apply_is_the_module_function(backend, kwargs, layout):
    rng = np.random.default_rng(3)
    rotary = Rotary(32, layout=layout, **kwargs)
    q0 = rng.standard_normal((2, 4, 5, 32)).astype(np.float32)
    k0 = rng.standard_normal((2, 2, 5, 32)).astype(np.float32)
    grid = np.stack([POSITIONS[:5], POSITIONS[3:]])
    for positions, offset, seq_len in ((POSITIONS[:5], 0, None), (grid, 0, None), (None, 4090, None),
                                       (None, 0, 70), (grid, 0, 3)):
        q, k = q0.copy(), k0.copy()
        assert rotary.apply_qk_(q, k, positions, offset=offset, seq_len=seq_len, backend=backend) == (q, k)
        wq, wk = q0.copy(), k0.copy()
        rope.apply_qk_(wq, wk, positions, offset=offset, seq_len=seq_len, layout=layout, backend=backend, **kwargs)
        assert same_bits(q, wq) and same_bits(k, wk)
        x = q0.copy()
        assert rotary.apply_(x, positions, offset=offset, seq_len=seq_len, backend=backend) is x
        assert same_bits(x, wq)
    tokens = rng.standard_normal((5, 3, 32)).astype(np.float32)  # (tokens, heads, head_dim)
    a, b = tokens.copy(), tokens.copy()
    rotary.apply_(a, POSITIONS[:5], backend=backend)
    rope.apply_(b, POSITIONS[:5], layout=layout, backend=backend, **kwargs)
    assert same_bits(a, b)


@pytest.mark.any_backend
@pytest.mark.parametrize("kwargs", CONFIGS)
def test_batch_seq_positions_give_batch_seq_caches(backend, kwargs):
    """``(batch, seq)`` positions: ``(batch, seq, rotary_dim)`` caches, row ``[b, s]`` that of
    position ``positions[b, s]``, the length-dependent rules seeing the largest of all."""
    rotary = Rotary(32, **kwargs)
    grid = np.array([[0, 1, 2, 3], [5, 17, 40, 2**32 - 1]], dtype=np.int64)
    cos, sin = rotary.cos_sin(grid, backend=backend)
    assert cos.shape == sin.shape == (2, 4, rotary.rotary_dim)
    flat = rotary.cos_sin(grid.reshape(-1), backend=backend)
    assert same_bits(cos.reshape(-1, rotary.rotary_dim), flat[0]) and same_bits(sin.reshape(8, -1), flat[1])
    out = (np.empty((2, 4, rotary.rotary_dim), np.float64), np.empty((2, 4, rotary.rotary_dim), np.float64))
    assert rotary.cos_sin(grid.tolist(), out=out, backend=backend) is out
    want = rotary.cos_sin(grid.reshape(-1), dtype="float64", backend=backend)
    assert same_bits(out[0].reshape(8, -1), want[0])
    empty = rotary.cos_sin(np.zeros((3, 0), np.int32), backend=backend)
    assert empty[0].shape == (3, 0, rotary.rotary_dim)


def test_the_module_functions_stay_one_dimensional():
    with pytest.raises(ValueError, match="positions must be 1-D"):
        rope.cos_sin([[0, 1]], 16)
    with pytest.raises(ValueError, match="positions must be 1-D"):
        Rotary(16).cos_sin(np.zeros((1, 2, 2), int))


# ======================================================================== what a Rotary holds


def test_attributes_are_the_resolved_parameters():
    rotary = Rotary(128, base=5e5, scaling=LLAMA3, max_position_embeddings=131072)
    assert (rotary.head_dim, rotary.rotary_dim, rotary.layout, rotary.rope_type) == (128, 128, "neox", "llama3")
    assert (rotary.base, rotary.factor, rotary.low_freq_factor, rotary.high_freq_factor) == (5e5, 8.0, 1.0, 4.0)
    assert rotary.original_max_position_embeddings == 8192 and rotary.max_position_embeddings == 131072
    assert rotary.beta_fast is None and rotary.short_factor is None  # not this rule's
    assert not rotary.length_dependent and Rotary(32, **CONFIGS[-1].values[0]).length_dependent
    assert rotary.attention_factor == 1.0
    assert rotary.inv_freq.dtype == np.float64 and rotary.inv_freq.shape == (64,)
    assert "factor" in dir(rotary) and "inv_freq_at" in dir(rotary)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        rotary.nope  # noqa: B018


def test_repr_names_the_rule_and_its_parameters():
    assert repr(Rotary(128, base=500000.0, scaling=LLAMA3)) == (
        "Rotary(llama3, head_dim=128, rotary_dim=128, base=500000.0, factor=8.0, low_freq_factor=1.0, "
        "high_freq_factor=4.0, original_max_position_embeddings=8192, layout=neox)")
    assert repr(Rotary(64, rotary_dim=16, layout="gptj")) == (
        "Rotary(default, head_dim=64, rotary_dim=16, base=10000.0, layout=gptj)")
    assert repr(Rotary(32, scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=16)) == (
        "Rotary(dynamic, head_dim=32, rotary_dim=32, base=10000.0, factor=2.0, max_position_embeddings=16, "
        "layout=neox)")
    text = repr(Rotary(32, scaling=longrope(16), max_position_embeddings=64))
    assert text.startswith("Rotary(longrope, head_dim=32, rotary_dim=32, base=10000.0, short_factor=[")
    assert "(16 values)" in text and "factor=4.0" in text and "original_max_position_embeddings=16" in text
    # longrope with an explicit factor does not read max_position_embeddings
    assert "max_position_embeddings=64" not in text.replace("original_max_position_embeddings", "")
    assert "truncate=True" in repr(Rotary(32, scaling=YARN))


def test_frozen_hashable_equal_and_picklable():
    a = Rotary(32, scaling=YARN, base=1e4)
    b = Rotary(32, scaling=dict(YARN), base=10000)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != Rotary(32, scaling=YARN, base=1e4, layout="gptj") and a != Rotary(32, scaling=YARN, base=2e4)
    assert a != "Rotary" and (a == object()) is False
    for name, value in (("head_dim", 64), ("factor", 2.0), ("inv_freq", None), ("_spec", None), ("new", 1)):
        with pytest.raises(AttributeError, match="frozen"):
            setattr(a, name, value)
    with pytest.raises(AttributeError, match="frozen"):
        del a.layout
    for clone in (pickle.loads(pickle.dumps(a)), copy.copy(a), copy.deepcopy(a)):
        assert clone == a and same_bits(clone.inv_freq, a.inv_freq)
        assert same_bits(clone.cos_sin(POSITIONS)[0], a.cos_sin(POSITIONS)[0])


def test_inv_freq_is_read_only_and_shared():
    rotary = Rotary(32, scaling=longrope(16), max_position_embeddings=64)
    with pytest.raises(ValueError, match="read-only"):
        rotary.inv_freq[0] = 0.0
    assert rotary.inv_freq_at(5) is rotary.inv_freq_at(16) is rotary.inv_freq  # short factors, one array
    assert rotary.inv_freq_at(17) is rotary.inv_freq_at(2**32)
    assert not np.array_equal(rotary.inv_freq_at(17), rotary.inv_freq)
    fresh, _ = rope.inv_freq(32, scaling=longrope(16), max_position_embeddings=64)
    kept = fresh.copy()
    fresh[:] = 0  # the module function's array is the caller's
    assert same_bits(rotary.inv_freq, kept)


def test_the_scaling_dict_is_copied_not_kept():
    scaling = {"rope_type": "linear", "factor": 2.0}
    rotary = Rotary(16, scaling=scaling)
    scaling["factor"] = 4.0
    assert rotary.factor == 2.0 and rotary == Rotary(16, scaling={"rope_type": "linear", "factor": 2.0})


def test_dynamic_values_follow_the_length():
    rotary = Rotary(32, scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=16)
    assert same_bits(rotary.inv_freq, Rotary(32).inv_freq)  # no scaling up to max_position_embeddings
    assert same_bits(rotary.inv_freq_at(16), rotary.inv_freq)
    grown = [rotary.inv_freq_at(n) for n in range(17, 17 + 100)]  # more lengths than the cache keeps
    assert all(a[-1] > b[-1] for a, b in zip(grown, grown[1:]))
    assert same_bits(rotary.inv_freq_at(17), grown[0])


# ========================================================================= bad arguments


@pytest.mark.parametrize("kwargs, exc, message", [
    pytest.param({"head_dim": 1}, ValueError, "head_dim must be >= 2", id="head-dim"),
    pytest.param({"head_dim": 32, "layout": "halves"}, ValueError, "layout must be one of", id="layout"),
    pytest.param({"head_dim": 32, "layout": None}, TypeError, "layout must be a string", id="layout-none"),
    pytest.param({"head_dim": 32, "base": 1.0}, ValueError, "base must be greater than 1", id="base"),
    pytest.param({"head_dim": 32, "rotary_dim": 33}, ValueError, "rotary_dim must be <= head_dim", id="rotary"),
    pytest.param({"head_dim": 32, "scaling": {"rope_type": "linear"}}, ValueError, r"scaling\['factor'\]",
                 id="factor"),
    pytest.param({"head_dim": 32, "scaling": {"rope_type": "dynamic", "factor": 2.0}}, ValueError,
                 "max_position_embeddings is required", id="dynamic-mpe"),
    pytest.param({"head_dim": 32, "max_position_embeddings": 0}, ValueError, "max_position_embeddings", id="mpe"),
])
def test_the_constructor_refuses_what_resolve_refuses(kwargs, exc, message):
    with pytest.raises(exc, match=message):
        Rotary(**kwargs)
    if "layout" not in kwargs:
        with pytest.raises(exc, match=message):
            rope.resolve(**kwargs)


def test_the_constructor_takes_keywords_only():
    with pytest.raises(TypeError):
        Rotary(32, 10000.0)  # noqa


@pytest.mark.parametrize("call, exc, message", [
    pytest.param(lambda r: r.cos_sin([-1]), ValueError, "positions", id="cos-sin-negative"),
    pytest.param(lambda r: r.cos_sin("01"), TypeError, "positions", id="cos-sin-str"),
    pytest.param(lambda r: r.cos_sin([[0, 1], [2]]), ValueError, "positions", id="cos-sin-ragged"),
    pytest.param(lambda r: r.cos_sin([[True, False]]), TypeError, "positions", id="cos-sin-bool-grid"),
    pytest.param(lambda r: r.cos_sin([1], dtype="int8"), (TypeError, ValueError), "dtype", id="cos-sin-dtype"),
    pytest.param(lambda r: r.cos_sin([1], seq_len=-1), ValueError, "seq_len", id="cos-sin-seq-len"),
    pytest.param(lambda r: r.cos_sin([1], out=np.empty((1, 32), np.float32)), TypeError, "out", id="cos-sin-out"),
    pytest.param(lambda r: r.cos_sin([[1, 2]], out=(np.empty((2, 32), np.float32),) * 2), ValueError,
                 r"out\[0\] must have shape \(1, 2, 32\)", id="cos-sin-grid-out"),
    pytest.param(lambda r: r.cos_sin([1], backend="nope"), ValueError, "backend", id="cos-sin-backend"),
    pytest.param(lambda r: r.apply_(np.zeros((2, 1, 16), np.float32)), ValueError, "head_dim = 32",
                 id="apply-head-dim"),
    pytest.param(lambda r: r.apply_(np.zeros((2, 1, 32), np.float64)), TypeError, "float32", id="apply-dtype"),
    pytest.param(lambda r: r.apply_(np.zeros((2, 1, 32), np.float32), [0, 1], offset=3), ValueError,
                 "positions or offset", id="apply-both"),
    pytest.param(lambda r: r.apply_(np.zeros((2, 1, 32), np.float32), [0]), ValueError, "positions",
                 id="apply-positions-shape"),
    pytest.param(lambda r: r.apply_(np.zeros((2, 1, 32), np.float32), offset=2**32 - 1), ValueError, "offset",
                 id="apply-offset"),
    pytest.param(lambda r: r.apply_(np.zeros((2, 1, 32), np.float32), seq_len=1.5), TypeError, "seq_len",
                 id="apply-seq-len"),
    pytest.param(lambda r: r.apply_qk_(np.zeros((2, 1, 32), np.float32), np.zeros((3, 1, 32), np.float32)),
                 ValueError, "tokens", id="qk-tokens"),
    pytest.param(lambda r: r.apply_qk_(np.zeros((2, 1, 32), np.float32), None), TypeError, "k", id="qk-none"),
])
def test_calls_refuse_bad_arguments_by_name_and_write_nothing(call, exc, message):
    rotary = Rotary(32, scaling=longrope(16), max_position_embeddings=64)
    with pytest.raises(exc, match=message):
        call(rotary)


def test_positions_inside_x_are_refused():
    x = np.zeros((4, 1, 8), np.float32)
    with pytest.raises(ValueError, match="must not share memory with positions"):
        Rotary(8).apply_(x, x.view(np.uint32)[:, 0, 0])


#: YaRN with an extreme factor makes subnormal inverse frequencies (about 1.3e-311 and
#: below) and, with a negative attention_factor (HF warns and multiplies by it), sines that
#: round to -0.0: the compiled kernels' words underflow there, and the prepared paths must
#: still give the reference's bits, signs of zeros included
SUBNORMAL_YARN = {"rope_type": "yarn", "factor": 1e307, "original_max_position_embeddings": 4096,
                  "attention_factor": -1.0}


@pytest.mark.filterwarnings("ignore::fastpe.rope.RopeConfigWarning")
@pytest.mark.parametrize("kind", ["plain-neox", "plain-gptj", "xpos", "mrope"])
def test_subnormal_frequencies_on_the_prepared_paths(kind):
    from conftest import FAST

    if kind == "mrope":
        r = Rotary(64, scaling={**SUBNORMAL_YARN, "mrope_section": [8, 12, 12]})
    elif kind == "xpos":
        r = Rotary(64, scaling=SUBNORMAL_YARN, xpos_scale_base=512)
    else:
        r = Rotary(64, scaling=SUBNORMAL_YARN, layout=kind.split("-")[1])
    inv = r.inv_freq
    assert ((inv > 0) & (inv < 2.0**-1022)).sum() >= 8 and r.attention_factor == -1.0
    pos = np.array([0, 1, 2, 3, 100, 2999])
    positions = np.stack([pos, pos // 2, pos // 3]) if kind == "mrope" else pos
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 4, len(pos), 64)).astype(np.float32)
    x[..., 0] = 0.0  # a zero x1: the rotated value is -x2 * af * sin, a tiny number or a zero

    def run(backend):
        dtypes = (np.float32,) if kind == "xpos" else (np.float32, np.float16)  # xPos caches: no float16
        caches = [np.asarray(c) for dt in dtypes for c in r.cos_sin(positions, dtype=dt, backend=backend)]
        q, k = x.copy(), x[:, :2].copy()
        r.apply_qk_(q, k, positions, backend=backend)
        return caches, [q, k]

    want_caches, want_qk = run("python")
    sin = want_caches[1][(np.atleast_2d(positions) > 0).all(0)]  # float32 sines (the queries' under xPos)
    assert np.signbit(sin[sin == 0]).all() and (sin == 0).any()  # where every position is > 0
    got = {backend: run(backend) for backend in FAST}
    for backend, (caches, qk) in got.items():
        assert all(same_bits(g, w) for g, w in zip(caches, want_caches)), backend
        # the rotation's values are the reference's; the sign of an exactly zero result is
        # IEEE's (x1 * C - x2 * S at position 0, where the exact value 0 has none)
        assert all(np.array_equal(g, w) for g, w in zip(qk, want_qk)), backend
        assert all(np.array_equal(np.signbit(g), np.signbit(w)) for g, w in zip(qk, want_qk) for g, w in
                   [(g[..., 1:, :], w[..., 1:, :])]), backend  # off position 0, the signs too
    for g, w in zip(got[FAST[0]][1], got[FAST[-1]][1]):
        assert same_bits(g, w)
