"""The ``cython`` backend: the C kernels of ``csrc/`` through the compiled ``fastpe._backends.cython._ext``.

Importing this module raises :class:`ImportError` when the optional extensions (``_ext`` and
``_ext_bias``, the attention biases and the M-RoPE positions) were not built;
fastpe then falls back to its other backends.  The C kernels are the twin of the numba ones:
the same exact path and the same anchored products (see :mod:`fastpe._plans.words`), so the same
bits (``tests/backends/test_cython.py`` checks it).

Parallelism: a call cuts its rows (or items) into blocks that the calling thread and a pool
of persistent worker threads (``csrc/fastpe_pool.h``, one pool for both extensions) claim
one at a time, with the GIL released; the values do not depend on the cut.  Not OpenMP: a
GNU OpenMP runtime that has run in a process hangs its ``fork()`` children.  The workers
start on the first parallel call and sleep between calls; a forked child drops the pool and
starts its own on its first parallel call; a caller that finds the workers busy with another
caller's call runs its blocks itself.  Handing a call to the workers costs a few
microseconds (starting a thread cost ~0.1 ms), so outputs below :data:`PARALLEL_FROM` units
of work run in the calling thread.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from . import _ext, _ext_bias
from ..._plans import frequencies as _freq
from ..._plans import mrope as _mrope
from ..._plans import deberta as _deberta
from ..._plans import words as _words
from ..._plans.alibi import FORM_CODES, NEG_INF16, narrow_line, slope_words
from ..._plans.layouts import LAYOUT_CODES
from ..._plans.t5 import bucket_plan
from ..._plans.words import frequency_turns, sinusoid_turns
from ..._plans.poly import COS_COEFFS, SIN_COEFFS
from .._steps import step_plan
from .._walk import apply_chunks, table_args
from .. import _xpos as _xpos_plan
from ..registry import OPERATIONS

#: what the C kernels were compiled with, beside the home of each rule in fastpe._plans
_COMPILED = {
    "polynomials": (_ext.coefficients(), (SIN_COEFFS, COS_COEFFS)),
    "STEPS": (_ext.STEPS, _words.STEPS),
    "TINY": (_ext.TINY, _words.TINY),
    "TINY64": (getattr(_ext, "TINY64", None), _words.TINY),
    "TINY bits": (getattr(_ext, "TINY_BITS", None), int(np.float32(_words.TINY).view(np.uint32))),
    "layout codes": (getattr(_ext, "LAYOUT_CODES", None), LAYOUT_CODES),
    "form codes": (getattr(_ext_bias, "FORM_CODES", None), FORM_CODES),
    "M-RoPE codes": (getattr(_ext_bias, "MROPE_CODES", None), _mrope.CODES),
    "M-RoPE limit": (getattr(_ext_bias, "MROPE_POSITION_LIMIT", None), _mrope.POSITION_LIMIT),
    "M-RoPE fields": (getattr(_ext_bias, "MROPE_FIELDS", None), len(_mrope.SEGMENT_FIELDS)),
    "DeBERTa index bits": (getattr(_ext_bias, "DEBERTA_INDEX_BITS", None), _deberta.INDEX_BITS),
    "xPos step": (getattr(_ext, "XPOS_STEP", None), _xpos_plan.STEP),
}
_STALE = [name for name, (built, home) in _COMPILED.items() if built != home]
if _STALE:
    # a stale build left in the tree would give wrong bits; refuse it, fastpe falls back
    raise ImportError(f"fastpe._backends.cython was built from other kernel constants ({', '.join(_STALE)}); rebuild it")

#: every operation of the contract (fastpe._backends.registry), and what else this backend reports
__all__ = [*OPERATIONS, "build_info", "threads", "rotation_kernel"]

#: work is counted in table values (one complex product each); a value of ``forward`` costs
#: about FORWARD_COST of them, as its row also needs an exact anchor
FORWARD_COST = 4
#: outputs with less work than this run in the calling thread.  Posting a call to the pool
#: costs ~0.4 us, but a worker woken from its condition variable starts 5-30 us later on a
#: quiet machine (more where other processes hold the CPUs), and the caller waits for the
#: block it took: 2**18 units (~80 us of table values on one thread) is where a 512-wide
#: table measured the same on one thread and two on a busy 2-CPU machine
PARALLEL_FROM = 1 << 18
#: each block of a parallel call gets at least this much work
MIN_BLOCK = 1 << 15


def threads() -> int:
    """Threads a large output is split across: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


# one pool for both extensions, of the size threads() gives at import (in a forked child, on
# its first parallel call); _ext_bias runs its blocks on _ext's pool
_ext.set_pool_threads(threads())
_ext_bias.set_pool(_ext.pool_capsule())


def build_info() -> dict:
    """The extension's build: instruction set targeted and kernel copy in use."""
    return _ext.build_info()


#: ``(turns, steps)`` of a frequency set, ``_planned(words, *key)``: fastpe._backends._steps
_planned = functools.partial(step_plan, _ext.sincos_steps)


#: blocks per thread of a large call: threads claim blocks as they come free, so a thread the
#: OS runs late (another process on its CPU) leaves its share to the others
PARTS_PER_THREAD = 8


def _parts(n_items: int, work: int, n_threads: int | None = None) -> int:
    """Blocks to cut ``n_items`` (``work`` in all) into: 1 when ``work < PARALLEL_FROM`` or
    on one thread, else up to :data:`PARTS_PER_THREAD` per thread, each with at least
    ``MIN_BLOCK`` work and one item."""
    if work < PARALLEL_FROM:  # before threads(): reading the CPU affinity costs ~1 us a call
        return 1
    n = threads() if n_threads is None else n_threads
    if n < 2:
        return 1
    return max(1, min(n * PARTS_PER_THREAD, work // MIN_BLOCK, n_items))


def _call(kernel, args, n_items: int, work: int, n_threads: int | None = None) -> None:
    """``kernel(*args)`` over all its ``n_items`` rows or items: in the calling thread when
    :func:`_parts` says one block, else ``kernel(*args, parts=...)`` through
    :func:`_run_blocks`, the kernel cutting its range into blocks on the pool."""
    parts = _parts(n_items, work, n_threads)
    if parts == 1:
        kernel(*args)
    else:
        _run_blocks(lambda lo, hi: kernel(*args, parts=parts), [(0, n_items)])


def _run_blocks(run, blocks: list[tuple[int, int]]) -> None:
    """``run(lo, hi)`` for each block: the one way into the parallel path (a compiled
    kernel's call is one block, which it cuts into parts itself; :func:`_split`'s Python
    callables are cut here and run on the pool)."""
    for lo, hi in blocks:
        run(lo, hi)


def _fill(kernel, first_arg, turns, steps, out, n_threads: int | None = None, cost: int = 1):
    """``kernel(first_arg, turns, steps, out)`` over all rows, in blocks on the pool."""
    n_rows, d_model = out.shape
    _call(kernel, (first_arg, turns, steps, out), n_rows, n_rows * d_model * cost, n_threads)


def _split(run, n_items: int, work: int, n_threads: int | None = None) -> None:
    """``run(lo, hi)`` over contiguous blocks of ``range(n_items)``, on the pool if ``work``
    is large enough (same rules as :func:`_fill`); ``run`` must write disjoint outputs and
    release the GIL for its work to overlap."""
    parts = _parts(n_items, work, n_threads)
    if parts == 1:
        if n_items:
            run(0, n_items)
        return
    _run_blocks(lambda lo, hi: _ext.run_parts(run, lo, hi, parts), [(0, n_items)])


def sinusoid_forward(positions, d_model, base, out) -> None:
    # uint32, or int64 with |p| < 2**32 (csrc/fastpe_signed.h: the sines of negative ones negated)
    kernel = _ext.sinusoid_signed if positions.dtype == np.int64 else _ext.sinusoid_forward
    _fill(kernel, positions, *_planned(sinusoid_turns, d_model, base), out, cost=FORWARD_COST)


def sinusoid_range(start, d_model, base, out) -> None:
    _fill(_ext.sinusoid_range, int(start), *_planned(sinusoid_turns, d_model, base), out)


# ------------------------------------------------------------------------------------ RoPE
# The same definition as the numba backend (see fastpe._backends.numba.kernels, "RoPE"): the doubles
# C, S per (position, frequency), computed once per call into a table that every head reads.


def _table(positions, inv_freq, attention_factor, table) -> None:
    turns, steps = _planned(frequency_turns, inv_freq)
    af = float(attention_factor)
    n = table.shape[0]
    _call(_ext.rope_table, (positions, turns, steps, af, table), n, n * turns.shape[1] * 2 * FORWARD_COST)


def rope_cos_sin(positions, inv_freq, attention_factor, layout, out_cos, out_sin) -> None:
    turns, steps = _planned(frequency_turns, inv_freq)
    af, neox = float(attention_factor), layout == "neox"
    _call(_ext.rope_cos_sin, (positions, turns, steps, af, neox, out_cos, out_sin),
          out_cos.shape[0], out_cos.size * 2)


def rope_table(positions, inv_freq, attention_factor, out) -> None:
    _table(positions, inv_freq, attention_factor, out)


def _apply_items(args) -> int:
    """The C kernel's work items for arguments in the order apply_chunks documents."""
    _, hq, _, shq, ssq, _, hk, _, shk, ssk, n_batch, s0, s1 = args[:13]
    return _ext.rope_apply_items(hq, shq, ssq, hk, shk, ssk, n_batch, s0, s1)


def rope_apply(q, k, positions, inv_freq, attention_factor, layout) -> None:
    neox = layout == "neox"
    for pos, table, args, work in apply_chunks(q, k, positions, len(inv_freq)):
        _table(pos, inv_freq, attention_factor, table)
        _call(_ext.rope_apply, (*args, neox), _apply_items(args), work)


def rope_apply_table(q, k, table, stride, begin, end, layout) -> None:
    args, _, work = table_args(q, k, table, stride, begin, end)
    _call(_ext.rope_apply, (*args, layout == "neox"), _apply_items(args), work)


#: a value of the xPos scaling (anchored: two products) costs about this many table values
XPOS_COST = 2


def rope_xpos_table(positions, inv_freq, attention_factor, zeta, scale_base, center, out_q, out_k) -> None:
    _table(positions, inv_freq, attention_factor, out_q)
    n = out_q.shape[0]
    up, down = _xpos_plan.steps_of(zeta, scale_base)
    _call(_ext.xpos_scale, (positions, np.asarray(zeta, dtype=np.float64), float(scale_base), int(center),
                            up, down, out_q, out_k), n, n * len(zeta) * XPOS_COST)


def rotation_kernel():
    """The C kernel of :func:`rope_apply_table`, every work item in the calling thread."""
    return _ext.rope_apply


# ----------------------------------------------------------------------- sinusoid families
# The values of the numba kernels (fastpe._backends.numba.kernels, "Sinusoid families"): the RoPE
# doubles C, S with af = 1 (integer positions) or the real-position exact path, computed a
# block of rows at a time into a small table, then laid out and rounded, in C (csrc/_ext.pyx).


def sincos_rows(positions, freqs, layout, out) -> None:
    turns, steps = _planned(_freq.turns, freqs)
    code = LAYOUT_CODES[layout]
    n = out.shape[0]
    kernel = _ext.sincos_rows_signed if positions.dtype == np.int64 else _ext.sincos_rows
    _call(kernel, (positions, turns, steps, code, out), n, n * turns.shape[1] * 2 * FORWARD_COST)


def sincos_real(x, freqs, layout, out) -> None:
    turns = _freq.turns(freqs)
    code = LAYOUT_CODES[layout]
    n = out.shape[0]
    _call(_ext.sincos_real_rows, (x, turns, code, out), n, n * turns.shape[1] * 2 * FORWARD_COST * 4)


def grid_gather(table, sizes, sin_off, cos_off, first_row, out) -> None:
    """The grid copy (no numerics): per block of leading-axis slices, one broadcast
    assignment per axis and half, on threads; NumPy releases the GIL for the copies."""
    q = table.shape[1] // 2
    shape = tuple(int(s) for s in sizes)
    grid = out[first_row:].reshape(shape + (out.shape[1],))

    def run(lo, hi):
        part = grid[lo:hi]
        for a, size in enumerate(shape):
            coords = np.arange(lo, hi) if a == 0 else np.arange(size)
            view = [1] * len(shape)
            view[a] = len(coords)
            src = table[coords].reshape(tuple(view) + (2 * q,))
            so, co = int(sin_off[a]), int(cos_off[a])
            part[..., so:so + q] = src[..., :q]
            part[..., co:co + q] = src[..., q:]

    _split(run, shape[0], grid.size)


#: the axial caches' copy runs on threads from this many values copied (8 MB of float32):
#: FLUX 64x64 (2**20 values) measured ~200-230 us serially on a 2-CPU machine with the other
#: CPU busy, and its median on the pool as much or up to 5x more (a worker that claims a block
#: and is then descheduled holds the call: right after torch's spinning OpenMP threads, say);
#: the copy is ~90 us of it, so on an idle machine the pool could save ~40 us at most
AXIAL_PARALLEL_FROM = 1 << 21


def axial_gather(table, index, pieces, out_cos, out_sin) -> None:
    n = out_cos.shape[0]
    _call(_ext.axial_gather, (table, index, pieces, out_cos, out_sin), n,
          out_cos.size * 2 * PARALLEL_FROM // AXIAL_PARALLEL_FROM)


def add_rows(x, pe, scale) -> None:
    """``x * scale + pe`` in place, by NumPy on blocks of leading rows, on threads."""
    factor = None if scale is None else x.dtype.type(scale)

    def run(lo, hi):
        part = x[lo:hi]
        # IEEE results (inf * 0 is NaN, overflow is inf) without NumPy's warnings, as the
        # numba kernel gives them: a warning is not a property of the values
        with np.errstate(all="ignore"):
            if factor is not None:
                np.multiply(part, factor, out=part)
            part += pe

    _split(run, x.shape[0], x.size)


# ------------------------------------------------------------------------ attention biases
# through the second extension, fastpe._backends.cython._ext_bias (csrc/fastpe_bias.h, the twin
# of fastpe._backends.numba.bias): an exact line per head (or of relative positions), then a
# gather, each pass split across threads on its own


#: the line pass costs about this many fill values per value (as in fastpe._backends.numba.bias)
LINE_COST = 8
#: the float32 line's first pass (one double product a value, rounded and judged by its
#: bits, 16 a turn) costs about one fill value per value: BLOOM's 32 x 2048 line takes ~12 us
#: on one thread, less than waking a worker costs on a busy machine
LINE_COST32 = 1


def _alibi_line(words, line) -> None:
    cost = LINE_COST32 if line.dtype == np.float32 else LINE_COST
    _call(_ext_bias.alibi_line, (words, line), line.shape[1], line.size * cost)


def alibi_bias(n_heads, max_bias, form, out) -> None:
    words = slope_words(n_heads, max_bias)
    _, q_len, k_len = out.shape
    wide = out.dtype == np.float32 or out.dtype == np.float64
    if wide and q_len == 1 and form == "bloom":
        # BLOOM's one query row is the line itself (the fill copies it): written in place
        _alibi_line(words, out.reshape(n_heads, k_len))
        return
    line = np.empty((n_heads, k_len), dtype=out.dtype if wide else np.float32)
    _alibi_line(words, line)
    code = FORM_CODES[form]
    if wide:
        _call(_ext_bias.alibi_fill, (line, code, out), n_heads * q_len, out.size)
        return
    # float16 / bfloat16: the line narrowed, then spread as bit patterns
    from ..._exact.bias import alibi_value

    bits = narrow_line(narrow16, alibi_value, n_heads, max_bias, line, out.dtype)
    neg_inf, target = NEG_INF16[out.dtype.name], out.view(np.uint16)
    _call(_ext_bias.alibi_fill16, (bits, code, neg_inf, target), n_heads * q_len, out.size)


def t5_bucket(relative_position, bidirectional, num_buckets, max_distance, out) -> None:
    n, thresholds, _ = bucket_plan(bidirectional, num_buckets, max_distance)
    flag = bool(bidirectional)
    _call(_ext_bias.t5_bucket, (relative_position, flag, n, thresholds, out), out.shape[0], out.size * 4)


def t5_bucket_matrix(query_offset, bidirectional, num_buckets, max_distance, out) -> None:
    n, thresholds, _ = bucket_plan(bidirectional, num_buckets, max_distance)
    flag = bool(bidirectional)
    q_len, k_len = out.shape
    line = np.empty(q_len + k_len - 1, dtype=out.dtype)
    first = -(q_len - 1) - int(query_offset)  # j - (i + offset) at i = q_len - 1, j = 0
    _call(_ext_bias.t5_line, (first, flag, n, thresholds, line), line.shape[0], line.size * 4)
    _call(_ext_bias.t5_fill, (line, out), q_len, out.size)


# ------------------------------------------------------------- DeBERTa and Shaw positions
# through _ext_bias (csrc/fastpe_relative.h, the twin of fastpe._backends.numba.relative):
# look-ups in the plan of fastpe._plans.deberta, rows of the matrix split over the pool


def _deberta_plan(bucket_size, max_position, distance):
    from ..._plans.deberta import bucket_plan, search_index

    if not bucket_size:
        empty = np.zeros(0, dtype=np.int64)  # mid at its largest: every distance stays below the search
        return _ext_bias.DEBERTA_UNBUCKETED, empty, empty, search_index(empty)
    plan = bucket_plan(bucket_size, max_position, distance)
    return plan.mid, plan.starts, plan.values, plan.index


def deberta_bucket(relative_position, bucket_size, max_position, out) -> None:
    whole = _deberta.direct_plan(bucket_size, max_position) if bucket_size else None
    if whole is not None:  # covers every distance: no pass for the positions' reach
        _call(functools.partial(_ext_bias.deberta_bucket, direct=whole.direct),
              (relative_position, whole.mid, whole.starts, whole.values, whole.index, out), out.shape[0],
              out.size * 4)
        return
    reach = max(int(relative_position.max()), -int(relative_position.min())) if relative_position.size else 0
    mid, starts, values, index = _deberta_plan(bucket_size, max_position, reach)
    _call(_ext_bias.deberta_bucket, (relative_position, mid, starts, values, index, out), out.shape[0],
          out.size * 4)


def deberta_bucket_matrix(bucket_size, max_position, out) -> None:
    mid, starts, values, index = _deberta_plan(bucket_size, max_position, max(out.shape) - 1)
    _call(_ext_bias.deberta_fill, (mid, starts, values, index, out), out.shape[0], out.size)


def shaw_matrix(max_relative_position, query_offset, out) -> None:
    _call(_ext_bias.shaw_fill, (int(max_relative_position), int(query_offset), out), out.shape[0], out.size)


def narrow16(bits32, bf16, out, ties) -> None:
    flags = ties.view(np.uint8)
    _call(_ext.narrow16, (bits32, bool(bf16), out, flags), bits32.size, bits32.size)


# ------------------------------------------------------------------------ M-RoPE positions
# through _ext_bias (csrc/fastpe_mrope.h, the twin of fastpe._backends.numba.mrope): the plan
# on the calling thread (the grids are consumed in order across the rows), the fill split
# over ranges of tokens on the pool


#: a token of the fill counts as this much work (three int64 stores), so it is split from
#: PARALLEL_FROM / 3 ~ 87k tokens: on a 2-CPU machine with the other CPU busy, two ranges
#: were no faster than one up to ~30k tokens and at best ~1.3-1.8x faster from ~60k (the
#: fill is a memory-bound write), sometimes slower; a whole 120k-token call measured the same
MROPE_TOKEN_COST = 3


def mrope_plan(ids, columns, n_rows, image_token_id, video_token_id, images, videos, merge,
               video_times, segments, temporal, deltas, info) -> None:
    _ext_bias.mrope_plan(ids, columns, n_rows, image_token_id, video_token_id, images, videos, merge,
                         video_times, segments, temporal, deltas, info)


def mrope_fill(segments, temporal, columns, out) -> None:
    """Cut into ranges of tokens (whatever the sizes of the runs) on the pool."""
    n_tokens = columns.shape[0] or out.shape[1]  # a plan's segments hold every attended token
    _call(_ext_bias.mrope_fill, (segments, temporal, columns, out), n_tokens, n_tokens * MROPE_TOKEN_COST)


# ------------------------------------------------------------------------ calendar fields
# through _ext_bias (csrc/fastpe_calendar.h, the twin of fastpe._backends.numba.calendar):
# ranges of timestamps on the pool

#: a timestamp counts as this much work (two dozen integer operations, a few divisions)
CALENDAR_COST = 16


def calendar_fields(ticks, per_second, tick_seconds, fields, offsets, out) -> None:
    n = ticks.shape[0]
    _call(_ext_bias.calendar_fields, (ticks, int(per_second), int(tick_seconds), fields, offsets, out), n,
          n * CALENDAR_COST)


# ------------------------------------------------------------- Fourier features, time encodings
# csrc/fastpe_time.h through _ext (the twin of fastpe._backends.numba.time), ranges of ticks on
# the pool; the plans are fastpe._plans.time's

#: a value counts as this much work (a residue step or six split products, the polynomials)
TIME_COST = 8


def fourier_ticks(ticks, numerator, denominator, order, out) -> None:
    from ..._plans import time as _plan

    plan = _plan.fourier_plan(int(numerator), int(denominator), int(order))
    n = ticks.shape[0]
    if plan[0] == "exact":
        _, d, table, dh, dl = plan
        _call(_ext.fourier_exact, (ticks, d, table, dh, dl, out), n, out.size * TIME_COST)
    else:
        _call(_ext.time_words, (ticks, plan[1], False, out), n, out.size * TIME_COST)


def time_cos(ticks, frequencies, scale, out) -> None:
    from ..._plans import time as _plan

    words = _plan.time_cos_words(tuple(frequencies), scale)
    _call(_ext.time_words, (ticks, words, True, out), ticks.shape[0], out.size * TIME_COST)


# ------------------------------------------------------------------------------- Sandwich
# fastpe._backends._sandwich: the per-distance sums (csrc/fastpe_sandwich.h), the per-head
# lines in NumPy, then the rows copied from the mirrored lines, each pass on the pool.

#: a distance of the line pass costs about this many table values per frequency
SANDWICH_LINE_COST = 8


def sandwich_bias(n_heads, hidden_size, bidirectional, out) -> None:
    from .. import _sandwich as _sw

    _, q_len, k_len = out.shape
    length = max(q_len, k_len)
    turns = _sw.half_turns(hidden_size)
    dsum = np.empty(length, dtype=np.float64)
    _call(_ext.sandwich_line, (turns, dsum), length, length * turns.shape[1] * SANDWICH_LINE_COST)
    mirror = _sw.mirrored(_sw.head_lines(dsum, n_heads, out.dtype))
    target = out.view(mirror.dtype)
    _call(_ext.sandwich_fill, (mirror, _sw.row_starts(q_len, k_len), not bidirectional, target),
          n_heads * q_len, out.size)


def embedding_sum(table, indices, out) -> None:
    n = out.shape[0]
    _call(_ext_bias.embedding_sum, (table, indices, out), n, out.size * indices.shape[1])
