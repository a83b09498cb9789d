/* Loads and stores shared by the element-wise AVX-512 kernels
 * (lion_avx512.c, adagrad_avx512.c; internal to src/optim). Include only
 * from a file built with -mavx512f -mavx512bw (meson.build's AVX-512
 * library). The conversions are base/dtype.h's, lane by lane (the same
 * rounding and NaN rules as adam_avx512.c's integer path). */
#ifndef ZC_OPTIM_EW_AVX512_H
#define ZC_OPTIM_EW_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#include "base/dtype.h"

#define ZC_EW_INLINE static inline __attribute__((always_inline))

/* Sixteen gradient values of dtype gdt at element i, widened exactly. */
ZC_EW_INLINE __m512 zc__ew16_load(const void *g, size_t i, zc_dtype gdt)
{
    if (gdt == ZC_DTYPE_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)g + i)));
    if (gdt == ZC_DTYPE_BF16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)g + i));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    return _mm512_loadu_ps((const float *)g + i);
}

/* fp32 -> bf16 round to nearest even, every NaN -> 0x7FC0. */
ZC_EW_INLINE __m256i zc__ew16_bf16(__m512 p)
{
    __m512i x = _mm512_castps_si512(p);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    r = _mm512_srli_epi32(r, 16);
    __mmask16 nan = _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7fc0));
    return _mm512_cvtepi32_epi16(r);
}

/* The copy of sixteen parameters at element i: odt < 0 none, else a zc_dtype. */
ZC_EW_INLINE void zc__ew16_store_copy(void *op, size_t i, __m512 p, int odt)
{
    if (odt == ZC_DTYPE_F32)
        _mm512_storeu_ps((float *)op + i, p);
    else if (odt == ZC_DTYPE_F16)
        _mm256_storeu_si256((__m256i *)((uint16_t *)op + i),
                            _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    else if (odt == ZC_DTYPE_BF16)
        _mm256_storeu_si256((__m256i *)((uint16_t *)op + i), zc__ew16_bf16(p));
}

#endif
