/* Loads and stores shared by the element-wise AVX2 kernels (lion_avx2.c,
 * adagrad_avx2.c; internal to src/optim). Include only from a file built
 * with -mavx2 -mfma -mf16c (meson.build's AVX2 library): the functions are
 * inlined into it and use those instructions. The conversions are
 * base/dtype.h's, lane by lane (the same rounding and NaN rules as
 * adam_avx2.c's, which the Adam tests hold to base/dtype.h). */
#ifndef ZC_OPTIM_EW_AVX2_H
#define ZC_OPTIM_EW_AVX2_H

#include <immintrin.h>
#include <stdint.h>

#include "base/dtype.h"

#define ZC_EW_INLINE static inline __attribute__((always_inline))

/* Eight gradient values of dtype gdt at element i, widened exactly. */
ZC_EW_INLINE __m256 zc__ew8_load(const void *g, size_t i, zc_dtype gdt)
{
    if (gdt == ZC_DTYPE_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)g + i)));
    if (gdt == ZC_DTYPE_BF16) {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)g + i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    return _mm256_loadu_ps((const float *)g + i);
}

/* fp32 -> bf16 round to nearest even (add 0x7fff plus the lowest kept bit),
 * every NaN -> 0x7FC0, packed to eight 16-bit values. */
ZC_EW_INLINE __m128i zc__ew8_bf16(__m256 p)
{
    __m256i x = _mm256_castps_si256(p);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(x, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    r = _mm256_srli_epi32(r, 16);
    __m256 nan = _mm256_cmp_ps(p, p, _CMP_UNORD_Q);
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), _mm256_castps_si256(nan));
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

/* The copy of eight parameters at element i: odt < 0 none, else a zc_dtype. */
ZC_EW_INLINE void zc__ew8_store_copy(void *op, size_t i, __m256 p, int odt)
{
    if (odt == ZC_DTYPE_F32)
        _mm256_storeu_ps((float *)op + i, p);
    else if (odt == ZC_DTYPE_F16)
        _mm_storeu_si128((__m128i *)((uint16_t *)op + i),
                         _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT));
    else if (odt == ZC_DTYPE_BF16)
        _mm_storeu_si128((__m128i *)((uint16_t *)op + i), zc__ew8_bf16(p));
}

#endif
