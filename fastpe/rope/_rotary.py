"""``Rotary``: one resolved rotary embedding -- validated once, then called many times.

A :class:`Rotary` holds what a model's rotary module holds: the head size, the rotated
part, the layout, the rule (``rope_type``) with every parameter it depends on, and the
frequencies and attention factor the rule gives.  Everything is checked in the constructor
(the same checks as :func:`fastpe.rope.resolve`), the frequencies are computed then (for
dynamic NTK and LongRoPE, whose values depend on the sequence length, on first use of each
distinct value and kept), and a call checks only its own arguments -- the positions and
arrays -- before the kernels run.  The module functions of :mod:`fastpe.rope` build one and
call it, so both give the same bits.

Prepared calls.  A call whose arguments are plainly valid (exact float32 ndarrays,
C-contiguous, aligned and writable; integer ndarray positions or an ``int`` offset) is
checked in a few steps and goes straight to the compiled backend's rotation kernel, on the
table of cos/sin doubles of its positions (what the backend's ``rope_table`` writes) --
kept, per backend and frequencies, for calls of at most ``_TABLE_ROWS`` positions, so the
layers of a decoding step after the first read their position's table.  Small ``cos_sin``
calls in float32 or float64 come from the same tables (``float32(C)``: what the float32
kernel writes).  Anything else takes the full checks, which name what is wrong; both paths
give the same bits (``tests/rope/test_prepared.py``).
"""

from __future__ import annotations

import os

import numpy as np

from . import _scaling, _xpos
from .._validate import check_inplace, check_int, check_position_grid, check_positions
from ._scaling import RopeSpec, rope_layout

__all__ = ["Rotary", "cos_sin_out"]

_core = _backends = None


def _load_core():
    # imported on first use: `import fastpe.rope` stays light (no kernels loaded)
    global _core, _backends
    if _core is None:
        from . import _core as core
        from .. import _backends as backends

        _core, _backends = core, backends
    return _core


#: the parameters each rule depends on, as a Rotary's repr lists them (after head_dim,
#: rotary_dim and base); ``max_position_embeddings`` where the rule reads it
_SHOWN = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor", "max_position_embeddings"),
    "yarn": ("factor", "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate",
             "original_max_position_embeddings"),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "longrope": ("short_factor", "long_factor", "factor", "attention_factor", "short_mscale", "long_mscale",
                 "original_max_position_embeddings", "max_position_embeddings"),
    "proportional": ("partial_rotary_factor", "factor"),
}
#: the spec's fields, readable as a Rotary's attributes
_FIELDS = tuple(RopeSpec.__dataclass_fields__)
#: cached frequencies of the length-dependent rules, per Rotary: plenty for decoding (one
#: dynamic key per length past max_position_embeddings), bounded for a process that runs long
_MAX_CACHED = 64
#: cos/sin tables of doubles kept per Rotary (the rows of the positions of recent small
#: calls: a decoding step's position, read again by every layer); bounded like _MAX_CACHED
_MAX_TABLES = 64
#: positions a single missing position's table is computed for (it and the next ones): a
#: decoding loop's next steps then find theirs
_AHEAD = 16
#: calls with at most this many positions (table rows) keep their table: a decoding step of
#: up to 32 sequences (left-padded, a position each); at head_dim 128 at most 2 MiB kept
_TABLE_ROWS = 32
#: rotations of fewer pairs than this run the compiled backends' serial rotation kernel
#: directly on a kept table; larger ones take the backend's own walk (the numba backend
#: itself runs below this many values serially, the C backend in the calling thread)
_DIRECT_PAIRS = 1 << 14
#: rows of the largest table of doubles an M-RoPE, inverse or per-token re-rotation holds
#: at once (4 MiB at head_dim 128): longer calls rotate a run of positions at a time
_CHUNK_ROWS = 1 << 12
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_U32 = np.dtype(np.uint32)
_LIMIT = 1 << 32
#: the dtype arguments whose caches come from a kept table (others: the full path)
_KEPT_DTYPES = {None: _F32, "float32": _F32, np.float32: _F32, _F32: _F32,
                "float64": _F64, np.float64: _F64, _F64: _F64}


class Rotary:
    """A rotary position embedding, resolved and frozen.

    ``Rotary(head_dim, *, base=None, rotary_dim=None, scaling=None,
    max_position_embeddings=None, layout="neox")`` takes the arguments of
    :func:`fastpe.rope.resolve` (``scaling``: an HF ``rope_scaling`` / ``rope_parameters``
    dict, verbatim) and ``layout`` (``"neox"``, HF's halves; ``"gptj"``, adjacent pairs), and
    raises what ``resolve`` raises.  ``base=None`` is ``scaling['rope_theta']``, else 10000:
    a model's ``config.json`` keeps ``rope_theta`` beside its rope dict, so read a model's
    configuration with :meth:`from_config`, which takes every field from where HF does.

    Attributes: ``head_dim``, ``rotary_dim``, ``layout``, ``rope_type``, ``base`` and every
    parameter of the rule (``factor``, ``original_max_position_embeddings``,
    ``low_freq_factor``, ... -- ``None`` where the rule has none; ``spec`` is all of them, a
    :class:`~fastpe.rope.RopeSpec`), ``inv_freq`` (float64, read-only, ``rotary_dim / 2``)
    and ``attention_factor`` -- HF's values at initialisation; for ``dynamic`` and
    ``longrope``, whose values depend on the sequence length, :meth:`inv_freq_at` and
    :meth:`attention_factor_at` give them at any length (``length_dependent`` says which).

    Calls: :meth:`cos_sin`, :meth:`apply_`, :meth:`apply_qk_`, with positions ``(seq,)``
    or ``(batch, seq)``; each checks only its positions and arrays.  ``apply_`` and
    ``apply_qk_`` take ``inverse=True`` (the transpose rotation); :meth:`rerotate_` moves
    cached keys by a position delta.  Equal Rotaries (same spec and layout) compare and hash
    equal; a Rotary cannot be modified.

    M-RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): a rope dict with ``mrope_section`` (three pair
    counts, time, height and width, summing to ``rotary_dim / 2``; ``"type": "mrope"`` is the
    default rule with them) and, for Qwen3-VL's T H W T H W ... order, ``mrope_interleaved:
    true`` -- else consecutive sections.  Its calls take positions with a leading axis of 3,
    ``(3, seq)`` or ``(3, batch, seq)`` (:func:`fastpe.rope.mrope_positions`), and refuse
    others; a one-axis Rotary refuses 3-D positions.  Any rule composes with it (YaRN's
    attention factor multiplies every pair, as in HF and vLLM).

    xPos: ``xpos_scale_base`` (``None``, or a finite real ``> 0``, 512 in the published models)
    scales queries by ``zeta ** (n' / xpos_scale_base)`` and keys by its inverse, ``n'`` the
    position centred as ``xpos_center`` says (``"torchscale"``, ``"flash_attn"`` or an
    integer); ``cos_sin`` then returns four caches and ``apply_`` takes ``downscale=True`` for
    keys.  See :mod:`fastpe.rope._xpos` for every value, its bound and what it refuses.
    """

    __slots__ = ("_spec", "_layout", "_values", "_hash", "_cache", "_arrays", "_tables", "_neox", "_n_freq",
                 "_head_dim", "_axes", "_xpos")

    def __init__(self, head_dim, *, base=None, rotary_dim=None, scaling=None, max_position_embeddings=None,
                 layout: str = "neox", xpos_scale_base=None, xpos_center="torchscale"):
        spec = _scaling.resolve(head_dim, base=base, rotary_dim=rotary_dim, scaling=scaling,
                                max_position_embeddings=max_position_embeddings)
        layout = rope_layout(layout)
        self._set(spec, layout, _xpos_key(spec, xpos_scale_base, xpos_center))

    def _set(self, spec: RopeSpec, layout: str, xpos=None) -> None:
        put = object.__setattr__
        put(self, "_spec", spec)
        put(self, "_layout", layout)
        put(self, "_hash", hash((spec, layout)) if xpos is None else hash((spec, layout, xpos[:2])))
        # xPos: (scale base, centre rule, zeta), or None (see fastpe.rope._xpos)
        put(self, "_xpos", None if xpos is None else (*xpos, _xpos_zeta(spec.rotary_dim)))
        put(self, "_cache", {})
        put(self, "_arrays", {})
        put(self, "_tables", {})
        put(self, "_neox", layout == "neox")
        put(self, "_n_freq", spec.rotary_dim // 2)
        put(self, "_head_dim", spec.head_dim)
        # M-RoPE: the pairs of each axis (time, height, width), as index arrays
        axes = None
        if spec.mrope_section is not None:
            which = _scaling.mrope_axes(spec.mrope_section, spec.mrope_interleaved)
            axes = tuple(np.flatnonzero(which == a) for a in range(3))
        put(self, "_axes", axes)
        # the values every call of a rule that ignores the length uses: computed now
        put(self, "_values", None if _scaling.uses_seq_len(spec) else self._at_key(None))

    @classmethod
    def _from_spec(cls, spec: RopeSpec, layout: str, xpos=None) -> Rotary:
        """A Rotary of a resolved spec and a checked layout (no re-validation); ``xpos``:
        ``None`` or a checked ``(scale base, centre)``."""
        self = object.__new__(cls)
        self._set(spec, layout, xpos)
        return self

    @classmethod
    def from_config(cls, config, *, layer_type: str | None = None) -> Rotary:
        """The Rotary a model's configuration describes, read as HF transformers reads it.

        ``config``: the path of a ``config.json`` (``str`` or ``os.PathLike``), its dict, or
        a transformers ``PretrainedConfig`` (read through its ``to_dict()``).  Every field
        the model's rotary embedding reads is taken from where HF takes it -- top level or
        inside ``rope_scaling`` / ``rope_parameters``, legacy names included (``rope_theta``,
        ``rotary_emb_base``, ``partial_rotary_factor``, ``rotary_pct``, ``rotary_dim``,
        ``head_dim``, ``qk_rope_head_dim``, ``hidden_size`` / ``n_embd``,
        ``num_attention_heads`` / ``n_head``, ``max_position_embeddings`` / ``n_positions``,
        Phi-3's top-level ``original_max_position_embeddings``), with the architecture's
        defaults for what the file leaves out, and the layout the architecture rotates in
        (``gptj`` for adjacent pairs, as GPT-J, Llama 4 and DeepSeek-V3 do).  A config with
        per-layer rope parameters (Gemma 3, Gemma 4, ModernBERT: HF v5's nested
        ``rope_parameters``) needs ``layer_type``, one of its ``layer_types``.  Keys starting
        with ``_`` are ignored.  See :mod:`fastpe.rope._config` for each architecture.
        """
        from ._config import read_config

        spec, layout = read_config(config, layer_type)
        return cls._from_spec(spec, layout)

    # ------------------------------------------------------------------ what it holds

    @property
    def spec(self) -> RopeSpec:
        """Every parameter of the rule, as :func:`fastpe.rope.resolve` returns them."""
        return self._spec

    @property
    def layout(self) -> str:
        return self._layout

    @property
    def length_dependent(self) -> bool:
        """Whether the frequencies or attention factor depend on the sequence length
        (``dynamic``, ``longrope``)."""
        return self._values is None

    @property
    def inv_freq(self) -> np.ndarray:
        """Radians per position of each pair, float64 ``(rotary_dim / 2,)``, read-only:
        HF's values at initialisation (see :meth:`inv_freq_at`)."""
        return self.inv_freq_at(None)

    @property
    def attention_factor(self) -> float:
        """The factor cos and sin are multiplied by (HF's ``attention_scaling``), at
        initialisation (see :meth:`attention_factor_at`)."""
        return self._at(None)[1]

    def inv_freq_at(self, seq_len) -> np.ndarray:
        """``inv_freq`` for a sequence of ``seq_len`` positions (an int in ``[0, 2**32]``,
        or ``None``: HF's value at initialisation -- dynamic: no scaling; longrope:
        ``short_factor``).  Read-only; the same array for every length that gives it."""
        key = _scaling.length_key(self._spec, _scaling.check_seq_len(seq_len))
        arr = self._arrays.get(key)
        if arr is None:
            arr = np.array(self._at_key(key)[0], dtype=np.float64)
            arr.flags.writeable = False
            if len(self._arrays) >= _MAX_CACHED:
                self._arrays.clear()
            self._arrays[key] = arr
        return arr

    def attention_factor_at(self, seq_len) -> float:
        """``attention_factor`` for a sequence of ``seq_len`` positions (as
        :meth:`inv_freq_at`)."""
        return self._at(_scaling.check_seq_len(seq_len))[1]

    def _at(self, seq_len: int | None) -> tuple[tuple[float, ...], float]:
        """``(inv_freq as a tuple of floats, attention_factor)`` at a checked length."""
        values = self._values
        if values is not None:
            return values
        return self._at_key(_scaling.length_key(self._spec, seq_len))

    def _at_key(self, key) -> tuple[tuple[float, ...], float]:
        values = self._cache.get(key)
        if values is None:
            values = _scaling._compute(self._spec, key)
            if len(self._cache) >= _MAX_CACHED:
                self._cache.clear()
            self._cache[key] = values
        return values

    def __getattr__(self, name):
        # the spec's fields: head_dim, rotary_dim, rope_type, base, factor, ...
        if name in _FIELDS:
            return getattr(self._spec, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(_FIELDS))

    def __setattr__(self, name, value):
        raise AttributeError(f"Rotary is frozen: cannot set {name!r}")

    def __delattr__(self, name):
        raise AttributeError(f"Rotary is frozen: cannot delete {name!r}")

    def __eq__(self, other):
        if not isinstance(other, Rotary):
            return NotImplemented
        return self._layout == other._layout and self._spec == other._spec and self._xpos_pair() == other._xpos_pair()

    def __hash__(self):
        return self._hash

    def __reduce__(self):
        return (Rotary._from_spec, (self._spec, self._layout, self._xpos_pair()))

    def _xpos_pair(self):
        xpos = self._xpos
        return None if xpos is None else xpos[:2]

    @property
    def xpos_scale_base(self) -> float | None:
        """xPos's scale base (``None``: plain RoPE); see :mod:`fastpe.rope._xpos`."""
        return None if self._xpos is None else self._xpos[0]

    @property
    def xpos_center(self):
        """xPos's centring: ``"torchscale"``, ``"flash_attn"`` or a fixed integer centre
        (``None`` without xPos)."""
        return None if self._xpos is None else self._xpos[1]

    def __repr__(self):
        spec = self._spec
        parts = [spec.rope_type, f"head_dim={spec.head_dim}", f"rotary_dim={spec.rotary_dim}", f"base={spec.base!r}"]
        for name in _SHOWN[spec.rope_type]:
            value = getattr(spec, name, None)
            if value is None or (name == "max_position_embeddings" and not _reads_length(spec)):
                continue
            if isinstance(value, tuple):
                shown = ", ".join(f"{v:g}" for v in value[:3])
                value = f"[{shown}{', ...' if len(value) > 3 else ''}] ({len(value)} values)"
            else:
                value = repr(value)
            parts.append(f"{name}={value}")
        if spec.mrope_section is not None:
            parts.append(f"mrope_section={list(spec.mrope_section)}")
            if spec.mrope_interleaved:
                parts.append("mrope_interleaved=True")
        if self._xpos is not None:
            parts.append(f"xpos_scale_base={self._xpos[0]!r}, xpos_center={self._xpos[1]!r}")
        parts.append(f"layout={self._layout}")
        return f"Rotary({', '.join(parts)})"

    # ------------------------------------------------------------------------- calls

    def cos_sin(self, positions, *, dtype=None, out=None, seq_len=None, backend=None):
        """The cos and sin caches of ``positions``: ``(seq, rotary_dim)`` each for ``(seq,)``
        positions, ``(batch, seq, rotary_dim)`` for ``(batch, seq)``.

        Values, layout and dtypes as :func:`fastpe.rope.cos_sin`: ``attention_factor *
        cos(p * inv_freq[i])`` (and sin), float32 by default (within 1 ULP of the exact
        values for the float64 ``inv_freq``), float64, or float16 / bfloat16 correctly
        rounded; ``out`` a pair ``(cos, sin)`` of the output's shape to fill.  ``seq_len``
        (dynamic, longrope): ``None`` means the largest position plus one, as HF's forward
        pass does.

        M-RoPE (a Rotary with ``mrope_section``): positions ``(3, seq)`` or ``(3, batch,
        seq)`` -- time, height, width, as :func:`fastpe.rope.mrope_positions` gives them --
        and the caches HF's rotary module returns after its section selection: pair ``j``
        takes the value of its axis's position, bit for bit the column of that axis's own
        1-D caches.  ``seq_len=None``: the largest position of any axis plus one.
        """
        if self._axes is not None:
            return self._mrope_cos_sin(positions, dtype, out, seq_len, backend)
        if self._xpos is not None:
            return self._xpos_cos_sin(positions, dtype, out, seq_len, backend, grid=True)
        if out is None:
            caches = self._cos_sin_kept(positions, dtype, seq_len, backend)
            if caches is not None:
                return caches
        return self._cos_sin(positions, dtype, out, seq_len, backend, grid=True)

    def _cos_sin_kept(self, positions, dtype, seq_len, backend):
        """The caches of a few valid positions from their kept table (``float32(C)``,
        ``float32(S)`` -- what the float32 kernel writes -- or the doubles themselves), or
        ``None`` for anything else, checked and computed by :meth:`_cos_sin`."""
        dt = _KEPT_DTYPES.get(dtype) if dtype is None or type(dtype) in (str, type) or dtype is _F32 \
            or dtype is _F64 else None
        narrow = dt is None and type(dtype) is str and dtype in ("float16", "bfloat16")
        if dt is None and not narrow:
            return None
        found = _small_positions(positions, 2)
        if found is None:
            return None
        pos, hi = found
        rows = 1 if pos is None else pos.shape[0]
        if seq_len is not None and (type(seq_len) is not int or not 0 <= seq_len <= _LIMIT):
            return None
        found = _module(backend)
        if found is None:
            return None
        key = self._length_key(seq_len, hi)
        if narrow:
            return self._narrow_kept(found[0], positions, pos, hi, dtype, seq_len, backend, key)
        table = self._table(found[0], pos, hi, rows, key)
        n = self._n_freq
        shape = (*positions.shape, 2 * n)
        cos = np.empty(shape, dtype=dt)
        sin = np.empty(shape, dtype=dt)
        # one broadcast copy per cache: each frequency's value into its two columns
        if self._neox:
            cos.reshape(rows, 2, n)[...] = table[:, 0:1, :]
            sin.reshape(rows, 2, n)[...] = table[:, 1:2, :]
        else:
            cos.reshape(rows, n, 2)[...] = table[:, 0, :, None]
            sin.reshape(rows, n, 2)[...] = table[:, 1, :, None]
        return cos, sin

    def _narrow_kept(self, module, positions, pos, p, dtype, seq_len, backend, key):
        """float16 / bfloat16 caches of one position: its rows of the full path's caches
        (correctly rounded, each value decided alone), computed for it and the next
        :data:`_AHEAD` positions in one call at its length and kept, per dtype; ``None`` for
        more positions (the full path)."""
        if pos is not None:
            return None
        tables = self._tables
        tkey = (module, key, p, dtype)
        pair = tables.get(tkey)
        if pair is None:
            ahead = 1 if self._spec.rope_type == "dynamic" else min(_AHEAD, _LIMIT - p)
            run = np.arange(p, p + ahead, dtype=np.uint64).astype(np.uint32)
            length = p + 1 if seq_len is None else seq_len  # the call's frequencies for every row
            cos, sin = self._cos_sin(run, dtype, None, length, backend, grid=False)
            if len(tables) + ahead > _MAX_TABLES:
                tables.clear()
            for i in range(ahead - 1, -1, -1):
                tables[(module, key, p + i, dtype)] = pair = (cos[i], sin[i])
        shape = (*positions.shape, 2 * self._n_freq)
        return pair[0].reshape(shape).copy(), pair[1].reshape(shape).copy()

    def _length_key(self, seq_len, hi: int):
        """The frequencies' key of a call (``None`` for the rules that ignore the length)."""
        if self._values is not None:
            return None
        return _scaling.length_key(self._spec, hi + 1 if seq_len is None else seq_len)

    def _table(self, module, pos, offset, rows: int, key) -> np.ndarray:
        """The ``(rows, 2, n_freq)`` doubles of checked positions -- ``pos`` (uint32), or
        ``offset, offset + 1, ...`` -- for the frequencies of ``key``, as ``module``'s
        ``rope_table`` writes them: kept for small calls (per backend, so that the backends
        are never compared through one table).  A single position missing computes the next
        :data:`_AHEAD` with it, each kept as its own row, so that a decoding loop's next
        steps find theirs (not for dynamic NTK, whose frequencies move with every length)."""
        tables = self._tables
        if rows <= _TABLE_ROWS:
            if rows == 1:  # one position, given or as an offset
                if pos is not None:
                    offset = int(pos[0])
                tkey = (module, key, offset)
            elif pos is None:
                tkey = (module, key, offset, rows)
            else:
                tkey = (module, key, pos.tobytes())
            table = tables.get(tkey)
            if table is not None:
                return table
        else:
            tkey = None
        ahead = 1
        if rows == 1 and self._spec.rope_type != "dynamic":
            ahead = min(_AHEAD, _LIMIT - offset)
        if pos is None or ahead > 1:
            pos = np.arange(offset, offset + max(rows, ahead), dtype=np.uint64).astype(np.uint32)
        freqs, af = self._at_key(key) if key is not None else self._values
        table = np.empty((pos.shape[0], 2, self._n_freq), dtype=np.float64)
        module.rope_table(positions=pos, inv_freq=freqs, attention_factor=af, out=table)
        if tkey is not None:
            if len(tables) + ahead > _MAX_TABLES:
                tables.clear()
            if ahead > 1:
                for i in range(1, ahead):
                    tables[(module, key, offset + i)] = table[i:i + 1]
                table = table[:1]
            tables[tkey] = table
        return table

    def _cos_sin(self, positions, dtype, out, seq_len, backend, *, grid: bool):
        from .. import _dtypes

        core = _load_core()
        if dtype is not None:
            _dtypes.resolve(dtype)  # a bad dtype is named before the positions
        width = self._spec.rotary_dim
        arr = _grid(positions) if grid else None
        if grid:
            _refuse_3d(positions)
        if arr is not None:  # (batch, seq): one flat run, the caches shaped (batch, seq, width)
            pos = check_position_grid(positions, (arr.shape,)).reshape(-1)
            shape = (*arr.shape, width)
        else:
            pos = check_positions(positions)
            shape = (pos.shape[0], width)
        out_cos, out_sin = cos_sin_out(out, shape, dtype, positions, pos)
        seq_len = _scaling.check_seq_len(seq_len)
        if seq_len is None and self._values is None:
            seq_len = int(pos.max()) + 1 if pos.size else 0
        freqs, af = self._at(seq_len)
        _, module = _backends.resolve(backend)
        core.fill_caches(module, pos, freqs, af, self._layout, out_cos.reshape(-1, width), out_sin.reshape(-1, width))
        return (out_cos, out_sin) if out is None else out

    def apply_(self, x, positions=None, *, offset=0, seq_len=None, backend=None, inverse=False, downscale=False):
        """Rotate ``x`` in place and return it, as :func:`fastpe.rope.apply_` does:
        float32 ``(tokens, heads, head_dim)`` or ``(batch, heads, seq, head_dim)``, C-contiguous
        and writable, its last axis ``head_dim``; positions ``(tokens,)``, ``(seq,)`` or
        ``(batch, seq)``, or ``None`` for ``offset, offset + 1, ...`` (a non-zero ``offset``
        beside ``positions`` is a ValueError).  ``seq_len=None``: the largest position plus
        one.  Everything is checked before ``x`` is touched.

        M-RoPE: positions ``(3, tokens)``, ``(3, seq)`` or ``(3, batch, seq)`` (or ``None``:
        the offset's run on all three axes, text only).  ``inverse=True`` rotates by the
        negated angles -- ``x1 * C + x2 * S``, ``x2 * C - x1 * S`` with the same ``C``,
        ``S`` (the attention factor included): the transpose of the rotation, its backward
        pass, flash-attention's ``conjugate`` -- which undoes it where the attention factor
        is 1 (else it leaves ``attention_factor**2`` times the input).  The inverse and
        M-RoPE rotate on the doubles of the backend's ``rope_table`` (the sine negated for
        the inverse: exact), in the compiled rotation kernel's arithmetic: within 1 ULP of
        the exact rotation, as every rotation is.

        xPos (a Rotary with ``xpos_scale_base``): ``downscale=False`` rotates queries (times
        ``zeta ** (n' / sb)``), ``downscale=True`` keys (its inverse), as torchscale's
        ``XPOS(x, downscale=...)``; see :mod:`fastpe.rope._xpos`.  Without xPos, ``downscale``
        changes nothing (the keys' scale is 1)."""
        if self._xpos is not None:
            if not self._xpos_direct(x, None, positions, offset, seq_len, backend, inverse, downscale):
                self._xpos_rotate(x, None, positions, offset, seq_len, backend, inverse, downscale)
            return x
        if downscale is not False:
            _check_flag("downscale", downscale)
        if inverse is False and self._axes is None \
                and self._rotate_direct(x, None, positions, offset, seq_len, backend, False):
            return x
        if self._axes is not None and self._mrope_direct(x, None, positions, offset, seq_len, backend, inverse):
            return x
        return self._rotate(x, None, positions, offset, seq_len, backend, direct=False, inverse=inverse)

    def apply_qk_(self, q, k, positions=None, *, offset=0, seq_len=None, backend=None, inverse=False):
        """Rotate queries and keys in place in one pass and return ``(q, k)``, as
        :func:`fastpe.rope.apply_qk_` does (their head counts may differ); M-RoPE positions
        and ``inverse`` as :meth:`apply_`; xPos scales ``q`` up and ``k`` down (see
        :mod:`fastpe.rope._xpos`)."""
        if self._xpos is not None:
            if not self._xpos_direct(q, k, positions, offset, seq_len, backend, inverse, False):
                self._xpos_rotate(q, k, positions, offset, seq_len, backend, inverse, False, qk=True)
            return q, k
        if self._axes is not None:
            if not self._mrope_direct(q, k, positions, offset, seq_len, backend, inverse):
                self._rotate(q, k, positions, offset, seq_len, backend, qk=True, direct=False, inverse=inverse)
        elif inverse is not False or not self._rotate_direct(q, k, positions, offset, seq_len, backend, True):
            self._rotate(q, k, positions, offset, seq_len, backend, qk=True, direct=False, inverse=inverse)
        return q, k

    def _plain_pair(self, q, k):
        """``(ndim, n_batch, n_seq)`` of a plainly valid ``q`` (and ``k`` unless None) for the
        M-RoPE and xPos direct paths: exact float32 ndarrays of this head size, 3-D or 4-D,
        C-contiguous, aligned, writable, ``k`` of ``q``'s geometry and apart from it in memory;
        ``None`` for anything else.  (:meth:`_rotate_direct` keeps its own copy inline: it is
        the decoding step's path.)"""
        if type(q) is not np.ndarray or q.dtype is not _F32:
            return None
        shape = q.shape
        nd = len(shape)
        if nd == 4:
            n_batch, n_seq, d = shape[0], shape[2], shape[3]
        elif nd == 3:
            n_batch, n_seq, d = 1, shape[0], shape[2]
        else:
            return None
        flags = q.flags
        if d != self._head_dim or not (flags.c_contiguous and flags.writeable and flags.aligned) or not n_seq:
            return None
        if k is not None:
            if type(k) is not np.ndarray or k.dtype is not _F32:
                return None
            ks = k.shape
            if len(ks) != nd or ks[-1] != d or ks[0] != shape[0] or (nd == 4 and ks[2] != n_seq):
                return None
            flags = k.flags
            if not (flags.c_contiguous and flags.writeable and flags.aligned) or np.may_share_memory(q, k):
                return None
        return nd, n_batch, n_seq

    def _mrope_direct(self, q, k, positions, offset, seq_len, backend, inverse) -> bool:
        """An M-RoPE rotation of a few plainly valid positions (an integer ndarray ``(3,
        seq)`` or ``(3, batch, seq)``, at most ``_TABLE_ROWS`` rows), straight to the kernel
        on its kept table; False, having touched nothing, for anything else (the full path
        checks it).  The checks of :meth:`_rotate_direct`, for three axes."""
        if type(inverse) is not bool or type(positions) is not np.ndarray or type(offset) is not int or offset:
            return False
        found = self._plain_pair(q, k)
        if found is None:
            return False
        nd, n_batch, n_seq = found
        pshape = positions.shape
        if pshape == (3, n_seq):
            stride = 0
        elif nd == 4 and pshape == (3, n_batch, n_seq):
            stride = n_seq
        else:
            return False
        if positions.size > 3 * _TABLE_ROWS or positions.dtype.kind not in "iu":
            return False
        lo, hi = int(positions.min()), int(positions.max())
        if lo < 0 or hi >= _LIMIT or np.may_share_memory(q, positions) \
                or (k is not None and np.may_share_memory(k, positions)):
            return False
        if seq_len is not None and (type(seq_len) is not int or not 0 <= seq_len <= _LIMIT):
            return False
        found = _module(backend)
        if found is None or found[1] is None:
            return False
        module, kernel = found
        pos = positions.astype(_U32, order="C").reshape(3, -1)
        key = self._length_key(seq_len, hi)
        tables = self._tables
        tkey = ("table", module, key, inverse, 3, pos.tobytes())
        table = tables.get(tkey)
        if table is None:
            freqs, af = self._values if key is None else self._at_key(key)
            table = self._signed_table(module, pos, None, freqs, af, inverse)
            if len(tables) >= _MAX_TABLES:
                tables.clear()
            tables[tkey] = table
        _rotate_on_table(module, backend, q, k, table, stride, self._neox, kernel)
        return True

    def _rotate(self, q, k, positions, offset, seq_len, backend, *, qk: bool = False, direct: bool = True,
                inverse=False):
        if not isinstance(inverse, (bool, np.bool_)):
            raise TypeError(f"inverse must be True or False, got {type(inverse).__name__} {inverse!r}")
        if inverse or self._axes is not None:
            return self._rotate_table(q, k if qk else None, positions, offset, seq_len, backend, qk, bool(inverse))
        if direct and self._rotate_direct(q, k if qk else None, positions, offset, seq_len, backend, qk):
            return q
        core, name, offset, seq_len = self._check_rotation(q, k, positions, offset, seq_len, qk)
        _refuse_3d(positions)
        pos = core.rotation_positions(q, positions, offset)
        if seq_len is None and self._values is None:
            seq_len = int(pos.max()) + 1 if pos.size else 0
        freqs, af = self._at(seq_len)
        core._check_apart(((q, name),) if k is None else ((q, name), (k, "k")), positions, pos, None)
        _, module = _backends.resolve(backend)
        core.rotate(module, q, k, pos, freqs, af, self._layout)
        return q

    def _check_rotation(self, q, k, positions, offset, seq_len, qk: bool):
        """The checks every full-path rotation makes before anything is touched: ``q`` (and
        ``k``) writable in place and of this head size, ``positions`` or ``offset`` (not
        both), ``seq_len``.  Returns ``(core, name of q, offset or None, seq_len)``."""
        core = _load_core()
        name = "q" if qk else "x"
        check_inplace(q, name)
        if qk:
            check_inplace(k, "k")
            core.check_qk(q, k)
        head_dim = self._spec.head_dim
        if q.shape[-1] != head_dim:
            raise ValueError(f"{name} must have head_dim = {head_dim} values in its last axis, got shape {q.shape}")
        if positions is None:
            check_int("offset", offset, low=0)  # None too: offset is an int, 0 by default
        else:
            if check_int("offset", offset, low=0):
                raise ValueError(f"give positions or offset, not both (got positions and offset={offset!r})")
            offset = None
        return core, name, offset, _scaling.check_seq_len(seq_len)

    # ------------------------------------------------- M-RoPE, inverse, re-rotation

    def _mrope_cos_sin(self, positions, dtype, out, seq_len, backend):
        from .. import _dtypes

        if dtype is not None:
            _dtypes.resolve(dtype)
        width = self._spec.rotary_dim
        pos3, grid = _mrope_positions(positions, None)
        out_cos, out_sin = cos_sin_out(out, (*grid, width), dtype, positions, pos3)
        seq_len = _scaling.check_seq_len(seq_len)
        if seq_len is None and self._values is None:
            seq_len = int(pos3.max()) + 1 if pos3.size else 0
        flat_cos, flat_sin = out_cos.reshape(-1, width), out_sin.reshape(-1, width)
        if not pos3.shape[1]:
            return (out_cos, out_sin) if out is None else out
        freqs, af = self._at(seq_len)
        core = _load_core()
        _, module = _backends.resolve(backend)
        n = self._n_freq
        for axis, pairs in enumerate(self._axes):
            m = pairs.size
            if not m:
                continue
            # that axis's caches for its own pairs: each value is its frequency's alone (the
            # plan is per frequency), so these are the columns of the axis's 1-D caches
            sub_cos = np.empty((pos3.shape[1], 2 * m), dtype=flat_cos.dtype)
            sub_sin = np.empty_like(sub_cos)
            core.fill_caches(module, np.ascontiguousarray(pos3[axis]), tuple(freqs[j] for j in pairs), af,
                             self._layout, sub_cos, sub_sin)
            lo = int(pairs[0])
            block = int(pairs[-1]) + 1 - lo == m
            for dst, src in ((flat_cos, sub_cos), (flat_sin, sub_sin)):
                if self._neox and block:
                    dst[:, lo:lo + m] = src[:, :m]
                    dst[:, n + lo:n + lo + m] = src[:, m:]
                elif block:
                    dst[:, 2 * lo:2 * (lo + m)] = src
                elif self._neox:
                    dst[:, pairs] = src[:, :m]
                    dst[:, pairs + n] = src[:, m:]
                else:
                    dst[:, 2 * pairs] = src[:, 0::2]
                    dst[:, 2 * pairs + 1] = src[:, 1::2]
        return (out_cos, out_sin) if out is None else out

    def _columns(self):
        """The cache columns of each M-RoPE axis (both of each of its pairs)."""
        n = self._n_freq
        if self._neox:
            return tuple(np.concatenate((j, j + n)) for j in self._axes)
        return tuple(np.concatenate((2 * j, 2 * j + 1)) for j in self._axes)

    def _rotate_table(self, q, k, positions, offset, seq_len, backend, qk: bool, inverse: bool):
        """M-RoPE and inverse rotations: every argument checked, then the table of doubles
        of the positions (each pair from its axis's row; the sine negated for the inverse)
        rotates ``q`` (and ``k``)."""
        core, name, offset, seq_len = self._check_rotation(q, k, positions, offset, seq_len, qk)
        if self._axes is not None:
            if positions is None:
                run = core.rotation_positions(q, None, offset)
                pos = np.broadcast_to(run, (3, run.shape[0]))
                stride = 0
            else:
                pos, stride = self._mrope_rotation_positions(q, positions)
        else:
            _refuse_3d(positions)
            pos = core.rotation_positions(q, positions, offset)
            stride = pos.shape[1] if pos.ndim == 2 else 0
            pos = pos.reshape(1, -1)
        if seq_len is None and self._values is None:
            seq_len = int(pos.max()) + 1 if pos.size else 0
        freqs, af = self._at(seq_len)
        core._check_apart(((q, name),) if k is None else ((q, name), (k, "k")), positions, pos, None)
        _, module = _backends.resolve(backend)
        if not pos.size:
            return q
        rows = pos.shape[1]
        if rows <= _TABLE_ROWS:  # a decoding step's: kept, as the one-axis tables are
            tables = self._tables
            tkey = ("table", module, self._length_key(seq_len, 0), inverse, pos.shape[0], pos.tobytes())
            table = tables.get(tkey)
            if table is None:
                table = self._signed_table(module, pos, None, freqs, af, inverse)
                if len(tables) >= _MAX_TABLES:
                    tables.clear()
                tables[tkey] = table
            _rotate_on_table(module, backend, q, k, table, stride, self._neox)
        else:
            self._rotate_chunks(module, backend, q, k, pos, None, freqs, af, inverse, stride)
        return q

    def _rotate_chunks(self, module, backend, q, k, mag, neg, freqs, af, inverse: bool, stride: int) -> None:
        """Rotate by the tables of ``mag`` (``(1 or 3, rows)``: ``rows`` the sequence, or
        ``batch * seq`` where ``stride``) a run of sequence indices at a time, each table
        at most :data:`_CHUNK_ROWS` rows: memory stays bounded whatever the length."""
        n_seq = q.shape[0] if q.ndim == 3 else q.shape[2]
        n_batch = mag.shape[1] // n_seq if stride else 1
        step = max(1, _CHUNK_ROWS // n_batch)
        m = mag.shape[0]
        for s0 in range(0, n_seq, step):
            s1 = min(n_seq, s0 + step)
            if stride:  # each batch's rows of the run, batch after batch
                sub = mag.reshape(m, n_batch, n_seq)[:, :, s0:s1].reshape(m, -1)
                sub_neg = None if neg is None else neg.reshape(m, n_batch, n_seq)[:, :, s0:s1].reshape(m, -1)
            else:
                sub, sub_neg = mag[:, s0:s1], None if neg is None else neg[:, s0:s1]
            table = self._signed_table(module, sub, sub_neg, freqs, af, inverse)
            _rotate_on_table(module, backend, q, k, table, s1 - s0 if stride else 0, self._neox, s0=s0, s1=s1)

    def _mrope_rotation_positions(self, q, positions):
        """Checked M-RoPE positions of a rotation of ``q``: ``(3, rows)`` uint32 and the
        table's batch stride (``seq`` for ``(3, batch, seq)`` positions, else 0)."""
        n_seq = q.shape[0] if q.ndim == 3 else q.shape[2]
        shapes = ((3, n_seq),) if q.ndim == 3 else ((3, n_seq), (3, q.shape[0], n_seq))
        pos, grid = _mrope_positions(positions, shapes)
        return pos, (n_seq if len(grid) == 2 else 0)

    def _signed_table(self, module, mag, neg, freqs, af, inverse: bool) -> np.ndarray:
        """``(rows, 2, n_freq)`` doubles: ``af * cos``, ``af * sin`` of ``mag`` (uint32,
        ``(1, rows)`` for one axis or ``(3, rows)``, each pair from its axis's row), the sine
        negated where ``neg`` (bool, as ``mag``) and everywhere for ``inverse``.  Negation
        is exact: the table of ``-p`` is that of ``p`` with ``-S``."""
        n = self._n_freq
        rows = mag.shape[1]
        axes = self._axes if mag.shape[0] == 3 else (None,)
        table = np.empty((rows, 2, n), dtype=np.float64)
        for axis, cols in enumerate(axes):
            if cols is None:  # one axis: every pair
                part, f = table, freqs
            elif not cols.size:
                continue
            else:  # each frequency's doubles are its own (the plan is per frequency): the axis's alone
                part, f = np.empty((rows, 2, cols.size), dtype=np.float64), tuple(freqs[j] for j in cols)
            module.rope_table(positions=np.ascontiguousarray(mag[axis], dtype=_U32), inv_freq=f,
                              attention_factor=af, out=part)
            if neg is not None:
                sin = part[:, 1]
                sin[neg[axis]] = -sin[neg[axis]]
            if cols is not None:
                lo, hi = int(cols[0]), int(cols[-1]) + 1
                if hi - lo == cols.size:  # a section: one block
                    table[:, :, lo:hi] = part
                else:
                    table[:, :, cols] = part
        if inverse:
            np.negative(table[:, 1], out=table[:, 1])
        return table

    # ------------------------------------------------------------------------- xPos

    def _xpos_length(self, pos: np.ndarray, seq_len):
        """``(total length, frequencies, attention factor, centre)`` of an xPos call: the
        length ``seq_len``, else the largest position plus one."""
        length = seq_len if seq_len is not None else (int(pos.max()) + 1 if pos.size else 0)
        freqs, af = self._at(length)
        return length, freqs, af, _xpos.center_at(self._xpos[1], length)

    def _xpos_tables(self, module, pos, length, freqs, af, center, inverse: bool):
        """The q and k tables of flat uint32 ``pos``: kept for a call of at most
        :data:`_TABLE_ROWS` positions (a decoding step's, read again by every layer)."""
        if pos.shape[0] > _TABLE_ROWS:
            return _xpos.tables(module, pos, freqs, af, self._xpos, center, inverse)
        key = None if self._values is not None else _scaling.length_key(self._spec, length)
        tables = self._tables
        tkey = ("xpos", module, key, center, inverse, pos.tobytes())
        pair = tables.get(tkey)
        if pair is None:
            pair = _xpos.tables(module, pos, freqs, af, self._xpos, center, inverse)
            if len(tables) >= _MAX_TABLES:
                tables.clear()
            tables[tkey] = pair
        return pair

    def _xpos_direct(self, q, k, positions, offset, seq_len, backend, inverse, downscale) -> bool:
        """An xPos rotation of at most :data:`_TABLE_ROWS` plainly valid positions (the
        checks of :meth:`_rotate_direct`: exact float32 in-place arrays apart in memory, an
        ``int`` offset or an integer ndarray of positions, a compiled backend), straight to
        the kernel on the kept tables; False, having touched nothing, for anything else."""
        if type(inverse) is not bool or type(downscale) is not bool or type(offset) is not int:
            return False
        found = self._plain_pair(q, k)
        if found is None:
            return False
        nd, n_batch, n_seq = found
        if positions is None:
            if offset < 0 or offset + n_seq > _LIMIT or n_seq > _TABLE_ROWS:
                return False
            pos, hi, stride = None, offset + n_seq - 1, 0
        else:
            if offset or type(positions) is not np.ndarray:
                return False
            pshape = positions.shape
            if pshape == (n_seq,):
                stride = 0
            elif nd == 4 and pshape == (n_batch, n_seq):
                stride = n_seq
            else:
                return False
            found = _small_positions(positions, 2)
            if found is None or np.may_share_memory(q, positions) \
                    or (k is not None and np.may_share_memory(k, positions)):
                return False
            pos, hi = found
            if pos is None:  # one position: a run of one
                offset = hi
        if seq_len is not None and (type(seq_len) is not int or not 0 <= seq_len <= _LIMIT):
            return False
        found = _module(backend)
        if found is None or found[1] is None:
            return False
        module, kernel = found
        length = hi + 1 if seq_len is None else seq_len
        key = None if self._values is not None else _scaling.length_key(self._spec, length)
        center = _xpos.center_at(self._xpos[1], length)
        tables = self._tables
        tkey = ("xpos", module, key, center, inverse, offset, n_seq) if pos is None else \
            ("xpos", module, key, center, inverse, pos.tobytes())
        pair = tables.get(tkey)
        if pair is None:
            if pos is None:
                pos = np.arange(offset, offset + n_seq, dtype=np.uint64).astype(_U32)
            freqs, af = self._values if key is None else self._at_key(key)
            pair = _xpos.tables(module, pos, freqs, af, self._xpos, center, inverse)
            if len(tables) >= _MAX_TABLES:
                tables.clear()
            tables[tkey] = pair
        neox = self._neox
        first = pair[1 if downscale else 0]
        hq, d = q.shape[1], self._head_dim
        if n_batch * n_seq * (hq + (0 if k is None else k.shape[1])) * self._n_freq >= _DIRECT_PAIRS:
            _rotate_on_table(module, backend, q, None, first, stride, neox, kernel)
            if k is not None:
                _rotate_on_table(module, backend, k, None, pair[1], stride, neox, kernel)
            return True
        # the serial kernel on each array and its table (the arguments _rotate_direct passes)
        if nd == 4:
            sd = n_seq * d
            kernel(q.reshape(-1), hq, hq * sd, sd, d, _NO_K, 0, 0, 0, 0, n_batch, 0, n_seq, first, stride, neox)
            if k is not None:
                hk = k.shape[1]
                kernel(k.reshape(-1), hk, hk * sd, sd, d, _NO_K, 0, 0, 0, 0, n_batch, 0, n_seq, pair[1], stride,
                       neox)
        else:
            kernel(q.reshape(-1), hq, 0, d, hq * d, _NO_K, 0, 0, 0, 0, 1, 0, n_seq, first, 0, neox)
            if k is not None:
                hk = k.shape[1]
                kernel(k.reshape(-1), hk, 0, d, hk * d, _NO_K, 0, 0, 0, 0, 1, 0, n_seq, pair[1], 0, neox)
        return True

    def _xpos_rotate(self, q, k, positions, offset, seq_len, backend, inverse, downscale, *, qk: bool = False):
        """An xPos rotation: every argument checked, then the q and k tables of the positions
        (a run of at most :data:`_CHUNK_ROWS` rows at a time) rotate ``q`` (by the keys'
        table when ``downscale``) and ``k``."""
        _check_flag("inverse", inverse)
        _check_flag("downscale", downscale)
        core, name, offset, seq_len = self._check_rotation(q, k, positions, offset, seq_len, qk)
        _refuse_3d(positions)
        pos = core.rotation_positions(q, positions, offset)
        length, freqs, af, center = self._xpos_length(pos, seq_len)
        core._check_apart(((q, name),) if k is None else ((q, name), (k, "k")), positions, pos, None)
        _, module = _backends.resolve(backend)
        if not pos.size:
            return q
        inverse, neox = bool(inverse), self._neox
        first = 1 if downscale else 0  # the table q (or x) takes
        n_seq = q.shape[0] if q.ndim == 3 else q.shape[2]
        if pos.ndim == 2:  # (batch, seq): a row per (batch, index)
            n_rows = pos.shape[0]
            step = max(1, _CHUNK_ROWS // n_rows)
        else:
            n_rows, step = 0, _CHUNK_ROWS
        for s0 in range(0, n_seq, step):
            s1 = min(n_seq, s0 + step)
            sub = np.ascontiguousarray(pos[:, s0:s1] if n_rows else pos[s0:s1]).reshape(-1)
            pair = self._xpos_tables(module, sub, length, freqs, af, center, inverse)
            stride = s1 - s0 if n_rows else 0
            _rotate_on_table(module, backend, q, None, pair[first], stride, neox, s0=s0, s1=s1)
            if k is not None:
                _rotate_on_table(module, backend, k, None, pair[1], stride, neox, s0=s0, s1=s1)
        return q

    def _xpos_cos_sin(self, positions, dtype, out, seq_len, backend, *, grid: bool):
        """The four xPos caches (:class:`~fastpe.rope._xpos.XposCosSin`), float32 or float64:
        the tables of a block of rows at a time, each spread into its two caches."""
        from .. import _dtypes

        core = _load_core()
        if dtype is not None:
            _xpos_dtype(_dtypes.resolve(dtype))
        width = self._spec.rotary_dim
        arr = _grid(positions) if grid else None
        if grid:
            _refuse_3d(positions)
        if arr is not None:
            pos = check_position_grid(positions, (arr.shape,)).reshape(-1)
            shape = (*arr.shape, width)
        else:
            pos = check_positions(positions)
            shape = (pos.shape[0], width)
        outs = _xpos_out(out, shape, dtype, positions, pos)
        length, freqs, af, center = self._xpos_length(pos, _scaling.check_seq_len(seq_len))
        _, module = _backends.resolve(backend)
        flat = [o.reshape(-1, width) for o in outs]
        n = pos.shape[0]
        step = max(1, core._F64_BLOCK_BYTES // (16 * self._n_freq))
        for r0 in range(0, n, step):
            r1 = min(n, r0 + step)
            tq, tk = _xpos.tables(module, pos[r0:r1], freqs, af, self._xpos, center, False)
            core._spread(tq, flat[0][r0:r1], flat[1][r0:r1], self._layout)
            core._spread(tk, flat[2][r0:r1], flat[3][r0:r1], self._layout)
        return _xpos.XposCosSin(*outs) if out is None else out

    def rerotate_(self, k, delta, *, seq_len=None, backend=None):
        """Rotate cached keys in place by a position delta and return ``k``: keys rotated
        at ``p`` become the keys of ``p + delta`` (``R(p + d) = R(d) R(p)``), for context
        shifting and attention sinks, without recomputing them.

        ``k``: float32 ``(tokens, heads, head_dim)`` or ``(batch, heads, seq, head_dim)``,
        C-contiguous, writable.  ``delta``: an integer in ``(-2**32, 2**32)``, or an integer
        array -- ``(tokens,)`` for ``(tokens, ...)`` keys; ``(batch,)`` or ``(batch, seq)``
        for ``(batch, ...)`` keys; M-RoPE: a scalar (every axis), a 3-vector ``(3,)`` or
        ``(3, tokens)``, ``(3, batch)``, ``(3, batch, seq)``.  A negative delta is the
        inverse rotation by ``|delta|`` (exact: the cos/sin of ``|delta|``, the sine
        negated).  The attention factor is *not* applied again: the cached keys already
        carry it, so ``R(d)`` is the bare rotation.  Rules whose frequencies depend on the
        length are refused: dynamic NTK always, LongRoPE at a ``seq_len`` past its original
        length (``seq_len=None``: its short factors, HF's values at initialisation)."""
        core = _load_core()
        check_inplace(k, "k")
        head_dim = self._spec.head_dim
        if k.shape[-1] != head_dim:
            raise ValueError(f"k must have head_dim = {head_dim} values in its last axis, got shape {k.shape}")
        if self._xpos is not None:
            raise ValueError("rerotate_ cannot move xPos keys: their scale zeta ** (-n / scale_base) depends on the "
                             "position too, so a new position is not a rotation of the old one; rotate the keys "
                             "again from their unrotated values")
        spec = self._spec
        if spec.rope_type == "dynamic":
            raise ValueError("rerotate_ needs frequencies that do not depend on the length: rope_type 'dynamic' "
                             "changes them with every length past max_position_embeddings; rotate the keys again "
                             "from their unrotated values")
        seq_len = _scaling.check_seq_len(seq_len)
        if self._values is None:
            key = _scaling.length_key(spec, seq_len)
            if key != _scaling.length_key(spec, None):
                raise ValueError(f"rerotate_ needs frequencies that do not depend on the length: rope_type "
                                 f"{spec.rope_type!r} at seq_len={seq_len} takes other frequencies than the "
                                 "keys were rotated with (past its original length); rotate them again from their "
                                 "unrotated values")
            freqs = self._at_key(key)[0]
        else:
            freqs = self._values[0]
        mag, neg, kind = _deltas(k, delta, self._axes is not None)
        core._check_apart(((k, "k"),), delta, mag, None)
        _, module = _backends.resolve(backend)
        if not k.size or not mag.size:
            return k
        if kind == "token":
            self._rotate_chunks(module, backend, k, None, mag, neg, freqs, 1.0, False, int(k.ndim == 4))
        else:  # one row of the table per batch (or for all): every head and position of it, as one "position"
            table = self._signed_table(module, mag, neg, freqs, 1.0, False)
            view, stride = k.reshape(k.shape[0] if kind == "batch" else 1, -1, 1, head_dim), int(kind == "batch")
            _rotate_on_table(module, backend, view, None, table, stride, self._neox)
        return k

    def _rotate_direct(self, q, k, positions, offset, seq_len, backend, qk: bool) -> bool:
        """Rotate a call whose arguments are plainly valid, straight through the kernels,
        and return True; return False, having touched nothing, for anything else (then
        :meth:`_rotate` checks every argument and names what is wrong).

        Plainly valid: ``q`` (and ``k``) exact float32 ndarrays, C-contiguous, aligned,
        writable, of the shapes :meth:`_rotate` takes and apart in memory; positions
        ``None`` with an ``int`` offset, or an integer ndarray of a shape ``q`` takes, every
        value in ``[0, 2**32)``, apart from ``q`` and ``k``; ``seq_len`` ``None`` or an
        ``int`` in range; a backend that resolves.  The full path's checks, in fewer steps."""
        if type(q) is not np.ndarray or q.dtype is not _F32:
            return False
        shape = q.shape
        nd = len(shape)
        if nd == 4:
            n_batch, hq, n_seq, d = shape
        elif nd == 3:
            n_seq, hq, d = shape
            n_batch = 1
        else:
            return False
        flags = q.flags
        if d != self._head_dim or not (flags.c_contiguous and flags.writeable and flags.aligned) or not n_seq:
            return False
        if qk:
            if type(k) is not np.ndarray or k.dtype is not _F32:
                return False
            ks = k.shape
            if len(ks) != nd or ks[-1] != d or ks[0] != shape[0] or (nd == 4 and ks[2] != n_seq):
                return False
            flags = k.flags
            if not (flags.c_contiguous and flags.writeable and flags.aligned) or np.may_share_memory(q, k):
                return False
            hk = ks[1]  # heads: (batch, heads, seq, d) and (tokens, heads, d) alike
        else:
            hk = 0
        if positions is None:
            if type(offset) is not int or offset < 0 or offset + n_seq > _LIMIT:
                return False
            pos, hi, rows, stride = None, offset + n_seq - 1, n_seq, 0
        else:
            if type(offset) is not int or offset or type(positions) is not np.ndarray:
                return False
            pshape = positions.shape
            if pshape == (n_seq,):
                stride = 0
            elif nd == 4 and pshape == (n_batch, n_seq):
                stride = n_seq
            else:
                return False
            if positions.size == 1:  # a decoding step's one position: a run of one from it, inline
                if positions.dtype.kind not in "iu":
                    return False
                pos, hi = None, positions.item(0)
                if not 0 <= hi < _LIMIT:
                    return False
                offset, rows = hi, 1
            else:
                found = _small_positions(positions, 2, None)
                if found is None:
                    return False
                pos, hi = found
                rows = pos.shape[0]
            if np.may_share_memory(q, positions) or (qk and np.may_share_memory(k, positions)):
                return False
        if seq_len is not None and (type(seq_len) is not int or not 0 <= seq_len <= _LIMIT):
            return False
        found = _module(backend)
        if found is None:
            return False
        module, kernel = found
        if self._values is None:
            key = _scaling.length_key(self._spec, hi + 1 if seq_len is None else seq_len)
        else:
            key = None
        if kernel is None or n_batch * n_seq * (hq + hk) * self._n_freq >= _DIRECT_PAIRS:
            # the backend's own walk (chunks, threads)
            if pos is None:
                pos = np.arange(offset, offset + rows, dtype=np.uint64).astype(np.uint32)
            elif stride:  # (batch, seq) positions: the backend tells them from (seq,) by their shape
                pos = pos.reshape(n_batch, n_seq)
            freqs, af = self._values if key is None else self._at_key(key)
            module.rope_apply(q=q, k=k, positions=pos, inv_freq=freqs, attention_factor=af, layout=self._layout)
            return True
        if rows == 1:  # a decoding step's table, kept: the _table key, inline
            table = self._tables.get((module, key, offset))
            if table is None:
                table = self._table(module, pos, offset, 1, key)
        else:
            table = self._table(module, pos, offset, rows, key)
        if nd == 4:
            sd = n_seq * d
            if qk:
                kernel(q.reshape(-1), hq, hq * sd, sd, d, k.reshape(-1), hk, hk * sd, sd, d,
                       n_batch, 0, n_seq, table, stride, self._neox)
            else:
                kernel(q.reshape(-1), hq, hq * sd, sd, d, _NO_K, 0, 0, 0, 0, n_batch, 0, n_seq, table, stride,
                       self._neox)
        elif qk:
            kernel(q.reshape(-1), hq, 0, d, hq * d, k.reshape(-1), hk, 0, d, hk * d, 1, 0, n_seq, table, 0,
                   self._neox)
        else:
            kernel(q.reshape(-1), hq, 0, d, hq * d, _NO_K, 0, 0, 0, 0, 1, 0, n_seq, table, 0, self._neox)
        return True


#: the rotation kernels' empty float32 buffer for no k
_NO_K = np.empty(0, dtype=np.float32)
#: resolved backends, per (backend argument, $FASTPE_BACKEND): checked against the registry
_RESOLVED: dict = {}
#: $FASTPE_BACKEND as os.environ keys it (fastpe._backends.ENV_VAR, not imported here: the
#: backends load on first use)
_ENV_KEY = os.environ.encodekey("FASTPE_BACKEND") if hasattr(os.environ, "encodekey") else None


def _module(backend):
    """``(module, rotation kernel or None)`` of a call's backend, or ``None`` (an unknown or
    unavailable name: the full path resolves it and says why).  Kept per argument and
    environment (once the kernel is compiled), and taken only while the registry still holds
    the module loaded."""
    if backend is not None and type(backend) is not str:
        return None
    if _backends is None:
        _load_core()
    backends = _backends
    environ = os.environ
    data = getattr(environ, "_data", None)  # os.environ's own dict (its get() costs ~20 times more)
    env = data.get(_ENV_KEY) if data is not None and _ENV_KEY is not None else environ.get(backends.ENV_VAR)
    key = (backend, env)
    found = _RESOLVED.get(key)
    if found is not None and backends._modules.get(found[0]) is found[1]:
        return found[2]
    try:
        name, module = backends.resolve(backend)
    except (ValueError, TypeError, ImportError):
        return None
    getter = getattr(module, "rotation_kernel", None)  # the compiled backends' (fastpe._backends.registry)
    kernel = getter() if getter is not None else None
    if len(_RESOLVED) >= 64:
        _RESOLVED.clear()
    if getter is None or kernel is not None:  # kept once its kernel is compiled
        _RESOLVED[key] = (name, module, (module, kernel))
    return module, kernel


def _rotate_on_table(module, backend, q, k, table, stride: int, neox: bool, kernel=None, *, s0: int = 0,
                     s1: int | None = None) -> None:
    """Rotate checked ``q`` (and ``k``) in place by a ``(rows, 2, n_freq)`` table of doubles,
    sequence indices ``[s0, s1)`` (default: all): row ``b * stride + s - s0`` for sequence
    index ``s`` of batch ``b`` (``(tokens, ...)`` arrays: row ``s - s0``).  A small call runs
    the backend's serial table-rotation kernel (its ``rotation_kernel()``) directly; anything
    else, and every call of a backend without one, is the backend's ``rope_apply_table``
    (its threads for a large call, as its rope_apply runs them)."""
    if kernel is None:
        found = _module(backend)
        kernel = found[1] if found is not None and found[0] is module else None
    table = np.ascontiguousarray(table)
    if s1 is None:
        s1 = q.shape[0] if q.ndim == 3 else q.shape[2]
    if kernel is not None:
        d = q.shape[-1]
        hk = 0 if k is None else k.shape[1]
        if q.ndim == 4:
            n_batch, hq, n_seq, _ = q.shape
        else:
            n_batch, hq = 1, q.shape[1]
        if n_batch * (s1 - s0) * (hq + hk) * 2 * table.shape[2] < 2 * _DIRECT_PAIRS:
            ks = (_NO_K, 0, 0, 0, 0) if k is None else None
            if q.ndim == 4:
                sd = n_seq * d
                if k is not None:
                    ks = (k.reshape(-1), hk, hk * sd, sd, d)
                kernel(q.reshape(-1), hq, hq * sd, sd, d, *ks, n_batch, s0, s1, table, stride, neox)
            else:
                if k is not None:
                    ks = (k.reshape(-1), hk, 0, d, hk * d)
                kernel(q.reshape(-1), hq, 0, d, hq * d, *ks, 1, s0, s1, table, 0, neox)
            return
    module.rope_apply_table(q=q, k=k, table=table, stride=stride if q.ndim == 4 else 0, begin=s0, end=s1,
                            layout="neox" if neox else "gptj")


def _check_flag(name: str, value) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")


def _xpos_key(spec: RopeSpec, scale_base, center):
    """The checked ``(scale base, centre)`` of a Rotary's xPos arguments, or ``None``."""
    from . import _xpos as xpos

    sb = xpos.check_scale_base(scale_base)
    c = xpos.check_center(center)
    if sb is None:
        if c != "torchscale":
            raise ValueError(f"xpos_center={center!r} needs xpos_scale_base (xPos is off without it)")
        return None
    if spec.mrope_section is not None:
        raise ValueError("xPos does not compose with M-RoPE (mrope_section): its centred position is defined for "
                         "one position axis only")
    return sb, c


def _xpos_zeta(rotary_dim: int):
    from ._xpos import zeta

    return zeta(rotary_dim)


def _xpos_dtype(dt) -> None:
    if dt not in (_F32, _F64):
        raise ValueError(f"xPos caches are float32 or float64, got dtype {dt.name}")


def _xpos_out(out, shape, dtype, positions, pos):
    """An xPos ``cos_sin``'s four arrays: ``out``'s (cos_q, sin_q, cos_k, sin_k), checked,
    or new ones."""
    from ..sinusoid import output_array

    if out is None:
        first = output_array(None, shape, dtype)
        return first, np.empty_like(first), np.empty_like(first), np.empty_like(first)
    if not isinstance(out, (tuple, list)) or len(out) != 4:
        raise TypeError("out must be four arrays (cos_q, sin_q, cos_k, sin_k) for an xPos Rotary, got "
                        f"{type(out).__name__}" + (f" of {len(out)}" if isinstance(out, (tuple, list)) else ""))
    inputs = [("positions", positions), ("positions", pos)]
    arrays = [output_array(o, shape, dtype, inputs, name=f"out[{i}]") for i, o in enumerate(out)]
    _xpos_dtype(arrays[0].dtype)
    for i, a in enumerate(arrays):
        if a.dtype != arrays[0].dtype:
            raise ValueError(f"out[0] and out[{i}] must have one dtype, got {arrays[0].dtype.name} and {a.dtype.name}")
        for j in range(i):
            if np.may_share_memory(arrays[j], a):
                raise ValueError(f"out[{j}] must not share memory with out[{i}]")
    return tuple(arrays)


def _refuse_3d(positions) -> None:
    """A one-axis Rotary's positions are ``(seq,)`` or ``(batch, seq)``: a 3-D array is
    M-RoPE's ``(3, batch, seq)``, named as such."""
    ndim = getattr(positions, "ndim", None)
    if ndim is None and isinstance(positions, (list, tuple)):
        try:
            ndim = np.asarray(positions).ndim
        except (ValueError, TypeError):
            return
    if ndim is not None and ndim >= 3:
        raise ValueError(f"positions must be 1-D (seq,) or 2-D (batch, seq), got {ndim} dimensions: M-RoPE's "
                         "(3, batch, seq) positions need a Rotary with mrope_section")


def _mrope_positions(positions, shapes):
    """Checked M-RoPE positions: ``(3, rows)`` uint32 and the grid they came as (``(seq,)``
    or ``(batch, seq)``); ``shapes``: the shapes allowed (``None``: any ``(3, seq)`` or
    ``(3, batch, seq)``)."""
    if isinstance(positions, (str, bytes)):
        raise TypeError(f"positions must be an array of integers, got {type(positions).__name__}")
    try:
        arr = np.asarray(positions)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"positions must be an array of integers: {exc}") from None
    if arr.ndim not in (2, 3) or arr.shape[0] != 3:
        raise ValueError("M-RoPE positions must have a leading axis of 3 (time, height, width): shape (3, seq) or "
                         f"(3, batch, seq), got shape {arr.shape}")
    if shapes is None:
        shapes = (arr.shape,)
    pos = check_position_grid(positions, shapes)
    return pos.reshape(3, -1), pos.shape[1:]


_DELTA_LIMIT = 1 << 32


def _deltas(k, delta, mrope: bool):
    """``(|delta|, delta < 0, kind)`` of a checked delta: uint32 and bool arrays of shape
    ``(1 or 3, rows)`` -- one row for all (``kind`` ``"one"``), per batch (``"batch"``) or
    per token (``"token"``: ``k``'s rows in order)."""
    n_seq = k.shape[0] if k.ndim == 3 else k.shape[2]
    n_batch = 1 if k.ndim == 3 else k.shape[0]
    if isinstance(delta, (str, bytes)):
        raise TypeError(f"delta must be an integer or an array of integers, got {type(delta).__name__}")
    if isinstance(delta, (bool, np.bool_)):
        raise TypeError(f"delta must be an integer, got {type(delta).__name__} {delta!r}")
    if isinstance(delta, int) or isinstance(delta, np.integer):
        value = int(delta)
        if not -_DELTA_LIMIT < value < _DELTA_LIMIT:
            raise ValueError(f"delta must be in (-2**32, 2**32), got {value}")
        arr = np.full((3 if mrope else 1, 1), value, dtype=np.int64)
        kind = "one"
    else:
        try:
            arr = np.asarray(delta)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"delta must be an integer or an array of integers: {exc}") from None
        if arr.dtype.kind not in "iu" and not (arr.dtype.kind == "O" and arr.size == 0):
            got = "booleans" if arr.dtype.kind == "b" else f"dtype {arr.dtype}"
            raise TypeError(f"delta must hold integers, got {got}")
        if arr.dtype.kind == "O" or (arr.size and (int(arr.min()) <= -_DELTA_LIMIT or int(arr.max()) >= _DELTA_LIMIT)):
            bad = [v for v in arr.reshape(-1).tolist() if not -_DELTA_LIMIT < v < _DELTA_LIMIT] if arr.size else []
            raise ValueError(f"delta must be in (-2**32, 2**32), got {bad[0] if bad else arr!r}")
        lead = (3,) if mrope else ()
        if k.ndim == 3:
            allowed = {lead: "one", (*lead, n_seq): "token"}
        else:
            allowed = {lead: "one", (*lead, n_batch): "batch", (*lead, n_batch, n_seq): "token"}
        kind = allowed.get(arr.shape)
        if kind is None:
            want = " or ".join(str(s) for s in allowed)
            raise ValueError(f"delta must be an integer or have shape {want} for k of shape {k.shape}, "
                             f"got {arr.shape}")
        arr = arr.astype(np.int64).reshape(3 if mrope else 1, -1)
    return np.abs(arr).astype(_U32), arr < 0, kind


def _small_positions(positions, max_ndim: int, limit: int | None = _TABLE_ROWS):
    """``(flat uint32 positions, largest)`` of an integer ndarray of at most ``max_ndim``
    dimensions and ``limit`` values (``None``: any number), all in ``[0, 2**32)`` --
    ``(None, position)`` for a single one; ``None`` for anything else (a list, floats, an
    empty array, a bad value: the full checks decide)."""
    if type(positions) is not np.ndarray or positions.dtype.kind not in "iu" or not 0 < positions.ndim <= max_ndim:
        return None
    size = positions.size
    if not size or (limit is not None and size > limit):
        return None
    if size == 1:  # no array: the table's position is the value itself
        hi = positions.item(0)
        return (None, hi) if 0 <= hi < _LIMIT else None
    lo, hi = int(positions.min()), int(positions.max())
    if lo < 0 or hi >= _LIMIT:
        return None
    if positions.dtype is _U32 and positions.flags.c_contiguous:
        return positions.reshape(-1), hi
    return positions.astype(_U32, order="C").reshape(-1), hi


def _reads_length(spec: RopeSpec) -> bool:
    """Whether the rule reads ``max_position_embeddings`` (beyond defaulting the original
    length): dynamic always, longrope for an attention factor from nothing else."""
    if spec.rope_type == "longrope":
        return spec.factor is None and spec.attention_factor is None and getattr(spec, "short_mscale", None) is None
    return spec.rope_type == "dynamic"


def _grid(positions):
    """``positions`` as an array when it is a ``(batch, seq)`` grid, else None (the 1-D
    checks then run on it as given, and name what is wrong)."""
    if isinstance(positions, (str, bytes)):
        return None
    try:
        arr = np.asarray(positions)
    except (ValueError, TypeError):
        return None
    return arr if arr.ndim == 2 else None


def cos_sin_out(out, shape, dtype, positions, pos):
    """``cos_sin``'s two arrays: ``out``'s, checked, or new ones."""
    from ..sinusoid import output_array

    if out is None:
        cos = output_array(None, shape, dtype)
        return cos, np.empty_like(cos)
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"out must be a pair (cos, sin) of arrays, got {type(out).__name__}")
    inputs = [("positions", positions), ("positions", pos)]
    cos = output_array(out[0], shape, dtype, inputs, name="out[0]")
    sin = output_array(out[1], shape, dtype, inputs, name="out[1]")
    if sin.dtype != cos.dtype:
        raise ValueError(f"out[0] and out[1] must have one dtype, got {cos.dtype.name} and {sin.dtype.name}")
    if np.may_share_memory(cos, sin):
        raise ValueError("out[0] must not share memory with out[1]")
    return cos, sin

