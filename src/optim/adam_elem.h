/* One Adam/AdamW element update, written once (internal to src/optim).
 *
 * The scalar reference loops over it, and the SIMD variants use it for the
 * elements their vector loop does not cover (heads before an aligned address,
 * tails shorter than a vector). Every file that includes it is compiled with
 * -ffp-contract=off, and the SIMD variants evaluate the same operations in the
 * same order, so all variants agree with the reference bitwise. */
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

#endif
