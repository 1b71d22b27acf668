"""Check that every config in this folder loads in transformers and drives the model's own rotary embedding.

Run:  python tests/data/configs/check_configs.py   (exit status 1 if any config fails)

For each ``*.json`` here: drop the keys starting with ``_``, build the config with
``transformers.AutoConfig.for_model(model_type, **fields)`` (``model_type`` passed once, positionally),
instantiate that model's
``<Name>RotaryEmbedding(config)`` and call it on ``position_ids = torch.arange(16)[None]``
(once per layer type for the models whose rotary embedding takes one). Prints one line per
config: its name, the ``rope_parameters`` transformers derived (lists shown as their length),
and the shape and a checksum of the cos table of each call. Phi-3 configs published with the legacy
rope type "su" do not construct as they are in this transformers (it renames "su" to "longrope" too
late for its own validation); those are retried with the rename done first and the line says so.
"""

import sys
from pathlib import Path

import torch
import transformers

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # tests/: the shared helpers

from support.hf_rope import hf_layer_types, hf_model_config, hf_rotary, read_fields  # noqa: E402


def short(value):
    """rope_parameters with every list replaced by its length, for a one-line print."""
    if isinstance(value, dict):
        return {k: short(v) for k, v in value.items()}
    if isinstance(value, list):
        return f"[{len(value)}]"
    return value


def check(path):
    fields = read_fields(path)
    config, renamed = hf_model_config(fields)
    # transformers renames Phi-3's legacy rope type "su" to "longrope" only after it has decided which
    # types get original_max_position_embeddings, so a published "su" config fails its own validation;
    # hf_model_config retries with the rename done first (the rename transformers itself applies)
    note = " [published type 'su' fails as is; loaded with type 'longrope']" if renamed else ""
    model_type = config.model_type
    rotary = hf_rotary(config)

    position_ids = torch.arange(16)[None]
    x = torch.zeros(1, 16, 1, dtype=torch.float32)
    calls = hf_layer_types(config)
    results = []
    for layer_type in calls:
        out = rotary(x, position_ids) if layer_type is None else rotary(x, position_ids, layer_type)
        if model_type == "gptj":  # GPT-J returns (sin, cos)
            sin, cos = out
        elif model_type == "llama4_text":  # Llama 4 returns complex freqs_cis = cos + i sin
            cos, sin = out.real, out.imag
        else:
            cos, sin = out
        if cos.shape[:2] != (1, 16) or cos.shape != sin.shape:
            raise ValueError(f"unexpected cos/sin shapes {tuple(cos.shape)} / {tuple(sin.shape)}")
        if not (torch.isfinite(cos).all() and torch.isfinite(sin).all()):
            raise ValueError("non-finite cos/sin")
        label = "" if layer_type is None else f"{layer_type}:"
        results.append(f"{label}cos{tuple(cos.shape)} sum={cos.double().sum().item():.6f}")

    rope = getattr(config, "rope_parameters", None)
    return f"{path.stem}: {model_type} rope_parameters={short(rope)} | " + " ; ".join(results) + note


def main():
    paths = sorted(HERE.glob("*.json"))
    failures = 0
    transformers.logging.set_verbosity_error()
    for path in paths:
        try:
            print(check(path))
        except Exception as exc:  # report every config, then fail at the end
            failures += 1
            print(f"{path.stem}: FAILED {type(exc).__name__}: {exc}")
    print(f"{len(paths) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
