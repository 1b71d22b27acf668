"""RoPE frequency rules: reference values, the exact twin, HF transformers, and bad input.

* ``fastpe.rope.inv_freq`` against :mod:`fastpe._exact.rope_scaling` (decimal, one
  exponential per column): both are the correctly rounded float64 of each rule's real
  value, so they must agree to 1 ULP (in practice they are identical).
* against HF transformers' own rope init functions (when installed), for every rope_type,
  within a bound derived from HF's float32 arithmetic (:func:`hf_bound_ulps`).
* every validation error names its argument, and nothing passed in is modified.
"""

from __future__ import annotations

import copy
import math
import types
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastpe import rope
from fastpe._exact import rope_scaling as twin
from fastpe.rope import _scaling
from support.hf_rope import hf_bound_ulps, inv_freq_ulps
from support.inputs import LLAMA3

#: every backend it calls is named, or it calls none: the first run of make test decides it
#: (tests/conftest.py deselects it in the default-only runs).  The LongRoPE dicts here are
#: mostly without a ``factor``, for the ratio rule of the attention factor: HF's advice to
#: set one (a RopeConfigWarning) is asserted in test_warnings.py, not in each value test
pytestmark = [pytest.mark.any_backend,
              pytest.mark.filterwarnings("ignore:.* has no 'factor'.*:fastpe.rope.RopeConfigWarning")]

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
RNG = np.random.default_rng(20240611)


def longrope(n, seed=0):
    rng = np.random.default_rng(seed)
    return {"rope_type": "longrope", "short_factor": [float(v) for v in rng.uniform(0.9, 3.0, n)],
            "long_factor": [float(v) for v in rng.uniform(1.0, 60.0, n)],
            "original_max_position_embeddings": 4096}


def ulps64(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b) / np.spacing(np.abs(b)))) if a.size else 0.0


# =========================================================================== reference values


def test_yarn_reference_values():
    """YaRN, head_dim 128, base 1e4, factor 4, original 4096 (the reference numbers the rope specification gives)."""
    spec = rope.resolve(128, base=1e4, scaling=YARN)
    assert _scaling.yarn_correction_range(spec) == (20.0, 46.0)
    inv, attention = rope.inv_freq(128, base=1e4, scaling=YARN)
    plain, _ = rope.inv_freq(128, base=1e4)
    assert attention == pytest.approx(1.1386294, abs=5e-8)
    assert attention == 0.1 * math.log(4) + 1  # HF's formula, exact in double here
    ratio = inv / plain
    assert inv.dtype == np.float64 and inv.shape == (64,)
    np.testing.assert_allclose(ratio[:21], 1.0, rtol=1e-15)
    np.testing.assert_allclose(ratio[46:], 0.25, rtol=1e-15)
    middle = ratio[21:46]
    assert np.all(np.diff(middle) < 0) and np.all((middle < 1) & (middle > 0.25))
    # the ramp is linear in the pair index: ratio = 1 - 0.75 * (i - 20) / 26
    np.testing.assert_allclose(middle, 1 - 0.75 * (np.arange(21, 46) - 20) / 26, rtol=1e-15)


def test_llama3_reference_values():
    """Llama-3.1, head_dim 128, base 5e5, factor 8, low 1, high 4, original 8192."""
    inv, attention = rope.inv_freq(128, base=5e5, scaling=LLAMA3)
    plain, _ = rope.inv_freq(128, base=5e5)
    ratio = inv / plain
    assert attention == 1.0
    np.testing.assert_array_equal(inv[:29], plain[:29])
    np.testing.assert_allclose(ratio[35:], 1 / 8, rtol=1e-15)
    middle = ratio[29:35]
    assert np.all((middle < 1) & (middle > 1 / 8)) and np.all(np.diff(middle) < 0)


def test_default_is_the_textbook_formula():
    inv, attention = rope.inv_freq(64)
    expected = [10000.0 ** (-2 * i / 64) for i in range(32)]
    assert attention == 1.0
    np.testing.assert_allclose(inv, expected, rtol=4e-16)
    assert inv[0] == 1.0


def test_linear_divides_by_the_factor():
    inv, _ = rope.inv_freq(64, base=1e6, scaling={"type": "linear", "factor": 4.0})
    plain, _ = rope.inv_freq(64, base=1e6)
    np.testing.assert_array_equal(inv, plain / 4)  # division by a power of two is exact


def test_partial_rotary_factor_and_rope_theta_from_the_dict():
    scaling = {"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25}
    inv, _ = rope.inv_freq(128, scaling=scaling)
    expected, _ = rope.inv_freq(128, base=1e6, rotary_dim=32)
    assert inv.shape == (16,)
    np.testing.assert_array_equal(inv, expected)
    # agreeing explicit values are fine; HF's int() truncation is followed
    np.testing.assert_array_equal(rope.inv_freq(128, base=1e6, rotary_dim=32, scaling=scaling)[0], expected)
    assert rope.resolve(100, scaling={"partial_rotary_factor": 0.29}).rotary_dim == 28  # int(28.999...)


def test_dynamic_depends_on_the_length_beyond_max_position_embeddings():
    scaling = {"rope_type": "dynamic", "factor": 2.0}
    plain, _ = rope.inv_freq(64)
    for seq_len in (None, 1, 2048):
        np.testing.assert_array_equal(
            rope.inv_freq(64, scaling=scaling, seq_len=seq_len, max_position_embeddings=2048)[0], plain)
    longer, _ = rope.inv_freq(64, scaling=scaling, seq_len=4096, max_position_embeddings=2048)
    # base * (2 * 4096/2048 - 1) ** (64/62) = base * 3 ** (64/62)
    new_base = 10000.0 * 3.0 ** (64 / 62)
    np.testing.assert_allclose(longer, [new_base ** (-2 * i / 64) for i in range(32)], rtol=1e-14)
    assert longer[0] == 1.0 and np.all(longer[1:] < plain[1:])


def test_longrope_switches_to_long_factor_past_the_original_length():
    scaling = longrope(32)
    plain, _ = rope.inv_freq(64)
    short = plain / np.array(scaling["short_factor"])
    long = plain / np.array(scaling["long_factor"])
    for seq_len, expected in ((None, short), (0, short), (4096, short), (4097, long), (100_000, long)):
        inv, attention = rope.inv_freq(64, scaling=scaling, seq_len=seq_len, max_position_embeddings=131072)
        np.testing.assert_allclose(inv, expected, rtol=4e-16)
        assert attention == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)), rel=1e-15)


def test_longrope_attention_factor_rules():
    base = longrope(16)
    assert rope.inv_freq(32, scaling={**base, "factor": 1.0})[1] == 1.0
    assert rope.inv_freq(32, scaling={**base, "attention_factor": 0.5})[1] == 0.5
    f = rope.inv_freq(32, scaling={**base, "factor": 8.0}, max_position_embeddings=4096)[1]
    assert f == pytest.approx(math.sqrt(1 + math.log(8) / math.log(4096)), rel=1e-15)
    # without factor: max_position_embeddings / original
    assert rope.inv_freq(32, scaling=base, max_position_embeddings=4096)[1] == 1.0


def test_yarn_attention_factor_rules():
    f = 40.0
    deepseek = {**YARN, "factor": f, "mscale": 1.0, "mscale_all_dim": 0.707}
    expected = (0.1 * 1.0 * math.log(f) + 1) / (0.1 * 0.707 * math.log(f) + 1)
    assert rope.inv_freq(64, scaling=deepseek)[1] == pytest.approx(expected, rel=1e-15)
    equal = {**YARN, "mscale": 0.707, "mscale_all_dim": 0.707}
    assert rope.inv_freq(64, scaling=equal)[1] == 1.0
    assert rope.inv_freq(64, scaling={**YARN, "attention_factor": 1.25})[1] == 1.25
    assert rope.inv_freq(64, scaling={**YARN, "mscale": 0})[1] == 0.1 * math.log(4) + 1  # 0 counts as absent
    assert rope.inv_freq(64, scaling={**YARN, "factor": 1.0})[1] == 1.0


def test_yarn_without_truncation_uses_the_real_bounds():
    spec = rope.resolve(128, scaling={**YARN, "truncate": False})
    low, high = _scaling.yarn_correction_range(spec)
    assert 20 < low < 21 and 45 < high < 46
    assert low == pytest.approx(128 * math.log(4096 / (32 * 2 * math.pi)) / (2 * math.log(1e4)), rel=1e-15)


def test_original_max_position_embeddings_defaults_to_max_position_embeddings():
    a = rope.inv_freq(128, scaling={"rope_type": "yarn", "factor": 4.0}, max_position_embeddings=4096)
    b = rope.inv_freq(128, scaling=YARN)
    np.testing.assert_array_equal(a[0], b[0])
    assert a[1] == b[1]


def test_yarn_explicit_factor_wins_over_the_implicit_ratio():
    """Current HF (since transformers 4.56): an explicit factor is used even when
    max_position_embeddings / original_max_position_embeddings says otherwise."""
    with pytest.warns(rope.RopeConfigWarning, match=r"differs from max_position_embeddings / .* = 8.0: HF warns"):
        explicit = rope.inv_freq(128, scaling=YARN, max_position_embeddings=32768)
    assert explicit[1] == 0.1 * math.log(4) + 1  # factor 4, not 32768/4096 = 8
    np.testing.assert_array_equal(explicit[0], rope.inv_freq(128, scaling=YARN)[0])


def test_legacy_type_key_su_alias_and_ignored_keys():
    a = rope.inv_freq(64, scaling={"type": "linear", "factor": 2.0})
    # keys the type does not read are ignored, as HF ignores them, and named in a warning, as HF names them
    with pytest.warns(rope.RopeConfigWarning, match=r"scaling\['finetuned'\], scaling\['temporal'\] are not keys"):
        b = rope.inv_freq(64, scaling={"rope_type": "linear", "factor": 2.0, "finetuned": True, "temporal": [1]})
    c = rope.inv_freq(64, scaling={"rope_type": "linear", "type": "yarn", "factor": 2.0})  # rope_type wins
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[0], c[0])
    lr = longrope(32)
    d = rope.inv_freq(64, scaling={**lr, "rope_type": "su"}, seq_len=5000, max_position_embeddings=8192)
    e = rope.inv_freq(64, scaling=lr, seq_len=5000, max_position_embeddings=8192)
    np.testing.assert_array_equal(d[0], e[0])
    assert rope.inv_freq(64, scaling={"rope_type": None})[1] == 1.0


def test_returns_a_fresh_array_each_call():
    first, _ = rope.inv_freq(32, scaling=LLAMA3)
    first[:] = 0
    again, _ = rope.inv_freq(32, scaling=LLAMA3)
    assert again[0] == 1.0


def test_values_hf_takes_silently_are_taken_and_computed_as_hf_does():
    # an attention factor of 0 multiplies cos and sin by 0 (HF warns only below 0)
    assert rope.inv_freq(64, scaling={**YARN, "attention_factor": 0.0})[1] == 0.0
    assert rope.inv_freq(32, scaling={**longrope(16), "attention_factor": 0})[1] == 0.0
    # a beta of 0 is the default, as HF's ``get(...) or default``
    np.testing.assert_array_equal(rope.inv_freq(64, scaling={**YARN, "beta_fast": 0, "beta_slow": 0.0})[0],
                                  rope.inv_freq(64, scaling=YARN)[0])
    linear8 = rope.inv_freq(64, base=5e5, scaling={"rope_type": "linear", "factor": 8.0})[0]
    # llama3, low_freq_factor < 0: HF's first test (wavelength > O / low) holds everywhere
    np.testing.assert_array_equal(rope.inv_freq(64, base=5e5, scaling={**LLAMA3, "low_freq_factor": -1.0})[0], linear8)
    # yarn, base 1.01: low = 9693 > high = 63, HF's ramp is 1 everywhere below high
    np.testing.assert_array_equal(rope.inv_freq(64, base=1.01, scaling=YARN)[0],
                                  rope.inv_freq(64, base=1.01, scaling={"rope_type": "linear", "factor": 4.0})[0])
    # dynamic with a huge factor at L = M: no scaling at all (it gave inf frequencies)
    np.testing.assert_array_equal(
        rope.inv_freq(32, scaling={"rope_type": "dynamic", "factor": 1e300}, max_position_embeddings=64)[0],
        rope.inv_freq(32)[0])


# =========================================================================== the exact twin

#: (head_dim, kwargs, seq_len) covering every rope_type and branch
TWIN_CASES = [
    pytest.param(128, {}, None, id="default"),
    pytest.param(96, {"base": 1e6}, None, id="default-96"),
    pytest.param(2, {"base": 3.5}, None, id="default-2"),
    pytest.param(80, {"scaling": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.4}},
                 None, id="default-partial"),
    pytest.param(128, {"base": 1e4, "scaling": {"rope_type": "linear", "factor": 3.0}}, None, id="linear"),
    pytest.param(64, {"base": 7e5, "scaling": {"rope_type": "linear", "factor": 1.5}}, None, id="linear-1.5"),
    pytest.param(128, {"scaling": {"rope_type": "dynamic", "factor": 2.0}, "max_position_embeddings": 2048},
                 None, id="dynamic-init"),
    pytest.param(128, {"scaling": {"rope_type": "dynamic", "factor": 2.0}, "max_position_embeddings": 2048},
                 5000, id="dynamic-long"),
    pytest.param(48, {"base": 5e5, "scaling": {"rope_type": "dynamic", "factor": 7.25},
                      "max_position_embeddings": 4096}, 123_457, id="dynamic-48"),
    pytest.param(128, {"base": 1e4, "scaling": YARN}, None, id="yarn"),
    pytest.param(128, {"base": 1e4, "scaling": {**YARN, "truncate": False}}, None, id="yarn-no-truncate"),
    pytest.param(64, {"base": 1e4, "scaling": {"rope_type": "yarn", "factor": 40.0, "mscale": 1.0,
                                                "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1,
                                                "original_max_position_embeddings": 4096}},
                 None, id="yarn-deepseek"),
    pytest.param(64, {"base": 15e4, "scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                                                 "beta_slow": 1.0, "truncate": False,
                                                 "original_max_position_embeddings": 4096}},
                 None, id="yarn-gpt-oss"),
    pytest.param(64, {"base": 1e6, "scaling": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 4, "beta_slow": 4,
                                                "original_max_position_embeddings": 32768}},
                 None, id="yarn-equal-betas"),
    pytest.param(128, {"base": 5e5, "scaling": LLAMA3}, None, id="llama3"),
    pytest.param(64, {"base": 5e5, "scaling": {**LLAMA3, "factor": 32.0, "high_freq_factor": 2.5}},
                 None, id="llama3-32"),
    pytest.param(96, {"scaling": {**longrope(48), "rope_theta": 1e4}, "max_position_embeddings": 131072},
                 None, id="longrope-short"),
    pytest.param(96, {"scaling": longrope(48), "max_position_embeddings": 131072}, 131072, id="longrope-long"),
    pytest.param(64, {"scaling": {**longrope(16), "partial_rotary_factor": 0.5}, "max_position_embeddings": 8192},
                 9000, id="longrope-partial"),
    # a base near 1 pushes beta_fast's correction dimension past dim - 1: the clamps leave
    # high < low and the ramp runs backwards (HF's clamp of (i - low) / (high - low))
    pytest.param(64, {"base": 1.01, "scaling": YARN}, None, id="yarn-backward-ramp"),
    pytest.param(64, {"base": 1.01, "scaling": {**YARN, "truncate": False}}, None, id="yarn-backward-ramp-real"),
    pytest.param(64, {"base": 5e5, "scaling": {**LLAMA3, "low_freq_factor": -1.0}}, None, id="llama3-negative-low"),
    # 1 + factor * (L - M) / M: the two large terms of HF's form cancel for a huge factor
    pytest.param(32, {"scaling": {"rope_type": "dynamic", "factor": 1e300}, "max_position_embeddings": 64},
                 None, id="dynamic-huge-factor-init"),
    pytest.param(32, {"scaling": {"rope_type": "dynamic", "factor": 1e300}, "max_position_embeddings": 64},
                 65, id="dynamic-huge-factor-long"),
    pytest.param(32, {"scaling": {**YARN, "original_max_position_embeddings": 2**64}}, None, id="yarn-longest-original"),
    pytest.param(512, {"base": 1e6, "scaling": {"rope_type": "proportional", "partial_rotary_factor": 0.25}}, None,
                 id="proportional"),
    pytest.param(77, {"scaling": {"rope_type": "proportional", "partial_rotary_factor": 0.6, "factor": 3.0}}, None,
                 id="proportional-odd-head"),
    pytest.param(96, {"scaling": {**longrope(48), "short_mscale": 1.25, "long_mscale": 1.5},
                      "max_position_embeddings": 131072}, 131072, id="longrope-mscale-long"),
    pytest.param(96, {"scaling": {**longrope(48), "short_mscale": 1.25, "long_mscale": 1.5},
                      "max_position_embeddings": 131072}, None, id="longrope-mscale-short"),
    pytest.param(128, {"base": 5e5, "scaling": {**LLAMA3, "factor": 16.0, "high_freq_factor": 1.0}}, None,
                 id="llama3-equal-bands"),
    pytest.param(64, {"base": 5e5, "scaling": {**LLAMA3, "low_freq_factor": 4.0, "high_freq_factor": 1.0}}, None,
                 id="llama3-reversed-bands"),
    pytest.param(64, {"base": 5e5, "scaling": {**LLAMA3, "factor": 0.5}}, None, id="llama3-factor-below-1"),
    pytest.param(64, {"base": 1e4, "scaling": {**YARN, "factor": 0.25}}, None, id="yarn-factor-below-1"),
    pytest.param(64, {"base": 1e4, "scaling": {**YARN, "beta_fast": 1.0, "beta_slow": 8.0}}, None,
                 id="yarn-betas-reversed"),
]


@pytest.mark.filterwarnings("ignore::fastpe.rope.RopeConfigWarning")  # some cases are ones HF warns of
@pytest.mark.parametrize("head_dim, kwargs, seq_len", TWIN_CASES)
def test_agrees_with_the_exact_twin(head_dim, kwargs, seq_len):
    inv, attention = rope.inv_freq(head_dim, seq_len=seq_len, **kwargs)
    spec = rope.resolve(head_dim, **kwargs)
    ref, ref_attention = twin.inv_freq(spec, seq_len)
    assert inv.shape == (spec.rotary_dim // 2,) and inv.dtype == np.float64
    assert ulps64(inv, ref) <= 1
    assert ulps64([attention], [ref_attention]) <= 1
    assert type(attention) is float


def random_case(rng, kind):
    head_dim = int(rng.choice([16, 32, 48, 64, 80, 128]))
    kwargs = {"base": float(rng.choice([1e4, 5e5, 1e6])) * float(rng.uniform(0.5, 2))}
    if rng.integers(4) == 0:
        kwargs["rotary_dim"] = 2 * int(rng.integers(2, head_dim // 2 + 1))
    n = (kwargs.get("rotary_dim") or head_dim) // 2
    factor = float(rng.choice([1.0, 2.0, 4.0, 8.0, 40.0, rng.uniform(1, 64)]))
    mpe = int(rng.choice([2048, 4096, 32768]))
    seq_len = int(rng.integers(1, 4 * mpe))
    s = {"rope_type": kind}
    if kind in ("linear", "dynamic", "yarn", "llama3"):
        s["factor"] = factor
    if kind == "yarn":
        s.update(beta_fast=float(rng.choice([32, 16, 8])), beta_slow=float(rng.choice([1, 2])),
                 truncate=bool(rng.integers(2)), original_max_position_embeddings=mpe // 4)
        if rng.integers(2):
            s.update(mscale=float(rng.uniform(0.5, 1.5)), mscale_all_dim=float(rng.uniform(0.5, 1.5)))
    if kind == "llama3":
        lo = float(rng.choice([0.5, 1.0, 2.0]))
        s.update(low_freq_factor=lo, high_freq_factor=lo * float(rng.choice([2.0, 4.0])),
                 original_max_position_embeddings=int(rng.choice([2048, 8192])))
    if kind == "longrope":
        s.update(short_factor=[float(v) for v in rng.uniform(0.5, 3, n)],
                 long_factor=[float(v) for v in rng.uniform(1, 60, n)], original_max_position_embeddings=mpe // 8)
    if kind == "proportional":
        kwargs.pop("rotary_dim", None)  # pairs across the whole head
        s.update(partial_rotary_factor=float(rng.choice([0.25, 0.5, 0.75, 1.0, rng.uniform(0, 1)])))
        if rng.integers(2):
            s["factor"] = factor
    return head_dim, {**kwargs, "scaling": s, "max_position_embeddings": mpe}, seq_len


@pytest.mark.filterwarnings("ignore::fastpe.rope.RopeConfigWarning")  # random lengths: HF's length checks warn
@pytest.mark.parametrize("kind", _scaling.ROPE_TYPES)
def test_agrees_with_the_exact_twin_on_random_configs(kind):
    rng = np.random.default_rng(_scaling.ROPE_TYPES.index(kind))
    for _ in range(12):
        head_dim, kwargs, seq_len = random_case(rng, kind)
        inv, attention = rope.inv_freq(head_dim, seq_len=seq_len, **kwargs)
        ref, ref_attention = twin.inv_freq(rope.resolve(head_dim, **kwargs), seq_len)
        assert ulps64(inv, ref) <= 1, (head_dim, kwargs, seq_len)
        assert ulps64([attention], [ref_attention]) <= 1, (head_dim, kwargs, seq_len)


def test_twin_correction_range_matches():
    for scaling in (YARN, {**YARN, "truncate": False}, {**YARN, "beta_fast": 64, "beta_slow": 0.5}):
        spec = rope.resolve(128, base=1e4, scaling=scaling)
        assert _scaling.yarn_correction_range(spec) == tuple(float(v) for v in twin.yarn_correction_range(spec))


# =========================================================================== HF transformers


@pytest.fixture(scope="module")
def hf():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, RotaryEmbeddingConfigMixin
    from transformers.models.phi.modeling_phi import PhiRotaryEmbedding

    class MinimalConfig(RotaryEmbeddingConfigMixin):
        """Just the fields HF's rope functions read."""

        def __init__(self, **fields):
            self.__dict__.update(fields)

    def compute(head_dim, scaling, *, max_position_embeddings, seq_len=None):
        config = MinimalConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                               max_position_embeddings=max_position_embeddings,
                               rope_parameters=copy.deepcopy(scaling))
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind == "default":
            # current HF keeps the default rule in each model's rotary class; Phi's is one
            # that reads partial_rotary_factor (Llama's ignores it: Llama rotates whole heads)
            config.standardize_rope_params()
            inv, attention = PhiRotaryEmbedding.compute_default_rope_parameters(config)
        else:
            inv, attention = ROPE_INIT_FUNCTIONS[kind](config, None, seq_len=seq_len)
        return inv.double().numpy(), attention

    compute.init_functions = ROPE_INIT_FUNCTIONS
    return compute


#: HF-style rope dicts (rope_theta inside, as HF's standardisation leaves it), per rope_type
HF_CASES = [
    pytest.param(128, {"rope_type": "default", "rope_theta": 10000.0}, 4096, None, id="default"),
    pytest.param(80, {"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.4}, 4096, None,
                 id="default-partial"),
    pytest.param(128, {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}, 16384, None, id="linear"),
    pytest.param(128, {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, 2048, None,
                 id="dynamic-init"),
    pytest.param(128, {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, 2048, 6000,
                 id="dynamic-long"),
    pytest.param(96, {"rope_type": "dynamic", "rope_theta": 5e5, "factor": 4.0}, 4096, 50000, id="dynamic-96"),
    pytest.param(128, {"rope_type": "yarn", "rope_theta": 1e4, **{k: v for k, v in YARN.items() if k != "rope_type"}},
                 16384, None, id="yarn"),
    pytest.param(64, {"rope_type": "yarn", "rope_theta": 1e4, "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                      "beta_fast": 32, "beta_slow": 1, "original_max_position_embeddings": 4096}, 163840, None,
                 id="yarn-deepseek-v3"),
    pytest.param(64, {"rope_type": "yarn", "rope_theta": 15e4, "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                      "truncate": False, "original_max_position_embeddings": 4096}, 131072, None, id="yarn-gpt-oss"),
    pytest.param(128, {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0, "attention_factor": 1.2,
                       "original_max_position_embeddings": 32768}, 131072, None, id="yarn-qwen-attn"),
    pytest.param(128, {"rope_type": "llama3", "rope_theta": 5e5, **{k: v for k, v in LLAMA3.items()
                                                                     if k != "rope_type"}}, 131072, None,
                 id="llama3"),
    pytest.param(64, {"rope_type": "llama3", "rope_theta": 5e5, "factor": 32.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, 131072, None,
                 id="llama3.2-1b"),
    pytest.param(96, {**longrope(48), "rope_theta": 1e4}, 131072, None, id="longrope-short"),
    pytest.param(96, {**longrope(48), "rope_theta": 1e4}, 131072, 5000, id="longrope-long"),
    pytest.param(96, {**longrope(48), "rope_theta": 1e4, "factor": 4.0, "attention_factor": 1.1}, 131072, 5000,
                 id="longrope-explicit"),
    # values HF takes without a warning: fastpe takes them and computes what HF does
    pytest.param(64, {"rope_type": "yarn", "rope_theta": 1.01, **{k: v for k, v in YARN.items() if k != "rope_type"}},
                 16384, None, id="yarn-backward-ramp"),
    pytest.param(64, {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "attention_factor": 0.0,
                      "original_max_position_embeddings": 4096}, 16384, None, id="yarn-attention-0"),
    pytest.param(64, {"rope_type": "yarn", "rope_theta": 1e4, "factor": 8.0, "mscale": -3.0, "mscale_all_dim": 0.5,
                      "original_max_position_embeddings": 4096}, 32768, None, id="yarn-negative-mscale"),
    pytest.param(64, {"rope_type": "llama3", "rope_theta": 5e5, **{k: v for k, v in LLAMA3.items() if k != "rope_type"},
                      "low_freq_factor": -1.0}, 131072, None, id="llama3-negative-low"),
    pytest.param(32, {**longrope(16), "rope_theta": 1e4, "original_max_position_embeddings": 1, "attention_factor": 0.0},
                 4096, 8, id="longrope-original-1-attention-given"),
    pytest.param(32, {**longrope(16), "rope_theta": 1e4, "original_max_position_embeddings": 1, "factor": 1.0},
                 4096, 8, id="longrope-original-1-factor-1"),
    # Gemma 4's full-attention layers: 64 of 256 pairs turn, the exponent over head_dim 512
    pytest.param(512, {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": 0.25}, 262144, None,
                 id="proportional-gemma4"),
    pytest.param(96, {"rope_type": "proportional", "rope_theta": 1e4, "partial_rotary_factor": 0.5, "factor": 2.0},
                 4096, None, id="proportional-factor"),
    pytest.param(98, {"rope_type": "proportional", "rope_theta": 1e4, "partial_rotary_factor": 0.3}, 4096, None,
                 id="proportional-odd-pairs"),
    # Llama 4 Scout: low_freq_factor == high_freq_factor == 1 (HF warns; no smoothing band)
    pytest.param(128, {"rope_type": "llama3", "rope_theta": 5e5, "factor": 16.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 1.0, "original_max_position_embeddings": 8192}, 10485760, None,
                 id="llama3-llama4-scout"),
    pytest.param(64, {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 4.0,
                      "high_freq_factor": 1.0, "original_max_position_embeddings": 8192}, 131072, None,
                 id="llama3-high-below-low"),
]

#: values HF's validators warn of and then compute with: fastpe warns and computes the same
HF_WARNED = [
    pytest.param(64, {"rope_type": "linear", "rope_theta": 1e4, "factor": 0.5}, 4096, None, "factor", id="linear-0.5"),
    pytest.param(64, {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 0.5}, 2048, 6000, "factor",
                 id="dynamic-0.5"),
    pytest.param(64, {"rope_type": "yarn", "rope_theta": 1e4, "factor": 0.5, "original_max_position_embeddings": 4096},
                 2048, None, "factor", id="yarn-0.5"),
    pytest.param(64, {"rope_type": "llama3", "rope_theta": 5e5, "factor": 0.5, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, 131072, None, "factor",
                 id="llama3-0.5"),
    pytest.param(32, {**longrope(16), "rope_theta": 1e4, "factor": 0.5}, 4096, 5000, "factor", id="longrope-0.5"),
    pytest.param(64, {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "beta_fast": 1.0, "beta_slow": 8.0,
                      "original_max_position_embeddings": 4096}, 16384, None, "beta_fast", id="yarn-betas-reversed"),
    pytest.param(64, {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "attention_factor": -1.5,
                      "original_max_position_embeddings": 4096}, 16384, None, "attention_factor",
                 id="yarn-attention-negative"),
    pytest.param(32, {**longrope(16), "rope_theta": 1e4, "factor": 2.0, "attention_factor": -0.5}, 8192, 10,
                 "attention_factor", id="longrope-attention-negative"),
    pytest.param(64, {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 2.0,
                      "high_freq_factor": 2.0, "original_max_position_embeddings": 8192}, 131072, None,
                 "high_freq_factor", id="llama3-equal-bands"),
]


@pytest.mark.parametrize("head_dim, scaling, mpe, seq_len, key", HF_WARNED)
def test_what_hf_warns_of_is_warned_of_and_computed_as_hf_does(hf, head_dim, scaling, mpe, seq_len, key):
    with pytest.warns(rope.RopeConfigWarning, match=rf"scaling\['{key}'\]"):
        ours, attention = rope.inv_freq(head_dim, scaling=scaling, seq_len=seq_len, max_position_embeddings=mpe)
    theirs, their_attention = hf(head_dim, scaling, max_position_embeddings=mpe, seq_len=seq_len)
    with pytest.warns(rope.RopeConfigWarning):
        spec = rope.resolve(head_dim, scaling=scaling, max_position_embeddings=mpe)
    assert inv_freq_ulps(theirs, ours) <= hf_bound_ulps(spec, seq_len)
    assert attention == pytest.approx(float(their_attention), rel=4e-16, abs=0)


def test_llama4_scout_is_a_cut_as_hf_computes_it(hf):
    """Llama 4 Scout's low_freq_factor == high_freq_factor == 1: HF's smoothing factor
    divides by ``high - low = 0``, but only inside its medium band, ``wavelength == O / low``
    exactly in float32 -- which no wavelength of this config is (the nearest, pair 35's
    8209, is 0.2% away): every HF value is finite and either the default frequency or it
    divided by factor, split where the wavelength passes 8192.  fastpe's exact rule is that
    cut (an exact wavelength never equals O / low: p_i is algebraic, 2*pi is not)."""
    scaling = {"rope_type": "llama3", "rope_theta": 5e5, "factor": 16.0, "low_freq_factor": 1.0,
               "high_freq_factor": 1.0, "original_max_position_embeddings": 8192}
    theirs, _ = hf(128, scaling, max_position_embeddings=10485760)
    assert np.isfinite(theirs).all()
    with pytest.warns(rope.RopeConfigWarning, match="no band between them"):
        ours, _ = rope.inv_freq(128, scaling=scaling, max_position_embeddings=10485760)
    plain, _ = rope.inv_freq(128, base=5e5)
    wavelength = 2 * math.pi / plain
    divided = wavelength > 8192
    assert divided.sum() == 29 and not np.any(np.abs(wavelength / 8192 - 1) < 1e-3)
    np.testing.assert_array_equal(ours, np.where(divided, plain / 16.0, plain))
    close = np.abs(theirs - np.where(divided, plain / 16.0, plain)) <= 8 * 2.0**-24 * ours
    assert close.all()


@pytest.mark.filterwarnings("ignore::fastpe.rope.RopeConfigWarning")  # warnings: HF_WARNED below
@pytest.mark.parametrize("head_dim, scaling, mpe, seq_len", HF_CASES)
def test_agrees_with_hf_transformers(hf, head_dim, scaling, mpe, seq_len):
    ours, attention = rope.inv_freq(head_dim, scaling=scaling, seq_len=seq_len, max_position_embeddings=mpe)
    theirs, their_attention = hf(head_dim, scaling, max_position_embeddings=mpe, seq_len=seq_len)
    assert theirs.shape == ours.shape
    spec = rope.resolve(head_dim, scaling=scaling, max_position_embeddings=mpe)
    bound = hf_bound_ulps(spec, seq_len)
    worst = inv_freq_ulps(theirs, ours)
    assert worst <= bound, f"{worst:.2f} float32 ULP from HF, bound {bound:.1f}"
    # HF's attention factor is a Python double; ours is the correctly rounded value
    assert attention == pytest.approx(float(their_attention), rel=4e-16, abs=0)


def test_hf_rope_types_are_all_covered(hf):
    """A new rope_type in HF should be noticed here: every one of ROPE_INIT_FUNCTIONS is read."""
    assert set(hf.init_functions) | {"default"} == set(_scaling.ROPE_TYPES)
    covered = {p.values[1].get("rope_type") for p in HF_CASES}
    assert covered == set(_scaling.ROPE_TYPES)


@pytest.mark.parametrize("scaling, mpe, key", [
    pytest.param({**longrope(16), "original_max_position_embeddings": 1, "factor": 2.0}, 4096,
                 "original_max_position_embeddings", id="longrope-original-1"),
    pytest.param({**longrope(16), "original_max_position_embeddings": 1}, 4096,
                 "original_max_position_embeddings", id="longrope-original-1-ratio"),
    pytest.param({**YARN, "beta_fast": -1.0, "beta_slow": -2.0}, 16384, "beta_fast", id="yarn-negative-betas"),
    pytest.param({**YARN, "beta_slow": -2.0}, 16384, "beta_slow", id="yarn-negative-beta-slow"),
    pytest.param({**LLAMA3, "low_freq_factor": 0.0}, 131072, "low_freq_factor", id="llama3-low-0"),
    pytest.param({**LLAMA3, "low_freq_factor": -1.0, "high_freq_factor": 0}, 131072, "high_freq_factor",
                 id="llama3-high-0"),
])
def test_what_hf_cannot_compute_is_refused_naming_the_key(hf, scaling, mpe, key):
    """Each breaks HF's own arithmetic (a log of a negative number or of 1 as a divisor, a
    division by zero); fastpe refuses it up front naming the key, where it used to leak
    ``decimal.DivisionByZero`` / ``InvalidOperation``."""
    scaling = {**scaling, "rope_theta": 1e4}
    with pytest.raises((ValueError, ZeroDivisionError)):
        hf(32, scaling, max_position_embeddings=mpe, seq_len=None)
    with pytest.raises(ValueError, match=rf"^scaling\['{key}'\] must"):
        rope.inv_freq(32, scaling=scaling, max_position_embeddings=mpe)


@pytest.mark.filterwarnings("ignore::fastpe.rope.RopeConfigWarning")  # random lengths: HF's length checks warn
@pytest.mark.parametrize("kind", _scaling.ROPE_TYPES)
def test_agrees_with_hf_transformers_on_random_configs(hf, kind):
    rng = np.random.default_rng(100 + _scaling.ROPE_TYPES.index(kind))
    for _ in range(10):
        head_dim, kwargs, seq_len = random_case(rng, kind)
        scaling = {**kwargs["scaling"], "rope_theta": kwargs["base"]}
        if "rotary_dim" in kwargs:  # express it as HF does
            scaling["partial_rotary_factor"] = kwargs["rotary_dim"] / head_dim
        mpe = kwargs["max_position_embeddings"]
        ours, attention = rope.inv_freq(head_dim, scaling=scaling, seq_len=seq_len, max_position_embeddings=mpe)
        theirs, their_attention = hf(head_dim, scaling, max_position_embeddings=mpe, seq_len=seq_len)
        spec = rope.resolve(head_dim, scaling=scaling, max_position_embeddings=mpe)
        worst = inv_freq_ulps(theirs, ours)
        assert worst <= hf_bound_ulps(spec, seq_len), (head_dim, scaling, seq_len, worst)
        assert attention == pytest.approx(float(their_attention), rel=4e-16, abs=0)


# =========================================================================== bad input

BAD = [
    # (kwargs, exception, message fragment)
    pytest.param({"scaling": {"rope_type": "ntk"}}, ValueError, r"scaling\['rope_type'\] 'ntk' is not supported",
                 id="unknown-type"),
    pytest.param({"scaling": {"type": "axial"}}, ValueError, "not supported", id="unsupported-type"),
    pytest.param({"scaling": {"rope_type": 3}}, TypeError, r"scaling\['rope_type'\] must be a string", id="type-int"),
    pytest.param({"scaling": [("rope_type", "linear")]}, TypeError, "scaling must be a dict", id="scaling-list"),
    pytest.param({"scaling": "linear"}, TypeError, "scaling must be a dict", id="scaling-str"),
    pytest.param({"scaling": {"full_attention": {"rope_type": "default"}}}, ValueError, "per-layer",
                 id="nested"),
    pytest.param({"scaling": {"rope_type": "linear"}}, ValueError, r"scaling\['factor'\] is required",
                 id="linear-no-factor"),
    pytest.param({"scaling": {"rope_type": "dynamic"}, "max_position_embeddings": 10}, ValueError,
                 r"scaling\['factor'\] is required", id="dynamic-no-factor"),
    pytest.param({"scaling": {"rope_type": "yarn", "original_max_position_embeddings": 64}}, ValueError,
                 r"scaling\['factor'\] is required", id="yarn-no-factor"),
    pytest.param({"scaling": {**LLAMA3, "factor": None}}, TypeError, r"scaling\['factor'\] must be a number",
                 id="llama3-null-factor"),
    pytest.param({"scaling": {k: v for k, v in LLAMA3.items() if k != "factor"}}, ValueError,
                 r"scaling\['factor'\] is required", id="llama3-no-factor"),
    pytest.param({"scaling": {k: v for k, v in LLAMA3.items() if k != "low_freq_factor"}}, ValueError,
                 r"scaling\['low_freq_factor'\] is required", id="llama3-no-low"),
    # a factor HF's arithmetic cannot use (it warns of any below 1, and computes those above 0)
    pytest.param({"scaling": {"rope_type": "linear", "factor": 0.0}}, ValueError,
                 r"scaling\['factor'\] must be > 0, got 0.0", id="linear-factor-0"),
    pytest.param({"scaling": {**YARN, "factor": -2.0}}, ValueError, r"scaling\['factor'\] must be > 0",
                 id="yarn-factor-negative"),
    pytest.param({"scaling": {"rope_type": "dynamic", "factor": -0.5}, "max_position_embeddings": 8}, ValueError,
                 r"scaling\['factor'\] must be >= 0 for rope_type 'dynamic'", id="dynamic-factor-negative"),
    pytest.param({"scaling": {"rope_type": "linear", "factor": 1e-4}}, ValueError,
                 r"scaling\['factor'\] = 0.0001 is too small: inv_freq\[0\] = 10000.0 exceeds 1024",
                 id="linear-factor-tiny"),
    pytest.param({"scaling": {**LLAMA3, "low_freq_factor": 1.0, "high_freq_factor": -1.0}}, ValueError,
                 r"scaling\['high_freq_factor'\] = -1.0 below 0 beside .* gives the negative frequency",
                 id="llama3-negative-high"),
    pytest.param({"scaling": {"rope_type": "linear", "factor": "2"}}, TypeError, "must be a number",
                 id="factor-str"),
    pytest.param({"scaling": {"rope_type": "linear", "factor": True}}, TypeError, "must be a number",
                 id="factor-bool"),
    pytest.param({"scaling": {"rope_type": "linear", "factor": float("inf")}}, ValueError, "finite",
                 id="factor-inf"),
    pytest.param({"scaling": {"rope_type": "dynamic", "factor": 2.0}}, ValueError,
                 "max_position_embeddings is required", id="dynamic-no-mpe"),
    pytest.param({"scaling": {"rope_type": "yarn", "factor": 2.0}}, ValueError,
                 r"original_max_position_embeddings'\] \(or max_position_embeddings", id="yarn-no-original"),
    pytest.param({"scaling": {**YARN, "original_max_position_embeddings": 4096.5}}, TypeError,
                 "original_max_position_embeddings'] must be an integer", id="yarn-original-float"),
    pytest.param({"scaling": {**YARN, "truncate": "no"}}, TypeError, "truncate", id="yarn-truncate-str"),
    pytest.param({"scaling": {**YARN, "attention_factor": -2.0**65}}, ValueError,
                 r"attention_factor'\] must be <= 2\*\*64 in magnitude", id="yarn-attn-huge-negative"),
    pytest.param({"scaling": {**longrope(64), "factor": 2.0, "short_mscale": 1.2}}, ValueError,
                 r"scaling\['long_mscale'\] is required beside scaling\['short_mscale'\]", id="longrope-one-mscale"),
    pytest.param({"scaling": {**longrope(64), "factor": 2.0, "short_mscale": "1.2", "long_mscale": 1.2}}, TypeError,
                 r"scaling\['short_mscale'\] must be a number", id="longrope-mscale-str"),
    pytest.param({"scaling": {"rope_type": "proportional", "partial_rotary_factor": 1.5}}, ValueError,
                 r"scaling\['partial_rotary_factor'\] must be <= 1", id="proportional-partial-above-1"),
    pytest.param({"scaling": {"rope_type": "proportional", "partial_rotary_factor": 0.5}, "rotary_dim": 64},
                 ValueError, r"rotary_dim=64 contradicts rope_type 'proportional'", id="proportional-rotary-dim"),
    pytest.param({"scaling": {"rope_type": "proportional", "partial_rotary_factor": 0.5, "factor": 0}}, ValueError,
                 r"scaling\['factor'\] must be > 0", id="proportional-factor-0"),
    # a whole config.json is not a rope dict: its rope_theta, head_dim and lengths sit beside it
    pytest.param({"scaling": {"model_type": "llama", "rope_theta": 5e5, "rope_scaling": LLAMA3}}, ValueError,
                 r"^scaling is a whole model config \(it has 'rope_scaling', 'model_type'\), not a rope dict: "
                 r"read it with fastpe.rope.Rotary.from_config\(config\)", id="whole-config"),
    pytest.param({"scaling": {"rope_theta": 5e5, "hidden_size": 4096, "max_position_embeddings": 8192}}, ValueError,
                 "Rotary.from_config", id="whole-config-flat"),
    pytest.param({"scaling": {k: v for k, v in longrope(64).items() if k != "long_factor"}}, ValueError,
                 r"scaling\['long_factor'\] is required", id="longrope-no-long"),
    pytest.param({"scaling": {k: v for k, v in longrope(64).items() if k != "short_factor"}}, ValueError,
                 r"scaling\['short_factor'\] is required", id="longrope-no-short"),
    pytest.param({"scaling": {**longrope(64), "short_factor": [1.0] * 63}}, ValueError,
                 r"short_factor'\] must have rotary_dim/2 = 64 entries, got 63", id="longrope-short-length"),
    pytest.param({"scaling": {**longrope(64), "partial_rotary_factor": 0.5}}, ValueError,
                 r"short_factor'\] must have rotary_dim/2 = 32 entries, got 64", id="longrope-length-vs-partial"),
    pytest.param({"scaling": {**longrope(64), "long_factor": 2.0}}, TypeError, "long_factor'] must be a list",
                 id="longrope-scalar"),
    pytest.param({"scaling": {**longrope(64), "long_factor": [0.0] * 64}}, ValueError, r"long_factor'\]\[0\]",
                 id="longrope-zero"),
    pytest.param({"scaling": longrope(64)}, ValueError, "longrope needs", id="longrope-no-factor-source"),
    pytest.param({"rotary_dim": 63}, ValueError, "rotary_dim must be even", id="odd-rotary"),
    pytest.param({"rotary_dim": 130}, ValueError, "rotary_dim must be <= head_dim = 128", id="rotary-too-big"),
    pytest.param({"rotary_dim": 0}, ValueError, "rotary_dim must be >= 2", id="rotary-0"),
    pytest.param({"rotary_dim": 64.0}, TypeError, "rotary_dim must be an integer", id="rotary-float"),
    pytest.param({"scaling": {"partial_rotary_factor": 0.2}}, ValueError,
                 r"rotary_dim \(int\(head_dim \* scaling\['partial_rotary_factor'\]\)\) must be even, got 25",
                 id="odd-from-partial"),
    pytest.param({"scaling": {"partial_rotary_factor": 1.5}}, ValueError, "must be <= 1", id="partial-above-1"),
    pytest.param({"scaling": {"partial_rotary_factor": 0}}, ValueError, "must be > 0", id="partial-0"),
    pytest.param({"rotary_dim": 64, "scaling": {"partial_rotary_factor": 0.25}}, ValueError,
                 "contradicts", id="rotary-vs-partial"),
    pytest.param({"base": 1.0}, ValueError, "base must be greater than 1", id="base-1"),
    pytest.param({"base": float("nan")}, ValueError, "base must be finite", id="base-nan"),
    pytest.param({"base": "1e4"}, TypeError, "base must be a real number", id="base-str"),
    pytest.param({"base": True}, TypeError, "base must be a real number", id="base-bool"),
    pytest.param({"scaling": {"rope_theta": -5.0}}, ValueError, r"scaling\['rope_theta'\] must be greater than 1",
                 id="theta-negative"),
    pytest.param({"scaling": {"rope_theta": "big"}}, TypeError, r"scaling\['rope_theta'\]", id="theta-str"),
    pytest.param({"base": 1e4, "scaling": {"rope_theta": 5e5}}, ValueError, "contradicts", id="base-vs-theta"),
    pytest.param({"seq_len": -1}, ValueError, "seq_len must be >= 0", id="seq-len-negative"),
    pytest.param({"seq_len": 1.5}, TypeError, "seq_len must be an integer", id="seq-len-float"),
    pytest.param({"max_position_embeddings": 0}, ValueError, "max_position_embeddings must be >= 1", id="mpe-0"),
    pytest.param({"scaling": {"rope_type": "dynamic", "factor": 2.0}, "rotary_dim": 2,
                  "max_position_embeddings": 8}, ValueError, "rotary_dim must be >= 4", id="dynamic-dim-2"),
    # keys whose values broke the decimal arithmetic (DivisionByZero, InvalidOperation)
    pytest.param({"scaling": {**longrope(64), "original_max_position_embeddings": 1, "factor": 2.0}}, ValueError,
                 r"scaling\['original_max_position_embeddings'\] must be >= 2 for LongRoPE's attention factor",
                 id="longrope-original-1"),
    pytest.param({"scaling": {**YARN, "beta_fast": -1.0, "beta_slow": -2.0}}, ValueError,
                 r"scaling\['beta_fast'\] must be > 0 \(0 or null: the default 32\), got -1.0", id="yarn-beta-fast-neg"),
    pytest.param({"scaling": {**YARN, "beta_slow": -1e-300}}, ValueError, r"scaling\['beta_slow'\] must be > 0",
                 id="yarn-beta-slow-neg"),
    pytest.param({"scaling": {**LLAMA3, "low_freq_factor": 0}}, ValueError,
                 r"scaling\['low_freq_factor'\] must not be 0", id="llama3-low-0"),
    # huge Python ints: an OverflowError naming nothing before
    pytest.param({"base": 10**400}, ValueError, r"^base must be finite, got int beyond the float64 range \(about 2\*\*1328\)",
                 id="base-huge-int"),
    pytest.param({"scaling": {"rope_theta": 10**400}}, ValueError, r"^scaling\['rope_theta'\] must be finite",
                 id="theta-huge-int"),
    pytest.param({"scaling": {"rope_type": "linear", "factor": 10**400}}, ValueError,
                 r"^scaling\['factor'\] must be finite, got int beyond the float64 range", id="factor-huge-int"),
    pytest.param({"scaling": {"rope_type": "linear", "factor": Fraction(10**400, 3)}}, ValueError,
                 r"^scaling\['factor'\] must be finite, got Fraction beyond", id="factor-huge-fraction"),
    pytest.param({"scaling": {**YARN, "mscale": -10**400, "mscale_all_dim": 1.0}}, ValueError,
                 r"^scaling\['mscale'\] must be finite", id="mscale-huge-int"),
    pytest.param({"scaling": {**longrope(64), "factor": 2.0, "short_factor": [10**400] * 64}}, ValueError,
                 r"^scaling\['short_factor'\]\[0\] must be finite", id="longrope-huge-int"),
    pytest.param({"scaling": {"rope_type": "dynamic", "factor": 2.0}, "max_position_embeddings": 2**64 + 1},
                 ValueError, r"^max_position_embeddings must be <= 2\*\*64, got 18446744073709551617$", id="mpe-huge"),
    pytest.param({"scaling": {**YARN, "original_max_position_embeddings": 10**10**4}}, ValueError,
                 r"^scaling\['original_max_position_embeddings'\] must be <= 2\*\*64, got an integer of 33220 bits$",
                 id="original-huge"),
    # results the kernels cannot take, named by the key that caused them
    pytest.param({"scaling": {**longrope(64), "factor": 2.0, "short_factor": [1e-4] + [1.0] * 63}}, ValueError,
                 r"^scaling\['short_factor'\]\[0\] = 0.0001 is too small: inv_freq\[0\] = .* = 10000.0 exceeds 1024",
                 id="longrope-tiny-short"),
    pytest.param({"scaling": {**longrope(64), "factor": 2.0, "long_factor": [1.0] * 63 + [5e-324]}}, ValueError,
                 r"^scaling\['long_factor'\]\[63\] = 5e-324 is too small: .* = inf exceeds", id="longrope-tiny-long"),
    pytest.param({"scaling": {**YARN, "mscale": 1e308, "mscale_all_dim": 1e-308}}, ValueError,
                 r"^scaling\['mscale'\] = 1e\+308 and scaling\['mscale_all_dim'\] = 1e-308 give the attention factor",
                 id="yarn-mscale-extreme"),
    pytest.param({"scaling": {**YARN, "attention_factor": 2.0**64 * 2}}, ValueError,
                 r"^scaling\['attention_factor'\] must be <= 2\*\*64", id="yarn-attention-huge"),
    pytest.param({"scaling": {**longrope(64), "short_factor": np.array(2.0)}}, ValueError,
                 r"^scaling\['short_factor'\] must be a list of 64 numbers, got an array of shape \(\)",
                 id="longrope-0d-array"),
]


@pytest.mark.filterwarnings("ignore::fastpe.rope.RopeConfigWarning")  # some warn of a key, then refuse another
@pytest.mark.parametrize("kwargs, exc, message", BAD)
def test_bad_input_names_the_argument(kwargs, exc, message):
    kwargs = dict(kwargs)
    scaling = kwargs.get("scaling")
    before = copy.deepcopy(scaling)
    with pytest.raises(exc, match=message):
        rope.inv_freq(128, **kwargs)
    assert scaling == before  # never modified, even on failure


@pytest.mark.parametrize("head_dim, exc", [(1, ValueError), (65538, ValueError), (128.0, TypeError),
                                           ("128", TypeError), (None, TypeError)])
def test_bad_head_dim(head_dim, exc):
    with pytest.raises(exc, match="head_dim"):
        rope.inv_freq(head_dim)


@pytest.mark.filterwarnings("ignore::fastpe.rope.RopeConfigWarning")  # one length for all: HF's checks warn
def test_the_scaling_dict_is_never_modified():
    for scaling in (LLAMA3, YARN, longrope(64), {"type": "linear", "factor": 2}, {"rope_theta": 5e5}):
        before = copy.deepcopy(scaling)
        rope.inv_freq(128, scaling=scaling, max_position_embeddings=131072, seq_len=10**6)
        assert scaling == before and list(scaling) == list(before)


def test_read_only_mappings_and_numpy_scalars_are_accepted():
    frozen = types.MappingProxyType({"rope_type": "linear", "factor": np.float32(2.0), "rope_theta": np.int64(10000)})
    inv, _ = rope.inv_freq(np.int32(64), scaling=frozen, seq_len=np.uint16(5))
    np.testing.assert_array_equal(inv, rope.inv_freq(64, scaling={"rope_type": "linear", "factor": 2.0})[0])
    lr = longrope(32)
    arr = {**lr, "short_factor": np.array(lr["short_factor"])}
    np.testing.assert_array_equal(rope.inv_freq(64, scaling=arr, max_position_embeddings=4096)[0],
                                  rope.inv_freq(64, scaling=lr, max_position_embeddings=4096)[0])


def test_spec_is_hashable_and_frozen():
    spec = rope.resolve(128, scaling=longrope(64), max_position_embeddings=4096)
    assert hash(spec) == hash(rope.resolve(128, scaling=longrope(64), max_position_embeddings=4096))
    with pytest.raises(AttributeError):
        spec.base = 2.0


# =========================================================================== fuzzing the keys

_EDGE = st.sampled_from([0, 0.0, -0.0, 1, 1.0, 2, 5e-324, 1e-300, 1e-5, 2.718281828459045, 1e300, 1.7e308,
                         -1.0, -1e-300, -10.0, -1e300, float("nan"), float("inf"), 2**64, 10**400, Fraction(1, 3),
                         np.float32(3.0), np.int64(7), True, "2", None])


def _reals(lo, hi):
    return st.one_of(st.floats(lo, hi), st.integers(math.ceil(lo), math.floor(hi)), _EDGE)


_FACTORS = st.one_of(_reals(1.0, 64.0), st.floats(1.0, 1e308), st.floats(1e30, 1e308))
_LENGTHS = st.one_of(st.integers(1, 10**6), st.sampled_from([0, 1, 2, 2**32, 2**64, 2**64 + 1, 10**400, 4096.0]))


@st.composite
def _configs(draw):
    """A rope dict of each type with every key drawn from its plausible range or an edge
    value (zeros, signs, subnormals, the largest doubles, huge ints, non-numbers)."""
    kind = draw(st.sampled_from(_scaling.ROPE_TYPES))
    head_dim = draw(st.sampled_from([2, 4, 6, 16, 18]))
    s = {"rope_type": kind}
    if kind in ("linear", "dynamic", "yarn", "llama3") or draw(st.booleans()):
        s["factor"] = draw(_FACTORS)
    if kind in ("yarn", "llama3", "longrope") and draw(st.booleans()):
        s["original_max_position_embeddings"] = draw(_LENGTHS)
    for key in {"yarn": ("attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim"),
                "longrope": ("attention_factor",)}.get(kind, ()):
        if draw(st.booleans()):
            s[key] = draw(_reals(-100.0, 100.0))
    if kind == "llama3":
        s["low_freq_factor"] = draw(_reals(-10.0, 10.0))
        s["high_freq_factor"] = draw(_reals(-10.0, 100.0))
    if kind == "longrope":
        for key in ("short_factor", "long_factor"):
            s[key] = draw(st.lists(st.one_of(st.floats(1e-4, 1e4), _EDGE), min_size=head_dim // 2,
                                   max_size=head_dim // 2))
    base = draw(st.one_of(st.none(), st.floats(1.0, 1e7), st.floats(1.0, 1e308),
                          st.sampled_from([1.0000000000000002, 1.01, 10**300, 10**400])))
    mpe = draw(st.one_of(st.none(), _LENGTHS))
    seq_len = draw(st.one_of(st.none(), st.integers(0, 2**20), st.integers(0, 2**32)))
    return head_dim, {"base": base, "scaling": s, "max_position_embeddings": mpe}, seq_len


@settings(max_examples=400, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(_configs())
def test_every_key_is_refused_by_name_or_computed_exactly(case):
    """No value of any key reaches decimal or float errors: either a TypeError/ValueError
    naming what was passed, or frequencies and an attention factor the kernels take, equal
    (to the ULP) to the exact twin's."""
    from fastpe._validate import check_inv_freq

    head_dim, kwargs, seq_len = case
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        try:
            inv, attention = rope.inv_freq(head_dim, seq_len=seq_len, **kwargs)
        except (TypeError, ValueError) as exc:
            assert str(exc).startswith(("scaling", "max_position_embeddings", "base", "rotary_dim",
                                        "longrope needs")), exc
            inv = None
    for w in record:  # what HF warns of: a RopeConfigWarning naming the key
        assert w.category is rope.RopeConfigWarning and str(w.message).startswith(
            ("scaling", "original_max_position_embeddings")), w
    if inv is None:
        return
    check_inv_freq(inv)  # what cos_sin and apply_ will accept
    assert math.isfinite(attention) and abs(attention) <= _scaling.MAX_ATTENTION_FACTOR
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rope.RopeConfigWarning)
        spec = rope.resolve(head_dim, **kwargs)
    ref, ref_attention = twin.inv_freq(spec, seq_len)
    assert ulps64(inv, ref) <= 1 and ulps64([attention], [ref_attention]) <= 1, (kwargs, seq_len)


@pytest.mark.parametrize("value, exc", [(math.nan, TypeError), ("nope", ValueError)])
def test_a_bad_legacy_type_key_is_named_as_written(value, exc):
    with pytest.raises(exc, match=r"scaling\['type'\]"):
        rope.inv_freq(8, scaling={"type": value})
    with pytest.raises(exc, match=r"scaling\['rope_type'\]"):
        rope.inv_freq(8, scaling={"rope_type": value, "type": "linear"})
