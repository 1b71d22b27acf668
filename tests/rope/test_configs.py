"""The 30 real model configs of ``tests/data/configs``, read by ``Rotary.from_config``.

* each reads (every layer type of the per-layer ones) into the rule, sizes, base, layout and
  attention factor its model uses, with exactly the warnings HF's validators give;
* a path, its dict and the transformers ``PretrainedConfig`` built from it give one Rotary;
* against the model's own HF rotary module, built from the same file as
  ``check_configs.py`` builds it: ``inv_freq`` within HF's float32 error of the rule
  (:func:`support.hf_rope.hf_bound_ulps`), the attention factor to the double, and cos/sin
  over positions 0..8191 within the bound of HF's float32 arithmetic
  (:func:`support.hf_rope.cos_sin_bound`);
* against mpmath at sampled positions up to 2**31: within 1 float32 ULP, on every backend.
"""

from __future__ import annotations

import json
import math
import warnings

import mpmath
import numpy as np
import pytest

from conftest import FAST
from fastpe.rope import RopeConfigWarning, Rotary
from support import hf_rope
from support.hf_rope import config_paths, per_frequency, read_fields
from support.oracle import mp_correct, rope_value_fn, ulp_distance

#: reading configs calls no backend; the value tests below name theirs (FAST_BACKEND, the fixture)
pytestmark = pytest.mark.any_backend

PER_LAYER = {"gemma3_text", "gemma4_text", "modernbert"}


def _cases():
    for path in config_paths():
        fields = read_fields(path)
        layers = ("full_attention", "sliding_attention") if fields["model_type"] in PER_LAYER else (None,)
        for layer in layers:
            yield pytest.param(path, layer, id=path.stem + ("" if layer is None else f"-{layer}"))


CASES = list(_cases())

#: what each config reads into: (rope_type, head_dim, rotary_dim, base, layout, attention factor)
EXPECTED = {
    "deepseek-v3": ("yarn", 64, 64, 10000.0, "gptj", 1.0),  # qk_rope_head_dim 64, rope_interleave
    "gemma-2-9b-it": ("default", 256, 256, 10000.0, "neox", 1.0),
    "gemma-3-12b-it-full_attention": ("linear", 256, 256, 1e6, "neox", 1.0),
    "gemma-3-12b-it-sliding_attention": ("default", 256, 256, 10000.0, "neox", 1.0),  # rope_local_base_freq
    "gemma-3-4b-it-full_attention": ("linear", 256, 256, 1e6, "neox", 1.0),
    "gemma-3-4b-it-sliding_attention": ("default", 256, 256, 10000.0, "neox", 1.0),
    "gemma-4-26b-a4b-it-full_attention": ("proportional", 512, 512, 1e6, "neox", 1.0),  # global_head_dim
    "gemma-4-26b-a4b-it-sliding_attention": ("default", 256, 256, 10000.0, "neox", 1.0),
    "gemma-4-31b-it-full_attention": ("proportional", 512, 512, 1e6, "neox", 1.0),
    "gemma-4-31b-it-sliding_attention": ("default", 256, 256, 10000.0, "neox", 1.0),
    "gpt-j-6b": ("default", 256, 64, 10000.0, "gptj", 1.0),  # rotary_dim of n_embd / n_head
    "gpt-neox-20b": ("default", 96, 24, 10000.0, "neox", 1.0),  # rotary_pct, rotary_emb_base
    "gpt-oss-120b": ("yarn", 64, 64, 150000.0, "neox", 0.1 * math.log(32) + 1),
    "gpt-oss-20b": ("yarn", 64, 64, 150000.0, "neox", 0.1 * math.log(32) + 1),
    "llama-2-7b": ("default", 128, 128, 10000.0, "neox", 1.0),
    "llama-3-8b": ("default", 128, 128, 500000.0, "neox", 1.0),
    "llama-3.1-8b": ("llama3", 128, 128, 500000.0, "neox", 1.0),
    "llama-3.2-1b": ("llama3", 64, 64, 500000.0, "neox", 1.0),
    "llama-4-scout-17b-16e-instruct": ("llama3", 128, 128, 500000.0, "gptj", 1.0),  # low == high == 1
    "llama-4-scout-17b-16e": ("llama3", 128, 128, 500000.0, "gptj", 1.0),
    "mistral-7b-v0.1": ("default", 128, 128, 10000.0, "neox", 1.0),
    "mistral-nemo-base-2407": ("default", 128, 128, 1e6, "neox", 1.0),  # head_dim, not 5120 / 32
    "modernbert-base-full_attention": ("default", 64, 64, 160000.0, "neox", 1.0),  # global_rope_theta
    "modernbert-base-sliding_attention": ("default", 64, 64, 10000.0, "neox", 1.0),  # local_rope_theta
    # Phi-3 LongRoPE: the attention factor from the top-level original length 4096:
    # sqrt(1 + ln(131072 / 4096) / ln 4096) = 1.1902..., where the dict alone gives none
    "phi-3-medium-128k-instruct": ("longrope", 128, 128, 10000.0, "neox", math.sqrt(1 + math.log(32) / math.log(4096))),
    "phi-3-mini-128k-instruct": ("longrope", 96, 96, 10000.0, "neox", math.sqrt(1 + math.log(32) / math.log(4096))),
    "phi-3-mini-4k-instruct": ("default", 96, 96, 10000.0, "neox", 1.0),
    "phi-3-vision-128k-instruct": ("longrope", 96, 96, 10000.0, "neox", math.sqrt(1 + math.log(32) / math.log(4096))),
    "phi-3.5-mini-instruct": ("longrope", 96, 96, 10000.0, "neox", math.sqrt(1 + math.log(32) / math.log(4096))),
    "phi-4-mini-instruct": ("longrope", 128, 96, 10000.0, "neox", math.sqrt(1 + math.log(32) / math.log(4096))),
    "qwen2-7b": ("default", 128, 128, 1e6, "neox", 1.0),
    "qwen2.5-7b-instruct-yarn": ("yarn", 128, 128, 1e6, "neox", 0.1 * math.log(4) + 1),
    "qwen2.5-7b-instruct": ("default", 128, 128, 1e6, "neox", 1.0),
    "qwen3-8b": ("default", 128, 128, 1e6, "neox", 1.0),
    "stablelm-3b-4e1t": ("default", 80, 20, 10000.0, "neox", 1.0),  # partial_rotary_factor 0.25
}

#: the warnings HF's validators give for a config (a message fragment each); no other warns
WARNINGS = {
    "llama-4-scout-17b-16e-instruct": r"high_freq_factor'\] \(1\) is not greater than",
    **{name: r"has no 'factor'" for name in ("phi-3-medium-128k-instruct", "phi-3-mini-128k-instruct",
                                             "phi-3-vision-128k-instruct", "phi-3.5-mini-instruct",
                                             "phi-4-mini-instruct")},
}


def read(source, layer):
    """``Rotary.from_config``, with the warnings :data:`WARNINGS` expects (and no other)."""
    name = source.stem if hasattr(source, "stem") else None
    if name in WARNINGS:
        with pytest.warns(RopeConfigWarning, match=WARNINGS[name]) as record:
            rotary = Rotary.from_config(source, layer_type=layer)
        assert len(record) == 1, [str(w.message) for w in record]
        return rotary
    return Rotary.from_config(source, layer_type=layer)


def read_quietly(source, layer):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RopeConfigWarning)
        return Rotary.from_config(source, layer_type=layer)


def case_id(path, layer):
    return path.stem + ("" if layer is None else f"-{layer}")


def test_every_config_is_covered():
    assert len(config_paths()) == 30
    assert sorted(case_id(*p.values) for p in CASES) == sorted(EXPECTED)


@pytest.mark.parametrize("path, layer", CASES)
def test_each_config_reads_into_its_models_rule(path, layer):
    rotary = read(path, layer)
    rope_type, head_dim, rotary_dim, base, layout, attention = EXPECTED[case_id(path, layer)]
    assert (rotary.rope_type, rotary.head_dim, rotary.rotary_dim, rotary.base, rotary.layout) == (
        rope_type, head_dim, rotary_dim, base, layout)
    assert rotary.attention_factor_at(8192) == pytest.approx(attention, rel=1e-15)
    assert rotary.inv_freq.shape == (rotary_dim // 2,) and np.all(np.isfinite(rotary.inv_freq))


@pytest.mark.parametrize("path, layer", CASES)
def test_path_dict_and_text_give_one_rotary(path, layer):
    rotary = read_quietly(path, layer)
    raw = json.loads(path.read_text())
    assert read_quietly(str(path), layer) == rotary
    assert read_quietly(raw, layer) == rotary
    assert read_quietly({k: v for k, v in raw.items() if not k.startswith("_")}, layer) == rotary
    # the published multimodal form: the text model's fields under text_config
    wrapped = {"model_type": "wrapper", "architectures": raw["architectures"], "text_config": raw}
    assert read_quietly(wrapped, layer) == rotary


def test_gemma_3_4b_reads_its_class_defaults():
    """The published gemma-3-4b-it text_config states few keys; the file adds the
    Gemma3TextConfig defaults it leaves out (listed in ``_class_defaults``): without them
    the reader must find the same defaults."""
    raw = json.loads((hf_rope.CONFIGS / "gemma-3-4b-it.json").read_text())
    published = {k: v for k, v in raw.items() if k not in raw["_class_defaults"]}
    for layer in ("full_attention", "sliding_attention"):
        assert Rotary.from_config(published, layer_type=layer) == Rotary.from_config(raw, layer_type=layer)


# =================================================================== the model's own HF module


@pytest.fixture(scope="module")
def hf():
    pytest.importorskip("torch", reason="the comparison with HF's rotary modules needs torch")
    pytest.importorskip("transformers", reason="the comparison with HF's rotary modules needs transformers")
    from transformers.utils import logging

    logging.set_verbosity_error()  # HF's own validator warnings: fastpe's are asserted above
    return hf_rope


#: the backend the 8192-position comparisons run on: a compiled one (the values are the same
#: bits on every backend, as the backend tests check)
FAST_BACKEND = FAST[0] if FAST else "python"
N_POSITIONS = 8192 if FAST else 64


def _hf_case(hf, path, layer):
    config, _ = hf.hf_model_config(read_fields(path))
    assert layer in hf.hf_layer_types(config)
    return config, hf.hf_rotary(config)


@pytest.mark.any_backend
@pytest.mark.parametrize("path, layer", CASES)
def test_against_the_models_hf_rotary_module(hf, path, layer):
    config, module = _hf_case(hf, path, layer)
    rotary = read_quietly(path, layer)
    # at initialisation: frequencies within HF's float32 error, the attention factor to the double
    init_inv, init_attention, _, _ = hf.hf_values(hf.hf_rotary(config), config, 1, layer)
    if init_inv is not None:  # GPT-J keeps no inv_freq, only its table
        worst = hf.inv_freq_ulps(init_inv, rotary.inv_freq)
        assert worst <= hf.hf_bound_ulps(rotary.spec, None), f"{worst:.2f} float32 ULP from HF at initialisation"
    if init_attention is not None:
        assert rotary.attention_factor == pytest.approx(float(init_attention), rel=4e-16, abs=0)
    # a forward pass over 0..n-1: what HF's module sees then (dynamic and longrope switch);
    # GPT-J's table stops at n_positions
    n = min(N_POSITIONS, getattr(module, "max_positions", N_POSITIONS))
    inv, attention, cos, sin = hf.hf_values(module, config, n, layer)
    ours = rotary.inv_freq_at(n)
    if inv is not None:
        worst = hf.inv_freq_ulps(inv, ours)
        assert worst <= hf.hf_bound_ulps(rotary.spec, n), f"{worst:.2f} float32 ULP from HF"
    else:  # GPT-J keeps only its table: its float32 frequencies within the default rule's bound
        inv = ours * (1 + hf.hf_bound_ulps(rotary.spec, n) * 2.0**-24)
    af = rotary.attention_factor_at(n)
    if attention is not None:
        assert af == pytest.approx(float(attention), rel=4e-16, abs=0)
    positions = np.arange(n)
    c, s = rotary.cos_sin(positions, backend=FAST_BACKEND)
    bound = hf.cos_sin_bound(positions, ours, inv, af)
    for name, mine, theirs in (("cos", per_frequency(c, rotary.layout), cos),
                               ("sin", per_frequency(s, rotary.layout), sin)):
        assert theirs.shape == mine.shape
        err = np.abs(mine.astype(np.float64) - theirs)
        assert np.all(err <= bound), (
            f"{name}: {float(err.max()):.3g} from HF's forward pass, over the bound at "
            f"{np.argwhere(err > bound)[:3].tolist()}")


# ======================================================================= mpmath, far positions

FAR = np.array([2**31 - 1, 2**31 - 2, 2**30 + 12345, 1_234_567_891, 10**9 + 7, 2**24 + 1, 1_000_003, 65537],
               dtype=np.uint32)


@pytest.mark.any_backend
@pytest.mark.parametrize("path, layer", CASES)
def test_against_mpmath_at_positions_up_to_2_31(backend, path, layer):
    rotary = read_quietly(path, layer)
    c, s = rotary.cos_sin(FAR, backend=backend)
    inv, af = rotary.inv_freq_at(int(FAR.max()) + 1), rotary.attention_factor_at(int(FAR.max()) + 1)
    worst = 0
    with mpmath.workdps(30):
        for which, cache in ((True, per_frequency(c, rotary.layout)), (False, per_frequency(s, rotary.layout))):
            for r, p in enumerate(FAR.tolist()):
                for i, f in enumerate(inv.tolist()):
                    want = mp_correct(rope_value_fn(p, f, af, which), "float32")
                    if want is None:
                        continue
                    d = int(ulp_distance(cache[r, i], np.float32(want))[()])
                    assert d <= 1, f"{'cos' if which else 'sin'} at p={p}, pair {i}: {d} ULP from mpmath"
                    worst = max(worst, d)
