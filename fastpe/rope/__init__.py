"""Rotary position embeddings (RoPE): exact cos/sin caches and in-place rotation.

Read a model's configuration with :meth:`Rotary.from_config` (a ``config.json`` path, its
dict, or a transformers ``PretrainedConfig``), which takes every field HF's rotary
embedding reads from where HF takes it, or build a :class:`Rotary` from the model's own
``rope_scaling`` / ``rope_parameters`` dict, verbatim, and the fields beside it::

    import numpy as np
    from fastpe import rope

    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    rotary = rope.Rotary(128, base=500000.0, scaling=scaling)    # validated once
    cos, sin = rotary.cos_sin(np.arange(8192))
    q = rotary.apply_(q, positions)                               # (tokens, heads, 128)

The module functions (:func:`inv_freq`, :func:`cos_sin`, :func:`apply_`, :func:`apply_qk_`)
take the same configuration on every call and build a Rotary each time: the same bits.

Supported ``rope_type`` values (or the legacy key ``type``): ``default``, ``linear``,
``dynamic``, ``yarn``, ``llama3``, ``longrope`` (``su``, Phi-3's old name, is accepted) and
``proportional`` (Gemma 4) -- every rule of HF transformers 5.24.  The rules and their
parity with HF transformers are described in :mod:`fastpe.rope._scaling`: every
``inv_freq`` is the correctly rounded float64 of the rule's real value, which HF's float32
values match to float32 precision; where HF's validators warn, fastpe issues a
:class:`RopeConfigWarning` and computes what HF computes.  The cos/sin values are then
exact (within 1 float32 ULP) for that float64 ``inv_freq`` at every position below
``2**32``.

Sequence length.  Dynamic NTK and LongRoPE depend on the current length.  :func:`inv_freq`
with ``seq_len=None`` returns what HF computes at initialisation (dynamic: no scaling;
longrope: ``short_factor``).  :func:`cos_sin`, :func:`apply_` and :func:`apply_qk_` with
``seq_len=None`` use the largest position of the call plus one, as HF's forward pass does
(``max(position_ids) + 1``), so long positions switch LongRoPE to ``long_factor`` and
stretch dynamic NTK's base.  HF's module keeps the largest length seen so far for dynamic
NTK (its cache only grows until it resets below ``max_position_embeddings``); fastpe is
stateless -- pass ``seq_len`` to reproduce that.

Multimodal and vision RoPE.  :func:`mrope_positions` gives the 3-D (time, height, width)
position ids of a Qwen2-VL / Qwen2.5-VL / Qwen3-VL prompt, equal to HF's ``get_rope_index``
(:func:`mrope_next_positions` the decoding continuation; :func:`positions_from_attention_mask`
and :func:`positions_from_cu_seqlens` the 1-D positions of padded and packed batches);
a rope dict with ``mrope_section`` makes :class:`Rotary`, :func:`cos_sin`, :func:`apply_`
and :func:`apply_qk_` take those ``(3, ...)`` positions.  ``inverse=True`` rotates back (the
transpose); :func:`rerotate_` moves cached keys by a position delta.
:func:`axial_cos_sin` gives exact N-axis caches for real-valued coordinates (FLUX, Wan,
HunyuanVideo, CogVideoX, EVA/timm, Pixtral, Qwen2-VL's vision tower), and the grid builders
(:func:`index_grid`, :func:`linspace_grid`, :func:`crop_grid`, :func:`timm_grid`,
:func:`merge_window_grid`, :func:`prepend_cls`) the coordinates of each convention.

xPos.  ``xpos_scale_base`` (and ``xpos_center``) on :class:`Rotary` and the module functions
scale queries up and keys down by xPos's per-frequency powers of the centred position, as
torchscale, flash-attention and rotary-embedding-torch do (:mod:`fastpe.rope._xpos`).
"""

from __future__ import annotations

import numpy as np

from . import _scaling
from ._axial import (
    AXIAL_LAYOUTS,
    axial_cos_sin,
    axial_frequencies,
    crop_grid,
    index_grid,
    linspace_grid,
    merge_window_grid,
    prepend_cls,
    timm_grid,
)
from ._mrope import (
    mrope_next_positions,
    mrope_positions,
    positions_from_attention_mask,
    positions_from_cu_seqlens,
)
from ._rotary import Rotary
from ._scaling import ROPE_TYPES, RopeConfigWarning, RopeSpec
from ._xpos import XposCosSin

__all__ = [
    "Rotary",
    "inv_freq",
    "cos_sin",
    "apply_",
    "apply_qk_",
    "rerotate_",
    "permute_qk_weight",
    "resolve",
    "ROPE_TYPES",
    "RopeSpec",
    "RopeConfigWarning",
    "XposCosSin",
    # M-RoPE position ids (Qwen-VL)
    "mrope_positions",
    "mrope_next_positions",
    "positions_from_attention_mask",
    "positions_from_cu_seqlens",
    # axial RoPE (vision encoders, diffusion transformers)
    "axial_cos_sin",
    "axial_frequencies",
    "AXIAL_LAYOUTS",
    "index_grid",
    "linspace_grid",
    "crop_grid",
    "timm_grid",
    "merge_window_grid",
    "prepend_cls",
]


def resolve(head_dim, *, base=None, rotary_dim=None, scaling=None, max_position_embeddings=None) -> RopeSpec:
    """Validate a RoPE configuration once; return a frozen, hashable :class:`RopeSpec`.

    Same arguments and errors as :func:`inv_freq`.  ``base=None`` means
    ``scaling['rope_theta']`` when present, else 10000 -- a model's ``config.json`` keeps
    ``rope_theta`` at its top level, beside ``rope_scaling``: pass it as ``base``, or read the
    whole config with :meth:`Rotary.from_config`.  ``rotary_dim=None`` means
    ``int(head_dim * scaling['partial_rotary_factor'])`` when present (HF's rule), else
    ``head_dim``.  An explicit argument that contradicts the dict is a ``ValueError``.
    """
    return _scaling.resolve(head_dim, base=base, rotary_dim=rotary_dim, scaling=scaling,
                            max_position_embeddings=max_position_embeddings)


def inv_freq(
    head_dim,
    *,
    base=None,
    rotary_dim=None,
    scaling=None,
    seq_len=None,
    max_position_embeddings=None,
    out=None,
) -> tuple[np.ndarray, float]:
    """RoPE inverse frequencies and attention factor, as HF transformers defines them.

    Returns ``(inv_freq, attention_factor)``: a float64 array of length ``rotary_dim / 2``
    (radians per position; pair ``i`` rotates by ``p * inv_freq[i]``) -- a new one, or
    ``out`` filled -- and the factor HF multiplies cos and sin by (1 except for yarn and
    longrope).  No ``backend``: no kernel runs.  The same values as
    ``Rotary(...).inv_freq_at(seq_len)`` and ``attention_factor_at(seq_len)``.

    Parameters
    ----------
    head_dim:
        Size of one attention head, 2 .. 65536.
    base:
        RoPE theta, finite and > 1.  Default: ``scaling['rope_theta']`` if present, else
        10000.0.  A model's ``config.json`` keeps ``rope_theta`` at its top level, not in
        ``rope_scaling``: pass ``base=config["rope_theta"]``, or use
        :meth:`Rotary.from_config`, which reads it (and every other field) where HF does.
    rotary_dim:
        How many leading dimensions of each head rotate (even, ``<= head_dim``).  Default:
        ``int(head_dim * scaling['partial_rotary_factor'])`` if present, else ``head_dim``.
    scaling:
        ``None`` or an HF ``rope_scaling`` / ``rope_parameters`` dict, verbatim: key
        ``rope_type`` (or legacy ``type``) and that type's keys.  A key the type does not
        read is ignored with a :class:`RopeConfigWarning` naming it, as HF warns of it.
        Never modified.  A whole model config is refused: read it with
        :meth:`Rotary.from_config`.
    seq_len:
        The current sequence length, for dynamic and longrope; ``None`` gives HF's values
        at initialisation (no dynamic scaling; longrope's ``short_factor``).
    max_position_embeddings:
        The model config's field of that name: needed by dynamic, the default for
        ``original_max_position_embeddings`` (yarn, llama3, longrope) and longrope's
        default factor.
    out:
        ``None``, or a writable C-contiguous float64 array of shape ``(rotary_dim / 2,)``,
        filled and returned as the first item.

    Raises
    ------
    TypeError, ValueError
        Naming the argument or dict key: unknown ``rope_type``, a missing required key, a
        longrope factor list whose length is not ``rotary_dim / 2``, an odd or too large
        ``rotary_dim``, a ``scaling`` that is not a dict, a bad ``base``; a value HF's own
        arithmetic fails on (a factor of 0, a negative ``beta_fast``, LongRoPE's attention
        factor with ``original_max_position_embeddings = 1``), and a result the kernels
        cannot take (a factor giving an ``inv_freq`` above 1024, an attention factor beyond
        ``2**64``) -- see :mod:`fastpe.rope._scaling`.

    Warns
    -----
    RopeConfigWarning
        Wherever HF's validators warn and compute (a ``factor`` below 1, ``beta_fast <
        beta_slow``, ``high_freq_factor <= low_freq_factor``, an unread key, ...): fastpe
        computes what HF computes.
    """
    rotary = Rotary(head_dim, base=base, rotary_dim=rotary_dim, scaling=scaling,
                    max_position_embeddings=max_position_embeddings)
    values, attention = rotary._at(_scaling.check_seq_len(seq_len))
    if out is None:
        return np.array(values, dtype=np.float64), attention
    from ..sinusoid import output_array

    out = output_array(out, (rotary.rotary_dim // 2,), None, dtypes=(np.float64,), default=np.float64,
                       resolve=None)
    out[...] = values
    return out, attention


# ------------------------------------------------------------------------ composition


def cos_sin(
    positions,
    head_dim,
    *,
    base=None,
    rotary_dim=None,
    scaling=None,
    seq_len=None,
    max_position_embeddings=None,
    layout: str = "neox",
    xpos_scale_base=None,
    xpos_center="torchscale",
    dtype=None,
    out=None,
    backend: str | None = None,
):
    """The cos and sin caches of ``positions``, each ``(len(positions), rotary_dim)``.

    Values are ``attention_factor * cos(p * inv_freq[i])`` (and sin), laid out as HF does
    for ``layout="neox"`` (``[f_0 .. f_{n-1}, f_0 .. f_{n-1}]``) or interleaved for
    ``"gptj"`` (``f_0, f_0, f_1, f_1, ...``).  With ``dtype="float32"`` (the default
    without ``out``) every value is within 1 float32 ULP of the exact value for the float64
    ``inv_freq`` of :func:`inv_freq`; ``"float64"`` gives the doubles the kernels round from
    (absolute error below ``2**-45 * attention_factor``); ``"float16"`` and ``"bfloat16"``
    the correctly rounded values.  ``positions``: 1-D integers in ``[0, 2**32)``
    (:meth:`Rotary.cos_sin` also takes ``(batch, seq)``); M-RoPE (``scaling`` with
    ``mrope_section``): ``(3, seq)`` or ``(3, batch, seq)``, as :meth:`Rotary.cos_sin`.
    ``out``: ``None`` or a pair ``(cos, sin)`` of writable C-contiguous arrays of the output
    shape and one dtype (``dtype=None`` means theirs), apart in memory from each other and
    from ``positions``; they are filled and ``out`` is returned.
    ``seq_len=None`` means ``max(positions) + 1`` (see the module notes).  Other arguments
    as in :func:`inv_freq`; ``backend`` as in :func:`fastpe.forward`.  The same bits as
    ``Rotary(head_dim, ..., layout=layout).cos_sin(positions, ...)``.

    xPos (``xpos_scale_base`` a finite real ``> 0``; ``xpos_center`` ``"torchscale"``,
    ``"flash_attn"`` or an integer, see :mod:`fastpe.rope._xpos`): the queries' and the keys'
    caches differ, so the result is an :class:`XposCosSin` ``(cos_q, sin_q, cos_k, sin_k)``
    (and ``out`` four arrays), float32 or float64: ``af * cos(p f) * zeta ** (+-n' / sb)``.
    """
    rotary = Rotary(head_dim, base=base, rotary_dim=rotary_dim, scaling=scaling,
                    max_position_embeddings=max_position_embeddings, layout=layout,
                    xpos_scale_base=xpos_scale_base, xpos_center=xpos_center)
    if rotary._axes is not None:
        return rotary._mrope_cos_sin(positions, dtype, out, seq_len, backend)
    if rotary._xpos is not None:
        return rotary._xpos_cos_sin(positions, dtype, out, seq_len, backend, grid=False)
    return rotary._cos_sin(positions, dtype, out, seq_len, backend, grid=False)


def apply_(
    x,
    positions=None,
    *,
    head_dim=None,
    layout: str = "neox",
    rotary_dim=None,
    base=None,
    scaling=None,
    offset=0,
    seq_len=None,
    max_position_embeddings=None,
    backend: str | None = None,
    inverse=False,
    xpos_scale_base=None,
    xpos_center="torchscale",
    downscale=False,
):
    """Rotate ``x`` in place by RoPE and return it.

    ``x``: a float32 ``(tokens, heads, head_dim)`` or ``(batch, heads, seq, head_dim)``
    array (C-contiguous, writable); its first ``rotary_dim`` values of each head rotate, the
    rest are left alone.  ``positions``: ``(tokens,)``, ``(seq,)`` or ``(batch, seq)``
    integers; ``None`` means ``offset, offset + 1, ...`` along the sequence axis
    (``offset`` defaults to 0; a non-zero ``offset`` beside ``positions`` is a ValueError).
    ``head_dim`` defaults to ``x.shape[-1]``.  The rotation
    multiplies by ``attention_factor``, as HF's cos/sin do.  ``seq_len=None`` means the
    largest position plus one (see the module notes).  Everything is validated before ``x``
    is touched.  The same bits as ``Rotary(...).apply_(x, positions, ...)``, which checks
    the configuration once instead of on every call.  M-RoPE (``scaling`` with
    ``mrope_section``): positions ``(3, ...)``; ``inverse=True``: the transpose rotation
    (see :meth:`Rotary.apply_`).  xPos: ``xpos_scale_base`` and ``xpos_center`` as in
    :func:`cos_sin`; ``downscale=False`` rotates queries, ``True`` keys (see
    :mod:`fastpe.rope._xpos`).
    """
    return _rotate(x, None, positions, head_dim=head_dim, layout=layout, rotary_dim=rotary_dim, base=base,
                   scaling=scaling, offset=offset, seq_len=seq_len,
                   max_position_embeddings=max_position_embeddings, backend=backend, inverse=inverse,
                   xpos=(xpos_scale_base, xpos_center), downscale=downscale)


def apply_qk_(
    q,
    k,
    positions=None,
    *,
    head_dim=None,
    layout: str = "neox",
    rotary_dim=None,
    base=None,
    scaling=None,
    offset=0,
    seq_len=None,
    max_position_embeddings=None,
    backend: str | None = None,
    inverse=False,
    xpos_scale_base=None,
    xpos_center="torchscale",
):
    """Rotate queries and keys in place in one pass; return ``(q, k)``.

    As :func:`apply_`, for ``q`` and ``k`` of the same layout that share positions (their
    head counts may differ, as with grouped-query attention).  Both are validated before
    either is touched.  xPos (``xpos_scale_base``, ``xpos_center`` as in :func:`cos_sin`):
    ``q`` scaled up, ``k`` down.
    """
    return _rotate(q, k, positions, head_dim=head_dim, layout=layout, rotary_dim=rotary_dim, base=base,
                   scaling=scaling, offset=offset, seq_len=seq_len,
                   max_position_embeddings=max_position_embeddings, backend=backend, qk_call=True,
                   inverse=inverse, xpos=(xpos_scale_base, xpos_center))


def rerotate_(
    k,
    delta,
    *,
    head_dim=None,
    layout: str = "neox",
    rotary_dim=None,
    base=None,
    scaling=None,
    seq_len=None,
    max_position_embeddings=None,
    backend: str | None = None,
):
    """Rotate cached keys in place by a position ``delta`` and return ``k`` (context
    shifting, attention sinks): keys rotated at ``p`` become those of ``p + delta``.  The
    arguments of :func:`apply_` and what :meth:`Rotary.rerotate_` takes and refuses; the
    attention factor is not applied again (the cached keys carry it)."""
    from .._validate import check_inplace

    check_inplace(k, "k")
    rotary = Rotary(_head_dim_of(k, "k", head_dim), base=base, rotary_dim=rotary_dim, scaling=scaling,
                    max_position_embeddings=max_position_embeddings, layout=layout)
    return rotary.rerotate_(k, delta, seq_len=seq_len, backend=backend)


def _head_dim_of(x, name: str, head_dim):
    """``head_dim``, or the last axis of the (checked) array ``x`` when it is None; a given
    one must be that axis."""
    from .._validate import check_int

    if head_dim is None:
        return x.shape[-1]
    if check_int("head_dim", head_dim) != x.shape[-1]:
        raise ValueError(f"head_dim={head_dim!r} does not match the last axis of {name} ({x.shape[-1]})")
    return head_dim


def _rotate(q, k, positions, *, head_dim, layout, rotary_dim, base, scaling, offset, seq_len,
            max_position_embeddings, backend, qk_call=False, inverse=False, xpos=(None, "torchscale"),
            downscale=False):
    from .._validate import check_inplace

    # the arrays first: head_dim is read from their shapes
    qk = qk_call
    name = "q" if qk else "x"
    check_inplace(q, name)
    if qk:
        check_inplace(k, "k")
    rotary = Rotary(_head_dim_of(q, name, head_dim), base=base, rotary_dim=rotary_dim, scaling=scaling,
                    max_position_embeddings=max_position_embeddings, layout=layout, xpos_scale_base=xpos[0],
                    xpos_center=xpos[1])
    if rotary._xpos is not None:
        rotary._xpos_rotate(q, k, positions, offset, seq_len, backend, inverse, downscale, qk=qk)
    else:
        if downscale is not False and not isinstance(downscale, (bool, np.bool_)):
            raise TypeError(f"downscale must be True or False, got {type(downscale).__name__} {downscale!r}")
        rotary._rotate(q, k, positions, offset, seq_len, backend, qk=qk, inverse=inverse)
    return (q, k) if qk else q


# ------------------------------------------------------------------- weight permutation

_LAYOUTS = ("neox", "gptj")


def _permutation(head_dim: int, rotary_dim: int, to: str) -> np.ndarray:
    """Row order within one head taking the other layout to ``to``."""
    half = rotary_dim // 2
    neox_to_gptj = np.empty(rotary_dim, dtype=np.intp)
    neox_to_gptj[0::2] = np.arange(half)  # gptj row 2i   <- neox row i
    neox_to_gptj[1::2] = np.arange(half) + half  # gptj row 2i+1 <- neox row i + half
    perm = neox_to_gptj if to == "gptj" else np.argsort(neox_to_gptj)
    return np.concatenate([perm, np.arange(rotary_dim, head_dim, dtype=np.intp)])


def permute_qk_weight(w, n_heads, *, head_dim=None, rotary_dim=None, to, out=None):
    """Reorder q/k projection rows between the NeoX and GPT-J RoPE layouts; return a copy
    (or ``out``, filled).

    NeoX (HF Llama) pairs dimension ``i`` of a head with ``i + rotary_dim/2``; GPT-J
    (Meta's original Llama, GPT-J) pairs ``2i`` with ``2i + 1``.  Reordering the output rows
    of ``W_q`` and ``W_k`` (and their biases) per head converts one into the other: rotating
    ``x @ W.T`` in the first layout and ``x @ permute_qk_weight(W, ...).T`` in the second
    give the same attention scores.  ``to="gptj"`` converts NeoX weights for a GPT-J-layout
    rotation; ``to="neox"`` is its inverse.

    Parameters
    ----------
    w:
        ``(n_heads * head_dim, in_features)`` weight (``torch.nn.Linear`` layout) or
        ``(n_heads * head_dim,)`` bias; a numpy array or a torch tensor (the result is of
        the same kind).  Never modified.
    n_heads:
        Heads in ``w`` (for ``W_k`` under grouped-query attention: the key/value heads).
    head_dim:
        Default ``w.shape[0] // n_heads``.
    rotary_dim:
        Rotated leading dimensions of each head (even); the rest keep their order.
        Default ``head_dim``.
    to:
        ``"gptj"`` or ``"neox"``: the layout the result is for.
    out:
        ``None``, or where the result goes: of ``w``'s kind (a numpy array for a numpy
        ``w``, a tensor on ``w``'s device for a tensor), shape and dtype, C-contiguous,
        writable and apart from ``w`` in memory; filled and returned.

    No ``backend``: it runs no kernel.
    """
    if not isinstance(to, str):
        raise TypeError(f"to must be a string, got {type(to).__name__} {to!r}")
    if to.strip().lower() not in _LAYOUTS:
        raise ValueError(f"to must be one of {', '.join(map(repr, _LAYOUTS))}, got {to!r}")
    to = to.strip().lower()
    shape = getattr(w, "shape", None)
    if shape is None or not hasattr(w, "__getitem__"):
        raise TypeError(f"w must be a numpy array or a torch tensor, got {type(w).__name__}")
    if len(shape) not in (1, 2):
        raise ValueError(f"w must be 1-D (a bias) or 2-D (a weight), got shape {tuple(shape)}")
    from .._validate import check_int

    n_heads = check_int("n_heads", n_heads, low=1)
    rows = int(shape[0])
    # head_dim and rotary_dim may be derived (from w.shape[0], from head_dim): errors about a
    # derived value name what it was derived from, since the caller passed no such argument
    derived = "head_dim = w.shape[0] // n_heads" if head_dim is None else "head_dim"
    if head_dim is None:
        if rows % n_heads:
            raise ValueError(f"w.shape[0] = {rows} is not a multiple of n_heads = {n_heads}")
        if rows < 2 * n_heads:
            raise ValueError(f"w.shape[0] = {rows} gives head_dim = {rows // n_heads} for n_heads = {n_heads}; "
                             "a head needs at least 2 rows")
        head_dim = rows // n_heads
    head_dim = check_int("head_dim", head_dim, low=2)
    if n_heads * head_dim != rows:
        raise ValueError(f"w.shape[0] must be n_heads * head_dim = {n_heads * head_dim}, got {rows}")
    if rotary_dim is None:
        if head_dim % 2:
            raise ValueError(f"{derived} = {head_dim} is odd, and rotary_dim defaults to it: "
                             "pass an even rotary_dim (the rotated part of each head)")
        rotary_dim = head_dim
    rotary_dim = check_int("rotary_dim", rotary_dim, low=2)
    if rotary_dim % 2:
        raise ValueError(f"rotary_dim must be even, got {rotary_dim}")
    if rotary_dim > head_dim:
        raise ValueError(f"rotary_dim must be <= head_dim = {head_dim}, got {rotary_dim}")

    is_numpy = isinstance(w, np.ndarray)
    if not is_numpy and type(w).__module__.split(".")[0] != "torch":
        raise TypeError(f"w must be a numpy array or a torch tensor, got {type(w).__name__}")
    if out is not None:
        (_check_numpy_out if is_numpy else _check_tensor_out)(out, w)
    within = _permutation(head_dim, rotary_dim, to)
    index = (np.arange(n_heads, dtype=np.intp)[:, None] * head_dim + within).reshape(-1)
    if is_numpy:
        if out is None:
            return w[index]  # fancy indexing copies
        np.take(w, index, axis=0, out=out)
        return out
    import torch

    index = torch.as_tensor(index, device=w.device)
    if out is None:
        return w[index]  # advanced indexing copies
    torch.index_select(w, 0, index, out=out)
    return out


def _check_numpy_out(out, w: np.ndarray) -> None:
    """``out`` for a numpy ``w``: as every fastpe ``out`` (of ``w``'s dtype and shape)."""
    from .._validate import check_no_overlap, check_out

    if isinstance(out, np.ndarray) and out.dtype != w.dtype:
        raise TypeError(f"out must have dtype {w.dtype} (w's), got {out.dtype}")
    check_out(out, w.shape, "out", w.dtype)
    check_no_overlap(out, w, "out", "w")


def _check_tensor_out(out, w) -> None:
    """``out`` for a tensor ``w``: a tensor of its shape, dtype and device, contiguous, not
    needing grad, apart from ``w`` in memory."""
    import torch

    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch tensor (as w is), got {type(out).__name__}")
    if out.dtype != w.dtype:
        raise TypeError(f"out must have dtype {w.dtype} (w's), got {out.dtype}")
    if out.device != w.device:
        raise ValueError(f"out must be on w's device {w.device}, got {out.device}")
    if tuple(out.shape) != tuple(w.shape):
        raise ValueError(f"out must have shape {tuple(w.shape)}, got {tuple(out.shape)}")
    if not out.is_contiguous():
        raise ValueError("out must be C-contiguous")
    if out.requires_grad:
        raise ValueError("out requires grad (it is written in place)")
    if out.numel() and w.numel():
        o0, w0 = out.data_ptr(), w.data_ptr()
        o1 = o0 + out.numel() * out.element_size()
        w1 = w0 + _tensor_extent(w)
        if o0 < w1 and w0 < o1:
            raise ValueError("out must not share memory with w")


def _tensor_extent(t) -> int:
    """Bytes from ``t``'s first element to one past its last (any strides >= 0)."""
    return (sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1) * t.element_size()
