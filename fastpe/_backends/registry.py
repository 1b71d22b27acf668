"""The contract every backend keeps: its operations, their signatures, how they must agree.

:class:`Backend` is the contract, written as a :class:`typing.Protocol`: one method per
operation, with the signature every backend module implements (same names, same order) and,
in its docstring, what the inputs are (already validated and converted at the public API:
kernels assume valid input) and what the operation writes.  :data:`OPERATIONS` is derived
from it, so a new operation is one method here; each :class:`Operation` also says which of
its arguments it writes and how a fast backend must agree with the ``python`` one
(bit for bit, or within an ULP where the design says so).  Test cases for every operation
are in :mod:`fastpe._backends.cases`; ``tests/backends/test_contract.py`` runs every operation on
every available backend on those cases, and the benchmark workloads name the operations
they exercise.

Callers reach an operation through :func:`fastpe._backends.resolve`, which returns a
backend typed as :class:`Backend`, and call it with keyword arguments only (a test walks
the code and fails on a positional call), so a reordered signature cannot silently swap
two arguments.

Beside the operations, each compiled backend hands out its serial table-rotation kernel:
``rotation_kernel()`` (in its ``__all__``) returns the callable that
:meth:`Backend.rope_apply_table` runs below its threading threshold -- called positionally
with the arguments :func:`fastpe._backends._walk.apply_chunks` documents, then ``neox``
(a bool) -- or ``None`` where it is not ready (numba's, until compiled: the operation
compiles it).  A caller that rotates many tiny calls (a decoding step) resolves it once
and skips the operation's Python overhead; anything larger goes through the operation.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Backend", "Operation", "OPERATIONS", "BACKENDS", "BACKEND_MODULES"]


class Backend(Protocol):
    """What a backend module provides.  Every array argument is C-contiguous unless said."""

    # ---------------------------------------------------------------- the spec's table
    def sinusoid_forward(self, positions, d_model, base, out) -> None:
        """Sinusoidal encoding of arbitrary u32 (or signed int64) positions.

        The spec (:mod:`fastpe.sinusoid`).
        ``positions``: ``uint32`` ``(n,)``, or ``int64`` ``(n,)`` with ``|p| < 2**32`` (a
        negative position's row is its magnitude's with the sines negated, bit for bit);
        ``d_model`` an int in ``[1, 65536]``; ``base`` a
        finite float ``> 1``; ``out``: writable ``float32`` ``(n, d_model)``, filled in place.
        """

    def sinusoid_range(self, start, d_model, base, out) -> None:
        """Sinusoidal encoding of a run of consecutive positions.

        As :meth:`sinusoid_forward` at positions ``start .. start + len(out) - 1`` (all
        ``< 2**32``): the table path, which needs no positions array."""

    # ------------------------------------------------------------------------- RoPE
    # (see fastpe.rope._core for the definition of every value).  ``inv_freq`` is a tuple of
    # Python floats (finite, 0 <= f <= 1024, at least one), ``attention_factor`` a finite
    # float, ``layout`` "neox" or "gptj".
    def rope_cos_sin(self, positions, inv_freq, attention_factor, layout, out_cos, out_sin) -> None:
        """RoPE cos/sin caches (float32) of arbitrary u32 positions.

        ``positions``: ``uint32`` ``(n,)``; ``out_cos``, ``out_sin``:
        writable, distinct ``float32`` ``(n, 2 * len(inv_freq))``, filled in place."""

    def rope_table(self, positions, inv_freq, attention_factor, out) -> None:
        """RoPE cos/sin doubles, the values every RoPE kernel uses.

        The doubles behind both other RoPE operations: ``out[r, 0, i]``, ``out[r, 1, i]``
        are ``C`` and ``S`` of ``positions[r]`` and frequency ``i``; ``out``: writable
        ``float64`` ``(n, 2, len(inv_freq))``."""

    def rope_apply(self, q, k, positions, inv_freq, attention_factor, layout) -> None:
        """RoPE rotation of q (and k) in place.

        Rotates in place the first ``2 * len(inv_freq)`` columns of ``q`` and, unless
        ``k`` is ``None``, of ``k``: writable, non-overlapping ``float32`` arrays, both
        ``(tokens, heads, head_dim)`` with ``positions`` ``(tokens,)``, or both
        ``(batch, heads, seq, head_dim)`` with ``positions`` ``(seq,)`` or ``(batch, seq)``
        (``uint32``); head counts may differ, the other dimensions match."""

    def rope_apply_table(self, q, k, table, stride, begin, end, layout) -> None:
        """RoPE rotation of q (and k) in place from a given cos/sin table.

        As :meth:`rope_apply` (same ``q``, ``k``, ``layout``), with the doubles given:
        ``table`` ``float64`` ``(rows, 2, n_freq)``, ``C``, ``S`` per row (what
        :meth:`rope_table` writes, possibly with the sine negated, or scaled), rotates the
        first ``2 * n_freq`` columns as ``float32(x1 * C - x2 * S)``, ``float32(x2 * C + x1 *
        S)``, at the sequence indices ``[begin, end)`` only (``0 <= begin <= end <= seq``,
        ``tokens`` for 3-D arrays).  Sequence index ``s`` of batch ``b`` reads table row
        ``b * stride + s - begin``: ``stride`` ``0`` (one row per index, shared by the batch;
        always for 3-D arrays) or ``>= end - begin`` (a row per ``(batch, index)``); the
        table has the rows that needs."""

    def rope_xpos_table(self, positions, inv_freq, attention_factor, zeta, scale_base, center, out_q,
                        out_k) -> None:
        """xPos cos/sin doubles of queries and keys, scaled by zeta ** (+-n / scale_base).

        (see fastpe.rope._xpos).  ``positions``: ``uint32`` ``(n,)``; ``zeta``: a tuple of
        ``len(inv_freq)`` floats in ``(0, 1)``; ``scale_base`` a float ``> 0`` (finite);
        ``center`` an int in ``[0, 2**32]``.  ``out_q``, ``out_k``: writable, distinct
        ``float64`` ``(n, 2, len(inv_freq))``: ``out_q[r, :, i]`` is :meth:`rope_table`'s
        ``C, S`` times ``s = clamp(zeta[i] ** ((positions[r] - center) / scale_base))``,
        ``out_k`` the same times ``clamp(zeta[i] ** (-(positions[r] - center) / scale_base))``,
        the clamp to ``[2**-600, 2**600]``.  The compiled backends form each power as an
        anchor's ``pow`` times a step's (:mod:`fastpe._backends._xpos`; ``pow`` at every value
        below a scale base of 2), every exponent one double division, every ``pow`` the C
        library's: the same bits on both."""

    # ---------------------------------------------------------------- sinusoid families
    # (see fastpe._plans.frequencies and fastpe._plans.layouts).  ``freqs`` is a
    # fastpe._plans.frequencies.Geometric (at most 1024 rad/position), ``layout`` one of
    # fastpe._plans.layouts.LAYOUTS; ``out`` writable float32 or float64 ``(n, d)`` with
    # ``d >= 2 * freqs.count - 1``.
    def sincos_rows(self, positions, freqs, layout, out) -> None:
        """Sinusoid families: any geometric frequencies and layout, u32 (or signed int64) positions.

        ``positions``: ``uint32`` ``(n,)``, or ``int64`` ``(n,)`` with ``|p| < 2**32`` (the
        magnitude's values, each sine negated for a negative position); each value is the RoPE double (anchored
        product, exact path where ``|cos|`` or ``|sin| < 2**-14``) rounded to ``out``'s dtype."""

    def sincos_real(self, x, freqs, layout, out) -> None:
        """Sinusoid families at real (float64) positions: timesteps.

        ``x``: finite ``float64`` ``(n,)``, ``|x| < 2**32``, each taken exactly; every
        value from the real-position exact path."""

    def grid_gather(self, table, sizes, sin_off, cos_off, first_row, out) -> None:
        """2-D/3-D sin-cos grids: each axis's values copied into place.

        A pure copy on bit patterns (``table`` and ``out`` are the same unsigned-integer
        view of the values): ``table`` ``(L, 2q)`` holds ``[sin | cos]`` of coordinates
        ``0 .. L-1``; ``sizes``, ``sin_off``, ``cos_off`` are ``int64`` per axis (slowest
        first); token ``t`` (row ``first_row + t`` of ``out``, row-major over ``sizes``)
        gets, for each axis ``a`` with coordinate ``c``, ``table[c, :q]`` at columns
        ``sin_off[a] ..`` and ``table[c, q:]`` at ``cos_off[a] ..``."""

    def axial_gather(self, table, index, pieces, out_cos, out_sin) -> None:
        """Axial RoPE caches: each axis's cos/sin blocks copied into every token's row.

        A pure copy on bit patterns (``table``, ``out_cos`` and ``out_sin`` are the same
        unsigned-integer view of the values): ``table`` ``(rows, 2, K)`` holds a cos block
        (``[r, 0]``) and a sin block (``[r, 1]``) per row; ``index`` ``int64`` ``(A, n)``, the
        table row of each of the ``n`` tokens for each of ``A`` axes (every value in
        ``[0, rows)``); ``pieces`` ``int64`` ``(P, 4)``, rows ``(axis, src, col, width)``
        with ``axis < A``, ``src + width <= K``, ``col + width <= D``; ``out_cos``, ``out_sin``
        writable, distinct ``(n, D)``.  For each token ``t`` and piece, ``out_cos[t, col:col +
        width]`` gets ``table[index[axis, t], 0, src:src + width]`` and ``out_sin`` likewise
        from ``[.., 1, ..]``; no other column is written."""

    def add_rows(self, x, pe, scale) -> None:
        """add_: x * scale + pe in place, row by row.

        ``x``: writable ``(B, S, d)`` float32 or float64 (any strides); ``pe``:
        ``(S, d)`` of the same dtype; ``x[b, s] = x[b, s] * scale + pe[s]`` (no multiply
        when ``scale`` is ``None``), each operation rounded in ``x``'s dtype, as NumPy does."""

    def narrow16(self, bits32, bf16, out, ties) -> None:
        """float32 to float16/bfloat16 bits, flagging the exact ties.

        float32 to float16 (``bf16`` false) or bfloat16 bits, round-to-nearest-even:
        ``bits32`` ``uint32`` ``(n,)`` (float32 bit patterns, no NaN), ``out`` writable ``uint16``
        ``(n,)``, ``ties`` writable ``bool`` ``(n,)``: true where the float32 lies exactly
        halfway between two neighbours of the narrow format (the caller settles those from
        the exact value)."""

    # ---------------------------------------------------------------- attention biases
    # (see fastpe.alibi and fastpe.relative for every value)
    def alibi_bias(self, n_heads, max_bias, form, out) -> None:
        """ALiBi bias (heads, queries, keys), exact products of the slopes.

        ``n_heads`` an int in ``[1, 65536]``, ``max_bias`` a float in ``[2**-16, 64]``,
        ``form`` one of ``fastpe._plans.alibi.FORMS``; ``out``: writable ``float32``,
        ``float64``, ``float16`` or ``bfloat16`` ``(n_heads, q_len, k_len)``,
        ``1 <= q_len, k_len <= 2**32`` (``k_len >= q_len`` for ``symmetric`` and
        ``causal``); each finite value the exact product rounded to ``out``'s dtype."""

    def sandwich_bias(self, n_heads, hidden_size, bidirectional, out) -> None:
        """Sandwich bias (heads, queries, keys): per-head scaled sums of cosines of |i - j|.

        NeMo's ``SandwichRelativePositionEmbedding`` (see :mod:`fastpe._sandwich`):
        ``out[h, i, j] = -(n_heads / (4 (h + 1))) * sum_k sin(d w_k / 2) ** 2`` (its
        ``(sum_k cos(d w_k) - H/2) / ((h + 1) * 8 / n_heads)``), ``w_k = 10000 ** (-2k/H)``,
        ``k = 1 .. H/2``, ``d = |j - i + q_len - k_len|``, and ``d = 0`` (the value ``+0.0``) at
        ``j > i`` unless ``bidirectional``.  ``n_heads`` in ``[1, 65536]``; ``hidden_size``
        ``H`` even in ``[2, 65536]``; ``out``: writable ``float32``, ``float64``, ``float16``
        or ``bfloat16`` ``(n_heads, q_len, k_len)``, ``max(q_len, k_len) <= 2**32``."""

    def t5_bucket(self, relative_position, bidirectional, num_buckets, max_distance, out) -> None:
        """HF T5 relative-position buckets of arbitrary int64 positions.

        ``relative_position``: ``int64`` ``(n,)``, no value ``-2**63``; ``out``: writable
        ``int64`` or ``int32`` ``(n,)``; ``num_buckets`` and ``max_distance`` as
        :func:`fastpe.relative.t5_bucket` validates them."""

    def t5_bucket_matrix(self, query_offset, bidirectional, num_buckets, max_distance, out) -> None:
        """HF T5 buckets of j - (i + offset), a (q_len, k_len) matrix.

        ``out``: writable ``int64`` or ``int32`` ``(q_len, k_len)`` (each at most
        ``2**32``), ``out[i, j]`` the bucket of ``j - (i + query_offset)``,
        ``0 <= query_offset <= 2**62``."""

    def deberta_bucket(self, relative_position, bucket_size, max_position, out) -> None:
        """HF DeBERTa log buckets of arbitrary int64 relative positions.

        ``relative_position``: ``int64`` ``(n,)``, no value ``-2**63``; ``out``: writable
        ``int64`` or ``int32`` ``(n,)``; ``bucket_size``, ``max_position`` as
        :func:`fastpe.relative.deberta_bucket` validates them (its plan up to the largest
        distance within :data:`fastpe._plans.deberta.MAX_STARTS`)."""

    def deberta_bucket_matrix(self, bucket_size, max_position, out) -> None:
        """HF DeBERTa relative positions i - j (bucketed), a (q_len, k_len) matrix.

        ``out``: writable ``int64`` or ``int32`` ``(q_len, k_len)``, ``out[i, j]`` the
        bucket of ``i - j`` (``bucket_size`` and ``max_position`` as for
        :meth:`deberta_bucket`), or ``i - j`` itself when ``bucket_size`` is ``0``."""

    def shaw_matrix(self, max_relative_position, query_offset, out) -> None:
        """Shaw clipped relative positions clip(j - i - offset, -k, k) + k, a matrix.

        ``out``: writable ``int64`` or ``int32`` ``(q_len, k_len)`` (values fit its dtype),
        ``out[i, j] = clip(j - (i + query_offset), -k, k) + k`` with ``k =
        max_relative_position`` in ``[0, 2**62]``, ``0 <= query_offset < 2**32``."""


    # ---------------------------------------------------------------- M-RoPE position ids
    # (see fastpe.rope._mrope for every value and fastpe._plans.mrope for the segment fields
    # and error codes).  Every array argument is C-contiguous ``int64``; ``columns`` is the
    # flat column (``b * seq + s``) of each attended token, row-major over the batch, or
    # ``(0,)`` when every token is attended (the column is then the index itself).
    def mrope_plan(self, ids, columns, n_rows, image_token_id, video_token_id, images, videos, merge,
                   video_times, segments, temporal, deltas, info) -> None:
        """M-RoPE runs of text/image/video tokens laid out and checked against the grids.

        ``ids``: ``(batch * seq,)``, the flat input ids; ``n_rows``: ``(batch,)`` attended
        tokens per row (each ``>= 1``); ``image_token_id``, ``video_token_id``: distinct ints;
        ``images``, ``videos``: ``(n, 3)`` grids ``(t, h, w)`` in order of appearance (each
        size in ``[1, 2**20]``, ``h`` and ``w`` multiples of ``merge >= 1``; Qwen3-VL's
        videos already split into frames); ``video_times``: the time offset of every video
        frame, video after video (each in ``[0, 2**62)``).  Writes ``segments`` (``(cap, 6)``,
        ``cap >= 2 * (len(images) + len(videos)) + batch``, one row of
        :data:`fastpe._plans.mrope.SEGMENT_FIELDS` per run), ``temporal`` (one time offset per
        frame of every vision run, in run order; as many as the grids have frames),
        ``deltas`` (``(batch,)``) and ``info`` (``(4,)``): the number of segments, then ``0``
        or a code of :data:`fastpe._plans.mrope.PLAN_ERRORS` with the grid's index and the
        row.  On an error the outputs other than ``info`` are partly written and meaningless."""

    def mrope_fill(self, segments, temporal, columns, out) -> None:
        """M-RoPE positions (3, batch*seq) written from the plan's segments.

        ``segments``, ``temporal``: what :meth:`mrope_plan` wrote (``segments`` cut to its
        ``info[0]`` rows); ``out``: writable ``(3, batch * seq)``, written at the attended
        columns only: a text run gets ``position + i`` on all three axes, a vision run of
        ``t`` frames of ``grid_h x grid_w`` tokens (time slowest, width fastest)
        ``position + temporal[t_offset + ti]``, ``position + hi``, ``position + wi``."""

    # ---------------------------------------------------------------- calendar fields
    # (see fastpe._exact.calendar for every field and fastpe.time.calendar_features)
    def calendar_fields(self, ticks, per_second, tick_seconds, fields, offsets, out) -> None:
        """Calendar fields (second .. ISO week) of int64 timestamps, exactly.

        ``ticks``: ``int64`` ``(n,)``, counts of one unit since 1970-01-01T00:00 (proleptic
        Gregorian, no leap seconds): ``per_second`` ticks a second (``10**3 .. 10**18``) for
        units finer than a second, else ``1`` and ``tick_seconds`` (1, 60, 3600, 86400 or
        604800) seconds a tick; weeks within ``+-(2**63 - 1) // 7``.  ``fields``: ``int64``
        codes of :data:`fastpe._exact.calendar.FIELDS`, ``offsets`` ``int64`` as many (each in
        ``[-2**20, 2**20]``); ``out``: writable ``int32`` or ``int64`` ``(n, len(fields))``,
        ``out[r, k]`` field ``fields[k]`` of ``ticks[r]`` plus ``offsets[k]``."""

    def embedding_sum(self, table, indices, out) -> None:
        """Sums of table rows (fixed embeddings), added left to right in out's dtype.

        ``table``: ``float32`` or ``float64`` ``(rows, d)``; ``indices``: ``int64`` ``(n, k)``,
        ``k >= 1``, every value in ``[0, rows)``; ``out``: writable, ``table``'s dtype, ``(n,
        d)``: ``out[r] = ((table[indices[r, 0]] + table[indices[r, 1]]) + ...)``, each addition
        rounded to the dtype (IEEE, as NumPy and torch add: Informer's TemporalEmbedding)."""

    # ---------------------------------------------------------------- Fourier features and
    # time encodings (see fastpe._plans.time for the kernels' two routes and their bounds,
    # fastpe._exact.time for every value)
    def fourier_ticks(self, ticks, numerator, denominator, order, out) -> None:
        """Prophet's Fourier features of int64 ticks, from the exact rational turn.

        ``ticks``: ``int64`` ``(n,)``; ``numerator``, ``denominator``: positive Python ints,
        the frequency ``numerator / denominator`` in turns per tick (one over the period in
        ticks); ``order`` an int in ``[1, 2**14]``; ``out``: writable ``float32`` or
        ``float64`` ``(n, 2 * order)``, ``out[r, 2k - 2]`` and ``out[r, 2k - 1]`` the sine
        and cosine of ``2 pi k t numerator / denominator``, ``k = 1 .. order``."""

    def time_cos(self, ticks, frequencies, scale, out) -> None:
        """TGAT/TGN time encoding cos(t w_j) of int64 ticks, from the exact angle.

        ``ticks``: ``int64`` ``(n,)``; ``frequencies``: a tuple of finite doubles ``>= 0``
        (radians per unit of time, 1 to 2**16 of them); ``scale``: a positive
        :class:`fractions.Fraction`, the length of one tick in that unit; ``out``: writable
        ``float32`` or ``float64`` ``(n, len(frequencies))``,
        ``out[r, j] = cos(ticks[r] * scale * frequencies[j])``."""


@dataclass(frozen=True)
class Operation:
    """One operation of the contract."""

    name: str
    #: the first line of its docstring in :class:`Backend`
    summary: str
    #: its parameters, in order
    parameters: tuple[str, ...]
    #: the arguments it writes (in place)
    writes: tuple[str, ...]
    #: how every backend's written values compare with the ``python`` backend's (which are
    #: correctly rounded): ``"bits"``, identical bit patterns; ``"ulp"``, within one unit in
    #: the last place of a float32 or narrower output, within ``2**-45`` of a float64 one (the
    #: kernels' anchored products carry ~2**-49 relative error), and the compiled backends
    #: then write identical bits to each other
    agreement: str = "bits"


#: per operation: (arguments written, agreement with the python backend)
_WRITES: dict[str, tuple[tuple[str, ...], str]] = {
    "sinusoid_forward": (("out",), "ulp"),
    "sinusoid_range": (("out",), "ulp"),
    "rope_cos_sin": (("out_cos", "out_sin"), "bits"),
    "rope_table": (("out",), "ulp"),
    "rope_apply": (("q", "k"), "ulp"),
    "rope_apply_table": (("q", "k"), "bits"),
    "rope_xpos_table": (("out_q", "out_k"), "ulp"),
    "sincos_rows": (("out",), "ulp"),
    "sincos_real": (("out",), "ulp"),
    "grid_gather": (("out",), "bits"),
    "axial_gather": (("out_cos", "out_sin"), "bits"),
    "add_rows": (("x",), "bits"),
    "narrow16": (("out", "ties"), "bits"),
    "alibi_bias": (("out",), "bits"),
    "sandwich_bias": (("out",), "ulp"),
    "t5_bucket": (("out",), "bits"),
    "t5_bucket_matrix": (("out",), "bits"),
    "deberta_bucket": (("out",), "bits"),
    "deberta_bucket_matrix": (("out",), "bits"),
    "shaw_matrix": (("out",), "bits"),
    "mrope_plan": (("segments", "temporal", "deltas", "info"), "bits"),
    "mrope_fill": (("out",), "bits"),
    "calendar_fields": (("out",), "bits"),
    "embedding_sum": (("out",), "bits"),
    "fourier_ticks": (("out",), "ulp"),
    "time_cos": (("out",), "ulp"),
}


def _operations() -> dict[str, Operation]:
    ops = {}
    for name, fn in vars(Backend).items():
        if name.startswith("_") or not inspect.isfunction(fn):
            continue
        writes, agreement = _WRITES[name]
        params = tuple(list(inspect.signature(fn).parameters)[1:])  # without self
        assert set(writes) <= set(params), name
        ops[name] = Operation(name, inspect.getdoc(fn).splitlines()[0], params, writes, agreement)
    return ops


OPERATIONS: dict[str, Operation] = _operations()

#: backend name -> module implementing the operations, in the automatic order.
#: cython first: it writes the same bits as numba at the same speed (faster on ``forward``)
#: and loads in ~20 ms, where importing numba and loading its cached kernels costs ~0.5 s,
#: which dominates a one-shot CLI run.
BACKEND_MODULES: dict[str, str] = {
    "cython": "fastpe._backends.cython",
    "numba": "fastpe._backends.numba.backend",
    "python": "fastpe._backends.python",
}

BACKENDS: tuple[str, ...] = tuple(BACKEND_MODULES)
