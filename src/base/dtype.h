/* Element conversions shared by every host kernel (internal).
 *
 * 16-bit conversions round to nearest even and are exact in the other
 * direction. NaN handling (must match the GPU kernels and the SIMD variants):
 *   fp32 -> bf16: every NaN becomes 0x7FC0 (torch's and DeepSpeed's rule);
 *   fp32 -> fp16: quiet NaN keeping sign and the top payload bits (what F16C's
 *                 vcvtps2ph does), so F16C code and this code agree bitwise.
 */
#ifndef ZC_BASE_DTYPE_H
#define ZC_BASE_DTYPE_H

#include <stdint.h>
#include <string.h>

#include "zeroc/zeroc.h"

static inline uint32_t zc__f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float zc__bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float zc__bf16_to_f32(uint16_t h) { return zc__bits_f32((uint32_t)h << 16); }

static inline uint16_t zc__f32_to_bf16(float f)
{
    uint32_t x = zc__f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return 0x7fc0;
    /* Round to nearest even: add 0x7fff plus the lowest kept bit. */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static inline float zc__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        float v = (float)mant * 0x1p-24f; /* zero or subnormal: exact */
        return zc__bits_f32(zc__f32_bits(v) | sign);
    }
    if (exp == 31)
        return zc__bits_f32(sign | 0x7f800000u | (mant << 13));
    return zc__bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

static inline uint16_t zc__f32_to_f16(float f)
{
    uint32_t x = zc__f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t a = x & 0x7fffffffu;
    if (a >= 0x7f800000u) { /* inf or NaN */
        if (a > 0x7f800000u)
            return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
        return (uint16_t)(sign | 0x7c00u);
    }
    if (a >= 0x477ff000u) /* >= 65520 rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* result is subnormal or zero: let the FPU round */
        float v = zc__bits_f32(a) + 0.5f; /* 0.5's ulp is the fp16 subnormal unit */
        return (uint16_t)(sign | (zc__f32_bits(v) - 0x3f000000u));
    }
    /* Rebias the exponent (127 -> 15) and round to nearest even on bit 13. */
    a += 0xc8000fffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | (a >> 13));
}

/* Loads element i of a buffer of dtype dt (F32, F16 or BF16) as fp32. */
static inline float zc__load_f32(const void *p, zc_dtype dt, size_t i)
{
    switch (dt) {
    case ZC_DTYPE_F16: return zc__f16_to_f32(((const uint16_t *)p)[i]);
    case ZC_DTYPE_BF16: return zc__bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* Stores v (rounded to nearest even) as element i of a buffer of dtype dt. */
static inline void zc__store_f32(void *p, zc_dtype dt, size_t i, float v)
{
    switch (dt) {
    case ZC_DTYPE_F16: ((uint16_t *)p)[i] = zc__f32_to_f16(v); break;
    case ZC_DTYPE_BF16: ((uint16_t *)p)[i] = zc__f32_to_bf16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

#endif
