"""Numba kernels of the DeBERTa log buckets and Shaw's clipped relative positions.

DeBERTa: a relative position ``rp`` with ``|rp| <= mid`` is its own bucket; any other is
``sign(rp)`` times the plan's value at the last start at or below ``|rp|``: a search over
:func:`fastpe._plans.deberta.bucket_plan`'s starts (integers only), narrowed by the plan's
index to the few starts of the distance's slot (its binade and the next
:data:`~fastpe._plans.deberta.INDEX_BITS` bits).  The matrix
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

from numba.cpython.unsafe.numbers import leading_zeros

from ..._plans.deberta import INDEX_BITS
from ._jit import inline, kernel

__all__ = ["deberta_bucket_parallel", "deberta_bucket_serial", "deberta_direct_parallel", "deberta_direct_serial", "deberta_fill_parallel", "deberta_fill_serial",
           "shaw_fill_parallel", "shaw_fill_serial", "ITEM_BLOCK", "ROW_BLOCK", "UNBUCKETED"]

#: relative positions per work item of the element-wise kernel
ITEM_BLOCK = 4096
#: rows per work item of the matrix kernel (its first row is looked up, the rest copied)
ROW_BLOCK = 128
#: the ``mid`` that leaves every relative position as it is
UNBUCKETED = (1 << 63) - 1


@inline
def slot_of(d):
    """The plan index's slot of a distance ``d >= 1`` (fastpe._plans.deberta.slot_of)."""
    e = 63 - leading_zeros(np.uint64(d))  # floor(log2 d)
    frac = d - (np.int64(1) << e)
    top = frac >> (e - INDEX_BITS) if e >= INDEX_BITS else frac << (INDEX_BITS - e)
    return e * (1 << INDEX_BITS) + top


@inline
def deberta_one(rp, mid, starts, values, index):
    """HF DeBERTa's bucket of one relative position (``rp > -2**63``) by the plan."""
    d = -rp if rp < 0 else rp  # a select: the sign of a random position is a coin
    if d <= mid:
        return rp
    slot = slot_of(d)
    base = index[slot]
    last = index[slot + 1]
    if last - base <= 3:
        # a narrow slot (every slot of DeBERTa-v3's plan): count the starts after base at or
        # below d, reads clamped to the slot, no branch
        a = min(base + 1, last)
        b = min(base + 2, last)
        base += ((base + 1 <= last) & (starts[a] <= d)) + ((base + 2 <= last) & (starts[b] <= d)) + (
            (base + 3 <= last) & (starts[last] <= d))
    else:
        n = last - base + 1
        while n > 1:  # starts[base] <= d, the answer in [base, base + n)
            half = n >> 1
            base += half * (starts[base + half] <= d)  # arithmetic, not a branch to mispredict
            n -= half
    v = values[base]
    return v if rp > 0 else -v


def _deberta_bucket(rel, mid, starts, values, index, narrow, out):
    """``narrow``: every slot of the plan holds at most 4 candidate starts (the plan's
    ``narrow``); the loop then counts them inline, without :func:`deberta_one`'s halving
    search for wide slots, which LLVM would otherwise keep in the loop (1.7x the time)."""
    size = rel.shape[0]
    n_blocks = (size + ITEM_BLOCK - 1) // ITEM_BLOCK
    for b in prange(n_blocks):
        k0 = b * ITEM_BLOCK
        k1 = min(size, k0 + ITEM_BLOCK)
        if not narrow:
            for k in range(k0, k1):
                out[k] = deberta_one(rel[k], mid, starts, values, index)
            continue
        for k in range(k0, k1):
            rp = rel[k]
            d = -rp if rp < 0 else rp
            if d <= mid:
                out[k] = rp
                continue
            slot = slot_of(d)
            base = index[slot]
            last = index[slot + 1]
            a = min(base + 1, last)
            c = min(base + 2, last)
            base += (np.int64((base + 1 <= last) and (starts[a] <= d)) + np.int64((base + 2 <= last) and (starts[c] <= d))
                     + np.int64((base + 3 <= last) and (starts[last] <= d)))
            v = values[base]
            out[k] = v if rp > 0 else -v


def _deberta_direct(rel, mid, table, out):
    """:func:`_deberta_bucket` by the plan's direct table (fastpe._plans.deberta.direct_table:
    a slot holds at most one start past its first distance): one load of the slot's
    ``(t, v0, v1)``, then a select, no load depending on another."""
    size = rel.shape[0]
    n_blocks = (size + ITEM_BLOCK - 1) // ITEM_BLOCK
    for b in prange(n_blocks):
        k0 = b * ITEM_BLOCK
        k1 = min(size, k0 + ITEM_BLOCK)
        for k in range(k0, k1):
            rp = rel[k]
            d = -rp if rp < 0 else rp
            if d <= mid:
                out[k] = rp
                continue
            t = 3 * slot_of(d)
            v = table[t + 2] if d >= table[t] else table[t + 1]
            out[k] = v if rp > 0 else -v


def _deberta_fill(mid, starts, values, index, out):
    q_len, k_len = out.shape
    n_blocks = (q_len + ROW_BLOCK - 1) // ROW_BLOCK
    for b in prange(n_blocks):
        r0 = b * ROW_BLOCK
        r1 = min(q_len, r0 + ROW_BLOCK)
        row = out[r0]
        for j in range(k_len):
            row[j] = deberta_one(np.int64(r0) - j, mid, starts, values, index)
        for i in range(r0 + 1, r1):
            above = out[i - 1]
            row = out[i]
            row[0] = deberta_one(np.int64(i), mid, starts, values, index)
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
deberta_direct_parallel, deberta_direct_serial = kernel(_deberta_direct)
deberta_fill_parallel, deberta_fill_serial = kernel(_deberta_fill)
shaw_fill_parallel, shaw_fill_serial = kernel(_shaw_fill)
