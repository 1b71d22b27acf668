"""The array-level RoPE API: exact cos/sin caches and in-place rotation for given ``inv_freq``.

:mod:`fastpe.rope` turns a model's configuration into ``(inv_freq, attention_factor)`` and
calls these; they take the frequencies as given.  Everything is validated here, once, before
anything is written; the backends' kernels assume valid input.

What every value is (one definition, every backend)
----------------------------------------------------
Each frequency ``f_i`` is the exact value of the double ``inv_freq[i]`` (float32 input
converts exactly), ``af`` the attention factor, ``theta = p * f_i``.

* ``cos_sin``: ``cos[r, j] = af * cos(theta)`` and ``sin[r, j] = af * sin(theta)`` for
  ``p = positions[r]``, frequency ``i`` in columns ``j = i`` and ``i + n`` (``layout="neox"``,
  HF's ``cat(freqs, freqs)``) or ``j = 2i`` and ``2i + 1`` (``"gptj"``), ``n = len(inv_freq)``.
  Float32 outputs are within 1 ULP of the correctly rounded value (in practice correctly
  rounded) for every ``p < 2**32``; float64 outputs are the doubles ``C, S`` below.
* ``apply``: each pair ``(x1, x2)`` of a row at position ``p`` -- columns ``(i, i + n)``
  (NeoX: HF's ``x * cos + rotate_half(x) * sin``) or ``(2i, 2i + 1)`` (GPT-J) -- becomes
  ``y1 = af (x1 cos theta - x2 sin theta)``, ``y2 = af (x2 cos theta + x1 sin theta)``;
  columns from ``2n`` on (partial rotary) are left untouched.

The compiled backends compute, per position and frequency, the doubles ``c, s`` (the
anchored product of exact-path doubles described in :mod:`fastpe._plans.words`; where ``|c|`` or
``|s|`` is below ``2**-14``, the exact path itself), then ``C = af * c`` and ``S = af * s``.
``cos_sin`` writes ``float32(C)``, ``float32(S)``; ``apply`` writes
``float32(x1 * C - x2 * S)`` and ``float32(x2 * C + x1 * S)``, in double from the float32
inputs, without FMA.  Both compiled backends write the same bits.  The ``python`` backend
computes the exact values with rationals (:mod:`fastpe._exact.rope`) and rounds once.

Error bounds.  ``|c - cos theta| < 2**-46`` (so ``|C - af cos theta| < 2**-45.9 |af|``),
and below ``2**-32 |c|`` where ``|c| >= 2**-14``, the exact path covering smaller values:
the tiny test is on the *unscaled* ``c, s``, because scaling by ``af`` multiplies value and
error alike, so relative accuracy -- what a float32 ULP measures -- does not depend on
``af`` (a test on ``af * c`` would let a large ``af`` pass values far less accurate than a
ULP).  For ``apply``, the three roundings in double add ``2**-52.4 |af| (|x1| + |x2|)``:

    ``|out - y| <= ulp(y) / 2 + 2**-45 |af| (|x1| + |x2|)``.

Hence ``out`` is within 1 ULP of the correctly rounded ``y`` whenever
``|y| >= 2**-20 |af| (|x1| + |x2|)``; below that (``x1 cos - x2 sin`` cancels to fewer than
20 of 24 bits) ULPs are no measure, and the bound above is the guarantee -- 2**-21 of a
float32 ULP of the inputs, far below what any float32 computation can do.  HF computes the
cos/sin caches in float32 (angle ``p * inv_freq`` rounded to float32: an error of up to
``p * 2**-24`` radians) and rotates in float32.

Non-finite ``x`` propagate as IEEE arithmetic does (they are not checked: that would cost
a pass over memory).

Work and memory.  ``apply`` computes ``C, S`` once per call for each (position row,
frequency) -- shared by all heads, and by the whole batch when ``positions`` is ``(seq,)``
-- into a table of doubles (at most 32 MiB at a time, see :mod:`fastpe._backends._walk`), then
streams over ``x`` in parallel, in place.  ``apply_qk`` rotates ``q`` and ``k`` in the same
pass over one table.
"""

from __future__ import annotations

import numbers

import numpy as np

from .. import _backends, _dtypes
from ._scaling import MAX_ATTENTION_FACTOR, _to_float, rope_layout
from .._validate import (
    check_inplace,
    check_inv_freq,
    check_no_overlap,
    check_offset,
    check_out,
    check_position_grid,
    check_positions,
    check_rotary_dim,
)

__all__ = ["cos_sin_from_inv_freq", "apply_from_inv_freq", "apply_qk_from_inv_freq", "fill_caches", "check_qk",
           "rotation_positions", "rotate"]


def cos_sin_from_inv_freq(
    positions,
    inv_freq,
    attention_factor: float = 1.0,
    *,
    layout: str = "neox",
    out_cos: np.ndarray | None = None,
    out_sin: np.ndarray | None = None,
    rotary_dim: int | None = None,
    backend: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The RoPE cos and sin caches of ``positions``; return ``(cos, sin)``.

    Each ``(len(positions), 2 * len(inv_freq))``: ``attention_factor * cos(p * inv_freq[i])``
    (and sin) in columns ``i`` and ``i + len(inv_freq)`` (``layout="neox"``, HF's layout) or
    ``2i`` and ``2i + 1`` (``"gptj"``).  Float32 values are within 1 ULP of the correctly
    rounded value for every position (see the module notes).

    Parameters
    ----------
    positions:
        1-D integers in ``[0, 2**32)`` (any integer dtype, a list, whole floats).
    inv_freq:
        1-D, non-empty, finite, ``0 <= f <= 1024`` (radians per position).
    attention_factor:
        Finite real, ``|af| <= 2**64``; multiplies every value (HF's ``attention_scaling``).
    out_cos, out_sin:
        Both or neither: writable C-contiguous arrays of the output shape, of one dtype in
        native byte order: ``float32``, ``float64`` (then the doubles the kernels use, see
        the module notes), or ``float16`` / ``bfloat16`` (the correctly rounded values of
        the exact ones).  Neither may share memory with the other or with ``positions`` or
        ``inv_freq``.
    rotary_dim:
        Optional consistency check: must equal ``2 * len(inv_freq)``.
    backend:
        As in :func:`fastpe.forward`.
    """
    freqs = check_inv_freq(inv_freq)
    width = check_rotary_dim(rotary_dim, len(freqs))
    af = _check_attention(attention_factor)
    layout = rope_layout(layout)
    pos = check_positions(positions)
    shape = (pos.shape[0], width)
    if (out_cos is None) != (out_sin is None):
        raise TypeError("out_cos and out_sin must be given together (or neither)")
    if out_cos is None:
        dtype = np.dtype(np.float32)
        _, module = _backends.resolve(backend)
        out_cos = np.empty(shape, dtype=dtype)
        out_sin = np.empty(shape, dtype=dtype)
    else:
        # the accepted dtypes, native byte order only, as every ``dtype`` argument takes them
        dtype = _dtypes.resolve(out_cos.dtype, "out_cos") if isinstance(out_cos, np.ndarray) else np.dtype(np.float32)
        check_out(out_cos, shape, "out_cos", dtype)
        check_out(out_sin, shape, "out_sin", dtype)
        check_no_overlap(out_cos, out_sin, "out_cos", "out_sin")
        _check_apart(((out_cos, "out_cos"), (out_sin, "out_sin")), positions, pos, inv_freq)
        _, module = _backends.resolve(backend)
    fill_caches(module, pos, freqs, af, layout, out_cos, out_sin)
    return out_cos, out_sin


def fill_caches(module, pos: np.ndarray, freqs: tuple[float, ...], af: float, layout: str,
                out_cos: np.ndarray, out_sin: np.ndarray) -> None:
    """Write the caches of validated arguments: ``pos`` 1-D uint32, ``freqs`` and ``af`` as
    :func:`cos_sin_from_inv_freq` checks them, ``out_cos`` / ``out_sin`` checked arrays of
    shape ``(len(pos), 2 * len(freqs))`` and one output dtype, ``module`` a backend.  What
    :func:`cos_sin_from_inv_freq` and :class:`fastpe.rope.Rotary` run once their checks pass."""
    if pos.shape[0] == 0:
        return
    module = exact_where_subnormal(module, freqs)
    dtype = out_cos.dtype
    if dtype == np.float32:
        module.rope_cos_sin(positions=pos, inv_freq=freqs, attention_factor=af, layout=layout,
                            out_cos=out_cos, out_sin=out_sin)
    elif dtype == np.float64:
        # the doubles a block of rows at a time, each block spread into both caches while it
        # is still in cache: one table of the whole call, then four strided copies of it, cost
        # ~5x the kernel's time in memory traffic
        n, n_freq = pos.shape[0], len(freqs)
        step = max(1, _F64_BLOCK_BYTES // (16 * n_freq))
        table = np.empty((min(n, step), 2, n_freq), dtype=np.float64)
        for r0 in range(0, n, step):
            r1 = min(n, r0 + step)
            block = table[:r1 - r0]
            module.rope_table(positions=pos[r0:r1], inv_freq=freqs, attention_factor=af, out=block)
            _spread(block, out_cos[r0:r1], out_sin[r0:r1], layout)
    else:
        _narrow_caches(module, pos, freqs, af, layout, out_cos, out_sin)


def _check_attention(attention_factor) -> float:
    """A finite real of magnitude at most :data:`MAX_ATTENTION_FACTOR`, as a float."""
    if isinstance(attention_factor, (bool, np.bool_)) or not isinstance(attention_factor, (numbers.Real, np.floating,
                                                                                           np.integer)):
        raise TypeError(f"attention_factor must be a real number, got {type(attention_factor).__name__} "
                        f"{attention_factor!r}")
    # _to_float rather than check_finite_real, whose overflow message needs an int (a Fraction
    # beyond the doubles raised AttributeError there)
    af = _to_float("attention_factor", attention_factor)
    if abs(af) > MAX_ATTENTION_FACTOR:  # see MAX_ATTENTION_FACTOR: the rotation's doubles would overflow
        raise ValueError(f"attention_factor must be at most 2**64 in magnitude, got {af!r}")
    return af


def _check_apart(outputs, positions, pos, inv_freq) -> None:
    """Refuse, before anything is written, an output array sharing memory with an input
    array (``fastpe.forward``'s rule): the kernels would read what they have just written.
    ``positions`` and ``inv_freq`` are checked as given -- even where their conversion
    copies them, one rule is simpler to state than the cases it would be safe in -- and
    ``pos`` (the converted positions) too, which catches a buffer that is not a NumPy
    array but converted without a copy."""
    for out, name in outputs:
        for other, other_name in ((positions, "positions"), (pos, "positions"), (inv_freq, "inv_freq")):
            check_no_overlap(out, other, name, other_name)


#: a float16/bfloat16 tie is decided by the kernels' double when it lies this far (times
#: |af|) from the tie or farther: beyond their error bound (2**-45 |af|)
_DECIDE = 2.0**-44


def _narrow_caches(module, pos, freqs, af, layout, out_cos, out_sin) -> None:
    """float16/bfloat16 caches: the float32 ones narrowed, each float32 that is a tie in the
    target decided by which side of it the exact value lies -- by the kernels' double when
    that is far enough from the tie, else by the exact reference."""
    from .._exact import rope as _reference_rope

    n_freq = len(freqs)
    width = out_cos.shape[1]
    fmt = _dtypes.format_of(out_cos.dtype)
    c32 = np.empty(out_cos.shape, dtype=np.float32)
    s32 = np.empty(out_sin.shape, dtype=np.float32)
    module.rope_cos_sin(positions=pos, inv_freq=freqs, attention_factor=af, layout=layout,
                        out_cos=c32, out_sin=s32)
    table = np.empty((pos.shape[0], 2, n_freq), dtype=np.float64)
    module.rope_table(positions=pos, inv_freq=freqs, attention_factor=af, out=table)
    margin = _DECIDE * max(1.0, abs(af))

    for which, x32, out in ((0, c32, out_cos), (1, s32, out_sin)):
        def ties(idx, which=which, x32=x32, out=out):
            rows, cols = np.divmod(idx, width)
            freq = cols % n_freq if layout == "neox" else cols // 2

            def exact(t):
                return _reference_rope.cos_sin_rounded(int(pos[rows[t]]), freqs[freq[t]], af, fmt)[which]

            return _dtypes.decide_ties(x32.reshape(-1)[idx], out.dtype, table[rows, which, freq],
                                       margin, exact)

        out[...] = _dtypes.narrow(x32, out.dtype, ties, module)


#: the float64 caches' table block (see fill_caches): 2 MiB, 2048 rows of 64 frequencies
_F64_BLOCK_BYTES = 2 << 20


def _spread(table: np.ndarray, out_cos: np.ndarray, out_sin: np.ndarray, layout: str) -> None:
    """A ``(n, 2, n_freq)`` table of ``C, S`` into the two columns of each frequency of the
    ``(n, 2 * n_freq)`` caches: one broadcast copy per cache."""
    n, _, n_freq = table.shape
    if layout == "neox":  # columns i and i + n_freq: the row as (2, n_freq), both halves the table's
        out_cos.reshape(n, 2, n_freq)[...] = table[:, 0:1, :]
        out_sin.reshape(n, 2, n_freq)[...] = table[:, 1:2, :]
    else:  # columns 2i and 2i + 1 (a broadcast over pairs would copy two values per inner loop)
        for out, which in ((out_cos, 0), (out_sin, 1)):
            out[:, 0::2] = table[:, which]
            out[:, 1::2] = table[:, which]


def apply_from_inv_freq(
    x: np.ndarray,
    positions,
    inv_freq,
    attention_factor: float = 1.0,
    *,
    layout: str = "neox",
    offset: int | None = None,
    rotary_dim: int | None = None,
    backend: str | None = None,
) -> np.ndarray:
    """Rotate ``x`` in place by RoPE; return ``x``.

    Parameters
    ----------
    x:
        Writable C-contiguous float32, ``(batch, heads, seq, head_dim)`` or
        ``(tokens, heads, head_dim)``.  The first ``2 * len(inv_freq)`` values of each head
        rotate (NeoX pairs ``(i, i + n)``, GPT-J pairs ``(2i, 2i + 1)``), the rest stay.
    positions:
        ``(seq,)`` or ``(batch, seq)`` integers for 4-D ``x``, ``(tokens,)`` for 3-D, in
        ``[0, 2**32)``; or ``None`` with ``offset``.
    inv_freq, attention_factor, layout, rotary_dim, backend:
        As in :func:`cos_sin_from_inv_freq`.
    offset:
        Integer ``>= 0``: positions ``offset, offset + 1, ...`` along the sequence (token)
        axis, all below ``2**32``.  Exactly one of ``positions`` and ``offset``.

    Every argument is validated before ``x`` is touched (``x`` must not share memory with
    ``positions`` or ``inv_freq``); see the module notes for the value of every output and
    its error bound.
    """
    x = check_inplace(x, "x")
    return _apply(x, None, positions, inv_freq, attention_factor, layout, offset, rotary_dim, backend)


def apply_qk_from_inv_freq(
    q: np.ndarray,
    k: np.ndarray,
    positions,
    inv_freq,
    attention_factor: float = 1.0,
    *,
    layout: str = "neox",
    offset: int | None = None,
    rotary_dim: int | None = None,
    backend: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Rotate ``q`` and ``k`` in place in one pass; return ``(q, k)``.

    As :func:`apply_from_inv_freq` for both; they share ``positions`` and every dimension
    but the heads (grouped-query attention), and must not overlap in memory (nor either of
    them ``positions`` or ``inv_freq``).  Both are validated before either is touched.
    """
    q = check_inplace(q, "q")
    k = check_inplace(k, "k")
    check_qk(q, k)
    _apply(q, k, positions, inv_freq, attention_factor, layout, offset, rotary_dim, backend)
    return q, k


def check_qk(q: np.ndarray, k: np.ndarray) -> None:
    """``k`` beside ``q`` (each already an in-place array): the same layout and every
    dimension but the heads, and apart in memory."""
    if k.ndim != q.ndim:
        raise ValueError(f"k must have the layout of q: got shapes {q.shape} and {k.shape}")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k must have the head_dim of q ({q.shape[-1]}), got {k.shape[-1]}")
    others = (0,) if q.ndim == 3 else (0, 2)
    for axis in others:
        if k.shape[axis] != q.shape[axis]:
            what = "tokens" if q.ndim == 3 else ("batch", "", "seq")[axis]
            raise ValueError(f"k must have the {what} of q ({q.shape[axis]}), got {k.shape[axis]}")
    if np.may_share_memory(q, k):
        raise ValueError("k must not share memory with q (both are rotated in place)")


def _apply(q, k, positions, inv_freq, attention_factor, layout, offset, rotary_dim, backend):
    """Validate the rest (``q`` and ``k`` are checked), then rotate."""
    name = "x" if k is None else "q"
    freqs = check_inv_freq(inv_freq)
    check_rotary_dim(rotary_dim, len(freqs), q.shape[-1])
    af = _check_attention(attention_factor)
    layout = rope_layout(layout)
    if (positions is None) == (offset is None):
        raise TypeError("pass exactly one of positions and offset")
    pos = rotation_positions(q, positions, offset)
    _check_apart(((q, name),) if k is None else ((q, name), (k, "k")), positions, pos, inv_freq)
    rotate(_backends.resolve(backend)[1], q, k, pos, freqs, af, layout)
    return q


def rotation_positions(q: np.ndarray, positions, offset) -> np.ndarray:
    """The positions of a rotation of ``q`` (checked): ``positions`` of a shape ``q`` takes,
    or (``positions`` None) ``offset, offset + 1, ...`` along its sequence axis."""
    n_seq = q.shape[0] if q.ndim == 3 else q.shape[2]
    if positions is None:
        start = check_offset(offset, n_seq)
        return np.arange(start, start + n_seq, dtype=np.uint64).astype(np.uint32)
    shapes = ((n_seq,),) if q.ndim == 3 else ((n_seq,), (q.shape[0], n_seq))
    return check_position_grid(positions, shapes)


def rotate(module, q, k, pos, freqs, af, layout) -> None:
    """Rotate validated arrays in place (what the apply functions and
    :class:`fastpe.rope.Rotary` run once their checks pass)."""
    if q.size or (k is not None and k.size):
        module = exact_where_subnormal(module, freqs)
        module.rope_apply(q=q, k=k, positions=pos, inv_freq=freqs, attention_factor=af, layout=layout)


#: below this (a subnormal double) a frequency's words (fastpe._plans.words) underflow: the
#: compiled kernels' sine of a position could come out 0 where the exact value is not, and a
#: negative attention factor's sign would then be lost from the zero it rounds to
_SUBNORMAL = 2.0**-1022


def exact_where_subnormal(module, freqs: tuple[float, ...]):
    """``module``, or the exact reference backend when a frequency is subnormal (``0 < f <
    2**-1022``; only extreme scaling factors make one, e.g. a linear factor of 1e307): those
    calls are computed exactly rather than from underflowed words."""
    if min(freqs) < _SUBNORMAL and any(0.0 < f < _SUBNORMAL for f in freqs):
        return _backends.resolve("python")[1]
    return module
