/*
 * fastpe_bias.h -- the C twin of fastpe/_backends/numba/bias.py: ALiBi biases and T5 buckets.
 *
 * Same operations in the same order as the numba kernels; compiled without floating-point
 * contraction (-ffp-contract=off) and without -ffast-math, so the bits are the same.  The
 * method is described in fastpe/alibi.py (the slope split into 21-bit words, a double-double
 * product rounded once) and fastpe/relative.py (the threshold table).  Kernels assume
 * validated input (distances below 2**32, relative positions above -2**63) and never fail.
 * Each works on a range of rows or items, so the worker pool (fastpe_pool.h, through
 * _bias.pyx) or Python threads can fill disjoint parts.
 */
#ifndef FASTPE_BIAS_H
#define FASTPE_BIAS_H

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0
#error "fastpe kernels need FLT_EVAL_METHOD == 0 (SSE2 arithmetic on x86)"
#endif

/* the ALiBi forms' codes: fastpe/_plans/alibi.py's FORM_CODES, which the cython backend and
 * tests/backends/test_one_home.py compare with the extension's FORM_CODES, built from these */
enum { FASTPE_SYMMETRIC = 0, FASTPE_CAUSAL = 1, FASTPE_BLOOM = 2, FASTPE_MPT = 3, FASTPE_N_FORMS };

/* d * (w1 + w2 + w3 + w4) as a double-double (hi, lo), for an integer |d| < 2**32: the first
 * three products are exact and each fast two-sum's error term is exact (see bias.py). */
static inline void fastpe_dd_product(double d, double w1, double w2, double w3, double w4,
                                     double *hi, double *lo)
{
    double a = d * w1;
    double b = d * w2;
    double c = d * w3;
    double t = d * w4;
    double s = a + b;
    double e1 = b - (s - a);
    double u = s + c;
    double e2 = c - (u - s);
    double low = (e1 + e2) + t;
    double h = u + low;
    *hi = h;
    *lo = low - (h - u);
}

/* the float32 nearest to hi + lo: hi rounded, unless hi is exactly a float32 midpoint, where
 * the sign of lo picks the side */
static inline float fastpe_round_dd_f32(double hi, double lo)
{
    /* hi is a float32 midpoint exactly when d = hi - t (t its rounding) is not zero and
     * t + 2d, the other neighbour, is a float32 (both exact in double); then lo's sign
     * picks the side.  The numba round_dd_f32's value, with every step computed and the
     * result selected (no branch: the line loop vectorises). */
    double t = (double)(float)hi;
    double d = hi - t;
    double o = t + 2.0 * d;
    double r = ((lo != 0.0) & (d != 0.0) & ((double)(float)o == o) & ((lo > 0.0) == (o > t))) ? o : t;
    return (float)r; /* r is t or o, both float32 values: exact */
}

/* line[h, n] = slope_h * (first + n) rounded, n in [n_begin, n_end), 0 <= first + n < 2**32;
 * words is the (4, n_heads) plan.  ROUND(hi, lo) gives the value of the double-double: the
 * float32 nearest to it (fastpe_alibi_line_f32), or its leading double (_f64). */
/*
 * fastpe_alibi_fast_note -- the float32 line's first pass, and why it gives the bits of the
 * double-double path, which a value still takes where this pass is unsure (the numba
 * kernel's first pass is the same rule, its scalar loop vectorised by LLVM).
 *
 * Let X = d * (w1 + w2 + w3 + w4), the exact product the double-double hi + lo carries
 * (to ~2**-104 relative).  sd = ((w1 + w2) + w3) + w4 in double: w1 + w2 is exact (adjacent
 * 21-bit words), the other two additions round, so |sd - S| <= 2**-52 S (S the words' sum).
 * p = fl(d * sd) has |p - X| <= d |sd - S| + 2**-53 p, below 2**-51.4 X.  With p in
 * [2**e, 2**(e+1)) that is below 2**(e+1-51.4) = 2**1.6 (about 3.03) units of p's last place
 * (ulp = 2**(e-52)).  In units of that ulp, the float32 midpoints of p's binade are the
 * doubles whose low 29 bits (m, the bits a float32 drops) read 2**28; the nearest midpoint
 * outside the binade is 2**27 units away.  So when |m - 2**28| > FASTPE_ALIBI_NEAR (8), no
 * midpoint lies within 3.03 units of p: X and p lie between the same two midpoints, and
 * float(p) -- p rounded to float32 -- is the correctly rounded X, the value the double-double
 * path gives (which rounds hi + lo, correctly).  Otherwise -- p within 8 units of a
 * midpoint, one distance in about 2**25 -- the second pass takes the double-double path for
 * that distance.  The test is integer arithmetic on p's bits: z = (bits + 2**28 + 8) mod
 * 2**29 is at most 16 exactly when |m - 2**28| <= 8, and z - 17 is then negative.
 * p >= 2**-64 (slopes >= 2**-64, d >= 1) or p = 0 (d = 0: bits 0, sure, a = +0.0 as the
 * double-double gives); p < 2**32: float32 neither overflows nor goes subnormal.
 *
 * The distances of a line are exact integers in double (below 2**32): the vector loop (GCC
 * and clang vector extensions, 16 distances a turn in four independent vectors) steps them
 * by adding 16.0, exact, so its p are the scalar loop's, and the values do not depend on
 * which loop wrote them.  Measured: about 2.4x the speed of rounding p -+ p * 2**-50 to
 * float32 and comparing (two conversions a value, the shuffle port's limit).
 */
#define FASTPE_ALIBI_NEAR 8

/* negative when p (>= 0) lies within FASTPE_ALIBI_NEAR units of its last place of a float32
 * midpoint (see fastpe_alibi_fast_note), else in [0, 2**29) */
static inline int64_t fastpe_alibi_near_(double p)
{
    int64_t bits;
    memcpy(&bits, &p, sizeof bits);
    return ((bits + ((INT64_C(1) << 28) + FASTPE_ALIBI_NEAR)) & ((INT64_C(1) << 29) - 1))
           - (2 * FASTPE_ALIBI_NEAR + 1);
}

#if defined(__GNUC__) || defined(__clang__)
#define FASTPE_ALIBI_VECTORS 1
typedef double fastpe_v4d_ __attribute__((vector_size(32)));
typedef int64_t fastpe_v4i_ __attribute__((vector_size(32)));
typedef float fastpe_v4f_ __attribute__((vector_size(16)));
/* one vector of four distances d: line[0..4) = float(d * sd), *acc |= near(d * sd) */
#define FASTPE_ALIBI_QUAD_(D, ACC, DST)                                                       \
    do {                                                                                      \
        const fastpe_v4d_ p_ = (D) * s;                                                       \
        const fastpe_v4f_ f_ = __builtin_convertvector(p_, fastpe_v4f_);                      \
        memcpy((DST), &f_, sizeof f_);                                                        \
        (ACC) |= (((fastpe_v4i_)p_ + c) & m) - l;                                             \
    } while (0)
#else
#define FASTPE_ALIBI_VECTORS 0
#endif

/* the first pass over distances base + k, k in [0, len): dst[k] = float(p); 1 when some p
 * is unsure (then the second pass redoes those), else 0 */
#define FASTPE_ALIBI_FAST32(SUFFIX, ATTR)                                                     \
    ATTR static int fastpe_alibi_fast32_##SUFFIX(double sd, double base, float *dst,          \
                                                 int32_t len)                                 \
    {                                                                                         \
        int64_t unsure = 0;                                                                   \
        int32_t k = 0;                                                                        \
        FASTPE_ALIBI_FAST32_VECTOR_                                                           \
        for (; k < len; k++) {                                                                \
            const double p = (base + (double)k) * sd;                                         \
            dst[k] = (float)p;                                                                \
            unsure |= fastpe_alibi_near_(p);                                                  \
        }                                                                                     \
        return unsure < 0;                                                                    \
    }

#if FASTPE_ALIBI_VECTORS
#define FASTPE_ALIBI_FAST32_VECTOR_                                                           \
    if (len >= 16) {                                                                          \
        const fastpe_v4d_ s = {sd, sd, sd, sd}, step = {16.0, 16.0, 16.0, 16.0};              \
        const int64_t c0 = (INT64_C(1) << 28) + FASTPE_ALIBI_NEAR;                            \
        const int64_t m0 = (INT64_C(1) << 29) - 1, l0 = 2 * FASTPE_ALIBI_NEAR + 1;            \
        const fastpe_v4i_ c = {c0, c0, c0, c0}, m = {m0, m0, m0, m0}, l = {l0, l0, l0, l0};   \
        fastpe_v4d_ d0 = {base, base + 1.0, base + 2.0, base + 3.0};                          \
        fastpe_v4d_ d1 = d0 + 4.0, d2 = d0 + 8.0, d3 = d0 + 12.0;                             \
        fastpe_v4i_ a0 = {0, 0, 0, 0}, a1 = a0;                                               \
        for (; k + 16 <= len; k += 16) {                                                      \
            FASTPE_ALIBI_QUAD_(d0, a0, dst + k);                                              \
            FASTPE_ALIBI_QUAD_(d1, a1, dst + k + 4);                                          \
            FASTPE_ALIBI_QUAD_(d2, a0, dst + k + 8);                                          \
            FASTPE_ALIBI_QUAD_(d3, a1, dst + k + 12);                                         \
            d0 += step;                                                                       \
            d1 += step;                                                                       \
            d2 += step;                                                                       \
            d3 += step;                                                                       \
        }                                                                                     \
        a0 |= a1;                                                                             \
        unsure = a0[0] | a0[1] | a0[2] | a0[3];                                               \
    }
#else
#define FASTPE_ALIBI_FAST32_VECTOR_
#endif

/* a head whose words are (2**-e, 0, 0, 0) -- an exact slope -- over distances below 2**24:
 * each distance is a float32 and its product with 2**-e (>= 2**-64, a normal float32) is
 * exact in float32, so float(d) * float(2**-e) is the double-double path's value (hi = the
 * exact product, lo = 0), eight values to a float32 vector without the bit test */
#define FASTPE_ALIBI_EXACT_FROM (INT64_C(1) << 24)

static inline int fastpe_alibi_power_words_(double w1, double w2, double w3, double w4)
{
    uint64_t bits;
    memcpy(&bits, &w1, sizeof bits);
    return w2 == 0.0 && w3 == 0.0 && w4 == 0.0 && (bits & ((UINT64_C(1) << 52) - 1)) == 0;
}

#define FASTPE_ALIBI_EXACT32(SUFFIX, ATTR)                                                    \
    ATTR static void fastpe_alibi_exact32_##SUFFIX(float w, int32_t base, float *dst,          \
                                                   int32_t len)                               \
    {                                                                                         \
        for (int32_t k = 0; k < len; k++)                                                     \
            dst[k] = (float)(base + k) * w;                                                   \
    }

#define FASTPE_ALIBI_LINE(SUFFIX, ISA, ATTR, T, ROUND, FAST)                                \
    ATTR static void fastpe_alibi_line_##SUFFIX(const double *words, ptrdiff_t n_heads,       \
                                                int64_t first, T *line, ptrdiff_t length,     \
                                                ptrdiff_t n_begin, ptrdiff_t n_end)           \
    {                                                                                         \
        for (ptrdiff_t h = 0; h < n_heads; h++) {                                             \
            const double w1 = words[h], w2 = words[n_heads + h];                              \
            const double w3 = words[2 * n_heads + h], w4 = words[3 * n_heads + h];            \
            T *dst = line + h * length;                                                       \
            /* distances as base + k, k an int32 counter (exact: below 2**53): x86 before   \
             * AVX-512 has no vector int64-to-double conversion */                          \
            for (ptrdiff_t c0 = n_begin; c0 < n_end; c0 += (ptrdiff_t)1 << 30) {             \
                const int32_t len = (int32_t)(n_end - c0 < ((ptrdiff_t)1 << 30)              \
                                                  ? n_end - c0 : (ptrdiff_t)1 << 30);        \
                const double base = (double)(first + c0);                                    \
                T *d0 = dst + c0;                                                             \
                int rest = 1;                                                                 \
                if (FAST && first + n_end <= FASTPE_ALIBI_EXACT_FROM                          \
                    && fastpe_alibi_power_words_(w1, w2, w3, w4)) {                           \
                    fastpe_alibi_exact32_##ISA((float)w1, (int32_t)(first + c0),              \
                                               (float *)d0, len);                             \
                    continue;                                                                 \
                }                                                                             \
                if (FAST) /* the float32 line: see fastpe_alibi_fast_note above */            \
                    rest = fastpe_alibi_fast32_##ISA(((w1 + w2) + w3) + w4, base,             \
                                                     (float *)d0, len);                       \
                for (int32_t k = 0; rest && k < len; k++) {                                   \
                    if (FAST) {                                                               \
                        const double p = (base + (double)k) * (((w1 + w2) + w3) + w4);       \
                        if (fastpe_alibi_near_(p) >= 0)                                       \
                            continue;                                                         \
                    }                                                                         \
                    double hi, lo;                                                            \
                    fastpe_dd_product(base + (double)k, w1, w2, w3, w4, &hi, &lo);            \
                    d0[k] = ROUND(hi, lo);                                                    \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    }

#define FASTPE_LEADING_(hi, lo) (hi)
/* a baseline x86-64 build also carries AVX2 copies of the line kernels (the same bits: no
 * FMA, contraction off), picked at run time */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__AVX2__)
#define FASTPE_BIAS_DISPATCH 1
FASTPE_ALIBI_FAST32(avx2, __attribute__((target("avx2"))))
FASTPE_ALIBI_EXACT32(avx2, __attribute__((target("avx2"))))
FASTPE_ALIBI_LINE(f32_avx2, avx2, __attribute__((target("avx2"))), float, fastpe_round_dd_f32, 1)
FASTPE_ALIBI_LINE(f64_avx2, avx2, __attribute__((target("avx2"))), double, FASTPE_LEADING_, 0)
#else
#define FASTPE_BIAS_DISPATCH 0
#endif
FASTPE_ALIBI_FAST32(baseline, )
FASTPE_ALIBI_EXACT32(baseline, )
FASTPE_ALIBI_LINE(f32_baseline, baseline, , float, fastpe_round_dd_f32, 1)
FASTPE_ALIBI_LINE(f64_baseline, baseline, , double, FASTPE_LEADING_, 0)

static int fastpe_bias_avx2_(void)
{
#if FASTPE_BIAS_DISPATCH
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
#else
    return 0;
#endif
}

#if FASTPE_BIAS_DISPATCH
#define FASTPE_BIAS_PICK_(NAME, ...)                                                          \
    do {                                                                                      \
        if (fastpe_bias_avx2_())                                                              \
            NAME##_avx2(__VA_ARGS__);                                                         \
        else                                                                                  \
            NAME##_baseline(__VA_ARGS__);                                                     \
    } while (0)
#else
#define FASTPE_BIAS_PICK_(NAME, ...) NAME##_baseline(__VA_ARGS__)
#endif

static void fastpe_alibi_line_f32(const double *words, ptrdiff_t n_heads, int64_t first,
                                  float *line, ptrdiff_t length, ptrdiff_t n_begin,
                                  ptrdiff_t n_end)
{
    FASTPE_BIAS_PICK_(fastpe_alibi_line_f32, words, n_heads, first, line, length, n_begin, n_end);
}

static void fastpe_alibi_line_f64(const double *words, ptrdiff_t n_heads, int64_t first,
                                  double *line, ptrdiff_t length, ptrdiff_t n_begin,
                                  ptrdiff_t n_end)
{
    FASTPE_BIAS_PICK_(fastpe_alibi_line_f64, words, n_heads, first, line, length, n_begin, n_end);
}

/* rows [row_begin, row_end) of out (n_heads * q_len rows of k_len) from the lines;
 * form one of the codes above.  0.0 - v keeps a zero distance +0.0. */
#define FASTPE_ALIBI_FILL(SUFFIX, T)                                                          \
    static void fastpe_alibi_fill_##SUFFIX(const T *line, int form, T *out, ptrdiff_t q_len,  \
                                           ptrdiff_t k_len, ptrdiff_t row_begin,              \
                                           ptrdiff_t row_end)                                 \
    {                                                                                         \
        const ptrdiff_t offset = k_len - q_len;                                               \
        for (ptrdiff_t r = row_begin; r < row_end; r++) {                                     \
            const ptrdiff_t h = r / q_len, i = r - h * q_len;                                 \
            const T *src = line + h * k_len;                                                  \
            T *row = out + r * k_len;                                                         \
            if (form == FASTPE_BLOOM) {                                                       \
                for (ptrdiff_t j = 0; j < k_len; j++)                                         \
                    row[j] = src[j];                                                          \
            } else if (form == FASTPE_MPT) {                                                  \
                for (ptrdiff_t j = 0; j < k_len; j++)                                         \
                    row[j] = (T)(0.0 - (double)src[k_len - 1 - j]);                           \
            } else {                                                                          \
                const ptrdiff_t p = i + offset;                                               \
                for (ptrdiff_t j = 0; j <= p; j++)                                            \
                    row[j] = (T)(0.0 - (double)src[p - j]);                                   \
                if (form == FASTPE_CAUSAL) {                                                  \
                    for (ptrdiff_t j = p + 1; j < k_len; j++)                                 \
                        row[j] = (T)(-INFINITY);                                              \
                } else {                                                                      \
                    for (ptrdiff_t j = p + 1; j < k_len; j++)                                 \
                        row[j] = (T)(0.0 - (double)src[j - p]);                               \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    }

FASTPE_ALIBI_FILL(f32, float)
FASTPE_ALIBI_FILL(f64, double)

/* the same rows on the bit patterns of a 16-bit format (float16, bfloat16): negation flips
 * the sign bit, except at distance zero, which stays +0.0; neg_inf is the format's -inf.
 * The numba _alibi_fill16, step for step. */
static void fastpe_alibi_fill_u16(const uint16_t *line, int form, uint16_t neg_inf, uint16_t *out,
                                  ptrdiff_t q_len, ptrdiff_t k_len, ptrdiff_t row_begin,
                                  ptrdiff_t row_end)
{
    const ptrdiff_t offset = k_len - q_len;
    const uint16_t sign = 0x8000;
    for (ptrdiff_t r = row_begin; r < row_end; r++) {
        const ptrdiff_t h = r / q_len, i = r - h * q_len;
        const uint16_t *src = line + h * k_len;
        uint16_t *row = out + r * k_len;
        if (form == FASTPE_BLOOM) {
            for (ptrdiff_t j = 0; j < k_len; j++)
                row[j] = src[j];
        } else if (form == FASTPE_MPT) {
            const ptrdiff_t last = k_len - 1;
            for (ptrdiff_t j = 0; j < last; j++)
                row[j] = (uint16_t)(src[last - j] ^ sign);
            row[last] = src[0];
        } else {
            const ptrdiff_t p = i + offset;
            for (ptrdiff_t j = 0; j < p; j++)
                row[j] = (uint16_t)(src[p - j] ^ sign);
            row[p] = src[0];
            if (form == FASTPE_CAUSAL) {
                for (ptrdiff_t j = p + 1; j < k_len; j++)
                    row[j] = neg_inf;
            } else {
                for (ptrdiff_t j = p + 1; j < k_len; j++)
                    row[j] = (uint16_t)(src[j - p] ^ sign);
            }
        }
    }
}

/* thresholds up to this many are counted by a linear scan, more by binary search (same count) */
#define FASTPE_T5_LINEAR 32

/* HF T5's bucket of one relative position (rp > INT64_MIN), n buckets per direction, by the
 * number of plan thresholds at or below the distance */
static inline int64_t fastpe_t5_one(int64_t rp, int bidirectional, int64_t n,
                                    const int64_t *thresholds, ptrdiff_t n_thresholds)
{
    /* selects, not branches: the sign of a random relative position is unpredictable */
    const int64_t neg = -rp;
    const int64_t up = bidirectional & (rp > 0);
    const int64_t base = n & -up;
    const int64_t d = bidirectional ? (up ? rp : neg) : (neg > 0 ? neg : 0);
    const int64_t exact = n / 2;
    if (d < exact)
        return base + d;
    ptrdiff_t lo = 0, hi = n_thresholds;
    if (n_thresholds <= FASTPE_T5_LINEAR) {
        /* a few thresholds (7 for T5's 32 buckets): count them without a branch -- a binary
         * search's branches mispredict on every other random position */
        for (ptrdiff_t k = 0; k < n_thresholds; k++)
            lo += thresholds[k] <= d;
        return base + exact + lo;
    }
    while (lo < hi) {
        ptrdiff_t mid = (lo + hi) >> 1;
        if (thresholds[mid] <= d)
            lo = mid + 1;
        else
            hi = mid;
    }
    return base + exact + lo;
}

/*
 * T5 buckets of many relative positions with few thresholds, FASTPE_T5_CHUNK at a time:
 * fastpe_t5_one's steps as loops over the chunk (the distance and direction, then one pass
 * per threshold counting those at or below the distance, then the bucket), each of which
 * vectorises -- across positions, where fastpe_t5_one's own loop runs across thresholds.
 * The same integers.
 */
#define FASTPE_T5_CHUNK 256
#define FASTPE_T5_CHUNKS(SUFFIX, ATTR, T)                                                     \
    ATTR static void fastpe_t5_chunks_##SUFFIX(const int64_t *rel, int bidirectional,         \
                                               int64_t n, const int64_t *thresholds,          \
                                               ptrdiff_t n_thresholds, T *out,                \
                                               ptrdiff_t begin, ptrdiff_t end)                \
    {                                                                                         \
        int64_t d[FASTPE_T5_CHUNK], base[FASTPE_T5_CHUNK], count[FASTPE_T5_CHUNK];           \
        const int64_t exact = n / 2, bidi = bidirectional != 0;                               \
        for (ptrdiff_t c0 = begin; c0 < end; c0 += FASTPE_T5_CHUNK) {                         \
            const ptrdiff_t len = end - c0 < FASTPE_T5_CHUNK ? end - c0 : FASTPE_T5_CHUNK;    \
            const int64_t *r = rel + c0;                                                      \
            for (ptrdiff_t i = 0; i < len; i++) {                                             \
                const int64_t rp = r[i], neg = -rp;                                           \
                const int64_t up = bidi & (rp > 0);                                           \
                base[i] = n & -up;                                                            \
                const int64_t two_way = up ? rp : neg, one_way = neg > 0 ? neg : 0;           \
                d[i] = bidi ? two_way : one_way;                                              \
                count[i] = 0;                                                                 \
            }                                                                                 \
            for (ptrdiff_t k = 0; k < n_thresholds; k++) {                                    \
                const int64_t t = thresholds[k];                                              \
                for (ptrdiff_t i = 0; i < len; i++)                                           \
                    count[i] += t <= d[i];                                                    \
            }                                                                                 \
            T *o = out + c0;                                                                  \
            for (ptrdiff_t i = 0; i < len; i++)                                               \
                o[i] = (T)(d[i] < exact ? base[i] + d[i] : base[i] + exact + count[i]);       \
        }                                                                                     \
    }

#if FASTPE_BIAS_DISPATCH
FASTPE_T5_CHUNKS(i32_avx2, __attribute__((target("avx2"))), int32_t)
FASTPE_T5_CHUNKS(i64_avx2, __attribute__((target("avx2"))), int64_t)
#endif
FASTPE_T5_CHUNKS(i32_baseline, , int32_t)
FASTPE_T5_CHUNKS(i64_baseline, , int64_t)

#define FASTPE_T5(SUFFIX, T)                                                                  \
    /* out[k] = bucket(rel[k]) for k in [begin, end) */                                      \
    static void fastpe_t5_bucket_##SUFFIX(const int64_t *rel, int bidirectional, int64_t n,   \
                                          const int64_t *thresholds, ptrdiff_t n_thresholds,  \
                                          T *out, ptrdiff_t begin, ptrdiff_t end)             \
    {                                                                                         \
        if (n_thresholds <= FASTPE_T5_LINEAR) {                                               \
            FASTPE_BIAS_PICK_(fastpe_t5_chunks_##SUFFIX, rel, bidirectional, n, thresholds,    \
                              n_thresholds, out, begin, end);                                 \
            return;                                                                           \
        }                                                                                     \
        for (ptrdiff_t k = begin; k < end; k++)                                               \
            out[k] = (T)fastpe_t5_one(rel[k], bidirectional, n, thresholds, n_thresholds);    \
    }                                                                                         \
    /* line[k] = bucket(first + k) for k in [begin, end) */                                  \
    static void fastpe_t5_line_##SUFFIX(int64_t first, int bidirectional, int64_t n,          \
                                        const int64_t *thresholds, ptrdiff_t n_thresholds,    \
                                        T *line, ptrdiff_t begin, ptrdiff_t end)              \
    {                                                                                         \
        for (ptrdiff_t k = begin; k < end; k++)                                               \
            line[k] = (T)fastpe_t5_one(first + k, bidirectional, n, thresholds, n_thresholds); \
    }                                                                                         \
    /* rows [row_begin, row_end) of out (q_len x k_len): out[i, j] = line[j - i + q_len - 1] */ \
    static void fastpe_t5_fill_##SUFFIX(const T *line, T *out, ptrdiff_t q_len, ptrdiff_t k_len, \
                                        ptrdiff_t row_begin, ptrdiff_t row_end)               \
    {                                                                                         \
        for (ptrdiff_t i = row_begin; i < row_end; i++) {                                     \
            const T *src = line + (q_len - 1 - i);                                            \
            T *row = out + i * k_len;                                                         \
            for (ptrdiff_t j = 0; j < k_len; j++)                                             \
                row[j] = src[j];                                                              \
        }                                                                                     \
    }

FASTPE_T5(i32, int32_t)
FASTPE_T5(i64, int64_t)

#endif /* FASTPE_BIAS_H */
