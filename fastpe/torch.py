"""PyTorch modules backed by fastpe's exact tables: an optional bridge.

PyTorch is an optional peer of fastpe, never a requirement: ``import fastpe`` does not
import it, and only this module does.  Without torch installed, ``import fastpe.torch``
raises an :class:`ImportError` that says so.

* :class:`SinusoidalPositionalEncoding` (also exported as :class:`PositionalEncoding`) -- a
  drop-in for the ``PositionalEncoding`` module of PyTorch's "Language Modeling with
  nn.Transformer" tutorial, whose table is fastpe's exact table in the module's dtype (the
  tutorial's float32 ``exp``/``sin``/``cos`` drift from the true values as positions grow)
  and which grows when a longer input arrives.
* :class:`RotaryEmbedding` -- RoPE for ``(q, k)`` with every Hugging Face scaling rule
  (:mod:`fastpe.rope`); CPU float32 tensors -- contiguous, or the transposed
  ``(batch, heads, seq, head_dim)`` views attention layers make -- rotate in place through
  fastpe's kernels, anything else through torch with fastpe's exact cos/sin caches.
"""

from __future__ import annotations

import copy

try:
    import torch
    from torch import nn
except ImportError as exc:  # pragma: no cover - exercised in a child interpreter
    raise ImportError(
        "fastpe.torch needs PyTorch, an optional peer of fastpe that is not installed here; "
        "install it with `pip install torch` (the rest of fastpe works without it)"
    ) from exc

import numpy as np

from . import PosEncConfig, rope
from ._dtypes import resolve as resolve_dtype
from .sinusoid import DEFAULT_BASE, table_rows
from ._validate import (
    POSITION_LIMIT,
    check_d_model,
    check_finite_real,
    check_inplace,
    check_int,
    check_max_len,
    check_offset,
    check_position_grid,
)
from .rope import _scaling
from .rope._scaling import rope_layout

__all__ = ["SinusoidalPositionalEncoding", "PositionalEncoding", "RotaryEmbedding"]

#: the torch dtypes fastpe computes exactly, by their fastpe names (float16 and bfloat16
#: correctly rounded from the exact values, not narrowed from float32)
EXACT_DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
                torch.bfloat16: "bfloat16"}


def _check_bool(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def _check_tensor(name: str, x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def _as_index(name: str, value, low: int = 0) -> int:
    """An integer argument that may also arrive as a one-element integer tensor."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool:
            raise TypeError(f"{name} must be an integer, got a tensor of shape {tuple(value.shape)} "
                            f"and dtype {value.dtype}")
        value = int(value.item())
    return check_int(name, value, low=low)


def _from_numpy(a: np.ndarray) -> torch.Tensor:
    """A CPU tensor over ``a``'s memory, no copy (bfloat16, which torch cannot take from
    NumPy, through its 16-bit words)."""
    # ml_dtypes' bfloat16 is the one dtype of kind "V" fastpe writes (kind, not dtype.name,
    # which NumPy builds anew on every read)
    if a.dtype.kind == "V":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


# ============================================================================ sinusoidal


def _table_rows(d_model: int, start: int, stop: int, dtype: torch.dtype) -> torch.Tensor:
    """Rows ``start .. stop - 1`` of fastpe's table in ``dtype``, a ``(stop - start, d_model)``
    CPU tensor: computed by fastpe in that dtype (:data:`EXACT_DTYPES`), or -- any other
    floating dtype -- its float64 rows converted by torch."""
    name = EXACT_DTYPES.get(dtype, "float64")
    rows = np.empty((stop - start, d_model), dtype=resolve_dtype(name))
    table_rows(PosEncConfig(d_model, stop, DEFAULT_BASE), start, rows)
    t = _from_numpy(rows)
    return t if t.dtype == dtype else t.to(dtype)


#: the stored tables a checkpoint may hold are compared this many values at a time
_CHECK_CHUNK = 1 << 20


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the sinusoidal positional encoding to ``x``, then applies dropout.

    A drop-in for the ``PositionalEncoding`` module of PyTorch's "Language Modeling with
    nn.Transformer" tutorial, in its batch-first form: the same constructor
    ``(d_model, dropout=0.1, max_len=5000)``, the same registered buffer ``pe`` of shape
    ``(1, max_len, d_model)`` (``pe[0, :, 0::2]`` sines, ``pe[0, :, 1::2]`` cosines, base
    10000), saved in ``state_dict``, and the same ``forward``: ``dropout(x + pe[:, :seq])``.
    What differs:

    * ``pe`` is :func:`fastpe.table` in the buffer's dtype: float32 values within one ULP of
      the true ``sin(p * w_i)`` / ``cos(p * w_i)``, where the tutorial's float32 arithmetic
      is off by up to ``p * 2**-24`` radians; an odd ``d_model`` ends with a sine column.
    * ``.to(dtype)``, ``.half()``, ``.bfloat16()``, ``.double()``, ``.float()`` recompute the
      table in the new dtype (float16 and bfloat16 correctly rounded, float64 fastpe's
      doubles) instead of rounding the float32 one a second time; other floating dtypes get
      the float64 table converted by torch.
    * Inputs longer than the table grow it (to at least twice its length, the new rows
      computed by fastpe in the buffer's dtype) instead of failing, and
      ``forward(x, offset=n)`` encodes positions ``n .. n + seq - 1`` (decoding with a
      key/value cache).
    * ``load_state_dict`` takes a stored ``pe`` of shape ``(1, L, d_model)`` or the
      sequence-first tutorial's ``(L, 1, d_model)``, for any length ``L``, checks that it is
      the sinusoidal table (within the tutorial's float32 error and the rounding of its
      dtype; anything else is an error of ``load_state_dict``), and keeps fastpe's exact
      table of length ``L`` in place of the stored values.  A ``state_dict`` without ``pe``
      (from an earlier fastpe, whose table was not saved) loads too.
    * ``batch_first=True`` (the default) takes ``(batch, seq, d_model)``; ``False`` takes the
      sequence-first tutorial's ``(seq, batch, d_model)``.  An unbatched ``(seq, d_model)``
      also works.

    ``x + pe`` follows torch's type promotion (a float16 ``x`` with a float32 table gives
    float32), as in the tutorial; convert the module with ``.to(dtype)`` to match ``x``.

    Parameters
    ----------
    d_model:
        Size of each position's vector, ``1 .. 65536``.
    dropout:
        Dropout probability in ``[0, 1]`` (an ``nn.Dropout`` applied after the addition).
    max_len:
        Rows computed up front, ``>= 1``; longer inputs grow the table.
    batch_first:
        Keyword only.  ``True``: ``x`` is ``(batch, seq, d_model)``; ``False``:
        ``(seq, batch, d_model)``.
    """

    pe: torch.Tensor

    def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 5000, *, batch_first: bool = True):
        super().__init__()
        self.d_model = check_d_model(d_model)
        p = check_finite_real("dropout", dropout)
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout must be in [0, 1], got {p!r}")
        max_len = check_max_len(max_len)
        self.batch_first = _check_bool("batch_first", batch_first)
        self.dropout = nn.Dropout(p)
        self.register_buffer("pe", _table_rows(self.d_model, 0, max_len, torch.float32)[None])

    @property
    def max_len(self) -> int:
        """Rows in the table now (it grows with the inputs)."""
        return int(self.pe.shape[1])

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}, batch_first={self.batch_first}"

    def _table(self, length: int, dtype: torch.dtype, device) -> torch.Tensor:
        """fastpe's ``(1, length, d_model)`` table in ``dtype`` on ``device``."""
        return _table_rows(self.d_model, 0, length, dtype)[None].to(device)

    def _grow(self, needed: int) -> None:
        """Extend ``pe`` to at least ``needed`` rows (at least doubling, so a stream of ever
        longer inputs costs amortised linear work); only the new rows are computed, by
        fastpe in the buffer's dtype, bit-identical to a table built that long from the start."""
        old = self.max_len
        new = min(max(needed, 2 * old), POSITION_LIMIT)
        grown = torch.empty((1, new, self.d_model), device=self.pe.device, dtype=self.pe.dtype)
        grown[:, :old] = self.pe
        grown[0, old:] = _table_rows(self.d_model, old, new, self.pe.dtype)  # same dtype: only moved
        self.pe = grown

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """``dropout(x + pe[:, offset : offset + seq])``, broadcast over the batch.

        ``x``: ``(batch, seq, d_model)`` (``batch_first``), ``(seq, batch, d_model)``
        (otherwise) or ``(seq, d_model)``.  ``offset``: the first position, ``>= 0`` (an int
        or a one-element integer tensor).
        """
        _check_tensor("x", x)
        if x.ndim not in (2, 3):
            layout = "(batch, seq, d_model)" if self.batch_first else "(seq, batch, d_model)"
            raise ValueError(f"x must have shape {layout} or (seq, d_model), got {tuple(x.shape)}")
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x must have d_model = {self.d_model} values in its last dimension, "
                             f"got shape {tuple(x.shape)}")
        offset = _as_index("offset", offset)
        seq = x.shape[1] if x.ndim == 3 and self.batch_first else x.shape[0]
        end = offset + seq
        if end > POSITION_LIMIT:
            raise ValueError(f"offset + seq must be <= 2**32, got {offset} + {seq} = {end}")
        if end > self.max_len:
            self._grow(end)
        if x.ndim == 3 and self.batch_first:
            pe = self.pe[:, offset:end]  # the tutorial's pe[:, :x.size(1)]
        elif x.ndim == 3:
            pe = self.pe[0, offset:end].unsqueeze(1)  # (seq, 1, d_model) against (seq, batch, d_model)
        else:
            pe = self.pe[0, offset:end]
        return self.dropout(x + pe)

    def _apply(self, fn, recurse=True):
        # .to(dtype), .half(), .double(), ...: a new dtype gets fastpe's table in that dtype,
        # not the old values rounded again (a device move keeps the values as they are)
        dtype = self.pe.dtype
        result = super()._apply(fn, recurse)
        if self.pe.dtype != dtype:
            self.pe = self._table(self.max_len, self.pe.dtype, self.pe.device)
        return result

    def _stored_length(self, stored) -> int:
        """The length of a checkpoint's ``pe`` if it is this module's table (see the class
        notes), else a ValueError saying what it is."""
        d = self.d_model
        if not isinstance(stored, torch.Tensor) or not stored.is_floating_point():
            what = f"dtype {stored.dtype}" if isinstance(stored, torch.Tensor) else type(stored).__name__
            raise ValueError(f"must be a floating-point tensor, got {what}")
        shape = tuple(stored.shape)
        if len(shape) != 3 or shape[2] != d or 1 not in shape[:2] or shape[0] * shape[1] == 0:
            raise ValueError(f"has shape {shape}, not (1, max_len, {d}) or the sequence-first "
                             f"tutorial's (max_len, 1, {d})")
        length = shape[0] * shape[1]
        if length > POSITION_LIMIT:
            raise ValueError(f"has {length} rows, more than 2**32")
        if stored.device.type == "meta":
            return length
        # the tutorial's float32 angle p * w is off by up to p * 2**-19 radians (tested); the
        # stored dtype adds its rounding
        slack = 2.0**-20 + float(torch.finfo(stored.dtype).eps)
        values = stored.detach().reshape(length, d)
        rows = max(1, _CHECK_CHUNK // d)
        for start in range(0, length, rows):
            stop = min(length, start + rows)
            got = values[start:stop].to("cpu", torch.float64).numpy()
            want = _table_rows(d, start, stop, torch.float64).numpy()
            tol = np.arange(start, stop, dtype=np.float64)[:, None] * 2.0**-18 + slack
            bad = ~(np.abs(got - want) <= tol)  # NaN is bad too
            if bad.any():
                r, j = (int(i) for i in np.argwhere(bad)[0])
                raise ValueError(f"is not the sinusoidal encoding (base 10000) of d_model = {d}: at position "
                                 f"{start + r}, column {j} it holds {float(got[r, j])!r} where the encoding is "
                                 f"{float(want[r, j])!r}")
        return length

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        # the stored table is checked, then replaced by fastpe's own of the same length: the
        # values torch copies into `pe` are the exact ones (state_dict is torch's own copy)
        key = prefix + "pe"
        if key in state_dict:
            try:
                length = self._stored_length(state_dict[key])
            except ValueError as exc:
                error_msgs.append(f"{key} {exc}")
            else:
                if length != self.max_len:
                    self.pe = self._table(length, self.pe.dtype, self.pe.device)
        state_dict[key] = self.pe  # also where it is missing: a table is never missing
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)


#: the tutorial's name for the module
PositionalEncoding = SinusoidalPositionalEncoding


# ================================================================================ rotary


def _rotate_neox(x: torch.Tensor) -> torch.Tensor:
    """HF's ``rotate_half``: ``(x1, x2) -> (-x2, x1)`` over the two halves."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rotate_gptj(x: torch.Tensor) -> torch.Tensor:
    """The interleaved twin: each adjacent pair ``(a, b) -> (-b, a)``."""
    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)


#: the kernel's two ways of holding a float32 CPU tensor (see :meth:`RotaryEmbedding.path`)
CONTIGUOUS, TRANSPOSED = "contiguous", "transposed"


def _refusal(name: str, t: torch.Tensor) -> str | None:
    """Why fastpe's kernel may not rotate ``t`` in place, whatever its strides (or None)."""
    if t.device.type != "cpu":
        return f"{name} is on {t.device}, not the CPU"
    if t.dtype != torch.float32:
        return f"{name} is {str(t.dtype).removeprefix('torch.')}, not float32"
    if t.requires_grad:
        return f"{name} requires grad"
    if type(t) is not torch.Tensor:
        return f"{name} is a {type(t).__name__}, not a plain torch.Tensor"
    if t.layout != torch.strided or t.is_neg() or t.is_conj():
        return f"{name} is not a plain strided tensor"
    return None


def _forms(t: torch.Tensor) -> tuple[str, ...]:
    """The kernel's forms that ``t``'s memory has: ``contiguous`` (as it is), and, for
    ``(batch, heads, seq, head_dim)``, ``transposed`` -- memory that is a contiguous
    ``(batch, seq, heads, head_dim)`` tensor, which the kernel takes as
    ``(batch * seq, heads, head_dim)`` tokens."""
    forms = (CONTIGUOUS,) if t.is_contiguous() else ()
    if t.ndim == 4 and t.transpose(1, 2).is_contiguous():
        forms += (TRANSPOSED,)
    return forms


def _plan(q: torch.Tensor, k: torch.Tensor) -> tuple[tuple[str, str] | None, str]:
    """``((form of q, form of k), "")`` when both rotate in place, else ``(None, why not)``.
    A form both tensors have is preferred (one pass over both)."""
    for name, t in (("q", q), ("k", k)):
        why = _refusal(name, t)
        if why:
            return None, why
    forms = {}
    for name, t in (("q", q), ("k", k)):
        forms[name] = _forms(t)
        if not forms[name]:
            return None, (f"{name}'s strides {tuple(t.stride())} are neither contiguous nor a contiguous "
                          "(batch, seq, heads, head_dim) tensor transposed to (batch, heads, seq, head_dim)")
    both = [f for f in forms["q"] if f in forms["k"]]
    return ((both[0], both[0]) if both else (forms["q"][0], forms["k"][0])), ""


def _kernel_view(t: torch.Tensor, form: str) -> np.ndarray:
    """The C-contiguous float32 array over ``t``'s memory that the kernel rotates."""
    if form == TRANSPOSED:
        b, h, s, d = t.shape
        t = t.transpose(1, 2).view(b * s, h, d)  # view(): never a copy
    return t.numpy()


def _kernel_positions(pos: np.ndarray, form: str, t: torch.Tensor) -> np.ndarray:
    """Positions as the kernel's array of ``form`` takes them: the tokens of a transposed
    view are ``(batch, seq)`` in order, so ``(seq,)`` positions repeat for each batch row."""
    if form != TRANSPOSED:
        return pos
    return pos.reshape(-1) if pos.ndim == 2 else np.tile(pos, t.shape[0])


class RotaryEmbedding(nn.Module):
    """Rotary position embeddings for queries and keys: ``q, k = rope(q, k, positions)``.

    Configured as :func:`fastpe.rope.inv_freq` is, with the model's ``rope_scaling`` /
    ``rope_parameters`` dict verbatim (``default``, ``linear``, ``dynamic``, ``yarn``,
    ``llama3``, ``longrope``): ``RotaryEmbedding(head_dim, scaling=config.rope_parameters)``
    takes the dict's ``rope_theta``.  ``layout="neox"`` pairs dimension ``i`` with
    ``i + rotary_dim/2`` (HF Llama's ``rotate_half``); ``"gptj"`` pairs ``2i`` with
    ``2i + 1``.  Dimensions past ``rotary_dim`` pass through unchanged.

    Two paths, one result (:meth:`path` says which a pair takes):

    * **In place** -- when ``q`` and ``k`` are both float32 CPU tensors that do not require
      grad (plain tensors, not subclasses such as ``nn.Parameter``), each either contiguous
      or the transposed view an attention layer makes, ``proj(x).view(b, s, h, d)
      .transpose(1, 2)`` (a ``(batch, heads, seq, head_dim)`` view of contiguous
      ``(batch, seq, heads, head_dim)`` memory, which the kernel takes as
      ``(batch * seq, heads, head_dim)`` tokens), fastpe's kernel rotates them in place
      through NumPy views of their memory (no copy), in one pass when their forms agree, and
      ``forward`` returns the *same* tensors.  Their autograd version counters are bumped,
      so a graph that saved the old values fails loudly instead of silently using the
      rotated ones.  Results are bit-identical to :func:`fastpe.rope.apply_qk_`.
    * **Torch** -- for anything else (another device or dtype, a tensor that requires grad,
      which NumPy must never modify, a subclass, or other strides) ``forward`` returns new
      tensors computed by torch as HF does (``x * cos + rotate(x) * sin``) with fastpe's
      exact cos/sin caches moved to the tensor's device; the inputs are left unchanged and
      gradients flow.  float64 uses the caches' doubles; float32, float16 and bfloat16
      compute in float32 and round once to their dtype.  float64 results rounded to
      float32 equal the in-place path's bits; float32 ones are within a few ULP.

    Always use the returned tensors: whether the inputs were rotated depends on the path.

    Parameters
    ----------
    head_dim:
        Size of one head (the last dimension of ``q`` and ``k``).
    base:
        RoPE theta.  ``None`` (the default) takes the dict's ``rope_theta``, else 10000; an
        explicit value that contradicts the dict is a ``ValueError``.
    scaling:
        ``None`` or an HF rope dict (copied; later changes to it have no effect).
    layout:
        ``"neox"`` or ``"gptj"``.
    rotary_dim:
        Rotated leading dimensions of each head (even); default ``head_dim`` or the dict's
        ``partial_rotary_factor``.
    max_position_embeddings:
        The model config's field, needed by ``dynamic`` and the default original length of
        ``yarn``, ``llama3`` and ``longrope``.
    xpos_scale_base, xpos_center:
        Keyword only.  xPos, as :class:`fastpe.rope.Rotary` takes it: ``xpos_scale_base``
        ``None`` (the default: plain RoPE) or a finite real ``> 0`` (512 in the published
        models) scales queries by ``zeta ** (n' / xpos_scale_base)`` and keys by its inverse,
        ``n'`` the position centred as ``xpos_center`` says (``"torchscale"``, the default,
        ``"flash_attn"`` or an integer in ``[0, 2**32]``); the centre moves with the total
        length (``seq_len``, else the largest position plus one).  See
        :mod:`fastpe.rope._xpos` for every value.  Both paths then scale ``q`` up and ``k``
        down: in place, bit-identical to :meth:`fastpe.rope.Rotary.apply_qk_`; on the torch
        path ``q`` takes the queries' caches and ``k`` the keys', and float64 rounded to
        float32 again equals the in-place bits.  :meth:`cos_sin` returns the four caches.

    The module holds no parameters or buffers (its ``state_dict`` is empty).
    """

    def __init__(self, head_dim: int, base=None, scaling=None, layout: str = "neox", rotary_dim=None,
                 *, max_position_embeddings=None, xpos_scale_base=None, xpos_center="torchscale"):
        from .rope._rotary import _xpos_key

        super().__init__()
        self.layout = rope_layout(layout)
        self.spec = rope.resolve(head_dim, base=base, rotary_dim=rotary_dim, scaling=scaling,
                                 max_position_embeddings=max_position_embeddings)
        self.head_dim = self.spec.head_dim
        self.rotary_dim = self.spec.rotary_dim
        self.base = self.spec.base
        # xPos: Rotary's own checks and messages, (scale base, centre) or None
        xpos = _xpos_key(self.spec, xpos_scale_base, xpos_center)
        # the module's arguments as fastpe.rope's functions and Rotary take them, validated (for
        # reading back: the calls themselves go through self._rotary)
        self._kwargs = dict(base=base, rotary_dim=rotary_dim, scaling=copy.deepcopy(scaling),
                            max_position_embeddings=max_position_embeddings, layout=self.layout)
        if xpos is not None:
            self._kwargs.update(xpos_scale_base=xpos[0], xpos_center=xpos[1])
        # the Rotary of the caches and the in-place path, built once from the resolved spec:
        # fastpe.rope's module functions would resolve the same arguments again on every call
        # (the same bits either way)
        self._rotary = rope.Rotary._from_spec(self.spec, self.layout, xpos)
        #: xPos's scale base (a float) and centre (``"torchscale"``, ``"flash_attn"`` or an
        #: int), both ``None`` without xPos
        self.xpos_scale_base = self._rotary.xpos_scale_base
        self.xpos_center = self._rotary.xpos_center

    def extra_repr(self) -> str:
        xpos = "" if self.xpos_scale_base is None else \
            f", xpos_scale_base={self.xpos_scale_base!r}, xpos_center={self.xpos_center!r}"
        return (f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, base={self.base!r}, "
                f"rope_type={self.spec.rope_type!r}, layout={self.layout!r}{xpos}")

    def cos_sin(self, positions, *, seq_len=None, dtype=torch.float32, device=None):
        """The cos and sin caches of ``positions`` as torch tensors: ``(seq, rotary_dim)``
        for positions ``(seq,)``, ``(batch, seq, rotary_dim)`` for ``(batch, seq)`` (HF's
        ``position_ids``).

        As :func:`fastpe.rope.cos_sin` (multiplied by the attention factor, in this module's
        layout), computed by fastpe in ``dtype`` and put on ``device`` (CPU by default):
        float32 values within 1 ULP of exact, float64 the doubles fastpe's kernels round
        from, float16 and bfloat16 correctly rounded.  On the CPU the tensors share the
        arrays fastpe filled (no copy).  A drop-in for the ``(cos, sin)`` of HF's rotary
        modules; ``seq_len`` as in :meth:`forward` (default: the largest position plus one).

        xPos (``xpos_scale_base`` given): a :class:`fastpe.rope.XposCosSin` -- the NamedTuple
        :meth:`fastpe.rope.Rotary.cos_sin` returns -- of four tensors ``(cos_q, sin_q, cos_k,
        sin_k)``, the queries' caches (times ``zeta ** (n' / sb)``) and the keys' (times its
        inverse), each of the shape above and, on the CPU, over the arrays fastpe filled;
        ``dtype`` torch.float32 or torch.float64 (the dtypes of xPos caches).  Unpack it as
        ``cos_q, sin_q, cos_k, sin_k`` or read its fields.
        """
        dtype = torch.float32 if dtype is None else dtype
        if dtype not in EXACT_DTYPES:
            raise TypeError(f"dtype must be torch.float32, torch.float64, torch.float16 or torch.bfloat16, "
                            f"got {dtype!r}")
        if self.xpos_scale_base is not None and dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64 for xPos (its caches are float32 or "
                             f"float64), got {dtype!r}")
        pos = _positions_numpy(positions)
        if pos.ndim not in (1, 2):
            raise ValueError(f"positions must have shape (seq,) or (batch, seq), got {pos.shape}")
        # the Rotary checks the positions' values and seq_len (once) and returns the caches
        # (seq, rotary_dim) or (batch, seq, rotary_dim)
        return self._cos_sin(pos, seq_len, dtype, device)

    def _cos_sin(self, pos: np.ndarray, seq_len, dtype, device):
        """Caches for ``pos`` (``(seq,)`` or ``(batch, seq)``), computed by fastpe in
        ``dtype`` itself; on the CPU tensors over the arrays it filled.  ``(cos, sin)``, or
        xPos's four caches as an :class:`~fastpe.rope.XposCosSin` of tensors."""
        caches = self._rotary.cos_sin(pos, dtype=EXACT_DTYPES[dtype], seq_len=seq_len)
        tensors = [_from_numpy(c) for c in caches]
        if device is not None:
            tensors = [t.to(device) for t in tensors]
        return tuple(tensors) if self.xpos_scale_base is None else rope.XposCosSin(*tensors)

    def path(self, q: torch.Tensor, k: torch.Tensor) -> str:
        """Which path :meth:`forward` takes for ``q`` and ``k``: ``"in place"``, or
        ``"torch: "`` and the reason (``"torch: q requires grad"``).  Checks ``q`` and ``k``
        as ``forward`` does; computes nothing."""
        _check_tensor("q", q)
        _check_tensor("k", k)
        _check_qk(q, k, self.head_dim)
        forms, why = _plan(q, k)
        return "in place" if forms else f"torch: {why}"

    def forward(self, q: torch.Tensor, k: torch.Tensor, positions=None, *, offset=0, seq_len=None):
        """Rotate ``q`` and ``k`` by RoPE at ``positions``; return ``(q_rotated, k_rotated)``.

        Shapes, as :func:`fastpe.rope.apply_qk_`: ``(batch, heads, seq, head_dim)`` with
        ``positions`` ``(seq,)``, ``(batch, seq)`` or ``(1, seq)`` (one row for every batch
        row, as HF's ``position_ids`` often are), or ``(tokens, heads, head_dim)`` with
        ``(tokens,)``; ``q`` and ``k`` may differ in their head counts only.  ``positions``:
        integers in ``[0, 2**32)`` -- a tensor on any device, an array or a list; or
        ``None`` for ``offset, offset + 1, ...`` (``offset`` 0 by default; a non-zero
        ``offset`` beside ``positions`` is a ValueError, as in :func:`fastpe.rope.apply_`).
        ``seq_len``: the length dynamic NTK and LongRoPE see (default: the largest position
        plus one, as HF's forward pass).  See the class notes (and :meth:`path`) for which
        path runs and whether the inputs are modified.
        """
        _check_tensor("q", q)
        _check_tensor("k", k)
        n_seq = _check_qk(q, k, self.head_dim)
        offset = _as_index("offset", offset)
        if positions is not None and offset:
            raise ValueError(f"give positions or offset, not both (got positions and offset={offset!r})")
        if positions is None:
            start = check_offset(offset, n_seq)
            pos = np.arange(start, start + n_seq, dtype=np.int64)
        else:
            shapes = ((n_seq,),) if q.ndim == 3 else ((n_seq,), (q.shape[0], n_seq), (1, n_seq))
            pos = check_position_grid(_positions_numpy(positions), shapes)
            if pos.ndim == 2 and pos.shape[0] == 1:
                pos = pos[0]  # (1, seq): the same positions for every batch row
        seq_len = _scaling.check_seq_len(seq_len)

        forms, _ = _plan(q, k)
        if forms is None:
            caches: dict = {}  # one cos/sin computation per working dtype, shared by q and k
            return (self._rotate_torch(q, pos, seq_len, caches),
                    self._rotate_torch(k, pos, seq_len, caches, True))
        self._rotate_in_place(q, k, forms, pos, seq_len)
        return q, k

    def _rotate_in_place(self, q, k, forms, pos, seq_len) -> None:
        """fastpe's kernel over the memory of ``q`` and ``k`` (both checked before either is
        written): one pass when their forms agree, one each otherwise."""
        qn, kn = _kernel_view(q, forms[0]), _kernel_view(k, forms[1])
        check_inplace(qn, "q")
        check_inplace(kn, "k")
        if np.may_share_memory(qn, kn):
            raise ValueError("k must not share memory with q (both are rotated in place)")
        if self.xpos_scale_base is not None:
            self._xpos_in_place(q, k, qn, kn, forms, pos, seq_len)
            torch.autograd.graph.increment_version((q, k))
            return
        # what fastpe.rope.apply_qk_ / apply_ run once they have built their Rotary: this
        # module's, built once
        rotate = self._rotary._rotate
        if forms[0] == forms[1]:
            rotate(qn, kn, _kernel_positions(pos, forms[0], q), 0, seq_len, None, qk=True)
        else:
            rotate(qn, None, _kernel_positions(pos, forms[0], q), 0, seq_len, None)
            rotate(kn, None, _kernel_positions(pos, forms[1], k), 0, seq_len, None)
        torch.autograd.graph.increment_version((q, k))

    def _xpos_in_place(self, q, k, qn, kn, forms, pos, seq_len) -> None:
        """xPos on the kernel's arrays, as :meth:`fastpe.rope.Rotary.apply_qk_` rotates them:
        queries scaled up, keys down (``downscale``); every array's positions have the same
        largest value, so each call takes the same total length and centre."""
        rotary = self._rotary
        if forms[0] == forms[1]:
            rotary.apply_qk_(qn, kn, _kernel_positions(pos, forms[0], q), seq_len=seq_len)
        else:
            rotary.apply_(qn, _kernel_positions(pos, forms[0], q), seq_len=seq_len)
            rotary.apply_(kn, _kernel_positions(pos, forms[1], k), seq_len=seq_len, downscale=True)

    def _rotate_torch(self, x: torch.Tensor, pos: np.ndarray, seq_len, caches: dict, key: bool = False
                      ) -> torch.Tensor:
        """HF's ``x * cos + rotate(x) * sin`` over the first ``rotary_dim`` values, out of place;
        xPos: the queries' caches, or the keys' (``key=True``)."""
        if x.numel() == 0:
            return x.clone()
        work = torch.float64 if x.dtype == torch.float64 else torch.float32
        if work not in caches:
            caches[work] = self._cos_sin(pos.reshape(-1), seq_len, work, x.device)
        cos, sin = caches[work][2:] if key and self.xpos_scale_base is not None else caches[work][:2]
        rd = self.rotary_dim
        if x.ndim == 3:  # (tokens, heads, d): one row per token, shared by the heads
            cos, sin = cos[:, None], sin[:, None]
        else:  # (batch, heads, seq, d) with positions (seq,) or (batch, seq)
            shape = (1, 1, pos.shape[-1], rd) if pos.ndim == 1 else (pos.shape[0], 1, pos.shape[1], rd)
            cos, sin = cos.reshape(shape), sin.reshape(shape)
        xw = x.to(work)
        rot = xw[..., :rd]
        turned = _rotate_neox(rot) if self.layout == "neox" else _rotate_gptj(rot)
        out = rot * cos + turned * sin
        if rd < x.shape[-1]:
            out = torch.cat((out, xw[..., rd:]), dim=-1)
        return out.to(x.dtype)


def _positions_numpy(positions) -> np.ndarray:
    """Positions as a numpy array (validated by fastpe's own checks afterwards)."""
    if isinstance(positions, torch.Tensor):
        return positions.detach().cpu().numpy()
    if isinstance(positions, (str, bytes)):
        raise TypeError(f"positions must be integers, got {type(positions).__name__}")
    try:
        return np.asarray(positions)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"positions must be an array of integers: {exc}") from None


def _check_qk(q: torch.Tensor, k: torch.Tensor, head_dim: int) -> int:
    """Shapes and dtypes of ``q`` and ``k``, as :func:`fastpe.rope.apply_qk_` requires them;
    return the sequence length."""
    for name, t in (("q", q), ("k", k)):
        if not t.dtype.is_floating_point:
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
        if t.ndim not in (3, 4):
            raise ValueError(f"{name} must have shape (tokens, heads, head_dim) or "
                             f"(batch, heads, seq, head_dim), got {tuple(t.shape)}")
        if t.shape[-1] != head_dim:
            raise ValueError(f"{name} must have head_dim = {head_dim} values in its last dimension, "
                             f"got shape {tuple(t.shape)}")
    if k.ndim != q.ndim:
        raise ValueError(f"k must have the layout of q: got shapes {tuple(q.shape)} and {tuple(k.shape)}")
    axes = {0: "tokens"} if q.ndim == 3 else {0: "batch", 2: "seq"}
    for axis, what in axes.items():
        if k.shape[axis] != q.shape[axis]:
            raise ValueError(f"k must have the {what} of q ({q.shape[axis]}), got {k.shape[axis]}")
    if k.device != q.device:
        raise ValueError(f"k must be on the device of q ({q.device}), got {k.device}")
    return q.shape[0] if q.ndim == 3 else q.shape[2]

