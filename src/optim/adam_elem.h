/* One Adam/AdamW element update, written once (internal to src/optim).
 *
 * The scalar reference loops over it, and the SIMD variants use it for the
 * elements their vector loop does not cover (heads before an aligned address,
 * tails shorter than a vector). Every file that includes it is compiled with
 * -ffp-contract=off, and the SIMD variants evaluate the same operations in the
 * same order, so all variants agree with the reference bitwise (the
 * DeepSpeed arithmetic's fused operations are explicit: fmaf here, the
 * ISA's FMA there). */
#ifndef ZC_OPTIM_ADAM_ELEM_H
#define ZC_OPTIM_ADAM_ELEM_H

#include <math.h>

#include "base/dtype.h"
#include "optim/adam.h"

/* Updates element i of s. The weight-decay terms are applied only when their
 * coefficient is non-zero: the mode (Adam/AdamW) is encoded in which one is
 * set, and skipping a zero term keeps an inf parameter from turning into NaN
 * through 0 * inf. */
static inline void zc__adam_elem(const zc_adam_shard *s, const zc_adam_coeffs *c, size_t i)
{
    float p = s->master[i];
    float g = zc__load_f32(s->grad, s->grad_dtype, i) * s->grad_scale;
    if (c->l2_decay != 0.0f)
        g = g + c->l2_decay * p;
    float m = c->beta1 * s->m[i] + c->one_minus_beta1 * g;
    float v = c->beta2 * s->v[i] + c->one_minus_beta2 * g * g;
    float d = sqrtf(v) * c->bc2_rsqrt + c->eps;
    if (c->decoupled_decay != 0.0f)
        p = p - c->decoupled_decay * p;
    p = p - c->step_size * (m / d);
    s->m[i] = m;
    s->v[i] = v;
    s->master[i] = p;
    if (s->param_out)
        zc__store_f32(s->param_out, s->param_out_dtype, i, p);
}

/* The same element in DeepSpeedCPUAdam's arithmetic (ZC_ADAM_ARITH_DEEPSPEED,
 * adam.h): the operations and fused multiply-adds of its Step_AVX body
 * (csrc/includes/cpu_adam.h 188-205), in its order. fmaf rounds once
 * whatever the flags (a libm call where the ISA has no FMA). */
static inline void zc__adam_elem_ds(const zc_adam_shard *s, const zc_adam_coeffs *c, size_t i)
{
    float p = s->master[i];
    float g = zc__load_f32(s->grad, s->grad_dtype, i) * s->grad_scale;
    if (c->l2_decay != 0.0f)
        g = fmaf(p, c->l2_decay, g);
    float m = fmaf(g, c->one_minus_beta1, s->m[i] * c->beta1);
    float v = fmaf(g * g, c->one_minus_beta2, s->v[i] * c->beta2);
    float d = fmaf(sqrtf(v), c->bc2_rsqrt, c->eps);
    float u = m / d;
    if (c->decoupled_decay != 0.0f)
        p = fmaf(p, -c->decoupled_decay, p);
    p = fmaf(u, -c->step_size, p);
    s->m[i] = m;
    s->v[i] = v;
    s->master[i] = p;
    if (s->param_out)
        zc__store_f32(s->param_out, s->param_out_dtype, i, p);
}

/* Element i in the arithmetic the coefficients name (the SIMD variants'
 * heads and tails). */
static inline void zc__adam_elem_any(const zc_adam_shard *s, const zc_adam_coeffs *c, size_t i)
{
    if (c->arith == ZC_ADAM_ARITH_DEEPSPEED)
        zc__adam_elem_ds(s, c, i);
    else
        zc__adam_elem(s, c, i);
}

#endif
