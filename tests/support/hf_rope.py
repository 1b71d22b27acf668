"""HF transformers' RoPE, as the tests compare fastpe with it: the model configs, their own
rotary modules, and how far HF's float32 arithmetic may be from the exact values.

* :func:`hf_bound_ulps` -- how many float32 ULPs (relative) HF's ``inv_freq`` may be from the
  real value of a rule, from the roundings its float32 code makes;
* :func:`cos_sin_bound` -- how far HF's float32 cos/sin caches may be from fastpe's, given
  both frequencies;
* :func:`hf_model_config` / :func:`hf_rotary` / :func:`hf_values` -- a config dict built as
  ``tests/data/configs/check_configs.py`` builds it (``AutoConfig.for_model``; the Phi-3
  files published with ``"type": "su"`` renamed first, which transformers 5.24 needs), that
  model's own rotary module, and its frequencies, attention factor and per-frequency
  cos/sin (whatever the module's output layout).

Import it only where torch and transformers are installed (its functions import them).
"""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

import numpy as np

CONFIGS = Path(__file__).resolve().parent.parent / "data" / "configs"

#: model_type -> (module under transformers.models, rotary class, takes a layer_type in
#: forward): the models of tests/data/configs (check_configs.py reads this table) and Phi-3.5-MoE
ROTARY = {
    "llama": ("llama", "LlamaRotaryEmbedding", False),
    "llama4_text": ("llama4", "Llama4TextRotaryEmbedding", False),
    "mistral": ("mistral", "MistralRotaryEmbedding", False),
    "qwen2": ("qwen2", "Qwen2RotaryEmbedding", False),
    "qwen3": ("qwen3", "Qwen3RotaryEmbedding", False),
    "phi3": ("phi3", "Phi3RotaryEmbedding", False),
    "phimoe": ("phimoe", "PhimoeRotaryEmbedding", False),
    "gemma2": ("gemma2", "Gemma2RotaryEmbedding", False),
    "gemma3_text": ("gemma3", "Gemma3RotaryEmbedding", True),
    "gemma4_text": ("gemma4", "Gemma4TextRotaryEmbedding", True),
    "gpt_neox": ("gpt_neox", "GPTNeoXRotaryEmbedding", False),
    "gptj": ("gptj", "GPTJRotaryEmbedding", False),
    "stablelm": ("stablelm", "StableLmRotaryEmbedding", False),
    "deepseek_v3": ("deepseek_v3", "DeepseekV3RotaryEmbedding", False),
    "gpt_oss": ("gpt_oss", "GptOssRotaryEmbedding", False),
    "modernbert": ("modernbert", "ModernBertRotaryEmbedding", True),
}


def config_paths() -> list[Path]:
    return sorted(CONFIGS.glob("*.json"))


def read_fields(path: Path) -> dict:
    """A config file without its ``_`` notes."""
    raw = json.loads(path.read_text())
    return {k: v for k, v in raw.items() if not k.startswith("_")}


def hf_model_config(fields: dict):
    """``(config, renamed)``: ``AutoConfig.for_model(model_type, **fields)``, retried with
    Phi-3's legacy ``"type": "su"`` renamed to ``"longrope"`` when transformers fails on it
    as published (it renames ``su`` only after deciding which types get
    ``original_max_position_embeddings``)."""
    import transformers

    fields = dict(fields)
    model_type = fields.pop("model_type")
    try:
        return transformers.AutoConfig.for_model(model_type, **fields), False
    except KeyError:
        scaling = fields.get("rope_scaling") or {}
        if model_type != "phi3" or scaling.get("type") != "su":
            raise
        fields["rope_scaling"] = dict(scaling, type="longrope")
        return transformers.AutoConfig.for_model(model_type, **fields), True


def hf_layer_types(config) -> list:
    """The layer types a model's rotary module is called with (``[None]`` for one call)."""
    module_name, class_name, per_layer = ROTARY[config.model_type]
    return sorted(set(config.layer_types)) if per_layer else [None]


def hf_rotary(config):
    module_name, class_name, _ = ROTARY[config.model_type]
    module = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    return getattr(module, class_name)(config)


def hf_values(rotary, config, n_positions: int, layer_type=None):
    """``(inv_freq, attention_factor, cos, sin)`` of HF's rotary module: ``inv_freq`` (float64
    of its float32 values; None for GPT-J, which keeps only a table) and the attention factor
    as the module holds them after a forward pass over positions ``0 .. n_positions - 1``, and
    that pass's cos and sin, one column per frequency, float64 of float32."""
    import torch

    position_ids = torch.arange(n_positions)[None]
    x = torch.zeros(1, n_positions, 1, dtype=torch.float32)
    with torch.no_grad():
        out = rotary(x, position_ids) if layer_type is None else rotary(x, position_ids, layer_type)
    model_type = config.model_type
    if model_type == "gptj":
        sin, cos = out  # GPT-J returns (sin, cos), one column per frequency
    elif model_type == "llama4_text":
        cos, sin = out.real, out.imag  # freqs_cis = cos + i sin, one column per frequency
    else:
        cos, sin = out
    cos, sin = cos[0].double().numpy(), sin[0].double().numpy()
    prefix = "" if layer_type is None else f"{layer_type}_"
    inv = getattr(rotary, f"{prefix}inv_freq", None)
    inv = None if inv is None else inv.double().numpy()
    attention = getattr(rotary, f"{prefix}attention_scaling", None)
    if inv is not None and cos.shape[1] == 2 * len(inv):  # cat(freqs, freqs): one half
        cos, sin = cos[:, :len(inv)], sin[:, :len(inv)]
    return inv, attention, cos, sin


def per_frequency(cache: np.ndarray, layout: str) -> np.ndarray:
    """fastpe's cache, one column per frequency."""
    n = cache.shape[-1] // 2
    return cache[..., :n] if layout == "neox" else cache[..., 0::2]


# ------------------------------------------------------------------------------ the bounds


def hf_bound_ulps(spec, seq_len) -> float:
    """How far HF's float32 evaluation may be from the real value, in float32 ULPs (relative).

    * ~4 ULP: float32 ``pow``, the divisions and products each rule makes;
    * the exponent ``2i/dim`` rounded to float32 changes ``base**x`` by up to ``ln(base)`` ULP
      (nothing when ``dim`` is a power of two: then it is exact);
    * Llama-3's medium band is quadratic in ``p_i``: its relative condition number is up to
      ``1 + factor * high / (high - low)``, which multiplies the errors above (with
      ``high <= low`` there is no band: nothing to multiply);
    * YaRN's ramp is evaluated in float32 (index and bounds rounded, then ``1 - ramp``); an
      absolute ramp error ``e`` moves the result by up to ``(factor - 1) * e`` relative
      (``(1 / factor - 1) * e`` for a factor below 1).
    """
    from fastpe.rope import _scaling

    dim = spec.head_dim if spec.rope_type == "proportional" else spec.rotary_dim
    ln_base = math.log(spec.base)
    if spec.rope_type == "dynamic":
        length = max(seq_len or 0, spec.max_position_embeddings)
        ln_base += dim / (dim - 2) * math.log(spec.factor * length / spec.max_position_embeddings - spec.factor + 1)
    err = 4 + (0 if dim & (dim - 1) == 0 else ln_base)
    if spec.rope_type == "llama3" and spec.high_freq_factor > spec.low_freq_factor:
        err *= 1 + spec.factor * spec.high_freq_factor / (spec.high_freq_factor - spec.low_freq_factor)
    if spec.rope_type == "yarn":
        low, high = _scaling.yarn_correction_range(spec)
        spread = max(spec.factor - 1, 1 / spec.factor - 1)
        err += 2 * spread * (1 + (dim / 2 + max(high, low)) / max(abs(high - low), 1e-3))
    return err


def inv_freq_ulps(theirs, ours) -> float:
    """The largest relative distance in float32 ULPs (``2**-24`` of the value); zero
    frequencies must be zero on both sides."""
    theirs, ours = np.asarray(theirs, np.float64), np.asarray(ours, np.float64)
    zero = ours == 0
    assert np.array_equal(theirs[zero], ours[zero]), "a zero frequency is not zero on both sides"
    if zero.all():
        return 0.0
    return float(np.max(np.abs(theirs[~zero] - ours[~zero]) / ours[~zero])) / 2**-24


def cos_sin_bound(positions, ours, theirs, attention) -> np.ndarray:
    """How far HF's float32 cos/sin at ``positions`` (a column) may be from fastpe's, per
    position and frequency, given fastpe's frequencies ``ours`` and HF's ``theirs``:

        ``|af| * (p * (|w_hf - w| + |w| * 2**-23) + 2**-22)``

    -- HF's angle is ``fl32(p * w_hf)``: off by ``p * |w_hf - w|`` from its frequency's
    error and by up to ``p * |w| * 2**-24`` from rounding the product (doubled here for
    ``w_hf``'s own size); its float32 cos/sin and the attention factor's product add up to a
    couple of float32 ULP of a value at most 1 (``2**-23``), and fastpe's caches are within
    1 ULP (``2**-24``) of the exact values: ``2**-22`` covers the three.  Nothing here depends
    on the machine: every term is a bound of IEEE float32 operations, not one build's bits."""
    p = np.asarray(positions, np.float64)[:, None]
    w, w_hf = np.asarray(ours, np.float64)[None, :], np.asarray(theirs, np.float64)[None, :]
    return abs(attention) * (p * (np.abs(w_hf - w) + np.abs(w) * 2.0**-23) + 2.0**-22)
