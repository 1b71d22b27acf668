/*
 * fastpe_signed.h -- signed positions (|p| < 2**32) for the sinusoid kernels of
 * fastpe_kernels.h: the twin of the signed paths of fastpe/_backends/numba/kernels.py.
 *
 * Sine is odd and cosine even, and rounding to nearest is symmetric, so the row of a negative
 * position is the row of its magnitude with every sine negated, bit for bit.  The kernels
 * below compute the magnitude's row exactly as the unsigned kernels do (same anchors, same
 * products, same exact-path fix-ups) and negate the sines while the row is still in cache.
 */
#ifndef FASTPE_SIGNED_H
#define FASTPE_SIGNED_H

#include "fastpe_kernels.h"

/* rows [row_begin, row_end) of the spec's float32 table at int64 positions (|p| < 2**32);
 * an anchor is recomputed only when it changes from one row to the next (a run shares it) */
#define FASTPE_DEFINE_SIGNED_KERNELS(SUFFIX, ATTR, HW)                                           \
    ATTR static void fastpe_sinusoid_signed##SUFFIX(                                             \
        const int64_t *FASTPE_RESTRICT positions, const double *FASTPE_RESTRICT turns,           \
        ptrdiff_t n_freq, const double *FASTPE_RESTRICT steps, float *FASTPE_RESTRICT out,       \
        ptrdiff_t d_model, ptrdiff_t row_begin, ptrdiff_t row_end,                               \
        double *FASTPE_RESTRICT scratch)                                                         \
    {                                                                                            \
        double *sa = scratch, *ca = scratch + n_freq;                                            \
        int64_t anchor = -1;                                                                     \
        for (ptrdiff_t row = row_begin; row < row_end; row++) {                                  \
            int64_t signed_p = positions[row];                                                   \
            int64_t p = signed_p < 0 ? -signed_p : signed_p;                                     \
            int64_t m = p % FASTPE_STEPS;                                                        \
            if (p - m != anchor) {                                                               \
                anchor = p - m;                                                                  \
                fastpe_anchor_((double)anchor, turns, n_freq, sa, ca, HW);                       \
            }                                                                                    \
            float *o = out + row * d_model;                                                      \
            const double *cm = steps + 2 * m * n_freq;                                           \
            uint32_t smallest = fastpe_product_row_(sa, ca, cm, cm + n_freq, d_model, o);        \
            fastpe_fix_tiny_((double)p, turns, n_freq, d_model, o, smallest, HW);               \
            if (signed_p < 0)                                                                    \
                for (ptrdiff_t j = 0; j < d_model; j += 2)                                       \
                    o[j] = -o[j];                                                                \
        }                                                                                        \
    }

FASTPE_DEFINE_SIGNED_KERNELS(_baseline, , FASTPE_HW_FLOOR)
#if FASTPE_X86_DISPATCH
FASTPE_DEFINE_SIGNED_KERNELS(_avx2, __attribute__((target("avx2"))), 1)
#endif

static void fastpe_sinusoid_signed(const int64_t *positions, const double *turns,
                                   ptrdiff_t n_freq, const double *steps, float *out,
                                   ptrdiff_t d_model, ptrdiff_t row_begin, ptrdiff_t row_end,
                                   double *scratch, int wide)
{
    FASTPE_DISPATCH_(fastpe_sinusoid_signed, positions, turns, n_freq, steps, out, d_model,
                     row_begin, row_end, scratch);
}

/*
 * The family doubles of n int64 positions (|p| < 2**32): table (n, 2, n_freq) gets the
 * (cos, sin) of fastpe_rope_table with af = 1 at each magnitude (mag: room for n uint32),
 * the sines of negative positions then negated (sin odd, cos even: the values of the
 * negative position itself, as the numba kernel gives them).
 */
static void fastpe_signed_family_block(const int64_t *positions, ptrdiff_t n,
                                       const double *turns, ptrdiff_t n_freq,
                                       const double *steps, double *table, double *anchor,
                                       uint32_t *mag, int wide)
{
    for (ptrdiff_t t = 0; t < n; t++)
        mag[t] = (uint32_t)(positions[t] < 0 ? -positions[t] : positions[t]);
    fastpe_rope_table(mag, turns, n_freq, steps, 1.0, table, 0, n, anchor, wide);
    for (ptrdiff_t t = 0; t < n; t++) {
        if (positions[t] < 0) {
            double *s = table + (2 * t + 1) * n_freq;
            for (ptrdiff_t k = 0; k < n_freq; k++)
                s[k] = -s[k];
        }
    }
}

#endif /* FASTPE_SIGNED_H */
