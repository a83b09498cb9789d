/* Conversions between fp32 (the math) and the engine's working dtype (what
 * zc_param_acquire hands out and zc_grad_buffer takes), rounding to nearest
 * even as the engine does. */
#ifndef GPT_PRECISION_H
#define GPT_PRECISION_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <zeroc/zeroc.h>

static inline float gpt_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t gpt_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fc0; /* NaN stays NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static inline float gpt_f16_to_f32(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v = e == 0 ? ldexpf((float)m, -24)
              : e == 31 ? (m ? NAN : INFINITY)
                        : ldexpf((float)(m | 0x400), e - 25);
    return (h & 0x8000) ? -v : v;
}

static inline uint16_t gpt_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to inf */
    if (a < 0x38800000u) {                                   /* subnormal: the FPU rounds */
        float v;
        memcpy(&v, &a, 4);
        v += 0.5f;
        uint32_t r;
        memcpy(&r, &v, 4);
        return (uint16_t)(sign | (r - 0x3f000000u));
    }
    a += 0xc8000fffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | (a >> 13));
}

static inline void gpt_load_f32(float *dst, const void *src, zc_dtype dt, size_t n)
{
    if (dt == ZC_DTYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    const uint16_t *h = src;
    for (size_t i = 0; i < n; i++)
        dst[i] = dt == ZC_DTYPE_BF16 ? gpt_bf16_to_f32(h[i]) : gpt_f16_to_f32(h[i]);
}

static inline void gpt_store_dtype(void *dst, zc_dtype dt, const float *src, size_t n)
{
    if (dt == ZC_DTYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    uint16_t *h = dst;
    for (size_t i = 0; i < n; i++)
        h[i] = dt == ZC_DTYPE_BF16 ? gpt_f32_to_bf16(src[i]) : gpt_f32_to_f16(src[i]);
}

#endif
