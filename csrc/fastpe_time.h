/*
 * fastpe.time's kernels: Prophet's Fourier features and TGAT/TGN time encodings of int64
 * ticks, the twin of fastpe/_backends/numba/time.py operation for operation (same bits).
 * The two routes and their error bounds are in fastpe/time/_plan.py: exact residues
 * m_k = k t N mod D (D < 2**62) turned into a double-double fraction, or split words of
 * frac(2**32 v) and frac(v) against the high and low 32 bits of t.  Both end in the exact
 * path's fastpe_sincos_of_turn_ (fastpe_kernels.h, included first).  A zero is stored as
 * +0.0 (v + 0.0), as the reference has it.
 */
#ifndef FASTPE_TIME_H
#define FASTPE_TIME_H

#include <stddef.h>
#include <stdint.h>

#include "fastpe_kernels.h"

/* p + e = a * b exactly (Dekker's product, no FMA: -ffp-contract=off) */
static FASTPE_ALWAYS_INLINE void fastpe_two_prod_(double a, double b, double *p, double *e)
{
    const double split = 134217729.0; /* 2**27 + 1 */
    double pp = a * b;
    double ca = split * a;
    double ah = ca - (ca - a);
    double al = a - ah;
    double cb = split * b;
    double bh = cb - (cb - b);
    double bl = b - bh;
    *p = pp;
    *e = (((ah * bh - pp) + ah * bl) + al * bh) + al * bl;
}

/* m / d (0 <= m < d < 2**62), centred to [-1/2, 1/2], as qh + ql */
static FASTPE_ALWAYS_INLINE void fastpe_residue_turn_(int64_t m, int64_t d, double dh, double dl,
                                                      double *qh_out, double *ql_out)
{
    int64_t mm = 2 * m > d ? m - d : m;
    double mh = (double)mm;
    double ml = (double)(mm - (int64_t)mh);
    double qh = mh / dh;
    double p, pe;
    fastpe_two_prod_(qh, dh, &p, &pe);
    double r = (((mh - p) - pe) + ml) - qh * dl;
    *qh_out = qh;
    *ql_out = r / dh;
}

/*
 * rows [row_begin, row_end) of out (n x 2*order, float or double): sin, cos of harmonic k.
 * The residues m_k (a chain: each the last plus m_1, mod d) and their exact split into the
 * doubles mh + ml (integer work, which AVX2 has no vector conversions for) are made a chunk
 * of harmonics at a time into a small buffer; the loop that turns them into values (a
 * division, Dekker's product, the polynomials) then vectorises.  Each value is the same
 * operations as in fastpe_residue_turn_ (and the numba twin), so the same bits.
 */
#define FASTPE_FOURIER_CHUNK 64
#define FASTPE_DEFINE_FOURIER_EXACT(NAME, T, ATTR)                                               \
    ATTR static void NAME(const int64_t *ticks, int64_t d, const int64_t *table, double dh,    \
                          double dl, ptrdiff_t order, T *out, ptrdiff_t row_begin,              \
                          ptrdiff_t row_end)                                                    \
    {                                                                                           \
        double mhs[FASTPE_FOURIER_CHUNK], mls[FASTPE_FOURIER_CHUNK];                            \
        for (ptrdiff_t i = row_begin; i < row_end; i++) {                                       \
            int64_t x = ticks[i] % d;                                                           \
            if (x < 0)                                                                          \
                x += d;                                                                         \
            int64_t m1 = 0;                                                                     \
            for (int j = 0; j < 16; j++) {                                                      \
                m1 += table[16 * j + ((x >> (4 * j)) & 15)];                                    \
                if (m1 >= d)                                                                    \
                    m1 -= d;                                                                    \
            }                                                                                   \
            int64_t m = 0;                                                                      \
            T *FASTPE_RESTRICT o = out + i * 2 * order;                                         \
            for (ptrdiff_t k0 = 0; k0 < order; k0 += FASTPE_FOURIER_CHUNK) {                    \
                ptrdiff_t nk = order - k0 < FASTPE_FOURIER_CHUNK ? order - k0                   \
                                                                 : FASTPE_FOURIER_CHUNK;        \
                for (ptrdiff_t k = 0; k < nk; k++) {                                            \
                    m += m1;                                                                    \
                    if (m >= d)                                                                 \
                        m -= d;                                                                 \
                    int64_t mm = 2 * m > d ? m - d : m;                                         \
                    double mh = (double)mm;                                                     \
                    mhs[k] = mh;                                                                \
                    mls[k] = (double)(mm - (int64_t)mh);                                        \
                }                                                                               \
                T *FASTPE_RESTRICT ok = o + 2 * k0;                                             \
                for (ptrdiff_t k = 0; k < nk; k++) {                                            \
                    double mh = mhs[k];                                                         \
                    double qh = mh / dh;                                                        \
                    double p, pe, s, c;                                                         \
                    fastpe_two_prod_(qh, dh, &p, &pe);                                          \
                    double r = (((mh - p) - pe) + mls[k]) - qh * dl;                            \
                    fastpe_sincos_of_turn_(qh, r / dh, &s, &c, 1);                              \
                    ok[2 * k] = (T)(s + 0.0);                                                   \
                    ok[2 * k + 1] = (T)(c + 0.0);                                               \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
    }

FASTPE_DEFINE_FOURIER_EXACT(fastpe_fourier_exact_f32_baseline, float, )
FASTPE_DEFINE_FOURIER_EXACT(fastpe_fourier_exact_f64_baseline, double, )
#if FASTPE_X86_DISPATCH
FASTPE_DEFINE_FOURIER_EXACT(fastpe_fourier_exact_f32_avx2, float, __attribute__((target("avx2"))))
FASTPE_DEFINE_FOURIER_EXACT(fastpe_fourier_exact_f64_avx2, double, __attribute__((target("avx2"))))
#endif

/* words: 8 rows of n_freq (A = frac(2**32 v) in rows 0-3, B = frac(v) in rows 4-7) */
static FASTPE_ALWAYS_INLINE void fastpe_word_turn_(double th, double tl, const double *w,
                                                   ptrdiff_t n_freq, ptrdiff_t j, double *s_out,
                                                   double *e_out)
{
    double s = fastpe_centred_(th * w[j]);
    double e = 0.0;
    fastpe_add_turns_(&s, fastpe_centred_(tl * w[4 * n_freq + j]), &e);
    fastpe_add_turns_(&s, fastpe_centred_(th * w[n_freq + j]), &e);
    fastpe_add_turns_(&s, fastpe_centred_(tl * w[5 * n_freq + j]), &e);
    fastpe_add_turns_(&s, fastpe_centred_(th * w[2 * n_freq + j]), &e);
    fastpe_add_turns_(&s, fastpe_centred_(tl * w[6 * n_freq + j]), &e);
    *s_out = s;
    *e_out = e + (th * w[3 * n_freq + j] + tl * w[7 * n_freq + j]);
}

/*
 * rows [row_begin, row_end) of out: cos only (n x n_freq) or sin, cos pairs (n x 2 n_freq).
 * A row whose t is below 2**32 has th = 0: its three products with A are exact zeros, and
 * adding a zero by a two-sum changes neither the sum nor its error, so the row skips them
 * (the same bits, half the products: times in seconds are such rows).
 */
#define FASTPE_TIME_PUT_(T, COS_ONLY)                                                           \
    do {                                                                                        \
        fastpe_sincos_of_turn_(s, e, &sv, &cv, 1);                                              \
        if (COS_ONLY) {                                                                         \
            o[j] = (T)(cv + 0.0);                                                               \
        } else {                                                                                \
            o[2 * j] = (T)(sv + 0.0);                                                           \
            o[2 * j + 1] = (T)(cv + 0.0);                                                       \
        }                                                                                       \
    } while (0)

/* COS_ONLY a constant: each copy has one store pattern, which GCC's cost model vectorises
 * (with cos_only a run-time flag it judged the loop not worth it) */
#define FASTPE_DEFINE_TIME_WORDS(NAME, T, ATTR, COS_ONLY)                                        \
    ATTR static void NAME(const int64_t *ticks, const double *words, ptrdiff_t n_freq, T *out, \
                          ptrdiff_t row_begin, ptrdiff_t row_end)                               \
    {                                                                                           \
        ptrdiff_t width = COS_ONLY ? n_freq : 2 * n_freq;                                       \
        const double *b1 = words + 4 * n_freq, *b2 = words + 5 * n_freq,                        \
                     *b3 = words + 6 * n_freq, *b4 = words + 7 * n_freq;                        \
        for (ptrdiff_t i = row_begin; i < row_end; i++) {                                       \
            int64_t t = ticks[i];                                                               \
            double th = (double)(t >> 32);                                                      \
            double tl = (double)(t & (int64_t)0xFFFFFFFF);                                      \
            T *FASTPE_RESTRICT o = out + i * width;                                             \
            if ((t >> 32) == 0) {                                                               \
                for (ptrdiff_t j = 0; j < n_freq; j++) {                                        \
                    double s = fastpe_centred_(tl * b1[j]), e = 0.0, sv, cv;                    \
                    fastpe_add_turns_(&s, fastpe_centred_(tl * b2[j]), &e);                     \
                    fastpe_add_turns_(&s, fastpe_centred_(tl * b3[j]), &e);                     \
                    e = e + tl * b4[j];                                                         \
                    FASTPE_TIME_PUT_(T, COS_ONLY);                                              \
                }                                                                               \
            } else {                                                                            \
                for (ptrdiff_t j = 0; j < n_freq; j++) {                                        \
                    double s, e, sv, cv;                                                        \
                    fastpe_word_turn_(th, tl, words, n_freq, j, &s, &e);                        \
                    FASTPE_TIME_PUT_(T, COS_ONLY);                                              \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
    }

#define FASTPE_DEFINE_TIME_WORDS_ALL_(SUFFIX, ATTR)                                             \
    FASTPE_DEFINE_TIME_WORDS(fastpe_time_cos_f32##SUFFIX, float, ATTR, 1)                       \
    FASTPE_DEFINE_TIME_WORDS(fastpe_time_cos_f64##SUFFIX, double, ATTR, 1)                      \
    FASTPE_DEFINE_TIME_WORDS(fastpe_time_pairs_f32##SUFFIX, float, ATTR, 0)                     \
    FASTPE_DEFINE_TIME_WORDS(fastpe_time_pairs_f64##SUFFIX, double, ATTR, 0)

FASTPE_DEFINE_TIME_WORDS_ALL_(_baseline, )
#if FASTPE_X86_DISPATCH
FASTPE_DEFINE_TIME_WORDS_ALL_(_avx2, __attribute__((target("avx2"))))
#endif

/* the entry points: the AVX2 copy where wide and the CPU has it (FASTPE_DISPATCH_) */
static void fastpe_fourier_exact_f32(const int64_t *ticks, int64_t d, const int64_t *table,
                                     double dh, double dl, ptrdiff_t order, float *out,
                                     ptrdiff_t row_begin, ptrdiff_t row_end, int wide)
{
    FASTPE_DISPATCH_(fastpe_fourier_exact_f32, ticks, d, table, dh, dl, order, out, row_begin,
                     row_end);
}

static void fastpe_fourier_exact_f64(const int64_t *ticks, int64_t d, const int64_t *table,
                                     double dh, double dl, ptrdiff_t order, double *out,
                                     ptrdiff_t row_begin, ptrdiff_t row_end, int wide)
{
    FASTPE_DISPATCH_(fastpe_fourier_exact_f64, ticks, d, table, dh, dl, order, out, row_begin,
                     row_end);
}

static void fastpe_time_words_f32(const int64_t *ticks, const double *words, ptrdiff_t n_freq,
                                  int cos_only, float *out, ptrdiff_t row_begin,
                                  ptrdiff_t row_end, int wide)
{
    if (cos_only)
        FASTPE_DISPATCH_(fastpe_time_cos_f32, ticks, words, n_freq, out, row_begin, row_end);
    else
        FASTPE_DISPATCH_(fastpe_time_pairs_f32, ticks, words, n_freq, out, row_begin, row_end);
}

static void fastpe_time_words_f64(const int64_t *ticks, const double *words, ptrdiff_t n_freq,
                                  int cos_only, double *out, ptrdiff_t row_begin,
                                  ptrdiff_t row_end, int wide)
{
    if (cos_only)
        FASTPE_DISPATCH_(fastpe_time_cos_f64, ticks, words, n_freq, out, row_begin, row_end);
    else
        FASTPE_DISPATCH_(fastpe_time_pairs_f64, ticks, words, n_freq, out, row_begin, row_end);
}

#endif /* FASTPE_TIME_H */
