/* One Adam element over 16-bit state, written once (internal to src/optim):
 * the scalar reference loops over it, the SIMD variants use it for their
 * heads and tails. Compiled with -ffp-contract=off everywhere; the
 * arithmetic is adam_elem.h's zc__adam_elem on the widened values. */
#ifndef ZC_OPTIM_ADAM_LP_ELEM_H
#define ZC_OPTIM_ADAM_LP_ELEM_H

#include <math.h>

#include "base/dtype.h"
#include "optim/adam.h"
#include "optim/sround.h"

/* The two draws' keys of a call (its range shares index0's high word). */
typedef struct zc_lp_keys {
    uint32_t k[ZC_SR__DRAWS];
} zc_lp_keys;

static inline zc_lp_keys zc__lp_keys(const zc_adam_lp_shard *s)
{
    zc_lp_keys k;
    for (int i = 0; i < ZC_SR__DRAWS; i++)
        k.k[i] = zc__sr_key(s->seed, s->step, i, (uint32_t)(s->index0 >> 32));
    return k;
}

static inline float zc__lp_load(const void *p, zc_dtype dt, size_t i)
{
    return dt == ZC_DTYPE_BF16 ? zc__bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* Stores x into element i of a state tensor (bf16: rounded with the
 * random bits r, or to nearest when !sr); returns the value stored. */
static inline float zc__lp_store(void *p, zc_dtype dt, size_t i, float x, bool sr, uint32_t r)
{
    if (dt != ZC_DTYPE_BF16) {
        ((float *)p)[i] = x;
        return x;
    }
    const uint16_t h = sr ? zc__sr_bf16(x, r) : zc__f32_to_bf16(x);
    ((uint16_t *)p)[i] = h;
    return zc__bf16_to_f32(h);
}

static inline void zc__adam_lp_elem(const zc_adam_lp_shard *s, const zc_adam_coeffs *c,
                                    const zc_lp_keys *k, size_t i)
{
    const uint32_t ctr = (uint32_t)(s->index0 + i);
    float p = zc__lp_load(s->master, s->master_dtype, i);
    float g = zc__load_f32(s->grad, s->grad_dtype, i) * s->grad_scale;
    if (c->l2_decay != 0.0f)
        g = g + c->l2_decay * p;
    float m = c->beta1 * zc__lp_load(s->m, s->m_dtype, i) + c->one_minus_beta1 * g;
    float v = c->beta2 * zc__lp_load(s->v, s->v_dtype, i) + c->one_minus_beta2 * g * g;
    float d = sqrtf(v) * c->bc2_rsqrt + c->eps;
    if (c->decoupled_decay != 0.0f)
        p = p - c->decoupled_decay * p;
    p = p - c->step_size * (m / d);
    uint32_t r[ZC_SR__STREAMS];
    zc__sr_element_bits(k->k, ctr, r);
    zc__lp_store(s->m, s->m_dtype, i, m, s->stochastic, r[ZC_SR_M]);
    zc__lp_store(s->v, s->v_dtype, i, v, s->stochastic, r[ZC_SR_V]);
    const float kept = zc__lp_store(s->master, s->master_dtype, i, p, s->stochastic,
                                    r[ZC_SR_MASTER]);
    if (s->param_out)
        zc__store_f32(s->param_out, s->param_out_dtype, i, kept);
}

#endif
