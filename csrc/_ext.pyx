# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, embedsignature=True
"""Compiled kernels of the ``cython`` backend, built from ``csrc/`` (see fastpe._backends.cython).

The functions take arrays the caller has already validated and converted.  They check only
what memory safety needs (shapes, row bounds, positions below 2**32), then release the GIL
for the loop; ``parts > 1`` cuts the rows into blocks that the calling thread and the
persistent workers of ``fastpe_pool.h`` run (Python threads may also fill disjoint row
ranges of one output at once).
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_New
from cpython.ref cimport Py_DECREF, Py_INCREF
from cython cimport floating
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t

cdef extern from "fastpe_kernels.h" nogil:
    const int FASTPE_STEPS
    const float FASTPE_TINY
    const double FASTPE_TINY64
    const uint32_t FASTPE_TINY_BITS
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
    void fastpe_narrow16(const uint32_t *bits, int bf16, uint16_t *out, uint8_t *ties,
                         Py_ssize_t begin, Py_ssize_t end, int wide)
    void fastpe_sincos_real(const double *x, const double *turns, Py_ssize_t n_freq,
                            double *table, Py_ssize_t row_begin, Py_ssize_t row_end, int wide)
    void fastpe_rope_table(const uint32_t *positions, const double *turns, Py_ssize_t n_freq,
                           const double *steps, double af, double *table, Py_ssize_t row_begin,
                           Py_ssize_t row_end, double *scratch, int wide)
    void fastpe_rope_cos_sin(const uint32_t *positions, const double *turns, Py_ssize_t n_freq,
                             const double *steps, double af, int neox, float *out_cos,
                             float *out_sin, Py_ssize_t row_begin, Py_ssize_t row_end,
                             double *scratch, int wide)
    void fastpe_family_table(const uint32_t *positions, Py_ssize_t n, const double *turns,
                             Py_ssize_t n_freq, const double *steps, double *table,
                             double *scratch, int64_t *anchor_at, int wide)
    void fastpe_family_halves32(const uint32_t *positions, Py_ssize_t n, const double *turns,
                                Py_ssize_t n_freq, const double *steps, float *out,
                                Py_ssize_t d, int cos_first, double *scratch,
                                int64_t *anchor_at, int wide)
    void fastpe_rope_apply(float *xq, Py_ssize_t hq, Py_ssize_t bq, Py_ssize_t shq,
                           Py_ssize_t ssq, float *xk, Py_ssize_t hk, Py_ssize_t bk,
                           Py_ssize_t shk, Py_ssize_t ssk, Py_ssize_t s_begin,
                           Py_ssize_t s_end, const double *table, Py_ssize_t n_freq,
                           Py_ssize_t pos_bstride, int neox, Py_ssize_t item_begin,
                           Py_ssize_t item_end, int wide)
    Py_ssize_t fastpe_rope_apply_items(Py_ssize_t hq, Py_ssize_t shq, Py_ssize_t ssq,
                                       Py_ssize_t hk, Py_ssize_t shk, Py_ssize_t ssk,
                                       Py_ssize_t n_batch, Py_ssize_t n_seq)
    const int FASTPE_ROPE_RUN

cdef extern from "fastpe_pool.h" nogil:
    ctypedef void (*fastpe_task_fn)(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil
    int fastpe_pool_run(fastpe_task_fn fn, void *ctx, Py_ssize_t lo, Py_ssize_t hi, int parts,
                        Py_ssize_t align, int n_threads)
    int fastpe_pool_workers()

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
#: TINY's float32 bit pattern, which the row kernels compare |value|'s bits with
TINY_BITS = FASTPE_TINY_BITS
#: sequence positions per work item of :func:`rope_apply`: ROPE_RUN rows of one head where a
#: head's rows are adjacent, else ROPE_SEQ tokens of every head (:func:`rope_apply_items`)
ROPE_SEQ = FASTPE_ROPE_SEQ
ROPE_RUN = FASTPE_ROPE_RUN


def coefficients():
    """``(sin, cos)``: the polynomial coefficients compiled in, as tuples of floats."""
    return (tuple(fastpe_sin_coeffs[k] for k in range(8)),
            tuple(fastpe_cos_coeffs[k] for k in range(8)))


def build_info():
    """``{"target": ISA the compiler targeted, "kernels": ISA of the kernels run here}``.

    ``kernels`` is ``"avx512"`` or ``"avx2"`` where a baseline x86-64 build found that on this
    CPU (the table and RoPE kernels have an AVX-512 copy, the others AVX2), else the target.
    Every copy of the kernels gives the same bits.
    """
    target = FASTPE_TARGET_ISA.decode("ascii")
    variant = fastpe_kernel_variant(1).decode("ascii")
    return {"target": target, "kernels": target if variant == "baseline" else variant}


# ------------------------------------------------------------------------ the worker pool
# fastpe_pool.h: persistent workers, started on the first call with parts > 1, dropped in a
# forked child.  Every entry point below takes ``parts``: its rows are cut into that many
# blocks (the kernels' values do not depend on the cut), run by the caller and the workers.

cdef int _pool_threads = 1


def set_pool_threads(int n):
    """Threads (caller included) a call with ``parts > 1`` may use: the pool has ``n - 1``
    workers once started; a later change applies to a pool started later (after a fork)."""
    global _pool_threads
    _pool_threads = n if n > 1 else 1


def pool_workers():
    """Workers of this process's pool: 0 before the first parallel call (and in a fresh
    fork child)."""
    return fastpe_pool_workers()


cdef int _pool_run_shared(fastpe_task_fn fn, void *ctx, Py_ssize_t lo, Py_ssize_t hi, int parts,
                          Py_ssize_t align) noexcept nogil:
    return fastpe_pool_run(fn, ctx, lo, hi, parts, align, _pool_threads)


def pool_capsule():
    """The pool's entry point for the attention-bias extension, so that both share one set of
    workers: a capsule of ``int (*)(fastpe_task_fn, void *, Py_ssize_t lo, Py_ssize_t hi,
    int parts, Py_ssize_t align)``."""
    return PyCapsule_New(<void *>_pool_run_shared, b"fastpe.pool_run", NULL)


cdef int _check_parts(int parts) except -1:
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    return 0


ctypedef struct _PyTask:
    PyObject *fn
    PyObject *error


cdef void _py_part(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef _PyTask *t = <_PyTask *>ctx
    with gil:
        if t.error != NULL:
            return
        try:
            (<object>t.fn)(lo, hi)
        except BaseException as exc:
            Py_INCREF(exc)
            t.error = <PyObject *>exc


def run_parts(fn, Py_ssize_t lo, Py_ssize_t hi, int parts):
    """``fn(b, e)`` for the ``parts`` blocks ``[b, e)`` of ``[lo, hi)``, on the caller and
    the pool (``fn`` should release the GIL for its work: NumPy's copies do); the first
    exception raised is re-raised here after every block has returned."""
    _check_parts(parts)
    cdef _PyTask t
    t.fn = <PyObject *>fn
    t.error = NULL
    if hi <= lo:
        return
    with nogil:
        fastpe_pool_run(_py_part, &t, lo, hi, parts, 1, _pool_threads)
    if t.error != NULL:
        exc = <object>t.error
        Py_DECREF(exc)
        raise exc


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


cdef double *_scratch(Py_ssize_t n_doubles) except NULL:
    cdef double *buf = <double *>PyMem_Malloc(n_doubles * sizeof(double))
    if buf == NULL:
        raise MemoryError()
    return buf


#: rows per block edge of the sinusoid kernels: a block starting on a multiple of STEPS
#: (from row 0) computes no anchor its neighbour also computes
cdef Py_ssize_t _ALIGN = FASTPE_STEPS


ctypedef struct _SinCtx:
    const uint32_t *positions
    uint64_t start
    const double *turns
    Py_ssize_t n_freq
    const double *steps
    float *out
    Py_ssize_t d_model
    double *scratch
    int wide


cdef void _forward_part(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef _SinCtx *c = <_SinCtx *>ctx
    fastpe_sinusoid_forward(c.positions, c.turns, c.n_freq, c.steps, c.out, c.d_model, lo, hi,
                            c.scratch + 2 * part * c.n_freq, c.wide)


cdef void _range_part(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef _SinCtx *c = <_SinCtx *>ctx
    fastpe_sinusoid_range(c.start, c.turns, c.n_freq, c.steps, c.out, c.d_model, lo, hi,
                          c.scratch + 2 * part * c.n_freq, c.wide)


cdef int _run_sinusoid(fastpe_task_fn fn, _SinCtx *c, Py_ssize_t row_begin, Py_ssize_t row_end,
                       int parts) except -1:
    _check_parts(parts)
    c.scratch = _scratch(2 * parts * c.n_freq)
    try:
        with nogil:
            fastpe_pool_run(fn, c, row_begin, row_end, parts, _ALIGN, _pool_threads)
    finally:
        PyMem_Free(c.scratch)
    return 0


def sinusoid_forward(const uint32_t[::1] positions, const double[:, ::1] turns,
                     const double[:, :, ::1] steps, float[:, ::1] out,
                     Py_ssize_t row_begin=0, Py_ssize_t row_end=-1, int wide=1, int parts=1):
    """Fill rows ``[row_begin, row_end)`` of ``out`` (all by default) for ``positions``.

    ``turns`` is ``fastpe._plans.words.sinusoid_turns(d_model, base)``, ``steps`` its table from
    :func:`sincos_steps`.  ``wide=False`` (0) runs the baseline copy of the kernel even where
    AVX2 is available, ``wide=2`` the AVX2 copy even where AVX-512 is (same bits; for tests).
    ``parts > 1`` cuts the rows into that many blocks for the caller and the pool's workers
    (same bits).
    """
    if row_end < 0:
        row_end = out.shape[0]
    if positions.shape[0] != out.shape[0]:
        raise ValueError(f"{positions.shape[0]} positions for {out.shape[0]} output rows")
    _check(turns, steps, out, row_begin, row_end)
    if row_begin == row_end:
        return
    cdef _SinCtx c
    c.positions = &positions[0]
    c.turns = &turns[0, 0]
    c.n_freq = turns.shape[1]
    c.steps = &steps[0, 0, 0]
    c.out = &out[0, 0]
    c.d_model = out.shape[1]
    c.wide = wide
    _run_sinusoid(_forward_part, &c, row_begin, row_end, parts)


def sinusoid_range(uint64_t start, const double[:, ::1] turns, const double[:, :, ::1] steps,
                   float[:, ::1] out, Py_ssize_t row_begin=0, Py_ssize_t row_end=-1,
                   int wide=1, int parts=1):
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
    cdef _SinCtx c
    c.start = start
    c.turns = &turns[0, 0]
    c.n_freq = turns.shape[1]
    c.steps = &steps[0, 0, 0]
    c.out = &out[0, 0]
    c.d_model = out.shape[1]
    c.wide = wide
    _run_sinusoid(_range_part, &c, row_begin, row_end, parts)


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


ctypedef struct _RopeCtx:
    const uint32_t *positions
    const double *turns
    Py_ssize_t n_freq
    const double *steps
    double af
    int neox
    double *table
    float *out_cos
    float *out_sin
    double *scratch
    int wide


cdef void _rope_table_part(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef _RopeCtx *c = <_RopeCtx *>ctx
    fastpe_rope_table(c.positions, c.turns, c.n_freq, c.steps, c.af, c.table, lo, hi,
                      c.scratch + 2 * part * c.n_freq, c.wide)


cdef void _rope_cos_sin_part(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef _RopeCtx *c = <_RopeCtx *>ctx
    fastpe_rope_cos_sin(c.positions, c.turns, c.n_freq, c.steps, c.af, c.neox, c.out_cos,
                        c.out_sin, lo, hi, c.scratch + 2 * part * c.n_freq, c.wide)


cdef int _run_rope(fastpe_task_fn fn, _RopeCtx *c, Py_ssize_t row_begin, Py_ssize_t row_end,
                   int parts) except -1:
    _check_parts(parts)
    c.scratch = _scratch(2 * parts * c.n_freq)
    try:
        with nogil:
            fastpe_pool_run(fn, c, row_begin, row_end, parts, 1, _pool_threads)
    finally:
        PyMem_Free(c.scratch)
    return 0


def rope_table(const uint32_t[::1] positions, const double[:, ::1] turns,
               const double[:, :, ::1] steps, double attention_factor, double[:, :, ::1] table,
               Py_ssize_t row_begin=0, Py_ssize_t row_end=-1, int wide=1, int parts=1):
    """Fill rows ``[row_begin, row_end)`` of ``table`` (``(len(positions), 2, n_freq)``):
    ``table[t, 0, i], table[t, 1, i]`` = the doubles ``C, S`` of ``positions[t]``.

    ``turns`` is ``fastpe._plans.words.frequency_turns(inv_freq)``, ``steps`` its table from
    :func:`sincos_steps`; ``parts`` as in :func:`sinusoid_forward`.
    """
    _check_rope_plan(turns, steps)
    if row_end < 0:
        row_end = table.shape[0]
    if table.shape[0] != positions.shape[0] or table.shape[1] != 2 or table.shape[2] != turns.shape[1]:
        raise ValueError(f"table must have shape ({positions.shape[0]}, 2, {turns.shape[1]})")
    _check_rows(table.shape[0], row_begin, row_end)
    if row_begin == row_end:
        return
    cdef _RopeCtx c
    c.positions = &positions[0]
    c.turns = &turns[0, 0]
    c.n_freq = turns.shape[1]
    c.steps = &steps[0, 0, 0]
    c.af = attention_factor
    c.table = &table[0, 0, 0]
    c.wide = wide
    _run_rope(_rope_table_part, &c, row_begin, row_end, parts)


def rope_cos_sin(const uint32_t[::1] positions, const double[:, ::1] turns,
                 const double[:, :, ::1] steps, double attention_factor, bint neox,
                 float[:, ::1] out_cos, float[:, ::1] out_sin, Py_ssize_t row_begin=0,
                 Py_ssize_t row_end=-1, int wide=1, int parts=1):
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
    cdef _RopeCtx c
    c.positions = &positions[0]
    c.turns = &turns[0, 0]
    c.n_freq = turns.shape[1]
    c.steps = &steps[0, 0, 0]
    c.af = attention_factor
    c.neox = neox
    c.out_cos = &out_cos[0, 0]
    c.out_sin = &out_sin[0, 0]
    c.wide = wide
    _run_rope(_rope_cos_sin_part, &c, row_begin, row_end, parts)


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


ctypedef struct _ApplyCtx:
    float *xq
    Py_ssize_t hq, bq, shq, ssq
    float *xk
    Py_ssize_t hk, bk, shk, ssk
    Py_ssize_t s_begin, s_end
    const double *table
    Py_ssize_t n_freq, pos_bstride
    int neox, wide


cdef void _apply_part(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef _ApplyCtx *c = <_ApplyCtx *>ctx
    fastpe_rope_apply(c.xq, c.hq, c.bq, c.shq, c.ssq, c.xk, c.hk, c.bk, c.shk, c.ssk, c.s_begin,
                      c.s_end, c.table, c.n_freq, c.pos_bstride, c.neox, lo, hi, c.wide)


cpdef Py_ssize_t rope_apply_items(Py_ssize_t hq, Py_ssize_t shq, Py_ssize_t ssq, Py_ssize_t hk,
                                  Py_ssize_t shk, Py_ssize_t ssk, Py_ssize_t n_batch,
                                  Py_ssize_t s_begin, Py_ssize_t s_end):
    """The number of :func:`rope_apply`'s work items for these heads, strides, batches and
    sequence range (``s_begin <= s_end``)."""
    return fastpe_rope_apply_items(hq, shq, ssq, hk, shk, ssk, n_batch, s_end - s_begin)


def rope_apply(float[::1] xq, Py_ssize_t hq, Py_ssize_t bq, Py_ssize_t shq, Py_ssize_t ssq,
               float[::1] xk, Py_ssize_t hk, Py_ssize_t bk, Py_ssize_t shk, Py_ssize_t ssk,
               Py_ssize_t n_batch, Py_ssize_t s_begin, Py_ssize_t s_end,
               const double[:, :, ::1] table, Py_ssize_t pos_bstride, bint neox,
               Py_ssize_t item_begin=0, Py_ssize_t item_end=-1, int wide=1, int parts=1):
    """Rotate, in place, the rows of the flat buffers ``xq`` (``hq`` heads) and ``xk``
    (``hk`` heads, 0 for none) for sequence indices ``[s_begin, s_end)`` of every batch.

    Row ``(b, h, s)`` of ``xq`` starts at ``b*bq + h*shq + s*ssq`` (``xk`` likewise) and reads
    table row ``b * pos_bstride + s - s_begin``.  Work items ``[item_begin, item_end)``
    (default all :func:`rope_apply_items`) are, in memory order, runs of ``ROPE_RUN`` rows of
    one head (q's heads, then k's) where a head's rows are adjacent (``shq >= ssq``, and k's
    likewise), else blocks of ``ROPE_SEQ`` tokens of every head.
    """
    cdef Py_ssize_t n_freq = table.shape[2]
    if table.shape[1] != 2 or n_freq < 1:
        raise ValueError("table must have shape (rows, 2, n_freq)")
    if n_batch < 0 or not 0 <= s_begin <= s_end or pos_bstride < 0:
        raise ValueError("bad batch count, sequence range or table stride")
    cdef Py_ssize_t n_items = rope_apply_items(hq, shq, ssq, hk, shk, ssk, n_batch, s_begin, s_end)
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
    _check_parts(parts)
    cdef _ApplyCtx c
    c.xq, c.hq, c.bq, c.shq, c.ssq = pq, hq, bq, shq, ssq
    c.xk, c.hk, c.bk, c.shk, c.ssk = pk, hk, bk, shk, ssk
    c.s_begin, c.s_end = s_begin, s_end
    c.table, c.n_freq, c.pos_bstride = &table[0, 0, 0], n_freq, pos_bstride
    c.neox, c.wide = neox, wide
    with nogil:
        fastpe_pool_run(_apply_part, &c, item_begin, item_end, parts, 1, _pool_threads)


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
# step for step (integer arithmetic only, so the same bits on any compiler).  The vector copies
# are csrc/fastpe_narrow16x.h's (the tie by one shift: about a third of the instructions).

cdef extern from "fastpe_narrow16x.h" nogil:
    void fastpe_narrow16x(const uint32_t *bits, int bf16, uint16_t *out, uint8_t *ties,
                          Py_ssize_t begin, Py_ssize_t end, int wide)


ctypedef struct _NarrowCtx:
    const uint32_t *bits
    uint16_t *out
    uint8_t *ties
    int bf16
    int wide


cdef void _narrow_part(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef _NarrowCtx *c = <_NarrowCtx *>ctx
    fastpe_narrow16x(c.bits, c.bf16, c.out, c.ties, lo, hi, c.wide)


def narrow16(const uint32_t[::1] bits, bint bf16, uint16_t[::1] out, uint8_t[::1] ties,
             Py_ssize_t begin=0, Py_ssize_t end=-1, int parts=1, int wide=1):
    """Elements ``[begin, end)``: ``out`` the float16 (``bf16``: bfloat16) bits nearest to the
    float32 ``bits``, ``ties`` 1 where the float32 lies exactly halfway between two
    (csrc/fastpe_narrow16x.h, fastpe_narrow16x; ``wide`` as in :func:`sinusoid_forward`)."""
    cdef Py_ssize_t n = bits.shape[0]
    if end < 0:
        end = n
    if out.shape[0] != n or ties.shape[0] != n:
        raise ValueError(f"out and ties must have {n} elements")
    _check_rows(n, begin, end)
    _check_parts(parts)
    if begin == end:
        return
    cdef _NarrowCtx c
    c.bits, c.out, c.ties, c.bf16, c.wide = &bits[0], &out[0], &ties[0], bf16, wide
    with nogil:
        fastpe_pool_run(_narrow_part, &c, begin, end, parts, 1, _pool_threads)



# ----------------------------------------------------------------------- sinusoid families
# Rows of any geometric frequency set in a layout (fastpe._plans.layouts), float32 or float64: the
# (cos, sin) doubles of a block of rows -- fastpe_rope_table with af = 1 (integer positions)
# or fastpe_sincos_real (real positions) -- then laid out and rounded (a C cast: round to
# nearest, as NumPy's and numba's are).

from cpython.mem cimport PyMem_RawFree, PyMem_RawMalloc  # a part's scratch, without the GIL

cdef enum:
    _FAMILY_ROWS = 64  # rows per block at most
    _FAMILY_VALUES = 2048  # doubles per block (16 KiB) at most, but for a row of more

# the layout codes: fastpe._plans.layouts.LAYOUT_CODES (the cython backend checks LAYOUT_CODES)
cdef enum:
    _INTERLEAVED = 0
    _HALVES = 1
    _HALVES_COS = 2
    _N_LAYOUTS = 3

#: layout name -> the code sincos_rows and sincos_real_rows take
LAYOUT_CODES = {"interleaved": _INTERLEAVED, "halves": _HALVES, "halves_cos": _HALVES_COS}


cdef void _scatter(const double *table, Py_ssize_t n_rows, Py_ssize_t n_freq, int layout,
                   floating *out, Py_ssize_t d) noexcept nogil:
    """Rows ``0 .. n_rows - 1`` of ``out`` (``d`` values each) from ``table``
    (``n_rows x 2 x n_freq``: cos, then sin) in ``layout`` (interleaved, halves, or halves
    with the cosines first)."""
    cdef Py_ssize_t t, k, j, m
    cdef const double *c
    cdef const double *s
    cdef const double *first
    cdef const double *second
    cdef floating *o
    for t in range(n_rows):
        c = table + 2 * t * n_freq
        s = c + n_freq
        o = out + t * d
        if layout == _INTERLEAVED:
            for k in range(n_freq):
                o[2 * k] = <floating>s[k]
                if 2 * k + 1 < d:
                    o[2 * k + 1] = <floating>c[k]
        else:
            first = s if layout == _HALVES else c
            second = c if layout == _HALVES else s
            for k in range(n_freq):
                o[k] = <floating>first[k]
            m = d - n_freq
            if m > n_freq:
                m = n_freq
            for k in range(m):
                o[n_freq + k] = <floating>second[k]
        for j in range(2 * n_freq, d):
            o[j] = 0


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


ctypedef struct _FamilyCtx:
    const uint32_t *positions  # NULL: the real positions x
    const double *x
    const double *turns
    Py_ssize_t n_freq
    const double *steps
    int layout
    void *out
    int is_double
    Py_ssize_t d
    int failed  # a part could not allocate its scratch (reported as MemoryError)
    int wide


cdef void _family_part(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    """Rows ``[lo, hi)`` a block at a time: the (cos, sin) doubles of the integer positions
    (fastpe_family_table: fastpe_rope_table's values, the anchor carried from block to block)
    or of the real positions (fastpe_sincos_real), then laid out and rounded by
    :func:`_scatter`.  A block is at most ``_FAMILY_VALUES`` doubles, so that it is still in
    the first cache level when it is laid out; each part allocates its own scratch (a block's
    table and an anchor: 20 KiB at 256 frequencies, below the C allocator's mapping
    threshold).  One allocation of every part's 64-row blocks at once (4 MiB at 16 parts of
    512 columns) was mapped and unmapped again on every call, and its page faults cost ten
    times the kernel (2048 x 512 halves, measured)."""
    cdef _FamilyCtx *c = <_FamilyCtx *>ctx
    cdef Py_ssize_t n_freq = c.n_freq
    cdef Py_ssize_t rows = _FAMILY_VALUES // (2 * n_freq)
    if rows > _FAMILY_ROWS:
        rows = _FAMILY_ROWS
    if rows > hi - lo:
        rows = hi - lo
    if rows < 1:
        rows = 1
    cdef double *table = <double *>PyMem_RawMalloc((rows + 1) * 2 * n_freq * sizeof(double))
    if table == NULL:
        c.failed = 1
        return
    cdef double *anchor = table + rows * 2 * n_freq
    cdef int64_t anchor_at = -1
    cdef Py_ssize_t b0 = lo, b1
    if (c.positions != NULL and not c.is_double and c.layout != _INTERLEAVED
            and c.d == 2 * n_freq):
        # float32 halves filling the row: straight from the products, no table to lay out
        fastpe_family_halves32(c.positions + lo, hi - lo, c.turns, n_freq, c.steps,
                               <float *>c.out + lo * c.d, c.d, c.layout == _HALVES_COS, anchor,
                               &anchor_at, c.wide)
        b0 = hi
    while b0 < hi:
        b1 = b0 + rows
        if b1 > hi:
            b1 = hi
        if c.positions != NULL:
            fastpe_family_table(c.positions + b0, b1 - b0, c.turns, n_freq, c.steps, table,
                                anchor, &anchor_at, c.wide)
        else:
            fastpe_sincos_real(c.x + b0, c.turns, n_freq, table, 0, b1 - b0, c.wide)
        if c.is_double:
            _scatter(table, b1 - b0, n_freq, c.layout, <double *>c.out + b0 * c.d, c.d)
        else:
            _scatter(table, b1 - b0, n_freq, c.layout, <float *>c.out + b0 * c.d, c.d)
        b0 = b1
    PyMem_RawFree(table)


cdef int _family_rows(const uint32_t *positions, const double *x, const double *turns,
                      Py_ssize_t n_freq, const double *steps, int layout, floating[:, ::1] out,
                      Py_ssize_t row_begin, Py_ssize_t row_end, bint wide, int parts) except -1:
    _check_parts(parts)
    cdef _FamilyCtx c
    c.positions, c.x, c.turns, c.n_freq, c.steps = positions, x, turns, n_freq, steps
    c.layout, c.out, c.d, c.wide = layout, &out[0, 0], out.shape[1], wide
    c.is_double = floating is double
    c.failed = 0
    with nogil:
        fastpe_pool_run(_family_part, &c, row_begin, row_end, parts, 1, _pool_threads)
    if c.failed:
        raise MemoryError()
    return 0


def sincos_rows(const uint32_t[::1] positions, const double[:, ::1] turns,
                const double[:, :, ::1] steps, int layout, floating[:, ::1] out,
                Py_ssize_t row_begin=0, Py_ssize_t row_end=-1, bint wide=True, int parts=1):
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
                 row_begin, row_end, wide, parts)


def sincos_real_rows(const double[::1] x, const double[:, ::1] turns, int layout,
                     floating[:, ::1] out, Py_ssize_t row_begin=0, Py_ssize_t row_end=-1,
                     bint wide=True, int parts=1):
    """Rows ``[row_begin, row_end)`` of ``out``: the family values at the real positions
    ``x`` (finite, ``|x| < 2**32``) for the frequencies ``turns`` in ``layout``."""
    if row_end < 0:
        row_end = out.shape[0]
    _check_family(x.shape[0], turns, out, layout, row_begin, row_end)
    if row_begin == row_end:
        return
    _family_rows(NULL, &x[0], &turns[0, 0], turns.shape[1], NULL, layout, out, row_begin, row_end,
                 wide, parts)


# ----------------------------------------------------------------------------------- xPos
# csrc/fastpe_xpos.h: a RoPE table's rows scaled by xPos's powers (queries in place, keys into
# a second table), rows cut into blocks on the pool.

cdef extern from "fastpe_xpos.h" nogil:
    const int FASTPE_XPOS_STEP
    void fastpe_xpos_scale(const uint32_t *positions, const double *zeta, Py_ssize_t n_freq,
                           double scale_base, int64_t center, const double *up, const double *down,
                           double *tq, double *tk, double *scratch, Py_ssize_t lo, Py_ssize_t hi)

#: positions per anchor of the xPos powers (fastpe._backends._xpos.STEP)
XPOS_STEP = FASTPE_XPOS_STEP

ctypedef struct _XposCtx:
    const uint32_t *positions
    const double *zeta
    Py_ssize_t n_freq
    double scale_base
    int64_t center
    const double *up
    const double *down
    double *tq
    double *tk
    double *scratch


cdef void _xpos_part(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef _XposCtx *c = <_XposCtx *>ctx
    fastpe_xpos_scale(c.positions, c.zeta, c.n_freq, c.scale_base, c.center, c.up, c.down, c.tq, c.tk,
                      c.scratch + 4 * part * c.n_freq, lo, hi)


def xpos_scale(const uint32_t[::1] positions, const double[::1] zeta, double scale_base, int64_t center,
               const double[:, ::1] up, const double[:, ::1] down, double[:, :, ::1] out_q,
               double[:, :, ::1] out_k, int parts=1):
    """``out_q`` (the RoPE table of ``positions``) times ``zeta ** ((p - center) / scale_base)``
    in place, ``out_k`` the table times ``zeta ** (-(p - center) / scale_base)``, each power
    clamped to ``[2**-600, 2**600]`` (csrc/fastpe_xpos.h): anchored on the step tables ``up``,
    ``down`` (``(n_freq, XPOS_STEP)``), or, when they have no rows, by ``pow`` at every value."""
    cdef Py_ssize_t n = positions.shape[0]
    cdef Py_ssize_t n_freq = zeta.shape[0]
    cdef bint anchored = up.shape[0] != 0
    for name, t in (("out_q", out_q), ("out_k", out_k)):
        if t.shape[0] != n or t.shape[1] != 2 or t.shape[2] != n_freq:
            raise ValueError(f"{name} must have shape ({n}, 2, {n_freq})")
    if anchored and (up.shape[0] != n_freq or down.shape[0] != n_freq or up.shape[1] != FASTPE_XPOS_STEP
                     or down.shape[1] != FASTPE_XPOS_STEP):
        raise ValueError(f"up and down must have shape ({n_freq}, {FASTPE_XPOS_STEP})")
    _check_parts(parts)
    if n == 0 or n_freq == 0:
        return
    cdef _XposCtx c
    c.positions, c.zeta, c.n_freq = &positions[0], &zeta[0], n_freq
    c.scale_base, c.center, c.tq, c.tk = scale_base, center, &out_q[0, 0, 0], &out_k[0, 0, 0]
    c.up = &up[0, 0] if anchored else NULL
    c.down = &down[0, 0] if anchored else NULL
    c.scratch = _scratch(4 * parts * n_freq)
    try:
        with nogil:
            fastpe_pool_run(_xpos_part, &c, 0, n, parts, 1, _pool_threads)
    finally:
        PyMem_Free(c.scratch)


# ----------------------------------------------------------------------- axial RoPE caches
# fastpe_axial.h: each axis's cos/sin blocks copied into every token's rows, on bit patterns
# (uint16/32/64), tokens cut into blocks on the pool

cdef extern from "fastpe_axial.h" nogil:
    void fastpe_axial_gather(const unsigned char *table, Py_ssize_t k, Py_ssize_t item,
                             const int64_t *index, Py_ssize_t n, const int64_t *pieces,
                             Py_ssize_t n_pieces, unsigned char *out_cos, unsigned char *out_sin,
                             Py_ssize_t d, Py_ssize_t lo, Py_ssize_t hi, int wide)
    int fastpe_axial_rows_ok(const int64_t *index, Py_ssize_t count, int64_t rows)

ctypedef fused _bits:
    uint16_t
    uint32_t
    uint64_t


ctypedef struct _AxialCtx:
    const unsigned char *table
    Py_ssize_t k
    Py_ssize_t item
    const int64_t *index
    Py_ssize_t n
    const int64_t *pieces
    Py_ssize_t n_pieces
    unsigned char *out_cos
    unsigned char *out_sin
    Py_ssize_t d
    int wide


cdef void _axial_part(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef _AxialCtx *c = <_AxialCtx *>ctx
    fastpe_axial_gather(c.table, c.k, c.item, c.index, c.n, c.pieces, c.n_pieces, c.out_cos,
                        c.out_sin, c.d, lo, hi, c.wide)


def axial_gather(const _bits[:, :, ::1] table, const int64_t[:, ::1] index,
                 const int64_t[:, ::1] pieces, _bits[:, ::1] out_cos, _bits[:, ::1] out_sin,
                 Py_ssize_t begin=0, Py_ssize_t end=-1, int parts=1, bint wide=True):
    """Tokens ``[begin, end)``: for each piece ``(axis, src, col, width)``, values ``src ..
    src + width - 1`` of the cos (``table[r, 0]``) and sin (``table[r, 1]``) blocks of row
    ``r = index[axis, t]`` copied to columns ``col ..`` of ``out_cos[t]`` and ``out_sin[t]``
    (csrc/fastpe_axial.h; ``wide`` as in :func:`sinusoid_forward`).  Every index and piece is
    checked against the shapes first."""
    cdef Py_ssize_t n = out_cos.shape[0], d = out_cos.shape[1]
    cdef Py_ssize_t rows = table.shape[0], k = table.shape[2], n_axes = index.shape[0]
    cdef Py_ssize_t p, a, bad = -1
    if end < 0:
        end = n
    if out_sin.shape[0] != n or out_sin.shape[1] != d:
        raise ValueError(f"out_sin must have out_cos's shape ({n}, {d})")
    if table.shape[1] != 2 or index.shape[1] != n or pieces.shape[1] != 4:
        raise ValueError(f"table must be (rows, 2, K), index (axes, {n}), pieces (P, 4)")
    for p in range(pieces.shape[0]):
        if not (0 <= pieces[p, 0] < n_axes and 0 <= pieces[p, 1] and 0 <= pieces[p, 3]
                and pieces[p, 1] + pieces[p, 3] <= k and 0 <= pieces[p, 2]
                and pieces[p, 2] + pieces[p, 3] <= d):
            raise ValueError(f"piece {p} {tuple(pieces[p])} is outside the table or the rows")
    _check_rows(n, begin, end)
    _check_parts(parts)
    if begin == end or pieces.shape[0] == 0:
        return
    with nogil:
        for a in range(n_axes):
            if bad < 0 and not fastpe_axial_rows_ok(&index[a, begin], end - begin, rows):
                bad = a
    if bad >= 0:
        raise ValueError(f"index[{bad}] holds a row outside the table's {rows}")
    cdef _AxialCtx c
    c.table, c.k, c.item = <const unsigned char *>&table[0, 0, 0], k, sizeof(_bits)
    c.index, c.n, c.pieces, c.n_pieces = &index[0, 0], n, &pieces[0, 0], pieces.shape[0]
    c.out_cos, c.out_sin, c.d = <unsigned char *>&out_cos[0, 0], <unsigned char *>&out_sin[0, 0], d
    c.wide = wide
    with nogil:
        fastpe_pool_run(_axial_part, &c, begin, end, parts, 1, _pool_threads)


# ------------------------------------------------------------------------ signed positions
# int64 positions with |p| < 2**32 (csrc/fastpe_signed.h): a negative position's row is its
# magnitude's with the sines negated, bit for bit (sine odd, cosine even, rounding symmetric).

cdef extern from "fastpe_signed.h" nogil:
    void fastpe_sinusoid_signed(const int64_t *positions, const double *turns,
                                Py_ssize_t n_freq, const double *steps, float *out,
                                Py_ssize_t d_model, Py_ssize_t row_begin, Py_ssize_t row_end,
                                double *scratch, int wide)
    void fastpe_signed_family_block(const int64_t *positions, Py_ssize_t n, const double *turns,
                                    Py_ssize_t n_freq, const double *steps, double *table,
                                    double *anchor, uint32_t *mag, int wide)

cdef int64_t _SIGNED_LIMIT = (<int64_t>1) << 32


cdef int _check_signed(const int64_t[::1] positions) except -1:
    cdef Py_ssize_t t
    cdef int bad = 0
    with nogil:
        for t in range(positions.shape[0]):
            if positions[t] <= -_SIGNED_LIMIT or positions[t] >= _SIGNED_LIMIT:
                bad = 1
    if bad:
        raise ValueError("positions must be in (-2**32, 2**32)")
    return 0


ctypedef struct _SignedCtx:
    const int64_t *positions
    const double *turns
    Py_ssize_t n_freq
    const double *steps
    float *out
    Py_ssize_t d_model
    double *scratch
    int wide


cdef void _signed_part(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef _SignedCtx *c = <_SignedCtx *>ctx
    fastpe_sinusoid_signed(c.positions, c.turns, c.n_freq, c.steps, c.out, c.d_model, lo, hi,
                           c.scratch + 2 * part * c.n_freq, c.wide)


def sinusoid_signed(const int64_t[::1] positions, const double[:, ::1] turns,
                    const double[:, :, ::1] steps, float[:, ::1] out,
                    Py_ssize_t row_begin=0, Py_ssize_t row_end=-1, bint wide=True, int parts=1):
    """As :func:`sinusoid_forward` for ``int64`` positions in ``(-2**32, 2**32)``."""
    if row_end < 0:
        row_end = out.shape[0]
    if positions.shape[0] != out.shape[0]:
        raise ValueError(f"{positions.shape[0]} positions for {out.shape[0]} output rows")
    _check(turns, steps, out, row_begin, row_end)
    _check_signed(positions)
    if row_begin == row_end:
        return
    cdef _SignedCtx c
    c.positions = &positions[0]
    c.turns = &turns[0, 0]
    c.n_freq = turns.shape[1]
    c.steps = &steps[0, 0, 0]
    c.out = &out[0, 0]
    c.d_model = out.shape[1]
    c.wide = wide
    _check_parts(parts)
    c.scratch = _scratch(2 * parts * c.n_freq)
    try:
        with nogil:
            fastpe_pool_run(_signed_part, &c, row_begin, row_end, parts, _ALIGN, _pool_threads)
    finally:
        PyMem_Free(c.scratch)


from cpython.mem cimport PyMem_RawFree, PyMem_RawMalloc

ctypedef struct _SignedFamilyCtx:
    const int64_t *positions
    const double *turns
    Py_ssize_t n_freq
    const double *steps
    int layout
    void *out
    int is_double
    Py_ssize_t d
    int failed  # a part could not allocate its scratch (reported as MemoryError)
    int wide


cdef void _signed_family_part(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    """As the unsigned family part: a block's doubles (sines of negative positions negated in
    the block's table), laid out and rounded by :func:`_scatter`.  Each part allocates its own
    scratch (a block's table, an anchor, the magnitudes): one allocation of every part's at
    once is megabytes that the C allocator maps afresh and unmaps on every call, and those
    page faults cost ten times the kernel (2048 x 512 halves at 16 parts, measured)."""
    cdef _SignedFamilyCtx *c = <_SignedFamilyCtx *>ctx
    cdef Py_ssize_t n_freq = c.n_freq
    cdef char *buf = <char *>PyMem_RawMalloc((_FAMILY_ROWS + 1) * 2 * n_freq * sizeof(double)
                                             + _FAMILY_ROWS * sizeof(uint32_t))
    if buf == NULL:
        c.failed = 1
        return
    cdef double *table = <double *>buf
    cdef double *anchor = table + _FAMILY_ROWS * 2 * n_freq
    cdef uint32_t *mag = <uint32_t *>(anchor + 2 * n_freq)
    cdef Py_ssize_t b0 = lo, b1
    while b0 < hi:
        b1 = b0 + _FAMILY_ROWS
        if b1 > hi:
            b1 = hi
        fastpe_signed_family_block(c.positions + b0, b1 - b0, c.turns, n_freq, c.steps, table,
                                   anchor, mag, c.wide)
        if c.is_double:
            _scatter(table, b1 - b0, n_freq, c.layout, <double *>c.out + b0 * c.d, c.d)
        else:
            _scatter(table, b1 - b0, n_freq, c.layout, <float *>c.out + b0 * c.d, c.d)
        b0 = b1
    PyMem_RawFree(buf)


def sincos_rows_signed(const int64_t[::1] positions, const double[:, ::1] turns,
                       const double[:, :, ::1] steps, int layout, floating[:, ::1] out,
                       Py_ssize_t row_begin=0, Py_ssize_t row_end=-1, bint wide=True, int parts=1):
    """As :func:`sincos_rows` for ``int64`` positions in ``(-2**32, 2**32)``."""
    if row_end < 0:
        row_end = out.shape[0]
    _check_rope_plan(turns, steps)
    _check_family(positions.shape[0], turns, out, layout, row_begin, row_end)
    _check_signed(positions)
    if row_begin == row_end:
        return
    _check_parts(parts)
    cdef _SignedFamilyCtx c
    c.positions, c.turns, c.n_freq, c.steps = &positions[0], &turns[0, 0], turns.shape[1], &steps[0, 0, 0]
    c.layout, c.out, c.d, c.wide = layout, &out[0, 0], out.shape[1], wide
    c.is_double = floating is double
    c.failed = 0
    with nogil:
        fastpe_pool_run(_signed_family_part, &c, row_begin, row_end, parts, 1, _pool_threads)
    if c.failed:
        raise MemoryError()


# ------------------------------------------------------------------------------ fastpe.time
# csrc/fastpe_time.h: Prophet's Fourier features (exact residues) and time encodings (split
# words) of int64 ticks, rows cut into blocks on the pool (fastpe/time/_plan.py)

cdef extern from "fastpe_time.h" nogil:
    void fastpe_fourier_exact_f32(const int64_t *ticks, int64_t d, const int64_t *table, double dh,
                                  double dl, Py_ssize_t order, float *out, Py_ssize_t lo, Py_ssize_t hi, int wide)
    void fastpe_fourier_exact_f64(const int64_t *ticks, int64_t d, const int64_t *table, double dh,
                                  double dl, Py_ssize_t order, double *out, Py_ssize_t lo, Py_ssize_t hi, int wide)
    void fastpe_time_words_f32(const int64_t *ticks, const double *words, Py_ssize_t n_freq,
                               int cos_only, float *out, Py_ssize_t lo, Py_ssize_t hi, int wide)
    void fastpe_time_words_f64(const int64_t *ticks, const double *words, Py_ssize_t n_freq,
                               int cos_only, double *out, Py_ssize_t lo, Py_ssize_t hi, int wide)

ctypedef struct _TimeCtx:
    const int64_t *ticks
    int64_t d
    const int64_t *table
    double dh
    double dl
    const double *words
    Py_ssize_t n_freq
    int cos_only
    void *out
    int is_double
    int wide


cdef void _fourier_exact_part(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef _TimeCtx *c = <_TimeCtx *>ctx
    if c.is_double:
        fastpe_fourier_exact_f64(c.ticks, c.d, c.table, c.dh, c.dl, c.n_freq, <double *>c.out, lo, hi, c.wide)
    else:
        fastpe_fourier_exact_f32(c.ticks, c.d, c.table, c.dh, c.dl, c.n_freq, <float *>c.out, lo, hi, c.wide)


cdef void _time_words_part(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef _TimeCtx *c = <_TimeCtx *>ctx
    if c.is_double:
        fastpe_time_words_f64(c.ticks, c.words, c.n_freq, c.cos_only, <double *>c.out, lo, hi, c.wide)
    else:
        fastpe_time_words_f32(c.ticks, c.words, c.n_freq, c.cos_only, <float *>c.out, lo, hi, c.wide)


def fourier_exact(const int64_t[::1] ticks, int64_t d, const int64_t[:, ::1] table, double dh, double dl,
                  floating[:, ::1] out, bint wide=True, int parts=1):
    """``out`` (``(n, 2 * order)``): the sine and cosine of ``2 pi m_k / d``, ``m_k = k t N mod d``,
    from the residue ``table`` (``(16, 16)``, ``table[j, g] = g 16**j N mod d``, ``1 <= d < 2**62``)."""
    cdef Py_ssize_t n = ticks.shape[0]
    if d < 1 or d >= (<int64_t>1) << 62:
        raise ValueError("d must be in [1, 2**62)")
    if table.shape[0] != 16 or table.shape[1] != 16:
        raise ValueError("table must have shape (16, 16)")
    if out.shape[0] != n or out.shape[1] % 2:
        raise ValueError(f"out must have {n} rows of an even number of columns")
    _check_parts(parts)
    if n == 0 or out.shape[1] == 0:
        return
    cdef _TimeCtx c
    c.ticks, c.d, c.table, c.dh, c.dl = &ticks[0], d, &table[0, 0], dh, dl
    c.n_freq, c.out, c.is_double, c.wide = out.shape[1] // 2, &out[0, 0], floating is double, wide
    with nogil:
        fastpe_pool_run(_fourier_exact_part, &c, 0, n, parts, 1, _pool_threads)


def time_words(const int64_t[::1] ticks, const double[:, ::1] words, bint cos_only, floating[:, ::1] out,
               bint wide=True, int parts=1):
    """``out``: the cosines (``(n, n_freq)``, ``cos_only``) or sine, cosine pairs
    (``(n, 2 n_freq)``) of ``2 pi frac(t v_j)`` from the split ``words`` (``(8, n_freq)``)."""
    cdef Py_ssize_t n = ticks.shape[0]
    cdef Py_ssize_t n_freq = words.shape[1]
    if words.shape[0] != 8:
        raise ValueError("words must have shape (8, n_freq)")
    if out.shape[0] != n or out.shape[1] != (n_freq if cos_only else 2 * n_freq):
        raise ValueError(f"out must have shape ({n}, {n_freq if cos_only else 2 * n_freq})")
    _check_parts(parts)
    if n == 0 or n_freq == 0:
        return
    cdef _TimeCtx c
    c.ticks, c.words, c.n_freq, c.cos_only = &ticks[0], &words[0, 0], n_freq, cos_only
    c.out, c.is_double, c.wide = &out[0, 0], floating is double, wide
    with nogil:
        fastpe_pool_run(_time_words_part, &c, 0, n, parts, 1, _pool_threads)


# --------------------------------------------------------------------------------- Sandwich
# csrc/fastpe_sandwich.h: one exact sum of squared sines per distance, then each output row a
# slice of its head's mirrored line (fastpe/_backends/_sandwich.py), both cut into blocks.

cdef extern from "fastpe_sandwich.h" nogil:
    void fastpe_sandwich_line(const double *turns, Py_ssize_t n_freq, double *dsum, Py_ssize_t lo,
                              Py_ssize_t hi, int wide)
    void fastpe_sandwich_fill(const unsigned char *mirror, Py_ssize_t mirror_len, Py_ssize_t first,
                              int causal, unsigned char *out, Py_ssize_t q_len, Py_ssize_t k_len,
                              Py_ssize_t elsize, Py_ssize_t lo, Py_ssize_t hi)

ctypedef struct _SandwichCtx:
    const double *turns
    Py_ssize_t n_freq
    double *dsum
    const unsigned char *mirror
    Py_ssize_t mirror_len, first, q_len, k_len, elsize
    int causal
    unsigned char *out
    int wide


cdef void _sandwich_line_part(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef _SandwichCtx *c = <_SandwichCtx *>ctx
    fastpe_sandwich_line(c.turns, c.n_freq, c.dsum, lo, hi, c.wide)


cdef void _sandwich_fill_part(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef _SandwichCtx *c = <_SandwichCtx *>ctx
    fastpe_sandwich_fill(c.mirror, c.mirror_len, c.first, c.causal, c.out, c.q_len, c.k_len,
                         c.elsize, lo, hi)


def sandwich_line(const double[:, ::1] turns, double[::1] dsum, bint wide=True, int parts=1):
    """``dsum[d]``, ``d < len(dsum) <= 2**32``: the sum of squared sines of ``d`` times the
    half-angle frequencies ``turns`` ``(4, n_freq)``; ``wide`` as in :func:`sinusoid_forward`."""
    if turns.shape[0] != 4 or turns.shape[1] < 1:
        raise ValueError("turns must have shape (4, n_freq), n_freq >= 1")
    if dsum.shape[0] > (<Py_ssize_t>1 << 32):
        raise ValueError("distances must be below 2**32")
    if dsum.shape[0] == 0:
        return
    _check_parts(parts)
    cdef _SandwichCtx c
    c.turns, c.n_freq, c.dsum, c.wide = &turns[0, 0], turns.shape[1], &dsum[0], wide
    with nogil:
        fastpe_pool_run(_sandwich_line_part, &c, 0, dsum.shape[0], parts, 1, _pool_threads)


def sandwich_fill(mirror, Py_ssize_t first, bint causal, out, int parts=1):
    """Rows of ``out`` (``(n_heads, q_len, k_len)`` unsigned bits) from ``mirror``
    (``(n_heads, 2L - 1)``, the same item size): row ``(h, i)`` is ``mirror[h, first - i :
    first - i + k_len]``, zeros at ``j > i`` when ``causal``."""
    cdef const unsigned char[:, ::1] m = mirror.view("u1")
    cdef unsigned char[:, :, ::1] o = out.view("u1")
    cdef Py_ssize_t elsize = out.dtype.itemsize
    cdef Py_ssize_t n_heads = out.shape[0], q_len = out.shape[1], k_len = out.shape[2]
    if mirror.dtype.itemsize != elsize or mirror.shape[0] != n_heads:
        raise ValueError("mirror must have the output's item size and one line per head")
    if n_heads * q_len * k_len == 0:
        return
    if first - (q_len - 1) < 0 or first + k_len > mirror.shape[1]:
        raise ValueError("rows reach outside the mirrored line")
    _check_parts(parts)
    cdef _SandwichCtx c
    c.mirror, c.mirror_len, c.first, c.causal = &m[0, 0], mirror.shape[1], first, causal
    c.out, c.q_len, c.k_len, c.elsize = &o[0, 0, 0], q_len, k_len, elsize
    with nogil:
        fastpe_pool_run(_sandwich_fill_part, &c, 0, n_heads * q_len, parts, 1, _pool_threads)
