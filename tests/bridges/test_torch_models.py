"""fastpe.torch inside real models: what Hugging Face's models hand the rotary module.

* the model's own config: ``RotaryEmbedding(head_dim, scaling=config.rope_parameters)``
  takes its ``rope_theta`` (``base=None``);
* cos/sin caches for HF's ``position_ids`` ``(batch, seq)``, in every dtype, bit for bit
  against :func:`fastpe.rope.cos_sin`, and against ``LlamaRotaryEmbedding`` itself (a
  ``LlamaConfig`` from ``tests/data/configs/llama-3.1-8b.json``) within HF's float32 error;
* the refusals of bad input.

torch (and, for the HF tests, transformers) are optional peers: without them this module
(or those tests) is skipped.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional peer of fastpe")

from fastpe import rope  # noqa: E402
from fastpe.torch import RotaryEmbedding  # noqa: E402

from support.cli import same_bits  # noqa: E402

CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "data" / "configs"

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}


def randn(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float32).to(dtype)


def attention_view(b, s, h, d, seed):
    """q or k as an HF attention layer holds it: ``proj(x).view(b, s, h, d).transpose(1, 2)``."""
    return randn(b, s, h * d, seed=seed).view(b, s, h, d).transpose(1, 2)


def as_tensor(a: np.ndarray) -> torch.Tensor:
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


# ========================================================================= the config


def llama_config():
    transformers = pytest.importorskip("transformers", reason="transformers is an optional peer")
    raw = json.loads((CONFIGS / "llama-3.1-8b.json").read_text())
    return transformers.LlamaConfig(**{k: v for k, v in raw.items() if not k.startswith("_")})


def from_config(config) -> RotaryEmbedding:
    head_dim = config.hidden_size // config.num_attention_heads
    return RotaryEmbedding(head_dim, scaling=config.rope_parameters,
                           max_position_embeddings=config.max_position_embeddings)


@pytest.mark.any_backend
def test_rope_parameters_with_rope_theta_configure_it():
    """transformers 5 puts rope_theta inside rope_parameters: base=None (the default) takes it."""
    config = llama_config()
    assert config.rope_parameters["rope_theta"] == 500000.0
    module = from_config(config)
    assert module.base == 500000.0 and module.head_dim == 128 and module.spec.rope_type == "llama3"
    plain = RotaryEmbedding(128, base=500000.0, scaling=LLAMA3, max_position_embeddings=131072)
    assert module.spec == plain.spec


def test_rope_theta_in_the_dict_gives_the_explicit_base_values():
    with_theta = RotaryEmbedding(64, scaling={**LLAMA3, "rope_theta": 5e5})
    explicit = RotaryEmbedding(64, base=5e5, scaling=LLAMA3)
    positions = torch.arange(0, 40000, 997)
    for a, b in zip(with_theta.cos_sin(positions), explicit.cos_sin(positions)):
        assert same_bits(a, b)
    q, k = randn(1, 2, 6, 64, seed=1), randn(1, 1, 6, 64, seed=2)
    want = explicit(q.clone(), k.clone(), positions[:6])
    got = with_theta(q, k, positions[:6])
    assert same_bits(got[0], want[0]) and same_bits(got[1], want[1])


# ======================================================================= cos/sin caches


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["neox", "gptj"])
def test_cos_sin_of_batch_seq_positions_is_fastpe_bit_for_bit(dtype, layout):
    """(batch, seq) positions give (batch, seq, rotary_dim) caches, each row fastpe's cos_sin
    of that row's positions, computed in ``dtype`` itself (float16 and bfloat16 correctly
    rounded: not the float32 cache rounded again)."""
    module = RotaryEmbedding(64, base=5e5, scaling=LLAMA3, layout=layout)
    positions = torch.tensor([[*range(0, 12)], [*range(70000, 70012)], [5, 3, 3, 9, 0, 1, 2, 3, 4, 5, 6, 7]])
    cos, sin = module.cos_sin(positions, dtype=dtype)
    assert cos.shape == sin.shape == (3, 12, 64) and cos.dtype == sin.dtype == dtype
    assert cos.is_contiguous() and sin.is_contiguous()
    name = str(dtype).removeprefix("torch.")
    want = rope.cos_sin(positions.reshape(-1).numpy(), 64, base=5e5, scaling=LLAMA3, layout=layout, dtype=name)
    assert same_bits(cos.reshape(-1, 64), as_tensor(want[0])) and same_bits(sin.reshape(-1, 64), as_tensor(want[1]))
    for row in range(3):  # each row as its own (seq,) call
        c, s = module.cos_sin(positions[row], dtype=dtype)
        assert c.shape == (12, 64) and same_bits(c, cos[row]) and same_bits(s, sin[row])
    one_row = module.cos_sin(positions[:1], dtype=dtype)[0]
    assert one_row.shape == (1, 12, 64) and same_bits(one_row[0], cos[0])


def test_cos_sin_dynamic_sees_the_whole_batch():
    """Dynamic NTK's length is the largest position of all rows plus one, as HF's forward's
    ``max(position_ids) + 1``."""
    module = RotaryEmbedding(16, scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=8)
    positions = np.array([[0, 1, 2], [30, 31, 32]])
    cos, _ = module.cos_sin(positions)
    want, _ = rope.cos_sin(positions.reshape(-1), 16, scaling={"rope_type": "dynamic", "factor": 2.0},
                           max_position_embeddings=8, seq_len=33)
    assert same_bits(cos.reshape(-1, 16), torch.from_numpy(want))


# ------------------------------------------------------------------------- against HF


def hf_rotary():
    config = llama_config()
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    return config, LlamaRotaryEmbedding(config), apply_rotary_pos_emb


#: HF's position_ids: two rows, one at the start and one far into Llama 3.1's 128k context
POSITION_IDS = torch.tensor([[*range(16)], [*range(120000, 120016)]])


def hf_error_bound(hf_module, ours: RotaryEmbedding, positions: torch.Tensor) -> torch.Tensor:
    """How far HF's float32 cos/sin may be from the exact ones, per (batch, seq, column).

    HF rounds ``inv_freq`` to float32 (its llama3 rule in float32: ``|inv_hf - inv|``, read
    off both), forms ``p * inv_hf`` in float32 (``2**-24`` relative) and takes float32
    cos/sin (an ULP of 1, ``2**-23``, with margin); fastpe is within ``2**-24`` of exact."""
    config = {key: ours._kwargs[key] for key in ("base", "rotary_dim", "scaling", "max_position_embeddings")}
    inv = torch.from_numpy(rope.inv_freq(ours.head_dim, **config)[0])
    inv_hf = hf_module.inv_freq.double()
    angle_error = (inv_hf - inv).abs() + inv_hf * 2.0**-24  # per unit of position
    angle_error = torch.cat((angle_error, angle_error))  # neox: cat(freqs, freqs)
    return positions.double()[..., None] * angle_error + 2.0**-22


def test_cos_sin_matches_hf_llama_rotary_embedding():
    """LlamaRotaryEmbedding(config).forward(x, position_ids) against fastpe's caches for the
    same config and position_ids: within HF's float32 error, which fastpe does not share."""
    config, hf_module, _ = hf_rotary()
    ours = from_config(config)
    x = torch.zeros(2, 16, config.hidden_size)
    hf_cos, hf_sin = hf_module(x, POSITION_IDS)
    cos, sin = ours.cos_sin(POSITION_IDS)
    assert cos.shape == hf_cos.shape == (2, 16, 128) and cos.dtype == hf_cos.dtype == torch.float32
    bound = hf_error_bound(hf_module, ours, POSITION_IDS)
    for theirs, mine in ((hf_cos, cos), (hf_sin, sin)):
        err = (theirs.double() - mine.double()).abs()
        assert (err <= bound).all(), float((err - bound).max())
    # far into the context HF's float32 angles have drifted by far more than a float32 ULP
    assert (hf_cos[1].double() - cos[1].double()).abs().max() > 2.0**-12


# ============================================================================ bad input


@pytest.mark.any_backend
def test_cos_sin_bad_input():
    module = RotaryEmbedding(16)
    with pytest.raises(ValueError, match=r"positions must have shape \(seq,\) or \(batch, seq\), got \(\)"):
        module.cos_sin(torch.tensor(3))
    with pytest.raises(ValueError, match="positions must be >= 0"):
        module.cos_sin(torch.tensor([[0, -1]]))
    with pytest.raises(TypeError, match="dtype must be torch.float32"):
        module.cos_sin(torch.arange(3), dtype=torch.complex64)
    with pytest.raises(ValueError, match="seq_len must be >= 0"):
        module.cos_sin(torch.arange(3), seq_len=-1)
