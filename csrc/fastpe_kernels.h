/*
 * fastpe_kernels.h -- the C twin of fastpe/_backends/numba/kernels.py.
 *
 * Same algorithm, same operation sequence, same constants.  Compiled without floating-point
 * contraction (-ffp-contract=off) and without -ffast-math, every output is bit-identical to
 * the numba backend's, whatever instruction set runs it.  The algorithm is explained in
 * fastpe/_plans/words.py (each frequency split into words v1..v4 so that p*v1, p*v2, p*v3 are
 * exact) and fastpe/_plans/poly.py (the polynomials).  Kernels assume validated input: positions
 * below 2**32 and the plan of fastpe._plans.words.sinusoid_turns (or frequency_turns, for RoPE).
 * They never fail.
 *
 * The column loops have no libm call and no data-dependent branch, so compilers vectorise
 * them.  On x86-64 built for the baseline ISA (SSE2, what a portable wheel targets), the array
 * kernels exist twice -- baseline and AVX2 -- and the CPU picks at run time; the AVX2 copy is
 * faster and gives the same bits (no FMA: AVX2 alone does not include it, and contraction is
 * off anyway).
 */
#ifndef FASTPE_KERNELS_H
#define FASTPE_KERNELS_H

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Every double operation must round to double: no x87 extended precision (32-bit x86). */
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0
#error "fastpe kernels need FLT_EVAL_METHOD == 0 (SSE2 arithmetic on x86)"
#endif

#if defined(__GNUC__) || defined(__clang__)
#define FASTPE_RESTRICT __restrict__
#define FASTPE_ALWAYS_INLINE inline __attribute__((always_inline))
#elif defined(_MSC_VER)
#define FASTPE_RESTRICT __restrict
#define FASTPE_ALWAYS_INLINE __forceinline
#else
#define FASTPE_RESTRICT
#define FASTPE_ALWAYS_INLINE inline
#endif

/* a hint to fetch the cache line at p for writing; it changes no value */
#if defined(__GNUC__) || defined(__clang__)
#define FASTPE_PREFETCH_W(p) __builtin_prefetch((p), 1, 3)
#else
#define FASTPE_PREFETCH_W(p) ((void)(p))
#endif

/* floor() compiles to one vector instruction (SSE4.1 roundpd, AArch64 frintm)? */
#if defined(__SSE4_1__) || defined(__aarch64__) || defined(_M_ARM64)
#define FASTPE_HW_FLOOR 1
#else
#define FASTPE_HW_FLOOR 0
#endif

/* a baseline x86-64 build with GCC or clang also carries an AVX2 copy of the array kernels */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__AVX2__) \
    && !defined(FASTPE_NO_DISPATCH)
#define FASTPE_X86_DISPATCH 1
#else
#define FASTPE_X86_DISPATCH 0
#endif

/*
 * Taylor coefficients of sin(2*pi*r) and cos(2*pi*r), r in turns: written exactly as the hex
 * strings of fastpe/_plans/poly.py (a test compares fastpe._backends.cython._ext.coefficients() with them).
 */
#define FASTPE_S0 (0x1.921fb54442d18p+2)
#define FASTPE_S1 (-0x1.4abbce625be53p+5)
#define FASTPE_S2 (0x1.466bc6775aae2p+6)
#define FASTPE_S3 (-0x1.32d2cce62bd86p+6)
#define FASTPE_S4 (0x1.50783487ee782p+5)
#define FASTPE_S5 (-0x1.e3074fde8871fp+3)
#define FASTPE_S6 (0x1.e8f434d018d63p+1)
#define FASTPE_S7 (-0x1.6fadb9f155744p-1)

#define FASTPE_C0 (0x1.0000000000000p+0)
#define FASTPE_C1 (-0x1.3bd3cc9be45dep+4)
#define FASTPE_C2 (0x1.03c1f081b5ac4p+6)
#define FASTPE_C3 (-0x1.55d3c7e3cbffap+6)
#define FASTPE_C4 (0x1.e1f506891babbp+5)
#define FASTPE_C5 (-0x1.a6d1f2a204a8cp+4)
#define FASTPE_C6 (0x1.f9d38a3763cc3p+2)
#define FASTPE_C7 (-0x1.b6e24f44b128fp+0)

static const double fastpe_sin_coeffs[8] = {
    FASTPE_S0, FASTPE_S1, FASTPE_S2, FASTPE_S3, FASTPE_S4, FASTPE_S5, FASTPE_S6, FASTPE_S7,
};
static const double fastpe_cos_coeffs[8] = {
    FASTPE_C0, FASTPE_C1, FASTPE_C2, FASTPE_C3, FASTPE_C4, FASTPE_C5, FASTPE_C6, FASTPE_C7,
};

/*
 * floor(x) for 0 <= x < 2**52, which covers every argument below (all are < 2**32).
 *
 * floor is exact, so any correct implementation gives numba's bits.  With hw set (a
 * compile-time constant after inlining) it is floor(), one rounding instruction where the
 * target has it.  On baseline x86-64 (SSE2) floor() cannot be vectorised, so otherwise it is
 * built from (x + 2**52) - 2**52 (x rounded to an integer, exact below 2**52) and a compare;
 * correct under any rounding mode.  The select vectorises once the compiler may evaluate
 * both of its sides (-fno-trapping-math).
 */
static FASTPE_ALWAYS_INLINE double fastpe_floor_(double x, const int hw)
{
    if (hw)
        return floor(x);
    const double big = 0x1p52;
    double t = (x + big) - big;
    return t > x ? t - 1.0 : t;
}

/*
 * (sin, cos) of 2*pi*(t + tail): t in [0, 1) (or the centred [-1/2, 1/2] of the real-position
 * path; hw is 1 there) exactly, tail a small correction.  The reduction
 * to the nearest quarter turn is exact (Sterbenz), then the polynomials and the quadrant's
 * signs; the numba _sincos_of_turn, operation for operation.
 */
static FASTPE_ALWAYS_INLINE void fastpe_sincos_of_turn_(double t, double tail, double *s_out,
                                                        double *c_out, const int hw)
{
    double n = fastpe_floor_(4.0 * t + 0.5, hw);        /* nearest quarter turn, -2..4 */
    double r = (t - 0.25 * n) + tail;                   /* t - n/4 is exact (Sterbenz) */
    double q = n - 4.0 * fastpe_floor_(0.25 * n, hw);   /* quadrant 0..3 */
    double r2 = r * r;
    double sp = r * (FASTPE_S0 + r2 * (FASTPE_S1 + r2 * (FASTPE_S2 + r2 * (FASTPE_S3
                + r2 * (FASTPE_S4 + r2 * (FASTPE_S5 + r2 * (FASTPE_S6 + r2 * FASTPE_S7)))))));
    double cp = FASTPE_C0 + r2 * (FASTPE_C1 + r2 * (FASTPE_C2 + r2 * (FASTPE_C3
                + r2 * (FASTPE_C4 + r2 * (FASTPE_C5 + r2 * (FASTPE_C6 + r2 * FASTPE_C7))))));
    int odd = (q == 1.0) | (q == 3.0);
    double sv = odd ? cp : sp;
    double cv = odd ? sp : cp;
    double ssign = q >= 2.0 ? -1.0 : 1.0;
    double csign = ((q == 1.0) | (q == 2.0)) ? -1.0 : 1.0;
    *s_out = ssign * sv;
    *c_out = csign * cv;
}

static FASTPE_ALWAYS_INLINE void fastpe_sincos_turns_(double p, double v1, double v2, double v3,
                                                      double v4, double *s_out, double *c_out,
                                                      const int hw)
{
    double a = p * v1;
    a = a - fastpe_floor_(a, hw);
    double b = p * v2;
    b = b - fastpe_floor_(b, hw);
    double c = p * v3;
    c = c - fastpe_floor_(c, hw);
    double d = p * v4;
    /* (s, e1) = two_sum(a, b) */
    double s = a + b;
    double bb = s - a;
    double e1 = (a - (s - bb)) + (b - bb);
    /* (t, e2) = two_sum(s, c) */
    double t = s + c;
    double cc = t - s;
    double e2 = (s - (t - cc)) + (c - cc);
    t = t - fastpe_floor_(t, hw);                       /* exact */
    fastpe_sincos_of_turn_(t, (e1 + e2) + d, s_out, c_out, hw);
}

/*
 * (sin, cos) of 2*pi*p*(v1+v2+v3+v4) in double precision, for an integer p < 2**32.
 *
 * Operation for operation the numba sincos_turns: p*v1 .. p*v3 are exact (21-bit words times
 * a 32-bit integer) and so are their fractional parts; two error-free two-sums keep the
 * reduced argument to ~2**-85 turns however close p*v comes to a quarter turn.
 */
static inline void fastpe_sincos_turns(double p, double v1, double v2, double v3, double v4,
                                       double *s, double *c)
{
    fastpe_sincos_turns_(p, v1, v2, v3, v4, s, c, FASTPE_HW_FLOOR);
}

/*
 * Rows.  Every value is defined the same way whichever kernel writes it (fastpe/_plans/words.py,
 * "anchored products"): with a = p - p % FASTPE_STEPS and m = p % FASTPE_STEPS,
 *     sin(p w) = sin(a w) cos(m w) + cos(a w) sin(m w),  cos likewise,
 * from the exact-path doubles of the anchor and of the cached step, rounded to float32 --
 * unless that float32 is below 2**-14 in magnitude, where the product's absolute error
 * (< 2**-46) would be too large a relative error: then the pair comes from the exact path at
 * p directly.  One definition for forward and for tables, as in the numba kernels.
 * FASTPE_STEPS and the threshold 2**-14 are fastpe/_plans/words.py's STEPS and TINY: the
 * cython backend refuses a build whose values differ, and tests/backends/test_one_home.py checks them.
 */
#define FASTPE_STEPS 64
/* the threshold as a double (RoPE's unscaled products) and as a float (float32 row values) */
#define FASTPE_TINY64 (0x1p-14)
#define FASTPE_TINY ((float)FASTPE_TINY64)

/* sa[i], ca[i] = exact-path sin, cos at position a, for every frequency */
static FASTPE_ALWAYS_INLINE void fastpe_anchor_(double a, const double *FASTPE_RESTRICT turns,
                                                ptrdiff_t n_freq, double *FASTPE_RESTRICT sa,
                                                double *FASTPE_RESTRICT ca, const int hw)
{
    const double *FASTPE_RESTRICT v1 = turns;
    const double *FASTPE_RESTRICT v2 = turns + n_freq;
    const double *FASTPE_RESTRICT v3 = turns + 2 * n_freq;
    const double *FASTPE_RESTRICT v4 = turns + 3 * n_freq;
    for (ptrdiff_t i = 0; i < n_freq; i++) {
        double s, c;
        fastpe_sincos_turns_(a, v1[i], v2[i], v3[i], v4[i], &s, &c, hw);
        sa[i] = s;
        ca[i] = c;
    }
}

/* |v|'s bit pattern: for finite floats, ordered as |v| is */
static FASTPE_ALWAYS_INLINE uint32_t fastpe_abs_bits_(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u & 0x7FFFFFFFu;
}

/*
 * One row (d_model float32) by anchored products; a lone sine last when d_model is odd.
 * Returns the smallest |value|'s bit pattern, found in the same pass (an integer min
 * vectorises; a float min would not), so that the rare row holding a value below TINY is
 * found without reading the row again.
 */
static FASTPE_ALWAYS_INLINE uint32_t fastpe_product_row_(const double *FASTPE_RESTRICT sa,
                                                         const double *FASTPE_RESTRICT ca,
                                                         const double *FASTPE_RESTRICT cm,
                                                         const double *FASTPE_RESTRICT sm,
                                                         ptrdiff_t d_model,
                                                         float *FASTPE_RESTRICT o)
{
    ptrdiff_t n_pairs = d_model / 2;
    uint32_t smallest = 0x7FFFFFFFu;
    for (ptrdiff_t i = 0; i < n_pairs; i++) {
        float a = (float)(sa[i] * cm[i] + ca[i] * sm[i]);
        float b = (float)(ca[i] * cm[i] - sa[i] * sm[i]);
        o[2 * i] = a;
        o[2 * i + 1] = b;
        uint32_t ua = fastpe_abs_bits_(a), ub = fastpe_abs_bits_(b);
        uint32_t u = ua < ub ? ua : ub;
        smallest = u < smallest ? u : smallest;
    }
    if (d_model & 1) {
        float a = (float)(sa[n_pairs] * cm[n_pairs] + ca[n_pairs] * sm[n_pairs]);
        o[d_model - 1] = a;
        uint32_t u = fastpe_abs_bits_(a);
        smallest = u < smallest ? u : smallest;
    }
    return smallest;
}

/*
 * Rows p and p + 1 of one anchor (steps cm, sm and cm2, sm2) into o and o2: the values of two
 * fastpe_product_row_ calls, each anchor pair read once for both rows (the loop is bound by
 * its loads and conversions, and this halves the anchor's loads).  The smallest |value|'s bit
 * pattern of each row goes to small[0], small[1].
 */
static FASTPE_ALWAYS_INLINE void fastpe_product_rows2_(const double *FASTPE_RESTRICT sa,
                                                       const double *FASTPE_RESTRICT ca,
                                                       const double *FASTPE_RESTRICT cm,
                                                       const double *FASTPE_RESTRICT sm,
                                                       const double *FASTPE_RESTRICT cm2,
                                                       const double *FASTPE_RESTRICT sm2,
                                                       ptrdiff_t d_model, float *FASTPE_RESTRICT o,
                                                       float *FASTPE_RESTRICT o2, uint32_t *small)
{
    ptrdiff_t n_pairs = d_model / 2;
    uint32_t s1 = 0x7FFFFFFFu, s2 = 0x7FFFFFFFu;
    for (ptrdiff_t i = 0; i < n_pairs; i++) {
        double as = sa[i], ac = ca[i];
        float a = (float)(as * cm[i] + ac * sm[i]);
        float b = (float)(ac * cm[i] - as * sm[i]);
        float a2 = (float)(as * cm2[i] + ac * sm2[i]);
        float b2 = (float)(ac * cm2[i] - as * sm2[i]);
        o[2 * i] = a;
        o[2 * i + 1] = b;
        o2[2 * i] = a2;
        o2[2 * i + 1] = b2;
        uint32_t ua = fastpe_abs_bits_(a), ub = fastpe_abs_bits_(b);
        uint32_t u = ua < ub ? ua : ub;
        s1 = u < s1 ? u : s1;
        ua = fastpe_abs_bits_(a2);
        ub = fastpe_abs_bits_(b2);
        u = ua < ub ? ua : ub;
        s2 = u < s2 ? u : s2;
    }
    if (d_model & 1) {
        float a = (float)(sa[n_pairs] * cm[n_pairs] + ca[n_pairs] * sm[n_pairs]);
        float a2 = (float)(sa[n_pairs] * cm2[n_pairs] + ca[n_pairs] * sm2[n_pairs]);
        o[d_model - 1] = a;
        o2[d_model - 1] = a2;
        uint32_t u = fastpe_abs_bits_(a), u2 = fastpe_abs_bits_(a2);
        s1 = u < s1 ? u : s1;
        s2 = u2 < s2 ? u2 : s2;
    }
    small[0] = s1;
    small[1] = s2;
}

/* FASTPE_TINY's bit pattern (0x38800000 for 2**-14) */
#define FASTPE_TINY_BITS 0x38800000u

/* recompute by the exact path at p the pairs of row o holding a value below 2**-14 (rare);
 * smallest: fastpe_product_row_'s result for the row */
static FASTPE_ALWAYS_INLINE void fastpe_fix_tiny_(double p, const double *FASTPE_RESTRICT turns,
                                                  ptrdiff_t n_freq, ptrdiff_t d_model,
                                                  float *FASTPE_RESTRICT o, uint32_t smallest,
                                                  const int hw)
{
    if (smallest >= FASTPE_TINY_BITS)
        return;
    for (ptrdiff_t i = 0; i < n_freq; i++) {
        ptrdiff_t j = 2 * i;
        int has_cos = j + 1 < d_model;
        if (fabsf(o[j]) < FASTPE_TINY || (has_cos && fabsf(o[j + 1]) < FASTPE_TINY)) {
            double s, c;
            fastpe_sincos_turns_(p, turns[i], turns[n_freq + i], turns[2 * n_freq + i],
                                 turns[3 * n_freq + i], &s, &c, hw);
            o[j] = (float)s;
            if (has_cos)
                o[j + 1] = (float)c;
        }
    }
}

/*
 * The array kernels, rows [row_begin, row_end) of out (rows, d_model):
 *   fastpe_sinusoid_forward: position positions[row];  fastpe_sinusoid_range: start + row.
 * turns: the (4, n_freq) plan; steps: the (FASTPE_STEPS, 2, n_freq) table of exact
 * (cos, sin) of m w (fastpe_sincos_steps); scratch: room for 2 * n_freq doubles.  An anchor
 * is recomputed only when it changes from one row to the next.
 * Defined once per instruction set by this macro (SUFFIX names the copy, ATTR targets it).
 */
#define FASTPE_DEFINE_ARRAY_KERNELS(SUFFIX, ATTR, HW)                                            \
    ATTR static void fastpe_sinusoid_forward##SUFFIX(                                            \
        const uint32_t *FASTPE_RESTRICT positions, const double *FASTPE_RESTRICT turns,          \
        ptrdiff_t n_freq, const double *FASTPE_RESTRICT steps, float *FASTPE_RESTRICT out,       \
        ptrdiff_t d_model, ptrdiff_t row_begin, ptrdiff_t row_end,                               \
        double *FASTPE_RESTRICT scratch)                                                         \
    {                                                                                            \
        double *sa = scratch, *ca = scratch + n_freq;                                            \
        int64_t anchor = -1;                                                                     \
        for (ptrdiff_t row = row_begin; row < row_end;) {                                        \
            int64_t p = (int64_t)positions[row];                                                 \
            int64_t m = p % FASTPE_STEPS;                                                        \
            if (p - m != anchor) {                                                               \
                anchor = p - m;                                                                  \
                fastpe_anchor_((double)anchor, turns, n_freq, sa, ca, HW);                       \
            }                                                                                    \
            float *o = out + row * d_model;                                                      \
            const double *cm = steps + 2 * m * n_freq;                                           \
            if (row + 1 < row_end && m + 1 < FASTPE_STEPS                                        \
                && (int64_t)positions[row + 1] == p + 1) { /* the same anchor */                 \
                uint32_t small[2];                                                               \
                fastpe_product_rows2_(sa, ca, cm, cm + n_freq, cm + 2 * n_freq, cm + 3 * n_freq, \
                                      d_model, o, o + d_model, small);                           \
                fastpe_fix_tiny_((double)p, turns, n_freq, d_model, o, small[0], HW);           \
                fastpe_fix_tiny_((double)(p + 1), turns, n_freq, d_model, o + d_model, small[1], \
                                 HW);                                                            \
                row += 2;                                                                        \
                continue;                                                                        \
            }                                                                                    \
            uint32_t smallest = fastpe_product_row_(sa, ca, cm, cm + n_freq, d_model, o);        \
            fastpe_fix_tiny_((double)p, turns, n_freq, d_model, o, smallest, HW);               \
            row++;                                                                               \
        }                                                                                        \
    }                                                                                            \
    ATTR static void fastpe_sinusoid_range##SUFFIX(                                              \
        uint64_t start, const double *FASTPE_RESTRICT turns, ptrdiff_t n_freq,                   \
        const double *FASTPE_RESTRICT steps, float *FASTPE_RESTRICT out, ptrdiff_t d_model,      \
        ptrdiff_t row_begin, ptrdiff_t row_end, double *FASTPE_RESTRICT scratch)                 \
    {                                                                                            \
        double *sa = scratch, *ca = scratch + n_freq;                                            \
        int64_t anchor = -1;                                                                     \
        for (ptrdiff_t row = row_begin; row < row_end;) {                                        \
            int64_t p = (int64_t)(start + (uint64_t)row);                                        \
            int64_t m = p % FASTPE_STEPS;                                                        \
            if (p - m != anchor) {                                                               \
                anchor = p - m;                                                                  \
                fastpe_anchor_((double)anchor, turns, n_freq, sa, ca, HW);                       \
            }                                                                                    \
            float *o = out + row * d_model;                                                      \
            const double *cm = steps + 2 * m * n_freq;                                           \
            if (row + 1 < row_end && m + 1 < FASTPE_STEPS) { /* p + 1: the same anchor */       \
                uint32_t small[2];                                                               \
                fastpe_product_rows2_(sa, ca, cm, cm + n_freq, cm + 2 * n_freq, cm + 3 * n_freq, \
                                      d_model, o, o + d_model, small);                           \
                fastpe_fix_tiny_((double)p, turns, n_freq, d_model, o, small[0], HW);           \
                fastpe_fix_tiny_((double)(p + 1), turns, n_freq, d_model, o + d_model, small[1], \
                                 HW);                                                            \
                row += 2;                                                                        \
                continue;                                                                        \
            }                                                                                    \
            uint32_t smallest = fastpe_product_row_(sa, ca, cm, cm + n_freq, d_model, o);        \
            fastpe_fix_tiny_((double)p, turns, n_freq, d_model, o, smallest, HW);               \
            row++;                                                                               \
        }                                                                                        \
    }

/*
 * RoPE: the twin of the "RoPE" section of fastpe/_backends/numba/kernels.py.  For position p and
 * frequency f_i (the exact value of a double inv_freq, words from frequency_turns):
 *     c, s = the anchored product above, unless |c| or |s| < 2**-14, then the exact path at p;
 *     C = af * c, S = af * s (an exact zero written +0.0, as the exact value 0 is; a product
 *     of two non-zero numbers that underflows keeps its sign: fastpe_scaled_).
 * The tiny test is on the unscaled product (its error, < 2**-46 absolute, stays below 2**-32
 * relative for any attention factor af).  cos_sin writes (float)C, (float)S; apply writes
 * (float)(x1*C - x2*S), (float)(x2*C + x1*S) from the float32 inputs widened to double.
 * Same operations in the same order as numba, so the same bits.
 */
/* positions per work item of apply where one token's heads are adjacent ((tokens, heads, dim)):
 * an item is every head of ROPE_SEQ tokens */
#define FASTPE_ROPE_SEQ 16
/* positions per work item of apply where one head's rows are adjacent ((batch, heads, seq,
 * dim)): an item is ROPE_RUN rows of ROPE_HEADS heads (q's heads, then k's), each table row
 * read once for the item's heads, the items in memory order, so a block of items is
 * ROPE_HEADS streams through x.  Items of every head at the same positions (the table read
 * once for all heads) made 64 short streams 2 MiB apart, which the prefetchers and the
 * caches' sets serve poorly: one thread took 15 ms where one head at a time took 10 and
 * four heads 7.4 (a quarter of one head's table reads) */
#define FASTPE_ROPE_RUN 256
#define FASTPE_ROPE_HEADS 4

/* apply's items are runs of a few heads' rows (FASTPE_ROPE_RUN, FASTPE_ROPE_HEADS) when both
 * inputs have a head's rows adjacent, else blocks of tokens (FASTPE_ROPE_SEQ) */
static FASTPE_ALWAYS_INLINE int fastpe_rope_head_major_(ptrdiff_t shq, ptrdiff_t ssq, ptrdiff_t hk,
                                                        ptrdiff_t shk, ptrdiff_t ssk)
{
    return shq >= ssq && (hk == 0 || shk >= ssk);
}

/* the number of apply's work items */
static ptrdiff_t fastpe_rope_apply_items(ptrdiff_t hq, ptrdiff_t shq, ptrdiff_t ssq, ptrdiff_t hk,
                                         ptrdiff_t shk, ptrdiff_t ssk, ptrdiff_t n_batch,
                                         ptrdiff_t n_seq)
{
    if (fastpe_rope_head_major_(shq, ssq, hk, shk, ssk))
        return n_batch * ((hq + hk + FASTPE_ROPE_HEADS - 1) / FASTPE_ROPE_HEADS)
               * ((n_seq + FASTPE_ROPE_RUN - 1) / FASTPE_ROPE_RUN);
    return n_batch * ((n_seq + FASTPE_ROPE_SEQ - 1) / FASTPE_ROPE_SEQ);
}

/* c_out[i], s_out[i] = C, S of position p from anchor (sa, ca) and step (cm, sm) */
/* af * v rounded once; +0.0 where af or v is zero (the exact value 0: + 0.0 turns -0.0 into
 * +0.0), while a product of two non-zero numbers keeps its sign even when it underflows (the
 * correct rounding of a non-zero value); the numba twin is _scaled */
static FASTPE_ALWAYS_INLINE double fastpe_scaled_(double af, double v)
{
    double r = af * v;
    return (af == 0.0 || v == 0.0) ? r + 0.0 : r;
}

static FASTPE_ALWAYS_INLINE void fastpe_rope_row_(double p, const double *FASTPE_RESTRICT turns,
                                                  ptrdiff_t n_freq,
                                                  const double *FASTPE_RESTRICT sa,
                                                  const double *FASTPE_RESTRICT ca,
                                                  const double *FASTPE_RESTRICT cm,
                                                  const double *FASTPE_RESTRICT sm, double af,
                                                  double *FASTPE_RESTRICT c_out,
                                                  double *FASTPE_RESTRICT s_out, const int hw)
{
    int any = 0;
    for (ptrdiff_t i = 0; i < n_freq; i++) { /* branch-free: vectorises */
        double c = ca[i] * cm[i] - sa[i] * sm[i];
        double s = sa[i] * cm[i] + ca[i] * sm[i];
        c_out[i] = c;
        s_out[i] = s;
        any |= (fabs(c) < FASTPE_TINY64) | (fabs(s) < FASTPE_TINY64);
    }
    if (any) { /* rare: about one (position, frequency) in 13,000 */
        for (ptrdiff_t i = 0; i < n_freq; i++) {
            if (fabs(c_out[i]) < FASTPE_TINY64 || fabs(s_out[i]) < FASTPE_TINY64) {
                double s, c;
                fastpe_sincos_turns_(p, turns[i], turns[n_freq + i], turns[2 * n_freq + i],
                                     turns[3 * n_freq + i], &s, &c, hw);
                c_out[i] = c;
                s_out[i] = s;
            }
        }
    }
    for (ptrdiff_t i = 0; i < n_freq; i++) {
        c_out[i] = fastpe_scaled_(af, c_out[i]);
        s_out[i] = fastpe_scaled_(af, s_out[i]);
    }
}

/* float32 C and S of one product, written to the two columns of its frequency */
#define FASTPE_ROPE_PUT_(C0, C1, S0, S1, c, s)                                                   \
    do {                                                                                         \
        float cf_ = (float)fastpe_scaled_(af, (c)), sf_ = (float)fastpe_scaled_(af, (s));        \
        C0 = cf_;                                                                                \
        C1 = cf_;                                                                                \
        S0 = sf_;                                                                                \
        S1 = sf_;                                                                                \
    } while (0)

/* one row of cos_sin, the same values as fastpe_rope_row_ rounded to float32, in one pass:
 * the products go straight to the output; the rare rows with a tiny value are fixed after
 * (the products recomputed, identically).  NeoX (stride 1): frequency i in oc0[i] and
 * oc1[i] (oc1 = oc0 + n_freq); GPT-J (stride 2): in oc0[2i] and oc0[2i + 1] (oc1 unused).
 * Sines likewise. */
static FASTPE_ALWAYS_INLINE void fastpe_rope_cs_row_(double p, const double *FASTPE_RESTRICT turns,
                                                     ptrdiff_t n_freq,
                                                     const double *FASTPE_RESTRICT sa,
                                                     const double *FASTPE_RESTRICT ca,
                                                     const double *FASTPE_RESTRICT cm,
                                                     const double *FASTPE_RESTRICT sm, double af,
                                                     float *FASTPE_RESTRICT oc0,
                                                     float *FASTPE_RESTRICT oc1,
                                                     float *FASTPE_RESTRICT os0,
                                                     float *FASTPE_RESTRICT os1,
                                                     ptrdiff_t stride, const int hw)
{
    int any = 0;
    if (stride == 1) {
        for (ptrdiff_t i = 0; i < n_freq; i++) {
            double c = ca[i] * cm[i] - sa[i] * sm[i];
            double s = sa[i] * cm[i] + ca[i] * sm[i];
            any |= (fabs(c) < FASTPE_TINY64) | (fabs(s) < FASTPE_TINY64);
            FASTPE_ROPE_PUT_(oc0[i], oc1[i], os0[i], os1[i], c, s);
        }
    } else {
        for (ptrdiff_t i = 0; i < n_freq; i++) {
            double c = ca[i] * cm[i] - sa[i] * sm[i];
            double s = sa[i] * cm[i] + ca[i] * sm[i];
            any |= (fabs(c) < FASTPE_TINY64) | (fabs(s) < FASTPE_TINY64);
            FASTPE_ROPE_PUT_(oc0[2 * i], oc0[2 * i + 1], os0[2 * i], os0[2 * i + 1], c, s);
        }
    }
    if (!any)
        return;
    for (ptrdiff_t i = 0; i < n_freq; i++) {
        double c = ca[i] * cm[i] - sa[i] * sm[i];
        double s = sa[i] * cm[i] + ca[i] * sm[i];
        if (fabs(c) < FASTPE_TINY64 || fabs(s) < FASTPE_TINY64) {
            fastpe_sincos_turns_(p, turns[i], turns[n_freq + i], turns[2 * n_freq + i],
                                 turns[3 * n_freq + i], &s, &c, hw);
            if (stride == 1)
                FASTPE_ROPE_PUT_(oc0[i], oc1[i], os0[i], os1[i], c, s);
            else
                FASTPE_ROPE_PUT_(oc0[2 * i], oc0[2 * i + 1], os0[2 * i], os0[2 * i + 1], c, s);
        }
    }
}

/* HF rotate_half pairs (i, i + n) of one row: a = x, b = x + n */
static FASTPE_ALWAYS_INLINE void fastpe_rotate_neox_(float *FASTPE_RESTRICT a,
                                                     float *FASTPE_RESTRICT b,
                                                     const double *FASTPE_RESTRICT c,
                                                     const double *FASTPE_RESTRICT s,
                                                     ptrdiff_t n)
{
    for (ptrdiff_t i = 0; i < n; i++) {
        double x1 = (double)a[i];
        double x2 = (double)b[i];
        a[i] = (float)(x1 * c[i] - x2 * s[i]);
        b[i] = (float)(x2 * c[i] + x1 * s[i]);
    }
}

/* GPT-J pairs (2i, 2i + 1) of one row */
static FASTPE_ALWAYS_INLINE void fastpe_rotate_gptj_(float *FASTPE_RESTRICT r,
                                                     const double *FASTPE_RESTRICT c,
                                                     const double *FASTPE_RESTRICT s,
                                                     ptrdiff_t n)
{
    for (ptrdiff_t i = 0; i < n; i++) {
        double x1 = (double)r[2 * i];
        double x2 = (double)r[2 * i + 1];
        r[2 * i] = (float)(x1 * c[i] - x2 * s[i]);
        r[2 * i + 1] = (float)(x2 * c[i] + x1 * s[i]);
    }
}

#if FASTPE_X86_DISPATCH
#include <immintrin.h>
/*
 * fastpe_rotate_neox_ 4 (AVX2) or 8 (AVX-512) pairs at a time, each half's float32 widened
 * from one 128- or 256-bit load and narrowed into one such store: GCC's own vectors of the
 * loop load twice as many floats and split and join every half with lane shuffles, which
 * bound the loop (one thread, q and k 1x32x4096x128, four heads an item: 7.4 -> 6.6 ms in
 * the AVX2 copy).  The same operations in the same order, so the same bits.
 */
__attribute__((target("avx2"))) static inline void fastpe_rotate_neox_avx2_(
    float *FASTPE_RESTRICT a, float *FASTPE_RESTRICT b, const double *FASTPE_RESTRICT c,
    const double *FASTPE_RESTRICT s, ptrdiff_t n)
{
    ptrdiff_t i = 0;
    for (; i + 4 <= n; i += 4) {
        __m256d x1 = _mm256_cvtps_pd(_mm_loadu_ps(a + i));
        __m256d x2 = _mm256_cvtps_pd(_mm_loadu_ps(b + i));
        __m256d ci = _mm256_loadu_pd(c + i), si = _mm256_loadu_pd(s + i);
        _mm_storeu_ps(a + i, _mm256_cvtpd_ps(_mm256_sub_pd(_mm256_mul_pd(x1, ci),
                                                           _mm256_mul_pd(x2, si))));
        _mm_storeu_ps(b + i, _mm256_cvtpd_ps(_mm256_add_pd(_mm256_mul_pd(x2, ci),
                                                           _mm256_mul_pd(x1, si))));
    }
    fastpe_rotate_neox_(a + i, b + i, c + i, s + i, n - i);
}

__attribute__((target("avx512f"))) static inline void fastpe_rotate_neox_avx512_(
    float *FASTPE_RESTRICT a, float *FASTPE_RESTRICT b, const double *FASTPE_RESTRICT c,
    const double *FASTPE_RESTRICT s, ptrdiff_t n)
{
    ptrdiff_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m512d x1 = _mm512_cvtps_pd(_mm256_loadu_ps(a + i));
        __m512d x2 = _mm512_cvtps_pd(_mm256_loadu_ps(b + i));
        __m512d ci = _mm512_loadu_pd(c + i), si = _mm512_loadu_pd(s + i);
        _mm256_storeu_ps(a + i, _mm512_cvtpd_ps(_mm512_sub_pd(_mm512_mul_pd(x1, ci),
                                                              _mm512_mul_pd(x2, si))));
        _mm256_storeu_ps(b + i, _mm512_cvtpd_ps(_mm512_add_pd(_mm512_mul_pd(x2, ci),
                                                              _mm512_mul_pd(x1, si))));
    }
    fastpe_rotate_neox_(a + i, b + i, c + i, s + i, n - i);
}
#endif

/* which NeoX row loop a copy of the RoPE kernels runs: 0 the compiler's, 1 AVX2, 2 AVX-512 */
#define FASTPE_ROPE_VEC_baseline 0
#define FASTPE_ROPE_VEC_avx2 1
#define FASTPE_ROPE_VEC_avx512 2

/* one row of x, by the table row c (n_freq C values, then n_freq S values); vec as above
 * (a constant of the copy, so the other loops compile away) */
static FASTPE_ALWAYS_INLINE void fastpe_rotate_(float *row, const double *c, ptrdiff_t n_freq,
                                                int neox, const int vec)
{
#if FASTPE_X86_DISPATCH
    if (neox && vec == 2) {
        fastpe_rotate_neox_avx512_(row, row + n_freq, c, c + n_freq, n_freq);
        return;
    }
    if (neox && vec == 1) {
        fastpe_rotate_neox_avx2_(row, row + n_freq, c, c + n_freq, n_freq);
        return;
    }
#else
    (void)vec;
#endif
    if (neox)
        fastpe_rotate_neox_(row, row + n_freq, c, c + n_freq, n_freq);
    else
        fastpe_rotate_gptj_(row, c, c + n_freq, n_freq);
}

/* rows s in [lo, hi) of one head of x (row s at x + s * s_seq), row s by table row t0 + s */
static FASTPE_ALWAYS_INLINE void fastpe_rotate_run_(float *x, ptrdiff_t s_seq, ptrdiff_t lo,
                                                    ptrdiff_t hi, const double *table,
                                                    ptrdiff_t t0, ptrdiff_t n_freq, int neox,
                                                    const int vec)
{
    for (ptrdiff_t s = lo; s < hi; s++)
        fastpe_rotate_(x + s * s_seq, table + 2 * (t0 + s) * n_freq, n_freq, neox, vec);
}

/* rows (h, s) of one batch of x, every head and s in [lo, hi), in memory order; row (h, s)
 * reads table row t0 + s */
static FASTPE_ALWAYS_INLINE void fastpe_rotate_rows_(float *x, ptrdiff_t n_heads,
                                                     ptrdiff_t s_head, ptrdiff_t s_seq,
                                                     ptrdiff_t lo, ptrdiff_t hi,
                                                     const double *table, ptrdiff_t t0,
                                                     ptrdiff_t n_freq, int neox, const int vec)
{
    if (s_head >= s_seq) { /* one head's rows adjacent (beside a k or q whose are not) */
        for (ptrdiff_t h = 0; h < n_heads; h++)
            fastpe_rotate_run_(x + h * s_head, s_seq, lo, hi, table, t0, n_freq, neox, vec);
    } else { /* (tokens, heads, dim): one token's heads are adjacent */
        for (ptrdiff_t s = lo; s < hi; s++)
            for (ptrdiff_t h = 0; h < n_heads; h++)
                fastpe_rotate_(x + h * s_head + s * s_seq, table + 2 * (t0 + s) * n_freq, n_freq,
                               neox, vec);
    }
}

#define FASTPE_DEFINE_ROPE_KERNELS(SUFFIX, ATTR, HW)                                             \
    ATTR static void fastpe_rope_table##SUFFIX(                                                  \
        const uint32_t *FASTPE_RESTRICT positions, const double *FASTPE_RESTRICT turns,          \
        ptrdiff_t n_freq, const double *FASTPE_RESTRICT steps, double af,                        \
        double *FASTPE_RESTRICT table, ptrdiff_t row_begin, ptrdiff_t row_end,                   \
        double *FASTPE_RESTRICT scratch)                                                         \
    {                                                                                            \
        double *sa = scratch, *ca = scratch + n_freq;                                            \
        int64_t anchor = -1;                                                                     \
        for (ptrdiff_t t = row_begin; t < row_end; t++) {                                        \
            int64_t p = (int64_t)positions[t];                                                   \
            int64_t m = p % FASTPE_STEPS;                                                        \
            if (p - m != anchor) {                                                               \
                anchor = p - m;                                                                  \
                fastpe_anchor_((double)anchor, turns, n_freq, sa, ca, HW);                       \
            }                                                                                    \
            const double *cm = steps + 2 * m * n_freq;                                           \
            double *o = table + 2 * t * n_freq;                                                  \
            fastpe_rope_row_((double)p, turns, n_freq, sa, ca, cm, cm + n_freq, af, o,           \
                             o + n_freq, HW);                                                    \
        }                                                                                        \
    }                                                                                            \
    ATTR static void fastpe_rope_cos_sin##SUFFIX(                                                \
        const uint32_t *FASTPE_RESTRICT positions, const double *FASTPE_RESTRICT turns,          \
        ptrdiff_t n_freq, const double *FASTPE_RESTRICT steps, double af, int neox,              \
        float *FASTPE_RESTRICT out_cos, float *FASTPE_RESTRICT out_sin, ptrdiff_t row_begin,     \
        ptrdiff_t row_end, double *FASTPE_RESTRICT scratch)                                      \
    {                                                                                            \
        double *sa = scratch, *ca = scratch + n_freq;                                            \
        int64_t anchor = -1;                                                                     \
        ptrdiff_t second = neox ? n_freq : 0, stride = neox ? 1 : 2;                             \
        for (ptrdiff_t t = row_begin; t < row_end; t++) {                                        \
            int64_t p = (int64_t)positions[t];                                                   \
            int64_t m = p % FASTPE_STEPS;                                                        \
            if (p - m != anchor) {                                                               \
                anchor = p - m;                                                                  \
                fastpe_anchor_((double)anchor, turns, n_freq, sa, ca, HW);                       \
            }                                                                                    \
            const double *cm = steps + 2 * m * n_freq;                                           \
            float *oc = out_cos + 2 * t * n_freq;                                                \
            float *os = out_sin + 2 * t * n_freq;                                                \
            fastpe_rope_cs_row_((double)p, turns, n_freq, sa, ca, cm, cm + n_freq, af, oc,       \
                                oc + second, os, os + second, stride, HW);                       \
        }                                                                                        \
    }                                                                                            \
    ATTR static void fastpe_rope_apply##SUFFIX(                                                  \
        float *xq, ptrdiff_t hq, ptrdiff_t bq, ptrdiff_t shq, ptrdiff_t ssq, float *xk,          \
        ptrdiff_t hk, ptrdiff_t bk, ptrdiff_t shk, ptrdiff_t ssk, ptrdiff_t s_begin,             \
        ptrdiff_t s_end, const double *table, ptrdiff_t n_freq, ptrdiff_t pos_bstride,           \
        int neox, ptrdiff_t item_begin, ptrdiff_t item_end)                                      \
    {                                                                                            \
        if (fastpe_rope_head_major_(shq, ssq, hk, shk, ssk)) {                                   \
            /* item (b, group of ROPE_HEADS heads, run): q's heads, then k's */                 \
            ptrdiff_t n_run = (s_end - s_begin + FASTPE_ROPE_RUN - 1) / FASTPE_ROPE_RUN;         \
            ptrdiff_t n_head = hq + hk;                                                          \
            ptrdiff_t n_group = (n_head + FASTPE_ROPE_HEADS - 1) / FASTPE_ROPE_HEADS;            \
            for (ptrdiff_t item = item_begin; item < item_end; item++) {                         \
                ptrdiff_t group = item / n_run % n_group, b = item / n_run / n_group;            \
                ptrdiff_t lo = s_begin + (item % n_run) * FASTPE_ROPE_RUN;                       \
                ptrdiff_t hi = lo + FASTPE_ROPE_RUN < s_end ? lo + FASTPE_ROPE_RUN : s_end;      \
                ptrdiff_t t0 = b * pos_bstride - s_begin;                                        \
                float *x[FASTPE_ROPE_HEADS];                                                     \
                ptrdiff_t ss[FASTPE_ROPE_HEADS];                                                 \
                int n = 0;                                                                       \
                for (ptrdiff_t h = group * FASTPE_ROPE_HEADS;                                    \
                     h < n_head && n < FASTPE_ROPE_HEADS; h++, n++) {                            \
                    x[n] = h < hq ? xq + b * bq + h * shq : xk + b * bk + (h - hq) * shk;        \
                    ss[n] = h < hq ? ssq : ssk;                                                  \
                }                                                                                \
                for (ptrdiff_t s = lo; s < hi; s++) {                                            \
                    const double *c = table + 2 * (t0 + s) * n_freq;                             \
                    for (int j = 0; j < n; j++)                                                  \
                        fastpe_rotate_(x[j] + s * ss[j], c, n_freq, neox,                        \
                                       FASTPE_ROPE_VEC##SUFFIX);                                 \
                }                                                                                \
            }                                                                                    \
            return;                                                                              \
        }                                                                                        \
        ptrdiff_t n_sb = (s_end - s_begin + FASTPE_ROPE_SEQ - 1) / FASTPE_ROPE_SEQ;              \
        for (ptrdiff_t item = item_begin; item < item_end; item++) {                             \
            ptrdiff_t b = item / n_sb;                                                           \
            ptrdiff_t lo = s_begin + (item % n_sb) * FASTPE_ROPE_SEQ;                            \
            ptrdiff_t hi = lo + FASTPE_ROPE_SEQ < s_end ? lo + FASTPE_ROPE_SEQ : s_end;          \
            ptrdiff_t t0 = b * pos_bstride - s_begin;                                            \
            fastpe_rotate_rows_(xq + b * bq, hq, shq, ssq, lo, hi, table, t0, n_freq, neox,      \
                                FASTPE_ROPE_VEC##SUFFIX);                                        \
            if (hk)                                                                              \
                fastpe_rotate_rows_(xk + b * bk, hk, shk, ssk, lo, hi, table, t0, n_freq, neox,  \
                                    FASTPE_ROPE_VEC##SUFFIX);                                    \
        }                                                                                        \
    }

FASTPE_DEFINE_ARRAY_KERNELS(_baseline, , FASTPE_HW_FLOOR)
FASTPE_DEFINE_ROPE_KERNELS(_baseline, , FASTPE_HW_FLOOR)

#if FASTPE_X86_DISPATCH
FASTPE_DEFINE_ARRAY_KERNELS(_avx2, __attribute__((target("avx2"))), 1)
FASTPE_DEFINE_ROPE_KERNELS(_avx2, __attribute__((target("avx2"))), 1)
/* and an AVX-512 copy of the table and RoPE kernels: the same operations on 8 doubles at a
 * time (no FMA: the build forbids contraction), so the same bits in fewer instructions --
 * these loops are bound by their instruction count (conversions, loads), not by memory */
#define FASTPE_AVX512_ATTR __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw")))
FASTPE_DEFINE_ARRAY_KERNELS(_avx512, FASTPE_AVX512_ATTR, 1)
FASTPE_DEFINE_ROPE_KERNELS(_avx512, FASTPE_AVX512_ATTR, 1)

/* the CPU and the OS (saved YMM state) support AVX2: libgcc / compiler-rt check both */
static int fastpe_cpu_has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
}

/* ... and the AVX-512 subsets the compiler may use in the AVX-512 copy (ZMM state included) */
static int fastpe_cpu_has_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512f")
           && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")
           && __builtin_cpu_supports("avx512bw");
}
#endif

/* which copy the table and RoPE entry points below run: "avx512", "avx2" or "baseline" (the
 * compiler's target); wide as in FASTPE_DISPATCH_WIDE_ */
static const char *fastpe_kernel_variant(int wide)
{
#if FASTPE_X86_DISPATCH
    if (wide == 1 && fastpe_cpu_has_avx512())
        return "avx512";
    if (wide && fastpe_cpu_has_avx2())
        return "avx2";
#endif
    (void)wide;
    return "baseline";
}

/* steps[m][0][i], steps[m][1][i] = exact-path cos(m w_i), sin(m w_i) for m < FASTPE_STEPS */
static void fastpe_sincos_steps(const double *turns, ptrdiff_t n_freq, double *steps)
{
    for (ptrdiff_t m = 0; m < FASTPE_STEPS; m++) {
        double *cm = steps + 2 * m * n_freq;
        fastpe_anchor_((double)m, turns, n_freq, cm + n_freq, cm, FASTPE_HW_FLOOR);
    }
}

/*
 * Real positions (timesteps): (sin, cos) of 2*pi*x*(v1+v2+v3+v4) for a double |x| < 2**32,
 * operation for operation the numba sincos_real_turns.  x is cut (Veltkamp) into xh + xl of
 * at most 26 bits each, so the six products with the 21-bit words are exact.  x and xl may be
 * negative, so each product is reduced to its centred fraction (less the nearest integer,
 * exact whatever the sign; a - floor(a) rounds for a small negative a); they are summed with
 * error-free two-sums, re-centred as the sum grows.
 */
/* a less its nearest integer (ties to even, as numpy's rint): exact for every double */
static FASTPE_ALWAYS_INLINE double fastpe_centred_(double a)
{
    return a - rint(a);
}

/* s + b by an error-free two-sum: s becomes its centred fraction (exact), e gains the error */
static FASTPE_ALWAYS_INLINE void fastpe_add_turns_(double *s, double b, double *e)
{
    double t = *s + b;
    double bb = t - *s;
    *e = *e + ((*s - (t - bb)) + (b - bb));
    *s = fastpe_centred_(t);
}

static FASTPE_ALWAYS_INLINE void fastpe_sincos_real_turns_(double x, double v1, double v2,
                                                           double v3, double v4, double *s_out,
                                                           double *c_out)
{
    double ax = fabs(x); /* the angle of |x|; the sine's sign flipped for x < 0, as numba */
    double big = 134217729.0 * ax; /* 2**27 + 1 */
    double xh = big - (big - ax);
    double xl = ax - xh;
    double s = fastpe_centred_(xh * v1);
    double e = 0.0;
    fastpe_add_turns_(&s, fastpe_centred_(xl * v1), &e);
    fastpe_add_turns_(&s, fastpe_centred_(xh * v2), &e);
    fastpe_add_turns_(&s, fastpe_centred_(xl * v2), &e);
    fastpe_add_turns_(&s, fastpe_centred_(xh * v3), &e);
    fastpe_add_turns_(&s, fastpe_centred_(xl * v3), &e);
    fastpe_sincos_of_turn_(s, e + ax * v4, s_out, c_out, 1);
    if (x < 0.0)
        *s_out = -*s_out;
}

/* table[t][0][k], table[t][1][k] = cos, sin of x[t] and frequency k, rows [row_begin, row_end) */
static FASTPE_ALWAYS_INLINE void fastpe_sincos_real_rows_(const double *x, const double *turns,
                                                          ptrdiff_t n_freq, double *table,
                                                          ptrdiff_t row_begin, ptrdiff_t row_end)
{
    const double *v1 = turns, *v2 = turns + n_freq, *v3 = turns + 2 * n_freq,
                 *v4 = turns + 3 * n_freq;
    for (ptrdiff_t t = row_begin; t < row_end; t++) {
        double *FASTPE_RESTRICT c = table + 2 * t * n_freq;
        double *FASTPE_RESTRICT s = c + n_freq;
        const double xt = x[t];
        for (ptrdiff_t k = 0; k < n_freq; k++)
            fastpe_sincos_real_turns_(xt, v1[k], v2[k], v3[k], v4[k], s + k, c + k);
    }
}

/* the baseline copy calls libm's rint (and floor: the quarter-turn step meets negative turns
 * here, where the baseline's 2**52 trick does not hold); the AVX2 copy has both as one
 * instruction */
static void fastpe_sincos_real_baseline(const double *x, const double *turns, ptrdiff_t n_freq,
                                        double *table, ptrdiff_t row_begin, ptrdiff_t row_end)
{
    fastpe_sincos_real_rows_(x, turns, n_freq, table, row_begin, row_end);
}

#if FASTPE_X86_DISPATCH
__attribute__((target("avx2")))
static void fastpe_sincos_real_avx2(const double *x, const double *turns, ptrdiff_t n_freq,
                                    double *table, ptrdiff_t row_begin, ptrdiff_t row_end)
{
    fastpe_sincos_real_rows_(x, turns, n_freq, table, row_begin, row_end);
}
#endif

/*
 * Narrowing float32 bit patterns to float16 / bfloat16, round to nearest even, with a flag on
 * every float32 exactly halfway between two numbers of the target: the numba _to_f16 /
 * _to_bf16, step for step in integer arithmetic (so the same bits on any compiler), written
 * with selects instead of branches so that the loop vectorises.
 */
/* v where the mask m is all ones, else w */
static FASTPE_ALWAYS_INLINE uint32_t fastpe_pick_(uint32_t m, uint32_t v, uint32_t w)
{
    return (v & m) | (w & ~m);
}

/* all ones where c, else 0 */
static FASTPE_ALWAYS_INLINE uint32_t fastpe_mask_(int c)
{
    return (uint32_t)0 - (uint32_t)(c != 0);
}

static FASTPE_ALWAYS_INLINE uint32_t fastpe_to_f16_(uint32_t u, uint32_t *tie)
{
    uint32_t a = u & 0x7FFFFFFFu; /* the sign bit is the caller's (fastpe_f16_sign_) */
    /* float16 normals: rebias, round off 13 bits */
    uint32_t m = a - 0x38000000u;
    uint32_t h_norm = (m + 0x0FFFu + ((m >> 13) & 1u)) >> 13;
    uint32_t t_norm = (uint32_t)((a & 0x1FFFu) == 0x1000u);
    /* float16 subnormals, units of 2**-24: shift 14..24 where used, clamped to 1..31 */
    uint32_t shift = 126u - (a >> 23); /* wraps above exponent 126: clamped below */
    shift = shift > 31u ? 31u : shift;
    shift = shift < 1u ? 1u : shift;
    uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
    uint32_t h_sub = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    h_sub += (uint32_t)(rem > half) | ((uint32_t)(rem == half) & h_sub & 1u);
    uint32_t t_sub = (uint32_t)(rem == half);
    uint32_t is_sub = fastpe_mask_(a >= 0x33000000u), is_norm = fastpe_mask_(a >= 0x38800000u);
    uint32_t is_inf = fastpe_mask_(a >= 0x477FF000u), is_nan = fastpe_mask_(a > 0x7F800000u);
    uint32_t h = h_sub & is_sub, t = t_sub & is_sub;
    h = fastpe_pick_(is_norm, h_norm, h);
    t = fastpe_pick_(is_norm, t_norm, t);
    h = fastpe_pick_(is_inf, 0x7C00u, h); /* 65520 and up round to inf */
    t = fastpe_pick_(is_inf, (uint32_t)(a == 0x477FF000u), t);
    h = fastpe_pick_(is_nan, 0x7E00u, h); /* NaN: quiet, sign kept */
    t &= ~is_nan;
    *tie = t;
    return h;
}

/* the float16 sign bit of the float32 with bits u */
static FASTPE_ALWAYS_INLINE uint16_t fastpe_f16_sign_(uint32_t u)
{
    return (uint16_t)((u >> 16) & 0x8000u);
}

static FASTPE_ALWAYS_INLINE uint32_t fastpe_to_bf16_(uint32_t u, uint32_t *tie)
{
    uint32_t a = u & 0x7FFFFFFFu;
    uint32_t h = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    uint32_t t = (uint32_t)((u & 0xFFFFu) == 0x8000u) & (uint32_t)(a < 0x7F800000u);
    uint32_t is_nan = fastpe_mask_(a > 0x7F800000u);
    h = fastpe_pick_(is_nan, (u >> 16) | 0x40u, h); /* NaN: quiet */
    t &= ~is_nan;
    *tie = t;
    return h;
}

/* elements per chunk of the narrowing loop: 32-bit results first (a loop of one width
 * vectorises), then stored narrowed */
#define FASTPE_NARROW_CHUNK 256

#define FASTPE_DEFINE_NARROW(SUFFIX, ATTR)                                                       \
    ATTR static void fastpe_narrow16##SUFFIX(const uint32_t *FASTPE_RESTRICT bits, int bf16,    \
                                             uint16_t *FASTPE_RESTRICT out,                     \
                                             uint8_t *FASTPE_RESTRICT ties, ptrdiff_t begin,    \
                                             ptrdiff_t end)                                     \
    {                                                                                            \
        uint32_t h[FASTPE_NARROW_CHUNK], t[FASTPE_NARROW_CHUNK];                                \
        for (ptrdiff_t c0 = begin; c0 < end; c0 += FASTPE_NARROW_CHUNK) {                        \
            ptrdiff_t n = end - c0 < FASTPE_NARROW_CHUNK ? end - c0 : FASTPE_NARROW_CHUNK;       \
            const uint32_t *FASTPE_RESTRICT b = bits + c0;                                       \
            if (bf16) {                                                                          \
                for (ptrdiff_t i = 0; i < n; i++)                                                \
                    h[i] = fastpe_to_bf16_(b[i], t + i);                                         \
            } else {                                                                             \
                for (ptrdiff_t i = 0; i < n; i++)                                                \
                    h[i] = fastpe_to_f16_(b[i], t + i);                                          \
            }                                                                                    \
            if (bf16) {                                                                          \
                for (ptrdiff_t i = 0; i < n; i++)                                                \
                    out[c0 + i] = (uint16_t)h[i];                                                \
            } else {                                                                             \
                for (ptrdiff_t i = 0; i < n; i++)                                                \
                    out[c0 + i] = (uint16_t)h[i] | fastpe_f16_sign_(b[i]);                       \
            }                                                                                    \
            for (ptrdiff_t i = 0; i < n; i++)                                                    \
                ties[c0 + i] = (uint8_t)t[i];                                                    \
        }                                                                                        \
    }

FASTPE_DEFINE_NARROW(_baseline, )

#if FASTPE_X86_DISPATCH
#include <immintrin.h>
/*
 * The AVX2 copy: eight elements at a time in GCC's vector extensions (GCC does not vectorise
 * the scalar form's subnormal arm), the same integer operations as fastpe_to_f16_ /
 * fastpe_to_bf16_, each comparison a mask; the scalar form takes the last few elements.
 */
typedef uint32_t fastpe_v8u_ __attribute__((vector_size(32)));

__attribute__((target("avx2,f16c"))) static void fastpe_narrow16_avx2(
    const uint32_t *FASTPE_RESTRICT bits, int bf16, uint16_t *FASTPE_RESTRICT out,
    uint8_t *FASTPE_RESTRICT ties, ptrdiff_t begin, ptrdiff_t end)
{
    ptrdiff_t i = begin;
    for (; i + 8 <= end; i += 8) {
        fastpe_v8u_ u, h, t;
        memcpy(&u, bits + i, sizeof u);
        const fastpe_v8u_ a = u & 0x7FFFFFFFu;
        const fastpe_v8u_ is_nan = (fastpe_v8u_)(a > 0x7F800000u);
        if (bf16) {
            h = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
            t = (fastpe_v8u_)((u & 0xFFFFu) == 0x8000u) & (fastpe_v8u_)(a < 0x7F800000u) & 1u;
            h = (((u >> 16) | 0x40u) & is_nan) | (h & ~is_nan);
        } else {
            /* float16 by the F16C instruction (round to nearest even, subnormals and
             * overflow as the integer steps: IEEE's rounding), NaN made the integer steps'
             * quiet NaN; a float32 is a tie when it lies half a float16 step above its
             * truncation: |x| - trunc == (next - trunc) / 2, every term exact in float32,
             * below 65520 (which is named: its next is inf; above it twice the gap
             * overflows) */
            const __m256 x = _mm256_castsi256_ps((__m256i)a);
            const __m128i nearest = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            const __m128i down = _mm256_cvtps_ph(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m256 lo = _mm256_cvtph_ps(down);
            const __m256 up = _mm256_cvtph_ps(_mm_add_epi16(down, _mm_set1_epi16(1)));
            const __m256 gap = _mm256_sub_ps(x, lo), step = _mm256_sub_ps(up, lo);
            t = ((fastpe_v8u_)_mm256_castps_si256(
                     _mm256_cmp_ps(_mm256_add_ps(gap, gap), step, _CMP_EQ_OQ)) &
                 (fastpe_v8u_)(a < 0x477FF000u)) |
                (fastpe_v8u_)(a == 0x477FF000u);
            t &= 1u;
            h = (fastpe_v8u_)_mm256_cvtepu16_epi32(nearest);
            h = (0x7E00u & is_nan) | (h & ~is_nan);
            h |= (u >> 16) & 0x8000u;
        }
        t &= ~is_nan;
        /* narrowed by packing (values below 2**16 and 0/1: no saturation) */
        __m256i hv = (__m256i)h, tv = (__m256i)t;
        __m128i h16 = _mm_packus_epi32(_mm256_castsi256_si128(hv), _mm256_extracti128_si256(hv, 1));
        __m128i t16 = _mm_packus_epi32(_mm256_castsi256_si128(tv), _mm256_extracti128_si256(tv, 1));
        _mm_storeu_si128((__m128i *)(out + i), h16);
        _mm_storel_epi64((__m128i *)(ties + i), _mm_packus_epi16(t16, t16));
    }
    fastpe_narrow16_baseline(bits, bf16, out, ties, i, end);
}
#endif

/*
 * Entry points: wide != 0 lets the CPU pick its best copy (the normal case); wide == 0 runs
 * the baseline copy (tests use it to check that every copy gives the same bits).  The body
 * of each: NAME##_avx2 where wide and the CPU has AVX2, else NAME##_baseline, with the same
 * arguments (wide itself is the entry point's last parameter).
 */
#if FASTPE_X86_DISPATCH
#define FASTPE_DISPATCH_(NAME, ...)                                                             \
    do {                                                                                        \
        if (wide && fastpe_cpu_has_avx2()) {                                                    \
            NAME##_avx2(__VA_ARGS__);                                                           \
            return;                                                                             \
        }                                                                                       \
        NAME##_baseline(__VA_ARGS__);                                                           \
    } while (0)
/* the table and RoPE kernels, which also have an AVX-512 copy: wide == 1 runs the best copy
 * the CPU supports, wide == 2 the AVX2 copy at most, wide == 0 the baseline (tests use 0 and 2
 * to check that every copy gives the same bits) */
#define FASTPE_DISPATCH_WIDE_(NAME, ...)                                                        \
    do {                                                                                        \
        if (wide == 1 && fastpe_cpu_has_avx512()) {                                             \
            NAME##_avx512(__VA_ARGS__);                                                         \
            return;                                                                             \
        }                                                                                       \
        FASTPE_DISPATCH_(NAME, __VA_ARGS__);                                                    \
    } while (0)
#else
#define FASTPE_DISPATCH_(NAME, ...)                                                             \
    do {                                                                                        \
        (void)wide;                                                                             \
        NAME##_baseline(__VA_ARGS__);                                                           \
    } while (0)
#define FASTPE_DISPATCH_WIDE_(NAME, ...) FASTPE_DISPATCH_(NAME, __VA_ARGS__)
#endif

static void fastpe_sincos_real(const double *x, const double *turns, ptrdiff_t n_freq,
                               double *table, ptrdiff_t row_begin, ptrdiff_t row_end, int wide)
{
    FASTPE_DISPATCH_(fastpe_sincos_real, x, turns, n_freq, table, row_begin, row_end);
}

static void fastpe_sinusoid_forward(const uint32_t *positions, const double *turns,
                                    ptrdiff_t n_freq, const double *steps, float *out,
                                    ptrdiff_t d_model, ptrdiff_t row_begin, ptrdiff_t row_end,
                                    double *scratch, int wide)
{
    FASTPE_DISPATCH_WIDE_(fastpe_sinusoid_forward, positions, turns, n_freq, steps, out,
                          d_model, row_begin, row_end, scratch);
}

static void fastpe_sinusoid_range(uint64_t start, const double *turns, ptrdiff_t n_freq,
                                  const double *steps, float *out, ptrdiff_t d_model,
                                  ptrdiff_t row_begin, ptrdiff_t row_end, double *scratch,
                                  int wide)
{
    FASTPE_DISPATCH_WIDE_(fastpe_sinusoid_range, start, turns, n_freq, steps, out, d_model,
                          row_begin, row_end, scratch);
}

static void fastpe_narrow16(const uint32_t *bits, int bf16, uint16_t *out, uint8_t *ties,
                            ptrdiff_t begin, ptrdiff_t end, int wide)
{
#if FASTPE_X86_DISPATCH
    /* the AVX2 copy also needs F16C (every AVX2 CPU made has it; checked all the same) */
    wide = wide && __builtin_cpu_supports("f16c");
#endif
    FASTPE_DISPATCH_(fastpe_narrow16, bits, bf16, out, ties, begin, end);
}

/* RoPE entry points (wide as in FASTPE_DISPATCH_WIDE_) */
static void fastpe_rope_table(const uint32_t *positions, const double *turns, ptrdiff_t n_freq,
                              const double *steps, double af, double *table, ptrdiff_t row_begin,
                              ptrdiff_t row_end, double *scratch, int wide)
{
    FASTPE_DISPATCH_WIDE_(fastpe_rope_table, positions, turns, n_freq, steps, af, table,
                          row_begin, row_end, scratch);
}

static void fastpe_rope_cos_sin(const uint32_t *positions, const double *turns, ptrdiff_t n_freq,
                                const double *steps, double af, int neox, float *out_cos,
                                float *out_sin, ptrdiff_t row_begin, ptrdiff_t row_end,
                                double *scratch, int wide)
{
    FASTPE_DISPATCH_WIDE_(fastpe_rope_cos_sin, positions, turns, n_freq, steps, af, neox,
                          out_cos, out_sin, row_begin, row_end, scratch);
}

static void fastpe_rope_apply(float *xq, ptrdiff_t hq, ptrdiff_t bq, ptrdiff_t shq, ptrdiff_t ssq,
                              float *xk, ptrdiff_t hk, ptrdiff_t bk, ptrdiff_t shk, ptrdiff_t ssk,
                              ptrdiff_t s_begin, ptrdiff_t s_end, const double *table,
                              ptrdiff_t n_freq, ptrdiff_t pos_bstride, int neox,
                              ptrdiff_t item_begin, ptrdiff_t item_end, int wide)
{
    FASTPE_DISPATCH_WIDE_(fastpe_rope_apply, xq, hq, bq, shq, ssq, xk, hk, bk, shk, ssk, s_begin,
                          s_end, table, n_freq, pos_bstride, neox, item_begin, item_end);
}

/*
 * The sinusoid families' integer rows a few at a time (csrc/_ext.pyx): table rows 0 .. n - 1
 * ((n, 2, n_freq): cos, then sin) of positions[0 .. n - 1], the values of fastpe_rope_table
 * with af = 1, the anchor (its position in *anchor_at, -1 for none yet; its sin, cos in
 * scratch) kept from one call to the next: a part cut into blocks small enough for the first
 * cache level computes an anchor only where the positions change anchor, as one call would.
 */
#define FASTPE_DEFINE_FAMILY_KERNELS(SUFFIX, ATTR, HW)                                           \
    ATTR static void fastpe_family_table##SUFFIX(                                                \
        const uint32_t *FASTPE_RESTRICT positions, ptrdiff_t n,                                  \
        const double *FASTPE_RESTRICT turns, ptrdiff_t n_freq,                                   \
        const double *FASTPE_RESTRICT steps, double *FASTPE_RESTRICT table,                      \
        double *FASTPE_RESTRICT scratch, int64_t *anchor_at)                                     \
    {                                                                                            \
        double *sa = scratch, *ca = scratch + n_freq;                                            \
        int64_t anchor = *anchor_at;                                                             \
        for (ptrdiff_t t = 0; t < n; t++) {                                                      \
            int64_t p = (int64_t)positions[t];                                                   \
            int64_t m = p % FASTPE_STEPS;                                                        \
            if (p - m != anchor) {                                                               \
                anchor = p - m;                                                                  \
                fastpe_anchor_((double)anchor, turns, n_freq, sa, ca, HW);                       \
            }                                                                                    \
            const double *cm = steps + 2 * m * n_freq;                                           \
            double *o = table + 2 * t * n_freq;                                                  \
            fastpe_rope_row_((double)p, turns, n_freq, sa, ca, cm, cm + n_freq, 1.0, o,          \
                             o + n_freq, HW);                                                    \
        }                                                                                        \
        *anchor_at = anchor;                                                                     \
    }

FASTPE_DEFINE_FAMILY_KERNELS(_baseline, , FASTPE_HW_FLOOR)
#if FASTPE_X86_DISPATCH
FASTPE_DEFINE_FAMILY_KERNELS(_avx2, __attribute__((target("avx2"))), 1)
#endif

static void fastpe_family_table(const uint32_t *positions, ptrdiff_t n, const double *turns,
                                ptrdiff_t n_freq, const double *steps, double *table,
                                double *scratch, int64_t *anchor_at, int wide)
{
    FASTPE_DISPATCH_(fastpe_family_table, positions, n, turns, n_freq, steps, table, scratch,
                     anchor_at);
}

/*
 * The same rows in float32 halves ([sin | cos], or [cos | sin] when cos_first) of exactly
 * 2 * n_freq columns, written straight from the products: out holds rows 0 .. n - 1 (d
 * floats each).  The values of fastpe_family_table rounded to float32 (a row with a tiny
 * product recomputes its products, identically, and takes the exact path's values where
 * they are tiny, as fastpe_rope_row_ does), without the table and the pass that lays it out.
 */
#define FASTPE_DEFINE_FAMILY_HALVES_KERNELS(SUFFIX, ATTR, HW)                                    \
    ATTR static void fastpe_family_halves32##SUFFIX(                                             \
        const uint32_t *FASTPE_RESTRICT positions, ptrdiff_t n,                                  \
        const double *FASTPE_RESTRICT turns, ptrdiff_t n_freq,                                   \
        const double *FASTPE_RESTRICT steps, float *out, ptrdiff_t d, int cos_first,             \
        double *FASTPE_RESTRICT scratch, int64_t *anchor_at)                                     \
    {                                                                                            \
        double *sa = scratch, *ca = scratch + n_freq;                                            \
        int64_t anchor = *anchor_at;                                                             \
        for (ptrdiff_t t = 0; t < n; t++) {                                                      \
            int64_t p = (int64_t)positions[t];                                                   \
            int64_t m = p % FASTPE_STEPS;                                                        \
            if (p - m != anchor) {                                                               \
                anchor = p - m;                                                                  \
                fastpe_anchor_((double)anchor, turns, n_freq, sa, ca, HW);                       \
            }                                                                                    \
            const double *FASTPE_RESTRICT cm = steps + 2 * m * n_freq;                           \
            const double *FASTPE_RESTRICT sm = cm + n_freq;                                      \
            float *FASTPE_RESTRICT o_s = out + t * d + (cos_first ? n_freq : 0);                 \
            float *FASTPE_RESTRICT o_c = out + t * d + (cos_first ? 0 : n_freq);                 \
            int any = 0;                                                                         \
            for (ptrdiff_t i = 0; i < n_freq; i++) { /* branch-free: vectorises */               \
                double c = ca[i] * cm[i] - sa[i] * sm[i];                                        \
                double s = sa[i] * cm[i] + ca[i] * sm[i];                                        \
                o_c[i] = (float)(1.0 * c + 0.0);                                                 \
                o_s[i] = (float)(1.0 * s + 0.0);                                                 \
                any |= (fabs(c) < FASTPE_TINY64) | (fabs(s) < FASTPE_TINY64);                    \
            }                                                                                    \
            if (any) { /* rare: about one (position, frequency) in 13,000 */                     \
                for (ptrdiff_t i = 0; i < n_freq; i++) {                                         \
                    double c = ca[i] * cm[i] - sa[i] * sm[i];                                    \
                    double s = sa[i] * cm[i] + ca[i] * sm[i];                                    \
                    if (fabs(c) < FASTPE_TINY64 || fabs(s) < FASTPE_TINY64) {                    \
                        fastpe_sincos_turns_((double)p, turns[i], turns[n_freq + i],             \
                                             turns[2 * n_freq + i], turns[3 * n_freq + i], &s,   \
                                             &c, HW);                                            \
                        o_c[i] = (float)(1.0 * c + 0.0);                                         \
                        o_s[i] = (float)(1.0 * s + 0.0);                                         \
                    }                                                                            \
                }                                                                                \
            }                                                                                    \
        }                                                                                        \
        *anchor_at = anchor;                                                                     \
    }

FASTPE_DEFINE_FAMILY_HALVES_KERNELS(_baseline, , FASTPE_HW_FLOOR)
#if FASTPE_X86_DISPATCH
FASTPE_DEFINE_FAMILY_HALVES_KERNELS(_avx2, __attribute__((target("avx2"))), 1)
#endif

static void fastpe_family_halves32(const uint32_t *positions, ptrdiff_t n, const double *turns,
                                   ptrdiff_t n_freq, const double *steps, float *out,
                                   ptrdiff_t d, int cos_first, double *scratch,
                                   int64_t *anchor_at, int wide)
{
    FASTPE_DISPATCH_(fastpe_family_halves32, positions, n, turns, n_freq, steps, out, d,
                     cos_first, scratch, anchor_at);
}

#endif /* FASTPE_KERNELS_H */
