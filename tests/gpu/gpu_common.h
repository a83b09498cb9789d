/* Shared by the GPU suite: opening the CUDA device or skipping with the
 * reason (failing under ZC_REQUIRE_GPU=1, tests/require_gpu.h), and
 * comparing 16-bit values in units in the last place. */
#ifndef ZC_TESTS_GPU_COMMON_H
#define ZC_TESTS_GPU_COMMON_H

#include <criterion/criterion.h>
#include <stdint.h>

#include "device/device.h"
#include "require_gpu.h"

/* Opens CUDA device 0, or skips the test saying why there is none (fails it
 * under ZC_REQUIRE_GPU=1). */
#define g_open_or_skip(devp)                                                                   \
    do {                                                                                       \
        if (zc__device_open(ZC_DEVICE_CUDA, 0, (devp)) != ZC_OK)                               \
            gpu_unavailable("no CUDA device: %s", zc_last_error());                            \
    } while (0)

/* Distance between two fp16 or bf16 bit patterns on the monotonic integer
 * line (0 when equal; NaNs must match bitwise, else "far"). */
static inline uint32_t g_ulp16(uint16_t a, uint16_t b, int is_f16)
{
    uint16_t exp = is_f16 ? 0x7c00 : 0x7f80;
    int nan_a = (a & exp) == exp && (a & (uint16_t)~(exp | 0x8000u)) != 0;
    int nan_b = (b & exp) == exp && (b & (uint16_t)~(exp | 0x8000u)) != 0;
    if (nan_a || nan_b)
        return a == b ? 0 : UINT32_MAX;
    int32_t ia = (a & 0x8000) ? -(int32_t)(a & 0x7fff) : (int32_t)a;
    int32_t ib = (b & 0x8000) ? -(int32_t)(b & 0x7fff) : (int32_t)b;
    return (uint32_t)(ia > ib ? ia - ib : ib - ia);
}

#endif
