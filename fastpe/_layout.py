"""Column layouts of the sinusoid families, for kernels that compute ``(cos, sin)`` pairs.

A layout says where the sine and cosine of frequency ``k`` (of ``count``) go in a row of
``d`` columns:

``interleaved`` (the spec; HF DistilBERT/XLM)
    ``2k`` and ``2k + 1``;
``halves`` (``[sin | cos]``; HF Marian/RoFormer, fairseq, MAE's 1-D blocks)
    ``k`` and ``count + k``;
``halves_cos`` (``[cos | sin]``; diffusers' ``flip_sin_to_cos``)
    ``count + k`` and ``k``.

A column past the row's end is dropped (an odd ``d`` loses the last cosine); columns from
``2 * count`` on are zero (an odd ``d`` under the ``half-1`` denominator, a timestep of odd
``dim``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["LAYOUTS", "scatter"]

LAYOUTS: tuple[str, ...] = ("interleaved", "halves", "halves_cos")


def scatter(table: np.ndarray, layout: str, out: np.ndarray) -> None:
    """Write ``table`` (``(n, 2, count)`` doubles: ``[:, 0]`` cosines, ``[:, 1]`` sines) into
    ``out`` (``(n, d)``, ``d >= 2 * count - 1``), rounding to ``out``'s dtype."""
    count = table.shape[2]
    d = out.shape[1]
    cos, sin = table[:, 0], table[:, 1]
    if layout == "interleaved":
        out[:, 0:2 * count:2] = sin
        m = min(count, d // 2)
        out[:, 1:2 * m:2] = cos[:, :m]
    else:
        first, second = (sin, cos) if layout == "halves" else (cos, sin)
        out[:, :count] = first
        m = min(count, d - count)
        out[:, count:count + m] = second[:, :m]
    if d > 2 * count:
        out[:, 2 * count:] = 0
