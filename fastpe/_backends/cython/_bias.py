"""The ``cython`` backend's attention-bias operations (ALiBi, T5 buckets), through the
compiled ``fastpe._backends.cython._ext_bias``.

Importing this module raises :class:`ImportError` when that extension was not built (the
``cython`` backend is then unavailable, as without ``fastpe._backends.cython._ext``).  The C kernels
(``csrc/fastpe_bias.h``) are the twin of :mod:`fastpe._backends.numba.bias`: the same two passes -- an
exact line per head (or of relative positions), then a gather -- and the same bits.  Large
outputs are split across Python threads by :func:`fastpe._backends.cython._split`, each pass on its
own; the threads release the GIL in the kernels.
"""

from __future__ import annotations

import numpy as np

from . import _ext_bias

__all__ = ["alibi_bias", "t5_bucket", "t5_bucket_matrix"]

#: the line pass costs about this many fill values per value (as in fastpe._backends.numba.bias)
LINE_COST = 8


def alibi_bias(n_heads, max_bias, form, out) -> None:
    from . import _split, narrow16
    from ...alibi import FORM_CODES, NEG_INF16, _narrow_line, _slope_words

    words = _slope_words(n_heads, max_bias)
    _, q_len, k_len = out.shape
    wide = out.dtype in (np.float32, np.float64)
    line = np.empty((n_heads, k_len), dtype=out.dtype if wide else np.float32)
    _split(lambda lo, hi: _ext_bias.alibi_line(words, line, lo, hi), k_len, line.size * LINE_COST)
    code = FORM_CODES[form]
    if wide:
        _split(lambda lo, hi: _ext_bias.alibi_fill(line, code, out, lo, hi), n_heads * q_len, out.size)
        return
    # float16 / bfloat16: the line narrowed, then spread as bit patterns
    bits = _narrow_line(narrow16, n_heads, max_bias, line, out.dtype)
    neg_inf, target = NEG_INF16[out.dtype.name], out.view(np.uint16)
    _split(lambda lo, hi: _ext_bias.alibi_fill16(bits, code, neg_inf, target, lo, hi), n_heads * q_len, out.size)


def _thresholds(bidirectional, num_buckets, max_distance):
    from ...relative import _plan

    n = num_buckets // 2 if bidirectional else num_buckets
    return n, _plan(n, max_distance)[0]


def t5_bucket(relative_position, bidirectional, num_buckets, max_distance, out) -> None:
    from . import _split

    n, thresholds = _thresholds(bidirectional, num_buckets, max_distance)
    flag = bool(bidirectional)
    _split(lambda lo, hi: _ext_bias.t5_bucket(relative_position, flag, n, thresholds, out, lo, hi),
           out.shape[0], out.size * 4)


def t5_bucket_matrix(query_offset, bidirectional, num_buckets, max_distance, out) -> None:
    from . import _split

    n, thresholds = _thresholds(bidirectional, num_buckets, max_distance)
    flag = bool(bidirectional)
    q_len, k_len = out.shape
    line = np.empty(q_len + k_len - 1, dtype=out.dtype)
    first = -(q_len - 1) - int(query_offset)  # j - (i + offset) at i = q_len - 1, j = 0
    _split(lambda lo, hi: _ext_bias.t5_line(first, flag, n, thresholds, line, lo, hi),
           line.shape[0], line.size * 4)
    _split(lambda lo, hi: _ext_bias.t5_fill(line, out, lo, hi), q_len, out.size)
