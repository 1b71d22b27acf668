/*
 * fastpe_mrope.h -- M-RoPE position ids (Qwen-VL multimodal RoPE) of the cython backend.
 *
 * The C twin of fastpe/_backends/numba/mrope.py, step for step, integers only, so it writes
 * the reference's values (fastpe/_backends/_mrope_python.py documents every argument,
 * fastpe/_plans/mrope.py the segment fields and the error codes, which the extension
 * exports and a test ties to that home).  The kernels assume validated input (csrc/_bias.pyx
 * checks what memory safety needs) and never fail: the plan reports a run that does not
 * match its grid through info[1].
 *
 * The plan is serial (the image and video grids are consumed in order across the rows).  The
 * fill writes a range of tokens: the tokens write disjoint columns, so the worker pool
 * (fastpe_pool.h) can give each thread its own range, whatever the sizes of the runs.
 */
#ifndef FASTPE_MROPE_H
#define FASTPE_MROPE_H

#include <stdint.h>

/* info[1] codes (fastpe._plans.mrope.PLAN_ERRORS) */
enum {
    FASTPE_MROPE_TOO_MANY_IMAGE_RUNS = 1,
    FASTPE_MROPE_TOO_MANY_VIDEO_RUNS = 2,
    FASTPE_MROPE_IMAGE_RUN_LENGTH = 3,
    FASTPE_MROPE_VIDEO_RUN_LENGTH = 4,
    FASTPE_MROPE_TOO_FEW_IMAGE_RUNS = 5,
    FASTPE_MROPE_TOO_FEW_VIDEO_RUNS = 6,
    FASTPE_MROPE_POSITION_OVERFLOW = 7
};
/* every position stays below this (fastpe._plans.mrope.POSITION_LIMIT) */
#define FASTPE_MROPE_LIMIT ((int64_t)1 << 62)
/* the int64 fields of a segment row (fastpe._plans.mrope.SEGMENT_FIELDS) */
#define FASTPE_MROPE_FIELDS 6

/* 0 text, 1 image, 2 video */
static inline int fastpe_mrope_kind_(int64_t token, int64_t image, int64_t video)
{
    return token == image ? 1 : token == video ? 2 : 0;
}

static inline int64_t fastpe_mrope_max_(int64_t a, int64_t b) { return a > b ? a : b; }

/* the end of the run of `kind` that starts before j in row[.. end) (adjacent tokens): the
 * first index >= j whose token is of another kind, or end.  With GCC or clang, blocks of 16
 * tokens are tested with one branch each, two tokens at a time in operations SSE2 has (it
 * has no 64-bit compare: a token equals an id when both 32-bit halves do), the last tokens
 * one by one; the index found is the same either way */
#if defined(__GNUC__) || defined(__clang__)
typedef uint64_t fastpe_mrope_u2_ __attribute__((vector_size(16)));
typedef int32_t fastpe_mrope_i4_ __attribute__((vector_size(16)));

static inline fastpe_mrope_u2_ fastpe_mrope_load_(const int64_t *p)
{
    fastpe_mrope_u2_ v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}

/* nonzero in a lane whose token equals the id's */
static inline fastpe_mrope_u2_ fastpe_mrope_equal_(fastpe_mrope_u2_ t, fastpe_mrope_u2_ id)
{
    fastpe_mrope_u2_ halves = (fastpe_mrope_u2_)((fastpe_mrope_i4_)t == (fastpe_mrope_i4_)id);
    return halves & (halves >> 32);
}
#endif

static inline int64_t fastpe_mrope_run_end_(const int64_t *row, int64_t j, int64_t end, int kind,
                                            int64_t image, int64_t video)
{
#if defined(__GNUC__) || defined(__clang__)
    const fastpe_mrope_u2_ vi = {(uint64_t)image, (uint64_t)image}, vv = {(uint64_t)video, (uint64_t)video};
    if (kind == 0) {
        while (j + 16 <= end) {
            fastpe_mrope_u2_ vision = {0, 0};  /* nonzero in a lane that met an image or video token */
            for (int q = 0; q < 16; q += 2) {
                fastpe_mrope_u2_ t = fastpe_mrope_load_(row + j + q);
                vision |= fastpe_mrope_equal_(t, vi) | fastpe_mrope_equal_(t, vv);
            }
            if (vision[0] | vision[1])
                break;
            j += 16;
        }
    } else {
        const fastpe_mrope_u2_ vt = kind == 1 ? vi : vv;
        while (j + 16 <= end) {
            fastpe_mrope_u2_ other = {0, 0};  /* nonzero in a lane that met another token */
            for (int q = 0; q < 16; q += 2)
                other |= fastpe_mrope_load_(row + j + q) ^ vt;
            if (other[0] | other[1])
                break;
            j += 16;
        }
    }
#endif
    while (j < end && fastpe_mrope_kind_(row[j], image, video) == kind)
        j++;
    return j;
}

static inline void fastpe_mrope_fail_(int64_t *info, int64_t n_seg, int64_t code, int64_t index,
                                      int64_t row)
{
    info[0] = n_seg;
    info[1] = code;
    info[2] = index;
    info[3] = row;
}

/* 1 when every one of columns[lo .. hi) is in [0, limit) (one branch-free pass) */
static inline int fastpe_mrope_columns_below_(const int64_t *columns, int64_t lo, int64_t hi,
                                              int64_t limit)
{
    uint64_t bad = 0;
    for (int64_t i = lo; i < hi; i++)
        bad |= (uint64_t)columns[i] >= (uint64_t)limit;
    return bad == 0;
}

/* 1 when the columns [lo, hi) (hi > lo) that the kernels read are in [0, limit): a block of
 * adjacent columns is read through its ends only (its tokens are the columns between them),
 * any other block column by column */
static inline int fastpe_mrope_block_ok_(const int64_t *columns, int64_t lo, int64_t hi, int64_t limit)
{
    int64_t a = columns[lo], z = columns[hi - 1];
    if ((uint64_t)a < (uint64_t)limit && (uint64_t)z < (uint64_t)limit && z - a == hi - 1 - lo)
        return 1;
    return fastpe_mrope_columns_below_(columns, lo, hi, limit);
}

/* the checks memory safety needs of the plan's columns: every row's block of attended
 * tokens (n_rows each >= 1, sum <= n_columns) inside ids' n_ids */
static int fastpe_mrope_plan_columns_ok(const int64_t *columns, const int64_t *n_rows, int64_t batch,
                                        int64_t n_ids)
{
    int64_t k = 0;
    for (int64_t b = 0; b < batch; k += n_rows[b], b++)
        if (!fastpe_mrope_block_ok_(columns, k, k + n_rows[b], n_ids))
            return 0;
    return 1;
}

/* the same of the fill's: every segment's tokens (length >= 1, inside the columns) in out */
static int fastpe_mrope_fill_columns_ok(const int64_t *segments, int64_t s_begin, int64_t s_end,
                                        const int64_t *columns, int64_t n_out)
{
    for (int64_t s = s_begin; s < s_end; s++) {
        const int64_t *seg = segments + FASTPE_MROPE_FIELDS * s;
        if (!fastpe_mrope_block_ok_(columns, seg[0], seg[0] + seg[1], n_out))
            return 0;
    }
    return 1;
}

/* ids: (n_ids,); columns: (n_columns,), 0 meaning every token is attended; n_rows: (batch,);
 * images, videos: (n, 3) row-major; segments: (cap, 6) row-major */
static void fastpe_mrope_plan(const int64_t *ids, const int64_t *columns, int64_t n_columns,
                              const int64_t *n_rows, int64_t batch, int64_t image, int64_t video,
                              const int64_t *images, int64_t n_images, const int64_t *videos,
                              int64_t n_videos, int64_t merge, const int64_t *video_times,
                              int64_t *segments, int64_t *temporal, int64_t *deltas, int64_t *info)
{
    int64_t used_images = 0, used_videos = 0, n_times = 0, n_seg = 0, n_frames = 0, k = 0;
    info[0] = info[1] = info[2] = info[3] = 0;
    for (int64_t b = 0; b < batch; b++) {
        int64_t end = k + n_rows[b], pos = 0, top = -1, shift = 0;
        /* a row whose attended tokens are one block (left or right padding) is read directly */
        int gather = n_columns != 0;
        if (gather && columns[end - 1] - columns[k] == end - 1 - k) {
            shift = columns[k] - k;
            gather = 0;
        }
#define FASTPE_MROPE_TOKEN_(j) ids[gather ? columns[j] : (j) + shift]
        while (k < end) {
            int kind = fastpe_mrope_kind_(FASTPE_MROPE_TOKEN_(k), image, video);
            int64_t j = k + 1;
            if (gather) {
                while (j < end && fastpe_mrope_kind_(FASTPE_MROPE_TOKEN_(j), image, video) == kind)
                    j++;
            } else {
                j = fastpe_mrope_run_end_(ids + shift, j, end, kind, image, video);
            }
            int64_t length = j - k, *seg = segments + FASTPE_MROPE_FIELDS * n_seg;
            if (kind == 0) {
                seg[0] = k; seg[1] = length; seg[2] = pos; seg[3] = 0; seg[4] = 0; seg[5] = 0;
                top = fastpe_mrope_max_(top, pos + length - 1);
                pos += length;
            } else {
                const int64_t *grid;
                int64_t index;
                if (kind == 1) {
                    if (used_images == n_images) {
                        fastpe_mrope_fail_(info, n_seg, FASTPE_MROPE_TOO_MANY_IMAGE_RUNS, used_images, b);
                        return;
                    }
                    index = used_images++;
                    grid = images + 3 * index;
                } else {
                    if (used_videos == n_videos) {
                        fastpe_mrope_fail_(info, n_seg, FASTPE_MROPE_TOO_MANY_VIDEO_RUNS, used_videos, b);
                        return;
                    }
                    index = used_videos++;
                    grid = videos + 3 * index;
                }
                int64_t t = grid[0], h = grid[1] / merge, w = grid[2] / merge;
                if (t * h * w != length) {
                    fastpe_mrope_fail_(info, n_seg, kind == 1 ? FASTPE_MROPE_IMAGE_RUN_LENGTH
                                                              : FASTPE_MROPE_VIDEO_RUN_LENGTH, index, b);
                    return;
                }
                if (kind == 1) {
                    for (int64_t f = 0; f < t; f++)
                        temporal[n_frames + f] = f;
                } else {
                    for (int64_t f = 0; f < t; f++)
                        temporal[n_frames + f] = video_times[n_times + f];
                    n_times += t;
                }
                seg[0] = k; seg[1] = length; seg[2] = pos; seg[3] = h; seg[4] = w; seg[5] = n_frames;
                n_frames += t;
                top = fastpe_mrope_max_(top, pos + fastpe_mrope_max_(temporal[n_frames - 1],
                                                                     fastpe_mrope_max_(h - 1, w - 1)));
                pos += fastpe_mrope_max_(h, w);
            }
            n_seg++;
            k = j;
        }
#undef FASTPE_MROPE_TOKEN_
        if (top >= FASTPE_MROPE_LIMIT) {
            fastpe_mrope_fail_(info, n_seg, FASTPE_MROPE_POSITION_OVERFLOW, 0, b);
            return;
        }
        deltas[b] = top + 1 - n_rows[b];
    }
    if (used_images != n_images) {
        fastpe_mrope_fail_(info, n_seg, FASTPE_MROPE_TOO_FEW_IMAGE_RUNS, used_images, batch - 1);
        return;
    }
    if (used_videos != n_videos) {
        fastpe_mrope_fail_(info, n_seg, FASTPE_MROPE_TOO_FEW_VIDEO_RUNS, used_videos, batch - 1);
        return;
    }
    info[0] = n_seg;
}

/* tokens [a, z) of one segment (0 <= a < z <= its length) into out's three rows */
static inline void fastpe_mrope_fill_part_(const int64_t *seg, int64_t a, int64_t z, const int64_t *temporal,
                                           const int64_t *columns, int64_t n_columns, int64_t *t_row,
                                           int64_t *h_row, int64_t *w_row)
{
    int64_t first = seg[0], length = seg[1], pos = seg[2], grid_h = seg[3], grid_w = seg[4];
    /* a segment whose tokens are adjacent columns (always, unless the mask has holes inside
     * it) is written through a shifted index, not gathered column by column */
    int64_t shift = 0;
    int gather = n_columns != 0;
    if (gather && columns[first + length - 1] - columns[first] == length - 1) {
        shift = columns[first] - first;
        gather = 0;
    }
    if (grid_h == 0) {
        if (gather) {
            for (int64_t i = a; i < z; i++) {
                int64_t c = columns[first + i];
                t_row[c] = h_row[c] = w_row[c] = pos + i;
            }
        } else {
            int64_t c0 = first + shift;
            for (int64_t i = a; i < z; i++)
                t_row[c0 + i] = pos + i;
            for (int64_t i = a; i < z; i++)
                h_row[c0 + i] = pos + i;
            for (int64_t i = a; i < z; i++)
                w_row[c0 + i] = pos + i;
        }
        return;
    }
    /* whole frames only (a valid plan's run is exactly its frames) */
    int64_t plane = grid_h * grid_w, whole = length / plane * plane;
    if (z > whole)
        z = whole;
    if (a >= z)
        return;
    /* the first token's frame, row and column, then row by row */
    int64_t ti = a / plane, hi = a % plane / grid_w, wi = a % grid_w, k = a;
    const int64_t *tp = temporal + seg[5];
    while (k < z) {
        int64_t n = grid_w - wi < z - k ? grid_w - wi : z - k;
        int64_t tv = pos + tp[ti], hv = pos + hi, base = first + k - wi;  /* token index of column 0 */
        if (gather) {
            for (int64_t x = wi; x < wi + n; x++) {
                int64_t c = columns[base + x];
                t_row[c] = tv;
                h_row[c] = hv;
                w_row[c] = pos + x;
            }
        } else {
            int64_t c0 = base + shift;
            for (int64_t x = wi; x < wi + n; x++)
                t_row[c0 + x] = tv;
            for (int64_t x = wi; x < wi + n; x++)
                h_row[c0 + x] = hv;
            for (int64_t x = wi; x < wi + n; x++)
                w_row[c0 + x] = pos + x;
        }
        k += n;
        wi = 0;
        if (++hi == grid_h) {
            hi = 0;
            ti++;
        }
    }
}

/* the plan's tokens [t_begin, t_end) (counted as the segments' `first` counts them) written
 * into out: (3, n_out) row-major, at the attended columns only.  `segments` (n_seg rows of 6)
 * are in token order and do not overlap (as the plan writes them), so a range of tokens can
 * go to each thread of the pool whatever the segments' sizes: a part starts in the segment
 * holding t_begin (binary search) and may start or end inside a segment */
static void fastpe_mrope_fill(const int64_t *segments, int64_t n_seg, int64_t t_begin, int64_t t_end,
                              const int64_t *temporal, const int64_t *columns, int64_t n_columns,
                              int64_t *out, int64_t n_out)
{
    int64_t *t_row = out, *h_row = out + n_out, *w_row = out + 2 * n_out;
    int64_t lo = 0, hi = n_seg;  /* the last segment starting at or before t_begin */
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (segments[FASTPE_MROPE_FIELDS * mid] <= t_begin)
            lo = mid;
        else
            hi = mid;
    }
    for (int64_t s = lo; s < n_seg; s++) {
        const int64_t *seg = segments + FASTPE_MROPE_FIELDS * s;
        int64_t first = seg[0], last = seg[0] + seg[1];
        if (first >= t_end)
            break;
        int64_t a = (t_begin > first ? t_begin : first) - first, z = (t_end < last ? t_end : last) - first;
        if (a < z)
            fastpe_mrope_fill_part_(seg, a, z, temporal, columns, n_columns, t_row, h_row, w_row);
    }
}

#endif
