"""fastpe.torch inside real models: what Hugging Face's attention layers hand the rotary module.

* the model's own config: ``RotaryEmbedding(head_dim, scaling=config.rope_parameters)``
  takes its ``rope_theta`` (``base=None``);
* cos/sin caches for HF's ``position_ids`` ``(batch, seq)``, in every dtype, bit for bit
  against :func:`fastpe.rope.cos_sin`, and against ``LlamaRotaryEmbedding`` itself (a
  ``LlamaConfig`` from ``tests/data/configs/llama-3.1-8b.json``) within HF's float32 error;
* q and k as attention holds them -- ``proj(x).view(b, s, h, d).transpose(1, 2)``, a
  non-contiguous view of contiguous ``(b, s, h, d)`` memory -- rotated in place by fastpe's
  kernel, without a copy and without the torch fallback, equal to the contiguous call;
* each branch of the rule that picks the in-place path or torch's (:meth:`path`), and the
  refusals of bad input before anything is modified.

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
from support.inputs import LLAMA3

CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "data" / "configs"



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


@pytest.fixture
def no_fallback(monkeypatch):
    """The torch path must not run: a call to it fails the test."""
    def refuse(self, x, *args):
        raise AssertionError("the torch fallback ran")

    monkeypatch.setattr(RotaryEmbedding, "_rotate_torch", refuse)


@pytest.fixture
def fallback_calls(monkeypatch):
    """Counts the torch path's calls (it still runs)."""
    calls = []
    original = RotaryEmbedding._rotate_torch

    def counted(self, x, *args):
        calls.append(x)
        return original(self, x, *args)

    monkeypatch.setattr(RotaryEmbedding, "_rotate_torch", counted)
    return calls


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


def test_rotation_matches_hf_attention():
    """An HF attention layer's prefill: q and k as transposed views, HF's cos/sin and
    apply_rotary_pos_emb against this module rotating the same views in place."""
    config, hf_module, hf_apply = hf_rotary()
    ours = from_config(config)
    b, s, d = 2, 16, 128
    q, k = attention_view(b, s, 4, d, seed=3), attention_view(b, s, 2, d, seed=4)  # a few heads of 32 and 8
    hf_cos, hf_sin = hf_module(torch.zeros(b, s, config.hidden_size), POSITION_IDS)
    hq, hk = hf_apply(q, k, hf_cos, hf_sin)
    assert ours.path(q, k) == "in place"
    out_q, out_k = ours(q, k, POSITION_IDS)
    assert out_q is q and out_k is k
    # |y_hf - y| <= (|x1| + |x2|) (cos/sin error + float32 rotation's rounding), per token
    delta = hf_error_bound(hf_module, ours, POSITION_IDS).amax(dim=-1)[:, None, :, None]  # (b, 1, s, 1)
    for theirs, mine, x in ((hq, out_q, hq), (hk, out_k, hk)):
        scale = 2 * x.double().abs().amax(dim=-1, keepdim=True)
        assert ((theirs.double() - mine.double()).abs() <= scale * (delta + 2.0**-21)).all()


# ============================================================ transposed views, in place


SHAPES = [pytest.param(2, 9, 4, 2, 32, id="prefill"), pytest.param(3, 1, 4, 2, 32, id="decode"),
          pytest.param(1, 7, 1, 1, 16, id="one-head"), pytest.param(1, 5, 6, 3, 64, id="batch-1")]


@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("b, s, hq, hk, d", SHAPES)
@pytest.mark.parametrize("positions", ["seq", "batch-seq", "1-seq", "offset"])
def test_transposed_views_rotate_in_place(no_fallback, layout, b, s, hq, hk, d, positions):
    """The fast path on attention's views: the same tensors returned, their memory rotated
    in place (same storage, nothing copied), values equal to the contiguous call's."""
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    module = RotaryEmbedding(d, scaling=scaling, layout=layout)
    q, k = attention_view(b, s, hq, d, seed=5), attention_view(b, s, hk, d, seed=6)
    if s > 1 and hq > 1:
        assert not q.is_contiguous()
    if positions == "batch-seq":
        pos, kw = torch.arange(b * s).reshape(b, s) * 37 + 1000, {}
    elif positions == "1-seq":
        pos, kw = torch.arange(50, 50 + s)[None], {}
    elif positions == "offset":
        pos, kw = None, {"offset": 300}
    else:
        pos, kw = torch.arange(s) + 3, {}
    want_q, want_k = module(q.contiguous(), k.contiguous(), pos, **kw)  # contiguous: fastpe's kernel
    storage_q, storage_k = q.untyped_storage().data_ptr(), k.untyped_storage().data_ptr()
    strides = q.stride(), k.stride()
    version = q._version
    base_q = q._base  # the (b, s, h*d) projection output the view is of
    out_q, out_k = module(q, k, pos, **kw)
    assert out_q is q and out_k is k
    assert same_bits(q, want_q) and same_bits(k, want_k)
    assert q.untyped_storage().data_ptr() == storage_q and k.untyped_storage().data_ptr() == storage_k
    assert (q.stride(), k.stride()) == strides
    assert same_bits(base_q.view(b, s, hq, d).transpose(1, 2), want_q)  # the memory itself rotated
    assert q._version > version  # autograd sees the modification


@pytest.mark.parametrize("layout", ["neox", "gptj"])
def test_transposed_views_equal_apply_qk_on_tokens(no_fallback, layout):
    """The view is fastpe's (tokens, heads, head_dim) with tokens = batch * seq and the
    positions flattened: bit for bit fastpe.rope.apply_qk_ on that array."""
    b, s, d = 2, 6, 32
    module = RotaryEmbedding(d, base=5e5, scaling=LLAMA3, layout=layout)
    q, k = attention_view(b, s, 4, d, seed=7), attention_view(b, s, 2, d, seed=8)
    qt = q.transpose(1, 2).reshape(b * s, 4, d).numpy().copy()
    kt = k.transpose(1, 2).reshape(b * s, 2, d).numpy().copy()
    positions = np.array([[*range(6)], [*range(9000, 9006)]])
    rope.apply_qk_(qt, kt, positions.reshape(-1), base=5e5, scaling=LLAMA3, layout=layout)
    module(q, k, torch.from_numpy(positions))
    assert same_bits(q.transpose(1, 2).reshape(b * s, 4, d), torch.from_numpy(qt))
    assert same_bits(k.transpose(1, 2).reshape(b * s, 2, d), torch.from_numpy(kt))


def test_partial_rotary_on_views(no_fallback):
    module = RotaryEmbedding(32, scaling={"rope_type": "default", "partial_rotary_factor": 0.5})
    q, k = attention_view(2, 5, 3, 32, seed=9), attention_view(2, 5, 1, 32, seed=10)
    q0 = q.clone()
    want = module(q.contiguous(), k.contiguous(), torch.arange(5))
    module(q, k, torch.arange(5))
    assert same_bits(q, want[0]) and same_bits(k, want[1]) and same_bits(q[..., 16:], q0[..., 16:])


def test_one_view_and_one_contiguous_tensor(no_fallback):
    """Forms that differ (a transposed q, a contiguous k): both still in place, one kernel
    pass each, the same values."""
    module = RotaryEmbedding(32, base=5e5, scaling=LLAMA3)
    q, k = attention_view(2, 7, 4, 32, seed=11), randn(2, 2, 7, 32, seed=12)
    assert not q.is_contiguous() and k.is_contiguous()
    want = module(q.contiguous(), k.clone(), torch.arange(7) + 11)
    assert module.path(q, k) == "in place"
    out_q, out_k = module(q, k, torch.arange(7) + 11)
    assert out_q is q and out_k is k and same_bits(q, want[0]) and same_bits(k, want[1])


def test_a_model_layer_end_to_end(no_fallback):
    """A Llama-style attention prefill: projections, views, rotation, attention; the same
    scores as with contiguous copies of q and k."""
    torch.manual_seed(13)
    b, s, h, kv, d = 2, 10, 4, 2, 16
    x = torch.randn(b, s, h * d)
    wq, wk = torch.nn.Linear(h * d, h * d, bias=False), torch.nn.Linear(h * d, kv * d, bias=False)
    rotary = RotaryEmbedding(d, scaling={"rope_type": "default", "rope_theta": 1e4})
    with torch.no_grad():
        q = wq(x).view(b, s, h, d).transpose(1, 2)
        k = wk(x).view(b, s, kv, d).transpose(1, 2)
        qc, kc = rotary(q.contiguous(), k.contiguous(), torch.arange(s)[None])
        q, k = rotary(q, k, torch.arange(s)[None])
        k, kc = k.repeat_interleave(h // kv, dim=1), kc.repeat_interleave(h // kv, dim=1)
        assert same_bits(q @ k.transpose(-1, -2), qc @ kc.transpose(-1, -2))


# ====================================================================== the path rule


def test_path_names_each_reason(fallback_calls):
    """Each branch of the rule: in place for the kernel's forms, torch -- with the reason --
    for another device, dtype, requires_grad, a subclass, a negative view, or other strides.
    forward takes the path path() names, and the torch path leaves its inputs alone."""
    module = RotaryEmbedding(16)
    pos = torch.arange(5)
    q, k = randn(2, 3, 5, 16, seed=14), randn(2, 1, 5, 16, seed=15)
    view_q, view_k = attention_view(2, 5, 3, 16, seed=14), attention_view(2, 5, 1, 16, seed=15)
    qkv = randn(2, 5, 3, 3, 16, seed=16)  # one fused projection: (b, s, q/k/v, h, d)
    param = torch.nn.Parameter(q.clone(), requires_grad=False)
    cases = [
        ("in place", q.clone(), k.clone()),
        ("in place", view_q, view_k),
        ("in place", view_q.clone(), k.clone()),  # .clone() of a view keeps its strides
        ("in place", randn(10, 3, 16, seed=17), randn(10, 1, 16, seed=18)),  # (tokens, heads, head_dim)
        ("torch: q is float64, not float32", q.double(), k.double()),
        ("torch: k is float16, not float32", q.clone(), k.half()),
        ("torch: q is bfloat16, not float32", q.bfloat16(), k.clone()),
        ("torch: q requires grad", q.clone().requires_grad_(), k.clone()),
        ("torch: k requires grad", q.clone(), k.clone().requires_grad_()),
        ("torch: q is a Parameter, not a plain torch.Tensor", param, k.clone()),
        ("torch: q is not a plain strided tensor", torch._neg_view(q.clone()), k.clone()),
        ("torch: q's strides (720, 16, 144, 1) are neither contiguous", qkv[:, :, 0].transpose(1, 2),
         qkv[:, :, 1, :1].transpose(1, 2)),
        ("torch: k's strides", q.clone(), randn(2, 5, 1, 32, seed=19)[..., :16].transpose(1, 2)),
    ]
    for want_path, a, c in cases:
        path = module.path(a, c)
        assert path.startswith(want_path), (want_path, path)
        a0, c0 = a.detach().resolve_neg().clone(), c.detach().clone()  # a negative view's values
        fallback_calls.clear()
        out_a, out_c = module(a, c, pos if a.ndim == 4 else torch.arange(10))
        if path == "in place":
            assert not fallback_calls and out_a is a and out_c is c
        else:
            assert len(fallback_calls) == 2 and out_a is not a and out_c is not c
            assert same_bits(a.detach().resolve_neg(), a0) and same_bits(c.detach(), c0)  # inputs untouched
        # whatever the path, the values: within float32 rounding of the kernel's
        fast_a, fast_c = module(a0.float().contiguous(), c0.float().contiguous(),
                                pos if a.ndim == 4 else torch.arange(10))
        tol = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}.get(out_a.dtype, 2.0**-21)
        assert (out_a.detach().float() - fast_a).abs().max() <= tol * 8 * fast_a.abs().max()


def test_another_device_takes_the_torch_path(monkeypatch):
    """A tensor off the CPU (here "meta", which needs no GPU) goes to torch."""
    module = RotaryEmbedding(16)
    q, k = torch.empty(1, 2, 4, 16, device="meta"), torch.empty(1, 1, 4, 16, device="meta")
    assert module.path(q, k) == "torch: q is on meta, not the CPU"
    calls = []
    # only the choice is tested: arithmetic on "meta" tensors first loads seconds of kernels
    monkeypatch.setattr(RotaryEmbedding, "_rotate_torch", lambda self, x, *args: calls.append(x) or x)
    module(q, k, torch.arange(4))
    assert calls == [q, k] or (calls[0] is q and calls[1] is k)


def test_gradients_flow_through_views_that_require_grad():
    """Training: a view of a projection that requires grad is rotated by torch, out of place,
    and the gradient reaches the projection (a rotation keeps norms: d|Rq|^2/dq = 2q)."""
    torch.manual_seed(20)
    proj = torch.nn.Linear(32, 48)
    qkv = proj(torch.randn(2, 5, 32))
    q = qkv[..., :32].view(2, 5, 2, 16).transpose(1, 2)
    k = qkv[..., 32:].view(2, 5, 1, 16).transpose(1, 2)
    q.retain_grad()
    module = RotaryEmbedding(16)
    assert module.path(q, k) == "torch: q requires grad"
    out_q, out_k = module(q, k, torch.arange(5))
    (out_q.square().sum() + out_k.sum()).backward()
    assert torch.allclose(q.grad, 2 * q.detach(), rtol=1e-5, atol=1e-6)
    assert proj.weight.grad is not None and torch.isfinite(proj.weight.grad).all()
    fast_q, _ = module(q.detach().contiguous(), k.detach().contiguous(), torch.arange(5))
    assert (out_q.detach() - fast_q).abs().max() <= 2.0**-20 * fast_q.abs().max()


# ============================================================================ bad input


@pytest.mark.any_backend
@pytest.mark.parametrize("positions, message", [
    pytest.param(torch.arange(3 * 5).reshape(3, 5), r"positions must have shape \(5,\) or \(2, 5\) or \(1, 5\)",
                 id="batch-3-of-2"),
    pytest.param(torch.arange(4), r"positions must have shape \(5,\)", id="short"),
    pytest.param(torch.arange(10).reshape(2, 5, 1), "positions must have shape", id="3-d"),
    pytest.param(torch.tensor([0, 1, -2, 3, 4]), "positions must be >= 0", id="negative"),
    pytest.param(torch.tensor([0.0, 1.5, 2, 3, 4]), "positions must be whole numbers", id="fraction"),
    pytest.param(torch.tensor([True] * 5), "positions must hold integers", id="bool"),
])
def test_bad_positions_leave_the_views_alone(positions, message):
    module = RotaryEmbedding(16)
    q, k = attention_view(2, 5, 3, 16, seed=20), attention_view(2, 5, 1, 16, seed=21)
    base_q, base_k = q._base.clone(), k._base.clone()
    with pytest.raises((TypeError, ValueError), match=message):
        module(q, k, positions)
    assert same_bits(q._base, base_q) and same_bits(k._base, base_k)


@pytest.mark.any_backend
@pytest.mark.parametrize("kwargs, exc, message", [
    pytest.param({"seq_len": -1}, ValueError, "seq_len must be >= 0", id="seq-len"),
    pytest.param({"seq_len": 2.5}, TypeError, "seq_len must be an integer", id="seq-len-float"),
    pytest.param({"offset": 3}, ValueError, "give positions or offset, not both", id="offset-and-positions"),
])
def test_bad_arguments_leave_the_views_alone(kwargs, exc, message):
    module = RotaryEmbedding(16)
    q, k = attention_view(2, 5, 3, 16, seed=22), attention_view(2, 5, 1, 16, seed=23)
    q0, k0 = q.clone(), k.clone()
    with pytest.raises(exc, match=message):
        module(q, k, torch.arange(5), **kwargs)
    assert same_bits(q, q0) and same_bits(k, k0)


@pytest.mark.any_backend
def test_views_sharing_memory_are_refused_before_rotating():
    """One view passed as both q and k cannot be rotated in place twice."""
    module = RotaryEmbedding(16)
    q = attention_view(2, 5, 2, 16, seed=24)
    before = q.clone()
    with pytest.raises(ValueError, match="k must not share memory with q"):
        module(q, q, torch.arange(5))
    assert same_bits(q, before)


@pytest.mark.any_backend
@pytest.mark.parametrize("q, k, exc, message", [
    pytest.param(np.zeros((1, 2, 3, 16), np.float32), torch.zeros(1, 1, 3, 16), TypeError, "q must be a torch.Tensor",
                 id="numpy"),
    pytest.param(torch.zeros(1, 2, 3, 8), torch.zeros(1, 1, 3, 8), ValueError, "q must have head_dim = 16",
                 id="head-dim"),
    pytest.param(torch.zeros(1, 2, 3, 16, dtype=torch.int32), torch.zeros(1, 1, 3, 16), TypeError,
                 "q must be a floating-point tensor", id="int"),
    pytest.param(torch.zeros(1, 2, 3, 16), torch.zeros(2, 1, 3, 16), ValueError, "k must have the batch of q",
                 id="batch"),
])
def test_path_checks_its_arguments(q, k, exc, message):
    with pytest.raises(exc, match=message):
        RotaryEmbedding(16).path(q, k)


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
