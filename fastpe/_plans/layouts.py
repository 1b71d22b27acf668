"""Column layouts of the sinusoid families, for the kernels that compute ``(cos, sin)`` pairs.

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

__all__ = ["LAYOUTS", "LAYOUT_CODES"]

LAYOUTS: tuple[str, ...] = ("interleaved", "halves", "halves_cos")
#: layout name -> the code the compiled kernels take
LAYOUT_CODES: dict[str, int] = {name: code for code, name in enumerate(LAYOUTS)}
