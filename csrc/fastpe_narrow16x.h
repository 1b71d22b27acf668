/*
 * fastpe_narrow16x.h -- float32 bit patterns narrowed to float16 / bfloat16 (round to nearest
 * even) with a flag on every float32 exactly halfway between two numbers of the target: the
 * same bits as fastpe_narrow16 (fastpe_kernels.h; the numba _to_f16 / _to_bf16), in fewer
 * instructions.  That kernel's vector copy spends ~40 instructions on 8 elements (the tie
 * found by converting twice and comparing the halves); here the tie is one shift:
 *
 *   A float32 |x| with biased exponent e drops `drop` significand bits on the way to float16:
 *   13 in float16's normal range (e >= 113), 126 - e below it (float16 subnormals, down to
 *   2**-25 at e = 102), and it is a tie when those bits read 100...0.  Shifting the significand
 *   (implicit bit included) left by 32 - drop = min(e - 94, 19) leaves exactly the dropped bits
 *   at the top, so the tie is `sig << s == 0x80000000`.  Below e = 102 no value is a tie: a
 *   shift of 0..6 brings a zero bit (bit 25 and up of a 24-bit significand) to the top, and a
 *   negative shift (e < 94) is a count above 31, which AVX2's and AVX-512's variable shifts
 *   turn into 0.  Above the float16 range only 65520 (0x477FF000, halfway to 2**16) is a tie;
 *   it is the largest float32 of its binade whose low 13 bits read 0x1000, so `a <= 0x477FF000`
 *   bounds the rule (and drops inf and NaN).  The rounding itself is F16C's / AVX-512's
 *   conversion (IEEE round to nearest even, as the integer steps), with a NaN made the integer
 *   steps' quiet NaN (sign kept, 0x7E00); bfloat16 is the integer steps in vector form.
 *
 * wide as in fastpe_kernels.h's entry points: 0 the baseline copy (fastpe_narrow16's), 2 the
 * AVX2 copy even where AVX-512 is, anything else the best this CPU has.  The last few elements
 * (fewer than 16) go to fastpe_narrow16.
 */
#ifndef FASTPE_NARROW16X_H
#define FASTPE_NARROW16X_H

#include <stddef.h>
#include <stdint.h>

#include "fastpe_kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(FASTPE_NO_DISPATCH)
#define FASTPE_N16X_X86 1
#include <immintrin.h>
#else
#define FASTPE_N16X_X86 0
#endif

#if FASTPE_N16X_X86

/* elements [begin, returned) of a whole number of 16-element steps */
__attribute__((target("avx2,f16c"))) static ptrdiff_t fastpe_narrow16x_avx2_(
    const uint32_t *FASTPE_RESTRICT bits, int bf16, uint16_t *FASTPE_RESTRICT out,
    uint8_t *FASTPE_RESTRICT ties, ptrdiff_t begin, ptrdiff_t end)
{
    const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
    const __m256i one8 = _mm256_set1_epi8(1);
    ptrdiff_t i = begin;
    if (!bf16) {
        const __m256i e_off = _mm256_set1_epi32(94), s_max = _mm256_set1_epi32(19);
        const __m256i sig_mask = _mm256_set1_epi32(0x7FFFFF), implicit = _mm256_set1_epi32(0x800000);
        const __m256i top = _mm256_set1_epi32((int)0x80000000u), last = _mm256_set1_epi32(0x477FF000);
        const __m256i mag16 = _mm256_set1_epi16(0x7FFF), inf16 = _mm256_set1_epi16(0x7C00);
        const __m256i sign16 = _mm256_set1_epi16((short)0x8000), qnan16 = _mm256_set1_epi16(0x7E00);
        for (; i + 16 <= end; i += 16) {
            const __m256i u0 = _mm256_loadu_si256((const __m256i *)(bits + i));
            const __m256i u1 = _mm256_loadu_si256((const __m256i *)(bits + i + 8));
            const __m128i h0 = _mm256_cvtps_ph(_mm256_castsi256_ps(u0), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            const __m128i h1 = _mm256_cvtps_ph(_mm256_castsi256_ps(u1), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(h0), h1, 1);
            const __m256i nan = _mm256_cmpgt_epi16(_mm256_and_si256(h, mag16), inf16);
            h = _mm256_blendv_epi8(h, _mm256_or_si256(_mm256_and_si256(h, sign16), qnan16), nan);
            _mm256_storeu_si256((__m256i *)(out + i), h);
            __m256i t[2];
            const __m256i u[2] = {u0, u1};
            for (int k = 0; k < 2; k++) {
                const __m256i a = _mm256_and_si256(u[k], abs_mask);
                const __m256i s = _mm256_min_epi32(_mm256_sub_epi32(_mm256_srli_epi32(a, 23), e_off), s_max);
                const __m256i sig = _mm256_or_si256(_mm256_and_si256(u[k], sig_mask), implicit);
                t[k] = _mm256_andnot_si256(_mm256_cmpgt_epi32(a, last),
                                           _mm256_cmpeq_epi32(_mm256_sllv_epi32(sig, s), top));
            }
            const __m256i t16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(t[0], t[1]), 0xD8);
            const __m128i t8 = _mm_packs_epi16(_mm256_castsi256_si128(t16), _mm256_extracti128_si256(t16, 1));
            _mm_storeu_si128((__m128i *)(ties + i), _mm_and_si128(t8, _mm256_castsi256_si128(one8)));
        }
    } else {
        const __m256i round = _mm256_set1_epi32(0x7FFF), one = _mm256_set1_epi32(1);
        const __m256i low = _mm256_set1_epi32(0xFFFF), half = _mm256_set1_epi32(0x8000);
        const __m256i quiet = _mm256_set1_epi32(0x40);
        for (; i + 16 <= end; i += 16) {
            __m256i h[2], t[2];
            for (int k = 0; k < 2; k++) {
                const __m256i u = _mm256_loadu_si256((const __m256i *)(bits + i + 8 * k));
                const __m256i a = _mm256_and_si256(u, abs_mask);
                const __m256i hi = _mm256_srli_epi32(u, 16);
                const __m256i r = _mm256_srli_epi32(
                    _mm256_add_epi32(_mm256_add_epi32(u, round), _mm256_and_si256(hi, one)), 16);
                const __m256i nan = _mm256_cmpgt_epi32(a, inf); /* a >= 0: signed compare holds */
                h[k] = _mm256_blendv_epi8(r, _mm256_or_si256(hi, quiet), nan);
                t[k] = _mm256_and_si256(_mm256_cmpeq_epi32(_mm256_and_si256(u, low), half),
                                        _mm256_cmpgt_epi32(inf, a));
            }
            /* packs of values below 2**16 (unsigned saturation of non-negative words) */
            _mm256_storeu_si256((__m256i *)(out + i),
                                _mm256_permute4x64_epi64(_mm256_packus_epi32(h[0], h[1]), 0xD8));
            const __m256i t16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(t[0], t[1]), 0xD8);
            const __m128i t8 = _mm_packs_epi16(_mm256_castsi256_si128(t16), _mm256_extracti128_si256(t16, 1));
            _mm_storeu_si128((__m128i *)(ties + i), _mm_and_si128(t8, _mm256_castsi256_si128(one8)));
        }
    }
    return i;
}

#define FASTPE_N16X_512_ATTR __attribute__((target("avx512f,avx512vl,avx512bw")))

FASTPE_N16X_512_ATTR static ptrdiff_t fastpe_narrow16x_avx512_(
    const uint32_t *FASTPE_RESTRICT bits, int bf16, uint16_t *FASTPE_RESTRICT out,
    uint8_t *FASTPE_RESTRICT ties, ptrdiff_t begin, ptrdiff_t end)
{
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
    const __m128i one8 = _mm_set1_epi8(1);
    ptrdiff_t i = begin;
    if (!bf16) {
        const __m512i e_off = _mm512_set1_epi32(94), s_max = _mm512_set1_epi32(19);
        const __m512i sig_mask = _mm512_set1_epi32(0x7FFFFF), implicit = _mm512_set1_epi32(0x800000);
        const __m512i top = _mm512_set1_epi32((int)0x80000000u), last = _mm512_set1_epi32(0x477FF000);
        const __m256i sign16 = _mm256_set1_epi16((short)0x8000), qnan16 = _mm256_set1_epi16(0x7E00);
        for (; i + 16 <= end; i += 16) {
            const __m512i u = _mm512_loadu_si512((const void *)(bits + i));
            const __m512i a = _mm512_and_si512(u, abs_mask);
            __m256i h = _mm512_cvtps_ph(_mm512_castsi512_ps(u), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            const __mmask16 nan = _mm512_cmpgt_epu32_mask(a, inf);
            h = _mm256_mask_mov_epi16(h, nan, _mm256_or_si256(_mm256_and_si256(h, sign16), qnan16));
            _mm256_storeu_si256((__m256i *)(out + i), h);
            const __m512i s = _mm512_min_epi32(_mm512_sub_epi32(_mm512_srli_epi32(a, 23), e_off), s_max);
            const __m512i sig = _mm512_or_si512(_mm512_and_si512(u, sig_mask), implicit);
            const __mmask16 t = _mm512_cmpeq_epi32_mask(_mm512_sllv_epi32(sig, s), top) &
                                _mm512_cmple_epu32_mask(a, last);
            _mm_storeu_si128((__m128i *)(ties + i), _mm_maskz_mov_epi8(t, one8));
        }
    } else {
        const __m512i round = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1);
        const __m512i low = _mm512_set1_epi32(0xFFFF), half = _mm512_set1_epi32(0x8000);
        const __m512i quiet = _mm512_set1_epi32(0x40);
        for (; i + 16 <= end; i += 16) {
            const __m512i u = _mm512_loadu_si512((const void *)(bits + i));
            const __m512i a = _mm512_and_si512(u, abs_mask);
            const __m512i hi = _mm512_srli_epi32(u, 16);
            __m512i h = _mm512_srli_epi32(
                _mm512_add_epi32(_mm512_add_epi32(u, round), _mm512_and_si512(hi, one)), 16);
            h = _mm512_mask_mov_epi32(h, _mm512_cmpgt_epu32_mask(a, inf), _mm512_or_si512(hi, quiet));
            _mm256_storeu_si256((__m256i *)(out + i), _mm512_cvtepi32_epi16(h));
            const __mmask16 t = _mm512_cmpeq_epi32_mask(_mm512_and_si512(u, low), half) &
                                _mm512_cmplt_epu32_mask(a, inf);
            _mm_storeu_si128((__m128i *)(ties + i), _mm_maskz_mov_epi8(t, one8));
        }
    }
    return i;
}

/* 2: AVX-512 (F, VL, BW), 1: AVX2 and F16C, 0: neither (the OS's saved state included:
 * libgcc / compiler-rt check it); looked up once */
static int fastpe_narrow16x_level_(void)
{
    static int level = -1;
    int got = __atomic_load_n(&level, __ATOMIC_RELAXED);
    if (got < 0) {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
            __builtin_cpu_supports("avx512bw"))
            got = 2;
        else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"))
            got = 1;
        else
            got = 0;
        __atomic_store_n(&level, got, __ATOMIC_RELAXED);
    }
    return got;
}
#endif

static void fastpe_narrow16x(const uint32_t *bits, int bf16, uint16_t *out, uint8_t *ties,
                             ptrdiff_t begin, ptrdiff_t end, int wide)
{
#if FASTPE_N16X_X86
    if (wide) {
        const int level = fastpe_narrow16x_level_();
        if (level == 2 && wide != 2)
            begin = fastpe_narrow16x_avx512_(bits, bf16, out, ties, begin, end);
        else if (level >= 1)
            begin = fastpe_narrow16x_avx2_(bits, bf16, out, ties, begin, end);
    }
#endif
    if (begin < end)
        fastpe_narrow16(bits, bf16, out, ties, begin, end, wide);
}

#endif
