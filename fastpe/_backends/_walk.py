"""How the compiled backends walk a RoPE call: rows of ``q``/``k``, and cos/sin tables in chunks.

Both compiled backends (numba, ``csrc/``) see each input as a flat ``float32`` buffer of rows
of ``head_dim`` values, with element strides for batch, head and sequence:

* ``(batch, heads, seq, head_dim)``: row ``(b, h, s)`` starts at ``b*H*S*D + h*S*D + s*D``;
* ``(tokens, heads, head_dim)``: one batch, ``seq = tokens``, row ``(t, h)`` at ``t*H*D + h*D``.

The cos/sin of a call are computed first, once per ``(position row, frequency)``, as a table
of doubles (see :mod:`fastpe._backends.numba.kernels`, "RoPE"), then every head reads it.  Positions
``(seq,)`` serve the whole batch (one table row per ``s``); ``(batch, seq)`` give a row per
``(b, s)``.  So that the table never costs much memory, a long sequence is done in chunks of
``seq`` of at most :data:`TABLE_BYTES` of table each.  The reference backend does not use
this module: it indexes the arrays its own way, so a mistake here cannot hide in both.
"""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["geometry", "chunks", "chunk_positions", "apply_chunks", "table_args", "TABLE_BYTES"]

#: the largest cos/sin table of doubles one chunk uses
TABLE_BYTES = 32 << 20


def geometry(x: np.ndarray) -> tuple[int, int, int, int, int, int, int]:
    """``(n_batch, n_heads, n_seq, head_dim, stride_batch, stride_head, stride_seq)`` of a
    validated C-contiguous 3-D or 4-D ``x``, strides in elements."""
    if x.ndim == 4:
        b, h, s, d = x.shape
        return b, h, s, d, h * s * d, s * d, d
    t, h, d = x.shape
    return 1, h, t, d, 0, d, h * d


def chunks(n_seq: int, rows_per_seq: int, n_freq: int) -> list[tuple[int, int]]:
    """Split ``range(n_seq)`` so each chunk's table (``rows_per_seq`` rows of ``2*n_freq``
    doubles per sequence index) stays within :data:`TABLE_BYTES`."""
    per_s = max(1, rows_per_seq) * n_freq * 16
    step = max(1, TABLE_BYTES // per_s)
    return [(s0, min(n_seq, s0 + step)) for s0 in range(0, n_seq, step)]


def chunk_positions(positions: np.ndarray, s0: int, s1: int) -> tuple[np.ndarray, int]:
    """The chunk's positions, flat and C-contiguous, and the table-row stride per batch.

    ``positions`` is ``(seq,)`` (stride 0: every batch shares a row) or ``(batch, seq)``.
    """
    if positions.ndim == 1:
        return positions[s0:s1], 0
    return np.ascontiguousarray(positions[:, s0:s1]).reshape(-1), s1 - s0


_NO_K = np.empty(0, dtype=np.float32)


def _pair(q, k):
    """``(n_batch, n_seq, (xq, hq, bq, shq, ssq, xk, hk, bk, shk, ssk))``: q's and k's flat
    memory and geometry as the rotation kernels take them (``k`` may be ``None``)."""
    n_batch, hq, n_seq, _, bq, shq, ssq = geometry(q)
    if k is None:
        xk, hk, bk, shk, ssk = _NO_K, 0, 0, 0, 0
    else:
        _, hk, _, _, bk, shk, ssk = geometry(k)
        xk = k.reshape(-1)
    return n_batch, n_seq, (q.reshape(-1), hq, bq, shq, ssq, xk, hk, bk, shk, ssk)


def apply_chunks(q, k, positions, n_freq: int):
    """The walk both compiled ``rope_apply`` take, chunk by chunk.

    Yields ``(pos, table, args, work)``: the chunk's flat positions, an empty
    ``(len(pos), 2, n_freq)`` table of doubles for the backend to fill with cos/sin, the
    kernel's arguments ``(xq, hq, bq, shq, ssq, xk, hk, bk, shk, ssk, n_batch, s0, s1, table,
    pos_bstride)`` and the chunk's work (pairs rotated).  ``k`` may be ``None``.
    """
    n_batch, n_seq, (xq, hq, bq, shq, ssq, xk, hk, bk, shk, ssk) = _pair(q, k)
    rows_per_seq = 1 if positions.ndim == 1 else n_batch
    scratch = _take_scratch()
    try:
        for s0, s1 in chunks(n_seq, rows_per_seq, n_freq):
            pos, pos_bstride = chunk_positions(positions, s0, s1)
            table = _table(scratch, pos.shape[0], n_freq)
            args = (xq, hq, bq, shq, ssq, xk, hk, bk, shk, ssk, n_batch, s0, s1, table, pos_bstride)
            yield pos, table, args, n_batch * (s1 - s0) * (hq + hk) * 2 * n_freq
    finally:
        _give_back(scratch)


#: tables of at most this many doubles (4 MiB: 4096 positions x 64 frequencies) are written
#: into a buffer each thread keeps: a fresh one page-faulted its pages in on every call (7.6%
#: of apply_qk_ 1x32x4096x128's samples); larger ones are allocated per chunk
SCRATCH_DOUBLES = 1 << 19

_local = threading.local()


def _take_scratch():
    """This thread's table buffer, marked in use (``None`` if a walk in progress holds it:
    a nested walk allocates its own tables)."""
    buf = getattr(_local, "table", None)
    if getattr(_local, "busy", False):
        return None
    _local.busy = True
    if buf is None:
        buf = _local.table = np.empty(SCRATCH_DOUBLES, dtype=np.float64)
    return buf


def _give_back(scratch) -> None:
    if scratch is not None:
        _local.busy = False


def _table(scratch, n_rows: int, n_freq: int) -> np.ndarray:
    need = n_rows * 2 * n_freq
    if scratch is None or need > scratch.size:
        return np.empty((n_rows, 2, n_freq), dtype=np.float64)
    return scratch[:need].reshape(n_rows, 2, n_freq)


def table_args(q, k, table, stride: int, begin: int, end: int):
    """The rotation kernel's arguments for a table the caller filled (``rope_apply_table``):
    ``(args, n_batch, work)``, ``args`` in the order :func:`apply_chunks` documents (table
    row ``b * stride + s - begin`` for sequence index ``s`` of batch ``b``; 3-D arrays: one
    batch, stride 0) and ``work`` counted as :func:`apply_chunks` counts it."""
    n_batch, _, (xq, hq, bq, shq, ssq, xk, hk, bk, shk, ssk) = _pair(q, k)
    args = (xq, hq, bq, shq, ssq, xk, hk, bk, shk, ssk, n_batch, begin, end, table,
            stride if q.ndim == 4 else 0)
    return args, n_batch, n_batch * (end - begin) * (hq + hk) * 2 * table.shape[2]
