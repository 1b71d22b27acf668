"""``Rotary.from_config`` field by field: where each architecture keeps its RoPE settings.

Synthetic configs, each changing one field of a real one, for what the 30 files of
``tests/data/configs`` cannot show alone: precedence (the dict against the top level, a
top-level original length against the dict's), legacy names, class defaults, per-layer
choices, the layout, errors naming the field and warnings naming the key.  Where transformers
is installed, the model's own HF rotary module confirms each reading (Phi-3.5-MoE's mscale,
whose config is built here from its published scalars).
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from conftest import FAST
from fastpe import rope
from fastpe.rope import RopeConfigWarning, Rotary
from support import hf_rope
from support.cli import same_bits
from support.hf_rope import read_fields

CONFIGS = hf_rope.CONFIGS
PHI3_ATTENTION = math.sqrt(1 + math.log(131072 / 4096) / math.log(4096))  # 1.1902...


def fields(name: str) -> dict:
    return read_fields(CONFIGS / f"{name}.json")


def quietly(config, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RopeConfigWarning)
        return Rotary.from_config(config, **kwargs)


@pytest.fixture(scope="module")
def hf():
    pytest.importorskip("torch", reason="the comparison with HF's rotary modules needs torch")
    pytest.importorskip("transformers", reason="the comparison with HF's rotary modules needs transformers")
    from transformers.utils import logging

    logging.set_verbosity_error()
    return hf_rope


# ============================================================================ Phi-3 family


@pytest.mark.parametrize("name", ["phi-3-mini-128k-instruct", "phi-3-medium-128k-instruct",
                                  "phi-3-vision-128k-instruct", "phi-3.5-mini-instruct", "phi-4-mini-instruct"])
def test_phi3_reads_its_top_level_original_length(name):
    """Phi-3 keeps original_max_position_embeddings at the top level: the LongRoPE
    attention factor is sqrt(1 + ln(131072 / 4096) / ln 4096) = 1.1902, where passing the
    rope dict alone (README's old recipe) gave 1.0 (its original length defaulting to
    max_position_embeddings, a ratio of 1)."""
    cfg = fields(name)
    rotary = quietly(cfg)
    assert rotary.original_max_position_embeddings == 4096
    assert rotary.attention_factor == pytest.approx(PHI3_ATTENTION, rel=1e-15) and rotary.attention_factor > 1.19
    head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    scaling = dict(cfg["rope_scaling"], partial_rotary_factor=cfg.get("partial_rotary_factor", 1.0))
    with pytest.warns(RopeConfigWarning, match="no 'factor'"):
        _, old = rope.inv_freq(head_dim, base=cfg["rope_theta"], scaling=scaling,
                               max_position_embeddings=cfg["max_position_embeddings"])
    assert old == 1.0  # what the dict alone says, without the top-level field


def test_phi3_published_su_type_reads_as_longrope():
    """The original Phi-3-mini-128k (and -medium, -vision) say ``"type": "su"``: read as
    longrope with the top-level original length (transformers 5.24 fails on them as
    published, see fastpe/rope/_config.py)."""
    su = quietly(fields("phi-3-mini-128k-instruct"))
    renamed = fields("phi-3-mini-128k-instruct")
    renamed["rope_scaling"] = dict(renamed["rope_scaling"], type="longrope")
    assert su == quietly(renamed) and su.rope_type == "longrope"
    yarn = dict(renamed, rope_scaling=dict(renamed["rope_scaling"], type="yarn"))  # Phi3Config: yarn is longrope
    assert quietly(yarn) == su
    with pytest.raises(ValueError, match=r"Phi-3 takes rope_type 'default' or 'longrope'.*'linear'"):
        Rotary.from_config(dict(renamed, rope_scaling={"type": "linear", "factor": 2.0}))


def test_phi3_top_level_original_wins_and_defaults_to_4096():
    cfg = fields("phi-3.5-mini-instruct")
    inside = dict(cfg, rope_scaling=dict(cfg["rope_scaling"], original_max_position_embeddings=8192))
    assert quietly(inside).original_max_position_embeddings == 4096  # the top level wins (HF's precedence)
    no_top = {k: v for k, v in inside.items() if k != "original_max_position_embeddings"}
    assert quietly(no_top).original_max_position_embeddings == 4096  # Phi3Config's class default
    generic = dict(no_top, model_type="llama")  # an architecture without one: the dict's own
    assert quietly(generic).original_max_position_embeddings == 8192
    generic_top = dict(generic, original_max_position_embeddings=2048)  # a top-level one wins anywhere
    assert quietly(generic_top).original_max_position_embeddings == 2048


def test_phi3_ignores_mscale_keys_with_a_warning():
    cfg = fields("phi-3.5-mini-instruct")
    cfg["rope_scaling"] = dict(cfg["rope_scaling"], short_mscale=1.2, long_mscale=1.3, factor=32.0)
    with pytest.warns(RopeConfigWarning, match=r"'short_mscale'\], .*'long_mscale'\] are ignored: phi3's rotary"):
        rotary = Rotary.from_config(cfg)
    assert rotary.short_mscale is None and rotary.attention_factor == pytest.approx(PHI3_ATTENTION, rel=1e-15)
    llama = dict(cfg, model_type="llama")  # any architecture but Phi-3.5-MoE's: ignored
    with pytest.warns(RopeConfigWarning, match=r"are ignored: llama's rotary embedding"):
        assert Rotary.from_config(llama).short_mscale is None
    unknown = {k: v for k, v in cfg.items() if k != "model_type"}  # no architecture: fastpe's rule reads them
    assert Rotary.from_config(unknown).attention_factor == 1.2


#: Phi-3.5-MoE-instruct's published scalars (tests/data has no file: its factor lists were
#: not found); the factor lists here are placeholders -- the attention factor does not
#: depend on them
PHIMOE_MSCALE = 1.243163121016122


def phimoe_config(short=None, long=None):
    return {
        "model_type": "phimoe", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
        "max_position_embeddings": 131072, "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
        "rope_scaling": {"type": "longrope", "short_factor": short or [1.0] * 64, "long_factor": long or [1.0] * 64,
                         "short_mscale": PHIMOE_MSCALE, "long_mscale": PHIMOE_MSCALE,
                         "original_max_position_embeddings": 4096},
    }


def test_phimoe_attention_factor_is_its_mscale():
    with pytest.warns(RopeConfigWarning, match="no 'factor'"):
        rotary = Rotary.from_config(phimoe_config())
    assert rotary.head_dim == 128 and rotary.rope_type == "longrope"  # 4096 / 32
    for seq_len in (None, 1, 4096, 4097, 131072):
        assert rotary.attention_factor_at(seq_len) == PHIMOE_MSCALE  # 1.2432, not LongRoPE's 1.1902
    distinct = phimoe_config()
    distinct["rope_scaling"].update(short_mscale=1.25, long_mscale=1.5)
    with pytest.warns(RopeConfigWarning):
        r = Rotary.from_config(distinct)
    assert (r.attention_factor_at(4096), r.attention_factor_at(4097)) == (1.25, 1.5)
    with pytest.raises(ValueError, match=r"'long_mscale'\] is required beside .*'short_mscale'\]"):
        bad = phimoe_config()
        del bad["rope_scaling"]["long_mscale"]
        quietly(bad)


@pytest.mark.any_backend  # names its backend: a compiled one (the values are every backend's)
def test_phimoe_against_hf(hf):
    """HF's PhimoeRotaryEmbedding: the same attention factor, 1.2432, and frequencies.

    Its forward pass recomputes the frequencies without the sequence length (so with
    short_factor at every length) while the mscale switches; fastpe follows LongRoPE there
    (long_factor past original_max_position_embeddings).  With equal placeholder lists the
    two agree at every length; with distinct ones, up to original_max_position_embeddings."""
    import torch

    for short, long in (([1.0] * 64, [1.0] * 64), ([1.0 + i / 64 for i in range(64)], [2.0 + i for i in range(64)])):
        cfg = phimoe_config(short, long)
        config, _ = hf.hf_model_config(cfg)
        module = hf.hf_rotary(config)
        rotary = quietly(cfg)
        for n in ((4096, 8192) if short == long else (4096,)) if FAST else (64,):
            with torch.no_grad():
                cos, sin = module(torch.zeros(1, n, 1), torch.arange(n)[None])
            theirs = cos[0, :, :64].double().numpy()
            c, _ = rotary.cos_sin(np.arange(n), backend=FAST[0] if FAST else "python")
            inv = rotary.inv_freq_at(n)
            bound = hf.cos_sin_bound(np.arange(n), inv, inv * (1 + 8 * 2.0**-24), rotary.attention_factor_at(n))
            assert np.all(np.abs(c[:, :64] - theirs) <= bound)
            # the attention factor HF multiplies by: its cos at position 0
            assert float(cos[0, 0, 0]) == pytest.approx(PHIMOE_MSCALE, rel=2**-23)
            assert rotary.attention_factor_at(n) == PHIMOE_MSCALE


# ================================================================ DeepSeek, GPT-NeoX, GPT-J


def test_deepseek_v3_rotates_qk_rope_head_dim_in_pairs():
    cfg = fields("deepseek-v3")
    rotary = Rotary.from_config(cfg)
    assert (rotary.head_dim, rotary.rotary_dim, rotary.layout) == (64, 64, "gptj")  # not 7168 // 128 = 56
    assert Rotary.from_config(dict(cfg, rope_interleave=False)).layout == "neox"
    no_field = {k: v for k, v in cfg.items() if k != "qk_rope_head_dim"}
    assert Rotary.from_config(no_field).head_dim == 64  # DeepseekV3Config's default
    assert Rotary.from_config(dict(cfg, qk_rope_head_dim=32)).head_dim == 32
    with pytest.raises(TypeError, match=r"config\['rope_interleave'\] must be true or false"):
        Rotary.from_config(dict(cfg, rope_interleave="yes"))
    with pytest.raises(TypeError, match=r"config\['qk_rope_head_dim'\] must be an integer"):
        Rotary.from_config(dict(cfg, qk_rope_head_dim=64.0))


def test_gpt_neox_reads_rotary_pct_and_rotary_emb_base():
    cfg = fields("gpt-neox-20b")
    rotary = Rotary.from_config(cfg)
    assert (rotary.head_dim, rotary.rotary_dim, rotary.base) == (96, 24, 10000.0)  # 6144 / 64, 0.25
    pythia = dict(cfg, rotary_pct=0.5, rotary_emb_base=5e5)
    assert (Rotary.from_config(pythia).rotary_dim, Rotary.from_config(pythia).base) == (48, 5e5)
    defaults = {k: v for k, v in cfg.items() if k not in ("rotary_pct", "rotary_emb_base")}
    assert Rotary.from_config(defaults) == rotary  # GPTNeoXConfig's defaults: 0.25, 10000
    with pytest.warns(RopeConfigWarning, match=r"config\['rope_theta'\] = 500000.0 is ignored: GPT-NeoX"):
        assert Rotary.from_config(dict(cfg, rope_theta=5e5)).base == 10000.0
    with pytest.warns(RopeConfigWarning, match=r"config\['partial_rotary_factor'\] = 1.0 is ignored"):
        assert Rotary.from_config(dict(cfg, partial_rotary_factor=1.0)).rotary_dim == 24
    in_dict = dict(cfg, rope_scaling={"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5})
    assert Rotary.from_config(in_dict).rotary_dim == 48  # the dict's own wins
    with pytest.raises(ValueError, match=r"int\(config\['hidden_size'\] // config\['num_attention_heads'\] \* "
                                         r"config\['rotary_pct'\]\) = int\(96 \* 0.27\) = 25 rotated dimensions"):
        Rotary.from_config(dict(cfg, rotary_pct=0.27))


def test_gpt_j_reads_rotary_dim_n_embd_and_n_head():
    cfg = fields("gpt-j-6b")
    rotary = Rotary.from_config(cfg)
    assert (rotary.head_dim, rotary.rotary_dim, rotary.base, rotary.layout) == (256, 64, 10000.0, "gptj")
    assert rotary.max_position_embeddings == 2048  # n_positions
    assert Rotary.from_config({k: v for k, v in cfg.items() if k != "rotary_dim"}).rotary_dim == 64  # default
    assert Rotary.from_config(dict(cfg, rotary_dim=32)).rotary_dim == 32
    assert Rotary.from_config(dict(cfg, model_type="codegen")) == rotary
    with pytest.warns(RopeConfigWarning, match=r"config\['rope_theta'\] is ignored: gptj's rotary embedding"):
        assert Rotary.from_config(dict(cfg, rope_theta=5e5)).base == 10000.0
    with pytest.raises(ValueError, match=r"config\['rotary_dim'\] is unset or 0.*4096 wide"):
        Rotary.from_config(dict(cfg, rotary_dim=None))
    assert Rotary.from_config(dict(cfg, rotary_dim=None, n_head=1, n_embd=64)).rotary_dim == 64
    with pytest.raises(ValueError, match=r"config\['rotary_dim'\] must be even and <= "):
        Rotary.from_config(dict(cfg, rotary_dim=63))


# ====================================================================== the other fields


def test_head_dim_hidden_size_and_legacy_names():
    llama = fields("llama-3.1-8b")
    assert Rotary.from_config(llama).head_dim == 128  # 4096 / 32
    assert Rotary.from_config(dict(llama, head_dim=64)).head_dim == 64
    assert Rotary.from_config(dict(llama, head_dim=None)).head_dim == 128  # HF: head_dim or hidden // heads
    nemo = Rotary.from_config(fields("mistral-nemo-base-2407"))
    assert nemo.head_dim == 128  # its head_dim, not 5120 // 32 = 160
    legacy = {"n_embd": 1024, "n_head": 16, "n_positions": 2048, "rope_theta": 1e4}
    r = Rotary.from_config(legacy)
    assert (r.head_dim, r.max_position_embeddings) == (64, 2048)
    with pytest.raises(ValueError, match=r"the config gives no head size: config\['head_dim'\] is unset and so is "
                                         r"config\['num_attention_heads'\]"):
        Rotary.from_config({"hidden_size": 1024})
    with pytest.raises(ValueError, match=r"config\['num_attention_heads'\] must be >= 1"):
        Rotary.from_config({"hidden_size": 1024, "num_attention_heads": 0})


def test_rope_theta_and_partial_rotary_factor_top_level_or_in_the_dict():
    llama = fields("llama-3.1-8b")
    assert Rotary.from_config(llama).base == 500000.0  # top level: rope_scaling has no rope_theta
    v5 = {k: v for k, v in llama.items() if k not in ("rope_scaling", "rope_theta")}
    v5["rope_parameters"] = dict(llama["rope_scaling"], rope_theta=500000.0)
    assert Rotary.from_config(v5) == Rotary.from_config(llama)  # transformers 5's form
    both = dict(llama, rope_theta=1e4, rope_scaling=dict(llama["rope_scaling"], rope_theta=5e5))
    assert Rotary.from_config(both).base == 5e5  # the dict's wins (HF's setdefault)
    assert Rotary.from_config({k: v for k, v in llama.items() if k != "rope_theta"}).base == 10000.0
    scout = {k: v for k, v in fields("llama-4-scout-17b-16e").items() if k != "rope_theta"}
    assert Rotary.from_config(scout).base == 5e5  # Llama4TextConfig's default_theta
    stablelm = fields("stablelm-3b-4e1t")
    assert Rotary.from_config(stablelm).rotary_dim == 20
    assert Rotary.from_config({k: v for k, v in stablelm.items() if k != "partial_rotary_factor"}).rotary_dim == 20
    # Llama's default rule rotates whole heads whatever partial_rotary_factor says; its
    # scaled rules read it (HF's ROPE_INIT_FUNCTIONS); Phi's default rule reads it
    assert Rotary.from_config(dict(fields("llama-3-8b"), partial_rotary_factor=0.5)).rotary_dim == 128
    assert Rotary.from_config(dict(fields("llama-3.1-8b"), partial_rotary_factor=0.5)).rotary_dim == 64
    assert Rotary.from_config(dict(fields("llama-3-8b"), model_type="phi", partial_rotary_factor=0.5)).rotary_dim == 64
    assert Rotary.from_config(dict(fields("llama-3-8b"), model_type="unknown", partial_rotary_factor=0.5)
                              ).rotary_dim == 64
    with pytest.raises(ValueError, match=r"config\['rope_theta'\] must be greater than 1"):
        Rotary.from_config(dict(llama, rope_theta=0.5))
    with pytest.raises(TypeError, match=r"config\['rope_scaling'\]\['rope_theta'\] must be a real number"):
        Rotary.from_config(dict(llama, rope_scaling=dict(llama["rope_scaling"], rope_theta="5e5")))
    with pytest.raises(ValueError, match=r"config\['partial_rotary_factor'\] must be <= 1"):
        Rotary.from_config(dict(stablelm, partial_rotary_factor=1.5))


def test_rope_scaling_wins_over_rope_parameters():
    llama = fields("llama-3-8b")
    both = dict(llama, rope_scaling={"rope_type": "linear", "factor": 4.0},
                rope_parameters={"rope_type": "linear", "factor": 2.0})
    assert Rotary.from_config(both).factor == 4.0  # HF: rope_scaling or rope_parameters
    assert Rotary.from_config(dict(both, rope_scaling=None)).factor == 2.0
    assert Rotary.from_config(dict(both, rope_scaling={})).factor == 2.0
    with pytest.raises(TypeError, match=r"config\['rope_scaling'\] must be a dict or null, got str"):
        Rotary.from_config(dict(llama, rope_scaling="linear"))


def test_errors_name_the_config_field():
    llama = fields("llama-3.1-8b")
    with pytest.raises(ValueError, match=r"^config\['rope_scaling'\]\['factor'\] is required for rope_type 'llama3'"):
        Rotary.from_config(dict(llama, rope_scaling={k: v for k, v in llama["rope_scaling"].items() if k != "factor"}))
    with pytest.raises(TypeError, match=r"^config\['max_position_embeddings'\] must be an integer"):
        Rotary.from_config(dict(llama, max_position_embeddings="131072"))
    with pytest.raises(ValueError, match=r"^config\['original_max_position_embeddings'\] must be >= 1"):
        Rotary.from_config(dict(llama, original_max_position_embeddings=0))
    with pytest.raises(ValueError, match=r"^config\['text_config'\]\['rope_scaling'\]\['factor'\] must be > 0"):
        Rotary.from_config({"model_type": "llama4", "text_config": dict(
            fields("llama-4-scout-17b-16e"), model_type=None, rope_scaling=dict(llama["rope_scaling"], factor=0))})


def test_unknown_rope_keys_are_reported_by_name():
    llama = fields("llama-3.1-8b")
    cfg = dict(llama, rope_scaling={"rope_type": "yarn", "factor": 16.0, "beta_fsat": 32.0,
                                    "original_max_position_embeddings": 8192})
    with pytest.warns(RopeConfigWarning, match=r"config\['rope_scaling'\]\['beta_fsat'\] \(did you mean "
                                               r"'beta_fast'\?\) is not a key of rope_type 'yarn'.*ignored"):
        rotary = Rotary.from_config(cfg)
    assert rotary.beta_fast == 32.0  # the default: the misspelt key was not read
    with pytest.warns(RopeConfigWarning, match=r"scaling\['temporal'\], scaling\['finetuned'\] are not keys"):
        rope.inv_freq(64, scaling={"rope_type": "linear", "factor": 2.0, "temporal": [1], "finetuned": True})


def test_notes_are_ignored():
    llama = fields("llama-3.1-8b")
    noted = dict(llama, _source="somewhere", _anything={"rope_type": "linear"},
                 rope_scaling=dict(llama["rope_scaling"], _note="a note"))
    assert Rotary.from_config(noted) == Rotary.from_config(llama)


# ======================================================================= per-layer configs


def test_per_layer_configs_need_a_layer_type():
    for name in ("gemma-3-12b-it", "gemma-3-4b-it", "gemma-4-31b-it", "modernbert-base"):
        with pytest.raises(ValueError, match=r"per-layer rope parameters, for 'full_attention', "
                                             r"'sliding_attention': pass layer_type= one of them"):
            Rotary.from_config(fields(name))
        with pytest.raises(ValueError, match=r"layer_type 'chunked_attention' is not one of"):
            Rotary.from_config(fields(name), layer_type="chunked_attention")
    with pytest.raises(TypeError, match="layer_type must be a string or None, got int"):
        Rotary.from_config(fields("gemma-3-4b-it"), layer_type=0)


def test_flat_configs_take_one_of_their_layer_types_or_none():
    gemma2 = fields("gemma-2-9b-it")
    gemma2["layer_types"] = ["sliding_attention", "full_attention"] * 21
    one = Rotary.from_config(gemma2)
    assert Rotary.from_config(gemma2, layer_type="sliding_attention") == one
    with pytest.raises(ValueError, match="layer_type 'other' is not one of the config's layer types"):
        Rotary.from_config(gemma2, layer_type="other")
    with pytest.raises(ValueError, match="the config has no layer_types"):
        Rotary.from_config(fields("llama-3-8b"), layer_type="full_attention")
    scout = Rotary.from_config(fields("llama-4-scout-17b-16e"), layer_type=None)  # layer_types computed by HF only
    assert scout.rope_type == "llama3"


def test_gemma3_scales_full_attention_layers_only():
    cfg = fields("gemma-3-12b-it")
    full = Rotary.from_config(cfg, layer_type="full_attention")
    sliding = Rotary.from_config(cfg, layer_type="sliding_attention")
    assert (full.rope_type, full.factor, full.base) == ("linear", 8.0, 1e6)
    assert (sliding.rope_type, sliding.base) == ("default", 10000.0)  # rope_local_base_freq, no x8
    assert Rotary.from_config(dict(cfg, rope_local_base_freq=2e4), layer_type="sliding_attention").base == 2e4
    v5 = {k: v for k, v in cfg.items() if k not in ("rope_scaling", "rope_theta", "rope_local_base_freq")}
    v5["rope_parameters"] = {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}
    assert Rotary.from_config(v5, layer_type="full_attention") == full
    assert Rotary.from_config(v5, layer_type="sliding_attention") == sliding


def test_modernbert_global_and_local_theta():
    cfg = fields("modernbert-base")
    assert Rotary.from_config(cfg, layer_type="full_attention").base == 160000.0
    assert Rotary.from_config(cfg, layer_type="sliding_attention").base == 10000.0
    scaled = dict(cfg, rope_scaling={"rope_type": "linear", "factor": 2.0})  # ModernBERT scales every layer
    assert Rotary.from_config(scaled, layer_type="sliding_attention").factor == 2.0


def test_gemma4_full_attention_layers_have_their_own_head_dim():
    cfg = fields("gemma-4-31b-it")
    full = Rotary.from_config(cfg, layer_type="full_attention")
    assert (full.head_dim, full.rotary_dim, full.rope_type, full.partial_rotary_factor) == (512, 512, "proportional",
                                                                                             0.25)
    assert np.count_nonzero(full.inv_freq) == 64  # int(0.25 * 512 // 2) pairs turn, the other 192 do not
    assert Rotary.from_config(cfg, layer_type="sliding_attention").head_dim == 256
    assert Rotary.from_config(dict(cfg, global_head_dim=384), layer_type="full_attention").head_dim == 384
    per_layer = {k: v for k, v in cfg.items() if k != "global_head_dim"}
    per_layer["per_layer_config"] = {f"{i:02d}": {"head_dim": 512} for i, t in enumerate(cfg["layer_types"])
                                     if t == "full_attention"}
    assert Rotary.from_config(per_layer, layer_type="full_attention") == full  # as to_dict() writes it
    per_layer["per_layer_config"]["05"] = {"head_dim": 256}
    with pytest.raises(ValueError, match=r"gives the 'full_attention' layers different head_dims \(256, 512\)"):
        Rotary.from_config(per_layer, layer_type="full_attention")
    null = dict(cfg, rope_parameters=dict(cfg["rope_parameters"], full_attention=None))
    with pytest.raises(ValueError, match=r"\['full_attention'\] is null: layers of type 'full_attention' use no RoPE"):
        Rotary.from_config(null, layer_type="full_attention")


# ============================================================================ the sources


def test_a_path_a_directory_a_dict_and_a_pretrained_config(tmp_path, hf):
    cfg = fields("llama-3.1-8b")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    want = Rotary.from_config(cfg)
    assert Rotary.from_config(path) == want and Rotary.from_config(str(path)) == want
    assert Rotary.from_config(tmp_path) == want  # a model directory: its config.json
    config, _ = hf.hf_model_config(cfg)
    assert Rotary.from_config(config) == want  # through to_dict(): transformers is not imported by fastpe
    for name in ("gemma-3-12b-it", "gemma-4-31b-it", "deepseek-v3", "gpt-j-6b", "gpt-neox-20b",
                 "phi-3-mini-128k-instruct", "modernbert-base"):
        config, _ = hf.hf_model_config(fields(name))
        for layer in hf.hf_layer_types(config):
            assert quietly(config, layer_type=layer) == quietly(fields(name), layer_type=layer), (name, layer)
    phimoe, _ = hf.hf_model_config(phimoe_config())
    assert quietly(phimoe) == quietly(phimoe_config())


def test_bad_sources_are_refused(tmp_path):
    with pytest.raises(TypeError, match="config must be the path of a config.json.*got int"):
        Rotary.from_config(3)
    with pytest.raises(ValueError, match="does not exist"):
        Rotary.from_config(tmp_path / "missing.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="must hold a JSON object, got list"):
        Rotary.from_config(tmp_path / "list.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="is not valid JSON"):
        Rotary.from_config(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="a directory without a config.json"):
        Rotary.from_config(tmp_path)

    class NotAConfig:
        def to_dict(self):
            return [1]

    with pytest.raises(TypeError, match=r"config.to_dict\(\) must return a dict, got list"):
        Rotary.from_config(NotAConfig())
    with pytest.raises(TypeError, match=r"config\['model_type'\] must be a string"):
        Rotary.from_config({"model_type": 3})


def test_the_config_is_never_modified():
    import copy

    for name in ("phi-3-mini-128k-instruct", "gemma-3-12b-it", "gpt-neox-20b"):
        cfg = fields(name)
        before = copy.deepcopy(cfg)
        for layer in (("full_attention", "sliding_attention") if "gemma" in name else (None,)):
            quietly(cfg, layer_type=layer)
        assert cfg == before


def test_from_config_is_a_rotary_like_any_other():
    rotary = Rotary.from_config(fields("llama-3.1-8b"))
    direct = Rotary(128, base=500000.0, scaling=fields("llama-3.1-8b")["rope_scaling"],
                    max_position_embeddings=131072)
    assert rotary == direct and repr(rotary) == repr(direct)
    c, s = rotary.cos_sin(np.arange(100))
    assert same_bits(c, direct.cos_sin(np.arange(100))[0])
