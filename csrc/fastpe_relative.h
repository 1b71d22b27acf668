/*
 * fastpe_relative.h -- the C twin of fastpe/_backends/numba/relative.py: HF DeBERTa's log
 * buckets (a binary search in the plan of fastpe/_plans/deberta.py: integers only) and Shaw's
 * clipped relative positions.
 *
 * The DeBERTa matrix is written a block of rows at a time: the block's first row looked up
 * value by value, each next row the one above shifted right by one column with B(i) in front
 * (out[i][j] = out[i - 1][j - 1]), in place.  Kernels assume validated input and never fail;
 * each works on a range of items or rows, so the worker pool (fastpe_pool.h, through
 * _bias.pyx) can fill disjoint parts.
 */
#ifndef FASTPE_RELATIVE_H
#define FASTPE_RELATIVE_H

#include <stddef.h>
#include <stdint.h>

/* rows per block of the DeBERTa matrix whose first row is looked up (numba's ROW_BLOCK) */
#define FASTPE_DEBERTA_ROW_BLOCK 128
/* the mid that leaves every relative position as it is (unbucketed) */
#define FASTPE_DEBERTA_UNBUCKETED INT64_MAX

/* the search index cuts each binade of distances into 2**FASTPE_DEBERTA_INDEX_BITS slots
 * (fastpe/_plans/deberta.py's INDEX_BITS, which the cython backend compares) */
#define FASTPE_DEBERTA_INDEX_BITS 7
#define FASTPE_DEBERTA_INDEX_SLOTS (63 * (1 << FASTPE_DEBERTA_INDEX_BITS) + 1)

/* HF DeBERTa's bucket of one relative position (rp > INT64_MIN): rp itself where |rp| <= mid,
 * else sign(rp) times the value at the last plan start at or below |rp| (starts[0] = mid + 1).
 * The index gives the few starts of the distance's slot (its binade, then the next bits),
 * searched by halving with selects, not branches (a plain binary search's branches
 * mispredict on every other step for random positions) */
static inline int64_t fastpe_deberta_one(int64_t rp, int64_t mid, const int64_t *starts,
                                         const int64_t *values, const int64_t *index)
{
    const int64_t d = rp < 0 ? -rp : rp; /* a select: the sign of a random position is a coin */
    if (d <= mid)
        return rp;
    const int e = 63 - __builtin_clzll((unsigned long long)d); /* floor(log2 d), d >= 2 */
    const int64_t frac = d - ((int64_t)1 << e);
    const int64_t top = e >= FASTPE_DEBERTA_INDEX_BITS ? frac >> (e - FASTPE_DEBERTA_INDEX_BITS)
                                                       : frac << (FASTPE_DEBERTA_INDEX_BITS - e);
    const int64_t slot = (int64_t)e * (1 << FASTPE_DEBERTA_INDEX_BITS) + top;
    int64_t base = index[slot];
    const int64_t last = index[slot + 1];
    if (last - base <= 3) {
        /* a narrow slot (every slot of DeBERTa-v3's plan): count the starts after base at or
         * below d, reads clamped to the slot, no branch */
        const int64_t a = base + 1 < last ? base + 1 : last, b = base + 2 < last ? base + 2 : last;
        base += (int64_t)((base + 1 <= last) & (starts[a] <= d)) + (int64_t)((base + 2 <= last) & (starts[b] <= d))
                + (int64_t)((base + 3 <= last) & (starts[last] <= d));
    } else {
        int64_t n = last - base + 1;
        while (n > 1) { /* starts[base] <= d, the answer in [base, base + n) */
            const int64_t half = n >> 1;
            base = starts[base + half] <= d ? base + half : base;
            n -= half;
        }
    }
    const int64_t v = values[base];
    return rp > 0 ? v : -v;
}

/* fastpe_deberta_one by the plan's direct table (fastpe._plans.deberta.direct_table: a slot
 * holds at most one start past its first distance): one load of the slot's (t, v0, v1), no
 * load depending on another, then a select -- the index, starts and values chain is ~3x the
 * time of a position */
static inline int64_t fastpe_deberta_direct(int64_t rp, int64_t mid, const int64_t *table)
{
    /* |rp| unsigned: 2**63 for -2**63 (outside the contract), whose slot is the table's last */
    const uint64_t d = rp < 0 ? 0 - (uint64_t)rp : (uint64_t)rp;
    if (d <= (uint64_t)mid)
        return rp;
    const int64_t e = 63 - __builtin_clzll(d);
    const uint64_t frac = d - ((uint64_t)1 << e);
    const uint64_t top = e >= FASTPE_DEBERTA_INDEX_BITS ? frac >> (e - FASTPE_DEBERTA_INDEX_BITS)
                                                        : frac << (FASTPE_DEBERTA_INDEX_BITS - e);
    const int64_t slot = e * (1 << FASTPE_DEBERTA_INDEX_BITS) + (int64_t)top;
    const int64_t *t = table + 3 * slot;
    /* arithmetic, not a select gcc turns into a branch (a coin for random positions: 30% of
     * the kernel's samples sat on that mispredicted jump) */
    const int64_t v = t[1] + ((t[2] - t[1]) & -(int64_t)(d >= (uint64_t)t[0]));
    return rp > 0 ? v : -v;
}

/* dst[0 .. n) = src[0 .. n): an explicit loop, not memcpy -- each row of the DeBERTa matrix is
 * the row above shifted by one element, and the library's memmove (rep movsb) is ~8x slower
 * on such 8-byte-shifted copies of rows 4 KiB apart than a vector loop */
#define FASTPE_ROW_COPY(SUFFIX, T)                                                            \
    __attribute__((optimize("no-tree-loop-distribute-patterns")))                             \
    static void fastpe_row_copy_##SUFFIX(T *restrict dst, const T *restrict src, ptrdiff_t n) \
    {                                                                                         \
        for (ptrdiff_t j = 0; j < n; j++)                                                     \
            dst[j] = src[j];                                                                  \
    }
FASTPE_ROW_COPY(i32, int32_t)
FASTPE_ROW_COPY(i64, int64_t)

#define FASTPE_RELATIVE(SUFFIX, T)                                                            \
    /* out[k] = bucket(rel[k]) for k in [begin, end) */                                      \
    static void fastpe_deberta_bucket_##SUFFIX(const int64_t *rel, int64_t mid,               \
                                               const int64_t *starts, const int64_t *values,  \
                                               const int64_t *index, T *out, ptrdiff_t begin, \
                                               ptrdiff_t end)                                 \
    {                                                                                         \
        for (ptrdiff_t k = begin; k < end; k++)                                               \
            out[k] = (T)fastpe_deberta_one(rel[k], mid, starts, values, index);               \
    }                                                                                         \
    /* out[k] = bucket(rel[k]) for k in [begin, end), by the direct table */                 \
    static void fastpe_deberta_direct_##SUFFIX(const int64_t *rel, int64_t mid,               \
                                               const int64_t *table, T *out, ptrdiff_t begin, \
                                               ptrdiff_t end)                                 \
    {                                                                                         \
        for (ptrdiff_t k = begin; k < end; k++)                                               \
            out[k] = (T)fastpe_deberta_direct(rel[k], mid, table);                            \
    }                                                                                         \
    /* rows [row_begin, row_end) of out (q_len x k_len): out[i][j] = bucket(i - j) */        \
    static void fastpe_deberta_fill_##SUFFIX(int64_t mid, const int64_t *starts,              \
                                             const int64_t *values, const int64_t *index,     \
                                             T *out, ptrdiff_t k_len, ptrdiff_t row_begin,    \
                                             ptrdiff_t row_end)                               \
    {                                                                                         \
        for (ptrdiff_t r0 = row_begin; r0 < row_end; r0 += FASTPE_DEBERTA_ROW_BLOCK) {        \
            const ptrdiff_t r1 = row_end - r0 < FASTPE_DEBERTA_ROW_BLOCK                      \
                                     ? row_end : r0 + FASTPE_DEBERTA_ROW_BLOCK;               \
            T *row = out + r0 * k_len;                                                        \
            for (ptrdiff_t j = 0; j < k_len; j++)                                             \
                row[j] = (T)fastpe_deberta_one((int64_t)r0 - j, mid, starts, values, index);    \
            for (ptrdiff_t i = r0 + 1; i < r1; i++) {                                         \
                T *next = row + k_len;                                                        \
                next[0] = (T)fastpe_deberta_one((int64_t)i, mid, starts, values, index);      \
                fastpe_row_copy_##SUFFIX(next + 1, row, k_len - 1);                           \
                row = next;                                                                   \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    /* rows [row_begin, row_end): out[i][j] = clip(j - (i + offset), -k, k) + k, as its three \
     * pieces: 0 up to j = p - k, then j - p + k, then 2k from j = p + k on (p = i + offset) */ \
    static void fastpe_shaw_fill_##SUFFIX(int64_t k, int64_t offset, T *out, ptrdiff_t k_len, \
                                          ptrdiff_t row_begin, ptrdiff_t row_end)             \
    {                                                                                         \
        for (ptrdiff_t i = row_begin; i < row_end; i++) {                                     \
            T *row = out + i * k_len;                                                         \
            const int64_t p = (int64_t)i + offset;                                            \
            const int64_t lo = p - k, hi = p + k; /* clipped below j < lo, above j > hi */    \
            const ptrdiff_t a = lo <= 0 ? 0 : (lo < k_len ? (ptrdiff_t)lo : k_len);           \
            const ptrdiff_t b = hi < 0 ? 0 : (hi < k_len ? (ptrdiff_t)hi + 1 : k_len);        \
            const T top = (T)(2 * k);                                                         \
            const int64_t shift = k - p;                                                      \
            for (ptrdiff_t j = 0; j < a; j++)                                                 \
                row[j] = 0;                                                                   \
            for (ptrdiff_t j = a; j < b; j++)                                                 \
                row[j] = (T)((int64_t)j + shift);                                             \
            for (ptrdiff_t j = b; j < k_len; j++)                                             \
                row[j] = top;                                                                 \
        }                                                                                     \
    }

FASTPE_RELATIVE(i32, int32_t)
FASTPE_RELATIVE(i64, int64_t)

#endif /* FASTPE_RELATIVE_H */
