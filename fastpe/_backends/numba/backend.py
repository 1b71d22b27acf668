"""The ``numba`` backend: parallel kernels compiled on first use and cached on disk.

Importing this module imports numba (~0.2 s) and fixes the threading layer (see
:mod:`fastpe._backends.numba._threads`); it compiles nothing.  Small inputs run the serial twin of each kernel
(thread start-up costs more than they do); large ones run the parallel twin.  Where the
threading layer is not safe for concurrent callers, only one thread at a time may enter a
parallel kernel and the others run the serial twin instead of waiting: same code, same bits.
"""

from __future__ import annotations

import functools
import threading

import numba
import numpy as np

from ._threads import configure

THREADING = configure()

from ..._plans import frequencies as _freq  # noqa: E402
from ..._plans.alibi import FORM_CODES, NEG_INF16, narrow_line, slope_words  # noqa: E402
from ..._plans.t5 import bucket_plan  # noqa: E402
from ..._plans.words import frequency_turns, sinusoid_turns  # noqa: E402
from .._steps import step_plan  # noqa: E402
from .._walk import apply_chunks, table_args  # noqa: E402
from ..registry import OPERATIONS  # noqa: E402
from . import axial as _ka  # noqa: E402
from . import bias as _kb  # noqa: E402
from . import kernels as _k  # noqa: E402
from . import mrope as _km  # noqa: E402
from . import relative as _kr  # noqa: E402
from . import calendar as _kc  # noqa: E402

#: every operation of the contract (fastpe._backends.registry), and what else this backend reports
__all__ = [*OPERATIONS, "threading_layer", "num_threads", "rotation_kernel"]

#: outputs below this many elements run serially
SERIAL_BELOW = 1 << 15

_parallel_gate = threading.Lock()


def threading_layer() -> str:
    """The layer numba's pool actually runs (``tbb`` unless TBB was unavailable)."""
    return THREADING.layer


def num_threads() -> int:
    return numba.get_num_threads()


def _run(parallel, serial, work: int, *args) -> None:
    if work < SERIAL_BELOW or numba.get_num_threads() == 1:
        serial(*args)
    elif THREADING.thread_safe:
        parallel(*args)
    elif _parallel_gate.acquire(blocking=False):
        try:
            parallel(*args)
        finally:
            _parallel_gate.release()
    else:
        serial(*args)


def _fill_steps(turns, steps) -> None:
    _run(_k.sincos_steps_parallel, _k.sincos_steps_serial, steps.size * 4, turns, steps)


#: ``(turns, steps)`` of a frequency set, ``_planned(words, *key)``: fastpe._backends._steps
_planned = functools.partial(step_plan, _fill_steps)


def sinusoid_forward(positions, d_model, base, out) -> None:
    turns, steps = _planned(sinusoid_turns, d_model, base)
    _run(_k.sinusoid_forward_parallel, _k.sinusoid_forward_serial, out.size * 4,
         positions, turns, steps, out)


def sinusoid_range(start, d_model, base, out) -> None:
    turns, steps = _planned(sinusoid_turns, d_model, base)
    _run(_k.sinusoid_range_parallel, _k.sinusoid_range_serial, out.size,
         int(start), turns, steps, out)


def rope_cos_sin(positions, inv_freq, attention_factor, layout, out_cos, out_sin) -> None:
    turns, steps = _planned(frequency_turns, inv_freq)
    _run(_k.rope_cos_sin_parallel, _k.rope_cos_sin_serial, out_cos.size * 2,
         positions, turns, steps, float(attention_factor), layout == "neox", out_cos, out_sin)


def rope_table(positions, inv_freq, attention_factor, out) -> None:
    turns, steps = _planned(frequency_turns, inv_freq)
    _run(_k.rope_table_parallel, _k.rope_table_serial, out.size * 2,
         positions, turns, steps, float(attention_factor), out)


def rope_apply(q, k, positions, inv_freq, attention_factor, layout) -> None:
    for pos, table, args, work in apply_chunks(q, k, positions, len(inv_freq)):
        rope_table(pos, inv_freq, attention_factor, table)
        _run(_k.rope_apply_parallel, _k.rope_apply_serial, work, *args, layout == "neox")


def rope_apply_table(q, k, table, stride, begin, end, layout) -> None:
    args, _, work = table_args(q, k, table, stride, begin, end)
    _run(_k.rope_apply_parallel, _k.rope_apply_serial, work, *args, layout == "neox")


def rope_xpos_table(positions, inv_freq, attention_factor, zeta, scale_base, center, out_q, out_k) -> None:
    from .. import _xpos
    from . import xpos as _kx

    rope_table(positions, inv_freq, attention_factor, out_q)
    up, down = _xpos.steps_of(zeta, scale_base)
    _run(_kx.xpos_scale_parallel, _kx.xpos_scale_serial, out_q.size * _kx.COST, positions,
         np.asarray(zeta, dtype=np.float64), float(scale_base), np.int64(center), up is not _xpos.NO_STEPS, up, down,
         out_q, out_k)


def rotation_kernel():
    """The serial kernel of :func:`rope_apply_table` once compiled (its dispatcher, which
    runs an already-compiled signature without compiling again), else ``None``: the
    operation's first call compiles it (through the kernel's wrapper, which falls back
    where the disk cache cannot be written)."""
    return _k.rope_apply_serial._dispatcher


# --------------------------------------------------------------------- sinusoid families


def sincos_rows(positions, freqs, layout, out) -> None:
    turns, steps = _planned(_freq.turns, freqs)
    _run(_k.sincos_rows_parallel, _k.sincos_rows_serial, out.size * 2,
         positions, turns, steps, _k.LAYOUT_CODES[layout], out)


def sincos_real(x, freqs, layout, out) -> None:
    turns = _freq.turns(freqs)
    _run(_k.sincos_real_parallel, _k.sincos_real_serial, out.size * 8,
         x, turns, _k.LAYOUT_CODES[layout], out)


def grid_gather(table, sizes, sin_off, cos_off, first_row, out) -> None:
    _run(_k.grid_gather_parallel, _k.grid_gather_serial, (out.shape[0] - first_row) * out.shape[1],
         table, sizes, sin_off, cos_off, int(first_row), out)


#: the axial caches' copy runs in parallel from this many values copied (8 MB of float32;
#: the cython backend's AXIAL_PARALLEL_FROM says why): FLUX 64x64 runs serially
AXIAL_PARALLEL_FROM = 1 << 21


def axial_gather(table, index, pieces, out_cos, out_sin) -> None:
    work = out_cos.size * 2 * SERIAL_BELOW // AXIAL_PARALLEL_FROM
    _run(_ka.axial_gather_parallel, _ka.axial_gather_serial, work, table, index, pieces, out_cos, out_sin)


def add_rows(x, pe, scale) -> None:
    _run(_k.add_rows_parallel, _k.add_rows_serial, x.size, x, pe,
         1.0 if scale is None else float(scale), scale is not None)


# ------------------------------------------------------------------------ attention biases
# the kernels are in fastpe._backends.numba.bias, read through the module at each call


def _alibi_line(words, line) -> None:
    single = line.dtype == np.float32
    cost = _kb.LINE_COST32 if single else _kb.LINE_COST
    _run(_kb.alibi_line_parallel, _kb.alibi_line_serial, line.size * cost,
         words, single, 0, -(-line.shape[1] // _kb.LINE_BLOCK), line)


def alibi_bias(n_heads, max_bias, form, out) -> None:
    words = slope_words(n_heads, max_bias)
    q_len, k_len = out.shape[1:]
    wide = out.dtype == np.float32 or out.dtype == np.float64
    if wide and q_len == 1 and form == "bloom":
        # BLOOM's one query row is the line itself (the fill copies it): written in place
        _alibi_line(words, out.reshape(n_heads, k_len))
        return
    line = np.empty((n_heads, k_len), dtype=out.dtype if wide else np.float32)
    _alibi_line(words, line)
    if wide:
        _run(_kb.alibi_fill_parallel, _kb.alibi_fill_serial, out.size, line, FORM_CODES[form], out)
        return
    # float16 / bfloat16: the line narrowed, then spread as bit patterns
    from ..._exact.bias import alibi_value

    bits = narrow_line(narrow16, alibi_value, n_heads, max_bias, line, out.dtype)
    _run(_kb.alibi_fill16_parallel, _kb.alibi_fill16_serial, out.size,
         bits, FORM_CODES[form], np.uint16(NEG_INF16[out.dtype.name]), out.view(np.uint16))


def t5_bucket(relative_position, bidirectional, num_buckets, max_distance, out) -> None:
    n, thresholds, _ = bucket_plan(bidirectional, num_buckets, max_distance)
    _run(_kb.t5_bucket_parallel, _kb.t5_bucket_serial, out.size * 4,
         relative_position, bool(bidirectional), n, thresholds, out)


def t5_bucket_matrix(query_offset, bidirectional, num_buckets, max_distance, out) -> None:
    n, thresholds, _ = bucket_plan(bidirectional, num_buckets, max_distance)
    q_len, k_len = out.shape
    line = np.empty(q_len + k_len - 1, dtype=out.dtype)
    first = -(q_len - 1) - int(query_offset)  # j - (i + offset) at i = q_len - 1, j = 0
    _run(_kb.t5_line_parallel, _kb.t5_line_serial, line.size * 4,
         np.int64(first), bool(bidirectional), n, thresholds, line)
    _run(_kb.t5_fill_parallel, _kb.t5_fill_serial, out.size, line, out)


# ------------------------------------------------------------- DeBERTa and Shaw positions
# the kernels are in fastpe._backends.numba.relative (integer look-ups in the plan of
# fastpe._plans.deberta; the matrix a block of rows at a time, each row the one above shifted)


def _deberta_plan(bucket_size, max_position, distance):
    from ..._plans.deberta import bucket_plan, search_index

    if not bucket_size:
        empty = np.zeros(0, dtype=np.int64)  # mid at its largest: every distance stays below the search
        return _kr.UNBUCKETED, empty, empty, search_index(empty)
    plan = bucket_plan(bucket_size, max_position, distance)
    return plan.mid, plan.starts, plan.values, plan.index


def deberta_bucket(relative_position, bucket_size, max_position, out) -> None:
    from ..._plans.deberta import direct_plan

    whole = direct_plan(bucket_size, max_position) if bucket_size else None
    if whole is not None:  # covers every distance: no pass for the positions' reach
        _run(_kr.deberta_direct_parallel, _kr.deberta_direct_serial, out.size * 4,
             relative_position, np.int64(whole.mid), whole.direct, out)
        return
    reach = max(int(relative_position.max()), -int(relative_position.min())) if relative_position.size else 0
    mid, starts, values, index = _deberta_plan(bucket_size, max_position, reach)
    narrow = bool((np.diff(index) <= 3).all())  # the plan's narrow (an unbucketed call never searches)
    _run(_kr.deberta_bucket_parallel, _kr.deberta_bucket_serial, out.size * 4,
         relative_position, np.int64(mid), starts, values, index, narrow, out)


def deberta_bucket_matrix(bucket_size, max_position, out) -> None:
    mid, starts, values, index = _deberta_plan(bucket_size, max_position, max(out.shape) - 1)
    _run(_kr.deberta_fill_parallel, _kr.deberta_fill_serial, out.size, np.int64(mid), starts, values, index, out)


def shaw_matrix(max_relative_position, query_offset, out) -> None:
    _run(_kr.shaw_fill_parallel, _kr.shaw_fill_serial, out.size,
         np.int64(max_relative_position), np.int64(query_offset), out)


def narrow16(bits32, bf16, out, ties) -> None:
    _run(_k.narrow16_parallel, _k.narrow16_serial, bits32.size, bits32, bool(bf16), out, ties)


# ------------------------------------------------------------------------ M-RoPE positions
# the kernels are in fastpe._backends.numba.mrope: the plan is serial (the grids are consumed
# in order across the rows), the fill one work item per segment


def mrope_plan(ids, columns, n_rows, image_token_id, video_token_id, images, videos, merge,
               video_times, segments, temporal, deltas, info) -> None:
    _km.mrope_plan_serial(ids, columns, n_rows, image_token_id, video_token_id, images, videos, merge,
                          video_times, segments, temporal, deltas, info)


def mrope_fill(segments, temporal, columns, out) -> None:
    _run(_km.mrope_fill_parallel, _km.mrope_fill_serial, out.shape[1], segments, temporal, columns, out)


# ------------------------------------------------------------------------ calendar fields
# the kernels are in fastpe._backends.numba.calendar


def calendar_fields(ticks, per_second, tick_seconds, fields, offsets, out) -> None:
    _run(_kc.calendar_fields_parallel, _kc.calendar_fields_serial, out.size * 4,
         ticks, np.int64(per_second), np.int64(tick_seconds), fields, offsets, out)


# ------------------------------------------------------------- Fourier features, time encodings
# the kernels are in fastpe._backends.numba.time, the plans in fastpe._plans.time


def fourier_ticks(ticks, numerator, denominator, order, out) -> None:
    from ..._plans import time as _plan
    from . import time as _kt

    plan = _plan.fourier_plan(int(numerator), int(denominator), int(order))
    if plan[0] == "exact":
        _, d, table, dh, dl = plan
        _run(_kt.fourier_exact_parallel, _kt.fourier_exact_serial, out.size * _kt.COST,
             ticks, np.int64(d), table, dh, dl, out)
    else:
        _run(_kt.time_pairs_parallel, _kt.time_pairs_serial, out.size * _kt.COST, ticks, plan[1], out)


def time_cos(ticks, frequencies, scale, out) -> None:
    from ..._plans import time as _plan
    from . import time as _kt

    words = _plan.time_cos_words(tuple(frequencies), scale)
    _run(_kt.time_cos_parallel, _kt.time_cos_serial, out.size * _kt.COST, ticks, words, out)


# ------------------------------------------------------------------------------- Sandwich
# the kernels are in fastpe._backends.numba.sandwich; the per-head lines are fastpe._backends._sandwich's


def sandwich_bias(n_heads, hidden_size, bidirectional, out) -> None:
    from .. import _sandwich as _sw
    from . import sandwich as _ks

    _, q_len, k_len = out.shape
    length = max(q_len, k_len)
    turns = _sw.half_turns(hidden_size)
    dsum = np.empty(length, dtype=np.float64)
    _run(_ks.sandwich_line_parallel, _ks.sandwich_line_serial, length * turns.shape[1] * _ks.LINE_COST,
         turns, dsum)
    mirror = _sw.mirrored(_sw.head_lines(dsum, n_heads, out.dtype))
    _run(_ks.sandwich_fill_parallel, _ks.sandwich_fill_serial, out.size,
         mirror, np.int64(_sw.row_starts(q_len, k_len)), not bidirectional, out.view(mirror.dtype))


def embedding_sum(table, indices, out) -> None:
    _run(_kc.embedding_sum_parallel, _kc.embedding_sum_serial, out.size * indices.shape[1], table, indices, out)
