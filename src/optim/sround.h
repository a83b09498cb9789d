/* Stochastic rounding of fp32 to bf16 with counter-based random bits
 * (internal to src/optim; the CUDA kernel computes the same function).
 *
 * A value x between two neighbouring bf16 values a < b is rounded to b with
 * probability (x - a) / (b - a) and to a otherwise, so the rounding is
 * unbiased: E[round(x)] = x. In bits: add 16 random bits to the low half of
 * x's fp32 pattern and keep the high half (sign and magnitude, so negative
 * values round away from zero with the same probability). An infinity stays
 * one (its low half is zero); a finite value above the largest bf16 may
 * round to infinity, with the probability its distance gives; every NaN
 * becomes 0x7FC0, as base/dtype.h's conversions do.
 *
 * The random bits are a function of a 32-bit key and the element's 32-bit
 * counter only - no state, no sequence - so an element rounds the same
 * whichever thread, ISA variant, shard or rank computes it:
 *
 *   draw(key, i) = mix32(i ^ key)
 *
 * with mix32 the "lowbias32" integer hash (C. Wellons: xor-shift-multiply,
 * two multiplications, a bijection of 32-bit words). An element takes two
 * draws, which cover its three tensors: the master rounds with the low 16
 * bits of draw 0, the first moment m with its high 16 bits, the second
 * moment v with draw 1 (zc__sr_element_bits). The two keys of a step are
 * derived once per call (zc__sr_key) from the run's seed, the optimizer
 * step, the draw and the high 32 bits of the element's global index, with
 * the splitmix64 finaliser, so keys of different steps and draws are
 * unrelated and a model of more than 2^32 elements needs no wider counter
 * inside the vector loops: a range that crosses a multiple of 2^32 is split
 * there by the caller (adam_lp_host.c). */
#ifndef ZC_OPTIM_SROUND_H
#define ZC_OPTIM_SROUND_H

#include <stdint.h>

#include "base/dtype.h"

/* The tensors of one element, and its two draws. */
enum { ZC_SR_MASTER = 0, ZC_SR_M = 1, ZC_SR_V = 2, ZC_SR__STREAMS = 3 };
enum { ZC_SR_DRAW_PM = 0, ZC_SR_DRAW_V = 1, ZC_SR__DRAWS = 2 };

static inline uint32_t zc__sr_mix32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

static inline uint64_t zc__sr_mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The key of draw `draw` (ZC_SR_DRAW_*) at optimizer step `step` for the
 * elements whose global index has high word `index_hi`. */
static inline uint32_t zc__sr_key(uint64_t seed, int64_t step, int draw, uint32_t index_hi)
{
    uint64_t z = zc__sr_mix64(seed);
    z = zc__sr_mix64(z ^ (uint64_t)step);
    z = zc__sr_mix64(z ^ ((uint64_t)index_hi << 8 | (uint64_t)(unsigned)draw));
    return (uint32_t)(z >> 32);
}

/* The 32 random bits of one draw for the element with counter (low index
 * word) i. */
static inline uint32_t zc__sr_bits(uint32_t key, uint32_t i) { return zc__sr_mix32(i ^ key); }

/* The element's random bits for each tensor (ZC_SR_MASTER, _M, _V; the
 * low 16 of each are used) from the two keys of its call. */
static inline void zc__sr_element_bits(const uint32_t key[ZC_SR__DRAWS], uint32_t i,
                                       uint32_t r[ZC_SR__STREAMS])
{
    const uint32_t a = zc__sr_bits(key[ZC_SR_DRAW_PM], i);
    r[ZC_SR_MASTER] = a;
    r[ZC_SR_M] = a >> 16;
    r[ZC_SR_V] = zc__sr_bits(key[ZC_SR_DRAW_V], i);
}

/* x rounded to bf16 with the random bits r (their low 16 are used). */
static inline uint16_t zc__sr_bf16(float x, uint32_t r)
{
    const uint32_t u = zc__f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0x7fc0;
    return (uint16_t)((u + (r & 0xffffu)) >> 16);
}

#endif
