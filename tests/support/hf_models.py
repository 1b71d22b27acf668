"""Tiny transformers models with the rope settings of real ones, for the fastpe.hf tests.

:func:`tiny_model` builds a randomly initialised model (fixed seed, no download) from the
config class of an architecture: the published config of ``tests/data/configs/<name>.json``
(every field kept, the rotary ones above all) with its sizes shrunk -- 2 layers, hidden
size 64 (larger where a LongRoPE factor list fixes the head size), vocabulary 128 -- and,
where a model type has no file there (Phi-3.5-MoE), the fields written out in
:data:`SYNTHETIC`.  :func:`rotary_modules` finds a model's rotary modules (HF's or patched),
:func:`shifted` moves every position a model's rotary modules see.

Import it only where torch and transformers are installed.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

CONFIGS = Path(__file__).resolve().parent.parent / "data" / "configs"

_COMMON = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 128, "tie_word_embeddings": False}
_TWO_KINDS = ["sliding_attention", "full_attention"]
#: published fields a tiny model cannot keep: per-layer lists of the full depth, token ids of
#: the full vocabulary
_DROPPED = ("architectures", "layer_types", "num_hidden_layers", "pad_token_id", "bos_token_id", "eos_token_id",
            "cls_token_id", "sep_token_id")

#: per model type: the sizes that replace the published ones
SIZES = {
    "llama": {"head_dim": 16},
    "mistral": {"head_dim": 16},
    "qwen2": {},
    "qwen3": {"head_dim": 16},
    "gemma2": {"head_dim": 16, "query_pre_attn_scalar": 16},
    "gemma3_text": {"head_dim": 16, "query_pre_attn_scalar": 16, "layer_types": _TWO_KINDS},
    "gemma4_text": {"head_dim": 16, "global_head_dim": 32, "num_global_key_value_heads": 1,
                    "layer_types": _TWO_KINDS, "vocab_size_per_layer_input": 128, "hidden_size_per_layer_input": 0,
                    "enable_moe_block": False, "num_experts": None, "top_k_experts": None,
                    "moe_intermediate_size": None, "num_kv_shared_layers": 0},
    "llama4_text": {"head_dim": 16, "intermediate_size": 64, "intermediate_size_mlp": 128, "num_local_experts": 2,
                    "num_experts_per_tok": 1},
    # head_dim = hidden_size // heads: 96 for the 48 LongRoPE factors of Phi-3.5-mini, 128
    # for Phi-4-mini's (96 rotated of 128)
    "phi3": {"num_attention_heads": 2, "num_key_value_heads": 1},
    "phimoe": {"num_local_experts": 2, "num_experts_per_tok": 1},
    "gpt_neox": {"num_attention_heads": 2},  # head 32, rotary_pct 0.25: 8 rotated
    "stablelm": {"num_attention_heads": 2, "num_key_value_heads": 2},  # head 32, 0.25: 8 rotated
    "gptj": {"n_embd": 64, "n_head": 4, "n_layer": 2, "n_inner": 128, "rotary_dim": 8},
    "deepseek_v3": {"num_key_value_heads": 4, "q_lora_rank": 32, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
                    "qk_rope_head_dim": 16, "v_head_dim": 16, "n_routed_experts": 4, "num_experts_per_tok": 2,
                    "n_group": 2, "topk_group": 1, "moe_intermediate_size": 32, "first_k_dense_replace": 1,
                    "n_shared_experts": 1},
    "gpt_oss": {"head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2, "experts_per_token": 2,
                "layer_types": _TWO_KINDS},
    "modernbert": {},
}
#: hidden sizes that a LongRoPE factor list fixes (head_dim * heads)
_HIDDEN = {"phi-3.5-mini-instruct": 192, "phi-3-mini-128k-instruct": 192, "phi-4-mini-instruct": 256}

#: a model type without a published config here: Phi-3.5-MoE's rope fields (its
#: short_mscale / long_mscale are the published ones; the 8 factors of each list, for a
#: 16-wide head, are made up: the published lists have 32 entries for its 128-wide heads)
SYNTHETIC = {
    "phimoe": {"model_type": "phimoe", "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
               "rope_theta": 10000.0, "sliding_window": 131072,
               "rope_scaling": {"type": "longrope", "short_mscale": 1.243163121016122,
                                "long_mscale": 1.243163121016122, "original_max_position_embeddings": 4096,
                                "short_factor": [1.0, 1.02, 1.05, 1.1, 1.3, 1.6, 2.0, 2.4],
                                "long_factor": [1.1, 1.3, 1.9, 3.0, 6.0, 12.0, 24.0, 32.0]}},
}

#: the models the tests build: name -> the config file (or SYNTHETIC entry) it starts from
MODELS = {
    "llama-2": "llama-2-7b", "llama-3": "llama-3-8b", "llama-3.1": "llama-3.1-8b", "llama-3.2": "llama-3.2-1b",
    "llama-4": "llama-4-scout-17b-16e", "llama-4-instruct": "llama-4-scout-17b-16e-instruct", "mistral": "mistral-7b-v0.1", "mistral-nemo": "mistral-nemo-base-2407",
    "qwen2": "qwen2-7b", "qwen2.5-yarn": "qwen2.5-7b-instruct-yarn", "qwen3": "qwen3-8b",
    "phi-3-mini": "phi-3-mini-4k-instruct", "phi-3.5-mini": "phi-3.5-mini-instruct", "phi-4-mini": "phi-4-mini-instruct",
    "phimoe": "phimoe", "gemma-2": "gemma-2-9b-it", "gemma-3": "gemma-3-12b-it", "gemma-4": "gemma-4-31b-it",
    "gemma-4-default": "gemma-4-31b-it",
    "gpt-neox": "gpt-neox-20b", "gpt-j": "gpt-j-6b", "stablelm": "stablelm-3b-4e1t", "deepseek-v3": "deepseek-v3",
    "gpt-oss": "gpt-oss-20b", "modernbert": "modernbert-base",
}

#: the transformers class each model type is built with
CLASSES = {"modernbert": "ModernBertForMaskedLM", "gemma3_text": "Gemma3ForCausalLM",
           "gemma4_text": "Gemma4ForCausalLM", "llama4_text": "Llama4ForCausalLM"}


#: models that change a published config's rope fields: Gemma 4 with the default rule on its
#: full-attention layers (its per-layer machinery, whatever fastpe.rope reads of
#: 'proportional')
VARIANTS = {"gemma-4-default": {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                                    "sliding_attention": {"rope_type": "default",
                                                                          "rope_theta": 10000.0}}}}


def fields(name: str) -> dict:
    """The config fields of model ``name`` (see :data:`MODELS`), sizes shrunk."""
    source = MODELS[name]
    if source in SYNTHETIC:
        raw = json.loads(json.dumps(SYNTHETIC[source]))
    else:
        raw = {k: v for k, v in json.loads((CONFIGS / f"{source}.json").read_text()).items() if not k.startswith("_")}
    model_type = raw["model_type"]
    out = {k: v for k, v in raw.items() if k not in _DROPPED}
    if model_type != "gptj":
        out.update(_COMMON)
    else:
        out.update(vocab_size=128, tie_word_embeddings=False)
    out.update(SIZES[model_type])
    # token ids inside the tiny vocabulary; no end-of-sequence token: generate runs its course
    out.update(pad_token_id=0, bos_token_id=None, eos_token_id=None)
    if model_type == "modernbert":
        out.update(cls_token_id=1, sep_token_id=2, mask_token_id=3)
    if source in _HIDDEN:
        out["hidden_size"] = _HIDDEN[source]
    out.update(VARIANTS.get(name, {}))
    if model_type == "gptj":
        out["n_positions"] = 2**20 + 4096  # HF's table must reach the large positions
    return out


def tiny_config(name: str):
    """The transformers config of :func:`fields` (``AutoConfig.for_model``)."""
    import transformers

    values = fields(name)
    return transformers.AutoConfig.for_model(values.pop("model_type"), **values)


def tiny_model(name: str, *, seed: int = 0, qk_scale: float = 1.0):
    """A randomly initialised float32 model in eval mode; q and k projections multiplied by
    ``qk_scale`` (sharper attention, more sensitive to the rotation angles)."""
    import torch
    import transformers

    config = tiny_config(name)
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"  # the grouped kernels take no float64
    cls_name = CLASSES.get(config.model_type)
    torch.manual_seed(seed)
    if cls_name is None:
        model = transformers.AutoModelForCausalLM.from_config(config)
    else:
        model = getattr(transformers, cls_name)(config)
    model.eval()
    if qk_scale != 1.0:
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if p.ndim == 2 and any(tag in pname for tag in _QK_TAGS):
                    p.mul_(qk_scale)
    return model


_QK_TAGS = ("q_proj", "k_proj", "qkv_proj", "query_key_value", "Wqkv", "q_b_proj", "kv_a_proj_with_mqa")


def rotary_modules(model) -> list:
    """The model's rotary modules (HF's or fastpe's), each once, outermost first."""
    found, seen = [], set()
    for m in model.modules():
        if type(m).__name__.endswith("RotaryEmbedding") and id(m) not in seen:
            found.append(m)
            seen.add(id(m))
            seen.update(id(c) for c in m.modules())
    return found


@contextlib.contextmanager
def shifted(model, shift: int):
    """Every position the model's rotary modules see moved by ``shift``."""
    modules = rotary_modules(model)
    for m in modules:
        forward = m.forward

        def moved(x, position_ids, *args, _forward=forward, **kwargs):
            return _forward(x, position_ids + shift, *args, **kwargs)

        m.forward = moved
    try:
        yield model
    finally:
        for m in modules:
            del m.forward


def tiny_gemma3_multimodal(*, seed: int = 0):
    """Gemma 3 with its (tiny SigLIP) vision tower: ``Gemma3ForConditionalGeneration``, whose
    text model has the rope settings of ``gemma-3-12b-it``."""
    import torch
    import transformers

    values = fields("gemma-3")
    values.pop("model_type")
    text = transformers.Gemma3TextConfig(**values)
    vision = transformers.SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                             num_attention_heads=2, image_size=28, patch_size=14)
    config = transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    return transformers.Gemma3ForConditionalGeneration(config).eval()
