/* The axial RoPE caches' copy (fastpe.rope._axial, the registry's axial_gather): the C twin of
 * fastpe._backends.numba.axial.
 *
 * A pure copy on the values' bit patterns, so one kernel serves every dtype (item = 2, 4 or 8
 * bytes per value) and writes the reference's bits: token t gets, for each piece
 * (axis, src, col, width), the cos and sin blocks of its table row index[axis * n + t]
 * (values src .. src + width - 1 of the row's cos half and of its sin half) at columns
 * col .. col + width - 1 of its rows of out_cos and out_sin.  Both outputs are written in one
 * pass over the tokens, each token's two rows once, while the pieces' table rows (a few
 * hundred bytes per axis value) stay in cache.  No checks: the caller has validated every
 * index and piece against the shapes.
 */
#ifndef FASTPE_AXIAL_H
#define FASTPE_AXIAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fastpe_kernels.h" /* FASTPE_X86_DISPATCH (and immintrin.h with it), FASTPE_DISPATCH_ */

/* tokens [lo, hi) of n: table rows of 2 * k values (cos block, then sin block); index
 * (n_axes, n) table rows; pieces (n_pieces, 4); out_cos and out_sin (n, d).  The baseline
 * copy: each block by libc's memcpy. */
static void fastpe_axial_gather_baseline(const unsigned char *table, ptrdiff_t k, ptrdiff_t item,
                                         const int64_t *index, ptrdiff_t n, const int64_t *pieces,
                                         ptrdiff_t n_pieces, unsigned char *out_cos,
                                         unsigned char *out_sin, ptrdiff_t d, ptrdiff_t lo,
                                         ptrdiff_t hi)
{
    const ptrdiff_t block = k * item, row_bytes = 2 * block, out_row = d * item;
    for (ptrdiff_t t = lo; t < hi; t++) {
        unsigned char *oc = out_cos + t * out_row;
        unsigned char *os = out_sin + t * out_row;
        for (ptrdiff_t p = 0; p < n_pieces; p++) {
            const int64_t *pc = pieces + 4 * p;
            const unsigned char *src = table + index[pc[0] * n + t] * row_bytes + pc[1] * item;
            const size_t bytes = (size_t)(pc[3] * item);
            memcpy(oc + pc[2] * item, src, bytes);
            memcpy(os + pc[2] * item, src + block, bytes);
        }
    }
}

#if FASTPE_X86_DISPATCH
/* The AVX2 copy: a block of 32 bytes or more 32 bytes at a time, its cos and sin halves in
 * one loop, the last 32 bytes overlapping (written twice, the same bytes); a shorter block by
 * memcpy.  FLUX 64x64 alone in C: ~75 us against the baseline's ~92 (rows 64-byte aligned),
 * ~93 against ~108 (16-byte aligned, as malloc gives). */
__attribute__((target("avx2"))) static void fastpe_axial_gather_avx2(
    const unsigned char *table, ptrdiff_t k, ptrdiff_t item, const int64_t *index, ptrdiff_t n,
    const int64_t *pieces, ptrdiff_t n_pieces, unsigned char *out_cos, unsigned char *out_sin,
    ptrdiff_t d, ptrdiff_t lo, ptrdiff_t hi)
{
    const ptrdiff_t block = k * item, row_bytes = 2 * block, out_row = d * item;
    for (ptrdiff_t t = lo; t < hi; t++) {
        unsigned char *oc = out_cos + t * out_row;
        unsigned char *os = out_sin + t * out_row;
        for (ptrdiff_t p = 0; p < n_pieces; p++) {
            const int64_t *pc = pieces + 4 * p;
            const unsigned char *src = table + index[pc[0] * n + t] * row_bytes + pc[1] * item;
            const ptrdiff_t bytes = pc[3] * item;
            unsigned char *dc = oc + pc[2] * item, *ds = os + pc[2] * item;
            if (bytes < 32) {
                memcpy(dc, src, (size_t)bytes);
                memcpy(ds, src + block, (size_t)bytes);
                continue;
            }
            ptrdiff_t i = 0;
            for (; i + 32 <= bytes; i += 32) {
                _mm256_storeu_si256((__m256i *)(dc + i), _mm256_loadu_si256((const __m256i *)(src + i)));
                _mm256_storeu_si256((__m256i *)(ds + i),
                                    _mm256_loadu_si256((const __m256i *)(src + block + i)));
            }
            if (i < bytes) {
                i = bytes - 32;
                _mm256_storeu_si256((__m256i *)(dc + i), _mm256_loadu_si256((const __m256i *)(src + i)));
                _mm256_storeu_si256((__m256i *)(ds + i),
                                    _mm256_loadu_si256((const __m256i *)(src + block + i)));
            }
        }
    }
}
#endif

/* the entry point (wide as fastpe_kernels.h's: 0 runs the baseline copy) */
static void fastpe_axial_gather(const unsigned char *table, ptrdiff_t k, ptrdiff_t item,
                                const int64_t *index, ptrdiff_t n, const int64_t *pieces,
                                ptrdiff_t n_pieces, unsigned char *out_cos, unsigned char *out_sin,
                                ptrdiff_t d, ptrdiff_t lo, ptrdiff_t hi, int wide)
{
    FASTPE_DISPATCH_(fastpe_axial_gather, table, k, item, index, n, pieces, n_pieces, out_cos,
                     out_sin, d, lo, hi);
}

/* whether each of the count rows in index is in [0, rows): one unsigned comparison each, no
 * early exit (a branch-free pass the compiler can vectorise) */
static int fastpe_axial_rows_ok(const int64_t *index, ptrdiff_t count, int64_t rows)
{
    uint64_t bad = 0;
    for (ptrdiff_t i = 0; i < count; i++)
        bad |= (uint64_t)index[i] >= (uint64_t)rows;
    return bad == 0;
}

#endif /* FASTPE_AXIAL_H */
