"""fastpe.hf: fastpe's exact RoPE caches inside Hugging Face transformers models.

Every architecture :data:`ARCHS` names is a tiny randomly initialised model built from its
config class (``tests/support/hf_models.py``: the published config of
``tests/data/configs`` with 2 layers, hidden size 64 -- more where a LongRoPE factor list
fixes the head size -- vocabulary 128, q/k projections x30; no download), run with
``patch(model, fused=False)`` and ``fused=True``:

* small positions (0 .. 11): the patched logits equal HF's unpatched ones within
  :data:`SMALL_BOUND` (HF's own float32 caches are within a few ULP of exact there);
* large positions (every position moved by 10**6 at the rotary modules): the patched
  float32 logits are at least :data:`MARGIN` times closer to the float64 truth than HF's
  float32 model and than HF's own ``model.double()`` (whose RoPE stays float32).  The
  truth is the ``.double()`` copy of the model patched by fastpe: caches computed by fastpe
  in float64 (within ``2**-45`` of exact, the oracle's check in :func:`test_caches_dtypes`)
  and HF's arithmetic in float64;
* greedy ``generate`` with every position moved by 10**6 gives the tokens it gives
  unmoved (LongRoPE models: both past their original length, 8192 and 8192 + 10**6, since
  the rule itself changes there); ModernBERT is an encoder and has no generate;
* ``fused=True``: the q/k rotation runs through fastpe's kernel in place where the tensors
  allow it (:data:`IN_PLACE`), HF's arithmetic elsewhere.

Then: patch/unpatch round trips (modules and functions restored, outputs identical to a
never-patched model), refusals (nothing modified), patching twice, dtypes (caches bit for
bit fastpe's in float32/float64/float16/bfloat16 and checked against the mpmath oracle),
dynamic NTK's and LongRoPE's lengths as HF's modules see them.

torch and transformers are optional peers: without either, this module is skipped.  The
tests use the default backend (``FASTPE_BACKEND``), so they are not marked ``any_backend``;
only those that compute nothing are.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional peer of fastpe (fastpe.hf patches torch models)")
transformers = pytest.importorskip("transformers", reason="transformers is an optional peer of fastpe "
                                   "(fastpe.hf patches its models)")

from fastpe import hf  # noqa: E402
from fastpe.rope import Rotary  # noqa: E402

from support import oracle  # noqa: E402
from support.hf_models import rotary_modules, shifted, tiny_config, tiny_gemma3_multimodal, tiny_model  # noqa: E402

#: the architectures the per-model tests cover (tests/support/hf_models.py's names)
ARCHS = ["llama-2", "llama-3.1", "llama-3.2", "llama-4", "llama-4-instruct", "mistral", "qwen2", "qwen2.5-yarn", "qwen3",
         "phi-3-mini", "phi-3.5-mini", "phi-4-mini", "phimoe", "gemma-2", "gemma-3", "gemma-4", "gemma-4-default",
         "gpt-neox", "gpt-j", "stablelm", "deepseek-v3", "gpt-oss", "modernbert"]
#: where fused=True rotates q and k in place: the attention's q/k are (batch, seq, heads,
#: head_dim) rows (or their first rotary_dim values).  Elsewhere they are slices of one
#: fused qkv projection (Phi-3, GPT-NeoX, ModernBERT) or of larger tensors (DeepSeek's rope
#: part), which HF's arithmetic rotates
IN_PLACE = {"llama-2", "llama-3.1", "llama-3.2", "llama-4", "llama-4-instruct", "mistral", "qwen2", "qwen2.5-yarn", "qwen3", "phimoe",
            "gemma-2", "gemma-3", "gemma-4", "gemma-4-default", "gpt-j", "stablelm", "gpt-oss"}
#: LongRoPE models: their rule changes past the original length
LONG = {"phi-3.5-mini", "phi-4-mini", "phimoe"}
ENCODERS = {"modernbert"}

SHIFT = 10**6
QK_SCALE = 30.0
#: |patched - HF| of logits (of size ~1) at positions 0 .. 11: HF's float32 caches are a few
#: ULP from exact there; measured up to 4.2e-6 (Phi-3.5-mini)
SMALL_BOUND = 5e-5
#: the patched float32 model's distance to the truth at 10**6 is at least this many times
#: smaller than HF's (measured: 27x to 10**5 x)
MARGIN = 10.0
#: ... and at most this (measured up to 2.3e-5, Phi-4-mini: float32 noise of the model)
LARGE_BOUND = 2e-4


@pytest.fixture(autouse=True)
def _quiet():
    transformers.logging.set_verbosity_error()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # HF's and fastpe's notes on the published configs
        yield


def ids_for(batch=2, seq=12, seed=1):
    return torch.randint(4, 128, (batch, seq), generator=torch.Generator().manual_seed(seed))


def err(x, truth) -> float:
    return float((x.double() - truth).abs().max())


class Reference:
    """One architecture's model and HF's own results, computed once for the module."""

    def __init__(self, name: str):
        self.name = name
        self.model = tiny_model(name, qk_scale=QK_SCALE)
        self.ids = ids_for()
        self.base = 8192 if name in LONG else 0
        m = self.model
        with torch.no_grad():
            self.small = m(self.ids).logits
            with shifted(m, SHIFT):
                self.hf32 = m(self.ids).logits
            double = copy.deepcopy(m).double()
            with shifted(double, SHIFT):
                self.hf64 = double(self.ids).logits
            hf.patch(double)
            with shifted(double, SHIFT):
                self.truth = double(self.ids).logits
        del double


@functools.cache
def reference(name: str) -> Reference:
    return Reference(name)


@pytest.fixture
def patched(request):
    """``(reference, fused)``: the architecture's model patched, unpatched afterwards."""
    name, fused = request.param
    ref = reference(name)
    hf.patch(ref.model, fused=fused)
    hf.FUSED_CALLS.clear()
    try:
        yield ref, fused
    finally:
        hf.unpatch(ref.model)
    assert not hf.is_patched(ref.model)


CASES = [(name, fused) for name in ARCHS for fused in (False, True)]
IDS = [f"{name}-{'fused' if fused else 'caches'}" for name, fused in CASES]


def check_path(ref, fused, *, decoding=False):
    """Which way the rotations went: through the kernel in place for :data:`IN_PLACE`, HF's
    arithmetic for the others -- except, while decoding, a single token's slice of a fused
    qkv projection, which is contiguous (Phi-3's q and k) and so rotates in place too."""
    calls = dict(hf.FUSED_CALLS)
    kernel = sum(n for (path, _), n in calls.items() if path == "kernel")
    fell = sum(n for (path, _), n in calls.items() if path == "hf")
    if not fused:
        assert not calls, calls
    elif ref.name in IN_PLACE:
        assert kernel and not fell, calls
    elif ref.name != "deepseek-v3":  # DeepSeek's functions are left as they are
        assert fell and (decoding or not kernel), calls


@pytest.mark.parametrize("patched", CASES, ids=IDS, indirect=True)
def test_small_positions_match_hf(patched):
    ref, fused = patched
    with torch.no_grad():
        got = ref.model(ref.ids).logits
    diff = float((got - ref.small).abs().max())
    assert diff <= SMALL_BOUND, f"{ref.name}: patched logits {diff:.2e} from HF's at positions 0..11"
    check_path(ref, fused)


@pytest.mark.parametrize("patched", CASES, ids=IDS, indirect=True)
def test_large_positions_closer_to_the_truth(patched):
    ref, fused = patched
    with torch.no_grad(), shifted(ref.model, SHIFT):
        got = ref.model(ref.ids).logits
    ours, hf32, hf64 = err(got, ref.truth), err(ref.hf32, ref.truth), err(ref.hf64, ref.truth)
    what = f"{ref.name} at 10**6: fastpe {ours:.2e}, HF float32 {hf32:.2e}, HF double {hf64:.2e} from the truth"
    assert ours <= LARGE_BOUND, what
    assert ours * MARGIN <= hf32, what
    assert ours * MARGIN <= hf64, what
    assert torch.equal(got.argmax(-1), ref.truth.argmax(-1)), what
    check_path(ref, fused)


@pytest.mark.parametrize("patched", [c for c in CASES if c[0] not in ENCODERS],
                         ids=[i for c, i in zip(CASES, IDS) if c[0] not in ENCODERS], indirect=True)
def test_generate_is_shift_invariant(patched):
    ref, fused = patched
    prompt = ids_for(batch=1, seq=8, seed=2)

    def tokens(shift):
        with torch.no_grad(), shifted(ref.model, shift):
            out = ref.model.generate(prompt, max_new_tokens=4, do_sample=False)
        return out[0, prompt.shape[1]:].tolist()

    here, far = tokens(ref.base), tokens(ref.base + SHIFT)
    assert here == far, f"{ref.name}: {here} at positions from {ref.base}, {far} from {ref.base + SHIFT}"
    check_path(ref, fused, decoding=True)


@pytest.mark.parametrize("fused", [False, True])
def test_gemma3_with_its_vision_tower(fused):
    """Gemma3ForConditionalGeneration (model type 'gemma3'): the text model's rotary module
    is patched, the vision tower (no RoPE) left alone."""
    model = tiny_gemma3_multimodal()
    ids = ids_for()
    with torch.no_grad():
        before = model(ids).logits
        hf.patch(model, fused=fused)
        hf.FUSED_CALLS.clear()
        after = model(ids).logits
    assert [type(m).__name__ for m in rotary_modules(model)] == ["PatchedRotaryEmbedding"]
    assert float((after - before).abs().max()) <= SMALL_BOUND
    assert bool(hf.FUSED_CALLS) == fused
    hf.unpatch(model)


def test_padded_batch_generate():
    """A left-padded batch: HF's position_ids are (batch, seq), a row each, and the fused
    rotation takes them token by token; the tokens are HF's, fused or not."""
    model = tiny_model("llama-3.1", qk_scale=QK_SCALE)
    ids = ids_for(batch=2, seq=6, seed=7)
    mask = torch.ones_like(ids)
    ids[0, :2], mask[0, :2] = 0, 0  # the first prompt is 4 tokens long

    def tokens():
        with torch.no_grad():
            return model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False).tolist()

    theirs = tokens()
    for fused in (False, True):
        hf.patch(model, fused=fused)
        hf.FUSED_CALLS.clear()
        assert tokens() == theirs
        assert bool(hf.FUSED_CALLS) == fused and not any(p == "hf" for p, _ in hf.FUSED_CALLS)
        hf.unpatch(model)


def test_gradients_flow_through_hf_arithmetic():
    """Training: q and k require grad, so the fused function leaves them to HF's arithmetic
    (NumPy must not write tensors autograd tracks); the gradients are the unfused ones."""
    grads = []
    for fused in (False, True):
        model = tiny_model("qwen3", seed=8).train()
        hf.patch(model, fused=fused)
        hf.FUSED_CALLS.clear()
        loss = model(ids_for(), labels=ids_for()).loss
        loss.backward()
        grads.append(model.model.layers[0].self_attn.q_proj.weight.grad.clone())
        assert all(p == "hf" for p, _ in hf.FUSED_CALLS) and bool(hf.FUSED_CALLS) == fused
        hf.unpatch(model)
    assert torch.equal(grads[0], grads[1])


# ================================================================ round trips, refusals, state


def modeling(model_type):
    family = hf.SUPPORTED[model_type]
    return importlib.import_module(f"transformers.models.{family.module}.modeling_{family.module}")


def snapshot(model):
    """Every module in its place and the modeling functions fused=True replaces."""
    family = hf.SUPPORTED[model.config.model_type]
    module = modeling(model.config.model_type)
    return ([(name, m) for name, m in model.named_modules()],
            {f: module.__dict__[f] for f, _ in family.fused})


def same_snapshot(a, b):
    assert [n for n, _ in a[0]] == [n for n, _ in b[0]]
    assert all(x is y for (_, x), (_, y) in zip(a[0], b[0]))
    assert a[1].keys() == b[1].keys() and all(a[1][k] is b[1][k] for k in a[1])


@pytest.mark.parametrize("name", ["llama-3.1", "gemma-3", "gpt-j", "llama-4", "deepseek-v3"])
def test_patch_unpatch_round_trip(name):
    model = tiny_model(name, seed=3)
    never = tiny_model(name, seed=3)
    ids = ids_for()
    before = snapshot(model)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for fused in (False, True):
        assert hf.patch(model, fused=fused) is model and hf.is_patched(model)
        patched_class = hf.PatchedRotaryEmbedding
        rotaries = rotary_modules(model)
        assert rotaries and all(isinstance(m, patched_class) for m in rotaries)
        assert all(m.original in [x for _, x in before[0]] for m in rotaries)
        if fused and hf.SUPPORTED[model.config.model_type].fused:
            now = snapshot(model)[1]
            assert all(now[f] is not before[1][f] and now[f].__fastpe_original__ is before[1][f] for f in now)
        assert model.state_dict().keys() == state.keys()  # the rotary modules' buffers are not saved
        assert hf.unpatch(model) is model and not hf.is_patched(model)
        same_snapshot(snapshot(model), before)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, never(ids).logits)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
    assert hf.unpatch(model) is model  # not patched: as it is


def test_other_models_are_unaffected_by_a_fused_patch():
    """The replaced functions serve fastpe's caches only: an unpatched model of the same
    architecture, and one patched without fused, compute what they computed before; the
    functions stay until the last fused model is unpatched."""
    a, b, c = (tiny_model("llama-3.1", seed=s) for s in (4, 4, 5))
    ids = ids_for()
    with torch.no_grad():
        plain, plain_c = b(ids).logits, c(ids).logits
        hf.patch(c)
        caches_only = c(ids).logits
        hf.patch(a, fused=True)
        d = tiny_model("llama-3.1", seed=6)
        hf.patch(d, fused=True)
        hf.FUSED_CALLS.clear()
        assert torch.equal(b(ids).logits, plain)
        assert torch.equal(c(ids).logits, caches_only)
        assert not hf.FUSED_CALLS
        assert float((caches_only - plain_c).abs().max()) <= SMALL_BOUND
    module = modeling("llama")
    fused_fn = module.apply_rotary_pos_emb
    hf.unpatch(a)
    assert module.apply_rotary_pos_emb is fused_fn  # d still uses it
    hf.unpatch(d)
    assert module.apply_rotary_pos_emb is fused_fn.__fastpe_original__
    hf.unpatch(c)


@pytest.mark.any_backend
def test_unsupported_models_are_refused_untouched():
    config = transformers.MixtralConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                        num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                                        num_local_experts=2, num_experts_per_tok=1)
    model = transformers.MixtralForCausalLM(config)
    before = [(n, m) for n, m in model.named_modules()]
    with pytest.raises(TypeError, match=r"model type 'mixtral'.*supported: .*gpt_oss.*llama.*qwen3"):
        hf.patch(model)
    assert all(a is b for (_, a), (_, b) in zip(before, model.named_modules())) and not hf.is_patched(model)

    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64))
    with pytest.raises(TypeError, match="model type 'gpt2'"):
        hf.patch(gpt2)
    with pytest.raises(TypeError, match="transformers model"):
        hf.patch(object())
    with pytest.raises(TypeError, match="fused must be True or False"):
        hf.patch(gpt2, fused=1)


@pytest.mark.any_backend
def test_an_unknown_rotary_class_is_refused_untouched():
    model = tiny_model("llama-3.1")
    config = tiny_config("mistral")
    from transformers.models.mistral.modeling_mistral import MistralRotaryEmbedding

    foreign = MistralRotaryEmbedding(config)
    model.model.rotary_emb = foreign
    before = snapshot(model)
    with pytest.raises(TypeError, match=r"rotary module .*MistralRotaryEmbedding \(at model.rotary_emb\).*"
                                        r"modeling_llama.LlamaRotaryEmbedding"):
        hf.patch(model, fused=True)
    same_snapshot(snapshot(model), before)
    assert not hf.is_patched(model)


@pytest.mark.any_backend
def test_a_config_read_differently_is_refused_untouched():
    """The config changed after the model was built: HF's module holds other frequencies
    than the config now says, and patch refuses to guess which is meant."""
    model = tiny_model("llama-3.1")
    model.config.rope_parameters["rope_theta"] = 10000.0
    before = snapshot(model)
    with pytest.raises(ValueError, match=r"reads this 'llama' model's config differently.*inv_freq\[1\]"):
        hf.patch(model, fused=True)
    same_snapshot(snapshot(model), before)


@pytest.mark.any_backend
def test_a_config_fastpe_cannot_read_is_refused_untouched():
    model = tiny_model("qwen2")
    model.config.rope_parameters["rope_type"] = "made_up"
    before = snapshot(model)
    with pytest.raises(ValueError, match=r"cannot read the rope configuration of this 'qwen2' model: .*'made_up'"):
        hf.patch(model, fused=True)
    same_snapshot(snapshot(model), before)


def test_patching_twice():
    model = tiny_model("qwen3")
    hf.patch(model)
    rotary = model.model.rotary_emb
    assert hf.patch(model) is model and model.model.rotary_emb is rotary  # the same: a no-op
    with pytest.raises(ValueError, match="already patched with fused=False"):
        hf.patch(model, fused=True)
    with pytest.raises(ValueError, match="already patched"):
        hf.patch(model.model)  # a part of a patched model
    assert model.model.rotary_emb is rotary
    hf.unpatch(model)
    assert type(model.model.rotary_emb).__name__ == "Qwen3RotaryEmbedding"


def test_docs_example_runs():
    """docs/hf.md's first python block, as written, gives logits and unpatches."""
    import pathlib
    import re

    page = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "hf.md").read_text()
    block = re.search(r"```python\n(.*?)```", page, re.S).group(1)
    namespace: dict = {}
    exec(compile(block, "docs/hf.md (fastpe.hf)", "exec"), namespace)
    assert namespace["fused_logits"].shape == (1, 4, 128) and not hf.is_patched(namespace["model"])


@pytest.mark.any_backend
def test_imports_neither_torch_nor_transformers_until_patch():
    """``import fastpe.hf`` works without torch; patch then says what to install."""
    import subprocess
    import sys

    from conftest import fastpe_env

    code = ("import sys\n"
            "sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
            "import fastpe, fastpe.hf\n"
            "try:\n"
            "    fastpe.hf.patch(object())\n"
            "except ImportError as exc:\n"
            "    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=fastpe_env(), timeout=60)
    assert out.returncode == 0, out.stderr
    assert "pip install torch transformers" in out.stdout


# ==================================================================================== dtypes

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
FORMATS = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def as_float64(t) -> np.ndarray:
    return t.detach().to(torch.float64).numpy()


@pytest.mark.parametrize("name", ["llama-3.1", "gemma-3", "gpt-j", "llama-4", "gpt-oss", "phi-3.5-mini"])
@pytest.mark.parametrize("dtype", DTYPES, ids=[FORMATS[d] for d in DTYPES])
def test_caches_dtypes(name, dtype):
    """Patched after ``.to(dtype)``: the caches are HF's shapes and dtypes (Llama 4:
    complex64, complex128 for float64), fastpe's values in that dtype bit for bit, and
    correct (the mpmath oracle on a sample); the whole model runs."""
    model = tiny_model(name).to(dtype)
    originals = rotary_modules(model)
    hf.patch(model)
    try:
        position_ids = torch.tensor([[0, 1, 7, 4095, 4096, 10**6, 2**32 - 1]])
        x = torch.zeros(1, 7, 4, dtype=dtype)
        for original, rotary_module in zip(originals, rotary_modules(model)):
            config = getattr(original, "config", None) or model.config
            layer_types = list(original.rope_type) if hf.SUPPORTED[model.config.model_type].per_layer else [None]
            for layer_type in layer_types:
                args = () if layer_type is None else (layer_type,)
                with torch.no_grad():
                    got = rotary_module(x, position_ids, *args)
                    small = torch.tensor([[0, 1, 7]])
                    theirs = original(x, small, *args)
                check_caches(got, theirs, Rotary.from_config(config, layer_type=layer_type), position_ids, dtype,
                             name, model.config.model_type)
        with torch.no_grad():
            logits = model(ids_for(batch=1, seq=6)).logits
        assert logits.dtype == dtype and bool(torch.isfinite(logits).all())
    finally:
        hf.unpatch(model)


def check_caches(got, theirs, rotary, position_ids, dtype, name, model_type):
    returns = hf.SUPPORTED[model_type].returns
    if returns == "complex":
        assert got.dtype == (torch.complex128 if dtype == torch.float64 else torch.complex64)
        assert theirs.dtype == torch.complex64 and got.shape[-1] == theirs.shape[-1]
        got = (got.real, got.imag)
        fmt = "float64" if dtype == torch.float64 else "float32"
    else:
        assert all(g.dtype == t.dtype == dtype and g.shape[-1] == t.shape[-1] for g, t in zip(got, theirs))
        if returns == "gptj":
            got = got[::-1]  # (sin, cos)
        fmt = FORMATS[dtype]
    spec = rotary.spec
    if model_type == "phimoe":  # see fastpe.hf: HF's Phimoe keeps the short factors
        rotary = Rotary._from_spec(dataclasses.replace(spec, long_factor=spec.short_factor), rotary.layout)
    neox = Rotary._from_spec(rotary.spec, "neox")
    pos = position_ids.numpy()
    cos, sin = neox.cos_sin(pos, dtype=fmt)
    if returns != "halves":
        half = cos.shape[-1] // 2
        cos, sin = cos[..., :half], sin[..., :half]
    for a, b in zip(got, (cos, sin)):
        assert np.array_equal(as_float64(a), b.astype(np.float64)), name
    # the oracle: a sample of columns at every position
    seq_len = int(pos.max()) + 1
    freqs, af = rotary.inv_freq_at(seq_len), rotary.attention_factor_at(seq_len)
    n = len(freqs)
    for j, p in enumerate(pos[0].tolist()):
        for i in sorted({0, 1, n // 2, n - 1}):
            for value, is_cos in ((got[0], True), (got[1], False)):
                v = float(value[0, j, i])
                oracle.check_against_mpmath(v, oracle.rope_value_fn(p, float(freqs[i]), af, is_cos), fmt,
                                            f"{name} {fmt} {'cos' if is_cos else 'sin'}[{p}, {i}]", scale=af)


# ==================================================================== lengths HF's modules see


def hf_cos(module, position_ids, layer_type=None):
    x = torch.zeros(1, 1, 1)
    with torch.no_grad():
        out = module(x, position_ids) if layer_type is None else module(x, position_ids, layer_type)
    return as_float64(out[0])


def test_dynamic_ntk_keeps_the_longest_length_as_hf_does():
    """HF's dynamic NTK module grows to the longest length seen and resets below
    max_position_embeddings; the patched module makes the same choices (its caches are
    Rotary.cos_sin at the length HF's state holds, bit for bit, and HF's within its float32
    error)."""
    fields = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 64,
              "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}
    config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    model = transformers.LlamaForCausalLM(config).eval()
    theirs = copy.deepcopy(model.model.rotary_emb)
    hf.patch(model)
    ours = model.model.rotary_emb
    rotary = Rotary.from_config(config)
    kept = 64
    for length in (16, 100, 80, 200, 64, 50, 120, 30):
        position_ids = torch.arange(length)[None]
        kept = length if length > kept else (64 if length < 64 and kept > 64 else kept)
        got, want = hf_cos(ours, position_ids), hf_cos(theirs, position_ids)
        exact = rotary.cos_sin(position_ids.numpy(), dtype="float32", seq_len=kept)[0]
        assert np.array_equal(got, exact.astype(np.float64)), length
        assert np.abs(got - want).max() <= 1e-4, length
        assert theirs.max_seq_len_cached == kept == ours.ropes[None].dynamic[1]
    hf.unpatch(model)


@pytest.mark.parametrize("name", ["phi-3.5-mini", "phimoe"])
def test_longrope_switches_where_hf_does(name):
    """LongRoPE: long factors past the original length (Phi-3), and Phi-3.5-MoE's module,
    which keeps the short factors and switches its mscale: the patched caches follow HF's
    within its float32 error at positions up to 8200, on both sides of 4096."""
    model = tiny_model(name)
    theirs = copy.deepcopy(model.model.rotary_emb)
    hf.patch(model)
    ours = model.model.rotary_emb
    for stop in (100, 4096, 4097, 8200):
        position_ids = torch.arange(stop - 40, stop)[None]
        got, want = hf_cos(ours, position_ids), hf_cos(theirs, position_ids)
        assert np.abs(got - want).max() <= 2e-3, (name, stop)  # HF's angles: 8200 * 2**-24 * 2
    hf.unpatch(model)


def test_positions_beyond_gptj_table():
    """HF's GPT-J indexes a table of n_positions rows; the patched module computes any
    position below 2**32."""
    model = tiny_model("gpt-j")  # its table: 2**20 + 4096 rows
    hf.patch(model)
    try:
        sin, cos = model.transformer.rotary_emb(torch.zeros(1, 1, 1), torch.tensor([[2**32 - 1]]))
        assert sin.shape == (1, 1, 4) and bool((sin.abs() <= 1).all())
    finally:
        hf.unpatch(model)
