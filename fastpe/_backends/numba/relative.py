"""Numba kernels of the DeBERTa log buckets and Shaw's clipped relative positions.

DeBERTa: a relative position ``rp`` with ``|rp| <= mid`` is its own bucket; any other is
``sign(rp)`` times the plan's value at the last start at or below ``|rp|`` (a binary search
over :func:`fastpe._plans.deberta.bucket_plan`'s starts: integers only).  The matrix
``out[i, j] = B(i - j)`` is cut into blocks of rows: a block's first row is looked up value
by value, and every next row is the one above shifted right by one column with ``B(i)`` in
front (``out[i, j] = out[i - 1, j - 1]``), written in place: no line, no temporaries.
``mid`` at its largest value means unbucketed (``i - j`` itself).

Shaw: ``clip(j - (i + offset), -k, k) + k`` per entry, row by row (the C twin writes each
row as its three pieces instead: its baseline build has no 64-bit vector compare).

``csrc/fastpe_relative.h`` is the C twin: the same integers.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ._jit import inline, kernel

__all__ = ["deberta_bucket_parallel", "deberta_bucket_serial", "deberta_fill_parallel", "deberta_fill_serial",
           "shaw_fill_parallel", "shaw_fill_serial", "ITEM_BLOCK", "ROW_BLOCK", "UNBUCKETED"]

#: relative positions per work item of the element-wise kernel
ITEM_BLOCK = 4096
#: rows per work item of the matrix kernel (its first row is looked up, the rest copied)
ROW_BLOCK = 32
#: the ``mid`` that leaves every relative position as it is
UNBUCKETED = (1 << 63) - 1


@inline
def deberta_one(rp, mid, starts, values):
    """HF DeBERTa's bucket of one relative position (``rp > -2**63``) by the plan."""
    if rp > mid:
        d = rp
    elif rp < -mid:
        d = -rp
    else:
        return rp
    base = 0
    n = starts.shape[0]
    while n > 1:  # starts[base] <= d (starts[0] = mid + 1), the answer in [base, base + n)
        half = n >> 1
        base += half * (starts[base + half] <= d)  # arithmetic, not a branch to mispredict
        n -= half
    v = values[base]
    return v if rp > 0 else -v


def _deberta_bucket(rel, mid, starts, values, out):
    size = rel.shape[0]
    n_blocks = (size + ITEM_BLOCK - 1) // ITEM_BLOCK
    for b in prange(n_blocks):
        for k in range(b * ITEM_BLOCK, min(size, (b + 1) * ITEM_BLOCK)):
            out[k] = deberta_one(rel[k], mid, starts, values)


def _deberta_fill(mid, starts, values, out):
    q_len, k_len = out.shape
    n_blocks = (q_len + ROW_BLOCK - 1) // ROW_BLOCK
    for b in prange(n_blocks):
        r0 = b * ROW_BLOCK
        r1 = min(q_len, r0 + ROW_BLOCK)
        row = out[r0]
        for j in range(k_len):
            row[j] = deberta_one(np.int64(r0) - j, mid, starts, values)
        for i in range(r0 + 1, r1):
            above = out[i - 1]
            row = out[i]
            row[0] = deberta_one(np.int64(i), mid, starts, values)
            for j in range(1, k_len):
                row[j] = above[j - 1]


def _shaw_fill(k, offset, out):
    q_len, k_len = out.shape
    for i in prange(q_len):
        row = out[i]
        p = np.int64(i) + offset
        for j in range(k_len):  # the compares vectorise here (LLVM targets this CPU)
            d = np.int64(j) - p
            if d < -k:
                d = -k
            elif d > k:
                d = k
            row[j] = d + k


deberta_bucket_parallel, deberta_bucket_serial = kernel(_deberta_bucket)
deberta_fill_parallel, deberta_fill_serial = kernel(_deberta_fill)
shaw_fill_parallel, shaw_fill_serial = kernel(_shaw_fill)
