"""The ``python`` backend: the references (:mod:`fastpe._exact.sinusoid_decimal`, :mod:`fastpe._exact.rope`)
behind the backend API.

Slow -- every value is computed with :mod:`decimal` or exact rationals -- but exact: it is
the oracle the fast backends are checked against, and the fall-back that always loads.
"""

from __future__ import annotations

import math

import numpy as np

from .. import _dtypes
from .._exact import (
    sinusoid_decimal as _reference,
    rope as _reference_rope,
    sincos as _reference_sincos,
)
from .._exact.bias import alibi_bias, t5_bucket, t5_bucket_matrix  # noqa: F401  (operations)
from .._exact.relative import deberta_bucket, deberta_bucket_matrix, shaw_matrix  # noqa: F401  (operations)
from ._mrope_python import mrope_fill, mrope_plan  # noqa: F401  (operations)
from .._exact.calendar import calendar_fields, embedding_sum  # noqa: F401  (operations)
from .._exact import time as _reference_time
from .registry import OPERATIONS

#: every operation of the contract (fastpe._backends.registry)
__all__ = [*OPERATIONS]


def sinusoid_forward(positions, d_model, base, out) -> None:
    rows = _reference.sinusoid(positions.tolist(), d_model, base)
    if rows:
        out[...] = np.array(rows, dtype=np.float64).astype(np.float32)


def sinusoid_range(start, d_model, base, out) -> None:
    rows = _reference.sinusoid(range(int(start), int(start) + out.shape[0]), d_model, base)
    if rows:
        out[...] = np.array(rows, dtype=np.float64).astype(np.float32)


# ------------------------------------------------------------------------------------ RoPE
# Plain loops and explicit indices (no strides, no tables): nothing shared with the compiled
# backends' walk over the arrays (fastpe._backends._walk).


def _columns(i: int, n_freq: int, layout: str) -> tuple[int, int]:
    """The two columns of frequency ``i``: ``(i, i + n_freq)`` (NeoX) or ``(2i, 2i + 1)``."""
    return (i, i + n_freq) if layout == "neox" else (2 * i, 2 * i + 1)


def rope_cos_sin(positions, inv_freq, attention_factor, layout, out_cos, out_sin) -> None:
    n_freq = len(inv_freq)
    for row, p in enumerate(positions.tolist()):
        for i, f in enumerate(inv_freq):
            c, s = _reference_rope.cos_sin_f32(p, f, attention_factor)
            for j in _columns(i, n_freq, layout):
                out_cos[row, j] = c
                out_sin[row, j] = s


def rope_table(positions, inv_freq, attention_factor, out) -> None:
    for row, p in enumerate(positions.tolist()):
        for i, f in enumerate(inv_freq):
            out[row, 0, i], out[row, 1, i] = _reference_rope.cos_sin_f64(p, f, attention_factor)


def _rotate_pair(row, j1: int, j2: int, p: int, f: float, af: float) -> None:
    x1, x2 = float(row[j1]), float(row[j2])
    if math.isfinite(x1) and math.isfinite(x2):
        row[j1], row[j2] = _reference_rope.rotate_f32(x1, x2, p, f, af)
    else:  # inf / NaN have no exact value: IEEE arithmetic on the exact cos, sin
        c, s = _reference_rope.cos_sin_f64(p, f, af)
        row[j1], row[j2] = np.float32(x1 * c - x2 * s), np.float32(x2 * c + x1 * s)


def rope_apply(q, k, positions, inv_freq, attention_factor, layout) -> None:
    n_freq = len(inv_freq)
    pos = positions.tolist()
    for x in (q, k):
        if x is None:
            continue
        if x.ndim == 3:  # (tokens, heads, head_dim), positions (tokens,)
            for t in range(x.shape[0]):
                for h in range(x.shape[1]):
                    for i, f in enumerate(inv_freq):
                        _rotate_pair(x[t, h], *_columns(i, n_freq, layout), pos[t], f, attention_factor)
        else:  # (batch, heads, seq, head_dim), positions (seq,) or (batch, seq)
            for b in range(x.shape[0]):
                for h in range(x.shape[1]):
                    for s in range(x.shape[2]):
                        p = pos[s] if positions.ndim == 1 else pos[b][s]
                        for i, f in enumerate(inv_freq):
                            _rotate_pair(x[b, h, s], *_columns(i, n_freq, layout), p, f,
                                         attention_factor)


def rope_apply_table(q, k, table, stride, begin, end, layout) -> None:
    """The given doubles' rotation in NumPy: each pair's ``C``, ``S`` picked by an explicit
    row index per ``(batch, sequence index)``, then ``float32(x1 * C - x2 * S)``,
    ``float32(x2 * C + x1 * S)`` in double arithmetic (IEEE, inf and NaN included)."""
    n_freq = table.shape[2]
    j1, j2 = zip(*(_columns(i, n_freq, layout) for i in range(n_freq)))
    j1, j2 = list(j1), list(j2)
    for x in (q, k):
        if x is None or not x.size or end <= begin:
            continue
        if x.ndim == 3:  # (tokens, heads, head_dim): row t - begin
            part = x[begin:end]
            rows = table[np.arange(end - begin)][:, None]  # (tokens, 1, 2, n)
        else:  # (batch, heads, seq, head_dim): row b * stride + s - begin
            part = x[:, :, begin:end]
            index = np.arange(x.shape[0])[:, None] * stride + np.arange(end - begin)[None, :]
            rows = table[index][:, None]  # (batch, 1, seq, 2, n)
        c, s = rows[..., 0, :], rows[..., 1, :]
        a64, b64 = part[..., j1].astype(np.float64), part[..., j2].astype(np.float64)
        with np.errstate(all="ignore"):  # IEEE results without warnings, as the compiled kernels
            part[..., j1] = (a64 * c - b64 * s).astype(np.float32)
            part[..., j2] = (b64 * c + a64 * s).astype(np.float32)


def rope_xpos_table(positions, inv_freq, attention_factor, zeta, scale_base, center, out_q, out_k) -> None:
    """Each value exact (rationals for the cosine and sine, decimal for the power), rounded once."""
    for row, p in enumerate(positions.tolist()):
        for i, f in enumerate(inv_freq):
            cq, sq, ck, sk = _reference_rope.xpos_table_f64(p, f, attention_factor, zeta[i], scale_base, center)
            out_q[row, 0, i], out_q[row, 1, i] = cq, sq
            out_k[row, 0, i], out_k[row, 1, i] = ck, sk


# ----------------------------------------------------------------------- sinusoid families
# Correctly rounded in out's own format (the fast kernels are within 1 ULP in float32 and
# within 2**-45 absolute in float64).


def _family_rows(xs, freqs, layout, out) -> None:
    """The rows of integer or real positions ``xs``: the reference's, in ``out``'s format."""
    rows = _reference_sincos.rows(xs.tolist(), freqs, layout, out.shape[1], _dtypes.format_of(out.dtype))
    if rows:
        out[...] = np.array(rows, dtype=np.float64)


def sincos_rows(positions, freqs, layout, out) -> None:
    _family_rows(positions, freqs, layout, out)


def sincos_real(x, freqs, layout, out) -> None:
    _family_rows(x, freqs, layout, out)


def grid_gather(table, sizes, sin_off, cos_off, first_row, out) -> None:
    """Token by token: decompose the index into coordinates, copy each axis's values."""
    q = table.shape[1] // 2
    sizes = [int(s) for s in sizes]
    n_tok = math.prod(sizes)
    rows = table.tolist()
    for token in range(n_tok):
        rem, coords = token, []
        for size in reversed(sizes):
            coords.append(rem % size)
            rem //= size
        coords.reverse()
        for a, c in enumerate(coords):
            for k in range(q):
                out[first_row + token, int(sin_off[a]) + k] = rows[c][k]
                out[first_row + token, int(cos_off[a]) + k] = rows[c][q + k]


def axial_gather(table, index, pieces, out_cos, out_sin) -> None:
    """Token by token, piece by piece: each value's bits copied one at a time."""
    rows = table.tolist()
    index = index.tolist()
    for t in range(out_cos.shape[0]):
        for axis, src, col, width in pieces.tolist():
            cos_row, sin_row = rows[index[axis][t]]
            for k in range(width):
                out_cos[t, col + k] = cos_row[src + k]
                out_sin[t, col + k] = sin_row[src + k]


def add_rows(x, pe, scale) -> None:
    """Element by element, each operation rounded to x's dtype as NumPy's scalars do."""
    t = x.dtype.type
    factor = None if scale is None else t(scale)
    with np.errstate(all="ignore"):  # IEEE results, no warnings, as the compiled backends
        _add_rows_loop(x, pe, factor, t)


def _add_rows_loop(x, pe, factor, t) -> None:
    for b in range(x.shape[0]):
        for s in range(x.shape[1]):
            for j in range(x.shape[2]):
                v = x[b, s, j]
                if factor is not None:
                    v = t(v * factor)
                x[b, s, j] = t(v + pe[s, j])


def narrow16(bits32, bf16, out, ties) -> None:
    """NumPy's and ml_dtypes' own casts, and the ties from exact float64 arithmetic."""
    name = "bfloat16" if bf16 else "float16"
    x = bits32.view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        out[...] = x.astype(_dtypes.resolve(name)).view(np.uint16)
    ties[...] = False
    ties[_dtypes.narrow_ties(x, _dtypes.FORMATS[name])] = True


# ------------------------------------------------------------- Fourier features, time encodings
# Correctly rounded in out's own format, from the exact rational turn or angle.


def fourier_ticks(ticks, numerator, denominator, order, out) -> None:
    rows = _reference_time.fourier_rows(ticks.tolist(), int(numerator), int(denominator), int(order),
                                        _dtypes.format_of(out.dtype))
    if rows:
        out[...] = np.array(rows, dtype=np.float64)


def time_cos(ticks, frequencies, scale, out) -> None:
    rows = _reference_time.time_cos_rows(ticks.tolist(), frequencies, scale, _dtypes.format_of(out.dtype))
    if rows:
        out[...] = np.array(rows, dtype=np.float64)


# ------------------------------------------------------------------------------- Sandwich


def sandwich_bias(n_heads, hidden_size, bidirectional, out) -> None:
    """Each distinct distance's correctly rounded value per head (fastpe._exact.sandwich),
    then every cell by its own index: ``d = |j - i + q_len - k_len|``, ``0`` at ``j > i``
    unless ``bidirectional``."""
    from .._exact.sandwich import sandwich_value

    _, q_len, k_len = out.shape
    fmt = _dtypes.format_of(out.dtype)
    i = np.arange(q_len)[:, None]
    j = np.arange(k_len)[None, :]
    dist = np.abs(j - i + q_len - k_len)
    if not bidirectional:
        dist = np.where(j > i, 0, dist)
    for d in np.unique(dist).tolist():
        where = dist == d
        for h in range(n_heads):
            out[h][where] = sandwich_value(d, h, n_heads, hidden_size, fmt)
