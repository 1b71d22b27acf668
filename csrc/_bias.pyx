# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: cdivision=True, embedsignature=True
"""Compiled attention-bias kernels of the ``cython`` backend (ALiBi, T5 buckets), built from
``csrc/fastpe_bias.h`` (see fastpe._backends.cython._bias), and its M-RoPE position kernels,
from ``csrc/fastpe_mrope.h``.

The functions take arrays the caller has already validated.  They check only what memory
safety needs (shapes, ranges), then release the GIL for the loop; ``parts > 1`` cuts the range into that many blocks run
on the calling thread and the worker pool of ``fastpe._backends.cython._ext`` (see
:func:`set_pool`).
"""

from cpython.pycapsule cimport PyCapsule_GetPointer
from libc.stdint cimport int32_t, int64_t, uint16_t

ctypedef void (*task_fn)(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil
ctypedef int (*pool_run_fn)(task_fn fn, void *ctx, Py_ssize_t lo, Py_ssize_t hi, int parts,
                            Py_ssize_t align) noexcept nogil

#: the pool of fastpe._backends.cython._ext (set_pool); until set, every part runs here
cdef pool_run_fn _pool_run = NULL


def set_pool(capsule):
    """Run the ``parts`` of the calls below on the pool whose capsule ``_ext.pool_capsule()``
    gives."""
    global _pool_run
    _pool_run = <pool_run_fn>PyCapsule_GetPointer(capsule, b"fastpe.pool_run")


cdef int _run(task_fn fn, void *ctx, Py_ssize_t lo, Py_ssize_t hi, int parts) except -1:
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    with nogil:
        if _pool_run != NULL and parts > 1:
            _pool_run(fn, ctx, lo, hi, parts, 1)
        else:
            fn(ctx, 0, lo, hi)
    return 0


ctypedef struct _Ctx:
    int kind
    const void *src
    void *out
    const double *words
    Py_ssize_t n_heads, length, q_len, k_len, n_thresholds
    int64_t first, n
    int form, flag
    uint16_t neg_inf
    const int64_t *thresholds

cdef enum:
    _LINE_F32
    _LINE_F64
    _FILL_F32
    _FILL_F64
    _FILL_U16
    _BUCKET_I32
    _BUCKET_I64
    _T5LINE_I32
    _T5LINE_I64
    _T5FILL_I32
    _T5FILL_I64


cdef void _part(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef _Ctx *c = <_Ctx *>ctx
    if c.kind == _LINE_F32:
        fastpe_alibi_line_f32(c.words, c.n_heads, c.first, <float *>c.out, c.length, lo, hi)
    elif c.kind == _LINE_F64:
        fastpe_alibi_line_f64(c.words, c.n_heads, c.first, <double *>c.out, c.length, lo, hi)
    elif c.kind == _FILL_F32:
        fastpe_alibi_fill_f32(<const float *>c.src, c.form, <float *>c.out, c.q_len, c.k_len, lo, hi)
    elif c.kind == _FILL_F64:
        fastpe_alibi_fill_f64(<const double *>c.src, c.form, <double *>c.out, c.q_len, c.k_len, lo, hi)
    elif c.kind == _FILL_U16:
        fastpe_alibi_fill_u16(<const uint16_t *>c.src, c.form, c.neg_inf, <uint16_t *>c.out, c.q_len,
                              c.k_len, lo, hi)
    elif c.kind == _BUCKET_I32:
        fastpe_t5_bucket_i32(<const int64_t *>c.src, c.flag, c.n, c.thresholds, c.n_thresholds,
                             <int32_t *>c.out, lo, hi)
    elif c.kind == _BUCKET_I64:
        fastpe_t5_bucket_i64(<const int64_t *>c.src, c.flag, c.n, c.thresholds, c.n_thresholds,
                             <int64_t *>c.out, lo, hi)
    elif c.kind == _T5LINE_I32:
        fastpe_t5_line_i32(c.first, c.flag, c.n, c.thresholds, c.n_thresholds, <int32_t *>c.out, lo, hi)
    elif c.kind == _T5LINE_I64:
        fastpe_t5_line_i64(c.first, c.flag, c.n, c.thresholds, c.n_thresholds, <int64_t *>c.out, lo, hi)
    elif c.kind == _T5FILL_I32:
        fastpe_t5_fill_i32(<const int32_t *>c.src, <int32_t *>c.out, c.q_len, c.k_len, lo, hi)
    elif c.kind == _T5FILL_I64:
        fastpe_t5_fill_i64(<const int64_t *>c.src, <int64_t *>c.out, c.q_len, c.k_len, lo, hi)

cdef extern from "fastpe_bias.h" nogil:
    enum:
        FASTPE_SYMMETRIC
        FASTPE_CAUSAL
        FASTPE_BLOOM
        FASTPE_MPT
        FASTPE_N_FORMS
    void fastpe_alibi_line_f32(const double *words, Py_ssize_t n_heads, int64_t first,
                               float *line, Py_ssize_t length, Py_ssize_t n_begin,
                               Py_ssize_t n_end)
    void fastpe_alibi_line_f64(const double *words, Py_ssize_t n_heads, int64_t first,
                               double *line, Py_ssize_t length, Py_ssize_t n_begin,
                               Py_ssize_t n_end)
    void fastpe_alibi_fill_f32(const float *line, int form, float *out, Py_ssize_t q_len,
                               Py_ssize_t k_len, Py_ssize_t row_begin, Py_ssize_t row_end)
    void fastpe_alibi_fill_f64(const double *line, int form, double *out, Py_ssize_t q_len,
                               Py_ssize_t k_len, Py_ssize_t row_begin, Py_ssize_t row_end)
    void fastpe_alibi_fill_u16(const uint16_t *line, int form, uint16_t neg_inf, uint16_t *out,
                               Py_ssize_t q_len, Py_ssize_t k_len, Py_ssize_t row_begin,
                               Py_ssize_t row_end)
    void fastpe_t5_bucket_i32(const int64_t *rel, int bidirectional, int64_t n,
                              const int64_t *thresholds, Py_ssize_t n_thresholds, int32_t *out,
                              Py_ssize_t begin, Py_ssize_t end)
    void fastpe_t5_bucket_i64(const int64_t *rel, int bidirectional, int64_t n,
                              const int64_t *thresholds, Py_ssize_t n_thresholds, int64_t *out,
                              Py_ssize_t begin, Py_ssize_t end)
    void fastpe_t5_line_i32(int64_t first, int bidirectional, int64_t n,
                            const int64_t *thresholds, Py_ssize_t n_thresholds, int32_t *line,
                            Py_ssize_t begin, Py_ssize_t end)
    void fastpe_t5_line_i64(int64_t first, int bidirectional, int64_t n,
                            const int64_t *thresholds, Py_ssize_t n_thresholds, int64_t *line,
                            Py_ssize_t begin, Py_ssize_t end)
    void fastpe_t5_fill_i32(const int32_t *line, int32_t *out, Py_ssize_t q_len, Py_ssize_t k_len,
                            Py_ssize_t row_begin, Py_ssize_t row_end)
    void fastpe_t5_fill_i64(const int64_t *line, int64_t *out, Py_ssize_t q_len, Py_ssize_t k_len,
                            Py_ssize_t row_begin, Py_ssize_t row_end)

ctypedef fused real_t:
    float
    double

ctypedef fused bucket_t:
    int32_t
    int64_t

#: distances must stay below this: the split words' products are exact only there
cdef Py_ssize_t DISTANCE_LIMIT = (<Py_ssize_t>1) << 32

#: form name -> the code the fill kernels take (fastpe._plans.alibi.FORM_CODES, checked)
FORM_CODES = {"symmetric": FASTPE_SYMMETRIC, "causal": FASTPE_CAUSAL, "bloom": FASTPE_BLOOM,
              "mpt": FASTPE_MPT}


cdef int _check_range(Py_ssize_t size, Py_ssize_t begin, Py_ssize_t end, str what) except -1:
    if not 0 <= begin <= end <= size:
        raise ValueError(f"{what} [{begin}, {end}) out of range for {size}")
    return 0


def alibi_line(const double[:, ::1] words, real_t[:, ::1] line, Py_ssize_t n_begin=0,
               Py_ssize_t n_end=-1, int64_t first=0, int parts=1):
    """``line[h, n]`` = head ``h``'s slope times ``first + n``, rounded to the line's dtype,
    for ``n`` in ``[n_begin, n_end)`` (all by default); ``words`` is the ``(4, n_heads)`` plan
    of ``fastpe.alibi._slope_words``.  Distances ``first + n`` must stay in ``[0, 2**32)``."""
    if n_end < 0:
        n_end = line.shape[1]
    if words.shape[0] != 4 or words.shape[1] != line.shape[0]:
        raise ValueError(f"words has shape ({words.shape[0]}, {words.shape[1]}), expected (4, {line.shape[0]})")
    if first < 0 or first > DISTANCE_LIMIT or line.shape[1] > DISTANCE_LIMIT - first:
        raise ValueError("distances must stay in [0, 2**32)")
    _check_range(line.shape[1], n_begin, n_end, "distances")
    if n_begin == n_end or line.shape[0] == 0:
        return
    cdef _Ctx c
    c.kind = _LINE_F32 if real_t is float else _LINE_F64
    c.words, c.n_heads, c.first, c.out, c.length = &words[0, 0], line.shape[0], first, &line[0, 0], line.shape[1]
    _run(_part, &c, n_begin, n_end, parts)


cdef Py_ssize_t _fill_end(Py_ssize_t line_heads, Py_ssize_t line_len, int form, Py_ssize_t n_heads,
                          Py_ssize_t q_len, Py_ssize_t k_len, Py_ssize_t row_begin,
                          Py_ssize_t row_end) except -2:
    """The checks of both fills, and the end of their rows (``row_end``; all rows if it is
    negative), or -1 when there is nothing to write."""
    if row_end < 0:
        row_end = n_heads * q_len
    if line_heads != n_heads or line_len != k_len:
        raise ValueError(f"line has shape ({line_heads}, {line_len}), expected ({n_heads}, {k_len})")
    if not 0 <= form < FASTPE_N_FORMS:
        raise ValueError(f"form code {form} is not one of {sorted(FORM_CODES.values())}")
    if (form == FASTPE_SYMMETRIC or form == FASTPE_CAUSAL) and k_len < q_len:
        raise ValueError("k_len must be >= q_len for the symmetric and causal forms")
    _check_range(n_heads * q_len, row_begin, row_end, "rows")
    return row_end if row_begin != row_end and k_len != 0 else -1


def alibi_fill(const real_t[:, ::1] line, int form, real_t[:, :, ::1] out, Py_ssize_t row_begin=0,
               Py_ssize_t row_end=-1, int parts=1):
    """Rows ``[row_begin, row_end)`` of ``out`` (``(n_heads, q_len, k_len)``, rows counted over
    heads and queries) from the lines of :func:`alibi_line`; ``form`` a code of
    :data:`FORM_CODES`."""
    cdef Py_ssize_t q_len = out.shape[1], k_len = out.shape[2]
    row_end = _fill_end(line.shape[0], line.shape[1], form, out.shape[0], q_len, k_len, row_begin, row_end)
    if row_end < 0:
        return
    cdef _Ctx c
    c.kind = _FILL_F32 if real_t is float else _FILL_F64
    c.src, c.form, c.out, c.q_len, c.k_len = &line[0, 0], form, &out[0, 0, 0], q_len, k_len
    _run(_part, &c, row_begin, row_end, parts)


def alibi_fill16(const uint16_t[:, ::1] line, int form, uint16_t neg_inf, uint16_t[:, :, ::1] out,
                 Py_ssize_t row_begin=0, Py_ssize_t row_end=-1, int parts=1):
    """:func:`alibi_fill` on the bit patterns of a 16-bit format: ``line`` the narrowed lines
    (uint16), ``neg_inf`` the format's ``-inf``; negation flips the sign bit except at
    distance zero."""
    cdef Py_ssize_t q_len = out.shape[1], k_len = out.shape[2]
    row_end = _fill_end(line.shape[0], line.shape[1], form, out.shape[0], q_len, k_len, row_begin, row_end)
    if row_end < 0:
        return
    cdef _Ctx c
    c.kind = _FILL_U16
    c.src, c.form, c.neg_inf, c.out, c.q_len, c.k_len = &line[0, 0], form, neg_inf, &out[0, 0, 0], q_len, k_len
    _run(_part, &c, row_begin, row_end, parts)


cdef int _check_plan(const int64_t[::1] thresholds, int64_t n) except -1:
    if n < 2 or thresholds.shape[0] != n - n // 2 - 1:
        raise ValueError(f"{thresholds.shape[0]} thresholds for {n} buckets per direction")
    return 0


def t5_bucket(const int64_t[::1] rel, bint bidirectional, int64_t n, const int64_t[::1] thresholds,
              bucket_t[::1] out, Py_ssize_t begin=0, Py_ssize_t end=-1, int parts=1):
    """``out[k]`` = the bucket of ``rel[k]`` for ``k`` in ``[begin, end)``: ``n`` buckets per
    direction, ``thresholds`` the plan of ``fastpe.relative._plan``.  No ``rel`` may be
    ``-2**63``."""
    if end < 0:
        end = out.shape[0]
    if rel.shape[0] != out.shape[0]:
        raise ValueError(f"{rel.shape[0]} relative positions for {out.shape[0]} outputs")
    _check_plan(thresholds, n)
    _check_range(out.shape[0], begin, end, "items")
    if begin == end:
        return
    cdef const int64_t *thr = &thresholds[0] if thresholds.shape[0] else NULL
    cdef _Ctx c
    c.kind = _BUCKET_I32 if bucket_t is int32_t else _BUCKET_I64
    c.src, c.flag, c.n, c.thresholds, c.n_thresholds, c.out = &rel[0], bidirectional, n, thr, thresholds.shape[0], &out[0]
    _run(_part, &c, begin, end, parts)


def t5_line(int64_t first, bint bidirectional, int64_t n, const int64_t[::1] thresholds,
            bucket_t[::1] line, Py_ssize_t begin=0, Py_ssize_t end=-1, int parts=1):
    """``line[k]`` = the bucket of relative position ``first + k``, ``k`` in ``[begin, end)``;
    ``first + k`` must stay within ``(-2**63, 2**63)``."""
    if end < 0:
        end = line.shape[0]
    _check_plan(thresholds, n)
    _check_range(line.shape[0], begin, end, "items")
    if begin == end:
        return
    if first < -(1 << 62) - (1 << 40) or first > (1 << 62) or line.shape[0] > (1 << 40):
        raise ValueError("relative positions out of range")
    cdef const int64_t *thr = &thresholds[0] if thresholds.shape[0] else NULL
    cdef _Ctx c
    c.kind = _T5LINE_I32 if bucket_t is int32_t else _T5LINE_I64
    c.first, c.flag, c.n, c.thresholds, c.n_thresholds, c.out = first, bidirectional, n, thr, thresholds.shape[0], &line[0]
    _run(_part, &c, begin, end, parts)


def t5_fill(const bucket_t[::1] line, bucket_t[:, ::1] out, Py_ssize_t row_begin=0, Py_ssize_t row_end=-1,
            int parts=1):
    """Rows ``[row_begin, row_end)`` of ``out`` (``(q_len, k_len)``):
    ``out[i, j] = line[j - i + q_len - 1]``."""
    cdef Py_ssize_t q_len = out.shape[0], k_len = out.shape[1]
    if row_end < 0:
        row_end = q_len
    if line.shape[0] != q_len + k_len - 1:
        raise ValueError(f"line has {line.shape[0]} entries, expected q_len + k_len - 1 = {q_len + k_len - 1}")
    _check_range(q_len, row_begin, row_end, "rows")
    if row_begin == row_end or k_len == 0:
        return
    cdef _Ctx c
    c.kind = _T5FILL_I32 if bucket_t is int32_t else _T5FILL_I64
    c.src, c.out, c.q_len, c.k_len = &line[0], &out[0, 0], q_len, k_len
    _run(_part, &c, row_begin, row_end, parts)


# ------------------------------------------------------------------------ M-RoPE positions
# csrc/fastpe_mrope.h: the plan in one call on the calling thread, the fill over ranges of
# segments on the pool

cdef extern from "fastpe_mrope.h" nogil:
    enum:
        FASTPE_MROPE_TOO_MANY_IMAGE_RUNS
        FASTPE_MROPE_TOO_MANY_VIDEO_RUNS
        FASTPE_MROPE_IMAGE_RUN_LENGTH
        FASTPE_MROPE_VIDEO_RUN_LENGTH
        FASTPE_MROPE_TOO_FEW_IMAGE_RUNS
        FASTPE_MROPE_TOO_FEW_VIDEO_RUNS
        FASTPE_MROPE_POSITION_OVERFLOW
        FASTPE_MROPE_FIELDS
    int64_t FASTPE_MROPE_LIMIT
    void fastpe_mrope_plan(const int64_t *ids, const int64_t *columns, int64_t n_columns,
                           const int64_t *n_rows, int64_t batch, int64_t image, int64_t video,
                           const int64_t *images, int64_t n_images, const int64_t *videos,
                           int64_t n_videos, int64_t merge, const int64_t *video_times,
                           int64_t *segments, int64_t *temporal, int64_t *deltas, int64_t *info)
    void fastpe_mrope_fill(const int64_t *segments, int64_t n_seg, int64_t t_begin, int64_t t_end,
                           const int64_t *temporal, const int64_t *columns, int64_t n_columns,
                           int64_t *out, int64_t n_out)
    int fastpe_mrope_plan_columns_ok(const int64_t *columns, const int64_t *n_rows, int64_t batch,
                                     int64_t n_ids)
    int fastpe_mrope_fill_columns_ok(const int64_t *segments, int64_t s_begin, int64_t s_end,
                                     const int64_t *columns, int64_t n_out)

#: the plan's ``info[1]`` codes by name (fastpe._plans.mrope, checked), and its position limit
MROPE_CODES = {
    "TOO_MANY_IMAGE_RUNS": FASTPE_MROPE_TOO_MANY_IMAGE_RUNS,
    "TOO_MANY_VIDEO_RUNS": FASTPE_MROPE_TOO_MANY_VIDEO_RUNS,
    "IMAGE_RUN_LENGTH": FASTPE_MROPE_IMAGE_RUN_LENGTH,
    "VIDEO_RUN_LENGTH": FASTPE_MROPE_VIDEO_RUN_LENGTH,
    "TOO_FEW_IMAGE_RUNS": FASTPE_MROPE_TOO_FEW_IMAGE_RUNS,
    "TOO_FEW_VIDEO_RUNS": FASTPE_MROPE_TOO_FEW_VIDEO_RUNS,
    "POSITION_OVERFLOW": FASTPE_MROPE_POSITION_OVERFLOW,
}
MROPE_POSITION_LIMIT = FASTPE_MROPE_LIMIT
MROPE_FIELDS = FASTPE_MROPE_FIELDS

#: grid sizes the plan reads (the public API's bound): t * h * w stays far inside int64
cdef int64_t _GRID_LIMIT = (<int64_t>1) << 20


cdef inline const int64_t *_ptr(const int64_t[::1] a) noexcept:
    return &a[0] if a.shape[0] else NULL


cdef int64_t _frames(const int64_t[:, ::1] grids, str name) except -1:
    """The frames of ``grids`` (``(n, 3)``, every size in ``[1, 2**20]``)."""
    if grids.shape[0] and grids.shape[1] != 3:
        raise ValueError(f"{name} must have shape (n, 3), got (n, {grids.shape[1]})")
    cdef int64_t total = 0
    cdef Py_ssize_t i, j
    for i in range(grids.shape[0]):
        for j in range(3):
            if not 1 <= grids[i, j] <= _GRID_LIMIT:
                raise ValueError(f"{name}: grid {i} has a size outside [1, 2**20]")
        total += grids[i, 0]
    return total


def mrope_plan(const int64_t[::1] ids, const int64_t[::1] columns, const int64_t[::1] n_rows,
               int64_t image_token_id, int64_t video_token_id, const int64_t[:, ::1] images,
               const int64_t[:, ::1] videos, int64_t merge, const int64_t[::1] video_times,
               int64_t[:, ::1] segments, int64_t[::1] temporal, int64_t[::1] deltas, int64_t[::1] info):
    """The M-RoPE plan (``fastpe._backends._mrope_python.mrope_plan`` for every argument): the
    runs of the attended tokens cut, laid out into ``segments`` and ``temporal``, the rows'
    ``deltas``, and ``info`` (segments, error code, grid index, row).  ``columns`` empty
    means every token is attended; else its values are columns of ``ids``."""
    cdef Py_ssize_t batch = n_rows.shape[0], b
    cdef int64_t n_tokens = columns.shape[0] if columns.shape[0] else ids.shape[0], total = 0
    if info.shape[0] < 4 or deltas.shape[0] != batch:
        raise ValueError(f"info must hold 4 values and deltas one per row ({batch}), got {info.shape[0]}, {deltas.shape[0]}")
    if merge < 1:
        raise ValueError(f"merge must be >= 1, got {merge}")
    for b in range(batch):
        if n_rows[b] < 1 or n_rows[b] > n_tokens - total:
            raise ValueError(f"n_rows: row {b} needs 1 to {n_tokens - total} attended tokens, got {n_rows[b]}")
        total += n_rows[b]
    cdef int64_t image_frames = _frames(images, "images"), video_frames = _frames(videos, "videos")
    if temporal.shape[0] < image_frames + video_frames or video_times.shape[0] < video_frames:
        raise ValueError(f"temporal and video_times must hold the grids' {image_frames + video_frames} and "
                         f"{video_frames} frames, got {temporal.shape[0]} and {video_times.shape[0]}")
    if segments.shape[1] != FASTPE_MROPE_FIELDS or segments.shape[0] < 2 * (images.shape[0] + videos.shape[0]) + batch:
        raise ValueError(f"segments must have shape (>= {2 * (images.shape[0] + videos.shape[0]) + batch}, 6), "
                         f"got ({segments.shape[0]}, {segments.shape[1]})")
    cdef int64_t *seg = &segments[0, 0] if segments.shape[0] else NULL
    cdef int64_t *tmp = &temporal[0] if temporal.shape[0] else NULL
    cdef int64_t *dl = &deltas[0] if batch else NULL
    cdef const int64_t *img = &images[0, 0] if images.shape[0] else NULL
    cdef const int64_t *vid = &videos[0, 0] if videos.shape[0] else NULL
    cdef const int64_t *p_ids = _ptr(ids)
    cdef const int64_t *p_cols = _ptr(columns)
    cdef const int64_t *p_rows = _ptr(n_rows)
    cdef const int64_t *p_times = _ptr(video_times)
    cdef int64_t n_columns = columns.shape[0], n_ids = ids.shape[0], n_images = images.shape[0]
    cdef int64_t n_videos = videos.shape[0]
    cdef int64_t *p_info = &info[0]
    cdef bint ok
    with nogil:
        ok = n_columns == 0 or fastpe_mrope_plan_columns_ok(p_cols, p_rows, batch, n_ids)
        if ok:
            fastpe_mrope_plan(p_ids, p_cols, n_columns, p_rows, batch, image_token_id, video_token_id,
                              img, n_images, vid, n_videos, merge, p_times, seg, tmp, dl, p_info)
    if not ok:
        raise ValueError(f"columns must be columns of ids, in [0, {ids.shape[0]})")


ctypedef struct _MropeCtx:
    const int64_t *segments
    int64_t n_seg
    const int64_t *temporal
    const int64_t *columns
    int64_t n_columns
    int64_t *out
    int64_t n_out


cdef void _mrope_part(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef _MropeCtx *c = <_MropeCtx *>ctx
    fastpe_mrope_fill(c.segments, c.n_seg, lo, hi, c.temporal, c.columns, c.n_columns, c.out, c.n_out)


def mrope_fill(const int64_t[:, ::1] segments, const int64_t[::1] temporal, const int64_t[::1] columns,
               int64_t[:, ::1] out, Py_ssize_t begin=0, Py_ssize_t end=-1, int parts=1):
    """The plan's attended tokens ``[begin, end)`` (all of its segments' by default) written
    into ``out`` (``(3, batch * seq)``) at their columns (``columns[i]`` of attended token ``i``,
    or ``i`` itself when ``columns`` is empty); ``parts > 1`` cuts the tokens into that many
    ranges on the pool.  The segments must be in token order, not overlapping, as the plan
    writes them."""
    cdef Py_ssize_t n_seg = segments.shape[0], s
    if out.shape[0] != 3:
        raise ValueError(f"out must have 3 rows, got {out.shape[0]}")
    if n_seg and segments.shape[1] != FASTPE_MROPE_FIELDS:
        raise ValueError(f"segments must have 6 fields, got {segments.shape[1]}")
    cdef int64_t n_out = out.shape[1], n_tokens = columns.shape[0] if columns.shape[0] else n_out
    cdef int64_t first, length, pos, grid_h, grid_w, after = 0
    for s in range(n_seg):
        first, length, pos, grid_h, grid_w = segments[s, 0], segments[s, 1], segments[s, 2], segments[s, 3], segments[s, 4]
        if not (after <= first < n_tokens and 1 <= length <= n_tokens - first and 0 <= pos < FASTPE_MROPE_LIMIT
                and 0 <= grid_h <= length and (grid_h == 0 or 1 <= grid_w <= length // grid_h)
                and (grid_h == 0 or 0 <= segments[s, 5] <= temporal.shape[0] - length // (grid_h * grid_w))):
            raise ValueError(f"segment {s} does not follow the one before it inside its {n_tokens} tokens "
                             f"and {temporal.shape[0]} time offsets")
        after = first + length
    if end < 0:
        end = after
    _check_range(n_tokens, begin, end, "tokens")
    if begin == end or n_seg == 0:
        return
    cdef const int64_t *p_cols = _ptr(columns)
    cdef const int64_t *p_seg = &segments[0, 0]
    cdef int64_t n_columns = columns.shape[0]
    cdef bint ok
    with nogil:
        ok = n_columns == 0 or fastpe_mrope_fill_columns_ok(p_seg, 0, n_seg, p_cols, n_out)
    if not ok:
        raise ValueError(f"columns must be columns of out, in [0, {n_out})")
    cdef _MropeCtx c
    c.segments, c.n_seg, c.temporal, c.columns, c.n_columns = p_seg, n_seg, _ptr(temporal), p_cols, n_columns
    c.out, c.n_out = &out[0, 0], n_out
    _run(_mrope_part, &c, begin, end, parts)


# ------------------------------------------------------------------------- calendar fields
# csrc/fastpe_calendar.h (the twin of fastpe._backends.numba.calendar): ranges of timestamps
# on the pool

cdef extern from "fastpe_calendar.h" nogil:
    void fastpe_calendar_fields_i32(const int64_t *ticks, int64_t per_second, int64_t tick_seconds,
                                    const int64_t *fields, const int64_t *offsets, Py_ssize_t n_fields,
                                    int32_t *out, Py_ssize_t lo, Py_ssize_t hi)
    void fastpe_calendar_fields_i64(const int64_t *ticks, int64_t per_second, int64_t tick_seconds,
                                    const int64_t *fields, const int64_t *offsets, Py_ssize_t n_fields,
                                    int64_t *out, Py_ssize_t lo, Py_ssize_t hi)


ctypedef struct _CalendarCtx:
    const int64_t *ticks
    int64_t per_second, tick_seconds
    const int64_t *fields
    const int64_t *offsets
    Py_ssize_t n_fields
    void *out
    bint wide


cdef void _calendar_part(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef _CalendarCtx *c = <_CalendarCtx *>ctx
    if c.wide:
        fastpe_calendar_fields_i64(c.ticks, c.per_second, c.tick_seconds, c.fields, c.offsets, c.n_fields,
                                   <int64_t *>c.out, lo, hi)
    else:
        fastpe_calendar_fields_i32(c.ticks, c.per_second, c.tick_seconds, c.fields, c.offsets, c.n_fields,
                                   <int32_t *>c.out, lo, hi)


def calendar_fields(const int64_t[::1] ticks, int64_t per_second, int64_t tick_seconds,
                    const int64_t[::1] fields, const int64_t[::1] offsets, bucket_t[:, ::1] out,
                    Py_ssize_t begin=0, Py_ssize_t end=-1, int parts=1):
    """Calendar fields of ``ticks[begin:end]`` into the same rows of ``out`` (``(n,
    len(fields))``, int32 or int64): ``per_second`` ticks a second (``> 1``, finer units) or
    ``tick_seconds`` seconds a tick (1, 60, 3600, 86400 or 604800; weeks within
    ``+-(2**63 - 1) // 7``); ``fields`` codes ``0 .. 7``, each written plus its ``offsets``
    value (in ``[-2**20, 2**20]``); ``parts > 1`` cuts the range into that many blocks on
    the pool."""
    cdef Py_ssize_t n = ticks.shape[0], j
    if out.shape[0] != n or out.shape[1] != fields.shape[0]:
        raise ValueError(f"out must have shape ({n}, {fields.shape[0]}), got ({out.shape[0]}, {out.shape[1]})")
    if offsets.shape[0] != fields.shape[0]:
        raise ValueError(f"offsets must hold one value per field ({fields.shape[0]}), got {offsets.shape[0]}")
    for j in range(fields.shape[0]):
        if not 0 <= fields[j] < 8:
            raise ValueError(f"fields must be codes 0 .. 7, got {fields[j]}")
        if not -(1 << 20) <= offsets[j] <= (1 << 20):
            raise ValueError(f"offsets must be within +-2**20, got {offsets[j]}")
    if per_second < 1 or (per_second == 1 and tick_seconds not in (1, 60, 3600, 86400, 604800)):
        raise ValueError(f"per_second {per_second} and tick_seconds {tick_seconds} name no unit")
    if end < 0:
        end = n
    _check_range(n, begin, end, "ticks")
    if begin == end or fields.shape[0] == 0:
        return
    cdef _CalendarCtx c
    c.ticks, c.per_second, c.tick_seconds = &ticks[0], per_second, tick_seconds
    c.fields, c.offsets, c.n_fields, c.out = &fields[0], &offsets[0], fields.shape[0], <void *>&out[0, 0]
    if bucket_t is int64_t:
        c.wide = True
    else:
        c.wide = False
    _run(_calendar_part, &c, begin, end, parts)


# ------------------------------------------------------------- DeBERTa and Shaw positions
# csrc/fastpe_relative.h: look-ups in the plan of fastpe._plans.deberta, and Shaw's clipped
# distances, over ranges of items or rows on the pool

cdef extern from "fastpe_relative.h" nogil:
    int64_t FASTPE_DEBERTA_UNBUCKETED
    enum:
        FASTPE_DEBERTA_INDEX_BITS
        FASTPE_DEBERTA_INDEX_SLOTS
    void fastpe_deberta_bucket_i32(const int64_t *rel, int64_t mid, const int64_t *starts,
                                   const int64_t *values, const int64_t *index, int32_t *out,
                                   Py_ssize_t begin, Py_ssize_t end)
    void fastpe_deberta_bucket_i64(const int64_t *rel, int64_t mid, const int64_t *starts,
                                   const int64_t *values, const int64_t *index, int64_t *out,
                                   Py_ssize_t begin, Py_ssize_t end)
    void fastpe_deberta_direct_i32(const int64_t *rel, int64_t mid, const int64_t *table, int32_t *out,
                                   Py_ssize_t begin, Py_ssize_t end)
    void fastpe_deberta_direct_i64(const int64_t *rel, int64_t mid, const int64_t *table, int64_t *out,
                                   Py_ssize_t begin, Py_ssize_t end)
    void fastpe_deberta_fill_i32(int64_t mid, const int64_t *starts, const int64_t *values,
                                 const int64_t *index, int32_t *out, Py_ssize_t k_len,
                                 Py_ssize_t row_begin, Py_ssize_t row_end)
    void fastpe_deberta_fill_i64(int64_t mid, const int64_t *starts, const int64_t *values,
                                 const int64_t *index, int64_t *out, Py_ssize_t k_len,
                                 Py_ssize_t row_begin, Py_ssize_t row_end)
    void fastpe_shaw_fill_i32(int64_t k, int64_t offset, int32_t *out, Py_ssize_t k_len,
                              Py_ssize_t row_begin, Py_ssize_t row_end)
    void fastpe_shaw_fill_i64(int64_t k, int64_t offset, int64_t *out, Py_ssize_t k_len,
                              Py_ssize_t row_begin, Py_ssize_t row_end)

#: the search index's slots per binade (fastpe._plans.deberta.INDEX_BITS, checked)
DEBERTA_INDEX_BITS = FASTPE_DEBERTA_INDEX_BITS
cdef int64_t _INT64_MIN = -0x7fffffffffffffff - 1

#: the mid that leaves every relative position as it is
DEBERTA_UNBUCKETED = FASTPE_DEBERTA_UNBUCKETED

cdef enum:
    _DEBERTA_I32
    _DEBERTA_I64
    _DEBERTA_FILL_I32
    _DEBERTA_FILL_I64
    _DEBERTA_DIRECT_I32
    _DEBERTA_DIRECT_I64
    _SHAW_I32
    _SHAW_I64

ctypedef struct _RelCtx:
    int kind
    const int64_t *rel
    int64_t mid, k, offset
    const int64_t *starts
    const int64_t *values
    const int64_t *index
    const int64_t *table
    Py_ssize_t k_len
    void *out


cdef void _rel_part(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef _RelCtx *c = <_RelCtx *>ctx
    if c.kind == _DEBERTA_I32:
        fastpe_deberta_bucket_i32(c.rel, c.mid, c.starts, c.values, c.index, <int32_t *>c.out, lo, hi)
    elif c.kind == _DEBERTA_I64:
        fastpe_deberta_bucket_i64(c.rel, c.mid, c.starts, c.values, c.index, <int64_t *>c.out, lo, hi)
    elif c.kind == _DEBERTA_DIRECT_I32:
        fastpe_deberta_direct_i32(c.rel, c.mid, c.table, <int32_t *>c.out, lo, hi)
    elif c.kind == _DEBERTA_DIRECT_I64:
        fastpe_deberta_direct_i64(c.rel, c.mid, c.table, <int64_t *>c.out, lo, hi)
    elif c.kind == _DEBERTA_FILL_I32:
        fastpe_deberta_fill_i32(c.mid, c.starts, c.values, c.index, <int32_t *>c.out, c.k_len, lo, hi)
    elif c.kind == _DEBERTA_FILL_I64:
        fastpe_deberta_fill_i64(c.mid, c.starts, c.values, c.index, <int64_t *>c.out, c.k_len, lo, hi)
    elif c.kind == _SHAW_I32:
        fastpe_shaw_fill_i32(c.k, c.offset, <int32_t *>c.out, c.k_len, lo, hi)
    elif c.kind == _SHAW_I64:
        fastpe_shaw_fill_i64(c.k, c.offset, <int64_t *>c.out, c.k_len, lo, hi)


cdef int _deberta_plan(_RelCtx *c, int64_t mid, const int64_t[::1] starts, const int64_t[::1] values,
                       const int64_t[::1] index, int64_t reach) except -1:
    """The plan's checks (memory safety): every distance past ``mid`` up to ``reach`` finds
    a start, and the index points inside the starts."""
    cdef Py_ssize_t n = starts.shape[0], s
    if values.shape[0] != n:
        raise ValueError(f"{n} starts for {values.shape[0]} values")
    if mid < 1:
        raise ValueError(f"mid must be >= 1, got {mid}")
    if index.shape[0] != FASTPE_DEBERTA_INDEX_SLOTS:
        raise ValueError(f"index has {index.shape[0]} slots, expected {FASTPE_DEBERTA_INDEX_SLOTS}")
    if reach > mid:
        if n == 0 or starts[0] != mid + 1:
            raise ValueError("the plan's first start must be mid + 1")
        if not 0 <= index[0]:
            raise ValueError("the index must be non-decreasing, inside the starts")
        for s in range(1, FASTPE_DEBERTA_INDEX_SLOTS):
            if not index[s - 1] <= index[s] < n:
                raise ValueError("the index must be non-decreasing, inside the starts")
    c.mid = mid
    c.starts = &starts[0] if n else NULL
    c.values = &values[0] if n else NULL
    c.index = &index[0]
    return 0


def deberta_bucket(const int64_t[::1] rel, int64_t mid, const int64_t[::1] starts, const int64_t[::1] values,
                   const int64_t[::1] index, bucket_t[::1] out, Py_ssize_t begin=0, Py_ssize_t end=-1,
                   int parts=1, const int64_t[::1] direct=None):
    """``out[k]`` = the DeBERTa bucket of ``rel[k]`` for ``k`` in ``[begin, end)``: ``mid =
    bucket_size // 2`` and the plan's ``starts``, ``values`` and ``index``
    (fastpe._plans.deberta), covering every ``|rel[k]|``; no ``rel`` may be ``-2**63``.
    ``direct``: the direct table of the plan over every distance (``3 * INDEX_SLOTS``
    integers), looked up instead of the index when given and not empty; every read then
    stays in the table whatever ``rel`` holds, and ``rel`` is not scanned for its reach."""
    if end < 0:
        end = out.shape[0]
    if rel.shape[0] != out.shape[0]:
        raise ValueError(f"{rel.shape[0]} relative positions for {out.shape[0]} outputs")
    _check_range(out.shape[0], begin, end, "items")
    if begin == end:
        return
    cdef _RelCtx c
    cdef int64_t lo = 0, hi = 0, v
    cdef Py_ssize_t k
    if direct is not None and direct.shape[0]:
        if direct.shape[0] != 3 * FASTPE_DEBERTA_INDEX_SLOTS:
            raise ValueError(f"direct has {direct.shape[0]} integers, expected {3 * FASTPE_DEBERTA_INDEX_SLOTS}")
        if mid < 1:
            raise ValueError(f"mid must be >= 1, got {mid}")
        c.kind = _DEBERTA_DIRECT_I32 if bucket_t is int32_t else _DEBERTA_DIRECT_I64
        c.mid, c.table, c.rel, c.out = mid, &direct[0], &rel[0], &out[0]
        _run(_rel_part, &c, begin, end, parts)
        return
    with nogil:  # the distances the plan must cover, in C integers
        for k in range(begin, end):
            v = rel[k]
            lo = v if v < lo else lo
            hi = v if v > hi else hi
    if lo == _INT64_MIN:
        raise ValueError("relative positions must be > -2**63")
    _deberta_plan(&c, mid, starts, values, index, max(hi, -lo))
    c.kind = _DEBERTA_I32 if bucket_t is int32_t else _DEBERTA_I64
    c.rel, c.out = &rel[0], &out[0]
    _run(_rel_part, &c, begin, end, parts)


def deberta_fill(int64_t mid, const int64_t[::1] starts, const int64_t[::1] values, const int64_t[::1] index,
                 bucket_t[:, ::1] out, Py_ssize_t row_begin=0, Py_ssize_t row_end=-1, int parts=1):
    """Rows ``[row_begin, row_end)`` of ``out`` (``(q_len, k_len)``): ``out[i, j]`` the DeBERTa
    bucket of ``i - j`` (``mid`` :data:`DEBERTA_UNBUCKETED`: ``i - j`` itself)."""
    cdef Py_ssize_t q_len = out.shape[0], k_len = out.shape[1]
    if row_end < 0:
        row_end = q_len
    _check_range(q_len, row_begin, row_end, "rows")
    if row_begin == row_end or k_len == 0:
        return
    cdef _RelCtx c
    _deberta_plan(&c, mid, starts, values, index, max(q_len, k_len) - 1)
    c.kind = _DEBERTA_FILL_I32 if bucket_t is int32_t else _DEBERTA_FILL_I64
    c.out, c.k_len = &out[0, 0], k_len
    _run(_rel_part, &c, row_begin, row_end, parts)


def shaw_fill(int64_t k, int64_t offset, bucket_t[:, ::1] out, Py_ssize_t row_begin=0, Py_ssize_t row_end=-1,
              int parts=1):
    """Rows ``[row_begin, row_end)`` of ``out``: ``out[i, j] = clip(j - (i + offset), -k, k) + k``
    (``0 <= k <= 2**62``, ``0 <= offset < 2**32``)."""
    cdef Py_ssize_t q_len = out.shape[0], k_len = out.shape[1]
    if row_end < 0:
        row_end = q_len
    if not (0 <= k <= (1 << 62) and 0 <= offset < (1 << 32)):
        raise ValueError("k must be in [0, 2**62] and offset in [0, 2**32)")
    _check_range(q_len, row_begin, row_end, "rows")
    if row_begin == row_end or k_len == 0:
        return
    cdef _RelCtx c
    c.kind = _SHAW_I32 if bucket_t is int32_t else _SHAW_I64
    c.k, c.offset, c.out, c.k_len = k, offset, &out[0, 0], k_len
    _run(_rel_part, &c, row_begin, row_end, parts)


cdef extern from "fastpe_calendar.h" nogil:
    void fastpe_embedding_sum_f32(const float *table, const int64_t *idx, Py_ssize_t k, float *out, Py_ssize_t d,
                                  Py_ssize_t lo, Py_ssize_t hi)
    void fastpe_embedding_sum_f64(const double *table, const int64_t *idx, Py_ssize_t k, double *out,
                                  Py_ssize_t d, Py_ssize_t lo, Py_ssize_t hi)


ctypedef struct _SumCtx:
    const void *table
    const int64_t *idx
    Py_ssize_t k, d
    void *out
    bint wide


cdef void _sum_part(void *ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef _SumCtx *c = <_SumCtx *>ctx
    if c.wide:
        fastpe_embedding_sum_f64(<const double *>c.table, c.idx, c.k, <double *>c.out, c.d, lo, hi)
    else:
        fastpe_embedding_sum_f32(<const float *>c.table, c.idx, c.k, <float *>c.out, c.d, lo, hi)


def embedding_sum(const real_t[:, ::1] table, const int64_t[:, ::1] indices, real_t[:, ::1] out,
                  Py_ssize_t begin=0, Py_ssize_t end=-1, int parts=1):
    """Rows ``[begin, end)`` of ``out`` (``(n, d)``) as sums of ``table``'s rows picked by
    ``indices`` (``(n, k)``, ``k >= 1``, each in ``[0, len(table))``), added left to right in
    the dtype; ``parts > 1`` cuts the rows into that many blocks on the pool."""
    cdef Py_ssize_t n = out.shape[0], d = out.shape[1], k = indices.shape[1], rows = table.shape[0], i, j
    if indices.shape[0] != n or table.shape[1] != d or k < 1:
        raise ValueError(f"indices ({indices.shape[0]}, {k}) and table (, {table.shape[1]}) do not fit out ({n}, {d})")
    for i in range(n):
        for j in range(k):
            if not 0 <= indices[i, j] < rows:
                raise ValueError(f"indices must be rows of the table, in [0, {rows}), got {indices[i, j]}")
    if end < 0:
        end = n
    _check_range(n, begin, end, "rows")
    if begin == end or d == 0:
        return
    cdef _SumCtx c
    c.table, c.idx, c.k, c.d, c.out = <const void *>&table[0, 0], &indices[0, 0], k, d, <void *>&out[0, 0]
    if real_t is double:
        c.wide = True
    else:
        c.wide = False
    _run(_sum_part, &c, begin, end, parts)
