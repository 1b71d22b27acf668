"""Wherever HF transformers' RoPE validators warn, fastpe warns (a ``RopeConfigWarning``).

HF's ``RotaryEmbeddingConfigMixin._validate_*`` log a warning for a value they call invalid
and then compute with it; fastpe warns with the same substance and computes the same rule
(the values are compared with HF's in test_rope_scaling.py).  Each case here is checked
both ways: fastpe's warning names the key, and HF -- when installed, through a real
``LlamaConfig`` -- logs a warning for the same dict, and neither warns for a clean one.
"""

from __future__ import annotations

import logging
import warnings

import pytest

from fastpe import rope
from fastpe.rope import RopeConfigWarning
from support.inputs import LLAMA3

#: warnings of the frequency rules (exact arithmetic) and of HF's validators: no backend is called
pytestmark = pytest.mark.any_backend

LONGROPE = {"rope_type": "longrope", "short_factor": [1.0] * 16, "long_factor": [2.0] * 16,
            "original_max_position_embeddings": 4096}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}

#: (scaling, max_position_embeddings, what fastpe's warning says, or None for no warning)
CASES = [
    pytest.param(LLAMA3, 131072, None, id="llama3-clean"),
    pytest.param(YARN, 16384, None, id="yarn-clean"),
    pytest.param({**LONGROPE, "factor": 32.0}, 131072, None, id="longrope-clean"),
    pytest.param({"rope_type": "default"}, 4096, None, id="default-clean"),
    pytest.param({"rope_type": "proportional", "partial_rotary_factor": 0.25}, 4096, None, id="proportional-clean"),
    pytest.param({**YARN, "beta_fsat": 32.0}, 16384, r"scaling\['beta_fsat'\] \(did you mean 'beta_fast'\?\) is not a "
                 r"key of rope_type 'yarn'", id="unknown-key"),
    pytest.param({"rope_type": "default", "factor": 2.0}, 4096, r"scaling\['factor'\] is not a key of rope_type "
                 r"'default'", id="default-with-factor"),
    pytest.param({"rope_type": "linear", "factor": 0.5}, 4096, r"scaling\['factor'\] = 0.5 is below 1", id="linear-0.5"),
    pytest.param({"rope_type": "dynamic", "factor": 0.5}, 4096, r"scaling\['factor'\] = 0.5 is below 1",
                 id="dynamic-0.5"),
    pytest.param({**YARN, "factor": 0.5}, 2048, r"scaling\['factor'\] = 0.5 is below 1", id="yarn-0.5"),
    pytest.param({**LLAMA3, "factor": 0.5}, 131072, r"scaling\['factor'\] = 0.5 is below 1", id="llama3-0.5"),
    pytest.param({**LONGROPE, "factor": 0.5}, 131072, r"scaling\['factor'\] = 0.5 is below 1", id="longrope-0.5"),
    pytest.param({**YARN, "beta_fast": 1.0, "beta_slow": 8.0}, 16384, r"scaling\['beta_fast'\] \(1\) is below "
                 r"scaling\['beta_slow'\] \(8\)", id="yarn-betas"),
    pytest.param({**YARN, "attention_factor": -1.0}, 16384, r"scaling\['attention_factor'\] = -1.0 is negative",
                 id="yarn-attention-negative"),
    pytest.param({**YARN, "attention_factor": 1}, 16384, r"scaling\['attention_factor'\] = 1 is not a float",
                 id="yarn-attention-int"),
    pytest.param({**LONGROPE, "factor": 32.0, "attention_factor": -0.5}, 131072,
                 r"scaling\['attention_factor'\] = -0.5 is negative", id="longrope-attention-negative"),
    pytest.param({**YARN, "original_max_position_embeddings": 2048}, 16384,
                 r"scaling\['factor'\] = 4.0 differs from max_position_embeddings / .* = 16384 / 2048 = 8.0",
                 id="yarn-implicit-factor"),
    pytest.param({**LLAMA3, "high_freq_factor": 1.0}, 131072, r"scaling\['high_freq_factor'\] \(1\) is not greater",
                 id="llama3-equal-bands"),
    pytest.param(LLAMA3, 8192, r"scaling\['original_max_position_embeddings'\] = 8192 is not below "
                 "max_position_embeddings = 8192", id="llama3-original-not-below"),
    pytest.param({k: v for k, v in LLAMA3.items() if k != "original_max_position_embeddings"}, 8192,
                 r"original_max_position_embeddings \(defaulted to max_position_embeddings\) = 8192 is not below",
                 id="llama3-original-defaulted"),
    pytest.param(LONGROPE, 131072, r"scaling has no 'factor': HF warns and recommends setting it to "
                 r"max_position_embeddings / original_max_position_embeddings = 131072 / 4096", id="longrope-no-factor"),
    pytest.param({"rope_type": "proportional"}, 4096, r"scaling\['partial_rotary_factor'\] is missing for rope_type "
                 "'proportional'", id="proportional-no-partial"),
]


@pytest.mark.parametrize("scaling, mpe, message", CASES)
def test_fastpe_warns_naming_the_key(scaling, mpe, message):
    if message is None:
        rope.inv_freq(32, scaling=scaling, max_position_embeddings=mpe)  # filterwarnings=error: no warning
        return
    with pytest.warns(RopeConfigWarning, match=message) as record:
        rope.inv_freq(32, scaling=scaling, max_position_embeddings=mpe)
    assert all(w.category is RopeConfigWarning for w in record)
    # the warning points at the caller's line, not into fastpe
    assert all(w.filename == __file__ for w in record), [w.filename for w in record]


@pytest.fixture(scope="module")
def hf_warnings():
    pytest.importorskip("transformers", reason="comparing with HF's validators needs transformers")
    import transformers
    from transformers.utils import logging as hf_logging

    def logged(scaling, mpe) -> list[str]:
        """What HF's validators log for a LlamaConfig with this rope dict (head_dim 32)."""
        hf_logging.set_verbosity_warning()
        logging.Logger.warning_once.cache_clear()  # warning_once: each message once per process
        records = []
        handler = logging.Handler()
        handler.emit = lambda record: records.append(record.getMessage())
        logger = logging.getLogger("transformers")
        logger.addHandler(handler)
        try:
            transformers.AutoConfig.for_model("llama", hidden_size=128, num_attention_heads=4, head_dim=32,
                                              max_position_embeddings=mpe,
                                              rope_parameters={**scaling, "rope_theta": 10000.0})
        finally:
            logger.removeHandler(handler)
            hf_logging.set_verbosity_error()
        return [r for r in records if "rope_parameters" in r or "RoPE" in r]

    return logged


@pytest.mark.parametrize("scaling, mpe, message", CASES)
def test_hf_warns_of_the_same_dicts(hf_warnings, scaling, mpe, message):
    logged = hf_warnings(scaling, mpe)
    assert bool(logged) == (message is not None), logged


def test_keys_fastpe_reads_are_not_called_unrecognized(hf_warnings):
    """Where HF's generic validator lists a key as unrecognized although a rotary module reads
    it (Phi-3.5-MoE's short_mscale / long_mscale, read by PhimoeRotaryEmbedding), fastpe,
    which reads it too, does not warn of it."""
    scaling = {**LONGROPE, "factor": 32.0, "short_mscale": 1.2, "long_mscale": 1.2}
    assert any("short_mscale" in line for line in hf_warnings(scaling, 131072))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rope.inv_freq(32, scaling=scaling, max_position_embeddings=131072)[1] == 1.2


def test_the_warning_class():
    assert issubclass(RopeConfigWarning, UserWarning)
    assert rope.RopeConfigWarning is RopeConfigWarning and "RopeConfigWarning" in rope.__all__
