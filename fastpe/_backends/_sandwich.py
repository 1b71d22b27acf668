"""What every compiled backend's Sandwich bias shares (fastpe._sandwich; the reference is
:mod:`fastpe._exact.sandwich`).

The value of head ``h`` at distance ``d`` is ``-(n_heads / (4 (h + 1))) * D(d)`` with
``D(d) = sum_k sin(d w_k / 2) ** 2`` (``w_k = 10000 ** (-2k/H)``, ``k = 1 .. H/2``): terms of
one sign, so no cancellation.  The bias is Toeplitz (it depends on ``i - j`` only), so:

1. a kernel computes ``D(d)`` once per distance ``d < max(q_len, k_len)``: each sine by the
   exact path (:func:`fastpe._backends.numba.kernels.sincos_turns` and its C twin, the
   half-angle frequencies' words from :func:`half_turns`), squared and summed with an
   error-free two-sum (compensated), in one fixed order;
2. :func:`head_lines` scales it per head in double arithmetic (the same NumPy operations for
   every backend) and rounds it to the output's format;
3. :func:`mirrored` lays each head's line out symmetrically, so that every output row is one
   contiguous slice of it (``line[|j - c|]`` for ``j = 0 .. k_len-1`` is
   ``mirrored[L-1-c : L-1-c+k_len]``), and a kernel copies the rows (bit patterns, any
   dtype), writing ``+0.0`` where a causal bias masks ``j > i``.

Error: each sine is within a few units of 2**-53 of its value, relatively (the reduced
angle keeps ~2**-85 turns), its square and the compensated sum add as little, and the head's
factor two roundings: the double value is within ~2**-50 of the true one, relatively, so
float32 and narrower values are within 1 ULP (in practice correctly rounded) and float64
within about 2**-50 relative.
"""

from __future__ import annotations

import functools

import numpy as np

from .. import _dtypes
from .._plans import frequencies as _freq

__all__ = ["half_turns", "head_lines", "mirrored", "row_starts", "SANDWICH_BASE"]

#: NeMo's base, fixed in its formula
SANDWICH_BASE = 10000.0


@functools.lru_cache(maxsize=32)
def half_turns(hidden_size: int) -> np.ndarray:
    """Split words ``(4, H/2)`` of ``w_k / 2 = 0.5 * 10000 ** (-k / (H/2))``, ``k = 1 .. H/2``:
    the geometric set of ``H/2 + 1`` frequencies from ``k = 0`` (scale 1/2), less its first."""
    half = hidden_size // 2
    words = _freq.turns(_freq.Geometric(half + 1, float(half), SANDWICH_BASE, 1.0, 0.5))
    out = np.ascontiguousarray(words[:, 1:])
    out.setflags(write=False)
    return out


def head_lines(dsum: np.ndarray, n_heads: int, dtype) -> np.ndarray:
    """``(n_heads, L)`` values ``-(D * n_heads) / (4 (h + 1)) + 0.0`` in double (``+0.0`` at
    ``D = 0``), rounded to ``dtype`` (float32/float64 casts; float16 from the double
    directly; bfloat16 by ml_dtypes' cast)."""
    scale = 4.0 * np.arange(1, n_heads + 1, dtype=np.float64)[:, None]
    values = -(dsum[None, :] * float(n_heads)) / scale + 0.0
    dt = np.dtype(dtype)
    if dt == np.float64:
        return values
    if dt.name == "bfloat16":
        return values.astype(_dtypes.resolve("bfloat16"))
    return values.astype(dt)


def mirrored(lines: np.ndarray) -> np.ndarray:
    """``(n_heads, 2L - 1)``: ``out[h, m] = lines[h, |m - (L - 1)|]``, as unsigned bits."""
    n_heads, length = lines.shape
    bits = lines.view(f"u{lines.dtype.itemsize}")
    out = np.empty((n_heads, 2 * length - 1), dtype=bits.dtype)
    out[:, length - 1:] = bits
    out[:, :length - 1] = bits[:, :0:-1]
    return out


def row_starts(q_len: int, k_len: int) -> int:
    """The mirrored line's first index for row ``i = 0``: row ``i`` starts at ``first - i``
    (distance ``|j - i + q_len - k_len|``, NeMo's slice of the bottom-right of its matrix)."""
    length = max(q_len, k_len)
    return length - 1 - k_len + q_len
