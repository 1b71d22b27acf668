"""The ``cython`` backend: the C kernels of ``csrc/`` through the compiled ``fastpe._backends.cython._ext``.

Importing this module raises :class:`ImportError` when the optional extensions (``_ext`` and
``_ext_bias``, the attention biases) were not built;
fastpe then falls back to its other backends.  The C kernels are the twin of the numba ones:
the same exact path and the same anchored products (see :mod:`fastpe._plans.words`), so the same
bits (``tests/backends/test_cython.py`` checks it).

Parallelism uses plain Python threads, each filling a block of rows (or, for the in-place
RoPE rotation, a block of work items) with the GIL released.
Not OpenMP: a GNU OpenMP runtime that has run in a process hangs its ``fork()`` children.
The threads are started per call and joined before it returns, so there is no pool to
share between concurrent callers or to repair after ``fork()``; starting one costs ~0.1 ms,
which is why outputs below :data:`PARALLEL_FROM` elements run in the calling thread.
"""

from __future__ import annotations

import functools
import itertools
import os
import threading

import numpy as np

from . import _ext, _ext_bias
from ..._plans import frequencies as _freq
from ..._plans import words as _words
from ..._plans.alibi import FORM_CODES
from ..._plans.layouts import LAYOUT_CODES
from ..._plans.t5 import bucket_plan
from ..._plans.words import frequency_turns, sinusoid_turns
from ..._plans.poly import COS_COEFFS, SIN_COEFFS
from .._steps import step_plan
from .._walk import apply_chunks
from ..registry import OPERATIONS

#: what the C kernels were compiled with, beside the home of each rule in fastpe._plans
_COMPILED = {
    "polynomials": (_ext.coefficients(), (SIN_COEFFS, COS_COEFFS)),
    "STEPS": (_ext.STEPS, _words.STEPS),
    "TINY": (_ext.TINY, _words.TINY),
    "TINY64": (getattr(_ext, "TINY64", None), _words.TINY),
    "layout codes": (getattr(_ext, "LAYOUT_CODES", None), LAYOUT_CODES),
    "form codes": (getattr(_ext_bias, "FORM_CODES", None), FORM_CODES),
}
_STALE = [name for name, (built, home) in _COMPILED.items() if built != home]
if _STALE:
    # a stale build left in the tree would give wrong bits; refuse it, fastpe falls back
    raise ImportError(f"fastpe._backends.cython was built from other kernel constants ({', '.join(_STALE)}); rebuild it")

#: every operation of the contract (fastpe._backends.registry), and what else this backend reports
__all__ = [*OPERATIONS, "build_info", "threads"]

#: work is counted in table values (one complex product each); a value of ``forward`` costs
#: about FORWARD_COST of them, as its row also needs an exact anchor
FORWARD_COST = 4
#: outputs with less work than this run in the calling thread: ~0.4 ms of work, against ~0.1 ms
#: to start and join a thread (a 2048x512 table measured 840 us on one thread, 610 us on two)
PARALLEL_FROM = 1 << 19
#: each thread gets at least this much work
MIN_BLOCK = 1 << 18


def threads() -> int:
    """Threads a large output is split across: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def build_info() -> dict:
    """The extension's build: instruction set targeted and kernel copy in use."""
    return _ext.build_info()


#: ``(turns, steps)`` of a frequency set, ``_planned(words, *key)``: fastpe._backends._steps
_planned = functools.partial(step_plan, _ext.sincos_steps)


def _blocks(n_rows: int, d_model: int, n_threads: int, cost: int = 1) -> list[tuple[int, int]]:
    """Split ``range(n_rows)`` into at most ``n_threads`` contiguous, near-equal blocks."""
    return _item_blocks(n_rows, n_rows * d_model * cost, n_threads)


def _item_blocks(n_items: int, work: int, n_threads: int) -> list[tuple[int, int]]:
    """Split ``range(n_items)`` (``work`` in all) into at most ``n_threads`` blocks of at
    least ``MIN_BLOCK`` work each; one block when ``work < PARALLEL_FROM``."""
    n = 1 if work < PARALLEL_FROM else min(n_threads, work // MIN_BLOCK, n_items)
    n = max(n, 1)
    edges = [n_items * k // n for k in range(n + 1)]
    return [(lo, hi) for lo, hi in itertools.pairwise(edges) if hi > lo]


def _fill(kernel, first_arg, turns, steps, out, n_threads: int | None = None, cost: int = 1):
    """Run ``kernel(first_arg, turns, steps, out, row_begin, row_end)`` over row blocks.

    The calling thread takes the first block; extra threads take the rest.  Blocks are
    disjoint, so the result does not depend on the split.
    """
    n_rows, d_model = out.shape
    blocks = _blocks(n_rows, d_model, threads() if n_threads is None else n_threads, cost)
    if len(blocks) <= 1:
        kernel(first_arg, turns, steps, out)
        return
    _run_blocks(lambda lo, hi: kernel(first_arg, turns, steps, out, lo, hi), blocks)


def _split(run, n_items: int, work: int, n_threads: int | None = None) -> None:
    """``run(lo, hi)`` over contiguous blocks of ``range(n_items)``, on threads if ``work``
    is large enough (same rules as :func:`_fill`); ``run`` must write disjoint outputs."""
    blocks = _item_blocks(n_items, work, threads() if n_threads is None else n_threads)
    if len(blocks) == 1:
        run(*blocks[0])
    elif blocks:
        _run_blocks(run, blocks)


def _run_blocks(run, blocks: list[tuple[int, int]]) -> None:
    """``run(lo, hi)`` for each block: the first in this thread, the others on helpers."""
    errors: list[BaseException] = []

    def work(lo: int, hi: int) -> None:
        try:
            run(lo, hi)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, re-raised there
            errors.append(exc)

    helpers = []
    mine = [blocks[0]]
    for block in blocks[1:]:
        thread = threading.Thread(target=work, args=block, name="fastpe-cython", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # no new threads (interpreter shutting down, thread limit)
            mine.append(block)
        else:
            helpers.append(thread)
    try:
        for block in mine:
            work(*block)
    finally:
        for thread in helpers:
            thread.join()
    if errors:
        raise errors[0]


def sinusoid_forward(positions, d_model, base, out) -> None:
    _fill(_ext.sinusoid_forward, positions, *_planned(sinusoid_turns, d_model, base), out, cost=FORWARD_COST)


def sinusoid_range(start, d_model, base, out) -> None:
    _fill(_ext.sinusoid_range, int(start), *_planned(sinusoid_turns, d_model, base), out)


# ------------------------------------------------------------------------------------ RoPE
# The same definition as the numba backend (see fastpe._backends.numba.kernels, "RoPE"): the doubles
# C, S per (position, frequency), computed once per call into a table that every head reads.


def _table(positions, inv_freq, attention_factor, table) -> None:
    turns, steps = _planned(frequency_turns, inv_freq)
    af = float(attention_factor)
    _split(lambda lo, hi: _ext.rope_table(positions, turns, steps, af, table, lo, hi),
           table.shape[0], table.shape[0] * turns.shape[1] * 2 * FORWARD_COST)


def rope_cos_sin(positions, inv_freq, attention_factor, layout, out_cos, out_sin) -> None:
    turns, steps = _planned(frequency_turns, inv_freq)
    af, neox = float(attention_factor), layout == "neox"

    def run(lo, hi):
        _ext.rope_cos_sin(positions, turns, steps, af, neox, out_cos, out_sin, lo, hi)

    _split(run, out_cos.shape[0], out_cos.size * 2)


def rope_table(positions, inv_freq, attention_factor, out) -> None:
    _table(positions, inv_freq, attention_factor, out)


def rope_apply(q, k, positions, inv_freq, attention_factor, layout) -> None:
    neox = layout == "neox"
    for pos, table, args, work in apply_chunks(q, k, positions, len(inv_freq)):
        _table(pos, inv_freq, attention_factor, table)
        n_batch, s0, s1 = args[10:13]  # the order apply_chunks documents
        n_items = n_batch * -(-(s1 - s0) // _ext.ROPE_SEQ)

        def run(lo, hi, args=args):
            _ext.rope_apply(*args, neox, lo, hi)

        _split(run, n_items, work)


# ----------------------------------------------------------------------- sinusoid families
# The values of the numba kernels (fastpe._backends.numba.kernels, "Sinusoid families"): the RoPE
# doubles C, S with af = 1 (integer positions) or the real-position exact path, computed a
# block of rows at a time into a small table, then laid out and rounded, in C (csrc/_ext.pyx).


def sincos_rows(positions, freqs, layout, out) -> None:
    turns, steps = _planned(_freq.turns, freqs)
    code = LAYOUT_CODES[layout]
    _split(lambda lo, hi: _ext.sincos_rows(positions, turns, steps, code, out, lo, hi),
           out.shape[0], out.shape[0] * turns.shape[1] * 2 * FORWARD_COST)


def sincos_real(x, freqs, layout, out) -> None:
    turns = _freq.turns(freqs)
    code = LAYOUT_CODES[layout]
    _split(lambda lo, hi: _ext.sincos_real_rows(x, turns, code, out, lo, hi),
           out.shape[0], out.shape[0] * turns.shape[1] * 2 * FORWARD_COST * 4)


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


def alibi_bias(n_heads, max_bias, form, out) -> None:
    from ..._exact.bias import alibi_value
    from ..._plans.alibi import FORM_CODES, NEG_INF16, narrow_line, slope_words

    words = slope_words(n_heads, max_bias)
    _, q_len, k_len = out.shape
    wide = out.dtype in (np.float32, np.float64)
    line = np.empty((n_heads, k_len), dtype=out.dtype if wide else np.float32)
    _split(lambda lo, hi: _ext_bias.alibi_line(words, line, lo, hi), k_len, line.size * LINE_COST)
    code = FORM_CODES[form]
    if wide:
        _split(lambda lo, hi: _ext_bias.alibi_fill(line, code, out, lo, hi), n_heads * q_len, out.size)
        return
    # float16 / bfloat16: the line narrowed, then spread as bit patterns
    bits = narrow_line(narrow16, alibi_value, n_heads, max_bias, line, out.dtype)
    neg_inf, target = NEG_INF16[out.dtype.name], out.view(np.uint16)
    _split(lambda lo, hi: _ext_bias.alibi_fill16(bits, code, neg_inf, target, lo, hi), n_heads * q_len, out.size)


def t5_bucket(relative_position, bidirectional, num_buckets, max_distance, out) -> None:
    n, thresholds, _ = bucket_plan(bidirectional, num_buckets, max_distance)
    flag = bool(bidirectional)
    _split(lambda lo, hi: _ext_bias.t5_bucket(relative_position, flag, n, thresholds, out, lo, hi),
           out.shape[0], out.size * 4)


def t5_bucket_matrix(query_offset, bidirectional, num_buckets, max_distance, out) -> None:
    n, thresholds, _ = bucket_plan(bidirectional, num_buckets, max_distance)
    flag = bool(bidirectional)
    q_len, k_len = out.shape
    line = np.empty(q_len + k_len - 1, dtype=out.dtype)
    first = -(q_len - 1) - int(query_offset)  # j - (i + offset) at i = q_len - 1, j = 0
    _split(lambda lo, hi: _ext_bias.t5_line(first, flag, n, thresholds, line, lo, hi),
           line.shape[0], line.size * 4)
    _split(lambda lo, hi: _ext_bias.t5_fill(line, out, lo, hi), q_len, out.size)


def narrow16(bits32, bf16, out, ties) -> None:
    flags = ties.view(np.uint8)
    _split(lambda lo, hi: _ext.narrow16(bits32, bool(bf16), out, flags, lo, hi), bits32.size, bits32.size)
