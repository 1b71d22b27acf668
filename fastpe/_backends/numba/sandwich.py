"""Numba kernels of the Sandwich bias (fastpe._backends._sandwich explains the two passes):
:func:`_sandwich_line`, one exact sum of squared sines per distance, and :func:`_sandwich_fill`,
each output row a slice of its head's mirrored line.  ``csrc/fastpe_sandwich.h`` is the C twin
(the same operations in the same order, so the same bits)."""

from __future__ import annotations

import numpy as np
from numba import prange

from ._jit import kernel
from .kernels import sincos_turns

__all__ = ["sandwich_line_parallel", "sandwich_line_serial", "sandwich_fill_parallel",
           "sandwich_fill_serial", "LINE_COST"]

#: a distance of the line pass costs about this many fill values per frequency
LINE_COST = 8


#: squares per chunk (their exact-path loop vectorises; the sum then runs over them in order)
CHUNK = 256
#: distances per parallel block (one chunk buffer each)
LINE_ROWS = 16


def _sandwich_line(turns, dsum):
    """``dsum[d] = sum_k sin(2 pi d t_k) ** 2`` (``t_k`` the words of ``w_k / 2``), the
    squares added in order by an error-free two-sum and the errors summed beside; the squares
    of a chunk of frequencies are computed first, as the C twin does (the same bits)."""
    n_freq = turns.shape[1]
    n = dsum.shape[0]
    for blk in prange((n + LINE_ROWS - 1) // LINE_ROWS):
        sq = np.empty(CHUNK)
        for d in range(blk * LINE_ROWS, min(n, (blk + 1) * LINE_ROWS)):
            p = np.float64(d)
            hi = 0.0
            lo = 0.0
            for k0 in range(0, n_freq, CHUNK):
                m = min(CHUNK, n_freq - k0)
                for k in range(m):
                    s, _ = sincos_turns(p, turns[0, k0 + k], turns[1, k0 + k], turns[2, k0 + k], turns[3, k0 + k])
                    sq[k] = s * s
                for k in range(m):
                    t = sq[k]
                    u = hi + t
                    tt = u - hi
                    lo += (hi - (u - tt)) + (t - tt)
                    hi = u
            dsum[d] = hi + lo


def _sandwich_fill(mirror, first, causal, out):
    """``out[h, i, :]`` = ``mirror[h, first - i : first - i + k_len]`` (bit patterns), and
    zeros at ``j > i`` when ``causal``."""
    n_heads, q_len, k_len = out.shape
    for r in prange(n_heads * q_len):
        h = r // q_len
        i = r - h * q_len
        row = out[h, i]
        s0 = first - i
        n = k_len if not causal else min(k_len, i + 1)
        # slice copies: numba lowers them to block copies, ~3x its element loop here
        row[:n] = mirror[h, s0:s0 + n]
        row[n:] = 0


sandwich_line_parallel, sandwich_line_serial = kernel(_sandwich_line)
sandwich_fill_parallel, sandwich_fill_serial = kernel(_sandwich_fill)
