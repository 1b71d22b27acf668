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

__all__ = ["LAYOUTS", "LAYOUT_CODES", "TABLE_LAYOUTS", "TABLE_LAYOUT_HELP", "columns", "column_owner"]

LAYOUTS: tuple[str, ...] = ("interleaved", "halves", "halves_cos")
#: layout name -> the code the compiled kernels take
LAYOUT_CODES: dict[str, int] = {name: code for code, name in enumerate(LAYOUTS)}

#: the layouts a sinusoidal table offers (``fastpe.table``, ``PosEncConfig``, ``fastpe table
#: --layout``), the default first, each with the line its help text gives (``halves_cos`` is
#: the timesteps' ``flip_sin_to_cos``)
TABLE_LAYOUT_HELP: dict[str, str] = {
    "interleaved": "sin, cos, sin, cos, ... (the spec)",
    "halves": "[sin | cos]",
}
TABLE_LAYOUTS: tuple[str, ...] = tuple(TABLE_LAYOUT_HELP)


def columns(count: int, d: int, layout: str) -> list[tuple[int | None, int | None]]:
    """``(sin column, cos column)`` of each of ``count`` frequencies in a row of ``d`` columns
    (``None`` past the row's end): the rule above.  The compiled kernels' scatter (numba
    ``kernels._scatter``, ``csrc/_ext.pyx``'s ``_scatter``) follows it too; the agreement
    tests compare every backend with the reference built on this one."""
    cols = []
    for k in range(count):
        if layout == "interleaved":
            js, jc = 2 * k, 2 * k + 1
        elif layout == "halves":
            js, jc = k, count + k
        else:  # "halves_cos"
            js, jc = count + k, k
        cols.append((js if js < d else None, jc if jc < d else None))
    return cols


def column_owner(layout: str, count: int, j: int) -> tuple[int, bool]:
    """``(k, is_cos)`` of column ``j`` (a non-zero one, ``j < 2 * count``): the inverse of
    :func:`columns`."""
    if layout == "interleaved":
        return j // 2, bool(j & 1)
    first_is_cos = layout == "halves_cos"
    return (j, first_is_cos) if j < count else (j - count, not first_is_cos)
