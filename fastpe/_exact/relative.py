"""Reference twins of the DeBERTa and Shaw relative-position kernels: exact, standard library only.

DeBERTa.  The kernels look distances up in a plan of change points
(:func:`fastpe._plans.deberta.bucket_plan`, built by a vectorised NumPy emulation).  Here
each relative position runs through Hugging Face's ``make_log_bucket_position`` itself, one
float32 operation at a time in exact fractions (:func:`fastpe._exact.rounding.round_fraction`):
the float32 of the distance and its quotient by ``mid``, the correctly rounded float32 log
(:func:`fastpe._plans.t5.log_float32`, from :mod:`decimal`), the quotient by the divisor (the
same log of ``float32((max_position - 1) / mid)``), the product, ``ceil`` and the float32 sum
with ``mid``.  ``logs`` (recorded by the plan when a test plugs another float32 log in) maps
an argument to the log to use instead.

Shaw.  tensor2tensor's ``clip(j - i, -k, k) + k`` with the query range the last ``q_len``
key positions: integers, element by element.
"""

from __future__ import annotations

import math
from fractions import Fraction

from .rounding import FORMATS, round_fraction
from .._plans.t5 import log_float32

__all__ = ["deberta_bucket_value", "deberta_bucket", "deberta_bucket_matrix", "shaw_value", "shaw_matrix"]

_F32 = FORMATS["float32"]


def _f32(x) -> Fraction:
    """``x`` rounded to float32, kept as an exact fraction."""
    return Fraction(round_fraction(Fraction(x), _F32))


def _log(y: Fraction, logs) -> Fraction:
    v = (logs or {}).get(float(y))
    return Fraction(log_float32(float(y)) if v is None else v)


def deberta_bucket_value(rp: int, bucket_size: int, max_position: int, logs=None) -> int:
    """HF deberta_v2's ``make_log_bucket_position`` of one relative position, as the integer
    ``.to(torch.long)`` makes of it."""
    mid = bucket_size // 2
    if -mid <= rp <= mid:  # abs_pos <= mid: the position itself
        return rp
    y = _f32(_f32(abs(rp)) / _f32(mid))
    divisor = _log(_f32((max_position - 1) / mid), logs)  # a Python float, then a float32 tensor
    w = _f32(_f32(_log(y, logs) / divisor) * _f32(mid - 1))
    v = _f32(math.ceil(w) + _f32(mid))
    return int(v) if rp > 0 else -int(v)


# ------------------------------------------------------------------------ backend operations
# Plain loops, each value memoised by its relative position: no plan, no row copies.


def _logs(bucket_size: int, max_position: int, reach: int):
    from .._plans import deberta

    if deberta._hf_log is None:
        return None
    return deberta.bucket_plan(bucket_size, max_position, reach).logs


def deberta_bucket(relative_position, bucket_size, max_position, out) -> None:
    values = relative_position.tolist()
    reach = max((abs(v) for v in values), default=0)
    logs = _logs(bucket_size, max_position, reach)
    memo: dict[int, int] = {}
    for index, rp in enumerate(values):
        if rp not in memo:
            memo[rp] = deberta_bucket_value(rp, bucket_size, max_position, logs)
        out[index] = memo[rp]


def deberta_bucket_matrix(bucket_size, max_position, out) -> None:
    q_len, k_len = out.shape
    logs = _logs(bucket_size, max_position, max(q_len, k_len) - 1) if bucket_size else None
    memo: dict[int, int] = {}
    for i in range(q_len):
        for j in range(k_len):
            rp = i - j  # query id minus key id
            if not bucket_size:
                out[i, j] = rp
                continue
            if rp not in memo:
                memo[rp] = deberta_bucket_value(rp, bucket_size, max_position, logs)
            out[i, j] = memo[rp]


def shaw_value(i: int, j: int, max_relative_position: int, query_offset: int) -> int:
    """tensor2tensor's entry: ``clip(j - (i + query_offset), -k, k) + k``."""
    k = max_relative_position
    return min(max(j - (i + query_offset), -k), k) + k


def shaw_matrix(max_relative_position, query_offset, out) -> None:
    q_len, k_len = out.shape
    for i in range(q_len):
        for j in range(k_len):
            out[i, j] = shaw_value(i, j, max_relative_position, query_offset)
