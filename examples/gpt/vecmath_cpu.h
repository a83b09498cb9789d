/* Elementwise math for the CPU layers, written so that the compiler turns
 * each loop over it into SIMD code (no calls, no branches, no errno).
 *
 * glibc's expf and tanhf are scalar calls: on the GELU of a 6-layer model
 * they took a fifth of the step. gpt_expf is the classic Cephes single-
 * precision exp (range reduction by ln 2 in two parts, a degree-6 minimax
 * polynomial, the power of two built in the exponent bits): within 2 ulp of
 * expf over [-87, 88], and clamped outside it, so it never returns inf or a
 * subnormal. Callers pass values the layers produce (finite); a NaN input
 * gives an unspecified finite value, which the engine's overflow check never
 * sees because it checks the gradients, where the NaN of the loss arrives
 * through the matmuls anyway.
 *
 * GPT_SIMD_CLONES compiles a function for AVX-512, AVX2 and plain x86-64
 * and picks one when the program starts (GCC's function multiversioning),
 * so one binary runs everywhere and uses the widest vectors the CPU has.
 * Every rank of a run picks the same version, so runs stay reproducible on
 * one machine. */
#ifndef GPT_VECMATH_CPU_H
#define GPT_VECMATH_CPU_H

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GPT_SIMD_CLONES \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define GPT_SIMD_CLONES
#endif

static inline float gpt_expf(float x)
{
    /* exp(x) = 2^n exp(r), n = round(x / ln 2), r = x - n ln 2. */
    x = x > -87.0f ? x : -87.0f;
    x = x < 88.0f ? x : 88.0f;
    const float shift = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float n = (x * 1.44269504088896341f + shift) - shift;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* tanh(u) = 1 - 2 / (exp(2u) + 1): exact limits +-1, absolute error within
 * a few 1e-8 (what GELU's 0.5 (1 + tanh) can resolve in fp32). */
static inline float gpt_tanhf(float u) { return 1.0f - 2.0f / (gpt_expf(2.0f * u) + 1.0f); }

#endif
