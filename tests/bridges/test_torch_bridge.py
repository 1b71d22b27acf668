"""fastpe.torch: the PyTorch modules against their peers.

* SinusoidalPositionalEncoding against the PyTorch tutorial's ``PositionalEncoding``
  (written out below, sequence-first and batch-first: float32 ``exp``/``sin``/``cos``),
  within that formula's float32 error, and bit for bit against ``fastpe.table``; growth,
  layouts, dropout, the ``pe`` buffer, checkpoints, dtypes.
* RotaryEmbedding: the in-place path bit for bit against ``fastpe.rope.apply_qk_``; HF
  transformers' ``apply_rotary_pos_emb`` within float32 error; the torch path (float64,
  other strides, autograd, 16-bit) against the in-place path.  xPos: the in-place path bit
  for bit against ``Rotary.apply_qk_``, the torch path and its gradients against torchscale's
  ``XPOS`` formula (written out below), the four caches, the centre, the errors.
  ``test_torch_models.py`` holds what real models add: HF's own rotary module, the
  attention layers' transposed q/k views, ``(batch, seq)`` positions.

torch is an optional peer of fastpe: without it this module is skipped.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import mpmath
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional peer of fastpe")

import fastpe  # noqa: E402
from fastpe import rope  # noqa: E402
from fastpe.torch import PositionalEncoding, RotaryEmbedding, SinusoidalPositionalEncoding  # noqa: E402

from conftest import fastpe_env  # noqa: E402
from support.cli import same_bits  # noqa: E402
from support.oracle import check_against_mpmath, mp_correct, table_value_fn  # noqa: E402
from support.torchscale import rotate_every_two, torchscale_xpos  # noqa: E402


def table(d_model: int, max_len: int, dtype=None) -> torch.Tensor:
    """fastpe's table as a tensor (bfloat16 through its bits)."""
    a = fastpe.table(d_model, max_len, dtype=dtype)
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def encoding(d_model: int, max_len: int, **kw) -> SinusoidalPositionalEncoding:
    """The module without dropout (the tutorial's default, 0.1, would zero values in training mode)."""
    return SinusoidalPositionalEncoding(d_model, dropout=0.0, max_len=max_len, **kw)


# ================================================================== the tutorial's module


class TutorialPositionalEncoding(torch.nn.Module):
    """``PositionalEncoding`` of PyTorch's "Language Modeling with nn.Transformer" tutorial
    (pytorch/tutorials, beginner_source/transformer_tutorial.py), as written there:
    (seq, batch, d_model) inputs, float32 arithmetic, a persistent ``pe`` of shape
    (max_len, 1, d_model)."""

    def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 5000):
        super().__init__()
        self.dropout = torch.nn.Dropout(p=dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):
        x = x + self.pe[: x.size(0)]
        return self.dropout(x)


class TutorialBatchFirstPositionalEncoding(torch.nn.Module):
    """The same tutorial module in its batch-first form, as models built on
    ``batch_first=True`` layers write it: the tutorial's code with ``pe`` of shape
    (1, max_len, d_model) (``pe[0, :, 0::2] = sin``, ``pe[0, :, 1::2] = cos``) and
    ``forward`` adding ``self.pe[:, :x.size(1)]`` to (batch, seq, d_model) inputs."""

    def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 5000):
        super().__init__()
        self.dropout = torch.nn.Dropout(p=dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(1, max_len, d_model)
        pe[0, :, 0::2] = torch.sin(position * div_term)
        pe[0, :, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):
        x = x + self.pe[:, : x.size(1)]
        return self.dropout(x)


def tutorial_bound(max_len: int) -> torch.Tensor:
    """How far the tutorial's float32 values may be from the true ones, per position.

    Its angle ``p * w`` carries ``w``'s error from float32 ``exp`` of a rounded argument
    (``|arg| <= ln 10000 < 9.3``: a relative error below ``2**-19.7``) plus the product's
    rounding (``2**-24`` relative, ``w <= 1``), and sin/cos add about an ULP of 1: in all
    below ``p * 2**-19 + 2**-22``.  fastpe is within one float32 ULP of the true value."""
    p = torch.arange(max_len, dtype=torch.float64)[:, None]
    return p * 2.0**-19 + 2.0**-22


@pytest.mark.parametrize("d_model", [16, 66, 128])
def test_matches_the_tutorial_within_its_float32_error(d_model):
    torch.manual_seed(0)
    max_len = 1024
    theirs = TutorialPositionalEncoding(d_model, dropout=0.0, max_len=max_len)
    ours = encoding(d_model, max_len, batch_first=False)
    x = torch.randn(max_len, 2, d_model)
    a, b = ours(x), theirs(x)
    assert a.shape == b.shape and a.dtype == b.dtype == torch.float32
    diff = (a.double() - b.double()).abs().amax(dim=1)  # (seq, d_model)
    assert (diff <= tutorial_bound(max_len)).all()
    # the tables themselves: the tutorial's error grows with the position, ours does not
    delta = (ours.pe[0].double() - theirs.pe[:, 0].double()).abs()
    assert (delta <= tutorial_bound(max_len)).all()
    assert delta[-100:].max() > 2**-16  # the tutorial's drift is far larger than a float32 ULP


def test_batch_first_matches_the_batch_first_tutorial():
    torch.manual_seed(0)
    theirs = TutorialBatchFirstPositionalEncoding(32, dropout=0.0, max_len=256)
    ours = PositionalEncoding(32, dropout=0.0, max_len=256)
    assert ours.pe.shape == theirs.pe.shape == (1, 256, 32)
    x = torch.randn(3, 200, 32)
    a, b = ours(x), theirs(x)
    assert a.shape == b.shape == x.shape
    assert ((a.double() - b.double()).abs().amax(dim=0) <= tutorial_bound(200)).all()
    assert same_bits(a, x + ours.pe[:, :200])


@pytest.mark.parametrize("d_model", [1, 7, 16, 33])
def test_table_is_fastpe_table_bit_for_bit(d_model):
    m = encoding(d_model, 50)
    assert m.pe.shape == (1, 50, d_model)
    assert same_bits(m.pe[0], table(d_model, 50))
    assert same_bits(m(torch.zeros(3, 50, d_model))[2], table(d_model, 50))


@pytest.mark.any_backend
def test_the_tutorial_constructor():
    """The tutorial's arguments, order and defaults: (d_model, dropout=0.1, max_len=5000);
    PositionalEncoding is the same class."""
    import inspect

    assert PositionalEncoding is SinusoidalPositionalEncoding
    params = inspect.signature(SinusoidalPositionalEncoding).parameters
    assert list(params)[:3] == ["d_model", "dropout", "max_len"]
    assert params["dropout"].default == 0.1 and params["max_len"].default == 5000
    assert params["batch_first"].kind is inspect.Parameter.KEYWORD_ONLY


def test_default_arguments():
    m = SinusoidalPositionalEncoding(8)
    assert m.max_len == 5000 and m.batch_first is True and m.dropout.p == 0.1
    assert m.pe.shape == (1, 5000, 8)
    assert "d_model=8" in repr(m) and "max_len=5000" in repr(m)
    m = SinusoidalPositionalEncoding(8, 0.2, 30)  # positionally, as the tutorial's model calls it
    assert m.dropout.p == 0.2 and m.max_len == 30


# ================================================================================ layouts


def test_batch_first_both_ways_and_unbatched():
    torch.manual_seed(1)
    pe = table(12, 20)
    x = torch.randn(3, 20, 12)  # (batch, seq, d)
    out = encoding(12, 20, batch_first=True)(x)
    assert same_bits(out, x + pe[None])

    xs = x.transpose(0, 1).contiguous()  # (seq, batch, d)
    out_s = encoding(12, 20, batch_first=False)(xs)
    assert same_bits(out_s, xs + pe[:, None])
    assert same_bits(out_s.transpose(0, 1), out)

    for batch_first in (True, False):  # (seq, d): no batch
        m = encoding(12, 20, batch_first=batch_first)
        assert same_bits(m(x[0, :7]), x[0, :7] + pe[:7])


def test_shorter_inputs_take_the_first_rows():
    x = torch.ones(2, 5, 4)
    assert same_bits(encoding(4, 100)(x), x + table(4, 5))


# ================================================================================= growth


def test_growth_equals_a_table_built_that_long():
    torch.manual_seed(2)
    m = encoding(10, 8)
    x = torch.randn(2, 37, 10)
    out = m(x)
    assert m.max_len == 37  # more than double: exactly what is needed
    assert same_bits(out, encoding(10, 37)(x))
    assert same_bits(m.pe[0], table(10, 37))

    out = m(torch.zeros(1, 40, 10))  # a little longer: at least doubles
    assert m.max_len == 74 and m.pe.shape == (1, 74, 10)
    assert same_bits(m.pe[0], table(10, 74))
    assert same_bits(out[0], table(10, 40))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_growth_keeps_dtype_and_computes_in_it(dtype):
    m = encoding(6, 4).to(dtype)
    out = m(torch.zeros(1, 9, 6, dtype=dtype))
    assert m.pe.dtype == dtype and out.dtype == dtype
    name = str(dtype).removeprefix("torch.")
    assert same_bits(m.pe[0], table(6, 9, dtype=name))  # the new rows too: fastpe's, in that dtype


def test_growth_keeps_the_device():
    # a device other than the CPU, without a GPU: only the growth itself (the first addition
    # on "meta" tensors loads seconds of torch's meta kernels)
    meta = encoding(6, 4).to("meta")
    meta._grow(9)
    assert meta.pe.device.type == "meta" and meta.max_len == 9 and meta.pe.dtype == torch.float32


def test_grown_table_is_what_state_dict_saves():
    m = encoding(4, 2)
    m(torch.zeros(1, 5, 4))
    assert dict(m.named_buffers()).keys() == {"pe"}
    saved = m.state_dict()
    assert list(saved) == ["pe"] and same_bits(saved["pe"][0], table(4, 5))


# ================================================================================= offset


def test_offset_encodes_later_positions():
    torch.manual_seed(3)
    m = encoding(8, 16)
    x = torch.randn(2, 3, 8)
    assert same_bits(m(x, offset=5), x + table(8, 8)[5:8])
    assert same_bits(m(x, offset=torch.tensor(5)), m(x, offset=5))
    # a cache that decodes past the table grows it
    out = m(x[:, :1], offset=40)
    assert m.max_len == 41
    assert same_bits(out, x[:, :1] + table(8, 41)[40:41])
    # token by token equals the whole sequence at once
    seq = torch.randn(1, 6, 8)
    steps = torch.cat([m(seq[:, i:i + 1], offset=i) for i in range(6)], dim=1)
    assert same_bits(steps, m(seq))


def test_offset_seq_first():
    x = torch.zeros(3, 2, 8)  # (seq, batch, d)
    m = encoding(8, 4, batch_first=False)
    out = m(x, offset=2)
    assert same_bits(out[:, 1], table(8, 5)[2:5])


# ======================================================================= dropout, buffers


def test_dropout_eval_is_identity_and_train_zeroes_a_fraction():
    torch.manual_seed(4)
    m = SinusoidalPositionalEncoding(64, max_len=128, dropout=0.5)
    x = torch.full((8, 128, 64), 3.0)  # x + pe >= 2: a zero can only come from dropout
    plain = x + table(64, 128)
    assert same_bits(m.eval()(x), plain)

    out = m.train()(x)
    dropped = out == 0
    assert 0.45 < dropped.float().mean().item() < 0.55
    assert same_bits(out[~dropped], (plain * 2.0)[~dropped])  # survivors scaled by 1/(1-p)


def test_state_dict_holds_the_table():
    m = encoding(8, 10)
    saved = m.state_dict()
    assert list(saved) == ["pe"] and saved["pe"].shape == (1, 10, 8)
    assert same_bits(saved["pe"][0], table(8, 10))

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(8, 8)
            self.pos = encoding(8, 10)

    assert set(Model().state_dict()) == {"proj.weight", "proj.bias", "pos.pe"}


class Tutorial(torch.nn.Module):
    """A model around the tutorial's module (either form)."""

    def __init__(self, encoder, d_model=8, max_len=10):
        super().__init__()
        self.proj = torch.nn.Linear(d_model, d_model)
        self.pos = encoder(d_model, max_len=max_len)


class Ours(torch.nn.Module):
    def __init__(self, d_model=8, max_len=10, **kw):
        super().__init__()
        self.proj = torch.nn.Linear(d_model, d_model)
        self.pos = PositionalEncoding(d_model, max_len=max_len, **kw)


@pytest.mark.parametrize("encoder, batch_first", [(TutorialBatchFirstPositionalEncoding, True),
                                                  (TutorialPositionalEncoding, False)],
                         ids=["batch-first", "seq-first"])
def test_loads_a_tutorial_checkpoint_strictly(encoder, batch_first, tmp_path):
    """A checkpoint of a model built on the tutorial's module (through a file, as one is
    shared) loads with load_state_dict(strict=True); its float32-drifted table is replaced
    by fastpe's exact one, its other weights load as they were saved."""
    torch.manual_seed(5)
    theirs = Tutorial(encoder, 16, 300)
    torch.save(theirs.state_dict(), tmp_path / "model.pt")
    saved = torch.load(tmp_path / "model.pt")
    model = Ours(16, 300, batch_first=batch_first)
    result = model.load_state_dict(saved, strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    assert "pos.pe" in saved and same_bits(saved["pos.pe"], theirs.pos.pe)  # the caller's dict is left as it was
    assert torch.equal(model.proj.weight, saved["proj.weight"]) and torch.equal(model.proj.bias, saved["proj.bias"])
    assert same_bits(model.pos.pe[0], table(16, 300))
    assert not torch.equal(model.pos.pe.reshape(-1), saved["pos.pe"].reshape(-1))  # not the stored drift
    # the two models then agree within the tutorial's error, in the tutorial's layout
    x = torch.randn(4, 300, 16) if batch_first else torch.randn(300, 4, 16)
    theirs.pos.eval(), model.pos.eval()
    diff = (model.pos(x) - theirs.pos(x)).abs().amax(dim=0 if batch_first else 1)
    assert (diff.double() <= tutorial_bound(300)).all()
    # ...and our own checkpoint loads back into the batch-first tutorial's module
    back = Tutorial(TutorialBatchFirstPositionalEncoding, 16, 300)
    back.load_state_dict(Ours(16, 300).state_dict(), strict=True)
    assert same_bits(back.pos.pe[0], table(16, 300))


def test_a_checkpoint_of_another_length_sets_the_length():
    saved = Tutorial(TutorialBatchFirstPositionalEncoding, 8, 64).state_dict()
    model = Ours(8, 10)
    model.load_state_dict(saved)
    assert model.pos.max_len == 64 and same_bits(model.pos.pe[0], table(8, 64))
    grown = encoding(8, 4)
    grown(torch.zeros(1, 30, 8))  # our own grown table, saved and loaded into a short module
    short = encoding(8, 2)
    short.load_state_dict(grown.state_dict())
    assert short.max_len == 30 and same_bits(short.pe, grown.pe)


def test_a_state_dict_without_the_table_loads():
    """Earlier fastpe did not save the table: such a checkpoint loads strictly."""
    model = Ours(8, 10)
    weights = {k: v for k, v in Ours(8, 10).state_dict().items() if k != "pos.pe"}
    result = model.load_state_dict(weights, strict=True)
    assert not result.missing_keys and same_bits(model.pos.pe[0], table(8, 10))


@pytest.mark.parametrize("stored, message", [
    pytest.param(torch.zeros(1, 10, 6), r"pos\.pe has shape \(1, 10, 6\), not \(1, max_len, 8\)", id="d-model"),
    pytest.param(torch.zeros(10, 8), r"pos\.pe has shape \(10, 8\)", id="2-d"),
    pytest.param(torch.zeros(2, 10, 8), r"pos\.pe has shape \(2, 10, 8\)", id="batch-2"),
    pytest.param(torch.zeros(1, 0, 8), r"pos\.pe has shape \(1, 0, 8\)", id="empty"),
    pytest.param(torch.zeros(1, 10, 8, dtype=torch.int32), "pos.pe must be a floating-point tensor", id="int"),
    pytest.param(torch.randn(1, 10, 8), r"pos\.pe is not the sinusoidal encoding \(base 10000\) of d_model = 8: "
                 "at position 0, column 0", id="learned"),
    pytest.param(torch.full((1, 10, 8), float("nan")), "is not the sinusoidal encoding", id="nan"),
])
def test_a_stored_table_that_is_not_the_encoding_is_refused(stored, message):
    """load_state_dict's error names the key and what is wrong; the table is left as it was."""
    model = Ours(8, 10)
    weights = {**Ours(8, 10).state_dict(), "pos.pe": stored}
    before = model.pos.pe.clone()
    with pytest.raises(RuntimeError, match=message):
        model.load_state_dict(weights)
    assert same_bits(model.pos.pe, before)


def test_a_stored_table_of_another_base_is_refused():
    class Base1000(TutorialBatchFirstPositionalEncoding):
        def __init__(self, d_model, max_len):
            super().__init__(d_model, max_len=max_len)
            position = torch.arange(max_len).unsqueeze(1)
            div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(1000.0) / d_model))
            self.pe[0, :, 0::2] = torch.sin(position * div_term)
            self.pe[0, :, 1::2] = torch.cos(position * div_term)

    with pytest.raises(RuntimeError, match="is not the sinusoidal encoding"):
        Ours(8, 10).load_state_dict(Tutorial(Base1000, 8, 10).state_dict())


def test_a_16_bit_tutorial_checkpoint_loads():
    """A tutorial model converted with .half() stores its table rounded once more."""
    saved = Tutorial(TutorialBatchFirstPositionalEncoding, 16, 200).half().state_dict()
    model = Ours(16, 200).half()
    model.load_state_dict(saved)
    assert same_bits(model.pos.pe[0], table(16, 200, dtype="float16"))


# ============================================================ dtypes: recomputed, not cast


def test_to_dtype_recomputes_the_table_exactly():
    """.half(), .bfloat16(), .double(), .to(dtype) and .float() give fastpe's table in that
    dtype, bit for bit -- not the float32 table rounded again, which is wrong where that
    float32 is a tie of the narrower format (d_model 45, 320 rows has such values) or, for
    float64, everywhere past float32's precision."""
    d, n = 45, 320
    m = encoding(d, n)
    f32 = m.pe.clone()
    for convert, name in ((lambda: m.half(), "float16"), (lambda: m.bfloat16(), "bfloat16"),
                          (lambda: m.double(), "float64"), (lambda: m.to(torch.float16), "float16"),
                          (lambda: m.to(dtype=torch.bfloat16), "bfloat16"), (lambda: m.float(), "float32")):
        assert convert() is m
        assert str(m.pe.dtype) == f"torch.{name}" and m.pe.shape == (1, n, d)
        assert same_bits(m.pe[0], table(d, n, dtype=name)), name
        cast = f32.to(m.pe.dtype)
        wrong = (m.pe != cast).nonzero().tolist()
        if name == "float32":
            assert not wrong
            continue
        assert wrong, f"{name}: the cast is right everywhere here, so this test shows nothing"
        for _, p, j in wrong[:20]:
            fn = table_value_fn(p, j, d, 10000.0, "interleaved", "d", 1.0, None)
            ours, theirs = float(m.pe[0, p, j]), float(cast[0, p, j])
            if name == "float64":  # fastpe's double is within 2**-45 of the true value
                check_against_mpmath(ours, fn, "float64", f"pe[{p}, {j}]")
                with mpmath.workdps(60):
                    assert abs(mpmath.mpf(theirs) - fn()) > 2.0**-45
            else:  # the correctly rounded value, which the cast misses
                assert mp_correct(fn, name) == ours != theirs, (name, p, j)
    m.half()
    x = torch.randn(2, n, d).half()
    assert same_bits(m(x), x + m.pe)  # float16 arithmetic against the float16 table


def test_a_device_move_keeps_the_values():
    m = encoding(8, 10).half()
    before = m.pe.clone()
    m.to("cpu")
    m.to(torch.device("cpu"), torch.float16)
    assert same_bits(m.pe, before)


# ============================================================================= bad input


@pytest.mark.any_backend
@pytest.mark.parametrize(
    "args, kwargs, exc, message",
    [
        pytest.param((), {"d_model": 0}, ValueError, "d_model must be >= 1", id="d-zero"),
        pytest.param((), {"d_model": 2.0}, TypeError, "d_model must be an integer", id="d-float"),
        pytest.param((), {"d_model": True}, TypeError, "d_model must be an integer", id="d-bool"),
        pytest.param((), {"d_model": 8, "max_len": 0}, ValueError, "max_len must be >= 1", id="len-zero"),
        pytest.param((), {"d_model": 8, "max_len": "9"}, TypeError, "max_len must be an integer", id="len-str"),
        pytest.param((), {"d_model": 8, "dropout": -0.1}, ValueError, r"dropout must be in \[0, 1\]", id="p-neg"),
        pytest.param((), {"d_model": 8, "dropout": 1.5}, ValueError, r"dropout must be in \[0, 1\]", id="p-big"),
        pytest.param((), {"d_model": 8, "dropout": float("nan")}, ValueError, "dropout must be finite", id="p-nan"),
        pytest.param((), {"d_model": 8, "dropout": "0.1"}, TypeError, "dropout must be a real", id="p-str"),
        pytest.param((), {"d_model": 8, "batch_first": 1}, TypeError, "batch_first must be True or False", id="bf"),
        # the order of the tutorial: a length in dropout's place is refused, not taken as a rate
        pytest.param((8, 2048), {}, ValueError, r"dropout must be in \[0, 1\], got 2048", id="old-order"),
        pytest.param((8, 0.1, 100, True), {}, TypeError, "positional argument", id="batch-first-positional"),
    ],
)
def test_bad_construction(args, kwargs, exc, message):
    with pytest.raises(exc, match=message):
        SinusoidalPositionalEncoding(*args, **kwargs)


@pytest.mark.parametrize(
    "x, kwargs, exc, message",
    [
        pytest.param(torch.zeros(2, 3, 7), {}, ValueError, "d_model = 8 values in its last", id="last-dim"),
        pytest.param(torch.zeros(8), {}, ValueError, r"x must have shape \(batch, seq, d_model\)", id="1-d"),
        pytest.param(torch.zeros(1, 2, 3, 8), {}, ValueError, r"x must have shape", id="4-d"),
        pytest.param(np.zeros((2, 3, 8), np.float32), {}, TypeError, "x must be a torch.Tensor", id="numpy"),
        pytest.param(torch.zeros(2, 3, 8), {"offset": -1}, ValueError, "offset must be >= 0", id="offset-neg"),
        pytest.param(torch.zeros(2, 3, 8), {"offset": 1.0}, TypeError, "offset must be an integer", id="offset-float"),
        pytest.param(torch.zeros(2, 3, 8), {"offset": torch.tensor([1, 2])}, TypeError, "offset must be an integer",
                     id="offset-tensor"),
        pytest.param(torch.zeros(2, 3, 8), {"offset": 2**32 - 2}, ValueError, r"offset \+ seq must be <= 2\*\*32",
                     id="offset-past-u32"),
    ],
)
def test_bad_forward(x, kwargs, exc, message):
    m = encoding(8, 4)
    with pytest.raises(exc, match=message):
        m(x, **kwargs)
    assert m.max_len == 4  # nothing grew


# ======================================================================= RotaryEmbedding


def randn(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float32).to(dtype)


SCALINGS = [
    pytest.param(None, id="default"),
    pytest.param({"rope_type": "linear", "factor": 2.0}, id="linear"),
    pytest.param({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 32}, id="llama3"),
    pytest.param({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}, id="yarn"),
]

#: (q shape, k shape, positions)
SHAPES = [
    pytest.param((2, 4, 9, 32), (2, 2, 9, 32), np.arange(3, 12), id="bhsd-seq"),
    pytest.param((2, 4, 9, 32), (2, 1, 9, 32), np.array([np.arange(9), np.arange(50, 59)]), id="bhsd-batch-seq"),
    pytest.param((9, 4, 32), (9, 2, 32), np.arange(100, 109) * 7, id="thd"),
]


def reference_qk(q, k, positions, **kw):
    """fastpe.rope.apply_qk_ on numpy copies."""
    qn, kn = q.detach().numpy().copy(), k.detach().numpy().copy()
    rope.apply_qk_(qn, kn, np.asarray(positions), **kw)
    return torch.from_numpy(qn), torch.from_numpy(kn)


@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("scaling", SCALINGS)
@pytest.mark.parametrize("q_shape, k_shape, positions", SHAPES)
def test_in_place_path_is_apply_qk_bit_for_bit(layout, scaling, q_shape, k_shape, positions):
    q, k = randn(*q_shape, seed=1), randn(*k_shape, seed=2)
    want_q, want_k = reference_qk(q, k, positions, layout=layout, scaling=scaling)
    module = RotaryEmbedding(32, scaling=scaling, layout=layout)
    before = q._version
    out_q, out_k = module(q, k, torch.as_tensor(positions))
    assert out_q is q and out_k is k  # rotated in place, the same tensors returned
    assert same_bits(q, want_q) and same_bits(k, want_k)
    assert q._version > before  # autograd sees the modification


@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("scaling", SCALINGS)
@pytest.mark.parametrize("q_shape, k_shape, positions", SHAPES)
def test_float64_torch_path_rounds_to_the_in_place_bits(layout, scaling, q_shape, k_shape, positions):
    """The torch path in float64 uses the doubles the kernels round from, and the same
    operations, so rounding its result to float32 gives the kernel's bits."""
    q, k = randn(*q_shape, seed=3), randn(*k_shape, seed=4)
    module = RotaryEmbedding(32, scaling=scaling, layout=layout)
    q64, k64 = q.double(), k.double()
    out_q, out_k = module(q64, k64, positions)
    assert out_q is not q64 and out_q.dtype == torch.float64
    assert same_bits(q64, q.double())  # inputs untouched on the torch path
    fast_q, fast_k = module(q, k, positions)
    assert same_bits(out_q.float(), fast_q) and same_bits(out_k.float(), fast_k)


def float32_close(a, b, x, ulps=4):
    """``|a - b|`` within ``ulps`` float32 ULPs of the inputs' scale (rotation of pairs
    with ``|x1| + |x2| <= 2 max|x|``)."""
    scale = 2 * x.abs().amax(dim=-1, keepdim=True).double()
    assert ((a.double() - b.double()).abs() <= ulps * 2.0**-24 * scale).all()


@pytest.mark.parametrize("layout", ["neox", "gptj"])
def test_torch_path_other_strides(layout):
    """q and k sliced from one fused projection (b, s, 3, h, d) have strides the kernel
    cannot take: the torch path rotates them, out of place."""
    qkv = randn(2, 9, 3, 4, 32, seed=5)
    q, k = qkv[:, :, 0].transpose(1, 2), qkv[:, :, 1].transpose(1, 2)
    module = RotaryEmbedding(32, layout=layout)
    assert module.path(q, k).startswith("torch: q's strides")
    out_q, out_k = module(q, k, torch.arange(9))
    assert same_bits(qkv, randn(2, 9, 3, 4, 32, seed=5))  # untouched
    fast_q, fast_k = module(q.contiguous(), k.contiguous(), torch.arange(9))
    float32_close(out_q, fast_q, q)
    float32_close(out_k, fast_k, k)


@pytest.mark.parametrize("layout", ["neox", "gptj"])
def test_torch_path_with_autograd(layout):
    module = RotaryEmbedding(16, layout=layout)
    q = randn(1, 2, 5, 16, seed=7).requires_grad_()
    k = randn(1, 1, 5, 16, seed=8).requires_grad_()
    out_q, out_k = module(q, k, torch.arange(5))
    assert out_q is not q and out_q.requires_grad
    (out_q.square().sum() + out_k.sum()).backward()
    assert q.grad is not None and torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all()
    # a rotation preserves norms: the gradient of |Rq|^2 is 2q
    assert torch.allclose(q.grad, 2 * q.detach(), rtol=1e-5, atol=1e-6)
    fast_q, _ = module(q.detach().clone(), k.detach().clone(), torch.arange(5))
    float32_close(out_q.detach(), fast_q, q.detach())


def test_gradcheck_float64():
    module = RotaryEmbedding(8, scaling={"rope_type": "linear", "factor": 2.0})
    q = randn(1, 2, 3, 8, seed=9, dtype=torch.float64).requires_grad_()
    k = randn(1, 1, 3, 8, seed=10, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: module(a, b, torch.arange(3)), (q, k))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["neox", "gptj"])
def test_torch_path_16_bit(dtype, layout):
    """Computed in float32 and rounded once: within one ULP of the dtype of the in-place
    result on the same (16-bit) inputs."""
    module = RotaryEmbedding(32, layout=layout)
    q, k = randn(2, 4, 9, 32, seed=11, dtype=dtype), randn(2, 2, 9, 32, seed=12, dtype=dtype)
    out_q, out_k = module(q, k, torch.arange(9))
    assert out_q.dtype == dtype and out_k.dtype == dtype
    fast_q, fast_k = module(q.float(), k.float(), torch.arange(9))
    eps = torch.finfo(dtype).eps
    for out, fast in ((out_q, fast_q), (out_k, fast_k)):
        assert ((out.float() - fast).abs() <= eps * fast.abs() + 2 * torch.finfo(dtype).tiny).all()


def test_partial_rotary_leaves_the_tail():
    scaling = {"rope_type": "default", "partial_rotary_factor": 0.5}
    module = RotaryEmbedding(32, scaling=scaling)
    assert module.rotary_dim == 16
    q, k = randn(2, 3, 4, 32, seed=13), randn(2, 1, 4, 32, seed=14)
    q0, k0 = q.clone(), k.clone()
    t_q, t_k = module(q.double(), k.double(), torch.arange(4))
    module(q, k, torch.arange(4))
    assert same_bits(q[..., 16:], q0[..., 16:]) and same_bits(t_q[..., 16:].float(), q0[..., 16:])
    assert same_bits(t_q.float(), q) and same_bits(t_k.float(), k)
    want_q, _ = reference_qk(q0, k0, np.arange(4), scaling=scaling)
    assert same_bits(q, want_q)


def test_linear_scaling_matches_fastpe_rope():
    scaling = {"rope_type": "linear", "factor": 2.0}
    module = RotaryEmbedding(16, scaling=scaling)
    cos, sin = module.cos_sin(torch.arange(40))
    want = rope.cos_sin(np.arange(40), 16, scaling=scaling)
    assert same_bits(cos, torch.from_numpy(want[0])) and same_bits(sin, torch.from_numpy(want[1]))
    # position 2p with linear factor 2 rotates as p does without scaling
    plain = RotaryEmbedding(16)
    assert same_bits(module.cos_sin(torch.arange(0, 40, 2))[0], plain.cos_sin(torch.arange(20))[0])
    q, k = randn(3, 2, 16, seed=15), randn(3, 1, 16, seed=16)
    want_q, want_k = reference_qk(q, k, [0, 9, 40], scaling=scaling)
    module(q, k, [0, 9, 40])
    assert same_bits(q, want_q) and same_bits(k, want_k)


@pytest.mark.parametrize("path", ["in-place", "torch"])
def test_dynamic_follows_the_positions_and_seq_len(path):
    """Dynamic NTK: the length is the largest position plus one, or seq_len, on both paths."""
    scaling = {"rope_type": "dynamic", "factor": 2.0}
    module = RotaryEmbedding(16, scaling=scaling, max_position_embeddings=8)
    dtype = torch.float32 if path == "in-place" else torch.float64
    for positions, seq_len in ((np.arange(20, 24), None), (np.arange(4), 64)):
        q, k = randn(4, 2, 16, seed=17), randn(4, 1, 16, seed=18)
        want_q, want_k = reference_qk(q, k, positions, scaling=scaling, max_position_embeddings=8,
                                      seq_len=seq_len)
        out_q, out_k = module(q.to(dtype), k.to(dtype), torch.as_tensor(positions), seq_len=seq_len)
        assert same_bits(out_q.float(), want_q) and same_bits(out_k.float(), want_k)


def test_positions_forms_and_offset():
    module = RotaryEmbedding(8)
    q, k = randn(1, 2, 5, 8, seed=19), randn(1, 1, 5, 8, seed=20)
    want = reference_qk(q, k, np.arange(7, 12))
    forms = [torch.arange(7, 12), torch.arange(7, 12, dtype=torch.int32), np.arange(7, 12), list(range(7, 12)),
             torch.arange(7, 12)[None]]
    for positions in forms:
        got = module(q.clone(), k.clone(), positions)
        assert same_bits(got[0], want[0]) and same_bits(got[1], want[1])
    for dtype in (torch.float32, torch.float64):
        got = module(q.clone(), k.clone(), offset=7)
        assert same_bits(got[0], want[0])
        got = module(q.clone().to(dtype), k.clone().to(dtype), offset=torch.tensor(7))
        assert same_bits(got[0].float(), want[0])
    got = module(q.clone(), k.clone())  # from position 0
    assert same_bits(got[0], reference_qk(q, k, np.arange(5))[0])


def test_empty_inputs():
    module = RotaryEmbedding(8)
    for dtype in (torch.float32, torch.float64):
        q, k = torch.zeros(1, 2, 0, 8, dtype=dtype), torch.zeros(1, 1, 0, 8, dtype=dtype)
        out_q, out_k = module(q, k, torch.arange(0))
        assert out_q.shape == q.shape and out_k.shape == k.shape


@pytest.mark.any_backend
def test_state_dict_is_empty_and_repr():
    module = RotaryEmbedding(64, base=5e5, layout="gptj")
    assert len(module.state_dict()) == 0
    assert "rotary_dim=64" in repr(module) and "'gptj'" in repr(module)
    assert module.base == 5e5 and module.head_dim == 64


@pytest.mark.any_backend
def test_base_none_takes_rope_theta_from_the_dict():
    scaling = {"rope_type": "default", "rope_theta": 5e5}
    assert RotaryEmbedding(16, scaling=scaling).base == 5e5  # base=None is the default
    assert RotaryEmbedding(16, base=None, scaling=scaling).base == 5e5
    assert RotaryEmbedding(16, base=5e5, scaling=scaling).base == 5e5  # agreeing is fine
    assert RotaryEmbedding(16).base == 10000.0 and RotaryEmbedding(16, scaling={"rope_type": "default"}).base == 1e4
    with pytest.raises(ValueError, match="contradicts"):
        RotaryEmbedding(16, base=10000.0, scaling=scaling)


def test_scaling_dict_is_copied():
    scaling = {"rope_type": "linear", "factor": 2.0}
    module = RotaryEmbedding(8, scaling=scaling)
    scaling["factor"] = 4.0
    q, k = randn(2, 1, 8, seed=21), randn(2, 1, 8, seed=22)
    want = reference_qk(q, k, [3, 4], scaling={"rope_type": "linear", "factor": 2.0})
    module(q, k, [3, 4])
    assert same_bits(q, want[0])


def test_in_place_rotation_is_visible_to_autograd():
    """A graph that saved ``q`` fails loudly after the in-place rotation, rather than
    differentiating with the rotated values."""
    w = torch.ones(8, requires_grad=True)
    q, k = randn(2, 1, 8, seed=23), randn(2, 1, 8, seed=24)
    y = (q * w).sum()  # saves q for w's gradient
    RotaryEmbedding(8)(q, k, [0, 1])
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_cos_sin_method():
    module = RotaryEmbedding(16, layout="gptj", scaling={"rope_type": "yarn", "factor": 4.0,
                                                          "original_max_position_embeddings": 8})
    want = rope.cos_sin(np.arange(30), 16, layout="gptj", scaling=module._kwargs["scaling"], dtype=np.float64)
    cos64, sin64 = module.cos_sin(np.arange(30), dtype=torch.float64)
    assert same_bits(cos64, torch.from_numpy(want[0])) and same_bits(sin64, torch.from_numpy(want[1]))
    cos, _ = module.cos_sin(np.arange(30))
    assert same_bits(cos, torch.from_numpy(want[0].astype(np.float32)))
    with pytest.raises(ValueError, match=r"positions must have shape \(seq,\) or \(batch, seq\)"):
        module.cos_sin(np.zeros((2, 2, 2), dtype=np.int64))
    for bad in (torch.int64, torch.float8_e4m3fn, "float32", np.float32):
        with pytest.raises(TypeError, match="dtype must be torch.float32, torch.float64, torch.float16 or "):
            module.cos_sin(np.arange(3), dtype=bad)


# ------------------------------------------------------------------------------- vs HF


@pytest.fixture(scope="module")
def hf_apply():
    pytest.importorskip("transformers", reason="transformers is an optional peer")
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    return apply_rotary_pos_emb


@pytest.mark.parametrize("positions", [np.arange(16), np.array([[*range(16)], [*range(1000, 1016)]])],
                         ids=["seq", "batch-seq"])
def test_matches_hf_apply_rotary_pos_emb_with_fastpe_caches(hf_apply, positions):
    """HF's float32 rotation with fastpe's caches: within a few float32 ULPs of ours."""
    module = RotaryEmbedding(64, scaling={"rope_type": "linear", "factor": 2.0})
    q, k = randn(2, 4, 16, 64, seed=25), randn(2, 2, 16, 64, seed=26)
    cos, sin = module.cos_sin(positions)  # (seq, 64) or (batch, seq, 64)
    assert cos.shape == (*positions.shape, 64)
    if positions.ndim == 1:
        cos, sin = cos[None], sin[None]
    hq, hk = hf_apply(q, k, cos, sin)
    out_q, out_k = module(q.clone(), k.clone(), positions)
    float32_close(hq, out_q, q)
    float32_close(hk, out_k, k)


def test_matches_hf_with_torch_float32_caches(hf_apply):
    """HF end to end in float32 (its inv_freq, angle and cos/sin): their angle is off by a
    few float32 ULPs of ``p * inv_freq`` (``inv_freq <= 1``), so the rotations agree within
    ``p * 2**-22`` radians plus the float32 rotation's own rounding."""
    head_dim, n = 64, 48
    inv = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    freqs = torch.arange(n).float()[:, None] * inv[None]
    emb = torch.cat((freqs, freqs), dim=-1)
    q, k = randn(1, 4, n, head_dim, seed=27), randn(1, 2, n, head_dim, seed=28)
    hq, hk = hf_apply(q, k, emb.cos()[None], emb.sin()[None])
    out_q, out_k = RotaryEmbedding(head_dim)(q.clone(), k.clone(), torch.arange(n))
    angle = torch.arange(n)[:, None].float() * 2.0**-22 + 2.0**-21
    for theirs, ours, x in ((hq, out_q, q), (hk, out_k, k)):
        assert ((theirs - ours).abs() <= angle * 2 * x.abs().amax(dim=-1, keepdim=True)).all()


# --------------------------------------------------------------------------- bad input


@pytest.mark.any_backend
@pytest.mark.parametrize(
    "kwargs, exc, message",
    [
        pytest.param({"head_dim": 7}, ValueError, "must be even", id="odd"),
        pytest.param({"head_dim": 8, "layout": "llama"}, ValueError, "layout must be one of", id="layout"),
        pytest.param({"head_dim": 8, "scaling": {"rope_type": "linear"}}, ValueError, "factor", id="no-factor"),
        pytest.param({"head_dim": 8, "scaling": "linear"}, TypeError, "scaling must be a dict", id="scaling-str"),
        pytest.param({"head_dim": 8, "rotary_dim": 16}, ValueError, "rotary_dim", id="rotary-too-big"),
        pytest.param({"head_dim": 8, "base": 1.0}, ValueError, "base must be greater than 1", id="base"),
    ],
)
def test_rotary_bad_construction(kwargs, exc, message):
    with pytest.raises(exc, match=message):
        RotaryEmbedding(**kwargs)


@pytest.mark.any_backend
@pytest.mark.parametrize(
    "q, k, args, kwargs, exc, message",
    [
        pytest.param(torch.zeros(1, 2, 3, 6), torch.zeros(1, 1, 3, 6), (torch.arange(3),), {}, ValueError,
                     "q must have head_dim = 8", id="head-dim"),
        pytest.param(torch.zeros(2, 3, 8), torch.zeros(1, 1, 3, 8), (torch.arange(2),), {}, ValueError,
                     "k must have the layout of q", id="ndim-mismatch"),
        pytest.param(torch.zeros(3, 8), torch.zeros(3, 8), (torch.arange(3),), {}, ValueError,
                     r"q must have shape \(tokens, heads, head_dim\)", id="2-d"),
        pytest.param(torch.zeros(1, 2, 3, 8), torch.zeros(1, 1, 4, 8), (torch.arange(3),), {}, ValueError,
                     "k must have the seq of q", id="seq-mismatch"),
        pytest.param(torch.zeros(1, 2, 3, 8), torch.zeros(1, 1, 3, 8), (torch.arange(4),), {}, ValueError,
                     "positions must have shape", id="positions-shape"),
        pytest.param(torch.zeros(1, 2, 3, 8), torch.zeros(1, 1, 3, 8), (torch.tensor([0, -1, 2]),), {}, ValueError,
                     "positions must be >= 0", id="negative"),
        pytest.param(torch.zeros(1, 2, 3, 8), torch.zeros(1, 1, 3, 8), (torch.arange(3),), {"offset": 1}, ValueError,
                     r"^give positions or offset, not both \(got positions and offset=1\)", id="both"),
        pytest.param(torch.zeros(1, 2, 3, 8), torch.zeros(1, 1, 3, 8), (), {"offset": None}, TypeError,
                     "^offset must be an integer", id="offset-none"),
        pytest.param(torch.zeros(1, 2, 3, 8, dtype=torch.int32), torch.zeros(1, 1, 3, 8), (torch.arange(3),), {},
                     TypeError, "q must be a floating-point tensor", id="int-q"),
        pytest.param(np.zeros((1, 2, 3, 8), np.float32), torch.zeros(1, 1, 3, 8), (torch.arange(3),), {},
                     TypeError, "q must be a torch.Tensor", id="numpy-q"),
        pytest.param(torch.zeros(1, 2, 3, 8), torch.zeros(1, 1, 3, 8), (), {"offset": 2**32 - 2}, ValueError,
                     r"offset \+ seq must be <= 2\*\*32", id="offset-past-u32"),
    ],
)
def test_rotary_bad_forward(q, k, args, kwargs, exc, message):
    q0 = q.clone() if isinstance(q, torch.Tensor) else None
    with pytest.raises(exc, match=message):
        RotaryEmbedding(8)(q, k, *args, **kwargs)
    if q0 is not None:
        assert torch.equal(q, q0)


def test_rotary_offset_is_an_int_as_in_fastpe_rope():
    """offset=0 by default, beside positions too (only a non-zero one contradicts them)."""
    import inspect

    assert inspect.signature(RotaryEmbedding.forward).parameters["offset"].default == 0
    module = RotaryEmbedding(8)
    q, k = torch.randn(1, 2, 3, 8), torch.randn(1, 1, 3, 8)
    want = module(q.clone(), k.clone(), torch.arange(3))
    for kwargs in ({"offset": 0}, {"offset": torch.tensor(0)}):
        got = module(q.clone(), k.clone(), torch.arange(3), **kwargs)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    got = module(q.clone(), k.clone())
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.any_backend
def test_rotary_shared_memory_is_refused():
    qk = torch.randn(2, 1, 4, 8)
    with pytest.raises(ValueError, match="share memory"):
        RotaryEmbedding(8)(qk[0:1], qk[0:1], torch.arange(4))


# ================================================================================ imports


def run(code: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, env=fastpe_env(),
                          capture_output=True, text=True, timeout=120)


@pytest.mark.any_backend
def test_import_fastpe_does_not_import_torch(tmp_path):
    proc = run(
        """
        import sys
        import fastpe, fastpe.rope
        fastpe.table(8, 4)
        assert "torch" not in sys.modules, "torch was imported"
        """,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.any_backend
def test_without_torch_the_bridge_says_to_install_it(tmp_path):
    proc = run(
        """
        import sys
        sys.modules["torch"] = None  # as if torch were not installed
        import fastpe
        fastpe.table(8, 4)
        try:
            import fastpe.torch
        except ImportError as exc:
            print("ImportError:", exc)
        """,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ImportError: fastpe.torch needs PyTorch" in proc.stdout
    assert "pip install torch" in proc.stdout


# ===================================================================== cos_sin's caches


_COS_SIN_RULES = [
    pytest.param({}, id="default"),
    pytest.param({"layout": "gptj"}, id="gptj"),
    pytest.param({"scaling": {"rope_type": "dynamic", "factor": 2.0}, "max_position_embeddings": 16}, id="dynamic"),
    pytest.param({"scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}}, id="yarn"),
    pytest.param({"scaling": {"rope_type": "longrope", "factor": 4.0, "short_factor": [1.0, 1.5, 2.0, 2.5],
                              "long_factor": [3.0, 4.0, 5.0, 6.0], "original_max_position_embeddings": 8},
                  "max_position_embeddings": 32}, id="longrope"),
    pytest.param({"rotary_dim": 4}, id="partial"),
]


def table_tensor(a: np.ndarray) -> torch.Tensor:
    """An array as a tensor (bfloat16 through its bits)."""
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


@pytest.mark.parametrize("kwargs", _COS_SIN_RULES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16],
                         ids=["f32", "f64", "f16", "bf16"])
def test_cos_sin_is_the_module_function_bit_for_bit(kwargs, dtype):
    """``RotaryEmbedding.cos_sin`` -- which holds one Rotary instead of resolving the
    arguments on every call -- gives ``fastpe.rope.cos_sin``'s bits for one position, a few
    (the kept tables' sizes, 32 and 33), many, ``(batch, seq)`` grids and tensors, with
    ``seq_len`` given or defaulted."""
    module = RotaryEmbedding(8, **kwargs)
    np_dtype = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
                torch.bfloat16: "bfloat16"}[dtype]
    cases = [np.array([5]), np.arange(5) * 7, np.arange(32), np.arange(33) + 2, np.arange(64) * 11,
             np.arange(40).reshape(2, 20), torch.arange(3, 12), torch.arange(6).reshape(2, 3)]
    for positions in cases:
        flat = np.asarray(positions).reshape(-1)
        for seq_len in (None, 50):
            want = rope.cos_sin(flat, 8, seq_len=seq_len, dtype=np_dtype, **module._kwargs)
            got = module.cos_sin(positions, seq_len=seq_len, dtype=dtype)
            for g, w in zip(got, want):
                assert g.dtype == dtype and tuple(g.shape) == (*np.asarray(positions).shape, module.rotary_dim)
                assert same_bits(g.reshape(-1, module.rotary_dim), table_tensor(w))


def test_cos_sin_returns_fresh_tensors():
    """Each call's caches are its own memory, also for the few positions answered from a
    kept table: writing into one call's tensors changes no other call's."""
    module = RotaryEmbedding(8)
    for positions in (torch.tensor([3]), torch.arange(4), torch.arange(100)):
        cos, sin = module.cos_sin(positions)
        want_cos, want_sin = cos.clone(), sin.clone()
        cos.fill_(7.0)
        sin.fill_(7.0)
        again = module.cos_sin(positions)
        assert same_bits(again[0], want_cos) and same_bits(again[1], want_sin)
        assert not np.may_share_memory(again[0].numpy(), again[1].numpy())


def test_cos_sin_warns_at_construction_only():
    """A rope dict HF warns about warns once, when the module is built, not on every call
    (of ``cos_sin``, or of ``forward`` on either path)."""
    import warnings

    scaling = {"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4,
               "original_max_position_embeddings": 8}
    with pytest.warns(rope.RopeConfigWarning, match="has no 'factor'"):
        module = RotaryEmbedding(8, scaling=scaling, max_position_embeddings=32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module.cos_sin(torch.arange(40))
        module.cos_sin(np.arange(3), dtype=torch.float64)
        q, k = randn(1, 2, 40, 8, seed=41), randn(1, 1, 40, 8, seed=42)
        assert module.path(q, k) == "in place"
        module(q, k)
        module(q.double(), k.double(), torch.arange(40))


@pytest.mark.parametrize(
    "positions, kwargs, exc, message",
    [
        pytest.param(np.array([-1, 2]), {}, ValueError, "positions must be >= 0", id="negative"),
        pytest.param(np.array([2**32]), {}, ValueError, r"positions must be < 2\*\*32", id="too-big"),
        pytest.param(np.array([1.5]), {}, ValueError, "positions must be whole numbers", id="fraction"),
        pytest.param(torch.tensor([True, False]), {}, TypeError, "booleans", id="bools"),
        pytest.param(np.arange(3), {"seq_len": -1}, ValueError, "seq_len", id="seq-len"),
        pytest.param(torch.tensor(4), {}, ValueError, r"positions must have shape \(seq,\) or \(batch, seq\)",
                     id="scalar"),
    ],
)
def test_cos_sin_bad_input(positions, kwargs, exc, message):
    with pytest.raises(exc, match=message):
        RotaryEmbedding(8).cos_sin(positions, **kwargs)


# ================================================================================== xPos


def _xpos_pair(form: str, hq: int = 4, hk: int = 2, b: int = 2, s: int = 9, d: int = 32, seed: int = 60):
    """q and k in one of the forms the in-place path takes: ``contiguous`` (batch, heads,
    seq, d), ``transposed`` (the attention layer's view of (batch, seq, heads, d) memory),
    ``mixed`` (q contiguous, k transposed: one kernel pass each) or ``tokens`` (tokens,
    heads, d)."""
    if form == "tokens":
        return randn(s, hq, d, seed=seed), randn(s, hk, d, seed=seed + 1)
    q = randn(b, hq, s, d, seed=seed)
    k = randn(b, hk, s, d, seed=seed + 1)
    if form in ("transposed", "mixed"):
        k = randn(b, s, hk, d, seed=seed + 1).transpose(1, 2)
    if form == "transposed":
        q = randn(b, s, hq, d, seed=seed).transpose(1, 2)
    return q, k


#: (form of q and k, how the positions are given); (tokens, heads, head_dim) takes (tokens,) only
_XPOS_CALLS = [pytest.param(form, call, id=f"{form}-{call}")
               for form in ("contiguous", "transposed", "mixed", "tokens")
               for call in ("positions", "batch-positions", "offset", "seq-len")
               if not (form == "tokens" and call == "batch-positions")]


@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("rotary_dim", [None, 16], ids=["full", "partial"])
@pytest.mark.parametrize("center", ["torchscale", "flash_attn", 5])
@pytest.mark.parametrize("form, call", _XPOS_CALLS)
def test_xpos_in_place_is_rotary_apply_qk_bit_for_bit(layout, rotary_dim, center, form, call):
    """The in-place path gives Rotary.apply_qk_'s bits (q scaled up, k down) on contiguous
    numpy copies, for every form the kernel takes, positions or an offset."""
    sb = 32.0  # positions up to ~60: powers zeta ** (+-1) and more, far from 1
    rotary = rope.Rotary(32, rotary_dim=rotary_dim, layout=layout, xpos_scale_base=sb, xpos_center=center)
    module = RotaryEmbedding(32, layout=layout, rotary_dim=rotary_dim, xpos_scale_base=sb, xpos_center=center)
    q, k = _xpos_pair(form)
    qn, kn = q.contiguous().numpy().copy(), k.contiguous().numpy().copy()
    if call == "offset":
        args, kwargs, ref = (), {"offset": 40}, {"offset": 40}
    else:
        positions = np.array([np.arange(9) * 3, np.arange(50, 59)]) if call == "batch-positions" else np.arange(3, 12)
        args, kwargs = (torch.as_tensor(positions),), {}
        ref = {"positions": positions}
        if call == "seq-len":
            kwargs, ref = {"seq_len": 70}, {"positions": positions, "seq_len": 70}
    rotary.apply_qk_(qn, kn, **ref)
    plain_q, _ = RotaryEmbedding(32, layout=layout, rotary_dim=rotary_dim)(q.contiguous().clone(),
                                                                          k.contiguous().clone(), *args, **kwargs)
    assert module.path(q, k) == "in place"
    out_q, out_k = module(q, k, *args, **kwargs)
    assert out_q is q and out_k is k
    assert same_bits(q.contiguous(), torch.from_numpy(qn)) and same_bits(k.contiguous(), torch.from_numpy(kn))
    assert not torch.equal(plain_q, q.contiguous())  # xPos, not RoPE: the plain rotation differs


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("scale_base", [512, 32])
@pytest.mark.parametrize("length, offset", [(9, 0), (8, 0), (1, 12), (4, 60), (16, 2000)])
def test_xpos_torch_path_is_torchscale_with_its_gradients(dtype, scale_base, length, offset):
    """The torch path (inputs that require grad) against torchscale's formula, q by
    ``downscale=False`` and k by ``downscale=True``, values and gradients: within
    ``2**-36`` (float64) / ``2**-20`` (float32) of ``s (|x1| + |x2|)`` per value -- the
    formula's own float64 angles and powers are good to ~2**-41; a centre off by one moves
    the values by ~2**-9 at ``scale_base=512``."""
    d, tol = 16, (2.0**-36 if dtype == torch.float64 else 2.0**-20)
    module = RotaryEmbedding(d, layout="gptj", xpos_scale_base=scale_base)
    q = randn(2, 3, length, d, seed=61, dtype=dtype).requires_grad_()
    k = randn(2, 1, length, d, seed=62, dtype=dtype).requires_grad_()
    assert module.path(q, k).startswith("torch: q ")
    out_q, out_k = module(q, k, torch.arange(offset, offset + length))
    assert out_q.dtype == dtype and out_q.requires_grad and out_k.requires_grad
    q64 = q.detach().double().reshape(-1, length, d).requires_grad_()
    k64 = k.detach().double().reshape(-1, length, d).requires_grad_()
    want_q, scale_q = torchscale_xpos(q64, scale_base, offset)
    want_k, scale_k = torchscale_xpos(k64, scale_base, offset, downscale=True)
    assert (scale_q - 1).abs().max() > 2**-9  # the scales are visibly not 1
    for got, want, x, scale in ((out_q, want_q, q64, scale_q), (out_k, want_k, k64, scale_k)):
        bound = tol * scale * (x.abs() + rotate_every_two(x).abs()).detach()
        assert ((got.detach().double().reshape(want.shape) - want.detach()).abs() <= bound).all()
    # gradients of a weighted sum, through the module and through the formula
    gq, gk = randn(*out_q.shape, seed=63, dtype=torch.float64), randn(*out_k.shape, seed=64, dtype=torch.float64)
    ((out_q * gq.to(dtype)).sum() + (out_k * gk.to(dtype)).sum()).backward()
    ((want_q * gq.reshape(want_q.shape)).sum() + (want_k * gk.reshape(want_k.shape)).sum()).backward()
    for x, x64, g, scale in ((q, q64, gq, scale_q), (k, k64, gk, scale_k)):
        assert x.grad is not None and x.grad.dtype == dtype and torch.isfinite(x.grad).all()
        g = g.reshape(x64.shape)
        bound = tol * scale * (g.abs() + rotate_every_two(g).abs())
        assert ((x.grad.double().reshape(x64.shape) - x64.grad).abs() <= bound).all()


def test_xpos_gradcheck_float64():
    module = RotaryEmbedding(8, layout="gptj", xpos_scale_base=4.0, rotary_dim=6)
    q = randn(1, 2, 3, 8, seed=65, dtype=torch.float64).requires_grad_()
    k = randn(1, 1, 3, 8, seed=66, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: module(a, b, torch.arange(5, 8)), (q, k))


@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("center", ["torchscale", "flash_attn", 3])
@pytest.mark.parametrize("q_shape, k_shape, positions", SHAPES)
def test_xpos_float64_torch_path_rounds_to_the_in_place_bits(layout, center, q_shape, k_shape, positions):
    """float64 uses the doubles the kernel scales and rotates with: rounded to float32 it
    is the in-place result; float32 on the torch path is within a few ULPs of s |x|."""
    module = RotaryEmbedding(32, layout=layout, rotary_dim=24, xpos_scale_base=64, xpos_center=center)
    q, k = randn(*q_shape, seed=67), randn(*k_shape, seed=68)
    q64, k64 = q.double(), k.double()
    out_q, out_k = module(q64, k64, positions)
    assert same_bits(q64, q.double()) and same_bits(k64, k.double())  # inputs untouched
    slow_q, slow_k = module(q.clone().requires_grad_(), k.clone().requires_grad_(), positions)
    fast_q, fast_k = module(q.clone(), k.clone(), positions)
    assert same_bits(out_q.float(), fast_q) and same_bits(out_k.float(), fast_k)
    # float32: within 8 ULPs of s (|x1| + |x2|), s the largest power of the position's row
    caches = module.cos_sin(np.asarray(positions).reshape(-1), dtype=torch.float64)
    shape = (-1, 1, 1) if q.ndim == 3 else (1, 1, -1, 1) if np.ndim(positions) == 1 else \
        (q.shape[0], 1, -1, 1)
    for slow, out, x, (cos, sin) in ((slow_q, out_q, q, caches[:2]), (slow_k, out_k, k, caches[2:])):
        s_max = (cos.square() + sin.square()).sqrt().amax(dim=-1).reshape(shape)
        bound = 8 * 2.0**-24 * s_max * 2 * x.abs().amax(dim=-1, keepdim=True).double()
        assert ((slow.detach().double() - out).abs() <= bound).all()


def test_xpos_cos_sin_is_rotary_cos_sin_bit_for_bit():
    """An XposCosSin of four tensors: Rotary.cos_sin's arrays, in its field order, for
    (seq,) and (batch, seq) positions, float32 and float64, any seq_len."""
    module = RotaryEmbedding(12, rotary_dim=8, layout="gptj", xpos_scale_base=16, xpos_center="flash_attn")
    rotary = rope.Rotary(12, rotary_dim=8, layout="gptj", xpos_scale_base=16, xpos_center="flash_attn")
    for positions in (torch.arange(3, 12), torch.arange(6).reshape(2, 3) * 5, np.array([7])):
        for seq_len in (None, 40):
            for dtype, name in ((torch.float32, "float32"), (torch.float64, "float64")):
                got = module.cos_sin(positions, seq_len=seq_len, dtype=dtype)
                want = rotary.cos_sin(np.asarray(positions), seq_len=seq_len, dtype=name)
                assert isinstance(got, rope.XposCosSin) and got._fields == ("cos_q", "sin_q", "cos_k", "sin_k")
                for g, w in zip(got, want):
                    assert isinstance(g, torch.Tensor) and g.dtype == dtype
                    assert same_bits(g, torch.from_numpy(w))
    cos_q, sin_q, cos_k, sin_k = module.cos_sin(torch.arange(40), device="cpu")  # both sides of the centre
    assert (cos_q.abs() > cos_k.abs()).any() and (cos_q.abs() < cos_k.abs()).any()  # scaled up and down
    with pytest.raises(ValueError, match="dtype must be torch.float32 or torch.float64 for xPos"):
        module.cos_sin(torch.arange(3), dtype=torch.float16)
    with pytest.raises(TypeError, match="dtype must be"):
        module.cos_sin(torch.arange(3), dtype=torch.int32)


def test_xpos_caches_are_what_the_torch_path_multiplies():
    """The torch path's float64 result is ``x * cos + rotate(x) * sin`` with cos_sin's own
    caches: q with (cos_q, sin_q), k with (cos_k, sin_k)."""
    module = RotaryEmbedding(8, layout="neox", xpos_scale_base=8)
    q, k = randn(1, 2, 5, 8, seed=69, dtype=torch.float64), randn(1, 1, 5, 8, seed=70, dtype=torch.float64)
    positions = torch.arange(10, 15)
    out_q, out_k = module(q, k, positions)
    c = module.cos_sin(positions, dtype=torch.float64)

    def half(x):
        return torch.cat((-x[..., 4:], x[..., :4]), dim=-1)

    assert torch.equal(out_q, q * c.cos_q + half(q) * c.sin_q)
    assert torch.equal(out_k, k * c.cos_k + half(k) * c.sin_k)


def test_xpos_centre_moves_with_the_total_length():
    """seq_len (else the largest position plus one) sets the centre, as Rotary's: a decoding
    step at T - 1 gets the prefill's last row on both paths, and another seq_len another
    result, equal to Rotary's at that seq_len."""
    T, d = 21, 16
    module = RotaryEmbedding(d, xpos_scale_base=8)
    rotary = rope.Rotary(d, xpos_scale_base=8)
    q, k = randn(1, 2, T, d, seed=71), randn(1, 1, T, d, seed=72)
    full_q, full_k = module(q.clone(), k.clone(), torch.arange(T))
    for step in (dict(positions=torch.tensor([T - 1])), dict(offset=T - 1)):
        for x_dtype in (torch.float32, torch.float64):
            sq, sk = module(q[:, :, -1:].to(x_dtype, copy=True), k[:, :, -1:].to(x_dtype, copy=True), **step)
            assert same_bits(sq.float(), full_q[:, :, -1:].contiguous())
            assert same_bits(sk.float(), full_k[:, :, -1:].contiguous())
    longer_q, longer_k = module(q.clone(), k.clone(), torch.arange(T), seq_len=T + 10)
    qn, kn = q.numpy().copy(), k.numpy().copy()
    rotary.apply_qk_(qn, kn, np.arange(T), seq_len=T + 10)
    assert same_bits(longer_q, torch.from_numpy(qn)) and same_bits(longer_k, torch.from_numpy(kn))
    assert not torch.equal(longer_q, full_q)
    t_q, t_k = module(q.double(), k.double(), torch.arange(T), seq_len=T + 10)
    assert same_bits(t_q.float(), longer_q) and same_bits(t_k.float(), longer_k)


def test_xpos_path_is_unchanged_and_repr():
    plain, xpos = RotaryEmbedding(8), RotaryEmbedding(8, xpos_scale_base=512)
    pairs = [(torch.zeros(1, 2, 3, 8), torch.zeros(1, 1, 3, 8)),
             (torch.zeros(1, 2, 3, 8, requires_grad=True), torch.zeros(1, 1, 3, 8)),
             (torch.zeros(1, 2, 3, 8, dtype=torch.float64), torch.zeros(1, 1, 3, 8)),
             (torch.zeros(1, 3, 2, 8).transpose(1, 2), torch.zeros(1, 1, 3, 8)),
             (torch.zeros(2, 3, 3, 2, 8)[:, :, 0].transpose(1, 2), torch.zeros(2, 1, 3, 8))]
    for q, k in pairs:
        assert xpos.path(q, k) == plain.path(q, k)
    assert "xpos" not in repr(plain) and plain.xpos_scale_base is None and plain.xpos_center is None
    assert repr(xpos) == ("RotaryEmbedding(head_dim=8, rotary_dim=8, base=10000.0, rope_type='default', "
                          "layout='neox', xpos_scale_base=512.0, xpos_center='torchscale')")
    assert xpos.xpos_scale_base == 512.0 and xpos.xpos_center == "torchscale"
    assert RotaryEmbedding(8, xpos_scale_base=2, xpos_center="Flash-Attn").xpos_center == "flash_attn"
    assert dict(xpos.state_dict()) == {}


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"xpos_scale_base": 0}, id="sb-zero"),
        pytest.param({"xpos_scale_base": -512.0}, id="sb-negative"),
        pytest.param({"xpos_scale_base": float("nan")}, id="sb-nan"),
        pytest.param({"xpos_scale_base": float("inf")}, id="sb-inf"),
        pytest.param({"xpos_scale_base": 10**400}, id="sb-overflow"),
        pytest.param({"xpos_scale_base": "512"}, id="sb-str"),
        pytest.param({"xpos_scale_base": True}, id="sb-bool"),
        pytest.param({"xpos_scale_base": 512, "xpos_center": "middle"}, id="center-name"),
        pytest.param({"xpos_scale_base": 512, "xpos_center": 1.5}, id="center-float"),
        pytest.param({"xpos_scale_base": 512, "xpos_center": -1}, id="center-negative"),
        pytest.param({"xpos_scale_base": 512, "xpos_center": 2**32 + 1}, id="center-too-big"),
        pytest.param({"xpos_scale_base": 512, "xpos_center": None}, id="center-none"),
        pytest.param({"xpos_center": "flash_attn"}, id="center-without-sb"),
        pytest.param({"xpos_scale_base": 512, "scaling": {"rope_type": "default", "mrope_section": [1, 1, 2]}},
                     id="mrope"),
    ],
)
def test_xpos_bad_construction_is_rotarys_error(kwargs):
    """The error Rotary raises, of its type and with its message, naming the argument."""
    with pytest.raises((TypeError, ValueError)) as want:
        rope.Rotary(8, **kwargs)
    with pytest.raises(want.type) as got:
        RotaryEmbedding(8, **kwargs)
    assert str(got.value) == str(want.value)
    if "scaling" not in kwargs:
        assert ("xpos_center" if "xpos_center" in kwargs else "xpos_scale_base") in str(got.value)


@pytest.mark.parametrize("layout", ["neox", "gptj"])
def test_xpos_torch_path_other_strides_and_16_bit(layout):
    """Slices of one fused projection (strides the kernel cannot take) in float64 round to
    the in-place bits of contiguous copies, their inputs untouched; float16 and bfloat16
    compute in float32 and round once: within one ULP of their dtype of the float32 result."""
    module = RotaryEmbedding(32, layout=layout, xpos_scale_base=16, xpos_center="flash_attn")
    qkv = randn(2, 9, 3, 4, 32, seed=73, dtype=torch.float64)
    q, k = qkv[:, :, 0].transpose(1, 2), qkv[:, :, 1].transpose(1, 2)
    assert module.path(q, k).startswith("torch: q is float64")
    out_q, out_k = module(q, k, torch.arange(20, 29))
    assert same_bits(qkv, randn(2, 9, 3, 4, 32, seed=73, dtype=torch.float64))  # untouched
    fast_q, fast_k = module(q.float().contiguous(), k.float().contiguous(), torch.arange(20, 29))
    assert same_bits(out_q.float(), fast_q) and same_bits(out_k.float(), fast_k)
    q32 = qkv.float()[:, :, 0].transpose(1, 2)
    assert module.path(q32, k.float()).startswith("torch: q's strides")
    for dtype in (torch.float16, torch.bfloat16):
        q16, k16 = q.to(dtype), k.to(dtype)
        out16 = module(q16, k16, torch.arange(20, 29))
        want = module(q16.float().contiguous(), k16.float().contiguous(), torch.arange(20, 29))
        eps, tiny = torch.finfo(dtype).eps, torch.finfo(dtype).tiny
        for o, w in zip(out16, want):
            assert o.dtype == dtype and ((o.float() - w).abs() <= eps * w.abs() + 2 * tiny).all()
