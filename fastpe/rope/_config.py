"""Reading a model's configuration as HF transformers reads it (``Rotary.from_config``).

A model's ``config.json`` spreads its rotary embedding over several fields: the rope dict
(``rope_scaling``, or ``rope_parameters`` in transformers 5), and beside it ``rope_theta``,
the head size, the lengths, and names of their own in older architectures.  HF's config
classes standardise them (``RotaryEmbeddingConfigMixin.standardize_rope_params`` and each
class's ``convert_rope_params_to_dict``) and each model's rotary module reads the result.
:func:`read_config` follows the same rules, for a file, a dict or a ``PretrainedConfig``:

* the rope dict: ``rope_scaling`` if set, else ``rope_parameters`` (HF's order); a dict
  nested by layer type (HF 5's per-layer ``rope_parameters``, whenever its keys are among
  the config's ``layer_types``) needs ``layer_type``;
* ``rope_theta``: the dict's, else the config's top-level one, else the class default
  (10000 for most; Mixtral and Phi-3.5-MoE 1e6, Llama 4 5e5, gpt-oss 150000);
* the rotated part: ``int(head_dim * partial_rotary_factor)`` (the dict's, else the top
  level's) -- except where a model's default rule ignores it (Llama, Mistral, Qwen and most
  others rotate whole heads unless a scaled rule is set: :data:`DEFAULT_READS_PARTIAL` lists
  the architectures whose default rule reads it);
* ``head_dim``: the field, else ``hidden_size // num_attention_heads``;
* ``original_max_position_embeddings`` (yarn, llama3, longrope): a top-level value wins
  over the dict's, as ``standardize_rope_params`` prefers it (Phi-3's config class always
  has one: 4096 unless set), else the dict's, else ``max_position_embeddings``;
* the architecture's own fields and defaults, listed in :data:`ARCHITECTURES`: GPT-NeoX /
  Pythia's ``rotary_pct`` and ``rotary_emb_base`` (it ignores a top-level ``rope_theta``);
  GPT-J / CodeGen's ``rotary_dim``, ``n_embd``, ``n_head``, ``n_positions`` and fixed base
  10000; DeepSeek's ``qk_rope_head_dim`` (the rotated head) and ``rope_interleave``; Phi-3's
  legacy ``su`` / ``yarn`` for longrope; Phi-3.5-MoE's ``short_mscale`` / ``long_mscale``;
  Gemma 3's linear scaling on full-attention layers only, with ``rope_local_base_freq`` on
  sliding ones; ModernBERT's ``global_rope_theta`` / ``local_rope_theta``; Gemma 4's
  ``global_head_dim`` (or ``per_layer_config``) on full-attention layers;
* the layout: ``gptj`` (adjacent pairs) for the architectures HF rotates in pairs
  (:data:`PAIRED`), ``neox`` otherwise;
* a multimodal config's ``text_config`` when the rotary settings are there.

Keys starting with ``_`` are notes and are ignored.  Every error is a :class:`TypeError`
or :class:`ValueError` naming the config field (``config['rope_scaling']['factor']``);
every warning HF's validators give is a :class:`~fastpe.rope.RopeConfigWarning`.

The Phi-3 configs published with ``"type": "su"`` (the original Phi-3-mini/medium-128k and
Phi-3-vision revisions) read here as longrope with their top-level original length.
transformers 5.24 itself fails on them as published: ``Phi3Config`` renames ``su`` only
after ``standardize_rope_params`` has decided which types get
``original_max_position_embeddings``, so its own validation then finds the key missing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from . import _scaling
from .._plans.frequencies import DEFAULT_BASE
from ._scaling import RopeSpec, warn

__all__ = ["read_config", "is_model_config", "ARCHITECTURES", "PAIRED", "DEFAULT_READS_PARTIAL", "Architecture"]


@dataclass(frozen=True)
class Architecture:
    """How one ``model_type``'s config and rotary module read their RoPE fields."""

    #: how its config class builds the rope parameters: "generic", "gptj" (no rope dict:
    #: base 10000, ``rotary_dim``), "gpt_neox", "phi3", "phimoe", "gemma3", "modernbert",
    #: "gemma4"
    kind: str = "generic"
    #: the field that is the rotated head size, where it is not ``head_dim`` (DeepSeek)
    head_dim_key: str | None = None
    #: the config field choosing adjacent pairs (DeepSeek's ``rope_interleave``), if any
    interleave_key: str | None = None
    #: the class defaults of the fields read (what a config that omits them gets)
    defaults: Mapping = field(default_factory=dict)


#: architectures HF rotates in adjacent pairs ``(2i, 2i + 1)`` (``rotate_every_two``,
#: ``view_as_complex``, an interleaved ``rotate_half``): the ``gptj`` layout
PAIRED = frozenset({
    "gptj", "codegen", "llama4_text", "deepseek_v2", "cohere", "cohere2", "cohere2_moe", "glm", "glm4",
    "helium", "ernie4_5", "ernie4_5_moe", "moonshine",
})

#: architectures whose ``default`` rule reads ``partial_rotary_factor`` (HF 5.24's
#: ``compute_default_rope_parameters`` of their rotary modules); every other known one
#: (:data:`_DEFAULT_IGNORES_PARTIAL`) rotates the whole head under the default rule, as
#: Llama does.  A model type in neither list is read as these are (the scaled rules of every
#: model read it).
DEFAULT_READS_PARTIAL = frozenset({
    "bamba", "deepseek_v4", "diffusion_gemma_text", "dots3_note_audio_encoder", "dots3_note_text",
    "efficientloftr", "glm", "glm4", "glm4_moe", "glm4_moe_lite", "glm4v_moe_text", "glm4v_text", "glm_image_text",
    "glm_ocr_text", "glmasr", "gpt_neox", "gpt_neox_japanese", "laguna", "mellum", "mimo_v2_flash", "minimax_m2",
    "minimax_m3_vl", "moonshine", "moonshine_streaming", "musicflamingo", "nemotron", "nemotron3_5_transcribe_asr_audio",
    "nemotron3_diarization", "neomme", "persimmon", "phi", "phi3", "phi4_multimodal", "qwen3_5_moe_text",
    "qwen3_5_text", "qwen3_next", "qwen4_exp_text", "recurrent_gemma", "solar_open", "stablelm", "step3p7", "zaya",
})
_DEFAULT_IGNORES_PARTIAL = frozenset({
    "afmoe", "apertus", "apertus1p5_text", "arcee", "aria_text", "axk1", "axk2", "bailing_hybrid", "beam", "bitnet",
    "blt", "chameleon", "cohere", "cohere2", "cohere2_moe", "cohere_compass_text", "cosmos3_edge_text", "csm", "cwm",
    "dbrx", "deepseek_ocr2_text", "deepseek_v2", "deepseek_v3", "deepseek_v32", "dia", "diffllama", "doge", "dory",
    "dots1", "embedding_gemma2_text", "emu3", "ernie4_5", "ernie4_5_moe", "ernie4_5_vl_moe_text", "esm", "esmc",
    "eurobert", "evolla", "exaone4", "exaone_moe", "falcon", "falcon_h1", "flex_olmo", "flint", "gemma", "gemma2",
    "gemma3_text", "gemma3n_text", "gemma4_text", "gemma4_unified_text", "glm_moe_dsa", "gpt_oss",
    "gradium_phonon_tts", "granite", "granite4_vision_text", "granite_docling_text", "granite_swa", "granitemoe",
    "granitemoe_swa", "granitemoehybrid", "granitemoeshared", "gte", "helium", "higgs_audio_v2", "hrm_text",
    "hunyuan_v1_dense", "hunyuan_v1_moe", "hunyuan_vl_text", "hy_v3", "hy_v4", "hy_v4_vl_text", "hyperclovax",
    "idefics", "jais2", "jetmoe", "jina_embeddings_v3", "kolibri1", "kyutai_speech_to_text", "lara_mini",
    "lasr_encoder", "lfm2", "lfm2_moe", "lfm3", "llama", "llama4_text", "longcat_flash", "mimi", "minicpm3", "minimax",
    "ministral", "ministral3", "mistral", "mistral4", "mistral_large4_text", "mixtral", "mllama_text_model",
    "modernbert", "modernbert_decoder", "molmo2_text", "moshi", "muse_glimmer", "muse_glimmer_assistant", "muse_spark",
    "nanochat", "neucodec", "nomic_bert", "olmo", "olmo2", "olmo3", "olmo_hybrid", "olmoe", "openai_privacy_filter",
    "paddleocr_vl", "pe_audio_encoder", "pe_audio_video_encoder", "pe_video_encoder", "phimoe", "pocket_tts",
    "pocket_tts_audio_tokenizer", "qwen2", "qwen2_5_omni", "qwen2_5_omni_dit", "qwen2_5_vl", "qwen2_moe", "qwen2_vl",
    "qwen3", "qwen3_moe", "qwen3_omni_moe", "qwen3_omni_moe_text", "qwen3_vl_moe_text", "qwen3_vl_text", "seed_oss",
    "smollm3", "starcoder2", "t5gemma", "t5gemma2_text", "timesfm2_5", "ultrabert", "unlimited_ocr_text", "vaultgemma",
    "voxtral_realtime", "xcodec2", "youtu", "zamba2",
})

_GPT_J_DEFAULTS = {"n_embd": 4096, "n_head": 16, "n_positions": 2048, "rotary_dim": 64}

#: the architectures read with fields or defaults of their own (transformers 5.24's config
#: classes: the class defaults of the fields the rotary module reads; ``rope_theta`` is the
#: class's ``default_theta``)
ARCHITECTURES: dict[str, Architecture] = {
    "llama": Architecture(defaults={"hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 2048}),
    "mistral": Architecture(defaults={"hidden_size": 4096, "num_attention_heads": 32,
                                      "max_position_embeddings": 131072}),
    "mixtral": Architecture(defaults={"hidden_size": 4096, "num_attention_heads": 32,
                                      "max_position_embeddings": 131072, "rope_theta": 1e6}),
    "qwen2": Architecture(defaults={"hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 32768}),
    "qwen3": Architecture(defaults={"hidden_size": 4096, "num_attention_heads": 32, "head_dim": 128,
                                    "max_position_embeddings": 32768}),
    "gemma": Architecture(defaults={"hidden_size": 3072, "num_attention_heads": 16, "head_dim": 256,
                                    "max_position_embeddings": 8192}),
    "gemma2": Architecture(defaults={"hidden_size": 2304, "num_attention_heads": 8, "head_dim": 256,
                                     "max_position_embeddings": 8192}),
    "gemma3_text": Architecture("gemma3", defaults={
        "hidden_size": 2304, "num_attention_heads": 8, "head_dim": 256, "max_position_embeddings": 131072,
        "num_hidden_layers": 26, "sliding_window_pattern": 6, "rope_theta": 1e6, "rope_local_base_freq": 1e4}),
    "gemma4_text": Architecture("gemma4", defaults={
        "hidden_size": 2304, "num_attention_heads": 8, "head_dim": 256, "max_position_embeddings": 131072,
        "num_hidden_layers": 30, "global_head_dim": 512}),
    "modernbert": Architecture("modernbert", defaults={
        "hidden_size": 768, "num_attention_heads": 12, "max_position_embeddings": 8192, "num_hidden_layers": 22,
        "global_attn_every_n_layers": 3, "global_rope_theta": 160000.0, "local_rope_theta": 10000.0}),
    "phi3": Architecture("phi3", defaults={"hidden_size": 3072, "num_attention_heads": 32,
                                           "max_position_embeddings": 4096, "original_max_position_embeddings": 4096}),
    "phimoe": Architecture("phimoe", defaults={"hidden_size": 4096, "num_attention_heads": 32,
                                               "max_position_embeddings": 131072, "rope_theta": 1e6}),
    "phi": Architecture(defaults={"hidden_size": 2048, "num_attention_heads": 32, "max_position_embeddings": 2048}),
    "stablelm": Architecture(defaults={"hidden_size": 2560, "num_attention_heads": 32, "max_position_embeddings": 4096,
                                       "partial_rotary_factor": 0.25}),
    "gpt_neox": Architecture("gpt_neox", defaults={"hidden_size": 6144, "num_attention_heads": 64,
                                                   "max_position_embeddings": 2048, "rotary_pct": 0.25,
                                                   "rotary_emb_base": 10000.0}),
    "gptj": Architecture("gptj", defaults=_GPT_J_DEFAULTS),
    "codegen": Architecture("gptj", defaults=_GPT_J_DEFAULTS),
    "deepseek_v2": Architecture(head_dim_key="qk_rope_head_dim", defaults={
        "hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 2048, "qk_rope_head_dim": 64}),
    "deepseek_v3": Architecture(head_dim_key="qk_rope_head_dim", interleave_key="rope_interleave", defaults={
        "hidden_size": 7168, "num_attention_heads": 128, "max_position_embeddings": 4096, "qk_rope_head_dim": 64,
        "rope_interleave": True}),
    "llama4_text": Architecture(defaults={"hidden_size": 5120, "num_attention_heads": 40, "head_dim": 128,
                                          "max_position_embeddings": 131072, "rope_theta": 5e5}),
    "gpt_oss": Architecture(defaults={
        "hidden_size": 2880, "num_attention_heads": 64, "head_dim": 64, "max_position_embeddings": 131072,
        "rope_theta": 150000.0, "rope_parameters": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                                                    "beta_slow": 1.0, "truncate": False,
                                                    "original_max_position_embeddings": 4096}}),
    "cohere": Architecture(defaults={"hidden_size": 8192, "num_attention_heads": 64, "max_position_embeddings": 8192,
                                     "rope_theta": 5e5}),
}
_GENERIC = Architecture()
#: the text model of a multimodal config whose ``text_config`` has no ``model_type``
_TEXT_MODEL = {"gemma3": "gemma3_text", "gemma4": "gemma4_text", "llama4": "llama4_text"}
#: fields whose presence says the rotary settings are at this level (not in ``text_config``)
_ROTARY_FIELDS = ("rope_scaling", "rope_parameters", "rope_theta", "hidden_size", "n_embd", "head_dim",
                  "num_attention_heads")


class _Config:
    """A config dict (notes dropped) with its architecture's defaults and a name for messages."""

    def __init__(self, data: Mapping, where: str):
        self.data = {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith("_"))}
        self.where = where
        model_type = self.data.get("model_type")
        if model_type is not None and not isinstance(model_type, str):
            raise TypeError(f"{self.name('model_type')} must be a string, got {type(model_type).__name__} "
                            f"{model_type!r}")
        self.model_type = model_type
        self.arch = ARCHITECTURES.get(model_type, _GENERIC)
        self.head_dim = None  # a head size given beside the config, replacing its own

    def name(self, key: str) -> str:
        return f"{self.where}[{key!r}]"

    def get(self, key: str):
        """The field as the config class has it: the file's value (null included), else the
        class default."""
        if key in self.data:
            return self.data[key]
        return self.arch.defaults.get(key)

    def given(self, key: str) -> bool:
        return self.data.get(key) is not None

    def int_field(self, key: str, *, low: int = 1, value=None):
        """A positive integer field (None when unset)."""
        value = self.get(key) if value is None else value
        if value is None:
            return None
        if not _scaling._is_int(value):
            raise TypeError(f"{self.name(key)} must be an integer, got {type(value).__name__} {value!r}")
        value = int(value)
        if value < low:
            raise ValueError(f"{self.name(key)} must be >= {low}, got {value}")
        return value

    def real_field(self, key: str, value=None):
        value = self.get(key) if value is None else value
        return None if value is None else _scaling._real(self.name(key), value)

    def dict_field(self, key: str):
        value = self.get(key)
        if value is not None and not isinstance(value, Mapping):
            raise TypeError(f"{self.name(key)} must be a dict or null, got {type(value).__name__}")
        return value

    def layer_types(self) -> list[str] | None:
        value = self.get("layer_types")
        if value is None:
            return None
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not all(
                isinstance(t, str) for t in value):
            raise TypeError(f"{self.name('layer_types')} must be a list of strings, got {_short(value)}")
        return list(value)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# -------------------------------------------------------------------------------- loading


def _load(config) -> tuple[Mapping, str]:
    """``(dict, name)`` of a path, a dict or a ``PretrainedConfig``."""
    if isinstance(config, Mapping):
        return config, "config"
    if isinstance(config, (str, os.PathLike)):
        return _read_file(config), "config"
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict):  # a transformers PretrainedConfig, duck-typed
        data = to_dict()
        if not isinstance(data, Mapping):
            raise TypeError(f"config.to_dict() must return a dict, got {type(data).__name__}")
        return data, "config"
    raise TypeError("config must be the path of a config.json (str or os.PathLike), its dict, or a transformers "
                    f"PretrainedConfig, got {type(config).__name__}")


def _read_file(path) -> dict:
    name = os.fspath(path)
    if isinstance(name, bytes):
        name = os.fsdecode(name)
    if os.path.isdir(name):
        candidate = os.path.join(name, "config.json")
        if not os.path.isfile(candidate):
            raise ValueError(f"config {name!r} is a directory without a config.json")
        name = candidate
    if os.path.exists(name) and not os.path.isfile(name):  # a pipe or a device would block, or never end
        raise ValueError(f"config {name!r} is not a regular file")
    try:
        with open(name, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ValueError(f"config {name!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read config {name!r}: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"config {name!r} is not valid JSON: {exc}") from None
    except RecursionError:
        raise ValueError(f"config {name!r} is nested too deeply to be a model config") from None
    if not isinstance(data, dict):
        raise ValueError(f"config {name!r} must hold a JSON object, got {type(data).__name__}")
    return data


def _select(data: Mapping, where: str) -> _Config:
    """The level of the config that holds the rotary settings (a multimodal model's
    ``text_config``, when they are there)."""
    cfg = _Config(data, where)
    text = cfg.data.get("text_config")
    if isinstance(text, Mapping) and not any(cfg.given(k) for k in _ROTARY_FIELDS):
        outer = cfg.model_type
        inner = _Config(text, f"{where}['text_config']")
        if inner.model_type is None and outer is not None:
            inner.model_type = _TEXT_MODEL.get(outer, outer)
            inner.arch = ARCHITECTURES.get(inner.model_type, _GENERIC)
        return inner
    return cfg


# -------------------------------------------------------------------------------- reading


def is_model_config(data: Mapping) -> bool:
    """Whether a dict is a model config rather than a rope dict (it has a key no rope dict has)."""
    return any(key in data for key in _scaling._CONFIG_ONLY_KEYS)


def read_config(config, layer_type=None, *, head_dim=None) -> tuple[RopeSpec, str]:
    """``(spec, layout)`` of a model configuration (see the module notes).  ``head_dim``
    replaces the head size the config gives (``fastpe rope --head-dim``): what follows from
    it (``partial_rotary_factor``'s rotated part) follows from the given one."""
    if layer_type is not None and not isinstance(layer_type, str):
        raise TypeError(f"layer_type must be a string or None, got {type(layer_type).__name__} {layer_type!r}")
    data, where = _load(config)
    cfg = _select(data, where)
    cfg.head_dim = None if head_dim is None else _bounded("head_dim", int(head_dim))
    kind = cfg.arch.kind
    if kind == "gptj":
        return _read_gptj(cfg, layer_type)
    if kind in ("gemma3", "modernbert", "gemma4"):
        rope, label, layer = _per_layer(cfg, layer_type)
    else:
        rope, label = _flat_rope(cfg)
        layer = _check_flat_layer(cfg, rope, label, layer_type)
        if layer is not None:  # nested by layer type (HF 5), in an architecture of no special kind
            rope, label = _nested_layer(cfg, rope, label, layer)
    return _build(cfg, rope, label, layer)


def _flat_rope(cfg: _Config) -> tuple[dict, str]:
    """The rope dict: ``rope_scaling`` if set, else ``rope_parameters`` (HF's ``or``)."""
    scaling, parameters = cfg.dict_field("rope_scaling"), cfg.dict_field("rope_parameters")
    if scaling:
        return _notes_dropped(scaling), cfg.name("rope_scaling")
    if parameters:
        return _notes_dropped(parameters), cfg.name("rope_parameters")
    return {}, cfg.name("rope_parameters")


def _notes_dropped(rope: Mapping) -> dict:
    return {k: v for k, v in rope.items() if not (isinstance(k, str) and k.startswith("_"))}


def _check_flat_layer(cfg: _Config, rope: dict, label: str, layer_type) -> str | None:
    """For a flat rope dict: ``layer_type`` must name one of the config's layer types (the
    dict applies to all of them).  Returns the layer type when the dict is nested by layer
    type after all (HF: its keys are among ``layer_types``)."""
    layer_types = cfg.layer_types()
    nested = [k for k, v in rope.items() if isinstance(v, Mapping) or (v is None and layer_types and k in layer_types)]
    if nested:
        if not layer_types or not set(nested) <= set(layer_types):
            raise ValueError(f"{label} holds dicts under {', '.join(map(repr, nested))}, which the config's "
                             f"layer_types ({_short(layer_types)}) do not name: per-layer rope parameters need them")
        return _choose(cfg, sorted(nested, key=layer_types.index), layer_type)
    if layer_type is not None:
        if not layer_types:
            raise ValueError(f"layer_type={layer_type!r} given, but the config has no layer_types (one rope "
                             "configuration for every layer): pass layer_type=None")
        if layer_type not in layer_types:
            raise ValueError(f"layer_type {layer_type!r} is not one of the config's layer types "
                             f"{', '.join(map(repr, sorted(set(layer_types))))}")
    return None


def _choose(cfg: _Config, choices, layer_type) -> str:
    names = ", ".join(map(repr, choices))
    if layer_type is None:
        raise ValueError(f"the config has per-layer rope parameters, for {names}: pass layer_type= one of them")
    if layer_type not in choices:
        raise ValueError(f"layer_type {layer_type!r} is not one of the config's layer types with rope "
                         f"parameters: {names}")
    return layer_type


def _nested_layer(cfg: _Config, rope: dict, label: str, layer: str) -> tuple[dict, str]:
    layer_label = f"{label}[{layer!r}]"
    value = rope[layer]
    if value is None:
        raise ValueError(f"{layer_label} is null: layers of type {layer!r} use no RoPE")
    if not isinstance(value, Mapping):
        raise TypeError(f"{layer_label} must be a dict, got {type(value).__name__}")
    return _notes_dropped(value), layer_label


def _per_layer(cfg: _Config, layer_type) -> tuple[dict, str, str]:
    """Gemma 3, ModernBERT and Gemma 4 build per-layer rope parameters whatever the file
    says: one dict per layer type, from ``rope_parameters`` (nested) and the legacy fields."""
    kind = cfg.arch.kind
    layer_types = cfg.layer_types()
    if layer_types is None:
        layers = cfg.int_field("num_hidden_layers", low=0) or 0
        if kind == "modernbert":
            every = cfg.int_field("global_attn_every_n_layers")
            layer_types = ["sliding_attention" if i % every else "full_attention" for i in range(layers)]
        else:
            pattern = cfg.int_field("sliding_window_pattern") or 6
            layer_types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)]
            if kind == "gemma4" and layer_types:
                layer_types[-1] = "full_attention"  # Gemma4TextConfig forces it
    parameters = cfg.dict_field("rope_parameters")
    scaling = cfg.dict_field("rope_scaling") if kind != "gemma4" else None  # Gemma 4 has no legacy form
    if parameters is None and kind == "gemma4":
        parameters = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                      "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                         "rope_theta": 1e6}}
    elif parameters is None:
        parameters = {"sliding_attention": {"rope_type": "default"}, "full_attention": {"rope_type": "default"}}
    label = cfg.name("rope_parameters")
    choices = sorted(set(layer_types) & set(parameters)) if layer_types else sorted(parameters)
    layer = _choose(cfg, choices, layer_type)
    rope, layer_label = _nested_layer(cfg, parameters, label, layer)
    if scaling and (layer == "full_attention" or kind == "modernbert"):
        # Gemma 3: rope_scaling updates the full-attention layers only; ModernBERT: every layer
        rope = {**rope, **_notes_dropped(scaling)}
        layer_label = cfg.name("rope_scaling")
    if rope.get("rope_theta") is None:
        if kind == "gemma3":
            key = "rope_theta" if layer == "full_attention" else "rope_local_base_freq"
        elif kind == "modernbert":
            key = "global_rope_theta" if layer == "full_attention" else "local_rope_theta"
        else:
            key = "rope_theta"
        theta = cfg.get(key)
        if theta is not None:
            rope = {**rope, "rope_theta": _scaling._base(cfg.name(key), theta)}
    return rope, layer_label, layer


def _build(cfg: _Config, rope: dict, label: str, layer: str | None) -> tuple[RopeSpec, str]:
    """The spec of a rope dict and the config's other fields (everything but GPT-J)."""
    kind = cfg.arch.kind
    rope = dict(rope)
    rope_type = _scaling._rope_type(rope, label)
    if kind == "phi3":
        rope_type = _phi3_rope(rope, label, rope_type)
    if kind != "phimoe" and cfg.model_type is not None and (
            cfg.model_type in ARCHITECTURES or cfg.model_type in DEFAULT_READS_PARTIAL
            or cfg.model_type in _DEFAULT_IGNORES_PARTIAL):
        _drop_mscale(rope, label, cfg.model_type)

    # rope_theta: the dict's, else the top level's (GPT-NeoX: rotary_emb_base), else the
    # class default
    theta_key = "rotary_emb_base" if kind == "gpt_neox" else "rope_theta"
    theta, theta_name = rope.pop("rope_theta", None), f"{label}['rope_theta']"
    if theta is None:
        theta, theta_name = cfg.get(theta_key), cfg.name(theta_key)
    base = DEFAULT_BASE if theta is None else _scaling._base(theta_name, theta)
    if kind == "gpt_neox":
        _ignored(cfg, "rope_theta", base, "GPT-NeoX's config reads rotary_emb_base")

    head_dim, head_name = _head_dim(cfg, layer)
    if rope_type == "proportional":
        # the rule's own key (how many pairs turn); the top level fills it in (HF's setdefault,
        # GPT-NeoX's from rotary_pct), class defaults included
        top = cfg.get("rotary_pct" if kind == "gpt_neox" else "partial_rotary_factor")
        if rope.get("partial_rotary_factor") is None and top is not None:
            rope["partial_rotary_factor"] = top
        rotary_dim = None
    else:
        rotary_dim = _rotary_dim(cfg, rope, label, rope_type, head_dim, head_name)

    mpe_key = "n_positions" if cfg.get("max_position_embeddings") is None and cfg.given("n_positions") else \
        "max_position_embeddings"
    mpe = cfg.int_field(mpe_key)
    if mpe is not None:
        _check_length(cfg.name(mpe_key), mpe)
    if rope_type in ("yarn", "llama3", "longrope") and layer is None and kind != "phimoe":
        # standardize_rope_params prefers a top-level original length to the dict's (Phi-3's
        # config class always has one: 4096 unless set); Phi-3.5-MoE's config resets it to
        # the dict's first.  Per-layer dicts keep their own.
        original = cfg.int_field("original_max_position_embeddings")
        if original is not None:
            _check_length(cfg.name("original_max_position_embeddings"), original)
            rope["original_max_position_embeddings"] = original
    _mrope_defaults(cfg, rope)
    spec = _scaling.resolve(head_dim, base=base, rotary_dim=rotary_dim, scaling=rope, max_position_embeddings=mpe,
                            label=label)
    return spec, _layout(cfg)


#: the Qwen-VL text models and their M-RoPE as HF's rotary modules hold it: the section a
#: dict without one takes, and whether the pairs interleave (Qwen3-VL's module always
#: interleaves, Qwen2-VL's and Qwen2.5-VL's never, whatever the dict's mrope_interleaved)
_MROPE_MODELS = {
    **dict.fromkeys(("qwen2_vl", "qwen2_vl_text", "qwen2_5_vl", "qwen2_5_vl_text"), ((16, 24, 24), False)),
    **dict.fromkeys(("qwen3_vl", "qwen3_vl_text", "qwen3_vl_moe", "qwen3_vl_moe_text"), ((24, 20, 20), True)),
}


def _mrope_defaults(cfg: _Config, rope: dict) -> None:
    """A Qwen-VL text model's M-RoPE: its section where the dict has none, its order."""
    found = _MROPE_MODELS.get(cfg.model_type)
    if found is None:
        return
    section, interleaved = found
    if rope.get("mrope_section") is None:
        rope["mrope_section"] = list(section)
    rope["mrope_interleaved"] = interleaved


def _phi3_rope(rope: dict, label: str, rope_type: str) -> str:
    """Phi3Config: the legacy ``su`` and ``yarn`` are longrope, any other scaled type is an
    error."""
    written = rope.get("rope_type", rope.get("type"))
    if isinstance(written, str) and written.strip().lower() in ("su", "yarn"):
        rope_type = rope["rope_type"] = "longrope"
        rope.pop("type", None)
    if rope_type not in ("default", "longrope"):
        raise ValueError(f"{label}: Phi-3 takes rope_type 'default' or 'longrope' (legacy 'su', 'yarn'), "
                         f"got {written!r}")
    return rope_type


def _drop_mscale(rope: dict, label: str, model_type: str) -> None:
    """LongRoPE's ``short_mscale`` / ``long_mscale`` are read by Phi-3.5-MoE's rotary
    embedding only: another architecture's ignores them, and so does its reading here."""
    unread = [key for key in ("short_mscale", "long_mscale") if key in rope]
    if unread:
        many = len(unread) > 1
        warn(f"{', '.join(f'{label}[{k!r}]' for k in unread)} {'are' if many else 'is'} ignored: {model_type}'s "
             f"rotary embedding does not read {'them' if many else 'it'} (Phi-3.5-MoE's, model_type 'phimoe', does)")
        for key in unread:
            rope.pop(key)


def _ignored(cfg: _Config, key: str, used, why: str) -> None:
    """Warn of a top-level field this architecture does not read, when it would differ."""
    value = cfg.data.get(key)
    if value is not None and value != used:
        warn(f"{cfg.name(key)} = {_short(value)} is ignored: {why} (HF ignores it too)")


def _check_length(name: str, value: int) -> None:
    if value > _scaling.MAX_LENGTH:
        raise ValueError(f"{name} must be <= 2**64, got {value}")


def _head_dim(cfg: _Config, layer: str | None) -> tuple[int, str]:
    """``(head_dim, the field it came from)``: the rotated head of the architecture."""
    if cfg.head_dim is not None:
        return cfg.head_dim, "head_dim"
    if cfg.arch.head_dim_key is not None:
        key = cfg.arch.head_dim_key
        value = cfg.int_field(key, low=2)
        if value is not None:
            return _bounded(cfg.name(key), value), cfg.name(key)
    override = _layer_override(cfg, layer, "head_dim")
    if override is not None:
        return override
    value = cfg.int_field("head_dim", value=None) if cfg.get("head_dim") else None  # HF: ``head_dim or ...``
    if value is not None:
        return _bounded(cfg.name("head_dim"), value), cfg.name("head_dim")
    hidden_key = "hidden_size" if cfg.get("hidden_size") is not None or cfg.get("n_embd") is None else "n_embd"
    heads_key = "num_attention_heads" if cfg.get("num_attention_heads") is not None or cfg.get("n_head") is None \
        else "n_head"
    hidden, heads = cfg.int_field(hidden_key), cfg.int_field(heads_key)
    if hidden is None or heads is None:
        missing = [cfg.name(k) for k, v in ((hidden_key, hidden), (heads_key, heads)) if v is None]
        raise ValueError(f"the config gives no head size: {cfg.name('head_dim')} is unset and so is "
                         f"{' and '.join(missing)} (head_dim = hidden_size // num_attention_heads)")
    name = f"{cfg.name(hidden_key)} // {cfg.name(heads_key)}"
    return _bounded(name, hidden // heads), name


def _layer_override(cfg: _Config, layer: str | None, key: str):
    """``(value, name)`` of a per-layer override of ``key`` for the layers of type ``layer``
    (HF's ``per_layer_config``; Gemma 4's ``global_head_dim`` on full-attention layers)."""
    if layer is None:
        return None
    overrides = cfg.get("per_layer_config")
    layer_types = cfg.layer_types() or []
    if isinstance(overrides, Mapping) and overrides:
        found = set()
        for index, layer_kind in enumerate(layer_types):
            if layer_kind != layer:
                continue
            entry = overrides.get(index, overrides.get(str(index), overrides.get(f"{index:02d}")))
            found.add(None if not isinstance(entry, Mapping) else entry.get(key))
        found.discard(None)
        if len(found) > 1:
            raise ValueError(f"{cfg.name('per_layer_config')} gives the {layer!r} layers different {key}s "
                             f"({', '.join(map(str, sorted(found)))})")
        if found:
            value = cfg.int_field("per_layer_config", low=2, value=found.pop())
            return _bounded(cfg.name("per_layer_config"), value), cfg.name("per_layer_config")
        return None
    if cfg.arch.kind == "gemma4" and layer == "full_attention" and key == "head_dim":
        value = cfg.int_field("global_head_dim", low=2)
        if value is not None:
            return _bounded(cfg.name("global_head_dim"), value), cfg.name("global_head_dim")
    return None


def _bounded(name: str, value: int) -> int:
    if not 2 <= value <= _scaling.MAX_HEAD_DIM:
        raise ValueError(f"{name} = {value} must be in [2, {_scaling.MAX_HEAD_DIM}] (the head size)")
    return value


def _rotary_dim(cfg: _Config, rope: dict, label: str, rope_type: str, head_dim: int, head_name: str) -> int | None:
    """``int(head_dim * partial_rotary_factor)`` where the model's rule reads it (the dict's
    factor, else the top level's, else GPT-NeoX's ``rotary_pct``), removed from the dict."""
    kind = cfg.arch.kind
    prf, prf_name = rope.pop("partial_rotary_factor", None), f"{label}['partial_rotary_factor']"
    if prf is None:
        key = "rotary_pct" if kind == "gpt_neox" else "partial_rotary_factor"
        prf, prf_name = cfg.get(key), cfg.name(key)
    if kind == "gpt_neox" and prf is not None:
        _ignored(cfg, "partial_rotary_factor", prf, "GPT-NeoX's config reads rotary_pct")
    if prf is None:
        return None
    reads = cfg.model_type in DEFAULT_READS_PARTIAL or cfg.model_type not in _DEFAULT_IGNORES_PARTIAL
    prf = _scaling._real(prf_name, prf, low=0.0, low_open=True)
    if prf > 1.0:
        raise ValueError(f"{prf_name} must be <= 1, got {prf!r}")
    if rope_type == "default" and not reads:
        return None  # this architecture's default rule rotates the whole head
    dim = int(head_dim * prf)  # HF's rule, float product truncated
    if dim < 2 or dim % 2:
        raise ValueError(f"int({head_name} * {prf_name}) = int({head_dim} * {prf!r}) = {dim} rotated dimensions: "
                         "it must be even and >= 2")
    return dim


def _layout(cfg: _Config) -> str:
    key = cfg.arch.interleave_key
    if key is not None:
        value = cfg.get(key)
        if value is not None and not isinstance(value, bool):
            raise TypeError(f"{cfg.name(key)} must be true or false, got {type(value).__name__} {value!r}")
        return "gptj" if value else "neox"
    return "gptj" if cfg.model_type in PAIRED else "neox"


def _read_gptj(cfg: _Config, layer_type) -> tuple[RopeSpec, str]:
    """GPT-J / CodeGen: no rope dict -- base 10000, ``rotary_dim`` of each head (null: the
    whole ``n_embd``, which fits only a single head), adjacent pairs."""
    if layer_type is not None:
        raise ValueError(f"layer_type={layer_type!r} given, but the config has no layer_types: pass layer_type=None")
    for key in ("rope_scaling", "rope_parameters", "rope_theta"):
        if cfg.given(key):
            warn(f"{cfg.name(key)} is ignored: {cfg.model_type}'s rotary embedding uses base 10000 and no scaling")
    head_dim, head_name = _head_dim(cfg, None)
    rotary_dim = cfg.int_field("rotary_dim", low=0) if cfg.get("rotary_dim") is not None else None
    if not rotary_dim:
        hidden = cfg.int_field("n_embd") if cfg.get("n_embd") is not None else cfg.int_field("hidden_size")
        if hidden != head_dim:
            raise ValueError(f"{cfg.name('rotary_dim')} is unset or 0: HF's {cfg.model_type} then builds tables "
                             f"{hidden} wide, the whole n_embd, which only fits a single head ({head_name} = "
                             f"{head_dim}); give rotary_dim")
        rotary_dim = head_dim
    if rotary_dim > head_dim or rotary_dim % 2:
        raise ValueError(f"{cfg.name('rotary_dim')} must be even and <= {head_name} = {head_dim}, got {rotary_dim}")
    mpe = cfg.int_field("n_positions") if cfg.get("n_positions") is not None else cfg.int_field(
        "max_position_embeddings")
    spec = _scaling.resolve(head_dim, base=DEFAULT_BASE, rotary_dim=rotary_dim, max_position_embeddings=mpe)
    return spec, "gptj"
