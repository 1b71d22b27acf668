/*
 * fastpe_sandwich.h -- the Sandwich bias (fastpe/_backends/_sandwich.py explains it): the C
 * twin of fastpe/_backends/numba/sandwich.py, the same operations in the same order.
 *
 *   fastpe_sandwich_line: dsum[d] = sum_k sin(2 pi d t_k)**2 for d in [lo, hi), t_k the words
 *     (turns, 4 x n_freq) of w_k / 2, each sine by the exact path, the squares added in order
 *     by an error-free two-sum with the errors summed beside (the squares of a chunk of
 *     frequencies first, so that their loop vectorises; an AVX2 copy beside the baseline);
 *   fastpe_sandwich_fill: rows [lo, hi) of out (n_heads * q_len rows of k_len values of
 *     elsize bytes): row (h, i) is mirror[h][first - i ..], k_len values (bit patterns), the
 *     values at j > i zero (+0.0) when causal.
 */
#ifndef FASTPE_SANDWICH_H
#define FASTPE_SANDWICH_H

#include "fastpe_kernels.h"

/* squares per chunk: the exact-path loop over them vectorises (no loop-carried dependency);
 * the compensated sum then runs over them in order */
#define FASTPE_SANDWICH_CHUNK 256

#define FASTPE_DEFINE_SANDWICH_LINE(SUFFIX, ATTR, HW)                                             \
    ATTR static void fastpe_sandwich_line##SUFFIX(const double *FASTPE_RESTRICT turns,            \
                                                  ptrdiff_t n_freq, double *FASTPE_RESTRICT dsum, \
                                                  ptrdiff_t lo, ptrdiff_t hi)                     \
    {                                                                                             \
        const double *v1 = turns, *v2 = turns + n_freq, *v3 = turns + 2 * n_freq,                 \
                     *v4 = turns + 3 * n_freq;                                                    \
        double sq[FASTPE_SANDWICH_CHUNK];                                                         \
        for (ptrdiff_t d = lo; d < hi; d++) {                                                     \
            double p = (double)d, acc = 0.0, err = 0.0;                                           \
            for (ptrdiff_t k0 = 0; k0 < n_freq; k0 += FASTPE_SANDWICH_CHUNK) {                    \
                ptrdiff_t m = n_freq - k0 < FASTPE_SANDWICH_CHUNK ? n_freq - k0                   \
                                                                  : FASTPE_SANDWICH_CHUNK;        \
                for (ptrdiff_t k = 0; k < m; k++) {                                               \
                    double s, c;                                                                  \
                    fastpe_sincos_turns_(p, v1[k0 + k], v2[k0 + k], v3[k0 + k], v4[k0 + k], &s,   \
                                         &c, HW);                                                 \
                    sq[k] = s * s;                                                                \
                }                                                                                 \
                for (ptrdiff_t k = 0; k < m; k++) {                                               \
                    double t = sq[k];                                                             \
                    double u = acc + t;                                                           \
                    double tt = u - acc;                                                          \
                    err += (acc - (u - tt)) + (t - tt);                                           \
                    acc = u;                                                                      \
                }                                                                                 \
            }                                                                                     \
            dsum[d] = acc + err;                                                                  \
        }                                                                                         \
    }

FASTPE_DEFINE_SANDWICH_LINE(_baseline, , FASTPE_HW_FLOOR)
#if FASTPE_X86_DISPATCH
FASTPE_DEFINE_SANDWICH_LINE(_avx2, __attribute__((target("avx2"))), 1)
#endif

/* wide: the AVX2 copy where the CPU has it (the same bits) */
static void fastpe_sandwich_line(const double *turns, ptrdiff_t n_freq, double *dsum, ptrdiff_t lo,
                                 ptrdiff_t hi, int wide)
{
    FASTPE_DISPATCH_(fastpe_sandwich_line, turns, n_freq, dsum, lo, hi);
}

static void fastpe_sandwich_fill(const unsigned char *mirror, ptrdiff_t mirror_len, ptrdiff_t first,
                                 int causal, unsigned char *out, ptrdiff_t q_len, ptrdiff_t k_len,
                                 ptrdiff_t elsize, ptrdiff_t lo, ptrdiff_t hi)
{
    for (ptrdiff_t r = lo; r < hi; r++) {
        ptrdiff_t h = r / q_len, i = r - h * q_len;
        ptrdiff_t n = causal && i + 1 < k_len ? i + 1 : k_len;
        unsigned char *row = out + r * k_len * elsize;
        memcpy(row, mirror + (h * mirror_len + first - i) * elsize, (size_t)(n * elsize));
        if (n < k_len)
            memset(row + n * elsize, 0, (size_t)((k_len - n) * elsize));
    }
}

#endif /* FASTPE_SANDWICH_H */
