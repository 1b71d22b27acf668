# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, embedsignature=True
"""Compiled kernels of the ``cython`` backend, built from ``csrc/`` (see fastpe._backends.cython).

The functions take arrays the caller has already validated and converted.  They check only
what memory safety needs (shapes, row bounds, positions below 2**32), then release the GIL
for the loop, so Python threads can fill disjoint row blocks of one output at once.
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cython cimport floating
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t

cdef extern from "fastpe_kernels.h" nogil:
    const int FASTPE_STEPS
    const float FASTPE_TINY
    const double FASTPE_TINY64
    const double fastpe_sin_coeffs[8]
    const double fastpe_cos_coeffs[8]
    const char *fastpe_kernel_variant(int wide)
    void fastpe_sincos_steps(const double *turns, Py_ssize_t n_freq, double *steps)
    void fastpe_sinusoid_forward(const uint32_t *positions, const double *turns,
                                 Py_ssize_t n_freq, const double *steps, float *out,
                                 Py_ssize_t d_model, Py_ssize_t row_begin, Py_ssize_t row_end,
                                 double *scratch, int wide)
    void fastpe_sinusoid_range(uint64_t start, const double *turns, Py_ssize_t n_freq,
                               const double *steps, float *out, Py_ssize_t d_model,
                               Py_ssize_t row_begin, Py_ssize_t row_end, double *scratch,
                               int wide)
    const int FASTPE_ROPE_SEQ
    void fastpe_sincos_real(const double *x, const double *turns, Py_ssize_t n_freq,
                            double *table, Py_ssize_t row_begin, Py_ssize_t row_end, int wide)
    void fastpe_rope_table(const uint32_t *positions, const double *turns, Py_ssize_t n_freq,
                           const double *steps, double af, double *table, Py_ssize_t row_begin,
                           Py_ssize_t row_end, double *scratch, int wide)
    void fastpe_rope_cos_sin(const uint32_t *positions, const double *turns, Py_ssize_t n_freq,
                             const double *steps, double af, int neox, float *out_cos,
                             float *out_sin, Py_ssize_t row_begin, Py_ssize_t row_end,
                             double *scratch, int wide)
    void fastpe_rope_apply(float *xq, Py_ssize_t hq, Py_ssize_t bq, Py_ssize_t shq,
                           Py_ssize_t ssq, float *xk, Py_ssize_t hk, Py_ssize_t bk,
                           Py_ssize_t shk, Py_ssize_t ssk, Py_ssize_t s_begin,
                           Py_ssize_t s_end, const double *table, Py_ssize_t n_freq,
                           Py_ssize_t pos_bstride, int neox, Py_ssize_t item_begin,
                           Py_ssize_t item_end, int wide)

cdef extern from *:
    """
    /* the instruction set the compiler targeted (the baseline copy of the kernels) */
    #if defined(__AVX2__)
    #define FASTPE_TARGET_ISA "avx2"
    #elif defined(__AVX__)
    #define FASTPE_TARGET_ISA "avx"
    #elif defined(__SSE4_1__)
    #define FASTPE_TARGET_ISA "sse4.1"
    #elif defined(__x86_64__) || defined(_M_X64)
    #define FASTPE_TARGET_ISA "sse2"
    #elif defined(__aarch64__) || defined(_M_ARM64)
    #define FASTPE_TARGET_ISA "aarch64"
    #else
    #define FASTPE_TARGET_ISA "generic"
    #endif
    """
    const char *FASTPE_TARGET_ISA

#: every position must be below this: the kernels' exactness depends on it
cdef uint64_t POSITION_LIMIT = (<uint64_t>1) << 32

#: anchors are the multiples of STEPS; values below TINY (float32 row values) or TINY64
#: (RoPE's double products) come from the exact path: fastpe._plans.words' STEPS and TINY
STEPS = FASTPE_STEPS
TINY = FASTPE_TINY
TINY64 = FASTPE_TINY64
#: sequence positions per work item of :func:`rope_apply`
ROPE_SEQ = FASTPE_ROPE_SEQ


def coefficients():
    """``(sin, cos)``: the polynomial coefficients compiled in, as tuples of floats."""
    return (tuple(fastpe_sin_coeffs[k] for k in range(8)),
            tuple(fastpe_cos_coeffs[k] for k in range(8)))


def build_info():
    """``{"target": ISA the compiler targeted, "kernels": ISA of the kernels run here}``.

    ``kernels`` is ``"avx2"`` where a baseline x86-64 build found AVX2 on this CPU, else the
    target.  Every copy of the kernels gives the same bits.
    """
    target = FASTPE_TARGET_ISA.decode("ascii")
    variant = fastpe_kernel_variant(1).decode("ascii")
    return {"target": target, "kernels": target if variant == "baseline" else variant}


def sincos_steps(const double[:, ::1] turns, double[:, :, ::1] steps):
    """Fill ``steps[m, 0, i], steps[m, 1, i]`` with exact-path ``cos(m w_i), sin(m w_i)``.

    ``steps`` has shape ``(STEPS, 2, n_freq)``; ``turns`` is the ``(4, n_freq)`` plan.
    """
    if (turns.shape[0] != 4 or steps.shape[0] != FASTPE_STEPS or steps.shape[1] != 2
            or steps.shape[2] != turns.shape[1]):
        raise ValueError(f"steps must have shape ({STEPS}, 2, {turns.shape[1]})")
    if turns.shape[1] == 0:
        return
    with nogil:
        fastpe_sincos_steps(&turns[0, 0], turns.shape[1], &steps[0, 0, 0])


cdef int _check(const double[:, ::1] turns, const double[:, :, ::1] steps, float[:, ::1] out,
                Py_ssize_t row_begin, Py_ssize_t row_end) except -1:
    cdef Py_ssize_t n_freq = (out.shape[1] + 1) // 2
    if turns.shape[0] != 4 or turns.shape[1] != n_freq:
        raise ValueError(
            f"turns has shape ({turns.shape[0]}, {turns.shape[1]}), expected (4, {n_freq})"
        )
    if steps.shape[0] != FASTPE_STEPS or steps.shape[1] != 2 or steps.shape[2] != n_freq:
        raise ValueError(f"steps must have shape ({STEPS}, 2, {n_freq})")
    if not 0 <= row_begin <= row_end <= out.shape[0]:
        raise ValueError(f"rows [{row_begin}, {row_end}) out of range for {out.shape[0]} rows")
    return 0


cdef double *_scratch(Py_ssize_t n_freq) except NULL:
    cdef double *buf = <double *>PyMem_Malloc(2 * n_freq * sizeof(double))
    if buf == NULL:
        raise MemoryError()
    return buf


def sinusoid_forward(const uint32_t[::1] positions, const double[:, ::1] turns,
                     const double[:, :, ::1] steps, float[:, ::1] out,
                     Py_ssize_t row_begin=0, Py_ssize_t row_end=-1, bint wide=True):
    """Fill rows ``[row_begin, row_end)`` of ``out`` (all by default) for ``positions``.

    ``turns`` is ``fastpe._plans.words.sinusoid_turns(d_model, base)``, ``steps`` its table from
    :func:`sincos_steps`.  ``wide=False`` runs the baseline copy of the kernel even where
    AVX2 is available (same bits; for tests).
    """
    if row_end < 0:
        row_end = out.shape[0]
    if positions.shape[0] != out.shape[0]:
        raise ValueError(f"{positions.shape[0]} positions for {out.shape[0]} output rows")
    _check(turns, steps, out, row_begin, row_end)
    if row_begin == row_end:
        return
    cdef double *scratch = _scratch(turns.shape[1])
    try:
        with nogil:
            fastpe_sinusoid_forward(&positions[0], &turns[0, 0], turns.shape[1],
                                    &steps[0, 0, 0], &out[0, 0], out.shape[1],
                                    row_begin, row_end, scratch, wide)
    finally:
        PyMem_Free(scratch)


def sinusoid_range(uint64_t start, const double[:, ::1] turns, const double[:, :, ::1] steps,
                   float[:, ::1] out, Py_ssize_t row_begin=0, Py_ssize_t row_end=-1,
                   bint wide=True):
    """Fill rows ``[row_begin, row_end)`` of ``out`` for positions ``start + row``.

    All ``len(out)`` positions must be below 2**32.  Otherwise as :func:`sinusoid_forward`.
    """
    if row_end < 0:
        row_end = out.shape[0]
    _check(turns, steps, out, row_begin, row_end)
    if start > POSITION_LIMIT or <uint64_t>out.shape[0] > POSITION_LIMIT - start:
        raise ValueError(f"positions from {start} for {out.shape[0]} rows reach 2**32")
    if row_begin == row_end:
        return
    cdef double *scratch = _scratch(turns.shape[1])
    try:
        with nogil:
            fastpe_sinusoid_range(start, &turns[0, 0], turns.shape[1], &steps[0, 0, 0],
                                  &out[0, 0], out.shape[1], row_begin, row_end, scratch, wide)
    finally:
        PyMem_Free(scratch)


# ------------------------------------------------------------------------------------ RoPE


cdef int _check_rope_plan(const double[:, ::1] turns, const double[:, :, ::1] steps) except -1:
    if turns.shape[0] != 4 or turns.shape[1] < 1:
        raise ValueError(f"turns has shape ({turns.shape[0]}, {turns.shape[1]}), expected (4, n_freq)")
    if steps.shape[0] != FASTPE_STEPS or steps.shape[1] != 2 or steps.shape[2] != turns.shape[1]:
        raise ValueError(f"steps must have shape ({STEPS}, 2, {turns.shape[1]})")
    return 0


cdef int _check_rows(Py_ssize_t n_rows, Py_ssize_t row_begin, Py_ssize_t row_end) except -1:
    if not 0 <= row_begin <= row_end <= n_rows:
        raise ValueError(f"rows [{row_begin}, {row_end}) out of range for {n_rows} rows")
    return 0


def rope_table(const uint32_t[::1] positions, const double[:, ::1] turns,
               const double[:, :, ::1] steps, double attention_factor, double[:, :, ::1] table,
               Py_ssize_t row_begin=0, Py_ssize_t row_end=-1, bint wide=True):
    """Fill rows ``[row_begin, row_end)`` of ``table`` (``(len(positions), 2, n_freq)``):
    ``table[t, 0, i], table[t, 1, i]`` = the doubles ``C, S`` of ``positions[t]``.

    ``turns`` is ``fastpe._plans.words.frequency_turns(inv_freq)``, ``steps`` its table from
    :func:`sincos_steps`.
    """
    _check_rope_plan(turns, steps)
    if row_end < 0:
        row_end = table.shape[0]
    if table.shape[0] != positions.shape[0] or table.shape[1] != 2 or table.shape[2] != turns.shape[1]:
        raise ValueError(f"table must have shape ({positions.shape[0]}, 2, {turns.shape[1]})")
    _check_rows(table.shape[0], row_begin, row_end)
    if row_begin == row_end:
        return
    cdef double *scratch = _scratch(turns.shape[1])
    try:
        with nogil:
            fastpe_rope_table(&positions[0], &turns[0, 0], turns.shape[1], &steps[0, 0, 0],
                              attention_factor, &table[0, 0, 0], row_begin, row_end, scratch, wide)
    finally:
        PyMem_Free(scratch)


def rope_cos_sin(const uint32_t[::1] positions, const double[:, ::1] turns,
                 const double[:, :, ::1] steps, double attention_factor, bint neox,
                 float[:, ::1] out_cos, float[:, ::1] out_sin, Py_ssize_t row_begin=0,
                 Py_ssize_t row_end=-1, bint wide=True):
    """Fill rows ``[row_begin, row_end)`` of ``out_cos`` and ``out_sin``
    (``(len(positions), 2 * n_freq)``) with float32 ``C`` and ``S``, each frequency in two
    columns: ``i`` and ``i + n_freq`` if ``neox``, else ``2i`` and ``2i + 1``."""
    _check_rope_plan(turns, steps)
    cdef Py_ssize_t n = positions.shape[0]
    cdef Py_ssize_t width = 2 * turns.shape[1]
    if row_end < 0:
        row_end = n
    if (out_cos.shape[0] != n or out_cos.shape[1] != width or out_sin.shape[0] != n
            or out_sin.shape[1] != width):
        raise ValueError(f"outputs must have shape ({n}, {width})")
    _check_rows(n, row_begin, row_end)
    if row_begin == row_end:
        return
    cdef double *scratch = _scratch(turns.shape[1])
    try:
        with nogil:
            fastpe_rope_cos_sin(&positions[0], &turns[0, 0], turns.shape[1], &steps[0, 0, 0],
                                attention_factor, neox, &out_cos[0, 0], &out_sin[0, 0],
                                row_begin, row_end, scratch, wide)
    finally:
        PyMem_Free(scratch)


cdef int _check_rows_fit(str name, Py_ssize_t size, Py_ssize_t n_heads, Py_ssize_t n_batch,
                         Py_ssize_t sb, Py_ssize_t sh, Py_ssize_t ss, Py_ssize_t s_end,
                         Py_ssize_t width) except -1:
    if n_heads < 0 or sb < 0 or sh < 0 or ss < 0:
        raise ValueError(f"{name}: negative heads or strides")
    if n_heads == 0:
        return 0
    if (n_batch - 1) * sb + (n_heads - 1) * sh + (s_end - 1) * ss + width > size:
        raise ValueError(f"{name}: rows reach past the end of its {size} values")
    return 0


def rope_apply(float[::1] xq, Py_ssize_t hq, Py_ssize_t bq, Py_ssize_t shq, Py_ssize_t ssq,
               float[::1] xk, Py_ssize_t hk, Py_ssize_t bk, Py_ssize_t shk, Py_ssize_t ssk,
               Py_ssize_t n_batch, Py_ssize_t s_begin, Py_ssize_t s_end,
               const double[:, :, ::1] table, Py_ssize_t pos_bstride, bint neox,
               Py_ssize_t item_begin=0, Py_ssize_t item_end=-1, bint wide=True):
    """Rotate, in place, the rows of the flat buffers ``xq`` (``hq`` heads) and ``xk``
    (``hk`` heads, 0 for none) for sequence indices ``[s_begin, s_end)`` of every batch.

    Row ``(b, h, s)`` of ``xq`` starts at ``b*bq + h*shq + s*ssq`` (``xk`` likewise) and reads
    table row ``b * pos_bstride + s - s_begin``.  Work items ``[item_begin, item_end)``
    (default all ``n_batch * ceil((s_end - s_begin) / ROPE_SEQ)``) are (batch, ROPE_SEQ
    positions) blocks.
    """
    cdef Py_ssize_t n_freq = table.shape[2]
    if table.shape[1] != 2 or n_freq < 1:
        raise ValueError("table must have shape (rows, 2, n_freq)")
    if n_batch < 0 or not 0 <= s_begin <= s_end or pos_bstride < 0:
        raise ValueError("bad batch count, sequence range or table stride")
    cdef Py_ssize_t n_sb = (s_end - s_begin + FASTPE_ROPE_SEQ - 1) // FASTPE_ROPE_SEQ
    cdef Py_ssize_t n_items = n_batch * n_sb
    if item_end < 0:
        item_end = n_items
    if not 0 <= item_begin <= item_end <= n_items:
        raise ValueError(f"items [{item_begin}, {item_end}) out of range for {n_items} items")
    if item_begin == item_end:
        return
    if (n_batch - 1) * pos_bstride + (s_end - 1 - s_begin) >= table.shape[0]:
        raise ValueError(f"table has {table.shape[0]} rows, too few for these positions")
    _check_rows_fit("xq", xq.shape[0], hq, n_batch, bq, shq, ssq, s_end, 2 * n_freq)
    _check_rows_fit("xk", xk.shape[0], hk, n_batch, bk, shk, ssk, s_end, 2 * n_freq)
    cdef float *pq = &xq[0] if xq.shape[0] else NULL
    cdef float *pk = &xk[0] if xk.shape[0] else NULL
    if hq and pq == NULL:
        raise ValueError("xq is empty")
    with nogil:
        fastpe_rope_apply(pq, hq, bq, shq, ssq, pk, hk, bk, shk, ssk, s_begin, s_end,
                          &table[0, 0, 0], n_freq, pos_bstride, neox, item_begin, item_end, wide)


def sincos_real(const double[::1] x, const double[:, ::1] turns, double[:, :, ::1] table,
                Py_ssize_t row_begin=0, Py_ssize_t row_end=-1, bint wide=True):
    """Fill rows ``[row_begin, row_end)`` of ``table`` (``(len(x), 2, n_freq)``) with the
    exact-path ``cos, sin`` of the real positions ``x`` (finite, ``|x| < 2**32``); ``wide``
    as in :func:`sinusoid_forward`."""
    if turns.shape[0] != 4:
        raise ValueError(f"turns has shape ({turns.shape[0]}, {turns.shape[1]}), expected (4, n_freq)")
    if row_end < 0:
        row_end = table.shape[0]
    if table.shape[0] != x.shape[0] or table.shape[1] != 2 or table.shape[2] != turns.shape[1]:
        raise ValueError(f"table must have shape ({x.shape[0]}, 2, {turns.shape[1]})")
    _check_rows(table.shape[0], row_begin, row_end)
    if row_begin == row_end or turns.shape[1] == 0:
        return
    with nogil:
        fastpe_sincos_real(&x[0], &turns[0, 0], turns.shape[1], &table[0, 0, 0], row_begin, row_end,
                           wide)



# ----------------------------------------------------------------------- narrowing to 16 bits
# Round-to-nearest-even of float32 bit patterns to float16 / bfloat16, flagging the float32
# values that are exactly halfway between two target numbers: the numba _to_f16 / _to_bf16,
# step for step (integer arithmetic only, so the same bits on any compiler).


cdef inline uint16_t _to_f16(uint32_t u, uint8_t *tie) noexcept nogil:
    cdef uint32_t sign = (u >> 16) & 0x8000
    cdef uint32_t a = u & 0x7FFFFFFF
    cdef uint32_t h, m, shift, mant, rem, half
    tie[0] = 0
    if a > 0x7F800000:  # NaN: quiet, sign kept
        h = 0x7E00
    elif a >= 0x477FF000:  # 65520 and up round to inf
        h = 0x7C00
        tie[0] = a == 0x477FF000
    elif a >= 0x38800000:  # float16 normals: rebias, round off 13 bits
        m = a - 0x38000000
        h = (m + 0x0FFF + ((m >> 13) & 1)) >> 13
        tie[0] = (a & 0x1FFF) == 0x1000
    elif a >= 0x33000000:  # float16 subnormals: units of 2**-24
        shift = 126 - (a >> 23)
        mant = (a & 0x7FFFFF) | 0x800000
        h = mant >> shift
        rem = mant & ((<uint32_t>1 << shift) - 1)
        half = <uint32_t>1 << (shift - 1)
        if rem > half or (rem == half and (h & 1)):
            h += 1
        tie[0] = rem == half
    else:
        h = 0
    return <uint16_t>(sign | h)


cdef inline uint16_t _to_bf16(uint32_t u, uint8_t *tie) noexcept nogil:
    cdef uint32_t a = u & 0x7FFFFFFF
    if a > 0x7F800000:  # NaN: quiet
        tie[0] = 0
        return <uint16_t>((u >> 16) | 0x40)
    tie[0] = (u & 0xFFFF) == 0x8000 and a < 0x7F800000
    return <uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16)


def narrow16(const uint32_t[::1] bits, bint bf16, uint16_t[::1] out, uint8_t[::1] ties,
             Py_ssize_t begin=0, Py_ssize_t end=-1):
    """Elements ``[begin, end)``: ``out`` the float16 (``bf16``: bfloat16) bits nearest to the
    float32 ``bits``, ``ties`` 1 where the float32 lies exactly halfway between two."""
    cdef Py_ssize_t n = bits.shape[0]
    cdef Py_ssize_t i
    if end < 0:
        end = n
    if out.shape[0] != n or ties.shape[0] != n:
        raise ValueError(f"out and ties must have {n} elements")
    _check_rows(n, begin, end)
    with nogil:
        if bf16:
            for i in range(begin, end):
                out[i] = _to_bf16(bits[i], &ties[i])
        else:
            for i in range(begin, end):
                out[i] = _to_f16(bits[i], &ties[i])



# ----------------------------------------------------------------------- sinusoid families
# Rows of any geometric frequency set in a layout (fastpe._plans.layouts), float32 or float64: the
# (cos, sin) doubles of a block of rows -- fastpe_rope_table with af = 1 (integer positions)
# or fastpe_sincos_real (real positions) -- then laid out and rounded (a C cast: round to
# nearest, as NumPy's and numba's are).

cdef enum:
    _FAMILY_ROWS = 64  # rows per block: their (cos, sin) doubles stay in cache while laid out

# the layout codes: fastpe._plans.layouts.LAYOUT_CODES (the cython backend checks LAYOUT_CODES)
cdef enum:
    _INTERLEAVED = 0
    _HALVES = 1
    _HALVES_COS = 2
    _N_LAYOUTS = 3

#: layout name -> the code sincos_rows and sincos_real_rows take
LAYOUT_CODES = {"interleaved": _INTERLEAVED, "halves": _HALVES, "halves_cos": _HALVES_COS}


cdef void _scatter(const double *table, Py_ssize_t n_rows, Py_ssize_t n_freq, int layout,
                   floating[:, ::1] out, Py_ssize_t row0) noexcept nogil:
    """Rows ``row0 ..`` of ``out`` from ``table`` (``n_rows x 2 x n_freq``: cos, then sin)
    in ``layout`` (interleaved, halves, or halves with the cosines first)."""
    cdef Py_ssize_t d = out.shape[1]
    cdef Py_ssize_t t, k, j, m
    cdef const double *c
    cdef const double *s
    cdef const double *first
    cdef const double *second
    for t in range(n_rows):
        c = table + 2 * t * n_freq
        s = c + n_freq
        if layout == _INTERLEAVED:
            for k in range(n_freq):
                out[row0 + t, 2 * k] = <floating>s[k]
                if 2 * k + 1 < d:
                    out[row0 + t, 2 * k + 1] = <floating>c[k]
        else:
            first = s if layout == _HALVES else c
            second = c if layout == _HALVES else s
            for k in range(n_freq):
                out[row0 + t, k] = <floating>first[k]
            m = d - n_freq
            if m > n_freq:
                m = n_freq
            for k in range(m):
                out[row0 + t, n_freq + k] = <floating>second[k]
        for j in range(2 * n_freq, d):
            out[row0 + t, j] = 0


cdef int _check_family(Py_ssize_t n, const double[:, ::1] turns, floating[:, ::1] out, int layout,
                       Py_ssize_t row_begin, Py_ssize_t row_end) except -1:
    if turns.shape[0] != 4 or turns.shape[1] < 1:
        raise ValueError("turns must have shape (4, n_freq), n_freq >= 1")
    if out.shape[0] != n or out.shape[1] < 2 * turns.shape[1] - 1:
        raise ValueError(f"out must have {n} rows of at least {2 * turns.shape[1] - 1} columns")
    if not 0 <= layout < _N_LAYOUTS:
        raise ValueError(f"layout code {layout} is not one of {sorted(LAYOUT_CODES.values())}")
    _check_rows(n, row_begin, row_end)
    return 0


cdef int _family_rows(const uint32_t *positions, const double *x, const double *turns,
                      Py_ssize_t n_freq, const double *steps, int layout, floating[:, ::1] out,
                      Py_ssize_t row_begin, Py_ssize_t row_end, bint wide) except -1:
    """Rows ``[row_begin, row_end)`` of ``out``, ``_FAMILY_ROWS`` at a time: the (cos, sin)
    doubles of the integer ``positions`` (fastpe_rope_table with af = 1) or, where
    ``positions`` is NULL, of the real positions ``x`` (fastpe_sincos_real), then laid out and
    rounded by :func:`_scatter`."""
    cdef double *scratch = NULL
    cdef double *table = <double *>PyMem_Malloc(_FAMILY_ROWS * 2 * n_freq * sizeof(double))
    cdef Py_ssize_t b0, b1
    if table == NULL:
        raise MemoryError()
    try:
        if positions != NULL:
            scratch = _scratch(n_freq)
        with nogil:
            b0 = row_begin
            while b0 < row_end:
                b1 = b0 + _FAMILY_ROWS
                if b1 > row_end:
                    b1 = row_end
                if positions != NULL:
                    fastpe_rope_table(positions + b0, turns, n_freq, steps, 1.0, table, 0, b1 - b0,
                                      scratch, wide)
                else:
                    fastpe_sincos_real(x + b0, turns, n_freq, table, 0, b1 - b0, wide)
                _scatter(table, b1 - b0, n_freq, layout, out, b0)
                b0 = b1
    finally:
        PyMem_Free(table)
        PyMem_Free(scratch)
    return 0


def sincos_rows(const uint32_t[::1] positions, const double[:, ::1] turns,
                const double[:, :, ::1] steps, int layout, floating[:, ::1] out,
                Py_ssize_t row_begin=0, Py_ssize_t row_end=-1, bint wide=True):
    """Rows ``[row_begin, row_end)`` of ``out``: the family values of ``positions`` for the
    frequencies ``turns`` (``steps`` from :func:`sincos_steps`) in ``layout`` (a code of
    :data:`LAYOUT_CODES`)."""
    if row_end < 0:
        row_end = out.shape[0]
    _check_rope_plan(turns, steps)
    _check_family(positions.shape[0], turns, out, layout, row_begin, row_end)
    if row_begin == row_end:
        return
    _family_rows(&positions[0], NULL, &turns[0, 0], turns.shape[1], &steps[0, 0, 0], layout, out,
                 row_begin, row_end, wide)


def sincos_real_rows(const double[::1] x, const double[:, ::1] turns, int layout,
                     floating[:, ::1] out, Py_ssize_t row_begin=0, Py_ssize_t row_end=-1,
                     bint wide=True):
    """Rows ``[row_begin, row_end)`` of ``out``: the family values at the real positions
    ``x`` (finite, ``|x| < 2**32``) for the frequencies ``turns`` in ``layout``."""
    if row_end < 0:
        row_end = out.shape[0]
    _check_family(x.shape[0], turns, out, layout, row_begin, row_end)
    if row_begin == row_end:
        return
    _family_rows(NULL, &x[0], &turns[0, 0], turns.shape[1], NULL, layout, out, row_begin, row_end,
                 wide)
