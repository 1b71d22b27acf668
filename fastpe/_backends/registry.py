"""The one table of operations and backends.

Every backend module implements every operation listed in :data:`OPERATIONS`, under the
same name and signature.  Dispatch, the agreement tests and the benchmarks all read this
table; ``tests/test_registry.py`` fails when a backend lacks an operation.

Backend operation signatures (inputs already validated and converted):

``sinusoid_forward(positions, d_model, base, out)``
    ``positions``: C-contiguous ``uint32`` array ``(n,)``; ``out``: C-contiguous, writable
    ``float32`` array ``(n, d_model)``, filled in place.
``sinusoid_range(start, d_model, base, out)``
    as above with positions ``start, start + 1, ..., start + len(out) - 1`` (all ``< 2**32``);
    the table path, which needs no positions array.

RoPE (see :mod:`fastpe.rope._core` for the definition of every value).  ``inv_freq`` is a
tuple of Python floats (finite, ``0 <= f <= 1024``, at least one), ``attention_factor`` a
finite float, ``layout`` ``"neox"`` or ``"gptj"``:

``rope_cos_sin(positions, inv_freq, attention_factor, layout, out_cos, out_sin)``
    ``positions``: C-contiguous ``uint32`` ``(n,)``; ``out_cos``, ``out_sin``: C-contiguous,
    writable, distinct ``float32`` ``(n, 2 * len(inv_freq))``, filled in place.
``rope_table(positions, inv_freq, attention_factor, out)``
    the doubles behind both other RoPE operations: ``out[r, 0, i]``, ``out[r, 1, i]`` are
    ``C`` and ``S`` of ``positions[r]`` and frequency ``i``; ``out``: C-contiguous, writable
    ``float64`` ``(n, 2, len(inv_freq))``.
``rope_apply(q, k, positions, inv_freq, attention_factor, layout)``
    rotates in place the first ``2 * len(inv_freq)`` columns of ``q`` and, unless ``k`` is
    ``None``, of ``k``: C-contiguous, writable, non-overlapping ``float32`` arrays, both
    ``(tokens, heads, head_dim)`` with ``positions`` ``(tokens,)``, or both
    ``(batch, heads, seq, head_dim)`` with ``positions`` ``(seq,)`` or ``(batch, seq)``
    (``uint32``, C-contiguous); head counts may differ, the other dimensions match.

Sinusoid families (see :mod:`fastpe._plans.frequencies` and :mod:`fastpe._plans.layouts`).  ``freqs`` is a
:class:`fastpe._plans.frequencies.Geometric` (at most 1024 rad/position), ``layout`` one of
``fastpe._plans.layouts.LAYOUTS``; ``out`` C-contiguous, writable, ``float32`` or ``float64``
``(n, d)`` with ``d >= 2 * freqs.count - 1``:

``sincos_rows(positions, freqs, layout, out)``
    ``positions``: C-contiguous ``uint32`` ``(n,)``; each value is the RoPE double (anchored
    product, exact path where ``|cos|`` or ``|sin| < 2**-14``) rounded to ``out``'s dtype.
``sincos_real(x, freqs, layout, out)``
    ``x``: C-contiguous finite ``float64`` ``(n,)``, ``|x| < 2**32``, each taken exactly;
    every value from the real-position exact path.
``grid_gather(table, sizes, sin_off, cos_off, first_row, out)``
    a pure copy on bit patterns (``table`` and ``out`` are the same unsigned-integer view of
    the values): ``table`` ``(L, 2q)`` holds ``[sin | cos]`` of coordinates ``0 .. L-1``;
    ``sizes``, ``sin_off``, ``cos_off`` are ``int64`` per axis (slowest first); token ``t``
    (row ``first_row + t`` of ``out``, row-major over ``sizes``) gets, for each axis ``a``
    with coordinate ``c``, ``table[c, :q]`` at columns ``sin_off[a] ..`` and
    ``table[c, q:]`` at ``cos_off[a] ..``.
``add_rows(x, pe, scale)``
    ``x``: writable ``(B, S, d)`` float32 or float64 (any strides); ``pe``: C-contiguous
    ``(S, d)`` of the same dtype; ``x[b, s] = x[b, s] * scale + pe[s]`` (no multiply when
    ``scale`` is ``None``), each operation rounded in ``x``'s dtype, as NumPy does.

Attention biases (see :mod:`fastpe.alibi` and :mod:`fastpe.relative` for every value):

``alibi_bias(n_heads, max_bias, form, out)``
    ``n_heads`` an int in ``[1, 65536]``, ``max_bias`` a float in ``[2**-16, 64]``, ``form``
    one of ``fastpe.alibi.FORMS``; ``out``: C-contiguous, writable ``float32``, ``float64``,
    ``float16`` or ``bfloat16`` ``(n_heads, q_len, k_len)``, ``1 <= q_len, k_len <= 2**32``
    (``k_len >= q_len`` for ``symmetric`` and ``causal``); each finite value the exact
    product rounded to ``out``'s dtype.
``t5_bucket(relative_position, bidirectional, num_buckets, max_distance, out)``
    ``relative_position``: C-contiguous ``int64`` ``(n,)``, no value ``-2**63``; ``out``:
    C-contiguous, writable ``int64`` or ``int32`` ``(n,)``; ``num_buckets`` and
    ``max_distance`` as :func:`fastpe.relative.t5_bucket` validates them.
``t5_bucket_matrix(query_offset, bidirectional, num_buckets, max_distance, out)``
    ``out``: C-contiguous, writable ``int64`` or ``int32`` ``(q_len, k_len)`` (each at most
    ``2**32``), ``out[i, j]`` the bucket of ``j - (i + query_offset)``,
    ``0 <= query_offset <= 2**62``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Operation", "OPERATIONS", "BACKENDS", "BACKEND_MODULES"]


@dataclass(frozen=True)
class Operation:
    name: str
    summary: str


OPERATIONS: dict[str, Operation] = {
    op.name: op
    for op in (
        Operation("sinusoid_forward", "sinusoidal encoding of arbitrary u32 positions"),
        Operation("sinusoid_range", "sinusoidal encoding of a run of consecutive positions"),
        Operation("rope_cos_sin", "RoPE cos/sin caches (float32) of arbitrary u32 positions"),
        Operation("rope_table", "RoPE cos/sin doubles, the values every RoPE kernel uses"),
        Operation("rope_apply", "RoPE rotation of q (and k) in place"),
        Operation("sincos_rows", "sinusoid families: any geometric frequencies and layout, u32 positions"),
        Operation("sincos_real", "sinusoid families at real (float64) positions: timesteps"),
        Operation("grid_gather", "2-D/3-D sin-cos grids: each axis's values copied into place"),
        Operation("add_rows", "add_: x * scale + pe in place, row by row"),
        Operation("narrow16", "float32 to float16/bfloat16 bits, flagging the exact ties"),
        Operation("alibi_bias", "ALiBi bias (heads, queries, keys), exact products of the slopes"),
        Operation("t5_bucket", "HF T5 relative-position buckets of arbitrary int64 positions"),
        Operation("t5_bucket_matrix", "HF T5 buckets of j - (i + offset), a (q_len, k_len) matrix"),
    )
}

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
